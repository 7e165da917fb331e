"""A kind of pool that exists only in the tests: cluster-scoped, read from ``spec.addresses``.

It is everything serving a kind takes: one ``PoolKind`` (its reading, rules,
finalizers and status) and its registration. Its claims are Cluster API
IPAddressClaims in any namespace.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from metal3_ipam.core import kinds
from metal3_ipam.core import objects as o
from metal3_ipam.core.pool import read_pool
from metal3_ipam.core.poolkind import CLUSTER
from metal3_ipam.core.poolkind import Counts
from metal3_ipam.core.poolkind import Finalizers
from metal3_ipam.core.poolkind import PoolKind
from metal3_ipam.core.problems import Problem

SHARED = ("pools.test.metal3.io", "SharedPool")
VERSION = "v1alpha1"
POOL_FINALIZER = "pools.test.metal3.io/protect-pool"
CLAIM_FINALIZER = "pools.test.metal3.io/release-address"
ADDRESS_FINALIZER = "pools.test.metal3.io/protect-address"


def read(pool: Mapping[str, Any]):
    """``spec.addresses``: ranges ``first-last``; ``spec.prefix``; the locks are named ``<pool>-<ip>``."""
    spec = o.spec(pool)
    addresses = spec.get("addresses")
    if not isinstance(addresses, list) or not addresses:
        return None, [Problem("spec.addresses", addresses, "is required: a list of ranges first-last")]
    entries = [{"start": str(a).split("-")[0], "end": str(a).split("-")[-1]} for a in addresses]
    return read_pool({"namePrefix": o.name(pool), "pools": entries, "prefix": spec.get("prefix")})


def validate(obj: Any) -> list[Problem]:
    return read(obj)[1] if isinstance(obj, Mapping) else [Problem("", obj, "is not an object")]


def status(counts: Counts) -> dict[str, Any]:
    return {"ipAddresses": {"total": counts.capacity, "used": counts.allocated, "free": counts.free}}


SHARED_KIND = PoolKind(
    kind=SHARED, scope=CLUSTER, plural="sharedpools", versions=(VERSION,), claim_kinds=(kinds.CAPI_CLAIM,),
    finalizers=Finalizers(pool=POOL_FINALIZER, claim={kinds.CAPI_CLAIM: CLAIM_FINALIZER},
                          address={kinds.IPADDRESS: ADDRESS_FINALIZER, kinds.CAPI_ADDRESS: ADDRESS_FINALIZER}),
    read=read, validate=validate,
    validate_update=lambda old, new, in_use: validate(new),
    validate_delete=lambda obj, in_use: [],
    default=None, cluster_name=lambda pool: None, status=status, indexes=False)


def shared_pool(name: str, addresses: list[str], prefix: int = 24) -> dict:
    return {"apiVersion": f"{SHARED[0]}/{VERSION}", "kind": SHARED[1], "metadata": {"name": name, "namespace": ""},
            "spec": {"addresses": addresses, "prefix": prefix}}
