"""The adapter half every kind of pool with an outside IPAM shares: asks pumped, answers filed, pools surveyed.

A kind whose addresses come from an outside IPAM (``core.poolkind.Outside``)
builds its ``service`` on :class:`OutsidePools` and keeps in its own package
only what is its backend's: the client, how a pool and a claim's key are read,
what is asked and how an answer or a survey is read. What is the same for
every such kind lives here:

* the pool workers give each pass the asking state (``answers``,
  ``core.asking``) and hand this the plan's intents (:meth:`OutsidePools.passed`):
  each key wanted, released or forgotten; keys of the pool no claim carries any
  more are forgotten;
* what is due is sent at once (:meth:`OutsidePools.pump`); an answer is filed and
  wakes the pool's pass for the claims carrying its key (``wake(pool, key)``), or
  for every claim of the pool pending an answer when it changed what they show
  of their server, as does an ask whose deadline passed (``wake(pool, None)``);
  the next ask waits for ``Asking.next_due()`` on one timer, never a fixed poll;
* each pool's status is the outside IPAM's (the asks' ``survey``), written when
  the pool is first seen or changed and every ``survey_seconds``; one survey
  runs per pool at a time, and one asked for while it runs runs again after it;
* the kind's sweep (:meth:`OutsidePools.sweep`) runs every ``sweep_seconds``.

Nothing is sent, surveyed or swept while ``may_act()`` is false (not the
leader, or before the catch-up).
"""

from __future__ import annotations

import asyncio
import functools
import logging
import time
from collections.abc import Hashable, Mapping
from typing import Any, Callable, Iterable

from metal3_ipam.controller.workers import utc_now
from metal3_ipam.core import kinds
from metal3_ipam.core import objects as o
from metal3_ipam.core.actions import Plan, SetStatus
from metal3_ipam.core.asking import Answer, Ask, Intent

log = logging.getLogger(__name__)

PoolRef = tuple[str, str]  # namespace, name


class OutsidePools:
    """The pools of one kind with an outside IPAM in the claim lifecycle. See the module's docstring.

    A kind's subclass says what its backend's: :attr:`pool_kind`, :attr:`label` (for task names),
    :meth:`read_model`, :meth:`server_of`, :meth:`key_of`, :meth:`status_of`, and, where it needs them,
    :meth:`send` (what an ask is sent with), :meth:`answered` and :meth:`surveyed` (what an answer or a survey
    says beyond the pool's status) and :meth:`sweep`. ``asks`` runs the asks and surveys: it has
    ``pool_changed(model)``, ``send(asks, deliver)``, ``survey(model)`` and ``close()``.
    """

    #: The (group, kind) of the pools served.
    pool_kind: tuple[str, str]
    #: A short name of the outside IPAM, for the names of tasks.
    label: str
    #: A survey this many seconds after answers (see :meth:`survey_later`).
    survey_after_answers = 3.0

    def __init__(self, asks: Any, asking: Any, *, inventory: Any, writer: Any,
                 wake: Callable[[Any, str | None], None], may_act: Callable[[], bool] = lambda: True,
                 survey_seconds: float = 60.0, sweep_seconds: float = 300.0,
                 clock: Callable[[], float] = time.monotonic):
        self.asks = asks
        self.answers = asking
        self.inventory = inventory
        self.writer = writer
        self.wake = wake
        self.may_act = may_act
        self.survey_seconds = survey_seconds
        self.sweep_seconds = sweep_seconds
        self.clock = clock
        self._timer: asyncio.TimerHandle | None = None
        self._seen: dict[PoolRef, tuple[Any, Any]] = {}  # pool -> (uid, generation) last surveyed
        self._surveying: dict[PoolRef, asyncio.Task] = {}
        self._resurvey: set[PoolRef] = set()
        self._survey_timers: dict[PoolRef, asyncio.TimerHandle] = {}
        self._loop_task: asyncio.Task | None = None
        self._sweep_task: asyncio.Task | None = None

    # -- what is the backend's ----------------------------------------------------------

    def read_model(self, pool_obj: Mapping[str, Any]) -> Any | None:
        """The pool as the kind reads it, or None when it cannot be read."""
        raise NotImplementedError

    def server_of(self, model: Any) -> Hashable | None:
        """The outside IPAM a pool's asks go to (what the asks are put off by when it is down)."""
        raise NotImplementedError

    def key_of(self, obj: Mapping[str, Any]) -> str | None:
        """The key a claim (or a lock) carries, or None."""
        raise NotImplementedError

    def status_of(self, model: Any, survey: Any, *, now: str, previous: Mapping[str, Any] | None) -> dict:
        """The pool's status from a survey."""
        raise NotImplementedError

    def send(self, ask: Ask, deliver: Callable[[Answer], None]) -> None:
        """Send one ask; ``deliver`` gets its answer."""
        self.asks.send([ask], deliver)

    def answered(self, pool_key: Any, answer: Answer) -> None:
        """What an answer filed says beyond the claims it wakes (nothing unless the kind says)."""

    def surveyed(self, pool_key: Any, survey: Any) -> None:
        """What a survey says beyond the pool's status (nothing unless the kind says)."""

    async def sweep(self) -> list:
        """One sweep of the outside IPAM for what no claim carries; what it released."""
        return []

    # -- start and stop -----------------------------------------------------------------

    def start(self) -> None:
        self._loop_task = asyncio.create_task(self._survey_loop(), name=f"{self.label} surveys")
        if self.sweep_seconds > 0:
            self._sweep_task = asyncio.create_task(self._sweep_loop(), name=f"{self.label} sweeps")

    async def close(self) -> None:
        if self._timer is not None:
            self._timer.cancel()
        for timer in self._survey_timers.values():
            timer.cancel()
        tasks = [t for t in (self._loop_task, self._sweep_task, *self._surveying.values()) if t is not None]
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
        await self.asks.close()

    # -- passes -------------------------------------------------------------------------

    def passed(self, pool_key: Any, pool_obj: dict | None, intents: Mapping[str, Intent],
               claims: Iterable[dict]) -> None:
        """After a pass over a pool: its intents filed, what is due sent."""
        ref: PoolRef = (pool_key.namespace, pool_key.name)
        model = self.read_model(pool_obj) if pool_obj is not None else None
        if model is not None:
            self.asks.pool_changed(model)
            ident = (o.meta(pool_obj).get("uid"), o.meta(pool_obj).get("generation"))
            if self._seen.get(ref) != ident:
                self._seen[ref] = ident
                self.survey_soon(pool_key)
        now = self.clock()
        server = self.server_of(model) if model is not None else None
        for key, intent in intents.items():
            if intent is not Intent.FORGET and server is None:
                continue  # the pool cannot be read: nothing says where to ask
            self.answers.intend(key, intent, ref, server, now)
        self.answers.carried(ref, {self.key_of(claim) for claim in claims} | set(intents), now)
        self.pump()

    def pool_gone(self, pool_key: Any) -> None:
        """The pool and everything filed under it are gone: surveyed afresh should it come back. (Its
        server stays known to the asks: a release still out for one of its keys may still need it.)"""
        self._seen.pop((pool_key.namespace, pool_key.name), None)

    def pump(self) -> None:
        """Send what is due; come back at the next time something falls due."""
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None
        if not self.may_act():
            return
        now = self.clock()
        out = {key: state.pool for key in self.answers.wanted() | self.answers.releasing()
               if (state := self.answers.state(key)) is not None and state.out is not None}
        for ask in self.answers.due(now):
            self.send(ask, functools.partial(self._answered, ask.pool, ask.server))
        # Asks whose deadline passed just now: their claims say so without waiting for an answer.
        timed_out = {ref for key, ref in out.items()
                     if (state := self.answers.state(key)) is None or state.out is None}
        for ref in timed_out:
            self.wake(o.PoolKey(ref[0], ref[1], self.pool_kind), None)
        at = self.answers.next_due()
        if at is not None:
            self._timer = asyncio.get_running_loop().call_later(max(at - self.clock(), 0.05), self.pump)

    def _answered(self, ref: PoolRef, server: Any, answer: Answer) -> None:
        """File an answer; wake the pool for the claims of its key, or for all its claims pending an answer
        when the answer changed what they show of their server (it failed, or answered again)."""
        standing = self.answers.server_standing(server)
        filed = self.answers.file(answer, self.clock())
        log.info("%s %s/%s: %s for key %s: %s", self.pool_kind[1], *ref, type(answer).__name__, answer.key,
                 filed.value)
        changed = self.answers.server_standing(server) != standing
        pool_key = o.PoolKey(ref[0], ref[1], self.pool_kind)
        self.wake(pool_key, None if changed else answer.key)
        self.answered(pool_key, answer)
        self.pump()

    def wake_carriers(self, key: str, which: str | None) -> None:
        """Wake the pools of the claims carrying ``key``: for the claims of ``which`` key, or for all (None)."""
        for claim in self.inventory.claims_carrying(key):
            if (pool := o.pool_of(claim)) is not None:
                self.wake(o.PoolKey(o.namespace(claim), pool.name, self.pool_kind), which)

    def carried(self, moved: bool = True) -> Callable[[str], bool]:
        """Whether a key is a claim's or a lock's, has an ask out or due, or (``moved``) its claim was seen leave
        for a ``clusterctl move`` (its address is the copy's in the target)."""
        locks = {key for lock in self.inventory.of_kind(kinds.IPADDRESS) if (key := self.key_of(lock)) is not None}
        return lambda key: key in locks or bool(self.inventory.claims_carrying(key)) \
            or self.answers.state(key) is not None or (moved and key in self.inventory.moved_away)

    # -- surveys ------------------------------------------------------------------------

    def live_pool(self, pool_key: Any) -> Any | None:
        """The pool as read, if it is held, readable and not being deleted."""
        pool_obj = self.inventory.get(self.pool_kind, pool_key.namespace, pool_key.name)
        return self.read_model(pool_obj) if pool_obj is not None and not o.is_deleting(pool_obj) else None

    def survey_later(self, pool_key: Any) -> None:
        """A survey ``survey_after_answers`` seconds from now, one for all the answers meanwhile (a burst of
        answers costs the outside IPAM one listing, not one per answer)."""
        ref = (pool_key.namespace, pool_key.name)
        if ref not in self._survey_timers:
            def due() -> None:
                self._survey_timers.pop(ref, None)
                self.survey_soon(pool_key)
            self._survey_timers[ref] = asyncio.get_running_loop().call_later(self.survey_after_answers, due)

    def survey_soon(self, pool_key: Any) -> None:
        ref = (pool_key.namespace, pool_key.name)
        task = self._surveying.get(ref)
        if task is None or task.done():
            self._surveying[ref] = asyncio.create_task(self._survey(pool_key), name=f"{self.label} survey {ref}")
        else:
            self._resurvey.add(ref)  # once more when this one ends: it may have listed before the change

    async def _survey_loop(self) -> None:
        while True:
            await asyncio.sleep(self.survey_seconds)
            for pool_key in self.inventory.pool_keys():
                if pool_key.kind == self.pool_kind:
                    self.survey_soon(pool_key)

    async def _survey(self, pool_key: Any) -> None:
        ref = (pool_key.namespace, pool_key.name)
        try:
            while True:
                self._resurvey.discard(ref)
                await self._survey_once(pool_key)
                if ref not in self._resurvey:
                    return
        except asyncio.CancelledError:
            raise
        except Exception:  # a bug of ours must not end the surveys of other pools
            log.exception("%s %s/%s: survey failed", self.pool_kind[1], pool_key.namespace, pool_key.name)

    async def _survey_once(self, pool_key: Any) -> None:
        if not self.may_act():
            return
        model = self.live_pool(pool_key)
        if model is None:
            return
        found = await self.asks.survey(model)
        pool_obj = self.inventory.get(self.pool_kind, pool_key.namespace, pool_key.name)
        if pool_obj is None or not self.may_act():
            return
        self.surveyed(pool_key, found)
        status = self.status_of(model, found, now=utc_now(), previous=o.status(pool_obj))
        plan = Plan()
        plan.step(f"{self.pool_kind[1]} {pool_key.namespace}/{pool_key.name}", about=o.ref(pool_obj)).add(
            SetStatus(o.ref(pool_obj), status))
        await self.writer.execute(plan, pool_key)

    # -- sweeps -------------------------------------------------------------------------

    async def _sweep_loop(self) -> None:
        while True:
            await asyncio.sleep(self.sweep_seconds)
            if self.may_act():
                await self.sweep()
