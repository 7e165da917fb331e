"""Metal3's IPPool (``ipam.metal3.io/v1alpha1``) as a kind of pool.

Its spec is read by ``pool.read_pool`` and judged by the IPPool rules of
``validation``; a pool with ``spec.clusterName`` belongs to that Cluster; its
status carries Metal3's counts as strings and ``status.indexes``.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from metal3_ipam.core import kinds
from metal3_ipam.core.pool import read_pool
from metal3_ipam.core.validation import validate_pool, validate_pool_delete, validate_pool_update
from metal3_ipam.core.poolkind import NAMESPACED, Counts, Finalizers, PoolKind
from metal3_ipam.poolkinds.ippool.schema import ippool_crd


def _spec(pool: Mapping[str, Any]) -> Any:
    return pool.get("spec")


def _cluster_name(pool: Mapping[str, Any]) -> str | None:
    spec = _spec(pool)
    name = spec.get("clusterName") if isinstance(spec, Mapping) else None
    return str(name) if name else None


def _default(pool: Mapping[str, Any]) -> list[dict]:
    """Where Metal3 defaults: an IPPool's allocationStrategy is sequential."""
    spec = _spec(pool)
    if not isinstance(spec, dict) or spec.get("allocationStrategy"):
        return []
    op = "replace" if "allocationStrategy" in spec else "add"
    return [{"op": op, "path": "/spec/allocationStrategy", "value": "sequential"}]


def _status(counts: Counts) -> dict[str, Any]:
    return {"capacity": str(counts.capacity), "allocated": str(counts.allocated), "free": str(counts.free)}


IPPOOL_KIND = PoolKind(
    kind=kinds.IPPOOL,
    scope=NAMESPACED,
    plural="ippools",
    versions=(kinds.METAL3_VERSION,),
    claim_kinds=(kinds.IPCLAIM, kinds.CAPI_CLAIM),
    finalizers=Finalizers(
        pool=kinds.FINALIZERS[kinds.IPPOOL],
        claim={kinds.IPCLAIM: kinds.FINALIZERS[kinds.IPCLAIM], kinds.CAPI_CLAIM: kinds.FINALIZERS[kinds.CAPI_CLAIM]},
        address={kinds.IPADDRESS: kinds.FINALIZERS[kinds.IPADDRESS],
                 kinds.CAPI_ADDRESS: kinds.FINALIZERS[kinds.CAPI_ADDRESS]}),
    read=lambda pool: read_pool(_spec(pool)),
    validate=validate_pool,
    validate_update=validate_pool_update,
    validate_delete=validate_pool_delete,
    default=_default,
    cluster_name=_cluster_name,
    status=_status,
    indexes=True,
    crds=lambda: [ippool_crd()],
)
