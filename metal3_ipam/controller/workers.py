"""One reconcile at a time per pool, batching whatever arrived meanwhile.

Watch events mark pools dirty (``kick``). Each dirty pool gets a worker task
that waits a short moment for more events to gather (a burst of claims
becomes one pass), drains the pool's changes from the inventory into its
ledger, runs the shared reconcile over what they made dirty and executes the
plan. A pool that was kicked while it was being worked on is worked on again;
one that hit a refusal comes back after a growing delay, never in a tight loop.

The ledger is loaded afresh (a full pass) at the first pass, when the pool's
spec or what it withholds changes, when a Cluster of its namespace pauses or
resumes, after a pass whose writes did not all go through, and in a periodic
audit that compares it with the kept one (a difference is logged, counted and
repaired). Passes run in slices of a few milliseconds between which the event
loop serves watches and other pools, and one pass hands the writer at most
``max_steps`` steps: a pool with a backlog does not keep another's claim waiting.

A pass has three parts, one method each: what it covers (``_scope``: what
changed, or every object), the decisions (the core's ``plan_pass``, over the
kept ledger told what changed in ``_decide_changes``, or over a ledger built
again in ``_decide_afresh``), and their execution by the writer (``_execute``).

Nothing starts while ``may_act()`` is false (not the leader, inventory not
loaded yet); a pass under way when it turns false is stopped by the writer's
own gate. A pool that is gone from the inventory with every object that
referred to it leaves nothing behind: no task, no retry timer, no metric
series.
"""

from __future__ import annotations

import asyncio
import contextlib
import datetime
import functools
import logging
import random
import time
from collections.abc import Generator, Iterable, Mapping
from dataclasses import dataclass
from typing import Any, Callable

from ..core import objects as o
from ..core.actions import Create, Plan, SetStatus
from ..core.inventory import Inventory, ObjKey
from ..core.ledger import CLAIM_KINDS, Ledger, compare, compare_maps
from ..core.reconcile import Snapshot, load, needs_full, plan_pass
from ..core import kinds
from ..core import poolkind
from . import metrics
from .api import ApiWriter, Outcome
from .freezing import Freezer

# A pool's status is written at most once per second for every this many bindings (see _status_interval).
STATUS_BINDINGS_PER_SECOND = 5000
# Claims and addresses of a pool from which its full passes build the ledger with the collector paused
# (see freezing.py): below it the collector walks a ledger in a few milliseconds.
PAUSE_AT = 10_000

log = logging.getLogger("metal3_ipam.pools")

# Steps with writes one pass hands the writer: a pool with a backlog takes several
# passes, and the passes of other pools (a single claim) get their turn in between.
MAX_STEPS_PER_PASS = 200


# The priority of pools a resync or a relist marks for a pass (controller-runtime's LowPriority).
RESYNC_PRIORITY = -100

# A pass for work due at a time starts this long after it (the clock read in whole seconds then says it is due).
DUE_MARGIN = 0.05


def utc_now() -> str:
    return datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")


@dataclass
class PassScope:
    """What one pass over a pool covers, settled before anything is decided."""

    started: float
    ledger: Ledger  # the kept one
    changes: list[tuple[ObjKey, dict | None]]  # since the last pass
    context: Snapshot  # the pool and its surroundings, without its objects
    released: int  # the kept ledger's count of addresses gone, before this pass
    full: bool  # the ledger built again from every object of the pool
    audited: bool  # ... and the kept one compared with it
    status_due: bool  # the pool's counts and indexes may be written


class PoolWorkers:
    def __init__(self, inventory: Inventory, writer: ApiWriter, *, gather_seconds: float = 0.02,
                 max_backoff: float = 60.0, may_act: Callable[[], bool] = lambda: True,
                 max_steps: int = MAX_STEPS_PER_PASS, slice_seconds: float = 0.005,
                 status_seconds: float = 1.0, audit_seconds: float = 600.0, freezer: Freezer | None = None,
                 outside: Mapping[tuple[str, str], Any] | None = None) -> None:
        self.inventory = inventory
        # By kind, the adapter half of the kinds whose addresses an outside IPAM hands out
        # (``poolkind.Outside.service``): its answers given to their passes (``Snapshot.answers``), and it is
        # told each pass's intents.
        self.outside = dict(outside or {})
        self.max_steps = max_steps
        self.slice_seconds = slice_seconds
        self.status_seconds = status_seconds
        self.audit_seconds = audit_seconds
        self.yields = 0  # turns given to the event loop in the middle of a pass
        self._ledgers: dict[o.PoolKey, Ledger] = {}
        self._status_written: dict[o.PoolKey, float] = {}
        self._status_handles: dict[o.PoolKey, asyncio.TimerHandle] = {}
        self._audit_at: dict[o.PoolKey, float] = {}
        self.freezer = freezer or Freezer(lambda: inventory.filed)
        self.writer = writer
        self.gather_seconds = gather_seconds
        self.max_backoff = max_backoff
        self.may_act = may_act
        self.rng = random.Random()
        self._dirty: set[o.PoolKey] = set()
        self._tasks: dict[o.PoolKey, asyncio.Task] = {}
        self._backoff: dict[o.PoolKey, float] = {}
        self._retry_handles: dict[o.PoolKey, asyncio.TimerHandle] = {}
        # A pass at the time a plan said work falls due (a reuse grace period ends): kept in no other form,
        # so a restart loses nothing (the next pass finds the deadline in the objects again).
        self._due_handles: dict[o.PoolKey, tuple[str, asyncio.TimerHandle]] = {}
        # When a claim was first seen waiting, for the allocation latency histogram.
        self._waiting_since: dict[tuple, float] = {}
        # Per namespace, the pools with claims that could not be served: woken when another pool
        # of the namespace lets an IP or an address name go (see ``_wake_pending_free``).
        self._pools_pending_free: dict[str, set[o.PoolKey]] = {}
        self._stopping = False  # stop() was called: no pass starts any more
        # The work queue, as the metrics show it: pool -> (when it was marked for a pass, its priority: 0, or
        # RESYNC_PRIORITY when a resync or relist marked it); and pool -> when its pass under way started.
        self._queued: dict[o.PoolKey, tuple[float, int]] = {}
        self._running: dict[o.PoolKey, float] = {}
        metrics.track(self)

    def kick(self, pools: set[o.PoolKey] | list[o.PoolKey], priority: int = 0) -> None:
        if self._stopping:
            return
        for pool in pools:
            pool = o.PoolKey(*pool)
            self._mark(pool, priority)
            task = self._tasks.get(pool)
            if task is None or task.done():
                self._tasks[pool] = asyncio.get_running_loop().create_task(self._work(pool), name=f"pool {pool}")

    def filed(self, pools: set[o.PoolKey]) -> None:
        """The writer filed an answer concerning ``pools``: those with changes to take get a pass, as a watch event
        would bring them (the event of our own write comes later, and is no news then); among them another pool's
        claims waiting for what was written (``Inventory._waiters``)."""
        self.kick([pool for pool in pools if self.inventory.pending(pool)])

    def kick_all(self) -> None:
        self.kick(self.inventory.pool_keys(), RESYNC_PRIORITY)

    def _mark(self, pool: o.PoolKey, priority: int = 0) -> None:
        """The pool is due for a pass (its task, running or started by ``kick``, makes it)."""
        queued = self._queued.get(pool)
        if queued is None:
            self._queued[pool] = (time.monotonic(), priority)
            metrics.WORKQUEUE_ADDS.labels(*_queue_labels(pool)).inc()
        elif priority > queued[1]:
            self._queued[pool] = (queued[0], priority)
        self._dirty.add(pool)

    async def passes_ended(self) -> None:
        """Wait for the passes under way to end. Call while ``may_act()`` is false: then none starts
        meanwhile, and those under way stop at their next write."""
        tasks = [task for task in self._tasks.values() if not task.done()]
        if tasks:
            await asyncio.wait(tasks)

    async def stop(self, grace: float = 0.0) -> bool:
        """End every pass and start none any more (a kick, a timer, a backlog's next share start
        nothing). Those under way get up to ``grace`` seconds to finish (with writing no longer
        allowed they stop at their next action); the rest are cancelled. True when none had to
        be cancelled: no request of ours can still be on its way."""
        self._stopping = True
        for handle in [*self._retry_handles.values(), *self._status_handles.values(),
                       *(h for _, h in self._due_handles.values())]:
            handle.cancel()
        self._due_handles.clear()
        self._retry_handles.clear()
        self._status_handles.clear()
        self._dirty.clear()
        self._queued.clear()
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
                queued = self._queued.pop(pool, None)
                if self._stopping or not self.may_act():
                    return
                started = self._running[pool] = time.monotonic()
                if queued is not None:
                    metrics.WORKQUEUE_QUEUE_SECONDS.labels(*_queue_labels(pool)).observe(started - queued[0])
                try:
                    outcome = await self._pass(pool)
                except Exception:  # a bug must not stop the other pools; retry later
                    log.exception("pool %s/%s: reconcile failed", pool.namespace, pool.name)
                    outcome = Outcome(again=True)
                finally:
                    del self._running[pool]
                self._count_pass(pool, started, outcome)
                if outcome.again:
                    self._retry_later(pool)
                else:
                    self._backoff.pop(pool, None)
        finally:
            if self._tasks.get(pool) is asyncio.current_task():
                del self._tasks[pool]
            if self._gone(pool):
                self._forget(pool)
            elif self.inventory.get(pool.kind, pool.namespace, pool.name) is None:
                # Deleted while claims still name it: its capacity, use and server's health are no more.
                metrics.remove_pool_series(pool, metrics.POOL_STATE)

    def _count_pass(self, pool: o.PoolKey, started: float, outcome: Outcome) -> None:
        """A pass in the reconcile and work-queue series of the pool's controller, with controller-runtime's
        results: ``error`` (it failed, or its writes are retried after a backoff), ``requeue`` (more to do
        at once: a backlog, news meanwhile), ``requeue_after`` (a pass is due later), ``success``."""
        seconds = time.monotonic() - started
        controller = metrics.controller_name(pool.kind)
        if outcome.again:
            result = "error"
            metrics.RECONCILE_ERRORS.labels(controller).inc()
        elif pool in self._dirty:
            result = "requeue"
        elif pool in self._due_handles:
            result = "requeue_after"
        else:
            result = "success"
        for total, time_ in ((metrics.RECONCILE_TOTAL, metrics.RECONCILE_TIME),
                             (metrics.CAPI_RECONCILE_TOTAL, metrics.CAPI_RECONCILE_TIME)):
            total.labels(controller, result).inc()
            time_.labels(controller).observe(seconds)
        metrics.WORKQUEUE_WORK_SECONDS.labels(*_queue_labels(pool)).observe(seconds)

    def queues(self) -> list[metrics.QueueState]:
        """Per controller (kind of pool): the pools waiting for a pass by priority, how long each pass under
        way has been running, and how many pools it has (one pass at a time each)."""
        now = time.monotonic()
        states = {kind: metrics.QueueState(metrics.controller_name(kind)) for kind in poolkind.REGISTRY
                  if not metrics.CONTROLLERS or metrics.controller_name(kind) in metrics.CONTROLLERS}
        for pool in self.inventory.pool_keys():
            if pool.kind in states:
                states[pool.kind].pools += 1
        for pool, (_, priority) in self._queued.items():
            if pool.kind in states and pool not in self._running:
                depth = states[pool.kind].depth
                depth[priority] = depth.get(priority, 0) + 1
        for pool, started in self._running.items():
            if pool.kind in states:
                states[pool.kind].running.append(now - started)
        return list(states.values())

    def claims_not_ready(self) -> dict[tuple[o.PoolKey, str], tuple[int, float]]:
        """(pool, reason of the claim's Ready condition, or Pending) -> (claims not bound, the longest any of them
        has not been Ready, in seconds: since its Ready condition last changed, else since it was made)."""
        if not self.may_act():  # a standby: the leader's series are the news (docs/operations.md)
            return {}
        now = time.time()
        served = self.inventory.namespaces
        found: dict[tuple[o.PoolKey, str], tuple[int, float]] = {}
        for kind in CLAIM_KINDS:
            for claim in self.inventory.of_kind(kind):
                namespace = o.namespace(claim)
                if _is_bound(claim) or o.is_deleting(claim) or (served is not None and namespace not in served):
                    continue
                pool = self.inventory.filed_with(kind, namespace, o.name(claim))
                ready = o.condition(o.status(claim), "Ready") or {}
                if pool is None or pool.kind not in poolkind.REGISTRY or ready.get("status") == "True":
                    continue
                reason = str(ready.get("reason") or "Pending")
                since = _timestamp(ready.get("lastTransitionTime") or o.meta(claim).get("creationTimestamp"))
                count, oldest = found.get((pool, reason), (0, 0.0))
                found[(pool, reason)] = (count + 1, max(oldest, now - since if since is not None else 0.0))
        return found

    def _gone(self, pool: o.PoolKey) -> bool:
        """Neither the pool nor anything filed under it is in the inventory."""
        return self.inventory.get(pool.kind, pool.namespace, pool.name) is None and pool not in self.inventory.groups

    def _forget(self, pool: o.PoolKey) -> None:
        self._dirty.discard(pool)
        self._queued.pop(pool, None)
        self._backoff.pop(pool, None)
        for handles in (self._retry_handles, self._status_handles):
            handle = handles.pop(pool, None)
            if handle is not None:
                handle.cancel()
        due = self._due_handles.pop(pool, None)
        if due is not None:
            due[1].cancel()
        self._ledgers.pop(pool, None)
        if pool.kind in self.outside:
            self.outside[pool.kind].pool_gone(pool)
        self._pools_pending_free.get(pool.namespace, set()).discard(pool)
        self._status_written.pop(pool, None)
        self._audit_at.pop(pool, None)
        self.inventory.drain(pool)
        for key in [k for k in self._waiting_since if k[0] == pool]:
            del self._waiting_since[key]
        metrics.remove_pool_series(pool)

    def answered(self, pool: o.PoolKey, key: str | None = None) -> None:
        """An outside IPAM answered for allocation key ``key`` of ``pool``: the claims pending its answer are decided
        again. ``None``: something that concerns every claim of the pool pending an answer (its server
        failed or answered again, an ask timed out): they all are."""
        ledger = self._ledgers.get(pool)
        if ledger is not None:
            if key is None:
                ledger.wake()
            else:
                ledger.answered(key)
                # A bound claim carrying the key is not pending: decided again too, for what its IPAM's sweep
                # found of the key since (its address gone there: ``Inventory.address_lost``).
                for claim in self.inventory.claims_carrying(key):
                    ckey = _claim_key(pool, kinds.kind_of(claim)[1], o.namespace(claim), o.name(claim))
                    if ckey in ledger.claims:
                        ledger.pending_claims[ckey] = None
        self.kick([pool])

    def _retry_later(self, pool: o.PoolKey) -> None:
        metrics.WORKQUEUE_RETRIES.labels(*_queue_labels(o.PoolKey(*pool))).inc()
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
        """One pass over a pool: what it covers, the core's decisions over it, the writer executing them."""
        scope = self._scope(pool)
        if scope.full:
            ledger, plan = await self._decide_afresh(pool, scope)
            released = -1  # what went since the kept ledger's last pass is not counted: wake anyway
        else:
            ledger, plan = await self._decide_changes(pool, scope)
            released = scope.released
        self.freezer.maybe_freeze()
        if pool.kind in self.outside:
            self.outside[pool.kind].passed(pool, scope.context.pool, plan.intents, ledger.claims.values())
        self._follow_up(pool, ledger, released, scope.started)
        self._pass_when_due(pool, plan.due)
        return await self._execute(pool, ledger, plan, scope.started)

    def _scope(self, pool: o.PoolKey) -> PassScope:
        """What the pass covers: what changed in the pool since the last pass, or every object of it."""
        started = time.monotonic()
        ledger = self._ledgers.get(pool)
        if ledger is None:
            ledger = self._ledgers[pool] = Ledger()
        reload, changes = self.inventory.drain(pool)
        context = self._snapshot(pool, utc_now(), members=False)
        status_due = started - self._status_written.get(pool, float("-inf")) >= self._status_interval(ledger)
        audit = not reload and started >= self._audit_at.get(pool, started)
        stale = reload or needs_full(ledger, context)
        return PassScope(started, ledger, changes, context, ledger.released, full=stale or audit,
                         audited=audit and not stale, status_due=status_due)

    def _snapshot(self, pool: o.PoolKey, now: str, members: bool = True) -> Snapshot:
        snapshot = self.inventory.snapshot(pool, now, self.rng, members=members)
        if pool.kind in self.outside:
            snapshot.answers = self.outside[pool.kind].answers
        return snapshot

    async def _decide_changes(self, pool: o.PoolKey, scope: PassScope) -> tuple[Ledger, Plan]:
        """The kept ledger told what changed; only what that makes dirty is decided."""
        changes = scope.changes
        await self._note_claims(pool, [obj for key, obj in changes if key[0] in CLAIM_KINDS and obj is not None],
                                scope.started)
        for key, obj in changes:
            if key[0] in CLAIM_KINDS and obj is None:
                self._waiting_since.pop((pool, _claim_key(pool, key[0][1], key[1], key[2])), None)
        self._wake_carriers(pool, ((scope.ledger.claims.get(_claim_key(pool, key[0][1], key[1], key[2])), obj)
                                   for key, obj in changes if key[0] in CLAIM_KINDS))
        plan = await self._cooperate(plan_pass(scope.ledger, scope.context, changes, max_steps=self.max_steps,
                                               status_due=scope.status_due))
        return scope.ledger, plan

    def _wake_carriers(self, pool: o.PoolKey, changed: Iterable[tuple[dict | None, dict | None]]) -> None:
        """Claims of an outside IPAM's pool that carry an allocation key changed or went, as (before, now) pairs:
        the claims of other pools refused for carrying one of those keys too await it (see reconcile's
        ``key_owner``), and are decided again, as the key may be theirs now. (Those of this pool are woken by
        the ledger itself.)"""
        outside = poolkind.REGISTRY[pool.kind].outside
        if outside is None:
            return
        keys: set[str] = set()
        for pair in changed:
            keys.update(k for k in (outside.read_key(v)[0] for v in pair if v is not None) if k is not None)
        for outside_key in keys:
            for other in {o.pool_of(c) for c in self.inventory.claims_carrying(outside_key)} - {pool, None}:
                self.answered(other, outside_key)

    async def _decide_afresh(self, pool: o.PoolKey, scope: PassScope) -> tuple[Ledger, Plan]:
        """The ledger built again from every object of the pool, which replaces the kept one; every claim and
        address decided. In an audit, a difference from the kept ledger is logged, counted and repaired."""
        fresh, snapshot, plan, found = await self._build(pool, scope)
        self._audit_at[pool] = scope.started + self.audit_seconds
        if found:
            metrics.AUDIT_MISMATCHES.labels(*metrics.pool_labels(pool)).inc()
            log.error("pool %s/%s: the kept allocation state differed from a recompute (replaced by it): %s",
                      pool.namespace, pool.name, "; ".join(found))
        self._ledgers[pool] = fresh
        kept = scope.ledger.claims
        self._wake_carriers(pool, ((kept.get(k), fresh.claims.get(k)) for k in kept.keys() | fresh.claims.keys()
                                   if _version(kept.get(k)) != _version(fresh.claims.get(k))))
        fresh.take_wakes(scope.ledger)  # what was answered while it was built, after its claim was decided
        await self._cooperate(scope.ledger.dismantle())
        await self._note_claims(pool, snapshot.claims, scope.started)
        for key in [k for k in self._waiting_since if k[0] == pool and k[1] not in fresh.claims]:
            del self._waiting_since[key]
        return fresh, plan

    async def _build(self, pool: o.PoolKey, scope: PassScope) -> tuple[Ledger, Snapshot, Plan, list[str]]:
        """A ledger loaded from a snapshot of every object of the pool, the full plan over it, and what an
        audit found. A big pool is built with the collector paused (see freezing.py)."""
        kept, fresh = scope.ledger, Ledger()
        size = self.inventory.size_of(pool)
        self.freezer.built += size
        big = size >= PAUSE_AT
        first = big and not self.freezer.pauses
        with self.freezer.paused() if big else contextlib.nullcontext():
            # Every object of the pool, copied now: what changes from here on is in the change log.
            # A big pool's lists are frozen at once, unless another build has paused the collector
            # (its garbage meanwhile is young, or in the oldest generation: collected when it ends).
            take = functools.partial(self._snapshot, pool, scope.context.now)
            snapshot = self.freezer.freeze_with(take) if first else take()
            loading = load(fresh, snapshot)
            if big:
                # The ledger's containers frozen while they are small (after its first objects):
                # they grow to 50,000 entries each, which no collection walks then.
                next(loading, None)
                self.freezer.freeze()
            await self._cooperate(loading)
            found = []
            if scope.audited:
                # The kept ledger, told what changed, against the one just loaded.
                dirty_claims, _ = kept.apply(scope.changes)
                found = await self._cooperate(compare(kept, fresh))
            plan = await self._cooperate(plan_pass(fresh, snapshot, full=True, loaded=True,
                                                   max_steps=self.max_steps, status_due=scope.status_due))
            if scope.audited and not dirty_claims and not kept.pending_steps and not fresh.pending_steps:
                found += await self._cooperate(self._compare_bindings(kept, fresh, plan))
            if big:
                await asyncio.sleep(0)  # the freeze at the end of the pause is a turn of its own ...
        if big:
            await asyncio.sleep(0)  # ... with nothing after it
        return fresh, snapshot, plan, found

    def _follow_up(self, pool: o.PoolKey, ledger: Ledger, released: int, started: float) -> None:
        """What the decisions leave for later: other pools' claims given an error woken when an address of this one
        went, this pool's noted, the rest of a backlog in the next pass, a status write put off scheduled."""
        if ledger.released != released:
            self._wake_pending_free(pool)
        self._note_pending_free(pool, ledger)
        if ledger.pending_steps:
            self._mark(pool)  # the rest in the next pass, after other pools had theirs
        if ledger.status_pending:
            self._status_later(pool, self._status_written.get(pool, started) + self._status_interval(ledger) - started)

    async def _execute(self, pool: o.PoolKey, ledger: Ledger, plan: Plan, started: float) -> Outcome:
        """The plan carried out by the writer; what did not go through makes the next pass a full one."""
        if not plan:
            ledger.settle()
            self._observe(pool, plan, Outcome(), started)
            return Outcome()
        for line in plan.describe():
            log.info("pool %s/%s: %s", pool.namespace, pool.name, line)
        planned = time.monotonic()
        outcome = await self.writer.execute(plan, pool)
        ledger.settle()
        if self.inventory.pending(pool):
            # The writer filed its answers (and the watch may have brought news) meanwhile. The
            # watch events of our own writes come after their answers, are older news and kick
            # nothing: without another pass the ledger would not take them in (a released IP
            # would stay held, the counts in the status wrong) until some other event.
            self._mark(pool)
        if outcome.again or outcome.failures or outcome.stopped:
            # What was planned but not written must not stay held, whatever the writer read back.
            ledger.needs_full = True
        if any(isinstance(a, SetStatus) and a.target.group_kind in poolkind.REGISTRY for a in plan.writes):
            self._status_written[pool] = planned
        log.info("pool %s/%s: pass over %d claims: planned %d steps in %.3f s, wrote %d in %.3f s%s%s%s",
                 pool.namespace, pool.name, len(ledger.claims), len(plan.steps), planned - started, outcome.done,
                 time.monotonic() - planned, f", {len(outcome.failures)} refused" if outcome.failures else "",
                 f", {outcome.stopped} steps stopped: no longer leading" if outcome.stopped else "",
                 ", more next pass" if ledger.pending_steps else "")
        self._observe(pool, plan, outcome, started)
        return outcome

    def _note_pending_free(self, pool: o.PoolKey, ledger: Ledger) -> None:
        pools = self._pools_pending_free.setdefault(pool.namespace, set())
        if ledger.pending_free:
            pools.add(pool)
        else:
            pools.discard(pool)
            if not pools:
                del self._pools_pending_free[pool.namespace]

    def _wake_pending_free(self, pool: o.PoolKey) -> None:
        """An address of ``pool`` went: the claims other pools of its namespace could not serve are tried again.

        Such a claim may have failed on this pool's doing (an IP its address
        held at the same name lock or in an overlapping range, the name of a
        Cluster API address), which nothing in that pool's own changes shows.
        """
        # A pool of cluster scope (namespace "") has addresses in any namespace, and its claims meet the
        # name locks and addresses of every namespace's pools.
        spaces = [pool.namespace, ""] if pool.namespace else list(self._pools_pending_free)
        pending = [other for space in spaces for other in self._pools_pending_free.get(space, ()) if other != pool]
        for other in pending:
            ledger = self._ledgers.get(other)
            if ledger is not None:
                ledger.wake()
        self.kick(pending)

    async def _cooperate(self, pass_: Generator[None, None, Any]) -> Any:
        """Run a pass (or other work in pieces), giving the event loop its turn every ``slice_seconds`` of work."""
        until = time.monotonic() + self.slice_seconds
        while True:
            try:
                next(pass_)
            except StopIteration as done:
                return done.value
            if time.monotonic() >= until:
                self.yields += 1
                self.freezer.between_slices()
                await asyncio.sleep(0)
                until = time.monotonic() + self.slice_seconds

    @staticmethod
    def _compare_bindings(kept: Ledger, fresh: Ledger, plan: Plan) -> Generator[None, None, list[str]]:
        """Bindings, when the kept ledger had nothing left to decide: all but those the full pass just made."""
        served = {(s.about.kind, s.about.name) for s in plan.steps if s.about is not None
                  and any(isinstance(a, Create) for a in s.actions)}
        recomputed = {}
        for n, (key, text) in enumerate(fresh.bound.items(), 1):
            if key in kept.bound or key not in served:
                recomputed[key] = text
            if n % 4096 == 0:
                yield
        found: list[str] = []
        yield from compare_maps("bound", kept.bound, recomputed, lambda text: text, found)
        return found

    def _status_interval(self, ledger: Ledger) -> float:
        """How long a pool's counts and indexes may wait after they changed.

        Writing them costs work in proportion to the pool (sorting and cutting
        ``status.indexes``, a patch of up to 256 KiB): about a second apart for
        most pools, and further apart the more bindings a pool has, so that in
        a pool of 50,000 the status written after each claim does not cost more
        than the claim itself. The IPAddress objects and the claims' own status
        are the record, and are never put off.
        """
        return self.status_seconds * max(1.0, len(ledger.bound) / STATUS_BINDINGS_PER_SECOND)

    def _pass_when_due(self, pool: o.PoolKey, due: str | None) -> None:
        """A pass over the pool at ``due`` (RFC 3339, whole seconds): the one timer per pool, for the earliest
        time the last plan named."""
        known = self._due_handles.get(pool)
        if known is not None and known[0] == due:
            return
        if known is not None:
            known[1].cancel()
            del self._due_handles[pool]
        if due is None:
            return
        try:
            at = o.parse_time(due)
        except ValueError:
            return
        delay = (at - datetime.datetime.now(datetime.timezone.utc)).total_seconds() + DUE_MARGIN
        self._due_handles[pool] = (due, asyncio.get_running_loop().call_later(max(delay, 0.0), self._due, pool))

    def _due(self, pool: o.PoolKey) -> None:
        self._due_handles.pop(pool, None)
        self.kick([pool])

    def _status_later(self, pool: o.PoolKey, delay: float) -> None:
        if pool not in self._status_handles:
            self._status_handles[pool] = asyncio.get_running_loop().call_later(max(delay, 0.0), self._status_due, pool)

    def _status_due(self, pool: o.PoolKey) -> None:
        self._status_handles.pop(pool, None)
        self.kick([pool])

    async def _note_claims(self, pool: o.PoolKey, claims: list[dict], started: float) -> None:
        """Claims seen waiting start the latency clock; those seen bound stop it. A global pool's claims of a
        namespace not served (``-n``) are another controller's to time."""
        now = time.monotonic()
        served = self.inventory.namespaces
        for n, claim in enumerate(claims, 1):
            if n % 2048 == 0:
                await asyncio.sleep(0)
            if served is not None and o.namespace(claim) not in served:
                continue
            key = (pool, o.claim_key(claim))
            if not _is_bound(claim):
                self._waiting_since.setdefault(key, started)
            elif key in self._waiting_since:
                metrics.ALLOCATION_SECONDS.observe(now - self._waiting_since.pop(key))

    def _observe(self, pool: o.PoolKey, plan: Plan, outcome: Outcome, started: float) -> None:
        namespace, name = pool.namespace, pool.name
        labels = metrics.pool_labels(pool)
        metrics.RECONCILE_SECONDS.observe(time.monotonic() - started)
        for counter in (metrics.ALLOCATIONS, metrics.RELEASES):
            counter.labels(*labels)  # 0 until the first (a rate of 0, not none)
        for created in outcome.created:
            if kinds.kind_of(created) == kinds.IPADDRESS:
                metrics.ALLOCATIONS.labels(*labels).inc()
        for target in outcome.deleted:
            if target.group_kind == kinds.IPADDRESS:
                metrics.RELEASES.labels(*labels).inc()
        for warning in outcome.warnings:
            metrics.ERRORS.labels(warning.reason).inc()
            log.warning("pool %s/%s: %s: %s: %s", namespace, name, warning.target, warning.reason, warning.message)
        # Only the claims this pass wrote to can have been bound by it (the writer filed its answers).
        now = time.monotonic()
        for step in plan.steps:
            about = step.about
            waited = (pool, _claim_key(pool, about.kind, about.namespace, about.name)) if about is not None else None
            if waited is None or waited not in self._waiting_since:
                continue
            claim = self.inventory.get(about.group_kind, about.namespace, about.name)
            if claim is not None and _is_bound(claim):
                metrics.ALLOCATION_SECONDS.observe(now - self._waiting_since.pop(waited))
        pool_obj = self.inventory.get(pool.kind, namespace, name)
        pool_kind = poolkind.REGISTRY.get(pool.kind)
        counts = poolkind.status_counts(pool_kind, pool_obj) if pool_obj and pool_kind else {}
        for count, gauge in (("capacity", metrics.POOL_CAPACITY), ("allocated", metrics.POOL_ALLOCATED),
                             ("free", metrics.POOL_FREE)):
            if count in counts:
                gauge.labels(*labels).set(counts[count])


def _queue_labels(pool: o.PoolKey) -> tuple[str, str]:
    """The labels of a work-queue series: ``controller`` and ``name``, both the pool kind's controller."""
    name = metrics.controller_name(pool.kind)
    return name, name


def _timestamp(text: Any) -> float | None:
    try:
        return o.parse_time(text).timestamp()
    except ValueError:
        return None


def _is_bound(claim: dict) -> bool:
    status = o.status(claim)
    return bool(status.get("address") or status.get("addressRef"))


def _claim_key(pool: o.PoolKey, kind: str, namespace: str, name: str) -> o.ClaimKey:
    """The key of a claim of ``pool`` (see ``objects.ClaimKey``): with its namespace in a pool of cluster scope."""
    return (kind, name) if pool.namespace else (kind, name, namespace)


def _version(obj: dict | None) -> Any:
    return None if obj is None else o.meta(obj).get("resourceVersion")
