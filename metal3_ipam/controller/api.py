"""Carrying out plans against the API server.

Every action of a plan becomes one REST call; the steps of a plan (one per
claim) go out in parallel while the actions of one step stay in order. The API server's
answer is written back into the inventory at once: the controller never
decides twice from a cache that has not seen its own writes.

What the server refuses is not retried blindly:
- AlreadyExists on a create: that name (an IP) is taken by someone else; the
  object is read and put in the inventory, and the pool is reconciled again,
  which picks another address.
- Conflict on a conditional write: someone wrote the object since it was
  read; its watch event brings the new version and another reconcile.
- Conflict on a delete: its preconditions (uid, resourceVersion) failed, the
  object changed or was replaced since it was read; it is read again and the
  pool reconciled again.
- NotFound on a delete or a finalizer removal: the goal is reached already.
- Refused for good (not allowed, too large, invalid; see ``refusals``): the
  claim or pool the step was for says so, with an Event, a log line and a
  metric, and the step waits a growing while before it is tried again.
- Unauthorized with a token that has since been renewed (a rotated token
  file, an exec plugin's new credential): sent once more with the new one.

Writes go out only while ``may_write()`` says so (the leader election's gate):
it is asked before every action of every step and once more as a write leaves
for the wire, so a pass still running when leadership is lost stops where it
is. A step stopped that way is not a failure; whoever leads next reconciles
the pool from what was written. A write that did leave carries the API server's
own deadline (``timeout``), the time ``write_deadline()`` says is left of the
tenure it was sent in: past it the server gives the write up rather than store
it once a standby may have taken over (unless it had already handed it to etcd).

Every request carries what ``Credentials`` gives, as every other client of
the controller does.
"""

from __future__ import annotations

import asyncio
import datetime
import json
import logging
import time
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, Callable

import aiohttp
from kubernetes import client
from kubernetes.client.rest import ApiException

from ..core import kinds
from ..core import objects as o
from ..core.actions import (Create, Delete, Event, Plan, SetFinalizers, SetMetadata, SetStatus, Step, StepVersions,
                            guard_holds)
from ..core.inventory import Inventory
from ..core.slim import slim
from . import metrics
from .credentials import Credentials, CredentialsError
from .fairness import FairSlots
from .refusals import (Backoff, Refused, WriteAccess, event_reason, is_permanent, shows_refusals,
                       status_patch)
from .wire import decode_object, encode
from ..core import lockstore

log = logging.getLogger("metal3_ipam.api")

# While no write gets through, how often the API server is asked whether they would now.
ACCESS_RECHECK_SECONDS = 10.0

MERGE_PATCH = "application/merge-patch+json"


@dataclass(frozen=True)
class Resource:
    group: str
    version: str
    plural: str

    def path(self, namespace: str | None, name: str | None = None, subresource: str | None = None) -> str:
        """The path of the collection in ``namespace`` (None: in every namespace), or of one object of it."""
        base = f"/apis/{self.group}/{self.version}" if self.group else f"/api/{self.version}"
        path = f"{base}/namespaces/{namespace}/{self.plural}" if namespace else f"{base}/{self.plural}"
        if name is not None:
            path += f"/{name}"
        if subresource:
            path += f"/{subresource}"
        return path


# Where a Metal3 IPAddress is written when that kind was not discovered at start (it may have come since).
METAL3_ADDRESSES = Resource(kinds.METAL3_GROUP, kinds.METAL3_VERSION, "ipaddresses")


@dataclass
class Outcome:
    """What executing a plan came to."""

    done: int = 0
    # The pool must be looked at again soon: something was refused that a
    # fresh decision will get right (a name taken, a stale read).
    again: bool = False
    failures: list[str] = field(default_factory=list)
    created: list[dict] = field(default_factory=list)
    deleted: list[o.Ref] = field(default_factory=list)
    warnings: list[Event] = field(default_factory=list)
    # Steps left unfinished because writing stopped being allowed (leadership lost).
    stopped: int = 0


class Fenced(Exception):
    """Writing is no longer allowed: nothing more of this step is sent."""


def _fenced_request_class(may_write: Callable[[], bool]) -> type[aiohttp.ClientRequest]:
    class FencedRequest(aiohttp.ClientRequest):
        # The last moment before a write's bytes go out: a pass that was frozen (SIGSTOP, a
        # paused VM) between its checks and the wire must not send what it prepared as leader.
        async def write_bytes(self, writer, conn, *args, **kwargs):  # type: ignore[override]
            if self.method != "GET" and not may_write():
                conn.close()  # nothing complete was sent: the server sees a connection closed mid-request
                return
            await super().write_bytes(writer, conn, *args, **kwargs)

    return FencedRequest


def _server_deadline(seconds: float | None) -> dict[str, str] | None:
    """The ``timeout`` query parameter that has the API server give a request up ``seconds`` after it
    received it (never less than a microsecond: zero would mean its own default); None: no parameter."""
    if seconds is None:
        return None
    return {"timeout": f"{max(1, int(seconds * 1_000_000))}us"}


class Refusal(Exception):
    def __init__(self, message: str, again: bool) -> None:
        super().__init__(message)
        self.again = again


class ApiWriter:
    """Executes plans over one asynchronous HTTP session, on the event loop.

    No threads: the event loop that files watch events also carries the
    writes, so nothing waits on a lock to hand a response back.
    """

    def __init__(self, credentials: Credentials, inventory: Inventory,
                 resources: dict[tuple[str, str], Resource], parallel: int = 16,
                 component: str = "metal3-ipam", may_write: Callable[[], bool] = lambda: True,
                 request_timeout: float = 60.0, refusal_backoff: Backoff | None = None,
                 write_deadline: Callable[[], float | None] = lambda: None) -> None:
        self.credentials = credentials
        self.may_write = may_write
        # Seconds a write sent now has to reach the store (the leader's tenure left), or None: the server's own.
        self.write_deadline = write_deadline
        self.inventory = inventory
        self.resources = resources
        self.parallel = parallel
        # Shared by every pool, handed out in turn: one pool's backlog does not keep another's claims waiting.
        self.slots = FairSlots(parallel)
        self.component = component
        self.request_timeout = request_timeout
        self.backoff = refusal_backoff if refusal_backoff is not None else Backoff()
        self.access = WriteAccess()
        self._session: aiohttp.ClientSession | None = None
        self._tls: tuple | None = None
        self._retired: list[aiohttp.ClientSession] = []
        self._access_check: asyncio.Task | None = None
        self._access_recheck_at = 0.0
        self.rate_limit: Any = None  # a ratelimit.RateLimit every request waits for, or None
        # Where the locks of the Lease store live (``core.lockstore``): the Leases resource and the lock namespace;
        # None: every lock is a Metal3 IPAddress.
        self.leases: tuple[Resource, str] | None = None
        # Where the Lease store is used and the Metal3 IPAddress kind was not served at start: whether it may come
        # (its CRD installed while this controller runs; False where it is served but not listable by this
        # controller), whether it came (a twin written, or refused by one of its name), and whom to tell.
        self.metal3_may_come = True
        self.metal3_came = False
        self.on_metal3_came: Callable[[], None] = lambda: None
        # Told the pools each answer filed in the inventory concerns, as a watch event's are (the event of our own
        # write comes later and is no news then): pools other than the one whose plan wrote may be among them.
        self.on_filed: Callable[[set[o.PoolKey]], None] = lambda pools: None

    async def close(self) -> None:
        if self._access_check is not None:
            self._access_check.cancel()
        for session in [*self._retired, self._session]:
            if session is not None:
                await session.close()
        self._session, self._retired = None, []

    def _close_retired(self, session: aiohttp.ClientSession) -> None:
        if session in self._retired:
            self._retired.remove(session)
            asyncio.ensure_future(session.close())

    def readiness(self) -> str | None:
        """Why the controller cannot write at all (every write it tried refused as not allowed), or None.

        While it says so, the API server is asked now and then whether the
        refused writes are allowed by now: once RBAC is fixed, readiness must
        not wait for a write that may never come (the work refused may be
        gone, and an unready controller serves no webhook to bring new work).
        """
        blocked = self.access.blocked()
        if blocked is not None:
            now = time.monotonic()
            if now >= self._access_recheck_at and (self._access_check is None or self._access_check.done()):
                self._access_recheck_at = now + ACCESS_RECHECK_SECONDS
                try:
                    self._access_check = asyncio.get_running_loop().create_task(self._recheck_access())
                except RuntimeError:  # no event loop: asked from outside, nothing to schedule on
                    pass
        return blocked

    async def _recheck_access(self) -> None:
        """Ask the API server (SelfSubjectAccessReview) whether each write last refused as not allowed is now."""
        for refused in self.access.refusals():
            resource = self.resources.get(refused.target.group_kind)
            if resource is None:
                continue
            verb, subresource = ("patch", "status") if refused.verb == "patch-status" else (refused.verb, None)
            attributes = {"namespace": refused.target.namespace, "verb": verb, "group": resource.group,
                          "resource": resource.plural}
            if subresource:
                attributes["subresource"] = subresource
            review = {"apiVersion": "authorization.k8s.io/v1", "kind": "SelfSubjectAccessReview",
                      "spec": {"resourceAttributes": attributes}}
            try:
                answer = await self._call("POST", "/apis/authorization.k8s.io/v1/selfsubjectaccessreviews",
                                          body=review, content_type="application/json")
            except (ApiException, Fenced) as err:
                log.debug("could not ask whether %s %s is allowed now: %s", refused.verb, refused.kind, err)
                continue
            if isinstance(answer, dict) and (answer.get("status") or {}).get("allowed") is True \
                    and self.access.accepted(refused.verb, refused.kind):
                log.warning("writes are allowed again (%s %s, says the API server's access review)",
                            refused.verb, refused.kind)

    def _http(self) -> aiohttp.ClientSession:
        tls = self.credentials.tls_generation()
        if self._session is not None and tls != self._tls:
            # A renewed client certificate or CA: new connections; requests under way finish on the old
            # ones, closed once the longest of them has timed out.
            old = self._session
            self._retired.append(old)
            self._session = None
            asyncio.get_running_loop().call_later(self.request_timeout + 1, self._close_retired, old)
        if self._session is None:
            context = self.credentials.ssl_context()
            connector = aiohttp.TCPConnector(limit=self.parallel + 4, ssl=context if context is not None else True)
            self._session = aiohttp.ClientSession(
                base_url=self.credentials.server.rstrip("/") + "/", connector=connector,
                timeout=aiohttp.ClientTimeout(total=self.request_timeout),
                request_class=_fenced_request_class(self.may_write),
                trace_configs=[metrics.rest_trace(), *([self.rate_limit.trace()] if self.rate_limit is not None else [])])
            self._tls = tls
        return self._session

    # -- plans -------------------------------------------------------------

    async def execute(self, plan: Plan, pool: Any = None) -> Outcome:
        """Carry out ``plan``, the work of ``pool`` (its steps queue for the writer's slots in that pool's
        line; plans of no named pool share one line)."""
        outcome = Outcome()
        await asyncio.gather(*(self._step(step, outcome, pool) for step in plan.steps))
        return outcome

    async def _step(self, step: Step, outcome: Outcome, pool: Any = None) -> None:
        async with self.slots.slot(pool):
            wait = self._refused_lately(step)
            if wait:
                outcome.again = True
                outcome.failures.append(f"{step.subject}: refused before; tried again in {wait:.1f} s")
                return
            versions = StepVersions()
            for action in step.actions:
                if not self.may_write():
                    outcome.stopped += 1
                    return
                action = versions.current(action)
                try:
                    result = await self._do(action)
                except Fenced:
                    outcome.stopped += 1
                    return
                except Refusal as refusal:
                    outcome.again |= refusal.again
                    outcome.failures.append(f"{step.subject}: {refusal}")
                    log.info("%s: %s", step.subject, refusal)
                    return
                except ApiException as err:
                    outcome.again = True
                    if is_permanent(err.status):
                        await self._refused(step, action, err, outcome)
                        return
                    outcome.failures.append(f"{step.subject}: {_explain(err)}")
                    log.warning("%s: %s", step.subject, _explain(err))
                    return
                self._accepted(step, action)
                outcome.done += 1
                if isinstance(action, Create) and result is not None:
                    outcome.created.append(result)
                elif isinstance(action, Delete):
                    outcome.deleted.append(action.target)
                elif isinstance(action, Event) and action.type == "Warning":
                    outcome.warnings.append(action)
                if isinstance(result, dict) and result.get("metadata") and hasattr(action, "target"):
                    versions.wrote(action, result["metadata"].get("resourceVersion"))

    # -- refused for good ---------------------------------------------------

    def _refused_lately(self, step: Step) -> float:
        """Seconds this step must still wait because one of its writes was refused for good lately."""
        now = time.monotonic()
        return max((self.backoff.wait((step.subject, *_verb_kind(a)), now)
                    for a in step.actions if not isinstance(a, Event)), default=0.0)

    def _accepted(self, step: Step, action: Any) -> None:
        if isinstance(action, Event):
            return
        verb, kind = _verb_kind(action)
        self.backoff.accepted((step.subject, verb, kind))
        if self.access.accepted(verb, kind):
            log.warning("writes are accepted again (%s %s)", verb, kind)

    async def _refused(self, step: Step, action: Any, err: ApiException, outcome: Outcome) -> None:
        """A write refused for good: say so everywhere it is looked for, and wait before trying again."""
        verb, kind = _verb_kind(action)
        target = o.ref(action.obj) if isinstance(action, Create) else action.target
        refused = Refused(verb, target, err.status, _server_message(err))
        self._count(refused)
        delay = self.backoff.refused((step.subject, verb, kind), time.monotonic())
        log.error("%s: %s (tried again in %.0f s)", step.subject, refused.describe(), delay)
        outcome.failures.append(f"{step.subject}: {refused.describe()}")
        await self._report(step, refused, first=delay <= self.backoff.first)

    def _count(self, refused: Refused) -> None:
        metrics.WRITE_REFUSALS.labels(refused.verb, refused.kind, str(refused.status)).inc()
        if refused.target.kind != "Event" and self.access.refused(refused):
            log.error("cannot write: %s", self.access.blocked())

    async def _report(self, step: Step, refused: Refused, first: bool = True) -> None:
        """On the claim or pool the step was for: Ready=False (and errorMessage), and a Warning Event.

        An object with no status to say it on (an address whose claim is
        gone) gets the Event alone, once per run of refusals (``first``).
        """
        about = step.about
        obj = self.inventory.get(about.group_kind, about.namespace, about.name) if about else None
        if obj is None or (about.uid and o.meta(obj).get("uid") != about.uid):
            return
        if not shows_refusals(obj):
            if first:
                await self._post_event(Event(about, "Warning", event_reason(obj), refused.describe()))
            return
        patch = status_patch(obj, refused, _utc_now())
        if patch is None:
            return  # it says so already: no write, no second Event
        resource = self.resources.get(about.group_kind)
        if resource is not None:
            body = {"metadata": {"resourceVersion": o.meta(obj).get("resourceVersion")}, "status": patch}
            try:
                result = await self._call("PATCH", resource.path(about.namespace, about.name, "status"),
                                          body=body, content_type=MERGE_PATCH)
            except ApiException as err:
                log.warning("%s: could not record the refusal on %s: %s", step.subject, about, _explain(err))
                if is_permanent(err.status):
                    self._count(Refused("patch-status", about, err.status, _server_message(err)))
            else:
                self._settle(result)
                self.access.accepted("patch-status", refused_kind(about))
        await self._post_event(Event(about, "Warning", event_reason(obj), refused.describe()))

    # -- single actions ---------------------------------------------------
    # The inventory is only touched here, on the event loop, like the watch
    # handlers that feed it.

    async def _do(self, action: Any) -> dict | None:
        if isinstance(action, Event):
            await self._post_event(action)
            return None
        if isinstance(action, Create):
            return await self._create(action)
        if isinstance(action, Delete):
            return await self._delete(action)
        return await self._patch(action)

    def _resource(self, group_kind: tuple[str, str]) -> Resource:
        try:
            return self.resources[group_kind]
        except KeyError:
            raise Refusal(f"{group_kind[1]}.{group_kind[0]} is not served by this cluster", again=False) from None

    async def _call(self, method: str, path: str, body: Any = None, content_type: str | None = None) -> Any:
        headers = {"Accept": "application/json"}
        data = None
        if body is not None:
            headers["Content-Type"] = content_type or "application/json"
            data = encode(body)
        for attempt in (1, 2):
            try:
                authorization = await self.credentials.authorization_async()
            except CredentialsError as err:
                raise ApiException(status=0, reason=f"no credentials: {err}") from None
            if authorization:
                headers["Authorization"] = authorization
            # Measured once the credential is had (an exec plugin may take seconds), for each attempt.
            params = _server_deadline(self.write_deadline()) if method != "GET" else None
            try:
                async with self._http().request(method, path.lstrip("/"), data=data, headers=headers,
                                                params=params, proxy=self.credentials.proxy) as response:
                    raw = await response.read()
            except (aiohttp.ClientError, asyncio.TimeoutError) as err:
                if method != "GET" and not self.may_write():
                    raise Fenced() from None  # stopped on its way out (FencedRequest)
                failure = ApiException(status=0, reason=f"{type(err).__name__}: {err}")
                raise failure from None
            # A rotated token file or an exec plugin's renewed credential gets one more try.
            if response.status == 401 and attempt == 1 and \
                    await asyncio.to_thread(self.credentials.refused, authorization):
                continue
            break
        if not 200 <= response.status < 300:
            failure = ApiException(status=response.status, reason=response.reason)
            failure.body = raw.decode(errors="replace")
            raise failure
        return decode_object(raw) if raw else None

    def _lease_of(self, target: o.Ref) -> str | None:
        """The Lease a lock of the reconcile's view is stored in, or None (not a lock, or a Metal3 IPAddress)."""
        if self.leases is None or target.group_kind != kinds.IPADDRESS:
            return None
        return lockstore.stored_in_lease(self.inventory.get(kinds.IPADDRESS, target.namespace, target.name))

    def _as_view(self, lease: Any) -> Any:
        """A Lease the server answered with, as the lock it stands for (None when it is no lock)."""
        return lockstore.from_lease(lease) if isinstance(lease, dict) and lease.get("metadata") else lease

    # -- the twins of the Leases (``core.lockstore``) ---------------------------------------

    def twins(self) -> bool:
        """Whether a lock of the Lease store is written as a Metal3 IPAddress too, first (its twin): where that kind
        is served and this controller may list it, so that an earlier version's lock of the name refuses it; or
        where it came since start-up (``metal3_came``)."""
        return self.leases is not None and (kinds.IPADDRESS in self.resources or self.metal3_came)

    def _metal3_addresses(self) -> Resource:
        return self.resources.get(kinds.IPADDRESS) or METAL3_ADDRESSES

    def metal3_served_now(self) -> None:
        """The Metal3 IPAddress kind is served now (it was not at start): twins from now on, and the controller told
        (it lists and watches that kind from then on, ``runtime``)."""
        if not self.metal3_came:
            self.metal3_came = True
            log.warning("the Metal3 IPAddress kind is served now (it was not at start): locks of the Lease store "
                        "are written as Metal3 IPAddresses too")
            self.on_metal3_came()

    async def _metal3_discovered(self) -> bool:
        """Whether the API server's discovery lists the Metal3 IPAddress kind (404: its group version not served)."""
        resource = METAL3_ADDRESSES
        try:
            found = await self._call("GET", f"/apis/{resource.group}/{resource.version}")
        except ApiException as err:
            if err.status == 404:
                return False
            raise
        listed = found.get("resources") if isinstance(found, dict) else None
        return any(isinstance(r, dict) and r.get("name") == resource.plural for r in listed or [])

    async def _create_lock(self, obj: dict) -> dict:
        """A lock of the Lease store created, its twin first (a 409 there: an earlier version's lock, or another
        replica's, holds the name), then its Lease; a Lease of another lock refuses it (409), and the twin made
        for it is let go. One of the same lock (an answer lost on the way) is taken as made.

        Where the Metal3 IPAddress kind was not served at start (``metal3_may_come``), the API server's discovery is
        asked whether it is now (a read every client may make), and where it is, the twin is tried: 404 (gone again)
        or 403 (not this controller's to write: not tried again) leave the Lease alone the lock; a twin made, or one
        refused by an IPAddress of its name (an earlier version's lock, written once its CRD came), say that the kind
        came (``metal3_served_now``)."""
        resource, home = self.leases
        twin = None
        probe = not self.twins() and self.metal3_may_come and await self._metal3_discovered()
        if self.twins() or probe:
            try:
                twin = await self._call("POST", self._metal3_addresses().path(o.namespace(obj)), body=obj,
                                        content_type="application/json")
            except ApiException as err:
                if probe and err.status == 409:
                    self.metal3_served_now()
                elif probe and err.status == 403 and not namespace_terminating(err):
                    # Not this controller's to write: not tried again. (One refused as its namespace is being
                    # deleted says nothing of its rights: the other namespaces' locks are tried with their twins.)
                    self.metal3_may_come = False
                    log.info("Metal3 IPAddresses may not be written by this controller (403): each lock of the "
                             "Lease store is its Lease alone")
                # 404: the Metal3 IPAddress kind is not served (its CRD not installed, or removed since start-up);
                # no earlier version can write its locks either, so the Lease alone is the lock.
                if err.status != 404 and not (probe and err.status == 403):
                    raise
            if probe and twin is not None:
                self.metal3_served_now()
        try:
            return self._as_view(await self._call("POST", resource.path(home), body=lockstore.to_lease(obj, home),
                                                  content_type="application/json"))
        except ApiException as err:
            if err.status != 409 or twin is None:
                raise
            try:
                found = self._as_view(await self._call(
                    "GET", resource.path(home, lockstore.lease_name(o.namespace(obj), o.name(obj)))))
            except ApiException as gone:
                if gone.status != 404:
                    raise
                found = None
            if lockstore.same_lock(found, obj):
                return found
            await self.let_twin_go(twin)
            raise

    async def twin_of(self, view: Mapping[str, Any]) -> dict | None:
        """The twin of a lock stored as a Lease, as the API server has it now: None when there is none, or when
        the Metal3 IPAddress of its name is another lock (an earlier version's, written once the twin was gone)."""
        if not self.twins():
            return None
        try:
            found = await self._call("GET", self._metal3_addresses().path(o.namespace(view), o.name(view)))
        except ApiException as err:
            if err.status == 404:
                return None
            raise
        return found if isinstance(found, dict) and lockstore.same_lock(found, view) else None

    async def let_twin_go(self, twin: Mapping[str, Any]) -> None:
        """A twin (that incarnation) deleted, its finalizers taken off first; gone or replaced already is fine."""
        path = self._metal3_addresses().path(o.namespace(twin), o.name(twin))
        uid = o.meta(twin).get("uid")
        try:
            if o.finalizers(twin):
                await self._call("PATCH", path, content_type=MERGE_PATCH,
                                 body={"metadata": {"finalizers": None, **({"uid": uid} if uid else {})}})
            await self._call("DELETE", path, body={"preconditions": {"uid": uid}} if uid else {},
                             content_type="application/json")
        except ApiException as err:
            if err.status not in (404, 409, 422):
                raise

    async def _own_twin(self, view: Mapping[str, Any], owner_references: tuple[dict, ...]) -> None:
        """The owners a lock's Lease is given, added to its twin first: the garbage collector then keeps the twin
        (which an earlier version reads) as long as the controller keeps the Lease. Added, never put in the place
        of the twin's: an owner an earlier version gave the twin (its own pool) stays, and so do those of a write
        refused afterwards (a twin owned longer is held longer, never freed early). On the twin's version, read
        again when another writer changed it meanwhile; changed at each of three tries, the write is refused (the
        Lease is given no owner its twin lacks: the garbage collector would take the twin while that owner lives)."""
        for _ in range(3):
            twin = await self.twin_of(view)
            if twin is None:
                return
            have = [dict(r) for r in o.owner_references(twin)]
            known = {str(r.get("uid")) for r in have}
            added = [dict(r) for r in owner_references if str(r.get("uid")) not in known]
            if not added:
                return
            meta = o.meta(twin)
            condition = {k: meta[k] for k in ("uid", "resourceVersion") if meta.get(k)}
            try:
                await self._call("PATCH", self._metal3_addresses().path(o.namespace(twin), o.name(twin)),
                                 body={"metadata": {"ownerReferences": have + added, **condition}},
                                 content_type=MERGE_PATCH)
                return
            except ApiException as err:
                if err.status == 404:
                    return
                if err.status != 409:
                    raise
        raise Refusal(f"the twin of {o.namespace(view)}/{o.name(view)} changed at each try; its owners not given",
                      again=True)

    async def _create(self, action: Create) -> dict:
        obj = action.obj
        if self.leases is not None and lockstore.in_leases(obj):
            post = lambda: self._create_lock(obj)  # noqa: E731
        else:
            resource = self._resource(kinds.kind_of(obj))
            post = lambda: self._call("POST", resource.path(o.namespace(obj)), body=obj,  # noqa: E731
                                      content_type="application/json")
        try:
            created = await post()
        except ApiException as err:
            if err.status == 409:
                # The name is the lock: someone holds it. Learn who, decide again.
                await self._refresh(o.ref(obj))
                raise Refusal(f"{obj['kind']} {o.namespace(obj)}/{o.name(obj)} exists already", again=True) from None
            raise
        created = slim(created)
        self._file(created)
        return created

    async def _delete(self, action: Delete) -> dict | None:
        guard = action.unless_exists
        if guard is not None:
            found = await self._refresh(guard)
            if guard_holds(action, found, self.inventory.filed_with(guard.group_kind, guard.namespace, guard.name)):
                raise Refusal(f"{guard} exists; {action.target} is kept", again=True)
        lease = self._lease_of(action.target)
        if lease is not None:
            resource, home = self.leases
            path = resource.path(home, lease)
        else:
            resource = self._resource(action.target.group_kind)
            path = resource.path(action.target.namespace, action.target.name)
        body: dict[str, Any] = {"propagationPolicy": "Background"}
        # What the in-memory executor enforces too: this incarnation, unchanged since it was read.
        preconditions = {}
        if action.target.uid:
            preconditions["uid"] = action.target.uid
        if action.resource_version:
            preconditions["resourceVersion"] = action.resource_version
        if preconditions:
            body["preconditions"] = preconditions
        view = self.inventory.get(kinds.IPADDRESS, action.target.namespace, action.target.name) if lease else None
        try:
            result = await self._call("DELETE", path, body=body, content_type="application/json")
            if lease is not None:
                result = self._as_view(result)
                twin = await self.twin_of(view) if view is not None else None
                if twin is not None:  # after its Lease: the lock is never in the Lease store alone while it holds
                    await self.let_twin_go(twin)
        except ApiException as err:
            if err.status == 404:
                self._forget(action.target)
                return None
            if err.status == 409:
                # Changed or replaced since it was read: learn what it is now, decide again.
                await self._refresh(action.target)
                raise Refusal(f"{action.target} changed since it was read; not deleted", again=True) from None
            raise
        if isinstance(result, dict) and result.get("kind") == action.target.kind and result.get("metadata") \
                and o.finalizers(result):
            result = slim(result)
            self._file(result)  # still there, marked for deletion: finalizers pending
            return result
        if isinstance(result, dict) and result.get("kind") == action.target.kind and result.get("metadata"):
            self._file_gone(result)  # gone at once: its last state marks the deletion
        else:
            self._forget(action.target)
        return None

    async def _patch(self, action: SetFinalizers | SetMetadata | SetStatus) -> dict:
        target = action.target
        lease = self._lease_of(target)
        if lease is not None:
            resource, home = self.leases
            path = resource.path(home, lease)
        else:
            resource = self._resource(target.group_kind)
            path = None
        metadata: dict[str, Any] = {}
        if action.resource_version:
            metadata["resourceVersion"] = action.resource_version
        subresource = None
        if isinstance(action, SetFinalizers):
            metadata["finalizers"] = list(action.finalizers)
            body: dict[str, Any] = {"metadata": metadata}
        elif isinstance(action, SetMetadata):
            if action.labels:
                metadata["labels"] = action.labels
            if action.annotations:
                metadata["annotations"] = action.annotations
            if action.finalizers is not None:
                metadata["finalizers"] = list(action.finalizers)
            if action.owner_references is not None and lease is not None:
                # A Lease keeps the lock's owners in its annotation (they are of another namespace).
                current = self.inventory.get(target.group_kind, target.namespace, target.name)
                await self._own_twin(current, action.owner_references)
                metadata["annotations"] = {**metadata.get("annotations", {}),
                                           **lockstore.owners_patch(current, action.owner_references)}
            elif action.owner_references is not None:
                metadata["ownerReferences"] = list(action.owner_references)
            body = {"metadata": metadata}
        else:
            current = self.inventory.get(target.group_kind, target.namespace, target.name)
            status = o.merge_patch(o.status(current) if current else {}, action.status)
            body = {"metadata": metadata, "status": status} if metadata else {"status": status}
            subresource = "status"
        try:
            result = await self._call("PATCH", path or resource.path(target.namespace, target.name, subresource),
                                body=body, content_type=MERGE_PATCH)
            if lease is not None:
                result = self._as_view(result)
                if isinstance(action, SetMetadata) and action.owner_references is not None:
                    # A twin given meanwhile (``locks.LockUpkeep.give_twins``, of the Lease as it read it before
                    # this write) is given these owners too.
                    await self._own_twin(current, action.owner_references)
        except ApiException as err:
            if err.status == 404:
                self._forget(target)
                if isinstance(action, SetFinalizers):
                    return {}
                raise Refusal(f"{target} is gone", again=False) from None
            if err.status == 409:
                raise Refusal(f"{target} changed since it was read", again=True) from None
            raise
        self._settle(result)
        return result

    def _settle(self, obj: dict) -> None:
        """An object the server returned: gone if deleting with no finalizers left, else current."""
        if o.is_deleting(obj) and not o.finalizers(obj):
            self._file_gone(obj)
        else:
            self._file(slim(obj))

    async def _refresh(self, target: o.Ref) -> dict | None:
        """Read one object from the API server into the inventory (None when it does not exist). A lock is read
        from the Lease store first, then as a Metal3 IPAddress (one an earlier version wrote) where locks have twins."""
        if self.leases is not None and target.group_kind == kinds.IPADDRESS:
            resource, home = self.leases
            try:
                found = self._as_view(await self._call(
                    "GET", resource.path(home, lockstore.lease_name(target.namespace, target.name))))
            except ApiException as err:
                if err.status != 404:
                    raise
                found = None
            if found is not None:
                found = slim(found)
                self._file(found)
                return found
            if not self.twins():
                self._forget(target)
                return None
        try:
            # Where the Metal3 IPAddress kind came since start-up, before it is listed, too (``twins``).
            resource = self._metal3_addresses() if self.leases is not None and target.group_kind == kinds.IPADDRESS \
                else self._resource(target.group_kind)
        except Refusal:
            return None
        try:
            obj = await self._call("GET", resource.path(target.namespace, target.name))
        except ApiException as err:
            if err.status == 404:
                self._forget(target)
                return None
            raise
        obj = slim(obj)
        self._file(obj)
        return obj

    def _forget(self, target: o.Ref) -> None:
        self.on_filed(self.inventory.forget(target.group_kind, target.namespace, target.name))

    def _file(self, obj: dict) -> None:
        self.on_filed(self.inventory.upsert(obj))

    def _file_gone(self, obj: dict) -> None:
        self.on_filed(self.inventory.remove(obj))

    async def _post_event(self, event: Event) -> None:
        now = datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")
        target = event.target
        # An Event about an object of cluster scope goes where Kubernetes files such Events: in default.
        where = target.namespace or "default"
        body = {
            "apiVersion": "v1", "kind": "Event",
            "metadata": {"generateName": f"{target.name}.", "namespace": where},
            "involvedObject": {"apiVersion": target.api_version, "kind": target.kind, "name": target.name,
                               "namespace": target.namespace, "uid": target.uid},
            "reason": event.reason, "message": event.message[:1024], "type": event.type,
            "source": {"component": self.component},
            "reportingComponent": self.component,
            "firstTimestamp": now, "lastTimestamp": now, "count": 1,
        }
        try:
            await self._call("POST", Resource("", "v1", "events").path(where), body=body,
                       content_type="application/json")
        except ApiException as err:  # an Event is a courtesy; losing one must not stop the work
            log.warning("could not post event for %s: %s", target, _explain(err))
            if is_permanent(err.status):
                self._count(Refused("create", o.Ref("v1", "Event", target.namespace, f"{target.name}.*"),
                                    err.status, _server_message(err)))


def request(api: client.ApiClient, method: str, path: str, body: Any = None,
            headers: dict[str, str] | None = None, timeout: float | None = None,
            decode: Callable[[bytes], Any] = json.loads) -> Any:
    """One REST call with the client's credentials; the answer decoded (JSON by default), or ApiException."""
    method, url, header_params, body, _ = api.param_serialize(
        method, path, header_params=headers or {"Accept": "application/json"}, body=body,
        auth_settings=["BearerToken"])
    response = api.call_api(method, url, header_params=header_params, body=body, _request_timeout=timeout)
    response.read()
    if not 200 <= response.status < 300:
        raise ApiException(http_resp=response)
    return decode(response.data) if response.data else None


def namespace_terminating(err: ApiException) -> bool:
    """Whether a create was refused because its namespace is being deleted (the API server's NamespaceLifecycle
    admission, which refuses every client alike: it says nothing of this controller's rights)."""
    if err.status != 403:
        return False
    try:
        causes = (json.loads(err.body).get("details") or {}).get("causes") or []
    except (TypeError, ValueError, AttributeError):
        return False
    return any(isinstance(c, dict) and c.get("reason") == "NamespaceTerminating" for c in causes)


def _verb_kind(action: Any) -> tuple[str, str]:
    """The verb and the kind (``Kind.group``) of a write, as refusals are counted and waited on."""
    if isinstance(action, Create):
        group, kind = kinds.kind_of(action.obj) or ("", "?")
        verb = "create"
    else:
        group, kind = action.target.group_kind
        verb = ("delete" if isinstance(action, Delete) else "patch-status" if isinstance(action, SetStatus)
                else "create" if isinstance(action, Event) else "patch")
    return verb, f"{kind}.{group}" if group else kind


def refused_kind(ref: o.Ref) -> str:
    group, kind = ref.group_kind
    return f"{kind}.{group}" if group else kind


def _utc_now() -> str:
    return datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")


def _server_message(err: ApiException) -> str:
    """What the API server said (its Status message), else the HTTP reason."""
    try:
        message = json.loads(err.body).get("message")
    except (TypeError, ValueError, AttributeError):
        message = None
    return str(message or err.reason or "")


def _explain(err: ApiException) -> str:
    try:
        return f"{err.status} {json.loads(err.body).get('message')}"
    except (TypeError, ValueError, AttributeError):
        return f"{err.status} {err.reason}"
