"""Running the asks of ``core.asking`` against NetBox, and surveying NetBox pools.

The adapter half of NetBox pools: :class:`NetBoxAsks` is given the pools
(:class:`~metal3_ipam.poolkinds.netbox.pool.NetBoxPool`, by namespace and name) and
runs each :class:`~metal3_ipam.core.asking.Ask` with the NetBox client
(``client``): allocate by key, or release by key. Every ask ends in
an answer, as data (:class:`Granted`, :class:`Refused`, :class:`Released`) for
the core to file; nothing raises:

* the token is read from the pool's Secret (:class:`SecretTokens`); a Secret
  or key that is missing, or a token NetBox refuses, is a refusal with its
  reason (``TokenMissing``, ``TokenRefused``), and the token is read again
  for the next ask (a rotated Secret is taken up without a restart);
* each ask is bounded by its deadline (the core's), each request by the
  client's timeout, and the requests in flight per server URL by the client's
  concurrency; the bounds are per server, so a slow or dead NetBox delays only
  the asks of its own pools;
* refusals of the server itself (unreachable, timed out, 5xx) say so
  (``server_down``), which the core uses to hold that server's asks back.

:meth:`NetBoxAsks.survey` asks NetBox about a pool (token, key field,
prefix or range, counts) for its status (``pool.pool_status``).
"""

from __future__ import annotations

import asyncio
import base64
import contextlib
import logging
import time
from collections import Counter
from collections.abc import Mapping
from typing import Any, Awaitable, Callable, Hashable, Iterable, Protocol

from kubernetes.client.rest import ApiException

from metal3_ipam.controller import metrics
from metal3_ipam.controller.api import request
from metal3_ipam.controller.outside import HELD_SECRETS_RECORD, Left, OutsidePools, SecretNotHeld
from metal3_ipam.poolkinds.netbox.client import NetBoxClient, NetBoxError
from metal3_ipam.core import kinds
from metal3_ipam.core import objects as o
from metal3_ipam.core.actions import Event, Plan
from metal3_ipam.core.asking import Answer, Ask, Granted, Op, Refused, Released
from metal3_ipam.poolkinds.netbox.source import KEY_FIELD, Reason
from metal3_ipam.poolkinds.netbox.pool import (
    SERVER_DOWN,
    TOKEN_MISSING,
    NetBoxPool,
    SecretKeyRef,
    Survey,
    claim_key,
    condition_reason,
    pool_status,
    read_pool,
)
from metal3_ipam.poolkinds.netbox.pool import NETBOX_IP_POOL, SECRET_FINALIZER
from metal3_ipam.core.reconcile import first_carrier, left_with
from metal3_ipam.poolkinds.netbox.sweep import (ABSENT, PAUSED, PRESENT, Found, Home, Sweep, claim_in, contested,
                                               copies_took, describe_anew, description,
                                               held_in, home_in, home_of, home_state, left_on_release, moved_from,
                                               released_by, settle, swept_at, taken_from, took, unclaimed_here,
                                               with_released_by)

log = logging.getLogger(__name__)

PoolRef = tuple[str, str]  # namespace, name
# A survey's reasons that say NetBox itself failed (unreachable, timed out, 5xx): its pool's external IPAM is down.
SERVER_DOWN_REASONS = frozenset(condition_reason(reason) for reason in SERVER_DOWN)


class TokenUnavailable(Exception):
    """The token could not be read: ``reason`` (a condition reason) and a message naming the Secret."""

    def __init__(self, reason: str, message: str, passing: bool = False):
        super().__init__(message)
        self.reason = reason
        self.passing = passing  # a read that failed (read again, it may be had), not a token that is not there


class Tokens(Protocol):
    async def token(self, namespace: str, ref: SecretKeyRef) -> str: ...

    def forget(self, namespace: str, ref: SecretKeyRef) -> None: ...


class SecretTokens:
    """Tokens read from Secrets with a Kubernetes ``ApiClient``, kept ``ttl`` seconds (or until forgotten)."""

    def __init__(self, api_client: Any, *, ttl: float = 60.0, clock: Callable[[], float] = time.monotonic):
        self._api = api_client
        self._ttl = ttl
        self._clock = clock
        self._cache: dict[tuple[str, SecretKeyRef], tuple[float, str]] = {}

    async def token(self, namespace: str, ref: SecretKeyRef) -> str:
        cached = self._cache.get((namespace, ref))
        if cached is not None and self._clock() - cached[0] < self._ttl:
            return cached[1]
        where = f"Secret {namespace}/{ref.name}"
        try:
            secret = await asyncio.to_thread(request, self._api, "GET",
                                             f"/api/v1/namespaces/{namespace}/secrets/{ref.name}", timeout=10)
        except ApiException as exc:
            if exc.status == 404:
                raise TokenUnavailable(TOKEN_MISSING, f"{where} (spec.server.tokenSecretRef) does not exist") from None
            raise TokenUnavailable(TOKEN_MISSING, f"{where} could not be read ({exc.status} {exc.reason})",
                                   passing=True) from None
        except Exception as exc:  # the API server unreachable: not NetBox's fault, but no token either
            raise TokenUnavailable(TOKEN_MISSING, f"{where} could not be read ({exc})", passing=True) from None
        encoded = (secret.get("data") or {}).get(ref.key)
        if not encoded:
            raise TokenUnavailable(TOKEN_MISSING, f"{where} has no key {ref.key!r} (spec.server.tokenSecretRef.key)")
        try:
            value = base64.b64decode(encoded).decode().strip()
        except (ValueError, UnicodeDecodeError):
            raise TokenUnavailable(TOKEN_MISSING, f"{where}: key {ref.key!r} is not UTF-8 text") from None
        if not value or any(c.isspace() for c in value):
            raise TokenUnavailable(TOKEN_MISSING, f"{where}: key {ref.key!r} does not hold a NetBox token")
        self._cache[(namespace, ref)] = (self._clock(), value)
        return value

    def forget(self, namespace: str, ref: SecretKeyRef) -> None:
        self._cache.pop((namespace, ref), None)


class NetBoxAsks:
    """The asks of NetBox pools, run against their NetBox servers. See the module's docstring.

    ``owner`` marks the addresses this controller makes in NetBox (the same in
    every cluster a claim may be moved to, so that a moved claim's key finds its
    address); ``timeout`` bounds each request, ``concurrency`` the requests in
    flight per server URL; ``clock`` is the clock of the asks' deadlines.
    """

    def __init__(self, tokens: Tokens, *, owner: str, timeout: float = 10.0, concurrency: int = 4,
                 key_field: str = KEY_FIELD, clock: Callable[[], float] = time.monotonic):
        self.tokens = tokens
        self.owner = owner
        self.timeout = timeout
        self.concurrency = concurrency
        self.key_field = key_field
        self.clock = clock
        self._pools: dict[PoolRef, NetBoxPool] = {}
        self._clients: dict[tuple[Hashable, str], NetBoxClient] = {}
        self._in_use: dict[NetBoxClient, int] = {}  # asks and surveys running on a client
        self._retired: set[NetBoxClient] = set()  # its token refused: closed once nothing runs on it
        self._tasks: set[asyncio.Task] = set()
        #: (namespace, Secret key) -> the token last read there: a release still asks with it once the Secret went
        #: with its namespace
        self._last_tokens: dict[tuple[str, SecretKeyRef], str] = {}

    # -- pools --------------------------------------------------------------------------

    def pool_changed(self, pool: NetBoxPool) -> None:
        self._pools[(pool.namespace, pool.name)] = pool

    def pool_gone(self, namespace: str, name: str) -> None:
        self._pools.pop((namespace, name), None)

    # -- clients ------------------------------------------------------------------------

    async def _client(self, pool: NetBoxPool, lingering: bool = False) -> NetBoxClient:
        """The pool's client, with the token of its Secret; ``lingering``: with the token last read there if the
        Secret is gone (deleted with the namespace: what its claims hold is still released)."""
        try:
            token = await self.tokens.token(pool.namespace, pool.token)
        except TokenUnavailable:
            token = self._last_tokens.get((pool.namespace, pool.token)) if lingering else None
            if token is None:
                raise
            log.info("NetBoxIPPool %s/%s: its token cannot be read; asked with the one last read", pool.namespace,
                     pool.name)
        self._last_tokens[(pool.namespace, pool.token)] = token
        key = (pool.server, token)
        client = self._clients.get(key)
        if client is None:
            client = NetBoxClient(pool.server.url, token, owner=self.owner, key_field=self.key_field,
                                  ca_bundle=pool.server.ca_bundle, timeout=self.timeout,
                                  concurrency=self.concurrency)
            self._clients[key] = client
        return client

    @contextlib.asynccontextmanager
    async def _using(self, pool: NetBoxPool, lingering: bool = False):
        """The pool's client, counted in use while the block runs (a retired one is closed after its last use)."""
        client = await self._client(pool, lingering)
        self._in_use[client] = self._in_use.get(client, 0) + 1
        try:
            yield client
        finally:
            self._in_use[client] -= 1
            if not self._in_use[client]:
                del self._in_use[client]
                if client in self._retired:
                    self._retired.discard(client)
                    await client.close()

    async def _refused_token(self, pool: NetBoxPool, client: NetBoxClient | None) -> None:
        """NetBox refused the token (revoked, or short of a permission): read the Secret again next time.

        Only the client of that token is retired, and closed once no ask runs on it: the requests out on
        it (and on other pools' clients of the same server) get NetBox's own answers, never a closed
        connection taken for the server being down.
        """
        self.tokens.forget(pool.namespace, pool.token)
        if client is None:
            return
        for key in [k for k, c in self._clients.items() if c is client]:
            del self._clients[key]
        if client in self._in_use:
            self._retired.add(client)
        else:
            await client.close()

    async def close(self) -> None:
        for task in list(self._tasks):
            task.cancel()
        await asyncio.gather(*self._tasks, return_exceptions=True)
        for client in {*self._clients.values(), *self._retired}:
            await client.close()
        self._clients.clear()
        self._retired.clear()

    # -- asks ---------------------------------------------------------------------------

    async def ask(self, ask: Ask, description: str | None = None,
                  leave: Callable[[str, str, str], Any] = lambda key, description, address: None) -> Answer:
        """Run one ask to its answer (never raises), within its deadline. ``description``: an allocation's
        (its claim and home, ``sweep``); ``leave``: the description a release leaves the key's address with
        (another cluster's claim's maybe), None: deleted (``NetBoxClient.release``)."""
        pool = self._pools.get(ask.pool)  # type: ignore[arg-type]
        if pool is None:
            return Refused(ask.key, ask.attempt, "PoolNotFound", f"NetBoxIPPool {'/'.join(ask.pool)} is not known")
        what = f"{ask.op.value} for key {ask.key!r} of NetBoxIPPool {pool.namespace}/{pool.name}"
        client: NetBoxClient | None = None
        try:
            async with asyncio.timeout(max(ask.deadline - self.clock(), 0.0)), \
                    self._using(pool, lingering=ask.op is Op.RELEASE) as client:
                if ask.op is Op.RELEASE:
                    await client.release(ask.key, leave)
                    return Released(ask.key, ask.attempt)
                allocation = await client.allocate(ask.key, pool.parent, avoid=[pool.gateway] if pool.gateway else (),
                                                   description=description)
                return Granted(ask.key, ask.attempt, allocation.address, allocation.id)
        except (TokenUnavailable, SecretNotHeld) as exc:
            return Refused(ask.key, ask.attempt, exc.reason, f"{what}: {exc}")
        except NetBoxError as exc:
            if exc.reason is Reason.TOKEN_REFUSED:
                await self._refused_token(pool, client)
            return Refused(ask.key, ask.attempt, condition_reason(exc.reason, pool.parent), str(exc),
                           server_down=exc.reason in SERVER_DOWN)
        except TimeoutError:
            return Refused(ask.key, ask.attempt, condition_reason(Reason.TIMEOUT),
                           f"{what}: no answer from NetBox at {pool.server.url} by the ask's deadline",
                           server_down=True)
        except asyncio.CancelledError:
            raise
        except Exception as exc:  # a bug of ours must not end the loop that files answers
            log.exception("%s failed", what)
            return Refused(ask.key, ask.attempt, "InternalError", f"{what}: {type(exc).__name__}: {exc}")

    def send(self, asks: Iterable[Ask], deliver: Callable[[Answer], Awaitable[None] | None],
             describe: Callable[[str], str | None] = lambda key: None,
             leave: Callable[[str, str, str], Any] = lambda key, description, address: None) -> list[asyncio.Task]:
        """Run ``asks`` concurrently; hand each answer to ``deliver`` as it comes. Returns the tasks.
        ``describe(key)``: the description of an address allocated for the key; ``leave(key, description,
        address)``: the
        description a release leaves the key's address with, None: deleted (``NetBoxClient.release``)."""
        started = []
        for ask in asks:
            description = describe(ask.key) if ask.op is Op.ALLOCATE else None
            task = asyncio.create_task(self._run(ask, deliver, description, leave),
                                       name=f"netbox-{ask.op.value}-{ask.key}")
            self._tasks.add(task)
            task.add_done_callback(self._tasks.discard)
            started.append(task)
        return started

    async def _run(self, ask: Ask, deliver: Callable[[Answer], Awaitable[None] | None],
                   description: str | None = None,
                   leave: Callable[[str, str, str], Any] = lambda key, description, address: None) -> None:
        answer = await self.ask(ask, description, leave)
        result = deliver(answer)
        if asyncio.iscoroutine(result):
            await result

    # -- sweeps -------------------------------------------------------------------------

    async def sweep(self, pool: NetBoxPool, choose: Callable[[list[Found]], tuple[list[Found], list[tuple[Found, str]]]],
                    still: Callable[[Found], bool] = lambda item: True, lingering: bool = False
                    ) -> tuple[int, list[Found], list[tuple[Found, str]]]:
        """One sweep of the server of ``pool``, with its token: every address carrying this owner's keys
        listed; ``choose`` says which to release and which to give a new description. Each is read again by
        id first and changed only if its key and description are still as listed; one to release is released
        only if ``still(item)`` holds then too (a claim carrying its key may have come meanwhile: the reads
        and deletes before it take time). (How many were listed, the ones released, the ones described anew);
        a refusal raises NetBoxError or TokenUnavailable. A pool gone (what its claims left swept on) is asked with
        the token last read if its Secret went with it (``_client``)."""
        gone = lingering or (pool.namespace, pool.name) not in self._pools
        async with asyncio.timeout(self.timeout * 6), self._using(pool, lingering=gone) as client:
            listed = {a.id: a for a in await client.owned()}
            release, describe = choose([Found(a.id, a.address, a.key, a.description) for a in listed.values()])
            released, described = [], []
            for item, text in [(i, None) for i in release] + describe:
                now = await client.read(listed[item.id])
                if now is None or (now.key, now.description) != (item.key, item.description):
                    continue
                if text is None:
                    if not still(item):
                        continue
                    await client.release_allocation(now)
                    released.append(item)
                else:
                    await client.describe(now, text)
                    described.append((item, text))
            return len(listed), released, described

    # -- surveys ------------------------------------------------------------------------

    async def survey(self, pool: NetBoxPool) -> Survey:
        """What NetBox says of the pool now: the key field usable, the prefix or range found, its counts."""
        self.pool_changed(pool)
        client: NetBoxClient | None = None
        try:
            async with asyncio.timeout(self.timeout * 4), self._using(pool) as client:
                await client.check()
                usage = await client.usage(pool.parent)
                return Survey(size=usage.size, used=usage.used)
        except TokenUnavailable as exc:
            return Survey(reason=exc.reason, message=str(exc))
        except NetBoxError as exc:
            if exc.reason is Reason.TOKEN_REFUSED:
                await self._refused_token(pool, client)
            return Survey(reason=condition_reason(exc.reason, pool.parent), message=str(exc))
        except TimeoutError:
            return Survey(reason=condition_reason(Reason.TIMEOUT),
                          message=f"NetBox at {pool.server.url} did not answer within {self.timeout * 4:g}s")


# --------------------------------------------------------------------------- serving claims


_CHANGES = {"homed": "homed here, its claim moved in", "moved": "homed nowhere, its claim moved away",
            "held": "held by a claim here (paused, or live and bound to it)",
            "unheld": "no longer held by a paused claim here",
            "marked": "marked released: no claim carries its key (deleted once the release grace is over, "
                      "unless a claim carrying it takes it back)",
            "taken": "taken back: it was marked released, and a claim here carries its key",
            "given": "given to the cluster its claim moved to, which homed it first (moved-from=)"}


def _change(item: Found, text: str) -> str:
    """What a sweep's new description of an address did (a key of ``_CHANGES``)."""
    if swept_at(text) is not None and swept_at(item.description) is None:
        return "marked"
    if swept_at(item.description) is not None and swept_at(text) is None:
        return "taken"
    if home_in(text) != home_in(item.description):
        return "homed" if home_in(text) is not None else "moved"
    if took(text) != took(item.description):
        return "given"
    return "held" if held_in(text) is not None else "unheld"


class NetBoxPools(OutsidePools):
    """NetBox pools in the claim lifecycle (``controller.outside``): the asks the passes want, run, and their
    answers bringing passes. What is NetBox's: an allocation is sent with its address's description and a
    release with what it keeps (another cluster's claim's address); an answer and a survey say whether NetBox
    is up (``EXTERNAL_IPAM_UP``); the sweep (:meth:`sweep`) homes, holds, marks and releases NetBox's addresses.
    """

    pool_kind = NETBOX_IP_POOL
    label = "netbox"
    secret_finalizer = SECRET_FINALIZER

    def __init__(self, asks: NetBoxAsks, asking: Any, *, inventory: Any, writer: Any,
                 wake: Callable[[Any, str | None], None], may_act: Callable[[], bool] = lambda: True,
                 survey_seconds: float = 60.0, sweep_seconds: float = 300.0, release_grace_seconds: float = 86400.0,
                 clock: Callable[[], float] = time.monotonic, wall: Callable[[], float] = time.time,
                 secret_holds: Any = None):
        super().__init__(asks, asking, inventory=inventory, writer=writer, wake=wake, may_act=may_act,
                         survey_seconds=survey_seconds, sweep_seconds=sweep_seconds, clock=clock,
                         secret_holds=secret_holds)
        self.release_grace_seconds = release_grace_seconds
        self.wall = wall  # the time a mark of release says, which NetBox keeps across restarts
        self._told: set[tuple[str, Home]] = set()  # (key, other home) a claim here was warned of
        self._sweeps: dict[Any, Sweep] = {}  # per NetBox server: the sightings of what may be released
        #: per NetBox server, key -> (the pool, the home here) of each address a release here left homed at the
        #: released claim's home, marked released (``sweep.left_on_release``): this cluster's to release once the
        #: grace is over, also once that home is gone (its namespace deleted), when it would look another cluster's
        self._released_here: dict[Any, dict[str, tuple[NetBoxPool, Home]]] = {}
        #: the address (its IP) of each key a release here left so: what a pool being deleted says it waits for
        #: while NetBox does not list it
        self._left_addresses: dict[str, str] = {}
        self._released_sweeps: dict[Any, Sweep] = {}  # per NetBox server: the sightings of those
        #: (server, key) -> the count of releases that left addresses when that key's was: a sweep whose listing began
        #: before (``_releases`` then) does not forget it for what it listed
        self._released_at: dict[tuple[Any, str], int] = {}
        self._releases = 0
        #: per NetBox server, (key, the home that took it) of each address a copy took from a claim here
        #: (``sweep.copies_took``), while NetBox says so: never given, wherever that claim moves
        self._copy_takes: dict[Any, set[tuple[str, Home]]] = {}

    # -- what is NetBox's ---------------------------------------------------------------

    def read_model(self, pool_obj: Mapping[str, Any]) -> NetBoxPool | None:
        return read_pool(pool_obj)[0]

    def secret_of(self, model: NetBoxPool) -> str | None:
        return model.token.name

    def left_seconds(self) -> float:
        return self.release_grace_seconds + 2 * self.sweep_seconds  # the grace from its mark, then two sightings

    def server_of(self, model: NetBoxPool) -> Hashable:
        return model.server

    def key_of(self, obj: Mapping[str, Any]) -> str | None:
        return claim_key(obj)[0]

    def status_of(self, model: NetBoxPool, survey: Survey, *, now: str, previous: Mapping[str, Any] | None) -> dict:
        return pool_status(model, survey, now=now, previous=previous)

    def send(self, ask: Ask, deliver: Callable[[Answer], None]) -> None:
        self.asks.send([ask], deliver, self._describe, self._left_on_release)

    def answered(self, pool_key: Any, answer: Answer) -> None:
        metrics.EXTERNAL_IPAM_UP.labels(*metrics.pool_labels(pool_key)).set(
            0 if getattr(answer, "server_down", False) else 1)

    def surveyed(self, pool_key: Any, survey: Survey) -> None:
        metrics.EXTERNAL_IPAM_UP.labels(*metrics.pool_labels(pool_key)).set(
            0 if survey.reason in SERVER_DOWN_REASONS else 1)

    # -- claims carrying a key ----------------------------------------------------------

    def _carriers(self, key: str) -> list[dict]:
        """The live claims here carrying ``key``, but copies of a claim seen leave for ``clusterctl move`` with
        it (refused: the key's address is that claim's in the move's target)."""
        left = self.inventory.moved_away.get(key)
        return [c for c in self.inventory.claims_carrying(key) if not o.is_deleting(c) and left_with(left, c) is None]

    def _description(self, claim: dict) -> str:
        namespace, pool = o.namespace(claim), o.pool_of(claim)
        cluster = o.cluster_name_of(claim)
        return description(home_of(claim, self.inventory.get(kinds.CLUSTER, namespace, cluster) if cluster else None,
                                   self.inventory.get(NETBOX_IP_POOL, namespace, pool.name) if pool else None), claim)

    def _describe(self, key: str) -> str | None:
        """The description of the address allocated for ``key``: its claim and home (``sweep``). A key
        copied onto other claims (refused) is the one's that the passes give it to."""
        claims = self._carriers(key)
        if not claims:
            return None
        return self._description(first_carrier(claims, lambda c: bool((o.status(c) or {}).get("addressRef"))))

    def _left_on_release(self, key: str, text: str, address: str | None = None) -> str | None:
        """The description a release of ``key`` here leaves its address (``address``, described ``text``) with, or
        None: it is deleted (``sweep.left_on_release``). Left as it is when it is another cluster's claim's too: that
        cluster took it over (``from=``: homed at an object not here), or holds it (``held=``/``live-held=`` an
        object not here); taken over marked released when homed at another cluster's object that nobody took
        over yet (a claim there may carry the key). Where it is this cluster's to release (homed at the released
        claim's home, marked released), it is remembered, its mark names the claim's pool (``released-by=``) so
        that it is found again in NetBox after a restart (``_find_released_here``), and an awaitable of that
        description is given instead: the pool's Secret is held first (:meth:`_held_first`)."""
        claims = sorted(self.inventory.claims_carrying(key), key=lambda c: not o.is_deleting(c))
        released = self._description(claims[0]) if claims else None
        left = left_on_release(text, released, home_state(self._homes()), self.wall())
        at, ref = home_in(released), o.pool_of(claims[0]) if claims else None
        pool_obj = self.inventory.get(NETBOX_IP_POOL, o.namespace(claims[0]), ref.name) if ref is not None else None
        model = self.read_model(pool_obj) if pool_obj is not None else None
        if left is not None and at is not None and home_in(left) == at and swept_at(left) is not None and model:
            self._released_here.setdefault(model.server, {})[key] = (model, at)
            self._left_addresses[key] = (address or key).partition("/")[0]
            if uid := o.meta(pool_obj).get("uid"):
                left = with_released_by(left, str(uid))
            self._releases += 1
            self._released_at[(model.server, key)] = self._releases
            return self._held_first(model, left)
        return left

    async def _held_first(self, model: NetBoxPool, left: str) -> str:
        """``left``, once the pool's Secret is held for what the release leaves (``OutsidePools.hold_left``), before
        NetBox is told; raises SecretNotHeld where it cannot be (the release is refused, and asked again)."""
        if not await self.hold_left((model.namespace, model.name), self.secret_of(model)):
            raise SecretNotHeld(f"Secret {model.namespace}/{model.token.name}: finalizer {SECRET_FINALIZER} neither "
                                f"put on nor recorded in Lease {HELD_SECRETS_RECORD}; the release is asked again")
        return left

    def _holder(self, home: Callable[[Home], str]) -> Callable[[str], str | None]:
        """For ``sweep.hold``: the description of a claim here carrying the key whose home is paused (any
        such claim holds the address, whichever claim the key is given to), else ``_describe``'s."""
        def holder(key: str) -> str | None:
            for claim in self._carriers(key):
                text = self._description(claim)
                if (at := home_in(text)) is not None and home(at) == PAUSED:
                    return text
            return self._describe(key)
        return holder

    # -- sweeps -------------------------------------------------------------------------

    def _forget_released_here(self, server: Any, found: list[Found], listing: int) -> None:
        """The addresses a release here left on ``server`` that are no longer so (released, taken back) forgotten,
        as NetBox lists them (``found``: all of this owner's, listed after ``listing`` releases had left addresses:
        one a later release left may be listed as it was before)."""
        remembered = self._released_here.get(server, {})
        listed = {item.key: item for item in found}
        for key, (_, at) in list(remembered.items()):
            if self._released_at.get((server, key), 0) > listing:
                continue
            item = listed.get(key)
            if item is None or home_in(item.description) != at or swept_at(item.description) is None:
                del remembered[key]
                self._released_at.pop((server, key), None)
        if not remembered:
            self._released_here.pop(server, None)

    def _copies_took(self, server: Any, found: list[Found], home: Callable[[Home], str],
                     left_from: Callable[[str], Iterable[str]]) -> set[tuple[str, Home]]:
        """The takes of ``server``'s addresses a copy made (``sweep.copies_took``), as seen by this sweep or an earlier
        one and still so in NetBox (homed at that home, taken unasked)."""
        listed = {item.key: item.description for item in found}
        seen = {(key, there) for key, there in self._copy_takes.get(server, set())
                if home_in(listed.get(key)) == there and (taken := took(listed[key])) is not None and not taken[1]}
        seen.update(copies_took(found, self._describe, home, left_from))
        if seen:
            self._copy_takes[server] = seen
        else:
            self._copy_takes.pop(server, None)
        return seen

    def _left_here(self, server: Any, found: list[Found], home: Callable[[Home], str]) -> list[Found]:
        """Those of ``found`` a release here left on ``server`` homed at the released claim's home, marked
        released, that home gone since (the namespace deleted)."""
        remembered = self._released_here.get(server, {})
        return [item for item in found if (entry := remembered.get(item.key)) is not None
                and home_in(item.description) == entry[1] and home(entry[1]) == ABSENT]

    def _home_left(self, server: Any, home: Callable[[Home], str]) -> Callable[[Home], str]:
        """``home`` where the homes of the claims released here that left addresses on ``server`` are here still."""
        ours = {at for _, at in self._released_here.get(server, {}).values()}
        return lambda h: PRESENT if h in ours else home(h)

    async def sweep(self) -> list[Found]:
        """Each NetBox server of the pools held swept once (``sweep``), and each a release here left an address
        on whose pool is gone (with that pool's client); the addresses released."""
        servers: dict[Any, list[NetBoxPool]] = {}  # per server: the pools whose tokens may sweep it, in turn
        pools: dict[Any, list[tuple[NetBoxPool, Any]]] = {}  # per server: each pool held here, with its uid
        for pool_key in self.inventory.pool_keys():
            pool_obj = self.inventory.get(NETBOX_IP_POOL, pool_key.namespace, pool_key.name) \
                if pool_key.kind == NETBOX_IP_POOL else None
            model = self.read_model(pool_obj) if pool_obj is not None else None
            if model is not None:
                pools.setdefault(model.server, []).append((model, o.meta(pool_obj).get("uid")))
                tokens = servers.setdefault(model.server, [])
                # A live pool's token first; a pool being deleted's after (its Secret may be going).
                tokens.insert(sum(1 for m in tokens if not self._deleting(m)) if not o.is_deleting(pool_obj)
                              else len(tokens), model)
        for server, remembered in self._released_here.items():
            if server not in servers and remembered:
                servers[server] = [next(iter(remembered.values()))[0]]
        released: list[Found] = []
        for server, models in servers.items():
            swept = await self._swept(server, models, pools.get(server, ()))
            released.extend(swept)
        return released

    async def _swept(self, server: Any, models: list[NetBoxPool], pools: Iterable[tuple[NetBoxPool, Any]]
                     ) -> list[Found]:
        """``server`` swept with the token of the first of ``models`` that can be read (another pool's Secret
        missing holds no pool of that server back); the addresses released. Where none can be, a pool being
        deleted whose own token is not there (its Secret gone unheld, or never made: nothing of its claims was
        kept for it) is judged from what this process found, not held for good."""
        unavailable: list[tuple[NetBoxPool, TokenUnavailable]] = []
        for model in models:
            try:
                return await self._sweep_server(server, model, list(pools))
            except TokenUnavailable as exc:
                log.warning("sweep of NetBox at %s (with the token of NetBoxIPPool %s/%s): %s",
                            server.url, model.namespace, model.name, exc)
                unavailable.append((model, exc))
            except (NetBoxError, TimeoutError) as exc:
                log.warning("sweep of NetBox at %s (with the token of NetBoxIPPool %s/%s): %s",
                            server.url, model.namespace, model.name, exc)
                if not (isinstance(exc, NetBoxError) and exc.reason is Reason.TOKEN_REFUSED):
                    break  # NetBox itself failed: no other token does better now
        # Not swept: a pool being deleted is judged from what this process found, where nothing says more was left
        # (its token not there; or its Secret, which our finalizer holds while what its claims left waits, not held
        # nor recorded held for it): a NetBox that never answers, or a Secret never made, holds it for good else.
        deleting = [(m, uid) for m, uid in pools if self._deleting(m)]
        if deleting:
            for_good = {(m.namespace, m.name) for m, exc in unavailable if not exc.passing}
            held = await self.secrets_held()
            # Those this process remembers addresses of are judged waiting for them (held, saying what for).
            self._judge(server, [(m, uid) for m, uid in deleting if (m.namespace, m.name) in for_good
                                 or not held(m.namespace, m.token.name, uid)
                                 or self.remembers_left((m.namespace, m.name), uid)], {}, set())
        return []

    async def _sweep_server(self, server: Any, model: NetBoxPool, pools: list[tuple[NetBoxPool, Any]]
                            ) -> list[Found]:
        """One sweep of ``server`` with ``model``'s token (see :meth:`sweep`); raises what the asks' sweep does."""
        judge = self._sweeps.setdefault(server, Sweep(grace=self.sweep_seconds * 0.9))
        judge_left = self._released_sweeps.setdefault(server, Sweep(grace=self.sweep_seconds * 0.9))
        listing = self._releases  # the releases that left addresses before NetBox is listed

        def choose(found: list[Found], judge: Sweep = judge, judge_left: Sweep = judge_left, server: Any = server
                   ) -> tuple[list[Found], list[tuple[Found, str]]]:
            home = home_state(self._homes())
            listed_keys.update(item.key for item in found)
            self._remember_moved_away(found, home)
            self._find_released_here(server, found, home, pools)
            addresses.update((item.key, item.address) for item in found)
            shared.update(item.key for item in found if self._shared(item, home))
            moved_away = self.inventory.moved_away.__contains__
            judged = judge.judge(found, carried=self.carried(), home=home, now=self.clock())
            release, marks = settle(judged, self.wall(), self.release_grace_seconds)
            # Left by a release here, their home gone since: this cluster's still, released past the grace.
            self._forget_released_here(server, found, listing)
            left = judge_left.judge(self._left_here(server, found, home), carried=self.carried(),
                                    home=self._home_left(server, home), now=self.clock())
            release += [item for item in settle(left, self.wall(), self.release_grace_seconds)[0]
                        if item not in release]
            marked = {item.id for item, _ in marks}
            left_from = lambda key: self.inventory.moved_away_from.get(key, ())  # noqa: E731
            copy_took = self._copies_took(server, found, home, left_from)
            described = describe_anew([item for item in found if item.id not in marked], self._describe,
                                      moved_away, home, holder=self._holder(home), left_from=left_from,
                                      copy_took=lambda key, there: (key, there) in copy_took,
                                      confirmed_at=self.wall() + self.sweep_seconds)
            contests.extend(contested(found, self._describe, home))
            return release, marks + described

        def still(item: Found, server: Any = server) -> bool:  # looked at again just before its delete
            home = home_state(self._homes())
            mine = bool(self._left_here(server, [item], home))
            return unclaimed_here(item, self.carried(), self._home_left(server, home) if mine else home)
        contests: list[tuple[Found, Home]] = []
        listed_keys: set[str] = set()
        addresses: dict[str, str] = {}
        shared: set[str] = set()
        listed, done, described = await self.asks.sweep(
            model, choose, still, **({"lingering": True} if self._deleting(model) else {}))
        for item in done:
            log.info("NetBox at %s: released %s (key %s, %s): no claim carries its key", server.url,
                     item.address, item.key, item.description)
        counts = Counter(_change(item, text) for item, text in described)
        for item, text in described:
            log.info("NetBox at %s: %s (key %s) %s", server.url, item.address, item.key,
                     _CHANGES[_change(item, text)])
        log.info("swept NetBox at %s: %d addresses of owner %s, %d released, %d marked released, %d taken back, "
                 "%d homed here, %d moved away, %d given to where they moved, %d held here, %d no longer held here",
                 server.url, listed,
                 self.asks.owner, len(done), counts["marked"], counts["taken"], counts["homed"], counts["moved"],
                 counts["given"], counts["held"], counts["unheld"])
        await self._tell(server, described, contests)
        self._homed_elsewhere(server, listed_keys, contests)
        self._judge(server, pools, addresses, shared)
        return done

    def remembers_left(self, ref: Any, uid: Any) -> bool:
        return any((pool.namespace, pool.name) == tuple(ref)
                   for remembered in self._released_here.values() for pool, _ in remembered.values())

    def _deleting(self, model: NetBoxPool) -> bool:
        """Whether the pool is being deleted (swept with the token last read if its Secret went)."""
        pool_obj = self.inventory.get(NETBOX_IP_POOL, model.namespace, model.name)
        return pool_obj is None or o.is_deleting(pool_obj)

    def _find_released_here(self, server: Any, found: list[Found], home: Callable[[Home], str],
                            pools: Iterable[tuple[NetBoxPool, Any]]) -> None:
        """The addresses a release here left marked released, found again in NetBox for a pool held here being
        deleted (its finalizer keeps it while they wait): those whose mark names that pool (``released-by=`` its
        uid, which no other cluster's pool has), whose key nothing here carries, homed where the release left them
        (its claim's home, here or gone since); and for a live pool, those of them taken over unasked (``from=``),
        as a release leaves them (``sweep.left_on_release``): its Secret held for them again. What a release here
        remembers (``_released_here``) is so found again after a restart. A mark naming no pool (a sweep's, or an
        earlier version's release) may be another cluster's, whose claim may be bound to the address still: it
        is not taken (left in NetBox rather than released under a live claim)."""
        carried = self.carried()
        remembered = self._released_here.setdefault(server, {})
        for model, uid in pools:
            pool_obj = self.inventory.get(NETBOX_IP_POOL, model.namespace, model.name)
            if pool_obj is None or not uid:
                continue
            for item in found:
                at = home_in(item.description)
                if at is not None and released_by(item.description) == str(uid) \
                        and (o.is_deleting(pool_obj) or ((taken := took(item.description)) is not None
                                                         and not taken[1])) \
                        and not carried(item.key) and item.key not in remembered:
                    remembered[item.key] = (model, at)

    def _shared(self, item: Found, home: Callable[[Home], str]) -> bool:
        """Whether an address a claim here carries the key of is marked by another cluster too (homed at, or taken
        over from, an object not here): its release may leave it for that cluster to answer."""
        if all(o.is_deleting(claim) for claim in self.inventory.claims_carrying(item.key)):
            return False  # no live claim here carries its key
        at, taken = home_in(item.description), taken_from(item.description)
        return (at is not None and home(at) == ABSENT) or (taken is not None and home(taken) == ABSENT)

    def _judge(self, server: Any, pools: Iterable[tuple[NetBoxPool, Any]], addresses: Mapping[str, str],
               shared: set[str]) -> None:
        """What the claims of each pool of ``server`` left (``OutsidePools.judge``): the addresses released here
        that wait for the grace, and those of its live claims another cluster marks too."""
        remembered = self._released_here.get(server, {})
        for key in [k for k in self._left_addresses if not any(k in r for r in self._released_here.values())]:
            del self._left_addresses[key]
        for model, uid in pools:
            mine = (model.namespace, model.name)
            waiting = tuple(sorted(addresses.get(key) or self._left_addresses.get(key, key)
                                   for key, (pool, _) in remembered.items() if (pool.namespace, pool.name) == mine))
            ours = sum(1 for key in shared for claim in self.inventory.claims_carrying(key)[:1]
                       if o.namespace(claim) == model.namespace and (ref := o.pool_of(claim)) is not None
                       and ref.name == model.name)
            self.judge(mine, Left(uid, waiting, ours, model.token.name))

    def _remember_moved_away(self, found: list[Found], home: Callable[[Home], str]) -> None:
        """The claims NetBox says left an object here for ``clusterctl move`` (``moved-from=``, written by this
        controller or one before a restart), remembered as if seen leave: a copy of such a claim's key is refused
        here (its address is that claim's in the target), also after a restart."""
        for item in found:
            left, named = moved_from(item.description), claim_in(item.description)
            if left is None or named is None or home_in(item.description) is not None or home(left) == ABSENT \
                    or item.key in self.inventory.moved_away:
                continue
            self.inventory.remember_moved_away(item.key, named, [left.uid])
            self.wake_carriers(item.key, item.key)

    def _homed_elsewhere(self, server: Any, listed: set[str], contests: list[tuple[Found, Home]]) -> None:
        """What the claims carrying the keys of this server's contested addresses say (a condition, ``core.reconcile``);
        the pools of those whose saying changed are passed over again."""
        now = {item.key: (f"NetBox at {server.url}: address {item.address} of this claim's key is homed at "
                          f"{there.kind}:{there.uid}, an object of another cluster, where a claim carries the key "
                          f"too ({item.description!r}); both hold one IP: delete one of the two claims")
               for item, there in contests}
        gone = {key for key in self.inventory.homed_elsewhere if not self.inventory.claims_carrying(key)}
        changed = {key for key in listed | gone if self.inventory.homed_elsewhere.get(key) != now.get(key)}
        for key in changed:
            if key in now:
                self.inventory.homed_elsewhere[key] = now[key]
            else:
                self.inventory.homed_elsewhere.pop(key, None)
            self.wake_carriers(key, None)

    async def _tell(self, server: Any, described: list[tuple[Found, str]], contests: list[tuple[Found, Home]]
                    ) -> None:
        """Warning Events on the claims here whose key's address a sweep took back from a mark of release, took
        over from another cluster's home, or leaves homed at another cluster's object (each once)."""
        said: list[tuple[dict, str, str]] = []
        for item, text in described:
            change, claims = _change(item, text), self._carriers(item.key)
            if not claims or change not in ("taken", "homed"):
                continue
            if change == "taken":
                said.append((claims[0], "NetBoxAddressTakenBack",
                             f"NetBox at {server.url}: address {item.address} (key {item.key}) was marked released "
                             f"by a sweep ({item.description!r}); a claim here carries its key, so it is this "
                             "claim's again"))
            elif (before := home_in(item.description)) is not None and taken_from(text) == before:
                said.append((claims[0], "NetBoxAddressTakenOver",
                             f"NetBox at {server.url}: address {item.address} (key {item.key}) was homed at "
                             f"{before.kind}:{before.uid}, an object of another cluster ({item.description!r}); "
                             "homed here now. If a claim there still carries the key, both hold one IP"))
        for item, there in contests:
            claims = self._carriers(item.key)
            if not claims or (item.key, there) in self._told:
                continue
            self._told.add((item.key, there))
            said.append((claims[0], "NetBoxAddressHomedElsewhere",
                         f"NetBox at {server.url}: address {item.address} (key {item.key}) is homed at "
                         f"{there.kind}:{there.uid}, an object of another cluster ({item.description!r}): a claim "
                         "there carries this key too (a copy of this claim, restored from a directory while its "
                         "source runs?). Both hold one IP; delete one of the two claims"))
        for claim, reason, message in said:
            log.warning("%s %s/%s: %s", reason, o.namespace(claim), o.name(claim), message)
            pool = o.pool_of(claim)
            plan = Plan()
            plan.step(f"claim {o.namespace(claim)}/{o.name(claim)}", about=o.ref(claim)).add(
                Event(o.ref(claim), "Warning", reason, message[:1000]))
            try:
                await self.writer.execute(plan, o.PoolKey(o.namespace(claim), pool.name if pool else "",
                                                          NETBOX_IP_POOL))
            except Exception:  # an Event lost is no reason to end the sweeps
                log.exception("claim %s/%s: Event %s not written", o.namespace(claim), o.name(claim), reason)

    def _homes(self) -> Iterable[tuple[str, dict]]:
        for kind in (kinds.CLUSTER, NETBOX_IP_POOL):
            for obj in self.inventory.of_kind(kind):
                yield kind[1], obj
