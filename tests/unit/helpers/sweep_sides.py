"""Two clusters sharing one NetBox, each with its controller's claims, pools and asks, for the sweep and moved keys."""

from __future__ import annotations

import asyncio
import dataclasses

from metal3_ipam.core import kinds
from metal3_ipam.core import objects as o
from metal3_ipam.core.actions import Event
from metal3_ipam.core.asking import Asking
from metal3_ipam.core.inventory import Inventory
from metal3_ipam.poolkinds.netbox.asks import NetBoxPools
from metal3_ipam.poolkinds.netbox.client import Allocation, NetBoxClient
from metal3_ipam.poolkinds.netbox.pool import KEY_ANNOTATION
from metal3_ipam.poolkinds.netbox.pool import NETBOX_IP_POOL
from metal3_ipam.poolkinds.netbox.sweep import Found

from ipam_objects import set_meta, user_delete
from outside_world import World


C1 = "0b3e1f7a-1111-4c2d-9e8f-000000000001"  # the source's Cluster


T1 = "0b3e1f7a-1111-4c2d-9e8f-000000000003"  # the target's copy of it


SP, TP = "5a6b7c8d-2222-4c2d-9e8f-000000000003", "5a6b7c8d-2222-4c2d-9e8f-000000000004"


def cluster_c1(uid: str, paused: bool, ns: str) -> dict:
    return {"apiVersion": "cluster.x-k8s.io/v1beta2", "kind": "Cluster",
            "metadata": {"name": "c1", "namespace": ns, "uid": uid, "resourceVersion": "1"},
            "spec": {"paused": paused}}


def shared_netbox_pool(uid: str, ns: str) -> dict:
    return {"apiVersion": "netbox.metal3-ipam.io/v1alpha1", "kind": "NetBoxIPPool",
            "metadata": {"name": "nb", "namespace": ns, "uid": uid, "resourceVersion": "1", "generation": 1},
            "spec": {"server": {"url": "http://netbox.example", "tokenSecretRef": {"name": "token"}},
                     "source": {"prefix": "10.0.0.0/24"}}}


def keyed_claim(name: str, key: str, ns: str, cluster: str | None = "c1") -> dict:
    labels = {kinds.CLUSTER_NAME_LABEL: cluster} if cluster else {}
    return {"apiVersion": "ipam.cluster.x-k8s.io/v1beta2", "kind": "IPAddressClaim",
            "metadata": {"name": name, "namespace": ns, "uid": f"uid-{ns}-{name}", "resourceVersion": "1",
                         "labels": labels, "annotations": {KEY_ANNOTATION: key}},
            "spec": {"poolRef": {"apiGroup": NETBOX_IP_POOL[0], "kind": NETBOX_IP_POOL[1], "name": "nb"}}}


class SharedNetBox:
    """One NetBox both clusters' controllers sweep (the owner is shared by every cluster a claim may move to)."""

    def __init__(self, *items: Found):
        self.items = {item.id: item for item in items}
        self.released: list[Found] = []


class SharedNetBoxClient(NetBoxClient):
    """The client's release and describe over a SharedNetBox, with no server."""

    def __init__(self, netbox: SharedNetBox):
        super().__init__("http://netbox.example", "token", owner="o")
        self.netbox = netbox

    async def find(self, key):
        item = next((i for i in self.netbox.items.values() if i.key == key), None)
        return Allocation(item.id, item.address, item.key, None, item.description) if item else None

    async def describe(self, allocation, description, what=None):
        item = self.netbox.items[allocation.id]
        self.netbox.items[item.id] = Found(item.id, item.address, item.key, description)
        return dataclasses.replace(allocation, description=description)

    async def release_allocation(self, allocation):
        self.netbox.released.append(self.netbox.items.pop(allocation.id))


class SweepingAsks:
    """NetBoxAsks.sweep as it behaves: list, choose, re-read by id, then release (if ``still``) or describe."""

    owner = "o"

    def __init__(self, netbox: SharedNetBox):
        self.netbox = netbox

    def pool_changed(self, model) -> None:
        pass

    async def sweep(self, model, choose, still=lambda item: True, lingering=False):
        listed = list(self.netbox.items.values())
        release, describe = choose(listed)
        released, described = [], []
        for item, text in [(i, None) for i in release] + describe:
            if self.netbox.items.get(item.id) != item:
                continue
            if text is None:
                if still(item):
                    del self.netbox.items[item.id]
                    self.netbox.released.append(item)
                    released.append(item)
            else:
                self.netbox.items[item.id] = Found(item.id, item.address, item.key, text)
                described.append((item, text))
        return len(listed), released, described


class EventWriter:
    """Records the Events a sweep writes."""

    def __init__(self):
        self.events: list[Event] = []

    async def execute(self, plan, pool_key) -> None:
        self.events.extend(a for s in plan.steps for a in s.actions if isinstance(a, Event))


class ClusterSide:
    """One cluster's controller: its watch-fed inventory and its NetBoxPools (the real adapter)."""

    def __init__(self, netbox: SharedNetBox, *objs: dict, **pools):
        """``pools``: further arguments of its NetBoxPools (a release grace, a wall clock)."""
        self.now = 0.0
        self.inventory = Inventory()
        for obj in objs:
            self.inventory.upsert(obj)
        self.writer = EventWriter()
        self.pools = NetBoxPools(SweepingAsks(netbox), Asking(deadline=30), inventory=self.inventory,
                                 writer=self.writer,
                                 wake=lambda *a: None, sweep_seconds=300, clock=lambda: self.now, **pools)

    def sweep(self) -> list[Found]:
        self.now += 300
        return asyncio.run(self.pools.sweep())


def move_away(world: World, name: str) -> None:
    """clusterctl move: delete-for-move, then the finalizers stripped; the claim and its addresses go here."""
    user_delete(world.api, kinds.CAPI_CLAIM, name, annotations={kinds.DELETE_FOR_MOVE_ANNOTATION: ""})
    if world.claim(name) is not None:
        set_meta(world.api, kinds.CAPI_CLAIM, name, finalizers=[])
        world.api.inventory.remove(world.claim(name))
    for address in [*world.api.inventory.of_kind(kinds.CAPI_ADDRESS), *world.api.inventory.of_kind(kinds.IPADDRESS)]:
        if o.name(address) == name or (o.claim_of_address(address) or (None, None))[1] == name:
            world.api.inventory.remove(address)
