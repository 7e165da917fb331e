"""A global pool's pass made before a namespaced prefix pool existed, its pool edited off the IP meanwhile, has no
length to go by: a namespaced prefix pool's allocation writes each claim of the namespace's global pools whose pass
may be on its way (``ipam.metal3.io/allocation-fenced``), so that such a pass is refused. Which claims those are is
read from what each holds (its pass's view), not from its status. Run through the real reconcile in the in-memory
store."""

from __future__ import annotations

import copy
import random

from metal3_ipam.core import kinds
from metal3_ipam.core import objects as o
from metal3_ipam.core.inventory import Inventory, served
from metal3_ipam.core.reconcile import reconcile
from metal3_ipam.memory import converge
from metal3_ipam.testing import go_incluster as gi
from ipam_objects import converged_with_lock_namespace as _converged, held_spans
from ipam_objects import dated_ip_pool, get, inventory_of, loaded, user_delete

NS = "default"
GLOBAL = (gi.GROUP, gi.GLOBAL_IN_CLUSTER_IP_POOL)
PREFIX = (gi.GROUP, gi.IN_CLUSTER_PREFIX_POOL)



def _edit_addresses(api, addresses):
    pool = copy.deepcopy(get(api, GLOBAL, "g", ""))
    pool["spec"]["addresses"] = addresses
    api._store(pool)


def test_a_global_pools_pass_for_a_claim_that_lost_its_address_objects_meets_a_prefix_pools_allocation():
    """Claim d of a global IP pool is bound to fd00::1; a user deletes its address objects (finalizers stripped)
    and edits the pool off fd00::1. The global pool's pass for d (fd00::2) is made; the pool is edited off fd00::2
    too; a prefix pool over fd00::2/127 is created in the namespace and claimed from; its pass lands, then the
    global one."""
    api = _converged(dated_ip_pool("g", ["fd00::1-fd00::8"], "2024-01-01T00:00:00Z"), gi.claim("d", NS, GLOBAL[1], "g"))
    assert o.spec(get(api, kinds.CAPI_ADDRESS, "d"))["address"] == "fd00::1"
    for kind in (kinds.IPADDRESS, kinds.CAPI_ADDRESS):
        for address in list(api.inventory.of_kind(kind)):
            if not o.is_guard(address):
                api.inventory.remove(address)  # a user's cleanup: finalizers stripped, deleted
    _edit_addresses(api, ["fd00::2-fd00::8"])
    global_plan = reconcile(api.inventory.snapshot(o.PoolKey("", "g", GLOBAL), api.now))
    _edit_addresses(api, ["fd00::10"])
    prefixes = gi.prefix_pool("n", prefixes=["fd00::2/127"], namespace=NS, allocation_prefix_length=127)
    prefixes["metadata"]["creationTimestamp"] = "2024-01-01T00:01:00Z"
    api.load(prefixes)
    api.load(gi.claim("a", NS, PREFIX[1], "n"))
    api.apply(reconcile(api.inventory.snapshot(o.PoolKey(NS, "n", PREFIX), api.now)))
    api.apply(global_plan)
    converge(api, random.Random(0))
    spans = held_spans(api, {GLOBAL[1]: 128, PREFIX[1]: 127})
    assert all(len(claims) == 1 for claims in spans.values()), spans


def test_a_prefix_pools_allocation_leaves_the_waiting_claims_of_a_global_pool_of_the_other_family_alone():
    """A global IPv4 pool's claim waits (the pool exhausted): no pass of it can land in an IPv6 prefix pool, so the
    prefix pool's allocations in the namespace write nothing on it (each such write would refuse the next status
    the global pool writes on its claim, and its own allocation with it)."""
    api = _converged(dated_ip_pool("g", ["10.0.0.1"], "2024-01-01T00:00:00Z"),
                     gi.claim("held", NS, GLOBAL[1], "g"), gi.claim("waits", NS, GLOBAL[1], "g"))
    waiting = get(api, kinds.CAPI_CLAIM, "waits")
    assert o.condition(o.status(waiting), "Ready")["status"] == "False"
    api.load(gi.prefix_pool("n", prefixes=["fd00::/120"], namespace=NS, allocation_prefix_length=124))
    for n in range(3):
        api.load(gi.claim(f"p{n}", NS, PREFIX[1], "n"))
    plan = reconcile(api.inventory.snapshot(o.PoolKey(NS, "n", PREFIX), api.now))
    assert not [a for a in plan.writes if getattr(a, "target", None) is not None and a.target.name == "waits"], plan
    api.apply(plan)
    converge(api, random.Random(0))
    assert kinds.FENCED_ANNOTATION not in o.annotations(get(api, kinds.CAPI_CLAIM, "waits"))
    assert all(get(api, kinds.CAPI_ADDRESS, f"p{n}") is not None for n in range(3))


def _restarted(api) -> Inventory:
    """What a controller started now files: every stored object, none of what came before."""
    cache = inventory_of(*(copy.deepcopy(obj) for kind in served() for obj in api.inventory.of_kind(kind)))
    cache.lock_namespace = api.inventory.lock_namespace
    return cache


def test_a_global_pools_pass_made_before_its_pool_changed_family_meets_a_prefix_pools_allocation():
    """Claim d of a global IPv6 pool: the pool's pass for it is made (fd00::1), then the pool is edited to IPv4.
    A controller started after the edit never saw the IPv6 spec; a prefix pool over fd00::/127 is created
    in d's namespace and claimed from; its pass (by that controller) lands, then the global one."""
    api = loaded(dated_ip_pool("g", ["fd00::1-fd00::8"], "2024-01-01T00:00:00Z"), gi.claim("d", NS, GLOBAL[1], "g"))
    api.inventory.lock_namespace = "ipam-system"
    global_plan = reconcile(api.inventory.snapshot(o.PoolKey("", "g", GLOBAL), api.now))
    _edit_addresses(api, ["10.0.0.1"])
    prefixes = gi.prefix_pool("n", prefixes=["fd00::/127"], namespace=NS, allocation_prefix_length=127)
    prefixes["metadata"]["creationTimestamp"] = "2024-01-01T00:01:00Z"
    api.load(prefixes)
    api.load(gi.claim("a", NS, PREFIX[1], "n"))
    api.apply(reconcile(_restarted(api).snapshot(o.PoolKey(NS, "n", PREFIX), api.now)))
    api.apply(global_plan)
    spans = held_spans(api, {GLOBAL[1]: 128, PREFIX[1]: 127})
    assert all(len(claims) == 1 for claims in spans.values()), spans


def test_a_global_pools_pass_landing_after_its_pool_was_deleted_meets_a_prefix_pools_allocation():
    """Claim d of a global IPv6 pool: the pool's pass for it is made (fd00::1), then the pool is deleted (gone:
    no address held it). A prefix pool over fd00::/127 is created in d's namespace and claimed from; its pass
    lands, then the global one."""
    api = loaded(dated_ip_pool("g", ["fd00::1-fd00::8"], "2024-01-01T00:00:00Z"), gi.claim("d", NS, GLOBAL[1], "g"))
    api.inventory.lock_namespace = "ipam-system"
    global_plan = reconcile(api.inventory.snapshot(o.PoolKey("", "g", GLOBAL), api.now))
    user_delete(api, GLOBAL, "g", "")
    prefixes = gi.prefix_pool("n", prefixes=["fd00::/127"], namespace=NS, allocation_prefix_length=127)
    prefixes["metadata"]["creationTimestamp"] = "2024-01-01T00:01:00Z"
    api.load(prefixes)
    api.load(gi.claim("a", NS, PREFIX[1], "n"))
    api.apply(reconcile(api.inventory.snapshot(o.PoolKey(NS, "n", PREFIX), api.now)))
    api.apply(global_plan)
    spans = held_spans(api, {GLOBAL[1]: 128, PREFIX[1]: 127})
    assert all(len(claims) == 1 for claims in spans.values()), spans
