"""A lock moved over (its Lease created, its Metal3 IPAddress deleted) by another replica between the two listings
of the locks (``operator.lock_listings``: the Leases first, then the Metal3 IPAddresses): neither listing shows it,
and the Lease's own news, which the watch of the Leases brings afterwards, must still file it; so must the next
listing of the Leases (a resync, the listing afresh when the lead is taken)."""

from __future__ import annotations

import asyncio

from metal3_ipam.controller.operator import Controller, Listing, Page
from metal3_ipam.core import kinds, lockstore
from metal3_ipam.core import objects as o
from metal3_ipam.core.inventory import Inventory
from metal3_ipam.testing import go_incluster as gi

from resuming import Kicks

HOME = "ipam-system"


def _legacy(name: str, ip: str, version: str) -> dict:
    return {"apiVersion": kinds.METAL3_API_VERSION, "kind": "IPAddress",
            "metadata": {"name": name, "namespace": "ns", "uid": f"uid-{name}", "resourceVersion": version,
                         "finalizers": [kinds.FINALIZERS[kinds.IPADDRESS]]},
            "spec": {"address": ip, "pool": {"name": "p", "namespace": "ns", "apiVersion": gi.POOL_API_VERSION,
                                             "kind": gi.IN_CLUSTER_IP_POOL},
                     "claim": {"name": "a", "namespace": "ns", "apiVersion": gi.CAPI_API_VERSION,
                               "kind": "IPAddressClaim"}}}


def _listing(items, only, version: str) -> Listing:
    return Listing(kinds.IPADDRESS, None, lambda token: Page(items, version, None), only=only)


def test_a_lock_moved_between_the_two_listings_is_filed_from_its_leases_news():
    controller = Controller(Inventory(), Kicks(), writer=None)
    legacy = _legacy("p.10-0-0-5.ip", "10.0.0.5", "10")
    controller.on_event("ADDED", legacy)  # an earlier version's lock, filed

    # The Leases listed at 15: the lock has no Lease yet.
    asyncio.run(controller.settle(_listing([], lambda x: lockstore.stored_in_lease(x) is not None, "15")))
    # Another replica moves it: its Lease created at 20, the IPAddress deleted at 21.
    lease = lockstore.to_lease(lockstore.moved_over(legacy), HOME)
    lease["metadata"].update(uid="lease-uid", resourceVersion="20")
    # The Metal3 IPAddresses listed at 26: it is gone from that store.
    asyncio.run(controller.settle(_listing([], lambda x: lockstore.stored_in_lease(x) is None, "26")))
    # The watch of the Leases, started at 15, brings the Lease.
    controller.on_lease_event("ADDED", lease)

    held = {o.name(x): o.spec(x)["address"] for x in controller.inventory.of_kind(kinds.IPADDRESS)}
    assert held == {"p.10-0-0-5.ip": "10.0.0.5"}


def test_a_lock_moved_between_the_two_listings_is_filed_by_the_next_listing_of_the_leases():
    controller = Controller(Inventory(), Kicks(), writer=None)
    legacy = _legacy("p.10-0-0-5.ip", "10.0.0.5", "10")
    controller.on_event("ADDED", legacy)
    asyncio.run(controller.settle(_listing([], lambda x: lockstore.stored_in_lease(x) is not None, "15")))
    lease = lockstore.to_lease(lockstore.moved_over(legacy), HOME)
    lease["metadata"].update(uid="lease-uid", resourceVersion="20")
    asyncio.run(controller.settle(_listing([], lambda x: lockstore.stored_in_lease(x) is None, "26")))
    # Listed afresh at 50 (a resync, or the lead taken): the Lease is there, unchanged since 20.
    asyncio.run(controller.settle(_listing([lockstore.from_lease(lease)],
                                           lambda x: lockstore.stored_in_lease(x) is not None, "50")))

    held = {o.name(x): o.spec(x)["address"] for x in controller.inventory.of_kind(kinds.IPADDRESS)}
    assert held == {"p.10-0-0-5.ip": "10.0.0.5"}
