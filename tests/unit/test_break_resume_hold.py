"""Orders of events in which a Cluster held while it resumes (``Controller._held``) is filed too early.

A Cluster that resumes is held (paused in the inventory) until its namespace's
addresses have been listed again (``Controller._resume``): ``clusterctl move``
creates the moved addresses right before it unpauses the Cluster, and the watch
of addresses may lag. The listing that releases a Cluster must therefore have
begun after the unpause it releases. Here the listings are held back (a page on
its way) while the Cluster goes through more than one resumption, and the
reconcile is asked what it would do once a listing ends.
"""

from __future__ import annotations

import asyncio
import copy
import threading

from metal3_ipam.controller.operator import Controller, Listing
from metal3_ipam.core import kinds
from metal3_ipam.core import objects as o
from test_break_paged_listing import DEADLINE, WatchedKicks
from test_resume import NS, creates, moved_state


class HeldListing:
    """Listings of the namespace's addresses handed out one per relist, each held back at its first
    page until released: ``asked[i]`` is set once listing i is on its way, ``release[i]`` lets it go."""

    def __init__(self, answers: list[Listing]) -> None:
        self.answers = answers
        self.asked = [threading.Event() for _ in answers]
        self.release = [threading.Event() for _ in answers]
        self.handed = 0

    def relist(self, namespace: str) -> list[Listing]:
        index = self.handed
        self.handed += 1
        answer = self.answers[index]

        def fetch(token):
            self.asked[index].set()
            if not self.release[index].wait(DEADLINE):
                raise TimeoutError(f"listing {index} was never released")
            return answer.fetch(token)
        return [Listing(answer.kind, namespace, fetch)]


async def until(flag: threading.Event, what: str) -> None:
    loop = asyncio.get_running_loop()
    deadline = loop.time() + DEADLINE
    while not flag.is_set():
        assert loop.time() < deadline, f"never: {what}"
        await asyncio.sleep(0.01)


async def until_done(future: asyncio.Future, what: str) -> None:
    loop = asyncio.get_running_loop()
    deadline = loop.time() + DEADLINE
    while not future.done():
        assert loop.time() < deadline, f"never: {what}"
        await asyncio.sleep(0.01)


def at(obj: dict, version: int, **meta) -> dict:
    return {**copy.deepcopy(obj), "metadata": {**copy.deepcopy(obj["metadata"]), "resourceVersion": str(version), **meta}}


def paused(obj: dict, flag: bool) -> dict:
    return {**obj, "spec": {**obj.get("spec", {}), "paused": flag}}


def the_move_there_and_back():
    """The moved state (Cluster c1 paused, claim c's moved address not filed yet), its unpause, the
    namespace's addresses as a LIST taken before c's address was created, and one taken after."""
    inventory, unpaused, listing = moved_state()
    items, _ = listing.read()
    stored = {o.name(a) for a in inventory.of_kind(kinds.IPADDRESS)}
    lagging = [a for a in items if o.name(a) not in stored]
    assert len(lagging) == 1
    version = int(o.meta(unpaused)["resourceVersion"])
    before = Listing.of(kinds.IPADDRESS, NS, [a for a in items if a not in lagging], str(version + 1))
    after = Listing.of(kinds.IPADDRESS, NS, copy.deepcopy(items), str(version + 20))
    return inventory, unpaused, before, after, version


def test_a_cluster_moved_away_and_back_while_its_first_resume_lists_is_not_released_by_that_listing():
    """Cluster c1 resumes (unpaused: held, its namespace's addresses listed again, a slow LIST). Before
    that LIST ends, the Cluster is moved away (deleted here) and back (created paused anew, the
    moved addresses created, unpaused): a second resumption, held, with a LIST of its own. The first
    LIST, taken before the second move created c's address, ends: it must not release the Cluster of
    the second resumption, else claim c is looked at with its Cluster unpaused and its moved address
    unknown, and is served anew (SPEC §10, 4: after a move every claim keeps its exact address)."""
    inventory, unpaused, before, after, version = the_move_there_and_back()
    listings = HeldListing([before, after])
    kicks = WatchedKicks(inventory)

    async def scenario() -> tuple[list[str], bool]:
        controller = Controller(inventory, kicks, writer=None, relist=listings.relist)
        controller.on_event("MODIFIED", copy.deepcopy(unpaused))  # the first resumption: held
        await until(listings.asked[0], "the first resumption's LIST went out")
        [first] = list(controller._tasks)
        # Moved away: deleted. Moved back: created paused (a new uid), then unpaused.
        controller.on_event("DELETED", at(unpaused, version + 2))
        controller.on_event("ADDED", paused(at(unpaused, version + 3, uid="c1-again"), True))
        assert o.cluster_paused(inventory.get(kinds.CLUSTER, NS, "c1"))
        controller.on_event("MODIFIED", paused(at(unpaused, version + 5, uid="c1-again"), False))
        await until(listings.asked[1], "the second resumption's LIST went out")
        assert o.cluster_paused(inventory.get(kinds.CLUSTER, NS, "c1"))
        try:
            listings.release[0].set()  # the first LIST ends; the second is still on its way
            await until_done(first, "the first resumption ended")
            return creates(inventory), o.cluster_paused(inventory.get(kinds.CLUSTER, NS, "c1"))
        finally:
            listings.release[1].set()
            await asyncio.gather(*controller._tasks)

    while_second_lists, still_paused = asyncio.run(scenario())
    assert while_second_lists == [] and still_paused, (
        f"the first LIST's end released the Cluster of the second resumption (paused: {still_paused}) while "
        f"the second move's addresses are being listed; the reconcile allocates anew: {while_second_lists}")
    allocated = [names for names in kicks.created if names]
    assert not allocated, f"pools kicked while a pass would allocate anew for a moved claim: {allocated}"
    assert not o.cluster_paused(inventory.get(kinds.CLUSTER, NS, "c1"))
    assert creates(inventory) == []


def test_a_cluster_paused_and_unpaused_again_while_held_waits_for_a_listing_begun_after_that_unpause():
    """Cluster c1 resumes: held, its namespace's addresses listed again (a slow LIST). Before that LIST
    ends the Cluster is paused again (filed: paused in the inventory), c's moved address is created,
    and the Cluster is unpaused again: a resumption like the first (paused in the inventory,
    unpaused in the event). It is released by the first LIST, which began before c's address existed,
    and no LIST is taken after it: claim c is served anew (SPEC §10, 4)."""
    inventory, unpaused, before, after, version = the_move_there_and_back()
    listings = HeldListing([before, after])
    kicks = WatchedKicks(inventory)

    async def scenario() -> tuple[list[str], int]:
        controller = Controller(inventory, kicks, writer=None, relist=listings.relist)
        controller.on_event("MODIFIED", copy.deepcopy(unpaused))  # held
        await until(listings.asked[0], "the first resumption's LIST went out")
        [first] = list(controller._tasks)
        controller.on_event("MODIFIED", paused(at(unpaused, version + 2), True))
        assert o.cluster_paused(inventory.get(kinds.CLUSTER, NS, "c1"))
        controller.on_event("MODIFIED", paused(at(unpaused, version + 5), False))  # resumes again
        try:
            listings.release[0].set()
            await until_done(first, "the first resumption ended")
            return creates(inventory), listings.handed
        finally:
            listings.release[1].set()
            await asyncio.gather(*controller._tasks)

    after_first, lists = asyncio.run(scenario())
    assert after_first == [], (f"released by a LIST begun before its last unpause ({lists} LIST(s) in all), "
                               f"the reconcile allocates anew: {after_first}")
