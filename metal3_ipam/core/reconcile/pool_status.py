"""The pool's own metadata (finalizer, its Cluster's labels and owner reference) and status: counts,
``status.indexes`` and the conditions naming overlapping pools and the claims in conflict (``PoolStatus``)."""

from __future__ import annotations

from collections.abc import Generator, Mapping
from typing import Any

from .. import kinds
from .. import objects as o
from ..actions import Event, SetMetadata, SetStatus
from ..overlap import Withheld, withheld_spans
from .. import poolkind
from ..kept import bound_ip
from .conditions import ADDRESS_CONFLICT, DUPLICATE_ADDRESS, READY, WAITING_FOR_CLUSTER, _condition, _lacks_only
from .elsewhere import CLAIMS_ELSEWHERE, Elsewhere
from .pieces import _bounded, _span_text, _with_finalizer, _without_finalizer
from .state import PassState


OVERLAPPING = "Overlapping"
OVERLAPS_OTHER_POOL = "OverlapsOtherPool"
CONFLICTING = "AddressesConflicting"
DUPLICATES = "DuplicateAddresses"


def _is_cluster_ref(ref: Mapping[str, Any], cluster_name: str) -> bool:
    return (ref.get("kind") == "Cluster" and kinds.group_of(str(ref.get("apiVersion", ""))) == kinds.CLUSTER_GROUP
            and ref.get("name") == cluster_name)


class PoolStatus(PassState):
    """The pool's own metadata and status."""

    def pool_metadata(self) -> None:
        pool = self.pool_obj
        # One step for all the pool's own writes, status last: run as separate
        # steps, the status write would overtake a conditional metadata write
        # and make it fail.
        step = self.pool_step = self.plan.step(self.pool_text(), about=o.ref(pool))
        ref = o.ref(pool)
        finalizer = self.finalizers.pool
        if o.is_deleting(pool):
            in_use = len(self.ledger.addresses) + len(self.ledger.capi_addresses)
            unreleased = self.release_waiting_keys() if self.kind.outside is not None else []
            held = self.snap.answers.held((o.namespace(pool), o.name(pool)), o.meta(pool).get("uid")) \
                if self.kind.outside is not None and self.snap.answers is not None else None
            if finalizer in o.finalizers(pool) and not in_use and not unreleased and not held:
                step.add(_without_finalizer(pool, finalizer))
            elif in_use:
                self.plan.notes.append(f"{self.kind.kind[1]} {o.name(pool)} waits for {in_use} address(es) to go")
            if unreleased:
                self.plan.notes.append(f"{self.kind.kind[1]} {o.name(pool)} waits for its IPAM to release what it "
                                       f"holds for {len(unreleased)} key(s) of claims holding no address")
            if held and not in_use and not unreleased:
                self.plan.notes.append(f"{self.kind.kind[1]} {o.name(pool)} {held}")
            return
        if finalizer not in o.finalizers(pool):
            step.add(_with_finalizer(pool, finalizer))
        cluster_name = self.kind.cluster_name(pool)
        if not cluster_name:
            return
        # As the Go Metal3 IPAM labels a pool of a Cluster: its Cluster and this provider.
        wanted_labels = {kinds.CLUSTER_NAME_LABEL: cluster_name, kinds.PROVIDER_LABEL: kinds.PROVIDER_NAME}
        current_labels = o.labels(pool)
        labels = {k: v for k, v in wanted_labels.items() if current_labels.get(k) != v} or None
        owners = None
        cluster = self.snap.cluster
        if cluster is not None:
            wanted = {"apiVersion": cluster.get("apiVersion"), "kind": "Cluster",
                      "name": o.name(cluster), "uid": o.meta(cluster).get("uid")}
            current = o.owner_references(pool)
            others = [r for r in current if not _is_cluster_ref(r, cluster_name)]
            mine = [r for r in current if _is_cluster_ref(r, cluster_name)]
            if len(mine) != 1 or {k: mine[0].get(k) for k in wanted} != wanted or mine[0].get("controller"):
                owners = tuple(others + [wanted])
        if labels or owners:
            step.add(SetMetadata(ref, labels=labels, owner_references=owners,
                                 resource_version=o.meta(pool).get("resourceVersion")))

    def pool_status(self) -> Generator[None, None, None]:
        """The pool's status: counts, conditions and ``status.indexes``.

        Counts are the ledger's: O(k) for the k IPs the pass allocated or passed
        over. ``status.indexes`` is kept in order by
        the ledger (``indexes.StatusIndex``): a build costs the claims whose
        binding changed and the walk to the cut, and the write is a patch of
        up to 256 KiB. It is built only when the bindings or the pool changed
        since the status was last found current, and, with ``status_due``
        false, a write that would change only counts and indexes is put off
        (the controller writes them at most about once a second per pool): a
        claim's own status write is in its own step and never waits for the pool's.
        """
        pool = self.pool_obj
        ledger = self.ledger
        current = o.status(pool)
        counts: dict[str, Any] = {}
        if self.pool is not None:
            counts = self.kind.status(poolkind.Counts(self.pool.capacity(), ledger.allocated, ledger.free))
            ready = _condition(current, READY, "True", "PoolReady", "the pool can hand out addresses", self.snap.now)
            if self.allocator.all_withheld:
                ready = _condition(current, READY, "False", OVERLAPS_OTHER_POOL,
                                   _bounded("no address is handed out from this pool: every one is also in another "
                                            "pool that owns it, under locks of another name: "
                                            + self.withheld_text()), self.snap.now)
        else:
            ready = _condition(current, READY, "False", "InvalidSpec", self.pool_problem, self.snap.now)
        missing = self.missing_cluster(None)
        if missing is not None and self.pool is not None:
            ready = _condition(current, READY, "False", WAITING_FOR_CLUSTER,
                               f"{self.cluster_text(missing)} (spec.clusterName) not found: no address is "
                               "handed out until it exists", self.snap.now)
        if o.is_deleting(pool):
            ready = _condition(current, READY, "False", "Deleting", "the pool is being deleted", self.snap.now)
        conditions = [ready]
        overlapping = self.overlap_condition(current)
        if overlapping is not None:
            conditions.append(overlapping)
        conflicting = self.conflict_condition(current)
        if conflicting is not None:
            conditions.append(conflicting)
        duplicates = self.duplicates_condition(current)
        if duplicates is not None:
            conditions.append(duplicates)
        said, elsewhere = self.claims_elsewhere(current)
        if elsewhere:
            conditions.append(_condition(current, CLAIMS_ELSEWHERE, "True", elsewhere.reason(), _bounded(
                elsewhere.message()), self.snap.now))
        checked = (id(pool), o.meta(pool).get("resourceVersion"), ledger.bound_version, ledger.conflicts_version,
                   tuple(counts.items()), elsewhere)
        if checked == ledger.status_clean:
            return
        if not self.status_due and current.get("conditions") == conditions:
            ledger.status_pending = True
            return
        desired: dict[str, Any] = {}
        if self.kind.indexes:
            desired["indexes"], omitted = yield from ledger.index.build(ledger.bound)
            if omitted:
                desired["indexesOmitted"] = omitted
        desired.update(counts)
        desired["conditions"] = conditions
        ledger.status_pending = False
        comparable = {k: current.get(k) for k in desired}
        if comparable == desired and _lacks_only(current, desired):
            ledger.status_clean = checked
            return
        if self.kind.indexes:  # Metal3's status.lastUpdated, with its indexes
            desired["lastUpdated"] = self.snap.now
        self.pool_step.add(SetStatus(o.ref(pool), desired))
        before = o.condition(current, OVERLAPPING)
        if overlapping is not None and (before or {}).get("message") != overlapping["message"]:
            kind = "Warning" if overlapping["reason"] == OVERLAPS_OTHER_POOL else "Normal"
            self.pool_step.add(Event(o.ref(pool), kind, overlapping["reason"], overlapping["message"]))
        if elsewhere.news(said):
            self.pool_step.add(Event(o.ref(pool), "Warning", elsewhere.reason(), _bounded(elsewhere.message())))

    def claims_elsewhere(self, current: Mapping[str, Any]) -> tuple[Elsewhere, Elsewhere]:
        """For a global pool: the Clusters its condition named, and those whose claims of it live in another
        management cluster now (``elsewhere``). Under ``-n`` each controller sees the claims of its namespaces
        only, and says nothing."""
        if not self.kind.cluster_scoped or not self.snap.serves_every_namespace or o.is_deleting(self.pool_obj):
            return Elsewhere(), Elsewhere()
        before = Elsewhere.read(current)
        now = before.seen(self.snap.left_for_move, self.moved_in)
        if not now:
            return before, now
        found = (now, self.ledger.claims_version)
        cached = self.ledger.elsewhere
        if cached is None or cached[0] != found:  # a walk over the claims, only when one changed
            cached = self.ledger.elsewhere = (found, now.settled(self.ledger.claims.values(),
                                                                  lambda claim: bound_ip(claim) is not None))
        return before, cached[1]

    def overlap_condition(self, current: Mapping[str, Any]) -> dict | None:
        """Where another pool under other locks owns part of this one, a pool of a separate network shares
        part of it, or a global pool does not hand part of it to its claims of this namespace, say so."""
        found = self.snap.withheld if self.pool is not None else []
        yielded = self.snap.yielded if self.pool is not None else []
        if not found and not yielded:
            return None
        withheld, shared = withheld_spans(found), [w for w in found if w.shared]
        said = []
        if withheld:
            said.append("addresses also in another pool that owns them (the one created first), under locks of "
                        "another name, are not handed out from this pool: "
                        + "; ".join(self.overlap_text(w, f", namePrefix {w.owner_prefix}") for w in withheld))
        if shared:
            said.append(f"addresses shared with a pool it overlaps, one of them marked as a separate network "
                        f"({kinds.SEPARATE_NETWORK_ANNOTATION}), are handed out by both: "
                        + "; ".join(self.overlap_text(w) for w in shared))
        if yielded:
            said.append("addresses also in a global pool with claims in this namespace are this pool's: the global "
                        "pool does not hand them to its claims here: " + "; ".join(self.overlap_text(w) for w in yielded))
        reason = OVERLAPS_OTHER_POOL if withheld else "SharesAddresses" if shared else "OverlapsGlobalPool"
        return _condition(current, OVERLAPPING, "True", reason, _bounded("; ".join(said)), self.snap.now)

    def overlap_text(self, w: Withheld, more: str = "") -> str:
        owner = w.owner
        name = owner.name if owner.namespace in ("", self.snap.namespace) else f"{owner.namespace}/{owner.name}"
        return f"{_span_text(w.first, w.last, self.pool.version)} ({owner.kind[1]} {name}{more})"

    def withheld_text(self) -> str:
        """What other pools own of this one: each span with the pool that owns it."""
        return "; ".join(self.overlap_text(w, f", namePrefix {w.owner_prefix}") for w in withheld_spans(self.snap.withheld))

    def conflict_condition(self, current: Mapping[str, Any]) -> dict | None:
        """Where claims of the pool have an address object they do not take up, say which (each claim says why)."""
        conflicts = self.ledger.conflicts
        if not conflicts or (self.kind.cluster_scoped and not self.snap.serves_every_namespace):
            return None  # under ``-n`` each controller of a pool of cluster scope sees the claims of its namespaces
        shown = sorted(conflicts.values())[:8]
        more = f"; and {len(conflicts) - len(shown)} more" if len(conflicts) > len(shown) else ""
        message = _bounded(f"{len(conflicts)} claim(s) of the pool have an address object that is not taken up, "
                           "its IP being another's or one the pool could not hand out: " + "; ".join(shown) + more)
        return _condition(current, CONFLICTING, "True", ADDRESS_CONFLICT, message, self.snap.now)

    def duplicates_condition(self, current: Mapping[str, Any]) -> dict | None:
        """Where claims of the pool hold an IP a pool it keeps its IPs apart from holds for another claim too,
        say which (each claim says it too, with a Warning Event)."""
        doubles = self.ledger.doubles
        if not doubles or (self.kind.cluster_scoped and not self.snap.serves_every_namespace):
            return None
        shown = sorted(doubles.values())[:8]
        more = f"; and {len(doubles) - len(shown)} more" if len(doubles) > len(shown) else ""
        message = _bounded(f"{len(doubles)} claim(s) of the pool hold an IP that a claim of an overlapping pool holds "
                           "too: " + "; ".join(shown) + more)
        return _condition(current, DUPLICATES, "True", DUPLICATE_ADDRESS, message, self.snap.now)
