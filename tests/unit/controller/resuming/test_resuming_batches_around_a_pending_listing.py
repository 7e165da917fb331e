"""More orders of events in which ``resuming.Resumptions`` files a Cluster it must not, or loses one
it should file.

The lister's LIST of a namespace's addresses is played here by a future the
test completes (``FutureLists``), so that where it ends among the other steps
of the event loop (a resync's LIST of Clusters filed in slices, a kopf event)
is the test's to say, not the machine's.
"""

from __future__ import annotations

import asyncio
import copy

from metal3_ipam.controller.freezing import Freezer
from metal3_ipam.controller.operator import Controller
from metal3_ipam.controller.resuming import Resumptions
from metal3_ipam.core import kinds
from metal3_ipam.core import objects as o
from metal3_ipam.core.inventory import SETTLE_STEP, Inventory
from metal3_ipam.testing.listing import at_hand
from resuming import WatchedKicks
from resuming import at, paused
from resuming import moved_without_cluster
from resuming import NS, creates

SHORT = 5.0


class FutureLists:
    """A lister's LISTs of a namespace's addresses: each waits for the test to end it (``end``)."""

    def __init__(self) -> None:
        self.pending: list[asyncio.Future] = []
        self.asked = 0

    async def relist(self, namespace: str) -> None:
        future = asyncio.get_running_loop().create_future()
        self.pending.append(future)
        self.asked += 1
        await future

    def end_all(self) -> None:
        while self.pending:
            future = self.pending.pop(0)
            if not future.done():
                future.set_result(None)


async def _eventually(check, timeout: float = SHORT, lists: FutureLists | None = None) -> bool:
    """Whether ``check()`` holds within ``timeout`` (polled; with ``lists``, every LIST asked meanwhile ends)."""
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout
    while not check():
        if loop.time() >= deadline:
            return False
        if lists is not None:
            lists.end_all()
        await asyncio.sleep(0.01)
    return True


def _the_moved_back_claims_served(controller: Controller, kicks: WatchedKicks) -> list[list[str]]:
    """c1 moved back here as a Cluster made anew: its pool and claims come by their streams, claim c's
    moved address lags, and so does kopf's event of the new c1. What a pass would create meanwhile."""
    others, _, moved_addresses, _, _ = moved_without_cluster(None)
    lagging = next(a for a in moved_addresses if o.spec(a)["claim"]["name"] == "c")
    for obj in others:
        controller.on_event("ADDED", copy.deepcopy(obj))
    for address in moved_addresses:
        if address is not lagging:
            controller.on_event("ADDED", copy.deepcopy(address))
    return [names for names in kicks.created if names]


# --- a pending Cluster proved gone, then told again by a lagging kopf --------------------------------


def test_a_pending_cluster_proved_gone_by_a_listing_of_clusters_is_not_filed_by_a_later_copy_older_than_it():
    """Cluster c1 (uid c1-old) is first seen running at version V: pending, its namespace's addresses
    listed again (slow). c1-old is deleted at V+2; the resync's LIST of Clusters, taken at V+3, does
    not hold c1 and proves it gone: ``Resumptions.listed`` ends its resumption. Then kopf, whose stream
    lags (its own relist, taken at V+1 before the deletion, is handed over only now; its stream is cut
    before the DELETED is read, and the next relist tells no deletion), tells c1-old at V again.

    A Cluster *filed* running and proved gone the same way leaves a tombstone at V+3: that late copy
    would be dropped. A pending one leaves nothing: the late copy, older than the LIST that proved it gone,
    is pending anew, and the lister files c1-old running once its LIST ends. c1 is then moved back (uid
    c1-new): its claims come while c1-new's event and claim c's moved address lag, and claim c is
    served anew under the dead c1-old (SPEC §10, 2 and 4)."""
    _, _, _, unpaused, _ = moved_without_cluster(None)
    version = int(o.meta(unpaused)["resourceVersion"])
    old = paused(at(unpaused, version, uid="c1-old"), False)
    inventory = Inventory()
    kicks = WatchedKicks(inventory)
    lists = FutureLists()

    async def then(controller: Controller) -> None:
        assert not controller.resumptions._pending, "the LIST of Clusters did not end c1-old's resumption"
        controller.on_event("MODIFIED", copy.deepcopy(old))  # kopf's late copy, older than that LIST
        lists.end_all()
        await _eventually(lambda: not controller.resumptions.tasks, lists=lists)

    filed, allocated = _pending_then_proved_gone(inventory, kicks, lists, old, version, then)
    assert filed is None and not allocated, (
        f"c1-old, proved gone by a LIST of Clusters at {version + 3}, was filed running from a copy at "
        f"{version} told after that LIST ({filed and o.meta(filed)}); c1's claims moved back are served "
        f"anew before their addresses: {allocated}")
    assert creates(inventory) == []


def _pending_then_proved_gone(inventory: Inventory, kicks: WatchedKicks, lists: "FutureLists", old: dict,
                           version: int, then) -> tuple[dict | None, list]:
    """c1-old seen running: pending, its LIST out; a LIST of Clusters at ``version + 3`` without it; then
    ``then(controller)``. Returns c1 as filed, and what a pass would create for c1 moved back."""
    async def scenario() -> tuple[dict | None, list]:
        controller = Controller(inventory, kicks, writer=None, relist=lambda namespace: [])
        controller.resumptions.relist = lists.relist
        try:
            controller.on_event("MODIFIED", copy.deepcopy(old))  # pending: not filed
            assert await _eventually(lambda: lists.asked == 1), "c1-old's LIST never went out"
            await controller.settle(at_hand(kinds.CLUSTER, None, [], str(version + 3)))  # proves it gone
            await then(controller)
            filed = copy.deepcopy(inventory.get(kinds.CLUSTER, NS, "c1"))
            return filed, _the_moved_back_claims_served(controller, kicks)
        finally:
            lists.end_all()
            await asyncio.gather(*controller.resumptions.tasks, return_exceptions=True)

    return asyncio.run(scenario())


# --- a lister files a Cluster while the LIST of Clusters that proves it gone is being closed ----------


class _TripOnSlice(Freezer):
    """The controller's freezer, which also calls ``hook`` at every slice of a filing (where
    ``file_in_steps`` lets the event loop run)."""

    def __init__(self, hook) -> None:
        super().__init__(every=10**9)
        self.hook = hook

    def between_slices(self) -> None:
        self.hook()
        super().between_slices()


def _padding(count: int) -> list[dict]:
    """Claims of another namespace: a big inventory (``Listed.finish`` of a LIST of Clusters looks every
    stored key over, and lets the loop run every few thousand)."""
    return [{"apiVersion": f"{kinds.METAL3_GROUP}/{kinds.METAL3_VERSION}", "kind": kinds.IPCLAIM[1],
             "metadata": {"name": f"p{n}", "namespace": "elsewhere", "uid": f"p{n}", "resourceVersion": "1"},
             "spec": {"pool": {"name": "other"}}} for n in range(count)]


def test_a_cluster_its_lister_files_while_a_listing_of_clusters_proving_it_gone_is_closed_does_not_stay_filed():
    """Cluster c1 (uid c1-old) is first seen running at version V: pending, its addresses listed again.
    It is deleted at V+2 (the DELETED lost with kopf's stream), and the resync's LIST of Clusters, taken
    at V+3, does not hold c1. The inventory holds some thousands of objects, so ``Listed.finish`` lets
    the event loop run while it looks them over; the lister's LIST ends right then, and the lister
    files c1-old, running. ``finish`` looks over the keys stored when it began, not c1's; and
    ``Resumptions.listed``, called after it, finds c1 no longer pending. c1-old stays filed running,
    though the LIST proved it gone (until the next resync): c1 moved back as c1-new has its claims
    served under it, claim c anew while its moved address lags (SPEC §10, 2 and 4)."""
    _, _, _, unpaused, _ = moved_without_cluster(None)
    version = int(o.meta(unpaused)["resourceVersion"])
    old = paused(at(unpaused, version, uid="c1-old"), False)
    inventory = Inventory()
    for obj in _padding(SETTLE_STEP * 20 + 100):
        inventory.upsert(obj)
    lists = FutureLists()
    tripped: list[int] = []

    def trip() -> None:
        tripped.append(len(lists.pending))
        lists.end_all()  # the lister's LIST ends while the LIST of Clusters is being closed

    kicks = WatchedKicks(inventory, freezer=_TripOnSlice(trip))

    async def then(controller: Controller) -> None:
        assert tripped and tripped[0] == 1, f"the LIST of Clusters was closed in one go: {tripped}"

    filed, allocated = _pending_then_proved_gone(inventory, kicks, lists, old, version, then)
    assert filed is None and not allocated, (
        f"c1-old, proved gone by a LIST of Clusters at {version + 3}, stays filed running "
        f"({filed and o.meta(filed)}): its lister filed it while that LIST was being closed; c1's claims "
        f"moved back are served anew before their addresses: {allocated}")


# --- a Cluster pending between its namespace's lister's end and the lister's done callback -----------


def _running(name: str, version: int) -> dict:
    return {"apiVersion": "cluster.x-k8s.io/v1beta2", "kind": "Cluster",
            "metadata": {"name": name, "namespace": NS, "uid": f"{name}-uid", "resourceVersion": str(version),
                         "generation": 2},
            "spec": {"paused": False}}


def test_a_cluster_pending_after_its_namespace_lister_returned_but_before_it_was_called_ended_is_filed():
    """Cluster c1 resumes: pending, listed for, filed; its namespace's lister then finds nothing more
    waiting and returns. A task's done callbacks run at a later turn of the event loop, not when it
    returns: until ``_lister_ended`` runs, the lister is still named the namespace's, done but not
    being cancelled. Cluster c2 of that namespace is seen running in that window (another task's step
    queued behind the lister's last one: a kopf handler, a slice of a resync): ``park`` queues it for
    the done lister and starts none. ``_lister_ended`` then takes what waits as its own and drops it:
    c2 is neither filed, nor pending, nor listed for. Its claims wait (Ready=False WaitingForCluster)
    until kopf tells c2 again or the resync lists Clusters, while the API server answers everything.

    ``gather`` is 0 here, so that the window is one turn of the loop the test can name; with the
    default the lister returns after a timer, and any step queued behind it falls in the same window."""
    inventory = Inventory()
    lists = FutureLists()
    resumptions = Resumptions(inventory, lists.relist, inventory.upsert, inventory.remove, pause=0.0, gather=0.0)

    async def scenario() -> tuple[bool, dict]:
        try:
            assert resumptions.pending(_running("c1", 10))
            assert await _eventually(lambda: lists.asked == 1), "c1's LIST never went out"
            lists.end_all()  # the lister is woken at the next turn
            await asyncio.sleep(0)  # the lister files c1, then yields (gather 0): queued ahead of this task
            await asyncio.sleep(0)  # the lister finds nothing waiting and returns; its done callback is queued
            assert inventory.get(kinds.CLUSTER, NS, "c1") is not None, "c1 was not filed by its LIST"
            assert resumptions.pending(_running("c2", 12)), "c2, seen running and not filed, was not pending"
            filed = await _eventually(lambda: inventory.get(kinds.CLUSTER, NS, "c2") is not None, lists=lists)
            state = {"pending": list(resumptions._pending), "waiting": dict(resumptions._waiting),
                     "listers": list(resumptions._listers), "LISTs": lists.asked}
            return filed, state
        finally:
            lists.end_all()
            for task in list(resumptions.tasks):
                task.cancel()
            await asyncio.gather(*resumptions.tasks, return_exceptions=True)

    filed, state = asyncio.run(scenario())
    assert filed, (f"c2, pending while its namespace's lister had returned but was not yet called ended, "
                   f"was dropped with it: neither filed nor listed for ({state})")
