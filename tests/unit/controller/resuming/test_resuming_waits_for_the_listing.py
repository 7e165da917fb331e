"""A Cluster that resumes after a move is filed only once its namespace's addresses are listed again.

clusterctl creates the moved addresses and unpauses the Cluster right after (at once on a
restore from a directory). The controller's watch of addresses can lag behind its watch of
Clusters: seen in a restore, a claim was looked at with its Cluster unpaused and its moved
address not yet known. Here the watch events are played into the controller's own inventory
in that order, and the reconcile is asked what it would do.
"""

from __future__ import annotations

import asyncio

from metal3_ipam.controller.operator import Controller, Listing
from metal3_ipam.core import kinds
from metal3_ipam.core import objects as o
from ipam_objects import NS
from resuming import Kicks, POOL, creates, moved_state


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
