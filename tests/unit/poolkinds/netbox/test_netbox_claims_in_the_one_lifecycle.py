"""Orders of events and inputs that try to break NetBoxIPPool claims in the one claim lifecycle (§10)."""

from __future__ import annotations

import random

import pytest
from hypothesis import HealthCheck, given, settings, strategies as st

from metal3_ipam.core import kinds
from metal3_ipam.core import objects as o
from metal3_ipam.core import validation
from metal3_ipam.core.asking import Asking, Op, Refused
from metal3_ipam.poolkinds.netbox.pool import KEY_ANNOTATION
from metal3_ipam.core.reconcile import reconcile
from ipam_objects import NS, capi_claim, get, ippool, ipclaim, set_meta, user_delete
from outside_world import POOL, World, claim, ready
from two_namespaces import NS2, TwoNamespaces


def key_of(world, name):
    return o.annotations(world.claim(name)).get(KEY_ANNOTATION)


def ip_of_claim(world, name):
    address = get(world.api, kinds.CAPI_ADDRESS, name)
    return o.spec(address)["address"] if address is not None else None


def test_a_second_claim_carrying_the_same_key_is_refused_and_its_deletion_releases_nothing_in_use():
    a = claim("a")
    a["metadata"]["annotations"] = {KEY_ANNOTATION: "k1"}
    world = World(a)
    world.settle()
    assert ip_of_claim(world, "a") == "10.0.0.2" and world.ipam.held == {"k1": "10.0.0.2"}
    # A copy of a's manifest (its key with it) applied as another claim.
    b = claim("b")
    b["metadata"]["annotations"] = {KEY_ANNOTATION: "k1"}
    world.api.load(b)
    world.settle()
    condition = ready(world.claim("b"))
    assert condition["status"] == "False" and "k1" in condition["message"] and "a" in condition["message"]
    user_delete(world.api, kinds.CAPI_CLAIM, "b")
    world.settle()
    assert world.claim("b") is None
    # a still holds 10.0.0.2, and so must NetBox for a's key.
    assert ip_of_claim(world, "a") == "10.0.0.2"
    assert world.ipam.held.get("k1") == "10.0.0.2", world.ipam.asked


def test_an_older_claim_given_a_bound_claims_key_by_hand_does_not_take_or_release_its_address():
    world = World(claim("old"))
    world.settle()  # old is served: k_old
    a = claim("a")
    a["metadata"]["annotations"] = {KEY_ANNOTATION: "k1"}
    a["metadata"]["creationTimestamp"] = "2030-01-01T00:00:00Z"
    world.api.load(a)
    world.settle()
    assert ip_of_claim(world, "a") == "10.0.0.3"
    # "old" (created first) is given a's key by hand.
    set_meta(world.api, kinds.CAPI_CLAIM, "old", annotations={KEY_ANNOTATION: "k1"})
    world.settle()
    user_delete(world.api, kinds.CAPI_CLAIM, "old")
    world.settle()
    assert world.claim("old") is None and ip_of_claim(world, "a") == "10.0.0.3"
    assert world.ipam.held.get("k1") == "10.0.0.3", world.ipam.asked
    # Once a is deleted too, its address is released.
    user_delete(world.api, kinds.CAPI_CLAIM, "a")
    world.settle()
    assert "k1" not in world.ipam.held


def test_the_second_carrier_of_a_key_is_served_once_the_first_is_gone():
    a = claim("a")
    a["metadata"]["annotations"] = {KEY_ANNOTATION: "k1"}
    world = World(a)
    world.settle()
    b = claim("b")
    b["metadata"]["annotations"] = {KEY_ANNOTATION: "k1"}
    world.api.load(b)
    world.settle()
    assert ready(world.claim("b"))["status"] == "False"
    user_delete(world.api, kinds.CAPI_CLAIM, "a")
    world.settle()
    assert world.claim("a") is None and ready(world.claim("b"))["status"] == "True"
    assert world.ipam.held == {"k1": ip_of_claim(world, "b")}


def test_an_ip_an_ippool_of_the_namespace_holds_is_not_bound_to_a_netbox_claim_too():
    world = World(ippool("pool1", pools=[{"start": "10.0.0.2", "end": "10.0.0.5"}], prefix=28), ipclaim("m"))
    world.api.apply(reconcile(world.api.inventory.snapshot((NS, "pool1"), world.api.now, random.Random(0))))
    metal3 = [a for a in world.api.inventory.of_kind(kinds.IPADDRESS) if (o.claim_of_address(a) or (None, None))[1] == "m"]
    assert [o.spec(a)["address"] for a in metal3] == ["10.0.0.2"]
    world.api.load(claim("a"))
    world.settle()  # NetBox knows nothing of the IPPool: it hands out 10.0.0.2
    assert world.ipam.held[key_of(world, "a")] == "10.0.0.2"
    assert ip_of_claim(world, "a") is None, "10.0.0.2 bound to IPClaim m and to IPAddressClaim a"
    condition = ready(world.claim("a"))
    assert condition["status"] == "False" and "10.0.0.2" in condition["message"]


def test_an_ippool_of_the_namespace_skips_an_ip_a_netbox_claim_holds():
    world = World(claim("a"))
    world.settle()
    assert ip_of_claim(world, "a") == "10.0.0.2"
    world.api.load(ippool("pool1", pools=[{"start": "10.0.0.2", "end": "10.0.0.5"}], prefix=28))
    world.api.load(ipclaim("m"))
    world.api.apply(reconcile(world.api.inventory.snapshot((NS, "pool1"), world.api.now, random.Random(0))))
    metal3 = [a for a in world.api.inventory.of_kind(kinds.IPADDRESS) if (o.claim_of_address(a) or (None, None))[1] == "m"]
    assert [o.spec(a)["address"] for a in metal3] == ["10.0.0.3"]


def _edited(world, name, annotations):
    old = world.claim(name)
    new = {**old, "metadata": {**old["metadata"], "annotations": annotations}}
    return old, new


@pytest.mark.parametrize("annotations", [{}, {KEY_ANNOTATION: "k2"}], ids=["removed", "replaced"])
def test_the_allocation_key_cannot_be_edited_or_removed_by_hand(annotations):
    world = World(claim("a"))
    world.settle()
    old, new = _edited(world, "a", annotations)
    problems = validation.validate_capi_claim_update(old, new)
    assert problems and KEY_ANNOTATION in problems[0].field and key_of(world, "a") in problems[0].message


def test_the_controller_may_write_the_first_key_and_an_invalid_key_may_be_mended():
    world = World(claim("a"))
    old = world.claim("a")
    world.pass_()
    assert validation.validate_capi_claim_update(old, world.claim("a")) == []
    bad = {**old, "metadata": {**old["metadata"], "annotations": {KEY_ANNOTATION: "Not A Key"}}}
    fixed = {**old, "metadata": {**old["metadata"], "annotations": {KEY_ANNOTATION: "k1"}}}
    assert [p.field for p in validation.validate_capi_claim_update(bad, fixed)] == []


def test_a_key_removed_by_hand_past_the_webhook_still_has_its_address_released():
    world = World(claim("a"))
    world.settle()
    key = key_of(world, "a")
    set_meta(world.api, kinds.CAPI_CLAIM, "a", annotations={KEY_ANNOTATION: None})
    world.settle()
    user_delete(world.api, kinds.CAPI_CLAIM, "a")
    world.settle()
    assert world.claim("a") is None
    assert key not in world.ipam.held, world.ipam.held


@pytest.mark.parametrize("restart", [False, True], ids=["same-process", "restarted"])
def test_an_allocation_left_out_when_its_claim_is_deleted_is_released_once_it_lands(restart):
    world = World(claim("a"))
    [lost] = world.first_asks()  # out, its answer never comes
    key = lost.key
    if restart:
        world.asking = Asking(deadline=30)  # the new process
    world.now += 5
    user_delete(world.api, kinds.CAPI_CLAIM, "a")
    world.pass_()
    world.answer_all()
    world.pass_()
    world.answer_all()
    world.ipam.run(lost)  # NetBox carries the lost request out now, 5 s after it was sent
    for _ in range(5):
        world.settle()
        world.now += 100
    assert world.claim("a") is None
    assert key not in world.ipam.held, world.ipam.held


def test_a_bound_claim_deleted_right_after_a_restart_is_released_at_once():
    world = World(claim("a"))
    world.settle()
    key = key_of(world, "a")
    world.asking = Asking(deadline=30)  # the new process
    user_delete(world.api, kinds.CAPI_CLAIM, "a")
    world.pass_()
    world.answer_all()
    world.pass_()
    assert world.claim("a") is None and key not in world.ipam.held  # no allocation was out: nothing to wait for


def test_the_server_of_a_pool_whose_addresses_are_in_use_cannot_change():
    from outside_world import netbox_pool
    old = netbox_pool()
    new = netbox_pool()
    new["spec"]["server"] = {**new["spec"]["server"], "url": "http://other-netbox.example"}
    in_use = {"a (Cluster API)": "10.0.0.2", "nb-10-0-0-2": "10.0.0.2"}
    problems = validation.validate_update(old, new, in_use)
    assert [p.field for p in problems] == ["spec.server.url"] and "http://netbox.example" in problems[0].message
    assert validation.validate_update(old, new, {}) == []  # nothing in use: the pool may point elsewhere
    moved = netbox_pool()
    moved["spec"]["gateway"] = "10.0.0.1"
    assert validation.validate_update(old, moved, in_use) == []  # other fields stay editable


def test_a_claim_copied_with_its_key_into_another_namespace_is_not_given_the_same_ip():
    a = claim("a")
    a["metadata"]["annotations"] = {KEY_ANNOTATION: "k1"}
    world = TwoNamespaces(a)
    world.settle()
    assert ip_of_claim(world, "a") == "10.0.0.2"
    copy = capi_claim("a", "nb", ns=NS2, api_group=POOL.kind[0], kind=POOL.kind[1], annotations={KEY_ANNOTATION: "k1"})
    world.api.load(copy)
    world.settle()
    copied = get(world.api, kinds.CAPI_ADDRESS, "a", ns=NS2)
    assert copied is None or o.spec(copied)["address"] != "10.0.0.2", "10.0.0.2 bound to a claim in each namespace"
    condition = ready(get(world.api, kinds.CAPI_CLAIM, "a", ns=NS2))
    assert condition["status"] == "False" and "k1" in condition["message"]
    # Deleting the copy releases nothing the first claim still uses.
    user_delete(world.api, kinds.CAPI_CLAIM, "a", ns=NS2)
    world.settle()
    assert get(world.api, kinds.CAPI_CLAIM, "a", ns=NS2) is None
    assert world.ipam.held == {"k1": "10.0.0.2"} and ip_of_claim(world, "a") == "10.0.0.2"


def test_a_release_netbox_refuses_is_shown_on_the_deleted_claim_not_only_in_a_log():
    world = World(claim("a"))
    world.settle()
    key = key_of(world, "a")
    user_delete(world.api, kinds.CAPI_CLAIM, "a")
    world.pass_()
    [ask] = world.out
    world.out = []
    assert ask.op is Op.RELEASE
    world.asking.file(Refused(key, ask.attempt, "TokenRefused", "NetBox refused the token of Secret ns/token"),
                      world.now)
    world.pass_()
    condition = ready(world.claim("a"))
    assert (condition["status"], condition["reason"]) == ("False", "TokenRefused")
    assert "Secret ns/token" in condition["message"]
    assert o.status(world.claim("a")).get("addressRef") == {"name": "a"}  # still held until NetBox lets it go
    world.now = world.asking.next_due()
    world.settle()
    assert world.claim("a") is None and key not in world.ipam.held


def test_a_claim_reusing_a_force_deleted_claims_name_takes_on_its_key_with_its_address():
    world = World(claim("a"))
    world.settle()
    k1 = key_of(world, "a")
    set_meta(world.api, kinds.CAPI_CLAIM, "a", finalizers=[])  # its finalizer taken off by hand: gone at once
    world.api.inventory.remove(world.claim("a"))
    new = claim("a")
    new["metadata"]["uid"] = "another-uid"
    world.api.load(new)  # before the garbage collector took its addresses
    world.settle()
    if ip_of_claim(world, "a") == "10.0.0.2":  # it holds what its predecessor left: then it carries that key
        assert key_of(world, "a") == k1
    user_delete(world.api, kinds.CAPI_CLAIM, "a")
    world.settle()
    assert world.claim("a") is None and world.ipam.held == {}, world.ipam.held


# -- property: restarts and copied keys among creates, deletes and answers late, twice or never ---------------

EVENTS = st.lists(st.one_of(
    st.tuples(st.just("create"), st.integers(0, 4)),
    st.tuples(st.just("copy"), st.integers(0, 4)),  # a new claim carrying the key of claim n
    st.tuples(st.just("delete"), st.integers(0, 4)),
    st.tuples(st.just("pass"), st.just(0)),
    st.tuples(st.just("answer"), st.integers(0, 2)),  # 0: now, 1: twice, 2: lost (carried out)
    st.tuples(st.just("restart"), st.just(0)),
    st.tuples(st.just("land"), st.just(0)),  # NetBox carries out an ask the process before a restart sent
    st.tuples(st.just("tick"), st.integers(1, 90)),
), max_size=30)


@settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(EVENTS, st.integers(0, 1000))
def test_restarts_and_copied_keys_leave_one_address_per_ip_and_nothing_behind(events, seed):
    world = World(seed=seed)
    copies = 0
    orphans: list = []  # (ask, the time its process died)
    for what, n in events:
        name = f"c{n}"
        if what == "create" and world.claim(name) is None:
            world.api.load(claim(name))
        elif what == "copy" and world.claim(name) is not None and key_of(world, name):
            copies += 1
            copy = claim(f"copy{copies}")
            copy["metadata"]["annotations"] = {KEY_ANNOTATION: key_of(world, name)}
            world.api.load(copy)
        elif what == "delete" and world.claim(name) is not None:
            user_delete(world.api, kinds.CAPI_CLAIM, name)
        elif what == "pass":
            world.pass_()
        elif what == "answer" and world.out:
            ask = world.out.pop(0)
            if n < 2:
                world.answer(ask, twice=n == 1)
            else:
                world.ipam.run(ask)
        elif what == "restart":
            world.asking = Asking(deadline=30)
            orphans += [(ask, world.now) for ask in world.out]  # never answered to the new process
            world.out = []
        elif what == "land" and orphans:
            ask, died = orphans.pop(0)
            if ask.op is Op.ALLOCATE and world.now < died + 100:  # within linger of the client giving up
                world.ipam.run(ask)
        elif what == "tick":
            world.now += n
    for _ in range(6):
        world.settle(rounds=40)
        world.now += 200
    world.settle(rounds=40)
    live = list(world.api.inventory.of_kind(kinds.CAPI_CLAIM))
    assert all(not o.is_deleting(c) for c in live), "a deleted claim kept its finalizer"
    bound = {}
    for c in live:
        address = get(world.api, kinds.CAPI_ADDRESS, o.name(c))
        if address is None:
            assert ready(c)["status"] == "False"
            continue
        ip = o.spec(address)["address"]
        assert ip not in bound, (ip, o.name(c), bound[ip])
        bound[ip] = o.name(c)
        assert world.ipam.held.get(key_of(world, o.name(c))) == ip
    carried = {o.annotations(c).get(KEY_ANNOTATION) for c in live}
    assert set(world.ipam.held) <= carried, (world.ipam.held, carried)


# -- the pool deleted while a claim waits for NetBox's answer --------------------------------------------

def _pool(world):
    from metal3_ipam.poolkinds.netbox.pool import NETBOX_IP_POOL
    return get(world.api, NETBOX_IP_POOL, "nb")


def _delete_pool(world):
    from metal3_ipam.poolkinds.netbox.pool import NETBOX_IP_POOL
    user_delete(world.api, NETBOX_IP_POOL, "nb")


def test_a_pool_deleted_while_a_claim_waits_goes_once_the_address_netbox_made_for_it_is_released():
    """The deleted pool names NetBox for the last time: the key of a claim holding no address is released
    there (the allocation out lands first, then its release goes), and only then does the pool go. A bound
    claim keeps its address and the pool with it until that claim is deleted."""
    world = World(claim("a"))
    world.settle()
    bound = key_of(world, "a")
    world.api.load(claim("b"))
    [ask] = world.first_asks()  # b's allocation is out, unanswered
    waiting = ask.key
    _delete_pool(world)
    world.pass_()
    assert _pool(world) is not None
    world.answer(ask)  # NetBox carried it out all the same
    world.settle()
    assert world.ipam.held == {bound: "10.0.0.2"}, world.ipam.asked
    assert _pool(world) is not None and ip_of_claim(world, "a") == "10.0.0.2"
    user_delete(world.api, kinds.CAPI_CLAIM, "a")
    world.settle()
    assert world.ipam.held == {} and world.claim("a") is None and _pool(world) is None
    # The waiting claim, whose pool is gone, is deleted with nothing left anywhere.
    user_delete(world.api, kinds.CAPI_CLAIM, "b")
    world.settle()
    assert world.claim("b") is None and world.ipam.held == {}


def test_a_pool_deleted_while_netbox_is_down_waits_for_the_release_of_its_waiting_claims_key():
    world = World(claim("a"))
    [ask] = world.first_asks()
    world.asking.file(Refused(ask.key, ask.attempt, "NetBoxUnreachable", "connection refused", server_down=True),
                      world.now)
    world.ipam.run(ask)  # the allocation NetBox carried out although its answer was lost
    _delete_pool(world)
    world.settle(answer=False)
    assert _pool(world) is not None and world.ipam.held == {ask.key: "10.0.0.2"}
    world.now = world.asking.next_due()
    world.settle()
    assert world.ipam.held == {} and _pool(world) is None
    assert world.claim("a") is not None  # the claim stays, its pool gone: deleted, it goes at once
    user_delete(world.api, kinds.CAPI_CLAIM, "a")
    world.settle()
    assert world.claim("a") is None and world.ipam.held == {}


def test_a_pool_whose_claims_left_addresses_for_another_cluster_keeps_its_finalizer_until_they_are_judged():
    """A kind whose sweep judges what a pool's claims left outside (``Asking.judges_pools``): the pool deleted with
    no claim left stays while no sweep judged it, and while the sweep says addresses wait for another cluster's
    answer; it goes once the sweep found none."""
    world = World()
    world.asking.judges_pools = True
    world.settle()
    pool = _pool(world)
    ref, uid = (o.namespace(pool), o.name(pool)), o.meta(pool).get("uid")
    _delete_pool(world)
    world.settle()
    assert _pool(world) is not None, "the pool went before any sweep judged what its claims left"
    world.asking.judged(ref, uid, "waits for 1 addresses its claims left for another cluster to answer")
    world.settle()
    assert _pool(world) is not None, "the pool went while an address its claim left waits for an answer"
    world.asking.judged(ref, uid, None)
    world.settle()
    assert _pool(world) is None
