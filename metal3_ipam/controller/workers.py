"""One reconcile at a time per pool, batching whatever arrived meanwhile.

Watch events mark pools dirty (``kick``). Each dirty pool gets a worker task
that waits a short moment for more events to gather (a burst of claims
becomes one pass), takes a snapshot from the inventory, runs the shared
reconcile and executes the plan. A pool that was kicked while it was being
worked on is worked on again; one that hit a refusal comes back after a
growing delay, never in a tight loop.

Nothing starts while ``may_act()`` is false (not the leader, inventory not
loaded yet); a pass under way when it turns false is stopped by the writer's
own gate. A pool that is gone from the inventory with every object that
referred to it leaves nothing behind: no task, no retry timer, no metric
series.
"""

from __future__ import annotations

import asyncio
import datetime
import logging
import random
import time
from typing import Callable

from ..core import objects as o
from ..core.inventory import Inventory
from ..core.reconcile import reconcile
from ..core import kinds
from . import metrics
from .api import ApiWriter, Outcome

log = logging.getLogger("metal3_ipam.pools")


def utc_now() -> str:
    return datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")


class PoolWorkers:
    def __init__(self, inventory: Inventory, writer: ApiWriter, *, gather_seconds: float = 0.02,
                 max_backoff: float = 60.0, may_act: Callable[[], bool] = lambda: True) -> None:
        self.inventory = inventory
        self.writer = writer
        self.gather_seconds = gather_seconds
        self.max_backoff = max_backoff
        self.may_act = may_act
        self.rng = random.Random()
        self._dirty: set[o.PoolKey] = set()
        self._tasks: dict[o.PoolKey, asyncio.Task] = {}
        self._backoff: dict[o.PoolKey, float] = {}
        self._retry_handles: dict[o.PoolKey, asyncio.TimerHandle] = {}
        # When a claim was first seen waiting, for the allocation latency histogram.
        self._waiting_since: dict[tuple, float] = {}

    def kick(self, pools: set[o.PoolKey] | list[o.PoolKey]) -> None:
        for pool in pools:
            self._dirty.add(pool)
            task = self._tasks.get(pool)
            if task is None or task.done():
                self._tasks[pool] = asyncio.get_running_loop().create_task(self._work(pool), name=f"pool {pool}")

    def kick_all(self) -> None:
        self.kick(self.inventory.pool_keys())

    async def stop(self, grace: float = 0.0) -> bool:
        """End every pass. Those under way get up to ``grace`` seconds to finish (with writing
        no longer allowed they stop at their next action); the rest are cancelled. True when
        none had to be cancelled: no request of ours can still be on its way."""
        for handle in self._retry_handles.values():
            handle.cancel()
        self._retry_handles.clear()
        self._dirty.clear()
        tasks = [task for task in self._tasks.values() if not task.done()]
        pending = set(tasks)
        if tasks and grace > 0:
            _, pending = await asyncio.wait(tasks, timeout=grace)
        for task in pending:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
        return not pending

    async def _work(self, pool: o.PoolKey) -> None:
        try:
            while pool in self._dirty:
                await asyncio.sleep(self.gather_seconds)
                self._dirty.discard(pool)
                if not self.may_act():
                    return
                try:
                    outcome = await self._pass(pool)
                except Exception:  # a bug must not stop the other pools; retry later
                    log.exception("pool %s/%s: reconcile failed", *pool)
                    outcome = Outcome(again=True)
                if outcome.again:
                    self._retry_later(pool)
                else:
                    self._backoff.pop(pool, None)
        finally:
            if self._tasks.get(pool) is asyncio.current_task():
                del self._tasks[pool]
            if self._gone(pool):
                self._forget(pool)

    def _gone(self, pool: o.PoolKey) -> bool:
        """Neither the pool nor anything filed under it is in the inventory."""
        return self.inventory.get(kinds.IPPOOL, *pool) is None and pool not in self.inventory.groups

    def _forget(self, pool: o.PoolKey) -> None:
        self._dirty.discard(pool)
        self._backoff.pop(pool, None)
        handle = self._retry_handles.pop(pool, None)
        if handle is not None:
            handle.cancel()
        for key in [k for k in self._waiting_since if k[0] == pool]:
            del self._waiting_since[key]
        for metric in metrics.PER_POOL:
            try:
                metric.remove(*pool)
            except KeyError:  # this pool never had that series
                pass

    def _retry_later(self, pool: o.PoolKey) -> None:
        delay = min(self._backoff.get(pool, 0.25) * 2, self.max_backoff)
        self._backoff[pool] = delay
        old = self._retry_handles.pop(pool, None)
        if old is not None:
            old.cancel()
        self._retry_handles[pool] = asyncio.get_running_loop().call_later(delay, self._retry, pool)

    def _retry(self, pool: o.PoolKey) -> None:
        self._retry_handles.pop(pool, None)  # fired: nothing left to cancel
        self.kick([pool])

    async def _pass(self, pool: o.PoolKey) -> Outcome:
        started = time.monotonic()
        snapshot = self.inventory.snapshot(pool, utc_now(), self.rng)
        for claim in snapshot.claims:
            if not _is_bound(claim):
                self._waiting_since.setdefault((pool, o.claim_key(claim)), started)
        plan = reconcile(snapshot)
        if not plan:
            self._observe(pool, Outcome(), started)
            return Outcome()
        for line in plan.describe():
            log.info("pool %s/%s: %s", pool[0], pool[1], line)
        planned = time.monotonic()
        outcome = await self.writer.execute(plan, pool)
        log.info("pool %s/%s: pass of %d claims: planned %d steps in %.3f s, wrote %d in %.3f s%s%s",
                 pool[0], pool[1], len(snapshot.claims), len(plan.steps), planned - started, outcome.done,
                 time.monotonic() - planned, f", {len(outcome.failures)} refused" if outcome.failures else "",
                 f", {outcome.stopped} steps stopped: no longer leading" if outcome.stopped else "")
        self._observe(pool, outcome, started)
        return outcome

    def _observe(self, pool: o.PoolKey, outcome: Outcome, started: float) -> None:
        namespace, name = pool
        metrics.RECONCILE_SECONDS.observe(time.monotonic() - started)
        for created in outcome.created:
            if kinds.kind_of(created) == kinds.IPADDRESS:
                metrics.ALLOCATIONS.labels(namespace, name).inc()
        for target in outcome.deleted:
            if target.group_kind == kinds.IPADDRESS:
                metrics.RELEASES.labels(namespace, name).inc()
        for warning in outcome.warnings:
            metrics.ERRORS.labels(warning.reason).inc()
            log.warning("pool %s/%s: %s: %s: %s", namespace, name, warning.target, warning.reason, warning.message)
        now = time.monotonic()
        live_claims = set()
        for claim in self.inventory.claims_of(pool):
            key = (pool, o.claim_key(claim))
            live_claims.add(key)
            if _is_bound(claim) and key in self._waiting_since:
                metrics.ALLOCATION_SECONDS.observe(now - self._waiting_since.pop(key))
        for key in [k for k in self._waiting_since if k[0] == pool and k not in live_claims]:
            del self._waiting_since[key]
        pool_obj = self.inventory.get(kinds.IPPOOL, namespace, name)
        status = o.status(pool_obj) if pool_obj else {}
        if str(status.get("capacity", "")).isdigit():
            metrics.POOL_CAPACITY.labels(namespace, name).set(int(status["capacity"]))
            metrics.POOL_ALLOCATED.labels(namespace, name).set(int(status.get("allocated") or 0))
            metrics.POOL_FREE.labels(namespace, name).set(int(status.get("free") or 0))


def _is_bound(claim: dict) -> bool:
    status = o.status(claim)
    return bool(status.get("address") or status.get("addressRef"))
