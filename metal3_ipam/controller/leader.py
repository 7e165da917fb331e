"""Leader election on a coordination.k8s.io Lease, fenced by the local monotonic clock.

Only the holder of the Lease writes; the other replicas keep their inventory
warm and take over when the holder stops renewing. The allocations never rest
on this (the name lock and conditional writes keep SPEC §10 with any number of
writers); the election keeps two replicas from working at the same moment, and
it has to stay sound when the API server goes away, a request hangs, clocks disagree
or the process is frozen and thawed:

- The holder may act only while its last successful renew *started* less than
  ``renew_deadline`` ago on its own monotonic clock (:class:`Tenure`). Past
  that it stops, whether an answer came or not. The gate (:meth:`LeaderElector.may_act`)
  reads the clock at every use, so a process resumed after a pause does not act
  on a flag nobody has had the chance to clear.
- A candidate takes the Lease over only once it has itself seen the record
  unchanged for the lease duration on its monotonic clock (:class:`ExpiryWatch`).
  The holder's ``renewTime`` is another machine's wall clock: written for
  people, never compared with ours.
- The holder's renew starts before its write lands; a candidate's observation
  of that write begins after. With ``renew_deadline < lease_duration`` the
  holder has stopped before anyone may start, with the difference to spare for
  clocks that run at slightly different rates.
- A write already sent when the tenure ends is the API server's to give up: the
  writer sends each with the time left of the tenure as the server's deadline
  (:meth:`LeaderElector.time_left`), so the server drops it rather than store it
  after a standby may have taken over (unless it had handed it to etcd already).
- Every call has a timeout. Any failure (connection refused while the API
  server restarts, a timeout, an error answer) is a failed attempt, never the
  end of the election; if the election task ends anyway, :attr:`LeaderElector.failure`
  says why and liveness reports it.
- A clean shutdown empties the holder once the work has stopped
  (:meth:`LeaderElector.release`), so a standby takes over at its next attempt.

The defaults are controller-runtime's: lease 15 s, renew deadline 10 s, retry 2 s.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import datetime
import enum
import json
import logging
import math
import random
import socket
import time
import uuid
from dataclasses import dataclass
from typing import Any, Callable

from kubernetes import client
from kubernetes.client.rest import ApiException

from . import metrics

log = logging.getLogger("metal3_ipam.leader")

Clock = Callable[[], float]


# --------------------------------------------------------------------------- timing (pure)


@dataclass(frozen=True)
class LeaseTiming:
    """How long a Lease lasts, how long its holder may go without renewing, how often anyone tries."""

    lease_duration: float = 15.0
    renew_deadline: float = 10.0
    retry_period: float = 2.0

    def __post_init__(self) -> None:
        for what, value in (("lease duration", self.lease_duration), ("renew deadline", self.renew_deadline),
                            ("retry period", self.retry_period)):
            if not (isinstance(value, (int, float)) and math.isfinite(value) and value > 0):
                raise ValueError(f"{what} {value!r}: must be a positive number of seconds")
        if not self.renew_deadline < self.lease_duration:
            raise ValueError(f"renew deadline {self.renew_deadline:g}s must be shorter than the lease duration "
                             f"{self.lease_duration:g}s: the holder must stop before another replica may take over")
        if not self.retry_period < self.renew_deadline:
            raise ValueError(f"retry period {self.retry_period:g}s must be shorter than the renew deadline "
                             f"{self.renew_deadline:g}s: the holder must get to try again before it has to stop")

    @property
    def attempt_timeout(self) -> float:
        """The longest one attempt (read and write) may take: two fit in the renew deadline,
        so a single hung request does not spend all of it."""
        return self.renew_deadline / 2


@dataclass(frozen=True)
class LeaseRecord:
    """What a Lease says, as far as the election cares."""

    holder: str
    duration: float | None  # leaseDurationSeconds, the holder's promise
    transitions: int
    version: str  # metadata.resourceVersion
    renew_time: str | None  # the holder's wall clock, compared for change only

    @classmethod
    def of(cls, lease: dict) -> "LeaseRecord":
        spec = lease.get("spec") or {}
        duration = spec.get("leaseDurationSeconds")
        return cls(holder=str(spec.get("holderIdentity") or ""),
                   duration=float(duration) if isinstance(duration, (int, float)) and duration > 0 else None,
                   transitions=int(spec.get("leaseTransitions") or 0),
                   version=str((lease.get("metadata") or {}).get("resourceVersion") or ""),
                   renew_time=spec.get("renewTime"))

    @property
    def signature(self) -> tuple:
        """Any change of holder, renewal or object version is a sign of life."""
        return (self.holder, self.renew_time, self.version, self.duration)


class ExpiryWatch:
    """How long this replica has itself seen one Lease record unchanged, on its monotonic clock."""

    _NOTHING = object()

    def __init__(self, clock: Clock = time.monotonic) -> None:
        self.clock = clock
        self._seen: Any = self._NOTHING
        self._since = 0.0

    def observe(self, record: LeaseRecord | None) -> None:
        """Call with what a read just returned (after the answer came: the record is at least that old)."""
        signature = record.signature if record is not None else None
        if signature != self._seen:
            self._seen = signature
            self._since = self.clock()

    def unchanged_for(self) -> float:
        return 0.0 if self._seen is self._NOTHING else self.clock() - self._since

    def expired(self, duration: float) -> bool:
        return self._seen is not self._NOTHING and self.unchanged_for() >= duration


class Tenure:
    """The holder's right to act: until ``renew_deadline`` after the start of its last successful renew."""

    def __init__(self, renew_deadline: float, clock: Clock = time.monotonic) -> None:
        self.renew_deadline = renew_deadline
        self.clock = clock
        self._until = -math.inf

    def renewed(self, attempt_started: float) -> None:
        self._until = max(self._until, attempt_started + self.renew_deadline)

    def in_force(self) -> bool:
        return self.clock() < self._until

    def left(self) -> float:
        return self._until - self.clock()

    def end(self) -> None:
        self._until = -math.inf


class Move(enum.Enum):
    CREATE = "create"  # there is no Lease yet
    RENEW = "renew"  # ours: write it again
    TAKE = "take"  # released, or unchanged for a whole lease duration as we observed it
    WAIT = "wait"  # another holder that, as far as we have seen, is alive


def decide(record: LeaseRecord | None, identity: str, watch: ExpiryWatch, default_duration: float) -> Move:
    """What to do about the Lease as just read (``watch`` has observed ``record`` already)."""
    if record is None:
        return Move.CREATE
    if record.holder == identity:
        return Move.RENEW
    if not record.holder:
        return Move.TAKE
    if watch.expired(record.duration or default_duration):
        return Move.TAKE
    return Move.WAIT


# --------------------------------------------------------------------------- the elector


def _micro_time(now: datetime.datetime) -> str:
    """MicroTime as the API server parses it: always six fractional digits."""
    return now.astimezone(datetime.timezone.utc).strftime("%Y-%m-%dT%H:%M:%S.%fZ")


def _describe(err: BaseException) -> str:
    if isinstance(err, ApiException):
        try:
            return f"{err.status} {json.loads(err.body).get('message')}"
        except (TypeError, ValueError, AttributeError):
            return f"{err.status} {err.reason}"
    reason = getattr(err, "reason", None)  # urllib3 wraps the cause (connection refused, ...) in .reason
    return f"{type(err).__name__}: {reason or err}"


class LeaderElector:
    """Competes for one Lease; :meth:`may_act` is the gate every write goes through."""

    def __init__(self, api_client: client.ApiClient, namespace: str, name: str = "metal3-ipam-controller",
                 timing: LeaseTiming = LeaseTiming(), *, identity: str | None = None,
                 on_change: Callable[[bool], None] = lambda leading: None, clock: Clock = time.monotonic) -> None:
        self.api_client = api_client
        self.namespace = namespace
        self.name = name
        self.timing = timing
        self.identity = identity or f"{socket.gethostname()}_{uuid.uuid4().hex[:8]}"
        self.on_change = on_change
        self.clock = clock
        self.tenure = Tenure(timing.renew_deadline, clock)
        self.watch = ExpiryWatch(clock)
        self.leading = False
        # Why the election ended when it should not have (liveness reports it); None while it runs.
        self.failure: str | None = None
        self._task: asyncio.Task | None = None
        self._stopping = False
        self._failed_attempts = 0
        self._rng = random.Random()
        # The kubernetes client blocks; its calls get threads of their own, so a hung call never
        # waits behind (or delays) the initial listing.
        self._threads = concurrent.futures.ThreadPoolExecutor(max_workers=2, thread_name_prefix="lease")

    @property
    def path(self) -> str:
        return f"/apis/coordination.k8s.io/v1/namespaces/{self.namespace}/leases"

    # -- the gate -------------------------------------------------------------------

    def may_act(self) -> bool:
        """True only while this replica leads and its tenure is in force, judged from the clock right now."""
        return self.leading and self.tenure.in_force()

    def time_left(self) -> float:
        """Seconds left of this replica's tenure from now (0 when it does not lead): the deadline its
        writes give the API server, so that none is stored once a standby may have taken over."""
        return max(0.0, self.tenure.left()) if self.leading else 0.0

    # -- lifecycle ------------------------------------------------------------------

    def start(self) -> asyncio.Task:
        self._task = asyncio.get_running_loop().create_task(self.run(), name="leader election")
        self._task.add_done_callback(self._ended)
        return self._task

    def _ended(self, task: asyncio.Task) -> None:
        if self._stopping:
            return
        if task.cancelled():
            why = "cancelled"
        else:
            error = task.exception()
            why = f"{type(error).__name__}: {error}" if error else "returned"
        self.failure = f"the leader election task ended ({why})"
        self._set(False)
        log.error("lease %s/%s: %s; this replica will not lead again", self.namespace, self.name, self.failure)

    async def stop(self) -> None:
        """Stop competing. Leadership ends at once; the Lease is kept until :meth:`release`."""
        self._stopping = True
        self.tenure.end()
        self._set(False)
        if self._task is not None:
            # asyncio.wait_for (before Python 3.12) can swallow a cancellation that arrives just as
            # its inner call completes; the loop then also ends on ``_stopping``, and is cancelled
            # again until it has ended, so a stop never hangs.
            while not self._task.done():
                self._task.cancel()
                await asyncio.wait({self._task}, timeout=1.0)

    async def release(self) -> bool:
        """Empty the holder if the Lease still names us, so a standby takes over at once.

        Call only after this replica's writes have stopped. True when released.
        """
        async def give_up() -> bool:
            lease = await self._call("GET", f"{self.path}/{self.name}")
            if LeaseRecord.of(lease).holder != self.identity:
                return False
            now = _micro_time(datetime.datetime.now(datetime.timezone.utc))
            spec = dict(lease.get("spec") or {}, holderIdentity="", leaseDurationSeconds=1, renewTime=now)
            await self._call("PUT", f"{self.path}/{self.name}", dict(lease, spec=spec))
            return True

        try:
            released = await asyncio.wait_for(give_up(), self.timing.attempt_timeout)
        except Exception as err:  # a timeout or anything else: the Lease then simply expires
            log.warning("lease %s/%s: could not release it (%s); a standby takes over once it expires",
                        self.namespace, self.name, _describe(err) if str(err) else type(err).__name__)
            return False
        if released:
            log.info("lease %s/%s released", self.namespace, self.name)
        return released

    def close(self) -> None:
        """Let go of the threads (a call still hanging ends by its own timeout)."""
        self._threads.shutdown(wait=False, cancel_futures=True)

    # -- the loop -------------------------------------------------------------------

    async def run(self) -> None:
        try:
            while not self._stopping:
                await self.attempt()
                await asyncio.sleep(self._pause())
                self._check_tenure()
        finally:
            self.tenure.end()
            self._set(False)

    def _pause(self) -> float:
        if self.leading:
            # Wake up no later than the deadline, to step down on time.
            return max(0.0, min(self.timing.retry_period, self.tenure.left()))
        # Candidates spread out a little, so they do not all try at the same instant.
        return self.timing.retry_period * self._rng.uniform(1.0, 1.2)

    async def attempt(self) -> None:
        """One read, and a write if it is our turn; never raises (but for cancellation)."""
        started = self.clock()
        timeout = self.timing.attempt_timeout
        if self.leading:
            timeout = min(timeout, self.tenure.left())
        try:
            if timeout <= 0:
                raise asyncio.TimeoutError
            await asyncio.wait_for(self._exchange(started), timeout)
        except asyncio.TimeoutError:
            self._failed(f"no answer within {max(timeout, 0):.1f}s")
        except Exception as err:  # anything at all is a failed attempt: the election goes on
            self._failed(_describe(err), quiet=isinstance(err, ApiException) and err.status == 409)
        else:
            if self._failed_attempts:
                log.info("lease %s/%s: reachable again after %d failed attempts", self.namespace, self.name,
                         self._failed_attempts)
            self._failed_attempts = 0
        self._check_tenure()

    async def _exchange(self, started: float) -> None:
        try:
            lease = await self._call("GET", f"{self.path}/{self.name}")
        except ApiException as err:
            if err.status != 404:
                raise
            lease = None
        record = LeaseRecord.of(lease) if lease is not None else None
        self.watch.observe(record)
        move = decide(record, self.identity, self.watch, self.timing.lease_duration)
        if move is Move.WAIT:
            if self.leading:
                log.warning("lease %s/%s is held by %s", self.namespace, self.name, record.holder)
            self.tenure.end()
            self._set(False)
            return
        written = await self._call(*self._write(lease, record, move))
        self.watch.observe(LeaseRecord.of(written))
        if move is Move.TAKE:
            log.info("lease %s/%s: taken over from %r (unchanged for %.1fs as seen here)", self.namespace,
                     self.name, record.holder, self.watch.unchanged_for() if record.holder else 0.0)
        self.tenure.renewed(started)
        self._set(self.tenure.in_force())

    def _write(self, lease: dict | None, record: LeaseRecord | None, move: Move) -> tuple[str, str, dict]:
        now = _micro_time(datetime.datetime.now(datetime.timezone.utc))
        duration = max(1, math.ceil(self.timing.lease_duration))
        if move is Move.CREATE:
            return "POST", self.path, {
                "apiVersion": "coordination.k8s.io/v1", "kind": "Lease",
                "metadata": {"name": self.name, "namespace": self.namespace},
                "spec": {"holderIdentity": self.identity, "leaseDurationSeconds": duration,
                         "acquireTime": now, "renewTime": now, "leaseTransitions": 0}}
        assert lease is not None and record is not None
        spec = dict(lease.get("spec") or {}, holderIdentity=self.identity, leaseDurationSeconds=duration,
                    renewTime=now)
        if move is Move.TAKE:
            spec["acquireTime"] = now
            spec["leaseTransitions"] = record.transitions + 1
        # The resourceVersion read is in the body: the write is a compare-and-swap.
        return "PUT", f"{self.path}/{self.name}", dict(lease, spec=spec)

    def _check_tenure(self) -> None:
        if self.leading and not self.tenure.in_force():
            log.warning("lease %s/%s: not renewed within %gs: stepping down", self.namespace, self.name,
                        self.timing.renew_deadline)
            self._set(False)

    def _failed(self, why: str, quiet: bool = False) -> None:
        self._failed_attempts += 1
        # The first failure of a series is worth a warning; the rest would only repeat it.
        level = logging.INFO if quiet or self._failed_attempts > 1 else logging.WARNING
        log.log(level, "lease %s/%s: attempt failed: %s", self.namespace, self.name, why)

    def _set(self, leading: bool) -> None:
        if leading == self.leading:
            return
        self.leading = leading
        metrics.LEADER.set(1 if leading else 0)
        log.info("%s leadership of lease %s/%s as %s", "took" if leading else "lost", self.namespace, self.name,
                 self.identity)
        try:
            self.on_change(leading)
        except Exception:  # the election must outlive a faulty listener
            log.exception("lease %s/%s: leadership change handler failed", self.namespace, self.name)

    # -- calls ------------------------------------------------------------------------

    async def _call(self, method: str, path: str, body: dict | None = None) -> dict:
        timeout = self.timing.attempt_timeout
        loop = asyncio.get_running_loop()
        return await loop.run_in_executor(self._threads, self._blocking_call, method, path, body, timeout)

    def _blocking_call(self, method: str, path: str, body: dict | None, timeout: float) -> dict:
        api = self.api_client
        headers = {"Accept": "application/json"}
        if body is not None:
            headers["Content-Type"] = "application/json"
        method, url, header_params, body, _ = api.param_serialize(
            method, path, header_params=headers, body=body, auth_settings=["BearerToken"])
        response = api.call_api(method, url, header_params=header_params, body=body, _request_timeout=timeout)
        response.read()
        if not 200 <= response.status < 300:
            raise ApiException(http_resp=response)
        return json.loads(response.data)
