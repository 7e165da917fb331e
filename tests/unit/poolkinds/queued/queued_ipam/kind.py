"""QueuedIPPool as a kind of pool: a prefix whose addresses the queued source hands out by key.

A pool is ``spec.prefix`` (a CIDR) and an optional ``spec.gateway``; it serves Cluster API claims only. Its
address set is the prefix's hosts (the ledger keeps one IP to one claim, as for every kind); which of them a
claim gets is the source's answer for the key the claim carries (``queued-ipam.test.metal3-ipam.io/key``).
"""

from __future__ import annotations

import ipaddress
from collections.abc import Mapping
from typing import Any

from metal3_ipam.core import kinds
from metal3_ipam.core.addresses import parse_ip
from metal3_ipam.core.allocator import Grant
from metal3_ipam.core.pool import Entry, Pool
from metal3_ipam.core.poolkind import NAMESPACED, Finalizers, Outside, PoolKind, locked_as
from metal3_ipam.core.problems import Problem
from metal3_ipam.core.validation import validate_pool_delete

from . import service
from .keys import GROUP, KEY_ANNOTATION, new_key, read_key

VERSION = "v1alpha1"
PLURAL = "queuedippools"
QUEUED_IP_POOL = (GROUP, "QueuedIPPool")
LOCK_TAG = "qp"  # ends in a tag letter, as every lock name of the scheme (``core.naming``)

FINALIZERS = Finalizers(
    pool=f"{PLURAL}.{GROUP}",
    claim={kinds.CAPI_CLAIM: f"{GROUP}/ipaddressclaim"},
    address={kinds.IPADDRESS: kinds.FINALIZERS[kinds.IPADDRESS], kinds.CAPI_ADDRESS: f"{GROUP}/ipaddress"},
)


def queued_pool(name: str = "qp", namespace: str = "default", prefix: str = "10.0.0.0/28",
                gateway: str | None = "10.0.0.1") -> dict:
    spec: dict[str, Any] = {"prefix": prefix}
    if gateway is not None:
        spec["gateway"] = gateway
    return {"apiVersion": f"{GROUP}/{VERSION}", "kind": QUEUED_IP_POOL[1],
            "metadata": {"name": name, "namespace": namespace, "generation": 1}, "spec": spec}


def queued_claim(name: str, pool: str = "qp", namespace: str = "default", cluster: str | None = None) -> dict:
    labels = {kinds.CLUSTER_NAME_LABEL: cluster} if cluster else {}
    return {"apiVersion": f"{kinds.CAPI_IPAM_GROUP}/v1beta2", "kind": "IPAddressClaim",
            "metadata": {"name": name, "namespace": namespace, "labels": labels},
            "spec": {"poolRef": {"apiGroup": GROUP, "kind": QUEUED_IP_POOL[1], "name": pool}}}


def _spec(pool: Mapping[str, Any]) -> tuple[ipaddress.IPv4Network | ipaddress.IPv6Network | None, str | None,
                                             list[Problem]]:
    spec = pool.get("spec") if isinstance(pool.get("spec"), Mapping) else {}
    prefix, gateway = spec.get("prefix"), spec.get("gateway")
    try:
        network = ipaddress.ip_network(prefix) if isinstance(prefix, str) else None
    except ValueError:
        network = None
    if network is None:
        return None, None, [Problem("spec.prefix", prefix, "must be a CIDR (an IP prefix with no host bits set)")]
    if gateway is not None and (not isinstance(gateway, str) or _ip(gateway) not in network):
        return None, None, [Problem("spec.gateway", gateway, f"must be an IP of {network}")]
    return network, gateway, []


def _ip(text: str) -> ipaddress.IPv4Address | ipaddress.IPv6Address | None:
    try:
        return ipaddress.ip_address(text)
    except ValueError:
        return None


def read(pool: Mapping[str, Any]) -> tuple[Pool | None, list[Problem]]:
    """The prefix's hosts, one entry; locks named ``<pool>.<ip>.qp``."""
    network, gateway, problems = _spec(pool)
    if network is None:
        return None, problems
    name = str((pool.get("metadata") or {}).get("name") or "")
    first, last = int(network.network_address), int(network.broadcast_address)
    entry = Entry(index=0, first=first, last=last, prefix=network.prefixlen, gateway=gateway, dns_servers=())
    model = Pool(name_prefix=name, version=network.version, strategy="sequential", entries=(entry,), reserved=[],
                 preallocations={})
    return locked_as(model, QUEUED_IP_POOL, name, False, (LOCK_TAG, LOCK_TAG)), []


def _validate(obj: Any) -> list[Problem]:
    return _spec(obj)[2] if isinstance(obj, Mapping) else [Problem("", obj, "must be an object")]


def granted(pool: Mapping[str, Any], address: str) -> Grant:
    """What a claim is given for the address the source holds for its key (``10.0.0.7/28``)."""
    network, gateway, _ = _spec(pool)
    ip = parse_ip(address.split("/")[0])
    entry = Entry(index=0, first=int(ip), last=int(ip), prefix=int(address.split("/")[1]), gateway=gateway,
                  dns_servers=())
    return Grant(ip, entry, int(ip))


QUEUED_IP_POOL_KIND = PoolKind(
    kind=QUEUED_IP_POOL,
    scope=NAMESPACED,
    plural=PLURAL,
    versions=(VERSION,),
    claim_kinds=(kinds.CAPI_CLAIM,),
    finalizers=FINALIZERS,
    read=read,
    validate=_validate,
    validate_update=lambda old, new, in_use: _validate(new),
    validate_delete=validate_pool_delete,
    default=None,
    cluster_name=lambda pool: None,
    status=lambda counts: {},
    indexes=False,
    unique_in_namespace=False,
    outside=Outside(annotation=KEY_ANNOTATION, read_key=read_key, new_key=new_key, granted=granted,
                    service=service.service),
)
