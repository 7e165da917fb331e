"""Whether a lock of the Lease store has a twin is decided by the Metal3 IPAddress kind being served
(``api.ApiWriter.twins``), which the controller discovers once, at start (``operator.discover``). The Metal3 CRD
installed or removed while it runs changes what is right: an earlier version's Metal3 IPAddress of a lock's name,
written after the CRD came, must refuse the lock; a twin that cannot be written because the kind went must not stop
every allocation."""

from __future__ import annotations

import asyncio

import pytest
from kubernetes.client.rest import ApiException

from metal3_ipam.controller.api import Refusal
from metal3_ipam.core import kinds, lockstore
from metal3_ipam.core import objects as o
from metal3_ipam.core.actions import Create, Delete

from two_lock_stores import METAL3, NAME, NS, NamespaceTerminating, Server, lock_body as _lock, make_writer as _writer


def test_a_lock_made_after_the_metal3_crd_came_is_refused_by_an_earlier_versions_ipaddress_of_its_name():
    server = Server()
    writer = _writer(server, metal3_served=False)  # discovered before the Metal3 CRD was installed
    server.put(METAL3.path(NS, NAME), _lock("d"))  # the CRD installed since; an earlier version's lock of the IP
    with pytest.raises(Refusal):
        asyncio.run(writer._create(Create(_lock("a"))))


class CrdRemoved(Server):
    """The Metal3 CRD deleted after start: its resources answer 404."""

    async def _call(self, method, path, body=None, content_type=None):
        if path.startswith(f"/apis/{kinds.METAL3_GROUP}/"):
            self.calls.append((method, path))
            raise ApiException(status=404)
        return await super()._call(method, path, body, content_type)


def test_a_lock_is_taken_as_its_lease_once_the_metal3_crd_is_removed():
    server = CrdRemoved()
    writer = _writer(server)  # discovered while the Metal3 CRD was installed
    view = asyncio.run(writer._create(Create(_lock("a"))))
    assert server.lease() is not None and o.name(view) == NAME


def test_a_lock_made_after_the_metal3_crd_came_is_written_with_its_twin_and_the_controller_told():
    server = Server()  # the Metal3 CRD installed since start-up
    writer = _writer(server, metal3_served=False)
    told = []
    writer.on_metal3_came = lambda: told.append(True)
    asyncio.run(writer._create(Create(_lock("a"))))
    assert server.metal3() is not None and server.lease() is not None
    assert told == [True] and writer.twins()
    writer.inventory.upsert(lockstore.from_lease(server.lease()))
    server.lease()["metadata"].pop("finalizers")
    asyncio.run(writer._delete(Delete(o.ref(writer.inventory.get(kinds.IPADDRESS, NS, NAME)))))
    assert server.lease() is None and server.metal3() is None  # its twin let go after it


def test_a_lock_where_the_metal3_crd_has_not_come_is_its_lease_alone_and_nothing_is_told():
    server = Server(metal3_served=False)
    writer = _writer(server, metal3_served=False)
    told = []
    writer.on_metal3_came = lambda: told.append(True)
    asyncio.run(writer._create(Create(_lock("a"))))
    assert server.lease() is not None and told == [] and not writer.twins()


def test_the_metal3_ipaddress_kind_that_came_is_served_as_a_kind_granted_since_start_up():
    """Listed and watched without a restart (``Runtime._serve_granted``), as a kind this controller may list since
    start-up is: its locks are read, and the Leases made without a twin given one."""
    from metal3_ipam.controller import runtime as rt

    runtime = rt.Runtime(rt.Options(lock_namespace="ipam-system", namespaces=[]))
    runtime.metal3_may_come = True
    served = []

    async def serve_granted():
        served.append(dict(runtime.refused))

    runtime._serve_granted = serve_granted

    async def came():
        runtime._metal3_came()
        await runtime.grant_task

    asyncio.run(came())
    assert served == [{kinds.IPADDRESS: METAL3}] and not runtime.metal3_may_come


class Metal3Forbidden(Server):
    """The Metal3 CRDs installed since start-up, and a role that grants nothing on ipam.metal3.io (the Go in-cluster
    provider's): its resources answer 403; its discovery answers, as it does every client."""

    async def _call(self, method, path, body=None, content_type=None):
        if path.startswith(f"/apis/{kinds.METAL3_GROUP}/") and path != f"/apis/{METAL3.group}/{METAL3.version}":
            self.calls.append((method, path))
            raise ApiException(status=403)
        return await super()._call(method, path, body, content_type)


def test_a_controller_refused_the_metal3_kind_tries_no_twin_again():
    server = Metal3Forbidden()
    writer = _writer(server, metal3_served=False)
    asyncio.run(writer._create(Create(_lock("a"))))
    other = _lock("b")
    other["metadata"]["name"] = "p.10-0-0-6.ip"
    other["spec"]["address"] = "10.0.0.6"
    asyncio.run(writer._create(Create(other)))
    assert [c for c in server.calls if c[0] != "GET" and c[1].startswith(f"/apis/{kinds.METAL3_GROUP}/")] == [
        ("POST", METAL3.path(NS))]
    assert not writer.twins() and len([c for c in server.calls if c[0] == "POST"]) == 3


def test_a_controller_where_the_metal3_kind_is_not_served_only_reads_its_discovery():
    """Where the Metal3 CRDs are not installed (the Go in-cluster provider's manifests), nothing is written there, and
    so nothing is refused (that role grants nothing on ipam.metal3.io)."""
    server = Server(metal3_served=False)
    writer = _writer(server, metal3_served=False)
    asyncio.run(writer._create(Create(_lock("a"))))
    assert [c for c in server.calls if c[1].startswith(f"/apis/{kinds.METAL3_GROUP}/")] == [
        ("GET", f"/apis/{METAL3.group}/{METAL3.version}")]
    assert server.lease() is not None


def test_the_earlier_versions_ipaddress_that_refused_a_lock_is_filed_before_that_kind_is_listed():
    """The Metal3 IPAddress kind came (a twin refused by an IPAddress of its name) and is not listed yet
    (``Runtime._serve_granted``): the IPAddress that refused the lock is read and filed, so that the pool is decided
    again with its IP held, not handed out again and again for as long as that kind is not listed."""
    server = Server()
    writer = _writer(server, metal3_served=False)
    server.put(METAL3.path(NS, NAME), _lock("d"))
    for _ in range(2):  # the pool decided again, the twin tried again (the kind came)
        with pytest.raises(Refusal):
            asyncio.run(writer._create(Create(_lock("a"))))
        filed = writer.inventory.get(kinds.IPADDRESS, NS, NAME)
        assert filed is not None and o.spec(filed)["claim"]["name"] == "d"


def test_a_twin_refused_in_a_namespace_being_deleted_does_not_end_the_twins_of_the_others():
    """That 403 says nothing of this controller's rights: the locks of every other namespace are written with their
    twins still, so that an earlier version's lock of their name refuses them."""
    server = NamespaceTerminating()
    writer = _writer(server, metal3_served=False)
    asyncio.run(writer._create(Create(_lock("a"))))  # the lock of ns-a: its Lease alone
    other = _lock("b")
    other["metadata"]["namespace"] = other["spec"]["claim"]["namespace"] = other["spec"]["pool"]["namespace"] = "ns-b"
    asyncio.run(writer._create(Create(other)))
    assert server.objects.get(METAL3.path("ns-b", NAME)) is not None and writer.twins()
