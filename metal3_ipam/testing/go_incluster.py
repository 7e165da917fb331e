"""State as the Cluster API in-cluster IPAM provider (Go) leaves it: pure builders, and a writer.

Users replace that provider with this controller on a live management cluster, so tests must
be able to put a cluster into exactly the state it leaves. The shapes follow what the provider
writes (kubernetes-sigs/cluster-api-ipam-provider-in-cluster: ``pkg/ipamutil``,
``internal/controllers``, ``internal/poolutil``) and the objects a real provider wrote on a real
API server (``/work/shared/fixtures/go-incluster-state.yaml``, kept as
``tests/fixtures/go-incluster-state.yaml``):

- a pool (``InClusterIPPool`` / ``GlobalInClusterIPPool`` / ``InClusterPrefixPool`` /
  ``GlobalInClusterPrefixPool``, ``ipam.cluster.x-k8s.io/v1alpha2``) gets the finalizer
  ``ipam.cluster.x-k8s.io/ProtectPool`` and ``status.ipAddresses {total, used, free, outOfRange}``
  and nothing else (no labels, owner references or conditions). For IP pools ``free`` is
  ``total - used`` even when some used addresses are out of range (the provider's known error);
  for prefix pools ``free = max(0, total - used + outOfRange)``. Counts beyond a Go int read
  ``2**63 - 1``;
- a claim (``IPAddressClaim``) gets ``ipam.cluster.x-k8s.io/ReleaseAddress`` and
  ``status.addressRef.name`` (= the claim's name), no conditions;
- its ``IPAddress`` is named after the claim, in the claim's namespace (a global pool's
  addresses live in their claims' namespaces), finalizer ``ipam.cluster.x-k8s.io/ProtectAddress``,
  owner references the claim (``controller: true``) then the pool (``controller: false`` written
  out), both ``blockOwnerDeletion: true``, the ``cluster.x-k8s.io/cluster-name`` label copied
  only from the claim's labels (never from ``spec.clusterName``; no other label), spec
  ``claimRef {name}``, ``poolRef {apiGroup, kind, name}``, ``address``, ``prefix`` and
  ``gateway`` (left out when the pool has none);
- an address in its reuse grace period: its claim deleted (``deletionTimestamp`` set,
  ``deletionGracePeriodSeconds: 0``) with its finalizer still on, the address kept and counted.

Allocation follows the provider too: IP pools hand out the lowest free address of the pool's
set (the union of ``addresses``, minus ``excludedAddresses``, minus the first address of
``<lowest address>/<prefix>`` and for IPv4 its last unless ``allocateReservedIPAddresses``,
minus the gateway), whatever the order the entries are written in; prefix pools the lowest
aligned sub-prefix of ``allocationPrefixLength`` (default 64) overlapping no excluded or
allocated prefix.

The body builders and :class:`GoInCluster` are pure; :class:`GoInClusterWriter` writes the same
state through a real API server in the provider's order: the user's pools and claims, then per
claim its finalizer (the provider's first pass), the address and the claim's status, then the
pools' finalizer and status, then the deletions of claims held in their grace period.
"""

from __future__ import annotations

import copy
import ipaddress
from dataclasses import dataclass, field
from typing import Any, Iterable, Mapping, Sequence

GROUP = "ipam.cluster.x-k8s.io"
POOL_VERSION = "v1alpha2"
CAPI_VERSION = "v1beta2"
POOL_API_VERSION = f"{GROUP}/{POOL_VERSION}"
CAPI_API_VERSION = f"{GROUP}/{CAPI_VERSION}"

IN_CLUSTER_IP_POOL = "InClusterIPPool"
GLOBAL_IN_CLUSTER_IP_POOL = "GlobalInClusterIPPool"
IN_CLUSTER_PREFIX_POOL = "InClusterPrefixPool"
GLOBAL_IN_CLUSTER_PREFIX_POOL = "GlobalInClusterPrefixPool"
IP_POOL_KINDS = (IN_CLUSTER_IP_POOL, GLOBAL_IN_CLUSTER_IP_POOL)
PREFIX_POOL_KINDS = (IN_CLUSTER_PREFIX_POOL, GLOBAL_IN_CLUSTER_PREFIX_POOL)
POOL_KINDS = IP_POOL_KINDS + PREFIX_POOL_KINDS
GLOBAL_POOL_KINDS = (GLOBAL_IN_CLUSTER_IP_POOL, GLOBAL_IN_CLUSTER_PREFIX_POOL)
PLURALS = {kind: kind.lower() + "s" for kind in POOL_KINDS}

POOL_FINALIZER = "ipam.cluster.x-k8s.io/ProtectPool"
CLAIM_FINALIZER = "ipam.cluster.x-k8s.io/ReleaseAddress"
ADDRESS_FINALIZER = "ipam.cluster.x-k8s.io/ProtectAddress"
SKIP_DELETE_WEBHOOK = "ipam.cluster.x-k8s.io/skip-validate-delete-webhook"
CLUSTER_NAME_LABEL = "cluster.x-k8s.io/cluster-name"
PAUSED_ANNOTATION = "cluster.x-k8s.io/paused"

DEFAULT_ALLOCATION_PREFIX_LENGTH = 64
GO_MAX_INT = 2 ** 63 - 1


class Exhausted(Exception):
    """No address (or prefix) left: the provider logs it and writes nothing."""


# --------------------------------------------------------------------------- what users write


def ip_pool(name: str, *, addresses: Sequence[str], prefix: int, namespace: str | None = None,
            gateway: str | None = None, excluded: Sequence[str] | None = None,
            allocate_reserved: bool | None = None, grace_seconds: int | None = None,
            annotations: Mapping[str, str] | None = None) -> dict:
    """An ``InClusterIPPool`` (``namespace`` given) or ``GlobalInClusterIPPool`` (no namespace)."""
    spec: dict[str, Any] = {"addresses": list(addresses), "prefix": prefix}
    if gateway:
        spec["gateway"] = gateway
    if excluded:
        spec["excludedAddresses"] = list(excluded)
    if allocate_reserved is not None:
        spec["allocateReservedIPAddresses"] = allocate_reserved
    if grace_seconds is not None:
        spec["addressReuseGracePeriodSeconds"] = grace_seconds
    kind = IN_CLUSTER_IP_POOL if namespace else GLOBAL_IN_CLUSTER_IP_POOL
    return _object(POOL_API_VERSION, kind, name, namespace, spec, annotations=annotations)


def prefix_pool(name: str, *, prefixes: Sequence[str], namespace: str | None = None,
                allocation_prefix_length: int | None = None, gateway: str | None = None,
                excluded: Sequence[str] | None = None) -> dict:
    """An ``InClusterPrefixPool`` (``namespace`` given) or ``GlobalInClusterPrefixPool``."""
    spec: dict[str, Any] = {"prefixes": list(prefixes)}
    if allocation_prefix_length is not None:
        spec["allocationPrefixLength"] = allocation_prefix_length
    if gateway:
        spec["gateway"] = gateway
    if excluded:
        spec["excludedPrefixes"] = list(excluded)
    kind = IN_CLUSTER_PREFIX_POOL if namespace else GLOBAL_IN_CLUSTER_PREFIX_POOL
    return _object(POOL_API_VERSION, kind, name, namespace, spec)


def claim(name: str, namespace: str, pool_kind: str, pool_name: str, *, cluster_name: str | None = None,
          labels: Mapping[str, str] | None = None, annotations: Mapping[str, str] | None = None,
          version: str = CAPI_VERSION) -> dict:
    """A Cluster API ``IPAddressClaim`` of one of these pools; ``cluster_name`` is ``spec.clusterName``."""
    spec: dict[str, Any] = {"poolRef": {"apiGroup": GROUP, "kind": pool_kind, "name": pool_name}}
    if cluster_name:
        spec["clusterName"] = cluster_name
    return _object(f"{GROUP}/{version}", "IPAddressClaim", name, namespace, spec, labels=labels,
                   annotations=annotations)


def _object(api_version: str, kind: str, name: str, namespace: str | None, spec: dict, *,
            labels: Mapping[str, str] | None = None, annotations: Mapping[str, str] | None = None) -> dict:
    meta: dict[str, Any] = {"name": name}
    if namespace:
        meta["namespace"] = namespace
    if labels:
        meta["labels"] = dict(labels)
    if annotations:
        meta["annotations"] = dict(annotations)
    return {"apiVersion": api_version, "kind": kind, "metadata": meta, "spec": spec}


# --------------------------------------------------------------------------- address sets, as Go has them


@dataclass(frozen=True)
class IPSet:
    """Sorted, merged, disjoint closed intervals of one family's addresses (as integers)."""

    version: int
    ranges: tuple[tuple[int, int], ...] = ()

    @staticmethod
    def of(intervals: Iterable[tuple[int, int]], version: int) -> "IPSet":
        merged: list[list[int]] = []
        for lo, hi in sorted(intervals):
            if merged and lo <= merged[-1][1] + 1:
                merged[-1][1] = max(merged[-1][1], hi)
            else:
                merged.append([lo, hi])
        return IPSet(version, tuple((lo, hi) for lo, hi in merged))

    def minus(self, other: Iterable[tuple[int, int]]) -> "IPSet":
        out = list(self.ranges)
        for lo, hi in other:
            nxt = []
            for a, b in out:
                if hi < a or lo > b:
                    nxt.append((a, b))
                    continue
                if a < lo:
                    nxt.append((a, lo - 1))
                if hi < b:
                    nxt.append((hi + 1, b))
            out = nxt
        return IPSet(self.version, tuple(out))

    def __contains__(self, ip: int) -> bool:
        return any(lo <= ip <= hi for lo, hi in self.ranges)

    def count(self) -> int:
        return sum(hi - lo + 1 for lo, hi in self.ranges)

    def addresses(self) -> list[str]:
        """Every address, lowest first (only for small sets)."""
        cls = ipaddress.IPv4Address if self.version == 4 else ipaddress.IPv6Address
        return [str(cls(i)) for lo, hi in self.ranges for i in range(lo, hi + 1)]


def entry_interval(entry: str) -> tuple[int, int, int]:
    """(first, last, family) of one ``addresses`` / ``excludedAddresses`` entry: an IP, ``a-b`` or a
    CIDR whose host bits are ignored."""
    if "-" in entry:
        a, b = (ipaddress.ip_address(p) for p in entry.split("-", 1))
        if a.version != b.version or int(a) > int(b):
            raise ValueError(f"invalid range {entry!r}")
        return int(a), int(b), a.version
    if "/" in entry:
        net = ipaddress.ip_network(entry, strict=False)
        return int(net.network_address), int(net.broadcast_address), net.version
    ip = ipaddress.ip_address(entry)
    return int(ip), int(ip), ip.version


def _set_of(entries: Iterable[str]) -> IPSet:
    intervals, versions = [], set()
    for entry in entries:
        lo, hi, version = entry_interval(entry)
        intervals.append((lo, hi))
        versions.add(version)
    return IPSet.of(intervals, versions.pop() if versions else 4)


def ip_pool_set(spec: Mapping[str, Any]) -> IPSet:
    """The addresses an IP pool hands out (the provider's PoolSpecToIPSet)."""
    addresses = _set_of(spec["addresses"])
    out = addresses.minus(_set_of(spec.get("excludedAddresses") or []).ranges)
    if not spec.get("allocateReservedIPAddresses") and addresses.ranges:
        bits = 32 if addresses.version == 4 else 128
        host_bits = bits - int(spec.get("prefix") or 0)
        first = addresses.ranges[0][0] >> host_bits << host_bits
        last = first + (1 << host_bits) - 1
        out = out.minus([(first, first)] + ([(last, last)] if addresses.version == 4 else []))
    if spec.get("gateway"):
        gw = int(ipaddress.ip_address(spec["gateway"]))
        out = out.minus([(gw, gw)])
    return out


def _go_int(n: int) -> int:
    return n if n <= GO_MAX_INT else GO_MAX_INT


def find_free_address(spec: Mapping[str, Any], in_use: Iterable[str]) -> str:
    """The lowest address of the pool's set that no address in use (nor the gateway) holds."""
    pool = ip_pool_set(spec)
    taken = {int(ipaddress.ip_address(a)) for a in in_use}
    cls = ipaddress.IPv4Address if pool.version == 4 else ipaddress.IPv6Address
    for lo, hi in pool.ranges:
        ip = lo
        while ip <= hi:
            if ip not in taken:
                return str(cls(ip))
            ip += 1
    raise Exhausted("no address available")


def ip_pool_counts(spec: Mapping[str, Any], addresses: Sequence[str]) -> dict[str, int]:
    """``status.ipAddresses`` of an IP pool as the provider computes it from the addresses of its
    IPAddresses: ``free = total - used``, wrong by the out-of-range ones."""
    pool = ip_pool_set(spec)
    total = _go_int(pool.count())
    used = len(addresses)
    out_of_range = {ip for ip in (int(ipaddress.ip_address(a)) for a in addresses) if ip not in pool}
    return {"total": total, "used": used, "free": total - used, "outOfRange": len(out_of_range)}


# -- prefix pools


def allocation_prefix_length(spec: Mapping[str, Any]) -> int:
    return int(spec.get("allocationPrefixLength") or DEFAULT_ALLOCATION_PREFIX_LENGTH)


def _prefix_aggregates(spec: Mapping[str, Any]) -> list[tuple[int, int]]:
    """The pool's prefixes, merged and split back into aligned CIDR blocks, lowest first, as
    (base, length) pairs."""
    merged = _set_of(spec["prefixes"])
    blocks = []
    for lo, hi in merged.ranges:
        for net in ipaddress.summarize_address_range(ipaddress.IPv6Address(lo), ipaddress.IPv6Address(hi)):
            blocks.append((int(net.network_address), net.prefixlen))
    return sorted(blocks)


def _prefix_blocked(spec: Mapping[str, Any], in_use: Iterable[tuple[str, int]] = ()) -> IPSet:
    intervals = [entry_interval(e)[:2] for e in spec.get("excludedPrefixes") or []]
    for address, length in in_use:
        net = ipaddress.ip_network(f"{address}/{length}", strict=False)
        intervals.append((int(net.network_address), int(net.broadcast_address)))
    return IPSet.of(intervals, 6)


def _overlap(blocked: IPSet, lo: int, hi: int) -> tuple[bool, bool]:
    """(overlaps, covers) of [lo, hi] by the blocked set."""
    overlaps = covers = False
    for a, b in blocked.ranges:
        if b < lo or a > hi:
            continue
        overlaps = True
        if a <= lo and hi <= b:
            covers = True
    return overlaps, covers


def _free_children(base: int, length: int, target: int, blocked: IPSet, first_only: bool):
    """Yield free aligned children of length ``target`` of base/length, lowest first (the
    provider's recursive halving, written as a walk)."""
    size = 1 << (128 - length)
    overlaps, covers = _overlap(blocked, base, base + size - 1)
    if covers or length > target:
        return
    if not overlaps:
        if first_only:
            yield base, 1
        else:
            yield base, 1 << (target - length)
        return
    if length == target:
        return
    half = size >> 1
    yield from _free_children(base, length + 1, target, blocked, first_only)
    yield from _free_children(base + half, length + 1, target, blocked, first_only)


def find_free_prefix(spec: Mapping[str, Any], in_use: Iterable[tuple[str, int]]) -> tuple[str, int]:
    """The lowest free sub-prefix (base address, length) of a prefix pool."""
    target = allocation_prefix_length(spec)
    blocked = _prefix_blocked(spec, in_use)
    for base, length in _prefix_aggregates(spec):
        for child, _ in _free_children(base, length, target, blocked, True):
            return str(ipaddress.IPv6Address(child)), target
    raise Exhausted("no prefix available")


def prefix_allocatable(spec: Mapping[str, Any], address: str, length: int | None) -> bool:
    if length is None or length != allocation_prefix_length(spec):
        return False
    net = ipaddress.ip_network(f"{address}/{length}", strict=False)
    lo, hi = int(net.network_address), int(net.broadcast_address)
    inside = any(base <= lo and hi <= base + (1 << (128 - plen)) - 1 for base, plen in _prefix_aggregates(spec))
    return inside and not _overlap(_prefix_blocked(spec), lo, hi)[0]


def prefix_pool_counts(spec: Mapping[str, Any], addresses: Sequence[tuple[str, int | None]]) -> dict[str, int]:
    """``status.ipAddresses`` of a prefix pool as the provider computes it (``free`` is right there)."""
    target = allocation_prefix_length(spec)
    blocked = _prefix_blocked(spec)
    total = 0
    for base, length in _prefix_aggregates(spec):
        for _, n in _free_children(base, length, target, blocked, False):
            total = _go_int(total + n)
    used = len(addresses)
    out_of_range = sum(1 for a, n in addresses if not prefix_allocatable(spec, a, n))
    return {"total": total, "used": used, "free": max(0, total - used + out_of_range), "outOfRange": out_of_range}


# --------------------------------------------------------------------------- what the provider writes


def _meta(obj: Mapping) -> dict:
    return obj["metadata"]


def is_global(pool: Mapping) -> bool:
    return pool["kind"] in GLOBAL_POOL_KINDS


@dataclass(frozen=True)
class Grant:
    address: str
    prefix: int
    gateway: str | None


def allocate(pool: Mapping, in_use: Sequence[Mapping]) -> Grant:
    """What the provider's EnsureAddress gives a new claim of ``pool``, ``in_use`` being every
    IPAddress whose poolRef names the pool (for a global pool: in every namespace)."""
    spec = pool["spec"]
    if pool["kind"] in PREFIX_POOL_KINDS:
        address, length = find_free_prefix(spec, [(a["spec"]["address"], a["spec"].get("prefix", 128))
                                                  for a in in_use])
        return Grant(address, length, spec.get("gateway") or None)
    taken = [a["spec"]["address"] for a in in_use]
    return Grant(find_free_address(spec, taken), int(spec.get("prefix") or 0), spec.get("gateway") or None)


def ipaddress_body(claim: Mapping, pool: Mapping, grant: Grant) -> dict:
    """The IPAddress the provider creates for ``claim`` (both carry their ``uid``)."""
    meta: dict[str, Any] = {
        "name": _meta(claim)["name"],
        "namespace": _meta(claim)["namespace"],
        "finalizers": [ADDRESS_FINALIZER],
        "ownerReferences": [
            {"apiVersion": CAPI_API_VERSION, "kind": "IPAddressClaim", "name": _meta(claim)["name"],
             "uid": _meta(claim)["uid"], "controller": True, "blockOwnerDeletion": True},
            {"apiVersion": POOL_API_VERSION, "kind": pool["kind"], "name": _meta(pool)["name"],
             "uid": _meta(pool)["uid"], "controller": False, "blockOwnerDeletion": True},
        ],
    }
    labels = _meta(claim).get("labels") or {}
    if CLUSTER_NAME_LABEL in labels:
        meta["labels"] = {CLUSTER_NAME_LABEL: labels[CLUSTER_NAME_LABEL]}
    spec: dict[str, Any] = {
        "address": grant.address,
        "claimRef": {"name": _meta(claim)["name"]},
        "poolRef": {"apiGroup": GROUP, "kind": pool["kind"], "name": _meta(pool)["name"]},
        "prefix": grant.prefix,
    }
    if grant.gateway:
        spec["gateway"] = grant.gateway
    return {"apiVersion": CAPI_API_VERSION, "kind": "IPAddress", "metadata": meta, "spec": spec}


def claim_status(address: Mapping) -> dict:
    """The served claim's status: the address reference only (no conditions)."""
    return {"addressRef": {"name": _meta(address)["name"]}}


def pool_status(pool: Mapping, in_use: Sequence[Mapping]) -> dict:
    """The pool's status from the IPAddresses whose poolRef names it."""
    if pool["kind"] in PREFIX_POOL_KINDS:
        counts = prefix_pool_counts(pool["spec"], [(a["spec"]["address"], a["spec"].get("prefix")) for a in in_use])
    else:
        counts = ip_pool_counts(pool["spec"], [a["spec"]["address"] for a in in_use])
    return {"ipAddresses": counts}


def with_finalizer(obj: Mapping, finalizer: str) -> dict:
    out = copy.deepcopy(dict(obj))
    finalizers = _meta(out).setdefault("finalizers", [])
    if finalizer not in finalizers:
        finalizers.append(finalizer)
    return out


def pool_ref_of(obj: Mapping) -> tuple[str, str, str]:
    ref = obj["spec"]["poolRef"]
    return ref.get("apiGroup") or GROUP, ref["kind"], ref["name"]


def names_pool(obj: Mapping, pool: Mapping) -> bool:
    """Whether a claim or an IPAddress (its poolRef) names ``pool``, in the pool's namespace unless
    the pool is global."""
    if pool_ref_of(obj) != (GROUP, pool["kind"], _meta(pool)["name"]):
        return False
    return is_global(pool) or _meta(obj).get("namespace") == _meta(pool).get("namespace")


# --------------------------------------------------------------------------- the state, in memory


Key = tuple[str, str]  # (namespace, name); namespace "" for a global pool


def key_of(obj: Mapping) -> Key:
    return _meta(obj).get("namespace") or "", _meta(obj)["name"]


@dataclass
class GoInCluster:
    """The provider's state built in memory: pools and claims as users wrote them (with ``uid``),
    served one claim at a time in the order :meth:`serve` is called, as its single worker does."""

    pools: dict[tuple[str, Key], dict] = field(default_factory=dict)   # (kind, key) -> pool
    claims: dict[Key, dict] = field(default_factory=dict)
    addresses: dict[Key, dict] = field(default_factory=dict)

    def add(self, obj: Mapping) -> dict:
        obj = copy.deepcopy(dict(obj))
        _meta(obj).setdefault("uid", f"uid-{obj['kind']}-{'/'.join(key_of(obj))}")
        if obj["kind"] in POOL_KINDS:
            self.pools[(obj["kind"], key_of(obj))] = obj
        elif obj["kind"] == "IPAddressClaim":
            self.claims[key_of(obj)] = obj
        elif obj["kind"] == "IPAddress":
            self.addresses[key_of(obj)] = obj
        else:
            raise ValueError(f"{obj['kind']} is not a kind the in-cluster provider writes")
        return obj

    def pool_of(self, claim: Mapping) -> dict | None:
        _, kind, name = pool_ref_of(claim)
        ns = "" if kind in GLOBAL_POOL_KINDS else _meta(claim)["namespace"]
        return self.pools.get((kind, (ns, name)))

    def in_use(self, pool: Mapping) -> list[dict]:
        return [a for _, a in sorted(self.addresses.items()) if names_pool(a, pool)]

    def serve(self, namespace: str, name: str) -> dict:
        """One claim served (its finalizer, its IPAddress, its status); the IPAddress. Raises
        :class:`Exhausted` when the pool has nothing left (the claim keeps only its finalizer)."""
        c = self.claims[(namespace, name)]
        self.claims[(namespace, name)] = c = with_finalizer(c, CLAIM_FINALIZER)
        pool = self.pool_of(c)
        if pool is None:
            raise LookupError(f"IPAddressClaim {namespace}/{name}: pool {pool_ref_of(c)} not found")
        existing = self.addresses.get((namespace, name))
        if existing is None:
            existing = ipaddress_body(c, pool, allocate(pool, self.in_use(pool)))
            _meta(existing)["uid"] = f"uid-IPAddress-{namespace}/{name}"
            self.addresses[(namespace, name)] = existing
        c["status"] = claim_status(existing)
        return existing

    def delete_claim(self, namespace: str, name: str, at: str) -> dict:
        """A deletion of the claim at ``at`` (RFC 3339) while its finalizer holds it: the grace state."""
        meta = _meta(self.claims[(namespace, name)])
        meta["deletionTimestamp"] = at
        meta["deletionGracePeriodSeconds"] = 0
        return self.claims[(namespace, name)]

    def objects(self) -> list[dict]:
        """Every object as the provider leaves it: pools with finalizer and status, claims, addresses."""
        out = []
        for (_, _), pool in sorted(self.pools.items()):
            p = with_finalizer(pool, POOL_FINALIZER)
            p["status"] = pool_status(p, self.in_use(p))
            out.append(p)
        out += [copy.deepcopy(c) for _, c in sorted(self.claims.items())]
        out += [copy.deepcopy(a) for _, a in sorted(self.addresses.items())]
        return out


# --------------------------------------------------------------------------- the state, through the API


@dataclass
class Served:
    """One claim the provider served: what a test checks after an upgrade."""

    namespace: str
    claim: str
    pool_kind: str
    pool: str
    address: str
    prefix: int
    address_uid: str
    claim_uid: str


class GoInClusterWriter:
    """Writes, through the API, what the provider writes, in its order (``api_client`` is a
    ``kubernetes.client.ApiClient``)."""

    def __init__(self, api_client) -> None:
        from kubernetes import client

        self.custom = client.CustomObjectsApi(api_client)
        self.served: list[Served] = []

    # -- plain access ------------------------------------------------------------

    def _gvp(self, obj: Mapping) -> tuple[str, str, str]:
        group, version = obj["apiVersion"].split("/")
        if obj["kind"] in POOL_KINDS:
            return group, version, PLURALS[obj["kind"]]
        return group, version, {"IPAddressClaim": "ipaddressclaims", "IPAddress": "ipaddresses"}[obj["kind"]]

    def create(self, obj: Mapping) -> dict:
        group, version, plural = self._gvp(obj)
        ns = _meta(obj).get("namespace")
        if ns:
            return self.custom.create_namespaced_custom_object(group, version, ns, plural, dict(obj))
        return self.custom.create_cluster_custom_object(group, version, plural, dict(obj))

    def get(self, obj: Mapping) -> dict:
        group, version, plural = self._gvp(obj)
        ns, name = key_of(obj)
        if ns:
            return self.custom.get_namespaced_custom_object(group, version, ns, plural, name)
        return self.custom.get_cluster_custom_object(group, version, plural, name)

    def patch(self, obj: Mapping, body: dict, *, status: bool = False) -> dict:
        group, version, plural = self._gvp(obj)
        ns, name = key_of(obj)
        if ns:
            fn = (self.custom.patch_namespaced_custom_object_status if status
                  else self.custom.patch_namespaced_custom_object)
            return fn(group, version, ns, plural, name, body)
        fn = self.custom.patch_cluster_custom_object_status if status else self.custom.patch_cluster_custom_object
        return fn(group, version, plural, name, body)

    def delete(self, obj: Mapping) -> None:
        group, version, plural = self._gvp(obj)
        ns, name = key_of(obj)
        if ns:
            self.custom.delete_namespaced_custom_object(group, version, ns, plural, name)
        else:
            self.custom.delete_cluster_custom_object(group, version, plural, name)

    def addresses_of(self, pool: Mapping) -> list[dict]:
        """The IPAddresses whose poolRef names the pool (every namespace for a global pool)."""
        if is_global(pool):
            items = self.custom.list_cluster_custom_object(GROUP, CAPI_VERSION, "ipaddresses")["items"]
        else:
            items = self.custom.list_namespaced_custom_object(GROUP, CAPI_VERSION, _meta(pool)["namespace"],
                                                              "ipaddresses")["items"]
        return [a for a in items if names_pool(a, pool)]

    # -- the provider's writes ------------------------------------------------------

    def add_finalizer(self, obj: Mapping, finalizer: str) -> dict:
        live = self.get(obj)
        finalizers = list(_meta(live).get("finalizers") or [])
        if finalizer in finalizers:
            return live
        return self.patch(live, {"metadata": {"finalizers": finalizers + [finalizer]}})

    def serve(self, claim_obj: Mapping, *, stop_after_finalizer: bool = False) -> Served | None:
        """Serve one existing claim as the provider does: its finalizer (a pass of its own), then the
        IPAddress, then ``status.addressRef``. ``stop_after_finalizer``: the provider stopped after its
        first pass (the claim has the finalizer and nothing else); None then."""
        live = self.add_finalizer(claim_obj, CLAIM_FINALIZER)
        if stop_after_finalizer:
            return None
        _, kind, name = pool_ref_of(live)
        ns = "" if kind in GLOBAL_POOL_KINDS else _meta(live)["namespace"]
        pool = self.get({"apiVersion": POOL_API_VERSION, "kind": kind,
                         "metadata": {"name": name, **({"namespace": ns} if ns else {})}})
        address = self.create(ipaddress_body(live, pool, allocate(pool, self.addresses_of(pool))))
        self.patch(live, {"status": claim_status(address)}, status=True)
        served = Served(_meta(live)["namespace"], _meta(live)["name"], kind, name, address["spec"]["address"],
                        address["spec"]["prefix"], _meta(address)["uid"], _meta(live)["uid"])
        self.served.append(served)
        return served

    def write_pool(self, pool_obj: Mapping) -> dict:
        """The pool reconcile: the finalizer, then ``status.ipAddresses`` from its IPAddresses."""
        live = self.add_finalizer(pool_obj, POOL_FINALIZER)
        return self.patch(live, {"status": pool_status(live, self.addresses_of(live))}, status=True)

    def hold_in_grace(self, claim_obj: Mapping) -> dict:
        """Delete a served claim: its finalizer keeps it (and its address) during the grace period."""
        self.delete(claim_obj)
        return self.get(claim_obj)

    def write(self, pools: Sequence[Mapping], claims: Sequence[Mapping], *, serve: Iterable[Key] | None = None,
              first_pass_only: Iterable[Key] = (), in_grace: Iterable[Key] = ()) -> list[Served]:
        """A whole state: the user's ``pools`` and ``claims`` created; the claims of ``serve`` (every
        claim when None) served in that order, those of ``first_pass_only`` given only the
        finalizer; every pool's finalizer and status; the claims of ``in_grace`` deleted."""
        created_pools = [self.create(p) for p in pools]
        by_key = {key_of(c): self.create(c) for c in claims}
        for key in (list(by_key) if serve is None else list(serve)):
            self.serve(by_key[key])
        for key in first_pass_only:
            self.serve(by_key[key], stop_after_finalizer=True)
        for pool in created_pools:
            self.write_pool(pool)
        for key in in_grace:
            self.hold_in_grace(by_key[key])
        return list(self.served)
