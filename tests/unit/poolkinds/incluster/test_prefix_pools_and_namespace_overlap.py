"""Inputs and orders of events that try to break SPEC §10 through the prefix pools (sub-prefixes as the
allocator's unit) and the namespace-wide uniqueness of the in-cluster IP pools: run through the real
reconcile to its fixed point in the in-memory store."""

from __future__ import annotations

import ipaddress
import random

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from metal3_ipam.core import kinds
from metal3_ipam.core import objects as o
from metal3_ipam.core import poolkind as pools
from metal3_ipam.poolkinds.incluster import prefix_spec as prefixes
from metal3_ipam.core.ledger import Ledger, compare
from metal3_ipam.core.reconcile import run_to_end
from metal3_ipam.memory import converge
from metal3_ipam.testing import go_incluster as gi
from ipam_objects import converged, get, loaded, user_delete
from prefix_pools import small_prefix_pools

NS = "default"
PREFIX = (gi.GROUP, gi.IN_CLUSTER_PREFIX_POOL)


def _claim(name, pool="pp", kind=gi.IN_CLUSTER_PREFIX_POOL, ns=NS):
    return gi.claim(name, ns, kind, pool)


def _networks(api, ns=NS):
    """Each Cluster API IPAddress of ``ns`` as (claim, network it stands for)."""
    found = []
    for address in api.inventory.of_kind(kinds.CAPI_ADDRESS):
        if o.namespace(address) != ns or o.is_deleting(address):
            continue
        spec = o.spec(address)
        # An IP pool's address holds one IP (its prefix is the subnet's); a prefix pool's, its sub-prefix.
        of_ip_pool = (spec.get("poolRef") or {}).get("kind", "").endswith("IPPool")
        length = 128 if of_ip_pool else spec.get("prefix", 128)
        found.append((o.name(address), ipaddress.ip_network(f"{spec['address']}/{length}")))
    return found


def _assert_disjoint(api, ns=NS):
    """SPEC §10.1 for sub-prefixes: no address (nor part of a sub-prefix) is bound to two live claims."""
    networks = _networks(api, ns)
    for i, (a, net_a) in enumerate(networks):
        for b, net_b in networks[i + 1:]:
            assert not net_a.overlaps(net_b), f"claims {a} ({net_a}) and {b} ({net_b}) overlap"


def _edited(api, kind, name, ns=NS, **spec):
    pool = get(api, kind, name, ns)
    meta = {**pool["metadata"], "generation": int(pool["metadata"].get("generation") or 1) + 1,
            "resourceVersion": api._next_version()}
    api.inventory.upsert({**pool, "metadata": meta, "spec": {**pool["spec"], **spec}})


# -- a sub-prefix held at another length than the pool hands out ----------------------------------------

def _length_edited_under_a_claim(prefix, before, after):
    """Claim ``a`` served at ``before`` bits, the pool's length edited to ``after``, then claim ``b``."""
    api = converged(gi.prefix_pool("pp", namespace=NS, prefixes=[prefix], allocation_prefix_length=before),
                    _claim("a"))
    _edited(api, PREFIX, "pp", allocationPrefixLength=after)
    api.load(_claim("b"))
    converge(api, random.Random(0))
    _assert_disjoint(api)
    return api


def test_a_pool_whose_allocation_length_is_edited_never_hands_out_a_sub_prefix_inside_one_in_use():
    """allocationPrefixLength is immutable only by the webhook: the CRD lets an edit through. A claim holds
    fd00::/56; after 56 -> 64 a new claim must not get fd00:0:0:1::/64, which lies inside it."""
    api = _length_edited_under_a_claim("fd00::/48", 56, 64)
    assert dict(_networks(api))["b"] == ipaddress.ip_network("fd00:0:0:100::/64")


def test_a_go_written_address_of_another_length_blocks_every_sub_prefix_it_covers():
    """State left by the Go provider (or written by hand) with a wider prefix than the pool's length: the
    provider's own first fit skips every sub-prefix it overlaps, and so must the replacement."""
    state = gi.GoInCluster()
    pool = gi.prefix_pool("pp", namespace=NS, prefixes=["fd00::/60"])
    state.add(pool)
    state.add(_claim("old"))
    state.serve(NS, "old")
    objects = state.objects()
    for obj in objects:
        if kinds.kind_of(obj) == kinds.CAPI_ADDRESS:
            obj["spec"]["prefix"] = 62  # fd00::/62: the first four /64s
    api = loaded(*objects, _claim("new"))
    converge(api, random.Random(0))
    _assert_disjoint(api)
    assert dict(_networks(api))["new"] == ipaddress.ip_network("fd00:0:0:4::/64")
    assert gi.find_free_prefix(pool["spec"], [("fd00::", 62)]) == ("fd00:0:0:4::", 64)


def test_a_wide_address_released_gives_its_sub_prefixes_back():
    api = _length_edited_under_a_claim("fd00::/62", 63, 64)
    assert dict(_networks(api))["b"] == ipaddress.ip_network("fd00:0:0:2::/64")
    user_delete(api, kinds.CAPI_CLAIM, "a")
    converge(api, random.Random(0))
    assert [c for c, _ in _networks(api)] == ["b"]
    api.load(_claim("c"))
    api.load(_claim("d"))
    converge(api, random.Random(0))
    _assert_disjoint(api)
    assert {str(n) for c, n in _networks(api) if c in ("c", "d")} == {"fd00::/64", "fd00:0:0:1::/64"}


def test_a_wide_address_of_a_huge_pool_is_skipped_without_a_walk():
    """::/0 cut into /128s, an address holding ::/1 (2^127 sub-prefixes): the next claim gets 8000:: at once."""
    api = _length_edited_under_a_claim("::/0", 1, 128)
    assert dict(_networks(api))["b"] == ipaddress.ip_network("8000::/128")


# -- prefix pools of one namespace -----------------------------------------------------------------------

def _created(obj: dict, at: str) -> dict:
    obj["metadata"]["creationTimestamp"] = at
    return obj


def test_two_overlapping_prefix_pools_of_a_namespace_never_hand_one_sub_prefix_to_two_claims():
    api = converged(gi.prefix_pool("p1", namespace=NS, prefixes=["fd00::/63"]),
                    gi.prefix_pool("p2", namespace=NS, prefixes=["fd00::/63"]),
                    _claim("a", "p1"), _claim("b", "p2"))
    _assert_disjoint(api)


def test_an_ip_pool_never_hands_out_an_address_inside_a_sub_prefix_of_an_earlier_pool():
    """The IP pool came later: it withholds every address of the earlier prefix pool's sub-prefixes."""
    api = converged(_created(gi.prefix_pool("x", namespace=NS, prefixes=["fd00::/64"]), "2024-01-01T00:00:00Z"),
                    _claim("p", "x"))
    api.load(_created(gi.ip_pool("y", namespace=NS, addresses=["fd00::-fd00::1"], prefix=64, allocate_reserved=True),
                      "2024-01-01T00:01:00Z"))
    api.load(_claim("i", "y", gi.IN_CLUSTER_IP_POOL))
    converge(api, random.Random(0))
    _assert_disjoint(api)
    assert not [c for c, _ in _networks(api) if c == "i"]


def test_a_prefix_pool_never_hands_out_a_sub_prefix_holding_an_address_of_an_earlier_pool():
    api = converged(_created(gi.ip_pool("y", namespace=NS, addresses=["fd00::5"], prefix=64), "2024-01-01T00:00:00Z"),
                    _claim("i", "y", gi.IN_CLUSTER_IP_POOL),
                    _created(gi.prefix_pool("x", namespace=NS, prefixes=["fd00::/63"]), "2024-01-01T00:01:00Z"),
                    _claim("p", "x"), _claim("q", "x"))
    _assert_disjoint(api)
    assert {c: str(n) for c, n in _networks(api) if c != "i"} == {"p": "fd00:0:0:1::/64"}


def test_an_earlier_ip_pool_edited_into_a_handed_out_sub_prefix_never_hands_out_inside_it():
    api = converged(_created(gi.ip_pool("y", namespace=NS, addresses=["fd01::1"], prefix=64), "2024-01-01T00:00:00Z"),
                    _created(gi.prefix_pool("x", namespace=NS, prefixes=["fd00::/64"]), "2024-01-01T00:01:00Z"),
                    _claim("p", "x"))
    _edited(api, (gi.GROUP, gi.IN_CLUSTER_IP_POOL), "y", addresses=["fd00::1"])
    api.load(_claim("i", "y", gi.IN_CLUSTER_IP_POOL))
    converge(api, random.Random(0))
    _assert_disjoint(api)


def test_an_earlier_prefix_pool_edited_over_a_handed_out_address_never_hands_out_the_sub_prefix_holding_it():
    """The other way round: the IP pool came later and handed out fd00::5; the earlier prefix pool, edited to
    reach over it, owns the overlap from then on, but the sub-prefix holding fd00::5 is not its to give."""
    api = converged(_created(gi.prefix_pool("x", namespace=NS, prefixes=["fd01::/64"]), "2024-01-01T00:00:00Z"),
                    _created(gi.ip_pool("y", namespace=NS, addresses=["fd00::5"], prefix=64), "2024-01-01T00:01:00Z"),
                    _claim("i", "y", gi.IN_CLUSTER_IP_POOL))
    _edited(api, PREFIX, "x", prefixes=["fd00::/63"])
    api.load(_claim("p", "x"))
    api.load(_claim("q", "x"))
    converge(api, random.Random(0))
    _assert_disjoint(api)
    assert {c: str(n) for c, n in _networks(api)} == {"i": "fd00::5/128", "p": "fd00:0:0:1::/64"}


def _address_at(n, pool, kind, ip, prefix):
    return {"apiVersion": kinds.METAL3_API_VERSION, "kind": "IPAddress",
            "metadata": {"name": f"x{n}", "namespace": NS, "uid": f"u{n}", "resourceVersion": str(n + 1)},
            "spec": {"address": str(ipaddress.IPv6Address(ip)), "prefix": prefix,
                     "pool": {"name": pool, "apiVersion": gi.POOL_API_VERSION, "kind": kind}}}


@settings(deadline=None, max_examples=150)
@given(st.lists(st.tuples(st.sampled_from(["a", "b"]), st.booleans(), st.integers(0, 63), st.sampled_from([58, 60, 62])),
                max_size=12), st.lists(st.integers(0, 11), max_size=4), st.integers(0, 63), st.sampled_from([58, 60, 64]))
def test_an_address_or_sub_prefix_of_another_pool_is_found_inside_or_around_any_span(held, gone, at, length):
    """The namespace's index of addresses and sub-prefixes, fed and emptied address by address, answers as a
    walk over every address would: does an address of another pool than ``a`` meet the span asked about?"""
    api = loaded()
    stored = []
    for n, (pool, wide, block, width) in enumerate(held):
        kind = gi.IN_CLUSTER_PREFIX_POOL if wide else gi.IN_CLUSTER_IP_POOL
        base = block << 64 >> (64 - width + 58) << (64 - width + 58) if wide else (block << 64) + 5
        stored.append(_address_at(n, pool, kind, base, width if wide else 64))
        api.inventory.upsert(stored[-1])
    for n in gone:
        if n < len(stored):
            api.inventory.remove(stored[n])
            stored[n] = None
    lo = at << 64 >> (128 - length) << (128 - length)
    hi = lo + (1 << (128 - length)) - 1

    def span(address):
        ip = int(ipaddress.IPv6Address(address["spec"]["address"]))
        if address["spec"]["pool"]["kind"] == gi.IN_CLUSTER_IP_POOL:
            return ip, ip
        bits = 128 - address["spec"]["prefix"]
        return ip >> bits << bits, (ip >> bits << bits) + (1 << bits) - 1

    theirs = [a for a in stored if a is not None and (a["spec"]["pool"]["name"], a["spec"]["pool"]["kind"])
              != ("a", gi.IN_CLUSTER_PREFIX_POOL)]
    want = any(span(a)[0] <= hi and lo <= span(a)[1] for a in theirs)
    mine = o.PoolKey(NS, "a", (gi.GROUP, gi.IN_CLUSTER_PREFIX_POOL))
    assert api.inventory.held_elsewhere(mine, NS, 6, lo, hi) == want


def test_lock_names_of_two_prefix_pools_of_a_namespace_never_meet():
    """Pool ``a`` handing out 1:2::/64 and pool ``a-1`` handing out 2::/64: joined with dashes both locks
    were ``a-1-2.64`` (the dash both separated and spelled the address), and the second claim was told its
    pool is exhausted while its only sub-prefix was free."""
    api = converged(gi.prefix_pool("a", namespace=NS, prefixes=["1:2::/64"]),
                    gi.prefix_pool("a-1", namespace=NS, prefixes=["2::/64"]),
                    _claim("c1", "a"), _claim("c2", "a-1"))
    assert {c: str(n) for c, n in _networks(api)} == {"c1": "1:2::/64", "c2": "2::/64"}


# -- admission -------------------------------------------------------------------------------------------

@pytest.mark.parametrize("spec", [
    {"prefixes": ["::ffff:0:0/96"], "allocationPrefixLength": 120},
    {"prefixes": ["fd00::/64"], "gateway": "::ffff:10.0.0.1"},
])
def test_an_ipv4_mapped_prefix_or_gateway_is_refused_naming_the_field(spec):
    """Its sub-prefixes' base addresses (and the gateway, written on every lock) are IPv4-mapped: the
    IPAddress CRD's isIP() refuses each lock, so no claim could ever be served. Refused at admission."""
    problems = [p for p in prefixes.validate_prefix_pool({"metadata": {"name": "pp"}, "spec": spec})
                if not p.warning]
    assert problems, spec
    assert problems[0].field in ("spec.prefixes[0]", "spec.gateway")
    assert "IPv4-mapped" in problems[0].message


def test_a_sub_prefix_based_at_an_ipv4_mapped_address_is_never_handed_out():
    """::fffe:0:0/95 cut into /96s: its second sub-prefix is ::ffff:0:0/96, whose lock the API server would
    refuse (isIP()); the pool holds one candidate, and a second claim is told it is exhausted."""
    api = converged(gi.prefix_pool("pp", namespace=NS, prefixes=["::fffe:0:0/95"], allocation_prefix_length=96),
                    _claim("a"), _claim("b"))
    assert [(c, str(n)) for c, n in _networks(api)] == [("a", "::fffe:0:0/96")]
    assert o.condition(get(api, kinds.CAPI_CLAIM, "b")["status"], "Ready")["reason"] == "PoolExhausted"
    assert get(api, PREFIX, "pp")["status"]["ipAddresses"]["total"] == 1
    ready = o.condition(get(api, kinds.CAPI_CLAIM, "a")["status"], "Ready")
    assert ready["status"] == "True"


BASE = int(ipaddress.IPv6Address("2001:db8::"))


@settings(deadline=None, max_examples=40, suppress_health_check=[HealthCheck.too_slow])
@given(small_prefix_pools(), st.data())
def test_with_a_wide_address_in_use_each_new_sub_prefix_is_the_go_providers_first_fit(case, data):
    """An address of the pool wider than its sub-prefixes (Go-written, or the length edited), then claims
    created and deleted (the wide one among them): each claim served gets the lowest sub-prefix the Go
    provider's first fit gives for the addresses in use, and no two overlap."""
    spec, _, length = case
    wide = data.draw(st.integers(120, length - 1))
    base = BASE + data.draw(st.integers(0, (1 << (wide - 120)) - 1)) * (1 << (128 - wide))
    state = gi.GoInCluster()
    state.add(gi.prefix_pool("pp", namespace=NS, prefixes=spec["prefixes"], allocation_prefix_length=length,
                             excluded=spec.get("excludedPrefixes"), gateway=spec.get("gateway")))
    state.add(_claim("w"))
    try:
        address = state.serve(NS, "w")
    except gi.Exhausted:
        return
    address["spec"].update(address=str(ipaddress.IPv6Address(base)), prefix=wide)
    state.claims[(NS, "w")]["status"] = gi.claim_status(address)
    api = loaded(*state.objects())
    converge(api, random.Random(0))
    live = {"w"}
    steps = data.draw(st.lists(st.tuples(st.sampled_from(["create", "delete"]), st.sampled_from(
        ["w", "c0", "c1", "c2", "c3", "c4"])), min_size=1, max_size=10))
    for action, name in steps:
        if action == "create" and name not in live:
            in_use = [(o.spec(a)["address"], o.spec(a)["prefix"]) for a in api.inventory.of_kind(kinds.CAPI_ADDRESS)
                      if not o.is_deleting(a)]
            try:
                expected = gi.find_free_prefix(spec, in_use)
            except gi.Exhausted:
                expected = None
            api.load(_claim(name))
            converge(api, random.Random(0))
            live.add(name)
            got = get(api, kinds.CAPI_ADDRESS, name)
            assert (None if got is None else (o.spec(got)["address"], o.spec(got)["prefix"])) == expected
        elif action == "delete" and name in live:
            user_delete(api, kinds.CAPI_CLAIM, name)
            converge(api, random.Random(0))
            live.discard(name)
        _assert_disjoint(api)


@settings(deadline=None, max_examples=60)
@given(st.lists(st.tuples(st.integers(0, 7), st.integers(60, 64)), min_size=1, max_size=8), st.data())
def test_a_ledger_kept_from_wide_addresses_coming_and_going_equals_one_loaded_afresh(held, data):
    """Addresses of a /61 pool of /64s at lengths 60..64, added and dropped one by one: the kept ledger's free
    sub-prefixes equal those of a ledger loaded from what is left (the audit's comparison)."""
    pool_obj = gi.prefix_pool("pp", namespace=NS, prefixes=["fd00::/61"])
    model, _ = pools.read(pool_obj)
    addresses = []
    for n, (block, length) in enumerate(held):
        base = (int(ipaddress.IPv6Address("fd00::")) + (block << 64)) >> (128 - length) << (128 - length)
        addresses.append({"apiVersion": kinds.METAL3_API_VERSION, "kind": "IPAddress",
                          "metadata": {"name": f"x{n}", "namespace": NS, "uid": f"u{n}", "resourceVersion": "1"},
                          "spec": {"address": str(ipaddress.IPv6Address(base)), "prefix": length,
                                   "pool": {"name": "pp", "kind": gi.IN_CLUSTER_PREFIX_POOL}}})
    kept = Ledger()
    kept.reset((), model, [], random.Random(0))
    live = []
    for address in addresses:
        kept.add(address)
        live.append(address)
        for gone in data.draw(st.lists(st.sampled_from(live), unique_by=id, max_size=2)):
            kept.drop(gone)
            live.remove(gone)
    fresh = Ledger()
    fresh.reset((), model, [], random.Random(0))
    for address in live:
        fresh.add(address)
    assert not run_to_end(compare(kept, fresh))
    assert kept.state(decisions=False)["free"] == fresh.state(decisions=False)["free"]


# -- a global pool beside the namespaced pools of the namespaces of its claims -----------------------------

def _ips(api, ns):
    return {o.name(a): o.spec(a)["address"] for a in api.inventory.of_kind(kinds.CAPI_ADDRESS)
            if o.namespace(a) == ns and not o.is_deleting(a)}


def test_a_later_global_pool_never_hands_a_namespaced_pools_ip_to_a_claim_of_its_namespace():
    """The namespaced pool came first and hands out 10.9.0.1-2; the global pool, later, gives the same
    IPs to claims of that namespace."""
    glob = _created(gi.ip_pool("g", addresses=["10.9.0.1-10.9.0.4"], prefix=24), "2024-01-01T00:01:00Z")
    local = _created(gi.ip_pool("n", namespace=NS, addresses=["10.9.0.1-10.9.0.2"], prefix=24), "2024-01-01T00:00:00Z")
    api = converged(local, _claim("n1", "n", gi.IN_CLUSTER_IP_POOL), _claim("n2", "n", gi.IN_CLUSTER_IP_POOL))
    api.load(glob)
    api.load(_claim("g1", "g", gi.GLOBAL_IN_CLUSTER_IP_POOL))
    api.load(_claim("g2", "g", gi.GLOBAL_IN_CLUSTER_IP_POOL))
    converge(api, random.Random(0))
    here = _ips(api, NS)
    assert len(set(here.values())) == len(here), here


def test_two_overlapping_global_pools_never_hand_one_ip_to_two_claims():
    api = converged(_created(gi.ip_pool("g1", addresses=["10.8.0.1-10.8.0.2"], prefix=24), "2024-01-01T00:00:00Z"),
                    _created(gi.ip_pool("g2", addresses=["10.8.0.2-10.8.0.3"], prefix=24), "2024-01-01T00:01:00Z"),
                    _claim("a", "g1", gi.GLOBAL_IN_CLUSTER_IP_POOL), _claim("b", "g1", gi.GLOBAL_IN_CLUSTER_IP_POOL),
                    _claim("c", "g2", gi.GLOBAL_IN_CLUSTER_IP_POOL, ns="other"),
                    _claim("d", "g2", gi.GLOBAL_IN_CLUSTER_IP_POOL, ns="other"))
    assert sorted([*_ips(api, NS).values(), *_ips(api, "other").values()]) == ["10.8.0.1", "10.8.0.2", "10.8.0.3"]
