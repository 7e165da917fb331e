"""The names of the in-cluster kinds' locks (Metal3 IPAddresses holding each IP or sub-prefix handed out):
one name per (kind, pool, address), never another pair's, valid for the API server; and the locks an earlier
version of this controller named ``<pool>-<ip>`` (``gip-…``, ``<pool>-<base>.<length>``, ``gpp-…``) keep
holding their IPs after an upgrade in place, with no IP ever unlocked."""

from __future__ import annotations

import copy
import ipaddress
import random

import netaddr
from hypothesis import given, settings
from hypothesis import strategies as st

from metal3_ipam.core import kinds
from metal3_ipam.core import objects as o
from metal3_ipam.core import poolkind as pools
from metal3_ipam.core.naming import (MAX_NAME_LENGTH, address_name, is_dns1123_subdomain, lock_name,
                                     lock_pool_part)
from metal3_ipam.poolkinds.incluster.ip_pools import lock_prefix
from metal3_ipam.memory import converge
from metal3_ipam.testing import go_incluster as gi
from ipam_objects import converged, get, user_delete

NS = "default"
# The kind of each lock tag: every kind registered says its own (``PoolKind.lock_tag``).
KINDS = {kind.lock_tag: kind.kind for kind in pools.REGISTRY.values() if kind.lock_tag is not None}
assert {"ip", "gip", "pp", "gpp", "netbox"} <= set(KINDS), KINDS
PREFIX_TAGS = ("pp", "gpp")

# Pool names made of what makes names meet: dashes, dots, hex digits, and now and then one of the longest.
_label = st.text(alphabet="a1f-", min_size=1, max_size=6).map(lambda s: f"a{s}1" if "-" in s else s)
pool_names = st.one_of(st.lists(_label, min_size=1, max_size=3).map(".".join),
                       st.integers(180, 253).map(lambda n: ("a-1." * 64)[:n - 1] + "z"))
ipv4 = st.integers(0, 2**32 - 1).map(lambda v: netaddr.IPAddress(v, 4))
ipv6 = st.lists(st.sampled_from([0, 0, 0, 1, 2, 0xfd00, 0xffff]), min_size=8, max_size=8).map(
    lambda groups: netaddr.IPAddress(sum(g << (112 - 16 * i) for i, g in enumerate(groups)), 6))
locks = st.one_of(
    st.tuples(st.sampled_from(("ip", "gip", "netbox")), pool_names, st.one_of(ipv4, ipv6), st.none()),
    st.tuples(st.sampled_from(PREFIX_TAGS), pool_names, ipv6, st.sampled_from([48, 56, 64, 128])))


def _name(tag, pool, ip, length):
    part, full_tag = lock_pool_part(KINDS[tag], pool, tag, length is not None)
    return lock_name(part, ip, length, full_tag)


def _legacy_names(tag, pool, ip, length):
    """The names an earlier version gave the lock, and the Metal3 name of a namePrefix ``pool`` at ``ip``."""
    old = address_name(lock_prefix(KINDS[tag], pool, {"gip": "gip", "gpp": "gpp"}.get(tag),
                                   room=len(".128") if length is not None else 0), ip)
    return {old if length is None else f"{old}.{length}", address_name(pool, ip)}


@settings(max_examples=400, deadline=None)
@given(st.lists(locks, min_size=2, max_size=8, unique=True))
def test_two_different_kinds_pools_or_addresses_never_give_one_lock_name(pairs):
    names = {}
    for pair in pairs:
        name = _name(*pair)
        assert is_dns1123_subdomain(name) and len(name) <= MAX_NAME_LENGTH, name
        assert names.setdefault(name, pair) == pair, f"{pair} and {names[name]} both give {name}"


@settings(max_examples=300, deadline=None)
@given(locks, locks)
def test_a_lock_name_is_never_one_an_earlier_version_or_metal3_gives_another_address(mine, theirs):
    """A lock left by an earlier version (adopted as it is) never holds the name of a new lock, nor does a
    Metal3 IPAddress ``<namePrefix>-<ip>`` (save the bare namePrefix Metal3 names the IPv6 ``::`` after)."""
    if int(theirs[2]) == 0:
        return
    assert _name(*mine) not in _legacy_names(*theirs)


def test_a_lock_name_reads_as_pool_address_and_kind():
    assert _name("ip", "pool-a", netaddr.IPAddress("10.0.0.5"), None) == "pool-a.10-0-0-5.ip"
    assert _name("gip", "g", netaddr.IPAddress("fd00::1"), None) == "g.fd00-0-0-0-0-0-0-1.gip"
    assert _name("pp", "pp", netaddr.IPAddress("fd00:0:0:100::"), 56) == "pp.fd00-0-0-100-0-0-0-0.56.pp"
    assert _name("pp", "a", netaddr.IPAddress("1:2::"), 64) != _name("pp", "a-1", netaddr.IPAddress("2::"), 64)


def test_a_pool_named_like_a_hashed_pool_part_never_takes_its_locks():
    long = "p" * 253
    part, tag = lock_pool_part(KINDS["ip"], long, "ip", False)
    assert tag == "iph" and len(part) < len(long)
    ip = netaddr.IPAddress("ffff:ffff:ffff:ffff:ffff:ffff:ffff:ffff")
    assert _name("ip", part, ip, None) != _name("ip", long, ip, None)
    for tag in pools.lock_tags():
        length = 128 if tag in PREFIX_TAGS else None
        assert len(_name(tag, long, ip, length)) <= MAX_NAME_LENGTH


# -- locks written by an earlier version, on an upgrade in place ---------------------------------------------

def _claim(name, pool, kind, ns=NS):
    return gi.claim(name, ns, kind, pool)


def _locks(api):
    return {(o.namespace(a), o.name(a)): o.spec(a)["address"] for a in api.inventory.of_kind(kinds.IPADDRESS)
            if not o.is_deleting(a)}


def _renamed_as_before(api):
    """Every lock renamed as an earlier version named it (the state an upgrade in place starts from)."""
    for lock in list(api.inventory.of_kind(kinds.IPADDRESS)):
        ref = o.spec(lock)["pool"]
        kind = (kinds.group_of(ref["apiVersion"]), ref["kind"])
        tag = {gi.GLOBAL_IN_CLUSTER_IP_POOL: "gip", gi.GLOBAL_IN_CLUSTER_PREFIX_POOL: "gpp"}.get(kind[1])
        length = o.spec(lock).get("prefix") if kind[1].endswith("PrefixPool") else None
        old = address_name(lock_prefix(kind, ref["name"], tag, room=len(".128") if length else 0),
                           o.spec(lock)["address"])
        renamed = copy.deepcopy(lock)
        renamed["metadata"]["name"] = f"{old}.{length}" if length else old
        api.inventory.remove(lock)
        api.load(renamed)


def _networks(api):
    return {o.name(a): str(ipaddress.ip_network(f"{o.spec(a)['address']}/"
                                                f"{o.spec(a)['prefix'] if 'Prefix' in o.spec(a)['poolRef']['kind'] else 128}"))
            for a in api.inventory.of_kind(kinds.CAPI_ADDRESS) if not o.is_deleting(a)}


def _ips(api):
    return {o.name(a): o.spec(a)["address"] for a in api.inventory.of_kind(kinds.CAPI_ADDRESS) if not o.is_deleting(a)}


def test_locks_named_by_an_earlier_version_keep_their_ips_and_are_adopted_as_they_are():
    """Claims served by an earlier version (its lock names), then the new version: nothing is rewritten,
    the old locks hold their IPs against new claims, and a released claim's old lock goes with it."""
    api = converged(gi.ip_pool("p", namespace=NS, addresses=["fd00::1-fd00::4"], prefix=64),
                    gi.ip_pool("g", addresses=["10.0.0.1-10.0.0.3"], prefix=24),
                    gi.prefix_pool("pp", namespace=NS, prefixes=["fd01::/62"]),
                    _claim("a", "p", gi.IN_CLUSTER_IP_POOL), _claim("b", "p", gi.IN_CLUSTER_IP_POOL),
                    _claim("ga", "g", gi.GLOBAL_IN_CLUSTER_IP_POOL), _claim("pa", "pp", gi.IN_CLUSTER_PREFIX_POOL))
    _renamed_as_before(api)
    before = _locks(api)
    assert ("default", "p-fd00--1") in before and ("default", "gip-g-10-0-0-1") in before
    assert ("default", "pp-fd01.64") in before
    converge(api, random.Random(0))
    assert _locks(api) == before
    for name in ("c", "d"):
        api.load(_claim(name, "p", gi.IN_CLUSTER_IP_POOL))
    api.load(_claim("gb", "g", gi.GLOBAL_IN_CLUSTER_IP_POOL, ns="other"))
    api.load(_claim("pb", "pp", gi.IN_CLUSTER_PREFIX_POOL))
    converge(api, random.Random(0))
    ips = _ips(api)
    assert {k: ips[k] for k in ("a", "b", "c", "d", "ga", "pa", "pb")} == {
        "a": "fd00::1", "b": "fd00::2", "c": "fd00::3", "d": "fd00::4", "ga": "10.0.0.1", "pa": "fd01::",
        "pb": "fd01:0:0:1::"}
    assert get(api, kinds.CAPI_ADDRESS, "gb", "other")["spec"]["address"] == "10.0.0.2"
    assert ("default", "p.fd00-0-0-0-0-0-0-3.ip") in _locks(api)
    user_delete(api, kinds.CAPI_CLAIM, "a")
    converge(api, random.Random(0))
    assert ("default", "p-fd00--1") not in _locks(api)
    api.load(_claim("e", "p", gi.IN_CLUSTER_IP_POOL))
    converge(api, random.Random(0))
    assert _ips(api)["e"] == "fd00::1" and _locks(api)[("default", "p.fd00-0-0-0-0-0-0-1.ip")] == "fd00::1"


def test_an_old_lock_whose_name_meets_another_pools_new_lock_holds_its_own_ip_only():
    """Pool ``a``'s sub-prefix 1:2::/64 locked by an earlier version as ``a-1-2.64``: pool ``a-1`` still
    hands out 2::/64 (the old lock's owner is read from its spec, not its name)."""
    api = converged(gi.prefix_pool("a", namespace=NS, prefixes=["1:2::/64"]),
                    _claim("c1", "a", gi.IN_CLUSTER_PREFIX_POOL))
    _renamed_as_before(api)
    assert set(_locks(api)) == {(NS, "a-1-2.64")}
    api.load(gi.prefix_pool("a-1", namespace=NS, prefixes=["2::/64"]))
    api.load(_claim("c2", "a-1", gi.IN_CLUSTER_PREFIX_POOL))
    api.load(_claim("c3", "a", gi.IN_CLUSTER_PREFIX_POOL))
    converge(api, random.Random(0))
    assert _networks(api) == {"c1": "1:2::/64", "c2": "2::/64"}
    ready = o.condition(get(api, kinds.CAPI_CLAIM, "c3")["status"], "Ready")
    assert ready["reason"] == "PoolExhausted"


# -- Metal3 IPPools whose <namePrefix>-<ip> names meet ---------------------------------------------------------

def _metal3_pools():
    """namePrefix ``a`` with 1:2::5 and namePrefix ``a-1`` with 2::5: no address shared, so admission lets both
    in, and both IPAddresses would be named ``a-1-2--5`` (the Metal3 name is fixed by the drop-in)."""
    from ipam_objects import ippool
    return (ippool("pa", namePrefix="a", pools=[{"start": "1:2::5", "end": "1:2::5"}], prefix=64),
            ippool("pb", namePrefix="a-1", pools=[{"start": "2::5", "end": "2::5"}], prefix=64))


def test_two_ippools_names_can_meet_though_admission_lets_only_pools_of_one_prefix_share_addresses():
    from metal3_ipam.core.validation import overlap_problems, validate
    pa, pb = _metal3_pools()
    assert not [p for p in validate(pb) if not p.warning] and not overlap_problems(pb, [pa])
    assert address_name("a", "1:2::5") == address_name("a-1", "2::5") == "a-1-2--5"


def _claimed(claim_b):
    from ipam_objects import ipclaim
    api = converged(*_metal3_pools(), ipclaim("ca", "pa"))
    assert get(api, kinds.IPADDRESS, "a-1-2--5")["spec"]["address"] == "1:2::5"
    api.load(claim_b)
    converge(api, random.Random(0))
    return api


def _collision(api, claim, kind=kinds.IPCLAIM):
    status = get(api, kind, claim)["status"]
    events = [e for e in api.events if e.reason == "IPAddressNameCollision" and e.target.name == claim]
    assert len(events) == 1 and events[0].type == "Warning", api.events
    ready = o.condition(status, "Ready")
    for text in (status.get("errorMessage") or ready["message"], events[0].message):
        assert "IPPool pa" in text and "a-1-2--5" in text and "1:2::5" in text and "2::5" in text, text
    assert (ready["status"], ready["reason"]) == ("False", "IPAddressNameCollision")


def test_a_claim_whose_only_ip_has_the_name_of_another_pools_address_is_told_so_once():
    from ipam_objects import ipclaim
    api = _claimed(ipclaim("cb", "pb"))
    _collision(api, "cb")
    converge(api, random.Random(0))
    assert len([e for e in api.events if e.reason == "IPAddressNameCollision"]) == 1


def test_a_cluster_api_claim_whose_only_ip_has_the_name_of_another_pools_address_is_told_so():
    from ipam_objects import capi_claim
    api = _claimed(capi_claim("cb", "pb"))
    _collision(api, "cb", kinds.CAPI_CLAIM)
    assert get(api, kinds.CAPI_ADDRESS, "cb") is None


def test_a_claim_asking_for_an_ip_whose_name_another_pools_address_has_is_told_so():
    from ipam_objects import ipclaim
    api = converged(*_metal3_pools(), ipclaim("ca", "pa"))
    pb = get(api, kinds.IPPOOL, "pb")
    api.inventory.upsert({**pb, "metadata": {**pb["metadata"], "generation": 2, "resourceVersion": api._next_version()},
                          "spec": {**pb["spec"], "pools": [{"start": "2::5", "end": "2::6"}]}})
    api.load(ipclaim("cb", "pb", ip="2::5"))
    api.load(ipclaim("cc", "pb"))
    converge(api, random.Random(0))
    _collision(api, "cb")
    assert get(api, kinds.IPADDRESS, "a-1-2--6")["spec"]["claim"]["name"] == "cc"


@settings(max_examples=30, deadline=None)
@given(st.lists(st.tuples(st.sampled_from(["create", "delete"]), st.sampled_from(["a", "a-1", "a-1-2"]),
                          st.integers(0, 3)), min_size=1, max_size=12))
def test_pools_whose_names_begin_alike_serve_every_claim_they_have_room_for(steps):
    """IPv6 IP pools ``a`` (1:2::1-3), ``a-1`` (2::1-3) and ``a-1-2`` (3::1-3): joined with dashes, the
    lock of one pool's IP was another's (``a`` + 1:2::1 and ``a-1`` + 2::1 give ``a-1-2--1``). Claims made
    and deleted in any order: each pool serves as many of its claims as it has addresses, none twice."""
    ranges = {"a": "1:2::1-1:2::3", "a-1": "2::1-2::3", "a-1-2": "3::1-3::3"}
    api = converged(*(gi.ip_pool(p, namespace=NS, addresses=[r], prefix=64) for p, r in ranges.items()))
    live = set()
    for action, pool, n in steps:
        name = f"{pool}-c{n}"
        if action == "create" and name not in live:
            api.load(_claim(name, pool, gi.IN_CLUSTER_IP_POOL))
            live.add(name)
        elif action == "delete" and name in live:
            user_delete(api, kinds.CAPI_CLAIM, name)
            live.discard(name)
        converge(api, random.Random(0))
    ips = _ips(api)
    for pool in ranges:
        mine = [c for c in live if c.rsplit("-c", 1)[0] == pool]
        served = [c for c in mine if c in ips]
        assert len(served) == min(len(mine), 3), (pool, mine, ips)
    assert len(set(ips.values())) == len(ips)
