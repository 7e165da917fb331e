"""Where Metal3 IPAddresses can be written, a lock of the Lease store is written as its Metal3 IPAddress first (its
twin), then as its Lease (``api.ApiWriter``): an earlier version still running beside this one, which knows no
Lease, refuses and is refused by the IPAddress of the lock's name, as the replicas that have no Metal3 IPAddresses
are by its Lease. Where that kind is not served (the Go in-cluster provider's manifests), the Lease alone."""

from __future__ import annotations

import asyncio
import copy

import pytest
from kubernetes.client.rest import ApiException

from metal3_ipam.controller.api import ApiWriter, Refusal, Resource
from metal3_ipam.controller.operator import LEASES
from metal3_ipam.core import kinds, lockstore
from metal3_ipam.core import objects as o
from metal3_ipam.core.actions import Create, Delete
from metal3_ipam.core.inventory import Inventory
from metal3_ipam.testing import go_incluster as gi

HOME = "ipam-system"
NS = "ns-a"
NAME = "p.10-0-0-5.ip"
METAL3 = Resource(kinds.METAL3_GROUP, kinds.METAL3_VERSION, "ipaddresses")


def _lock(claim: str = "a") -> dict:
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

    def __init__(self) -> None:
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


def _writer(server: Server, metal3_served: bool = True) -> ApiWriter:
    writer = ApiWriter(None, Inventory(), {kinds.IPADDRESS: METAL3} if metal3_served else {})
    writer.leases = (LEASES, HOME)
    writer._call = server._call
    return writer


def test_a_lock_is_written_as_its_metal3_ipaddress_first_then_as_its_lease():
    server = Server()
    writer = _writer(server)
    view = asyncio.run(writer._create(Create(_lock())))
    assert [c for c in server.calls if c[0] == "POST"] == [("POST", METAL3.path(NS)), ("POST", LEASES.path(HOME))]
    assert lockstore.same_lock(server.metal3(), _lock()) and not lockstore.stored_in_lease(server.metal3())
    assert lockstore.same_lock(lockstore.from_lease(server.lease()), _lock())
    assert lockstore.stored_in_lease(view) and lockstore.stored_in_lease(writer.inventory.get(kinds.IPADDRESS, NS, NAME))


def test_an_earlier_versions_ipaddress_of_the_name_refuses_the_lock_and_no_lease_is_written():
    server = Server()
    server.put(METAL3.path(NS, NAME), _lock("d"))  # an earlier version's lock of that IP, not yet seen
    writer = _writer(server)
    with pytest.raises(Refusal):
        asyncio.run(writer._create(Create(_lock())))
    assert server.lease() is None and o.spec(server.metal3())["claim"]["name"] == "d"
    # Learnt: the reconcile decides again with the earlier version's lock filed.
    assert o.spec(writer.inventory.get(kinds.IPADDRESS, NS, NAME))["claim"]["name"] == "d"


def test_a_lease_of_another_lock_refuses_it_and_the_ipaddress_made_for_it_is_let_go():
    server = Server()
    server.put(LEASES.path(HOME, lockstore.lease_name(NS, NAME)), lockstore.to_lease(_lock("x"), HOME))
    writer = _writer(server)
    with pytest.raises(Refusal):
        asyncio.run(writer._create(Create(_lock())))
    assert server.metal3() is None
    assert o.spec(lockstore.from_lease(server.lease()))["claim"]["name"] == "x"


def test_a_lease_of_the_same_lock_is_taken_as_written():
    """Its answer lost on the way, the Lease is found holding the same IP for the same claim: the twin is kept."""
    server = Server()
    server.put(LEASES.path(HOME, lockstore.lease_name(NS, NAME)), lockstore.to_lease(_lock(), HOME))
    writer = _writer(server)
    view = asyncio.run(writer._create(Create(_lock())))
    assert lockstore.stored_in_lease(view) and server.metal3() is not None


def test_a_lock_deleted_lets_its_ipaddress_go_after_its_lease():
    server = Server()
    writer = _writer(server)
    view = asyncio.run(writer._create(Create(_lock())))
    lease_path = LEASES.path(HOME, lockstore.lease_name(NS, NAME))
    server.objects[lease_path]["metadata"].pop("finalizers")
    writer.inventory.upsert(lockstore.from_lease(server.objects[lease_path]))
    server.calls.clear()
    asyncio.run(writer._delete(Delete(o.ref(writer.inventory.get(kinds.IPADDRESS, NS, NAME)))))
    assert server.lease() is None and server.metal3() is None
    deletes = [path for method, path in server.calls if method == "DELETE"]
    assert deletes == [lease_path, METAL3.path(NS, NAME)]
    assert lockstore.stored_in_lease(view)


def test_a_lock_deleted_keeps_an_ipaddress_of_its_name_that_is_another_lock():
    """An earlier version released the claim (its IPAddress deleted) and locked the IP again for another claim
    before this version let the lock's Lease go: that IPAddress is the other claim's lock, and holds."""
    server = Server()
    writer = _writer(server)
    asyncio.run(writer._create(Create(_lock())))
    lease_path = LEASES.path(HOME, lockstore.lease_name(NS, NAME))
    server.objects[lease_path]["metadata"].pop("finalizers")
    writer.inventory.upsert(lockstore.from_lease(server.objects[lease_path]))
    del server.objects[METAL3.path(NS, NAME)]
    server.put(METAL3.path(NS, NAME), _lock("d"))
    asyncio.run(writer._delete(Delete(o.ref(writer.inventory.get(kinds.IPADDRESS, NS, NAME)))))
    assert server.lease() is None and o.spec(server.metal3())["claim"]["name"] == "d"


def test_where_metal3_ipaddresses_are_not_served_a_lock_is_its_lease_alone():
    server = Server()
    writer = _writer(server, metal3_served=False)
    asyncio.run(writer._create(Create(_lock())))
    assert [c for c in server.calls if c[0] == "POST"] == [("POST", LEASES.path(HOME))]
    assert server.metal3() is None and server.lease() is not None
