"""Reading Kubernetes objects (plain dicts) the way the reconcile needs them.

Objects come from the API or from files as JSON-like dicts; these helpers
answer questions about them (who owns what, which pool a claim is for,
is it being deleted) without ever raising on a missing field.
"""

from __future__ import annotations

import datetime
from dataclasses import dataclass
from collections.abc import Mapping
from typing import Any, NamedTuple

from . import kinds
from .addresses import AddressError, parse_ip
from . import poolkind


@dataclass(frozen=True)
class Ref:
    """Enough to address one object in the API."""

    api_version: str
    kind: str
    namespace: str
    name: str
    uid: str | None = None

    @property
    def group_kind(self) -> tuple[str, str]:
        return (kinds.group_of(self.api_version), self.kind)

    def __str__(self) -> str:
        return f"{self.kind} {self.namespace}/{self.name}"


def meta(obj: Mapping[str, Any]) -> Mapping[str, Any]:
    value = obj.get("metadata")
    # A plain dict first: this runs for every object in every pass.
    return value if type(value) is dict or isinstance(value, Mapping) else {}


def name(obj: Mapping[str, Any]) -> str:
    return str(meta(obj).get("name") or "")


def namespace(obj: Mapping[str, Any]) -> str:
    return str(meta(obj).get("namespace") or "")


def ref(obj: Mapping[str, Any]) -> Ref:
    return Ref(str(obj.get("apiVersion") or ""), str(obj.get("kind") or ""),
               namespace(obj), name(obj), meta(obj).get("uid"))


def labels(obj: Mapping[str, Any]) -> dict[str, str]:
    value = meta(obj).get("labels")
    return dict(value) if isinstance(value, Mapping) else {}


def annotations(obj: Mapping[str, Any]) -> dict[str, str]:
    value = meta(obj).get("annotations")
    return dict(value) if isinstance(value, Mapping) else {}


def finalizers(obj: Mapping[str, Any]) -> list[str]:
    value = meta(obj).get("finalizers")
    return list(value) if isinstance(value, list) else []


def owner_references(obj: Mapping[str, Any]) -> list[dict]:
    value = meta(obj).get("ownerReferences")
    return [dict(r) for r in value if isinstance(r, Mapping)] if isinstance(value, list) else []


def is_deleting(obj: Mapping[str, Any]) -> bool:
    return bool(meta(obj).get("deletionTimestamp"))


def is_paused(obj: Mapping[str, Any] | None) -> bool:
    return obj is not None and kinds.PAUSED_ANNOTATION in annotations(obj)


def deleted_for_move(obj: Mapping[str, Any]) -> bool:
    return kinds.DELETE_FOR_MOVE_ANNOTATION in annotations(obj)


def spec(obj: Mapping[str, Any]) -> Mapping[str, Any]:
    value = obj.get("spec")
    return value if type(value) is dict or isinstance(value, Mapping) else {}


def status(obj: Mapping[str, Any]) -> Mapping[str, Any]:
    value = obj.get("status")
    return value if type(value) is dict or isinstance(value, Mapping) else {}


def condition(status: Mapping[str, Any], type_: str) -> Mapping[str, Any] | None:
    """The condition of ``type_`` in a status (entries that are not mappings passed over), or None."""
    return next((c for c in status.get("conditions") or [] if isinstance(c, Mapping) and c.get("type") == type_),
                None)


def cluster_paused(cluster: Mapping[str, Any] | None) -> bool:
    """A Cluster is paused by ``spec.paused: true`` or by the paused annotation (as Cluster API reads it)."""
    return cluster is not None and (spec(cluster).get("paused") is True or is_paused(cluster))


def cluster_name_of(claim: Mapping[str, Any]) -> str | None:
    """The Cluster a claim belongs to: a v1beta2 IPAddressClaim's spec.clusterName, else its cluster-name label
    (Cluster API's order)."""
    name = spec(claim).get("clusterName") or labels(claim).get(kinds.CLUSTER_NAME_LABEL)
    return str(name) if name else None


# -- times as the API server writes them ----------------------------------------

def parse_time(text: str) -> datetime.datetime:
    """An RFC 3339 time as the API server writes it (``2026-11-24T15:39:49Z``), in UTC."""
    if not isinstance(text, str):
        raise ValueError(f"is not a time: {text!r}")
    value = datetime.datetime.fromisoformat(text.replace("Z", "+00:00").replace("z", "+00:00"))
    if value.tzinfo is None:
        raise ValueError(f"has no time zone: {text!r}")
    return value.astimezone(datetime.timezone.utc)


def format_time(value: datetime.datetime) -> str:
    """The API server's form of a time: UTC, whole seconds, ``Z``."""
    return value.astimezone(datetime.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")


# -- which pool an object belongs to ------------------------------------------

class PoolKey(NamedTuple):
    """A pool's identity: namespace, name and kind (two kinds of pool may share a name).

    An IPPool's key equals the plain ``(namespace, name)`` that named it
    before there were other kinds, and hashes as it: callers that name an
    IPPool so keep working; a pool of another kind is never equal to one.
    """

    namespace: str
    name: str
    kind: tuple[str, str] = kinds.IPPOOL

    def _plain(self) -> tuple:
        return (self.namespace, self.name) if self.kind == kinds.IPPOOL else tuple(self)

    def __eq__(self, other: object) -> bool:
        if isinstance(other, PoolKey):
            return tuple(self) == tuple(other)
        return isinstance(other, tuple) and self._plain() == other

    def __ne__(self, other: object) -> bool:
        return not self == other

    def __hash__(self) -> int:
        return hash(self._plain())


# One PoolKey per pool for every object of it: the inventory notes each object's pool, and a key
# apiece (with its kind tuple) would cost more than the object's own index entries. Pools are few;
# when the table is full it starts again (keys handed out before stay equal keys).
class _OneOfEach:
    """Hands out one object for all equal ones, from a table of at most ``limit`` entries.

    When full it starts again: what was handed out before stays equal to what
    comes after, only no longer the same object.
    """

    def __init__(self, limit: int) -> None:
        self.limit = limit
        self.table: dict = {}

    def __call__(self, value: Any) -> Any:
        found = self.table.get(value)
        if found is None:
            if len(self.table) >= self.limit:
                self.table.clear()
            found = self.table[value] = value
        return found


MAX_POOL_KEYS = 4096
_one_pool = _OneOfEach(MAX_POOL_KEYS)


def is_guard(obj: Mapping[str, Any]) -> bool:
    """A Metal3 IPAddress guarding an IP in its namespace (``naming.guard_name``), not an address of its claim."""
    return kinds.GUARD_LABEL in labels(obj)


def pool_of(obj: Mapping[str, Any]) -> PoolKey | None:
    """The pool a claim or an address (of either API) is for, or None when not ours."""
    kind = kinds.kind_of(obj)
    ns = namespace(obj)
    if kind == kinds.IPADDRESS:
        pool = spec(obj).get("pool")
        if isinstance(pool, Mapping) and pool.get("name") and not is_guard(obj):
            # Locks of IPPools name the pool alone; those of other kinds say their kind.
            pool_kind = kinds.IPPOOL
            if pool.get("kind") and pool.get("kind") != kinds.IPPOOL[1]:
                pool_kind = (kinds.group_of(str(pool.get("apiVersion") or "")), str(pool["kind"]))
                if pool_kind not in poolkind.REGISTRY:
                    return None
                if poolkind.REGISTRY[pool_kind].cluster_scoped:
                    return _one_pool(PoolKey("", str(pool["name"]), pool_kind))
            return _one_pool(PoolKey(str(pool.get("namespace") or ns), str(pool["name"]), pool_kind))
        return None
    if kind == kinds.IPCLAIM:
        # A claim is filed with the pool of its own namespace even when its
        # reference names another: claims of one pool are then told apart by
        # kind and name, and the reconcile refuses the foreign reference.
        pool = spec(obj).get("pool")
        if isinstance(pool, Mapping) and pool.get("name"):
            return _one_pool(PoolKey(ns, str(pool["name"])))
        return None
    if kind in (kinds.CAPI_CLAIM, kinds.CAPI_ADDRESS):
        pool = spec(obj).get("poolRef")
        pool_kind = (pool.get("apiGroup"), pool.get("kind")) if isinstance(pool, Mapping) else None
        if pool_kind is not None and type(pool_kind[0]) is str and type(pool_kind[1]) is str \
                and pool_kind in poolkind.REGISTRY and kinds.CAPI_CLAIM in poolkind.REGISTRY[pool_kind].claim_kinds \
                and pool.get("name"):
            # A pool of cluster scope is known by name alone, whatever namespace its claims are in.
            return _one_pool(PoolKey("" if poolkind.REGISTRY[pool_kind].cluster_scoped else ns, str(pool["name"]), pool_kind))
        return None
    return None


# A claim filed with the pool that served it while its own reference names another (``Inventory``): a copy
# of it whose reference names that pool, carrying the reference the claim has under this key (no API field).
REFERENCE_NOW = "_poolReferenceNow"


def served_by(claim: Mapping[str, Any], pool: PoolKey) -> dict:
    """``claim`` as the pool that served it sees it: its pool reference names ``pool``, and the reference it
    has now is kept under :data:`REFERENCE_NOW` (see :func:`reference_now`)."""
    field = "pool" if kinds.kind_of(claim) == kinds.IPCLAIM else "poolRef"
    ref = ({"name": pool.name, "namespace": pool.namespace} if field == "pool"
           else {"apiGroup": pool.kind[0], "kind": pool.kind[1], "name": pool.name})
    return {**claim, "spec": {**spec(claim), field: ref}, REFERENCE_NOW: spec(claim).get(field)}


def reference_now(claim: Mapping[str, Any]) -> tuple[bool, Any]:
    """(True, the pool reference the claim has) for a claim filed with a pool it no longer names
    (:func:`served_by`); (False, None) for any other."""
    return (True, claim[REFERENCE_NOW]) if REFERENCE_NOW in claim else (False, None)


def pool_ref_text(ref: Any) -> Any:
    """A pool reference as ``Kind.apiGroup [namespace/]name`` (a Cluster API claim's ``spec.poolRef``; an
    IPClaim's ``spec.pool`` names an IPPool), else as it is."""
    if not isinstance(ref, Mapping) or not isinstance(ref.get("name"), str):
        return ref
    group = ref.get("apiGroup")
    kind = ref.get("kind") or (kinds.IPPOOL[1] if group is None else "?")
    where = f"{ref['namespace']}/" if isinstance(ref.get("namespace"), str) and ref.get("namespace") else ""
    return f"{kind}{f'.{group}' if isinstance(group, str) and group else ''} {where}{ref['name']}"


# ("IPClaim" | "IPAddressClaim", name), and the claim's namespace after them for a claim of a pool of
# cluster scope: the claims of a namespaced pool are all in its namespace, those of a pool of cluster
# scope in any (two claims of one name in two namespaces are two claims).
ClaimKey = tuple[str, ...]


# (the kinds of pool registered, those of cluster scope): claim keys are made per claim per pass, and
# while no kind of pool is of cluster scope (IPPool alone) no claim's pool reference needs reading. Keyed
# by the registered kinds themselves, not their number: one kind gone and another come is another registry.
_scoped: list = [(), frozenset()]


def _cluster_scoped_kinds() -> frozenset:
    registered = tuple(poolkind.REGISTRY)
    if _scoped[0] != registered:
        _scoped[:] = [registered, frozenset(k for k, kind in poolkind.REGISTRY.items() if kind.cluster_scoped)]
    return _scoped[1]


def _of_cluster_scope(pool_ref: Any, group_key: str = "apiGroup") -> bool:
    """Whether a pool reference (a poolRef, or a Metal3 IPAddress's spec.pool) names a kind of pool of cluster scope."""
    if not _cluster_scoped_kinds() or not isinstance(pool_ref, Mapping) or not pool_ref.get("kind"):
        return False
    group = pool_ref.get(group_key)
    if group_key == "apiVersion":
        group = kinds.group_of(group) if isinstance(group, str) else group
    pool_kind = (group, pool_ref.get("kind"))
    return type(pool_kind[0]) is str and type(pool_kind[1]) is str and pool_kind in _cluster_scoped_kinds()


def foreign_pool_namespace(claim: Mapping[str, Any]) -> str | None:
    """The namespace an IPClaim's pool reference names when it is not the claim's own."""
    pool = spec(claim).get("pool") if kinds.kind_of(claim) == kinds.IPCLAIM else None
    ref_ns = pool.get("namespace") if isinstance(pool, Mapping) else None
    return str(ref_ns) if ref_ns and ref_ns != namespace(claim) else None


# One tuple per claim key, whoever asks: the inventory, the ledger's claims, the addresses naming the
# claim and the bound map each hold the key of every claim, and a tuple apiece would cost more than
# the table's slot. Bounded: when full it starts again (keys handed out before stay valid: equal
# tuples are equal keys, only no longer one object).
MAX_CLAIM_KEYS = 1 << 17
_one_key = _OneOfEach(MAX_CLAIM_KEYS)


def claim_key(claim: Mapping[str, Any]) -> ClaimKey:
    kind = str(claim.get("kind"))
    if kind == kinds.CAPI_CLAIM[1] and _of_cluster_scope(spec(claim).get("poolRef")):
        return _one_key((kind, name(claim), namespace(claim)))
    return _one_key((kind, name(claim)))


def claim_of_address(address: Mapping[str, Any]) -> ClaimKey | None:
    """The claim a Metal3 IPAddress was made for."""
    claim = spec(address).get("claim")
    if not isinstance(claim, Mapping) or not claim.get("name"):
        return None
    kind = kinds.CAPI_CLAIM[1] if claim.get("kind") == kinds.CAPI_CLAIM[1] else kinds.IPCLAIM[1]
    if _of_cluster_scope(spec(address).get("pool"), "apiVersion"):
        return _one_key((kind, str(claim["name"]), str(claim.get("namespace") or namespace(address))))
    return _one_key((kind, str(claim["name"])))


def claim_of_capi_address(address: Mapping[str, Any]) -> ClaimKey | None:
    claim = spec(address).get("claimRef")
    if not isinstance(claim, Mapping) or not claim.get("name"):
        return None
    if _of_cluster_scope(spec(address).get("poolRef")):
        return _one_key((kinds.CAPI_CLAIM[1], str(claim["name"]), namespace(address)))
    return _one_key((kinds.CAPI_CLAIM[1], str(claim["name"])))


def claim_named_by(address: Mapping[str, Any]) -> tuple[tuple[str, str], str, str] | None:
    """The kind, namespace and name of the claim an address object (of either API) names, or None."""
    capi = kinds.kind_of(address) == kinds.CAPI_ADDRESS
    claim = (claim_of_capi_address if capi else claim_of_address)(address)
    if claim is None:
        return None
    kind = kinds.CAPI_CLAIM if claim[0] == kinds.CAPI_CLAIM[1] else kinds.IPCLAIM
    return kind, claim[2] if len(claim) > 2 else namespace(address), claim[1]


def address_ip(address: Mapping[str, Any]):
    """The IP an address object (of either API) holds, as netaddr, or None.

    An IPv4-mapped IPv6 text (``::ffff:10.0.0.5``, as some tools write it)
    is the IPv4 address it maps: consumers read it so.
    """
    try:
        ip = parse_ip(spec(address).get("address"))
    except AddressError:
        return None
    return ip.ipv4() if ip.version == 6 and ip.is_ipv4_mapped() else ip


def claim_uid_of(address: Mapping[str, Any], key: ClaimKey) -> str | None:
    """The uid of the claim incarnation an address was made for, from its owner reference.

    Addresses name their claim by name only; a claim deleted and created again
    under that name is another claim. Owner references carry the uid (and
    ``clusterctl move`` rewrites them to the new uids), so they tell which.
    """
    kind, claim_name = key[0], key[1]
    owners = meta(address).get("ownerReferences")
    for owner in owners if isinstance(owners, list) else ():  # read in place: this runs per claim per pass
        if isinstance(owner, Mapping) and owner.get("kind") == kind and owner.get("name") == claim_name \
                and owner.get("uid"):
            return str(owner["uid"])
    return None


def index_key(key: ClaimKey) -> str:
    """The key of a claim in ``status.indexes``.

    IPClaims keep Metal3's plain name; Cluster API claims are prefixed with
    their kind so that an IPClaim and an IPAddressClaim of one name never
    share an entry.
    """
    kind, claim_name = key[0], key[1]
    if len(key) > 2:  # a claim of a pool of cluster scope: its namespace tells it apart
        return f"{kind}/{key[2]}/{claim_name}"
    return claim_name if kind == kinds.IPCLAIM[1] else f"{kind}/{claim_name}"


def merge_patch(current: Any, desired: Any) -> Any:
    """The JSON merge patch (RFC 7386) that turns ``current`` into ``desired``.

    Keys that ``desired`` lacks become None (removal); maps are diffed
    recursively, anything else is replaced whole.
    """
    if not isinstance(current, Mapping) or not isinstance(desired, Mapping):
        return desired
    patch: dict[str, Any] = {}
    for key in current:
        if key not in desired:
            patch[key] = None
    for key, value in desired.items():
        if key not in current:
            patch[key] = value
        elif current[key] != value:
            patch[key] = merge_patch(current[key], value)
    return patch


# Last: the pool kinds' modules read this one (a kind's rules use the helpers above).
