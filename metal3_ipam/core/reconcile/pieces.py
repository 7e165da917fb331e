"""Small pieces of a pass: the writes a plan makes of finalizers, deletions and owner references, readings of
address objects and times, and messages as claims and pools are told them."""

from __future__ import annotations

import dataclasses
import datetime
from collections.abc import Mapping

from .. import kinds
from .. import objects as o
from ..actions import Delete, SetFinalizers, SetMetadata, Step
from ..addresses import ip_from_int
from ..naming import ip_text


# A message written into a status or an Event is bounded too.
MAX_MESSAGE = 1024
# The most of a message a pool reference written by a user takes (a pool's own text is at most 340 characters).
MAX_REFERENCE_TEXT = 400


def _with_finalizer(obj: dict, finalizer: str) -> SetFinalizers:
    return SetFinalizers(o.ref(obj), tuple(o.finalizers(obj) + [finalizer]), o.meta(obj).get("resourceVersion"))


def _add_finalizer(step: Step, obj: dict, finalizer: str) -> None:
    """Add ``finalizer`` to ``obj`` in ``step``: in the step's write of its metadata as read (an allocation's naming,
    made first), one write less; else in a write of its own, last."""
    version = o.meta(obj).get("resourceVersion")
    for at, action in enumerate(step.actions):
        if isinstance(action, SetMetadata) and action.target == o.ref(obj) and action.finalizers is None \
                and action.resource_version == version:
            step.actions[at] = dataclasses.replace(action, finalizers=tuple(o.finalizers(obj) + [finalizer]))
            return
    step.add(_with_finalizer(obj, finalizer))


def _delete(obj: dict, unless_exists: o.Ref | None = None, guard_pool: o.PoolKey | None = None) -> Delete:
    return Delete(o.ref(obj), unless_exists=unless_exists, guard_pool=guard_pool,
                  resource_version=o.meta(obj).get("resourceVersion"))


def _let_go(step: Step, obj: dict, finalizer: str, unless_exists: o.Ref | None = None) -> None:
    """Delete ``obj`` (unless it is going already) and take our finalizer off it."""
    if not o.is_deleting(obj):
        step.add(_delete(obj, unless_exists=unless_exists, guard_pool=o.pool_of(obj) if unless_exists else None))
    if finalizer in o.finalizers(obj):
        step.add(_without_finalizer(obj, finalizer))


def _without_finalizer(obj: dict, finalizer: str) -> SetFinalizers:
    return SetFinalizers(o.ref(obj), tuple(f for f in o.finalizers(obj) if f != finalizer),
                         o.meta(obj).get("resourceVersion"))


def _owned_by(obj: dict, owner: dict) -> bool:
    """Whether an owner reference of ``obj`` names this incarnation of ``owner`` (its uid)."""
    uid = o.meta(owner).get("uid")
    return uid is not None and any(isinstance(r, Mapping) and r.get("uid") == uid
                                   for r in o.meta(obj).get("ownerReferences") or [])


def _owner(obj: dict, controller: bool | None = None, block: bool = False) -> dict:
    """An owner reference to ``obj``; ``controller`` written when True, or False when given as False."""
    ref = {"apiVersion": obj.get("apiVersion"), "kind": obj.get("kind"), "name": o.name(obj),
           "uid": o.meta(obj).get("uid")}
    if controller is not None:
        ref["controller"] = controller
    if block:
        ref["blockOwnerDeletion"] = True
    return ref


def _moving(obj: dict | None) -> bool:
    """Deleted by ``clusterctl move`` after its copy reached the target: clusterctl's to finish."""
    return obj is not None and o.is_deleting(obj) and o.deleted_for_move(obj)


def _address_text(address: dict) -> str:
    """An address object as messages name it: its kind (the Cluster API one with its group) and namespace/name."""
    group = f".{kinds.CAPI_IPAM_GROUP}" if kinds.kind_of(address) == kinds.CAPI_ADDRESS else ""
    return f"IPAddress{group} {o.namespace(address)}/{o.name(address)}"


def _held_text(address: dict) -> str:
    """What holds an address object's IP: the claim it names and the object with its pool."""
    capi = kinds.kind_of(address) == kinds.CAPI_ADDRESS
    named = (o.claim_of_capi_address if capi else o.claim_of_address)(address)
    pool = o.pool_of(address)
    of = f" of {pool.kind[1]} {pool.namespace + '/' if pool.namespace else ''}{pool.name}" if pool is not None else ""
    if named is None:
        return f"{_address_text(address)}{of} holds, for no claim"
    claim_ns = named[2] if len(named) > 2 else str((o.spec(address).get("claim") or {}).get("namespace")
                                                  or o.namespace(address))
    return f"{named[0]} {claim_ns}/{named[1]} holds ({_address_text(address)}{of})"


def _live(addresses: list[dict]) -> list[dict]:
    return [a for a in addresses if not o.is_deleting(a)]


def _ip_of(address: dict):
    """An address object's IP (netaddr), or None when its spec does not hold one."""
    return o.address_ip(address)


def _text_of(address: dict) -> str:
    ip = _ip_of(address)
    written = o.spec(address).get("address")
    if ip is None:
        return str(written)
    text = ip_text(ip)
    # The address's own text when it is canonical: one string for the address and the pool's bound map.
    return written if text == written else text


def _span_text(first: int, last: int, version: int) -> str:
    a, b = ip_text(ip_from_int(first, version)), ip_text(ip_from_int(last, version))
    return a if first == last else f"{a}-{b}"


def _instant(text: str) -> datetime.datetime:
    """An RFC 3339 time as the API server writes it; one that cannot be read is long past."""
    try:
        return o.parse_time(text)
    except ValueError:
        return datetime.datetime.min.replace(tzinfo=datetime.timezone.utc)


def _passed(deadline: str, now: str) -> bool:
    return _instant(deadline) <= _instant(now)


def _bounded(message: str, limit: int = MAX_MESSAGE) -> str:
    return _clipped(message, limit)


def _clipped(text: str, most: int) -> str:
    return text if len(text) <= most else text[:most - 1] + "…"


def _held(addresses: list[dict], finalizer: str) -> list[dict]:
    """The addresses a live claim holds, those not being deleted first: an address being
    deleted is kept by its finalizer while its claim exists (unless deleted for a move).
    A claim bound to an address being deleted keeps it and is not given a second one;
    one being deleted that the claim is not bound to is an extra, let go like any other."""
    held = [a for a in addresses if not o.is_deleting(a)
            or (finalizer in o.finalizers(a) and not o.deleted_for_move(a))]
    return sorted(held, key=o.is_deleting)
