"""A guard the pools of a namespace share, stored as a Lease, and the API server the upkeep asks about its owners,
for the tests of the controller's collection of guards."""

from __future__ import annotations

from kubernetes.client.rest import ApiException

from metal3_ipam.controller.api import Resource
from metal3_ipam.core import kinds, lockstore
from metal3_ipam.core import objects as o
from metal3_ipam.testing import go_incluster as gi

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


def pool_body(name: str, uid: str) -> dict:
    pool = gi.ip_pool(name, namespace=NS, addresses=["fd00::4-fd00::5"], prefix=64)
    pool["metadata"].update(uid=uid, resourceVersion="3")
    return pool


def shared_guard(*pools: dict) -> dict:
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
