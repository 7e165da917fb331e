"""Writes the API server refuses for good, and what the controller does about them.

A refusal that a fresh decision cannot cure — not allowed (401, 403), too
large (413), invalid (400, 422) — is never retried in a loop and never
passes silently: it is logged naming object and verb, counted, written on
the claim (or pool) the step was for with an Event, and the step waits a
growing while before it is tried again. What changes on its own (no
connection, 429, 5xx, timeouts) stays a plain retry with backoff.

Everything here is bookkeeping without I/O; the writer does the writing.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from ..core import kinds
from ..core import poolkind
from ..core import objects as o

# Refused for good: the same request will be refused the same way.
PERMANENT = frozenset({400, 401, 403, 405, 413, 415, 422})
AUTH = frozenset({401, 403})

READY = "Ready"
CLAIM_REASON = "AllocationFailed"
POOL_REASON = "WriteRefused"
MAX_MESSAGE = 1024


def is_permanent(status: int) -> bool:
    return status in PERMANENT


@dataclass(frozen=True)
class Refused:
    """One write the API server refused for good."""

    verb: str          # create | delete | patch | patch-status
    target: o.Ref
    status: int
    message: str       # the server's own words

    @property
    def kind(self) -> str:
        group, kind = self.target.group_kind
        return f"{kind}.{group}" if group else kind

    def describe(self) -> str:
        return f"{self.verb} {self.target} refused: {self.status} {self.message}"[:MAX_MESSAGE]


# --------------------------------------------------------------------------- what the claim or pool shows


def _condition(status: Mapping[str, Any], reason: str, message: str, now: str, severity: bool) -> dict:
    before = o.condition(status, READY)
    since = before.get("lastTransitionTime") if before and before.get("status") == "False" else None
    condition = {"type": READY, "status": "False", "reason": reason, "message": message,
                 "lastTransitionTime": since or now}
    if severity:  # Cluster API v1beta1 conditions
        condition["severity"] = "Error"
    return condition


def status_patch(obj: Mapping[str, Any], refused: Refused, now: str) -> dict | None:
    """The status merge patch that records ``refused`` on the claim or pool it was for; None if it says so already.

    IPClaims get ``status.errorMessage`` too; IPAddressClaims only the
    condition (their schema has no such field); a pool's Ready turns False.
    """
    group_kind = kinds.kind_of(obj)
    message = refused.describe()
    status = o.status(obj)
    if group_kind in (kinds.IPCLAIM, kinds.CAPI_CLAIM):
        reason = CLAIM_REASON
        v1beta1 = group_kind == kinds.CAPI_CLAIM and str(obj.get("apiVersion", "")).endswith("/v1beta1")
        condition = _condition(status, reason, message, now, v1beta1)
    elif group_kind in poolkind.REGISTRY:
        reason = POOL_REASON
        condition = _condition(status, reason, message, now, False)
    else:
        return None
    others = [c for c in status.get("conditions") or [] if isinstance(c, Mapping) and c.get("type") != READY]
    current = o.condition(status, READY)
    patch: dict[str, Any] = {}
    if current is None or any(current.get(k) != condition[k] for k in ("status", "reason", "message")):
        patch["conditions"] = [condition] + others
    if group_kind == kinds.IPCLAIM and status.get("errorMessage") != message:
        patch["errorMessage"] = message
    return patch or None


def event_reason(obj: Mapping[str, Any]) -> str:
    return CLAIM_REASON if kinds.kind_of(obj) in (kinds.IPCLAIM, kinds.CAPI_CLAIM) else POOL_REASON


def shows_refusals(obj: Mapping[str, Any]) -> bool:
    """True for the kinds whose status records a refusal (claims, pools); others get a Warning Event only."""
    kind = kinds.kind_of(obj)
    return kind in (kinds.IPCLAIM, kinds.CAPI_CLAIM) or kind in poolkind.REGISTRY


# --------------------------------------------------------------------------- when to try again


class Backoff:
    """Per refused write: not before a growing delay (doubling from ``first`` up to ``cap``).

    Keyed by the step's subject, the verb and the kind, not the object's
    name: a random pool picks another address, and so another name, on
    every try, and must not get a fresh try each time.
    """

    def __init__(self, first: float = 1.0, cap: float = 60.0) -> None:
        self.first = first
        self.cap = cap
        self._entries: dict[tuple, tuple[float, float]] = {}  # key -> (not before, last delay)

    def refused(self, key: tuple, now: float) -> float:
        _, last = self._entries.get(key, (0.0, 0.0))
        delay = min(self.cap, last * 2 if last else self.first)
        self._entries[key] = (now + delay, delay)
        self._prune(now)
        return delay

    def wait(self, key: tuple, now: float) -> float:
        """Seconds until ``key`` may be tried again (0: now)."""
        entry = self._entries.get(key)
        return max(0.0, entry[0] - now) if entry else 0.0

    def accepted(self, key: tuple) -> None:
        self._entries.pop(key, None)

    def _prune(self, now: float) -> None:
        # Entries of objects long gone: nobody asks for them any more.
        if len(self._entries) > 1024:
            for key in [k for k, (until, _) in self._entries.items() if until + 2 * self.cap < now]:
                del self._entries[key]

    def __len__(self) -> int:
        return len(self._entries)


# --------------------------------------------------------------------------- can we write at all


class WriteAccess:
    """The last answer per (verb, kind) written: the controller cannot write at all
    when every one it tried was last refused as unauthenticated or forbidden."""

    def __init__(self) -> None:
        self._last: dict[tuple[str, str], Refused | None] = {}

    def accepted(self, verb: str, kind: str) -> bool:
        """Record a success; True when this ends a state of no access at all."""
        was_blocked = self.blocked() is not None
        self._last[(verb, kind)] = None
        return was_blocked

    def refused(self, refused: Refused) -> bool:
        """Record a refusal; True when this starts a state of no access at all."""
        was_blocked = self.blocked() is not None
        self._last[(refused.verb, refused.kind)] = refused if refused.status in AUTH else None
        return not was_blocked and self.blocked() is not None

    def refusals(self) -> list[Refused]:
        """The writes last refused as not allowed, one per (verb, kind)."""
        return [r for r in self._last.values() if r is not None]

    def blocked(self) -> str | None:
        """Why no write gets through, or None."""
        if not self._last or any(r is None for r in self._last.values()):
            return None
        refusals = sorted(self._last.values(), key=lambda r: (r.verb, r.kind))
        return "every write is refused: " + "; ".join(
            f"{r.verb} {r.kind}: {r.status} {r.message}"[:300] for r in refusals[:5])
