"""Clusters paused for ``clusterctl move`` and resumed: the moved state, the kicks the controller gets, listings
gated, and the orders of those steps."""

from __future__ import annotations

import asyncio
import copy
import threading

from metal3_ipam.controller.freezing import Freezer
from metal3_ipam.controller.operator import Controller, Listing
from metal3_ipam.core import kinds
from metal3_ipam.core import objects as o
from metal3_ipam.core.actions import Create
from metal3_ipam.core.inventory import Inventory
from metal3_ipam.core.reconcile import reconcile
from metal3_ipam.memory import converge
from metal3_ipam.testing.listing import at_hand, read

from ipam_objects import NS, cluster, converged, get, ipclaim, ippool, metal3_addresses, user_delete


POOL = (NS, "pool1")


LABEL = {kinds.CLUSTER_NAME_LABEL: "c1"}


class Kicks:
    """The workers as the Controller sees them: pools kicked, and when to freeze (never here)."""

    def __init__(self) -> None:
        self.pools: list[set] = []
        self.freezer = Freezer(every=10**9)

    def kick(self, pools) -> None:
        self.pools.append(set(pools))


def moved_state():
    """A shared pool with a hole at .10 (a released), claims b (.11) and c (.12) of Cluster c1,
    now paused as clusterctl creates it; c's address is the one the watch has not delivered yet."""
    source = converged(cluster("c1"), ippool(), *(ipclaim(n, labels=LABEL) for n in ("a", "b", "c")))
    user_delete(source, kinds.IPCLAIM, "a")
    converge(source)
    running = get(source, kinds.CLUSTER, "c1")
    source.inventory.upsert({**running, "spec": {"paused": True},
                             "metadata": {**running["metadata"], "resourceVersion": source._next_version()}})
    addresses = {o.name(a): a for a in metal3_addresses(source)}
    assert sorted(o.spec(a)["address"] for a in addresses.values()) == ["192.168.0.11", "192.168.0.12"]
    lagging = next(a for a in addresses.values() if o.spec(a)["claim"]["name"] == "c")
    inventory = Inventory()
    for obj in source.inventory.objects.values():
        if obj is not lagging:
            obj = copy.deepcopy(obj)
            if kinds.kind_of(obj) == kinds.IPCLAIM:
                obj.pop("status", None)  # clusterctl move does not carry status
            inventory.upsert(obj)
    paused = get(source, kinds.CLUSTER, "c1")
    unpaused = {**paused, "spec": {"paused": False},
                "metadata": {**paused["metadata"], "resourceVersion": source._next_version()}}
    listing = at_hand(kinds.IPADDRESS, NS, [copy.deepcopy(a) for a in addresses.values()], source._next_version())
    return inventory, unpaused, listing


def creates(inventory: Inventory) -> list[str]:
    plan = reconcile(inventory.snapshot(POOL, "2024-01-01T00:00:00Z"))
    return [o.name(a.obj) for a in plan.writes if isinstance(a, Create)]


# How long a case waits for what it gates (a page on its way) before it fails.
DEADLINE = 60.0


class WatchedKicks(Kicks):
    """The workers as the Controller sees them, with what a pass would create at every kick
    (a pool kicked is reconciled at the loop's next turn, on the inventory as it is then)."""

    def __init__(self, inventory: Inventory, freezer: Freezer | None = None) -> None:
        super().__init__()
        self.inventory = inventory
        self.created: list[list[str]] = []
        if freezer is not None:
            self.freezer = freezer

    def kick(self, pools) -> None:
        super().kick(pools)
        self.created.append(creates(self.inventory))


class GatedListings:
    """The namespace's addresses as the API server holds them, listed again once per relist: each LIST
    sees them as they are when it reaches the server (its first page's request), and is then gated
    until released. ``asked[i]`` is set once LIST i is taken, ``release[i]`` lets it go."""

    def __init__(self, before: Listing, after: Listing, most: int = 4) -> None:
        self.before, self.after = before, after
        self.created = False  # c's moved address exists: a LIST taken from now on holds it
        self.asked = [threading.Event() for _ in range(most)]
        self.release = [threading.Event() for _ in range(most)]
        self.handed = 0

    def relist(self, namespace: str) -> list[Listing]:
        index = self.handed
        self.handed += 1
        taken: list[Listing] = []

        def fetch(token):
            if not taken:
                taken.append(self.after if self.created else self.before)
                self.asked[index].set()
            if not self.release[index].wait(DEADLINE):
                raise TimeoutError(f"LIST {index} was never released")
            return taken[0].fetch(token)
        return [Listing(kinds.IPADDRESS, namespace, fetch)]

    def release_all(self) -> None:
        for flag in self.release:
            flag.set()


async def until(flag: threading.Event, what: str) -> None:
    loop = asyncio.get_running_loop()
    deadline = loop.time() + DEADLINE
    while not flag.is_set():
        assert loop.time() < deadline, f"never: {what}"
        await asyncio.sleep(0.01)


async def until_done(future: asyncio.Future, what: str, listings: GatedListings | None = None,
                     listed: int = 0) -> None:
    """Until ``future`` (a namespace's lister) is done, or, with ``listings``, until LIST ``listed`` was
    dealt with: the lister goes on to the next LIST only once the Clusters the last one served are filed."""
    loop = asyncio.get_running_loop()
    deadline = loop.time() + DEADLINE
    while not (future.done() or (listings is not None and listings.asked[listed + 1].is_set())):
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
    items, _ = read(listing)
    stored = {o.name(a) for a in inventory.of_kind(kinds.IPADDRESS)}
    lagging = [a for a in items if o.name(a) not in stored]
    assert len(lagging) == 1
    version = int(o.meta(unpaused)["resourceVersion"])
    before = at_hand(kinds.IPADDRESS, NS, [a for a in items if a not in lagging], str(version + 1))
    after = at_hand(kinds.IPADDRESS, NS, copy.deepcopy(items), str(version + 20))
    return inventory, unpaused, before, after, version


async def cancelled_while_listing(controller: Controller, listings: GatedListings, unpaused: dict,
                                  meanwhile=lambda: None) -> None:
    """The Cluster resumes: pending, its namespace's lister's LIST out; the lister is cancelled, and
    ``meanwhile()`` runs before the cancellation reaches it."""
    controller.on_event("MODIFIED", copy.deepcopy(unpaused))
    [lister] = list(controller.resumptions.tasks)
    await until(listings.asked[0], "the first LIST went out")
    lister.cancel()
    meanwhile()
    await asyncio.gather(lister, return_exceptions=True)


def moved_without_cluster(cluster_name: str | None):
    """The moved state split as streams deliver it: the pool and the claims (no Cluster, no address),
    the paused Cluster, its addresses, its unpause, and the LIST of the namespace's addresses."""
    source, unpaused, listing = moved_state()
    cluster_paused = copy.deepcopy(source.get(kinds.CLUSTER, NS, "c1"))
    moved_addresses, _ = read(listing)
    others = [copy.deepcopy(obj) for obj in source.objects.values()
              if kinds.kind_of(obj) not in (kinds.CLUSTER, kinds.IPADDRESS)]
    for obj in others:
        if kinds.kind_of(obj) == kinds.IPPOOL and cluster_name:
            obj["spec"]["clusterName"] = cluster_name
    order = {kinds.IPPOOL: 0, kinds.IPCLAIM: 1}
    others.sort(key=lambda obj: order.get(kinds.kind_of(obj), 2))
    return others, cluster_paused, moved_addresses, unpaused, listing
