"""A Cluster that resumes after a move is filed only once its namespace's addresses are listed again.

clusterctl creates the moved addresses and unpauses the Cluster right after (at once on a
restore from a directory). The controller's watch of addresses can lag behind its watch of
Clusters: seen in a restore, a claim was looked at with its Cluster unpaused and its moved
address not yet known. Here the watch events are played into the controller's own inventory
in that order, and the reconcile is asked what it would do.
"""

from __future__ import annotations

import asyncio
import copy

from metal3_ipam.controller.freezing import Freezer
from metal3_ipam.controller.operator import Controller, Listing
from metal3_ipam.core import kinds
from metal3_ipam.testing.listing import at_hand
from metal3_ipam.core import objects as o
from metal3_ipam.core.actions import Create
from metal3_ipam.core.inventory import Inventory
from metal3_ipam.core.reconcile import reconcile
from metal3_ipam.memory import converge
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


def test_without_the_listing_the_lagging_claim_would_get_the_hole():
    inventory, unpaused, _ = moved_state()
    Controller(inventory, Kicks(), writer=None).file(unpaused)
    assert creates(inventory) == ["pool1-192-168-0-10"]


def test_resuming_cluster_waits_for_the_addresses_listed_again():
    inventory, unpaused, listing = moved_state()
    kicks = Kicks()
    listed: list[str] = []

    def relist(namespace: str) -> list[Listing]:
        listed.append(namespace)
        return [listing]

    async def scenario() -> None:
        controller = Controller(inventory, kicks, writer=None, relist=relist)
        controller.file(unpaused)
        # Not yet: the Cluster is still paused in the inventory, so nothing is served.
        assert o.cluster_paused(inventory.get(kinds.CLUSTER, NS, "c1"))
        assert creates(inventory) == [] and kicks.pools == []
        await asyncio.gather(*controller.resumptions.tasks)

    asyncio.run(scenario())
    assert listed == [NS]
    assert not o.cluster_paused(inventory.get(kinds.CLUSTER, NS, "c1"))
    assert POOL in set().union(*kicks.pools)
    assert creates(inventory) == []  # c is bound to its moved address


def test_a_cluster_deleted_while_resuming_is_not_filed_again():
    inventory, unpaused, listing = moved_state()

    def relist(namespace: str) -> list[Listing]:
        return [listing]

    async def scenario() -> None:
        controller = Controller(inventory, Kicks(), writer=None, relist=relist)
        controller.file(unpaused)
        deleted = {**unpaused, "metadata": {**unpaused["metadata"],
                                            "resourceVersion": str(int(listing.fetch(None).resource_version) + 1)}}
        controller.forget(deleted)
        await asyncio.gather(*controller.resumptions.tasks)

    asyncio.run(scenario())
    assert inventory.get(kinds.CLUSTER, NS, "c1") is None
