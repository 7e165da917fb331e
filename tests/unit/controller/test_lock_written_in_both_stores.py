"""Where Metal3 IPAddresses can be written, a lock of the Lease store is written as its Metal3 IPAddress first (its
twin), then as its Lease (``api.ApiWriter``): an earlier version still running beside this one, which knows no
Lease, refuses and is refused by the IPAddress of the lock's name, as the replicas that have no Metal3 IPAddresses
are by its Lease. Where that kind is not served (the Go in-cluster provider's manifests), the Lease alone."""

from __future__ import annotations

import asyncio

import pytest

from metal3_ipam.controller.api import Refusal
from metal3_ipam.controller.operator import LEASES
from metal3_ipam.core import kinds, lockstore
from metal3_ipam.core import objects as o
from metal3_ipam.core.actions import Create, Delete
from two_lock_stores import HOME, METAL3, NAME, NS, Server, lock_body, make_writer

def test_a_lock_is_written_as_its_metal3_ipaddress_first_then_as_its_lease():
    server = Server()
    writer = make_writer(server)
    view = asyncio.run(writer._create(Create(lock_body())))
    assert [c for c in server.calls if c[0] == "POST"] == [("POST", METAL3.path(NS)), ("POST", LEASES.path(HOME))]
    assert lockstore.same_lock(server.metal3(), lock_body()) and not lockstore.stored_in_lease(server.metal3())
    assert lockstore.same_lock(lockstore.from_lease(server.lease()), lock_body())
    assert lockstore.stored_in_lease(view) and lockstore.stored_in_lease(writer.inventory.get(kinds.IPADDRESS, NS, NAME))


def test_an_earlier_versions_ipaddress_of_the_name_refuses_the_lock_and_no_lease_is_written():
    server = Server()
    server.put(METAL3.path(NS, NAME), lock_body("d"))  # an earlier version's lock of that IP, not yet seen
    writer = make_writer(server)
    with pytest.raises(Refusal):
        asyncio.run(writer._create(Create(lock_body())))
    assert server.lease() is None and o.spec(server.metal3())["claim"]["name"] == "d"
    # Learnt: the reconcile decides again with the earlier version's lock filed.
    assert o.spec(writer.inventory.get(kinds.IPADDRESS, NS, NAME))["claim"]["name"] == "d"


def test_a_lease_of_another_lock_refuses_it_and_the_ipaddress_made_for_it_is_let_go():
    server = Server()
    server.put(LEASES.path(HOME, lockstore.lease_name(NS, NAME)), lockstore.to_lease(lock_body("x"), HOME))
    writer = make_writer(server)
    with pytest.raises(Refusal):
        asyncio.run(writer._create(Create(lock_body())))
    assert server.metal3() is None
    assert o.spec(lockstore.from_lease(server.lease()))["claim"]["name"] == "x"


def test_a_lease_of_the_same_lock_is_taken_as_written():
    """Its answer lost on the way, the Lease is found holding the same IP for the same claim: the twin is kept."""
    server = Server()
    server.put(LEASES.path(HOME, lockstore.lease_name(NS, NAME)), lockstore.to_lease(lock_body(), HOME))
    writer = make_writer(server)
    view = asyncio.run(writer._create(Create(lock_body())))
    assert lockstore.stored_in_lease(view) and server.metal3() is not None


def test_a_lock_deleted_lets_its_ipaddress_go_after_its_lease():
    server = Server()
    writer = make_writer(server)
    view = asyncio.run(writer._create(Create(lock_body())))
    lease_path = LEASES.path(HOME, lockstore.lease_name(NS, NAME))
    server.objects[lease_path]["metadata"].pop("finalizers")
    writer.inventory.upsert(lockstore.from_lease(server.objects[lease_path]))
    server.calls.clear()
    asyncio.run(writer._delete(Delete(o.ref(writer.inventory.get(kinds.IPADDRESS, NS, NAME)))))
    assert server.lease() is None and server.metal3() is None
    deletes = [path for method, path in server.calls if method == "DELETE"]
    assert deletes == [lease_path, METAL3.path(NS, NAME)]
    assert lockstore.stored_in_lease(view)


def test_a_lock_deleted_keeps_an_ipaddress_of_its_name_that_is_anotherlock_body():
    """An earlier version released the claim (its IPAddress deleted) and locked the IP again for another claim
    before this version let the lock's Lease go: that IPAddress is the other claim's lock, and holds."""
    server = Server()
    writer = make_writer(server)
    asyncio.run(writer._create(Create(lock_body())))
    lease_path = LEASES.path(HOME, lockstore.lease_name(NS, NAME))
    server.objects[lease_path]["metadata"].pop("finalizers")
    writer.inventory.upsert(lockstore.from_lease(server.objects[lease_path]))
    del server.objects[METAL3.path(NS, NAME)]
    server.put(METAL3.path(NS, NAME), lock_body("d"))
    asyncio.run(writer._delete(Delete(o.ref(writer.inventory.get(kinds.IPADDRESS, NS, NAME)))))
    assert server.lease() is None and o.spec(server.metal3())["claim"]["name"] == "d"


def test_where_metal3_ipaddresses_are_not_served_a_lock_is_its_lease_alone():
    server = Server(metal3_served=False)
    writer = make_writer(server, metal3_served=False)
    asyncio.run(writer._create(Create(lock_body())))
    assert server.metal3() is None and server.lease() is not None
    assert not writer.twins()


def test_where_metal3_ipaddresses_are_served_but_not_listable_a_lock_is_its_lease_alone():
    server = Server()
    writer = make_writer(server, metal3_served=False)
    writer.metal3_may_come = False  # served, but this controller may not list them
    asyncio.run(writer._create(Create(lock_body())))
    assert [c for c in server.calls if c[0] == "POST"] == [("POST", LEASES.path(HOME))]
    assert server.metal3() is None and server.lease() is not None


def _owned_by_claim(lock: dict, uid: str) -> dict:
    claim = lock["spec"]["claim"]
    lock["metadata"]["ownerReferences"] = [{"apiVersion": claim["apiVersion"], "kind": claim["kind"],
                                            "name": claim["name"], "uid": uid}]
    return lock


def test_a_lock_deleted_keeps_the_ipaddress_of_its_name_held_for_another_incarnation_of_its_claim():
    """Claim a deleted and made again under its name: an earlier version released the first one's lock (the twin)
    and locked the IP again for the second before this version let the first one's Lease go. That IPAddress names
    the same claim, pool and IP, but another incarnation of the claim (its owner's uid): it is the second one's
    lock, and holds."""
    server = Server()
    writer = make_writer(server)
    asyncio.run(writer._create(Create(_owned_by_claim(lock_body("a"), "claim-uid-1"))))
    lease_path = LEASES.path(HOME, lockstore.lease_name(NS, NAME))
    server.objects[lease_path]["metadata"].pop("finalizers")
    writer.inventory.upsert(lockstore.from_lease(server.objects[lease_path]))
    del server.objects[METAL3.path(NS, NAME)]
    server.put(METAL3.path(NS, NAME), _owned_by_claim(lock_body("a"), "claim-uid-2"))
    asyncio.run(writer._delete(Delete(o.ref(writer.inventory.get(kinds.IPADDRESS, NS, NAME)))))
    assert server.lease() is None and server.metal3() is not None
    assert o.owner_references(server.metal3())[0]["uid"] == "claim-uid-2"
