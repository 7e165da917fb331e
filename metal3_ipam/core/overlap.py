"""Pools whose address sets overlap, where one IP must not go to two claims.

The name ``<namePrefix>-<ip>`` is the lock that keeps an IP from being handed
out twice, so it only guards pools whose locks of one IP have one name in one
namespace. Where two pools that must keep their IPs apart overlap under locks
of different names, one of them owns the overlap and the other withholds it:

- two namespaced pools of a namespace (validation refuses that for IPPools,
  but such pools can exist: created before the webhook ran, or left by
  another IPAM), or two global pools: the pool created first (earliest
  ``creationTimestamp``, then kind, name and namespace) owns it;
- a global pool and a namespaced pool of a namespace where the global pool
  has claims: the namespaced pool owns it, whenever either was created, and
  the global pool withholds it from its claims of that namespace (those of
  other namespaces may have it), decided by the pass that serves such a
  claim: had the earlier pool owned it, a later namespaced pool would only
  learn that it must withhold once it saw the global pool's first claim
  there, and could hand an IP of the overlap out meanwhile (a new Cluster's
  namespace gets its pool and its claims of both pools at once).

Every replica derives the same answer from the same objects, so no lock is
needed. Pools are known by their key (``objects.PoolKey``): two kinds of pool
may share a name.

A global pool annotated ``ipam.metal3.io/separate-network: "true"`` hands out
addresses of a network of its own: its overlaps are shared (both pools hand
them out, and both say so) rather than withheld.
"""

from __future__ import annotations

from dataclasses import dataclass
from collections.abc import Callable, Iterable

from . import kinds
from .intervals import normalise
from .objects import PoolKey, annotations, namespace
from .pool import Pool


@dataclass(frozen=True)
class Withheld:
    """Addresses a pool must not hand out because another pool owns them (addresses, not units: a prefix
    pool withholds every sub-prefix that holds one of them)."""

    first: int
    last: int
    owner: PoolKey    # the pool that owns the overlap; for an overlap shared, the other pool
    owner_prefix: str
    # The pools are separate networks (``SEPARATE_NETWORK_ANNOTATION``): nothing is withheld, the overlap is
    # only shown.
    shared: bool = False


@dataclass(frozen=True)
class PoolFacts:
    key: PoolKey
    created: str      # creationTimestamp, "" when unknown
    pool: Pool
    lock_namespace: str = ""  # where its locks are: its namespace, or for a global pool the lock namespace
    apart: bool = False       # a global pool marked as a separate network

    @property
    def precedence(self) -> tuple[str, tuple[str, str], str, str]:
        return (self.created or "", self.key.kind, self.key.name, self.key.namespace)


def separate_network(pool: dict) -> bool:
    """A global pool (of cluster scope: no namespace) marked as a network of its own: its overlaps are shared,
    not withheld."""
    return not namespace(pool) and annotations(pool).get(kinds.SEPARATE_NETWORK_ANNOTATION) == "true"


def address_spans(pool: Pool) -> list[tuple[int, int]]:
    """The addresses a pool may hand out, as address spans (a prefix pool's units are sub-prefixes: each
    spans every address of its sub-prefix)."""
    bits = pool.unit_bits
    return normalise((lo << bits, ((hi + 1) << bits) - 1) for entry in pool.entries for lo, hi in pool.usable(entry))


def locks_meet(a: Pool, b: Pool) -> bool:
    """Pools whose locks of one address have one name: the name lock guards them, nothing is withheld."""
    return a.name_prefix == b.name_prefix and a.unit_length == b.unit_length and a.lock_tag == b.lock_tag


def _locks_meet(a: PoolFacts, b: PoolFacts) -> bool:
    """Pools whose locks of one address have one name in one namespace: the name lock guards them, nothing
    is withheld."""
    return a.lock_namespace == b.lock_namespace and locks_meet(a.pool, b.pool)


def withheld_by_pool(pools: Iterable[PoolFacts],
                     compared: Callable[[PoolFacts, PoolFacts], bool] = lambda a, b: True,
                     ) -> dict[PoolKey, list[Withheld]]:
    """For each pool, the parts of its address set that another pool with other locks owns, and those it
    shares with a pool it overlaps where either is a separate network (``Withheld.shared``). The pools
    given must keep their IPs apart from each other, every two that ``compared`` says.

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
            if other.key == facts.key or _locks_meet(other, facts) or not compared(other, facts):
                continue
            first, last = max(lo, other_lo), min(hi, other_hi)
            if facts.apart or other.apart:
                for one, two in ((facts, other), (other, facts)):
                    result.setdefault(one.key, []).append(Withheld(first, last, two.key, two.pool.name_prefix, True))
                continue
            earlier, later = _owner_first(facts, other)
            result.setdefault(later.key, []).append(
                Withheld(first, last, earlier.key, earlier.pool.name_prefix))
        active.append(span)
    return {key: _in_order(items) for key, items in result.items()}


def _owner_first(a: PoolFacts, b: PoolFacts) -> tuple[PoolFacts, PoolFacts]:
    """Which of two overlapping pools owns the overlap, and which withholds it: the one created first, but of
    a namespaced pool and a global one, the namespaced pool (see the module's doc)."""
    if bool(a.key.namespace) != bool(b.key.namespace):
        return (a, b) if a.key.namespace else (b, a)
    return (a, b) if a.precedence <= b.precedence else (b, a)


def _in_order(items: Iterable[Withheld]) -> list[Withheld]:
    return sorted(set(items), key=lambda w: (w.first, w.last, tuple(w.owner), w.shared))


def merged(*parts: Iterable[Withheld]) -> list[Withheld]:
    """What a pool withholds and shares, from several comparisons (a global pool is compared with the pools
    of every namespace): each once, in order."""
    return _in_order(w for part in parts for w in part)


def withheld_spans(items: Iterable[Withheld]) -> list[Withheld]:
    """The parts a pool must not hand out (not those it only shares)."""
    return [w for w in items if not w.shared]
