"""The in-cluster provider's prefix pools (``InClusterPrefixPool``, ``GlobalInClusterPrefixPool``).

A prefix pool hands out IPv6 sub-prefixes of ``spec.allocationPrefixLength``
bits (64 when unset or 0; immutable), aligned, from the union of
``spec.prefixes``, none overlapping ``spec.excludedPrefixes``. The IPAddress of
a claim carries the sub-prefix's base address and its length.

The candidates are kept as block numbers: block ``n`` is the sub-prefix whose
base address is ``n << (128 - length)``. Every pool prefix is aligned and no
longer than the allocation length, so it is a whole interval of blocks; an
excluded range blocks every block it touches. So the free blocks are an
interval set like a pool's free addresses: lowest first in O(log k), and
counts exact whatever the size (a /48 cut into /128s holds 2^80 of them).

The gateway is informational (written on every IPAddress) and blocks
nothing, as in the Go provider.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from metal3_ipam.core.addresses import AddressError, ip_from_int, parse_cidr, parse_ip
from metal3_ipam.core.kinds import CAPI_IPAM_GROUP as GROUP
from metal3_ipam.core.intervals import IntervalSet, normalise, subtract
from metal3_ipam.core.pool import _within
from metal3_ipam.core.problems import Problem, tagged
from metal3_ipam.poolkinds.incluster.spec import Counts, read_span, validate_ip_pool_delete

IN_CLUSTER_PREFIX_POOL = (GROUP, "InClusterPrefixPool")
GLOBAL_IN_CLUSTER_PREFIX_POOL = (GROUP, "GlobalInClusterPrefixPool")
PREFIX_POOL_KINDS = (IN_CLUSTER_PREFIX_POOL, GLOBAL_IN_CLUSTER_PREFIX_POOL)
DEFAULT_ALLOCATION_PREFIX_LENGTH = 64
BITS = 128
IPV4_MAPPED = (0xFFFF << 32, (0xFFFF << 32) | 0xFFFFFFFF)  # ::ffff:0:0/96

# The Go provider's messages (internal/webhooks/inclusterprefixpool.go), word for word.
MSG_PREFIXES_REQUIRED = "prefixes is required"
MSG_LENGTH_RANGE = "allocationPrefixLength must be between 1 and 128"
MSG_NOT_A_CIDR = "provided entry is not a valid IPv6 CIDR"
MSG_ONLY_IPV6 = "only IPv6 prefixes are supported"
MSG_NOT_ALIGNED = "CIDR must be network-aligned"
MSG_LONGER_THAN_ALLOCATION = "CIDR prefix length must be <= allocationPrefixLength ({})"
MSG_GATEWAY_IPV6 = "provided gateway must be IPv6"
MSG_EXCLUDED_NOT_AN_ENTRY = "provided entry is not a valid IP, range, nor CIDR"
MSG_EXCLUDED_ONLY_IPV6 = "only IPv6 excluded prefixes are supported"
MSG_IPV4_MAPPED = ("is an IPv4-mapped IPv6 {}: the IPAddress CRD's isIP() refuses such an address, so no "
                   "sub-prefix could be locked")
MSG_LENGTH_IMMUTABLE = "spec.allocationPrefixLength is immutable"
MSG_NON_ALLOCATABLE = "existing allocations become non-allocatable"
MSG_WARN_128 = ("spec.allocationPrefixLength=128 behaves like host-address allocation; consider InClusterIPPool "
                "for single-address semantics")
MSG_WARN_GATEWAY_128 = ("spec.gateway is within spec.prefixes and is not reserved; with /128 "
                        "allocationPrefixLength it may also be allocated to claims")

@dataclass(frozen=True)
class PrefixPool:
    """The sub-prefixes a prefix pool may hand out, as intervals of block numbers."""

    length: int
    blocks: tuple[tuple[int, int], ...]  # allocatable blocks: inside spec.prefixes, touching nothing excluded
    gateway: str | None

    @property
    def host_bits(self) -> int:
        return BITS - self.length

    @property
    def total(self) -> int:
        return sum(hi - lo + 1 for lo, hi in self.blocks)

    def block_of(self, address: int, length: int) -> tuple[int, int]:
        """The blocks the prefix ``address/length`` (masked) overlaps."""
        first = (address >> (BITS - length)) << (BITS - length) if length < BITS else address
        last = first + (1 << (BITS - length)) - 1
        return first >> self.host_bits, last >> self.host_bits

    def allocatable(self, address: int, length: int) -> bool:
        """Whether ``address/length`` is a sub-prefix the pool hands out (the Go ``PrefixIsAllocatable``)."""
        if length != self.length:
            return False
        block, _ = self.block_of(address, length)
        return _within(list(self.blocks), block)

    def prefix_text(self, block: int) -> str:
        return str(ip_from_int(block << self.host_bits, 6))


def allocation_prefix_length(spec: Mapping[str, Any]) -> object:
    """``spec.allocationPrefixLength`` as the Go provider reads it: unset or 0 is 64."""
    value = spec.get("allocationPrefixLength")
    return DEFAULT_ALLOCATION_PREFIX_LENGTH if value is None or value == 0 else value


def read_prefix_pool(spec: Any) -> tuple[PrefixPool | None, list[Problem]]:
    """A prefix pool ``spec`` read into its candidate blocks; None when any error was found."""
    if not isinstance(spec, Mapping):
        return None, [Problem("spec", spec, "must be an object")]
    prefixes = spec.get("prefixes")
    if not prefixes:
        return None, [Problem("spec.prefixes", prefixes, MSG_PREFIXES_REQUIRED)]
    if not isinstance(prefixes, list) or not all(isinstance(p, str) for p in prefixes):
        return None, [Problem("spec.prefixes", prefixes, "must be a list of strings")]
    length = allocation_prefix_length(spec)
    if isinstance(length, bool) or not isinstance(length, int) or not 1 <= length <= BITS:
        return None, [Problem("spec.allocationPrefixLength", length, MSG_LENGTH_RANGE)]

    problems: list[Problem] = []
    spans = []
    for i, text in enumerate(prefixes):
        field = f"spec.prefixes[{i}]"
        try:
            net = parse_cidr(text)
            address = parse_ip(text.partition("/")[0])
        except AddressError:
            problems.append(Problem(field, text, MSG_NOT_A_CIDR))
            continue
        if net.version != 6:
            problems.append(Problem(field, text, MSG_ONLY_IPV6))
            continue
        if address.is_ipv4_mapped():
            problems.append(Problem(field, text, MSG_IPV4_MAPPED.format("prefix")))
            continue
        if int(address) != net.first:
            problems.append(Problem(field, text, f"{MSG_NOT_ALIGNED}: write {net}"))
        if net.prefixlen > length:
            problems.append(Problem(field, text, MSG_LONGER_THAN_ALLOCATION.format(length)))
        spans.append((net.first, net.last))

    gateway = spec.get("gateway")
    if gateway:
        try:
            ip = parse_ip(gateway)
            if ip.version != 6:
                problems.append(Problem("spec.gateway", gateway, MSG_GATEWAY_IPV6))
            elif ip.is_ipv4_mapped():
                problems.append(Problem("spec.gateway", gateway, MSG_IPV4_MAPPED.format("address (written on "
                                                                                     "every IPAddress)")))
        except AddressError:
            problems.append(Problem("spec.gateway", gateway, "provided gateway is not a valid IP address"))

    excluded = []
    raw_excluded = spec.get("excludedPrefixes") or []
    if not isinstance(raw_excluded, list) or not all(isinstance(p, str) for p in raw_excluded):
        problems.append(Problem("spec.excludedPrefixes", raw_excluded, "must be a list of strings"))
        raw_excluded = []
    for i, text in enumerate(raw_excluded):
        span = read_span(f"spec.excludedPrefixes[{i}]", text)
        if span is None:
            problems.append(Problem(f"spec.excludedPrefixes[{i}]", text, MSG_EXCLUDED_NOT_AN_ENTRY))
        elif span.version != 6:
            problems.append(Problem(span.field, text, MSG_EXCLUDED_ONLY_IPV6))
        else:
            excluded.append((span.first, span.last))
    if problems:
        return None, problems

    host_bits = BITS - length
    # Sub-prefixes whose base address is IPv4-mapped (inside ::ffff:0:0/96) cannot be locked: never candidates.
    size = 1 << host_bits
    mapped = [(-(-IPV4_MAPPED[0] // size), IPV4_MAPPED[1] // size)]
    blocks = subtract(normalise((lo >> host_bits, hi >> host_bits) for lo, hi in spans),
                      normalise([*((lo >> host_bits, hi >> host_bits) for lo, hi in excluded),
                                 *(m for m in mapped if m[0] <= m[1])]))
    return PrefixPool(length=length, blocks=tuple(blocks), gateway=gateway or None), problems


def _in_use_blocks(pool: PrefixPool, in_use: Iterable[tuple[object, object]]) -> list[tuple[int, int]]:
    """The blocks the addresses in use overlap (an address without a prefix blocks its own block)."""
    blocked = []
    for address, length in in_use:
        read = _read_in_use(address, length)
        if read is not None:
            blocked.append(pool.block_of(*read))
    return normalise(blocked)


def _read_in_use(address: object, length: object) -> tuple[int, int] | None:
    """An IPAddress's (address, prefix) as integers, or None when it is not an IPv6 prefix."""
    try:
        ip = parse_ip(address)
    except AddressError:
        return None
    if ip.version != 6:
        return None
    if isinstance(length, bool) or not isinstance(length, int) or not 0 <= length <= BITS:
        length = BITS
    return int(ip), length


def first_free_prefix(pool: PrefixPool, in_use: Iterable[tuple[object, object]]) -> tuple[str, int] | None:
    """The lowest aligned sub-prefix free of every address in use, as (base address, length); None when none is left.

    ``in_use``: (``spec.address``, ``spec.prefix``) of every IPAddress naming the pool.
    """
    free = IntervalSet(subtract(list(pool.blocks), _in_use_blocks(pool, in_use)))
    if not free:
        return None
    return pool.prefix_text(free.first()), pool.length


def prefix_pool_counts(pool: PrefixPool, in_use: Iterable[tuple[object, object]]) -> Counts:
    """Exact counts: ``used`` the IPAddresses, ``outOfRange`` those not an allocatable sub-prefix
    of the pool, ``free`` the candidates less the distinct ones in use."""
    used = out_of_range = 0
    held: set[int] = set()
    for address, length in in_use:
        used += 1
        read = _read_in_use(address, length)
        if read is None or not pool.allocatable(*read):
            out_of_range += 1
        else:
            held.add(pool.block_of(*read)[0])
    total = pool.total
    return Counts(total=total, used=used, free=total - len(held), out_of_range=out_of_range)


# -- admission ---------------------------------------------------------------------------

def prefix_pool_warnings(spec: Any) -> list[Problem]:
    """The Go provider's warnings for a /128 allocation length (the pool is valid)."""
    if not isinstance(spec, Mapping) or allocation_prefix_length(spec) != BITS:
        return []
    warnings = [Problem("spec.allocationPrefixLength", BITS, MSG_WARN_128, warning=True)]
    pool, _ = read_prefix_pool(spec)
    gateway = spec.get("gateway")
    if pool is not None and gateway and pool.allocatable(int(parse_ip(gateway)), BITS):
        warnings.append(Problem("spec.gateway", gateway, MSG_WARN_GATEWAY_128, warning=True))
    return warnings


def validate_prefix_pool(obj: Any) -> list[Problem]:
    """The create rules of an InClusterPrefixPool or GlobalInClusterPrefixPool, with the /128 warnings."""
    spec = obj.get("spec") if isinstance(obj, Mapping) else None
    _, problems = read_prefix_pool(spec)
    return tagged(obj, problems or prefix_pool_warnings(spec))


def validate_prefix_pool_update(old: Any, new: Any,
                                in_use: Mapping[str, tuple[object, object]] | None = None) -> list[Problem]:
    """The update rules: the allocation length never changes, and every sub-prefix in use stays allocatable.

    ``in_use``: IPAddress name -> (``spec.address``, ``spec.prefix``).
    """
    problems = validate_prefix_pool(new)
    if any(not p.warning for p in problems):
        return problems
    old_spec = old.get("spec") if isinstance(old, Mapping) and isinstance(old.get("spec"), Mapping) else {}
    before, after = allocation_prefix_length(old_spec), allocation_prefix_length(new["spec"])
    if before != after:
        return problems + tagged(new, [Problem("spec.allocationPrefixLength", after,
                                             f"{MSG_LENGTH_IMMUTABLE} (was {before})")])
    pool, _ = read_prefix_pool(new["spec"])
    lost = []
    for name, (address, length) in sorted((in_use or {}).items()):
        read = _read_in_use(address, length)
        if read is None or not pool.allocatable(*read):
            lost.append((str(address), length, str(name)))
    if lost:
        shown = ", ".join(f"{address}/{length} (IPAddress {name})" for address, length, name in sorted(lost))
        problems += tagged(new, [Problem("spec.prefixes", [f"{a}/{n}" for a, n, _ in sorted(lost)],
                                       f"{MSG_NON_ALLOCATABLE}: {shown} would no longer be an allocatable "
                                       "sub-prefix of spec.prefixes outside spec.excludedPrefixes")])
    return problems


def validate_prefix_pool_delete(obj: Any, in_use: Mapping[str, object] | None) -> list[Problem]:
    """As an IP pool: refused while IPAddresses name it, unless skipped, moved or deleting already."""
    return validate_ip_pool_delete(obj, in_use)
