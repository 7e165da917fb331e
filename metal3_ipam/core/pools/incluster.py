"""The Cluster API in-cluster provider's IP pools as kinds of pool.

``InClusterIPPool`` (namespaced) and ``GlobalInClusterIPPool`` (cluster
scoped; claims of every namespace share it) of ``ipam.cluster.x-k8s.io``,
read at ``v1alpha2``: their spec is read and judged by ``core.incluster``,
they serve Cluster API claims only, with the in-cluster provider's
finalizers, and their status holds its ``ipAddresses`` counts.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from .. import incluster, kinds
from . import CLUSTER, NAMESPACED, Counts, Finalizers, PoolKind


def _read(pool: Mapping[str, Any]):
    return incluster.read_ip_pool(pool.get("spec"))


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


def _ip_pool_kind(kind: tuple[str, str], scope: str, plural: str) -> PoolKind:
    return PoolKind(
        kind=kind,
        scope=scope,
        plural=plural,
        versions=(incluster.VERSION,),
        claim_kinds=(kinds.CAPI_CLAIM,),
        finalizers=FINALIZERS,
        read=_read,
        validate=incluster.validate_ip_pool,
        validate_update=incluster.validate_ip_pool_update,
        validate_delete=incluster.validate_ip_pool_delete,
        default=None,
        cluster_name=lambda pool: None,
        status=_status,
        indexes=False,
    )


IN_CLUSTER_IP_POOL_KIND = _ip_pool_kind(incluster.IN_CLUSTER_IP_POOL, NAMESPACED, "inclusterippools")
GLOBAL_IN_CLUSTER_IP_POOL_KIND = _ip_pool_kind(incluster.GLOBAL_IN_CLUSTER_IP_POOL, CLUSTER, "globalinclusterippools")
