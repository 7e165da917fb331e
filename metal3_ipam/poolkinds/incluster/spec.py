"""The Cluster API in-cluster provider's IP pools (``InClusterIPPool``, ``GlobalInClusterIPPool``).

A ``v1alpha2`` pool spec is read into the ``Pool`` the allocator already
serves, so "lowest free first" and the bookkeeping are the Metal3 kind's:

* ``spec.addresses`` (single IPs, ``a-b`` ranges, CIDRs whose host bits are
  ignored) are merged into ascending, disjoint entries, whatever the order
  and overlaps of the list: the allocator's lowest free address is the lowest
  of the whole set.
* Reserved (``Pool.reserved``, never handed out): ``excludedAddresses``, the
  gateway and, unless ``allocateReservedIPAddresses``, the first address of
  the network ``spec.prefix`` makes of the lowest address and, for IPv4, its
  last. The network comes from ``spec.prefix``, not from the CIDR entries (an
  entry ``10.0.0.0/29`` with prefix 22 keeps ``10.0.0.7``), as in the Go provider.
* Point-to-point prefixes reserve nothing: a ``/31`` serves both of its
  addresses, a ``/32``, ``/127`` or ``/128`` its one (RFC 3021, RFC 6164), as
  the Metal3 kind does (``addresses.host_range``). The Go provider reserves
  there too and so serves nothing from a ``/31`` pool with prefix 31.

Validation follows the Go provider's webhooks rule by rule, with its messages,
and names the one entry at fault (``spec.addresses[2]``) with its value where
the Go provider shows the whole list. On top: a gateway outside the prefix,
an excluded entry of the other family named by its own index.

Counts (``status.ipAddresses``) are exact integers; ``free`` is the total less
the *in-range* addresses in use (the Go provider subtracts every used
address, out of range ones too, and reads negative once a pool shrinks). The
CRD field is an ``integer`` (int64 on the API server, ``int`` in Go clients):
a count beyond 2^63 - 1 is written as 2^63 - 1, the Go provider's
``math.MaxInt``, since a larger JSON number fails every Go client's decoding
of the pool. Only an IPv6 pool of more than 2^63 addresses reaches it, and
then only ``total`` and ``free`` saturate; ``used`` and ``outOfRange`` count
objects and never do.
"""

from __future__ import annotations

import datetime
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from metal3_ipam.core import kinds
from metal3_ipam.core import objects as o
from metal3_ipam.core.addresses import FAMILY_BITS, AddressError, host_range, network_of, parse_ip, parse_span
from metal3_ipam.core.intervals import normalise, subtract
from metal3_ipam.core.objects import format_time, parse_time  # noqa: F401  (the grace deadline's form, read here too)
from metal3_ipam.core.pool import Entry, Pool, span_text
from metal3_ipam.core.problems import Problem, tagged

GROUP = kinds.CAPI_IPAM_GROUP
VERSION = "v1alpha2"
API_VERSION = f"{GROUP}/{VERSION}"
IN_CLUSTER_IP_POOL = (GROUP, "InClusterIPPool")
GLOBAL_IN_CLUSTER_IP_POOL = (GROUP, "GlobalInClusterIPPool")
IP_POOL_KINDS = (IN_CLUSTER_IP_POOL, GLOBAL_IN_CLUSTER_IP_POOL)
# The namePrefix of the locks (Metal3 IPAddresses ``<prefix>-<ip>``) of the IPs these pools hand out. Object names
# must start with a letter or digit, so the prefix cannot be empty; one for every in-cluster pool, so that two of
# them holding one IP in a namespace (a global pool's claim there and a namespaced pool) contend for one lock.
LOCK_PREFIX = "incluster"

POOL_FINALIZER = "ipam.cluster.x-k8s.io/ProtectPool"
CLAIM_FINALIZER = "ipam.cluster.x-k8s.io/ReleaseAddress"
ADDRESS_FINALIZER = "ipam.cluster.x-k8s.io/ProtectAddress"
SKIP_DELETE_VALIDATION_ANNOTATION = "ipam.cluster.x-k8s.io/skip-validate-delete-webhook"

MAX_COUNT = 2**63 - 1  # the largest value of the status' integer fields
MAX_GRACE_SECONDS = 2**31 - 1  # addressReuseGracePeriodSeconds is an int32

# The Go provider's messages (internal/webhooks), kept word for word: users and tools match on them.
MSG_ADDRESSES_REQUIRED = "addresses is required"
MSG_NOT_AN_ADDRESS = "provided address is not a valid IP, range, nor CIDR"
MSG_MIXED_ADDRESSES = "provided addresses are of mixed IP families"
MSG_PREFIX_REQUIRED = "a valid prefix is required"
MSG_PREFIX_INVALID = "provided prefix is not valid"
MSG_GATEWAY_MIXED = "provided gateway and addresses are of mixed IP families"
MSG_EXCLUDED_MIXED = "addresses and excluded addresses are of mixed IP families"
MSG_GRACE_NEGATIVE = "addressReuseGracePeriodSeconds must not be negative"
MSG_OTHER_SUBNET = "provided address belongs to a different subnet than others"
MSG_LOSES_ALLOCATED = "pool addresses do not contain allocated addresses"
MSG_DELETE_IN_USE = ("Pool has IPAddresses allocated. Cannot delete Pool until all IPAddresses have "
                     "been removed.")


@dataclass(frozen=True)
class Span:
    """One entry of an address list, read: its family and first and last address."""

    field: str
    text: str
    version: int
    first: int
    last: int


def read_span(field: str, text: object) -> Span | None:
    """An IP, ``a-b`` range or CIDR (host bits ignored) as the Go provider reads it, else None."""
    try:
        version, first, last = parse_span(text)
    except AddressError:
        return None
    return Span(field, str(text), version, first, last)


def read_ip_pool(spec: Any) -> tuple[Pool | None, list[Problem]]:
    """A v1alpha2 IP pool ``spec`` read into its address set; None when any error was found.

    Every problem names its field (``spec.addresses[1]``) and value.
    """
    problems: list[Problem] = []
    if not isinstance(spec, Mapping):
        return None, [Problem("spec", spec, "must be an object")]
    addresses = _string_list(problems, "spec.addresses", spec.get("addresses"))
    if spec.get("addresses") is None or addresses == []:
        problems.append(Problem("spec.addresses", spec.get("addresses"), MSG_ADDRESSES_REQUIRED))
    spans = _spans(problems, "spec.addresses", addresses or [])
    version = spans[0].version if spans else None
    for span in spans:
        if span.version != version:
            problems.append(Problem(span.field, span.text, f"{MSG_MIXED_ADDRESSES}: IPv{span.version}, where "
                                                           f"{spans[0].field} ({spans[0].text}) is IPv{version}"))
            break

    prefix = spec.get("prefix")
    if prefix is None:
        problems.append(Problem("spec.prefix", prefix, f"{MSG_PREFIX_REQUIRED}: the prefix length addresses "
                                                       "are handed out with"))
    elif isinstance(prefix, bool) or not isinstance(prefix, int) or not 0 <= prefix <= 128:
        problems.append(Problem("spec.prefix", prefix, f"{MSG_PREFIX_REQUIRED}: an integer from 0 to 128"))
        prefix = None
    elif version is not None and prefix > FAMILY_BITS[version]:
        problems.append(Problem("spec.prefix", prefix, f"{MSG_PREFIX_INVALID}: longer than an IPv{version} "
                                                       f"address ({FAMILY_BITS[version]} bits)"))
        prefix = None

    gateway = _gateway(problems, spec.get("gateway"), version)
    excluded = _spans(problems, "spec.excludedAddresses",
                      _string_list(problems, "spec.excludedAddresses", spec.get("excludedAddresses")) or [])
    for span in excluded:
        if version is not None and span.version != version:
            problems.append(Problem(span.field, span.text, f"{MSG_EXCLUDED_MIXED}: IPv{span.version}, the "
                                                           f"addresses are IPv{version}"))
    grace_seconds(spec, problems)
    allocate_reserved = spec.get("allocateReservedIPAddresses", False)
    if not isinstance(allocate_reserved, bool):
        problems.append(Problem("spec.allocateReservedIPAddresses", allocate_reserved, "must be true or false"))

    if problems or version is None or prefix is None:
        return None, problems
    net_first, net_last = network_of(min(s.first for s in spans), version, prefix)
    net_text = f"{span_text(net_first, net_first, version)}/{prefix}"
    for span in spans:
        if not (net_first <= span.first and span.last <= net_last):
            problems.append(Problem(span.field, span.text, f"{MSG_OTHER_SUBNET} (outside {net_text}, the "
                                                           "network of spec.prefix and the lowest address)"))
    if gateway is not None and not net_first <= gateway <= net_last:
        problems.append(Problem("spec.gateway", spec["gateway"],
                                f"is outside the pool's network {net_text} (spec.prefix and the lowest address): "
                                "hosts could not reach it"))
    if problems:
        return None, problems

    reserved = [(s.first, s.last) for s in excluded]
    if gateway is not None:
        reserved.append((gateway, gateway))
    if not allocate_reserved:
        reserved += subtract([(net_first, net_last)], [host_range(net_first, net_last, version, prefix)])
    gateway_text = span_text(gateway, gateway, version) if gateway is not None else None
    entries = tuple(Entry(index=i, first=lo, last=hi, prefix=prefix, gateway=gateway_text, dns_servers=())
                    for i, (lo, hi) in enumerate(normalise((s.first, s.last) for s in spans)))
    return Pool(name_prefix=LOCK_PREFIX, version=version, strategy="sequential", entries=entries,
                reserved=normalise(reserved), preallocations={}), problems


def _string_list(problems: list[Problem], path: str, value: object) -> list[str] | None:
    if value is None:
        return None
    if not isinstance(value, list) or not all(isinstance(item, str) for item in value):
        problems.append(Problem(path, value, "must be a list of strings"))
        return None
    return value


def _spans(problems: list[Problem], path: str, texts: list[str]) -> list[Span]:
    spans = []
    for i, text in enumerate(texts):
        span = read_span(f"{path}[{i}]", text)
        if span is None:
            problems.append(Problem(f"{path}[{i}]", text, MSG_NOT_AN_ADDRESS))
        else:
            spans.append(span)
    return spans


def _gateway(problems: list[Problem], text: object, version: int | None) -> int | None:
    if text is None or text == "":
        return None
    try:
        ip = parse_ip(text)
    except AddressError:
        problems.append(Problem("spec.gateway", text, "provided gateway is not a valid IP address"))
        return None
    if version is not None and ip.version != version:
        problems.append(Problem("spec.gateway", text, f"{MSG_GATEWAY_MIXED}: IPv{ip.version}, the addresses "
                                                      f"are IPv{version}"))
        return None
    return int(ip)


def grace_seconds(spec: Mapping[str, Any], problems: list[Problem] | None = None) -> int:
    """``spec.addressReuseGracePeriodSeconds``; 0 (no grace) when unset or invalid."""
    value = spec.get("addressReuseGracePeriodSeconds")
    if value is None:
        return 0
    if isinstance(value, bool) or not isinstance(value, int) or value > MAX_GRACE_SECONDS:
        if problems is not None:
            problems.append(Problem("spec.addressReuseGracePeriodSeconds", value,
                                    f"must be an integer from 0 to {MAX_GRACE_SECONDS}"))
        return 0
    if value < 0:
        if problems is not None:
            problems.append(Problem("spec.addressReuseGracePeriodSeconds", value, MSG_GRACE_NEGATIVE))
        return 0
    return value


# -- what is handed out, and the counts -------------------------------------------------

def in_set(pool: Pool, value: int) -> bool:
    """Whether the pool may hand ``value`` out: inside its addresses, not reserved."""
    return pool.entry_of(value) is not None and not pool.is_reserved(value)


@dataclass(frozen=True)
class Counts:
    """A pool's exact counts; ``status`` is what its ``status.ipAddresses`` holds."""

    total: int
    used: int
    free: int
    out_of_range: int

    @property
    def status(self) -> dict[str, int]:
        return {"total": min(self.total, MAX_COUNT), "used": min(self.used, MAX_COUNT),
                "free": min(self.free, MAX_COUNT), "outOfRange": min(self.out_of_range, MAX_COUNT)}


def ip_pool_counts(pool: Pool, in_use: Iterable[object]) -> Counts:
    """The counts of ``pool`` given ``spec.address`` of every IPAddress naming it (held ones too).

    ``used`` counts the addresses, ``outOfRange`` those the set does not hold
    (excluded, gateway, reserved or outside, or not an IP of the pool's
    family), ``free`` the set less the distinct in-range addresses used.
    """
    used = out_of_range = 0
    in_range: set[int] = set()
    for text in in_use:
        used += 1
        try:
            ip = parse_ip(text)
        except AddressError:
            out_of_range += 1
            continue
        if ip.version == pool.version and in_set(pool, int(ip)):
            in_range.add(int(ip))
        else:
            out_of_range += 1
    total = pool.capacity()
    return Counts(total=total, used=used, free=total - len(in_range), out_of_range=out_of_range)


# -- the reuse grace period ----------------------------------------------------------------

def grace_deadline(deletion_timestamp: str | None, seconds: int | None) -> datetime.datetime | None:
    """Until when a deleted claim's address stays held: its ``deletionTimestamp`` plus the pool's
    ``addressReuseGracePeriodSeconds``; None when the claim is not being deleted or there is no grace.

    Derived from what the API server stores only, so it outlives restarts, leader changes and moves.
    """
    if not deletion_timestamp or not seconds or seconds <= 0:
        return None
    return o.parse_time(deletion_timestamp) + datetime.timedelta(seconds=seconds)


# -- admission ---------------------------------------------------------------------------

def validate_ip_pool(obj: Any) -> list[Problem]:
    """The create rules of an InClusterIPPool or GlobalInClusterIPPool (v1alpha2)."""
    spec = obj.get("spec") if isinstance(obj, Mapping) else None
    _, problems = read_ip_pool(spec)
    return tagged(obj, problems)


def validate_ip_pool_update(old: Any, new: Any, in_use: Mapping[str, str] | None = None) -> list[Problem]:
    """The update rules: those of a new pool, and no address in use may leave the set.

    ``in_use``: IPAddress name (``namespace/name`` for a global pool) -> ``spec.address``,
    for every IPAddress naming the pool. No field is immutable.
    """
    problems = validate_ip_pool(new)
    if problems or not in_use:
        return problems
    pool, _ = read_ip_pool(new.get("spec"))
    spec = new["spec"]
    lost: dict[int, list[str]] = {}
    for name, text in in_use.items():
        try:
            ip = parse_ip(text)
        except AddressError:
            continue  # an unparsable address is in no set, old or new (as in the Go provider)
        if ip.version != pool.version:
            lost.setdefault(-1 - int(ip), []).append(str(name))
        elif not in_set(pool, int(ip)):
            lost.setdefault(int(ip), []).append(str(name))
    found = []
    for ip, names in sorted(lost.items()):
        text = str(parse_ip(in_use[names[0]]))
        field, why = _why_not_in_set(pool, spec, ip)
        found.append(Problem(field, text, f"{MSG_LOSES_ALLOCATED}: {text} is in use (IPAddress "
                                          f"{', '.join(sorted(names))}) and {why}"))
    return tagged(new, found)


def _why_not_in_set(pool: Pool, spec: Mapping[str, Any], ip: int) -> tuple[str, str]:
    """The field that keeps ``ip`` out of a valid pool's set, and how."""
    if ip < 0 or pool.entry_of(ip) is None:
        return "spec.addresses", "would be outside the pool's addresses"
    gateway = spec.get("gateway")
    if gateway and int(parse_ip(gateway)) == ip:
        return "spec.gateway", "would be the gateway"
    for i, text in enumerate(spec.get("excludedAddresses") or []):
        span = read_span("", text)
        if span.first <= ip <= span.last:
            return f"spec.excludedAddresses[{i}]", f"would be excluded by {text}"
    return "spec.allocateReservedIPAddresses", ("would be reserved (the first or last address of the network "
                                                "of spec.prefix) unless allocateReservedIPAddresses is true")


def validate_ip_pool_delete(obj: Any, in_use: Mapping[str, str] | None) -> list[Problem]:
    """A pool with IPAddresses is not deleted, unless the skip annotation is set (any value),
    ``clusterctl move`` deletes it (its addresses go to the target with it), or it is deleting already.
    The same for prefix pools."""
    if not isinstance(obj, Mapping) or not in_use or o.is_deleting(obj) or o.deleted_for_move(obj) \
            or SKIP_DELETE_VALIDATION_ANNOTATION in o.annotations(obj):
        return []
    names = sorted(str(name) for name in in_use)
    shown = ", ".join(names[:5]) + (f" and {len(names) - 5} more" if len(names) > 5 else "")
    return tagged(obj, [Problem("metadata.name", f"{len(names)} IPAddress(es): {shown}",
                              f"{MSG_DELETE_IN_USE} Delete their claims first, or set the annotation "
                              f"{SKIP_DELETE_VALIDATION_ANNOTATION}")])
