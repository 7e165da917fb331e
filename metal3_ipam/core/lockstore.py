"""Where a lock is stored: a Metal3 IPAddress, or a Lease in the controller's namespace.

The reconcile decides by a lock's pool, claim and address and names it ``<namespace>/<name>`` as a Metal3
IPAddress (``binding.lock_for``, ``naming.guard_name``). Which API holds it is the adapter's business, and the
in-memory model's: both map through this module, the reconcile never reads it.

The locks of a kind whose ``PoolKind.locks_in_leases`` (one served with a provider's RBAC that grants
nothing on ``ipam.metal3.io``) and every guard of an IP in a namespace are ``coordination.k8s.io`` Leases in
the controller's own namespace (the lock namespace). A Lease's name is keyed by the lock's namespace and name
(``lease_name``: ``<namespace>.<name>``, which is one-to-one because a namespace has no dot), so the API server
refuses the second writer of one lock exactly as it refuses a second IPAddress of that name. What the lock
says (its namespace and name, its spec, its owners) is the Lease's annotation ``LOCK_ANNOTATION``; its labels
and finalizers are the Lease's, its claim the Lease's holderIdentity. ``from_lease`` gives the reconcile the
Metal3 IPAddress the Lease stands for, marked with ``STORED_IN`` (the Lease's name) so that a write to it
goes back to the Lease.

Where Metal3 IPAddresses can be written, a lock of the Lease store is written as its Metal3 IPAddress too, first
(its twin: what an earlier version writes, so that the API server refuses one of the two writers of a name), then
as its Lease; the reconcile reads the Lease. A lock seen as a Metal3 IPAddress alone (an earlier version's) holds
its IP as it is: it is filed as it is, written to where it is, and given its Lease (``moved_over``) beside it.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Mapping
from typing import Any

from . import kinds
from . import objects as o
from . import poolkind

LEASE = ("coordination.k8s.io", "Lease")
LEASE_API_VERSION = "coordination.k8s.io/v1"
LEASES_PLURAL = "leases"
# On every Lease that is a lock, the namespace of the lock it stands for (what a listing selects).
LOCK_LABEL = "ipam.metal3.io/lock-namespace"
# On such a Lease, what the lock says: {"namespace", "name", "spec", "ownerReferences"} as JSON.
LOCK_ANNOTATION = "ipam.metal3.io/lock"
# On the IPAddress a Lease stands for (never stored): the Lease's name.
STORED_IN = "ipam.metal3.io/stored-in-lease"

_MAX_NAME = 253
_HASH_DIGITS = 16


def in_leases(lock: Mapping[str, Any]) -> bool:
    """Whether a lock (a Metal3 IPAddress the reconcile wants, or one stored) belongs in the Lease store: a
    guard, or a lock of a kind whose locks are Leases."""
    if kinds.kind_of(lock) != kinds.IPADDRESS:
        return False
    if o.is_guard(lock):
        return True
    pool = o.pool_of(lock)
    kind = poolkind.REGISTRY.get(pool.kind) if pool is not None else None
    return kind is not None and kind.locks_in_leases


def stored_in_lease(obj: Mapping[str, Any] | None) -> str | None:
    """The name of the Lease an IPAddress of the reconcile's view is stored in, or None (a Metal3 IPAddress)."""
    if obj is None:
        return None
    return o.annotations(obj).get(STORED_IN)


def lease_name(namespace: str, name: str) -> str:
    """``<namespace>.<name>``; when that is too long for a name, its head and 16 hexadecimal digits of the
    SHA-256 of both (two locks meet only when a 64-bit hash and the head agree: never seen)."""
    whole = f"{namespace}.{name}"
    if len(whole) <= _MAX_NAME:
        return whole
    digest = hashlib.sha256(f"{namespace}/{name}".encode()).hexdigest()[:_HASH_DIGITS]
    return f"{whole[:_MAX_NAME - 1 - _HASH_DIGITS].rstrip('.-')}-{digest}"


def _holder(spec: Mapping[str, Any]) -> str:
    claim = spec.get("claim") if isinstance(spec.get("claim"), Mapping) else {}
    return f"{claim.get('namespace') or ''}/{claim.get('name') or ''}"


def to_lease(lock: Mapping[str, Any], home: str) -> dict:
    """The Lease in namespace ``home`` that stores ``lock`` (a Metal3 IPAddress of the reconcile's view)."""
    meta = o.meta(lock)
    annotations = {k: v for k, v in o.annotations(lock).items() if k != STORED_IN}
    annotations[LOCK_ANNOTATION] = json.dumps({
        "namespace": o.namespace(lock), "name": o.name(lock), "spec": dict(o.spec(lock)),
        "ownerReferences": [dict(r) for r in o.owner_references(lock)]}, sort_keys=True, separators=(",", ":"))
    metadata: dict[str, Any] = {
        "name": lease_name(o.namespace(lock), o.name(lock)), "namespace": home,
        "labels": {**o.labels(lock), LOCK_LABEL: o.namespace(lock)},
        "annotations": annotations,
    }
    if meta.get("finalizers"):
        metadata["finalizers"] = list(meta["finalizers"])
    return {"apiVersion": LEASE_API_VERSION, "kind": "Lease", "metadata": metadata,
            "spec": {"holderIdentity": _holder(o.spec(lock))}}


def from_lease(lease: Mapping[str, Any]) -> dict | None:
    """The Metal3 IPAddress a Lease stands for (what the reconcile reads), or None for a Lease that is no lock."""
    meta = o.meta(lease)
    try:
        said = json.loads(o.annotations(lease).get(LOCK_ANNOTATION) or "")
    except (TypeError, ValueError):
        return None
    if not isinstance(said, dict) or not isinstance(said.get("spec"), dict) \
            or not isinstance(said.get("namespace"), str) or not isinstance(said.get("name"), str):
        return None
    labels = {k: v for k, v in o.labels(lease).items() if k != LOCK_LABEL}
    annotations = {k: v for k, v in o.annotations(lease).items() if k != LOCK_ANNOTATION}
    annotations[STORED_IN] = o.name(lease)
    metadata: dict[str, Any] = {"name": said["name"], "namespace": said["namespace"]}
    for key in ("uid", "resourceVersion", "creationTimestamp", "deletionTimestamp", "finalizers"):
        if meta.get(key) is not None:
            metadata[key] = meta[key]
    if labels:
        metadata["labels"] = labels
    metadata["annotations"] = annotations
    owners = said.get("ownerReferences")
    if isinstance(owners, list) and owners:
        metadata["ownerReferences"] = owners
    return {"apiVersion": kinds.METAL3_API_VERSION, "kind": "IPAddress", "metadata": metadata,
            "spec": said["spec"]}


def owners_patch(lock: Mapping[str, Any], owner_references: tuple[dict, ...]) -> dict[str, str]:
    """The annotations that give the Lease of ``lock`` these owner references (they are the lock's, kept in
    its annotation: a Lease in another namespace than its owners would be taken by the garbage collector)."""
    said = json.loads(o.annotations(to_lease(lock, "")).get(LOCK_ANNOTATION))
    said["ownerReferences"] = [dict(r) for r in owner_references]
    return {LOCK_ANNOTATION: json.dumps(said, sort_keys=True, separators=(",", ":"))}


def _claim_uids(lock: Mapping[str, Any]) -> set[str]:
    """The uids of the owners of a lock that are its claim (of its kind and name): its incarnations."""
    claim = o.spec(lock).get("claim") if isinstance(o.spec(lock).get("claim"), Mapping) else {}
    kind = claim.get("kind") or kinds.IPCLAIM[1]
    return {str(r.get("uid")) for r in o.owner_references(lock)
            if r.get("kind") == kind and r.get("name") == claim.get("name") and r.get("uid")}


def same_lock(a: Mapping[str, Any] | None, b: Mapping[str, Any] | None) -> bool:
    """Whether two stored locks (either store) hold one IP for one claim of one pool: for one incarnation of it,
    where both are owned by their claim (a claim deleted and made again under its name is another claim)."""
    if a is None or b is None:
        return False
    sa, sb = o.spec(a), o.spec(b)
    ua, ub = _claim_uids(a), _claim_uids(b)
    return (o.namespace(a), o.name(a)) == (o.namespace(b), o.name(b)) and o.pool_of(a) == o.pool_of(b) \
        and sa.get("address") == sb.get("address") and sa.get("prefix") == sb.get("prefix") \
        and _holder(sa) == _holder(sb) and (not ua or not ub or bool(ua & ub))


def moved_over(legacy: Mapping[str, Any]) -> dict:
    """The lock to create in the Lease store for one an earlier version wrote as a Metal3 IPAddress: the same
    lock (name, spec, labels, finalizers, owners), without what the server gave the IPAddress, which is kept
    beside it as its twin."""
    keep = ("name", "namespace", "labels", "annotations", "finalizers", "ownerReferences")
    return {"apiVersion": kinds.METAL3_API_VERSION, "kind": "IPAddress",
            "metadata": {k: v for k, v in o.meta(legacy).items() if k in keep}, "spec": dict(o.spec(legacy))}


def orphan_guards(views, live_owners: set[str], serves=lambda namespace: True) -> list[dict]:
    """The guards stored as Leases none of whose owners lives (no uid of ``live_owners``: the claims and pools
    stored), of the namespaces served: what the garbage collector takes of a guard stored as a Metal3 IPAddress
    in its namespace (one a claim owns goes with it, one the namespace's pools share with the last of them),
    which it cannot for a Lease (its owners are of another namespace)."""
    return [view for view in views
            if o.is_guard(view) and stored_in_lease(view) and serves(o.namespace(view))
            and not o.is_deleting(view)
            and not any(str(r.get("uid")) in live_owners for r in o.owner_references(view))]
