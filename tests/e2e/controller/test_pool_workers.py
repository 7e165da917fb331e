"""The pool workers in this process, writing to a real API server: what is kept per pool, and when it goes."""

from __future__ import annotations

import asyncio
import time

from prometheus_client import REGISTRY

from controller_fixtures import Kube
from metal3_ipam.controller.credentials import from_kubeconfig
from metal3_ipam.controller.api import ApiWriter
from metal3_ipam.controller.operator import discover
from metal3_ipam.controller.workers import PoolWorkers
from metal3_ipam.core import kinds
from metal3_ipam.core.inventory import Inventory

PER_POOL_SAMPLES = ("metal3_ipam_pool_capacity", "metal3_ipam_pool_allocated", "metal3_ipam_pool_free",
                    "metal3_ipam_allocations_total")


async def _until(check, timeout: float, what: str) -> None:
    deadline = time.monotonic() + timeout
    while not check():
        assert time.monotonic() < deadline, f"timed out after {timeout:g}s waiting for {what}"
        await asyncio.sleep(0.02)


def test_a_pool_gone_with_all_its_objects_leaves_no_task_timer_or_metric_series(control_plane, api_client, kube: Kube):
    kube.pool("p", pools=[{"subnet": "10.77.0.0/24"}], prefix=24)
    kube.pool("q", pools=[{"subnet": "10.78.0.0/24"}], prefix=24)
    for name, pool in (("a", "p"), ("b", "p"), ("c", "q")):
        kube.claim(name, pool)
    resources = discover(api_client)
    labels = {"namespace": kube.ns, "pool": "p", "kind": "IPPool"}

    def sample(name: str, pool: str = "p") -> float | None:
        return REGISTRY.get_sample_value(name, {**labels, "pool": pool})

    async def scenario() -> tuple[PoolWorkers, Inventory]:
        inventory = Inventory()
        writer = ApiWriter(from_kubeconfig([str(control_plane.kubeconfig)]), inventory, resources, parallel=4)
        workers = PoolWorkers(inventory, writer)
        try:
            for plural, kind in (("ippools", kinds.IPPOOL), ("ipclaims", kinds.IPCLAIM)):
                for obj in kube.list(("ipam.metal3.io", "v1alpha1"), plural):
                    obj.setdefault("kind", kind[1])
                    workers.kick(inventory.upsert(obj))
            pools = [(kube.ns, "p"), (kube.ns, "q")]
            await _until(lambda: all(sample("metal3_ipam_pool_allocated", p[1]) == n
                                     for p, n in zip(pools, (2, 1))), 30, "both pools served")
            assert all(sample(name) is not None for name in PER_POOL_SAMPLES), labels
            workers._retry_later((kube.ns, "p"))  # as after a refusal: a timer pending for the pool

            # The watches report every object of pool p gone (addresses, claims, then the pool).
            p_objects = [obj for obj in inventory.objects.values()
                         if obj is inventory.get(kinds.IPPOOL, kube.ns, "p")
                         or (obj.get("spec") or {}).get("pool", {}).get("name") == "p"]
            assert len(p_objects) == 5, [o["metadata"]["name"] for o in p_objects]  # pool, 2 claims, 2 addresses
            pool_obj = inventory.get(kinds.IPPOOL, kube.ns, "p")
            for obj in p_objects:
                if obj is not pool_obj:
                    workers.kick(inventory.remove(obj))
            # While the pool object is still known, its state stays.
            await _until(lambda: (kube.ns, "p") not in workers._tasks, 10, "the pass over p to end")
            assert sample("metal3_ipam_pool_capacity") is not None
            # A deletion comes with the object's last state (passes above wrote its status since).
            workers.kick(inventory.remove(inventory.get(kinds.IPPOOL, kube.ns, "p")))
            await _until(lambda: (kube.ns, "p") not in workers._tasks, 10, "the last pass over p to end")
            return workers, inventory
        finally:
            await workers.stop()
            await writer.close()

    workers, _ = asyncio.run(scenario())
    pool = (kube.ns, "p")
    assert pool not in workers._retry_handles and pool not in workers._backoff and pool not in workers._dirty
    assert not [k for k in workers._waiting_since if k[0] == pool]
    for name in PER_POOL_SAMPLES:
        assert sample(name) is None, f"{name}{labels} outlived the pool"
    assert sample("metal3_ipam_pool_allocated", "q") == 1, "the other pool's series went too"
    assert (kube.ns, "q") not in workers._tasks  # a finished pass leaves no task behind either
