"""``metal3-ipam run``: wire the watches, the pool workers, leader election and the health server.

With leader election on, one gate decides whether this replica may write: the
elector's :meth:`~.leader.LeaderElector.may_act`. The pool workers start no
pass without it and the REST writer sends nothing without it. At shutdown the
gate closes first, the passes under way end, and only then is the Lease
released, so a standby that takes over at once never overlaps with us.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import ssl
from dataclasses import dataclass, field
from typing import Callable

import kopf
import urllib3
from kubernetes import client
from kubernetes.client.rest import ApiException

from ..core import kinds
from ..core.inventory import Inventory
from . import health, webhook
from .api import ApiWriter, request
from .credentials import Credentials, CredentialsError, load as load_credentials
from .leader import LeaderElector, LeaseTiming
from .operator import (HOT_KINDS, Controller, Listing, NotInstalled, build_registry, discover, listings,
                       login_from, settings)
from .watch import KindWatch, Streams
from .workers import PoolWorkers

log = logging.getLogger("metal3_ipam")


@dataclass
class Options:
    kubeconfig: str | None = None
    namespaces: list[str] = field(default_factory=list)  # empty: all namespaces
    health_host: str = "0.0.0.0"
    health_port: int = 8081
    leader_elect: bool = True
    lease_namespace: str = os.environ.get("POD_NAMESPACE", "default")
    lease_name: str = "metal3-ipam-controller"
    lease_timing: LeaseTiming = field(default_factory=LeaseTiming)
    resync_seconds: float = 300.0
    parallel_writes: int = 16
    webhook_port: int = 0  # 0: no admission webhooks
    webhook_cert_dir: str = webhook.DEFAULT_CERT_DIR


def client_configuration(credentials: Credentials, pool_size: int) -> client.Configuration:
    """The kubernetes client's configuration, asking ``credentials`` before every request (as the writer and
    kopf do), so reads, writes and watches always go out as the same user."""
    return credentials.configuration(pool_size)


def liveness(stop_flag: asyncio.Event, elector: LeaderElector | None) -> Callable[[], list[str]]:
    """What /healthz reports: failing while stopping, and for good once the leader election
    ended by itself (a replica that can never lead again must be restarted, not left idle)."""
    def problems() -> list[str]:
        found = ["stopping"] if stop_flag.is_set() else []
        if elector is not None and elector.failure:
            found.append(elector.failure)
        return found

    return problems


async def run(options: Options) -> int:
    try:
        credentials = await asyncio.to_thread(load_credentials, options.kubeconfig)
    except CredentialsError as err:
        log.error("cannot load the cluster credentials: %s", err)
        return 1
    log.info("API server: %s", credentials.describe())
    if credentials.insecure:
        # Asked for in the kubeconfig, and said once above: not again on every request.
        log.warning("the API server's certificate is not verified (insecure-skip-tls-verify)")
        urllib3.disable_warnings(urllib3.exceptions.InsecureRequestWarning)
    configuration = client_configuration(credentials, options.parallel_writes + 4)
    api = client.ApiClient(configuration)
    try:
        resources = await asyncio.to_thread(discover, api)
    except NotInstalled as err:
        log.error("%s", err)
        return 1
    except (ApiException, OSError, urllib3.exceptions.HTTPError) as err:
        log.error("cannot reach the API server at %s: %s", configuration.host,
                  getattr(err, "reason", None) or err)
        return 1

    inventory = Inventory()
    inventory.clusters_served = kinds.CLUSTER in resources
    state = {"loaded": False, "watching": False, "load_failure": ""}
    elector: LeaderElector | None = None
    may_write: Callable[[], bool] = lambda: True

    def on_leadership(leading: bool) -> None:
        if leading:  # whatever happened meanwhile is looked at; losing needs nothing (the gate)
            workers.kick_all()

    if options.leader_elect:
        elector = LeaderElector(api, options.lease_namespace, options.lease_name, options.lease_timing,
                                on_change=on_leadership)
        may_write = elector.may_act
    writer = ApiWriter(credentials, inventory, resources, parallel=options.parallel_writes, may_write=may_write)
    workers = PoolWorkers(inventory, writer, may_act=lambda: state["loaded"] and may_write())
    addresses = {k: r for k, r in resources.items() if k in (kinds.IPADDRESS, kinds.CAPI_ADDRESS)}

    def relist(namespace: str) -> list[Listing]:
        return listings(api, addresses, [namespace])

    controller = Controller(inventory, workers, writer, relist=relist)
    # Pools, claims and addresses are watched by streams of our own (watch.py); kopf watches the rest.
    hot = tuple(kind for kind in HOT_KINDS if kind in resources)
    registry = build_registry(controller, resources, skip=hot)
    streams = Streams(credentials)

    async def relist_kind(kind: tuple[str, str], namespace: str | None) -> str | None:
        """A kind listed again for its watch (its version was gone): filed, and the version to go on from."""
        [listing] = listings(api, {kind: resources[kind]}, [namespace] if namespace else [])
        return await controller.settle(listing)
    kopf.on.login(registry=registry)(login_from(credentials))

    ready_flag = asyncio.Event()
    stop_flag = asyncio.Event()

    alive = liveness(stop_flag, elector)

    def ready() -> list[str]:
        problems = [] if ready_flag.is_set() and state["watching"] else ["watches not started"]
        problems += [] if state["loaded"] else [f"inventory not loaded{state['load_failure']}"]
        cannot_write = writer.readiness()
        return problems + ([cannot_write] if cannot_write else [])

    async def settle_until_done(listing: Listing) -> str | None:
        """A start-up listing, listed again until it goes through: a refusal (rights not granted yet),
        an API server restarting. Until then the replica is not ready, and /readyz says why."""
        pause = 0.5
        while True:
            try:
                version = await controller.settle(listing, first=True)
                state["load_failure"] = ""
                return version
            except Exception as err:
                reason = f"{getattr(err, 'status', None) or ''} {getattr(err, 'reason', None) or err}".strip()
                state["load_failure"] = f": listing {listing} failed ({reason}); again in {pause:.1f} s"
                expected = isinstance(err, (ApiException, OSError, urllib3.exceptions.HTTPError))
                log.log(logging.WARNING if expected else logging.ERROR, "start-up listing of %s failed: %s; "
                        "again in %.1f s", listing, reason, pause, exc_info=not expected)
                await asyncio.sleep(pause)
                pause = min(pause * 2, 30.0)

    async def load() -> None:
        for listing in listings(api, resources, options.namespaces):
            version = await settle_until_done(listing)
            if listing.kind in hot:  # watched from the version it was listed at: nothing in between is missed
                watch = KindWatch(streams, resources[listing.kind], listing.kind, listing.namespace,
                                  controller.on_event, relist_kind, known=controller.knows)
                background.append(asyncio.create_task(watch.run(version), name=f"watch {watch}"))
        state["watching"] = True
        state["loaded"] = True
        log.info("inventory loaded: %d objects", len(inventory.objects))
        workers.kick_all()

    async def resync() -> None:
        # Level-based safety net: every kind is listed again now and then, so
        # a deletion no watch event reported (a watch gap) does not leave a
        # ghost holding an IP; and every pool is looked at again (an
        # unchanged pool costs no API call).
        while True:
            await asyncio.sleep(options.resync_seconds)
            try:
                for listing in listings(api, resources, options.namespaces):
                    await controller.settle(listing)
            except (ApiException, OSError, urllib3.exceptions.HTTPError) as err:
                log.warning("resync listing failed: %s", getattr(err, "reason", None) or err)
            if may_write():
                workers.kick_all()

    background = []
    try:
        runner = await health.serve(options.health_host, options.health_port,
                                    alive=alive, ready=ready)
    except OSError as err:
        log.error("cannot serve health and metrics on %s:%s: %s", options.health_host, options.health_port,
                  err.strerror or err)
        await writer.close()
        return 1
    webhooks = None
    if options.webhook_port:
        pools = resources[kinds.IPPOOL]

        def list_pools(namespace: str) -> list[dict]:
            # Well within the API server's wait for the webhook (10 s): on a timeout the inventory answers.
            return request(api, "GET", pools.path(namespace), timeout=3.0).get("items") or []

        admission = webhook.Admission(inventory, loaded=lambda: state["loaded"], namespaces=options.namespaces,
                                      list_pools=list_pools)
        try:
            webhooks = await webhook.WebhookServer(admission, options.health_host, options.webhook_port,
                                                   options.webhook_cert_dir).start()
        except (OSError, ssl.SSLError) as err:
            log.error("cannot serve admission webhooks on port %s with the certificate in %s: %s",
                      options.webhook_port, options.webhook_cert_dir, getattr(err, "strerror", None) or err)
            await writer.close()
            await runner.cleanup()
            return 1
    if elector is not None:
        elector.start()
    background.append(asyncio.create_task(resync(), name="resync"))
    background.append(asyncio.create_task(load(), name="initial load"))
    log.info("serving %s in %s", ", ".join(f"{r.plural}.{r.group}/{r.version}" for r in resources.values()),
             ", ".join(options.namespaces) or "all namespaces")
    try:
        # No stop_flag for kopf: it stops on SIGTERM/SIGINT by itself, and a waiter on a
        # flag that nothing sets before it returns would hold every shutdown for 5 s.
        await kopf.operator(
            registry=registry, settings=settings(), standalone=True,
            clusterwide=not options.namespaces, namespaces=options.namespaces,
            ready_flag=ready_flag)
    finally:
        stop_flag.set()
        if elector is not None:
            await elector.stop()  # the gate closes: passes under way stop at their next action
        drained = await workers.stop(grace=options.lease_timing.renew_deadline / 2)
        for task in background:
            task.cancel()
        for task in background:
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await task
        if elector is not None:
            if drained:
                await elector.release()
            else:  # a request of ours may still be on its way: let the Lease expire instead
                log.warning("passes did not end in time; the lease is left to expire")
            elector.close()
        await writer.close()
        await streams.close()
        await runner.cleanup()
        if webhooks is not None:
            await webhooks.close()
    return 0
