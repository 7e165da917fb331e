"""An IPAddress written before its claim (a restore, an upgrade) that the controller's view does not show yet when
it serves the claim: the claim's own allocation runs into its name on the API server. The address the user wrote
is the claim's; it must not be deleted and replaced by one at another IP.

The lock made from that view holds an IP the claim was never bound to (its status names none, no IPAddress of the
claim shows it): it gives way to the written address, when the claim may take that address up at all. A lock the
claim's status names, or whose IP an IPAddress of the claim shows, decides as before."""

from __future__ import annotations

import copy

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from metal3_ipam.core import kinds
from metal3_ipam.core import objects as o
from metal3_ipam.core.actions import Create, Plan
from metal3_ipam.core.reconcile import reconcile
from metal3_ipam.memory import MemoryApi, converge
from metal3_ipam.testing import go_incluster as gi

from ipam_objects import CONFLICT, NS, assert_no_ip_twice, capi_address, capi_claim, get, loaded, ready

IN_CLUSTER = (gi.GROUP, gi.IN_CLUSTER_IP_POOL)
KEY = o.PoolKey(NS, "p", IN_CLUSTER)


def _pool() -> dict:
    return gi.ip_pool("p", namespace=NS, prefix=24, gateway="10.0.0.2", addresses=["10.0.0.1-10.0.0.254"])


def _claim(name: str = "test") -> dict:
    return capi_claim(name, pool="p", api_group=IN_CLUSTER[0], kind=IN_CLUSTER[1])


def _written(ip: str, name: str = "test", claim: str = "test") -> dict:
    return capi_address(name, claim, IN_CLUSTER, "p", ip)


def _pass(view: MemoryApi, world: MemoryApi) -> None:
    """One pass of a replica that sees ``view``; its writes are made on ``world`` (the API server)."""
    world.apply(reconcile(view.inventory.snapshot(KEY, view.now)))


def _locks_of(world: MemoryApi, claim: str) -> list[str]:
    return sorted(o.spec(a)["address"] for a in world.inventory.of_kind(kinds.IPADDRESS)
                  if (o.claim_of_address(a) or ())[:2] == (kinds.CAPI_CLAIM[1], claim) and not o.is_guard(a))


def _addresses_of(world: MemoryApi, claim: str) -> list[dict]:
    return [a for a in world.inventory.of_kind(kinds.CAPI_ADDRESS)
            if (o.spec(a).get("claimRef") or {}).get("name") == claim]


def _the_address_of(world: MemoryApi, claim: str) -> dict:
    """The claim's one IPAddress, which its status names and which its one lock locks."""
    addresses = _addresses_of(world, claim)
    assert len(addresses) == 1, addresses
    address = addresses[0]
    assert not o.is_deleting(address), address
    status = get(world, kinds.CAPI_CLAIM, claim).get("status") or {}
    assert (status.get("addressRef") or {}).get("name") == o.name(address), status
    assert ready(world, kinds.CAPI_CLAIM, claim)["message"] == f"bound to {o.spec(address)['address']}"
    assert _locks_of(world, claim) == [o.spec(address)["address"]]
    return address


def _converged_objects(*objs: dict) -> list[dict]:
    """The objects a pass over ``objs`` leaves, as a replica's view keeps them."""
    api = loaded(*objs)
    converge(api)
    return [copy.deepcopy(x) for kind in (kinds.CAPI_CLAIM, kinds.IPADDRESS, kinds.CAPI_ADDRESS, IN_CLUSTER)
            for x in api.inventory.of_kind(kind)]


def _stored(world: MemoryApi, written: dict) -> dict:
    found = get(world, kinds.CAPI_ADDRESS, o.name(written))
    assert found is not None
    return found


def _stored_claim(world: MemoryApi) -> dict:
    """The claim as the API server holds it (its uid and resourceVersion): what a replica's view of it shows."""
    return copy.deepcopy(get(world, kinds.CAPI_CLAIM, "test"))


def _until_first_lock(step):
    """The step as far as its first create of a lock (after the guards it writes first), included."""
    cut = copy.copy(step)
    cut.actions = []
    for action in step.actions:
        cut.actions.append(action)
        if isinstance(action, Create) and not o.is_guard(action.obj):
            break
    return cut


def test_an_address_written_before_its_claim_but_not_yet_seen_is_adopted_not_replaced():
    pool, claim, written = _pool(), _claim(), _written("10.0.0.9")
    behind = loaded(pool, claim)          # the controller's view: the address not seen yet
    world = loaded(pool, claim, written)  # the API server
    world.apply(reconcile(behind.inventory.snapshot(KEY, behind.now)))  # its create of "test" is refused: exists
    converge(world)
    address = get(world, kinds.CAPI_ADDRESS, "test")
    assert address is not None and not o.is_deleting(address) and address["spec"]["address"] == "10.0.0.9", address
    status = get(world, kinds.CAPI_CLAIM, "test").get("status") or {}
    assert (status.get("addressRef") or {}).get("name") == "test", status


def test_a_global_pools_lock_made_without_seeing_the_address_gives_way_to_it():
    """The same for a global pool, whose locks are in a namespace of their own: the lock goes with the guard it
    wrote in the claim's namespace, and the address is taken up with the guard of its own IP."""
    pool = gi.ip_pool("g", prefix=24, addresses=["10.0.0.1-10.0.0.254"])
    claim = gi.claim("test", NS, gi.GLOBAL_IN_CLUSTER_IP_POOL, "g")
    written = capi_address("test", "test", (gi.GROUP, gi.GLOBAL_IN_CLUSTER_IP_POOL), "g", "10.0.0.9")
    behind, world = loaded(pool, claim), loaded(pool, claim, written)
    for api in (behind, world):
        api.inventory.lock_namespace = "ipam-system"
    world.apply(reconcile(behind.inventory.snapshot(o.PoolKey("", "g", (gi.GROUP, gi.GLOBAL_IN_CLUSTER_IP_POOL)),
                                                    behind.now)))
    assert [o.spec(a)["address"] for a in world.inventory.of_kind(kinds.IPADDRESS) if not o.is_guard(a)] \
        == ["10.0.0.1"]
    converge(world)
    address = _the_address_of(world, "test")
    assert o.meta(address)["uid"] == o.meta(_stored(world, written))["uid"] and o.spec(address) == written["spec"]
    assert {o.namespace(a) for a in world.inventory.of_kind(kinds.IPADDRESS) if not o.is_guard(a)} == {"ipam-system"}
    # 10.0.0.1's went; 10.0.0.9's was written with its lock, as an allocation of 10.0.0.9 writes it
    assert [o.name(a) for a in world.inventory.of_kind(kinds.IPADDRESS) if o.is_guard(a)] == ["10-0-0-9.nsip"]


def test_the_locks_two_replicas_made_without_seeing_the_address_both_give_way_to_it():
    """Each replica locked another IP for the claim (the second one's view still showed 10.0.0.1 held by a claim
    since deleted); both creates of the claim's IPAddress were refused. The written address is taken up as it is,
    and both locks go."""
    pool, claim, written = _pool(), _claim(), _written("10.0.0.9")
    world = loaded(pool, claim, written)
    _pass(loaded(pool, claim), world)
    other = _converged_objects(pool, _claim("gone"))
    _pass(loaded(*other, claim), world)
    assert _locks_of(world, "test") == ["10.0.0.1", "10.0.0.3"]
    converge(world)
    address = _the_address_of(world, "test")
    assert o.meta(address)["uid"] == o.meta(_stored(world, written))["uid"] and o.spec(address) == written["spec"]
    assert_no_ip_twice(world)


def test_a_lock_of_the_written_address_s_ip_made_before_the_others_went_is_kept():
    """A step that gave way stopped after the written address's lock was created (its controller stopped, or the
    address changed meanwhile): the claim holds two locks, its status names neither. The next pass binds the
    written address's."""
    pool, claim, written = _pool(), _claim(), _written("10.0.0.9")
    world = loaded(pool, claim, written)
    _pass(loaded(pool, claim), world)
    plan = reconcile(world.inventory.snapshot(KEY, world.now))
    world.apply(Plan(steps=[_until_first_lock(step) for step in plan.steps]))
    assert _locks_of(world, "test") == ["10.0.0.1", "10.0.0.9"]
    converge(world)
    assert o.spec(_the_address_of(world, "test"))["address"] == "10.0.0.9"


def test_an_address_written_after_the_claim_was_bound_is_a_stray_the_claim_keeps_its_ip():
    """Written under another name once the claim was bound to 10.0.0.1 (its status names it): the claim keeps
    its IP and its one IPAddress; the one written late goes."""
    world = loaded(_pool(), _claim())
    converge(world)
    world.load(_written("10.0.0.9", name="restored"))
    converge(world)
    address = _the_address_of(world, "test")
    assert o.name(address) == "test" and o.spec(address)["address"] == "10.0.0.1"


def test_an_address_written_once_the_claims_own_address_was_made_does_not_take_it_over():
    """Written under another name after the claim's IPAddress was made at its lock's IP, before its status named
    it (that write refused): the claim's own IPAddress decides, the one written late goes."""
    pool, claim = _pool(), _claim()
    world = loaded(pool, claim)
    plan = reconcile(world.inventory.snapshot(KEY, world.now))
    made = [a for step in plan.steps for a in step.actions if isinstance(a, Create)]
    assert kinds.kind_of(made[-1].obj) == kinds.CAPI_ADDRESS  # its lock, then its IPAddress; no status yet
    for action in made:
        world.do(action)
    world.load(_written("10.0.0.9", name="restored"))
    converge(world)
    address = _the_address_of(world, "test")
    assert o.name(address) == "test" and o.spec(address)["address"] == "10.0.0.1"


@pytest.mark.parametrize("ip", ["10.0.0.2", "192.168.9.9", "10.0.0.5"], ids=["gateway", "outside", "held"])
def test_an_address_the_claim_may_not_take_up_is_refused_when_seen_late_as_when_seen_first(ip):
    """At the pool's gateway, outside the pool, or at the IP another live claim holds: not taken up. The lock
    made without seeing it goes, and the claim is refused as it is when the address is seen first
    (``AddressConflict``, nothing held, the address left as written); the other claim keeps its IP."""
    pool, claim = _pool(), _claim()
    others = _converged_objects(pool, *[_claim(f"c{n}") for n in range(4)])  # 10.0.0.1, 10.0.0.3 - 10.0.0.5
    written = _written(ip)
    world = loaded(*others, written)
    world.load(claim)
    left = copy.deepcopy(_stored(world, written))
    _pass(loaded(*others, _stored_claim(world)), world)
    assert _locks_of(world, "test") == ["10.0.0.6"]
    converge(world)
    assert ready(world, kinds.CAPI_CLAIM, "test")["reason"] == CONFLICT
    assert not _locks_of(world, "test") and not o.finalizers(get(world, kinds.CAPI_CLAIM, "test"))
    assert _stored(world, written) == left
    assert o.spec(_the_address_of(world, "c3"))["address"] == "10.0.0.5"
    assert_no_ip_twice(world)


# -- whichever order it is seen in ---------------------------------------------------------------------------------

def _with_written(world: MemoryApi, written: dict, owner: str | None) -> MemoryApi:
    """``world`` given the address, then its claim; with ``owner`` "IPAddressClaim", the claim first and the
    address owned by it (a copy ``clusterctl move`` or a backup's restore made, its claim's finalizer-less)."""
    if owner != "IPAddressClaim":
        world.load(written)
        world.load(_claim())
        return world
    world.load(_claim())
    claim = get(world, kinds.CAPI_CLAIM, "test")
    written = copy.deepcopy(written)
    written["metadata"]["ownerReferences"] = [{"apiVersion": claim["apiVersion"], "kind": "IPAddressClaim",
                                               "name": "test", "uid": o.meta(claim)["uid"], "controller": True}]
    world.load(written)
    return world


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(ip=st.sampled_from(["10.0.0.9", "10.0.0.1", "10.0.0.3", "10.0.0.2", "10.0.0.7", "192.168.9.9"]),
       served=st.integers(0, 3), late_passes=st.integers(0, 3), replicas=st.integers(1, 2),
       owner=st.sampled_from([None, "Backup", "IPAddressClaim"]))
def test_an_address_written_before_its_claim_is_taken_up_whenever_it_is_seen(ip, served, late_passes, replicas,
                                                                              owner):
    """An address written before its claim, at an IP of the pool, its gateway, outside it, or held by one of
    ``served`` claims served before. A claim seen at once with it takes it up or is refused it; seen late (after
    ``late_passes`` passes of each of ``replicas`` replicas whose views lack it and what was written since),
    the claim ends as it does when the address is seen first: with it, which its status names, or refused it
    and holding nothing, the address left as written. No IP is ever bound twice."""
    pool = gi.ip_pool("p", namespace=NS, prefix=24, gateway="10.0.0.2", addresses=["10.0.0.1-10.0.0.10"],
                      excluded=["10.0.0.7"])
    others = _converged_objects(pool, *[_claim(f"c{n}") for n in range(served)])
    written = _written(ip)
    if owner == "Backup":  # an owner of its own, none a claim: still written before its claim
        written["metadata"]["ownerReferences"] = [{"apiVersion": "example.com/v1", "kind": "Backup", "name": "b",
                                                   "uid": "b-1"}]

    at_once = _with_written(loaded(*others), written, owner)
    converge(at_once)
    assert_no_ip_twice(at_once)
    refused = ready(at_once, kinds.CAPI_CLAIM, "test").get("reason") == CONFLICT
    if not refused:
        adopted = _the_address_of(at_once, "test")
        assert o.meta(adopted)["uid"] == o.meta(_stored(at_once, written))["uid"]

    late = _with_written(loaded(*others), written, owner)
    left = copy.deepcopy(_stored(late, written))
    uid = o.meta(left)["uid"]
    views = [loaded(*others, _stored_claim(late)) for _ in range(replicas)]
    for _ in range(late_passes):
        for view in views:
            _pass(view, late)
            assert_no_ip_twice(late)
    converge(late)
    assert_no_ip_twice(late)
    for n in range(served):
        assert o.spec(_the_address_of(late, f"c{n}")) == o.spec(_the_address_of(at_once, f"c{n}"))
    if not refused:
        address = _the_address_of(late, "test")
        assert o.meta(address)["uid"] == uid and o.spec(address) == written["spec"]
    else:
        assert ready(late, kinds.CAPI_CLAIM, "test").get("reason") == CONFLICT
        assert not _locks_of(late, "test")
        assert _stored(late, written) == left
