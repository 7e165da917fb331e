"""Choosing addresses from a pool.

The allocator keeps, for every entry of the pool, its free space as an
``IntervalSet``: taking the lowest address, a uniformly random one, or a
named one, and giving one back, each cost O(log k) for k free intervals —
never a walk over addresses, so a /64 behaves like a /24.

It counts in the pool's units (``Pool.unit_bits``): addresses, or for a
prefix pool aligned sub-prefixes numbered from the first, so a /48 cut into
/64s is one interval of 65,536 units, never a list of them.

It knows nothing of the API: the caller tells it which addresses are in use
(``take``), asks for one (``allocate``) and says when one is freed
(``release``).
"""

from __future__ import annotations

import bisect
import random
from dataclasses import dataclass
from typing import Callable

import netaddr

from .addresses import AddressError, parse_ip
from .intervals import IntervalSet, normalise, subtract
from .naming import ip_text
from .pool import Entry, Pool

# Reasons, as Cluster API conditions and Events carry them.
POOL_EXHAUSTED = "PoolExhausted"
POOL_NOT_READY = "PoolNotReady"
ALLOCATION_FAILED = "AllocationFailed"


class AllocationError(Exception):
    def __init__(self, reason: str, message: str) -> None:
        super().__init__(message)
        self.reason = reason
        self.message = message


@dataclass(frozen=True)
class Grant:
    """An address given to a claim (a sub-prefix's base address), with what its entry says goes with it."""

    ip: netaddr.IPAddress
    entry: Entry
    unit: int  # the allocator's unit: the address as an integer, or the sub-prefix's number

    @property
    def prefix(self) -> int | None:
        return self.entry.prefix

    @property
    def gateway(self) -> str | None:
        return self.entry.gateway

    @property
    def dns_servers(self) -> tuple[str, ...]:
        return self.entry.dns_servers


def never_for(pool: Pool, withheld: list[tuple[int, int]], claim: str, ip: int, kept: bool = False) -> str | None:
    """Why ``pool`` would never hand ``ip`` (a unit) to ``claim`` (a claim's name), whatever else holds it; None
    when it could: inside a range, neither a gateway nor excluded, not withheld (``withheld``: normalised spans
    an earlier overlapping pool owns), not preallocated to another claim (unless ``kept`` for this claim: a kept
    IP stays its keeper's)."""
    if pool.entry_of(ip) is None:
        return "is not inside any range of the pool"
    if pool.is_reserved(ip):
        return "is a gateway or excluded address of the pool"
    i = bisect.bisect_right(withheld, (ip, float("inf"))) - 1
    if i >= 0 and withheld[i][0] <= ip <= withheld[i][1]:
        return "is withheld: another pool it overlaps, under locks of another name, owns it"
    holder = pool.holder_of(ip)
    if holder is not None and holder != claim and not kept:
        return f"is preallocated to claim {holder}"
    return None


class Allocator:
    def __init__(self, pool: Pool, rng: random.Random | None = None,
                 withheld: list[tuple[int, int]] = ()) -> None:
        self.pool = pool
        self.rng = rng or random.Random()
        # Never handed out here: owned by another overlapping pool (see overlap.py).
        self.withheld = normalise(withheld)
        self.free = [IntervalSet(subtract(pool.allocatable(e), self.withheld)) for e in pool.entries]
        self._slot = {e.index: i for i, e in enumerate(pool.entries)}
        self.held: set[int] = set()
        # IP -> the claim it is kept for, as (kind, name): a bound claim whose address objects are gone.
        self.kept: dict[int, tuple[str, str]] = {}
        # Spans of units held whole by an address wider than a unit (a prefix pool's sub-prefix written at a
        # shorter length: the pool's length edited past the webhook, state written by hand), and how many
        # addresses hold each: no unit inside is handed out (``cover``).
        self.covered: dict[tuple[int, int], int] = {}

    # -- bookkeeping ---------------------------------------------------------

    def hold(self, ip: int) -> None:
        """Record an address already in use (by any claim, or by another pool's name)."""
        self.held.add(ip)
        entry = self.pool.entry_of(ip)
        if entry is not None:
            self.free[self._slot[entry.index]].discard(ip)

    def release(self, ip: int) -> None:
        """An address is no longer in use; it is free again unless held otherwise."""
        self.held.discard(ip)
        entry = self.pool.entry_of(ip)
        if entry is None or self.pool.is_reserved(ip) or self.pool.holder_of(ip) is not None or self.is_withheld(ip) \
                or ip in self.kept or self.is_covered(ip):
            return
        self.free[self._slot[entry.index]].add(ip)

    def keep(self, ip: int, claim: tuple[str, str]) -> None:
        """Keep ``ip`` for ``claim`` (kind, name): handed out to it alone until ``unkeep``."""
        self.kept[ip] = claim
        entry = self.pool.entry_of(ip)
        if entry is not None:
            self.free[self._slot[entry.index]].discard(ip)

    def unkeep(self, ip: int) -> None:
        if self.kept.pop(ip, None) is not None and ip not in self.held:
            self.release(ip)

    def cover(self, lo: int, hi: int) -> None:
        """An address holds the units ``lo``..``hi`` whole: none of them is handed out until ``uncover``.
        Interval by interval, never unit by unit (an address may hold 2^127 of them)."""
        held = self.covered.get((lo, hi), 0)
        self.covered[(lo, hi)] = held + 1
        if held:
            return
        for i, entry in enumerate(self.pool.entries):
            if entry.first <= hi and lo <= entry.last and self.free[i]:
                self.free[i] = IntervalSet(subtract(list(self.free[i].intervals()), [(lo, hi)]))

    def uncover(self, lo: int, hi: int) -> bool:
        """One address holding ``lo``..``hi`` whole went; True when units came free."""
        held = self.covered.pop((lo, hi), 0)
        if held > 1:
            self.covered[(lo, hi)] = held - 1
        if held != 1:
            return False
        busy = normalise([*self.withheld, *self.covered,
                          *((u, u) for u in (*self.held, *self.kept) if lo <= u <= hi)])
        freed = False
        for i, entry in enumerate(self.pool.entries):
            if entry.last < lo or hi < entry.first:
                continue
            inside = [(max(a, lo), min(b, hi)) for a, b in self.pool.allocatable(entry) if a <= hi and b >= lo]
            back = subtract(inside, busy)
            if back:
                self.free[i] = IntervalSet(normalise([*self.free[i].intervals(), *back]))
                freed = True
        return freed

    def is_covered(self, ip: int) -> bool:
        return any(lo <= ip <= hi for lo, hi in self.covered)

    def is_withheld(self, ip: int) -> bool:
        i = bisect.bisect_right(self.withheld, (ip, float("inf"))) - 1
        return i >= 0 and self.withheld[i][0] <= ip <= self.withheld[i][1]

    @property
    def all_withheld(self) -> bool:
        """Whether earlier pools own every address this one could hand out (so it hands out none)."""
        return bool(self.withheld) and not any(subtract(self.pool.usable(e), self.withheld) for e in self.pool.entries)

    @property
    def free_count(self) -> int:
        return sum(f.size for f in self.free)

    # -- choosing --------------------------------------------------------

    def allocate(self, claim: str, requested: str | None = None,
                 name_taken: Callable[[int], bool] = lambda ip: False,
                 kept_as: tuple[str, str] | None = None, avoid: list[tuple[int, int]] = (),
                 passed_over: set[int] | None = None) -> Grant:
        """Choose an address for ``claim`` and mark it held.

        ``requested`` is the claim's ``ipAddress`` annotation. ``name_taken``
        says whether the IPAddress name of an address is already used by an
        object this pool does not know of (another pool with the same
        namePrefix): such addresses are skipped, not fought over.
        ``kept_as`` is the claim's (kind, name): a requested IP kept for another claim is refused.
        ``avoid``: spans withheld from this claim only (a global pool's claim of a namespace whose pools own
        part of it: see ``overlap``).
        ``passed_over``: given for a claim whose ``name_taken`` says what is in use for some claims only (a global
        pool's, in the claim's namespace): the IPs found so for such claims, which it skips, and to which it adds
        those it finds; they are not taken, and stay free for the pool's other claims.
        """
        held = self.pool.preallocations.get(claim)
        if held is not None:
            return self._exact(claim, held, requested, name_taken, preallocated=True, kept_as=kept_as, avoid=avoid)
        if requested is not None:
            try:
                ip = parse_ip(requested)
            except AddressError:
                raise AllocationError(ALLOCATION_FAILED,
                                      f"requested address {requested!r} (annotation ipAddress) is not an IP address") from None
            if ip.version != self.pool.version:
                raise AllocationError(ALLOCATION_FAILED,
                                      f"requested address {requested} is IPv{ip.version}, the pool is IPv{self.pool.version}")
            unit = self.pool.unit_of(int(ip))
            if self.pool.address_of(unit) != ip:
                raise AllocationError(ALLOCATION_FAILED, f"requested address {requested} is not the base address "
                                                         f"of a /{self.pool.unit_length} sub-prefix")
            return self._exact(claim, unit, None, name_taken, preallocated=False, kept_as=kept_as, avoid=avoid)
        return self._next(name_taken, normalise(avoid), passed_over)

    def reclaim(self, claim: str, ip: int, name_taken: Callable[[int], bool], kept_as: tuple[str, str],
                avoid: list[tuple[int, int]] = (), written_over: bool = False) -> Grant:
        """The IP a claim held before its address objects were deleted, if it may have it again.

        Kept or not: which of the claims naming it may have it is the caller's to say; and, with
        ``written_over``, that what holds it in the pool holds it from no claim whose status names it.
        """
        return self._exact(claim, ip, None, name_taken, preallocated=False, kept_as=self.kept.get(ip, kept_as),
                           what="its address", avoid=avoid, overlooked=written_over)

    def never_for(self, claim: str, ip: int, kept: bool = False) -> str | None:
        """Why the pool would never hand ``ip`` to ``claim`` (see ``never_for``)."""
        return never_for(self.pool, self.withheld, claim, ip, kept)

    def _exact(self, claim: str, ip: int, requested: str | None, name_taken: Callable[[int], bool],
               preallocated: bool, kept_as: tuple[str, str] | None = None, what: str = "requested address",
               avoid: list[tuple[int, int]] = (), overlooked: bool = False) -> Grant:
        text = ip_text(self.pool.address_of(ip))
        if preallocated and requested is not None:
            try:
                same = int(parse_ip(requested)) == ip
            except AddressError:
                same = False
            if not same:
                raise AllocationError(ALLOCATION_FAILED,
                                      f"conflict: claim {claim} is preallocated {text} but its ipAddress annotation asks for {requested}")
        keeper = self.kept.get(ip)
        # A kept IP stays its keeper's, also when a preallocation (an edit past the webhook) names another claim.
        why = self.never_for(claim, ip, kept=keeper is not None and keeper == kept_as)
        if why is not None:
            raise AllocationError(ALLOCATION_FAILED, f"{what} {text} {why}")
        if any(lo <= ip <= hi for lo, hi in avoid):
            raise AllocationError(ALLOCATION_FAILED, f"{what} {text} is withheld: another pool it "
                                                     "overlaps, under locks of another name, owns it")
        entry = self.pool.entry_of(ip)
        what = "preallocated address" if preallocated else what
        if (ip in self.held and not overlooked) or self.is_covered(ip) or name_taken(ip):
            raise AllocationError(ALLOCATION_FAILED, f"{what} {text} is already in use")
        if keeper is not None and keeper != kept_as and not (preallocated and keeper[1] == claim):
            raise AllocationError(ALLOCATION_FAILED, f"{what} {text} is kept for {' '.join(keeper)}, whose status names "
                                                     "it and whose address objects were deleted")
        self.hold(ip)
        return Grant(self.pool.address_of(ip), entry, ip)

    def _next(self, name_taken: Callable[[int], bool], avoid: list[tuple[int, int]] = (),
              passed_over: set[int] | None = None) -> Grant:
        if avoid or passed_over:
            return self._next_outside(name_taken, avoid, passed_over)
        for entry, free in zip(self.pool.entries, self.free):
            while free:
                if self.pool.strategy == "random":
                    ip = free.nth(self.rng.randrange(free.size))
                else:
                    ip = free.first()
                if passed_over is not None and name_taken(ip):
                    passed_over.add(ip)
                    return self._next_outside(name_taken, avoid, passed_over)
                self.hold(ip)
                if passed_over is not None or not name_taken(ip):
                    return Grant(self.pool.address_of(ip), entry, ip)
        raise AllocationError(POOL_EXHAUSTED, "no free address left in the pool")

    def _next_outside(self, name_taken: Callable[[int], bool], avoid: list[tuple[int, int]],
                      passed_over: set[int] | None = None) -> Grant:
        """``_next`` for a claim some spans are withheld from, or some IPs passed over: chosen from each entry's
        free intervals less those (O(k) for k free intervals: only such claims pay it), the others left free
        for the rest."""
        withheld, avoid = bool(avoid), normalise([*avoid, *((ip, ip) for ip in passed_over or ())])
        for entry, free in zip(self.pool.entries, self.free):
            while True:
                allowed = subtract(list(free.intervals()), avoid)
                size = sum(hi - lo + 1 for lo, hi in allowed)
                if not size:
                    break
                index = self.rng.randrange(size) if self.pool.strategy == "random" else 0
                for lo, hi in allowed:
                    if index <= hi - lo:
                        ip = lo + index
                        break
                    index -= hi - lo + 1
                if passed_over is not None and name_taken(ip):
                    passed_over.add(ip)
                    avoid = normalise([*avoid, (ip, ip)])
                    continue
                self.hold(ip)
                if passed_over is not None or not name_taken(ip):
                    return Grant(self.pool.address_of(ip), entry, ip)
        if not withheld:
            raise AllocationError(POOL_EXHAUSTED, "no free address left in the pool")
        raise AllocationError(POOL_EXHAUSTED, "no free address left in the pool for a claim of this namespace: the "
                                              "rest is owned by pools of the namespace it overlaps")
