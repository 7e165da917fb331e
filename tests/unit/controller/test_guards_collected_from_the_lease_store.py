"""The guards stored as Leases are collected by the controller (``locks.LockUpkeep.collect_guards``), as the
garbage collector collects a guard stored in its namespace: one the namespace's pools share stays while one of
them lives, whatever this replica's inventory shows, and goes once none does, on condition that it is unchanged
since read (a pool adding itself to its owners meanwhile keeps it)."""

from __future__ import annotations

import asyncio

from kubernetes.client.rest import ApiException

from metal3_ipam.controller.api import ApiWriter
from metal3_ipam.controller.locks import LockUpkeep
from metal3_ipam.controller.operator import LEASES, Controller
from metal3_ipam.core import kinds, lockstore
from metal3_ipam.core.actions import SetMetadata
from metal3_ipam.core import objects as o
from metal3_ipam.core.inventory import Inventory
from metal3_ipam.testing import go_incluster as gi

from resuming import Kicks
from shared_guard_store import HOME, NS, POOLS, SUB, Server, pool_body, shared_guard

def _collect(inventory: Inventory, server: Server) -> None:
    upkeep = LockUpkeep(Controller(inventory, Kicks(), writer=server), server, HOME, may_act=lambda: True)
    asyncio.run(upkeep.collect_guards())


def _deletes(server: Server) -> list:
    return [(path, body) for method, path, body in server.calls if method == "DELETE"]


def test_a_guard_the_namespaces_pools_share_stays_while_one_of_them_is_stored():
    inventory = Inventory()
    first, second = pool_body("n1", "u1"), pool_body("n2", "u2")
    inventory.upsert(second)
    inventory.upsert(shared_guard(first, second))
    server = Server({})
    _collect(inventory, server)
    assert _deletes(server) == []
    assert inventory.get(kinds.IPADDRESS, NS, SUB) is not None


def test_a_shared_guard_whose_pool_this_inventory_does_not_show_yet_stays_while_the_server_has_it():
    inventory = Inventory()
    pool = pool_body("n1", "u1")
    inventory.upsert(shared_guard(pool))
    server = Server({POOLS.path(NS, "n1"): pool})
    _collect(inventory, server)
    assert _deletes(server) == []
    assert inventory.get(kinds.IPADDRESS, NS, SUB) is not None


def test_a_shared_guard_goes_once_none_of_its_pools_exists_on_condition_that_it_is_unchanged():
    inventory = Inventory()
    inventory.upsert(shared_guard(pool_body("n1", "u1"), pool_body("n2", "u2")))
    replaced = pool_body("n2", "another-incarnation")
    server = Server({POOLS.path(NS, "n2"): replaced})
    _collect(inventory, server)
    assert _deletes(server) == [(f"/apis/coordination.k8s.io/v1/namespaces/{HOME}/leases/{NS}.{SUB}",
                                 {"preconditions": {"uid": "lease-1", "resourceVersion": "42"}})]
    assert inventory.get(kinds.IPADDRESS, NS, SUB) is None


def test_a_shared_guard_changed_since_read_is_kept_filed():
    inventory = Inventory()
    inventory.upsert(shared_guard(pool_body("n1", "u1")))
    server = Server({}, delete_status=409)
    _collect(inventory, server)
    assert len(_deletes(server)) == 1
    assert inventory.get(kinds.IPADDRESS, NS, SUB) is not None


def test_a_pool_adds_itself_to_a_shared_guards_owners_in_its_lease_on_condition_that_it_is_unchanged():
    inventory = Inventory()
    first, second = pool_body("n1", "u1"), pool_body("n2", "u2")
    guard = shared_guard(first)
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
