"""An IPPool spec read into its address set.

Every pool entry (``spec.pools[i]``) becomes a closed integer range with the
prefix, gateway and DNS servers that addresses taken from it carry. The
addresses no claim may get (gateways, ``excludedAddresses``) and those held
for one claim (``preAllocations``) are kept apart, so the allocator can build
its free space from them without looking at single addresses.

Reading a spec never raises: what is wrong comes back as ``Problem``s naming
the field and the value, and a pool is only built when there are none.

What the CRD schema refuses is refused here too (its size limits, IPv4-mapped
IPv6 addresses, leading zeros in a prefix length), so ``metal3-ipam validate``
and the API server agree; on top come the rules a schema cannot say.
"""

from __future__ import annotations

import bisect
import ipaddress
import re
from dataclasses import dataclass, field
from collections.abc import Mapping
from typing import Any

import netaddr

from .addresses import (FAMILY_BITS, AddressError, host_range, ip_from_int, network_of, parse_cidr,
                        parse_ip, parse_span)
from .intervals import normalise, subtract
from .naming import address_name, lock_name, name_prefix_problem
from .problems import Problem

STRATEGIES = ("sequential", "random")
# The CRD's limits (poolkinds/ippool/schema.py; a test keeps the two equal): what the API
# server refuses is refused offline too, and a huge list is refused before it is read.
MAX_ENTRIES = 256
MAX_PREALLOCATIONS = 4096
MAX_EXCLUDED_ADDRESSES = 1024
MAX_DNS_SERVERS = 32
MAX_CLUSTER_NAME = 63  # the pool is labelled with it
_LABEL_VALUE = re.compile(r"^([A-Za-z0-9]([-A-Za-z0-9_.]*[A-Za-z0-9])?)?$")


@dataclass(frozen=True)
class Entry:
    """One range of a pool, with what addresses taken from it are given."""

    index: int
    first: int
    last: int
    prefix: int | None
    gateway: str | None
    dns_servers: tuple[str, ...]

    @property
    def field(self) -> str:
        return f"spec.pools[{self.index}]"

    def __contains__(self, value: int) -> bool:
        return self.first <= value <= self.last


@dataclass
class Pool:
    """The address set of an IPPool, ready for allocation."""

    name_prefix: str
    version: int
    strategy: str
    entries: tuple[Entry, ...]
    # Never handed out: every effective gateway and excludedAddresses.
    reserved: list[tuple[int, int]]
    # Claim name -> address held for that claim only.
    preallocations: dict[str, int]
    # What the allocator counts in: addresses (None), or aligned sub-prefixes of this length, unit n being
    # the one whose base address is n << unit_bits (a prefix pool). Entries, reserved spans and
    # preallocations are in units; ``address_of``, ``unit_of`` and ``lock_name`` translate.
    unit_length: int | None = None
    # How its locks are named: None, Metal3's ``<namePrefix>-<ip>``; else ``name_prefix`` is the pool part of
    # ``naming.lock_name`` and this its tag (a kind whose pools have no namePrefix: ``PoolKind.lock_tag``).
    lock_tag: str | None = None
    _starts: list[int] = field(init=False, repr=False)
    _by_start: list[Entry] = field(init=False, repr=False)
    _holders: dict[int, str] = field(init=False, repr=False)

    def __post_init__(self) -> None:
        self._by_start = sorted(self.entries, key=lambda e: e.first)
        self._starts = [e.first for e in self._by_start]
        self._holders = {ip: claim for claim, ip in self.preallocations.items()}

    @property
    def unit_bits(self) -> int:
        """How many addresses a unit holds, as a power of two."""
        return FAMILY_BITS[self.version] - self.unit_length if self.unit_length is not None else 0

    def address_of(self, unit: int) -> netaddr.IPAddress:
        """The address a unit stands for: itself, or its sub-prefix's base address."""
        return ip_from_int(unit << self.unit_bits, self.version)

    def span_of(self, unit: int) -> tuple[int, int]:
        """The first and last address (as integers) a unit holds: its IP twice, or its sub-prefix's bounds."""
        first = unit << self.unit_bits
        return first, first + (1 << self.unit_bits) - 1

    def unit_of(self, value: int) -> int:
        """The unit holding the address ``value`` (an address of the pool's family)."""
        return value >> self.unit_bits

    def lock_name(self, unit: int) -> str:
        """The name of the Metal3 IPAddress that holds ``unit``: ``<namePrefix>-<ip>``, or with a lock tag
        ``<pool>.<address>.<tag>`` (``<pool>.<base>.<length>.<tag>`` for a sub-prefix; see
        ``naming.lock_name``)."""
        if self.lock_tag is not None:
            return lock_name(self.name_prefix, self.address_of(unit), self.unit_length, self.lock_tag)
        name = address_name(self.name_prefix, self.address_of(unit))
        return f"{name}.{self.unit_length}" if self.unit_length is not None else name

    def entry_of(self, value: int) -> Entry | None:
        """The entry holding ``value`` (entries never overlap), or None."""
        i = bisect.bisect_right(self._starts, value) - 1
        if i >= 0 and value in self._by_start[i]:
            return self._by_start[i]
        return None

    def is_reserved(self, value: int) -> bool:
        i = bisect.bisect_right(self.reserved, (value, float("inf"))) - 1
        return i >= 0 and self.reserved[i][0] <= value <= self.reserved[i][1]

    def holder_of(self, value: int) -> str | None:
        """The claim a preallocated address is held for."""
        return self._holders.get(value)

    def usable(self, entry: Entry) -> list[tuple[int, int]]:
        """The addresses of ``entry`` a claim may be given: no gateway, nothing excluded."""
        return subtract([(entry.first, entry.last)], self.reserved)

    def capacity(self) -> int:
        """How many addresses the pool can hand out in all (preallocated ones included)."""
        return sum(hi - lo + 1 for e in self.entries for lo, hi in self.usable(e))

    def allocatable(self, entry: Entry) -> list[tuple[int, int]]:
        """Usable addresses of ``entry`` that no preallocation holds."""
        held = normalise((ip, ip) for ip in self.preallocations.values() if ip in entry)
        return subtract(self.usable(entry), held)


def read_pool(spec: Any) -> tuple[Pool | None, list[Problem]]:
    """Read an IPPool ``spec``; the pool is None when any error was found."""
    reader = _Reader()
    pool = reader.read(spec)
    return (pool if not any(not p.warning for p in reader.problems) else None), reader.problems


# -- addresses as the API server reads them ------------------------------------------

def admitted_ip(text: object) -> netaddr.IPAddress:
    """An IP address the CRD's ``isIP()`` accepts too: no IPv4-mapped IPv6 address."""
    ip = parse_ip(text)
    if ip.version == 6 and ip.is_ipv4_mapped():
        raise AddressError(f"is an IPv4-mapped IPv6 address, which the API does not accept: "
                           f"write {ipaddress.IPv6Address(int(ip)).ipv4_mapped}")
    return ip


def admitted_cidr(text: object) -> netaddr.IPNetwork:
    """A CIDR the CRD's ``isCIDR()`` accepts too (no leading zero in the length)."""
    net = parse_cidr(text)
    length = str(text).partition("/")[2]
    if length != "0" and length.startswith("0"):
        raise AddressError("has a prefix length with a leading zero")
    admitted_ip(str(text).partition("/")[0])
    return net


def ipv4_compatible_form(text: object) -> str | None:
    """The RFC 5952 text of an IPv6 address written in the deprecated ``::a.b.c.d`` form, else None."""
    if not isinstance(text, str) or ":" not in text or "." not in text:
        return None
    try:
        return str(ipaddress.IPv6Address(text))
    except ValueError:
        return None


def span_text(lo: int, hi: int, version: int) -> str:
    """``a`` or ``a-b``, in canonical text."""
    first, last = (ipaddress.IPv4Address(lo), ipaddress.IPv4Address(hi)) if version == 4 else \
        (ipaddress.IPv6Address(lo), ipaddress.IPv6Address(hi))
    return str(first) if lo == hi else f"{first}-{last}"


class _Reader:
    def __init__(self) -> None:
        self.problems: list[Problem] = []
        self.version: int | None = None
        self.family_field = ""  # the field the pool's family was taken from

    def problem(self, path: str, value: object, message: str, warning: bool = False) -> None:
        self.problems.append(Problem(path, value, message, warning))

    # -- typed field readers ---------------------------------------------

    def parse(self, path: str, value: object) -> netaddr.IPAddress | None:
        """An address of any family, or None (the problem is recorded)."""
        try:
            ip = admitted_ip(value)
        except AddressError as err:
            self.problem(path, value, str(err))
            return None
        canonical = ipv4_compatible_form(value)
        if canonical is not None:
            self.problem(path, value, f"uses the deprecated IPv4-compatible form; write {canonical}",
                         warning=True)
        return ip

    def ip(self, path: str, value: object) -> int | None:
        """An address of the pool's family, as an integer."""
        if value is None:
            return None
        ip = self.parse(path, value)
        if ip is None or not self.same_family(path, value, ip.version):
            return None
        return int(ip)

    def same_family(self, path: str, value: object, version: int) -> bool:
        if self.version is None:
            self.version, self.family_field = version, path
        if version != self.version:
            self.problem(path, value, f"is IPv{version} but the pool is IPv{self.version} (as {self.family_field} "
                                      "says); a pool holds one address family")
            return False
        return True

    def prefix(self, path: str, value: object) -> int | None:
        """A prefix length; 0 and absence both mean 'not set', as in Metal3."""
        if value is None:
            return None
        if isinstance(value, bool) or not isinstance(value, int) or not 0 <= value <= 128:
            self.problem(path, value, "must be an integer from 0 to 128")
            return None
        return value or None

    def string_list(self, path: str, value: object, limit: int) -> list[str]:
        if value is None:
            return []
        if not isinstance(value, list):
            self.problem(path, value, "must be a list of strings")
            return []
        if len(value) > limit:
            self.problem(path, f"{len(value)} items", f"must have at most {limit} items")
            return []
        for i, item in enumerate(value):
            if not isinstance(item, str):
                self.problem(f"{path}[{i}]", item, "must be a string")
                return []
        return value

    def dns_servers(self, path: str, value: object) -> tuple[str, ...]:
        servers = self.string_list(path, value, MAX_DNS_SERVERS)
        for i, server in enumerate(servers):
            self.parse(f"{path}[{i}]", server)  # DNS servers may be of either family
        return tuple(servers)

    # -- the pool ----------------------------------------------------------

    def read(self, spec: Any) -> Pool | None:
        if not isinstance(spec, Mapping):
            self.problem("spec", spec, "must be an object")
            return None
        name_prefix = spec.get("namePrefix")
        why = name_prefix_problem(name_prefix)
        if why:
            self.problem("spec.namePrefix", name_prefix, why)
        strategy = spec.get("allocationStrategy") or "sequential"
        if strategy not in STRATEGIES:
            self.problem("spec.allocationStrategy", strategy, f"must be one of {', '.join(STRATEGIES)}")
        self.cluster_name(spec.get("clusterName"))

        raw_entries = spec.get("pools")
        if raw_entries is None or raw_entries == []:
            # The CRD and Metal3 accept it; nothing can be handed out until ranges are added.
            self.problem("spec.pools", raw_entries, "lists no range or subnet: every claim on this pool "
                                                    "will wait as exhausted", warning=True)
            raw_entries = []
        elif not isinstance(raw_entries, list):
            self.problem("spec.pools", raw_entries, "must be a list of ranges or subnets")
            raw_entries = []
        elif len(raw_entries) > MAX_ENTRIES:
            self.problem("spec.pools", f"{len(raw_entries)} entries", f"must have at most {MAX_ENTRIES} entries")
            raw_entries = []
        # A pool's family is that of its ranges: a gateway or a preallocation of
        # the other family is the field in error, never the ranges.
        self.version, self.family_field = _family_of(raw_entries)

        default_prefix = self.prefix("spec.prefix", spec.get("prefix"))
        default_gateway = self.ip("spec.gateway", spec.get("gateway"))
        default_dns = self.dns_servers("spec.dnsServers", spec.get("dnsServers"))

        entries = []
        prefix_fields: dict[int, str] = {}
        gateways = {default_gateway} if default_gateway is not None else set()
        for index, raw in enumerate(raw_entries):
            entry = self.entry(index, raw, default_prefix, default_gateway, default_dns)
            if entry is not None:
                entries.append(entry)
                # Where the entry's prefix comes from, to blame the right field.
                prefix_fields[index] = (f"{entry.field}.prefix" if raw.get("prefix")
                                        else "spec.prefix" if default_prefix else f"{entry.field}.subnet")
                if entry.gateway is not None:
                    gateways.add(int(parse_ip(entry.gateway)))
        self.check_prefixes(entries, prefix_fields)
        if not default_prefix:
            self.no_prefix_warning(raw_entries, entries)
        self.check_overlaps(entries)

        reserved = normalise([(g, g) for g in gateways] + self.excluded(spec.get("excludedAddresses")))
        preallocations = self.preallocations(spec.get("preAllocations"), entries, reserved)
        if not isinstance(name_prefix, str):
            return None
        # A pool without ranges has no family of its own; it holds nothing either way.
        return Pool(name_prefix=name_prefix, version=self.version or 4, strategy=strategy,
                    entries=tuple(entries), reserved=reserved, preallocations=preallocations)

    def cluster_name(self, cluster: object) -> None:
        if cluster is None:
            return
        if not isinstance(cluster, str):
            self.problem("spec.clusterName", cluster, "must be a string")
        elif len(cluster) > MAX_CLUSTER_NAME or not _LABEL_VALUE.match(cluster):
            self.problem("spec.clusterName", cluster,
                         f"must be a valid label value (at most {MAX_CLUSTER_NAME} characters: letters, digits, "
                         "'-', '_' or '.', starting and ending with a letter or digit): the pool is labelled with it")

    def entry(self, index: int, raw: object, default_prefix: int | None,
              default_gateway: int | None, default_dns: tuple[str, ...]) -> Entry | None:
        path = f"spec.pools[{index}]"
        if not isinstance(raw, Mapping):
            self.problem(path, raw, "must be an object")
            return None
        before = len(self.problems)
        start = self.ip(f"{path}.start", raw.get("start"))
        end = self.ip(f"{path}.end", raw.get("end"))
        subnet = None
        if raw.get("subnet") is not None:
            try:
                subnet = admitted_cidr(raw["subnet"])
            except AddressError as err:
                self.problem(f"{path}.subnet", raw["subnet"], str(err))
            else:
                if not self.same_family(f"{path}.subnet", raw["subnet"], subnet.version):
                    subnet = None
        own_prefix = self.prefix(f"{path}.prefix", raw.get("prefix"))
        gateway = default_gateway
        if raw.get("gateway"):
            gateway = self.ip(f"{path}.gateway", raw["gateway"])
        dns = self.dns_servers(f"{path}.dnsServers", raw.get("dnsServers")) or default_dns
        if any(not p.warning for p in self.problems[before:]):
            return None
        if all(raw.get(k) is None for k in ("start", "end", "subnet")):
            self.problem(path, dict(raw), "needs at least one of start, end or subnet")
            return None

        version = self.version
        prefix = own_prefix or default_prefix or (subnet.prefixlen if subnet is not None else None)
        if prefix is not None and prefix > FAMILY_BITS[version]:
            where = f"{path}.prefix" if own_prefix else "spec.prefix"
            self.problem(where, prefix, f"is longer than an IPv{version} address ({FAMILY_BITS[version]} bits)")
            return None

        if subnet is not None:
            net_first, net_last = subnet.first, subnet.last
            hosts = host_range(net_first, net_last, version, subnet.prefixlen)
            for name, value in (("start", start), ("end", end)):
                if value is not None and not net_first <= value <= net_last:
                    self.problem(f"{path}.{name}", raw[name], f"is outside the entry's subnet {subnet}")
            if any(not p.warning for p in self.problems[before:]):
                return None
        elif start is not None and end is not None:
            hosts = None
        else:
            known = start if start is not None else end
            if prefix is None:
                which = "start" if start is not None else "end"
                self.problem(f"{path}.{which}", raw[which],
                             f"has no end of range: set {path}.{'end' if which == 'start' else 'start'}, "
                             f"{path}.subnet, or a prefix ({path}.prefix or spec.prefix)")
                return None
            hosts = host_range(*network_of(known, version, prefix), version, prefix)

        first = start if start is not None else hosts[0]
        last = end if end is not None else hosts[1]
        if first > last:
            self.problem(path, dict(raw), "starts after it ends (start must not be greater than end)")
            return None
        return Entry(index=index, first=first, last=last, prefix=prefix,
                     gateway=str(ip_from_int(gateway, version)) if gateway is not None else None,
                     dns_servers=dns)

    def no_prefix_warning(self, raw_entries: list, entries: list[Entry]) -> None:
        """Neither an entry nor the pool sets a prefix: what its addresses carry differs from the Go Metal3 IPAM's.

        A user switching over would see another netmask on the host (CAPM3
        renders it from ``spec.prefix``), so one warning per pool names both
        behaviours and the entries concerned.
        """
        bare = [e for e in entries if not raw_entries[e.index].get("prefix")]
        if not bare:
            return
        first = raw_entries[bare[0].index]
        ours = (f"prefix {bare[0].prefix} (the subnet's) on both IPAddresses" if first.get("subnet")
                else f"no prefix on the Metal3 IPAddress and {FAMILY_BITS[self.version]} on the Cluster API one")
        more = f" (nor do {len(bare) - 1} more)" if len(bare) > 1 else ""
        self.problem(bare[0].field, dict(first),
                     f"sets no prefix{more} and spec.prefix is not set: this controller writes {ours}; the Go "
                     "Metal3 IPAM writes no prefix on the Metal3 IPAddress and prefix 0 on the Cluster API one; "
                     "set spec.prefix or the entry's prefix to choose", warning=True)

    def check_prefixes(self, entries: list[Entry], prefix_fields: dict[int, str]) -> None:
        """An address's prefix must describe a network that holds its whole entry.

        The problem is the prefix's own field: the entry's when it sets one,
        else ``spec.prefix``, the default it inherited.
        """
        for entry in entries:
            if entry.prefix is None:
                continue
            if network_of(entry.first, self.version, entry.prefix) != network_of(entry.last, self.version, entry.prefix):
                self.problem(prefix_fields[entry.index], entry.prefix,
                             f"does not cover the range of {entry.field} "
                             f"({span_text(entry.first, entry.last, self.version)}): addresses from it "
                             f"would lie in different /{entry.prefix} networks")

    def check_overlaps(self, entries: list[Entry]) -> None:
        ordered = sorted(entries, key=lambda e: e.first)
        for before, after in zip(ordered, ordered[1:]):
            if after.first <= before.last:
                self.problem(after.field, f"spec.pools[{before.index}] and spec.pools[{after.index}]",
                             f"overlaps another entry of the pool in "
                             f"{span_text(after.first, min(after.last, before.last), self.version)}")

    def excluded(self, value: object) -> list[tuple[int, int]]:
        spans = []
        for i, text in enumerate(self.string_list("spec.excludedAddresses", value, MAX_EXCLUDED_ADDRESSES)):
            path = f"spec.excludedAddresses[{i}]"
            try:
                version, lo, hi = parse_span(text)
                if "/" in text:
                    admitted_cidr(text)
                else:
                    for part in text.split("-"):
                        admitted_ip(part)
            except AddressError as err:
                self.problem(path, text, str(err))
                continue
            if self.version is not None and version != self.version:
                # Accepted by the CRD; it can only be a slip, and it excludes nothing.
                self.problem(path, text, f"is IPv{version} but the pool is IPv{self.version}: it excludes nothing",
                             warning=True)
                continue
            if self.version is None:
                self.version, self.family_field = version, path
            spans.append((lo, hi))
        return spans

    def preallocations(self, value: object, entries: list[Entry],
                       reserved: list[tuple[int, int]]) -> dict[str, int]:
        if value is None:
            return {}
        if not isinstance(value, Mapping):
            self.problem("spec.preAllocations", value, "must map claim names to IP addresses")
            return {}
        if len(value) > MAX_PREALLOCATIONS:
            self.problem("spec.preAllocations", f"{len(value)} entries",
                         f"must have at most {MAX_PREALLOCATIONS} entries")
            return {}
        ranges = normalise((e.first, e.last) for e in entries)
        held: dict[str, int] = {}
        owners: dict[int, str] = {}
        for claim, text in value.items():
            path = f"spec.preAllocations[{claim}]"  # the API server's form for a map key
            ip = self.ip(path, text)
            if ip is None:
                continue
            if not _within(ranges, ip):
                self.problem(path, text, "is not inside any range of the pool")
            elif _within(reserved, ip):
                self.problem(path, text, "is a gateway or an excluded address of the pool")
            elif ip in owners:
                self.problem(path, text, f"is preallocated to claim {owners[ip]} already")
            else:
                owners[ip] = claim
                held[str(claim)] = ip
        return held


def _within(spans: list[tuple[int, int]], value: int) -> bool:
    """Whether ``value`` lies in one of the sorted, disjoint ``spans``."""
    i = bisect.bisect_right(spans, (value, float("inf"))) - 1
    return i >= 0 and spans[i][0] <= value <= spans[i][1]


def _family_of(raw_entries: list) -> tuple[int | None, str]:
    """The family of the first address a range names, and that field; (None, "") when none does."""
    for index, raw in enumerate(raw_entries):
        if not isinstance(raw, Mapping):
            continue
        for key in ("start", "end", "subnet"):
            text = raw.get(key)
            try:
                version = (admitted_cidr(text) if key == "subnet" else admitted_ip(text)).version
            except AddressError:
                continue
            return version, f"spec.pools[{index}].{key}"
    return None, ""
