"""The kopf operator: watches feed the inventory, pool workers reconcile.

kopf does the watching (lists, watches, reconnects, namespaces). Every kind
gets one light event handler, which files changes and deletions into the
inventory and kicks the pools they concern. Before any pool is reconciled,
every kind is listed once (``initial_load``): a restarted controller never
mistakes a claim whose address it has not seen yet for a new one.

Event handlers make kopf write nothing (no progress or diff-base
annotations, no finalizers of its own), so the API writes are only those the
reconcile plans; and since no change-detecting handler is used, kopf is told
not to compute diff bases at all.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from typing import Any

import kopf
from kubernetes import client
from kubernetes.client.rest import ApiException

from ..core import kinds
from ..core import objects as o
from ..core.inventory import Inventory
from .api import ApiWriter, Resource, request
from .credentials import Credentials
from .workers import PoolWorkers

log = logging.getLogger("metal3_ipam.operator")

PLURALS = {
    kinds.IPPOOL: "ippools",
    kinds.IPCLAIM: "ipclaims",
    kinds.IPADDRESS: "ipaddresses",
    kinds.CAPI_CLAIM: "ipaddressclaims",
    kinds.CAPI_ADDRESS: "ipaddresses",
    kinds.CLUSTER: "clusters",
}


class NotInstalled(Exception):
    pass


def discover(api: client.ApiClient) -> dict[tuple[str, str], Resource]:
    """Which versions of our kinds the cluster serves; Cluster API kinds are optional."""
    resources = {}
    wanted = {
        kinds.METAL3_GROUP: ((kinds.METAL3_VERSION,), (kinds.IPPOOL, kinds.IPCLAIM, kinds.IPADDRESS)),
        kinds.CAPI_IPAM_GROUP: (kinds.CAPI_IPAM_VERSIONS, (kinds.CAPI_CLAIM, kinds.CAPI_ADDRESS)),
        kinds.CLUSTER_GROUP: (("v1beta2", "v1beta1"), (kinds.CLUSTER,)),
    }
    for group, (preferred, group_kinds) in wanted.items():
        try:
            served = {v["version"] for v in request(api, "GET", f"/apis/{group}")["versions"]}
        except ApiException as err:
            if err.status != 404:
                raise
            served = set()
        version = next((v for v in preferred if v in served), None)
        if version is None:
            if group == kinds.METAL3_GROUP:
                raise NotInstalled(f"the {group} CRDs ({kinds.METAL3_VERSION}) are not installed in this cluster")
            log.warning("%s is not served by this cluster: its kinds are not watched", group)
            continue
        for kind in group_kinds:
            resources[kind] = Resource(group, version, PLURALS[kind])
    return resources


def _newer_or_same(stored: dict | None, incoming: dict) -> bool:
    """Drop a watch event older than what our own write already put in the inventory."""
    if stored is None:
        return True
    before = str(o.meta(stored).get("resourceVersion", ""))
    after = str(o.meta(incoming).get("resourceVersion", ""))
    if before.isdigit() and after.isdigit() and o.meta(stored).get("uid") == o.meta(incoming).get("uid"):
        return int(after) >= int(before)
    return True


@dataclass
class Controller:
    inventory: Inventory
    workers: PoolWorkers
    writer: ApiWriter

    def file(self, obj: dict) -> None:
        key = self.inventory.key(obj)
        if key is None:
            return
        if _newer_or_same(self.inventory.objects.get(key), obj):
            self.workers.kick(self.inventory.upsert(obj))

    def forget(self, obj: dict) -> None:
        self.workers.kick(self.inventory.remove(obj))


def build_registry(controller: Controller, resources: dict[tuple[str, str], Resource]) -> kopf.OperatorRegistry:
    registry = kopf.OperatorRegistry()
    for kind, resource in resources.items():
        _register(registry, controller, kind, resource)
    return registry


def _register(registry: kopf.OperatorRegistry, controller: Controller, kind: tuple[str, str],
              resource: Resource) -> None:
    # Async, so that it runs on the event loop with the workers (sync handlers run in threads).
    async def event(event: dict, **_: Any) -> None:
        obj = event.get("object")
        if not isinstance(obj, dict):
            return
        if event.get("type") == "DELETED":
            controller.forget(obj)
        else:
            controller.file(obj)

    kopf.on.event(resource.group, resource.version, resource.plural,
                  id=f"watch-{resource.plural}.{resource.group}", registry=registry)(event)


def initial_load(api: client.ApiClient, resources: dict[tuple[str, str], Resource],
                 namespaces: list[str]) -> list[dict]:
    """Every object of every served kind, one paginated LIST per kind (and namespace)."""
    found = []
    for kind, resource in resources.items():
        for namespace in namespaces or [None]:
            prefix = f"/apis/{resource.group}/{resource.version}"
            path = (f"{prefix}/namespaces/{namespace}/{resource.plural}" if namespace
                    else f"{prefix}/{resource.plural}")
            token = None
            while True:
                page = request(api, "GET", f"{path}?limit=500" + (f"&continue={token}" if token else ""))
                for item in page.get("items") or []:
                    item.setdefault("apiVersion", f"{resource.group}/{resource.version}")
                    item.setdefault("kind", kind[1])
                    found.append(item)
                token = (page.get("metadata") or {}).get("continue")
                if not token:
                    break
    return found


class _NoDiffBase(kopf.DiffBaseStorage):
    """Only event handlers are used: there is nothing to diff, so build nothing."""

    def build(self, *, body: kopf.Body, extra_fields: Any = None) -> None:  # type: ignore[override]
        return None

    def fetch(self, *, body: kopf.Body) -> None:
        return None

    def store(self, *, body: kopf.Body, patch: kopf.Patch, essence: Any) -> None:
        return None


def settings() -> kopf.OperatorSettings:
    s = kopf.OperatorSettings()
    s.posting.enabled = False  # Events are the reconcile's to post, not kopf's log lines
    s.persistence.diffbase_storage = _NoDiffBase()
    s.watching.server_timeout = 300
    s.watching.client_timeout = 330
    return s


def login_from(credentials: Credentials):
    """A kopf login handler: the credentials the reads and the writer use, asked again at every login.

    kopf logs in again when a credential expires (an exec plugin's, a little
    before it does) and after the server answered 401. Asked again for the
    very header it had, it had been refused: the token file is read and the
    plugin run anew, as the writer does after a 401.
    """
    last: dict[str, str | None] = {}

    def login(**_: Any) -> kopf.ConnectionInfo:
        header = credentials.authorization()
        if "header" in last and last["header"] == header:
            credentials.refused(header)
        info = credentials.connection_info()
        last["header"] = credentials.authorization()
        return info
    return login
