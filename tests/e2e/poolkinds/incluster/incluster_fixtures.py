"""The in-cluster provider's pool kinds on the real API server: objects and waiting.

The pool kinds' CRDs are those of ``config/crd/bases``, which the session's control plane installs:

- :class:`InCluster` (the ``incluster`` fixture of this folder's conftest.py gives one per test): the
  test's namespace, with further namespaces and cluster-scoped pools of its own, cleaned up afterwards.
- :func:`snapshot` reads every IPAddress, lock, claim and pool at one revision of the store;
  :func:`check_incluster` judges it (SPEC §10 for these kinds, a global pool across namespaces), for a
  ``Sentinel(check=...)`` while a test runs and :func:`assert_converged` at its end.

Waiting polls with deadlines (``metal3_ipam.testing.waiting.eventually``); nothing sleeps to
synchronise.
"""

from __future__ import annotations

import ipaddress
import uuid
from collections import defaultdict
from dataclasses import dataclass
from typing import Any, Iterable

from kubernetes import client
from kubernetes.client.rest import ApiException

from controller_fixtures import CLUSTER, Findings, Kube, condition, until_converged
from metal3_ipam.core.kinds import GUARD_LABEL
from metal3_ipam.testing import go_incluster as gi
from metal3_ipam.testing.locks import held_locks
from metal3_ipam.testing.waiting import eventually

#: How long a claim may take to be served by a running controller (it takes well under a second).
BIND = 20.0


# --------------------------------------------------------------------------- objects


class InCluster:
    """Pools of the provider's kinds, claims of them and their IPAddresses, in the test's namespace
    (``ns``) and in further namespaces of its own."""

    def __init__(self, api_client: client.ApiClient, kube: Kube) -> None:
        self.api_client = api_client
        self.kube = kube
        self.ns = kube.ns
        self.custom = client.CustomObjectsApi(api_client)
        self.core = client.CoreV1Api(api_client)
        self.writer = gi.GoInClusterWriter(api_client)
        self.namespaces: list[str] = [kube.ns]
        self.global_pools: list[tuple[str, str]] = []

    # -- making ----------------------------------------------------------------

    def namespace(self) -> str:
        """A further namespace of this test."""
        name = f"t-{uuid.uuid4().hex[:10]}"
        self.core.create_namespace(client.V1Namespace(metadata=client.V1ObjectMeta(name=name)))
        self.namespaces.append(name)
        return name

    def global_name(self, name: str) -> str:
        """A cluster-scoped name of this test's own (tests share one API server)."""
        return f"{self.ns}-{name}"

    def ip_pool(self, name: str, *, namespace: str | None = None, **spec: Any) -> dict:
        return self.writer.create(gi.ip_pool(name, namespace=namespace or self.ns, **spec))

    def global_ip_pool(self, name: str, **spec: Any) -> dict:
        """A GlobalInClusterIPPool named exactly ``name`` (make it unique with :meth:`global_name`)."""
        self.global_pools.append((gi.GLOBAL_IN_CLUSTER_IP_POOL, name))
        return self.writer.create(gi.ip_pool(name, namespace=None, **spec))

    def prefix_pool(self, name: str, *, namespace: str | None = None, **spec: Any) -> dict:
        return self.writer.create(gi.prefix_pool(name, namespace=namespace or self.ns, **spec))

    def claim(self, name: str, pool: str, kind: str = gi.IN_CLUSTER_IP_POOL, *, namespace: str | None = None,
              **kwargs: Any) -> dict:
        return self.writer.create(gi.claim(name, namespace or self.ns, kind, pool, **kwargs))

    def cluster(self, name: str, *, namespace: str | None = None, paused: bool = False,
                annotations: dict | None = None) -> dict:
        meta: dict[str, Any] = {"name": name}
        if annotations:
            meta["annotations"] = annotations
        return self.custom.create_namespaced_custom_object(
            *CLUSTER, namespace or self.ns, "clusters",
            {"apiVersion": "/".join(CLUSTER), "kind": "Cluster", "metadata": meta, "spec": {"paused": paused}})

    def patch_cluster(self, name: str, body: dict, *, namespace: str | None = None) -> dict:
        return self.custom.patch_namespaced_custom_object(*CLUSTER, namespace or self.ns, "clusters", name, body)

    def delete_cluster(self, name: str, *, namespace: str | None = None) -> None:
        self.custom.delete_namespaced_custom_object(*CLUSTER, namespace or self.ns, "clusters", name)

    # -- reading -----------------------------------------------------------------

    def _get(self, group: str, version: str, plural: str, name: str, namespace: str | None) -> dict | None:
        try:
            if namespace:
                return self.custom.get_namespaced_custom_object(group, version, namespace, plural, name)
            return self.custom.get_cluster_custom_object(group, version, plural, name)
        except ApiException as err:
            if err.status == 404:
                return None
            raise

    def pool(self, name: str, kind: str = gi.IN_CLUSTER_IP_POOL, *, namespace: str | None = None) -> dict | None:
        ns = None if kind in gi.GLOBAL_POOL_KINDS else (namespace or self.ns)
        return self._get(gi.GROUP, gi.POOL_VERSION, gi.PLURALS[kind], name, ns)

    def get_claim(self, name: str, *, namespace: str | None = None) -> dict | None:
        return self._get(gi.GROUP, gi.CAPI_VERSION, "ipaddressclaims", name, namespace or self.ns)

    def get_address(self, name: str, *, namespace: str | None = None) -> dict | None:
        return self._get(gi.GROUP, gi.CAPI_VERSION, "ipaddresses", name, namespace or self.ns)

    def addresses(self, *, namespace: str | None = None) -> list[dict]:
        return self.custom.list_namespaced_custom_object(gi.GROUP, gi.CAPI_VERSION, namespace or self.ns,
                                                         "ipaddresses")["items"]

    def all_addresses(self) -> list[dict]:
        """The IPAddresses of every namespace of this test."""
        return [a for ns in self.namespaces for a in self.addresses(namespace=ns)]

    # -- waiting ---------------------------------------------------------------

    def served(self, name: str, *, namespace: str | None = None, timeout: float = BIND) -> dict:
        """Wait for the claim to be Ready=True with ``status.addressRef`` naming its IPAddress (named after
        it) and to carry the provider's finalizer (written in the same step as the status, after it); returns
        that IPAddress."""
        ns = namespace or self.ns

        def check():
            c = self.get_claim(name, namespace=ns)
            ready = condition(c, "Ready")
            ref = ((c or {}).get("status") or {}).get("addressRef") or {}
            if not (ready and ready["status"] == "True" and ref.get("name")):
                return None
            if gi.CLAIM_FINALIZER not in (c["metadata"].get("finalizers") or []):
                return None
            assert ref["name"] == name, f"claim {ns}/{name} refers to {ref}, not to an IPAddress named after it"
            return self.get_address(name, namespace=ns)

        return eventually(check, timeout=timeout,
                          what=f"IPAddressClaim {ns}/{name} Ready=True with an IPAddress named after it and the finalizer")

    def ip(self, name: str, *, namespace: str | None = None, timeout: float = BIND) -> str:
        return self.served(name, namespace=namespace, timeout=timeout)["spec"]["address"]

    def not_ready(self, name: str, reason: str, *, namespace: str | None = None, timeout: float = BIND) -> dict:
        """Wait for the claim's Ready=False with ``reason`` and a message; returns the condition."""
        ns = namespace or self.ns

        def check():
            ready = condition(self.get_claim(name, namespace=ns), "Ready")
            return ready if ready and ready["status"] == "False" and ready.get("reason") == reason else None

        ready = eventually(check, timeout=timeout, what=f"IPAddressClaim {ns}/{name} Ready=False {reason}")
        assert ready.get("message"), f"IPAddressClaim {ns}/{name}: Ready=False {reason} without a message"
        return ready

    def counts(self, name: str, kind: str = gi.IN_CLUSTER_IP_POOL, *, namespace: str | None = None) -> dict | None:
        return ((self.pool(name, kind, namespace=namespace) or {}).get("status") or {}).get("ipAddresses")

    def wait_counts(self, name: str, expected: dict, kind: str = gi.IN_CLUSTER_IP_POOL, *,
                    namespace: str | None = None, timeout: float = BIND) -> dict:
        """Wait for ``status.ipAddresses`` == ``expected`` and the pool's Ready=True; returns the pool."""
        def check():
            pool = self.pool(name, kind, namespace=namespace)
            status = (pool or {}).get("status") or {}
            ready = condition(pool, "Ready")
            if status.get("ipAddresses") == expected and ready and ready["status"] == "True":
                return pool
            return None

        return eventually(check, timeout=timeout,
                          what=f"{kind} {name}: status.ipAddresses {expected} and Ready=True; "
                               f"has {self.counts(name, kind, namespace=namespace)}")

    def delete_claim(self, name: str, *, namespace: str | None = None) -> None:
        self.custom.delete_namespaced_custom_object(gi.GROUP, gi.CAPI_VERSION, namespace or self.ns,
                                                    "ipaddressclaims", name)

    def claim_gone(self, name: str, *, namespace: str | None = None, timeout: float = BIND) -> None:
        ns = namespace or self.ns
        eventually(lambda: self.get_claim(name, namespace=ns) is None and self.get_address(name, namespace=ns) is None,
                   timeout=timeout, what=f"IPAddressClaim {ns}/{name} and its IPAddress to be gone")

    # -- afterwards ---------------------------------------------------------------

    def cleanup(self) -> None:
        """Claims first (so that pools can go), then the cluster-scoped pools and further namespaces; not
        waited for."""
        for ns in self.namespaces:
            try:
                self.custom.delete_collection_namespaced_custom_object(gi.GROUP, gi.CAPI_VERSION, ns,
                                                                       "ipaddressclaims")
            except ApiException:
                pass
        for kind, name in self.global_pools:
            try:
                self.custom.delete_cluster_custom_object(gi.GROUP, gi.POOL_VERSION, gi.PLURALS[kind], name)
            except ApiException:
                pass
        for ns in self.namespaces[1:]:
            try:
                self.core.delete_namespace(ns)
            except ApiException:
                pass


# --------------------------------------------------------------------------- checks


def ip_int(text: str) -> int:
    return int(ipaddress.ip_address(text))


def assert_go_shape(address: dict, claim: dict, pool: dict) -> None:
    """The IPAddress is what the provider writes for this claim of this pool (uids included); the claim
    carries the provider's finalizer."""
    want = gi.ipaddress_body(claim, pool, gi.Grant(address["spec"]["address"], address["spec"]["prefix"],
                                                   address["spec"].get("gateway")))
    meta = address["metadata"]
    got = {"apiVersion": address["apiVersion"], "kind": address["kind"], "spec": address["spec"],
           "metadata": {k: meta[k] for k in ("name", "namespace", "finalizers", "ownerReferences", "labels")
                        if k in meta}}
    assert got == want, f"IPAddress {meta['namespace']}/{meta['name']} is not what the provider writes"
    assert gi.CLAIM_FINALIZER in (claim["metadata"].get("finalizers") or []), claim["metadata"]


def unique_ips(addresses: Iterable[dict]) -> None:
    """No IP held by two IPAddresses."""
    seen: dict[int, str] = {}
    for a in addresses:
        where = f"{a['metadata']['namespace']}/{a['metadata']['name']}"
        ip = ip_int(a["spec"]["address"])
        assert ip not in seen, f"{a['spec']['address']} held by {seen[ip]} and {where}"
        seen[ip] = where


# --------------------------------------------------------------------------- invariants under chaos

@dataclass(frozen=True)
class PoolKey:
    """One pool of the provider's kinds: ``namespace`` is empty for a global pool."""

    kind: str
    namespace: str
    name: str

    def __str__(self) -> str:
        return f"{self.kind} {self.namespace + '/' if self.namespace else ''}{self.name}"


def _alive(obj: dict) -> bool:
    return not obj["metadata"].get("deletionTimestamp")


def _held(address: dict) -> tuple:
    """What an IPAddress (or lock) holds: its IP, or for a prefix pool its sub-prefix."""
    spec = address["spec"]
    return (ipaddress.ip_address(spec["address"]), spec.get("prefix"))


@dataclass
class Snapshot:
    """Every object of the pools' world at one revision of the store (etcd revisions span every resource, so
    the lists read at one revision are one consistent moment)."""

    revision: str
    addresses: list[dict]
    locks: list[dict]
    claims: list[dict]
    pools: dict[PoolKey, dict]


def snapshot(custom: client.CustomObjectsApi, namespaces: Iterable[str], pools: Iterable[PoolKey],
             lock_namespace: str = "default") -> Snapshot:
    namespaces = set(namespaces)
    pools = list(pools)
    first = custom.list_cluster_custom_object(gi.GROUP, gi.CAPI_VERSION, "ipaddresses")
    revision = first["metadata"]["resourceVersion"]
    at = {"resource_version": revision, "resource_version_match": "Exact"}

    def listed(group: str, version: str, plural: str) -> list[dict]:
        return custom.list_cluster_custom_object(group, version, plural, **at)["items"]

    in_scope = lambda objs: [o for o in objs if o["metadata"].get("namespace") in namespaces]  # noqa: E731
    pool_objects = {}
    for kind in sorted({p.kind for p in pools}):
        for p in listed(gi.GROUP, gi.POOL_VERSION, gi.PLURALS[kind]):
            key = PoolKey(kind, p["metadata"].get("namespace") or "", p["metadata"]["name"])
            if key in pools:
                pool_objects[key] = p
    locks = held_locks(custom.api_client, lock_namespace, **at)
    return Snapshot(revision, in_scope(first["items"]), in_scope(locks),
                    in_scope(listed(gi.GROUP, gi.CAPI_VERSION, "ipaddressclaims")), pool_objects)


def pool_of(obj: dict) -> PoolKey | None:
    """The pool an IPAddressClaim or IPAddress names (``poolRef``), or a lock's (``spec.pool``)."""
    spec = obj.get("spec") or {}
    ref = spec.get("poolRef") or spec.get("pool") or {}
    kind = ref.get("kind")
    if kind not in gi.POOL_KINDS or GUARD_LABEL in ((obj.get("metadata") or {}).get("labels") or {}):
        return None  # the guard of an IP in its claim's namespace: no address, no lock
        return None
    if kind in gi.GLOBAL_POOL_KINDS:
        return PoolKey(kind, "", ref.get("name"))
    return PoolKey(kind, ref.get("namespace") or obj["metadata"]["namespace"], ref.get("name"))


def check_incluster(snap: Snapshot, totals: dict[PoolKey, int], *, strict: bool = True) -> Findings:
    """SPEC §10 over the pools ``totals`` names (pool -> the size of its set), at one moment.

    Never allowed: an IP (sub-prefix) of a pool held by two IPAddresses (``strict``: even one being
    deleted, since the lock goes only after the address; for a global pool across every namespace); two
    IPAddresses for one claim; an IPAddress whose lock is missing or made for another claim; a live claim
    Ready with an IPAddress that is not there.

    Once converged: every live claim Ready=True with its IPAddress named after it and the claim's
    finalizer; no claim left being deleted; no IPAddress or lock without its live claim, one lock per
    IPAddress; every pool's counts right and Ready=True.
    """
    f = Findings()
    mine = set(totals)
    claims = {(c["metadata"]["namespace"], c["metadata"]["name"]): c for c in snap.claims if pool_of(c) in mine}
    addresses = [a for a in snap.addresses if pool_of(a) in mine]
    locks = [lk for lk in snap.locks if pool_of(lk) in mine]
    f.counts = {"claims": len(claims), "addresses": len(addresses), "locks": len(locks),
                "live claims": sum(_alive(c) for c in claims.values())}

    # -- never allowed -----------------------------------------------------------------
    holders: dict[tuple, list[dict]] = defaultdict(list)
    for a in addresses:
        if strict or _alive(a):
            holders[(pool_of(a), _held(a))].append(a)
    for (pool, held), same in holders.items():
        if len(same) > 1:
            f.broken.append(f"{pool}: {held[0]} held by {len(same)} IPAddresses "
                            f"{sorted(_where(a) for a in same)}")
    of_claim: dict[tuple[str, str], list[dict]] = defaultdict(list)
    for a in addresses:
        of_claim[(a["metadata"]["namespace"], a["spec"]["claimRef"]["name"])].append(a)
    for key, same in of_claim.items():
        if len(same) > 1:
            f.broken.append(f"claim {key[0]}/{key[1]} has {len(same)} IPAddresses {sorted(_where(a) for a in same)}")
    lock_at = {(pool_of(lk), _held(lk)): lk for lk in locks}
    for a in addresses:
        if not _alive(a):
            continue
        lk = lock_at.get((pool_of(a), _held(a)))
        claim = lk and lk["spec"].get("claim") or {}
        if lk is None:
            f.broken.append(f"IPAddress {_where(a)} ({a['spec']['address']}) has no lock")
        elif (claim.get("namespace"), claim.get("name")) != (a["metadata"]["namespace"], a["spec"]["claimRef"]["name"]):
            f.broken.append(f"IPAddress {_where(a)} ({a['spec']['address']}): its lock {lk['metadata']['name']} "
                            f"was made for {claim.get('namespace')}/{claim.get('name')}")
    address_at = {(a["metadata"]["namespace"], a["metadata"]["name"]): a for a in addresses}
    for key, c in claims.items():
        ready = condition(c, "Ready")
        ref = ((c.get("status") or {}).get("addressRef") or {}).get("name")
        if _alive(c) and ready and ready["status"] == "True" and ref and (key[0], ref) not in address_at:
            f.broken.append(f"claim {key[0]}/{key[1]} is Ready with {ref}, which is not there")

    # -- once converged ---------------------------------------------------------------
    for key, c in claims.items():
        where = f"claim {key[0]}/{key[1]}"
        if not _alive(c):
            f.pending.append(f"{where} is still being deleted")
            continue
        a = address_at.get(key)
        ready = condition(c, "Ready")
        if a is None:
            f.pending.append(f"{where} has no IPAddress (Ready {ready})")
            continue
        if pool_of(a) != pool_of(c):
            f.pending.append(f"{where} of {pool_of(c)} has an IPAddress of {pool_of(a)}")
        if not ready or ready["status"] != "True":
            f.pending.append(f"{where} has an IPAddress but Ready is {ready}")
        if ((c.get("status") or {}).get("addressRef") or {}).get("name") != key[1]:
            f.pending.append(f"{where}: status.addressRef {(c.get('status') or {}).get('addressRef')}")
        if gi.CLAIM_FINALIZER not in (c["metadata"].get("finalizers") or []):
            f.pending.append(f"{where} lacks its finalizer")
    for a in addresses:
        c = claims.get((a["metadata"]["namespace"], a["spec"]["claimRef"]["name"]))
        if c is None or not _alive(c):
            f.pending.append(f"IPAddress {_where(a)} outlives its claim")
    held = {(pool_of(a), _held(a)) for a in addresses}
    for key, lk in lock_at.items():
        if key not in held:
            f.pending.append(f"lock {lk['metadata']['namespace']}/{lk['metadata']['name']} holds "
                             f"{lk['spec']['address']} for no IPAddress (claim {lk['spec'].get('claim')})")
    for pool, total in totals.items():
        p = snap.pools.get(pool)
        if p is None:
            f.pending.append(f"{pool} is missing")
            continue
        used = sum(1 for a in addresses if pool_of(a) == pool)
        want = {"total": total, "used": used, "free": total - used, "outOfRange": 0}
        got = (p.get("status") or {}).get("ipAddresses")
        if got != want:
            f.pending.append(f"{pool}: status.ipAddresses {got}, not {want}")
        ready = condition(p, "Ready")
        if not ready or ready["status"] != "True":
            f.pending.append(f"{pool}: Ready is {ready}")
    return f


def _where(obj: dict) -> str:
    return f"{obj['metadata'].get('namespace')}/{obj['metadata']['name']}"


def assert_converged(custom: client.CustomObjectsApi, namespaces: Iterable[str], totals: dict[PoolKey, int],
                     timeout: float = 60.0, lock_namespace: str = "default") -> Findings:
    """Fail at once on what must never happen; wait up to ``timeout`` for the rest."""
    namespaces = list(namespaces)
    return until_converged(lambda: check_incluster(snapshot(custom, namespaces, totals, lock_namespace), totals),
                           timeout,
                           ", ".join(namespaces))
