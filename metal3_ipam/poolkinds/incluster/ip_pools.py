"""The Cluster API in-cluster provider's IP pools as kinds of pool.

``InClusterIPPool`` (namespaced) and ``GlobalInClusterIPPool`` (cluster
scoped; claims of every namespace share it) of ``ipam.cluster.x-k8s.io``,
read at ``v1alpha2``: their spec is read and judged by ``spec``,
they serve Cluster API claims only, with the in-cluster provider's
finalizers, and their status holds its ``ipAddresses`` counts.

Where their lifecycle differs from IPPool's (see ``PoolKind``): each IP they
hand out is locked by a Metal3 IPAddress named after the pool and the IP
(``<pool>.<ip>.ip``; ``<pool>.<ip>.gip`` in the one lock namespace for a
global pool; see ``naming.lock_name``), a global pool keeps its IPs unique
among its own claims of every namespace (a namespaced one among every
namespaced pool of its namespace, as an IPPool does), the Cluster API
IPAddress carries the claim's cluster-name label only and a pool owner reference with
``controller: false``, an IPAddress written before its claim is kept for it,
and a deleted claim's address outlives it for the pool's
``addressReuseGracePeriodSeconds``.
"""

from __future__ import annotations

import hashlib
from collections.abc import Mapping
from typing import Any

from metal3_ipam.core import kinds
from metal3_ipam.poolkinds.incluster import spec as incluster
from metal3_ipam.poolkinds.incluster.conversion import convert
from metal3_ipam.core.naming import MAX_PREFIX_LENGTH
from metal3_ipam.core.poolkind import CLUSTER, NAMESPACED, Counts, Finalizers, PoolKind, locked_as
from metal3_ipam.poolkinds.incluster.schema import pool_crd

# The tags of a pool's lock names (``naming.lock_name``): a global pool's locks live in one namespace beside
# those of namespaced pools, and say that they are a global pool's.
LOCK_TAG, GLOBAL_LOCK_TAG = "ip", "gip"
_LEGACY_HASHED_PART = 200  # an earlier version's pool name too long for a lock: this much of it, then a hash


def lock_prefix(kind: tuple[str, str], name: str, tag: str | None, room: int = 0) -> str:
    """How an earlier version started the names of a pool's locks ``<lock prefix>-<ip>`` (before
    ``naming.lock_name``): the pool's name, after ``<tag>-`` for a global pool (``gip``); a name too long for
    that (with ``room`` characters more at the end of each lock name) cut and told apart by a hash of the
    pool's kind and name. Such locks are still read (by their spec, as every lock is); none is written."""
    prefix = f"{tag}-{name}" if tag else name
    if len(prefix) <= MAX_PREFIX_LENGTH - room:
        return prefix
    digest = hashlib.sha256(f"{kind[0]}/{kind[1]}/{name}".encode()).hexdigest()[:8]
    return f"{prefix[:_LEGACY_HASHED_PART].rstrip('.-')}-{digest}"


def _reader(kind: tuple[str, str], cluster_scoped: bool):
    def read(pool: Mapping[str, Any]):
        model, problems = incluster.read_ip_pool(pool.get("spec"))
        if model is None:
            return model, problems
        name = str((pool.get("metadata") or {}).get("name") or "")
        return locked_as(model, kind, name, cluster_scoped, (LOCK_TAG, GLOBAL_LOCK_TAG)), problems
    return read


def _address_labels(claim: Mapping[str, Any]) -> dict[str, str]:
    """The in-cluster provider copies the cluster-name label of the claim, and no other (nor spec.clusterName)."""
    labels = (claim.get("metadata") or {}).get("labels") or {}
    value = labels.get(kinds.CLUSTER_NAME_LABEL) if isinstance(labels, Mapping) else None
    return {kinds.CLUSTER_NAME_LABEL: value} if value else {}


def _release_after(pool: Mapping[str, Any], claim: Mapping[str, Any]) -> str | None:
    """``deletionTimestamp`` of the claim + ``addressReuseGracePeriodSeconds`` of the pool, as stored."""
    spec = pool.get("spec") if isinstance(pool.get("spec"), Mapping) else {}
    try:
        deadline = incluster.grace_deadline((claim.get("metadata") or {}).get("deletionTimestamp"),
                                            incluster.grace_seconds(spec))
    except ValueError:
        return None
    return incluster.format_time(deadline) if deadline is not None else None


def _status(counts: Counts) -> dict[str, Any]:
    # Counts.free is the capacity less what is held inside the set: out-of-range addresses do not lower it.
    used = counts.allocated
    return {"ipAddresses": incluster.Counts(total=counts.capacity, used=used, free=counts.free,
                                            out_of_range=max(0, used - (counts.capacity - counts.free))).status}


FINALIZERS = Finalizers(
    pool=incluster.POOL_FINALIZER,
    claim={kinds.CAPI_CLAIM: incluster.CLAIM_FINALIZER},
    address={kinds.IPADDRESS: kinds.FINALIZERS[kinds.IPADDRESS], kinds.CAPI_ADDRESS: incluster.ADDRESS_FINALIZER},
)


# Where the in-cluster kinds' status says their counts (``status.ipAddresses``, also of prefix pools).
STATUS_COUNTS = {"capacity": ("status", "ipAddresses", "total"), "allocated": ("status", "ipAddresses", "used"),
                 "free": ("status", "ipAddresses", "free"), "out_of_range": ("status", "ipAddresses", "outOfRange")}


def in_cluster_kind(kind: tuple[str, str], scope: str, plural: str, **rules: Any) -> PoolKind:
    """A kind of the in-cluster provider's (its finalizers, its IPAddress's labels and owners, an address
    written before its claim kept; its pools independent of other pools unless ``rules`` say otherwise);
    ``rules``: how it reads and judges."""
    rules.setdefault("unique_in_namespace", False)
    return PoolKind(kind=kind, scope=scope, plural=plural, versions=(incluster.VERSION,),
                    claim_kinds=(kinds.CAPI_CLAIM,), finalizers=FINALIZERS, default=None,
                    cluster_name=lambda pool: None, status=_status, indexes=False,
                    address_labels=_address_labels, explicit_pool_owner=True, keeps_addresses_written_first=True,
                    status_counts=STATUS_COUNTS, locks_in_leases=True,
                    crds=lambda: [pool_crd(kind[1])], **rules)


def _ip_pool_kind(kind: tuple[str, str], scope: str, plural: str) -> PoolKind:
    return in_cluster_kind(kind, scope, plural, read=_reader(kind, scope == CLUSTER),
                           lock_tag=GLOBAL_LOCK_TAG if scope == CLUSTER else LOCK_TAG,
                           validate=incluster.validate_ip_pool, validate_update=incluster.validate_ip_pool_update,
                           validate_delete=incluster.validate_ip_pool_delete, release_after=_release_after,
                           unique_in_namespace=scope == NAMESPACED, guards_every_ip=scope == NAMESPACED,
                           convert=convert)


IN_CLUSTER_IP_POOL_KIND = _ip_pool_kind(incluster.IN_CLUSTER_IP_POOL, NAMESPACED, "inclusterippools")
GLOBAL_IN_CLUSTER_IP_POOL_KIND = _ip_pool_kind(incluster.GLOBAL_IN_CLUSTER_IP_POOL, CLUSTER, "globalinclusterippools")
