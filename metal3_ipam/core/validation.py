"""Admission rules for every kind the controller serves, as pure functions.

The webhook and ``metal3-ipam validate`` both call these. Each returns a list
of ``Problem``s naming the object, the field path and the offending value; an
empty list means valid. No function here raises on any input: a broken object
is something to describe, not to crash on.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

from . import kinds
from .addresses import AddressError, parse_ip
from .pool import Pool, read_pool
from .problems import ObjectId, Problem


def object_id(obj: Any) -> ObjectId:
    meta = obj.get("metadata") if isinstance(obj, Mapping) else None
    meta = meta if isinstance(meta, Mapping) else {}
    kind = obj.get("kind") if isinstance(obj, Mapping) else None
    return ObjectId(str(kind or "?"), str(meta.get("namespace") or ""), str(meta.get("name") or "?"))


def _tag(obj: Any, problems: Iterable[Problem]) -> list[Problem]:
    oid = object_id(obj)
    return [Problem(p.field, p.value, p.message, p.warning, oid) for p in problems]


def _spec(obj: Any) -> Any:
    return obj.get("spec") if isinstance(obj, Mapping) else None


def _spec_map(obj: Any) -> Mapping:
    spec = _spec(obj)
    return spec if isinstance(spec, Mapping) else {}


def _metadata_problems(obj: Any) -> list[Problem]:
    if not isinstance(obj, Mapping):
        return [Problem("", obj, "must be an object")]
    meta = obj.get("metadata")
    if not isinstance(meta, Mapping) or not isinstance(meta.get("name"), str) or not meta.get("name"):
        return [Problem("metadata.name", meta.get("name") if isinstance(meta, Mapping) else meta, "is required")]
    return []


# -- IPPool -----------------------------------------------------------------

def validate_pool(obj: Any) -> list[Problem]:
    problems = _metadata_problems(obj)
    if not problems:
        _, problems = read_pool(_spec(obj))
    return _tag(obj, problems)


def validate_pool_update(old: Any, new: Any, in_use: Mapping[str, str] | None = None) -> list[Problem]:
    """``in_use``: IPAddress name -> address, for the addresses that reference the pool."""
    problems = validate_pool(new)
    old_spec, new_spec = _spec_map(old), _spec_map(new)
    for field in ("namePrefix", "allocationStrategy"):
        before = old_spec.get(field) or ("sequential" if field == "allocationStrategy" else None)
        after = new_spec.get(field) or ("sequential" if field == "allocationStrategy" else None)
        if before != after:
            problems += _tag(new, [Problem(f"spec.{field}", after, f"is immutable (was {before!r})")])
    if problems or not in_use:
        return problems
    pool, _ = read_pool(new_spec)
    for name, text in sorted(in_use.items()):
        if not _holds(pool, text):
            problems += _tag(new, [Problem("spec.pools", text,
                                           f"no longer holds address {text} of IPAddress {name}, which is in use")])
    return problems


def _holds(pool: Pool, text: str) -> bool:
    try:
        ip = int(parse_ip(text))
    except AddressError:
        return True  # not ours to judge here
    return pool.entry_of(ip) is not None


def overlap_warnings(obj: Any, others: Iterable[Any]) -> list[Problem]:
    """Warn when a pool's ranges overlap those of another pool in its namespace."""
    pool, _ = read_pool(_spec(obj))
    if pool is None:
        return []
    me = object_id(obj)
    warnings = []
    for other in others:
        oid = object_id(other)
        if oid.namespace != me.namespace or oid.name == me.name:
            continue
        theirs, _ = read_pool(_spec(other))
        if theirs is None or theirs.version != pool.version:
            continue
        for entry in pool.entries:
            if any(entry.first <= e.last and e.first <= entry.last for e in theirs.entries):
                same = " and the same namePrefix" if theirs.name_prefix == pool.name_prefix else ""
                warnings.append(Problem(entry.field, f"IPPool {oid.name}",
                                        f"overlaps a range of another pool{same}; an address may be handed out by only one of them",
                                        warning=True))
    return _tag(obj, warnings)


# -- IPClaim ------------------------------------------------------------------

def validate_ipclaim(obj: Any) -> list[Problem]:
    problems = _metadata_problems(obj)
    if problems:
        return _tag(obj, problems)
    spec = _spec(obj)
    pool = spec.get("pool") if isinstance(spec, Mapping) else None
    if not isinstance(pool, Mapping) or not isinstance(pool.get("name"), str) or not pool.get("name"):
        problems.append(Problem("spec.pool.name", pool.get("name") if isinstance(pool, Mapping) else pool,
                                "is required: the IPPool to take an address from"))
    else:
        namespace = obj["metadata"].get("namespace") or ""
        ref_ns = pool.get("namespace")
        if ref_ns and namespace and ref_ns != namespace:
            problems.append(Problem("spec.pool.namespace", ref_ns,
                                    f"must be the claim's own namespace {namespace!r}: an address cannot be owned across namespaces"))
    problems += _annotation_problems(obj)
    return _tag(obj, problems)


def validate_ipclaim_update(old: Any, new: Any) -> list[Problem]:
    problems = validate_ipclaim(new)
    before, after = _spec_map(old).get("pool"), _spec_map(new).get("pool")
    if _ref_key(before) != _ref_key(after):
        problems += _tag(new, [Problem("spec.pool", after, "is immutable")])
    return problems


def _ref_key(ref: Any) -> tuple:
    return (ref.get("name"), ref.get("namespace") or None) if isinstance(ref, Mapping) else (None, None)


def _annotation_problems(obj: Any) -> list[Problem]:
    annotations = obj.get("metadata", {}).get("annotations") or {}
    if not isinstance(annotations, Mapping) or kinds.IP_ADDRESS_ANNOTATION not in annotations:
        return []
    value = annotations[kinds.IP_ADDRESS_ANNOTATION]
    try:
        parse_ip(value)
    except AddressError as err:
        return [Problem(f"metadata.annotations.{kinds.IP_ADDRESS_ANNOTATION}", value, str(err))]
    return []


# -- Cluster API IPAddressClaim -----------------------------------------------

def validate_capi_claim(obj: Any) -> list[Problem]:
    problems = _metadata_problems(obj)
    if problems:
        return _tag(obj, problems)
    spec = _spec(obj)
    ref = spec.get("poolRef") if isinstance(spec, Mapping) else None
    if not isinstance(ref, Mapping):
        problems.append(Problem("spec.poolRef", ref, "is required"))
    else:
        for field in ("kind", "name"):
            if not isinstance(ref.get(field), str) or not ref.get(field):
                problems.append(Problem(f"spec.poolRef.{field}", ref.get(field), "is required"))
    problems += _annotation_problems(obj)
    return _tag(obj, problems)


# -- IPAddress -------------------------------------------------------------

def validate_ipaddress(obj: Any) -> list[Problem]:
    problems = _metadata_problems(obj)
    if problems:
        return _tag(obj, problems)
    spec = _spec(obj)
    if not isinstance(spec, Mapping):
        return _tag(obj, [Problem("spec", spec, "must be an object")])
    for ref in ("claim", "pool"):
        value = spec.get(ref)
        if not isinstance(value, Mapping) or not isinstance(value.get("name"), str) or not value.get("name"):
            problems.append(Problem(f"spec.{ref}.name", value.get("name") if isinstance(value, Mapping) else value,
                                    "is required"))
    version = None
    try:
        version = parse_ip(spec.get("address")).version
    except AddressError as err:
        problems.append(Problem("spec.address", spec.get("address"), str(err)))
    prefix = spec.get("prefix")
    if prefix is not None and (isinstance(prefix, bool) or not isinstance(prefix, int)
                               or not 0 <= prefix <= (32 if version == 4 else 128)):
        problems.append(Problem("spec.prefix", prefix, f"must be an integer from 0 to {32 if version == 4 else 128}"))
    gateway = spec.get("gateway")
    if gateway is not None:
        try:
            if version is not None and parse_ip(gateway).version != version:
                problems.append(Problem("spec.gateway", gateway, "is not of the address's family"))
        except AddressError as err:
            problems.append(Problem("spec.gateway", gateway, str(err)))
    servers = spec.get("dnsServers") or []
    if not isinstance(servers, list):
        problems.append(Problem("spec.dnsServers", servers, "must be a list of IP addresses"))
    else:
        for i, server in enumerate(servers):
            try:
                parse_ip(server)
            except AddressError as err:
                problems.append(Problem(f"spec.dnsServers[{i}]", server, str(err)))
    return _tag(obj, problems)


def validate_ipaddress_update(old: Any, new: Any) -> list[Problem]:
    problems = validate_ipaddress(new)
    if _spec(old) != _spec(new):
        problems += _tag(new, [Problem("spec", _spec(new), "is immutable")])
    return problems


VALIDATORS = {
    kinds.IPPOOL: validate_pool,
    kinds.IPCLAIM: validate_ipclaim,
    kinds.IPADDRESS: validate_ipaddress,
    kinds.CAPI_CLAIM: validate_capi_claim,
}


def validate(obj: Any) -> list[Problem]:
    """Validate any object of a kind this project knows; other kinds are not ours to judge."""
    validator = VALIDATORS.get(kinds.kind_of(obj))
    return validator(obj) if validator else []
