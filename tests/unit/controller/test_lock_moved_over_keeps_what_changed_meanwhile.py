"""A lock an earlier version wrote as a Metal3 IPAddress moved to its Lease (``locks.LockUpkeep.move_over``) while the
reconcile still writes to it where it is: what the IPAddress gains between the read the Lease is made of and its
deletion (a pool added to the owners of a guard the namespace's pools share) must not be lost with it."""

from __future__ import annotations

import asyncio
import copy
import json

from kubernetes.client.rest import ApiException

from metal3_ipam.controller.api import Resource
from metal3_ipam.controller.locks import LockUpkeep
from metal3_ipam.controller.operator import Controller
from metal3_ipam.core import kinds, lockstore
from metal3_ipam.core import objects as o
from metal3_ipam.core.inventory import Inventory
from metal3_ipam.testing import go_incluster as gi

from resuming import Kicks

HOME = "ipam-system"
NS = "ns-a"
SUB = "fd00-0-0-0-0-0-0-4.126.nsip"
METAL3 = Resource(kinds.METAL3_GROUP, kinds.METAL3_VERSION, "ipaddresses")


def _owner(name: str, uid: str) -> dict:
    return {"apiVersion": gi.POOL_API_VERSION, "kind": gi.IN_CLUSTER_IP_POOL, "name": name, "uid": uid}


def _legacy_shared_guard() -> dict:
    """The guard of fd00::4/126 the namespace's pools share, as an earlier version wrote it: owned by n1."""
    return {"apiVersion": kinds.METAL3_API_VERSION, "kind": "IPAddress",
            "metadata": {"name": SUB, "namespace": NS, "uid": "metal3-guard", "resourceVersion": "10",
                         "labels": {kinds.GUARD_LABEL: "fd00-0-0-0-0-0-0-4"}, "ownerReferences": [_owner("n1", "u1")]},
            "spec": {"address": "fd00::4", "prefix": 126,
                     "claim": {"name": "a", "namespace": NS, "apiVersion": gi.CAPI_API_VERSION,
                               "kind": "IPAddressClaim"},
                     "pool": {"name": "n1", "namespace": NS, "apiVersion": gi.POOL_API_VERSION,
                              "kind": gi.IN_CLUSTER_IP_POOL}}}


class Server:
    """Both stores, with the API server's preconditions; ``meanwhile`` runs while the Lease is being created (the
    reconcile's write to the IPAddress, where the inventory still shows it)."""

    def __init__(self, legacy: dict, meanwhile) -> None:
        self.resources = {kinds.IPADDRESS: METAL3}
        self.metal3 = {METAL3.path(NS, SUB): copy.deepcopy(legacy)}
        self.leases: dict[str, dict] = {}
        self.meanwhile = meanwhile

    async def _call(self, method: str, path: str, body=None, content_type=None):
        if method == "POST":
            self.meanwhile(self)
            lease = copy.deepcopy(body)
            lease["metadata"].update(uid="lease-1", resourceVersion="20")
            self.leases[lease["metadata"]["name"]] = lease
            return copy.deepcopy(lease)
        if "/leases/" in path and method == "DELETE":
            lease = self.leases.get(path.rsplit("/", 1)[1])
            if lease is None:
                raise ApiException(status=404)
            if any(lease["metadata"].get(k) != v for k, v in body["preconditions"].items()):
                raise ApiException(status=409)
            return self.leases.pop(path.rsplit("/", 1)[1])
        if "/leases/" in path:
            return self._lease_patch(path.rsplit("/", 1)[1], body)
        stored = self.metal3.get(path)
        if stored is None:
            raise ApiException(status=404)
        wanted = (body or {}).get("preconditions") or {}
        if method == "PATCH":
            wanted = {k: v for k, v in body["metadata"].items() if k in ("uid", "resourceVersion")}
        if any(str(o.meta(stored).get(k)) != str(v) for k, v in wanted.items()):
            raise ApiException(status=409)
        if method == "DELETE":
            del self.metal3[path]
        return copy.deepcopy(stored)


    def _lease_patch(self, name: str, body: dict):
        lease = self.leases.get(name)
        if lease is None:
            raise ApiException(status=404)
        if body["metadata"].get("resourceVersion") != lease["metadata"]["resourceVersion"]:
            raise ApiException(status=409)
        lease["metadata"]["annotations"].update(body["metadata"].get("annotations") or {})
        lease["metadata"]["resourceVersion"] = str(int(lease["metadata"]["resourceVersion"]) + 1)
        return copy.deepcopy(lease)


def _second_pool_joins(server: Server) -> None:
    """Pool n2 adds itself to the owners of the IPAddress (on condition that it is unchanged since read)."""
    guard = server.metal3[METAL3.path(NS, SUB)]
    guard["metadata"]["ownerReferences"] = [*guard["metadata"]["ownerReferences"], _owner("n2", "u2")]
    guard["metadata"]["resourceVersion"] = "11"


def test_an_owner_added_to_a_shared_guard_while_it_moves_to_its_lease_is_kept():
    legacy = _legacy_shared_guard()
    inventory = Inventory()
    server = Server(legacy, _second_pool_joins)
    controller = Controller(inventory, Kicks(), writer=server)
    upkeep = LockUpkeep(controller, server, HOME, may_act=lambda: True)
    controller.on_event("ADDED", legacy)
    asyncio.run(upkeep.move_over())

    lease = server.leases.get(lockstore.lease_name(NS, SUB))
    # Either the Lease holds both pools, or the IPAddress that does is still there (to be moved again).
    assert _owners(lease) == {"u1", "u2"} or METAL3.path(NS, SUB) in server.metal3


def _owners(lease: dict | None) -> set[str]:
    return {r["uid"] for r in json.loads(lease["metadata"]["annotations"][lockstore.LOCK_ANNOTATION])
            ["ownerReferences"]} if lease else set()


def test_an_owner_an_earlier_version_adds_to_a_shared_guards_ipaddress_is_given_to_its_lease():
    """The IPAddress is kept beside the Lease (an earlier version reads it): a pool the earlier version adds to its
    owners, its news filed, is added to the Lease's, so that the guard is not collected while that pool lives."""
    legacy = _legacy_shared_guard()
    server = Server(legacy, _second_pool_joins)
    controller = Controller(Inventory(), Kicks(), writer=server)
    upkeep = LockUpkeep(controller, server, HOME, may_act=lambda: True)
    controller.on_event("ADDED", legacy)
    asyncio.run(upkeep.move_over())
    assert _owners(server.leases[lockstore.lease_name(NS, SUB)]) == {"u1"}  # made of the IPAddress as filed

    controller.on_event("MODIFIED", server.metal3[METAL3.path(NS, SUB)])  # the IPAddress's news: n2 joined
    asyncio.run(upkeep.move_over())
    assert _owners(server.leases[lockstore.lease_name(NS, SUB)]) == {"u1", "u2"}
    view = controller.inventory.get(kinds.IPADDRESS, NS, SUB)
    assert lockstore.stored_in_lease(view) and {r["uid"] for r in o.owner_references(view)} == {"u1", "u2"}
    assert METAL3.path(NS, SUB) in server.metal3 and not controller.unsettled


def _released_and_locked_again(server: Server) -> None:
    """An earlier version releases the IPAddress's claim (deletes it) and locks the IP for another claim under the
    same name, while the Lease is being made of what was filed."""
    path = METAL3.path(NS, SUB)
    again = copy.deepcopy(server.metal3.pop(path))
    again["metadata"].update(uid="metal3-again", resourceVersion="12")
    again["spec"]["claim"] = {**again["spec"]["claim"], "name": "d"}
    server.metal3[path] = again


def _released(server: Server) -> None:
    del server.metal3[METAL3.path(NS, SUB)]


def test_a_lock_released_while_it_is_given_its_lease_is_not_brought_back_by_it():
    """The Lease made of an IPAddress that went meanwhile is deleted again: else it would hold the IP for a claim
    released, hiding the lock an earlier version wrote since under that name for another claim."""
    for meanwhile in (_released, _released_and_locked_again):
        legacy = _legacy_shared_guard()
        server = Server(legacy, meanwhile)
        controller = Controller(Inventory(), Kicks(), writer=server)
        upkeep = LockUpkeep(controller, server, HOME, may_act=lambda: True)
        controller.on_event("ADDED", legacy)
        asyncio.run(upkeep.move_over())
        assert not server.leases, meanwhile.__name__
        assert not lockstore.stored_in_lease(controller.inventory.get(kinds.IPADDRESS, NS, SUB))
