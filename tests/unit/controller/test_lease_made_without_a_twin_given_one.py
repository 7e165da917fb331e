"""A lock made as its Lease alone (where, or while, the Metal3 IPAddress kind was not served) is given its twin once
locks have twins (``locks.LockUpkeep.give_twins``): an earlier version, which reads Metal3 IPAddresses alone, is then
refused the name as it is for a lock made with its twin."""

from __future__ import annotations

import asyncio

from metal3_ipam.controller.locks import LockUpkeep
from metal3_ipam.controller.operator import LEASES, Controller, Listing, Page
from metal3_ipam.core import kinds, lockstore
from metal3_ipam.core import objects as o
from metal3_ipam.core.actions import Create
from metal3_ipam.testing import go_incluster as gi

from resuming import Kicks
from two_lock_stores import HOME, METAL3, NAME, NS, NamespaceTerminating, Server, lock_body, make_writer


def _leased(server: Server, writer) -> Controller:
    stored = server.put(LEASES.path(HOME, lockstore.lease_name(NS, NAME)), lockstore.to_lease(lock_body("a"), HOME))
    controller = Controller(writer.inventory, Kicks(), writer=writer)
    controller.on_lease_event("ADDED", stored)
    return controller


def test_a_lease_without_a_twin_is_given_one_where_locks_have_twins():
    server = Server()
    writer = make_writer(server)
    upkeep = LockUpkeep(_leased(server, writer), writer, HOME, may_act=lambda: True)
    asyncio.run(upkeep.give_twins())
    twin = server.metal3()
    assert twin is not None and lockstore.same_lock(twin, lock_body("a"))
    assert lockstore.STORED_IN not in o.annotations(twin)
    assert [c for c in server.calls if c[0] == "POST"] == [("POST", METAL3.path(NS))]


class LeaseReleasedMeanwhile(Server):
    """The lock's claim released while its twin is being written: its Lease deleted."""

    async def _call(self, method, path, body=None, content_type=None):
        answer = await super()._call(method, path, body, content_type)
        if method == "POST" and path == METAL3.path(NS):
            del self.objects[[p for p in self.objects if "/leases/" in p][0]]
        return answer


def test_a_twin_given_to_a_lease_released_meanwhile_is_let_go():
    server = LeaseReleasedMeanwhile()
    writer = make_writer(server)
    upkeep = LockUpkeep(_leased(server, writer), writer, HOME, may_act=lambda: True)
    asyncio.run(upkeep.give_twins())
    assert server.lease() is None and server.metal3() is None


def test_a_lease_is_given_no_twin_where_locks_have_none():
    server = Server(metal3_served=False)
    writer = make_writer(server, metal3_served=False)
    upkeep = LockUpkeep(_leased(server, writer), writer, HOME, may_act=lambda: True)
    asyncio.run(upkeep.give_twins())
    assert [c for c in server.calls if c[0] == "POST"] == []


def test_no_twin_is_given_and_nothing_fails_once_the_metal3_crd_is_removed():
    """Giving twins ends quietly where none can be written (the kind no longer served): the guards are collected
    after it, in the same wake."""
    server = Server(metal3_served=False)  # removed since start-up
    writer = make_writer(server)
    upkeep = LockUpkeep(_leased(server, writer), writer, HOME, may_act=lambda: True)
    asyncio.run(upkeep.give_twins())
    assert server.lease() is not None and server.metal3() is None


def _listing_of_metal3(items: list[dict], version: str) -> Listing:
    listing = Listing(kinds.IPADDRESS, NS, lambda token: Page(items, version, None))
    listing.only = lambda stored: lockstore.stored_in_lease(stored) is None
    return listing


def test_a_lease_whose_twin_went_unseen_is_given_one_again_after_a_listing_without_it():
    """The twin deleted while its Lease stands (the garbage collector, a user, the Metal3 CRD deleted and installed
    again), and its DELETED event lost in a watch gap: the listing after the gap, which does not hold it, proves it
    gone, and the Lease is given its twin again (else an earlier version sees the IP free)."""
    server = Server()
    writer = make_writer(server)
    asyncio.run(writer._create(Create(lock_body("a"))))  # twin, then Lease
    controller = Controller(writer.inventory, Kicks(), writer=writer)
    controller.on_event("ADDED", server.metal3())  # the twin's news: hidden behind its Lease
    assert (NS, NAME) in controller.legacy
    del server.objects[METAL3.path(NS, NAME)]  # gone; its DELETED event lost
    asyncio.run(controller.settle(_listing_of_metal3([], "100")))  # the listing after the gap, or at resync
    upkeep = LockUpkeep(controller, writer, HOME, may_act=lambda: True)
    asyncio.run(upkeep.give_twins())
    assert server.metal3() is not None and lockstore.same_lock(server.metal3(), lock_body("a"))


def _pool_owner(name: str, uid: str) -> dict:
    return {"apiVersion": gi.POOL_API_VERSION, "kind": gi.IN_CLUSTER_IP_POOL, "name": name, "uid": uid}


def test_a_twin_given_to_a_lease_has_every_owner_the_lease_has_when_it_is_made():
    """The Lease of a guard the namespace's pools share is given pool n2 (its twin asked first: none yet) while its
    twin is being given from what was read before: the twin is owned by n2 too, else the garbage collector takes it
    once n1 is gone while n2 lives and the Lease holds, and an earlier version sees no guard of that sub-prefix."""
    server = Server()
    writer = make_writer(server)
    guard = lock_body("a")
    guard["metadata"].update(name="fd00-0-0-0-0-0-0-4.126.nsip", ownerReferences=[_pool_owner("n1", "u1")],
                             labels={kinds.GUARD_LABEL: "fd00-0-0-0-0-0-0-4"})
    guard["metadata"].pop("finalizers")
    guard["spec"].update(address="fd00::4", prefix=126)
    lease_path = LEASES.path(HOME, lockstore.lease_name(NS, o.name(guard)))
    read = server.put(lease_path, lockstore.to_lease(guard, HOME))
    controller = Controller(writer.inventory, Kicks(), writer=writer)
    controller.on_lease_event("ADDED", read)
    joined = {**read, "metadata": {**read["metadata"], "annotations": {
        **o.annotations(read), **lockstore.owners_patch(guard, (_pool_owner("n1", "u1"), _pool_owner("n2", "u2")))}}}
    server.put(lease_path, joined)  # n2 added to the Lease; its news not filed yet
    upkeep = LockUpkeep(controller, writer, HOME, may_act=lambda: True)
    asyncio.run(upkeep.give_twins())
    twin = server.objects[METAL3.path(NS, o.name(guard))]
    assert {r["uid"] for r in o.owner_references(twin)} >= {"u1", "u2"}


def test_a_twin_refused_in_a_namespace_being_deleted_does_not_stop_the_twins_of_the_others():
    server = NamespaceTerminating()
    writer = make_writer(server)
    controller = _leased(server, writer)  # a Lease of ns-a, being deleted
    other = lock_body("b")
    other["metadata"]["namespace"] = other["spec"]["claim"]["namespace"] = other["spec"]["pool"]["namespace"] = "ns-b"
    controller.on_lease_event("ADDED", server.put(LEASES.path(HOME, lockstore.lease_name("ns-b", NAME)),
                                                  lockstore.to_lease(other, HOME)))
    asyncio.run(LockUpkeep(controller, writer, HOME, may_act=lambda: True).give_twins())
    assert server.objects.get(METAL3.path("ns-b", NAME)) is not None
