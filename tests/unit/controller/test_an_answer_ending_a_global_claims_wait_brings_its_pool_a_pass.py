"""A claim of a global pool waiting for a paused claim of its namespace's pools (Ready=False, WaitingForCluster, its
message naming that claim) is decided again when that claim, or an address naming it, changes. When this controller
writes that change (a pass of the namespaced pool made before the pause, landing after it), the writer files the
answer, and the watch event of the write comes later and is no news then: the writer's answer itself brings the
global pool its pass (``ApiWriter.on_filed``, ``PoolWorkers.filed``)."""

from __future__ import annotations

import asyncio

from metal3_ipam.controller.workers import PoolWorkers
from metal3_ipam.core import kinds
from metal3_ipam.core import objects as o
from metal3_ipam.core.actions import Create
from metal3_ipam.testing import go_incluster as gi
from two_lock_stores import NS, Server, lock_body, make_writer

GLOBAL = o.PoolKey("", "g", (gi.GROUP, gi.GLOBAL_IN_CLUSTER_IP_POOL))


def _waiting_claim() -> dict:
    claim = gi.claim("d", NS, gi.GLOBAL_IN_CLUSTER_IP_POOL, "g")
    claim["metadata"].update(uid="uid-d", resourceVersion="5")
    claim["status"] = {"conditions": [{
        "type": "Ready", "status": "False", "reason": "WaitingForCluster",
        "message": f"waits for IPAddressClaim a of {gi.IN_CLUSTER_IP_POOL} {NS}/p to be unpaused (Cluster {NS}/cl is "
                   "paused): a pass of its pool made before the pause may still hand it an address this pool could "
                   "hand out too", "lastTransitionTime": "2024-01-01T00:00:00Z"}]}
    return claim


def test_the_answer_to_a_lock_written_for_the_claim_waited_for_brings_the_waiting_claims_pool_a_pass():
    writer = make_writer(Server())
    writer.inventory.upsert(_waiting_claim())
    writer.inventory.drain(GLOBAL)
    filed: list[set] = []
    writer.on_filed = filed.append
    asyncio.run(writer._create(Create(lock_body("a"))))
    assert GLOBAL in set().union(*filed), filed
    reload, changes = writer.inventory.drain(GLOBAL)
    assert [key for key, _ in changes] == [(kinds.CAPI_CLAIM, NS, "d")] and not reload


def test_the_workers_pass_over_the_pools_an_answer_filed_that_have_changes_to_take():
    writer = make_writer(Server())
    writer.inventory.upsert(_waiting_claim())
    workers = PoolWorkers(writer.inventory, writer)
    writer.on_filed = workers.filed

    async def scenario():
        writer.inventory.drain(GLOBAL)
        await writer._create(Create(lock_body("a")))
        return set(workers._queued)

    queued = asyncio.run(scenario())
    assert GLOBAL in queued, queued
