"""``metal3-ipam run``: wire the kopf watches, the pool workers, leader election and the health server."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
from dataclasses import dataclass, field

import kopf
import urllib3
from kubernetes import client
from kubernetes.client.rest import ApiException

from ..core.inventory import Inventory
from . import health
from .api import ApiWriter
from .credentials import Credentials, CredentialsError, load as load_credentials
from .leader import LeaderElector
from .operator import Controller, NotInstalled, build_registry, discover, initial_load, login_from, settings
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
    resync_seconds: float = 300.0
    parallel_writes: int = 16


def client_configuration(credentials: Credentials, pool_size: int) -> client.Configuration:
    """The kubernetes client's configuration, asking ``credentials`` before every request (as the writer and
    kopf do), so reads, writes and watches always go out as the same user."""
    return credentials.configuration(pool_size)


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
    writer = ApiWriter(credentials, inventory, resources, parallel=options.parallel_writes)
    state = {"leading": not options.leader_elect, "loaded": False}
    workers = PoolWorkers(inventory, writer, may_act=lambda: state["leading"] and state["loaded"])
    controller = Controller(inventory, workers, writer)
    registry = build_registry(controller, resources)
    kopf.on.login(registry=registry)(login_from(credentials))

    ready_flag = asyncio.Event()
    stop_flag = asyncio.Event()

    def on_leadership(leading: bool) -> None:
        state["leading"] = leading
        if leading:
            workers.kick_all()

    async def load() -> None:
        for obj in await asyncio.to_thread(initial_load, api, resources, options.namespaces):
            controller.file(obj)
        state["loaded"] = True
        log.info("inventory loaded: %d objects", len(inventory.objects))
        workers.kick_all()

    async def resync() -> None:
        # Level-based safety net: every pool is looked at again now and then;
        # an unchanged pool costs no API call.
        while True:
            await asyncio.sleep(options.resync_seconds)
            if state["leading"]:
                workers.kick_all()

    def readiness() -> str | None:
        if not ready_flag.is_set():
            return "the watches are not started"
        if not state["loaded"]:
            return "the inventory is not loaded"
        return writer.readiness()

    background = []
    try:
        runner = await health.serve(options.health_host, options.health_port,
                                    alive=lambda: not stop_flag.is_set(),
                                    readiness=readiness)
    except OSError as err:
        log.error("cannot serve health and metrics on %s:%s: %s", options.health_host, options.health_port,
                  err.strerror or err)
        await writer.close()
        return 1
    if options.leader_elect:
        elector = LeaderElector(api, options.lease_namespace, options.lease_name, on_change=on_leadership)
        background.append(asyncio.create_task(elector.run(), name="leader election"))
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
        for task in background:
            task.cancel()
        for task in background:
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await task
        await workers.stop()
        await writer.close()
        await runner.cleanup()
    return 0
