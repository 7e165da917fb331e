"""Orders of Cluster news in which a Cluster resuming after a move is served before its moved addresses.

A Cluster seen unpaused while the inventory has it paused is pending
(``resuming.Resumptions``) until its namespace's addresses are listed again by a
LIST begun after that unpause. The news of a Cluster comes by two roads that do
not keep step: kopf's watch (which lists again, and skips what changed meanwhile,
whenever its stream is cut or its version is gone) and the controller's own
listings (start-up, resync). The watches of pools, claims and addresses are
streams of their own again. Here such news is played into the controller in
orders those roads allow, and the reconcile is asked, at every kick of a pool,
what a pass would create.
"""

from __future__ import annotations

import asyncio
import contextlib
import copy
from collections.abc import AsyncIterator

import pytest

from metal3_ipam.controller.operator import Controller, Listing
from metal3_ipam.core import kinds
from metal3_ipam.testing.listing import at_hand
from metal3_ipam.core import objects as o
from metal3_ipam.core.inventory import Inventory
from resuming import WatchedKicks
from resuming import GatedListings, at, paused, the_move_there_and_back, until, until_done
from resuming import NS, creates, moved_state
from resuming import moved_without_cluster, cancelled_while_listing


def _clusters_listed(*clusters: dict, version: int) -> Listing:
    """A LIST of Clusters (the resync's, or kopf's own after its stream was cut) taken at ``version``."""
    return at_hand(kinds.CLUSTER, None, [copy.deepcopy(c) for c in clusters], str(version))


@contextlib.asynccontextmanager
async def _released_at_last(controller: Controller, listings: GatedListings) -> AsyncIterator[None]:
    """Whatever the case did, every LIST gated goes at last, and every resumption ends."""
    try:
        yield
    finally:
        listings.release_all()
        await asyncio.gather(*controller.resumptions.tasks)


async def _pending_resumption(controller: Controller, listings: GatedListings, unpaused: dict) -> asyncio.Task:
    """kopf's event of the Cluster's unpause: pending, and its LIST out; the resumption's task."""
    controller.on_event("MODIFIED", copy.deepcopy(unpaused))
    await until(listings.asked[0], "the resumption's LIST went out")
    [task] = list(controller.resumptions.tasks)
    return task


def test_a_pause_and_unpause_seen_only_by_a_listing_while_pending_waits_for_a_listing_begun_after_it():
    """Cluster c1 resumes (generation 3): pending, its namespace's addresses listed again (LIST 0, slow).
    Meanwhile the Cluster is paused (generation 4), claim c's moved address is created, and the Cluster
    is unpaused (generation 5); kopf's events of it lag. A LIST of Clusters (the resync's, or kopf's
    own after its stream was cut) shows only the last state: unpaused, same uid, newer. It is taken for
    the same resumption ("still resuming"), and LIST 0, begun before c's address existed, releases it:
    claim c is served anew (SPEC §10, 4). The pause in between is told by the generation, which only a
    change of spec moves."""
    inventory, unpaused, before, after, version = the_move_there_and_back()
    first_unpause = at(unpaused, version, generation=3)
    paused_again = paused(at(unpaused, version + 2, generation=4), True)
    unpaused_again = paused(at(unpaused, version + 5, generation=5), False)
    listings = GatedListings(before, after)
    kicks = WatchedKicks(inventory)

    async def scenario() -> tuple[list[str], bool]:
        controller = Controller(inventory, kicks, writer=None, relist=listings.relist)
        async with _released_at_last(controller, listings):
            first = await _pending_resumption(controller, listings, first_unpause)
            listings.created = True  # paused again, c's moved address created, unpaused again
            await controller.settle(_clusters_listed(unpaused_again, version=version + 6))
            listings.release[0].set()  # LIST 0 ends; any LIST begun since is still on its way
            await until_done(first, "the first resumption ended", listings)
            result = creates(inventory), o.cluster_paused(inventory.get(kinds.CLUSTER, NS, "c1"))
            # kopf's lagging events come at last.
            controller.on_event("MODIFIED", copy.deepcopy(paused_again))
            controller.on_event("MODIFIED", copy.deepcopy(unpaused_again))
            return result

    allocated, still_paused = asyncio.run(scenario())
    assert allocated == [] and still_paused, (
        f"released by a LIST begun before its last unpause, seen in a listing (paused: {still_paused}); "
        f"the reconcile allocates anew: {allocated}")
    _resumed_with_every_address(inventory, kicks)


def _resumed_with_every_address(inventory: Inventory, kicks: WatchedKicks) -> None:
    """In the end: the Cluster runs, no pass would create an address, and none would have at any kick."""
    assert not o.cluster_paused(inventory.get(kinds.CLUSTER, NS, "c1"))
    assert creates(inventory) == [] and not [names for names in kicks.created if names]


def test_the_deletion_of_the_cluster_moved_away_does_not_end_the_resumption_of_the_one_moved_back():
    """Cluster c1 (uid1) was moved away: paused (filed), then deleted; kopf's DELETED lags. It is moved
    back: created paused anew (uid2), its addresses created, unpaused. A LIST of Clusters shows uid2
    unpaused while uid1 is paused in the inventory: uid2 is pending, and its namespace's addresses are
    listed again (begun after its unpause). Then kopf's DELETED of uid1 comes (older than uid2's
    unpause): ``forget`` ends whatever is pending under the name, the resumption of uid2 included, though
    uid2 is not what was deleted. The LIST ends and uid2 is not filed: the claims are left with no
    Cluster known until kopf's stream brings uid2 again (and with none, a pass serves them: see the
    case above)."""
    inventory, unpaused, before, after, version = the_move_there_and_back()
    old = inventory.get(kinds.CLUSTER, NS, "c1")
    moved_back = paused(at(unpaused, version + 5, uid="c1-again"), False)
    listings = GatedListings(before, after)
    listings.created = True  # uid2's addresses exist before it is unpaused
    kicks = WatchedKicks(inventory)

    async def scenario() -> dict | None:
        controller = Controller(inventory, kicks, writer=None, relist=listings.relist)
        async with _released_at_last(controller, listings):
            await controller.settle(_clusters_listed(moved_back, version=version + 6))
            await until(listings.asked[0], "uid2's LIST went out")
            [resumption] = list(controller.resumptions.tasks)
            controller.on_event("DELETED", at(old, version + 1))  # uid1's deletion, late
            listings.release[0].set()
            await until_done(resumption, "uid2's resumption ended", listings)
            return copy.deepcopy(inventory.get(kinds.CLUSTER, NS, "c1"))

    filed = asyncio.run(scenario())
    assert filed is not None and o.meta(filed).get("uid") == "c1-again" and not o.cluster_paused(filed), (
        f"uid2's own LIST ended and it was not filed (the Cluster stored: {filed and o.meta(filed)})")
    assert creates(inventory) == []


def test_a_listing_failing_with_anything_is_tried_again_until_it_goes_through_and_only_then_is_the_cluster_filed():
    """Not only refusals (OSError, ApiException): a page that cannot be read (a ValueError from its
    decoding) fails the LIST as well. It is tried again, with a pause that grows to a bound, for as
    long as it fails: the Cluster stays paused here meanwhile (filed without the listing, a claim whose
    moved address has not come would get another IP: SPEC §10, 2 and 4), and is filed once it goes through."""
    inventory, unpaused, listing = moved_state()
    asked: list[str] = []
    failures = 5

    def unreadable(token):
        raise ValueError("the page is not JSON")

    def relist(namespace: str) -> list[Listing]:
        asked.append(namespace)
        if len(asked) <= failures:
            return [Listing(kinds.IPADDRESS, namespace, unreadable)]
        return [listing]

    async def scenario() -> None:
        controller = Controller(inventory, WatchedKicks(inventory), writer=None, relist=relist)
        controller.resumptions.pause = 0.001
        controller.on_event("MODIFIED", copy.deepcopy(unpaused))
        deadline = asyncio.get_running_loop().time() + 10
        while len(asked) < failures:
            assert asyncio.get_running_loop().time() < deadline and controller.resumptions.tasks, (
                f"tried {len(asked)} times, then given up")
            await asyncio.sleep(0.001)
        assert o.cluster_paused(inventory.get(kinds.CLUSTER, NS, "c1")), "filed while its listing failed"
        await asyncio.gather(*controller.resumptions.tasks)

    asyncio.run(scenario())
    assert asked == [NS] * (failures + 1)
    assert not o.cluster_paused(inventory.get(kinds.CLUSTER, NS, "c1"))
    assert creates(inventory) == []


def test_a_resumption_cancelled_leaves_nothing_pending():
    """A Cluster's resumption is cancelled while its LIST is under way (the controller stops). What it
    pending goes with it, so a later event of the Cluster starts a resumption of its own rather than being
    taken for news of one that will never end (the Cluster then never filed)."""
    inventory, unpaused, before, after, version = the_move_there_and_back()
    listings = GatedListings(before, after)
    listings.created = True

    async def scenario() -> None:
        controller = Controller(inventory, WatchedKicks(inventory), writer=None, relist=listings.relist)
        try:
            await cancelled_while_listing(controller, listings, unpaused)
            controller.on_event("MODIFIED", at(unpaused, version + 30))
            assert controller.resumptions.tasks, "the later event was taken for news of the cancelled resumption"
            listings.release[1].set()
            await asyncio.gather(*controller.resumptions.tasks)
        finally:
            listings.release_all()

    asyncio.run(scenario())
    assert not o.cluster_paused(inventory.get(kinds.CLUSTER, NS, "c1"))
    assert creates(inventory) == []


@pytest.mark.parametrize("cluster_name", [None, "c1"], ids=["shared pool", "pool of the Cluster"])
def test_claims_of_a_moved_cluster_not_seen_yet_are_not_served_before_their_addresses(cluster_name):
    """clusterctl move creates the Cluster paused first, then its pool, its claims, and the claims'
    addresses after them (owners first), and unpauses the Cluster last. The Cluster comes by kopf's
    watch, the rest by streams of their own: when kopf's lags (its stream cut and listed again, a
    backlog), the pool and the claims are filed while no Cluster of that name is known. A claim of a
    Cluster not known is given nothing (SPEC §10, 2 and 4): its moved address may be on its way. So
    with a pool shared by Clusters (the claims name c1 by label), and with a pool of c1's own
    (``clusterName``), which the Go IPAM leaves alone while it cannot find its Cluster."""
    others, cluster_paused, moved_addresses, unpaused, listing = moved_without_cluster(cluster_name)
    inventory = Inventory()
    kicks = WatchedKicks(inventory)

    async def scenario() -> None:
        controller = Controller(inventory, kicks, writer=None, relist=lambda namespace: [listing])
        for obj in others:  # the pool, then the claims: their watch is ahead of kopf's
            controller.on_event("ADDED", obj)
        controller.on_event("ADDED", cluster_paused)  # kopf's lagging event
        for address in moved_addresses:
            controller.on_event("ADDED", copy.deepcopy(address))
        controller.on_event("MODIFIED", copy.deepcopy(unpaused))
        await asyncio.gather(*controller.resumptions.tasks)

    asyncio.run(scenario())
    allocated = [names for names in kicks.created if names]
    assert not allocated, (
        f"while the moved Cluster was not known yet, a pass would allocate anew for its claims: {allocated}")
    _resumed_with_every_address(inventory, kicks)


def test_a_moved_cluster_first_seen_unpaused_waits_for_its_addresses_listed_again():
    """kopf folds the events of a short while into one (its batch window), and lists again after its
    stream was cut: the first the controller hears of a moved Cluster may be that it runs, while the
    address watch has not brought its moved addresses yet. Such a Cluster is pending like one seen
    resuming: filed once a LIST of its namespace's addresses, begun after it was seen, is in. Until
    then its claims wait for it, and no pass allocates anew."""
    others, _, moved_addresses, unpaused, listing = moved_without_cluster(None)
    inventory = Inventory()
    kicks = WatchedKicks(inventory)
    listings = GatedListings(at_hand(kinds.IPADDRESS, NS, [], "1"), listing)
    listings.created = True

    async def scenario() -> None:
        controller = Controller(inventory, kicks, writer=None, relist=listings.relist)
        try:
            for obj in others:
                controller.on_event("ADDED", obj)
            controller.on_event("ADDED", copy.deepcopy(unpaused))  # created paused and unpaused, as one event
            assert inventory.get(kinds.CLUSTER, NS, "c1") is None, "filed before its addresses were listed"
            await until(listings.asked[0], "the namespace's addresses listed again")
            kicks.kick({o.PoolKey(NS, "pool1")})
            listings.release[0].set()
            await asyncio.gather(*controller.resumptions.tasks)
        finally:
            listings.release_all()

    asyncio.run(scenario())
    allocated = [names for names in kicks.created if names]
    assert not allocated, f"a pass would allocate anew before the moved addresses were in: {allocated}"
    assert inventory.get(kinds.CLUSTER, NS, "c1") is not None
    assert sorted(o.name(a) for a in inventory.of_kind(kinds.IPADDRESS)) == sorted(o.name(a) for a in moved_addresses)
