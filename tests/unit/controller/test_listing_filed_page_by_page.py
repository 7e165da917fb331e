"""Orders of events around a LIST filed page by page (``Controller.settle``) that break an invariant.

A listing is filed like watch events, page by page as the pages come, with the
event loop running in between (watch events, pool passes, Clusters resuming).
The cases here play such orders into the controller's own inventory and ask the
reconcile, or the collector, what happens.
"""

from __future__ import annotations

import asyncio
import copy
import gc
import threading
import weakref

import pytest

from metal3_ipam.controller.freezing import FREEZE_EVERY, Freezer
from metal3_ipam.controller.operator import PAGE, Controller, Listing
from metal3_ipam.core import kinds
from metal3_ipam.core import objects as o
from metal3_ipam.core.inventory import Inventory
from metal3_ipam.testing.listing import answers, at_hand, served

from garbage import tracked_per_object, within_two_freezes
from listing_pages import address, listing
from resuming import DEADLINE, NS, Kicks, WatchedKicks, creates, moved_state


def _cluster_listing(cluster: dict) -> Listing:
    """The Clusters of the namespace as a LIST (the resync's, or the start-up's) sees them."""
    return at_hand(kinds.CLUSTER, None, [copy.deepcopy(cluster)], o.meta(cluster)["resourceVersion"])


# --- a Cluster listed unpaused after a clusterctl move -----------------------------------------


def test_a_cluster_listed_unpaused_after_a_move_is_not_served_before_its_addresses_are_listed_again():
    """clusterctl move: the Cluster is created paused (the watch told), its addresses are created and
    the Cluster unpaused right after; the watch of addresses lags (one moved address not filed yet).
    The resync lists Clusters last of all kinds, the start-up too: the Cluster's LIST shows it
    unpaused before kopf's watch event does. Filed as a watch event it would be held until the
    namespace's addresses were listed again (``resuming.Resumptions``); filed by the listing, the
    lagging claim must not be served a new address either (SPEC §10, 4: every claim keeps its exact
    address after a move, nothing allocated anew)."""
    inventory, unpaused, addresses = moved_state()
    relisted: list[str] = []

    def relist(namespace: str) -> list[Listing]:
        relisted.append(namespace)
        return [addresses]

    kicks = WatchedKicks(inventory)

    async def scenario() -> None:
        controller = Controller(inventory, kicks, writer=None, relist=relist)
        await controller.settle(_cluster_listing(unpaused))
        assert creates(inventory) == [], \
            f"right after the Clusters' LIST, the reconcile allocates anew: {creates(inventory)}"
        await asyncio.gather(*controller.resumptions.tasks)
        # kopf's watch event of the unpause, after the listing.
        controller.on_event("MODIFIED", copy.deepcopy(unpaused))
        await asyncio.gather(*controller.resumptions.tasks)

    asyncio.run(scenario())
    allocated = [names for names in kicks.created if names]
    assert not allocated, f"pools kicked while a pass would allocate anew for a moved claim: {allocated}"
    assert not o.cluster_paused(inventory.get(kinds.CLUSTER, NS, "c1"))
    assert creates(inventory) == []


def test_a_resync_listing_clusters_does_not_unhold_a_cluster_waiting_for_its_addresses():
    """The Cluster's unpause came by the watch first: it is held (paused in the inventory) while the
    namespace's addresses are listed again; that LIST is slow (a page on its way). The resync's LIST
    of Clusters, meanwhile, shows the Cluster unpaused: filed as it is, it unpauses the Cluster in the
    inventory before the moved addresses are in, and the lagging claim is served anew (SPEC §10, 4)."""
    inventory, unpaused, addresses = moved_state()
    release = threading.Event()
    asked = threading.Event()

    def held(token):
        asked.set()
        if not release.wait(DEADLINE):
            raise TimeoutError("the addresses' page was never released")
        return addresses.fetch(token)

    def relist(namespace: str) -> list[Listing]:
        return [Listing(kinds.IPADDRESS, namespace, held)]

    kicks = WatchedKicks(inventory)

    async def scenario() -> None:
        controller = Controller(inventory, kicks, writer=None, relist=relist)
        controller.on_event("MODIFIED", copy.deepcopy(unpaused))  # kopf's event: held
        loop = asyncio.get_running_loop()
        deadline = loop.time() + DEADLINE
        while not asked.is_set():  # the addresses' LIST is on its way
            assert loop.time() < deadline, "the addresses were never listed again"
            await asyncio.sleep(0.01)
        assert o.cluster_paused(inventory.get(kinds.CLUSTER, NS, "c1"))
        try:
            await controller.settle(_cluster_listing(unpaused))  # the resync's LIST of Clusters
            during = creates(inventory)
        finally:
            release.set()
        await asyncio.gather(*controller.resumptions.tasks)
        assert during == [], f"while the moved addresses were being listed, the reconcile allocates anew: {during}"

    asyncio.run(scenario())
    allocated = [names for names in kicks.created if names]
    assert not allocated, f"pools kicked while a pass would allocate anew for a moved claim: {allocated}"
    assert creates(inventory) == []


# --- the collector while a page is on its way ------------------------------------------------


def _news(i: int) -> dict:
    """A new address told by a watch (a burst of claims served elsewhere, another kind's watch)."""
    return address(f"n{i}", 2 * 10**6 + i, ip=f"10.{100 + i // 62500}.{i // 250 % 250}.{i % 250 + 1}")


class HeldPage:
    """A LIST of two pages whose second is held on its way (``release``) while the watches file
    ``events`` new addresses through the controller; then it comes, or fails with ``failure``."""

    def __init__(self, events: int, failure: Exception | None = None) -> None:
        self.inventory = Inventory()
        self.freezer = Freezer(lambda: self.inventory.filed)
        workers = WatchedKicks(self.inventory, self.freezer)
        workers.kick = lambda pools: None  # (no reconcile here: the collector is the case)
        self.controller = Controller(self.inventory, workers, writer=None)
        self.pages = served(kinds.IPADDRESS, kinds.METAL3_API_VERSION,
                            answers(listing(2 * PAGE, 10**6), "1000000"))
        self.events = events
        self.failure = failure
        self.release = threading.Event()

    def fetch(self, token):
        if token is not None:
            if not self.release.wait(DEADLINE):
                raise TimeoutError("the second page was never released")
            if self.failure is not None:  # a new one, as a request's failure is (this one keeps no traceback)
                raise type(self.failure)(*self.failure.args)
        return self.pages.fetch(token)

    async def run(self, first_page_in=lambda: None) -> str | None:
        """The listing settled (its version, or its failure raised), the watch events filed meanwhile."""
        settling = asyncio.get_running_loop().create_task(
            self.controller.settle(Listing(kinds.IPADDRESS, None, self.fetch)))
        loop = asyncio.get_running_loop()
        deadline = loop.time() + DEADLINE
        while len(self.inventory.objects) < PAGE:  # the first page filed; the second on its way
            assert loop.time() < deadline, "the first page was never filed"
            await asyncio.sleep(0.01)
        first_page_in()
        try:
            for i in range(self.events):  # the watches, meanwhile
                self.controller.on_event("ADDED", _news(i))
                if i % 50 == 0:
                    await asyncio.sleep(0)
        finally:
            self.release.set()
        try:
            return await settling
        finally:
            settling = None  # (a failure's traceback holds this frame: no cycle of the case's own through the task)


def test_watch_events_filed_while_a_page_is_on_its_way_are_not_walked_at_once(collector, walked):
    """Automatic collection is paused from a listing's first fetch to its end, and while paused,
    freezes come only between the listing's slices: none while a page is on its way. A LIST page can
    take long to come (the API server's flow control queues LISTs, a slow link, a resync's LIST while
    a relist runs); the watches go on filing meanwhile, and what they file is neither collected nor
    frozen until the page is in. Filed without a listing under way, a freeze would come every
    FREEZE_EVERY objects (``maybe_freeze``). The promise: no full collection walks much more than
    FREEZE_EVERY objects' worth, so the event loop is never held long."""
    events = 4 * FREEZE_EVERY
    held = HeldPage(events)
    per_object = tracked_per_object([_news(0)])

    assert asyncio.run(held.run(first_page_in=walked.clear)) == "1000000"
    assert len(held.inventory.objects) == 2 * PAGE + events
    within_two_freezes(walked, per_object, f"the {events} filed while a page was on its way")


def test_watch_events_filed_with_no_listing_under_way_are_frozen_as_they_come(collector, walked):
    """The same burst of watch events, no listing under way: frozen every FREEZE_EVERY objects
    (``maybe_freeze``), no full collection walks much more than that."""
    inventory = Inventory()
    freezer = Freezer(lambda: inventory.filed)
    kicks = WatchedKicks(inventory, freezer)
    kicks.kick = lambda pools: None
    events = 4 * FREEZE_EVERY
    per_object = tracked_per_object([_news(0)])

    async def scenario() -> None:
        controller = Controller(inventory, kicks, writer=None)
        walked.clear()
        for i in range(events):
            controller.on_event("ADDED", _news(i))
            if i % 50 == 0:
                await asyncio.sleep(0)

    asyncio.run(scenario())
    assert len(walked) >= 3, f"{len(walked)} full collections while {events} objects were filed"
    within_two_freezes(walked, per_object, f"the {events} filed")


def test_a_listing_whose_page_fails_keeps_nothing_it_listed_once_its_failure_is_handled(collector):
    """A page of a LIST fails (the connection reset, the API server restarted, the continue token
    expired): the resync logs it and goes on, a watch lists again later. The failure leaves a cycle
    of the listing's own (the prefetch task holds the exception, whose traceback holds the frames
    that hold the task), and through those frames what the listing filed so far: the keys it saw
    (up to a whole LIST's), the last page. The pause the listing began ends while that exception is
    on its way up, with a freeze when one is due (here: watch events filed while the failing page was
    on its way). Frozen then, the listing is never freed: every failed listing could keep a LIST's
    worth of memory for good. Once the failure is handled, nothing of the listing may stay."""
    held = HeldPage(FREEZE_EVERY, failure=ConnectionResetError("connection reset by peer"))
    filings: list[weakref.ref] = []
    real_listing = held.inventory.listing

    def filing(kind, namespace):  # (the Listed the controller files with, watched)
        made = real_listing(kind, namespace)
        filings.append(weakref.ref(made))
        return made

    held.inventory.listing = filing

    async def scenario() -> None:
        try:  # as the resync does
            await held.run()
        except OSError:
            pass
        else:
            raise AssertionError("the failed page did not fail the listing")

    asyncio.run(scenario())
    assert len(filings) == 1
    gc.collect()
    assert filings[0]() is None, \
        "the failed listing (the keys it saw, its last page) is still alive after a full collection: frozen"


# --- what a listing proves gone: only once every page is in ------------------------------------


def _stale_and_listed() -> tuple[Inventory, Listing]:
    """Addresses a0..a4 stored, and "gone" (deleted while no watch told, older than the LIST); the LIST
    holds a0..a4, two a page."""
    inventory = Inventory()
    items = [address(f"a{i}", 900 + i, ip=f"10.0.0.{i + 1}") for i in range(5)]
    for item in items:
        inventory.upsert(copy.deepcopy(item))
    inventory.upsert(address("gone", 800, ip="10.0.0.99"))
    return inventory, at_hand(kinds.IPADDRESS, None, items, "1000", page=2)


def test_a_listing_whose_last_page_fails_proves_nothing_gone():
    """A LIST failing at its last page (the continue token expired): the pages before it are filed,
    nothing the LIST did not get to is proved gone, and the failure reaches the caller (the watch
    lists again, the resync logs it)."""
    inventory, good = _stale_and_listed()
    fetched: list[str | None] = []

    def fetch(token):
        fetched.append(token)
        if token == "4":
            raise ConnectionResetError("connection reset by peer")
        return good.fetch(token)

    async def scenario() -> None:
        with pytest.raises(ConnectionResetError):
            await Controller(inventory, Kicks(), writer=None).settle(Listing(kinds.IPADDRESS, None, fetch))

    asyncio.run(scenario())
    assert fetched == [None, "2", "4"]
    assert inventory.get(kinds.IPADDRESS, "ns", "gone") is not None
    assert inventory.get(kinds.IPADDRESS, "ns", "a4") is not None


def test_an_empty_listing_proves_everything_older_gone_and_the_watch_goes_on_from_its_version():
    """An empty LIST (every address deleted while no watch told): everything stored of the kind no newer
    than the LIST goes, what a watch told since (newer) stays, and its version is where the watch goes on."""
    inventory, _ = _stale_and_listed()
    inventory.upsert(address("newer", 1001, ip="10.0.0.50"))
    kicks = Kicks()

    async def scenario() -> str | None:
        return await Controller(inventory, kicks, writer=None).settle(at_hand(kinds.IPADDRESS, None, [], "1000"))

    assert asyncio.run(scenario()) == "1000"
    assert [key[2] for key in inventory.objects] == ["newer"]
    assert ("ns", "p") in set().union(*kicks.pools)


def test_a_listing_cancelled_while_a_page_is_on_its_way_ends_its_pause_and_leaves_nothing_running():
    """Shutdown, or a watch stopped, cancels a listing while its next page is being fetched (the
    prefetch, in a thread): the collector is on again as it was, no pause is left under way, the
    page that comes late is dropped (nothing filed after the cancellation) and nothing is reported
    as an error nobody retrieved."""
    held = HeldPage(0, failure=ConnectionResetError("connection reset by peer"))
    problems: list[dict] = []
    started, fetched = threading.Event(), threading.Event()
    fetch = held.fetch

    def fetch_and_tell(token):
        if token is not None:
            started.set()
        try:
            return fetch(token)
        finally:
            if token is not None:
                fetched.set()

    held.fetch = fetch_and_tell

    async def scenario() -> None:
        loop = asyncio.get_running_loop()
        loop.set_exception_handler(lambda _, context: problems.append(context))
        settling = loop.create_task(held.controller.settle(Listing(kinds.IPADDRESS, None, held.fetch)))
        deadline = loop.time() + DEADLINE
        while len(held.inventory.objects) < PAGE:
            assert loop.time() < deadline, "the first page was never filed"
            await asyncio.sleep(0.01)
        assert held.freezer.pauses and not gc.isenabled()
        settling.cancel()
        try:
            await settling
        except asyncio.CancelledError:
            pass
        else:
            raise AssertionError("the cancelled listing ended")
        assert held.freezer.pauses == 0 and gc.isenabled()
        filed = held.inventory.filed
        held.release.set()  # the page on its way fails now, after the cancellation
        while started.is_set() and not fetched.is_set():  # (a prefetch cancelled before it ran never starts)
            assert loop.time() < deadline, "the second page's fetch never ended"
            await asyncio.sleep(0.01)
        for _ in range(10):
            await asyncio.sleep(0)
        assert held.inventory.filed == filed
        gc.collect()  # (a task whose exception nobody retrieved says so when it is freed)

    enabled = gc.isenabled()
    gc.enable()
    try:
        asyncio.run(scenario())
        gc.collect()
    finally:
        gc.enable() if enabled else gc.disable()
    assert problems == []
