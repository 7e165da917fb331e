"""A claim bound to an IP (its status says so) whose Cluster API IPAddress a user replaced by one written at
another IP (a botched restore): the claim keeps its IP and the address written late is a stray. A replica whose
view still shows the claim as it was before it was served must come to the same end. Run through the real
reconcile in the in-memory store."""

from __future__ import annotations

import copy

from metal3_ipam.core import kinds
from metal3_ipam.core import objects as o
from metal3_ipam.core.reconcile import reconcile
from metal3_ipam.memory import MemoryApi, converge
from metal3_ipam.testing import go_incluster as gi
from ipam_objects import NS, capi_address, capi_claim, get, loaded, ready

IN_CLUSTER = (gi.GROUP, gi.IN_CLUSTER_IP_POOL)
KEY = o.PoolKey(NS, "p", IN_CLUSTER)


def _bound_then_replaced():
    """(the store, the claim as it was before it was served): the claim bound to 10.0.0.1, then its IPAddress
    deleted (finalizer stripped) and one of the same name written at 10.0.0.9 in its place."""
    pool = gi.ip_pool("p", namespace=NS, prefix=24, gateway="10.0.0.2", addresses=["10.0.0.1-10.0.0.254"])
    world = loaded(pool, capi_claim("test", pool="p", api_group=IN_CLUSTER[0], kind=IN_CLUSTER[1]))
    pending = copy.deepcopy(get(world, kinds.CAPI_CLAIM, "test"))
    converge(world)
    assert ready(world, kinds.CAPI_CLAIM, "test")["message"] == "bound to 10.0.0.1"
    world.inventory.remove(get(world, kinds.CAPI_ADDRESS, "test"))
    world.load(capi_address("test", "test", IN_CLUSTER, "p", "10.0.0.9"))
    return world, pending


def test_a_bound_claims_address_replaced_at_another_ip_is_a_stray_the_claim_keeps_its_ip():
    world, _ = _bound_then_replaced()
    converge(world)
    assert ready(world, kinds.CAPI_CLAIM, "test")["message"] == "bound to 10.0.0.1"
    assert [o.spec(a)["address"] for a in world.inventory.of_kind(kinds.CAPI_ADDRESS)] == ["10.0.0.1"]
    assert sorted(o.spec(a)["address"] for a in world.inventory.of_kind(kinds.IPADDRESS)) == ["10.0.0.1"] * 2


def test_a_replica_that_sees_a_bound_claim_pending_does_not_move_it_to_an_address_written_since():
    world, pending = _bound_then_replaced()
    view = MemoryApi(now=world.now)  # its watch of claims behind; the addresses' up to date
    for obj in world.inventory.objects.values():
        view.inventory.upsert(copy.deepcopy(pending if kinds.kind_of(obj) == kinds.CAPI_CLAIM else obj))
    world.apply(reconcile(view.inventory.snapshot(KEY, view.now)))
    converge(world)
    assert ready(world, kinds.CAPI_CLAIM, "test")["message"] == "bound to 10.0.0.1"
    assert [o.spec(a)["address"] for a in world.inventory.of_kind(kinds.CAPI_ADDRESS)] == ["10.0.0.1"]
    assert sorted(o.spec(a)["address"] for a in world.inventory.of_kind(kinds.IPADDRESS)) == ["10.0.0.1"] * 2
