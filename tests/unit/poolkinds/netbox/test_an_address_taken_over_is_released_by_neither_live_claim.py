"""An address two clusters' live claims carry (a move restored from a directory while the source runs), taken
over by one of them (first-come homing): the release of the key by either cluster leaves the IP the other's
live claim is bound to (SPEC §10.1, §10.3)."""

from __future__ import annotations

import asyncio

import pytest

from metal3_ipam.poolkinds.netbox.client import Allocation, NetBoxClient
from metal3_ipam.poolkinds.netbox.sweep import Found, Home, description, home_in, taken_from

from sweep_sides import C1, SP, T1, TP, ClusterSide, SharedNetBox, cluster_c1, keyed_claim, shared_netbox_pool


class _Client(NetBoxClient):
    """A client's release with no server: ``find`` answers the one address, ``release_allocation`` records."""

    def __init__(self, netbox: SharedNetBox):
        super().__init__("http://netbox.example", "token", owner="o")
        self.netbox = netbox
        self.released: list[Allocation] = []

    async def find(self, key):
        item = next(i for i in self.netbox.items.values() if i.key == key)
        return Allocation(item.id, item.address, item.key, None, item.description)

    async def release_allocation(self, allocation):
        self.released.append(allocation)


@pytest.mark.xfail(strict=True, reason=(
    "first-come homing is asymmetric on release: the cluster that took an address over (home=<its Cluster> "
    "from=<the other's>) releases it in NetBox when its claim is deleted (NetBoxPools._another_clusters says "
    "keep only for a home absent here), while the other cluster's live claim carrying the key is still bound "
    "to the IP (only told AddressHomedElsewhere), so NetBox hands the IP out again"))
def test_the_cluster_that_took_an_address_over_does_not_release_it_while_the_other_clusters_claim_lives():
    netbox = SharedNetBox(Found(3, "10.0.0.3/24", "k", description(Home("Cluster", C1), keyed_claim("m", "k", "ns"))))
    source = ClusterSide(netbox, cluster_c1(C1, False, "ns"), shared_netbox_pool(SP, "ns"), keyed_claim("m", "k", "ns"))
    target = ClusterSide(netbox, cluster_c1(T1, False, "t"), shared_netbox_pool(TP, "t"), keyed_claim("m", "k", "t"))
    target.sweep()
    source.sweep()
    taken = netbox.items[3].description
    assert home_in(taken) == Home("Cluster", T1) and taken_from(taken) == Home("Cluster", C1), taken
    # live, and bound to 10.0.0.3 all along
    assert source.inventory.get(("ipam.cluster.x-k8s.io", "IPAddressClaim"), "ns", "m") is not None

    # target/t/m is deleted: its finalizer's release, with the keep the adapter gives it (NetBoxPools.pump)
    client = _Client(netbox)
    asyncio.run(client.release("k", target.pools._another_clusters))
    assert client.released == [], "released the address the source's live claim ns/m is bound to"
