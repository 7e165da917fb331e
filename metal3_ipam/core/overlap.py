"""Pools of one namespace whose address sets overlap.

The name ``<namePrefix>-<ip>`` is the lock that keeps an IP from being handed
out twice, so it only guards pools that share a namePrefix. Where two pools of
a namespace with different prefixes overlap (validation refuses that, but such
pools can exist: created before the webhook ran, or left by another IPAM), the
overlapping addresses belong to the pool that came first — earliest
``creationTimestamp``, then kind and name — and the other pool withholds
them. Every replica derives the same answer from the same objects, so no
lock is needed. Pools are known by their key (``objects.PoolKey``): two
kinds of pool may share a name.
"""

from __future__ import annotations

from dataclasses import dataclass
from collections.abc import Iterable

from .intervals import normalise
from .objects import PoolKey
from .pool import Pool


@dataclass(frozen=True)
class Withheld:
    """Addresses a pool must not hand out because an earlier pool owns them (addresses, not units: a prefix
    pool withholds every sub-prefix that holds one of them)."""

    first: int
    last: int
    owner: PoolKey    # the earlier pool
    owner_prefix: str


@dataclass(frozen=True)
class PoolFacts:
    key: PoolKey
    created: str      # creationTimestamp, "" when unknown
    pool: Pool

    @property
    def precedence(self) -> tuple[str, tuple[str, str], str]:
        return (self.created or "", self.key.kind, self.key.name)


def address_spans(pool: Pool) -> list[tuple[int, int]]:
    """The addresses a pool may hand out, as address spans (a prefix pool's units are sub-prefixes: each
    spans every address of its sub-prefix)."""
    bits = pool.unit_bits
    return normalise((lo << bits, ((hi + 1) << bits) - 1) for entry in pool.entries for lo, hi in pool.usable(entry))


def locks_meet(a: Pool, b: Pool) -> bool:
    """Pools whose locks of one address have one name: the name lock guards them, nothing is withheld."""
    return a.name_prefix == b.name_prefix and a.unit_length == b.unit_length and a.lock_tag == b.lock_tag


def withheld_by_pool(pools: Iterable[PoolFacts]) -> dict[PoolKey, list[Withheld]]:
    """For each pool, the parts of its address set that an earlier pool with another namePrefix owns.

    A sweep over all spans sorted by start: O(n log n) for n spans, plus the
    overlapping pairs themselves.
    """
    spans = []
    for facts in pools:
        for lo, hi in address_spans(facts.pool):
            spans.append((facts.pool.version, lo, hi, facts))
    spans.sort(key=lambda s: (s[0], s[1], s[2]))
    result: dict[PoolKey, list[Withheld]] = {}
    active: list[tuple[int, int, int, PoolFacts]] = []
    for span in spans:
        version, lo, hi, facts = span
        active = [a for a in active if a[0] == version and a[2] >= lo]
        for _, other_lo, other_hi, other in active:
            if other.key == facts.key or locks_meet(other.pool, facts.pool):
                continue
            first, last = max(lo, other_lo), min(hi, other_hi)
            earlier, later = sorted((facts, other), key=lambda f: f.precedence)
            result.setdefault(later.key, []).append(
                Withheld(first, last, earlier.key, earlier.pool.name_prefix))
        active.append(span)
    return {key: sorted(set(items), key=lambda w: (w.first, w.last, tuple(w.owner))) for key, items in result.items()}
