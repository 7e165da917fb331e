"""The locks of the Lease store against what an earlier version, still running beside this one, writes as Metal3
IPAddresses: a lock's Lease and an IPAddress of the same lock name are two objects of two stores, and the API
server refuses neither, so the name of a lock no longer makes its second writer fail."""

from __future__ import annotations

import copy
import random

from metal3_ipam.core import kinds, lockstore
from metal3_ipam.core import objects as o
from metal3_ipam.core.reconcile import reconcile
from metal3_ipam.memory import converge
from metal3_ipam.testing import go_incluster as gi
from ipam_objects import assert_no_ip_twice, converged_with_lock_namespace, get

LOCK_NS = "ipam-system"
POOL = o.PoolKey("ns-a", "p", (gi.GROUP, gi.IN_CLUSTER_IP_POOL))


def _pool():
    return gi.ip_pool("p", namespace="ns-a", addresses=["10.0.0.2-10.0.0.3"], prefix=24)


def _earlier_versions_binding(claim: str) -> list[dict]:
    """What an earlier version writes binding ``claim`` to the last free IP of the pool: the claim bound, its
    Cluster API IPAddress, and its lock and guard as Metal3 IPAddresses of ns-a."""
    old = converged_with_lock_namespace(_pool(), gi.claim("a", "ns-a", gi.IN_CLUSTER_IP_POOL, "p"),
                                        gi.claim(claim, "ns-a", gi.IN_CLUSTER_IP_POOL, "p"), lock_namespace=LOCK_NS)
    written = [copy.deepcopy(get(old, kinds.CAPI_CLAIM, claim, "ns-a")),
               copy.deepcopy(get(old, kinds.CAPI_ADDRESS, claim, "ns-a"))]
    for view in old.inventory.of_kind(kinds.IPADDRESS):
        if o.spec(view)["claim"]["name"] == claim:
            lock = lockstore.moved_over(view)
            lock["metadata"].pop("annotations", None)  # a Metal3 IPAddress, as the earlier version stores it
            lock["metadata"]["uid"] = f"metal3-{o.name(view)}"
            written.append(lock)
    return written


def test_an_ip_an_earlier_version_locked_as_a_metal3_ipaddress_is_not_handed_out_again_by_a_lease():
    api = converged_with_lock_namespace(_pool(), gi.claim("a", "ns-a", gi.IN_CLUSTER_IP_POOL, "p"),
                                        lock_namespace=LOCK_NS)
    api.load(gi.claim("c", "ns-a", gi.IN_CLUSTER_IP_POOL, "p"))
    plan = reconcile(api.inventory.snapshot(POOL, api.now, random.Random(0)))  # this version: c gets 10.0.0.3
    for obj in _earlier_versions_binding("d"):  # meanwhile an earlier version binds d to 10.0.0.3 (not yet seen)
        api.load(obj)
    for step in plan.steps:
        for action in step.actions:
            try:
                api.do(action)
            except Exception:  # refused: the pass stops, as the controller's does
                break
    assert_no_ip_twice(api)  # c's pass went through: both claims Ready at 10.0.0.3
    converge(api, random.Random(0))
    # Not both at 10.0.0.3 (were c's pass to go through, d would be found in conflict only afterwards, its Cluster
    # API IPAddress, and its machine, still there): d keeps it, c waits for a free IP.
    held = {o.name(x): o.spec(x)["address"] for x in api.inventory.of_kind(kinds.CAPI_ADDRESS)
            if o.name(x) in ("c", "d")}
    assert held == {"d": "10.0.0.3"}
