"""Orders of events in which a namespace's lister of resumptions (``resuming.Resumptions``) files a
Cluster it must not, or never files one it should.

A Cluster seen running that is filed paused, not filed, or filed under another
uid is pending until a LIST of its namespace's addresses, begun after it was seen,
is in; one lister per namespace gathers the Clusters pending for a moment, lists,
files those still pending, and goes on while more wait. Here Cluster news (kopf's
events, the resync's LIST of Clusters), the lister's LISTs (gated until
released) and cancellations are played into the controller in orders the
streams allow, and the reconcile is asked what a pass would create.
"""

from __future__ import annotations

import asyncio
import copy

from metal3_ipam.controller.operator import Controller
from metal3_ipam.core import kinds
from metal3_ipam.core import objects as o
from metal3_ipam.core.inventory import Inventory
from metal3_ipam.testing.listing import at_hand
from resuming import WatchedKicks
from resuming import GatedListings, at, paused, the_move_there_and_back, until, until_done
from resuming import moved_without_cluster, cancelled_while_listing
from resuming import NS, creates
import hypothesis.strategies as st
from hypothesis import HealthCheck, settings
from hypothesis.stateful import RuleBasedStateMachine, initialize, invariant, precondition, rule
from metal3_ipam.controller.resuming import Resumptions

# How long a test waits for what a working lister does in milliseconds (the machine is shared).
SHORT = 5.0


async def _eventually(check, what: str, timeout: float = SHORT) -> bool:
    """Whether ``check()`` holds within ``timeout`` (polled); never a sleep standing for an order."""
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout
    while not check():
        if loop.time() >= deadline:
            return False
        await asyncio.sleep(0.01)
    return True


# --- a pending Cluster the resync's LIST proves gone ------------------------------------------------


def test_a_pending_cluster_a_later_listing_of_clusters_proves_gone_is_not_filed_by_its_lister():
    """Cluster c1 (uid c1-old) is first seen running: not filed, so pending, and a LIST of its namespace's
    addresses goes out (slow). Meanwhile c1-old is deleted while kopf's stream is cut (kopf lists again
    and tells no deletion it missed), and the resync's LIST of Clusters, taken after the deletion, does
    not hold c1. That LIST drops what it proves gone, but only from what is filed: c1-old is pending, not
    filed, so nothing of it goes and no tombstone is left. The lister's LIST then ends and files c1-old,
    running, a Cluster the API server said a moment ago does not exist (until the next resync, 5
    minutes by default).

    Meanwhile c1 is restored (``clusterctl move`` back, uid c1-new): its pool and claims come by their
    streams, claim c's moved address lags, kopf's event of c1-new lags too. With c1-old filed running,
    claim c is not taken for a claim of a Cluster not known (it would wait): it is served anew, a
    second IP for it once its moved address comes (SPEC §10, 2 and 4)."""
    others, _, moved_addresses, unpaused, _ = moved_without_cluster(None)
    version = int(o.meta(unpaused)["resourceVersion"])
    old = paused(at(unpaused, version, uid="c1-old"), False)
    lagging = next(a for a in moved_addresses if o.spec(a)["claim"]["name"] == "c")
    inventory = Inventory()
    kicks = WatchedKicks(inventory)
    nothing = at_hand(kinds.IPADDRESS, NS, [], str(version + 1))
    listings = GatedListings(nothing, nothing)

    async def scenario() -> dict | None:
        controller = Controller(inventory, kicks, writer=None, relist=listings.relist)
        try:
            controller.on_event(None, copy.deepcopy(old))  # kopf's listing: c1-old, running
            assert inventory.get(kinds.CLUSTER, NS, "c1") is None
            await until(listings.asked[0], "c1-old's LIST went out")
            [lister] = list(controller.resumptions.tasks)
            # c1-old deleted at version + 2, its DELETED lost; the resync lists the Clusters after it.
            await controller.settle(at_hand(kinds.CLUSTER, None, [], str(version + 3)))
            listings.release[0].set()
            await until_done(lister, "c1-old's lister ended", listings)
            filed = copy.deepcopy(inventory.get(kinds.CLUSTER, NS, "c1"))
            # c1 moved back as c1-new: its pool and claims come, claim c's address and c1-new lag.
            for obj in others:
                controller.on_event("ADDED", copy.deepcopy(obj))
            for address in moved_addresses:
                if address is not lagging:
                    controller.on_event("ADDED", copy.deepcopy(address))
            return filed
        finally:
            listings.release_all()
            await asyncio.gather(*controller.resumptions.tasks)

    filed = asyncio.run(scenario())
    allocated = [names for names in kicks.created if names]
    assert filed is None and not allocated, (
        f"c1-old, proved gone by a LIST of Clusters while it was pending, was filed after it "
        f"({filed and o.meta(filed)}); the claims of c1 made anew are served before their addresses: {allocated}")
    assert creates(inventory) == []


# --- a pause and an unpause of a Cluster filed running, seen as one event ---------------------------


def test_a_running_cluster_paused_and_unpaused_between_two_events_waits_for_its_addresses_listed_again():
    """Cluster c1 runs, filed running (generation 1), claim b bound. c1 is restored onto itself
    (``clusterctl move --from-directory`` onto a cluster where c1 exists updates it, as a retried
    move does): paused (generation 2), claim c and its address created, unpaused (generation 3). kopf
    folds the events of its batch window into one (or lists again after its stream was cut): the
    controller sees only c1 running at generation 3, the same uid as filed, running as filed.

    ``Resumptions.pending`` files it at once: "filed running, seen running" is taken for no resumption,
    though the generation says the spec was written twice since (a pause and an unpause fit; the same
    sum ends a resumption while c1 is pending). No LIST of the namespace's addresses: claim c, which its
    watch brings next, is served anew while its address is still on its way (SPEC §10, 2 and 4)."""
    others, _, moved_addresses, unpaused, listing = moved_without_cluster(None)
    version = int(o.meta(unpaused)["resourceVersion"])
    pool = next(obj for obj in others if kinds.kind_of(obj) == kinds.IPPOOL)
    claims = {o.name(c): c for c in others if kinds.kind_of(c) == kinds.IPCLAIM}
    address_of = {o.spec(a)["claim"]["name"]: a for a in moved_addresses}
    inventory = Inventory()
    for obj in (pool, claims["b"], address_of["b"], paused(at(unpaused, version - 5, generation=1), False)):
        inventory.upsert(copy.deepcopy(obj))
    assert creates(inventory) == []
    kicks = WatchedKicks(inventory)
    before = at_hand(kinds.IPADDRESS, NS, [copy.deepcopy(address_of["b"])], str(version - 4))
    listings = GatedListings(before, listing)
    listings.created = True  # c's address exists before c1 is unpaused

    async def scenario() -> int:
        controller = Controller(inventory, kicks, writer=None, relist=listings.relist)
        try:
            controller.on_event("MODIFIED", at(unpaused, version, generation=3))  # the two writes, folded
            controller.on_event("ADDED", copy.deepcopy(claims["c"]))  # claim c; its address lags
            asked = listings.handed
            listings.release_all()
            await asyncio.gather(*controller.resumptions.tasks)
            return asked
        finally:
            listings.release_all()

    asked = asyncio.run(scenario())
    allocated = [names for names in kicks.created if names]
    assert not allocated, (
        f"c1, seen running at generation 3 while filed running at generation 1, was filed without a LIST "
        f"of its addresses ({asked} asked); claim c would be served anew: {allocated}")


# --- a lister cancelled ----------------------------------------------------------------------------


def test_a_lister_cancelled_before_it_first_ran_leaves_nothing_pending_and_its_namespace_listed_again():
    """Cluster c1 resumes: pending, and its namespace's lister is created; it is cancelled before the
    event loop first ran it (cancelled at once, as ``asyncio.run`` and a stopping controller cancel
    what is pending). A coroutine cancelled before its first step never enters its body, so the
    lister's ``finally`` never runs: c1 stays pending under a resumption no one serves, and the namespace
    keeps a lister that is done. Every later event of c1 (running) is taken for news of that resumption,
    and every Cluster pending later in the namespace is queued for a lister that never comes: none is ever
    filed, their claims wait for good while the API server answers every LIST."""
    inventory, unpaused, before, after, version = the_move_there_and_back()
    listings = GatedListings(before, after)
    listings.created = True
    listings.release_all()

    async def scenario() -> tuple[bool, dict]:
        controller = Controller(inventory, WatchedKicks(inventory), writer=None, relist=listings.relist)
        controller.on_event("MODIFIED", copy.deepcopy(unpaused))
        [lister] = list(controller.resumptions.tasks)
        lister.cancel()
        await asyncio.gather(lister, return_exceptions=True)
        controller.on_event("MODIFIED", at(unpaused, version + 30))  # kopf: c1 still runs
        filed = await _eventually(lambda: not o.cluster_paused(inventory.get(kinds.CLUSTER, NS, "c1")),
                                  "c1 filed running")
        state = {"pending": list(controller.resumptions._pending), "listers": list(controller.resumptions._listers),
                 "waiting": dict(controller.resumptions._waiting), "LISTs": listings.handed}
        await asyncio.gather(*controller.resumptions.tasks, return_exceptions=True)
        return filed, state

    filed, state = asyncio.run(scenario())
    assert filed, f"c1 was never filed after its lister was cancelled before it ran: {state}"
    assert creates(inventory) == []


def test_a_cluster_pending_while_its_namespace_lister_is_being_cancelled_is_not_lost():
    """Cluster c1's lister is listing when it is cancelled; before the cancellation reaches it (the
    next turn of the event loop), Cluster c2 of the same namespace is seen running: pending, and queued
    for the namespace's lister, which exists still, so no other is started. The cancelled lister's
    ``finally`` then drops every queued resumption, c2's included: c2 is neither filed, nor pending, nor
    listed for. Nothing brings it back but a later change of c2 or the resync; its claims wait."""
    inventory, unpaused, before, after, version = the_move_there_and_back()
    listings = GatedListings(before, after)
    listings.created = True
    c2 = {"apiVersion": unpaused["apiVersion"], "kind": "Cluster",
          "metadata": {"name": "c2", "namespace": NS, "uid": "c2-uid", "resourceVersion": str(version + 3),
                       "generation": 1},
          "spec": {"paused": False}}

    async def scenario() -> tuple[bool, dict]:
        controller = Controller(inventory, WatchedKicks(inventory), writer=None, relist=listings.relist)
        try:
            # c2 is seen before the cancellation reaches c1's lister.
            await cancelled_while_listing(controller, listings, unpaused,
                                          lambda: controller.on_event("ADDED", copy.deepcopy(c2)))
            listings.release_all()
            known = await _eventually(lambda: inventory.get(kinds.CLUSTER, NS, "c2") is not None
                                      or bool(controller.resumptions.tasks), "c2 filed or listed for")
            state = {"pending": list(controller.resumptions._pending), "LISTs": listings.handed}
            await asyncio.gather(*controller.resumptions.tasks)
            return known or inventory.get(kinds.CLUSTER, NS, "c2") is not None, state
        finally:
            listings.release_all()

    kept, state = asyncio.run(scenario())
    assert kept, f"c2, pending while its namespace's lister was being cancelled, was dropped with it: {state}"


# --- a Cluster whose spec moves while it is pending ---------------------------------------------------


def test_a_running_cluster_whose_spec_moves_by_one_generation_during_each_listing_is_filed_at_last():
    """Cluster c1 resumes (generation 3): pending, its namespace's addresses listed again. During that LIST
    its spec changes once, running still (generation 4: a topology upgrade, a GitOps tool reapplying a
    field that a webhook defaults). One write cannot pause and unpause it: the LIST, begun after the
    unpause, holds every moved address. Yet the change ends the resumption, and the next one waits for a
    LIST of its own, which the next change ends again. A Cluster whose spec moves once per LIST of its
    namespace's addresses (seconds, in a namespace of tens of thousands) is never filed, while the API
    server answers every LIST: its claims wait for good."""
    inventory, unpaused, before, after, version = the_move_there_and_back()
    listings = GatedListings(after, after, most=6)
    listings.created = True
    churns = 4

    async def scenario() -> tuple[int | None, int]:
        controller = Controller(inventory, WatchedKicks(inventory), writer=None, relist=listings.relist)
        try:
            controller.on_event("MODIFIED", at(unpaused, version, generation=3))
            for n in range(churns):
                await until(listings.asked[n], f"LIST {n} went out")
                [lister] = list(controller.resumptions.tasks)
                controller.on_event("MODIFIED", at(unpaused, version + 1 + n, generation=4 + n))
                listings.release[n].set()
                await until_done(lister, f"LIST {n} dealt with", listings, listed=n)
                if not o.cluster_paused(inventory.get(kinds.CLUSTER, NS, "c1")):
                    return n, listings.handed
            return None, listings.handed
        finally:
            listings.release_all()
            await asyncio.gather(*controller.resumptions.tasks)

    filed_after, handed = asyncio.run(scenario())
    assert filed_after is not None, (
        f"c1, its spec moved by one generation (running throughout) during each of {churns} LISTs, "
        f"was filed by none of them ({handed} LISTs asked)")
    assert creates(inventory) == []


# --- a state machine over Cluster news, LISTs and address creations --------------------------------


class ResumingInTheWorld(RuleBasedStateMachine):
    """One namespace, one Cluster name. The API server: c1 created paused (a move), moved addresses
    created while it is paused, unpaused, paused again, its spec changed, deleted, made anew. The
    controller hears of c1 by kopf (the current state, whenever kopf gets to it; a deletion told or
    lost) and by LISTs of Clusters taken at one moment and filed at a later one. The namespace's
    addresses come only by the lister's LISTs (the address watch lags throughout): each LIST holds the
    addresses that exist when it begins, and ends (or fails) when the test says.

    After every step: c1 filed running under uid u at version v means every address created before
    u's last unpause up to v is known (a LIST begun after that unpause is in); a uid that a LIST of
    Clusters, taken after its deletion, showed gone is not filed again. And once kopf told the current
    state and every LIST went through, c1 is filed as it is (nothing pending for good).

    Found by it (the first, which the rest of it then hides): c1 filed running, restored onto itself
    (paused, addresses created, unpaused), seen running again by one folded event, is filed at once."""

    def __init__(self) -> None:
        super().__init__()
        self.loop = asyncio.new_event_loop()
        self.version = 10
        self.cluster: dict | None = None  # the API server's c1
        self.incarnations = 0
        self.addresses: dict[str, int] = {}  # name -> version created
        self.unpauses: dict[str, list[int]] = {}  # uid -> versions of its unpauses
        self.known: set[str] = set()  # addresses the controller listed
        self.lists: list[tuple[asyncio.Future, set[str]]] = []  # LISTs under way, with what each holds
        self.told_deleted: list[dict] = []  # deletions kopf has yet to tell (or lose)
        self.snapshots: list[tuple[list[dict], int]] = []  # LISTs of Clusters taken, not filed yet
        self.deleted_at: dict[str, int] = {}  # uid -> version of its deletion
        self.proved_gone: set[str] = set()  # uids a LIST of Clusters filed since showed deleted
        self.inventory = Inventory()
        self.resumptions = Resumptions(self.inventory, self._relist, self.inventory.upsert,
                                       self.inventory.remove, pause=0.0, gather=0.0)

    def teardown(self) -> None:
        async def stop():
            for task in list(self.resumptions.tasks):
                task.cancel()
            await asyncio.gather(*self.resumptions.tasks, return_exceptions=True)
        self.loop.run_until_complete(stop())
        self.loop.close()

    async def _relist(self, namespace: str) -> None:
        future = asyncio.get_running_loop().create_future()
        self.lists.append((future, set(self.addresses)))
        holds = self.lists[-1][1]
        await future  # raises when the LIST fails
        self.known |= holds

    def _run(self, action=None) -> None:
        async def step():
            if action is not None:
                action()
            for _ in range(8):
                await asyncio.sleep(0)
        self.loop.run_until_complete(step())

    def _tick(self) -> int:
        self.version += 1
        return self.version

    def _write(self, **spec) -> None:
        meta = self.cluster["metadata"]
        self.cluster = {**self.cluster, "spec": {**self.cluster["spec"], **spec},
                        "metadata": {**meta, "resourceVersion": str(self._tick()), "generation": meta["generation"] + 1}}

    @initialize(running=st.booleans())
    def a_cluster_moved_here(self, running):
        """c1 moved here earlier: created paused, and (``running``) unpaused and filed running since."""
        self.create_paused()
        self.kopf_tells_the_cluster()
        if running:
            self.unpause()
            self.everything_settles()

    # -- the API server --------------------------------------------------------

    @precondition(lambda self: self.cluster is None)
    @rule()
    def create_paused(self):
        self.incarnations += 1
        uid = f"uid-{self.incarnations}"
        self.cluster = {"apiVersion": "cluster.x-k8s.io/v1beta2", "kind": "Cluster",
                        "metadata": {"name": "c1", "namespace": NS, "uid": uid,
                                     "resourceVersion": str(self._tick()), "generation": 1},
                        "spec": {"paused": True}}
        self.unpauses[uid] = []

    @precondition(lambda self: self.cluster is not None and o.cluster_paused(self.cluster))
    @rule()
    def create_moved_address(self):
        self.addresses[f"a{len(self.addresses)}"] = self._tick()

    @precondition(lambda self: self.cluster is not None and o.cluster_paused(self.cluster))
    @rule()
    def unpause(self):
        self._write(paused=False)
        self.unpauses[o.meta(self.cluster)["uid"]].append(self.version)

    @precondition(lambda self: self.cluster is not None and not o.cluster_paused(self.cluster))
    @rule()
    def pause(self):
        self._write(paused=True)

    @precondition(lambda self: self.cluster is not None and not o.cluster_paused(self.cluster))
    @rule()
    def change_spec(self):
        self._write(topology="v2")

    @precondition(lambda self: self.cluster is not None)
    @rule()
    def delete(self):
        self.deleted_at[o.meta(self.cluster)["uid"]] = self.version + 1
        self.told_deleted.append({**self.cluster, "metadata": {**self.cluster["metadata"],
                                                              "resourceVersion": str(self._tick())}})
        self.cluster = None

    @precondition(lambda self: self.cluster is not None)
    @rule(count=st.integers(1, 2))
    def restored_onto_itself(self, count):
        """clusterctl restores c1 onto itself (its objects updated where they exist): paused, its moved
        addresses created, unpaused."""
        if not o.cluster_paused(self.cluster):
            self.pause()
        for _ in range(count):
            self.create_moved_address()
        self.unpause()

    @rule(count=st.integers(1, 2))
    def moved_back(self, count):
        """c1 (if any) deleted, and moved back: created paused anew, its moved addresses created, unpaused."""
        if self.cluster is not None:
            self.delete()
        self.create_paused()
        self.restored_onto_itself(count)

    # -- what the controller hears ----------------------------------------------

    @precondition(lambda self: self.cluster is not None)
    @rule()
    def kopf_tells_the_cluster(self):
        obj = copy.deepcopy(self.cluster)
        self._run(lambda: self.resumptions.pending(obj) or self.inventory.upsert(obj))

    @precondition(lambda self: self.told_deleted)
    @rule(lost=st.booleans())
    def kopf_tells_a_deletion(self, lost):
        obj = self.told_deleted.pop(0)

        def tell():
            self.resumptions.forget(obj)
            self.inventory.remove(obj)
        if not lost:
            self._run(tell)

    @rule()
    def clusters_listed(self):
        self.snapshots.append(([copy.deepcopy(self.cluster)] if self.cluster else [], self._tick()))

    @precondition(lambda self: self.snapshots)
    @rule()
    def clusters_listing_filed(self):
        items, version = self.snapshots.pop(0)

        def settle():
            filing = self.inventory.listing(kinds.CLUSTER, None)
            for _ in filing.file(items, pending=self.resumptions.pending):
                pass
            for _ in filing.finish(str(version)):
                pass
            self.resumptions.listed(None, filing.seen, str(version))  # as Controller.settle does
        self._run(settle)
        self.proved_gone |= {uid for uid, gone in self.deleted_at.items() if gone <= version}

    @precondition(lambda self: self.lists)
    @rule(data=st.data(), fails=st.booleans())
    def a_list_ends(self, data, fails):
        future, _ = self.lists.pop(data.draw(st.integers(0, len(self.lists) - 1)))
        self._run(lambda: future.set_exception(OSError("refused")) if fails else future.set_result(None))

    @rule()
    def everything_settles(self):
        """kopf tells the current state, and every LIST goes through: a running Cluster is filed as it is."""
        if self.cluster is not None:
            self.kopf_tells_the_cluster()
        for _ in range(20):
            if not self.lists:
                self._run()
                if not self.lists:
                    break
            while self.lists:
                future, _ = self.lists.pop(0)
                self._run(lambda: future.set_result(None))
        filed = self.inventory.get(kinds.CLUSTER, NS, "c1")
        if self.cluster is not None:
            def state(c):
                return c and (o.meta(c)["uid"], o.meta(c)["generation"], o.cluster_paused(c))
            assert state(filed) == state(self.cluster), (
                f"every LIST went through, and c1 is filed as {state(filed)}, not as it is: {state(self.cluster)} "
                f"(pending: {list(self.resumptions._pending)}, listers: {list(self.resumptions._listers)})")

    @invariant()
    def a_cluster_proved_gone_is_not_filed_again(self):
        """A uid a LIST of Clusters proved gone is not filed again, nor left running. It may stay filed
        paused while another uid of the name is pending (that LIST showed the name): its claims are left
        alone, the safe side, until the new uid is filed."""
        filed = self.inventory.get(kinds.CLUSTER, NS, "c1")
        if filed is None or o.meta(filed)["uid"] not in self.proved_gone:
            return
        pending = self.resumptions._pending.get((NS, "c1"))
        assert o.cluster_paused(filed) and pending is not None and o.meta(pending[1])["uid"] != o.meta(filed)["uid"], (
            f"c1 {o.meta(filed)['uid']} filed after a LIST of Clusters taken after its deletion was filed")

    @invariant()
    def a_cluster_filed_running_knows_its_moved_addresses(self):
        filed = self.inventory.get(kinds.CLUSTER, NS, "c1")
        if filed is None or o.cluster_paused(filed):
            return
        uid, version = o.meta(filed)["uid"], int(o.meta(filed)["resourceVersion"])
        last = max((v for v in self.unpauses.get(uid, []) if v <= version), default=None)
        missing = sorted(a for a, made in self.addresses.items() if last is not None and made < last
                         and a not in self.known)
        assert not missing, (f"c1 ({uid} at {version}) filed running, unpaused at {last}, with moved "
                             f"addresses never listed: {missing}")


ResumingInTheWorld.TestCase.settings = settings(max_examples=500, stateful_step_count=25, deadline=None, derandomize=True,
                                                suppress_health_check=[HealthCheck.too_slow])
test_resuming_in_the_world = ResumingInTheWorld.TestCase
