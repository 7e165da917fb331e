"""``metal3-ipam run``: the controller's parts, started in one order and stopped in a stated one.

A :class:`Runtime` keeps every part as an attribute and has one method per
phase: :meth:`~Runtime.connect` (credentials, the API client, which kinds the
cluster serves), :meth:`~Runtime.assemble` (the parts, without I/O),
:meth:`~Runtime.start` (the servers, the election, the resync and the initial
load), :meth:`~Runtime.serve` (kopf, until SIGTERM or SIGINT) and
:meth:`~Runtime.stop`.

With leader election on, one gate decides whether this replica may write: the
elector's :meth:`~.leader.LeaderElector.may_act`. The pool workers start no
pass without it and the REST writer sends nothing without it. At shutdown the
gate closes first, the passes under way end, and only then is the Lease
released, so a standby that takes over at once never overlaps with us.

A kind this controller may not list at start-up (RBAC not granted yet) is not
served; it is asked again, with a growing pause, and served once it may be
listed: listed, watched, and only then written (:meth:`~Runtime._serve_granted`).

Leadership gained opens the gate only once the Metal3 IPAddresses (the locks)
have been listed afresh and filed (:meth:`~Runtime._catch_up`): the watches of
a standby may not show yet what the previous leader wrote just before it
stopped, and a lock that an earlier version named differently is no name
conflict for the API server to refuse.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import ssl
from dataclasses import dataclass, field
from collections.abc import Iterable, Mapping
from typing import Any, Callable

import kopf
import urllib3
from aiohttp import web
from kubernetes import client
from kubernetes.client.rest import ApiException

from ..core import kinds, poolkind
from ..core import objects as o
from ..core.inventory import Inventory
from ..core.reconcile import LOCK_SETTLE_SECONDS
from . import diagnostics, health, metrics
from .admission import Admission
from .api import METAL3_ADDRESSES, ApiWriter, Resource, request
from .certificates import CERT_FILE, DEFAULT_CERT_DIR, KEY_FILE, Tls
from .credentials import Credentials, CredentialsError, load as load_credentials
from .leader import LeaderElector, LeaseTiming
from ..core import lockstore
from .locks import LockUpkeep
from .operator import (LEASES, hot_kinds, Controller, Listing, NotInstalled, build_registry, discover, lease_listing,
                       lease_store, listable, listable_again, listings, lock_listings, login_from, settings,
                       unserved_kinds, without_leases)
from .ratelimit import rate_limit
from .watch import KindWatch, Streams
from .webhook_server import WebhookServer
from .workers import PoolWorkers

log = logging.getLogger("metal3_ipam")

# The errors of an API server that cannot be reached or answers with an error: expected, never a traceback.
UNREACHABLE = (ApiException, OSError, urllib3.exceptions.HTTPError)
# How soon, then how seldom at most (doubling in between), the kinds this controller may not list are asked again.
ASK_AGAIN_FIRST, ASK_AGAIN_MOST = 1.0, 30.0


@dataclass
class Options:
    kubeconfig: str | None = None
    namespaces: list[str] = field(default_factory=list)  # empty: all namespaces
    health_host: str = "0.0.0.0"
    health_port: int = 8081
    # More addresses /healthz and /readyz are served on (run as /manager: both Go managers' probe ports).
    more_health: list[tuple[str, int]] = field(default_factory=list)
    leader_elect: bool = True
    lease_namespace: str = field(default_factory=lambda: own_namespace())
    # Where the locks of the pools of cluster scope live (one namespace for all of them).
    lock_namespace: str = field(default_factory=lambda: own_namespace())
    lease_name: str = "metal3-ipam-controller"
    lease_timing: LeaseTiming = field(default_factory=LeaseTiming)
    resync_seconds: float = 300.0
    parallel_writes: int = 16
    webhook_port: int = 0  # 0: no admission webhooks
    webhook_cert_dir: str = DEFAULT_CERT_DIR
    webhook_cert_name: str = CERT_FILE
    webhook_key_name: str = KEY_FILE
    # The diagnostics endpoint (/metrics): HTTPS for callers the API server authenticates and authorises, or
    # plain HTTP with ``insecure_diagnostics``; None: /metrics is served with the probes.
    diagnostics: tuple[str, int] | None = None
    insecure_diagnostics: bool = False
    tls: Tls = field(default_factory=Tls)  # of the webhooks and the diagnostics endpoint
    # Pools and claims served: those labelled cluster.x-k8s.io/watch-filter=<this>, or all when empty.
    watch_filter: str = ""
    # Client-side rate limit of the API requests (Kubernetes' QPS and burst); none when qps <= 0.
    kube_api_qps: float = 0.0
    kube_api_burst: int = 0
    # The values of the flags the kinds of pool bring (``poolkind.Flag``), by ``dest``; a kind's default where
    # one is not here.
    kind_flags: dict[str, Any] = field(default_factory=dict)


SERVICE_ACCOUNT_NAMESPACE = "/var/run/secrets/kubernetes.io/serviceaccount/namespace"


def own_namespace() -> str:
    """The controller's own namespace: $POD_NAMESPACE, else its service account's (what a pod without the
    variable, such as the Go providers' Deployments, is told), else default."""
    if os.environ.get("POD_NAMESPACE"):
        return os.environ["POD_NAMESPACE"]
    try:
        with open(SERVICE_ACCOUNT_NAMESPACE, encoding="utf-8") as file:
            return file.read().strip() or "default"
    except OSError:
        return "default"


@dataclass(frozen=True)
class OutsideParts:
    """What the adapter half of a kind whose addresses come from an outside IPAM is built from
    (``poolkind.Outside.service``)."""

    api: client.ApiClient
    inventory: Inventory
    writer: ApiWriter
    wake: Callable[[o.PoolKey, str | None], None]  # the answer for a key of a pool is in: decide its claims
    may_act: Callable[[], bool]
    flags: Mapping[str, Any]


class CannotStart(Exception):
    """A part could not be had (credentials, the API server, a port): said in one line, exit status 1."""


def liveness(stopping: asyncio.Event, elector: LeaderElector | None,
             catch_up: Callable[[], asyncio.Task | None] = lambda: None) -> Callable[[], list[str]]:
    """What /healthz reports: failing while stopping, and for good once the leader election
    ended by itself (a replica that can never lead again must be restarted, not left idle), or the
    catch-up that opens the write gate at each gain of leadership did (a leader that would hold the
    Lease and never write)."""
    def problems() -> list[str]:
        found = ["stopping"] if stopping.is_set() else []
        if elector is not None and elector.failure:
            found.append(elector.failure)
        task = catch_up()
        if task is not None and task.done() and not stopping.is_set():
            error = None if task.cancelled() else task.exception()
            found.append(f"the catch-up on leadership ended: {error!r}" if error else
                         "the catch-up on leadership ended")
        return found

    return problems


async def run(options: Options) -> int:
    return await Runtime(options).run()


class Runtime:
    """One controller process: its parts, and the order in which they start and stop."""

    def __init__(self, options: Options) -> None:
        self.options = options
        # connect()
        self.credentials: Credentials | None = None
        self.api: client.ApiClient | None = None
        self.resources: dict[tuple[str, str], Resource] = {}
        self.kinds_unserved: list[str] = []  # what /readyz says of the kinds not served (CRD missing, not listable)
        # The kinds this controller may not list (their resources): asked again until it may (``_serve_granted``).
        self.refused: dict[tuple[str, str], Resource] = {}
        self.restart_to_serve: list[str] = []  # listable now, but served only from a start-up (``_live``)
        # The kinds whose locks are Leases this controller may not list (``operator.without_leases``).
        self.leaseless: set[tuple[str, str]] = set()
        self.lease_store = False  # whether locks are Leases of the lock namespace (``core.lockstore``)
        # Whether the Metal3 IPAddress kind, not served at start, may come while this runs (``ApiWriter.twins``).
        self.metal3_may_come = False
        self.upkeep: LockUpkeep | None = None
        self.upkeep_task: asyncio.Task | None = None
        self.rate_limit = rate_limit(options.kube_api_qps, options.kube_api_burst)
        # assemble()
        self.inventory = Inventory()
        self.inventory.lock_namespace = options.lock_namespace
        # Replicas may race for a claim: a lock another one just made is left to it a while (see reconcile).
        self.inventory.lock_settle_seconds = LOCK_SETTLE_SECONDS
        self.inventory.namespaces = frozenset(options.namespaces) if options.namespaces else None
        self.inventory.watch_filter = options.watch_filter or None
        self.elector: LeaderElector | None = None
        self.writer: ApiWriter | None = None
        self.workers: PoolWorkers | None = None
        self.outside: dict[tuple[str, str], Any] = {}  # the adapter half of each kind with an outside IPAM
        self.controller: Controller | None = None
        self.hot: tuple[tuple[str, str], ...] = ()  # the kinds our own watches follow; kopf watches the rest
        self.registry: kopf.OperatorRegistry | None = None
        self.streams: Streams | None = None
        # start()
        self.health: web.AppRunner | None = None
        self.diagnostics: web.AppRunner | None = None
        self.webhooks: WebhookServer | None = None
        self.election: asyncio.Task | None = None
        self.resync_task: asyncio.Task | None = None
        self.load_task: asyncio.Task | None = None
        self.grant_task: asyncio.Task | None = None
        self.watches: list[asyncio.Task] = []
        # Held while a kind refused at start-up is listed and becomes served, and while the catch-up on leadership
        # lists the locks: a gain of the lead meanwhile lists them again once that kind is served.
        self._kinds_lock = asyncio.Lock()
        # What /readyz and /healthz read.
        self.kopf_ready = asyncio.Event()
        self.stopping = asyncio.Event()
        self.loaded = False
        self.watching = False
        self.load_failure = ""
        # Leadership: how often it was gained, and the last gain whose locks have been listed afresh
        # (``_catch_up``); the gate is open only while they are equal.
        self.gains = 0
        self.caught_up = 0
        self.catch_up_task: asyncio.Task | None = None
        self._gained = asyncio.Event()
        self._load_done = asyncio.Event()
        # The gain during which the initial load started listing the locks (None: not while leading).
        self._locks_loaded_in: int | None = None
        self._wound_down: asyncio.Future | None = None

    # -- the whole life ---------------------------------------------------------------

    async def run(self) -> int:
        """Connect, start, serve until kopf ends (SIGTERM, SIGINT), stop. The exit status."""
        try:
            await self.connect()
            self.assemble()
        except CannotStart as err:
            log.error("%s", err)
            return 1
        try:
            await self.start()
        except CannotStart as err:
            log.error("%s", err)
            await self.stop()
            return 1
        try:
            await self.serve()
        finally:
            await self.stop()
        return 0

    # -- the phases -------------------------------------------------------------------

    async def connect(self) -> None:
        """Credentials, the API client, and which of our kinds the cluster serves."""
        try:
            credentials = await asyncio.to_thread(load_credentials, self.options.kubeconfig)
        except CredentialsError as err:
            raise CannotStart(f"cannot load the cluster credentials: {err}") from None
        log.info("API server: %s", credentials.describe())
        if credentials.insecure:
            # Asked for in the kubeconfig, and said once above: not again on every request.
            log.warning("the API server's certificate is not verified (insecure-skip-tls-verify)")
            urllib3.disable_warnings(urllib3.exceptions.InsecureRequestWarning)
        # Asks the credentials before every request (as the writer and kopf do): reads, writes and
        # watches always go out as the same user.
        configuration = credentials.configuration(self.options.parallel_writes + 4)
        self.credentials, self.api = credentials, client.ApiClient(configuration)
        metrics.count_rest_requests(self.api)
        if self.rate_limit is not None:
            self.rate_limit.limit(self.api)
        try:
            may_list = listable(self.api)
            self.resources = await asyncio.to_thread(discover, self.api, may_list,
                                                     (self.options.namespaces or [None])[0], set(), self.refused)
            await asyncio.to_thread(without_leases, self.resources, may_list, self.options.lock_namespace,
                                    self.leaseless)
            self._say_unserved()
            self.lease_store = lease_store(self.resources)
            self.metal3_may_come = self.lease_store and kinds.IPADDRESS not in self.resources \
                and kinds.IPADDRESS not in self.refused
        except NotInstalled as err:
            raise CannotStart(str(err)) from None
        except UNREACHABLE as err:
            raise CannotStart(f"cannot reach the API server at {configuration.host}: "
                              f"{getattr(err, 'reason', None) or err}") from None

    def assemble(self) -> None:
        """The parts, wired to one another; nothing runs yet."""
        options, resources = self.options, self.resources
        self.inventory.clusters_served = kinds.CLUSTER in resources
        if options.leader_elect:
            log.info("leader election on the Lease %s/%s", options.lease_namespace, options.lease_name)
            self.elector = LeaderElector(self.api, options.lease_namespace, options.lease_name,
                                         options.lease_timing, on_change=self._on_leadership)
        else:
            metrics.LEADER.set(1)  # the one writer
        self.writer = ApiWriter(self.credentials, self.inventory, resources, parallel=options.parallel_writes,
                                may_write=self.may_write, write_deadline=self.write_deadline)
        self.writer.rate_limit = self.rate_limit
        may_act = lambda: self.loaded and self.may_write()  # noqa: E731
        parts = OutsideParts(self.api, self.inventory, self.writer, lambda pool, key: self.workers.answered(pool, key),
                             may_act, options.kind_flags)
        self.outside = {kind: pool_kind.outside.service(parts) for kind, pool_kind in poolkind.REGISTRY.items()
                        if kind in resources and pool_kind.outside is not None and pool_kind.outside.service}
        self.workers = PoolWorkers(self.inventory, self.writer, may_act=may_act, outside=self.outside)
        self.writer.on_filed = self.workers.filed
        for kind in poolkind.REGISTRY:
            if kind in resources:
                metrics.init_controller(metrics.controller_name(kind))
        self.controller = Controller(self.inventory, self.workers, self.writer, relist=self._addresses_of)
        if self.lease_store:
            log.info("locks of %s and guards of IPs are Leases in %s", ", ".join(
                k[1] for k, kind in poolkind.REGISTRY.items() if kind.locks_in_leases and k in resources),
                options.lock_namespace)
            self.writer.leases = (LEASES, options.lock_namespace)
            self.writer.metal3_may_come = self.metal3_may_come
            self.writer.on_metal3_came = self._metal3_came
            self.upkeep = LockUpkeep(self.controller, self.writer, options.lock_namespace, may_act)
        # Pools, claims and addresses are watched by streams of our own (watch.py); kopf watches the rest.
        self.hot = tuple(kind for kind in hot_kinds() if kind in resources)
        self.registry = build_registry(self.controller, resources, skip=self.hot)
        kopf.on.login(registry=self.registry)(login_from(self.credentials))
        kopf.on.cleanup(registry=self.registry)(self._on_kopf_cleanup)
        self.streams = Streams(self.credentials, self.rate_limit)

    async def start(self) -> None:
        """Probes first (a replica that is not ready yet says why), then the webhooks, the election,
        the resync and the initial load; the watches of our kinds start as their listings are filed."""
        options = self.options
        try:
            self.health = await health.serve(options.health_host, options.health_port,
                                             alive=liveness(self.stopping, self.elector,
                                                            lambda: self.catch_up_task),
                                             ready=self.readiness, with_metrics=options.diagnostics is None,
                                             more=options.more_health, notes=lambda: self.kinds_unserved)
        except OSError as err:
            where = ", ".join(f"{h}:{p}" for h, p in ((options.health_host, options.health_port), *options.more_health))
            what = "health and metrics" if options.diagnostics is None else "the health probes"
            raise CannotStart(f"cannot serve {what} on {where}: {err.strerror or err}") from None
        if options.diagnostics is not None:
            await self._start_diagnostics()
        if options.webhook_port:
            await self._start_webhooks()
        if self.elector is not None:
            self.catch_up_task = asyncio.create_task(self._catch_up(), name="catch-up on leadership")
            self.election = self.elector.start()
        self.resync_task = asyncio.create_task(self._resync(), name="resync")
        for service in self.outside.values():
            service.start()
        self.load_task = asyncio.create_task(self._load(), name="initial load")
        if self.refused:
            self.grant_task = asyncio.create_task(self._serve_granted(), name="the kinds not listable asked again")
        if self.upkeep is not None:
            self.upkeep_task = asyncio.create_task(self.upkeep.run(), name="the Lease store's upkeep")
        log.info("serving %s in %s", ", ".join(f"{r.plural}.{r.group}/{r.version}" for r in self.resources.values()),
                 ", ".join(options.namespaces) or "all namespaces")

    async def serve(self) -> None:
        """kopf's operator (Clusters' events, and kopf's own signal handling), until it ends."""
        # No stop_flag for kopf: it stops on SIGTERM/SIGINT by itself, and a waiter on a
        # flag that nothing sets before it returns would delay every shutdown by 5 s.
        await kopf.operator(
            registry=self.registry, settings=settings(), standalone=True,
            clusterwide=not self.options.namespaces, namespaces=self.options.namespaces,
            ready_flag=self.kopf_ready)

    async def stop(self) -> None:
        """Stop whatever started, in this order (:meth:`wind_down` is steps 1–6):

        1. /healthz says "stopping".
        2. The gate closes (:meth:`LeaderElector.stop`): leadership ends at once, so the writer
           sends nothing more and no pass starts; the Lease is still ours.
        3. The passes under way end: half the renew deadline to reach their next action, where the
           closed gate stops them; those still running then are cancelled.
        4. The watches, the resync, the initial load, the asking again for the kinds not listable and the
           catch-up on leadership end: nothing files or kicks any more.
        5. The Lease is released, only now: no request of ours can still be on its way, so a standby
           that takes over at once never overlaps with us. If a pass had to be cancelled, one may be:
           the Lease is left to expire instead.
        6. The writer's and the watches' connections close.
        7. The probes and metrics, then the admission webhooks, last: until the process ends the API
           server's admission requests are answered (creates fail closed while nobody answers).

        On SIGTERM kopf runs steps 1–6 as its cleanup activity, while its own watches end: kopf then
        waits up to 5 s for every task started after it (the passes, the watches, the outside IPAMs'
        services) and cancels what is left, which would cut step 3 short and hold up every stop.
        """
        await self.wind_down()
        if self.health is not None:
            await self.health.cleanup()
        if self.diagnostics is not None:
            await self.diagnostics.cleanup()
        if self.webhooks is not None:
            await self.webhooks.close()

    async def wind_down(self) -> None:
        """Steps 1–6 of :meth:`stop`, once (later calls wait for the first)."""
        if self._wound_down is None:
            self._wound_down = asyncio.ensure_future(self._wind_down())
        await asyncio.shield(self._wound_down)

    async def _wind_down(self) -> None:
        self.stopping.set()
        if self.elector is not None:
            await self.elector.stop()
        drained = True
        if self.workers is not None:
            drained = await self.workers.stop(grace=self.options.lease_timing.renew_deadline / 2)
        await self._stop_background()
        for service in self.outside.values():
            await service.close()
        if self.elector is not None:
            if self.election is not None:
                if drained:
                    await self.elector.release()
                else:
                    log.warning("passes did not end in time; the lease is left to expire")
            self.elector.close()
        if self.writer is not None:
            await self.writer.close()
        if self.streams is not None:
            await self.streams.close()

    # -- the gate and the probes --------------------------------------------------------

    def may_write(self) -> bool:
        """Whether this replica may write now: while it leads and has caught up with the locks written
        before it took the lead (always, without leader election)."""
        return self.elector is None or (self.elector.may_act() and self.caught_up == self.gains)

    def write_deadline(self) -> float | None:
        """How long the API server may take to store a write sent now: the rest of this replica's tenure
        (None without leader election: the server's own deadline)."""
        return self.elector.time_left() if self.elector is not None else None

    def _leading(self) -> bool:
        """Whether this replica holds the lead (caught up or not)."""
        return self.elector is not None and self.elector.may_act()

    def readiness(self) -> list[str]:
        """What /readyz reports: watches not started, inventory not loaded (and why), writes refused."""
        problems = [] if self.kopf_ready.is_set() and self.watching else ["watches not started"]
        problems += [] if self.loaded else [f"inventory not loaded{self.load_failure}"]
        cannot_write = self.writer.readiness()
        return problems + ([cannot_write] if cannot_write else [])

    def _on_leadership(self, leading: bool) -> None:
        if leading:  # the gate stays shut until ``_catch_up`` is done; losing needs nothing (the gate)
            self.gains += 1
            self._gained.set()

    # -- started by start() -------------------------------------------------------------

    async def _start_webhooks(self) -> None:
        options = self.options
        pools = self.resources.get(kinds.IPPOOL)

        def list_pools(namespace: str) -> list[dict]:
            # Well within the API server's wait for the webhook (10 s): on a timeout the inventory answers.
            if pools is None:
                return []
            return request(self.api, "GET", pools.path(namespace), timeout=3.0).get("items") or []

        admission = Admission(self.inventory, loaded=lambda: self.loaded, namespaces=options.namespaces,
                              list_pools=list_pools)
        try:
            self.webhooks = await WebhookServer(admission, options.health_host, options.webhook_port,
                                                options.webhook_cert_dir, cert_name=options.webhook_cert_name,
                                                key_name=options.webhook_key_name, tls=options.tls).start()
        except (OSError, ssl.SSLError) as err:
            raise CannotStart(f"cannot serve admission webhooks on port {options.webhook_port} with the certificate "
                              f"in {options.webhook_cert_dir}: {getattr(err, 'strerror', None) or err}") from None

    async def _start_diagnostics(self) -> None:
        options = self.options
        host, port = options.diagnostics

        def call(method: str, path: str, body: dict) -> dict:
            return request(self.api, method, path, body=body, timeout=10.0)

        try:
            self.diagnostics = await diagnostics.serve(host, port, options.insecure_diagnostics, options.tls, call)
        except (OSError, ssl.SSLError) as err:
            raise CannotStart(f"cannot serve diagnostics on {host}:{port}: "
                              f"{getattr(err, 'strerror', None) or err}") from None

    async def _load(self) -> None:
        """Every kind listed once before any pool is worked on; each of our kinds watched from the
        version it was listed at, so nothing in between is missed."""
        locks_listed = False
        for listing in self._listings(self._served()):
            if listing.kind == kinds.IPADDRESS and not locks_listed:
                locks_listed = True
                self._locks_loaded_in = self.gains if self._leading() else None
            version = await self._settle_until_done(listing)
            self._watch(listing, version, self.resources.get(listing.kind))
        self.watching = True
        self.loaded = True
        self._load_done.set()
        log.info("inventory loaded: %d objects", len(self.inventory.objects))
        self.workers.kick_all()
        self._upkeep()

    def _watch(self, listing: Listing, version: str | None, resource: Resource | None) -> None:
        """The watch of what ``listing`` listed (of ``resource``), from the version it was taken at."""
        if listing.leases:
            watch = KindWatch(self.streams, LEASES, lockstore.LEASE, self.options.lock_namespace,
                              self.controller.on_lease_event, self._relist_kind, selector=lockstore.LOCK_LABEL)
        elif listing.kind in self.hot and resource is not None:
            watch = KindWatch(self.streams, resource, listing.kind, listing.namespace,
                              self.controller.on_event, self._relist_kind, known=self.controller.knows)
        else:
            return
        self.watches.append(asyncio.create_task(watch.run(version), name=f"watch {watch}"))

    def _say_unserved(self) -> None:
        """What /readyz says of the kinds not served."""
        self.kinds_unserved = unserved_kinds(self.resources, set(self.refused), self.leaseless,
                                             self.options.lock_namespace) + (
            [f"listable since start-up, served once restarted: {', '.join(self.restart_to_serve)}"]
            if self.restart_to_serve else [])

    def _live(self, kind: tuple[str, str]) -> bool:
        """Whether a kind refused at start-up can be served once listable, without a restart: one our own watches
        follow (kopf's watches are set at start-up), and no kind of pool whose parts are made at start-up (an
        outside IPAM's service; locks in the Lease store where it is not used)."""
        pool_kind = poolkind.REGISTRY.get(kind)
        return kind in hot_kinds() and (pool_kind is None or (
            pool_kind.outside is None and (self.lease_store or not pool_kind.locks_in_leases)))

    async def _serve_granted(self) -> None:
        """The kinds this controller could not list at start-up, asked again (one listing of one item each, a
        read: a standby does it too), after ``ASK_AGAIN_FIRST`` seconds, then twice as long each time up to
        ``ASK_AGAIN_MOST``; one that may be listed now is served (``_serve_kind``), once the initial load is done."""
        pause = ASK_AGAIN_FIRST
        may_list = listable(self.api)
        namespace = (self.options.namespaces or [None])[0]
        while self.refused:
            await asyncio.sleep(pause)
            pause = min(pause * 2, ASK_AGAIN_MOST)
            await self._load_done.wait()
            try:
                granted = await asyncio.to_thread(listable_again, may_list, dict(self.refused), namespace)
            except UNREACHABLE as err:
                log.warning("asking again whether the kinds not listable may be listed failed: %s",
                            getattr(err, "reason", None) or err)
                continue
            for kind in granted:
                if not self._live(kind):
                    self.restart_to_serve.append(f"{kind[1]}.{kind[0]}")
                    del self.refused[kind]
                    self._say_unserved()
                    log.warning("%s.%s may be listed now: it is served once this controller is restarted", *kind[::-1])
                elif await self._serve_kind(kind):
                    pause = ASK_AGAIN_FIRST

    async def _serve_kind(self, kind: tuple[str, str]) -> bool:
        """A kind refused at start-up served: listed (where the Lease store holds the locks, only the Metal3
        IPAddresses: the Leases are listed and watched already) and watched, and only then handed to the writer
        and /readyz, and every pool looked at: a pass never writes an object of a kind whose objects it has not
        read. False when a listing is refused again (asked again later)."""
        resource = self.refused[kind]
        async with self._kinds_lock:
            resources, namespaces, home = {**self.resources, kind: resource}, self.options.namespaces, \
                self.options.lock_namespace
            if self.lease_store and kind == kinds.IPADDRESS:
                found = [x for x in lock_listings(self.api, resources, namespaces, home, home) if not x.leases]
            else:
                found = [x for x in listings(self.api, resources, namespaces, home) if x.kind == kind]
            listed = []
            for listing in found:
                try:
                    listed.append((listing, await self.controller.settle(listing)))
                except UNREACHABLE as err:
                    log.warning("listing %s, which may be listed now, failed: %s; asked again later", listing,
                                getattr(err, "reason", None) or err)
                    return False
            for listing, version in listed:
                self._watch(listing, version, resource)
            self.resources[kind] = resource  # the writer's too: it may write objects of the kind from now on
            self.hot = (*self.hot, kind)
            del self.refused[kind]
            self._say_unserved()
        if kind in poolkind.REGISTRY:
            metrics.init_controller(metrics.controller_name(kind))
        log.info("%s.%s may be listed now: served, as %s.%s/%s", kind[1], kind[0], resource.plural, resource.group,
                 resource.version)
        if self.may_write():
            self.workers.kick_all()
            self._upkeep()
        return True

    def _upkeep(self) -> None:
        if self.upkeep is not None:
            self.upkeep.sweep()

    def _served(self) -> set[tuple[str, str]]:
        """Every kind listed: those served, and the locks (``kinds.IPADDRESS``) where the Lease store holds them,
        also where Metal3's IPAddress is not served."""
        return set(self.resources) | ({kinds.IPADDRESS} if self.lease_store else set())

    def _listings(self, resources: Iterable[tuple[str, str]], namespaces: list[str] | None = None,
                  lock_namespace: str | None = None) -> list[Listing]:
        """The listings of the kinds ``resources`` (``operator.listings``: the namespaces served, and the lock
        namespace), in the order of ``self.resources``; where the Lease store is used, the locks
        (``kinds.IPADDRESS``) are its Leases, then the Metal3 IPAddresses where served
        (``operator.lock_listings``), right after the Clusters."""
        if namespaces is None:
            namespaces, lock_namespace = self.options.namespaces, self.options.lock_namespace
        resources = set(resources)
        plain = {k: r for k, r in self.resources.items()
                 if k in resources and not (self.lease_store and k == kinds.IPADDRESS)}
        found = listings(self.api, plain, namespaces, lock_namespace)
        if not self.lease_store or kinds.IPADDRESS not in resources:
            return found
        locks = lock_listings(self.api, self.resources, namespaces, self.options.lock_namespace, lock_namespace)
        at = sum(1 for listing in found if listing.kind == kinds.CLUSTER)
        return found[:at] + locks + found[at:]

    async def _settle_until_done(self, listing: Listing) -> str | None:
        """A start-up listing, listed again until it goes through: a refusal (rights not granted yet),
        an API server restarting. Until then the replica is not ready, and /readyz says why."""
        pause = 0.5
        while True:
            try:
                version = await self.controller.settle(listing, first=True)
                self.load_failure = ""
                return version
            except Exception as err:
                reason = f"{getattr(err, 'status', None) or ''} {getattr(err, 'reason', None) or err}".strip()
                self.load_failure = f": listing {listing} failed ({reason}); again in {pause:.1f} s"
                expected = isinstance(err, UNREACHABLE)
                log.log(logging.WARNING if expected else logging.ERROR, "start-up listing of %s failed: %s; "
                        "again in %.1f s", listing, reason, pause, exc_info=not expected)
                await asyncio.sleep(pause)
                pause = min(pause * 2, 30.0)

    async def _resync(self) -> None:
        # Level-based safety net: every kind is listed again now and then, so
        # a deletion no watch event reported (a watch gap) does not leave a
        # ghost holding an IP; and every pool is looked at again (an
        # unchanged pool costs no API call).
        while True:
            await asyncio.sleep(self.options.resync_seconds)
            if self.metal3_may_come and not self.writer.metal3_came \
                    and await asyncio.to_thread(self._metal3_served):
                self.writer.metal3_served_now()
            try:
                for listing in self._listings(self._served()):
                    await self.controller.settle(listing)
            except UNREACHABLE as err:
                log.warning("resync listing failed: %s", getattr(err, "reason", None) or err)
            if self.may_write():
                self.workers.kick_all()
                self._upkeep()

    def _metal3_served(self) -> bool:
        """Whether the Metal3 IPAddress kind is served now, and this controller may list it (asked as ``discover``
        asks, for that kind alone)."""
        try:
            served = {v["version"] for v in request(self.api, "GET", f"/apis/{kinds.METAL3_GROUP}")["versions"]}
            return kinds.METAL3_VERSION in served and listable(self.api)(
                kinds.METAL3_GROUP, kinds.METAL3_VERSION, "ipaddresses", (self.options.namespaces or [None])[0])
        except UNREACHABLE as err:  # 404: the group is not served
            log.debug("could not ask whether the Metal3 IPAddress kind is served: %s",
                      getattr(err, "reason", None) or err)
            return False
        except (KeyError, TypeError):
            return False

    def _metal3_came(self) -> None:
        """The Metal3 IPAddress kind came while this runs (``ApiWriter.metal3_served_now``): its twins are written from
        now on, and it is served as a kind refused at start-up is once it may be listed (``_serve_granted``): listed
        and watched, so that the locks an earlier version writes there are read, then the pools looked at again and
        the Leases made without a twin given one (``locks.LockUpkeep.give_twins``)."""
        self.metal3_may_come = False
        if kinds.IPADDRESS in self.resources or kinds.IPADDRESS in self.refused:
            return
        self.refused[kinds.IPADDRESS] = METAL3_ADDRESSES
        log.warning("the Metal3 IPAddress kind came since start-up: it is listed and watched")
        if self.grant_task is None or self.grant_task.done():
            self.grant_task = asyncio.get_running_loop().create_task(self._serve_granted(),
                                                                     name="the kinds not listable asked again")

    def _addresses_of(self, namespace: str) -> list[Listing]:
        """A namespace's addresses (of both APIs), to be listed again (a Cluster resuming; see resuming.py)."""
        return self._listings({kinds.IPADDRESS, kinds.CAPI_ADDRESS}, [namespace])

    async def _relist_kind(self, kind: tuple[str, str], namespace: str | None) -> str | None:
        """A kind listed again for its watch (its version was gone): filed, and the version to go on from."""
        if kind == lockstore.LEASE:
            return await self.controller.settle(lease_listing(self.api, self.options.lock_namespace))
        if kind == kinds.IPADDRESS and self.lease_store:
            [listing] = [x for x in self._listings({kind}, [namespace] if namespace else []) if not x.leases]
        else:
            [listing] = listings(self.api, {kind: self.resources[kind]}, [namespace] if namespace else [])
        return await self.controller.settle(listing)

    async def _catch_up(self) -> None:
        """At every gain of leadership, the gate opens only once the locks are listed afresh and filed.

        The previous leader may have written a lock just before its lease
        ended that this replica's watch does not show yet. One of the same
        name would be refused by the API server, but one an earlier version
        named differently (``<pool>-<ip>``, see ``naming.lock_name``) is not:
        a pass deciding from the watches alone could lock that IP again for
        another claim. A LIST is read from the store as of now, so every
        write of the previous leader (all before its lease ran out, and so
        before ours began) shows in it; the passes decide from it once filed.
        Between replicas of one version the same name is refused, but the
        listing serves them too where pools of a namespace overlap: one IP's
        locks in two pools have two names, and a view trailing an edit of the
        pools could hand the IP out from the other one.

        In order: the initial load is done (its listing of the locks counts
        when it started while this gain held); passes of an earlier tenure,
        which the shut gate stops at their next write, have ended (their
        decisions predate the listing); the locks are listed (one paged LIST
        per namespace served and the lock namespace); the gate opens and
        every pool is looked at.
        """
        while True:
            await self._gained.wait()
            self._gained.clear()
            gain = self.gains
            await self._load_done.wait()
            await self.workers.passes_ended()
            async with self._kinds_lock:
                if self._locks_loaded_in == gain:
                    log.info("the start-up listing of the IPAddresses was taken while leading: not listed again")
                elif not await self._list_locks_afresh(gain):
                    continue  # leadership was lost (or gained again) meanwhile
                caught_up = gain == self.gains
                if caught_up:
                    self.caught_up = gain
            if caught_up:
                if self.may_write():
                    log.info("leading with the IPAddresses listed since the lead was taken: writes allowed")
                    self.workers.kick_all()
                    self._upkeep()

    async def _list_locks_afresh(self, gain: int) -> bool:
        """The Metal3 IPAddresses listed and filed, again until it goes through while ``gain`` holds;
        False when it ended (leadership lost or gained anew) first."""
        resource = {kinds.IPADDRESS}
        pause = 0.5
        while gain == self.gains and self._leading():
            try:
                for listing in self._listings(resource):
                    await self.controller.settle(listing)
            except Exception as err:
                expected = isinstance(err, UNREACHABLE)
                log.log(logging.WARNING if expected else logging.ERROR, "listing the IPAddresses after taking "
                        "the lead failed: %s; again in %.1f s", getattr(err, "reason", None) or err, pause,
                        exc_info=not expected)
                await asyncio.sleep(pause)
                pause = min(pause * 2, 30.0)
                continue
            return True
        return False

    async def _on_kopf_cleanup(self, **_: object) -> None:
        """kopf is stopping (SIGTERM, SIGINT): the parts that run beside it end first (see :meth:`stop`)."""
        await self.wind_down()

    async def _stop_background(self) -> None:
        tasks = [task for task in (self.catch_up_task, self.resync_task, self.load_task, self.grant_task,
                                   self.upkeep_task, *self.watches)
                 if task is not None]
        for task in tasks:
            task.cancel()
        for task in tasks:
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await task
