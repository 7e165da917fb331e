"""The queued IPAM: an outside source of addresses, in-process, that answers only when the test says so.

Every request (an ``Ask`` of ``core.asking``: allocate or release by key) waits in ``waiting`` until the test
takes it out: ``answer`` carries it out and delivers the answer (``twice``: delivered again), ``lose`` carries
it out and delivers nothing (the answer lost on its way), ``refuse`` delivers a refusal without carrying it
out. It holds one address per key (asked again, a key gets the address it holds), the lowest free host of the
prefix first (the gateway reserved); a release frees the key's address, and a release of a key holding
nothing is answered released. What it did is counted for the tests: ``made`` (address id -> key) and
``freed`` (address id -> times freed).
"""

from __future__ import annotations

import ipaddress
from collections import Counter
from dataclasses import dataclass, field
from typing import Any, Callable

from metal3_ipam.core.asking import Answer, Ask, Granted, Op, Refused, Released

FULL = "PrefixFull"


@dataclass(frozen=True)
class Request:
    ask: Ask
    prefix: str
    gateway: str | None
    deliver: Callable[[Answer], None] = field(compare=False)


@dataclass
class Held:
    ip: str
    id: int


@dataclass
class QueuedSource:
    waiting: list[Request] = field(default_factory=list)
    held: dict[str, Held] = field(default_factory=dict)
    made: dict[int, str] = field(default_factory=dict)
    freed: Counter = field(default_factory=Counter)
    asked: list[tuple[Op, str]] = field(default_factory=list)

    def receive(self, ask: Ask, prefix: str, gateway: str | None, deliver: Callable[[Answer], None]) -> None:
        self.asked.append((ask.op, ask.key))
        self.waiting.append(Request(ask, prefix, gateway, deliver))

    # -- what the test does with a request waiting (the first when none is named) ------------------------

    def answer(self, request: Request | None = None, *, twice: bool = False) -> Answer:
        request = self._take(request)
        answer = self.carry_out(request)
        for _ in range(2 if twice else 1):
            request.deliver(answer)
        return answer

    def lose(self, request: Request | None = None) -> Answer:
        return self.carry_out(self._take(request))

    def refuse(self, request: Request | None = None, reason: str = "SourceRefused", message: str = "refused",
               server_down: bool = False) -> Refused:
        request = self._take(request)
        refused = Refused(request.ask.key, request.ask.attempt, reason, message, server_down)
        request.deliver(refused)
        return refused

    def answer_all(self) -> None:
        while self.waiting:
            self.answer()

    def requests(self, op: Op | None = None) -> list[Request]:
        return [r for r in self.waiting if op is None or r.ask.op is op]

    # -- the source itself -------------------------------------------------------------------------------

    def carry_out(self, request: Request) -> Answer:
        ask = request.ask
        if ask.op is Op.RELEASE:
            held = self.held.pop(ask.key, None)
            if held is not None:
                self.freed[held.id] += 1
            return Released(ask.key, ask.attempt)
        if ask.key not in self.held:
            ip = self._free(request.prefix, request.gateway)
            if ip is None:
                return Refused(ask.key, ask.attempt, FULL, f"no address of {request.prefix} is free")
            self.held[ask.key] = Held(ip, len(self.made) + 1)
            self.made[len(self.made) + 1] = ask.key
        held = self.held[ask.key]
        return Granted(ask.key, ask.attempt, f"{held.ip}/{ipaddress.ip_network(request.prefix).prefixlen}", held.id)

    def _free(self, prefix: str, gateway: str | None) -> str | None:
        taken = {h.ip for h in self.held.values()} | {gateway}
        return next((str(ip) for ip in ipaddress.ip_network(prefix).hosts() if str(ip) not in taken), None)

    def _take(self, request: Request | None) -> Request:
        request = request if request is not None else self.waiting[0]
        self.waiting.remove(request)
        return request

    def ips(self) -> dict[str, str]:
        """key -> the IP held for it."""
        return {key: held.ip for key, held in self.held.items()}


def spec_of(pool: Any) -> tuple[str, str | None] | None:
    """(prefix, gateway) of a QueuedIPPool object as the source is asked for them, or None when unreadable."""
    spec = pool.get("spec") if isinstance(pool, dict) and isinstance(pool.get("spec"), dict) else {}
    try:
        ipaddress.ip_network(spec.get("prefix"))
    except (TypeError, ValueError):
        return None
    return spec["prefix"], spec.get("gateway")
