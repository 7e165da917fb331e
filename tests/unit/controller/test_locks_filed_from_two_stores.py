"""The adapter files the locks of the Lease store from two stores (``operator.Controller``): the Leases of the lock
namespace, each as the lock it stands for, and the Metal3 IPAddresses an earlier version wrote. A lock is held while
either store holds it: the IPAddress's own news (its finalizer taken off, its deletion) never unfile a lock whose
Lease is filed, and a listing of one store proves gone only what that store holds."""

from __future__ import annotations

import asyncio
import copy

from metal3_ipam.controller.operator import Controller, Listing, Page
from metal3_ipam.core import kinds, lockstore
from metal3_ipam.core import objects as o
from metal3_ipam.core.inventory import Inventory
from metal3_ipam.testing import go_incluster as gi
from metal3_ipam.testing.waiting import eventually_async

from resuming import Kicks

HOME = "ipam-system"


def _legacy(name: str, ip: str, version: str, claim: str = "a") -> dict:
    return {"apiVersion": kinds.METAL3_API_VERSION, "kind": "IPAddress",
            "metadata": {"name": name, "namespace": "ns", "uid": f"uid-{name}-{version}", "resourceVersion": version,
                         "finalizers": [kinds.FINALIZERS[kinds.IPADDRESS]]},
            "spec": {"address": ip, "pool": {"name": "p", "namespace": "ns", "apiVersion": gi.POOL_API_VERSION,
                                             "kind": gi.IN_CLUSTER_IP_POOL},
                     "claim": {"name": claim, "namespace": "ns", "apiVersion": gi.CAPI_API_VERSION,
                               "kind": "IPAddressClaim"}}}


def _lease_of(legacy: dict, version: str) -> dict:
    lease = lockstore.to_lease(lockstore.moved_over(legacy), HOME)
    lease["metadata"].update(uid=f"lease-{version}", resourceVersion=version)
    return lease


def _locked(inventory: Inventory) -> dict:
    return {o.name(x): (o.spec(x)["address"], lockstore.stored_in_lease(x) is not None)
            for x in inventory.of_kind(kinds.IPADDRESS)}


def _controller() -> Controller:
    return Controller(Inventory(), Kicks(), writer=None)


def test_a_lock_moved_over_stays_filed_through_the_deletion_of_its_ipaddress():
    controller = _controller()
    legacy = _legacy("p-10-0-0-5", "10.0.0.5", "10")
    controller.on_event("ADDED", legacy)
    assert _locked(controller.inventory) == {"p-10-0-0-5": ("10.0.0.5", False)}
    assert controller.legacy == {("ns", "p-10-0-0-5"): legacy}  # waiting to be moved over

    controller.on_lease_event("ADDED", _lease_of(legacy, "20"))
    stripped = copy.deepcopy(legacy)
    stripped["metadata"].update(resourceVersion="21", finalizers=[], deletionTimestamp="2024-01-01T00:00:00Z")
    controller.on_event("MODIFIED", stripped)
    controller.on_event("DELETED", {**stripped, "metadata": {**stripped["metadata"], "resourceVersion": "22"}})
    assert _locked(controller.inventory) == {"p-10-0-0-5": ("10.0.0.5", True)}
    assert controller.legacy == {}

    lease = _lease_of(legacy, "30")
    controller.on_lease_event("DELETED", lease)
    assert _locked(controller.inventory) == {}


def test_a_lease_that_is_no_lock_is_not_filed():
    controller = _controller()
    controller.on_lease_event("ADDED", {"apiVersion": lockstore.LEASE_API_VERSION, "kind": "Lease",
                                        "metadata": {"name": "metal3-ipam-controller", "namespace": HOME,
                                                     "resourceVersion": "3"},
                                        "spec": {"holderIdentity": "me"}})
    assert _locked(controller.inventory) == {}


def _listing(kind_items, only, version: str) -> Listing:
    return Listing(kinds.IPADDRESS, None, lambda token: Page(kind_items, version, None), only=only)


def test_each_listing_proves_gone_only_what_its_own_store_holds():
    controller = _controller()
    moved = _legacy("p-10-0-0-5", "10.0.0.5", "10")
    waiting = _legacy("p-10-0-0-6", "10.0.0.6", "11", claim="b")
    controller.on_event("ADDED", moved)
    controller.on_event("ADDED", waiting)
    controller.on_lease_event("ADDED", _lease_of(moved, "20"))

    # The Leases listed: the one Lease there; the IPAddress still waiting for its own is not its to drop.
    leases = [lockstore.from_lease(_lease_of(moved, "20"))]
    asyncio.run(controller.settle(_listing(leases, lambda x: lockstore.stored_in_lease(x) is not None, "40")))
    assert _locked(controller.inventory) == {"p-10-0-0-5": ("10.0.0.5", True), "p-10-0-0-6": ("10.0.0.6", False)}

    # The IPAddresses listed after the moved one went: the Lease filed for it stays.
    asyncio.run(controller.settle(_listing([waiting], lambda x: lockstore.stored_in_lease(x) is None, "41")))
    assert _locked(controller.inventory) == {"p-10-0-0-5": ("10.0.0.5", True), "p-10-0-0-6": ("10.0.0.6", False)}

    # An IPAddress listed whose Lease is filed is listed, not filed over it.
    asyncio.run(controller.settle(_listing([moved, waiting], lambda x: lockstore.stored_in_lease(x) is None, "42")))
    assert _locked(controller.inventory)["p-10-0-0-5"] == ("10.0.0.5", True)


def test_under_n_the_leases_of_locks_of_namespaces_not_served_are_not_filed():
    controller = _controller()
    controller.inventory.namespaces = frozenset({"ns-a"})
    controller.inventory.lock_namespace = HOME
    here, there, global_lock = (_legacy(n, ip, v) for n, ip, v in (
        ("p-10-0-0-5", "10.0.0.5", "10"), ("p-10-0-0-6", "10.0.0.6", "11"), ("g.10-0-0-7.gip", "10.0.0.7", "12")))
    here["metadata"]["namespace"], there["metadata"]["namespace"] = "ns-a", "ns-b"
    global_lock["metadata"]["namespace"] = HOME
    for lock, version in ((here, "20"), (there, "21"), (global_lock, "22")):
        controller.on_lease_event("ADDED", _lease_of(lock, version))
    listed = [lockstore.from_lease(_lease_of(lock, v)) for lock, v in ((here, "20"), (there, "21"),
                                                                        (global_lock, "22"))]
    asyncio.run(controller.settle(_listing(listed, lambda x: lockstore.stored_in_lease(x) is not None, "40")))
    assert {(o.namespace(x), o.name(x)) for x in controller.inventory.of_kind(kinds.IPADDRESS)} == {
        ("ns-a", "p-10-0-0-5"), (HOME, "g.10-0-0-7.gip")}


def test_a_listing_of_the_locks_leaves_a_cluster_waiting_for_its_addresses_alone():
    """A Cluster first seen waits for its namespace's addresses to be listed again (``resuming``); a listing of the
    locks settled meanwhile is no listing of Clusters: the Cluster is filed once its addresses are listed."""
    inventory = Inventory()
    controller = Controller(inventory, Kicks(), writer=None, relist=lambda namespace: [])
    cluster = {"apiVersion": "cluster.x-k8s.io/v1beta2", "kind": "Cluster",
               "metadata": {"name": "c1", "namespace": "ns", "uid": "c", "resourceVersion": "5", "generation": 1},
               "spec": {"paused": False}}

    async def scenario():
        controller.file(cluster)
        await controller.settle(_listing([], lambda x: lockstore.stored_in_lease(x) is not None, "9"))
        await eventually_async(lambda: inventory.get(kinds.CLUSTER, "ns", "c1") is not None, timeout=10,
                               what="the Cluster filed")

    asyncio.run(scenario())


def test_the_leases_are_listed_where_no_metal3_ipaddress_is_served():
    """With only the in-cluster provider's CRDs, the locks are still listed (and so watched): the Leases, right
    after the Clusters, before any pool is served."""
    from metal3_ipam.controller.api import Resource
    from metal3_ipam.controller.runtime import Options, Runtime

    runtime = Runtime(Options(lock_namespace=HOME, namespaces=[]))
    runtime.resources = {kinds.CLUSTER: Resource("cluster.x-k8s.io", "v1beta2", "clusters"),
                         (gi.GROUP, gi.IN_CLUSTER_IP_POOL): Resource(gi.GROUP, "v1alpha2", "inclusterippools"),
                         kinds.CAPI_ADDRESS: Resource(gi.GROUP, "v1beta2", "ipaddresses")}
    runtime.lease_store = True
    listed = runtime._listings(runtime._served())
    assert [(str(x), x.leases) for x in listed] == [
        ("Cluster.cluster.x-k8s.io", False), (f"leases.coordination.k8s.io in {HOME}", True),
        (f"{gi.IN_CLUSTER_IP_POOL}.{gi.GROUP}", False), (f"IPAddress.{gi.GROUP}", False)]
    assert [(str(x), x.leases) for x in runtime._listings({kinds.IPADDRESS})] == [
        (f"leases.coordination.k8s.io in {HOME}", True)]


def test_a_lease_gone_files_again_the_ipaddress_of_its_name_that_is_another_lock():
    """An earlier version released the lock's claim (its IPAddress, the Lease's twin, deleted) and locked the IP for
    another claim under the same name: hidden while the Lease is filed, that IPAddress holds the IP once the Lease
    goes, and is to be given its own Lease."""
    controller = _controller()
    woken = []
    controller.on_locks = lambda: woken.append(True)
    twin = _legacy("p.10-0-0-5.ip", "10.0.0.5", "10")
    controller.on_lease_event("ADDED", _lease_of(twin, "11"))
    controller.on_event("ADDED", twin)
    controller.on_event("DELETED", {**twin, "metadata": {**twin["metadata"], "resourceVersion": "12"}})
    other = _legacy("p.10-0-0-5.ip", "10.0.0.5", "13", claim="d")
    controller.on_event("ADDED", other)
    assert _locked(controller.inventory) == {"p.10-0-0-5.ip": ("10.0.0.5", True)}

    controller.on_lease_event("DELETED", _lease_of(twin, "14"))
    [held] = controller.inventory.of_kind(kinds.IPADDRESS)
    assert not lockstore.stored_in_lease(held) and o.spec(held)["claim"]["name"] == "d"
    assert ("ns", "p.10-0-0-5.ip") in controller.unsettled and woken


def test_a_lease_gone_with_its_twin_files_nothing_again():
    controller = _controller()
    twin = _legacy("p.10-0-0-5.ip", "10.0.0.5", "10")
    controller.on_lease_event("ADDED", _lease_of(twin, "11"))
    controller.on_event("ADDED", twin)  # its twin, hidden
    controller.on_lease_event("DELETED", _lease_of(twin, "14"))  # the twin's own deletion not seen yet
    assert _locked(controller.inventory) == {}


def test_a_locks_lease_is_filed_over_its_ipaddress_whatever_their_versions():
    """The IPAddress changed after its Lease was made of it (a move's copy written to, an owner added): the two are
    objects of two stores, whose versions tell nothing of each other. The Lease is filed, and the IPAddress's
    deletion (the move deleting it in the source) leaves it filed, so that the lock is let go with its claim."""
    controller = _controller()
    twin = _legacy("net.10-60-0-30.ip", "10.60.0.30", "30")
    controller.on_event("ADDED", twin)
    controller.on_lease_event("ADDED", _lease_of(twin, "20"))
    assert _locked(controller.inventory) == {"net.10-60-0-30.ip": ("10.60.0.30", True)}
    controller.on_event("MODIFIED", {**twin, "metadata": {**twin["metadata"], "resourceVersion": "40"}})
    controller.on_event("DELETED", {**twin, "metadata": {**twin["metadata"], "resourceVersion": "41"}})
    assert _locked(controller.inventory) == {"net.10-60-0-30.ip": ("10.60.0.30", True)}
    assert controller.inventory.holds(kinds.IPADDRESS, {**twin["metadata"], "resourceVersion": "40"}) is False
