"""A shared guard's twin is given the owners its Lease is given (``api.ApiWriter._own_twin``). An earlier version,
still running, adds a pool to the owners of that twin (a pool of its own sharing the guard's sub-prefix): what the
twin holds then must not be lost when this version rewrites the owners, or the garbage collector takes the twin
(and ``locks.LockUpkeep`` the Lease, which never learnt the pool) while that pool still lives."""

from __future__ import annotations

import asyncio

import pytest
from kubernetes.client.rest import ApiException

from metal3_ipam.controller.api import Refusal
from metal3_ipam.controller.operator import LEASES
from metal3_ipam.core import kinds, lockstore
from metal3_ipam.core import objects as o
from metal3_ipam.core.actions import Create, SetMetadata
from metal3_ipam.testing import go_incluster as gi

from two_lock_stores import HOME, METAL3, NS, Server, make_writer as _writer

SUB = "fd00-0-0-0-0-0-0-4.126.nsip"


def _owner(name: str, uid: str) -> dict:
    return {"apiVersion": gi.POOL_API_VERSION, "kind": gi.IN_CLUSTER_IP_POOL, "name": name, "uid": uid}


def _shared_guard() -> dict:
    return {"apiVersion": kinds.METAL3_API_VERSION, "kind": "IPAddress",
            "metadata": {"name": SUB, "namespace": NS, "labels": {kinds.GUARD_LABEL: "fd00-0-0-0-0-0-0-4"},
                         "ownerReferences": [_owner("n1", "u1")]},
            "spec": {"address": "fd00::4", "prefix": 126,
                     "claim": {"name": "a", "namespace": NS, "apiVersion": gi.CAPI_API_VERSION,
                               "kind": "IPAddressClaim"},
                     "pool": {"name": "n1", "namespace": NS, "apiVersion": gi.POOL_API_VERSION,
                              "kind": gi.IN_CLUSTER_IP_POOL}}}


def test_an_owner_an_earlier_version_gave_a_shared_guards_twin_is_kept_when_its_lease_is_given_owners():
    server = Server()
    writer = _writer(server)
    view = asyncio.run(writer._create(Create(_shared_guard())))  # twin, then Lease: owned by n1
    twin_path = METAL3.path(NS, SUB)
    # An earlier version adds its pool n2 to the twin's owners (it knows no Lease).
    twin = server.objects[twin_path]
    server.put(twin_path, {**twin, "metadata": {**twin["metadata"],
                                                "ownerReferences": [*o.owner_references(twin), _owner("n2", "u2")]}})
    # This version's reconcile adds pool n3 to the guard it reads (the Lease, unchanged since read).
    asyncio.run(writer._patch(SetMetadata(o.ref(view), owner_references=(_owner("n1", "u1"), _owner("n3", "u3")),
                                          resource_version=o.meta(view).get("resourceVersion"))))
    assert "u2" in {r["uid"] for r in o.owner_references(server.objects[twin_path])}


class VersionChecked(Server):
    """The API server's answer to a merge patch naming a resourceVersion: 409 unless it is the stored one."""

    async def _call(self, method, path, body=None, content_type=None):
        wanted = ((body or {}).get("metadata") or {}).get("resourceVersion") if method == "PATCH" else None
        stored = self.objects.get(path)
        if wanted and stored is not None and stored["metadata"]["resourceVersion"] != wanted:
            self.calls.append((method, path))
            raise ApiException(status=409)
        return await super()._call(method, path, body, content_type)


def test_owners_refused_to_a_lease_changed_since_read_take_no_owner_from_its_twin():
    """The twin is given the owners first (the garbage collector keeps it while the Lease lives), and only ever
    given more: the write refused at the Lease afterwards leaves every owner the twin had (n3's, added, only holds
    it longer)."""
    server = VersionChecked()
    writer = _writer(server)
    view = asyncio.run(writer._create(Create(_shared_guard())))
    read = o.meta(view).get("resourceVersion")
    twin_path = METAL3.path(NS, SUB)
    # Another replica adds pool n2 to the guard: to its twin, then to its Lease (which changes its version).
    both = (_owner("n1", "u1"), _owner("n2", "u2"))
    asyncio.run(writer._patch(SetMetadata(o.ref(view), owner_references=both, resource_version=read)))
    assert {r["uid"] for r in o.owner_references(server.objects[twin_path])} == {"u1", "u2"}
    # This replica, from what it read before, adds pool n3: refused, the Lease changed since read.
    with pytest.raises(Refusal):
        asyncio.run(writer._patch(SetMetadata(o.ref(view), owner_references=(_owner("n1", "u1"), _owner("n3", "u3")),
                                              resource_version=read)))
    assert {"u1", "u2"} <= {r["uid"] for r in o.owner_references(server.objects[twin_path])}


class TwinBusy(VersionChecked):
    """An earlier version writes the twin (its labels) before each of this version's writes to it reaches the
    server: each is refused as changed since read."""

    async def _call(self, method, path, body=None, content_type=None):
        if method == "PATCH" and path == METAL3.path(NS, SUB):
            twin = self.objects[path]
            self.put(path, {**twin, "metadata": {**twin["metadata"], "labels": {**o.labels(twin), "x": path[-1]}}})
        return await super()._call(method, path, body, content_type)


def test_a_lease_is_given_no_owner_its_twin_could_not_be_given():
    """Else the twin, owned by fewer, is taken by the garbage collector while an owner the Lease names lives, and
    an earlier version, which reads the twin alone, sees no guard."""
    server = TwinBusy()
    writer = _writer(server)
    view = asyncio.run(writer._create(Create(_shared_guard())))
    try:
        asyncio.run(writer._patch(SetMetadata(o.ref(view), owner_references=(_owner("n1", "u1"), _owner("n2", "u2")),
                                              resource_version=o.meta(view).get("resourceVersion"))))
    except Refusal:
        pass
    lease = writer._as_view(server.objects[LEASES.path(HOME, lockstore.lease_name(NS, SUB))])
    assert {r["uid"] for r in o.owner_references(lease)} <= \
        {r["uid"] for r in o.owner_references(server.objects[METAL3.path(NS, SUB)])}


class TwinGivenMeanwhile(Server):
    """The upkeep gives the Lease its twin (``locks.LockUpkeep.give_twins``, from the Lease as read before) between
    this write's look at the twin (none) and its write to the Lease."""

    def __init__(self, twin: dict) -> None:
        super().__init__()
        self.twin = twin

    async def _call(self, method, path, body=None, content_type=None):
        if method == "PATCH" and path.startswith(LEASES.path(HOME)) and self.twin is not None:
            twin, self.twin = self.twin, None
            await super()._call("POST", METAL3.path(NS), body=twin)
        return await super()._call(method, path, body, content_type)


def test_a_twin_given_while_its_lease_is_given_owners_is_given_them_too():
    """Else the twin, owned by n1 alone, is taken by the garbage collector once n1 is gone while n2, which the Lease
    names, lives: an earlier version, which reads the twin alone, sees no guard of that sub-prefix."""
    guard = _shared_guard()
    server = TwinGivenMeanwhile(lockstore.moved_over(guard))
    writer = _writer(server)
    lease = server.put(LEASES.path(HOME, lockstore.lease_name(NS, SUB)), lockstore.to_lease(guard, HOME))
    view = writer._as_view(lease)  # a Lease made while the Metal3 IPAddress kind was not served: no twin
    writer.inventory.upsert(view)
    asyncio.run(writer._patch(SetMetadata(o.ref(view), owner_references=(_owner("n1", "u1"), _owner("n2", "u2")),
                                          resource_version=o.meta(view).get("resourceVersion"))))
    assert {r["uid"] for r in o.owner_references(server.objects[METAL3.path(NS, SUB)])} >= {"u1", "u2"}
