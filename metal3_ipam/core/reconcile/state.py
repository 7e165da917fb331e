"""What one pass over a pool holds while it decides (``PassState``): its snapshot, the ledger, the plan being
made, the pool read, and the questions every part of the pass asks of a claim (paused? waiting for a Cluster?
holding anything?)."""

from __future__ import annotations

from typing import Any

from .. import kinds
from .. import objects as o
from ..actions import Plan
from ..ledger import Ledger
from .. import poolkind
from ..pool import Pool
from ..problems import Problem, errors
from .elsewhere import cluster_of
from .pieces import _bounded
from .snapshot import Snapshot


class PassState:
    """What one pass holds, and the questions every part of it asks; the parts of the pass build on it."""

    def __init__(self, snap: Snapshot, ledger: Ledger, model: tuple[Pool | None, list[Problem]],
                 status_due: bool = True) -> None:
        self.snap = snap
        self.ledger = ledger
        self.status_due = status_due
        self.plan = Plan()
        self.pool_obj = snap.pool
        self.kind = poolkind.REGISTRY[snap.pool_kind]
        self.finalizers = self.kind.finalizers
        self.pool: Pool | None = None
        self.pool_problem: str | None = None
        if snap.pool is not None:
            pool, problems = model
            self.pool = pool
            if pool is None:
                first = errors(problems)[0]
                self.pool_problem = _bounded(f"{first.field}: {first.message} (value: {first.value!r})")
        self.allocator = ledger.allocator
        # Locks being created this pass for allocations adopted as they are.
        self.adopting = 0
        # Units of the pool the claim being allocated for could not be given, their lock's name being held by
        # an IPAddress of another IP (``NAME_COLLISION``), with that IPAddress.
        self.collisions: dict[int, dict] = {}
        # Of a pool of cluster scope, by claim namespace: the units its claims there could not be given, in use by
        # what the pool's own addresses do not show (``held_elsewhere``, which looks in the claim's namespace):
        # passed over, not taken, they stay free for its claims of other namespaces (and its count of free ones).
        self.passed_over: dict[str, set[int]] = {}
        # Sub-prefixes an allocation passed over as holding too many IPs of global pools to guard.
        self.unguardable: set[int] = set()
        # By namespace (a global pool's pass serves claims of many): the claims of the other side (of global pools
        # for a namespaced pool, of the namespace's pools for a global one) whose pass may be on its way, read once
        # (``guards``): all, and those not paused; and the namespaces where an allocation of this pass writes them
        # already.
        self._waiting: dict[str, list[dict]] = {}
        self._in_flight: dict[str, list[dict]] = {}
        self.fenced: set[str] = set()
        # The claims of the other side whose naming of no readable time this pass stamps (``Guards.stamp``).
        self.stamped: set[o.ClaimKey] = set()
        # The claims whose guards the allocation being written lets go by time (``Guards.guard_actions``).
        self.letting_go: set[o.ClaimKey] = set()
        # Claims given an allocation key this pass (a kind with ``outside``).
        self.keyed: dict[o.ClaimKey, str] = {}
        # The pool's claims by the allocation key they carry, read once a pass needs them.
        self._carriers: dict[str, list[dict]] | None = None
        # What the outside IPAM had answered when the pass started (``outside.Answers``), for a kind with ``outside``.
        self.answers: Any = None
        # The Clusters (``namespace/name``) whose claims' addresses this pass found naming another copy of this
        # pool of cluster scope, moved in by ``clusterctl move`` (``elsewhere``).
        self.moved_in: set[str] = set()

    def note_moved_in(self, mirror: dict, claim: dict | None) -> None:
        """A Cluster API IPAddress of a global pool that names its claim as owner and this pool by another uid,
        or not at all, is a copy ``clusterctl move`` made of an address of another management cluster's pool of
        that name (the pool existed here: clusterctl did not create it, and writes the uid it read there or,
        as clusterctl v1.13 does, no reference to it): its claim's Cluster moved in (``elsewhere``). Addresses this
        controller or a Go IPAM provider write name the pool here; one written by hand names no claim."""
        pool = self.pool_obj
        if claim is None or not self.kind.cluster_scoped or pool is None:
            return
        owners = o.owner_references(mirror)
        to_pool = [r for r in owners if r.get("name") == o.name(pool) and r.get("kind") == pool.get("kind")]
        to_claim = any(r.get("kind") == claim.get("kind") and r.get("name") == o.name(claim) for r in owners)
        if to_claim and (not to_pool or any(r.get("uid") != o.meta(pool).get("uid") for r in to_pool)):
            cluster = cluster_of(claim)
            if cluster is not None:
                self.moved_in.add(cluster)

    def claim_key_of(self, address: dict, key: o.ClaimKey | None) -> o.ClaimKey | None:
        return self.ledger.claim_key_of(address, key)

    def claim_paused(self, claim: dict) -> bool:
        """Paused itself, or its own Cluster is (named by label, or spec.clusterName on v1beta2), or the watch
        filter leaves it to another controller."""
        return o.is_paused(claim) or self.cluster_paused(o.namespace(claim), o.cluster_name_of(claim)) \
            or self.filtered_out(claim)

    def filtered_out(self, obj: dict | None) -> bool:
        """Not labelled with the value of --watch-filter (Cluster API's watch label), when there is one."""
        return self.snap.watch_filter is not None and obj is not None \
            and o.labels(obj).get(kinds.WATCH_FILTER_LABEL) != self.snap.watch_filter

    def address_paused(self, address: dict) -> bool:
        """An address goes with its claim; while the claim is unknown, its Cluster label speaks for it."""
        return o.is_paused(address) or self.cluster_paused(o.namespace(address),
                                                           o.labels(address).get(kinds.CLUSTER_NAME_LABEL))

    def cluster_paused(self, namespace: str, cluster_name: str | None) -> bool:
        return bool(cluster_name) and o.cluster_paused(self.snap.cluster_named(namespace, cluster_name))

    def cluster_gone(self, claim: dict) -> bool:
        """The claim names a Cluster (by label or spec.clusterName) that does not exist (Clusters are watched)."""
        name = o.cluster_name_of(claim)
        return self.snap.clusters_served and name is not None and self.snap.cluster_named(o.namespace(claim), name) is None

    def missing_cluster(self, claim: dict | None) -> tuple[str, str] | None:
        """The Cluster (namespace, name) the claim (by label or spec.clusterName) or the pool (its kind's
        cluster_name) belongs to, when it is not known; None when every one is, or Clusters are not served."""
        if not self.snap.clusters_served:
            return None
        names = [(o.namespace(claim), o.cluster_name_of(claim)) if claim is not None else (None, None),
                 (self.snap.namespace, self.kind.cluster_name(self.pool_obj)) if self.pool_obj is not None
                 else (None, None)]
        return next(((ns, str(n)) for ns, n in names if n and self.snap.cluster_named(ns, str(n)) is None), None)

    def pool_text(self) -> str:
        """The pool as messages name it: its kind, and its namespace when it has one."""
        where = "" if self.kind.cluster_scoped else f"{self.snap.namespace}/"
        return f"{self.kind.kind[1]} {where}{self.snap.pool_name}"

    @staticmethod
    def cluster_text(cluster: tuple[str, str]) -> str:
        return f"Cluster {cluster[0]}/{cluster[1]}"

    def holds_anything(self, claim: dict) -> bool:
        key = o.claim_key(claim)
        return bool(self.ledger.addresses_of(key) or self.ledger.mirrors_of(key)) or o.is_deleting(claim)

    def lock_namespace(self, claim: dict) -> str:
        """Where the lock of a claim's IP is: the pool's namespace, or for a pool of cluster scope the one
        namespace of every such lock (a lock per claim's namespace would guard nothing across namespaces)."""
        return self.snap.namespace or self.snap.lock_namespace
