"""The sweep's marks of release and first-come homing, through the adapter (``NetBoxPools.sweep``) of two clusters
sharing one NetBox: an address no claim here carries is marked released (``swept=<time>``) and deleted only a
release grace later, so a claim of another cluster carrying its key (a move's target whose controller was down)
takes it back; an address two clusters' live claims carry is homed once, never back and forth, and each side's
claim is told (Warning Events); a restarted source still knows the claims NetBox says left it for a move."""

from __future__ import annotations

import asyncio
import dataclasses

import pytest
from hypothesis import example, given, settings
from hypothesis import strategies as st

from metal3_ipam.poolkinds.netbox.client import Allocation, NetBoxClient, NetBoxError
from metal3_ipam.poolkinds.netbox.asks import NetBoxPools
from metal3_ipam.core.actions import Event
from metal3_ipam.core.asking import Asking
from metal3_ipam.core.inventory import Inventory
from metal3_ipam.core import kinds
from metal3_ipam.core import objects as o
from metal3_ipam.poolkinds.netbox.source import Reason
from metal3_ipam.poolkinds.netbox.pool import KEY_ANNOTATION
from metal3_ipam.core.reconcile import ADDRESS_HOMED_ELSEWHERE
from metal3_ipam.poolkinds.netbox.sweep import (ABSENT, PRESENT, Found, Home, description, held_in, home_in, moved_from,
                                    settle, swept_at, taken_from, taken_over, with_held, with_swept)

from sweep_sides import (C1, SP, T1, TP, SharedNetBoxClient, SweepingAsks, keyed_claim, cluster_c1, SharedNetBox,
                         shared_netbox_pool)
from outside_world import World, ready
from outside_world import claim as outside_claim

EPOCH = 1_790_000_000.0  # the wall clock at the first sweep
GRACE = 3600.0  # --netbox-release-grace-seconds


class _Writer:
    """Records the Events a sweep writes."""

    def __init__(self):
        self.events: list[Event] = []

    async def execute(self, plan, pool_key) -> None:
        self.events.extend(a for s in plan.steps for a in s.actions if isinstance(a, Event))


class _Side:
    """One cluster's controller, sweeping every 300 s of an injected clock (and of the wall clock it writes)."""

    def __init__(self, netbox: SharedNetBox, *objs: dict):
        self.now = 0.0
        self.inventory = Inventory()
        for obj in objs:
            self.inventory.upsert(obj)
        self.writer = _Writer()
        self.pools = NetBoxPools(SweepingAsks(netbox), Asking(deadline=30), inventory=self.inventory,
                                 writer=self.writer, wake=lambda *a: None, sweep_seconds=300,
                                 release_grace_seconds=GRACE,
                                 clock=lambda: self.now, wall=lambda: EPOCH + self.now)

    def sweep(self, times: int = 1, every: float = 300) -> None:
        for _ in range(times):
            self.now += every
            asyncio.run(self.pools.sweep())

    def reasons(self) -> list[str]:
        return [e.reason for e in self.writer.events]


def homed_at_source() -> Found:
    return Found(3, "10.0.0.3/24", "k", description(Home("Cluster", C1), keyed_claim("m", "k", "ns")))


def test_a_source_started_first_after_both_controllers_were_down_marks_the_address_and_the_target_takes_it_back():
    """Both controllers down while the move deletes ``ns/m``; the source starts first, its Cluster unpaused for
    the retry: its sweep marks the address released (it stays in NetBox, the IP taken). The target's controller
    starts within the grace, its copy paused: it holds the address, the mark goes, its claim is told; the
    source never releases it. The retry finished (the target's Cluster unpaused), the target homes it there."""
    netbox = SharedNetBox(homed_at_source())
    source = _Side(netbox, cluster_c1(C1, False, "ns"), shared_netbox_pool(SP, "ns"))
    source.sweep(3)
    assert netbox.released == []
    marked = netbox.items[3].description
    assert swept_at(marked) is not None and home_in(marked) == Home("Cluster", C1), marked

    target = _Side(netbox, cluster_c1(T1, True, "t"), shared_netbox_pool(TP, "t"), keyed_claim("m", "k", "t"))
    target.sweep()
    held = netbox.items[3].description
    assert held_in(held) == Home("Cluster", T1) and swept_at(held) is None, held
    assert target.reasons() == ["NetBoxAddressTakenBack"]
    source.sweep(times=4, every=GRACE)
    assert netbox.released == [] and netbox.items[3].description == held

    target.inventory.upsert({**cluster_c1(T1, False, "t"), "metadata": {**cluster_c1(T1, False, "t")["metadata"],
                                                                      "resourceVersion": "2"}})
    target.sweep()
    homed = netbox.items[3].description
    assert home_in(homed) == Home("Cluster", T1) and taken_from(homed) == Home("Cluster", C1), homed
    assert held_in(homed) is None


def test_an_address_marked_released_is_deleted_once_the_grace_is_over_and_not_before():
    netbox = SharedNetBox(homed_at_source())
    source = _Side(netbox, cluster_c1(C1, False, "ns"), shared_netbox_pool(SP, "ns"))
    source.sweep(2)
    at = swept_at(netbox.items[3].description)
    assert at is not None and netbox.released == []
    while source.now + EPOCH - at < GRACE:
        assert netbox.released == []
        source.sweep()
    source.sweep(2)
    assert [item.id for item in netbox.released] == [3]


def test_a_claim_carrying_the_key_of_an_address_its_own_cluster_marked_released_takes_it_back():
    """The claim's manifest applied again with its key (restored by hand) before the grace is over."""
    netbox = SharedNetBox(homed_at_source())
    source = _Side(netbox, cluster_c1(C1, False, "ns"), shared_netbox_pool(SP, "ns"))
    source.sweep(2)
    assert swept_at(netbox.items[3].description) is not None
    source.inventory.upsert(keyed_claim("m", "k", "ns"))
    source.sweep(times=3, every=GRACE)
    assert netbox.released == []
    assert netbox.items[3].description == description(Home("Cluster", C1), keyed_claim("m", "k", "ns"))
    assert source.reasons() == ["NetBoxAddressTakenBack"]


def test_two_clusters_whose_live_claims_carry_one_key_home_it_once_and_both_claims_are_told():
    """A move restored from a directory while the source runs: both clusters' claims live, unpaused."""
    netbox = SharedNetBox(homed_at_source())
    source = _Side(netbox, cluster_c1(C1, False, "ns"), shared_netbox_pool(SP, "ns"), keyed_claim("m", "k", "ns"))
    target = _Side(netbox, cluster_c1(T1, False, "t"), shared_netbox_pool(TP, "t"), keyed_claim("m", "k", "t"))
    target.sweep()
    taken = netbox.items[3].description
    assert home_in(taken) == Home("Cluster", T1) and taken_from(taken) == Home("Cluster", C1), taken
    source.sweep()
    held = netbox.items[3].description  # the source's live claim holds it: neither release deletes it
    assert held == with_held(taken, Home("Cluster", C1), live=True), held
    for _ in range(5):
        source.sweep()
        target.sweep()
    assert netbox.items[3].description == held and netbox.released == []
    assert target.reasons() == ["NetBoxAddressTakenOver"]
    assert source.reasons() == ["NetBoxAddressHomedElsewhere"]  # once, not at every sweep
    [told] = source.writer.events
    assert f"Cluster:{T1}" in told.message and told.type == "Warning"
    assert f"Cluster:{T1}" in source.inventory.homed_elsewhere["k"]  # the claim's condition (core.reconcile)
    assert target.inventory.homed_elsewhere == {}


def _deleted(claim: dict) -> dict:
    return {**claim, "metadata": {**claim["metadata"], "deletionTimestamp": "2026-01-01T00:00:00Z",
                                  "finalizers": ["ipam.metal3.io"]}}


def test_a_copy_deleted_before_a_sweep_homed_its_address_leaves_it_to_the_live_claim_of_the_address_home():
    """A move restored from a directory while the source runs: the target's copy of ns/m, bound by its key, is
    deleted before any sweep of the target homed the address there. Its release does not delete the address the
    source's live claim is bound to: it takes it over marked released, and the source's next sweep takes it
    back (its claim told)."""
    netbox = SharedNetBox(homed_at_source())
    source = _Side(netbox, cluster_c1(C1, False, "ns"), shared_netbox_pool(SP, "ns"), keyed_claim("m", "k", "ns"))
    copy = _deleted(keyed_claim("m", "k", "t"))
    target = _Side(netbox, cluster_c1(T1, False, "t"), shared_netbox_pool(TP, "t"), copy)
    asyncio.run(SharedNetBoxClient(netbox).release("k", target.pools._left_on_release))
    assert netbox.released == [], "released the address the source's live claim ns/m is bound to"
    left = netbox.items[3].description
    assert home_in(left) == Home("Cluster", T1) and taken_from(left) == Home("Cluster", C1), left
    assert swept_at(left) == EPOCH, left

    target.inventory.remove(copy)
    source.sweep()
    assert netbox.items[3].description == description(Home("Cluster", C1), keyed_claim("m", "k", "ns")) \
        .replace(" claim", f" moved-from=Cluster:{T1} claim")  # given back: the copy's release let it go
    assert source.reasons() == ["NetBoxAddressTakenBack"]
    target.sweep(times=4, every=GRACE)
    source.sweep(times=4, every=GRACE)
    assert netbox.released == [] and home_in(netbox.items[3].description) == Home("Cluster", C1)


def test_a_copy_deleted_before_a_sweep_homed_its_address_at_a_cluster_gone_has_it_released_after_the_grace():
    """A move finished while the source's controller was down (the source's Cluster gone): the moved claim,
    deleted before a sweep of the target homed the address, leaves it marked released; nothing carries the key,
    and the target's sweeps release it once the release grace is over, not before."""
    netbox = SharedNetBox(homed_at_source())
    claim = _deleted(keyed_claim("m", "k", "t"))
    target = _Side(netbox, cluster_c1(T1, False, "t"), shared_netbox_pool(TP, "t"), claim)
    asyncio.run(SharedNetBoxClient(netbox).release("k", target.pools._left_on_release))
    target.inventory.remove(claim)
    assert netbox.released == [] and swept_at(netbox.items[3].description) == EPOCH
    while target.now < GRACE - 300:
        target.sweep()
        assert netbox.released == []
    target.sweep(times=2)
    assert [item.id for item in netbox.released] == [3]


def test_a_restarted_source_still_refuses_a_copy_of_the_key_of_a_claim_netbox_says_left_it_for_a_move():
    moved = Found(3, "10.0.0.3/24", "k", f"metal3-ipam moved-from=Cluster:{C1} claim ns/m")
    elsewhere = Found(4, "10.0.0.4/24", "k2", f"metal3-ipam moved-from=Cluster:{T1} claim t/x")
    source = _Side(SharedNetBox(moved, elsewhere), cluster_c1(C1, False, "ns"), shared_netbox_pool(SP, "ns"))
    assert dict(source.inventory.moved_away) == {}
    source.sweep()
    assert dict(source.inventory.moved_away) == {"k": ("ns", "m")}  # not k2: it left another cluster


def test_a_mark_of_release_keeps_the_home_whole_and_the_description_within_netboxs_limit():
    long = keyed_claim("m" * 253, "k", "n" * 63)
    text = with_swept(description(Home("Cluster", C1), long), EPOCH)
    assert len(text) <= 200 and swept_at(text) == EPOCH and home_in(text) == Home("Cluster", C1)
    assert text.startswith(f"metal3-ipam home=Cluster:{C1} swept=")
    bare = with_swept(text, None)
    assert swept_at(bare) is None and home_in(bare) == Home("Cluster", C1)


@settings(max_examples=300, deadline=None)
@given(judged=st.lists(st.tuples(st.integers(0, 5), st.one_of(st.none(), st.integers(0, 10_000))), max_size=8,
                       unique_by=lambda t: t[0]),
       wall=st.integers(0, 20_000), keep=st.integers(0, 10_000))
def test_settle_marks_what_is_unmarked_and_releases_only_what_was_marked_a_grace_ago(judged, wall, keep):
    items = [Found(i, f"10.0.0.{i}/24", f"k{i}", with_swept(f"metal3-ipam home=Cluster:{C1} claim ns/m{i}",
                                                             None if at is None else EPOCH + at))
             for i, at in judged]
    release, mark = settle(items, EPOCH + wall, keep)
    for item in release:
        assert swept_at(item.description) is not None and EPOCH + wall - swept_at(item.description) >= keep
    for item, text in mark:
        assert swept_at(item.description) is None and swept_at(text) == EPOCH + wall
        assert home_in(text) == home_in(item.description)
    assert {i.id for i in release} | {i.id for i, _ in mark} <= {i.id for i in items}
    assert not {i.id for i in release} & {i.id for i, _ in mark}


HOMES = [Home("Cluster", C1), Home("Cluster", T1), Home("Cluster", SP)]


@settings(max_examples=400, deadline=None)
@given(start=st.sampled_from(HOMES + [None]), order=st.lists(st.integers(0, 2), min_size=1, max_size=12))
def test_three_clusters_whose_live_claims_carry_one_key_never_take_it_back_and_forth(start, order):
    """Each cluster holds only its own Cluster, its claim live and unpaused; they sweep in any order. After
    each has swept once, no sweep changes the address: at most one take without the home's consent."""
    text = description(start, keyed_claim("m", "k", "ns")) if start else "metal3-ipam claim ns/m"
    writes = []
    for side in order + [0, 1, 2] + order:
        mine = HOMES[side]
        state = lambda h, mine=mine: PRESENT if h == mine else ABSENT  # noqa: E731
        new = taken_over(text, description(mine, keyed_claim("m", "k", f"ns{side}")), state)
        writes.append(new is not None)
        text = new or text
    assert sum(writes) <= 2, text  # a take of an address homed nowhere, one take over of a live home at most
    assert not any(writes[len(order) + 3:]), text  # once each swept, nobody writes it again


class _Client(NetBoxClient):
    """The client's lookup-then-describe with no server: ``describe`` records what it would write."""

    def __init__(self):
        super().__init__("http://netbox.example", "token", owner="o")
        self.written: list[str] = []

    async def describe(self, allocation, description, what=None):
        self.written.append(description)
        return dataclasses.replace(allocation, description=description)


def test_a_claim_asking_for_a_key_whose_address_another_cluster_took_over_from_its_home_is_refused():
    """The claim's key's address was taken over by a claim of another cluster (``from=`` this claim's home):
    found by key, it is not bound here (the other cluster's claim holds the IP), and the refusal names it."""
    mine = description(Home("Cluster", C1), keyed_claim("copy", "k", "ns"))
    taken = Allocation(3, "10.0.0.3/24", "k", None, f"metal3-ipam home=Cluster:{T1} from=Cluster:{C1} claim t/m")
    client = _Client()
    with pytest.raises(NetBoxError) as refused:
        asyncio.run(client._rehome(taken, mine, "allocating for key 'k'"))
    assert refused.value.reason is Reason.HOMED_ELSEWHERE and f"Cluster:{T1}" in str(refused.value)
    assert client.written == []
    # Homed nowhere (its claim seen leave for a move) or never taken over: taken, the old home named (given by
    # its home, moved-from=; taken from it unasked, from=).
    for there in (f"metal3-ipam moved-from=Cluster:{T1} claim t/m", f"metal3-ipam home=Cluster:{T1} claim t/m"):
        found = dataclasses.replace(taken, description=there)
        assert home_in(asyncio.run(client._rehome(found, mine, "allocating")).description) == Home("Cluster", C1)
    assert [(moved_from(text), taken_from(text)) for text in client.written] == [(Home("Cluster", T1), None),
                                                                                 (None, Home("Cluster", T1))]


def test_a_bound_claim_whose_key_a_sweep_found_homed_in_another_cluster_says_so_in_a_condition_until_it_is_not():
    m = outside_claim("m")
    m["metadata"]["annotations"] = {KEY_ANNOTATION: "k1"}
    world = World(m)
    world.settle()
    assert ready(world.claim("m"))["status"] == "True"
    world.api.inventory.homed_elsewhere["k1"] = f"NetBox at x: address 10.0.0.2/28 is homed at Cluster:{T1}"
    world.settle()
    said = o.condition(o.status(world.claim("m")), ADDRESS_HOMED_ELSEWHERE)
    assert said is not None and said["status"] == "True" and f"Cluster:{T1}" in said["message"]
    assert ready(world.claim("m"))["status"] == "True"  # it keeps its address
    del world.api.inventory.homed_elsewhere["k1"]
    world.settle()
    assert o.condition(o.status(world.claim("m")), ADDRESS_HOMED_ELSEWHERE) is None


def test_a_claim_deleted_here_leaves_its_keys_address_that_another_clusters_claim_took_over():
    """Two clusters' live claims carried the key; the other took the address over. The claim here deleted, its
    finalizer's release leaves the address (its IP is that claim's), and the claim's finalizer goes all the same."""
    netbox = SharedNetBox(Found(3, "10.0.0.3/24", "k", f"metal3-ipam home=Cluster:{T1} from=Cluster:{C1} claim t/m"))
    source = _Side(netbox, cluster_c1(C1, False, "ns"), shared_netbox_pool(SP, "ns"))
    taken = netbox.items[3].description
    assert source.pools._left_on_release("k", taken) == taken
    # Taken over here from the other cluster unasked: its claim may live (its sweep not come yet to hold it), so
    # the address is marked released, for that claim to take it back; given by the other cluster: deleted.
    left = source.pools._left_on_release("k", f"metal3-ipam home=Cluster:{C1} from=Cluster:{T1} claim ns/m")
    assert left == with_swept(f"metal3-ipam home=Cluster:{C1} from=Cluster:{T1} claim ns/m", EPOCH), left
    assert source.pools._left_on_release("k", f"metal3-ipam home=Cluster:{C1} moved-from=Cluster:{T1} claim ns/m") \
        is None

    class Holding(_Client):
        async def find(self, key):
            return Allocation(3, "10.0.0.3/24", key, None, netbox.items[3].description)

        async def release_allocation(self, allocation):
            raise AssertionError(f"released {allocation}")

    assert asyncio.run(Holding().release("k", source.pools._left_on_release)) is None


def test_a_claim_moved_back_takes_its_address_homed_nowhere_and_moved_from_is_not_a_take_over():
    """``moved-from=`` names the home a source took off the address; it is no ``from=`` (a take over)."""
    gone = f"metal3-ipam moved-from=Cluster:{C1} claim ns/m"
    assert taken_from(gone) is None
    back = description(Home("Cluster", C1), keyed_claim("m", "k", "ns"))
    text = taken_over(gone, back, lambda h: PRESENT if h == Home("Cluster", C1) else ABSENT)
    assert text == back.replace(" claim", f" from=Cluster:{C1} claim")  # its own home again, first come (a copy
    # of the claim may live where it went: that cluster leaves it here rather than taking it over)


def _being_deleted(obj: dict) -> dict:
    return {**obj, "metadata": {**obj["metadata"], "deletionTimestamp": "2026-01-01T00:00:00Z",
                                "resourceVersion": "9"}}


def _released_with_its_finalizer(side: _Side, netbox: SharedNetBox, claim: dict) -> None:
    side.inventory.upsert(_deleted(claim))
    asyncio.run(SharedNetBoxClient(netbox).release("k", side.pools._left_on_release))
    side.inventory.remove(claim)


def _two_live_claims_one_taken_over() -> tuple[SharedNetBox, _Side, _Side, dict, dict]:
    """A move restored from a directory while the source runs: the target takes the address over, the source's
    live claim holds it (``live-held=``)."""
    netbox = SharedNetBox(homed_at_source())
    mine, copy = keyed_claim("m", "k", "ns"), keyed_claim("m", "k", "t")
    source = _Side(netbox, cluster_c1(C1, False, "ns"), shared_netbox_pool(SP, "ns"), mine)
    target = _Side(netbox, cluster_c1(T1, False, "t"), shared_netbox_pool(TP, "t"), copy)
    target.sweep()
    source.sweep()
    held = netbox.items[3].description
    assert home_in(held) == Home("Cluster", T1) and held_in(held) == Home("Cluster", C1), held
    return netbox, source, target, mine, copy


def test_an_address_taken_over_is_released_once_the_holding_claims_cluster_is_deleted_and_the_takers_claim_is_too():
    netbox, source, target, mine, copy = _two_live_claims_one_taken_over()
    source.inventory.upsert(_being_deleted(cluster_c1(C1, False, "ns")))  # the user deletes the source's Cluster
    _released_with_its_finalizer(source, netbox, mine)  # its claim goes first (CAPI deletes the Cluster's children)
    source.sweep()
    source.inventory.remove(cluster_c1(C1, False, "ns"))
    source.sweep()
    target.sweep()
    _released_with_its_finalizer(target, netbox, copy)  # later, the taker's claim is deleted too
    for _ in range(6):
        source.sweep(every=GRACE)
        target.sweep(every=GRACE)
    assert 3 not in netbox.items, f"no claim carries key k any more, yet NetBox keeps {netbox.items.get(3)}"


def test_an_address_taken_over_is_released_once_the_takers_cluster_is_deleted_and_the_holding_claim_is_too():
    netbox, source, target, mine, copy = _two_live_claims_one_taken_over()
    target.inventory.upsert(_being_deleted(cluster_c1(T1, False, "t")))  # the user deletes the restored copy
    _released_with_its_finalizer(target, netbox, copy)
    target.inventory.remove(cluster_c1(T1, False, "t"))
    assert 3 in netbox.items  # the source's live claim is bound to it: kept, rightly
    source.sweep()
    _released_with_its_finalizer(source, netbox, mine)  # later, the source's claim is deleted too
    for _ in range(6):
        source.sweep(every=GRACE)
        target.sweep(every=GRACE)
    assert 3 not in netbox.items, f"no claim carries key k any more, yet NetBox keeps {netbox.items.get(3)}"


def test_a_copy_deleted_after_its_sweep_took_the_address_over_leaves_it_to_the_live_claim_of_the_source():
    netbox = SharedNetBox(homed_at_source())
    mine, copy = keyed_claim("m", "k", "ns"), keyed_claim("m", "k", "t")
    source = _Side(netbox, cluster_c1(C1, False, "ns"), shared_netbox_pool(SP, "ns"), mine)
    target = _Side(netbox, cluster_c1(T1, False, "t"), shared_netbox_pool(TP, "t"), copy)
    source.sweep()  # the source's claim, homed there, swept as ever
    target.sweep()  # the copy restored from a directory: its sweep takes the address over
    assert home_in(netbox.items[3].description) == Home("Cluster", T1)
    _released_with_its_finalizer(target, netbox, copy)  # the copy deleted before the source's next sweep
    assert netbox.released == [], "released the address the source's live claim ns/m is bound to"


def test_an_address_of_an_earlier_version_is_held_by_a_paused_copys_sweep_and_kept_by_the_other_claims_release():
    netbox = SharedNetBox(Found(3, "10.0.0.3/24", "k", "metal3-ipam claim ns/m"))  # no home: an earlier version's
    mine, copy = keyed_claim("m", "k", "ns"), keyed_claim("m", "k", "t")
    source = _Side(netbox, cluster_c1(C1, False, "ns"), shared_netbox_pool(SP, "ns"), mine)
    target = _Side(netbox, cluster_c1(T1, True, "t"), shared_netbox_pool(TP, "t"), copy)  # the copy paused
    target.sweep(times=3)
    _released_with_its_finalizer(source, netbox, mine)  # the source's claim deleted, its sweep not come yet
    assert netbox.released == [], "released the address the target's paused claim t/m is bound to"


def test_the_holding_claim_gets_its_address_back_once_the_takers_claim_is_deleted():
    netbox, source, target, mine, copy = _two_live_claims_one_taken_over()
    _released_with_its_finalizer(target, netbox, copy)  # the user deletes one of the two claims, as told
    assert 3 in netbox.items  # the source's live claim is bound to it: kept, rightly
    for _ in range(4):
        target.sweep()
        source.sweep()
    assert home_in(netbox.items[3].description) == Home("Cluster", C1), netbox.items[3].description
    assert "k" not in source.inventory.homed_elsewhere, source.inventory.homed_elsewhere["k"]


def test_a_copy_held_while_paused_then_unpaused_and_deleted_leaves_the_address_to_the_live_claim_of_the_source():
    netbox = SharedNetBox(homed_at_source())
    mine, copy = keyed_claim("m", "k", "ns"), keyed_claim("m", "k", "t")
    source = _Side(netbox, cluster_c1(C1, False, "ns"), shared_netbox_pool(SP, "ns"), mine)
    target = _Side(netbox, cluster_c1(T1, True, "t"), shared_netbox_pool(TP, "t"), copy)
    target.sweep()  # the copy paused: held
    source.sweep()  # the source's live claim, homed there, answers the hold: from= its own home (first come)
    target.inventory.upsert({**cluster_c1(T1, False, "t"), "metadata": {**cluster_c1(T1, False, "t")["metadata"],
                                                                      "resourceVersion": "2"}})
    target.sweep()  # unpaused: homed there
    assert home_in(netbox.items[3].description) == Home("Cluster", T1)
    _released_with_its_finalizer(target, netbox, copy)  # the copy deleted before the source's next sweep
    assert netbox.released == [], "released the address the source's live claim ns/m is bound to"



def test_a_copy_unpaused_while_the_sources_claim_is_paused_leaves_the_address_to_that_claim_on_its_deletion():
    netbox = SharedNetBox(homed_at_source())
    mine, copy = keyed_claim("m", "k", "ns"), keyed_claim("m", "k", "t")
    source = _Side(netbox, cluster_c1(C1, True, "ns"), shared_netbox_pool(SP, "ns"), mine)
    target = _Side(netbox, cluster_c1(T1, True, "t"), shared_netbox_pool(TP, "t"), copy)
    target.sweep()  # the copy paused: held
    source.sweep()  # the source paused, its claim bound
    target.inventory.upsert({**cluster_c1(T1, False, "t"), "metadata": {**cluster_c1(T1, False, "t")["metadata"],
                                                                      "resourceVersion": "2"}})
    target.sweep()  # unpaused by hand: homed there
    _released_with_its_finalizer(target, netbox, copy)
    assert netbox.released == [], "released the address the source's paused claim ns/m is bound to"


def test_an_address_of_an_earlier_version_two_paused_claims_carry_is_kept_by_the_release_of_the_one_holding_it():
    """A move under way of a claim whose address an earlier version wrote: both Clusters paused, the first to sweep
    holds it (an address carries one hold). Its claim deleted by hand, its release does not delete the address the
    other's paused claim is bound to: homed there marked released, the other's next sweep holds it."""
    netbox = SharedNetBox(Found(3, "10.0.0.3/24", "k", "metal3-ipam claim ns/m"))  # no home: an earlier version's
    mine, copy = keyed_claim("m", "k", "ns"), keyed_claim("m", "k", "t")
    source = _Side(netbox, cluster_c1(C1, True, "ns"), shared_netbox_pool(SP, "ns"), mine)
    target = _Side(netbox, cluster_c1(T1, True, "t"), shared_netbox_pool(TP, "t"), copy)
    source.sweep()
    target.sweep()
    assert held_in(netbox.items[3].description) == Home("Cluster", C1)
    _released_with_its_finalizer(source, netbox, mine)
    assert netbox.released == [], "released the address the target's paused claim t/m is bound to"
    target.sweep()
    assert held_in(netbox.items[3].description) == Home("Cluster", T1), netbox.items[3].description
    assert swept_at(netbox.items[3].description) is None


_UIDS = {"S": (C1, SP, "ns"), "T": (T1, TP, "t")}


def _restarted(netbox: SharedNetBox, side: str, paused: bool, carries: bool, now: float) -> _Side:
    """The controller of ``side`` (started anew: no sightings, no memory of claims seen leave), its claim if
    it carries the key."""
    uid, pool, ns = _UIDS[side]
    started = _Side(netbox, cluster_c1(uid, paused, ns), shared_netbox_pool(pool, ns),
                    *([keyed_claim("m", "k", ns)] if carries else []))
    started.now = now
    return started


@settings(max_examples=150, deadline=None)
@example(steps=["unpause S", "sweep TS", "release S"], homed="nowhere", paused={"S": True, "T": True})
@given(steps=st.lists(st.sampled_from(["sweep ST", "sweep TS", "late ST", "release S", "release T", "restart S",
                                       "restart T", "pause S", "pause T", "unpause S", "unpause T"]), max_size=16),
       homed=st.sampled_from(["S", "T", "nowhere"]),
       paused=st.fixed_dictionaries({"S": st.booleans(), "T": st.booleans()}))
def test_two_clusters_live_or_paused_claims_of_one_key_lose_the_address_to_no_order_of_sweeps_restarts_and_releases(
        steps, homed, paused):
    """Both clusters' claims carry one key (a copy restored from a directory, a move under way), both controllers
    sweep in turn (``late``: a release grace apart), restart (forgetting their sightings), are paused and unpaused
    and their claims deleted in any order (SPEC §10.1, §10.3): no release deletes the address while a claim of
    either cluster is left, and once both are gone and both unpaused the sweeps release it. Also a copy unpaused
    by hand while the other's claim is paused, or before the other swept since its hold."""
    text = description(Home("Cluster", _UIDS[homed][0]) if homed != "nowhere" else None, keyed_claim("m", "k", "ns"))
    netbox = SharedNetBox(Found(3, "10.0.0.3/24", "k", text))
    live = {"S", "T"}
    sides = {side: _restarted(netbox, side, paused[side], True, 0.0) for side in "ST"}
    versions = iter(range(100, 1000))
    for side in "ST":
        sides[side].sweep()
    for step in steps:
        verb, name = step.split()
        if verb in ("sweep", "late"):
            for side in name:
                sides[side].sweep(every=GRACE if verb == "late" else 300)
        elif verb == "release" and name in live:
            _released_with_its_finalizer(sides[name], netbox, keyed_claim("m", "k", _UIDS[name][2]))
            live.discard(name)
        elif verb == "restart":
            sides[name] = _restarted(netbox, name, paused[name], name in live, sides[name].now)
        elif verb in ("pause", "unpause"):
            paused[name] = verb == "pause"
            uid, _, ns = _UIDS[name]
            cluster = cluster_c1(uid, paused[name], ns)
            cluster["metadata"]["resourceVersion"] = str(next(versions))
            sides[name].inventory.upsert(cluster)
        if live:
            assert netbox.released == [], f"released under the claim of {live}: {netbox.released}"
    if not live:
        for side in "ST":
            uid, _, ns = _UIDS[side]
            cluster = cluster_c1(uid, False, ns)
            cluster["metadata"]["resourceVersion"] = str(next(versions))
            sides[side].inventory.upsert(cluster)
        for _ in range(6):
            for side in sides.values():
                side.sweep(every=GRACE)
        assert 3 not in netbox.items, f"no claim carries key k any more, yet NetBox keeps {netbox.items[3]}"



def test_a_copy_unpaused_before_the_sources_next_sweep_leaves_the_address_to_the_live_claim_of_the_source():
    netbox = SharedNetBox(homed_at_source())
    mine, copy = keyed_claim("m", "k", "ns"), keyed_claim("m", "k", "t")
    source = _Side(netbox, cluster_c1(C1, False, "ns"), shared_netbox_pool(SP, "ns"), mine)
    target = _Side(netbox, cluster_c1(T1, True, "t"), shared_netbox_pool(TP, "t"), copy)
    source.sweep()
    target.sweep()  # the copy paused: held
    target.inventory.upsert({**cluster_c1(T1, False, "t"), "metadata": {**cluster_c1(T1, False, "t")["metadata"],
                                                                      "resourceVersion": "2"}})
    target.sweep()  # unpaused, before the source's next sweep
    _released_with_its_finalizer(target, netbox, copy)
    assert netbox.released == [], "released the address the source's live claim ns/m is bound to"


def _deleted_for_move(claim: dict) -> dict:
    return {**claim, "metadata": {**claim["metadata"], "resourceVersion": "5",
                                  "annotations": {**claim["metadata"]["annotations"],
                                                  kinds.DELETE_FOR_MOVE_ANNOTATION: ""}}}


def _unpaused(side: _Side, uid: str, ns: str) -> None:
    side.inventory.upsert({**cluster_c1(uid, False, ns), "metadata": {**cluster_c1(uid, False, ns)["metadata"],
                                                                    "resourceVersion": "2"}})


@pytest.mark.parametrize("source_cluster_gone", [False, True])
@pytest.mark.parametrize("source_first", [True, False])
def test_a_moved_claims_address_is_deleted_by_its_release_in_the_target_whichever_cluster_swept_it_first(
        source_first, source_cluster_gone):
    """A plain ``clusterctl move``: the source saw its claim leave for the move (its Cluster paused, or deleted by
    the move since; a pool of its keeps it sweeping that NetBox). Whichever sweep comes first, the source's (taking
    its home off) or the target's (homing the address there before that, under load), the moved claim deleted in
    the target afterwards has its address deleted at once, not marked released for a release grace."""
    netbox = SharedNetBox(homed_at_source())
    mine, copy = keyed_claim("m", "k", "ns"), keyed_claim("m", "k", "t")
    source = _Side(netbox, cluster_c1(C1, True, "ns"), shared_netbox_pool(SP, "ns"), mine)
    source.inventory.remove(_deleted_for_move(mine))
    if source_cluster_gone:
        source.inventory.remove(cluster_c1(C1, True, "ns"))
    target = _Side(netbox, cluster_c1(T1, False, "t"), shared_netbox_pool(TP, "t"), copy)
    for side in ([source, target] if source_first else [target, source]) * 2:
        side.sweep()
        assert netbox.released == []
    text = netbox.items[3].description
    assert home_in(text) == Home("Cluster", T1) and swept_at(text) is None, text
    _released_with_its_finalizer(target, netbox, copy)
    assert [item.id for item in netbox.released] == [3], netbox.items.get(3)


def test_a_moved_claims_address_its_paused_copy_held_is_deleted_by_its_release_in_the_target():
    """A plain ``clusterctl move`` as it runs: the target's copy, paused, holds the address; the source's claim
    leaves for the move and its Cluster goes with it before the source's sweep; the target, unpaused, homes the
    address there, the source sweeps on (a pool of another namespace), and the moved claim deleted in the target
    has its address deleted at once."""
    netbox = SharedNetBox(homed_at_source())
    mine, copy = keyed_claim("m", "k", "ns"), keyed_claim("m", "k", "t")
    source = _Side(netbox, cluster_c1(C1, True, "ns"), shared_netbox_pool(SP, "ns"), mine)
    target = _Side(netbox, cluster_c1(T1, True, "t"), shared_netbox_pool(TP, "t"), copy)
    target.sweep()
    assert held_in(netbox.items[3].description) == Home("Cluster", T1)
    source.inventory.remove(_deleted_for_move(mine))
    source.inventory.remove(cluster_c1(C1, True, "ns"))
    _unpaused(target, T1, "t")
    target.sweep()
    source.sweep()
    target.sweep()
    assert home_in(netbox.items[3].description) == Home("Cluster", T1) and netbox.released == []
    _released_with_its_finalizer(target, netbox, copy)
    assert [item.id for item in netbox.released] == [3], netbox.items.get(3)


def test_a_moved_claim_deleted_in_the_target_before_its_source_gave_the_address_has_it_released_after_the_grace():
    """The source's controller gone with its pools before it gave the moved claim's address (nothing tells the
    target a move from a copy whose source's claim lives): the target took it unasked (``from=``), and the moved
    claim's release there marks it released; no claim carrying its key, the target's sweeps release it once the
    release grace is over, not before."""
    netbox = SharedNetBox(homed_at_source())
    copy = keyed_claim("m", "k", "t")
    target = _Side(netbox, cluster_c1(T1, False, "t"), shared_netbox_pool(TP, "t"), copy)
    target.sweep()
    assert taken_from(netbox.items[3].description) == Home("Cluster", C1)
    _released_with_its_finalizer(target, netbox, copy)
    assert netbox.released == [] and swept_at(netbox.items[3].description) is not None
    target.sweep(times=2)
    assert netbox.released == []
    target.sweep(times=4, every=GRACE)
    assert [item.id for item in netbox.released] == [3]


def test_a_claim_clusterctl_deletes_for_a_move_is_remembered_with_its_key_though_its_annotations_were_replaced():
    """clusterctl annotates a source object for deletion with a JSON patch ``add`` of ``/metadata/annotations``,
    which replaces the claim's annotations (its key among them) with its own; then it takes the finalizers off and
    deletes it. The source remembers the claim left with its key and the uids it belonged to, so that it gives the
    address the target homed first, its own Cluster gone with the move since, and the moved claim's release there
    deletes it at once."""
    netbox = SharedNetBox(homed_at_source())
    mine, copy = keyed_claim("m", "k", "ns"), keyed_claim("m", "k", "t")
    source = _Side(netbox, cluster_c1(C1, True, "ns"), shared_netbox_pool(SP, "ns"), mine)
    patched = {**mine, "metadata": {**mine["metadata"], "resourceVersion": "5",
                                    "annotations": {kinds.DELETE_FOR_MOVE_ANNOTATION: ""}}}
    source.inventory.upsert(patched)
    source.inventory.remove({**patched, "metadata": {**patched["metadata"], "resourceVersion": "6"}})
    assert source.inventory.moved_away.get("k") == ("ns", "m")
    source.inventory.remove(cluster_c1(C1, True, "ns"))
    target = _Side(netbox, cluster_c1(T1, False, "t"), shared_netbox_pool(TP, "t"), copy)
    target.sweep()
    assert taken_from(netbox.items[3].description) == Home("Cluster", C1)
    source.sweep()
    assert moved_from(netbox.items[3].description) == Home("Cluster", C1), netbox.items[3].description
    _released_with_its_finalizer(target, netbox, copy)
    assert [item.id for item in netbox.released] == [3], netbox.items.get(3)


def test_an_address_taken_over_unasked_is_released_once_the_takers_cluster_is_deleted_within_the_grace():
    netbox = SharedNetBox(homed_at_source())  # the source's Cluster gone with the move
    copy = keyed_claim("m", "k", "t")
    target = _Side(netbox, cluster_c1(T1, False, "t"), shared_netbox_pool(TP, "t"), copy)
    target.sweep()  # taken over: nobody answered
    assert taken_from(netbox.items[3].description) == Home("Cluster", C1)
    target.inventory.upsert(_being_deleted(cluster_c1(T1, False, "t")))  # the user deletes the Cluster
    _released_with_its_finalizer(target, netbox, copy)
    target.sweep()
    target.inventory.remove(_being_deleted(cluster_c1(T1, False, "t")))  # gone, before the release grace is over
    assert target.inventory.get("Cluster", "t", "c1") is None
    target.sweep(times=6, every=GRACE)
    assert 3 not in netbox.items, f"no claim carries key k any more, yet NetBox keeps {netbox.items.get(3)}"


U1, UP = "0b3e1f7a-1111-4c2d-9e8f-000000000005", "5a6b7c8d-2222-4c2d-9e8f-000000000006"  # a third cluster's


@pytest.mark.parametrize("held_first", [
    pytest.param(False, id="unheld"),
    pytest.param(True, id="live-held")])
def test_a_copys_take_is_not_given_to_it_when_the_sources_claim_moves_to_a_third_cluster(held_first):
    netbox = SharedNetBox(homed_at_source())
    mine, copy, moved = keyed_claim("m", "k", "ns"), keyed_claim("m", "k", "t"), keyed_claim("m", "k", "u")
    source = _Side(netbox, cluster_c1(C1, False, "ns"), shared_netbox_pool(SP, "ns"), mine)
    copied = _Side(netbox, cluster_c1(T1, False, "t"), shared_netbox_pool(TP, "t"), copy)
    copied.sweep()  # the copy restored from a directory while the source runs: taken over unasked
    assert taken_from(netbox.items[3].description) == Home("Cluster", C1)
    if held_first:
        source.sweep()  # the source's live claim holds it (live-held=)
        assert held_in(netbox.items[3].description) == Home("Cluster", C1)
    # clusterctl move of ns to a third cluster: the source's Cluster paused, its claim deleted for the move; the
    # copy made in the third cluster, paused there, its controller not come to sweep yet.
    source.inventory.upsert({**cluster_c1(C1, True, "ns"), "metadata": {**cluster_c1(C1, True, "ns")["metadata"],
                                                                      "resourceVersion": "2"}})
    source.inventory.remove(_deleted_for_move(mine))
    third = _Side(netbox, cluster_c1(U1, True, "u"), shared_netbox_pool(UP, "u"), moved)
    source.sweep(times=2)
    _released_with_its_finalizer(copied, netbox, copy)  # the stale copy deleted, as its Events told
    assert netbox.released == [], "released the address the moved claim u/m, paused in the third cluster, holds"
    third.sweep()
    _unpaused(third, U1, "u")
    third.sweep()
    assert home_in(netbox.items[3].description) == Home("Cluster", U1), netbox.items[3].description


def test_a_claim_deleted_for_a_move_does_not_leave_with_the_key_of_an_earlier_claim_of_its_name():
    old, new = keyed_claim("m", "k1", "ns"), keyed_claim("m", "k2", "ns")
    new["metadata"].update(uid="uid-ns-m-again", resourceVersion="7")
    netbox = SharedNetBox(Found(3, "10.0.0.3/24", "k1", description(Home("Cluster", C1), old)))
    source = _Side(netbox, cluster_c1(C1, False, "ns"), shared_netbox_pool(SP, "ns"), old)
    # old's finalizer taken off by hand and old deleted (its address left to the sweeps), m made again with another
    # key; a watch gap hides old's deletion. clusterctl move pauses the Cluster and patches m for deletion (its
    # annotations replaced), then deletes it; the relist files m so.
    source.inventory.upsert({**cluster_c1(C1, True, "ns"), "metadata": {**cluster_c1(C1, True, "ns")["metadata"],
                                                                      "resourceVersion": "2"}})
    patched = {**new, "metadata": {**new["metadata"], "resourceVersion": "8",
                                   "annotations": {kinds.DELETE_FOR_MOVE_ANNOTATION: ""}}}
    source.inventory.upsert(patched)
    source.inventory.remove({**patched, "metadata": {**patched["metadata"], "resourceVersion": "9"}})
    assert "k1" not in source.inventory.moved_away, source.inventory.moved_away
    source.sweep(times=2)
    _unpaused(source, C1, "ns")  # the move given up: the Cluster unpaused where it was
    source.sweep(times=6, every=GRACE)
    assert 3 not in netbox.items, f"no claim carries key k1, yet NetBox keeps {netbox.items.get(3)}"


def test_a_copys_take_the_source_held_is_not_given_nor_held_on_once_the_move_deleted_the_sources_cluster():
    """The source's live claim held the address a copy took (``live-held=``); the claim then moved to a third
    cluster and the move deleted the source's Cluster before the source's next sweep: that sweep takes its own hold
    off (no claim here carries the key; a hold left would keep every sweep off the address for good) and gives the
    copy nothing, at that sweep or later ones."""
    netbox = SharedNetBox(homed_at_source())
    mine, copy = keyed_claim("m", "k", "ns"), keyed_claim("m", "k", "t")
    source = _Side(netbox, cluster_c1(C1, False, "ns"), shared_netbox_pool(SP, "ns"), mine)
    copied = _Side(netbox, cluster_c1(T1, False, "t"), shared_netbox_pool(TP, "t"), copy)
    copied.sweep()
    source.sweep()
    assert held_in(netbox.items[3].description) == Home("Cluster", C1)
    source.inventory.upsert({**cluster_c1(C1, True, "ns"), "metadata": {**cluster_c1(C1, True, "ns")["metadata"],
                                                                      "resourceVersion": "2"}})
    source.inventory.remove(_deleted_for_move(mine))
    source.inventory.remove(cluster_c1(C1, True, "ns"))
    source.sweep(times=3)
    text = netbox.items[3].description
    assert held_in(text) is None and home_in(text) == Home("Cluster", T1), text
    assert taken_from(text) == Home("Cluster", C1) and moved_from(text) is None, text
    _released_with_its_finalizer(copied, netbox, copy)
    assert netbox.released == [] and swept_at(netbox.items[3].description) is not None


def test_a_copys_take_moved_on_to_a_third_cluster_keeps_naming_the_source_it_was_taken_from_unasked():
    """A copy of ns/m restored in a second cluster while the source runs takes the address unasked (``from=`` the
    source); the copy's Cluster is then moved by clusterctl to a third cluster. The copy's old cluster takes its
    home off (``moved-from=``) and keeps ``from=`` the source; the third cluster homes it taken unasked from the
    source still, so the moved copy's release marks it released (the source's live claim is bound to it, and
    takes it back) rather than deleting it."""
    netbox = SharedNetBox(homed_at_source())
    mine, copy, moved = keyed_claim("m", "k", "ns"), keyed_claim("m", "k", "t"), keyed_claim("m", "k", "u")
    source = _Side(netbox, cluster_c1(C1, False, "ns"), shared_netbox_pool(SP, "ns"), mine)
    copied = _Side(netbox, cluster_c1(T1, False, "t"), shared_netbox_pool(TP, "t"), copy)
    copied.sweep()
    assert taken_from(netbox.items[3].description) == Home("Cluster", C1)
    copied.inventory.upsert({**cluster_c1(T1, True, "t"), "metadata": {**cluster_c1(T1, True, "t")["metadata"],
                                                                     "resourceVersion": "2"}})
    copied.inventory.remove(_deleted_for_move(copy))
    copied.sweep()
    gone = netbox.items[3].description
    assert home_in(gone) is None and moved_from(gone) == Home("Cluster", T1), gone
    assert taken_from(gone) == Home("Cluster", C1), gone
    third = _Side(netbox, cluster_c1(U1, False, "u"), shared_netbox_pool(UP, "u"), moved)
    third.sweep()
    text = netbox.items[3].description
    assert home_in(text) == Home("Cluster", U1) and taken_from(text) == Home("Cluster", C1), text
    _released_with_its_finalizer(third, netbox, moved)
    assert netbox.released == [], "released the address the source's live claim ns/m is bound to"
    source.sweep()
    assert home_in(netbox.items[3].description) == Home("Cluster", C1), netbox.items[3].description


def test_the_source_finds_its_address_a_copy_took_and_whose_copy_moved_on_and_takes_it_back_first_come():
    netbox = SharedNetBox(Found(3, "10.0.0.3/24", "k",
                                f"metal3-ipam moved-from=Cluster:{T1} from=Cluster:{C1} claim t/m"))
    source = _Side(netbox, cluster_c1(C1, False, "ns"), shared_netbox_pool(SP, "ns"), keyed_claim("m", "k", "ns"))
    source.sweep()
    text = netbox.items[3].description
    assert home_in(text) == Home("Cluster", C1) and taken_from(text) == Home("Cluster", C1), text


def _a_copy_of_a_moved_claim_takes_its_address_homed_nowhere(target_swept_first: bool) -> None:
    netbox = SharedNetBox(homed_at_source())
    mine, moved, copy = keyed_claim("m", "k", "ns"), keyed_claim("m", "k", "t"), keyed_claim("m", "k", "u")
    # clusterctl move of ns to the target: the source's Cluster paused, its claim deleted for the move, the moved
    # claim paused in the target; the source's sweep takes the home off.
    source = _Side(netbox, cluster_c1(C1, True, "ns"), shared_netbox_pool(SP, "ns"), mine)
    source.inventory.remove(_deleted_for_move(mine))
    target = _Side(netbox, cluster_c1(T1, True, "t"), shared_netbox_pool(TP, "t"), moved)
    source.sweep()
    assert home_in(netbox.items[3].description) is None and moved_from(netbox.items[3].description)
    if target_swept_first:
        target.sweep()
    # A copy of ns/m restored from a directory in a third cluster (made before the move), live there.
    third = _Side(netbox, cluster_c1(U1, False, "u"), shared_netbox_pool(UP, "u"), copy)
    third.sweep()
    _released_with_its_finalizer(third, netbox, copy)  # the stale copy deleted
    assert netbox.released == [], "released the address the moved claim t/m, paused in the target, is bound to"
    _unpaused(target, T1, "t")
    target.sweep(times=2)
    assert home_in(netbox.items[3].description) == Home("Cluster", T1), netbox.items[3].description


@pytest.mark.parametrize("target_swept_first", [
    pytest.param(False, id="target-not-swept"),
    pytest.param(True, id="target-swept-first")])
def test_a_copy_in_a_third_cluster_does_not_take_a_moved_claims_address_as_given_from_under_it(target_swept_first):
    _a_copy_of_a_moved_claim_takes_its_address_homed_nowhere(target_swept_first)
