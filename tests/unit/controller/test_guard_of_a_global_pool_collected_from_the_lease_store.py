"""A guard a global pool shares with a claim of the namespace (``Guards.guard``: owned by the pool, which is of cluster
scope, and by the claim) stored as a Lease is collected by ``locks.LockUpkeep.collect_guards`` once neither lives,
as the garbage collector collects its twin: each owner is asked of the API server where it lives, a pool of cluster
scope at the cluster's path (the API server answers 404 for a cluster-scoped resource under a namespace)."""

from __future__ import annotations

import asyncio

from kubernetes.client.rest import ApiException

from metal3_ipam.controller.api import Resource
from metal3_ipam.controller.locks import LockUpkeep
from metal3_ipam.controller.operator import Controller
from metal3_ipam.core import kinds, lockstore
from metal3_ipam.core.inventory import Inventory
from metal3_ipam.testing import go_incluster as gi

from resuming import Kicks

HOME = "ipam-system"
NS = "ns-a"
SUB = "fd00-0-0-0-0-0-0-4.126.nsip"
GLOBAL_POOLS = Resource(gi.GROUP, gi.POOL_VERSION, "globalinclusterippools")
CLAIMS = Resource(gi.GROUP, gi.CAPI_VERSION, "ipaddressclaims")


class Server:
    """The API server: nothing stored; a cluster-scoped resource under a namespace is a path it does not serve."""

    def __init__(self) -> None:
        self.resources = {(gi.GROUP, gi.GLOBAL_IN_CLUSTER_IP_POOL): GLOBAL_POOLS, kinds.CAPI_CLAIM: CLAIMS}
        self.calls: list[tuple[str, str]] = []

    async def _call(self, method: str, path: str, body=None, content_type=None):
        self.calls.append((method, path))
        if method == "DELETE":
            return {}
        if f"/namespaces/{NS}/{GLOBAL_POOLS.plural}" in path:
            raise ApiException(status=404)
        return {"items": []}


def _guard_of_global_pool() -> dict:
    """The Lease of the guard of fd00::4/126 the global pool g shares with claim a: neither is stored any more."""
    guard = {"apiVersion": kinds.METAL3_API_VERSION, "kind": "IPAddress",
             "metadata": {"name": SUB, "namespace": NS, "labels": {kinds.GUARD_LABEL: "fd00-0-0-0-0-0-0-4"},
                          "ownerReferences": [
                              {"apiVersion": gi.POOL_API_VERSION, "kind": gi.GLOBAL_IN_CLUSTER_IP_POOL, "name": "g",
                               "uid": "ug"},
                              {"apiVersion": gi.CAPI_API_VERSION, "kind": "IPAddressClaim", "name": "a",
                               "uid": "ua"}]},
             "spec": {"address": "fd00::4", "prefix": 126,
                      "claim": {"name": "a", "namespace": NS, "apiVersion": gi.CAPI_API_VERSION,
                                "kind": "IPAddressClaim"},
                      "pool": {"name": "g", "apiVersion": gi.POOL_API_VERSION,
                               "kind": gi.GLOBAL_IN_CLUSTER_IP_POOL}}}
    lease = lockstore.to_lease(guard, HOME)
    lease["metadata"].update(uid="lease-1", resourceVersion="42", creationTimestamp="2024-01-01T00:00:00Z")
    return lockstore.from_lease(lease)


def test_a_guard_a_global_pool_shared_is_collected_once_neither_it_nor_its_claim_lives():
    inventory = Inventory()
    inventory.upsert(_guard_of_global_pool())
    server = Server()
    upkeep = LockUpkeep(Controller(inventory, Kicks(), writer=server), server, HOME, may_act=lambda: True)
    asyncio.run(upkeep.collect_guards())
    assert ("DELETE", f"/apis/coordination.k8s.io/v1/namespaces/{HOME}/leases/{NS}.{SUB}") in server.calls
    assert inventory.get(kinds.IPADDRESS, NS, SUB) is None
