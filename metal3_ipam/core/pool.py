"""An IPPool spec read into its address set.

Every pool entry (``spec.pools[i]``) becomes a closed integer range with the
prefix, gateway and DNS servers that addresses taken from it carry. The
addresses no claim may get (gateways, ``excludedAddresses``) and those held
for one claim (``preAllocations``) are kept apart, so the allocator can build
its free space from them without looking at single addresses.

Reading a spec never raises: what is wrong comes back as ``Problem``s naming
the field and the value, and a pool is only built when there are none.
"""

from __future__ import annotations

import bisect
from dataclasses import dataclass, field
from collections.abc import Mapping
from typing import Any

from .addresses import (FAMILY_BITS, AddressError, host_range, network_of, parse_cidr,
                        parse_ip, parse_span)
from .intervals import normalise, subtract
from .naming import name_prefix_problem
from .problems import Problem

STRATEGIES = ("sequential", "random")
MAX_ENTRIES = 1000


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
    _starts: list[int] = field(init=False, repr=False)
    _by_start: list[Entry] = field(init=False, repr=False)
    _holders: dict[int, str] = field(init=False, repr=False)

    def __post_init__(self) -> None:
        self._by_start = sorted(self.entries, key=lambda e: e.first)
        self._starts = [e.first for e in self._by_start]
        self._holders = {ip: claim for claim, ip in self.preallocations.items()}

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


class _Reader:
    def __init__(self) -> None:
        self.problems: list[Problem] = []
        self.version: int | None = None

    def problem(self, path: str, value: object, message: str, warning: bool = False) -> None:
        self.problems.append(Problem(path, value, message, warning))

    # -- typed field readers ---------------------------------------------

    def ip(self, path: str, value: object) -> int | None:
        """An address of the pool's family, as an integer."""
        if value is None:
            return None
        try:
            ip = parse_ip(value)
        except AddressError as err:
            self.problem(path, value, str(err))
            return None
        if not self.same_family(path, value, ip.version):
            return None
        return int(ip)

    def same_family(self, path: str, value: object, version: int) -> bool:
        if self.version is None:
            self.version = version
        if version != self.version:
            self.problem(path, value, f"is IPv{version} but the pool is IPv{self.version}; "
                                      "a pool holds one address family")
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

    def string_list(self, path: str, value: object) -> list[str]:
        if value is None:
            return []
        if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
            self.problem(path, value, "must be a list of strings")
            return []
        return value

    def dns_servers(self, path: str, value: object) -> tuple[str, ...]:
        servers = self.string_list(path, value)
        for i, server in enumerate(servers):
            try:
                parse_ip(server)
            except AddressError as err:
                self.problem(f"{path}[{i}]", server, str(err))
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
        cluster = spec.get("clusterName")
        if cluster is not None and not isinstance(cluster, str):
            self.problem("spec.clusterName", cluster, "must be a string")

        default_prefix = self.prefix("spec.prefix", spec.get("prefix"))
        default_gateway_text = spec.get("gateway")
        default_gateway = self.ip("spec.gateway", default_gateway_text)
        default_dns = self.dns_servers("spec.dnsServers", spec.get("dnsServers"))

        raw_entries = spec.get("pools")
        if not isinstance(raw_entries, list) or not raw_entries:
            self.problem("spec.pools", raw_entries, "must list at least one range or subnet")
            raw_entries = []
        elif len(raw_entries) > MAX_ENTRIES:
            self.problem("spec.pools", f"{len(raw_entries)} entries", f"must have at most {MAX_ENTRIES} entries")
            raw_entries = []
        entries = []
        gateways = {default_gateway} if default_gateway is not None else set()
        for index, raw in enumerate(raw_entries):
            entry = self.entry(index, raw, default_prefix, default_gateway_text, default_dns)
            if entry is not None:
                entries.append(entry)
                if entry.gateway is not None:
                    gateways.add(int(parse_ip(entry.gateway)))
        self.check_prefixes(default_prefix, entries)
        self.check_overlaps(entries)

        reserved = normalise([(g, g) for g in gateways] + self.excluded(spec.get("excludedAddresses")))
        preallocations = self.preallocations(spec.get("preAllocations"), entries, reserved)
        if self.version is None or not isinstance(name_prefix, str):
            return None
        return Pool(name_prefix=name_prefix, version=self.version, strategy=strategy,
                    entries=tuple(entries), reserved=reserved, preallocations=preallocations)

    def entry(self, index: int, raw: object, default_prefix: int | None,
              default_gateway: str | None, default_dns: tuple[str, ...]) -> Entry | None:
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
                subnet = parse_cidr(raw["subnet"])
            except AddressError as err:
                self.problem(f"{path}.subnet", raw["subnet"], str(err))
            else:
                if not self.same_family(f"{path}.subnet", raw["subnet"], subnet.version):
                    subnet = None
        own_prefix = self.prefix(f"{path}.prefix", raw.get("prefix"))
        gateway_text = raw.get("gateway") or default_gateway
        if raw.get("gateway"):
            self.ip(f"{path}.gateway", raw["gateway"])
        dns = self.dns_servers(f"{path}.dnsServers", raw.get("dnsServers")) or default_dns
        if len(self.problems) > before:
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
            if len(self.problems) > before:
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
                     gateway=str(parse_ip(gateway_text)) if gateway_text else None, dns_servers=dns)

    def check_prefixes(self, default_prefix: int | None, entries: list[Entry]) -> None:
        """An address's prefix must describe a network that holds its whole entry."""
        for entry in entries:
            if entry.prefix is None:
                continue
            if network_of(entry.first, self.version, entry.prefix) != network_of(entry.last, self.version, entry.prefix):
                self.problem(f"{entry.field}.prefix", entry.prefix,
                             f"does not cover the entry's range: addresses from it would lie in different /{entry.prefix} networks")

    def check_overlaps(self, entries: list[Entry]) -> None:
        ordered = sorted(entries, key=lambda e: e.first)
        for before, after in zip(ordered, ordered[1:]):
            if after.first <= before.last:
                self.problem(after.field, f"spec.pools[{before.index}] and spec.pools[{after.index}]",
                             "overlaps another entry of the pool")

    def excluded(self, value: object) -> list[tuple[int, int]]:
        spans = []
        for i, text in enumerate(self.string_list("spec.excludedAddresses", value)):
            path = f"spec.excludedAddresses[{i}]"
            try:
                version, lo, hi = parse_span(text)
            except AddressError as err:
                self.problem(path, text, str(err))
                continue
            if self.same_family(path, text, version):
                spans.append((lo, hi))
        return spans

    def preallocations(self, value: object, entries: list[Entry],
                       reserved: list[tuple[int, int]]) -> dict[str, int]:
        if value is None:
            return {}
        if not isinstance(value, Mapping):
            self.problem("spec.preAllocations", value, "must map claim names to IP addresses")
            return {}
        held: dict[str, int] = {}
        owners: dict[int, str] = {}
        for claim, text in value.items():
            path = f"spec.preAllocations.{claim}"
            ip = self.ip(path, text)
            if ip is None:
                continue
            if not any(ip in e for e in entries):
                self.problem(path, text, "is not inside any range of the pool")
            elif any(lo <= ip <= hi for lo, hi in reserved):
                self.problem(path, text, "is a gateway or an excluded address of the pool")
            elif ip in owners:
                self.problem(path, text, f"is preallocated to claim {owners[ip]} already")
            else:
                owners[ip] = claim
                held[claim] = ip
        return held
