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
from . import poolkind
from .addresses import AddressError, parse_ip
from .allocator import never_for
from .intervals import subtract
from .objects import PoolKey, deleted_for_move, is_deleting, pool_of, pool_ref_text
from .objects import annotations as annotations_of
from .objects import namespace as namespace_of
from .overlap import PoolFacts, Withheld, address_spans, locks_meet, separate_network, withheld_by_pool
from .pool import admitted_ip, ipv4_compatible_form, read_pool, span_text
from .problems import ObjectId, Problem, object_id, tagged


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
    return tagged(obj, problems)


def validate_pool_update(old: Any, new: Any, in_use: Mapping[str, str] | None = None) -> list[Problem]:
    """``in_use``: address object name -> IP, for the live addresses (of either API) of the pool."""
    problems = validate_pool(new)
    old_spec, new_spec = _spec_map(old), _spec_map(new)
    for field in ("namePrefix", "allocationStrategy"):
        before = old_spec.get(field) or ("sequential" if field == "allocationStrategy" else None)
        after = new_spec.get(field) or ("sequential" if field == "allocationStrategy" else None)
        if before != after:
            problems += tagged(new, [Problem(f"spec.{field}", after, f"is immutable ({_was(before)})")])
    if any(not p.warning for p in problems) or not in_use:
        return problems
    pool, _ = read_pool(new_spec)
    if pool is None:
        return problems
    holders: dict[int, list[str]] = {}
    for name, text in in_use.items():
        try:
            ip = parse_ip(text)
        except AddressError:
            continue  # not an address any pool hands out
        # An address of the other family is outside the pool whatever its value.
        holders.setdefault(int(ip) if ip.version == pool.version else -1 - int(ip), []).append(str(name))
    gateways = _gateway_fields(new_spec, pool.version)
    found = []
    for ip, names in sorted(holders.items()):
        text = span_text(ip, ip, pool.version) if ip >= 0 else str(in_use[names[0]])
        users = ", ".join(sorted(names))
        if ip < 0 or pool.entry_of(ip) is None:
            found.append(Problem("spec.pools", text, f"no longer holds {text}, which is in use (IPAddress {users}); "
                                                     "release it before removing the range that holds it"))
        elif ip in gateways:
            found.append(Problem(gateways[ip], text, f"makes {text} a gateway, but it is in use as a host's address "
                                                     f"(IPAddress {users})"))
        elif pool.is_reserved(ip):
            found.append(Problem("spec.excludedAddresses", text,
                                 f"excludes {text}, which is in use (IPAddress {users}): it stays with its claim "
                                 "until released, and is never handed out again", warning=True))
    return problems + tagged(new, found)


def preallocated_kept_problems(new: Any, kept: Mapping[str, str]) -> list[Problem]:
    """A pool's preAllocations never give another claim an IP a claim keeps: one whose address objects were
    deleted and whose status names that IP gets it back (``kept``). ``kept``: "<kind> <name>" -> IP."""
    pool, _ = poolkind.read(new) if isinstance(new, Mapping) else (None, [])
    if pool is None or not pool.preallocations:
        return []
    keepers: dict[int, list[str]] = {}
    for who, text in kept.items():
        try:
            ip = parse_ip(text)
        except AddressError:
            continue
        if ip.version == pool.version:
            keepers.setdefault(pool.unit_of(int(ip)), []).append(who)
    found = []
    for claim, unit in sorted(pool.preallocations.items()):
        others = [who for who in keepers.get(unit, ()) if who.split(" ", 1)[1] != claim]
        if others:
            text = str(pool.address_of(unit))
            found.append(Problem(f"spec.preAllocations[{claim}]", text,
                                 f"is the IP {', '.join(sorted(others))} keeps: its address objects were deleted and its "
                                 "status names that IP, which it gets back; preallocate another address"))
    return tagged(new, found)


def _gateway_fields(spec: Mapping, version: int) -> dict[int, str]:
    """Gateway address -> the field that sets it, for a valid pool spec."""
    fields = {}
    entries = spec.get("pools") if isinstance(spec.get("pools"), list) else []
    for path, text in [("spec.gateway", spec.get("gateway"))] + [
            (f"spec.pools[{i}].gateway", e.get("gateway")) for i, e in enumerate(entries) if isinstance(e, Mapping)]:
        try:
            ip = parse_ip(text)
        except AddressError:
            continue
        if ip.version == version:
            fields.setdefault(int(ip), path)
    return fields


def addresses_in_use(addresses: Iterable[Any], namespace: str, pool: str,
                     pool_kind: tuple[str, str] = kinds.IPPOOL) -> dict[str, str]:
    """Name -> IP of the live addresses, of both APIs, that were handed out from a pool (of ``pool_kind``);
    ``namespace/name`` for a pool of cluster scope (``namespace`` ""), whose claims of one name in two
    namespaces hold two addresses of one name.

    An address being deleted is on its way out and holds nothing back.
    """
    found = {}
    for address in addresses:
        if not isinstance(address, Mapping) or is_deleting(address) or pool_of(address) != PoolKey(namespace, pool, pool_kind):
            continue
        ip = _spec_map(address).get("address")
        if not isinstance(ip, str):
            continue
        kind = kinds.kind_of(address)
        name = str(_name(address))
        if not namespace:  # a pool of cluster scope: its addresses are in their claims' namespaces
            name = f"{namespace_of(address)}/{name}"
        found[name if kind == kinds.IPADDRESS else f"{name} (Cluster API)"] = ip
    return found


def _name(obj: Mapping) -> str:
    meta = obj.get("metadata")
    return meta.get("name", "") if isinstance(meta, Mapping) else ""


def validate_pool_delete(obj: Any, in_use: Mapping[str, str]) -> list[Problem]:
    """A pool is not deleted while addresses are handed out from it.

    Deletions for ``clusterctl move`` are never refused: the addresses go to the
    target cluster with it. Nor is a pool already being deleted (deleting it
    again changes nothing).
    """
    if not isinstance(obj, Mapping) or deleted_for_move(obj) or is_deleting(obj) or not in_use:
        return []
    names = sorted(str(name) for name in in_use)
    shown = ", ".join(names[:5]) + (f" and {len(names) - 5} more" if len(names) > 5 else "")
    return tagged(obj, [Problem("spec.pool", f"{len(names)} address(es)",
                              f"is still in use: the IPAddresses {shown} name this pool in spec.pool; delete their "
                              "claims first (the addresses go with them)")])


def overlap_problems(obj: Any, others: Iterable[Any]) -> list[Problem]:
    """What a pool shares with the other pools of its namespace (``others``: any objects; pools of other
    namespaces, other kinds and those being deleted are passed over).

    Two IPPools must not share addresses unless they share the namePrefix.
    The lock on an address is the IPAddress named ``<namePrefix>-<ip>``: two
    pools with one namePrefix take the same lock for a shared address, so only
    one of them can hand it out (a warning: the user may mean it). Pools with
    different namePrefixes would take different locks, and one IP could be
    handed out twice: an error.

    A pool of another kind that keeps its IPs unique in the namespace
    (``PoolKind.unique_in_namespace``) sharing addresses with one of
    these is warned about (see ``kind_overlap_warnings``).
    """
    if kinds.kind_of(obj) != kinds.IPPOOL:
        return kind_overlap_warnings(obj, others)
    others = list(others)
    warned = kind_overlap_warnings(obj, others)
    pool, _ = read_pool(_spec(obj))
    if pool is None:
        return warned
    me = object_id(obj)
    mine = {e.index: pool.usable(e) for e in pool.entries}
    found = []
    for other in others:
        oid = object_id(other)
        if kinds.kind_of(other) != kinds.IPPOOL or oid.namespace != me.namespace or oid.name == me.name:
            continue
        theirs, _ = read_pool(_spec(other))
        if theirs is None or theirs.version != pool.version or not theirs.entries:
            continue
        their_spans = [(lo, hi, e) for e in theirs.entries for lo, hi in theirs.usable(e)]
        for entry in pool.entries:
            shared = _shared(mine[entry.index], their_spans)
            if shared is None:
                continue
            lo, hi, their_entry = shared
            where = (f"{span_text(lo, hi, pool.version)} with IPPool {oid.name} ({their_entry.field})")
            if theirs.name_prefix == pool.name_prefix:
                found.append(Problem(entry.field, span_text(lo, hi, pool.version),
                                     f"shares {where}; both have namePrefix {pool.name_prefix!r}, so each shared "
                                     "address is locked by one IPAddress name and handed out by only one of them",
                                     warning=True))
            else:
                found.append(Problem(entry.field, span_text(lo, hi, pool.version),
                                     f"shares {where}, whose namePrefix is {theirs.name_prefix!r}, not "
                                     f"{pool.name_prefix!r}: their IPAddress names (<namePrefix>-<ip>) differ, so one "
                                     "IP could be handed out by both. Pools of a namespace may only overlap when they "
                                     "share the namePrefix"))
    return tagged(obj, found) + warned


# The name it had when overlaps were only ever warned about.
overlap_warnings = overlap_problems

_SHOWN_SPANS = 3  # shared stretches named in one warning


def kind_overlap_warnings(obj: Any, others: Iterable[Any]) -> list[Problem]:
    """A warning per other pool of the namespace that shares addresses with ``obj``, where either is not an
    IPPool and both are of kinds that keep an IP unique in the namespace (see ``overlap``): the earlier pool
    owns each shared address and the later withholds it (where their lock names meet, the lock decides), so
    the user may find fewer addresses than written. Names the other pool, the shared stretches and which of
    the two does without them; a pool under review that has no creationTimestamp yet is the later one."""
    pool_kind = poolkind.kind_named(kinds.kind_of(obj))
    if not isinstance(obj, Mapping) or pool_kind is None or not pool_kind.unique_in_namespace:
        return []
    pool, _ = pool_kind.read(obj)
    if pool is None:
        return []
    me, mine = object_id(obj), address_spans(pool)
    found = []
    for other in others:
        other_kind = poolkind.kind_named(kinds.kind_of(other))
        if not isinstance(other, Mapping) or other_kind is None or not other_kind.unique_in_namespace \
                or pool_kind.kind == other_kind.kind == kinds.IPPOOL or is_deleting(other):
            continue
        oid = object_id(other)
        if oid.namespace != me.namespace or (other_kind.kind == pool_kind.kind and oid.name == me.name):
            continue
        theirs, _ = other_kind.read(other)
        if theirs is None or theirs.version != pool.version:
            continue
        shared = subtract(mine, subtract(mine, address_spans(theirs)))
        if not shared:
            continue
        spans = [span_text(lo, hi, pool.version) for lo, hi in shared[:_SHOWN_SPANS]]
        text = ", ".join(spans) + (f" and {len(shared) - _SHOWN_SPANS} more" if len(shared) > _SHOWN_SPANS else "")
        who = f"{other_kind.kind[1]} {oid.name}"
        if locks_meet(pool, theirs):
            why = "both lock an address by one IPAddress name, so each is handed out by only one of them"
        elif _precedence(other, other_kind.kind) < _precedence(obj, pool_kind.kind):
            why = f"{who} came first and owns them: they are not handed out from this pool"
        else:
            why = f"this pool came first and owns them: {who} withholds them"
        field = pool.entry_of(shared[0][0]).field if pool_kind.kind == kinds.IPPOOL else \
            ("spec.prefixes" if pool.unit_length is not None else "spec.addresses")
        found.append(Problem(field, text, f"shares {text} with {who} of the namespace; an IP of a namespace is "
                                          f"handed out by one pool only: {why}", warning=True))
    return tagged(obj, found)


def _precedence(obj: Mapping, kind: tuple[str, str]) -> tuple[str, tuple[str, str], str]:
    """The order ``overlap`` gives pools (earliest creationTimestamp, then kind and name); one not created
    yet comes last."""
    meta = obj.get("metadata") if isinstance(obj.get("metadata"), Mapping) else {}
    return (str(meta.get("creationTimestamp") or "~"), kind, str(meta.get("name") or ""))


def _shared(spans: list[tuple[int, int]], others: list[tuple[int, int, Any]]) -> tuple[int, int, Any] | None:
    """The first stretch ``spans`` share with ``others`` (with the entry it belongs to), or None."""
    for lo, hi in spans:
        for their_lo, their_hi, entry in others:
            if lo <= their_hi and their_lo <= hi:
                return max(lo, their_lo), min(hi, their_hi), entry
    return None


# -- pools that keep their IPs apart across namespaces (a global pool) ------------------------------------

SEPARATE_NETWORK_FIELD = f"metadata.annotations[{kinds.SEPARATE_NETWORK_ANNOTATION}]"
# A pool under review whose creationTimestamp is not known yet: it comes after every pool there is.
_NOT_CREATED_YET = "9999-12-31T23:59:59Z"


def separate_network_problems(obj: Any) -> list[Problem]:
    """The separate-network annotation says "true" or "false", and only a global pool's is read."""
    if not isinstance(obj, Mapping) or not isinstance(obj.get("metadata"), Mapping):
        return []
    value = annotations_of(obj).get(kinds.SEPARATE_NETWORK_ANNOTATION)
    pool_kind = poolkind.kind_named(kinds.kind_of(obj))
    if value is None or pool_kind is None:
        return []
    if value not in ("true", "false"):
        return tagged(obj, [Problem(SEPARATE_NETWORK_FIELD, value, 'must be "true" or "false"')])
    if not pool_kind.cluster_scoped:
        return tagged(obj, [Problem(SEPARATE_NETWORK_FIELD, value, "has no effect here: only a global pool's is "
                                    "read (a namespaced pool shares nothing with the pools of its namespace)",
                                    warning=True)])
    return []


def unmarked_network_problems(old: Any, new: Any, doubles: Iterable[tuple[str, str, str]]) -> list[Problem]:
    """A global pool's separate-network annotation may not be removed (nor set to "false") while it and a pool it
    shares addresses with as separate networks hold one IP for two claims: they would be one network with that IP
    bound twice. ``doubles``: (IP, the claim of this pool, the claim of the other pool holding it too) each, as
    the addresses stored now show them."""
    doubles = sorted(set(doubles))
    if not doubles or not separate_network(old) or separate_network(new):
        return []
    value = annotations_of(new).get(kinds.SEPARATE_NETWORK_ANNOTATION)
    shown = "; ".join(f"{ip} is held by {mine} of this pool and by {theirs}" for ip, mine, theirs in doubles[:4])
    more = f"; and {len(doubles) - 4} more" if len(doubles) > 4 else ""
    return tagged(new, [Problem(SEPARATE_NETWORK_FIELD, value, "cannot be removed while the pools that share addresses "
                                "with this one as separate networks hold one IP for two claims, which would then be "
                                f"bound twice in one network: {shown}{more}; delete one claim of each such pair "
                                "first, or keep the annotation")])


def shared_address_problems(obj: Any, near: Iterable[tuple[PoolFacts, bool]], lock_namespace: str) -> list[Problem]:
    """Warnings for a pool that overlaps pools it keeps its IPs apart from across namespaces: a global pool
    and any other global pool, or a global pool and a namespaced pool (``core.overlap``).

    ``near``: each such pool, with whether the two keep apart now (a global pool and a namespaced pool do
    where the global pool has a claim in the namespaced pool's namespace). Which of two overlapping pools
    withholds the overlap, or that both hand it out (separate networks), is said; nothing is refused: the
    overlap is the user's to mean, and the pool's Overlapping condition says it again.
    """
    model, _ = poolkind.read(obj) if isinstance(obj, Mapping) else (None, [])
    if model is None:
        return []
    me_id = object_id(obj)
    created = str((obj.get("metadata") or {}).get("creationTimestamp") or _NOT_CREATED_YET)
    key = PoolKey(me_id.namespace, me_id.name, kinds.kind_of(obj))
    me = PoolFacts(key, created, model, key.namespace or lock_namespace, separate_network(obj))
    found = []
    for other, keeping_apart in near:
        if other.key == key or other.pool.version != model.version:
            continue
        overlaps = withheld_by_pool([me, other])
        for item in (*overlaps.get(key, ()), *(w for w in overlaps.get(other.key, ()) if not w.shared)):
            found.append(Problem(_addresses_field(obj), span_text(item.first, item.last, model.version),
                                 _shared_text(me, other, item, keeping_apart), warning=True))
    return tagged(obj, found)


def _addresses_field(obj: Mapping) -> str:
    spec = _spec_map(obj)
    return next((f"spec.{name}" for name in ("addresses", "prefixes") if name in spec), "spec.pools")


def _shared_text(me: PoolFacts, other: PoolFacts, item: Withheld, keeping_apart: bool) -> str:
    span = span_text(item.first, item.last, me.pool.version)
    name = f"{other.key.namespace}/{other.key.name}" if other.key.namespace else other.key.name
    theirs = f"{other.key.kind[1]} {name}"
    text = f"shares {span} with {theirs}"
    if item.shared:
        return (f"{text}; one of them is marked a separate network ({kinds.SEPARATE_NETWORK_ANNOTATION}: "
                '"true"), so both hand it out')
    hint = (f'; if they are separate networks, annotate the global pool {kinds.SEPARATE_NETWORK_ANNOTATION}: "true" '
            "and both hand it out")
    if not keeping_apart:
        glob, namespace = (me, other.key.namespace) if not me.key.namespace else (other, me.key.namespace)
        return (f"{text}: they are independent for now, but once {glob.key.kind[1]} {glob.key.name} has a claim in "
                f"namespace {namespace}, the global pool stops handing it out{hint}")
    if bool(me.key.namespace) != bool(other.key.namespace):
        namespace = me.key.namespace or other.key.namespace
        if me.key.namespace:
            return f"{text}, which does not hand it to its claims of this namespace (condition Overlapping){hint}"
        return (f"{text} (a pool of the namespace goes before a global pool): this pool does not hand it to its "
                f"claims of namespace {namespace}{hint}")
    if item.owner != other.key:
        return f"{text}, created later, which does not hand it out any more{hint}"
    return f"{text}, created earlier: this pool does not hand it out (condition Overlapping){hint}"


# -- IPClaim ------------------------------------------------------------------

def validate_ipclaim(obj: Any) -> list[Problem]:
    problems = _metadata_problems(obj)
    if problems:
        return tagged(obj, problems)
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
    return tagged(obj, problems)


def validate_ipclaim_update(old: Any, new: Any) -> list[Problem]:
    problems = validate_ipclaim(new)
    before, after = _spec_map(old).get("pool"), _spec_map(new).get("pool")
    if _ref_key(before) != _ref_key(after):
        problems += tagged(new, [Problem("spec.pool", _ref_text(after), f"is immutable ({_was(_ref_text(before))})")])
    return problems


def _was(before: Any) -> str:
    """The old value of a changed immutable field, quoted as the CRD's rules quote it."""
    return f'was "{before}"' if isinstance(before, str) else f"was {before!r}"


def _ref_text(ref: Any) -> Any:
    """An object reference as ``[kind ][namespace/]name`` (as the CRD's rule shows it), else as it is."""
    if not isinstance(ref, Mapping) or not isinstance(ref.get("name"), str):
        return ref
    kind = f"{ref['kind']} " if ref.get("kind") else ""
    return kind + (f"{ref['namespace']}/{ref['name']}" if ref.get("namespace") else ref["name"])


def _ref_key(ref: Any) -> tuple:
    """What names the referent: name, namespace and kind (an empty one is none), as the CRD's rule compares."""
    if not isinstance(ref, Mapping):
        return (None, None, None)
    return (ref.get("name"), ref.get("namespace") or None, ref.get("kind") or None)


def _annotation_problems(obj: Any) -> list[Problem]:
    annotations = obj.get("metadata", {}).get("annotations") or {}
    if not isinstance(annotations, Mapping) or kinds.IP_ADDRESS_ANNOTATION not in annotations:
        return []
    value = annotations[kinds.IP_ADDRESS_ANNOTATION]
    path = f"metadata.annotations.{kinds.IP_ADDRESS_ANNOTATION}"
    try:
        admitted_ip(value)
    except AddressError as err:
        return [Problem(path, value, str(err))]
    canonical = ipv4_compatible_form(value)
    if canonical is not None:
        return [Problem(path, value, f"uses the deprecated IPv4-compatible form; write {canonical}", warning=True)]
    return []


# -- Cluster API IPAddressClaim -----------------------------------------------

def is_our_capi_claim(obj: Any) -> bool:
    """An IPAddressClaim is ours to judge only when its poolRef names our group.

    Claims on other providers' pools are theirs: not a word about them.
    """
    spec = _spec(obj)
    ref = spec.get("poolRef") if isinstance(spec, Mapping) else None
    return isinstance(ref, Mapping) and poolkind.serves_claims_of(ref.get("apiGroup"), ref.get("kind"))


def _capi_pool_kinds(group: Any) -> list[str]:
    """The kinds of pool of ``group`` that serve Cluster API claims."""
    return [kind.kind[1] for kind in poolkind.REGISTRY.values() if kind.group == group and kinds.CAPI_CLAIM in kind.claim_kinds]


def validate_capi_claim(obj: Any) -> list[Problem]:
    if not is_our_capi_claim(obj):
        return []
    problems = _metadata_problems(obj)
    if problems:
        return tagged(obj, problems)
    ref = _spec(obj)["poolRef"]
    served = _capi_pool_kinds(ref.get("apiGroup"))
    if ref.get("kind") not in served:
        problems.append(Problem("spec.poolRef.kind", ref.get("kind"),
                                f"must be {' or '.join(served)}: the only kind{'s' if len(served) > 1 else ''} of "
                                f"{ref.get('apiGroup')} that hand{'' if len(served) > 1 else 's'} out addresses"))
    if not isinstance(ref.get("name"), str) or not ref.get("name"):
        problems.append(Problem("spec.poolRef.name", ref.get("name"),
                                f"is required: the {' or '.join(served)} to take an address from"))
    problems += _annotation_problems(obj)
    return tagged(obj, problems)


def validate_capi_claim_update(old: Any, new: Any) -> list[Problem]:
    problems = validate_capi_claim(new)
    if not is_our_capi_claim(old) and not is_our_capi_claim(new):
        return problems
    before, after = _spec_map(old).get("poolRef"), _spec_map(new).get("poolRef")
    if before != after:
        # As in Cluster API: the pool that gave the claim its address keeps serving it until it is deleted.
        problems += tagged(new, [Problem("spec.poolRef", pool_ref_text(after),
                                         f"is immutable ({_was(pool_ref_text(before))}): a claim is served by "
                                         "the pool it names when created; delete it and create one for the "
                                         "other pool")])
    problems += tagged(new, _outside_key_problems(old, new, before))
    return problems


def _outside_key_problems(old: Any, new: Any, ref: Any) -> list[Problem]:
    """The allocation key a claim of an outside IPAM's pool carries names its address there: once written,
    it may not be changed or removed (the old key's address would be left behind, never released)."""
    pool_kind = poolkind.kind_named((ref.get("apiGroup"), ref.get("kind"))) if isinstance(ref, Mapping) else None
    outside = pool_kind.outside if pool_kind is not None else None
    if outside is None:
        return []
    before, after = outside.read_key(old)[0], outside.read_key(new)
    if before is None or after[0] == before:
        return []
    value = (new.get("metadata", {}).get("annotations") or {}).get(outside.annotation)
    return [Problem(f"metadata.annotations[{outside.annotation}]", value,
                    f"is immutable once written (was {before!r}): it names the claim's address in its pool's IPAM")]


# -- IPAddress -------------------------------------------------------------

def validate_ipaddress(obj: Any) -> list[Problem]:
    problems = _metadata_problems(obj)
    if problems:
        return tagged(obj, problems)
    spec = _spec(obj)
    if not isinstance(spec, Mapping):
        return tagged(obj, [Problem("spec", spec, "must be an object")])
    for ref in ("claim", "pool"):
        value = spec.get(ref)
        if not isinstance(value, Mapping) or not isinstance(value.get("name"), str) or not value.get("name"):
            problems.append(Problem(f"spec.{ref}.name", value.get("name") if isinstance(value, Mapping) else value,
                                    "is required"))
    version = None
    try:
        version = admitted_ip(spec.get("address")).version
    except AddressError as err:
        problems.append(Problem("spec.address", spec.get("address"), str(err)))
    prefix = spec.get("prefix")
    if prefix is not None and (isinstance(prefix, bool) or not isinstance(prefix, int)
                               or not 0 <= prefix <= (32 if version == 4 else 128)):
        problems.append(Problem("spec.prefix", prefix, f"must be an integer from 0 to {32 if version == 4 else 128}"))
    gateway = spec.get("gateway")
    if gateway is not None:
        try:
            if version is not None and admitted_ip(gateway).version != version:
                problems.append(Problem("spec.gateway", gateway, f"is not of the address's family (IPv{version})"))
        except AddressError as err:
            problems.append(Problem("spec.gateway", gateway, str(err)))
    servers = spec.get("dnsServers") or []
    if not isinstance(servers, list):
        problems.append(Problem("spec.dnsServers", servers, "must be a list of IP addresses"))
    else:
        for i, server in enumerate(servers):
            try:
                admitted_ip(server)
            except AddressError as err:
                problems.append(Problem(f"spec.dnsServers[{i}]", server, str(err)))
    return tagged(obj, problems)


def validate_ipaddress_update(old: Any, new: Any) -> list[Problem]:
    problems = validate_ipaddress(new)
    before, after = _spec_map(old), _spec_map(new)
    if before != after:
        # Each changed field, with its old and new value; the spec as a whole when it is not an object.
        changed = [Problem(f"spec.{k}", _ref_text(after.get(k)),
                           f"is immutable: an IPAddress never changes ({_was(_ref_text(before.get(k)))})")
                   for k in sorted(set(before) | set(after), key=str) if before.get(k) != after.get(k)]
        problems += tagged(new, changed or [Problem("spec", _spec(new), f"is immutable ({_was(_spec(old))})")])
    return problems


# -- a Cluster API IPAddress written before its claim ----------------------------------------

def written_before_its_claim(obj: Any) -> bool:
    """A Cluster API IPAddress with no owner reference to a claim: written by hand or restored, not made by an
    IPAM for its claim nor copied with it by ``clusterctl move`` (those are judged by the controller alone)."""
    owners = (obj.get("metadata") or {}).get("ownerReferences") if isinstance(obj, Mapping) else None
    return not any(isinstance(r, Mapping) and r.get("kind") == kinds.CAPI_CLAIM[1]
                   for r in (owners if isinstance(owners, list) else ()))


def capi_address_problems(obj: Any, pool: Mapping | None, withheld: Iterable[tuple[int, int]] = (),
                          held_by: Iterable[Mapping] = ()) -> list[Problem]:
    """What is wrong with a Cluster API IPAddress written before its claim (``written_before_its_claim``) for
    one of our pools (``pool``, None when not known): an address the pool could not hand its claim (outside
    it, a gateway or excluded, withheld for an earlier pool (``withheld``, in the pool's units), preallocated
    to another claim), or one another address already holds (``held_by``: addresses of the namespace at its
    IP, and the pool's lock of it, whatever claim they name but this one). The claim would be refused it."""
    spec = _spec(obj)
    pool_kind = poolkind.kind_named(kinds.kind_of(pool)) if pool is not None else None
    if pool_kind is None or pool_kind.outside is not None or not isinstance(spec, Mapping) \
            or not written_before_its_claim(obj):
        return []  # an outside IPAM's pool: what it hands out is its own
    model, _ = poolkind.read(pool)
    try:
        ip = admitted_ip(spec.get("address"))
    except AddressError:
        return []  # Cluster API's own schema and webhook judge the address's form
    pool_ns = namespace_of(pool)
    value, where = spec.get("address"), f"{kinds.kind_of(pool)[1]} {pool_ns + '/' if pool_ns else ''}{_name(pool)}"
    if model is None:
        return []
    if ip.version != model.version:
        return tagged(obj, [Problem("spec.address", value, f"is IPv{ip.version}; {where} is IPv{model.version}")])
    claim = spec.get("claimRef") if isinstance(spec.get("claimRef"), Mapping) else {}
    for other in held_by:
        return tagged(obj, [Problem("spec.address", value, f"is held already by {_address_of_claim(other)}: "
                                                           "its claim would not take it up")])
    why = never_for(model, sorted(withheld), str(claim.get("name") or ""), model.unit_of(int(ip)))
    if why is not None:
        return tagged(obj, [Problem("spec.address", value, f"{why} ({where}): its claim would not take it up")])
    return []


def _address_of_claim(address: Mapping) -> str:
    """An address object and the claim it names, as a refusal names them."""
    capi = kinds.kind_of(address) == kinds.CAPI_ADDRESS
    spec = _spec_map(address)
    claim = spec.get("claimRef" if capi else "claim")
    claim = claim if isinstance(claim, Mapping) else {}
    kind = kinds.CAPI_CLAIM[1] if capi or claim.get("kind") == kinds.CAPI_CLAIM[1] else kinds.IPCLAIM[1]
    group = f".{kinds.CAPI_IPAM_GROUP}" if capi else ""
    return (f"IPAddress{group} {namespace_of(address)}/{_name(address)} of {kind} "
            f"{claim.get('namespace') or namespace_of(address)}/{claim.get('name')}")


VALIDATORS = {
    kinds.IPCLAIM: validate_ipclaim,
    kinds.IPADDRESS: validate_ipaddress,
    kinds.CAPI_CLAIM: validate_capi_claim,
}


def validate(obj: Any) -> list[Problem]:
    """Validate any object of a kind this project knows; other kinds are not ours to judge."""
    kind = kinds.kind_of(obj)
    pool_kind = poolkind.kind_named(kind)
    if pool_kind is not None:
        return pool_kind.validate(obj) + separate_network_problems(obj)
    validator = VALIDATORS.get(kind)
    return validator(obj) if validator else []


def validate_update(old: Any, new: Any, in_use: Mapping[str, str] | None = None) -> list[Problem]:
    """The update rules of ``new``'s kind (immutable fields; a pool keeps the addresses in use)."""
    kind = kinds.kind_of(new)
    pool_kind = poolkind.kind_named(kind)
    if pool_kind is not None:
        return pool_kind.validate_update(old, new, in_use) + separate_network_problems(new)
    if kind == kinds.IPCLAIM:
        return validate_ipclaim_update(old, new)
    if kind == kinds.IPADDRESS:
        return validate_ipaddress_update(old, new)
    if kind == kinds.CAPI_CLAIM:
        return validate_capi_claim_update(old, new)
    return []


def validate_delete(obj: Any, in_use: Mapping[str, str] | None = None) -> list[Problem]:
    """The delete rules: only a pool in use is kept."""
    pool_kind = poolkind.kind_named(kinds.kind_of(obj))
    return pool_kind.validate_delete(obj, in_use or {}) if pool_kind is not None else []
