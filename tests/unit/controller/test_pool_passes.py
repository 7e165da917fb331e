"""The pool workers' passes over the in-memory store: the audit, slices, and a bounded share of the writer.

The workers run here as in the controller, on an event loop, with the plans
carried out by the in-memory store (``metal3_ipam.memory``) instead of the
REST writer: what is tested is how passes are cut and checked, not the API.
"""

from __future__ import annotations

import asyncio
import random

from metal3_ipam.controller import metrics
from metal3_ipam.controller.api import Outcome
from metal3_ipam.controller.workers import PoolWorkers
from metal3_ipam.core import kinds
from metal3_ipam.core import objects as o
from metal3_ipam.core.actions import Create
from metal3_ipam.core.ledger import LOAD_CHUNK, PLANNED, Ledger
from metal3_ipam.core.reconcile import DECISIONS_PER_YIELD, plan_pass, run_to_end
from metal3_ipam.memory import MemoryApi, converge
from metal3_ipam.testing import go_incluster as gi
from metal3_ipam.testing.bound_pool import bound_pool
from ipam_objects import NS, capi_claim, dated_ip_pool, ipclaim, ippool, loaded
from pool_workers import MemoryWriter, POOL, until_quiet


def mismatches(pool=POOL) -> float:
    return metrics.AUDIT_MISMATCHES.labels(*metrics.pool_labels(pool))._value.get()


def bound_ips(api: MemoryApi) -> dict[str, str]:
    return {o.name(a): o.spec(a)["address"] for a in api.inventory.of_kind(kinds.IPADDRESS)}


def test_the_audit_finds_a_corrupted_ledger_counts_it_and_repairs_it():
    api = loaded(ippool(pools=[{"start": "10.0.0.1", "end": "10.0.0.40"}]),
                 *[ipclaim(f"c{i}") for i in range(10)], *[capi_claim(f"k{i}") for i in range(10)])

    async def scenario():
        workers = PoolWorkers(api.inventory, MemoryWriter(api), audit_seconds=3600)
        await until_quiet(workers)
        before = mismatches()
        # After passes that only looked at what changed, an audit finds nothing to repair.
        api.load(ipclaim("late"))
        await until_quiet(workers)
        workers._audit_at[POOL] = 0
        await until_quiet(workers)
        assert mismatches() == before
        # A bug (simulated): the ledger forgets that c0's IP is held and binds c1 elsewhere.
        ledger = workers._ledgers[POOL]
        c0_ip = next(ip for ip in ledger.holders
                     if any(h[1] == f"pool1-10-0-0-{ip & 0xff}" for h in ledger.holders_of(ip))
                     and ledger.bound.get(("IPClaim", "c0")) == f"10.0.0.{ip & 0xff}")
        for holder in ledger.holders_of(c0_ip):
            ledger.let_go(c0_ip, holder)
        ledger.bound[("IPClaim", "c1")] = "10.9.9.9"
        workers._audit_at[POOL] = 0
        api.load(ipclaim("new"))
        await until_quiet(workers)
        assert mismatches() == before + 1
        repaired = workers._ledgers[POOL]
        assert repaired is not ledger and c0_ip in repaired.holders
        fresh = Ledger()
        run_to_end(plan_pass(fresh, api.inventory.snapshot(POOL, api.now), full=True))
        fresh.settle()
        assert repaired.state() == fresh.state()
        # The new claim did not get the IP the corrupted ledger had let go.
        ips = [o.spec(a)["address"] for a in api.inventory.of_kind(kinds.IPADDRESS)]
        assert len(ips) == len(set(ips)) == 22

    asyncio.run(scenario())


def test_a_pass_of_a_big_pool_gives_the_event_loop_turns():
    """20,000 bound claims loaded afresh and decided: the loop runs in between, counted, not timed."""
    n = 20_000
    api = bound_pool(n)

    async def scenario():
        workers = PoolWorkers(api.inventory, MemoryWriter(api), slice_seconds=0.0)
        ticks = 0
        done = False

        async def ticker():
            nonlocal ticks
            while not done:
                ticks += 1
                await asyncio.sleep(0)

        task = asyncio.get_running_loop().create_task(ticker())
        await asyncio.sleep(0)
        await workers._pass(POOL)
        done = True
        await task
        return workers, ticks

    workers, ticks = asyncio.run(scenario())
    ledger = workers._ledgers[POOL]
    assert len(ledger.claims) == n and ledger.allocated == n
    # Loading yields every LOAD_CHUNK objects, deciding every DECISIONS_PER_YIELD claims.
    assert workers.yields >= 2 * n // LOAD_CHUNK + n // DECISIONS_PER_YIELD
    assert ticks >= workers.yields


def test_a_pool_with_a_backlog_hands_the_writer_a_bounded_share_per_pass():
    api = loaded(ippool(pools=[{"start": "10.0.0.1", "end": "10.0.3.250"}]),
                 ippool("other", pools=[{"start": "10.1.0.1", "end": "10.1.0.9"}]),
                 *[ipclaim(f"c{i}") for i in range(500)])
    writer = MemoryWriter(api)

    async def scenario():
        workers = PoolWorkers(api.inventory, writer, max_steps=40, gather_seconds=0.0)
        workers.kick_all()
        await asyncio.sleep(0)
        # A single claim of another pool arrives once the backlog is being served.
        while not writer.steps:
            await asyncio.sleep(0)
        api.load(ipclaim("single", pool="other"))
        workers.kick([(NS, "other")])
        while workers._tasks:
            await asyncio.sleep(0.01)
        await workers.stop()

    asyncio.run(scenario())
    assert all(steps <= 41 for _, steps in writer.steps), writer.steps  # the pool's own step besides
    backlog = [i for i, (pool, _) in enumerate(writer.steps) if pool == "pool1"]
    single = next(i for i, (pool, _) in enumerate(writer.steps) if pool == "other")
    assert single < backlog[-1], "the single claim waited for the whole backlog"
    assert len(bound_ips(api)) == 501


class GatedWriter(MemoryWriter):
    """A MemoryWriter whose plans wait until ``go`` is set: a pass whose writes are on their way."""

    def __init__(self, api: MemoryApi) -> None:
        super().__init__(api)
        self.entered = asyncio.Event()
        self.go = asyncio.Event()

    async def execute(self, plan, pool=None) -> Outcome:
        self.entered.set()
        await self.go.wait()
        return await super().execute(plan, pool)


def test_a_stop_lets_the_pass_under_way_end_and_starts_no_other():
    """Without leader election no gate closes at shutdown: the pass whose writes are on their way
    ends, and neither its backlog's next share nor a kick that arrives meanwhile (a watch event,
    a retry timer, a pool woken) or afterwards starts another."""
    api = loaded(ippool(pools=[{"start": "10.0.0.1", "end": "10.0.3.250"}]),
                 ippool("other", pools=[{"start": "10.1.0.1", "end": "10.1.0.9"}]),
                 *[ipclaim(f"c{i}") for i in range(100)], ipclaim("single", pool="other"))
    writer = GatedWriter(api)

    async def scenario():
        workers = PoolWorkers(api.inventory, writer, max_steps=40, gather_seconds=0.0)
        workers.kick([POOL])
        await asyncio.wait_for(writer.entered.wait(), 10)
        stopping = asyncio.get_running_loop().create_task(workers.stop(grace=30))
        while not workers._stopping:
            await asyncio.sleep(0)
        workers.kick([(NS, "other")])
        writer.go.set()
        assert await asyncio.wait_for(stopping, 30), "the pass under way was cancelled"
        assert not [pool for pool, task in workers._tasks.items() if not task.done()]
        workers.kick_all()
        assert not workers._tasks, "a kick after the stop started a pass"

    asyncio.run(scenario())
    assert [pool for pool, _ in writer.steps] == ["pool1"], writer.steps


def test_planned_allocations_are_given_back_when_their_writes_did_not_happen():
    api = loaded(ippool(pools=[{"start": "10.0.0.1", "end": "10.0.0.5"}]), *[ipclaim(f"c{i}") for i in range(3)])
    ledger = Ledger()
    plan = run_to_end(plan_pass(ledger, api.inventory.snapshot(POOL, api.now), full=True))
    assert len([a for a in plan.writes if isinstance(a, Create)]) == 3
    assert any(h[0] == PLANNED for ip in ledger.holders for h in ledger.holders_of(ip))
    ledger.settle()  # nothing was written
    assert ledger.allocated == 0 and ledger.allocator.free_count == 5


def test_claims_a_prefix_pools_pass_left_for_the_next_after_fencing_global_claims_are_served_by_it():
    """A namespaced prefix pool's allocation writes the claims of a global pool waiting in its namespace (their
    pass may be on its way into its sub-prefixes), and so makes one allocation a pass: nothing in the store
    changes for the claims it left, and its next passes serve them all the same."""
    prefix_kind = (gi.GROUP, gi.IN_CLUSTER_PREFIX_POOL)
    pool = o.PoolKey(NS, "n", prefix_kind)
    api = loaded(dated_ip_pool("g", ["fd00:9::1"], "2024-01-01T00:00:00Z"),
                 gi.claim("held", NS, gi.GLOBAL_IN_CLUSTER_IP_POOL, "g"),
                 gi.claim("waits", NS, gi.GLOBAL_IN_CLUSTER_IP_POOL, "g"))
    converge(api, random.Random(0))
    api.load(gi.prefix_pool("n", prefixes=["fd00::/120"], namespace=NS, allocation_prefix_length=124))
    for n in range(3):
        api.load(gi.claim(f"p{n}", NS, gi.IN_CLUSTER_PREFIX_POOL, "n"))

    async def scenario():
        await until_quiet(PoolWorkers(api.inventory, MemoryWriter(api)), pool)

    asyncio.run(scenario())
    assert all(api.inventory.get(kinds.CAPI_ADDRESS, NS, f"p{n}") is not None for n in range(3))
