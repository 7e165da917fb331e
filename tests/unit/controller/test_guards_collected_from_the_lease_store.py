"""The guards stored as Leases are collected by the controller (``locks.LockUpkeep.collect_guards``), as the
garbage collector collects a guard stored in its namespace: one the namespace's pools share stays while one of
them lives, whatever this replica's inventory shows, and goes once none does, on condition that it is unchanged
since read (a pool adding itself to its owners meanwhile keeps it)."""

from __future__ import annotations

import asyncio

from kubernetes.client.rest import ApiException

from metal3_ipam.controller.api import ApiWriter, Resource
from metal3_ipam.controller.locks import LockUpkeep
from metal3_ipam.controller.operator import LEASES, Controller
from metal3_ipam.core import kinds, lockstore
from metal3_ipam.core.actions import SetMetadata
from metal3_ipam.core import objects as o
from metal3_ipam.core.inventory import Inventory
from metal3_ipam.testing import go_incluster as gi

from resuming import Kicks

HOME = "ipam-system"
NS = "ns-a"
POOLS = Resource(gi.GROUP, "v1alpha2", "inclusterippools")
SUB = "fd00-0-0-0-0-0-0-4.126.nsip"


class Server:
    """What the upkeep asks the API server: the pools it lists by name (``stored``: by the path of each), the
    DELETEs it sends (answered ``delete_status``, or done)."""

    def __init__(self, stored: dict[str, dict], delete_status: int | None = None) -> None:
        self.resources = {(gi.GROUP, gi.IN_CLUSTER_IP_POOL): POOLS}
        self.stored = stored
        self.delete_status = delete_status
        self.calls: list[tuple[str, str, object]] = []

    async def _call(self, method: str, path: str, body=None, content_type=None):
        self.calls.append((method, path, body))
        if method == "DELETE":
            if self.delete_status is not None:
                raise ApiException(status=self.delete_status)
            return {}
        collection, _, query = path.partition("?fieldSelector=metadata.name%3D")
        found = self.stored.get(f"{collection}/{query}")
        return {"items": [found] if found is not None else []}


def _pool(name: str, uid: str) -> dict:
    pool = gi.ip_pool(name, namespace=NS, addresses=["fd00::4-fd00::5"], prefix=64)
    pool["metadata"].update(uid=uid, resourceVersion="3")
    return pool


def _shared_guard(*pools: dict) -> dict:
    """The Lease of the guard of fd00::4/126 the pools share, as the lock it stands for."""
    guard = {"apiVersion": kinds.METAL3_API_VERSION, "kind": "IPAddress",
             "metadata": {"name": SUB, "namespace": NS, "labels": {kinds.GUARD_LABEL: "fd00-0-0-0-0-0-0-4"},
                          "ownerReferences": [{"apiVersion": gi.POOL_API_VERSION, "kind": gi.IN_CLUSTER_IP_POOL,
                                               "name": o.name(p), "uid": o.meta(p)["uid"]} for p in pools]},
             "spec": {"address": "fd00::4", "prefix": 126,
                      "claim": {"name": "a", "namespace": NS, "apiVersion": gi.CAPI_API_VERSION,
                                "kind": "IPAddressClaim"},
                      "pool": {"name": o.name(pools[0]), "namespace": NS, "apiVersion": gi.POOL_API_VERSION,
                               "kind": gi.IN_CLUSTER_IP_POOL}}}
    lease = lockstore.to_lease(guard, HOME)
    lease["metadata"].update(uid="lease-1", resourceVersion="42", creationTimestamp="2024-01-01T00:00:00Z")
    return lockstore.from_lease(lease)


def _collect(inventory: Inventory, server: Server) -> None:
    upkeep = LockUpkeep(Controller(inventory, Kicks(), writer=server), server, HOME, may_act=lambda: True)
    asyncio.run(upkeep.collect_guards())


def _deletes(server: Server) -> list:
    return [(path, body) for method, path, body in server.calls if method == "DELETE"]


def test_a_guard_the_namespaces_pools_share_stays_while_one_of_them_is_stored():
    inventory = Inventory()
    first, second = _pool("n1", "u1"), _pool("n2", "u2")
    inventory.upsert(second)
    inventory.upsert(_shared_guard(first, second))
    server = Server({})
    _collect(inventory, server)
    assert _deletes(server) == []
    assert inventory.get(kinds.IPADDRESS, NS, SUB) is not None


def test_a_shared_guard_whose_pool_this_inventory_does_not_show_yet_stays_while_the_server_has_it():
    inventory = Inventory()
    pool = _pool("n1", "u1")
    inventory.upsert(_shared_guard(pool))
    server = Server({POOLS.path(NS, "n1"): pool})
    _collect(inventory, server)
    assert _deletes(server) == []
    assert inventory.get(kinds.IPADDRESS, NS, SUB) is not None


def test_a_shared_guard_goes_once_none_of_its_pools_exists_on_condition_that_it_is_unchanged():
    inventory = Inventory()
    inventory.upsert(_shared_guard(_pool("n1", "u1"), _pool("n2", "u2")))
    replaced = _pool("n2", "another-incarnation")
    server = Server({POOLS.path(NS, "n2"): replaced})
    _collect(inventory, server)
    assert _deletes(server) == [(f"/apis/coordination.k8s.io/v1/namespaces/{HOME}/leases/{NS}.{SUB}",
                                 {"preconditions": {"uid": "lease-1", "resourceVersion": "42"}})]
    assert inventory.get(kinds.IPADDRESS, NS, SUB) is None


def test_a_shared_guard_changed_since_read_is_kept_filed():
    inventory = Inventory()
    inventory.upsert(_shared_guard(_pool("n1", "u1")))
    server = Server({}, delete_status=409)
    _collect(inventory, server)
    assert len(_deletes(server)) == 1
    assert inventory.get(kinds.IPADDRESS, NS, SUB) is not None


def test_a_pool_adds_itself_to_a_shared_guards_owners_in_its_lease_on_condition_that_it_is_unchanged():
    inventory = Inventory()
    first, second = _pool("n1", "u1"), _pool("n2", "u2")
    guard = _shared_guard(first)
    inventory.upsert(guard)
    writer = ApiWriter(None, inventory, {})
    writer.leases = (LEASES, HOME)
    sent = []

    async def call(method, path, body=None, content_type=None):
        sent.append((method, path, body))
        if body["metadata"]["resourceVersion"] != o.meta(inventory.get(kinds.IPADDRESS, NS, SUB))["resourceVersion"]:
            raise ApiException(status=409)
        lease = lockstore.to_lease(guard, HOME)
        lease["metadata"].update(uid="lease-1", resourceVersion="43", annotations={
            **lease["metadata"]["annotations"], **body["metadata"]["annotations"]})
        return lease
    writer._call = call
    owners = (*o.owner_references(guard), {"apiVersion": gi.POOL_API_VERSION, "kind": gi.IN_CLUSTER_IP_POOL,
                                           "name": "n2", "uid": "u2"})
    asyncio.run(writer._patch(SetMetadata(o.ref(guard), owner_references=owners, resource_version="42")))
    [(method, path, body)] = sent
    assert (method, path) == ("PATCH", f"/apis/coordination.k8s.io/v1/namespaces/{HOME}/leases/{NS}.{SUB}")
    assert body["metadata"]["resourceVersion"] == "42" and "ownerReferences" not in body["metadata"]
    stored = inventory.get(kinds.IPADDRESS, NS, SUB)
    assert [r["name"] for r in o.owner_references(stored)] == ["n1", "n2"] and o.meta(stored)["resourceVersion"] == "43"
    try:
        asyncio.run(writer._patch(SetMetadata(o.ref(guard), owner_references=owners, resource_version="42")))
    except Exception as err:  # the guard changed since that read: refused, decided again
        assert "changed since it was read" in str(err)
    else:
        raise AssertionError("an owner was added to a guard changed since read")


def test_a_guard_too_young_to_collect_is_looked_over_again_once_it_is_old_enough():
    inventory = Inventory()
    upkeep = LockUpkeep(Controller(inventory, Kicks(), writer=Server({})), Server({}), HOME, may_act=lambda: True)

    async def run():
        upkeep.wake_later(0)
        await asyncio.wait_for(upkeep.wake.wait(), timeout=60)
    asyncio.run(run())
    assert upkeep.sweep_due
