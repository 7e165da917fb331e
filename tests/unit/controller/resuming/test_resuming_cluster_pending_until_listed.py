"""Orders of events in which a Cluster pending while it resumes (``Controller._pending``) is filed too early.

A Cluster that resumes is pending (paused in the inventory) until its namespace's
addresses have been listed again (``resuming.Resumptions``): ``clusterctl move``
creates the moved addresses right before it unpauses the Cluster, and the watch
of addresses may lag. The listing that releases a Cluster must therefore have
begun after the unpause it releases. Here the listings are gated (a page on
its way) while the Cluster goes through more than one resumption, and the
reconcile is asked what it would do once a listing ends.
"""

from __future__ import annotations

import asyncio
import copy

from metal3_ipam.controller.operator import Controller, Listing
from metal3_ipam.core import kinds
from metal3_ipam.core import objects as o
from metal3_ipam.core.inventory import Inventory
from metal3_ipam.testing.listing import at_hand
from resuming import DEADLINE, WatchedKicks
from resuming import NS, creates
from resuming import GatedListings, at, paused, the_move_there_and_back, until, until_done


def _a_second_resumption_while_the_first_lists(between) -> tuple[list[str], bool, Inventory]:
    """Cluster c1 resumes: pending, its namespace's addresses listed again (a slow LIST). ``between(
    controller, unpaused, version)`` plays what comes before that LIST ends (c's moved address is
    created meanwhile); then it ends. Returns what a pass would create at that moment, whether c1 is
    paused then, and the inventory once every listing is in."""
    inventory, unpaused, before, after, version = the_move_there_and_back()
    listings = GatedListings(before, after)
    kicks = WatchedKicks(inventory)

    async def scenario() -> tuple[list[str], bool]:
        controller = Controller(inventory, kicks, writer=None, relist=listings.relist)
        try:
            controller.on_event("MODIFIED", copy.deepcopy(unpaused))  # the first resumption: pending
            await until(listings.asked[0], "the first resumption's LIST went out")
            [first] = list(controller.resumptions.tasks)
            between(controller, unpaused, version, listings)
            listings.release[0].set()  # the first LIST ends; any other is still on its way
            await until_done(first, "the first resumption ended", listings)
            return creates(inventory), o.cluster_paused(inventory.get(kinds.CLUSTER, NS, "c1"))
        finally:
            listings.release_all()
            await asyncio.gather(*controller.resumptions.tasks)

    allocated, still_paused = asyncio.run(scenario())
    return allocated, still_paused, inventory


def test_a_cluster_moved_away_and_back_while_its_first_resume_lists_is_not_released_by_that_listing():
    """Before the first resumption's LIST ends, the Cluster is moved away (deleted here) and back
    (created paused anew, c's moved address created, then unpaused): a second resumption. The first
    LIST, taken before c's address existed, must not release the Cluster of the second, else claim c
    is looked at with its Cluster unpaused and its moved address unknown, and is served anew (SPEC
    §10, 4: after a move every claim keeps its exact address, nothing allocated anew)."""
    def moved_away_and_back(controller, unpaused, version, listings):
        controller.on_event("DELETED", at(unpaused, version + 2))
        controller.on_event("ADDED", paused(at(unpaused, version + 3, uid="c1-again"), True))
        assert o.cluster_paused(controller.inventory.get(kinds.CLUSTER, NS, "c1"))
        listings.created = True
        controller.on_event("MODIFIED", paused(at(unpaused, version + 5, uid="c1-again"), False))

    allocated, still_paused, inventory = _a_second_resumption_while_the_first_lists(moved_away_and_back)
    assert allocated == [] and still_paused, (
        f"the first LIST's end released the Cluster of the second resumption (paused: {still_paused}); "
        f"the reconcile allocates anew: {allocated}")
    assert not o.cluster_paused(inventory.get(kinds.CLUSTER, NS, "c1"))
    assert creates(inventory) == []


def test_a_cluster_paused_and_unpaused_again_while_pending_waits_for_a_listing_begun_after_that_unpause():
    """Before the first resumption's LIST ends the Cluster is paused again (filed: paused in the
    inventory), c's moved address is created, and the Cluster is unpaused again: a resumption like
    the first. Released by the first LIST, which began before c's address existed, claim c would be
    served anew (SPEC §10, 4)."""
    def paused_and_unpaused(controller, unpaused, version, listings):
        controller.on_event("MODIFIED", paused(at(unpaused, version + 2), True))
        assert o.cluster_paused(controller.inventory.get(kinds.CLUSTER, NS, "c1"))
        listings.created = True
        controller.on_event("MODIFIED", paused(at(unpaused, version + 5), False))  # resumes again

    allocated, still_paused, inventory = _a_second_resumption_while_the_first_lists(paused_and_unpaused)
    assert allocated == [] and still_paused, (
        f"released by a LIST begun before its last unpause (paused: {still_paused}); "
        f"the reconcile allocates anew: {allocated}")
    assert not o.cluster_paused(inventory.get(kinds.CLUSTER, NS, "c1"))
    assert creates(inventory) == []


def test_a_listing_older_than_the_paused_cluster_does_not_start_the_listing_that_releases_its_next_unpause():
    """The Cluster is paused in the inventory (the watch told, at version P). A resync's LIST of Clusters,
    taken before that pause and filed after it, shows the Cluster unpaused (older than what is filed):
    it is pending all the same, and a LIST of the namespace's addresses goes out. Then clusterctl creates
    c's moved address and unpauses the Cluster (newer than P): pending, it waits on the LIST the stale
    copy started, begun before c's address existed, and is released by it: claim c is served anew
    (SPEC §10, 4)."""
    inventory, unpaused, before, after, version = the_move_there_and_back()
    stored = int(o.meta(inventory.get(kinds.CLUSTER, NS, "c1"))["resourceVersion"])
    stale = paused(at(unpaused, stored - 1), False)
    listings = GatedListings(before, after)
    kicks = WatchedKicks(inventory)

    async def scenario() -> tuple[list[str], bool]:
        controller = Controller(inventory, kicks, writer=None, relist=listings.relist)
        try:
            await controller.settle(at_hand(kinds.CLUSTER, None, [stale], str(stored - 1)))
            assert o.cluster_paused(inventory.get(kinds.CLUSTER, NS, "c1"))
            started = list(controller.resumptions.tasks)
            if started:
                await until(listings.asked[0], "the stale copy's LIST went out")
            listings.created = True
            controller.on_event("MODIFIED", paused(at(unpaused, version + 5), False))
            listings.release[0].set()
            for task in started:
                await until_done(task, "the stale copy's resumption ended", listings)
            return creates(inventory), o.cluster_paused(inventory.get(kinds.CLUSTER, NS, "c1"))
        finally:
            listings.release_all()
            await asyncio.gather(*controller.resumptions.tasks)

    allocated, still_paused = asyncio.run(scenario())
    assert allocated == [] and still_paused, (
        f"the Cluster's unpause was released by a LIST begun before it (paused: {still_paused}); "
        f"the reconcile allocates anew: {allocated}")
    assert not o.cluster_paused(inventory.get(kinds.CLUSTER, NS, "c1"))
    assert creates(inventory) == []


def test_a_listing_refused_once_is_not_taken_for_the_addresses_listed_again():
    """Cluster c1 resumes; the LIST of its namespace's addresses is refused once (an API server busy
    with the move's creations answers 429, or restarts), and would go through if asked again. The
    Cluster is released at once, unpaused, with c's moved address not listed: the reconcile looks at
    claim c with its Cluster unpaused and serves it anew (SPEC §10, 4). A Cluster need not be pending
    for good when its LIST never goes through, but one refusal is not that."""
    inventory, unpaused, _, after, version = the_move_there_and_back()
    kicks = WatchedKicks(inventory)
    asked: list[str] = []

    def relist(namespace: str) -> list[Listing]:
        asked.append(namespace)
        if len(asked) == 1:
            def refused(token):
                raise OSError("503 Service Unavailable: the API server is restarting")
            return [Listing(kinds.IPADDRESS, namespace, refused)]
        return [after]

    async def scenario() -> None:
        controller = Controller(inventory, kicks, writer=None, relist=relist)
        controller.on_event("MODIFIED", copy.deepcopy(unpaused))
        loop = asyncio.get_running_loop()
        deadline = loop.time() + DEADLINE
        while o.cluster_paused(inventory.get(kinds.CLUSTER, NS, "c1")):
            assert loop.time() < deadline, f"the Cluster was never released ({len(asked)} LIST(s))"
            await asyncio.sleep(0.01)
        await asyncio.gather(*controller.resumptions.tasks)

    asyncio.run(scenario())
    allocated = [names for names in kicks.created if names]
    assert not allocated and creates(inventory) == [], (
        f"released after one refused LIST ({len(asked)} LIST(s) in all), the reconcile allocates anew: "
        f"{allocated or creates(inventory)}")
