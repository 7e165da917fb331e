"""Claims of a global pool that live in another management cluster: what a ``clusterctl move`` of only some of
its Clusters leaves, read and said on the pool as its ``ClaimsElsewhere`` condition (``Elsewhere``).

A global pool is never deleted from the source of a move, and is created in the target unless one of its name is
there: moving some of its Clusters makes one pool two, one in each management cluster, each unaware of the other's
claims. Each side can tell from what it sees:

- the source sees the claims of the moved Clusters deleted for the move
  (``clusterctl.cluster.x-k8s.io/delete-for-move``): their Clusters **moved away**;
- the target, where the pool existed already, sees the copies of their addresses name the source pool's uid, or
  no pool at all (clusterctl does not create the pool there): their Clusters **moved in** from another copy of
  the pool. Where clusterctl created the pool in the target, nothing there tells; the source's condition does.

The condition is the record: a controller started afresh reads the Clusters back from it. A Cluster moved away is
dropped once a claim of it is bound here again (moved back); one moved in, once no claim of it is left here
(deleted, or moved away again, which the condition then says). A Cluster seen moving in while the condition says
it moved away is coming back, not moving in. Removing the condition from the pool's status
by hand drops what it names.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from .. import objects as o

CLAIMS_ELSEWHERE = "ClaimsElsewhere"
MOVED_AWAY, MOVED_IN, MOVED_AWAY_AND_IN = "ClaimsMovedAway", "ClaimsMovedIn", "ClaimsMovedAwayAndIn"
MAX_NAMED = 20  # Clusters named per list; the rest are counted (and not read back)

_AWAY = re.compile(r"moved to another management cluster with their Clusters \[([^\]]*)\]")
_IN = re.compile(r"claims of Clusters \[([^\]]*)\] moved in from another management cluster")


def cluster_of(claim: Mapping[str, Any]) -> str | None:
    """The claim's own Cluster as ``namespace/name`` (a global pool's claims are of many namespaces), or None."""
    name = o.cluster_name_of(claim)
    return f"{o.namespace(claim)}/{name}" if name else None


def _names(found: re.Match | None) -> frozenset[str]:
    return frozenset(n for n in (found.group(1).split(", ") if found else ()) if n)


def _listed(names: Iterable[str]) -> str:
    ordered = sorted(names)
    more = f" and {len(ordered) - MAX_NAMED} more" if len(ordered) > MAX_NAMED else ""
    return "[" + ", ".join(ordered[:MAX_NAMED]) + "]" + more


@dataclass(frozen=True)
class Elsewhere:
    """The Clusters whose claims of the pool moved away from this management cluster, and those whose claims
    moved in from another's copy of the pool."""

    away: frozenset[str] = frozenset()
    moved_in: frozenset[str] = frozenset()

    def __bool__(self) -> bool:
        return bool(self.away or self.moved_in)

    @staticmethod
    def read(status: Mapping[str, Any]) -> "Elsewhere":
        """What the pool's ``ClaimsElsewhere`` condition names."""
        found = o.condition(status, CLAIMS_ELSEWHERE)
        message = found.get("message") if found and found.get("status") == "True" else None
        if not isinstance(message, str):
            return Elsewhere()
        return Elsewhere(_names(_AWAY.search(message)), _names(_IN.search(message)))

    def seen(self, away: Iterable[str], moved_in: Iterable[str]) -> "Elsewhere":
        """With the Clusters seen leave for a move and those seen arrive from another copy of the pool; one
        that arrives while said to have moved away is coming back (it is said to have moved away until a claim
        of it is bound here, ``settled``)."""
        left = self.away | frozenset(away)
        return Elsewhere(left, self.moved_in | (frozenset(moved_in) - left))

    def settled(self, claims: Iterable[Mapping[str, Any]], bound) -> "Elsewhere":
        """Without the Clusters moved away that have a claim bound here again (``bound(claim)``), nor those moved
        in that have no claim left here. Costs one walk over the claims, only while it names some."""
        if not self:
            return self
        present: set[str] = set()
        back: set[str] = set()
        for claim in claims:
            cluster = cluster_of(claim)
            if cluster is None or o.deleted_for_move(claim):
                continue
            present.add(cluster)
            if cluster in self.away and not o.is_deleting(claim) and bound(claim):
                back.add(cluster)
        return Elsewhere(self.away - back, self.moved_in & present)

    def reason(self) -> str:
        return MOVED_AWAY_AND_IN if self.away and self.moved_in else MOVED_AWAY if self.away else MOVED_IN

    def message(self) -> str:
        said = []
        if self.away:
            said.append("claims of this pool moved to another management cluster with their Clusters "
                        + _listed(self.away))
        if self.moved_in:
            said.append(f"claims of Clusters {_listed(self.moved_in)} moved in from another management cluster's "
                        "copy of this pool")
        return ("; ".join(said) + " (clusterctl move): that copy and this pool are two pools, each unaware of "
                "the other's claims, so either may hand out an IP a claim of the other holds; let only one of them "
                "hand out addresses, or give each its own range")

    def news(self, before: "Elsewhere") -> bool:
        """Whether it names a Cluster ``before`` did not (a Warning Event is due)."""
        return not (self.away <= before.away and self.moved_in <= before.moved_in)
