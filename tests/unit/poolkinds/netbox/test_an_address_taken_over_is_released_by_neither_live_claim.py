"""An address two clusters' live claims carry (a move restored from a directory while the source runs), taken
over by one of them (first-come homing): the release of the key by either cluster leaves the IP the other's
live claim is bound to (SPEC §10.1, §10.3)."""

from __future__ import annotations

import asyncio

from metal3_ipam.poolkinds.netbox.client import Allocation
from metal3_ipam.poolkinds.netbox.sweep import Found, Hold, Home, description, held_in, hold_in, home_in, taken_from

from sweep_sides import (C1, SP, T1, TP, ClusterSide, SharedNetBox, SharedNetBoxClient, cluster_c1, keyed_claim,
                         shared_netbox_pool)


class _Client(SharedNetBoxClient):
    """A client's release with no server: ``find`` answers the one address, ``describe`` writes its description,
    ``release_allocation`` records."""

    def __init__(self, netbox: SharedNetBox):
        super().__init__(netbox)
        self.released: list[Allocation] = []

    async def release_allocation(self, allocation):
        self.released.append(allocation)


def _taken_over() -> tuple[SharedNetBox, ClusterSide, ClusterSide]:
    """ns/m's address taken over by its copy t/m in the target, both live and unpaused; each side swept once."""
    netbox = SharedNetBox(Found(3, "10.0.0.3/24", "k", description(Home("Cluster", C1), keyed_claim("m", "k", "ns"))))
    source = ClusterSide(netbox, cluster_c1(C1, False, "ns"), shared_netbox_pool(SP, "ns"), keyed_claim("m", "k", "ns"))
    target = ClusterSide(netbox, cluster_c1(T1, False, "t"), shared_netbox_pool(TP, "t"), keyed_claim("m", "k", "t"))
    target.sweep()
    source.sweep()
    return netbox, source, target


def test_the_cluster_that_took_an_address_over_does_not_release_it_while_the_other_clusters_claim_lives():
    netbox, source, target = _taken_over()
    taken = netbox.items[3].description
    assert home_in(taken) == Home("Cluster", T1) and taken_from(taken) == Home("Cluster", C1), taken
    # live, and bound to 10.0.0.3 all along
    assert source.inventory.get(("ipam.cluster.x-k8s.io", "IPAddressClaim"), "ns", "m") is not None

    # target/t/m is deleted: its finalizer's release, with the keep the adapter gives it (NetBoxPools.pump)
    client = _Client(netbox)
    asyncio.run(client.release("k", target.pools._left_on_release))
    assert client.released == [], "released the address the source's live claim ns/m is bound to"


def test_an_address_taken_over_is_released_once_neither_clusters_claim_carries_its_key():
    """The hold the other cluster's live claim wrote goes with that claim, and the address is swept: nothing leaks."""
    netbox, source, target = _taken_over()
    target.pools.wall = lambda: 1.8e9 + target.now  # the time its marks of release say
    target_client, source_client = _Client(netbox), _Client(netbox)
    asyncio.run(target_client.release("k", target.pools._left_on_release))
    target.inventory.remove(target.inventory.get(("ipam.cluster.x-k8s.io", "IPAddressClaim"), "t", "m"))
    target.sweep()
    assert netbox.released == [] and target_client.released == []

    # ns/m is deleted too: its release leaves the address homed at the target, its sweep takes its hold off
    asyncio.run(source_client.release("k", source.pools._left_on_release))
    source.inventory.remove(source.inventory.get(("ipam.cluster.x-k8s.io", "IPAddressClaim"), "ns", "m"))
    source.sweep()
    assert source_client.released == [] and held_in(netbox.items[3].description) is None, netbox.items[3].description
    while not netbox.released:
        assert 3 in netbox.items and target.now < 2 * 86400, netbox.items[3].description
        target.sweep()
    assert [item.id for item in netbox.released] == [3]


def test_an_address_taken_over_from_a_third_cluster_is_not_released_while_another_live_claim_carries_it():
    third = "0b3e1f7a-1111-4c2d-9e8f-000000000009"
    netbox = SharedNetBox(Found(3, "10.0.0.3/24", "k", description(Home("Cluster", third),
                                                                    keyed_claim("m", "k", "x"))))
    source = ClusterSide(netbox, cluster_c1(C1, False, "ns"), shared_netbox_pool(SP, "ns"), keyed_claim("m", "k", "ns"))
    target = ClusterSide(netbox, cluster_c1(T1, False, "t"), shared_netbox_pool(TP, "t"), keyed_claim("m", "k", "t"))
    target.sweep()
    source.sweep()
    taken = netbox.items[3].description
    assert home_in(taken) == Home("Cluster", T1) and taken_from(taken) == Home("Cluster", third), taken
    assert hold_in(taken) == Hold(Home("Cluster", C1), live=True), taken
    # the source's claim, which does not own the address, is told: a condition and one Warning Event
    assert f"Cluster:{T1}" in source.inventory.homed_elsewhere["k"]
    assert [e.reason for e in source.writer.events] == ["NetBoxAddressHomedElsewhere"]
    assert [e.reason for e in target.writer.events] == ["NetBoxAddressTakenOver"]
    for _ in range(3):  # the live hold makes the source take nothing over: no second write
        source.sweep()
        target.sweep()
    assert netbox.items[3].description == taken and len(source.writer.events) == 1
    client = _Client(netbox)
    asyncio.run(client.release("k", target.pools._left_on_release))
    assert client.released == [], "released the address the source's live claim ns/m is bound to"
