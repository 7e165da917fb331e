"""NetBoxIPPool (``netbox.metal3-ipam.io``) as a kind of pool: its addresses come from NetBox.

A pool is read by ``pool``; it serves Cluster API claims only.
Its addresses are not chosen from the pool's own address set but asked of
NetBox by the allocation key each claim carries (``Outside``): the key is
written on the claim (with its finalizer) before anything is asked, the
answer comes later (``core.asking``), and a grant becomes the same lock and
Cluster API IPAddress as any other kind's. A deleted claim's address is
released in NetBox before its objects and finalizer go.

The address set read here is the NetBox prefix or range (its IPs are the
only ones NetBox hands out for the pool): the ledger keeps one IP to one
claim as for every kind, NetBox keeps one address per key. NetBox says what
is free, but an IP another pool of the namespace holds is refused all the
same (``reconcile`` checks it for every outside kind); its status is NetBox's (the adapter's survey), not the ledger's counts.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from metal3_ipam.core import kinds
from metal3_ipam.poolkinds.netbox import pool as netbox_pool
from metal3_ipam.core.addresses import parse_ip
from metal3_ipam.core.allocator import Grant
from metal3_ipam.core.pool import Entry, Pool
from metal3_ipam.core.problems import Problem
from metal3_ipam.core.poolkind import NAMESPACED, Finalizers, Outside, PoolKind, draw_key, locked_as
from metal3_ipam.core.validation import validate_pool_delete
from metal3_ipam.poolkinds.netbox import service
from metal3_ipam.poolkinds.netbox.schema import netbox_pool_crd

LOCK_TAG = "netbox"

NETBOX_IP_POOL = netbox_pool.NETBOX_IP_POOL

FINALIZERS = Finalizers(
    pool=f"{netbox_pool.PLURAL}.{netbox_pool.GROUP}",
    claim={kinds.CAPI_CLAIM: f"{netbox_pool.GROUP}/ipaddressclaim"},
    address={kinds.IPADDRESS: kinds.FINALIZERS[kinds.IPADDRESS], kinds.CAPI_ADDRESS: f"{netbox_pool.GROUP}/ipaddress"},
)


def read(pool: Mapping[str, Any]) -> tuple[Pool | None, list[Problem]]:
    """The pool's address set: the NetBox prefix or range, one entry, nothing reserved (NetBox reserves
    what it holds, the gateway included); its locks are named after the pool (``<pool>.<ip>.netbox``)."""
    model, problems = netbox_pool.read_pool(pool)
    if model is None:
        return None, problems
    first, last = int(model.parent.start), int(model.parent.end)
    entry = Entry(index=0, first=first, last=last, prefix=model.prefix,
                  gateway=str(model.gateway) if model.gateway else None,
                  dns_servers=tuple(str(d) for d in model.dns_servers))
    pool = Pool(name_prefix=model.name, version=model.family, strategy="sequential", entries=(entry,), reserved=[],
                preallocations={})
    return locked_as(pool, NETBOX_IP_POOL, model.name, False, (LOCK_TAG, LOCK_TAG)), []


def _validate(obj: Any) -> list[Problem]:
    if not isinstance(obj, Mapping):
        return [Problem("", obj, "must be an object")]
    return netbox_pool.read_pool(obj)[1]


def _validate_update(old: Any, new: Any, in_use: Mapping[str, str] | None) -> list[Problem]:
    """The server may not change while the pool's addresses are in use: each is NetBox's on the old server,
    found and released there by its claim's key (asked of the new one, it would be left behind)."""
    problems = _validate(new)
    if problems or not in_use or not isinstance(old, Mapping):
        return problems
    before, after = netbox_pool.read_pool(old)[0], netbox_pool.read_pool(new)[0]
    if before is None or after is None or before.server.url == after.server.url:
        return problems
    name, ip = sorted(in_use.items())[0]
    return [Problem("spec.server.url", after.server.url,
                    f"cannot change while {len(in_use)} address(es) of the pool are in use (such as {name}, {ip}): "
                    f"they are NetBox's at {before.server.url}, where their claims' keys release them; delete "
                    "those claims first")]


def _granted(pool: Mapping[str, Any], address: str) -> Grant:
    """What a claim is given for the address NetBox holds for its key (``192.0.2.7/24``)."""
    model, _ = netbox_pool.read_pool(pool)
    given = netbox_pool.handed_out(model, address)
    ip = parse_ip(str(given.address))
    entry = Entry(index=0, first=int(ip), last=int(ip), prefix=given.prefix,
                  gateway=str(given.gateway) if given.gateway else None,
                  dns_servers=tuple(str(d) for d in given.dns_servers))
    return Grant(ip, entry, int(ip))


NETBOX_IP_POOL_KIND = PoolKind(
    kind=NETBOX_IP_POOL,
    scope=NAMESPACED,
    plural=netbox_pool.PLURAL,
    versions=(netbox_pool.VERSION,),
    claim_kinds=(kinds.CAPI_CLAIM,),
    finalizers=FINALIZERS,
    read=read,
    validate=_validate,
    validate_update=_validate_update,
    validate_delete=validate_pool_delete,
    default=None,
    cluster_name=lambda pool: None,
    status=lambda counts: {},
    indexes=False,
    status_counts={"capacity": ("status", "size"), "allocated": ("status", "used"), "free": ("status", "free")},
    unique_in_namespace=False,
    outside=Outside(annotation=netbox_pool.KEY_ANNOTATION, read_key=netbox_pool.claim_key, new_key=draw_key,
                    granted=_granted, service=service.service, flags=service.FLAGS,
                    role_rules=service.ROLE_RULES, unservable=service.unservable, secrets=service.secrets),
    crds=lambda: [netbox_pool_crd()],
    lock_tag=LOCK_TAG,
)
