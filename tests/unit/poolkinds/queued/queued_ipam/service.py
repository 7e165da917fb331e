"""The QueuedIPPool kind's adapter half (``Outside.service``): the asks of ``core.asking`` sent to the queued
source, its answers filed and the pool's claims woken, as the runtime starts and stops it.

It offers what the pool workers use: ``answers`` (given to each pass as ``Snapshot.answers``), ``passed`` (a
pass's intents, and the keys its claims carry), ``pool_gone``; the runtime's ``start`` and ``close``. Time is
its own clock, moved by the test (``tick``): an ask's deadline and a refusal's backoff pass when it says.
"""

from __future__ import annotations

import functools
from collections.abc import Iterable, Mapping
from typing import Any, Callable

from metal3_ipam.core.asking import Answer, Asking, Intent

from .keys import read_key
from .source import QueuedSource, spec_of

TIMEOUT = "QueuedIpamTimeout"  # the reason of an ask its deadline passed on
SERVER = "queued"  # the one server of the queued source: all its pools' asks are put off together


class QueuedPools:
    def __init__(self, source: QueuedSource, *, wake: Callable[[Any, str | None], None],
                 may_act: Callable[[], bool] = lambda: True, asking: Asking | None = None):
        self.source = source
        self.answers = asking if asking is not None else Asking(deadline=30.0, timeout_reason=TIMEOUT)
        self.wake = wake
        self.may_act = may_act
        self.now = 0.0
        self.running = False
        self._pools: dict[Any, tuple[str, str | None]] = {}  # pool key -> (prefix, gateway) last read

    def start(self) -> None:
        self.running = True

    async def close(self) -> None:
        self.running = False

    def tick(self, seconds: float) -> None:
        """Time passes: what falls due (deadlines, backoffs) is handled."""
        self.now += seconds
        self.pump()

    def passed(self, pool_key: Any, pool_obj: dict | None, intents: Mapping[str, Intent],
               claims: Iterable[dict]) -> None:
        spec = spec_of(pool_obj) if pool_obj is not None else None
        if spec is not None:
            self._pools[pool_key] = spec
        for key, intent in intents.items():
            if intent is Intent.FORGET or pool_key in self._pools:
                self.answers.intend(key, intent, pool_key, SERVER, self.now)
        self.answers.carried(pool_key, {read_key(claim)[0] for claim in claims} | set(intents), self.now)
        self.pump()

    def pool_gone(self, pool_key: Any) -> None:
        self._pools.pop(pool_key, None)

    def pump(self) -> None:
        """Send what is due."""
        if not self.may_act():
            return
        out = {key: state.pool for key in self.answers.wanted() | self.answers.releasing()
               if (state := self.answers.state(key)) is not None and state.out is not None}
        for ask in self.answers.due(self.now):
            prefix, gateway = self._pools[ask.pool]
            self.source.receive(ask, prefix, gateway, functools.partial(self._answered, ask.pool))
        # Asks whose deadline passed just now: their claims say so without waiting for an answer.
        for pool_key in {pool for key, pool in out.items()
                         if (state := self.answers.state(key)) is None or state.out is None}:
            self.wake(pool_key, None)

    def _answered(self, pool_key: Any, answer: Answer) -> None:
        standing = self.answers.server_standing(SERVER)
        self.answers.file(answer, self.now)
        self.wake(pool_key, None if self.answers.server_standing(SERVER) != standing else answer.key)
        self.pump()


def service(parts: Any) -> QueuedPools:
    """As the runtime builds it from its parts (``controller.runtime.OutsideParts``), with a source of its own."""
    return QueuedPools(QueuedSource(), wake=parts.wake, may_act=parts.may_act)
