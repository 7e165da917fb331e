"""``v1alpha1`` <-> ``v1alpha2`` of the in-cluster IP pools, as a ConversionReview's objects.

The two versions hold the same pool in different words:

* up (``v1alpha1`` -> ``v1alpha2``): ``addresses`` are kept; ``subnet``,
  ``start`` and ``end`` become one ``start-end`` entry appended to them, a
  missing start or end taken from the subnet's hosts (``addresses.host_range``:
  all but the network address and, for IPv4, the broadcast; both addresses of
  a /31, the one of a /32); ``prefix`` 0 becomes the subnet's length.
* down: ``addresses``, ``prefix`` and ``gateway`` are kept.

What the target version cannot hold travels in the annotation
``cluster.x-k8s.io/conversion-data`` (Cluster API's convention, the Go
provider's key): the source object, without metadata, as JSON, written
whenever converting back without it would not give the source's spec. On the
way back the annotation restores it: a v1alpha1 spec when re-converting it
gives the v1alpha2 object's addresses, prefix and gateway (an edit made
through v1alpha2 wins; for both kinds, where the Go provider restores a
global pool's stale spec unconditionally); the v1alpha2-only fields
(``allocateReservedIPAddresses``, ``excludedAddresses``,
``addressReuseGracePeriodSeconds``) always, which the Go provider drops, so
a v1alpha1 client's read-modify-write wiped them. An annotation the Go
provider wrote (the v1alpha1 object with its status) is read the same way.

A subnet that is not a CIDR cannot be converted up: the review fails naming
the object, ``spec.subnet`` and the value, as the Go provider's does.
"""

from __future__ import annotations

import copy
import json
from collections.abc import Mapping
from typing import Any

from metal3_ipam.core.addresses import AddressError, host_range, parse_cidr
from metal3_ipam.poolkinds.incluster.spec import GROUP, IP_POOL_KINDS
from metal3_ipam.core.conversion import ConversionError, object_name
from metal3_ipam.core.pool import span_text

V1ALPHA1 = f"{GROUP}/v1alpha1"
V1ALPHA2 = f"{GROUP}/v1alpha2"
VERSIONS = (V1ALPHA1, V1ALPHA2)
CONVERSION_DATA_ANNOTATION = "cluster.x-k8s.io/conversion-data"
CONVERTED_KINDS = {kind for _, kind in IP_POOL_KINDS}
V1ALPHA2_ONLY = ("allocateReservedIPAddresses", "excludedAddresses", "addressReuseGracePeriodSeconds")


def convert(obj: Mapping[str, Any], desired: str) -> dict[str, Any]:
    """``obj`` (an IP pool of either version) at ``desired`` apiVersion; raises ConversionError."""
    kind, source = obj.get("kind"), obj.get("apiVersion")
    if kind not in CONVERTED_KINDS:
        raise ConversionError(object_name(obj), "kind", kind, f"is not one of {', '.join(sorted(CONVERTED_KINDS))}")
    for field, version in (("apiVersion", source), ("desiredAPIVersion", desired)):
        if version not in VERSIONS:
            raise ConversionError(object_name(obj), field, version, f"is not one of {', '.join(VERSIONS)}")
    if source == desired:
        return copy.deepcopy(dict(obj))
    return _up(obj) if desired == V1ALPHA2 else _down(obj)


# -- the two directions ------------------------------------------------------------------

def _up(obj: Mapping[str, Any]) -> dict[str, Any]:
    spec = _spec(obj)
    converted = _naive_up(spec, object_name(obj))
    stored = _stored(obj, V1ALPHA2)
    if stored is not None:
        if _same_pool(converted, stored):
            converted = stored
        else:
            converted.update({k: stored[k] for k in V1ALPHA2_ONLY if k in stored})
    keep = spec if _naive_down(converted) != spec else None
    return _rebuilt(obj, V1ALPHA2, converted, V1ALPHA1, keep)


def _down(obj: Mapping[str, Any]) -> dict[str, Any]:
    spec = _spec(obj)
    converted = _naive_down(spec)
    stored = _stored(obj, V1ALPHA1)
    if stored is not None:
        try:
            if _same_pool(_naive_up(stored, object_name(obj)), spec):
                converted = stored
        except ConversionError:
            pass  # an old spec that cannot be read is not restored
    try:
        back = _naive_up(converted, object_name(obj))
    except ConversionError:
        back = None
    keep = spec if back != spec else None
    return _rebuilt(obj, V1ALPHA1, converted, V1ALPHA2, keep)


def _naive_up(spec: Mapping[str, Any], name: str) -> dict[str, Any]:
    """A v1alpha1 spec in v1alpha2 words, from the spec alone."""
    addresses = list(spec.get("addresses") or [])
    prefix = spec.get("prefix") or 0
    start, end = spec.get("start") or "", spec.get("end") or ""
    subnet = spec.get("subnet")
    if subnet:
        try:
            net = parse_cidr(subnet)
        except AddressError as err:
            raise ConversionError(name, "spec.subnet", subnet, str(err)) from None
        first, last = host_range(net.first, net.last, net.version, net.prefixlen)
        start = start or span_text(first, first, net.version)
        end = end or span_text(last, last, net.version)
        prefix = prefix or net.prefixlen
    if start and end:
        addresses.append(f"{start}-{end}")
    converted: dict[str, Any] = {"addresses": addresses, "prefix": prefix}
    if spec.get("gateway"):
        converted["gateway"] = spec["gateway"]
    return converted


def _naive_down(spec: Mapping[str, Any]) -> dict[str, Any]:
    """A v1alpha2 spec in v1alpha1 words, from the spec alone."""
    converted: dict[str, Any] = {}
    if spec.get("addresses"):
        converted["addresses"] = list(spec["addresses"])
    if spec.get("prefix"):
        converted["prefix"] = spec["prefix"]
    if spec.get("gateway"):
        converted["gateway"] = spec["gateway"]
    return converted


def _same_pool(a: Mapping[str, Any], b: Mapping[str, Any]) -> bool:
    """Whether two v1alpha2 specs give the same addresses, prefix and gateway."""
    return ((a.get("addresses") or []) == (b.get("addresses") or []) and (a.get("prefix") or 0) == (b.get("prefix") or 0)
            and (a.get("gateway") or "") == (b.get("gateway") or ""))


# -- objects and the annotation ------------------------------------------------------------

def _spec(obj: Mapping[str, Any]) -> dict[str, Any]:
    spec = obj.get("spec")
    return copy.deepcopy(dict(spec)) if isinstance(spec, Mapping) else {}


def _stored(obj: Mapping[str, Any], version: str) -> dict[str, Any] | None:
    """The spec of ``version`` the conversion-data annotation holds, if it holds one."""
    meta = obj.get("metadata") if isinstance(obj.get("metadata"), Mapping) else {}
    notes = meta.get("annotations") if isinstance(meta.get("annotations"), Mapping) else {}
    try:
        data = json.loads(notes.get(CONVERSION_DATA_ANNOTATION) or "null")
    except ValueError:
        return None
    if not isinstance(data, Mapping) or data.get("apiVersion") != version or not isinstance(data.get("spec"), Mapping):
        return None
    return copy.deepcopy(dict(data["spec"]))


def _rebuilt(obj: Mapping[str, Any], version: str, spec: dict[str, Any], source: str,
             keep: dict[str, Any] | None) -> dict[str, Any]:
    """``obj`` at ``version`` with ``spec``; the annotation holds ``keep`` (the source's spec) or goes."""
    result = copy.deepcopy(dict(obj))
    result["apiVersion"] = version
    result["spec"] = spec
    meta = result.setdefault("metadata", {})
    notes = dict(meta.get("annotations") or {})
    notes.pop(CONVERSION_DATA_ANNOTATION, None)
    if keep is not None:
        notes[CONVERSION_DATA_ANNOTATION] = json.dumps({"apiVersion": source, "kind": obj.get("kind"), "spec": keep},
                                                       sort_keys=True, separators=(",", ":"))
    if notes:
        meta["annotations"] = notes
    else:
        meta.pop("annotations", None)
    return result
