"""The kopf operator: watches feed the inventory, pool workers reconcile.

kopf runs the operator and watches Clusters: one light event handler files
changes and deletions into the inventory and kicks the pools they concern.
Pools, claims and addresses are watched by ``watch.KindWatch`` instead and
handed to the same ``Controller``: claims and addresses come by the thousand,
and kopf's per-object machinery cost more CPU per event than everything else
the controller does for it; a big pool's object (its ``status.indexes``) comes
with every status write, and is decoded without its managedFields (``wire``). Before any pool is reconciled,
every kind is listed once (``listings``): a restarted controller never
mistakes a claim whose address it has not seen yet for a new one.

Event handlers make kopf write nothing (no progress or diff-base
annotations, no finalizers of its own), so the API writes are only those the
reconcile plans; and since no change-detecting handler is used, kopf is told
not to compute diff bases at all.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import AsyncIterator, Callable, Iterator
from dataclasses import dataclass, field
from typing import Any

import kopf
from kubernetes import client
from kubernetes.client.rest import ApiException

from ..core import kinds
from ..core import lockstore
from ..core import poolkind
from ..core import objects as o
from ..core.inventory import Inventory, version_number
from ..core.slim import slim
from .api import ApiWriter, Resource, request
from .credentials import Credentials
from .freezing import Freezer
from .resuming import Resumptions
from .wire import decode_list
from .workers import PoolWorkers

log = logging.getLogger("metal3_ipam.operator")

# The plurals of the kinds that are not pools (a kind of pool says its own: ``plural_of``).
PLURALS = {
    kinds.IPCLAIM: "ipclaims",
    kinds.IPADDRESS: "ipaddresses",
    kinds.CAPI_CLAIM: "ipaddressclaims",
    kinds.CAPI_ADDRESS: "ipaddresses",
    kinds.CLUSTER: "clusters",
}


def plural_of(kind: tuple[str, str]) -> str:
    pool_kind = poolkind.REGISTRY.get(kind)
    return pool_kind.plural if pool_kind is not None else PLURALS[kind]


class NotInstalled(Exception):
    pass


def wanted_kinds() -> list[tuple[str, tuple[str, ...], tuple[tuple[str, str], ...]]]:
    """(group, versions preferred first, kinds) of every kind watched: the kinds of pool as registered,
    each at its own versions (a group may serve pools at v1alpha2 beside claims at v1beta2)."""
    metal3_pools = tuple(k for k in poolkind.REGISTRY if k[0] == kinds.METAL3_GROUP)
    return [(kinds.METAL3_GROUP, (kinds.METAL3_VERSION,), (*metal3_pools, kinds.IPCLAIM, kinds.IPADDRESS)),
            *((kind.group, kind.versions, (kind.kind,)) for kind in poolkind.REGISTRY.values()
              if kind.group != kinds.METAL3_GROUP),
            (kinds.CAPI_IPAM_GROUP, kinds.CAPI_IPAM_VERSIONS, (kinds.CAPI_CLAIM, kinds.CAPI_ADDRESS)),
            (kinds.CLUSTER_GROUP, ("v1beta2", "v1beta1"), (kinds.CLUSTER,))]


def discover(api: client.ApiClient, may_list: Callable[[str, str, str, str | None], bool] | None = None,
             namespace: str | None = None, denied: set | None = None,
             refused_resources: dict | None = None) -> dict[tuple[str, str], Resource]:
    """Which versions of our kinds the cluster serves; Cluster API kinds are optional. With ``may_list``
    (group, version, plural, namespace or None: whether this controller may list them, see ``listable``), a kind it may
    not list is not served either (another provider's, installed beside: its RBAC is not this one's), and is
    added to ``denied``, and with its resource to ``refused_resources`` (asked again: ``listable_again``)."""
    resources = {}
    served_by_group: dict[str, set[str]] = {}
    for group, preferred, group_kinds in wanted_kinds():
        served = served_by_group.get(group)
        if served is None:
            try:
                served = {v["version"] for v in request(api, "GET", f"/apis/{group}")["versions"]}
            except ApiException as err:
                if err.status != 404:
                    raise
                served = set()
            served_by_group[group] = served
        version = next((v for v in preferred if v in served), None)
        if version is None:
            log.warning("%s is not served by this cluster: %s not served", group,
                        ", ".join(kind[1] for kind in group_kinds) + (" are" if len(group_kinds) > 1 else " is"))
            continue
        refused = [kind for kind in group_kinds if may_list is not None and not may_list(
            group, version, plural_of(kind), None if _cluster_scoped(kind) else namespace)]
        if refused:
            log.warning("%s is served, but this controller may not list %s (RBAC): not served", group,
                        ", ".join(kind[1] for kind in refused))
            if denied is not None:
                denied.update(refused)
            if refused_resources is not None:
                refused_resources.update((kind, Resource(group, version, plural_of(kind))) for kind in refused)
        for kind in group_kinds:
            if kind not in refused:
                resources[kind] = Resource(group, version, plural_of(kind))
    if not any(kind in resources for kind in poolkind.REGISTRY):
        raise NotInstalled("no kind of pool is served by this cluster: the CRDs of none of "
                           + ", ".join(f"{k[1]}.{k[0]}" for k in poolkind.REGISTRY) + " are installed")
    return resources


def unserved_kinds(resources: dict[tuple[str, str], Resource], denied: set = frozenset(),
                   leaseless: set = frozenset(), lock_namespace: str = "") -> list[str]:
    """What /readyz says of the kinds not served: one line for those whose CRDs are not installed, one for
    those this controller may not list, one for those whose locks are Leases it may not list (``without_leases``)."""
    ours = (*poolkind.REGISTRY, kinds.IPCLAIM, kinds.IPADDRESS)
    missing = [f"{k[1]}.{k[0]}" for k in ours if k not in resources and k not in denied and k not in leaseless]
    refused = [f"{k[1]}.{k[0]}" for k in ours if k in denied]
    unlocked = [f"{k[1]}.{k[0]}" for k in ours if k in leaseless]
    return ([f"not served (CRD not installed): {', '.join(missing)}"] if missing else []) + \
        ([f"not served (not listable by this controller): {', '.join(refused)}"] if refused else []) + \
        ([f"not served ({LEASES.plural}.{LEASES.group} in {lock_namespace} not listable by this controller): "
          f"{', '.join(unlocked)}"] if unlocked else [])


def without_leases(resources: dict[tuple[str, str], Resource], may_list: Callable[[str, str, str, str | None], bool],
                   lock_namespace: str, leaseless: set) -> None:
    """Where the Lease store would hold locks (``lease_store``) and this controller may not list the Leases of the
    lock namespace (a role without them), the kinds whose locks are Leases are not served (taken out of
    ``resources``, added to ``leaseless``), said once in the log, instead of a listing of the Leases refused
    forever; NotInstalled when no kind of pool is left."""
    if not lease_store(resources) or may_list(LEASES.group, LEASES.version, LEASES.plural, lock_namespace):
        return
    leased = [k for k, kind in poolkind.REGISTRY.items() if k in resources and kind.locks_in_leases]
    for kind in leased:
        del resources[kind]
    leaseless.update(leased)
    said = (f"this controller may not list {LEASES.plural}.{LEASES.group} in {lock_namespace} (RBAC), where the "
            f"locks of {', '.join(k[1] for k in leased)} are kept")
    if not any(kind in resources for kind in poolkind.REGISTRY):
        raise NotInstalled(f"{said}: no kind of pool is served")
    log.warning("%s: not served", said)


def listable(api: client.ApiClient) -> Callable[[str, str, str, str | None], bool]:
    """Whether this controller may list a resource (in a namespace, or everywhere): a listing of one item is
    refused (403) or not. A read, so that a replica standing by for the Lease writes nothing, not even a review;
    True when the answer is another failure (the listing proper says what it is refused)."""
    def may_list(group: str, version: str, plural: str, namespace: str | None) -> bool:
        where = f"namespaces/{namespace}/" if namespace else ""
        try:
            request(api, "GET", f"/apis/{group}/{version}/{where}{plural}?limit=1")
        except ApiException as err:
            return err.status != 403
        return True
    return may_list


def listable_again(may_list: Callable[[str, str, str, str | None], bool],
                   refused: dict[tuple[str, str], Resource], namespace: str | None = None) -> list[tuple[str, str]]:
    """The kinds of ``refused`` (their resources, as ``discover`` found them) this controller may list now: a right
    granted since (RBAC applied after the Deployment). One listing of one item per kind (``listable``)."""
    return [kind for kind, resource in refused.items()
            if may_list(resource.group, resource.version, resource.plural, None if _cluster_scoped(kind) else namespace)]


def lease_store(resources: dict[tuple[str, str], Resource]) -> bool:
    """Whether the Lease store holds locks: a kind served whose locks are Leases (the guards of IPs come with
    the kinds of cluster scope, which are such kinds)."""
    return any(k in resources and kind.locks_in_leases for k, kind in poolkind.REGISTRY.items())


LEASES = Resource("coordination.k8s.io", "v1", lockstore.LEASES_PLURAL)


@dataclass
class Controller:
    """Watch events into the inventory (which drops news older than it knows), pools kicked.

    A Cluster that resumes after ``clusterctl move`` is filed only once the
    addresses of its namespace have been listed again (``resuming``).
    """

    inventory: Inventory
    workers: PoolWorkers
    writer: ApiWriter
    relist: Callable[[str], list["Listing"]] | None = None  # a namespace's addresses, to be listed again
    resumptions: Resumptions | None = field(default=None, init=False)
    # The locks seen as Metal3 IPAddresses that belong in the Lease store, by (namespace, name): the twins of the
    # Leases, and locks an earlier version wrote; ``unsettled``: those ``locks.LockUpkeep`` (which ``on_locks``
    # wakes) is to look at, to give a Lease beside, or their owners to their Lease.
    legacy: dict[tuple[str, str], dict] = field(default_factory=dict, init=False)
    unsettled: set[tuple[str, str]] = field(default_factory=set, init=False)
    on_locks: Callable[[], None] = lambda: None
    # A pool gone (its watch said so): the guards it shared may have no owner left (``locks.LockUpkeep.sweep``).
    on_pool_gone: Callable[[], None] = lambda: None

    def __post_init__(self) -> None:
        if self.relist is not None:
            self.resumptions = Resumptions(self.inventory, self._relist_addresses, self._file_now, self._remove)

    def file(self, obj: dict) -> None:
        key = self.inventory.key(obj)
        if key is not None and key not in self.inventory.objects and not self.inventory.keeps(key, obj):
            return  # another namespace's address of a namespaced pool: not even slimmed
        if self.hidden(obj) or self.not_served(obj):
            return
        obj = slim(obj)  # what is filed is kept for as long as the object lives: only what is read of it
        if self._pending(obj):
            return
        self._file_now(obj)
        self.workers.freezer.maybe_freeze()

    def _file_now(self, obj: dict) -> None:
        self.workers.kick(self.inventory.upsert(obj))

    def _pending(self, obj: dict) -> bool:
        return self.resumptions is not None and self.resumptions.pending(obj)

    async def _relist_addresses(self, namespace: str) -> None:
        for listing in self.relist(namespace):
            await self.settle(listing)

    def on_event(self, event_type: str, obj: dict) -> None:
        """A watch event, as ``watch.KindWatch`` hands it over."""
        if event_type == "DELETED":
            self.forget(obj)
        else:
            self.file(obj)

    def knows(self, kind: tuple[str, str], meta: dict) -> bool:
        """Whether a watch event of ``kind`` with this metadata is no news (``Inventory.holds``): the echo of
        a write whose answer was filed is not decoded past its metadata."""
        return self.inventory.holds(kind, meta)

    def forget(self, obj: dict) -> None:
        if kinds.kind_of(obj) == kinds.CLUSTER and self.resumptions is not None:
            self.resumptions.forget(obj)
        if self.hidden(obj, gone=True):
            return
        self._remove(obj)
        if kinds.kind_of(obj) in poolkind.REGISTRY:
            self.on_pool_gone()
        if lockstore.stored_in_lease(obj):
            self._unhide(obj)

    # -- the locks of the Lease store (``core.lockstore``) -------------------------------

    def hidden(self, obj: dict, gone: bool = False) -> bool:
        """Whether ``obj`` is a lock of the Lease store seen as a Metal3 IPAddress (a Lease's twin, or a lock an
        earlier version wrote) whose name's Lease is filed: the Lease is what the reconcile reads, and its news
        are not filed (``legacy``); the IPAddress holds the name against an earlier version meanwhile."""
        if kinds.kind_of(obj) != kinds.IPADDRESS or lockstore.stored_in_lease(obj) or not lockstore.in_leases(obj):
            return False
        key = (o.namespace(obj), o.name(obj))
        if gone:
            self.legacy.pop(key, None)
            self.unsettled.discard(key)
        else:
            self.legacy[key] = slim(obj)
            self.unsettled.add(key)
            self.on_locks()
        return lockstore.stored_in_lease(self.inventory.get(kinds.IPADDRESS, *key)) is not None

    def _unhide(self, lease_view: dict) -> None:
        """A Lease gone: a Metal3 IPAddress of its name that is another lock (an earlier version's, written once
        the Lease's twin was gone) holds its IP as it is, filed again; a twin of that lock is let go with it."""
        key = (o.namespace(lease_view), o.name(lease_view))
        hidden = self.legacy.get(key)
        if hidden is not None and not lockstore.same_lock(hidden, lease_view) \
                and self.inventory.get(kinds.IPADDRESS, *key) is None:
            self._file_now(hidden)
            self.unsettled.add(key)
            self.on_locks()

    def on_lease_event(self, event_type: str, lease: dict) -> None:
        """A watch event of a Lease of the lock namespace: the lock it stands for filed or forgotten."""
        view = lockstore.from_lease(lease)
        if view is not None:
            self.on_event(event_type, view)

    def hide_listed(self, obj: dict) -> bool:
        """For a listing of the locks: one whose Lease is filed (a Metal3 IPAddress), or of a namespace not served
        (a Lease), is listed, not filed."""
        return self.hidden(obj) or self.not_served(obj)

    def not_served(self, obj: dict) -> bool:
        """A lock of the Lease store of a namespace not served (``-n``) but the lock namespace: the Leases of every
        namespace are in one, but, as a Metal3 IPAddress, the locks of a namespace are only its controller's."""
        served = self.inventory.namespaces
        return served is not None and lockstore.stored_in_lease(obj) is not None \
            and o.namespace(obj) not in served and o.namespace(obj) != self.inventory.lock_namespace

    def _prove_gone(self, namespace: str | None, seen: set, version: str | None) -> None:
        """A listing of the Metal3 IPAddresses (of ``namespace``, or every one) taken at ``version`` proves gone the
        locks seen there (``legacy``) that it did not hold, seen at a version no newer: their DELETED news were lost
        (a watch gap). A twin that went so is given again (``locks.LockUpkeep.give_twins``), as one whose news came."""
        at = version_number(version)
        if at is None:
            return
        for key, obj in list(self.legacy.items()):
            seen_at = version_number(o.meta(obj).get("resourceVersion"))
            if (namespace is None or key[0] == namespace) and (kinds.IPADDRESS, *key) not in seen \
                    and seen_at is not None and seen_at <= at:
                self.legacy.pop(key, None)
                self.unsettled.discard(key)

    def _remove(self, obj: dict) -> None:
        self.workers.kick(self.inventory.remove(obj))

    async def settle(self, listing: "Listing", first: bool = False) -> str | None:
        """File a LIST as its pages come, letting the event loop run between every few hundred objects
        (a listing of 50,000 filed in one go would delay watch events, health probes and lease
        renewals for seconds); returns the version it was taken at, where a watch goes on from.

        Automatic collection is paused throughout (``freezer``), the fetching
        included: the collector would otherwise walk every object listed so
        far, again and again, with the loop blocked. What the listing files is
        frozen as it grows, and at its end.

        ``first``: the start-up listing of its kind. Clusters it shows are
        filed at once (``resuming``): the addresses are listed after them.
        """
        filing = self.inventory.listing(listing.kind, listing.namespace, **({"only": listing.only} if listing.only
                                                                           else {}))
        version = None
        freezer = self.workers.freezer
        pending = self._pending if listing.kind == kinds.CLUSTER and not first else None
        # A listing of the locks where two stores hold them: what is hidden (``hide_listed``) is listed, not filed.
        hold = self.hide_listed if listing.kind == kinds.IPADDRESS and listing.only is not None else pending
        with freezer.paused():
            async with contextlib.aclosing(listing.pages()) as pages:
                async for page in pages:
                    version = version or page.resource_version
                    await file_in_steps(filing.file(page.items, pending=hold), self.workers.kick, freezer)
            await file_in_steps(filing.finish(version), self.workers.kick, freezer)
        if listing.kind == kinds.IPADDRESS and listing.only is not None and not listing.leases:
            self._prove_gone(listing.namespace, filing.seen, version)
        if pending is not None and self.resumptions is not None:
            self.resumptions.listed(listing.namespace, filing.seen, version)  # pending ones it proves gone
        return version


async def file_in_steps(steps: Iterator[set[o.PoolKey]], kick: Callable[[set[o.PoolKey]], None],
                        freezer: Freezer) -> None:
    """Run a filing that yields after each step, letting the event loop run in between, with
    automatic collection paused (``freezer``): what is filed is frozen as it grows, and at the end."""
    with freezer.paused():
        for touched in steps:
            if touched:
                kick(touched)
            freezer.between_slices()
            await asyncio.sleep(0)


# Kinds that come by the thousand, or big: watched by ``watch.KindWatch``, not through kopf's per-object machinery.
def hot_kinds() -> tuple[tuple[str, str], ...]:
    """The kinds our own watches follow (kopf watches the rest): the registered kinds of pool, the claims
    and the addresses."""
    return (*poolkind.REGISTRY, kinds.IPCLAIM, kinds.IPADDRESS, kinds.CAPI_CLAIM, kinds.CAPI_ADDRESS)


def build_registry(controller: Controller, resources: dict[tuple[str, str], Resource],
                   skip: tuple[tuple[str, str], ...] = ()) -> kopf.OperatorRegistry:
    """kopf's handlers: one event handler per served kind, but for those in ``skip`` (watched otherwise)."""
    registry = kopf.OperatorRegistry()
    for kind, resource in resources.items():
        if kind not in skip:
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


# Objects asked for per page of a LIST, and how long a page may take (collection is paused meanwhile).
PAGE = 500
PAGE_TIMEOUT = 60.0


@dataclass
class Page:
    items: list[dict]
    resource_version: str | None
    token: str | None  # where the next page starts (the LIST's "continue"); None: this is the last


class Listing:
    """One LIST of a kind (in a namespace, or everywhere), read page by page.

    Pages of one LIST share the first page's snapshot, so a listing is
    consistent as of one resourceVersion: the inventory files it against
    what the watches already told (an object deleted since is not revived),
    and drops what the listing proves gone. ``fetch(token)`` reads one page
    (blocking: it runs in a thread, where the page is also decoded).
    """

    def __init__(self, kind: tuple[str, str], namespace: str | None, fetch: Callable[[str | None], Page],
                 only: Callable[[dict], bool] | None = None, what: str | None = None) -> None:
        self.kind = kind
        self.namespace = namespace
        self.fetch = fetch
        # Where two stores hold the locks: the stored ones this listing speaks for (``Inventory.listing``).
        self.only = only
        self.what = what
        self.leases = False  # the Leases of the lock namespace, filed as the locks they stand for

    def __str__(self) -> str:
        return self.what or f"{self.kind[1]}.{self.kind[0]}" + (f" in {self.namespace}" if self.namespace else "")

    async def pages(self) -> AsyncIterator[Page]:
        """The pages in order, each fetched in a thread; the next is on its way while this one is filed."""
        pending: asyncio.Future[Page] | None = asyncio.ensure_future(asyncio.to_thread(self.fetch, None))
        try:
            while pending is not None:
                page = await pending
                pending = asyncio.ensure_future(asyncio.to_thread(self.fetch, page.token)) if page.token else None
                yield page
        finally:
            if pending is not None:
                pending.cancel()
                # A failure's traceback refers to this frame: without the task, it is no cycle.
                pending = None


def listings(api: client.ApiClient, resources: dict[tuple[str, str], Resource],
             namespaces: list[str], lock_namespace: str | None = None) -> list[Listing]:
    """Every served kind, one LIST per kind (and namespace); nothing is asked before its pages are read.

    Clusters come first: one listed paused waits for its addresses to be
    listed again when it resumes (``Controller``); one listed unpaused was
    unpaused before the addresses are listed, and ``clusterctl move``
    creates the addresses before it unpauses the Cluster.
    """
    ordered = sorted(resources.items(), key=lambda item: item[0] != kinds.CLUSTER)
    # A kind of pool of cluster scope is listed (and so watched) cluster-wide, whatever namespaces are watched;
    # the locks of such pools (Metal3 IPAddresses) in their one namespace, whatever namespaces are watched too;
    # where such a kind is served, the Cluster API IPAddresses and IPAddressClaims cluster-wide
    # (``Inventory.keeps`` files those of other namespaces only when of such a pool).
    scoped = any(_cluster_scoped(kind) for kind in resources)

    def namespaces_of(kind: tuple[str, str]) -> list[str | None]:
        if _cluster_scoped(kind) or not namespaces or (kind in (kinds.CAPI_ADDRESS, kinds.CAPI_CLAIM) and scoped):
            return [None]
        if kind == kinds.IPADDRESS and lock_namespace and lock_namespace not in namespaces:
            return [*namespaces, lock_namespace]
        return list(namespaces)

    return [_listing(api, kind, resource, namespace) for kind, resource in ordered for namespace in namespaces_of(kind)]


def lock_listings(api: client.ApiClient, resources: dict[tuple[str, str], Resource], namespaces: list[str],
                  home: str, lock_namespace: str | None = None) -> list[Listing]:
    """The locks, where the Lease store is used: its Leases of the lock namespace ``home`` first (each filed as
    the lock it stands for), then the Metal3 IPAddresses where served (of ``namespaces`` and ``lock_namespace``;
    one whose Lease is filed is listed, not filed); each listing proves gone only what its store holds."""
    metal3 = [listing for listing in listings(api, {kinds.IPADDRESS: resources[kinds.IPADDRESS]}, namespaces,
                                               lock_namespace)] if kinds.IPADDRESS in resources else []
    for listing in metal3:
        listing.only = lambda stored: lockstore.stored_in_lease(stored) is None
    return [lease_listing(api, home), *metal3]


def lease_listing(api: client.ApiClient, lock_namespace: str) -> Listing:
    """The Leases of the lock namespace that are locks, as the locks they stand for (of every namespace)."""
    path = LEASES.path(lock_namespace) + f"?labelSelector={lockstore.LOCK_LABEL}&limit={PAGE}"

    def fetch(token: str | None) -> Page:
        answer = request(api, "GET", path + (f"&continue={token}" if token else ""), decode=decode_list,
                         timeout=PAGE_TIMEOUT)
        views = (lockstore.from_lease(item) for item in answer.get("items") or [] if isinstance(item, dict))
        meta = answer.get("metadata") or {}
        return Page([slim(view) for view in views if view is not None], meta.get("resourceVersion"),
                    meta.get("continue") or None)

    listing = Listing(kinds.IPADDRESS, None, fetch, only=lambda stored: lockstore.stored_in_lease(stored) is not None,
                      what=f"leases.coordination.k8s.io in {lock_namespace}")
    listing.leases = True
    return listing


def _cluster_scoped(kind: tuple[str, str]) -> bool:
    pool_kind = poolkind.REGISTRY.get(kind)
    return pool_kind is not None and pool_kind.cluster_scoped


def _listing(api: client.ApiClient, kind: tuple[str, str], resource: Resource, namespace: str | None) -> Listing:
    path = resource.path(namespace)
    api_version = f"{resource.group}/{resource.version}"

    def fetch(token: str | None) -> Page:
        return page_of(request(api, "GET", f"{path}?limit={PAGE}" + (f"&continue={token}" if token else ""),
                               decode=decode_list, timeout=PAGE_TIMEOUT), kind, api_version)

    return Listing(kind, namespace, fetch)


def page_of(answer: dict, kind: tuple[str, str], api_version: str) -> Page:
    """One page of a LIST answer (as ``decode_list`` makes it), its objects kept as ``slim`` keeps them."""
    items = []
    for item in answer.get("items") or []:
        item.setdefault("apiVersion", api_version)
        item.setdefault("kind", kind[1])
        items.append(slim(item))  # here, in the fetching thread
    meta = answer.get("metadata") or {}
    return Page(items, meta.get("resourceVersion"), meta.get("continue") or None)


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
    # The resources are discovered once at start (discover()); kopf need not watch CRDs or
    # namespaces for more, which would take RBAC the controller has no other use for.
    s.scanning.disabled = True
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
