"""Asking an outside IPAM for addresses: what was asked, when, and what came back, per key.

Pure: no I/O, no clock; every call is given ``now`` (seconds, monotonic).
The kind's adapter half (``Outside.service``) runs the asks this
state hands out and files their answers back as data; the claim lifecycle
reads the outcome per key.

A **key** is the value of a claim's allocation-key annotation, written on the
claim before anything is asked. Everything here is by key, never by claim name
or uid: ``clusterctl move`` keeps the annotation (and so the key) while the
uid changes, and a new claim reusing a name carries no key until it is given
a new one. So an answer can only reach a claim that carries its key.

The lifecycle says what it wants of a key:

* :meth:`Asking.want` -- the key's claim needs an address;
* :meth:`Asking.release` -- its claim is being deleted: give the address back;
* :meth:`Asking.forget` -- its claim left without a release (moved away): stop,
  and ignore whatever answer comes later.

:meth:`Asking.due` hands out the asks to send now (:class:`Ask`, each with an
``attempt`` number and a ``deadline``); :meth:`Asking.file` takes an answer
(:class:`Granted`, :class:`Refused` or :class:`Released`) and says what it did
with it (:class:`Filed`). :meth:`Asking.result` is what the claim carrying a
key shows.

What it guarantees:

* **One address per key.** A key is granted once; a second grant of the
  same address (a duplicate answer, a retry's) changes nothing, a grant of
  another address is refused as a conflict and the first one stands.
* **Late answers.** A grant for a key being released makes sure a release
  follows it (the release may have looked before the address was made); a
  grant for a key already released asks for its release again; anything for
  a forgotten or unknown key is dropped. A refusal from an ask that is no
  longer the current one is dropped.
* **No answer.** An ask not answered by its deadline counts as a timeout: the
  key is asked again later. Its answer, should it still come, is filed as a
  late one (a grant is still the key's address: the outside IPAM holds one address per key).
* **Backoff.** A key refused is asked again after ``base * 2**(failures-1)``
  seconds, at most ``cap``, spread by up to a quarter by the key (so a burst
  of refusals does not come back at once). A refusal of the server itself
  (unreachable, timed out, 5xx) opens the server's circuit: none of its asks
  go out until its own backoff ends, then one probe at a time until one is
  answered. The asks out together when it failed count as one failure of it.
  Other servers' asks are not held.
* **Bounded.** At most ``per_server`` asks of one server are out at a time,
  so an ask's deadline is not spent waiting behind a queue.
* A release waits for an allocation ask of its key that is still out (until
  that ask's deadline), so that the release finds what the allocation made.
* **Unanswered allocations.** The outside IPAM carries out a request whose client gave
  up (timed out, cut off): an allocation of a key that went unanswered (its
  deadline passed, or refused as the server down) may still make an address
  up to ``linger`` seconds later, its answer reaching nobody. A release of that
  key answered before then is asked once more at that time before the key
  counts as released (and its claim may go). The same holds for the process
  before this one: a key released for a claim holding no address
  (``Intent.RELEASE_UNBOUND``) within ``linger`` of this state's first use
  is asked once more at that time, since an allocation such a process left
  out may land after this one's release looked.
"""

from __future__ import annotations

import enum
import zlib
from dataclasses import dataclass, field
from typing import Hashable



class Intent(str, enum.Enum):
    """What the claim lifecycle wants of a key (a pass's ``Plan.intents``; :meth:`Asking.intend`)."""

    WANT = "want"
    RELEASE = "release"
    # Its claim is being deleted holding no address: an allocation of its key may still be out, asked by the
    # process before this one (a restart) and carried out by the outside IPAM after the release looked.
    RELEASE_UNBOUND = "release-unbound"
    FORGET = "forget"


class Op(str, enum.Enum):
    ALLOCATE = "allocate"
    RELEASE = "release"


@dataclass(frozen=True)
class Ask:
    """One request to send: allocate or release the address of ``key`` for ``pool`` on ``server``."""

    op: Op
    key: str
    pool: Hashable
    server: Hashable
    attempt: int
    deadline: float


@dataclass(frozen=True)
class Granted:
    """The outside IPAM holds ``address`` (with its mask, ``192.0.2.7/24``) for the key, as object ``id``."""

    key: str
    attempt: int
    address: str
    id: int


@dataclass(frozen=True)
class Refused:
    """The ask did not get what it asked: ``reason`` (a condition reason) and ``message``.

    ``server_down``: the server itself failed (unreachable, timed out, 5xx),
    not this one request; it puts off every ask of that server for a while.
    """

    key: str
    attempt: int
    reason: str
    message: str
    server_down: bool = False


@dataclass(frozen=True)
class Released:
    """The outside IPAM holds no address for the key any more (deleted, or there was none)."""

    key: str
    attempt: int


Answer = Granted | Refused | Released


class Filed(str, enum.Enum):
    """What :meth:`Asking.file` did with an answer."""

    APPLIED = "applied"  # the key's result changed (granted, or refused and asked again later)
    RELEASED = "released"  # the key is released and forgotten: its claim may go
    DUPLICATE = "duplicate"  # the same grant again: nothing changed
    CONFLICT = "conflict"  # a grant of another address for a key already granted: dropped
    STALE = "stale"  # a refusal or release of an ask that is no longer the current one: dropped
    LATE = "late"  # for a key not wanted (released, being released, forgotten, unknown)


TIMEOUT_REASON = "Timeout"  # the reason of an ask not answered in time, unless the kind names its own


@dataclass
class _Entry:
    key: str
    pool: Hashable
    server: Hashable
    releasing: bool = False
    result: Granted | Refused | None = None
    failures: int = 0
    next_at: float = 0.0
    attempts: int = 0
    out: Op | None = None  # the op of the current ask, while one is out
    out_attempt: int | None = None
    out_server: Hashable = None  # the server the ask out went to (the pool may name another since)
    out_deadline: float = 0.0
    asked_at: float | None = None
    release_again: bool = False
    unsure: dict[int, float] = field(default_factory=dict)  # unanswered allocations: attempt -> may land until


@dataclass
class _Server:
    failures: int = 0  # failures of the server itself since it last answered
    closed_at: float = 0.0  # while failures > 0: no ask goes out before this, then one at a time
    refusal: Refused | None = None  # its last failure, while failures > 0


@dataclass(frozen=True)
class KeyState:
    """What is known of a key (for status, logs and tests)."""

    key: str
    pool: Hashable
    releasing: bool
    result: Granted | Refused | None
    failures: int
    asked_at: float | None
    next_at: float
    out: Op | None


@dataclass
class Asking:
    """The asks of one controller, by key. See the module's docstring."""

    deadline: float = 60.0  # seconds an ask may take before it counts as timed out
    base: float = 1.0  # first backoff, seconds
    cap: float = 300.0  # longest backoff, seconds
    per_server: int = 16  # asks of one server out at a time
    tombstone: float = 3600.0  # how long a released key is remembered (for late grants)
    linger: float = 120.0  # how long the outside IPAM may still carry out an ask after its client gave up on it
    timeout_reason: str = TIMEOUT_REASON  # the refusal's reason when an ask is not answered by its deadline
    _entries: dict[str, _Entry] = field(default_factory=dict)
    _servers: dict[Hashable, _Server] = field(default_factory=dict)
    _released: dict[str, tuple[float, Hashable, Hashable]] = field(default_factory=dict)
    _forgotten: dict[str, float] = field(default_factory=dict)
    _attempts: int = 0
    since: float | None = None  # when the lifecycle first said what it wants: this process's start
    #: whether the kind's sweep judges what a pool's claims left outside (``judged``): a pool being deleted is held
    #: until it did, for this process (a restart forgets nothing the outside IPAM keeps: it is judged again)
    judges_pools: bool = False
    _judged: dict[Hashable, tuple[Hashable, str | None]] = field(default_factory=dict)

    # -- what holds a pool being deleted -----------------------------------------------

    def judged(self, pool: Hashable, uid: Hashable, waiting: str | None) -> None:
        """The kind's sweep judged what the claims of ``pool`` (that very one: ``uid``) left outside: ``waiting``
        says what it still waits for (addresses left for another cluster to answer), None: nothing."""
        self._judged[pool] = (uid, waiting)

    def unjudged(self, pool: Hashable) -> None:
        """``pool`` is gone: what was judged of it is forgotten."""
        self._judged.pop(pool, None)

    def held(self, pool: Hashable, uid: Hashable) -> str | None:
        """What keeps ``pool`` (being deleted) from going beyond its claims: what its claims left outside that is
        not judged yet, or None. Before the kind's sweep judged it in this process, it is held (``judges_pools``)."""
        if not self.judges_pools:
            return None
        found = self._judged.get(pool)
        if found is None or found[0] != uid:
            return "waits for a sweep of its IPAM to find the addresses its claims left for another cluster"
        return found[1]

    # -- what the lifecycle wants -----------------------------------------------------

    def want(self, key: str, pool: Hashable, server: Hashable, now: float) -> None:
        """The claim carrying ``key`` needs an address from ``pool`` on ``server``. Idempotent."""
        self.since = now if self.since is None else self.since
        entry = self._entries.get(key)
        if entry is not None:
            if not entry.releasing:
                entry.pool, entry.server = pool, server
            return
        self._released.pop(key, None)
        self._forgotten.pop(key, None)
        self._entries[key] = _Entry(key, pool, server, next_at=now)

    def release(self, key: str, pool: Hashable, server: Hashable, now: float, *, unbound: bool = False) -> None:
        """The claim carrying ``key`` is being deleted: have the outside IPAM delete the key's address. Idempotent.

        ``unbound``: the claim holds no address, so the process before this one may have left an allocation
        of the key out; within ``linger`` of this one's start, the release looks again once it may have landed.
        """
        self.since = now if self.since is None else self.since
        entry = self._entries.get(key)
        if entry is None:
            if key in self._released:
                return
            self._forgotten.pop(key, None)
            entry = self._entries[key] = _Entry(key, pool, server, releasing=True, next_at=now)
        elif not entry.releasing:
            entry.releasing = True
            entry.result = None
            entry.failures = 0
            entry.next_at = now
        if unbound and now < self.since + self.linger:
            entry.unsure.setdefault(0, self.since + self.linger)  # attempt 0: none of this process's

    def forget(self, key: str, now: float) -> None:
        """Stop asking for ``key`` without releasing (its claim left for another cluster); drop later answers."""
        self._entries.pop(key, None)
        self._released.pop(key, None)
        self._forgotten[key] = now

    def intend(self, key: str, intent: Intent, pool: Hashable, server: Hashable, now: float) -> None:
        """What a pass of the claim lifecycle said of ``key``: :meth:`want`, :meth:`release` or :meth:`forget`."""
        if intent is Intent.WANT:
            self.want(key, pool, server, now)
        elif intent in (Intent.RELEASE, Intent.RELEASE_UNBOUND):
            self.release(key, pool, server, now, unbound=intent is Intent.RELEASE_UNBOUND)
        else:
            self.forget(key, now)

    def carried(self, pool: Hashable, keys: set[str], now: float) -> None:
        """The keys the claims of ``pool`` carry now: any other key of it is forgotten, also one being
        released: its claim left before the release was done (moved away unseen, its finalizer taken off),
        and a claim moved away carries its key on, in a cluster where the address must stay. Asks go out
        only for keys a stored claim carries."""
        for key, entry in list(self._entries.items()):
            if entry.pool == pool and key not in keys:
                self.forget(key, now)

    # -- what to ask --------------------------------------------------------------------

    def due(self, now: float) -> list[Ask]:
        """The asks to send now, oldest first; each is out until answered or its deadline passes."""
        self._expire(now)
        out_per_server = self._out_per_server()
        asks: list[Ask] = []
        for entry in sorted(self._entries.values(), key=lambda e: (e.next_at, e.key)):
            if entry.out is not None or entry.next_at > now:
                continue
            if not entry.releasing and isinstance(entry.result, Granted):
                continue
            server = self._servers.setdefault(entry.server, _Server())
            if out_per_server.get(entry.server, 0) >= self.per_server:
                continue
            if server.failures and (now < server.closed_at or out_per_server.get(entry.server, 0)):
                continue  # put off, or its one probe is out
            self._attempts += 1
            entry.attempts += 1
            entry.out = Op.RELEASE if entry.releasing else Op.ALLOCATE
            entry.out_attempt = self._attempts
            entry.out_deadline = now + self.deadline
            entry.out_server = entry.server
            entry.asked_at = now
            out_per_server[entry.server] = out_per_server.get(entry.server, 0) + 1
            asks.append(Ask(entry.out, entry.key, entry.pool, entry.server, self._attempts, entry.out_deadline))
        return asks

    def next_due(self) -> float | None:
        """The earliest time :meth:`due` may hand out an ask or time one out (None: nothing waits).

        A key waiting for a slot of its server (its asks out at the bound, or its one probe out) is
        woken by an answer or by the deadline of an ask out, not by a time of its own.
        """
        out_per_server = self._out_per_server()
        times = [entry.out_deadline for entry in self._entries.values() if entry.out is not None]
        for entry in self._entries.values():
            if entry.out is not None or (not entry.releasing and isinstance(entry.result, Granted)):
                continue
            out = out_per_server.get(entry.server, 0)
            server = self._servers.get(entry.server)
            failed = server is not None and server.failures > 0
            if out >= self.per_server or (failed and out):
                continue
            times.append(max(entry.next_at, server.closed_at) if failed else entry.next_at)
        return min(times) if times else None

    def _out_per_server(self) -> dict[Hashable, int]:
        out: dict[Hashable, int] = {}
        for entry in self._entries.values():
            if entry.out is not None:
                out[entry.out_server] = out.get(entry.out_server, 0) + 1
        return out

    def _expire(self, now: float) -> None:
        for entry in self._entries.values():
            if entry.out is not None and now >= entry.out_deadline:
                if entry.out is Op.ALLOCATE and entry.out_attempt is not None:
                    entry.unsure[entry.out_attempt] = now + self.linger
                self._failed(entry, now, self.timeout_reason,
                             f"no answer within {self.deadline:g}s to the {entry.out.value} asked at "
                             f"{entry.asked_at:g}", server_down=True)
        for key, (at, _, _) in list(self._released.items()):
            if now - at > self.tombstone:
                del self._released[key]
        for key, at in list(self._forgotten.items()):
            if now - at > self.tombstone:
                del self._forgotten[key]

    def _failed(self, entry: _Entry, now: float, reason: str, message: str, *, server_down: bool,
                attempt: int | None = None) -> None:
        asked = entry.out_server if entry.out is not None else entry.server
        entry.out = None
        entry.out_attempt = None
        entry.failures += 1
        entry.next_at = now + self._backoff(entry.key, entry.failures)
        # Releasing too: what a deleted claim waiting on its finalizer shows (result() still gives it nothing).
        entry.result = Refused(entry.key, attempt if attempt is not None else entry.attempts, reason, message,
                               server_down)
        server = self._servers.setdefault(asked, _Server())
        if server_down:
            server.refusal = entry.result
            # One failure per round: the asks that were out together when the server went down fail
            # together, and count once; a probe's failure after the backoff counts again.
            if not server.failures or now >= server.closed_at:
                server.failures += 1
                server.closed_at = now + self._backoff(repr(asked), server.failures)

    def _backoff(self, key: str, failures: int) -> float:
        spread = 1.0 + (zlib.crc32(key.encode()) % 256) / 1024.0
        return min(self.cap, backoff(failures, base=self.base, cap=self.cap) * spread)

    def _answered_by(self, entry: _Entry, current: bool) -> None:
        self._servers.setdefault(entry.out_server if current else entry.server, _Server()).failures = 0

    # -- answers ------------------------------------------------------------------------

    def file(self, answer: Answer, now: float) -> Filed:
        """Take an answer of an ask (in any order, late, twice); say what came of it."""
        key = answer.key
        entry = self._entries.get(key)
        if entry is None:
            if isinstance(answer, Granted) and key in self._released:
                # Made after the release looked: release it again.
                _, pool, server = self._released.pop(key)
                self._entries[key] = _Entry(key, pool, server, releasing=True, next_at=now)
            return Filed.LATE
        current = entry.out is not None and answer.attempt == entry.out_attempt
        if isinstance(answer, Granted) or (isinstance(answer, Refused) and not answer.server_down):
            entry.unsure.pop(answer.attempt, None)  # that allocation was carried out, or refused: settled
        if isinstance(answer, Granted) or (current and not (isinstance(answer, Refused) and answer.server_down)):
            self._answered_by(entry, current)  # the server answered (a refusal of the server itself is no answer of it)
        if entry.releasing:
            return self._file_releasing(entry, answer, current, now)
        if isinstance(answer, Granted):
            if current:
                entry.out, entry.out_attempt = None, None
            if isinstance(entry.result, Granted):
                same = (entry.result.address, entry.result.id) == (answer.address, answer.id)
                return Filed.DUPLICATE if same else Filed.CONFLICT
            entry.result = answer
            entry.failures = 0
            entry.out, entry.out_attempt = None, None
            return Filed.APPLIED
        if not current or isinstance(entry.result, Granted):
            return Filed.STALE
        if isinstance(answer, Released):  # a release answered while allocating: not what was asked
            entry.out, entry.out_attempt = None, None
            entry.next_at = now
            return Filed.STALE
        if answer.server_down:  # an allocation refused as the server down may still be carried out
            entry.unsure[answer.attempt] = now + self.linger
        self._failed(entry, now, answer.reason, answer.message, server_down=answer.server_down,
                     attempt=answer.attempt)
        return Filed.APPLIED

    def _file_releasing(self, entry: _Entry, answer: Answer, current: bool, now: float) -> Filed:
        if current and entry.out is Op.ALLOCATE and isinstance(answer, Refused) and answer.server_down:
            entry.unsure[answer.attempt] = now + self.linger  # it may have been carried out all the same
        if isinstance(answer, Granted):
            if current:  # the allocation still out when the release was asked for: release now
                entry.out, entry.out_attempt = None, None
                entry.next_at = now
            elif entry.out is Op.RELEASE:
                entry.release_again = True  # the release out now may have looked before it was made
            elif entry.out is None:
                entry.next_at = min(entry.next_at, now)  # made: release it now, not at the end of its backoff
            return Filed.LATE
        if not current:
            return Filed.STALE
        if entry.out is Op.ALLOCATE:  # the allocation's refusal: nothing was made, the release may go
            entry.out, entry.out_attempt = None, None
            entry.next_at = now
            return Filed.LATE
        if isinstance(answer, Refused):
            self._failed(entry, now, answer.reason, answer.message, server_down=answer.server_down)
            return Filed.APPLIED
        until = max(entry.unsure.values(), default=0.0)
        if now < until and not entry.release_again:  # an unanswered allocation may still land: look again then
            entry.out, entry.out_attempt = None, None
            entry.next_at = until
            return Filed.APPLIED
        if entry.release_again:
            entry.release_again = False
            entry.out, entry.out_attempt = None, None
            entry.next_at = now
            return Filed.APPLIED
        del self._entries[entry.key]
        self._released[entry.key] = (now, entry.pool, entry.server)
        return Filed.RELEASED

    # -- what the lifecycle reads ---------------------------------------------------------

    def result(self, key: str) -> Granted | Refused | None:
        """The key's address, or why there is none yet (None: not answered yet, or not wanted)."""
        entry = self._entries.get(key)
        if entry is None or entry.releasing:
            return None
        return entry.result

    def pending_refusal(self, key: str) -> Refused | None:
        """Why a wanted key without an answer of its own waits: its server's last failure, while that
        server's circuit holds its asks back (the probe is another key's); None otherwise."""
        entry = self._entries.get(key)
        return self.server_refusal(entry.server) if entry is not None else None

    def server_refusal(self, server: Hashable) -> Refused | None:
        """The server's last failure while its circuit holds its asks back (it has not answered since); else None."""
        state = self._servers.get(server)
        return state.refusal if state is not None and state.failures else None

    def server_standing(self, server: Hashable) -> str | None:
        """What the keys waiting behind ``server`` show of it: the reason it failed, while it puts them off;
        None while it answers. An answer that leaves this as it was concerns its own key only; one that
        changes it concerns every key waiting on that server."""
        refusal = self.server_refusal(server)
        return refusal.reason if refusal is not None else None

    def release_refused(self, key: str) -> Refused | None:
        """Why the release of a key being released has not gone through: its last refusal (or timeout), or its
        server's while that server's circuit holds its asks back; None when nothing stands in its way."""
        entry = self._entries.get(key)
        if entry is None or not entry.releasing:
            return None
        if isinstance(entry.result, Refused):
            return entry.result
        return self.server_refusal(entry.server)

    def released(self, key: str) -> bool:
        """Whether the key's address was released (or there was none): its claim may go."""
        return key in self._released

    def state(self, key: str) -> KeyState | None:
        entry = self._entries.get(key)
        if entry is None:
            return None
        return KeyState(entry.key, entry.pool, entry.releasing, entry.result, entry.failures, entry.asked_at,
                        entry.next_at, entry.out)

    def releasing(self) -> set[str]:
        return {k for k, e in self._entries.items() if e.releasing}

    def wanted(self) -> set[str]:
        return {k for k, e in self._entries.items() if not e.releasing}

    def asks_put_off(self, server: Hashable, now: float) -> bool:
        """Whether the server's circuit puts its asks off now (it failed and its backoff has not ended)."""
        state = self._servers.get(server)
        if not state or not state.failures:
            return False
        return now < state.closed_at or any(e.out is not None for e in self._entries.values() if e.out_server == server)


def backoff(attempt: int, *, base: float = 1.0, cap: float = 300.0) -> float:
    """Seconds to wait before try number ``attempt`` (1 = the first retry): doubling from ``base``, at most ``cap``."""
    if attempt < 1:
        return 0.0
    return min(cap, base * 2.0 ** min(attempt - 1, 64))
