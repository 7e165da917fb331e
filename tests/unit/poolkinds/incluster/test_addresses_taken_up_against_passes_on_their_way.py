"""An address written before its claim (a restore, a move) taken up by a claim of one pool while an allocation of
another pool that keeps its IPs apart from it is on its way: a global pool and a namespaced pool meeting in the
claim's namespace. The allocation writes its guard in that namespace; taking an address up must meet it there too,
whichever lands first. Run through the real reconcile in the in-memory store."""

from __future__ import annotations

import copy
import random

import pytest

from metal3_ipam.core import kinds
from metal3_ipam.core import objects as o
from metal3_ipam.core.actions import Create, Delete, Plan
from metal3_ipam.core.reconcile import reconcile
from metal3_ipam.memory import MemoryApi, converge
from metal3_ipam.testing import go_incluster as gi
from ipam_objects import assert_no_ip_twice, capi_address, ready
from ipam_objects import converged_with_lock_namespace as _converged
from ipam_objects import dated_ip_pool as _pool
from ipam_objects import get, held_spans

NS = "default"
GLOBAL = (gi.GROUP, gi.GLOBAL_IN_CLUSTER_IP_POOL)
LOCAL = (gi.GROUP, gi.IN_CLUSTER_IP_POOL)


def _claim(name, pool, kind=gi.GLOBAL_IN_CLUSTER_IP_POOL):
    return gi.claim(name, NS, kind, pool)



def _pass(api, key):
    return reconcile(api.inventory.snapshot(key, api.now))


@pytest.mark.parametrize("order", ["global pass lands first", "taking up lands first"])
def test_a_restored_address_taken_up_by_a_namespaced_pools_claim_meets_a_global_pools_pass_on_its_way(order):
    """A global pool's pass for claim d of the namespace is made (10.9.0.2); then the namespace is restored: an
    InClusterIPPool over that IP, claim a's IPAddress at 10.9.0.2 written before it, and claim a. The namespaced
    pool's pass (its view not showing d's allocation yet) takes the address up."""
    api = _converged(_pool("g", ["10.9.0.1-10.9.0.8"], "2024-01-01T00:00:00Z"), _claim("c", "g"))
    api.load(_claim("d", "g"))
    global_plan = _pass(api, o.PoolKey("", "g", GLOBAL))
    api.load(_pool("n", ["10.9.0.1-10.9.0.3"], "2024-01-01T00:01:00Z", namespace=NS))
    api.load(capi_address("a", "a", LOCAL, "n", "10.9.0.2"))
    api.load(_claim("a", "n", gi.IN_CLUSTER_IP_POOL))
    local_plan = _pass(api, o.PoolKey(NS, "n", LOCAL))
    for plan in ([global_plan, local_plan] if order.startswith("global") else [local_plan, global_plan]):
        api.apply(plan)
    converge(api, random.Random(0))
    _each_bound_or_told(api, "a", "d")


def _each_bound_or_told(api, *names):
    """No IP held by two live claims (an address the claim never took up holds nothing: ``held_spans``), and each
    claim bound, or told why not (its address conflicts with the other's, left as written; its pool is exhausted)."""
    assert_no_ip_twice(api)
    held = held_spans(api)
    assert all(len(claims) == 1 for claims in held.values()), held
    for name in names:
        condition = ready(api, kinds.CAPI_CLAIM, name)
        assert condition.get("status") == "True" or condition.get("reason") in ("AddressConflict", "PoolExhausted"), \
            (name, condition)


def _view_without(api, name):
    """A replica's view of ``api`` whose watches have not shown the objects named ``name`` yet."""
    view = MemoryApi(now=api.now)
    for (_, _, each), obj in list(api.inventory.objects.items()):
        if each != name:
            view.inventory.upsert(copy.deepcopy(obj))
    return view


@pytest.mark.parametrize("order", ["taking up lands first", "namespaced pass lands first"])
def test_a_restored_address_taken_up_by_a_global_pools_claim_meets_a_namespaced_pools_pass_on_its_way(order):
    """Claim d of a global pool and its IPAddress at 10.9.0.2, written before it, restored in the namespace; the
    global pool takes the address up. An InClusterIPPool of the namespace holding 10.9.0.2 is created and claimed
    from; its pass is made from a view whose watches have not shown d nor its IPAddress yet."""
    api = _converged(_pool("g", ["10.9.0.1-10.9.0.8"], "2024-01-01T00:00:00Z"), gi.claim("c", "other", GLOBAL[1], "g"))
    api.load(capi_address("d", "d", GLOBAL, "g", "10.9.0.2"))
    api.load(_claim("d", "g"))
    global_plan = _pass(api, o.PoolKey("", "g", GLOBAL))
    api.load(_pool("n", ["10.9.0.2"], "2024-01-01T00:01:00Z", namespace=NS))
    api.load(_claim("a", "n", gi.IN_CLUSTER_IP_POOL))
    local_plan = _pass(_view_without(api, "d"), o.PoolKey(NS, "n", LOCAL))
    for plan in ([global_plan, local_plan] if order.startswith("taking") else [local_plan, global_plan]):
        api.apply(plan)
    converge(api, random.Random(0))
    _each_bound_or_told(api, "a", "d")


def test_an_address_is_taken_up_once_another_claims_guard_of_its_ip_is_left_over_never_over_it():
    """A global pool's pass for claim d of the namespace stopped after its guard of 10.9.0.2 (its lock not written
    yet); then the namespace is restored: an InClusterIPPool over that IP, claim a's IPAddress at 10.9.0.2 written
    before it, and claim a. While d's guard may stand for an allocation on its way, a's pass neither deletes it nor
    locks the IP; once d is given another IP (the restored address holds 10.9.0.2), a takes its address up."""
    api = _converged(_pool("g", ["10.9.0.1-10.9.0.8"], "2024-01-01T00:00:00Z"), _claim("c", "g"))
    api.load(_claim("d", "g"))
    step = next(s for s in _pass(api, o.PoolKey("", "g", GLOBAL)).steps if s.subject.endswith("default/d"))
    guard = next(i for i, a in enumerate(step.actions) if isinstance(a, Create) and o.is_guard(a.obj))
    step.actions = step.actions[:guard + 1]
    api.inventory.lock_settle_seconds = 60  # as a controller has it: a guard without its lock is left to its maker
    api.apply(Plan(steps=[step]))
    assert get(api, kinds.IPADDRESS, "10-9-0-2.nsip") is not None
    api.load(_pool("n", ["10.9.0.1-10.9.0.3"], "2024-01-01T00:01:00Z", namespace=NS))
    api.load(capi_address("a", "a", LOCAL, "n", "10.9.0.2"))
    api.load(_claim("a", "n", gi.IN_CLUSTER_IP_POOL))
    local_plan = _pass(api, o.PoolKey(NS, "n", LOCAL))
    written = [a for a in local_plan.writes if isinstance(a, (Create, Delete))]
    assert not written, local_plan.describe()
    converge(api, random.Random(0))
    assert ready(api, kinds.CAPI_CLAIM, "a")["message"] == "bound to 10.9.0.2"
    assert ready(api, kinds.CAPI_CLAIM, "d")["status"] == "True"
    assert_no_ip_twice(api)
    held = held_spans(api)
    assert all(len(claims) == 1 for claims in held.values()), held
