"""A claim whose pool reference is moved away from the pool that served it keeps its IP (SPEC §10, invariant 1).

``spec.poolRef`` is immutable (the claim webhook refuses a change), but
without the webhook, or with it failing open, an edit gets through: to
another provider's kind of the group, to another API group, or to another
of our pools. Whatever runs on the claim still uses its IP. The pool that
gave it keeps serving it while its addresses name it: the IP is handed to
no other claim, its address objects and our finalizer stay, the claim says
what happened (a condition and one Warning Event), and deleting it releases
the address and lets it go.
"""

from __future__ import annotations

import random

import pytest

from metal3_ipam.core import kinds
from metal3_ipam.core import objects as o
from metal3_ipam.memory import converge
from metal3_ipam.testing import go_incluster as gi
from ipam_objects import NS, capi_claim, converged, get, ippool, user_delete
from pool_reference import IN_CLUSTER, IPPOOL, claim_of_kind, edit_pool_ref, ips_of, pool_of_kind, restarted_store
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

GLOBAL = (gi.GROUP, gi.GLOBAL_IN_CLUSTER_IP_POOL)
MOVED = "PoolReferenceChanged"


def _ready(claim: dict) -> dict:
    return o.condition(o.status(claim), "Ready") or {}


def _moved(claim: dict) -> dict | None:
    return o.condition(o.status(claim), MOVED)


def _finalizer(kind: tuple[str, str]) -> str:
    from metal3_ipam.core import poolkind as pools
    return pools.REGISTRY[kind].finalizers.claim[kinds.CAPI_CLAIM]


ELSEWHERE = {  # the pool reference a user writes: another provider's kind of the group, another group
    IN_CLUSTER: (gi.GROUP, "InfobloxIPPool"),
    GLOBAL: (gi.GROUP, "InfobloxIPPool"),
    IPPOOL: ("ipam.example.com", "IPPool"),
}
KINDS = [IN_CLUSTER, GLOBAL, IPPOOL]


@pytest.mark.parametrize("kind", KINDS, ids=lambda k: k[1])
def test_a_claim_moved_away_from_its_pool_keeps_its_ip_and_no_other_claim_is_given_it(kind):
    api = converged(pool_of_kind(kind), claim_of_kind(kind, "a"))
    assert ips_of(api, "a") == ["10.0.0.2", "10.0.0.2"]
    edit_pool_ref(api, "a", *ELSEWHERE[kind])
    converge(api, random.Random(0))
    for name in ("b", "c"):
        api.load(claim_of_kind(kind, name))
    converge(api, random.Random(0))

    assert ips_of(api, "a") == ["10.0.0.2", "10.0.0.2"]
    assert ips_of(api, "b") == ["10.0.0.3", "10.0.0.3"] and ips_of(api, "c") == []
    assert _ready(get(api, kinds.CAPI_CLAIM, "c"))["reason"] == "PoolExhausted"
    claim = get(api, kinds.CAPI_CLAIM, "a")
    assert _finalizer(kind) in o.finalizers(claim)
    assert _ready(claim)["status"] == "True" and _ready(claim)["message"] == "bound to 10.0.0.2"
    moved = _moved(claim)
    assert moved is not None and moved["status"] == "True" and moved["reason"] == MOVED, o.status(claim)
    where = "" if kind == GLOBAL else f"{NS}/"
    assert f"{kind[1]} {where}p" in moved["message"] and f"{ELSEWHERE[kind][1]}.{ELSEWHERE[kind][0]} p" \
        in moved["message"], moved["message"]
    events = [e for e in api.events if e.reason == MOVED]
    assert len(events) == 1 and events[0].type == "Warning" and events[0].target.name == "a", api.events
    assert events[0].message == moved["message"]


@pytest.mark.parametrize("kind", KINDS, ids=lambda k: k[1])
def test_deleting_a_claim_moved_away_from_its_pool_releases_its_ip_and_completes(kind):
    api = converged(pool_of_kind(kind), claim_of_kind(kind, "a"), claim_of_kind(kind, "b"))
    edit_pool_ref(api, "a", *ELSEWHERE[kind])
    converge(api, random.Random(0))
    api.load(claim_of_kind(kind, "c"))
    converge(api, random.Random(0))
    assert ips_of(api, "c") == []

    user_delete(api, kinds.CAPI_CLAIM, "a")
    converge(api, random.Random(0))
    assert get(api, kinds.CAPI_CLAIM, "a") is None and ips_of(api, "a") == []
    assert ips_of(api, "c") == ["10.0.0.2", "10.0.0.2"]  # the released IP, to the claim that waited for one


@pytest.mark.parametrize("kind", KINDS, ids=lambda k: k[1])
def test_a_claim_moved_back_to_its_pool_is_served_as_before_and_says_nothing_of_the_move(kind):
    api = converged(pool_of_kind(kind), claim_of_kind(kind, "a"))
    edit_pool_ref(api, "a", *ELSEWHERE[kind])
    converge(api, random.Random(0))
    assert _moved(get(api, kinds.CAPI_CLAIM, "a")) is not None
    edit_pool_ref(api, "a", *kind)
    converge(api, random.Random(0))
    claim = get(api, kinds.CAPI_CLAIM, "a")
    assert _moved(claim) is None and _ready(claim)["message"] == "bound to 10.0.0.2"
    assert ips_of(api, "a") == ["10.0.0.2", "10.0.0.2"]
    assert len([e for e in api.events if e.reason == MOVED]) == 1


def test_a_claim_moved_to_another_of_our_pools_stays_with_the_pool_that_served_it():
    other = gi.ip_pool("q", namespace=NS, prefix=24, addresses=["10.0.1.2-10.0.1.3"])
    api = converged(pool_of_kind(IN_CLUSTER), other, claim_of_kind(IN_CLUSTER, "a"))
    edit_pool_ref(api, "a", *IN_CLUSTER, pool="q")
    converge(api, random.Random(0))
    assert ips_of(api, "a") == ["10.0.0.2", "10.0.0.2"]  # nothing new from q
    moved = _moved(get(api, kinds.CAPI_CLAIM, "a"))
    assert moved is not None and f"InClusterIPPool {NS}/p" in moved["message"] \
        and "InClusterIPPool.ipam.cluster.x-k8s.io q" in moved["message"], moved
    user_delete(api, kinds.CAPI_CLAIM, "a")
    converge(api, random.Random(0))
    assert get(api, kinds.CAPI_CLAIM, "a") is None and ips_of(api, "a") == []


@pytest.mark.parametrize("addresses_first", [True, False], ids=["addresses-first", "claims-first"])
@pytest.mark.parametrize("kind", KINDS, ids=lambda k: k[1])
def test_a_controller_started_afresh_finds_the_pool_that_served_a_moved_claim(kind, addresses_first):
    api = converged(pool_of_kind(kind), claim_of_kind(kind, "a"))
    edit_pool_ref(api, "a", *ELSEWHERE[kind])
    converge(api, random.Random(0))
    api = restarted_store(api, addresses_first)
    for name in ("b", "c"):
        api.load(claim_of_kind(kind, name))
    converge(api, random.Random(0))
    assert ips_of(api, "a") == ["10.0.0.2", "10.0.0.2"] and ips_of(api, "b") == ["10.0.0.3", "10.0.0.3"]
    user_delete(api, kinds.CAPI_CLAIM, "a")
    converge(api, random.Random(0))
    assert get(api, kinds.CAPI_CLAIM, "a") is None and ips_of(api, "c") == ["10.0.0.2", "10.0.0.2"]


@pytest.mark.parametrize("kind", KINDS, ids=lambda k: k[1])
def test_a_moved_claim_whose_cluster_api_address_was_deleted_by_hand_keeps_its_ip(kind):
    """Its lock (named by its status's IP) still leads to the pool that served it, also after a restart."""
    api = converged(pool_of_kind(kind), claim_of_kind(kind, "a"))
    edit_pool_ref(api, "a", *ELSEWHERE[kind])
    converge(api, random.Random(0))
    api.inventory.remove(get(api, kinds.CAPI_ADDRESS, "a"))
    api = restarted_store(api, addresses_first=False)
    api.load(claim_of_kind(kind, "b"))
    api.load(claim_of_kind(kind, "c"))
    converge(api, random.Random(0))
    assert ips_of(api, "a") == ["10.0.0.2", "10.0.0.2"] and ips_of(api, "c") == []
    user_delete(api, kinds.CAPI_CLAIM, "a")
    converge(api, random.Random(0))
    assert get(api, kinds.CAPI_CLAIM, "a") is None and ips_of(api, "c") == ["10.0.0.2", "10.0.0.2"]


@pytest.mark.parametrize("edited_first", [True, False], ids=["edited-first", "deleted-first"])
def test_a_moved_claim_whose_address_objects_were_all_deleted_gets_its_ip_back_and_is_released_on_deletion(
        edited_first):
    """While the controller runs, the pool it was filed with keeps it (it carries that pool's finalizer)."""
    api = converged(pool_of_kind(IN_CLUSTER), claim_of_kind(IN_CLUSTER, "a"))
    if edited_first:
        edit_pool_ref(api, "a", *ELSEWHERE[IN_CLUSTER])
        converge(api, random.Random(0))
    _strip_addresses(api)
    if not edited_first:
        edit_pool_ref(api, "a", *ELSEWHERE[IN_CLUSTER])
    api.load(claim_of_kind(IN_CLUSTER, "b"))
    api.load(claim_of_kind(IN_CLUSTER, "c"))
    converge(api, random.Random(0))
    assert ips_of(api, "a") == ["10.0.0.2", "10.0.0.2"] and ips_of(api, "c") == []
    user_delete(api, kinds.CAPI_CLAIM, "a")
    converge(api, random.Random(0))
    assert get(api, kinds.CAPI_CLAIM, "a") is None and ips_of(api, "c") == ["10.0.0.2", "10.0.0.2"]


def test_an_ipclaim_whose_pool_reference_got_changed_keeps_its_ip():
    """The IPClaim CRD refuses any change of spec.pool (tests/data/invalid/ipclaim-pool-changed.yaml), so this
    is an edit past the API server's rules (a restore by hand): the pool that served the claim keeps it."""
    from ipam_objects import ipclaim
    api = converged(pool_of_kind(IPPOOL), ippool("q", namePrefix="q", pools=[{"start": "10.0.1.2", "end": "10.0.1.3"}]),
                    ipclaim("a", pool="p"))
    claim = get(api, kinds.IPCLAIM, "a")
    api.inventory.upsert({**claim, "spec": {"pool": {"name": "q"}},
                          "metadata": {**claim["metadata"], "resourceVersion": api._next_version()}})
    api.load(ipclaim("b", pool="p"))
    api.load(ipclaim("c", pool="p"))
    converge(api, random.Random(0))
    held = lambda name: sorted(str(o.spec(a)["address"]) for a in api.inventory.of_kind(kinds.IPADDRESS)  # noqa: E731
                               if o.claim_of_address(a) == ("IPClaim", name))
    assert held("a") == ["10.0.0.2"] and held("b") == ["10.0.0.3"] and held("c") == []
    moved = _moved(get(api, kinds.IPCLAIM, "a"))
    assert moved is not None and "spec.pool was changed to IPPool q, away from IPPool default/p" in moved["message"]
    user_delete(api, kinds.IPCLAIM, "a")
    converge(api, random.Random(0))
    assert get(api, kinds.IPCLAIM, "a") is None and held("c") == ["10.0.0.2"]


@pytest.mark.parametrize("kind", KINDS, ids=lambda k: k[1])
def test_a_pass_that_does_not_see_a_moved_claim_yet_is_refused_the_release_of_its_address(kind):
    """A view lagging behind the claim: the delete of its address is guarded by the claim as the store files it."""
    from metal3_ipam.core.reconcile import reconcile
    api = converged(pool_of_kind(kind), claim_of_kind(kind, "a"))
    edit_pool_ref(api, "a", *ELSEWHERE[kind])
    converge(api, random.Random(0))
    pool = o.PoolKey("" if kind == GLOBAL else NS, "p", kind)
    snap = api.inventory.snapshot(pool, api.now, random.Random(0))
    snap.claims = []  # the pass does not know the claim
    plan = reconcile(snap)
    assert any(a.__class__.__name__ == "Delete" for s in plan.steps for a in s.actions), plan
    refused = api.apply(plan)
    assert refused and all("is kept" in r for r in refused), refused
    assert ips_of(api, "a") == ["10.0.0.2", "10.0.0.2"]


# -- whatever order edits, deletions and new claims come in ----------------------------------------------------


REFERENCES = [IN_CLUSTER + ("p",), IN_CLUSTER + ("q",), (gi.GROUP, "InfobloxIPPool", "p"), ("ipam.example.com", "IPPool", "p")]
steps = st.lists(st.tuples(st.sampled_from(["claim", "edit", "delete", "strip", "restart"]), st.integers(0, 3),
                           st.sampled_from(REFERENCES), st.booleans()), max_size=14)


def _live_holders(api) -> dict[str, set[str]]:
    """IP -> the live claims whose address objects hold it."""
    held: dict[str, set[str]] = {}
    for claim in api.inventory.of_kind(kinds.CAPI_CLAIM):
        if not o.is_deleting(claim):
            for ip in set(ips_of(api, o.name(claim))):
                held.setdefault(ip, set()).add(o.name(claim))
    return held


@settings(deadline=None, max_examples=80, suppress_health_check=[HealthCheck.too_slow])
@given(steps)
def test_no_ip_is_held_for_two_live_claims_and_every_deleted_claim_goes_whatever_pool_references_become(ops):
    """Two pools p and q of a namespace, claims created, their references edited (to the other pool, another
    provider's kind, another group, or back), deleted, their address objects deleted by hand, the controller
    started afresh, with or without a pass in between: no IP is ever held for two live claims, and once every
    claim is deleted all of them go and no address is left."""
    other = gi.ip_pool("q", namespace=NS, prefix=24, addresses=["10.0.0.3-10.0.0.4"])  # overlaps p
    api = converged(pool_of_kind(IN_CLUSTER), other)
    for op, n, ref, settle in ops:
        name = f"c{n}"
        claim = get(api, kinds.CAPI_CLAIM, name)
        if op == "claim" and claim is None:
            api.load(capi_claim(name, pool=ref[2], api_group=ref[0], kind=ref[1]))
        elif op == "edit" and claim is not None:
            edit_pool_ref(api, name, *ref)
        elif op == "delete" and claim is not None and not o.is_deleting(claim):
            user_delete(api, kinds.CAPI_CLAIM, name)
        elif op == "restart":
            api = restarted_store(api, addresses_first=settle)
        elif op == "strip" and claim is not None:
            for obj in [*api.inventory.of_kind(kinds.CAPI_ADDRESS), *api.inventory.of_kind(kinds.IPADDRESS)]:
                named = o.claim_of_address(obj) if kinds.kind_of(obj) == kinds.IPADDRESS \
                    else o.claim_of_capi_address(obj)
                if named is not None and named[1] == name:
                    api.inventory.remove(obj)
        if settle:
            converge(api, random.Random(0))
            twice = {ip: names for ip, names in _live_holders(api).items() if len(names) > 1}
            assert not twice, twice
    converge(api, random.Random(0))
    twice = {ip: names for ip, names in _live_holders(api).items() if len(names) > 1}
    assert not twice, twice
    for claim in list(api.inventory.of_kind(kinds.CAPI_CLAIM)):
        if not o.is_deleting(claim):
            user_delete(api, kinds.CAPI_CLAIM, o.name(claim))
    converge(api, random.Random(0))
    left = [o.name(c) for c in api.inventory.of_kind(kinds.CAPI_CLAIM) if gi.CLAIM_FINALIZER in o.finalizers(c)]
    assert not left, f"claims held by our finalizer: {left}"
    assert not list(api.inventory.of_kind(kinds.CAPI_ADDRESS)) and not list(api.inventory.of_kind(kinds.IPADDRESS))


def test_a_netbox_claim_moved_away_keeps_its_netbox_address_until_it_is_deleted():
    """A kind whose addresses an outside IPAM hands out: the key the claim carries stays its own (no claim
    carrying it elsewhere), NetBox keeps the address for it, and it is released when the claim goes."""
    from metal3_ipam.poolkinds.netbox.pool import KEY_ANNOTATION
    from outside_world import World, claim as netbox_claim
    world = World(netbox_claim("a"))
    world.settle()
    key = o.annotations(world.claim("a"))[KEY_ANNOTATION]
    assert world.ipam.held == {key: "10.0.0.2"}
    edit_pool_ref(world.api, "a", gi.GROUP, "InfobloxIPPool", pool="nb")
    world.api.load(netbox_claim("b"))
    world.settle()
    assert world.ipam.held.get(key) == "10.0.0.2" and ips_of(world.api, "a") == ["10.0.0.2", "10.0.0.2"]
    claim = world.claim("a")
    assert _ready(claim)["status"] == "True" and _moved(claim) is not None, o.status(claim)
    assert "10.0.0.2" not in ips_of(world.api, "b")
    user_delete(world.api, kinds.CAPI_CLAIM, "a")
    world.settle()
    assert world.claim("a") is None and key not in world.ipam.held and ips_of(world.api, "a") == []


def _moved_and_stripped_then_restarted(kind):
    """A moved claim whose address objects were all deleted while no controller ran, seen by one started
    afresh: nothing of ours names it, its status and our finalizer are all that is left."""
    api = converged(pool_of_kind(kind), claim_of_kind(kind, "a"))
    edit_pool_ref(api, "a", *ELSEWHERE[kind])
    converge(api, random.Random(0))
    _strip_addresses(api)
    return restarted_store(api, addresses_first=False)


@pytest.mark.parametrize("kind", KINDS, ids=lambda k: k[1])
def test_deleting_a_moved_claim_with_nothing_left_of_its_address_never_hangs_on_our_finalizer(kind):
    api = _moved_and_stripped_then_restarted(kind)
    assert _finalizer(kind) in o.finalizers(get(api, kinds.CAPI_CLAIM, "a"))
    user_delete(api, kinds.CAPI_CLAIM, "a")
    converge(api, random.Random(0))
    assert get(api, kinds.CAPI_CLAIM, "a") is None


def test_a_claim_of_another_provider_carrying_a_finalizer_like_ours_keeps_it_when_deleted():
    """Only a claim this controller bound (its status says so) has a finalizer of ours taken off by a pool it
    does not name: another provider's claim is left to its provider."""
    api = converged(pool_of_kind(IN_CLUSTER))
    theirs = capi_claim("x", pool="p", api_group=gi.GROUP, kind="InfobloxIPPool")
    theirs["metadata"]["finalizers"] = [gi.CLAIM_FINALIZER]
    api.load(theirs)
    user_delete(api, kinds.CAPI_CLAIM, "x")
    converge(api, random.Random(0))
    assert o.finalizers(get(api, kinds.CAPI_CLAIM, "x")) == [gi.CLAIM_FINALIZER]


@pytest.mark.parametrize("kind", KINDS, ids=lambda k: k[1])
def test_a_moved_claim_with_nothing_left_of_its_address_after_a_restart_keeps_its_ip(kind):
    """Its PoolReferenceChanged condition names the pool that served it; that pool gives its IP back."""
    api = _moved_and_stripped_then_restarted(kind)
    for name in ("b", "c"):
        api.load(claim_of_kind(kind, name))
    converge(api, random.Random(0))
    assert ips_of(api, "a") == ["10.0.0.2", "10.0.0.2"] and ips_of(api, "b") == ["10.0.0.3", "10.0.0.3"]
    assert ips_of(api, "c") == []


@pytest.mark.parametrize("kind", KINDS, ids=lambda k: k[1])
def test_a_claim_moved_in_kind_alone_and_stripped_while_no_controller_ran_keeps_its_ip(kind):
    """No condition was written: the pool of the kind whose finalizer it carries, named as its reference
    names it, holds the IP its status names, so that pool is the one that served it."""
    api = converged(pool_of_kind(kind), claim_of_kind(kind, "a"))
    edit_pool_ref(api, "a", *ELSEWHERE[kind])
    _strip_addresses(api)
    api = restarted_store(api, addresses_first=False)
    api.load(claim_of_kind(kind, "b"))
    converge(api, random.Random(0))
    assert ips_of(api, "a") == ["10.0.0.2", "10.0.0.2"] and ips_of(api, "b") == ["10.0.0.3", "10.0.0.3"]


def test_a_claim_moved_to_another_name_and_stripped_while_no_controller_ran_keeps_its_ip():
    """Nothing of ours names it but its finalizer and its Ready condition ("bound to <ip>"): the IP is kept from
    every pool of the namespace while it lives, and comes free when it is deleted."""
    api = converged(pool_of_kind(IN_CLUSTER), claim_of_kind(IN_CLUSTER, "a"))
    edit_pool_ref(api, "a", gi.GROUP, "InfobloxIPPool", pool="elsewhere")
    _strip_addresses(api)
    api = restarted_store(api, addresses_first=False)
    api.load(claim_of_kind(IN_CLUSTER, "b"))
    converge(api, random.Random(0))
    assert ips_of(api, "b") == ["10.0.0.3", "10.0.0.3"]
    user_delete(api, kinds.CAPI_CLAIM, "a")
    converge(api, random.Random(0))
    api.load(claim_of_kind(IN_CLUSTER, "c"))
    converge(api, random.Random(0))
    assert ips_of(api, "c") == ["10.0.0.2", "10.0.0.2"]


def test_deleting_a_claim_moved_to_another_name_and_stripped_while_no_controller_ran_never_hangs():
    api = converged(pool_of_kind(IN_CLUSTER), claim_of_kind(IN_CLUSTER, "a"))
    edit_pool_ref(api, "a", gi.GROUP, "InfobloxIPPool", pool="elsewhere")
    _strip_addresses(api)
    api = restarted_store(api, addresses_first=False)
    user_delete(api, kinds.CAPI_CLAIM, "a")
    converge(api, random.Random(0))
    assert get(api, kinds.CAPI_CLAIM, "a") is None


def _strip_addresses(api) -> None:
    """Every address object (both APIs) gone past its finalizers: a cleanup by hand, a botched restore."""
    for address_kind in (kinds.CAPI_ADDRESS, kinds.IPADDRESS):
        for obj in list(api.inventory.of_kind(address_kind)):
            api.inventory.remove(obj)
