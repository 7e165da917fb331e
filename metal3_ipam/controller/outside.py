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
* the kind's sweep (:meth:`OutsidePools.sweep`) runs every ``sweep_seconds``;
* a pool whose claims left addresses outside for another cluster to answer (a
  release that could not tell whether a claim there is bound to it) keeps its
  finalizer while they are not judged (:class:`Left`, filed by the kind's sweep
  with :meth:`OutsidePools.judge`): deleted, it stays Terminating, saying what it
  waits for, and the sweeps judge those addresses from its spec and its Secret as
  they are then. A pool being deleted that no sweep of this process judged yet is
  held too, and swept soon (a restart forgets nothing: the marks are outside).
  While a pool has such addresses, or addresses of live claims that another
  cluster marks too (whose release may leave them), the Secret of its
  credentials carries :attr:`OutsidePools.secret_finalizer`, so a namespace
  deleted whole keeps it until they are judged; it comes off once no pool of the
  namespace needs it, also when a pool went past its finalizers or while no
  controller ran: each Secret held is recorded first (:class:`SecretHolds`), and
  every sweep lets go what the record lists that no stored pool names. A release
  that leaves an address outside holds the Secret itself, before the address is
  marked (or, where the kind learns it only from the mark, right after), and is
  refused (asked again) where not even the record could be written
  (:meth:`OutsidePools.hold_left`): so a Secret neither held nor recorded held means
  that nothing was left, whatever restart or deletion follows the release. The
  record says for which pools (by uid) each Secret is held, so that a pool being
  deleted whose IPAM never answers is not held by what another pool's claims left.

Nothing is sent, surveyed or swept while ``may_act()`` is false (not the
leader, or before the catch-up).
"""

from __future__ import annotations

import asyncio
import dataclasses
import functools
import json
import logging
import time
from collections.abc import Awaitable, Hashable, Mapping
from typing import Any, Callable, Iterable

from kubernetes.client.rest import ApiException

from metal3_ipam.controller.api import request
from metal3_ipam.controller.workers import utc_now
from metal3_ipam.core import kinds
from metal3_ipam.core import objects as o
from metal3_ipam.core.actions import Plan, SetStatus
from metal3_ipam.core.reconcile.conditions import READY, _condition
from metal3_ipam.core.asking import Answer, Ask, Intent

log = logging.getLogger(__name__)

PoolRef = tuple[str, str]  # namespace, name


@dataclasses.dataclass(frozen=True)
class Left:
    """What a pool's claims left outside, as its kind's sweep found it: ``waiting``, the addresses left for another
    cluster to answer (released by the sweep unless answered), each with its address; ``shared``, how many
    addresses of its live claims another cluster marks too (a release may leave them so); ``secret``, the Secret
    of its credentials (in its namespace), or None."""

    uid: Any
    waiting: tuple[str, ...] = ()
    shared: int = 0
    secret: str | None = None


#: The Lease (in the controller's lock namespace) that records which Secrets carry our finalizers: an annotation
#: named after each finalizer lists them (a JSON list of "namespace/name"), and for which pools each is held
#: ("namespace/name/<pool uid>", "namespace/name/*" for any pool, "namespace/name/-" once pools are listed; earlier
#: versions read only "namespace/name"). It outlives the pools that needed them, so a Secret is let go even when its
#: pool went without its finalizer or while no controller ran.
HELD_SECRETS_RECORD = "metal3-ipam-held-secrets"

#: The pool entry of a Secret held for any pool (the pool a release left for not known, or a Secret recorded by an
#: earlier version, which recorded no pools, given pool entries since).
ANY_POOL = "*"
#: The pool entry that says this version keeps the Secret's pool entries (so that none left listed reads as held for
#: no pool, not as a record an earlier version wrote, held for any).
NO_POOL = "-"

Entry = tuple[str, ...]  # (namespace, Secret): the Secret held; (namespace, Secret, pool uid): held for that pool


def held_for(entries: Iterable[Entry], secret: tuple[str, str], uid: Any) -> bool:
    """Whether the record's ``entries`` say that ``secret`` may be held for the pool ``uid``: it is recorded held, and
    lists no pools (recorded by an earlier version: any), or lists that pool or any."""
    entries = set(entries)
    if secret not in entries:
        return False
    pools = {entry[2] for entry in entries if len(entry) == 3 and entry[:2] == secret}
    return not pools or ANY_POOL in pools or not uid or str(uid) in pools - {NO_POOL}


def with_pool(entries: set[Entry], secret: tuple[str, str], pool: str, needed: bool) -> set[Entry]:
    """The record's ``entries`` with ``secret`` recorded held for the pool of uid ``pool`` (``needed``) or not. A
    Secret recorded with no pools (by an earlier version) is held for any pool from then on; one given pool entries
    lists :data:`NO_POOL` too, so that it reads as held for no pool once none is left."""
    entry = (*secret, pool)
    if not needed:
        return entries - {entry}
    if secret in entries and not any(len(e) == 3 and e[:2] == secret for e in entries):
        entries = entries | {(*secret, ANY_POOL)}
    return entries | {entry, (*secret, NO_POOL)}


class SecretNotHeld(Exception):
    """The Secret of a pool's credentials could be neither held nor recorded held for what a release leaves outside
    (:meth:`OutsidePools.hold_left`): the release is refused, and asked again."""

    reason = "SecretNotHeld"


class SecretHolds:
    """Our finalizer on the Secrets of pools' credentials, put on and taken off with a Kubernetes ``ApiClient``
    (a conditional patch at the resourceVersion read), each Secret held recorded first in the Lease
    :data:`HELD_SECRETS_RECORD` of ``record_namespace()`` (no record: none), and struck off once let go."""

    def __init__(self, api_client: Any, record_namespace: Callable[[], str] = lambda: ""):
        self._api = api_client
        self._record_namespace = record_namespace

    def _record_path(self) -> str | None:
        namespace = self._record_namespace()
        return f"/apis/coordination.k8s.io/v1/namespaces/{namespace}/leases/{HELD_SECRETS_RECORD}" \
            if namespace else None

    async def recorded(self, finalizer: str) -> set[tuple[str, str]] | None:
        """The Secrets recorded as carrying ``finalizer``: (namespace, name); None when the record could not be read
        (not known: never taken for a record that lists nothing)."""
        entries = await self.entries(finalizer)
        return None if entries is None else {(entry[0], entry[1]) for entry in entries if len(entry) == 2}

    async def entries(self, finalizer: str) -> set[Entry] | None:
        """What the record lists under ``finalizer``: (namespace, name) for each Secret held, (namespace, name, pool
        uid) for each pool it is held for; None when the record could not be read."""
        path = self._record_path()
        if path is None:
            return set()
        try:
            lease = await asyncio.to_thread(request, self._api, "GET", path, timeout=10)
        except ApiException as exc:
            if exc.status == 404:
                return set()
            log.warning("Lease %s: not read: %s %s", HELD_SECRETS_RECORD, exc.status, exc.reason)
            return None
        except Exception as exc:  # noqa: BLE001 - the API server unreachable or slow: not known
            log.warning("Lease %s: not read: %s", HELD_SECRETS_RECORD, exc)
            return None
        return _held_in(lease, finalizer)

    async def _record(self, namespace: str, name: str, finalizer: str, held: bool) -> bool:
        """The record lists the Secret (``held``) or not (nor any pool it was held for); False when it could not be
        written."""
        secret = (namespace, name)
        return await self._rewrite(finalizer, lambda listed: listed | {secret} if held else
                                   {entry for entry in listed if entry[:2] != secret},
                                   f"Secret {namespace}/{name} not {'recorded' if held else 'struck off'}")

    async def hold_for(self, namespace: str, name: str, finalizer: str, pool: str, needed: bool) -> bool:
        """The record lists the Secret held for the pool of uid ``pool`` (``needed``) or not; False when it could not
        be written. A Secret recorded with no pools (by an earlier version) is held for any pool from then on."""
        return await self._rewrite(finalizer, lambda listed: with_pool(listed, (namespace, name), pool, needed),
                                   f"Secret {namespace}/{name} {'not recorded' if needed else 'not struck off'} "
                                   f"for pool {pool}")

    async def _rewrite(self, finalizer: str, change: Callable[[set[Entry]], set[Entry]], failed: str) -> bool:
        """The record's entries under ``finalizer`` changed by ``change`` (written only where that changes them);
        False when it could not be written."""
        path = self._record_path()
        if path is None:
            return True
        for _ in range(5):  # a conflict (another kind wrote the record meanwhile): read again
            try:
                try:
                    lease = await asyncio.to_thread(request, self._api, "GET", path, timeout=10)
                except ApiException as exc:
                    if exc.status != 404:
                        raise
                    lease = None
                # A record that cannot be read is written anew (what it listed is lost: those Secrets keep our
                # finalizer until this controller settles them or it is removed by hand).
                listed = (_held_in(lease, finalizer) if lease is not None else None) or set()
                wanted = change(listed)
                if wanted == listed:
                    return True
                value = json.dumps(sorted("/".join(entry) for entry in wanted))
                if lease is None:
                    lease_namespace = path.split("/")[5]
                    body = {"apiVersion": "coordination.k8s.io/v1", "kind": "Lease", "spec": {},
                            "metadata": {"name": HELD_SECRETS_RECORD, "namespace": lease_namespace,
                                         "annotations": {finalizer: value}}}
                    await asyncio.to_thread(request, self._api, "POST", path.rsplit("/", 1)[0], body=body,
                                            timeout=10)
                else:
                    body = {"metadata": {"annotations": {finalizer: value},
                                         "resourceVersion": (lease.get("metadata") or {}).get("resourceVersion")}}
                    await asyncio.to_thread(request, self._api, "PATCH", path, body=body,
                                            headers={"Accept": "application/json",
                                                     "Content-Type": "application/merge-patch+json"}, timeout=10)
                return True
            except ApiException as exc:
                if exc.status == 409:
                    continue
                log.warning("Lease %s: %s: %s %s", HELD_SECRETS_RECORD, failed, exc.status, exc.reason)
                return False
        return False

    async def hold(self, namespace: str, name: str, finalizer: str, held: bool) -> bool:
        """The Secret carries ``finalizer`` (``held``) or not; False when it could not be written (the API
        refused, or it is gone while it should be held). A Secret being deleted gets no new finalizer (the API
        server refuses it): it is held only if it carries ours already. A Secret is recorded before it is held,
        and struck off the record once it is not."""
        if held and not await self._record(namespace, name, finalizer, True):
            return False
        done = await self._finalizer(namespace, name, finalizer, held)
        if done and not held:
            return await self._record(namespace, name, finalizer, False)
        return done

    async def _finalizer(self, namespace: str, name: str, finalizer: str, held: bool) -> bool:
        path = f"/api/v1/namespaces/{namespace}/secrets/{name}"
        try:
            secret = await asyncio.to_thread(request, self._api, "GET", path, timeout=10)
        except ApiException as exc:
            return exc.status == 404 and not held
        metadata = secret.get("metadata") or {}
        finalizers = list(metadata.get("finalizers") or [])
        if (finalizer in finalizers) == held:
            return True
        if held and metadata.get("deletionTimestamp"):
            return False
        wanted = [*finalizers, finalizer] if held else [f for f in finalizers if f != finalizer]
        body = {"metadata": {"finalizers": wanted, "resourceVersion": metadata.get("resourceVersion")}}
        try:
            await asyncio.to_thread(request, self._api, "PATCH", path, body=body,
                                    headers={"Accept": "application/json",
                                             "Content-Type": "application/merge-patch+json"}, timeout=10)
        except ApiException as exc:
            log.warning("Secret %s/%s: finalizer %s not %s: %s %s", namespace, name, finalizer,
                        "put on" if held else "taken off", exc.status, exc.reason)
            return exc.status == 404 and not held
        log.info("Secret %s/%s: finalizer %s %s", namespace, name, finalizer, "put on" if held else "taken off")
        return True


def _held_in(lease: Mapping[str, Any], finalizer: str) -> set[Entry] | None:
    """The entries the record lists under ``finalizer`` (see :data:`HELD_SECRETS_RECORD`); None when its annotation
    is not a JSON list (edited by hand, cut short): not known, never taken for a record that lists nothing."""
    try:
        listed = json.loads(((lease.get("metadata") or {}).get("annotations") or {}).get(finalizer) or "[]")
    except ValueError:
        listed = None
    if not isinstance(listed, list):
        log.warning("Lease %s: annotation %s is not a JSON list of namespace/name", HELD_SECRETS_RECORD, finalizer)
        return None
    return {tuple(item.split("/")) for item in listed if isinstance(item, str) and item.count("/") in (1, 2)}


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
    #: The finalizer a pool's Secret carries while what its claims left outside is not judged (see the module's
    #: docstring); None: the kind's sweep judges nothing of the sort (:meth:`judge` is never called).
    secret_finalizer: str | None = None
    #: What the addresses are called, in a pool's status (plural).
    addresses_called = "addresses"

    def __init__(self, asks: Any, asking: Any, *, inventory: Any, writer: Any,
                 wake: Callable[[Any, str | None], None], may_act: Callable[[], bool] = lambda: True,
                 survey_seconds: float = 60.0, sweep_seconds: float = 300.0,
                 clock: Callable[[], float] = time.monotonic, secret_holds: Any = None):
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
        self._sweep_soon: asyncio.Task | None = None
        #: the settling of the Secrets a pool that went named (see :meth:`pool_gone`)
        self.settling: asyncio.Task | None = None
        self._sweeping = asyncio.Lock()
        #: each pool's judgement by the last sweep that judged it (see :meth:`judge`)
        self.left: dict[PoolRef, Left] = {}
        self._judgements: dict[PoolRef, Left] = {}
        self._waiting_since: dict[PoolRef, dict[str, float]] = {}  # pool -> address waiting -> first found so
        self.secret_holds = secret_holds  # SecretHolds (None: no Secret is held)
        self._secrets_held: dict[tuple[str, str], bool] = {}  # (namespace, Secret) -> held, as last written
        #: the Secrets a release held since the settling under way began (see :meth:`hold_left`), with the pools (uid)
        #: held for: not let go by it
        self._held_by_releases: dict[tuple[str, str], set[str]] = {}
        if asking is not None:
            asking.judges_pools = self.secret_finalizer is not None

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
        tasks = [t for t in (self._loop_task, self._sweep_task, self._sweep_soon, self.settling,
                             *self._surveying.values())
                 if t is not None]
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
        if pool_obj is None and self.secret_finalizer is not None and \
                (self._judgements.pop(ref, None) is not None) | (self.left.pop(ref, None) is not None):
            if self.secret_holds is not None and self.may_act():
                self.settle_soon()  # the pool went before its claims: the Secret it named is judged again now
        if pool_obj is not None and o.is_deleting(pool_obj) and self.secret_finalizer is not None \
                and ref not in self._judgements and self.may_act():
            self.sweep_soon()  # a pool being deleted no sweep judged yet: judged now, not a sweep period later

    def pool_gone(self, pool_key: Any) -> None:
        """The pool and everything filed under it are gone: surveyed afresh should it come back. (Its
        server stays known to the asks: a release still out for one of its keys may still need it.)"""
        ref = (pool_key.namespace, pool_key.name)
        self._seen.pop(ref, None)
        self.left.pop(ref, None)
        self._judgements.pop(ref, None)
        self._waiting_since.pop(ref, None)
        self.answers.unjudged(ref)
        if self.secret_finalizer is not None and self.secret_holds is not None and self.may_act():
            self.settle_soon()  # however the pool went, the Secret it named is let go unless another pool needs it

    def settle_soon(self) -> None:
        """The Secrets held settled now, with what the last sweeps judged (one at a time, with the sweeps)."""
        if self.settling is None or self.settling.done():
            self.settling = asyncio.create_task(self._alone(self.settle, "Secrets not settled"),
                                                name=f"{self.label} Secrets settled")

    async def _alone(self, work: Callable[[], Awaitable[Any]], failed: str) -> Any:
        """``work()`` with no other sweep or settling beside it; None, logged, where it failed (a bug of ours must
        not end the sweeps)."""
        async with self._sweeping:
            try:
                return await work()
            except asyncio.CancelledError:
                raise
            except Exception:
                log.exception("%s: %s", self.label, failed)
                return None

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
                await self.swept()

    def sweep_soon(self) -> None:
        """A sweep now (one at a time; one asked for while one is running waits for it)."""
        if self._sweep_soon is None or self._sweep_soon.done():
            self._sweep_soon = asyncio.create_task(self.swept(), name=f"{self.label} sweep soon")

    async def swept(self) -> list:
        """One sweep (:meth:`sweep`), then what it judged of the pools settled (:meth:`settle`); what it released."""
        async def sweep_and_settle() -> list:
            released = await self.sweep()
            self._judge_unreadable()
            await self.settle()
            return released
        return await self._alone(sweep_and_settle, "sweep failed") or []

    # -- what pools' claims left outside ------------------------------------------------

    def unjudge(self, ref: PoolRef) -> None:
        """A release of a claim of pool ``ref`` left an address outside: what was judged of the pool is stale, and
        the pool, being deleted, is held until a sweep judged it again."""
        self._judgements.pop(ref, None)
        self.answers.unjudged(ref)

    def _judge_unreadable(self) -> None:
        """The pools being deleted that cannot be read (a spec stored while the admission webhook was not serving,
        or under an earlier version's rules), which no sweep can judge: judged from what this process found."""
        for pool_key in self.inventory.pool_keys():
            ref = (pool_key.namespace, pool_key.name)
            pool_obj = self.inventory.get(self.pool_kind, *ref) if pool_key.kind == self.pool_kind else None
            if pool_obj is not None and o.is_deleting(pool_obj) and ref not in self._judgements \
                    and self.read_model(pool_obj) is None \
                    and not self.remembers_left(ref, uid := o.meta(pool_obj).get("uid")):
                self.judge(ref, Left(uid))

    async def hold_left(self, ref: PoolRef, secret: str | None) -> bool:
        """A release of a claim of pool ``ref`` leaves an address outside (for another cluster to answer, or for the
        sweeps here to release once unanswered): the pool is unjudged (:meth:`unjudge`), and the Secret of its
        credentials (``secret``, in its namespace) held by :attr:`secret_finalizer`, recorded first (for that pool),
        as part of the release, not at the next sweep: a Secret neither held nor recorded held for a pool means that
        nothing of its claims was left (:meth:`secrets_held`, and the kinds' sweeps, rely on it), also across a
        restart or a namespace deleted right after the release. False when not even the record could be written (the
        release is to be refused and asked again); a Secret gone or being deleted is recorded all the same."""
        self.unjudge(ref)
        if self.secret_finalizer is None or secret is None:
            return True
        key = (ref[0], secret)
        pool_obj = self.inventory.get(self.pool_kind, *ref)
        uid = str(o.meta(pool_obj).get("uid") or ANY_POOL) if pool_obj is not None else ANY_POOL
        self._held_by_releases.setdefault(key, set()).add(uid)
        # Written whatever this process last wrote: another leader may have let the Secret go since. Recorded for
        # the pool first: a Secret held with pools recorded is held for those only (see :meth:`secrets_held`).
        if self.secret_holds is None or (
                await self.secret_holds.hold_for(*key, self.secret_finalizer, uid, True)
                and await self.secret_holds.hold(*key, self.secret_finalizer, True)):
            self._secrets_held[key] = True
            return True
        try:
            entries = await self.secret_holds.entries(self.secret_finalizer)
        except Exception:  # not read: taken for not recorded
            log.exception("%s: the record of Secrets held not read", self.label)
            entries = None
        return entries is not None and held_for(entries, key, uid)

    def judge(self, ref: PoolRef, left: Left) -> None:
        """What the sweep found the claims of pool ``ref`` left outside (settled by :meth:`settle`)."""
        self._judgements[ref] = left

    def left_seconds(self) -> float:
        """How long from now an address left for another cluster to answer may wait, at most, before the sweeps
        release it: two sweeps (unless the kind says otherwise)."""
        return 2 * self.sweep_seconds

    def waiting_message(self, ref: PoolRef, left: Left) -> str | None:
        """What a pool being deleted says it waits for, or None. The time named is counted from when this process
        first found each address waiting, so it stays while nothing changes (a status not written anew at every
        sweep, a promise that does not move on while the outside IPAM does not answer)."""
        seen = self._waiting_since.setdefault(ref, {})
        for address in set(seen) - set(left.waiting):
            del seen[address]
        if not left.waiting:
            self._waiting_since.pop(ref, None)
            return None
        now = time.time()
        since = max(seen.setdefault(address, now) for address in left.waiting)
        at = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(since + self.left_seconds()))
        return (f"waits for {len(left.waiting)} {self.addresses_called} its claims left for another cluster to answer "
                f"({', '.join(sorted(left.waiting)[:5])}{', ...' if len(left.waiting) > 5 else ''}): released by the "
                f"sweeps by {at} unless a claim of that cluster answers for them (then that cluster's)")

    async def settle(self) -> None:
        """The judgements of the last sweep applied: each pool's Secret held while it (or another pool of its
        namespace naming it) needs it, else let go; each pool being deleted held while what its claims left
        waits (its status saying so), else let go (passed over again, its finalizer off)."""
        if self.secret_finalizer is None:
            return
        self._held_by_releases = {}
        needs: dict[tuple[str, str], bool] = {}
        pools_need: dict[tuple[tuple[str, str], str], bool] = {}  # (Secret, pool uid) -> needed by that pool
        for ref, left in self._judgements.items():
            pool_obj = self.inventory.get(self.pool_kind, *ref)
            if left.secret is not None and pool_obj is not None and o.meta(pool_obj).get("uid") == left.uid:
                key = (ref[0], left.secret)
                needs[key] = needs.get(key, False) or bool(left.waiting or left.shared)
                pools_need[(key, str(left.uid))] = bool(left.waiting or left.shared)
        # Secrets held (as written here, or as recorded, whatever process wrote it) that no pool judged needs: let
        # go, unless a stored pool not judged yet names them (below). A pool that went, even without its
        # finalizer or while no controller ran, holds nothing.
        # (Of the namespaces served only: another controller sharing the record may serve the others.)
        served = self.inventory.namespaces
        listed = set() if self.secret_holds is None else await self.secret_holds.entries(self.secret_finalizer)
        known = listed is not None  # not read: what only the record lists is let go at a later settling
        listed = {entry for entry in listed or () if served is None or entry[0] in served}
        recorded = {entry for entry in listed if len(entry) == 2}
        if known:
            await self._settle_pools(pools_need, listed)
        for key in recorded | {key for key, held in self._secrets_held.items() if held}:
            needs.setdefault(key, False)
        for pool_key in self.inventory.pool_keys():  # a pool not judged yet keeps what its Secret has
            if pool_key.kind == self.pool_kind and (pool_key.namespace, pool_key.name) not in self._judgements:
                pool_obj = self.inventory.get(self.pool_kind, pool_key.namespace, pool_key.name)
                model = self.read_model(pool_obj) if pool_obj is not None else None
                if model is not None and (secret := self.secret_of(model)) is not None:
                    needs.pop((pool_key.namespace, secret), None)
        failed: set[tuple[str, str]] = set()
        for (namespace, secret), held in needs.items():
            # As last written here, and as the record says (another leader may have written it since): done.
            if self._secrets_held.get((namespace, secret)) == held and \
                    (not known or ((namespace, secret) in recorded) == held):
                continue
            if not held and (namespace, secret) in self._held_by_releases:
                continue  # a release left an address meanwhile: judged again by the next sweep
            done = True if self.secret_holds is None else \
                await self.secret_holds.hold(namespace, secret, self.secret_finalizer, held)
            if not held and (namespace, secret) in self._held_by_releases:  # a release held it while it was let go
                held = True
                done = True if self.secret_holds is None else all(
                    [await self.secret_holds.hold_for(namespace, secret, self.secret_finalizer, uid, True)
                     for uid in sorted(self._held_by_releases[(namespace, secret)])]) and \
                    await self.secret_holds.hold(namespace, secret, self.secret_finalizer, True)
            if done:
                self._secrets_held[(namespace, secret)] = held
            else:
                failed.add((namespace, secret))
        for ref, left in list(self._judgements.items()):
            pool_obj = self.inventory.get(self.pool_kind, *ref)
            if pool_obj is None or o.meta(pool_obj).get("uid") != left.uid:
                continue
            message = self.waiting_message(ref, left)
            secret = (ref[0], left.secret) if left.secret is not None else None
            if message is None and secret is not None and not needs.get(secret) and \
                    (secret in failed or self._secrets_held.get(secret)):  # the pool's going would leave it held
                message = f"waits to take finalizer {self.secret_finalizer} off Secret {left.secret}"
            before = self.answers.held(ref, left.uid)
            self.answers.judged(ref, left.uid, message)
            self.left[ref] = left
            if not o.is_deleting(pool_obj):
                continue
            pool_key = o.PoolKey(ref[0], ref[1], self.pool_kind)
            if message is not None:
                await self._say_waiting(pool_key, pool_obj, message)
            if (before is None) != (message is None):
                self.wake(pool_key, None)

    async def _settle_pools(self, pools_need: dict[tuple[tuple[str, str], str], bool], listed: set[Entry]) -> None:
        """The pools each Secret is recorded held for (``listed``, as read) settled: each pool judged recorded
        while it needs its Secret, struck off once it does not, or is gone; never struck off where a release held
        the Secret for it since the settling began."""
        stored = set()
        for pool_key in self.inventory.pool_keys():
            pool_obj = self.inventory.get(self.pool_kind, pool_key.namespace, pool_key.name) \
                if pool_key.kind == self.pool_kind else None
            if pool_obj is not None:
                stored.add((pool_key.namespace, str(o.meta(pool_obj).get("uid"))))
        for namespace, secret, uid in (entry for entry in listed if len(entry) == 3):
            if uid not in (ANY_POOL, NO_POOL) and (namespace, uid) not in stored:
                pools_need.setdefault(((namespace, secret), uid), False)
        for (key, uid), needed in pools_need.items():
            if (key + (uid,) in listed) == needed or self.secret_holds is None:
                continue
            if not needed and uid in self._held_by_releases.get(key, ()):
                continue  # a release left an address meanwhile: judged again by the next sweep
            if await self.secret_holds.hold_for(*key, self.secret_finalizer, uid, needed) and not needed and \
                    uid in self._held_by_releases.get(key, ()):  # a release held it for that pool meanwhile
                await self.secret_holds.hold_for(*key, self.secret_finalizer, uid, True)

    async def _say_waiting(self, pool_key: Any, pool_obj: Mapping[str, Any], message: str) -> None:
        """A pool being deleted says what it waits for (Ready=False, reason Deleting)."""
        current = o.status(pool_obj)
        ready = _condition(current, READY, "False", "Deleting", f"the pool is being deleted; it {message}", utc_now())
        conditions = [ready] + [c for c in current.get("conditions") or []
                                if isinstance(c, Mapping) and c.get("type") != READY]
        if current.get("conditions") == conditions:
            return
        plan = Plan()
        plan.step(f"{self.pool_kind[1]} {pool_key.namespace}/{pool_key.name}", about=o.ref(pool_obj)).add(
            SetStatus(o.ref(pool_obj), {**current, "conditions": conditions}))
        try:
            await self.writer.execute(plan, pool_key)
        except Exception:  # a status lost is no reason to end the sweeps
            log.exception("%s %s/%s: status not written", self.pool_kind[1], pool_key.namespace, pool_key.name)

    def secret_of(self, model: Any) -> str | None:
        """The Secret (in the pool's namespace) a pool's credentials come from, or None."""
        return None

    def remembers_left(self, ref: PoolRef, uid: Any) -> bool:
        """Whether this process remembers an address the claims of pool ``ref`` (that very one: ``uid``) left
        outside that no sweep judged gone yet."""
        return False

    async def secrets_held(self) -> Callable[[str, str, Any], bool]:
        """Whether our finalizer may hold a Secret (namespace, name) for the pool of that uid: as written here, or
        as recorded by whatever process wrote it, for that pool or any (a Secret the record lists no pools for, as an
        earlier version wrote it: any); any, when the record could not be read. A pool being deleted whose outside
        IPAM cannot be swept is held only while its Secret may be held for it (what its claims left waits); else it
        is judged from what this process found: an IPAM that never answers, or a Secret never made, would hold it for
        good, and so would another pool's claims' leaving an address, holding the Secret meanwhile."""
        entries: set[Entry] = {key for key, on in self._secrets_held.items() if on}
        if self.secret_holds is not None and self.secret_finalizer is not None:
            recorded = await self.secret_holds.entries(self.secret_finalizer)
            if recorded is None:
                return lambda namespace, name, uid: True
            entries |= recorded
        return lambda namespace, name, uid: held_for(entries, (namespace, name), uid)
