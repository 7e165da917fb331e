"""A lock of the Lease store as the API server keeps it in both its stores (the Metal3 IPAddress, its twin, and
the Lease), for the writer's tests: the server, a lock, and a writer that talks to that server."""

from __future__ import annotations

import copy
import json

from kubernetes.client.rest import ApiException

from metal3_ipam.controller.api import ApiWriter, Resource
from metal3_ipam.controller.operator import LEASES
from metal3_ipam.core import kinds, lockstore
from metal3_ipam.core.inventory import Inventory
from metal3_ipam.testing import go_incluster as gi

HOME = "ipam-system"
NS = "ns-a"
NAME = "p.10-0-0-5.ip"
METAL3 = Resource(kinds.METAL3_GROUP, kinds.METAL3_VERSION, "ipaddresses")


def lock_body(claim: str = "a") -> dict:
    return {"apiVersion": kinds.METAL3_API_VERSION, "kind": "IPAddress",
            "metadata": {"name": NAME, "namespace": NS, "finalizers": [kinds.FINALIZERS[kinds.IPADDRESS]]},
            "spec": {"address": "10.0.0.5", "prefix": 24,
                     "pool": {"name": "p", "namespace": NS, "apiVersion": gi.POOL_API_VERSION,
                              "kind": gi.IN_CLUSTER_IP_POOL},
                     "claim": {"name": claim, "namespace": NS, "apiVersion": gi.CAPI_API_VERSION,
                               "kind": "IPAddressClaim"}}}


class Server:
    """Both stores as the API server keeps them: a name taken once, a uid precondition checked, an object with
    finalizers only marked for deletion."""

    def __init__(self, metal3_served: bool = True) -> None:
        self.metal3_served = metal3_served  # False: the Metal3 CRD is not installed, its paths answer 404
        self.objects: dict[str, dict] = {}
        self.calls: list[tuple[str, str]] = []
        self._version = 10

    def put(self, path: str, obj: dict) -> dict:
        obj = copy.deepcopy(obj)
        self._version += 1
        obj["metadata"].update(uid=obj["metadata"].get("uid") or f"uid-{self._version}",
                               resourceVersion=str(self._version))
        self.objects[path] = obj
        return copy.deepcopy(obj)

    async def _call(self, method: str, path: str, body=None, content_type=None):
        self.calls.append((method, path))
        if not self.metal3_served and path.startswith(f"/apis/{kinds.METAL3_GROUP}/"):
            raise ApiException(status=404)
        if method == "GET" and path == f"/apis/{METAL3.group}/{METAL3.version}":  # discovery
            return {"kind": "APIResourceList", "groupVersion": f"{METAL3.group}/{METAL3.version}",
                    "resources": [{"name": METAL3.plural, "namespaced": True, "kind": "IPAddress"}]}
        if method == "POST":
            at = f"{path}/{body['metadata']['name']}"
            if at in self.objects:
                raise ApiException(status=409)
            return self.put(at, body)
        stored = self.objects.get(path)
        if stored is None:
            raise ApiException(status=404)
        if method == "GET":
            return copy.deepcopy(stored)
        wanted = (body or {}).get("preconditions") or (body or {}).get("metadata") or {}
        if wanted.get("uid") and wanted["uid"] != stored["metadata"]["uid"]:
            raise ApiException(status=409)
        if method == "PATCH":
            stored["metadata"].update({k: v for k, v in body["metadata"].items() if k != "uid"})
            if stored["metadata"].get("finalizers") is None:
                stored["metadata"].pop("finalizers", None)
            return self.put(path, stored)
        if stored["metadata"].get("finalizers"):
            stored["metadata"]["deletionTimestamp"] = "2024-01-01T00:00:00Z"
            return self.put(path, stored)
        del self.objects[path]
        return copy.deepcopy(stored)

    def metal3(self) -> dict | None:
        return self.objects.get(METAL3.path(NS, NAME))

    def lease(self) -> dict | None:
        return self.objects.get(LEASES.path(HOME, lockstore.lease_name(NS, NAME)))


class NamespaceTerminating(Server):
    """The namespace ns-a being deleted: a create of a Metal3 IPAddress there is refused (403) by
    the API server's NamespaceLifecycle admission, as it refuses every client, whatever its rights."""

    async def _call(self, method, path, body=None, content_type=None):
        if method == "POST" and path == METAL3.path(NS):
            self.calls.append((method, path))
            err = ApiException(status=403, reason="Forbidden")
            err.body = json.dumps({
                "kind": "Status", "status": "Failure", "reason": "Forbidden", "code": 403,
                "message": f"ipaddresses.ipam.metal3.io is forbidden: unable to create new content in namespace {NS} "
                           "because it is being terminated",
                "details": {"group": "ipam.metal3.io", "kind": "ipaddresses", "causes": [
                    {"reason": "NamespaceTerminating", "message": f"namespace {NS} is being terminated",
                     "field": "metadata.namespace"}]}})
            raise err
        return await super()._call(method, path, body, content_type)


def make_writer(server: Server, metal3_served: bool = True) -> ApiWriter:
    writer = ApiWriter(None, Inventory(), {kinds.IPADDRESS: METAL3} if metal3_served else {})
    writer.leases = (LEASES, HOME)
    writer._call = server._call
    return writer
