"""OpenStackFloatingIPPool (``openstack.metal3-ipam.io``) as a kind of pool: floating IPs from Neutron.

It serves Cluster API claims only. Addresses are not chosen from an address
set of the pool's own but asked of Neutron by the allocation key each claim
carries (``Outside``): the key is written on the claim (with its finalizer)
before Neutron is asked, and the floating IP carries it from its create call
on (``pool.description``), so a retry, a restart between create and tag, a
second replica taking over or a claim moved in finds the same floating IP.
A grant becomes the same lock and Cluster API IPAddress as any other kind's;
a deleted claim's floating IP is released (deleted, or kept by ``Retain``)
before its objects and finalizer go.

The IPAddress written for a floating IP says ``prefix: 32`` and no gateway,
as CAPO's pool writes it: a floating IP is one public address NAT-ed by a
Neutron router to a port's fixed address; it is never configured on the
machine, so it has no network of its own to give a prefix or gateway of.

The address set read here is all of IPv4 (Neutron chooses; floating IPs are
IPv4 only): the ledger keeps one IP to one claim as for every kind, Neutron
one floating IP per key. Its status is Neutron's (the adapter's survey).
"""

from __future__ import annotations

import ipaddress
from collections.abc import Mapping
from typing import Any

from metal3_ipam.core import kinds
from metal3_ipam.core.addresses import parse_ip
from metal3_ipam.core.allocator import Grant
from metal3_ipam.core.pool import Entry, Pool
from metal3_ipam.core.poolkind import NAMESPACED, Finalizers, Outside, PoolKind, draw_key, locked_as
from metal3_ipam.core.problems import Problem
from metal3_ipam.core.validation import validate_pool_delete
from metal3_ipam.poolkinds.openstack import pool as os_pool
from metal3_ipam.poolkinds.openstack import crd as openstack_crd
from metal3_ipam.poolkinds.openstack import service

LOCK_TAG = "openstack"
PREFIX = 32  # a floating IP is one address, as CAPO writes it: see the module's docstring

OPENSTACK_FLOATING_IP_POOL = os_pool.OPENSTACK_FLOATING_IP_POOL

FINALIZERS = Finalizers(
    pool=f"{os_pool.PLURAL}.{os_pool.GROUP}",
    claim={kinds.CAPI_CLAIM: f"{os_pool.GROUP}/ipaddressclaim"},
    address={kinds.IPADDRESS: kinds.FINALIZERS[kinds.IPADDRESS], kinds.CAPI_ADDRESS: f"{os_pool.GROUP}/ipaddress"},
)

_FIRST, _LAST = int(ipaddress.IPv4Address("0.0.0.1")), int(ipaddress.IPv4Address("255.255.255.254"))


def read(pool: Mapping[str, Any]) -> tuple[Pool | None, list[Problem]]:
    """The pool's address set: IPv4 (Neutron chooses among its external networks' addresses); its locks are
    named after the pool (``<pool>.<ip>.openstack``)."""
    model, problems = os_pool.read_pool(pool)
    if model is None:
        return None, problems
    entry = Entry(index=0, first=_FIRST, last=_LAST, prefix=PREFIX, gateway=None, dns_servers=())
    address_set = Pool(name_prefix=model.name, version=4, strategy="sequential", entries=(entry,), reserved=[],
                       preallocations={})
    return locked_as(address_set, OPENSTACK_FLOATING_IP_POOL, model.name, False, (LOCK_TAG, LOCK_TAG)), []


def _validate(obj: Any) -> list[Problem]:
    if not isinstance(obj, Mapping):
        return [Problem("", obj, "must be an object")]
    return os_pool.read_pool(obj)[1]


def _validate_update(old: Any, new: Any, in_use: Mapping[str, str] | None) -> list[Problem]:
    """The cloud (Secret, cloud name, region) may not change while floating IPs of the pool are in use: each is
    held in the old cloud's project, found and released there by its claim's key. Nor may a pre-allocated
    address a claim holds leave ``spec.preAllocatedFloatingIPs``: it is an admin's floating IP, kept on release
    only as one (the release also keeps any it took as one, by its tag, should this check be bypassed)."""
    problems = _validate(new)
    if problems or not in_use or not isinstance(old, Mapping):
        return problems
    before, after = os_pool.read_pool(old)[0], os_pool.read_pool(new)[0]
    if before is None or after is None:
        return problems
    return _cloud_changed(before, after, in_use) + _preallocated_dropped(before, after, in_use)


def _cloud_changed(before: os_pool.OpenStackPool, after: os_pool.OpenStackPool, in_use: Mapping[str, str]
                   ) -> list[Problem]:
    if before.identity == after.identity:
        return []
    name, ip = sorted(in_use.items())[0]
    return [Problem("spec.identityRef", {"name": after.identity.secret, "cloudName": after.identity.cloud,
                                         "region": after.identity.region},
                    f"cannot change while {len(in_use)} floating IP(s) of the pool are in use (such as {name}, "
                    f"{ip}): they are held in the project of the Secret {before.identity.secret}, cloud "
                    f"{before.identity.cloud}, where their claims' keys release them; delete those claims first")]


def _preallocated_dropped(before: os_pool.OpenStackPool, after: os_pool.OpenStackPool, in_use: Mapping[str, str]
                          ) -> list[Problem]:
    dropped = set(before.preallocated) - set(after.preallocated)
    held = sorted((ip, name) for name, ip in in_use.items() if ip in dropped)
    if not held:
        return []
    ip, name = held[0]
    return [Problem("spec.preAllocatedFloatingIPs", list(after.preallocated),
                    f"cannot drop {ip} while {name} holds it ({len(held)} dropped address(es) in use): it is a "
                    f"pre-allocated floating IP, not this pool's to delete; delete its claim first")]


def _granted(pool: Mapping[str, Any], address: str) -> Grant:
    """What a claim is given for its floating IP: the address, /32, no gateway."""
    ip = parse_ip(address)
    if ip.version != 4:
        raise ValueError(f"{address} is not an IPv4 address (a floating IP is)")
    entry = Entry(index=0, first=int(ip), last=int(ip), prefix=PREFIX, gateway=None, dns_servers=())
    return Grant(ip, entry, int(ip))


OPENSTACK_FLOATING_IP_POOL_KIND = PoolKind(
    kind=OPENSTACK_FLOATING_IP_POOL,
    scope=NAMESPACED,
    plural=os_pool.PLURAL,
    versions=(os_pool.VERSION,),
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
    unique_in_namespace=False,
    outside=Outside(annotation=os_pool.KEY_ANNOTATION, read_key=os_pool.claim_key, new_key=draw_key,
                    granted=_granted, service=service.service, flags=service.FLAGS,
                    role_rules=service.ROLE_RULES, unservable=service.unservable, secrets=service.secrets),
    # spec.maxIPs, where set, bounds the floating IPs the pool holds: its capacity (free: what is left of it).
    status_counts={"capacity": ("spec", "maxIPs"), "allocated": ("status", "claimed"),
                   "available": ("status", "available")},
    crds=lambda: [openstack_crd.crd()],
    lock_tag=LOCK_TAG,
)
