"""The Cluster API in-cluster provider's prefix pools as kinds of pool.

``InClusterPrefixPool`` (namespaced) and ``GlobalInClusterPrefixPool``
(cluster scoped; claims of every namespace share it) of
``ipam.cluster.x-k8s.io``, read at ``v1alpha2`` by ``prefix_spec``. They
hand out IPv6 sub-prefixes of ``spec.allocationPrefixLength`` bits: the
Cluster API IPAddress of a claim carries the sub-prefix's base address as
``address``, its length as ``prefix`` and the pool's ``gateway`` as written.

The allocator's unit is a sub-prefix (``Pool.unit_bits``): unit ``n`` is the
one based at ``n << (128 - allocationPrefixLength)``. Every pool prefix is
aligned and no longer than the allocation length, so it is a whole interval
of units, and an excluded range takes out every unit it touches: the address
set is a handful of intervals whatever the pool's size (a /32 cut into /64s
is one interval of 2^32 units), the lowest free sub-prefix is found in
O(log k), and the counts are exact integers.

The rest is the in-cluster IP pools' lifecycle (see ``pools.incluster``):
the same finalizers, the Cluster API IPAddress named after its claim with the
claim's cluster-name label and the pool's owner reference ``controller:
false``, one written before its claim kept for it, no IP (here: sub-prefix)
unique beyond the pool, and ``status.ipAddresses {total, used, free,
outOfRange}`` counted in sub-prefixes. Each sub-prefix handed out is locked by
a Metal3 IPAddress named ``<pool>.<base>.<length>.pp`` in the pool's namespace
(``<pool>.<base>.<length>.gpp`` in the one lock namespace for a global pool;
see ``naming.lock_name``). No reuse grace period: the Go provider's prefix pools have none.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from metal3_ipam.poolkinds.incluster import prefix_spec as prefixes
from metal3_ipam.core.pool import Entry, Pool
from metal3_ipam.core.problems import Problem
from metal3_ipam.core.poolkind import CLUSTER, NAMESPACED, PoolKind, locked_as
from metal3_ipam.poolkinds.incluster.ip_pools import in_cluster_kind

LOCK_TAG, GLOBAL_LOCK_TAG = "pp", "gpp"


def read_prefix_pool(kind: tuple[str, str], name: str, spec: Any,
                     cluster_scoped: bool) -> tuple[Pool | None, list[Problem]]:
    """A prefix pool's spec read into the address set the allocator serves, counted in sub-prefixes."""
    model, problems = prefixes.read_prefix_pool(spec)
    if model is None:
        return None, problems
    entries = tuple(Entry(index=i, first=lo, last=hi, prefix=model.length, gateway=model.gateway, dns_servers=())
                    for i, (lo, hi) in enumerate(model.blocks))
    pool = Pool(name_prefix=name, version=6, strategy="sequential", entries=entries, reserved=[], preallocations={},
                unit_length=model.length)
    return locked_as(pool, kind, name, cluster_scoped, (LOCK_TAG, GLOBAL_LOCK_TAG)), problems


def _reader(kind: tuple[str, str], cluster_scoped: bool):
    def read(pool: Mapping[str, Any]):
        name = str((pool.get("metadata") or {}).get("name") or "")
        return read_prefix_pool(kind, name, pool.get("spec"), cluster_scoped)
    return read


def _named_unit_length(pool: Mapping[str, Any]) -> tuple[int, int] | None:
    """The IPv6 sub-prefix length a prefix pool's spec names, whatever else is wrong with the spec."""
    spec = pool.get("spec")
    length = prefixes.allocation_prefix_length(spec) if isinstance(spec, Mapping) else None
    if isinstance(length, bool) or not isinstance(length, int) or not 1 <= length <= prefixes.BITS:
        return None
    return 6, length


def _validate_update(old: Any, new: Any, in_use: Mapping[str, str] | None) -> list[Problem]:
    """The update rules, the addresses in use taken at the length they were handed out with (the
    allocation length is immutable, and its change is refused first)."""
    old_spec = old.get("spec") if isinstance(old, Mapping) and isinstance(old.get("spec"), Mapping) else {}
    length = prefixes.allocation_prefix_length(old_spec)
    return prefixes.validate_prefix_pool_update(old, new, {name: (address, length)
                                                           for name, address in (in_use or {}).items()})


def _prefix_pool_kind(kind: tuple[str, str], scope: str, plural: str) -> PoolKind:
    return in_cluster_kind(kind, scope, plural, read=_reader(kind, scope == CLUSTER),
                           lock_tag=GLOBAL_LOCK_TAG if scope == CLUSTER else LOCK_TAG,
                           validate=prefixes.validate_prefix_pool, validate_update=_validate_update,
                           validate_delete=prefixes.validate_prefix_pool_delete, unique_in_namespace=scope == NAMESPACED,
                           holds_prefixes=True, named_unit_length=_named_unit_length)


IN_CLUSTER_PREFIX_POOL_KIND = _prefix_pool_kind(prefixes.IN_CLUSTER_PREFIX_POOL, NAMESPACED, "inclusterprefixpools")
GLOBAL_IN_CLUSTER_PREFIX_POOL_KIND = _prefix_pool_kind(prefixes.GLOBAL_IN_CLUSTER_PREFIX_POOL, CLUSTER,
                                                       "globalinclusterprefixpools")
