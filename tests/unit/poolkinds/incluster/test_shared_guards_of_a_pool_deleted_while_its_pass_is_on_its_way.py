"""A guard of a sub-prefix that the namespace's pools share is owned by those pools and by the claims whose
allocations joined it, and the garbage collector takes it once they are all gone. A namespaced pool can be gone while
a claim of its holds an IP: deleted while a pass of its is on its way (no address held it yet), or deleted before its
finalizer was written (that write refused, the claim's step landed). Its shared guard must then stay while the claim
keeps its IP. Found by the property of test_global_pool_overlap, with more examples and more events than it
runs; pinned here as the sequences it found. Run through the real reconcile in the in-memory store."""

from __future__ import annotations

import copy
import random

from metal3_ipam.core import objects as o
from metal3_ipam.core.reconcile import reconcile
from metal3_ipam.memory import converge
from metal3_ipam.testing import go_incluster as gi
from ipam_objects import converged_with_lock_namespace as _converged, held_spans
from ipam_objects import dated_ip_pool, get, user_delete

NS = "default"
GLOBAL_PREFIXES = (gi.GROUP, gi.GLOBAL_IN_CLUSTER_PREFIX_POOL)
IPS = (gi.GROUP, gi.IN_CLUSTER_IP_POOL)



def test_a_namespaced_pools_pass_landing_after_its_pool_was_deleted_still_meets_a_global_pools_pass_on_its_way():
    """A global prefix pool's pass for claim d (fd00::4/126) made; the global pool edited off that sub-prefix; an
    InClusterIPPool over fd00::4-fd00::7 created and claimed from, its pass (fd00::4) made, then the pool deleted
    (gone: nothing held it); the namespaced pass lands, then the global one."""
    glob = gi.prefix_pool("g", prefixes=["fd00::/124"], allocation_prefix_length=126)
    glob["metadata"]["creationTimestamp"] = "2024-01-01T00:00:00Z"
    api = _converged(glob, gi.claim("c", NS, GLOBAL_PREFIXES[1], "g"))
    api.load(gi.claim("d", NS, GLOBAL_PREFIXES[1], "g"))
    global_plan = reconcile(api.inventory.snapshot(o.PoolKey("", "g", GLOBAL_PREFIXES), api.now))
    edited = copy.deepcopy(get(api, GLOBAL_PREFIXES, "g", ""))
    edited["spec"]["prefixes"] = ["fd00::10/126"]
    api._store(edited)
    api.load(dated_ip_pool("n", ["fd00::4-fd00::7"], "2024-01-01T00:01:00Z", namespace=NS))
    api.load(gi.claim("a", NS, IPS[1], "n"))
    local_plan = reconcile(api.inventory.snapshot(o.PoolKey(NS, "n", IPS), api.now))
    user_delete(api, IPS, "n", NS)
    assert get(api, IPS, "n", NS) is None
    api.apply(local_plan)
    api.apply(global_plan)
    converge(api, random.Random(0))
    spans = held_spans(api, {GLOBAL_PREFIXES[1]: 126, IPS[1]: 128})
    assert all(len(claims) == 1 for claims in spans.values()), spans


def test_a_namespaced_pool_deleted_before_its_finalizer_was_written_still_meets_a_global_pools_pass_on_its_way():
    """An InClusterIPPool over fd00::4-fd00::7 created and claimed from; its pass (fd00::4, joining the global
    prefix pool's guard of fd00::4/126) made; the pool edited off fd00::4; the global prefix pool's pass for claim
    d (fd00::4/126, the namespaced pool no longer holding it) made; the namespaced pass lands (its finalizer write
    refused, the claim's step written); the namespaced pool deleted; the global pass lands. Found by the property
    of test_global_pool_overlap with pools deleted and created anew among its events."""
    glob = gi.prefix_pool("g", prefixes=["fd00::/124"], allocation_prefix_length=126)
    glob["metadata"]["creationTimestamp"] = "2024-01-01T00:00:00Z"
    api = _converged(glob)
    api.load(gi.claim("d", NS, GLOBAL_PREFIXES[1], "g"))
    api.load(gi.claim("a", NS, IPS[1], "n"))
    api.load(dated_ip_pool("n", ["fd00::4-fd00::7"], "2024-01-01T00:01:00Z", namespace=NS))
    local_plan = reconcile(api.inventory.snapshot(o.PoolKey(NS, "n", IPS), api.now))
    edited = copy.deepcopy(get(api, IPS, "n", NS))
    edited["spec"]["addresses"] = ["fd00::1-fd00::2", "fd00::9"]
    api._store(edited)
    global_plan = reconcile(api.inventory.snapshot(o.PoolKey("", "g", GLOBAL_PREFIXES), api.now))
    assert api.apply(local_plan) == [f"InClusterIPPool {NS}/n: InClusterIPPool {NS}/n changed since it was read"]
    user_delete(api, IPS, "n", NS)
    assert get(api, IPS, "n", NS) is None
    api.apply(global_plan)
    converge(api, random.Random(0))
    spans = held_spans(api, {GLOBAL_PREFIXES[1]: 126, IPS[1]: 128})
    assert all(len(claims) == 1 for claims in spans.values()), spans
