"""A shared guard's Lease is collected (``locks.LockUpkeep.collect_guards``) once none of the owners the Lease names
lives. Its twin, which an earlier version reads and adds its own pools to, may name an owner that lives and that the
Lease has not been given yet (``LockUpkeep.move_over`` runs at the next wake): the guard must stay filed while it
does, since its sub-prefix is what keeps the global pool out of that pool's span."""

from __future__ import annotations

import asyncio
import copy

from metal3_ipam.controller.locks import LockUpkeep
from metal3_ipam.controller.operator import Controller
from metal3_ipam.core import kinds, lockstore
from metal3_ipam.core import objects as o
from metal3_ipam.core.inventory import Inventory
from metal3_ipam.testing import go_incluster as gi

from resuming import Kicks
from shared_guard_store import NS, POOLS, SUB, Server, pool_body as _pool, shared_guard as _shared_guard


class TwinNewsMeanwhile(Server):
    """While the upkeep reads whether n1 lives, the news of the twin arrive: an earlier version added n2 to its
    owners."""

    def __init__(self, stored, news) -> None:
        super().__init__(stored)
        self.news = news

    async def _call(self, method, path, body=None, content_type=None):
        if method == "GET" and self.news is not None:
            news, self.news = self.news, None
            news()
        return await super()._call(method, path, body, content_type)


def test_a_shared_guard_stays_filed_while_an_owner_an_earlier_version_gave_its_twin_lives():
    inventory = Inventory()
    n1, n2 = _pool("n1", "u1"), _pool("n2", "u2")
    guard = _shared_guard(n1)  # the Lease, owned by n1 (gone)
    twin = lockstore.moved_over(guard)
    twin["metadata"]["annotations"] = {k: v for k, v in o.annotations(twin).items() if k != lockstore.STORED_IN}
    twin["metadata"].update(uid="metal3-guard", resourceVersion="50")
    server = TwinNewsMeanwhile({POOLS.path(NS, "n2"): n2}, news=None)
    controller = Controller(inventory, Kicks(), writer=server)
    inventory.upsert(guard)
    controller.on_event("ADDED", copy.deepcopy(twin))  # hidden behind its Lease
    controller.unsettled.clear()  # looked at by move_over: the same lock, owners alike
    joined = copy.deepcopy(twin)
    joined["metadata"].update(resourceVersion="51", ownerReferences=[
        *o.owner_references(twin), {"apiVersion": gi.POOL_API_VERSION, "kind": gi.IN_CLUSTER_IP_POOL,
                                    "name": "n2", "uid": "u2"}])
    server.news = lambda: controller.on_event("MODIFIED", joined)
    upkeep = LockUpkeep(controller, server, "ipam-system", may_act=lambda: True)
    asyncio.run(upkeep.collect_guards())
    assert "u2" in {r["uid"] for r in o.owner_references(controller.legacy[(NS, SUB)])}  # the news were filed
    assert inventory.get(kinds.IPADDRESS, NS, SUB) is not None  # as its Lease, or as its twin


class TwinNewsWhileDeleting(Server):
    """While the Lease is being deleted, the news of the twin arrive: an earlier version added n2 to its owners."""

    def __init__(self, stored, news) -> None:
        super().__init__(stored)
        self.news = news

    async def _call(self, method, path, body=None, content_type=None):
        if method == "DELETE" and self.news is not None:
            news, self.news = self.news, None
            news()
        return await super()._call(method, path, body, content_type)


def test_a_twin_given_an_owner_while_its_shared_guards_lease_is_deleted_is_filed_in_its_place():
    inventory = Inventory()
    n1 = _pool("n1", "u1")
    guard = _shared_guard(n1)  # the Lease, owned by n1 (gone)
    twin = lockstore.moved_over(guard)
    twin["metadata"]["annotations"] = {k: v for k, v in o.annotations(twin).items() if k != lockstore.STORED_IN}
    twin["metadata"].update(uid="metal3-guard", resourceVersion="50")
    server = TwinNewsWhileDeleting({}, news=None)
    controller = Controller(inventory, Kicks(), writer=server)
    inventory.upsert(guard)
    controller.on_event("ADDED", copy.deepcopy(twin))
    controller.unsettled.clear()
    joined = copy.deepcopy(twin)
    joined["metadata"].update(resourceVersion="51", ownerReferences=[
        *o.owner_references(twin), {"apiVersion": gi.POOL_API_VERSION, "kind": gi.IN_CLUSTER_IP_POOL,
                                    "name": "n2", "uid": "u2"}])
    server.news = lambda: controller.on_event("MODIFIED", joined)
    upkeep = LockUpkeep(controller, server, "ipam-system", may_act=lambda: True)
    asyncio.run(upkeep.collect_guards())
    assert any(m == "DELETE" for m, _, _ in server.calls)  # the Lease's owners were gone when read
    filed = inventory.get(kinds.IPADDRESS, NS, SUB)
    assert filed is not None and not lockstore.stored_in_lease(filed)  # the twin holds as it is
    assert "u2" in {r["uid"] for r in o.owner_references(filed)}


def test_a_shared_guards_lease_and_twin_both_owned_by_pools_gone_are_let_go():
    inventory = Inventory()
    guard = _shared_guard(_pool("n1", "u1"))
    twin = lockstore.moved_over(guard)
    twin["metadata"]["annotations"] = {k: v for k, v in o.annotations(twin).items() if k != lockstore.STORED_IN}
    twin["metadata"].update(uid="metal3-guard", resourceVersion="50")
    server = Server({})
    controller = Controller(inventory, Kicks(), writer=server)
    inventory.upsert(guard)
    controller.on_event("ADDED", copy.deepcopy(twin))
    upkeep = LockUpkeep(controller, server, "ipam-system", may_act=lambda: True)
    asyncio.run(upkeep.collect_guards())
    assert inventory.get(kinds.IPADDRESS, NS, SUB) is None  # the twin is the garbage collector's
