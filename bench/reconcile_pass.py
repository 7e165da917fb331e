#!/usr/bin/env python3
"""Cost of one pass over a pool, by its size: the full reconcile against a pass over what changed.

For pools of 1,000 / 20,000 / 50,000 bound IPClaims (in process, no API server):
- a pass when nothing changed (an event about the pool object, a watch echo);
- a pass after one new claim (it is allocated an address);
each as the full reconcile (``reconcile(snapshot)``, every claim and address
decided, what every event cost before) and as the controller's pass now (the
pool's change log drained into its ledger, only what changed decided), in
microseconds per claim of the pool, and their ratio. The pool status (counts
and ``status.indexes``) is written at most about once a second: the one-claim
pass is shown with the status put off, as within that second, and with it due.

Then the longest the event loop went without a turn while the controller's
pass loaded and decided the biggest pool afresh (start-up, a spec change, the
audit), against the same work done in one go.

    python -m bench.reconcile_pass [--sizes 1000,20000,50000] [--repeat 3]
"""

from __future__ import annotations

import argparse
import asyncio
import random
import sys
import time

from metal3_ipam import poolkinds  # noqa: F401  (registers the kinds of pool)
from metal3_ipam.controller.api import Outcome
from metal3_ipam.controller.freezing import Freezer
from metal3_ipam.controller.workers import PoolWorkers
from metal3_ipam.core import kinds
from metal3_ipam.core.ledger import Ledger
from metal3_ipam.core.objects import PoolKey
from metal3_ipam.core.reconcile import plan_pass, reconcile, run_to_end
from metal3_ipam.testing.bound_pool import NOW, bound_pool, claim


NS, POOL_NAME = "default", "pool1"
POOL = PoolKey(NS, POOL_NAME)
GOAL_BLOCK_MS = 20.0


def best(repeat: int, run) -> float:
    times = []
    for _ in range(repeat):
        started = time.perf_counter()
        run()
        times.append(time.perf_counter() - started)
    return min(times)


class Passes:
    """The controller's pass, as the workers make it, without the writer."""

    def __init__(self, api) -> None:
        self.api = api
        self.inventory = api.inventory
        self.ledger = Ledger()
        self.inventory.drain(POOL)
        self.run(status_due=True)

    def run(self, status_due: bool = False):
        reload, changes = self.inventory.drain(POOL)
        context = self.inventory.snapshot(POOL, NOW, random.Random(0), members=False)
        if reload or self.ledger.needs_full:
            self.ledger = Ledger()
            plan = run_to_end(plan_pass(self.ledger, self.inventory.snapshot(POOL, NOW, random.Random(0)), full=True))
        else:
            plan = run_to_end(plan_pass(self.ledger, context, changes, status_due=status_due))
        self.ledger.settle()
        return plan


def one_claim_full(api, name: str) -> None:
    api.inventory.upsert(claim(name, POOL_NAME, NS))
    plan = reconcile(api.inventory.snapshot(POOL, NOW, random.Random(0)))
    assert any(a.obj.get("kind") == "IPAddress" for a in plan.writes if hasattr(a, "obj")), "nothing allocated"
    api.inventory.forget(kinds.IPCLAIM, NS, name)


def one_claim_kept(api, passes: Passes, name: str, status_due: bool) -> None:
    api.inventory.upsert(claim(name, POOL_NAME, NS))
    plan = passes.run(status_due=status_due)
    assert any(a.obj.get("kind") == "IPAddress" for a in plan.writes if hasattr(a, "obj")), "nothing allocated"
    api.inventory.forget(kinds.IPCLAIM, NS, name)
    passes.run(status_due=status_due)  # the claim gone again: not timed


def longest_block(api) -> tuple[float, float, float, float, int]:
    """Longest gaps between event-loop turns in ms (wall and CPU at start-up, CPU in an audit);
    the same full pass in one go in ms; turns given."""
    class Writer:
        async def execute(self, plan, pool=None):
            return Outcome(done=len(plan.writes))

    async def scenario():
        workers = PoolWorkers(api.inventory, Writer())
        gaps = [0.0, 0.0]
        done = False

        async def ticker():
            # Wall time between turns, and this thread's CPU time: on a busy machine the
            # wall time also counts the moments another process had the core.
            last, last_cpu = time.perf_counter(), time.thread_time()
            while not done:
                await asyncio.sleep(0)
                now, cpu = time.perf_counter(), time.thread_time()
                gaps[0], gaps[1] = max(gaps[0], now - last), max(gaps[1], cpu - last_cpu)
                last, last_cpu = now, cpu

        task = asyncio.get_running_loop().create_task(ticker())
        await asyncio.sleep(0)
        await workers._pass(POOL)  # start-up: the ledger loaded and every claim decided
        first = list(gaps)
        gaps[:] = [0.0, 0.0]
        workers._audit_at[POOL] = 0.0
        await workers._pass(POOL)  # the audit: loaded again and compared with the kept one
        done = True
        await task
        return first, list(gaps), workers.yields

    first, audit, turns = asyncio.run(scenario())
    started = time.perf_counter()
    reconcile(api.inventory.snapshot(POOL, NOW, random.Random(0)))
    return first[0] * 1000, first[1] * 1000, audit[1] * 1000, (time.perf_counter() - started) * 1000, turns


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", default="1000,20000,50000")
    parser.add_argument("--repeat", type=int, default=3)
    args = parser.parse_args()
    sizes = [int(s) for s in args.sizes.split(",")]
    print(f"{'claims':>7}  {'pass':<32} {'full µs/claim':>14} {'kept µs/claim':>14} {'full/kept':>10}")
    for n in sizes:
        api = bound_pool(n)
        passes = Passes(api)
        assert passes.ledger.allocated == n
        rows = []
        full = best(args.repeat, lambda: reconcile(api.inventory.snapshot(POOL, NOW, random.Random(0))))
        kept = best(args.repeat, lambda: passes.run())
        rows.append(("nothing changed", full, kept))
        counter = iter(range(10**9))
        full = best(args.repeat, lambda: one_claim_full(api, f"new{next(counter)}"))
        kept = best(args.repeat, lambda: one_claim_kept(api, passes, f"new{next(counter)}", False))
        rows.append(("one new claim, status put off", full, kept))
        kept = best(args.repeat, lambda: one_claim_kept(api, passes, f"new{next(counter)}", True))
        rows.append(("one new claim, status due", full, kept))
        for what, full, kept in rows:
            print(f"{n:>7}  {what:<32} {full / n * 1e6:>14.3f} {kept / n * 1e6:>14.4f} {full / kept:>9.0f}×")
    n = max(sizes)
    api = bound_pool(n)
    # As the controller holds an inventory it filed: listings and watch events are frozen as they
    # come (every FREEZE_EVERY objects, freezing.py); a full collection never walks all of it.
    Freezer(lambda: api.inventory.filed).freeze()
    gap, cpu_gap, audit_gap, whole, turns = longest_block(api)
    verdict = "PASS" if max(cpu_gap, audit_gap) <= GOAL_BLOCK_MS else "FAIL"
    print(f"\nfull recompute of {n} claims by the controller's pass: longest event-loop block {cpu_gap:.1f} ms "
          f"of CPU ({gap:.1f} ms wall, other processes included), {audit_gap:.1f} ms in an audit "
          f"({turns} turns given in both); the same pass in one go blocks {whole:.0f} ms "
          f"(goal <= {GOAL_BLOCK_MS:.0f} ms of CPU: {verdict})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
