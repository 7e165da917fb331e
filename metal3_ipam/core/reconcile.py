"""The reconcile step of one pool: what exists, what should, and the writes between.

``reconcile(snapshot)`` looks at a pool, the claims for it (Metal3 IPClaims and
Cluster API IPAddressClaims), the addresses that reference it, and its Cluster,
and returns a ``Plan``. It is pure: ``metal3-ipam plan`` runs it and executes
the plan its own way. The controller runs the same decisions as ``plan_pass``
over the pool's ``Ledger``, kept across passes: for what changed since the
last pass, or for everything (``reconcile`` is that full pass over a ledger
loaded afresh).

What it guarantees, whatever it is shown:
- a claim that has an address keeps it: status is rebuilt from the addresses,
  never allocated anew (this is what makes ``clusterctl move`` safe);
- a claim whose address objects were deleted under it gets the IP its status
  names back (see ``kept``), before any other claim of the pool is served,
  and meanwhile that IP is kept from every other claim. Where it cannot have
  it (the IP left the pool, is reserved, preallocated or held by another
  live claim) it gets a new IP and a Warning Event ``AddressChanged`` naming
  both: whatever runs on the claim must be told, but a machine left without
  any address (an error) would be worse, and CAPM3 reads an IPClaim's error
  as a failed machine;
- a claim gets at most one address: extra ones (a lost race) are removed;
- every new address is a Metal3 IPAddress named ``<namePrefix>-<ip>``, also
  for Cluster API claims, so one name lock guards every allocation (the
  kinds whose pools have no namePrefix name their locks
  ``<pool>.<ip>.<tag>``, a sub-prefix's ``<pool>.<base>.<length>.<tag>``: see
  ``Pool.lock_name``; those of a pool of cluster scope are all in one
  namespace, ``Snapshot.lock_namespace``, so that the lock guards an IP across
  every namespace). A lock is known by its spec (pool, claim, address), never
  by its name: locks an earlier version named otherwise hold as they are. An
  IP whose lock name another IP's address holds is skipped, or the claim told
  so (``NAME_COLLISION``). Written lock, then
  the claim's visible address, then its status; released the other way round;
- a deleted claim's address outlives it until the deadline its pool kind
  derives from the stored objects (``PoolKind.release_after``): both keep
  their finalizers, the IP stays held, and the plan says when to pass again
  (``Plan.due``);
- a Cluster API claim served by an earlier IPAM with only a Cluster API
  IPAddress (the Go Metal3 IPAM names it ``<namePrefix>-<ip>``) keeps that
  address; its lock is created for it, and the pool hands out nothing new
  until every such lock is in place;
- an address object a claim is not bound to yet is taken up only when no
  other claim holds its IP and, written before its claim, the pool could have
  given it that IP; otherwise the claim is told (``AddressConflict``), holds
  nothing and is given nothing else while the address names it (``refusal``);
- an IP that any address of the namespace holds, in any pool and of either
  API, or that lies inside a sub-prefix one holds, is never handed out (nor a
  sub-prefix holding such an IP); where pools with different namePrefixes overlap,
  the overlap belongs to one of them only (see ``overlap``), also across
  namespaces for a global pool;
- a claim whose own Cluster is paused is left alone, whatever its pool;
- a claim whose pool reference was changed away from the pool that gave it
  its address (it is immutable; no webhook stopped the edit) is still this
  pool's (the inventory files it with the pool its addresses are of, shown
  as naming it): it keeps its IP, is released when deleted, and carries a
  ``PoolReferenceChanged`` condition naming both pools, with one Warning Event;
- a claim whose Cluster (its own, or its pool's ``clusterName``) is not
  known is given nothing new until it is: ``clusterctl move`` creates a
  Cluster before its claims, and a claim seen first may still have a moved
  address on its way. Its Ready condition says what it waits for;
- a kind whose addresses an outside IPAM hands out (``PoolKind.outside``)
  asks it only for the allocation key the stored claim carries,
  written with the claim's finalizer before anything is asked; the plan says
  what it wants of each key (``Plan.intents``: want, release, forget) and the
  answers so far are the snapshot's (``Snapshot.answers``): meanwhile the claim
  is pending (Ready=False with the reason), a grant is locked and shown like
  any allocation, a deleted claim's objects and finalizer go only once its key
  is released, a claim deleted for a move is forgotten, never released;
- a claim that cannot be served gets an error in its status and an Event,
  written only when the error changes, and does not stop the next claim;
- nothing is written when nothing changed; a paused pool is left alone.

Events are planned for failures only: every API write counts, and a
successful allocation is already recorded by the IPAddress and the claim's
Ready condition.
"""

from __future__ import annotations

import datetime
import itertools
import random
from contextlib import contextmanager
from dataclasses import dataclass, field
from collections.abc import Callable, Generator, Iterable, Iterator, Mapping
from typing import Any

from . import kinds
from . import objects as o
from .actions import Create, Delete, Event, Plan, SetFinalizers, SetMetadata, SetStatus, Step
from .addresses import ip_from_int
from .allocator import ALLOCATION_FAILED, POOL_NOT_READY, AllocationError
from .asking import Granted, Intent, Refused
from .kept import BOUND_REASON, binds_none, bound_ip, bound_message, named_ip, status_ref
from .ledger import CAPI, METAL3, PLANNED, AddressKey, Ledger, ObjKey
from .naming import address_label, guard_name, ip_text
from .overlap import Withheld, separate_network, withheld_spans
from .several import each
from . import poolkind
from .pool import Pool
from .problems import Problem, errors
from .validation import written_before_its_claim

# A message written into a status or an Event is bounded too.
MAX_MESSAGE = 1024
# The most of a message a pool reference written by a user takes (a pool's own text is at most 340 characters).
MAX_REFERENCE_TEXT = 400

READY = "Ready"
# A claim of a kind whose addresses an outside IPAM hands out, asked and not answered yet.
ALLOCATION_PENDING = "AllocationPending"
OVERLAPPING = "Overlapping"
# The name of the IPAddress locking a claim's IP is another IP's (two Metal3 IPPools' ``<namePrefix>-<ip>``
# names meet: ``a`` + 1:2::5 and ``a-1`` + 2::5), as the Go Metal3 IPAM reports it.
NAME_COLLISION = "IPAddressNameCollision"
# A claim whose pool reference was changed away from the pool that served it, which keeps serving it.
POOL_REFERENCE_CHANGED = "PoolReferenceChanged"
# A claim whose key's outside address is homed in another cluster, whose claim carries the key too.
ADDRESS_HOMED_ELSEWHERE = "AddressHomedElsewhere"
OVERLAPS_OTHER_POOL = "OverlapsOtherPool"
# A claim's address object not taken up (its IP another's, or one its pool could not have handed out), and the
# pool's condition naming every such claim.
ADDRESS_CONFLICT = "AddressConflict"
CONFLICTING = "AddressesConflicting"
# A bound claim whose IP a pool it keeps its IPs apart from holds for another claim too (the pools overlap, and
# the separate-network annotation that let both hand it out was removed), and the pool's condition naming them.
DUPLICATE_ADDRESS = "DuplicateAddress"
DUPLICATES = "DuplicateAddresses"
WAITING_FOR_CLUSTER = "WaitingForCluster"


@dataclass
class Snapshot:
    """Everything one pool's reconcile may look at."""

    namespace: str
    pool_name: str
    pool: dict | None
    cluster: dict | None = None
    claims: list[dict] = field(default_factory=list)          # in the order to serve them
    addresses: list[dict] = field(default_factory=list)       # Metal3 IPAddresses of this pool
    capi_addresses: list[dict] = field(default_factory=list)  # Cluster API IPAddresses of this pool
    # The callbacks name the namespace looked in: the pool's, or for a pool of cluster scope a claim's.
    name_taken: Callable[[str, str], bool] = lambda namespace, name: False  # any IPAddress of that name there
    # The Metal3 IPAddress of that name there, or None (what holds a name ``name_taken`` says is taken).
    address_named: Callable[[str, str], dict | None] = lambda namespace, name: None
    # An address of another pool of the namespace (either API) holds one of the addresses (version, lo..hi):
    # an IP inside the span, or a sub-prefix meeting it; with ``for_keeper``, not counting an address written
    # before its claim that no claim is bound to (``kept.binds_none``).
    held_elsewhere: Callable[..., bool] = lambda namespace, version, lo, hi, for_keeper=False: False
    # The addresses (either API) at (version, ip) of the namespace's other pools that keep an IP unique there
    # (with ``every_pool``: of any other pool), to name what holds an IP.
    held_by_others: Callable[..., list[dict]] = lambda namespace, version, ip, every_pool=False: []
    # A claim of another pool of the namespace has a status naming (version, ip): kept for it (``kept``).
    kept_elsewhere: Callable[[str, int, int], bool] = lambda namespace, version, ip: False
    # What holds (version, ip) for another claim of the namespace in a pool this one keeps its IPs apart from
    # across namespaces, not as a separate network: (pool, "Kind namespace/name" of the claim, address) each.
    held_twice: Callable[[str, int, int], list] = lambda namespace, version, ip: []
    # The Cluster API claims of every namespace and outside IPAM's pool carrying an allocation key.
    claims_carrying: Callable[[str], list[dict]] = lambda key: []
    # The claim (namespace, name) seen leave for ``clusterctl move`` carrying an allocation key, or None: the
    # key's address is that claim's in the move's target.
    moved_away: Callable[[str], tuple[str, str] | None] = lambda key: None
    # Why an allocation key's outside address is homed at another cluster's object that a claim here may not take
    # it from (a claim there carries the key too), or None.
    homed_elsewhere: Callable[[str], str | None] = lambda key: None
    # A Cluster API IPAddress of that name in the namespace, whatever its pool.
    capi_address_named: Callable[[str, str], dict | None] = lambda namespace, name: None
    # The namespace's Cluster of a name, or None: a claim's own Cluster may pause it.
    cluster_named: Callable[[str, str], dict | None] = lambda namespace, name: None
    # Clusters are watched: one not found does not exist (yet). Without Cluster API, none ever does.
    clusters_served: bool = True
    # Parts of the pool's address set that another, overlapping pool owns, or shares with it (``overlap``).
    withheld: list[Withheld] = field(default_factory=list)
    # For a global pool: what it withholds from (or shares with) its claims of a namespace because of the pools
    # there. For a namespaced pool: what global pools with claims in its namespace withhold from them because
    # of it (shown, not withheld).
    withheld_in: Callable[[str], list[Withheld]] = lambda namespace: []
    yielded: list[Withheld] = field(default_factory=list)
    # The pool spec already read (the inventory keeps it per generation); read here when None.
    model: tuple[Pool | None, list[Problem]] | None = None
    # A claim of that (group, kind), namespace and name, or None: whether the claim a guard names lives.
    claim_named: Callable[[tuple[str, str], str, str], dict | None] = lambda kind, namespace, name: None
    # Some global pool whose claims keep their IPs apart from the namespaced pools holds (version, ip) in its
    # address set: a namespaced pool's allocation of it is guarded (``naming.guard_name``).
    global_holds: Callable[[int, int], bool] = lambda version, ip: False
    # Where the locks of a pool of cluster scope live (the controller's namespace): one namespace for all
    # of them, so that the API server's name uniqueness guards each IP across every namespace.
    lock_namespace: str = "default"
    # How long a stored lock of a Cluster API claim without its Cluster API IPAddress is left to whoever made
    # it before this pass writes the address (``LOCK_SETTLE_SECONDS`` in a controller; 0 where one process
    # is all there is: plans, models).
    lock_settle_seconds: int = 0
    # Whether the claims of a namespace are served here (``-n``): an address of a pool of cluster scope whose
    # claim is in a namespace not served is left to the controller that serves it.
    serves: Callable[[str], bool] = lambda namespace: True
    serves_every_namespace: bool = True  # no ``-n``: what a pool of cluster scope shows is all there is
    # --watch-filter: a pool or claim not labelled cluster.x-k8s.io/watch-filter=<this> is not this controller's
    # (left alone as a paused one is: kept, not served); None: every one is.
    watch_filter: str | None = None
    now: str = "1970-01-01T00:00:00Z"
    rng: random.Random | None = None
    pool_kind: tuple[str, str] = kinds.IPPOOL  # the pool's (group, kind), a key of ``poolkind.REGISTRY``
    # For a kind whose addresses an outside IPAM hands out (``poolkind.Outside``): the asks and their answers
    # by key (``core.asking.Asking``: ``result``, ``held_back``, ``released``); None: nothing was asked.
    answers: Any = None


def reconcile(snap: Snapshot) -> Plan:
    """The full reconcile: every claim and address of the pool decided, from a ledger loaded afresh."""
    return run_to_end(plan_pass(Ledger(), snap, full=True))


def run_to_end(pass_: Generator[None, None, Plan]) -> Plan:
    """Run a pass without ever pausing it (the CLI, the tests)."""
    while True:
        try:
            next(pass_)
        except StopIteration as done:
            return done.value


def ident_of(snap: Snapshot) -> tuple:
    """What a ledger of this pool is built from (see ``Ledger.ident_of``)."""
    model = _model(snap)[0]
    return Ledger.ident_of(snap.pool, model, (*snap.withheld, *snap.yielded) if model is not None else ())


def needs_full(ledger: Ledger, snap: Snapshot) -> bool:
    """A pass must load the ledger afresh: it was never loaded, its pool spec or what the pool
    withholds changed, or an earlier pass asked for it (writes failed, the pool was paused)."""
    return ledger.needs_full or ledger.ident != ident_of(snap)


def load(ledger: Ledger, snap: Snapshot) -> Generator[None, None, None]:
    """Load the ledger afresh from every object of ``snap``, in pieces."""
    pool = _model(snap)[0]
    withheld = [(pool.unit_of(w.first), pool.unit_of(w.last)) for w in withheld_spans(snap.withheld)] \
        if pool is not None else []
    ledger.reset(ident_of(snap), pool, withheld, snap.rng, poolkind.REGISTRY[snap.pool_kind].cluster_scoped)
    yield from ledger.load(snap.claims, snap.addresses, snap.capi_addresses)


def plan_pass(ledger: Ledger, snap: Snapshot, changes: Iterable[tuple[ObjKey, dict | None]] = (),
              full: bool = False, max_steps: int | None = None, status_due: bool = True,
              loaded: bool = False) -> Generator[None, None, Plan]:
    """One pass over a pool, as a generator that yields now and then and returns the Plan.

    ``full``: the ledger is loaded from every object of ``snap`` and every claim
    and address is decided. Otherwise ``snap`` need not hold the pool's objects:
    the ledger is told ``changes`` and only what they make dirty is decided.
    Either way the same decisions run. At most ``max_steps`` steps with writes
    are planned; what is left waits in the ledger for the next pass. With
    ``status_due`` false a pool status write that would only change counts and
    indexes is put off (``ledger.status_held``).
    With ``loaded``, a full pass takes the ledger as ``load`` left it (the audit compares it first).
    The caller runs ``ledger.settle()`` once the plan was carried out.
    """
    model = _model(snap)
    if full:
        if not loaded:
            yield from load(ledger, snap)
        claims = list(ledger.claims)
        addresses = itertools.chain(((METAL3, n) for n in list(ledger.addresses)),
                                    ((CAPI, n) for n in list(ledger.capi_addresses)))
    else:
        claims, addresses = ledger.apply(changes)
        # Deleted claims whose address was held until now: nothing changed in the store to say so.
        claims.update((key, None) for key, deadline in list(ledger.due.items()) if _passed(deadline, snap.now))
    plan = yield from _Reconciler(snap, ledger, model, status_due).run(claims, addresses, max_steps)
    plan.due = min(ledger.due.values(), key=_instant, default=None)
    return plan


def _model(snap: Snapshot) -> tuple[Pool | None, list[Problem]]:
    if snap.pool is None:
        return None, []
    return snap.model if snap.model is not None else poolkind.read(snap.pool)


# Decisions between two yields of a pass: about a millisecond of work (the caller
# decides how many such pieces it runs before the event loop gets its turn).
DECISIONS_PER_YIELD = 32


class _Reconciler:
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
        # Claims given an allocation key this pass (a kind with ``outside``).
        self.keyed: dict[o.ClaimKey, str] = {}
        # The pool's claims by the allocation key they carry, read once a pass needs them.
        self._carriers: dict[str, list[dict]] | None = None

    def claim_key_of(self, address: dict, key: o.ClaimKey | None) -> o.ClaimKey | None:
        return self.ledger.claim_key_of(address, key)

    # -- the pass ---------------------------------------------------------------

    def run(self, claim_keys: Iterable[o.ClaimKey], address_keys: Iterable[tuple[str, str]],
            max_steps: int | None) -> Generator[None, None, Plan]:
        ledger = self.ledger
        if self.filtered_out(self.pool_obj):
            self.plan.notes.append("not selected by the watch filter")
            ledger.needs_full = True  # looked at in full once it is
            return self.plan
        if o.cluster_paused(self.snap.cluster) or o.is_paused(self.pool_obj) or _moving(self.pool_obj):
            self.plan.notes.append("paused")
            ledger.needs_full = True  # what changed meanwhile is looked at in full once it resumes
            # But a deleted claim whose Cluster is gone is released: nothing will ever resume it.
            for key in list(claim_keys):
                claim = ledger.claims.get(key)
                if claim is not None and o.is_deleting(claim) and not o.is_paused(claim) \
                        and not _moving(self.pool_obj) and self.cluster_gone(claim):
                    self.serve(claim)
            self.plan.steps = [s for s in self.plan.steps if s.actions]
            return self.plan
        ledger.begin()
        if self.pool_obj is not None:
            self.pool_metadata()
        budget = [max_steps if max_steps is not None else float("inf")]
        decided = 0
        for tag, name in address_keys:
            if budget[0] <= 0:
                ledger.deferred_addresses[(tag, name)] = None
                continue
            address = (ledger.addresses if tag == METAL3 else ledger.capi_addresses).get(name)
            if address is None or self.address_paused(address):
                continue
            with self._counted(budget):
                (self.tend_address if tag == METAL3 else self.tend_capi_address)(address)
            decided += 1
            if decided % DECISIONS_PER_YIELD == 0:
                yield
        holding, waiting = [], []
        for n, key in enumerate(claim_keys, 1):
            claim = ledger.claims.get(key)
            if claim is None:
                ledger.unbind(key)
                ledger.unserved.pop(key, None)
                ledger.awaiting.pop(key, None)
            elif not self.snap.serves(o.namespace(claim)):
                pass  # served elsewhere (``-n``): what it holds or its status keeps is held here all the same
            elif not self.claim_paused(claim) and not self.holds_anything(claim):
                waiting.append(claim)
            else:
                holding.append(claim)
            if n % (4 * DECISIONS_PER_YIELD) == 0:
                yield
        # Claims whose address objects were deleted get their own IP back before any other is served.
        waiting.sort(key=lambda claim: o.claim_key(claim) not in ledger.kept)
        for claim in holding:
            if budget[0] <= 0:
                ledger.deferred_claims[o.claim_key(claim)] = None
                continue
            with self._decision(claim, budget):
                if self.claim_paused(claim):
                    self.remember_binding(claim)
                else:
                    self.serve(claim)
            decided += 1
            if decided % DECISIONS_PER_YIELD == 0:
                yield
        # New addresses only once every adopted allocation holds its lock: an
        # adopted IP is guarded by the allocator here, but by nothing else
        # (another pool sharing the namePrefix, another replica) until then.
        if self.adopting or ledger.deferred_claims:
            if self.adopting:
                self.plan.notes.append(f"{len(waiting)} claim(s) wait until {self.adopting} adopted address(es) hold their lock")
            for claim in waiting:
                ledger.deferred_claims[o.claim_key(claim)] = None
        else:
            for claim in waiting:
                if budget[0] <= 0:
                    ledger.deferred_claims[o.claim_key(claim)] = None
                    continue
                with self._decision(claim, budget):
                    self.serve(claim)
                decided += 1
                if decided % DECISIONS_PER_YIELD == 0:
                    yield
        if self.pool_obj is not None and self.kind.outside is None:  # an outside IPAM's pool: its adapter's
            yield from self.pool_status()
        self.plan.steps = [s for s in self.plan.steps if s.actions]
        return self.plan

    @contextmanager
    def _counted(self, budget: list) -> Iterator[None]:
        """Counts a decision that planned writes against the pass's budget of steps."""
        before = len(self.plan.steps)
        yield
        made = [s for s in self.plan.steps[before:] if s.actions]
        if made:
            budget[0] -= 1
        if len(made) != len(self.plan.steps) - before:
            self.plan.steps[before:] = made  # a big pass makes few steps with writes: keep only those

    @contextmanager
    def _decision(self, claim: dict, budget: list) -> Iterator[None]:
        """A claim decided anew: its binding and its error are what this decision says."""
        key = o.claim_key(claim)
        bound = self.ledger.bound.pop(key, None)
        conflict = self.ledger.conflicts.pop(key, None)
        double = self.ledger.doubles.pop(key, None)
        self.ledger.unserved.pop(key, None)
        self.ledger.awaiting.pop(key, None)
        with self._counted(budget):
            yield
        if self.ledger.bound.get(key) != bound:
            self.ledger.rebound(key)
        if self.ledger.conflicts.get(key) != conflict or self.ledger.doubles.get(key) != double:
            self.ledger.conflicts_version += 1

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

    # -- the pool's own metadata --------------------------------------------

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
            if finalizer in o.finalizers(pool) and not in_use and not unreleased:
                step.add(_without_finalizer(pool, finalizer))
            elif in_use:
                self.plan.notes.append(f"{self.kind.kind[1]} {o.name(pool)} waits for {in_use} address(es) to go")
            if unreleased:
                self.plan.notes.append(f"{self.kind.kind[1]} {o.name(pool)} waits for its IPAM to release what it "
                                       f"holds for {len(unreleased)} key(s) of claims holding no address")
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

    def release_waiting_keys(self) -> list[str]:
        """A pool being deleted names its outside IPAM for the last time (gone, it names no server to ask): the
        key of each claim of it holding no address is released there now, as is a deleted claim's (an
        allocation still out for it, or carried out unanswered, may have made an address). Returns the keys
        not released yet, which keep the pool. A paused claim's key is left alone (its copy may carry it in
        the target of a move) and keeps the pool; a claim deleted for a move carries its key away."""
        unreleased = []
        for claim in self.ledger.claims.values():
            key = self.outside_key(claim)
            if key is None or o.deleted_for_move(claim):
                continue
            if self.claim_paused(claim):
                unreleased.append(key)
            elif (o.is_deleting(claim) or not self.holds_anything(claim)) and not self.released_outside(claim):
                unreleased.append(key)
        return unreleased

    def pool_status(self) -> Generator[None, None, None]:
        """The pool's status: counts, conditions and ``status.indexes``.

        Counts are the ledger's, O(1). ``status.indexes`` is kept in order by
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
            counts = self.kind.status(poolkind.Counts(self.pool.capacity(), ledger.allocated, self.allocator.free_count))
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
        checked = (id(pool), o.meta(pool).get("resourceVersion"), ledger.bound_version, ledger.conflicts_version,
                   tuple(counts.items()))
        if checked == ledger.status_clean:
            return
        if not self.status_due and current.get("conditions") == conditions:
            ledger.status_held = True
            return
        desired: dict[str, Any] = {}
        if self.kind.indexes:
            desired["indexes"], omitted = yield from ledger.index.build(ledger.bound)
            if omitted:
                desired["indexesOmitted"] = omitted
        desired.update(counts)
        desired["conditions"] = conditions
        ledger.status_held = False
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

    # -- addresses whose claim is gone or going --------------------------------

    def tend_address(self, address: dict) -> None:
        key = o.claim_of_address(address)
        self.tend(address, self.claim_key_of(address, key), finalizer=self.finalizers.address[kinds.IPADDRESS],
                  subject=f"IPAddress {o.namespace(address)}/{o.name(address)}",
                  claim_ref=_claim_ref_of_address(address, key))

    def tend_capi_address(self, address: dict) -> None:
        key = o.claim_of_capi_address(address)
        claim_ref = o.Ref(address.get("apiVersion", ""), kinds.CAPI_CLAIM[1], o.namespace(address),
                          key[1] if key else "", o.claim_uid_of(address, key) if key else None)
        self.tend(address, self.claim_key_of(address, key), finalizer=self.finalizers.address[kinds.CAPI_ADDRESS],
                  subject=f"IPAddress.{kinds.CAPI_IPAM_GROUP} {o.namespace(address)}/{o.name(address)}",
                  claim_ref=claim_ref)

    def tend(self, address: dict, key: o.ClaimKey | None, finalizer: str, subject: str, claim_ref: o.Ref) -> None:
        """An address (of either API) goes when its claim is gone; its finalizer goes once it is deleted.

        While its claim lives, an address carries our finalizer: one that lost
        it (an edit, an earlier IPAM) gets it back, so it cannot vanish under
        a claim that still uses it.
        """
        claim = self.ledger.claims.get(key) if key else None
        if not self.snap.serves(claim_ref.namespace):
            return  # a claim served elsewhere (``-n``): its IP is held here, its addresses are written there
        step = self.plan.step(subject, about=o.ref(address))  # a write refused for good shows on the address
        if o.is_deleting(address):
            if o.deleted_for_move(address):
                return  # clusterctl strips every finalizer itself; a write here would race it
            keep = claim is not None and not o.is_deleting(claim)
            if finalizer in o.finalizers(address) and not keep:
                step.add(_without_finalizer(address, finalizer))
            return
        if claim is None:
            if self.written_first(address, finalizer):
                return  # written before its claim, which it waits for
            capi_finalizer = self.finalizers.address.get(kinds.CAPI_ADDRESS, "")
            if kinds.kind_of(address) == kinds.IPADDRESS and key is not None and any(
                    not self.written_first(m, capi_finalizer) for m in self.ledger.mirrors_of(key)):
                # The lock goes last, once nothing shows the IP any more: its claim's Cluster API address
                # may be left alone meanwhile (paused with its Cluster, as ``clusterctl move`` leaves the
                # addresses of a global pool in the source until it deletes the Cluster). One written before
                # its claim is no reason: it stays while no claim has it, and holds its IP itself.
                self.plan.notes.append(f"{subject} waits for the Cluster API IPAddress of its claim to go")
                return
            _let_go(step, address, finalizer, unless_exists=claim_ref)
        elif finalizer not in o.finalizers(address) and not o.is_deleting(claim):
            if self.written_first(address, finalizer):
                return  # adopted in its claim's step: owner references, then the finalizer, then the status
            if self.not_taken_up(claim, address):
                return  # the user's, as written: its claim is told why (``refuse``)
            step.add(_with_finalizer(address, finalizer))

    def written_first(self, address: dict, finalizer: str) -> bool:
        """A Cluster API IPAddress written before its claim, for a kind that keeps such: no owner reference
        to a claim, none of our finalizers (nothing of ours made it, nothing of ours lets it go)."""
        return (self.kind.keeps_addresses_written_first and kinds.kind_of(address) == kinds.CAPI_ADDRESS
                and finalizer not in o.finalizers(address)
                and not any(r.get("kind") == kinds.CAPI_CLAIM[1] for r in o.owner_references(address)))

    # -- claims --------------------------------------------------------------

    def serve(self, claim: dict) -> None:
        if not self.snap.serves(o.namespace(claim)):
            return  # of a global pool, in a namespace another controller serves (``-n``): its writes are made there
        key = o.claim_key(claim)
        kind = kinds.kind_of(claim)
        step = self.plan.step(f"{key[0]} {o.namespace(claim)}/{key[1]}", about=o.ref(claim))
        finalizer = self.finalizers.claim[kind]
        mine = self.ledger.addresses_of(key)
        if o.is_deleting(claim):
            stale = self.stale_finalizers(claim)
            others = [f for f in o.finalizers(claim) if f != finalizer and f not in stale]
            if others:
                # Whoever else holds the claim may still use its address (as
                # Metal3 does, release only once no other finalizer is left),
                # also when ours never made it on: the step that served it may
                # have stopped after the status write. Once the claim goes,
                # what it held is an address without a claim, which is released.
                self.remember_binding(claim)
                self.plan.notes.append(f"{o.name(claim)}: release waits for finalizers {', '.join(others)}")
                return
            self.release(claim, step, mine, finalizer)
            return
        self.ledger.due.pop(key, None)  # a live claim has no deadline but the one this pass may set again
        live = _held(mine, self.finalizers.address[kinds.IPADDRESS])
        if live:
            keep = self.keep_one(claim, live, step)
            refusal = None if self.named_by_status(claim, keep) else self.refusal(claim, keep, locking=False)
            if refusal is not None:
                self.refuse(claim, step, keep, refusal)
            else:
                self.restore_outside_key(claim, keep, step)
                self.ensure_bound(claim, keep, step)
        elif _live(self.ledger.mirrors_of(key)):
            self.adopt(claim, step)
        else:
            self.allocate(claim, step)
        # The finalizer guards what the claim holds, so only a claim that holds
        # (or is just given) an address carries it: one that holds nothing (its
        # pool missing, exhausted, a Cluster awaited) stays deletable without
        # the controller, as the Go Metal3 IPAM leaves it. Added in the step that
        # creates the address, last so that binding is not held up behind it: a
        # claim deleted before it carries the finalizer leaves an address
        # without a claim, which the next pass removes (after asking the API
        # server). One that holds nothing any more has it taken off.
        # A claim whose address object is not taken up holds nothing of ours (that object is the user's).
        holds = key not in self.ledger.conflicts and (
            key in self.ledger.bound or bool(mine) or bool(self.ledger.mirrors_of(key))
            or self.outside_key(claim) is not None)
        if holds and finalizer not in o.finalizers(claim) and key not in self.keyed:
            step.add(_with_finalizer(claim, finalizer))
        elif not holds and finalizer in o.finalizers(claim):
            step.add(_without_finalizer(claim, finalizer))

    def restore_outside_key(self, claim: dict, lock: dict, step: Step) -> None:
        """A claim of an outside IPAM's pool holding a lock but carrying no key (its annotation removed by hand,
        or a claim of a name reused holding what its predecessor left) is given back the key the lock was
        made for: the outside IPAM holds the address by that key, and only by it is it released."""
        outside = self.kind.outside
        if outside is None or outside.read_key(claim) != (None, None):
            return
        key = outside.read_key(lock)[0]
        if key is None:
            return
        finalizer = self.finalizers.claim[kinds.kind_of(claim)]
        if finalizer not in o.finalizers(claim):
            step.add(_with_finalizer(claim, finalizer))
        self.keyed[o.claim_key(claim)] = key
        step.add(SetMetadata(o.ref(claim), annotations={outside.annotation: key},
                             resource_version=o.meta(claim).get("resourceVersion")))

    def remember_binding(self, claim: dict) -> None:
        key = o.claim_key(claim)
        live = _held(self.ledger.addresses_of(key), self.finalizers.address[kinds.IPADDRESS]) or _live(self.ledger.mirrors_of(key))
        if live:
            self.ledger.bound[key] = _text_of(live[0])

    def release(self, claim: dict, step: Step, mine: list[dict], finalizer: str) -> None:
        if o.deleted_for_move(claim):
            # Moved, not released; clusterctl strips the finalizers itself. Asked for no more outside.
            self.remember_binding(claim)
            outside_key = self.outside_key(claim)
            if outside_key is not None:
                self.plan.intents[outside_key] = Intent.FORGET
            return
        key = o.claim_key(claim)
        self.ledger.due.pop(key, None)
        if not self.released_outside(claim):
            # Its address stays (objects, finalizers, the IP held) until the outside IPAM let it go.
            self.remember_binding(claim)
            outside_key = self.outside_key(claim)
            refusal = self.snap.answers.release_refused(outside_key) if self.snap.answers is not None else None
            if refusal is not None:
                self.show_release_refused(claim, step, refusal)
            self.ledger.awaiting[key] = outside_key  # the answer for that key wakes it
            self.plan.notes.append(f"{o.name(claim)}: released once {self.pool_text()}'s IPAM let its address go")
            return
        held_until = self.release_after(claim, mine)
        if held_until is not None:
            # Its address outlives it until then (counted, its IP handed out to no one), both finalizers on.
            self.remember_binding(claim)
            self.ledger.due[key] = held_until
            self.plan.notes.append(f"{o.name(claim)}: its address is released at {held_until}")
            return
        # The visible address first, its lock last: the IP stays guarded until nothing shows it any more.
        for mirror in self.ledger.mirrors_of(key):
            _let_go(step, mirror, self.finalizers.address[kinds.CAPI_ADDRESS])
        for address in mine:
            _let_go(step, address, self.finalizers.address[kinds.IPADDRESS])
        for guard in self.guards_of(claim, mine):
            step.add(Delete(o.ref(guard)))
        gone = {finalizer, *self.stale_finalizers(claim)}
        if gone & set(o.finalizers(claim)):
            step.add(SetFinalizers(o.ref(claim), tuple(f for f in o.finalizers(claim) if f not in gone),
                                   o.meta(claim).get("resourceVersion")))

    def stale_finalizers(self, claim: dict) -> set[str]:
        """The claim finalizers of this controller's other pool kinds a claim of this pool carries (a manifest
        copied with them, a pool reference changed): no pool of those kinds serves it, so none would take them
        off; they go with this pool's. Not an outside IPAM's (its address there may be held by it)."""
        kind = kinds.kind_of(claim)
        return {pool_kind.finalizers.claim[kind] for pool_kind in poolkind.REGISTRY.values()
                if pool_kind.outside is None and kind in pool_kind.finalizers.claim} - {self.finalizers.claim[kind]}

    def show_release_refused(self, claim: dict, step: Step, refusal: Refused) -> None:
        """A deleted claim whose release the outside IPAM refused says why it stays: Ready=False with the
        refusal (its addressRef kept: the address is held until the release goes through)."""
        current = o.status(claim)
        v1beta1 = str(claim.get("apiVersion", "")).endswith("/v1beta1")
        message = _bounded(f"its address is released by {self.pool_text()}'s IPAM before it goes, which refused: "
                           f"{refusal.message}")
        ready = _condition(current, READY, "False", refusal.reason, message, self.snap.now, v1beta1)
        desired = {**current, "conditions": [ready] + [c for c in current.get("conditions") or []
                                                      if isinstance(c, Mapping) and c.get("type") != READY]}
        if desired != current:
            step.add(SetStatus(o.ref(claim), desired, o.meta(claim).get("resourceVersion")))

    def outside_key(self, claim: dict) -> str | None:
        """The allocation key a claim of a kind with ``outside`` carries or is given this pass; else None."""
        outside = self.kind.outside
        if outside is None:
            return None
        return self.keyed.get(o.claim_key(claim)) or outside.read_key(claim)[0]

    def carriers_of(self, key: str, claim: dict) -> list[dict]:
        """The other claims carrying allocation key ``key`` (a manifest copied with its annotation, an
        annotation written by hand): one key is one address in the outside IPAM, so one claim's. Copies of a
        claim that left for ``clusterctl move`` with the key are refused, so they count for nothing."""
        if self._carriers is None:
            self._carriers = {}
            for other in self.ledger.claims.values():
                other_key = self.kind.outside.read_key(other)[0]
                if other_key is not None:
                    self._carriers.setdefault(other_key, []).append(other)
        ckey, pool = o.claim_key(claim), o.pool_of(claim)
        here = [other for other in self._carriers.get(key, ()) if o.claim_key(other) != ckey]
        elsewhere = [other for other in self.snap.claims_carrying(key)
                     if o.pool_of(other) != pool or o.namespace(other) != o.namespace(claim)]
        return [other for other in here + elsewhere if self.moved_with(key, other) is None]

    def key_owner(self, key: str, claim: dict) -> dict | None:
        """Another claim the shared key ``key`` belongs to: one holding an address, else the one created
        first. None when it is ``claim``'s own."""
        others = self.carriers_of(key, claim)
        if not others:
            return None
        first = first_carrier([claim, *others], self.holds_key)
        return None if first is claim else first

    def moved_with(self, key: str, claim: dict) -> tuple[str, str] | None:
        """The claim (namespace, name) that left for ``clusterctl move`` carrying ``key``, when that is not
        ``claim``: the key's address is that claim's in the move's target, never a copy's here."""
        return left_with(self.snap.moved_away(key), claim)

    def holds_key(self, claim: dict) -> bool:
        """Whether a claim carrying an allocation key holds its address: this pool's by its ledger, another
        pool's by its status."""
        if claim is self.ledger.claims.get(o.claim_key(claim)):
            return self.holds_anything(claim)
        return bool((o.status(claim) or {}).get("addressRef")) or o.is_deleting(claim)

    def released_outside(self, claim: dict) -> bool:
        """Whether a deleted claim's address is let go by its outside IPAM (True for the other kinds, and for
        a claim that carries no key: nothing was asked for it); its release is asked for meanwhile. A pool
        that is gone names no IPAM to ask: what it made is left to a sweep."""
        key = self.outside_key(claim)
        if key is None or self.pool_obj is None:
            return True
        if any(not o.is_deleting(other) for other in self.carriers_of(key, claim)) or self.moved_with(key, claim):
            return True  # the key and its address are a live claim's (this one carried a copy of its key)
        ckey = o.claim_key(claim)
        holds = self.ledger.addresses_of(ckey) or self.ledger.mirrors_of(ckey)
        self.plan.intents[key] = Intent.RELEASE if holds else Intent.RELEASE_UNBOUND
        return self.snap.answers is not None and self.snap.answers.released(key)

    def release_after(self, claim: dict, mine: list[dict]) -> str | None:
        """Until when a deleted claim's address is held (the kind's reuse grace period, from what is
        stored), when that is still ahead; None: released now. A pool missing or being deleted has none."""
        pool = self.pool_obj
        if pool is None or o.is_deleting(pool) or not (mine or self.ledger.mirrors_of(o.claim_key(claim))):
            return None
        deadline = self.kind.release_after(pool, claim)
        return deadline if deadline is not None and not _passed(deadline, self.snap.now) else None

    def adopt(self, claim: dict, step: Step) -> None:
        """A Cluster API claim served with only a Cluster API IPAddress keeps it, and gets its lock.

        This is the state the Go Metal3 IPAM leaves (its address is named
        ``<namePrefix>-<ip>``). The lock is a Metal3 IPAddress at the same IP,
        so from now on the name lock guards this IP like any other.
        """
        mirrors = _live(self.ledger.mirrors_of(o.claim_key(claim)))
        named = o.status(claim).get("addressRef")
        named = named.get("name") if isinstance(named, Mapping) else None
        mirror = sorted(mirrors, key=lambda a: (o.name(a) != named, str(o.meta(a).get("creationTimestamp") or ""),
                                                o.name(a)))[0]
        ip = _ip_of(mirror)
        if ip is None or self.pool is None:
            return self.fail(claim, step, ALLOCATION_FAILED,
                             f"its IPAddress {o.name(mirror)} holds {o.spec(mirror).get('address')!r}, which cannot be "
                             f"adopted: " + ("not an IP address" if ip is None else f"{self.kind.kind[1]} {self.snap.pool_name} is invalid"))
        refusal = self.refusal(claim, mirror, locking=True)
        if refusal is not None:
            # Its IP is another's (the lock's name taken included: state an earlier IPAM left, where two pools
            # with one namePrefix gave one IP twice), or one the pool could not have given it.
            return self.refuse(claim, step, mirror, refusal)
        spec = o.spec(mirror)
        entry = self.pool.entry_of(self.pool.unit_of(int(ip)))
        lock = self.lock_for(claim, ip, prefix=spec.get("prefix"), gateway=spec.get("gateway") or None,
                             dns_servers=entry.dns_servers if entry is not None else ())
        self.ledger.bound[o.claim_key(claim)] = ip_text(ip)
        self.adopting += 1
        step.add(Create(lock))
        self.complete_owners(mirror, claim, step)
        self.set_claim_status(claim, step, address=lock, mirror=mirror)

    # -- address objects taken up as they are ------------------------------------

    def refusal(self, claim: dict, address: dict, locking: bool) -> str | None:
        """Why ``claim`` may not take up ``address`` (its own address object, of either API, that it is not
        bound to yet), or None when it may.

        Refused: an IP of another family than the pool's; one the pool could not have given this claim (outside
        it, a gateway or excluded, withheld for an earlier pool, another claim's preallocation), asked only of an
        address written before its claim: one the claim's status names or whose owner reference names this
        claim (made by an IPAM, or moved with it by ``clusterctl move``) stays with it as it was given; and an
        IP another claim holds (``rival``). ``locking``: the claim has no lock yet, and would get one here.
        """
        ip, pool = _ip_of(address), self.pool
        if ip is None or pool is None:
            return None
        held = f"{_address_text(address)} holds {ip_text(ip)}"
        if ip.version != pool.version:
            return f"{held}, which is not of {self.pool_text()}'s family (IPv{pool.version})"
        unit = pool.unit_of(int(ip))
        rival = self.rival(claim, address, unit, locking)
        if rival is not None:
            return f"{held}, which {rival}"
        if self.kind.outside is None and not self.made_for(claim, address):
            never = self.allocator.never_for(o.name(claim), unit)
            if never is None and any(lo <= unit <= hi for lo, hi in self.withheld_from(o.namespace(claim))):
                never = (f"is withheld from its claims of namespace {o.namespace(claim)}: a pool of the namespace "
                         "owns it")
            if never is not None:
                return f"{held}, which {self.pool_text()} could not have handed out: {ip_text(ip)} {never}"
        return None

    def rival(self, claim: dict, address: dict, unit: int, locking: bool) -> str | None:
        """What holds ``unit`` for another claim, named; None when nothing does.

        Every lock (a Metal3 IPAddress) of another claim or of none, every allocation of this pass, an IP kept for
        another claim whose status names it, any address of another pool of the namespace (for the kinds whose
        IPs are unique there), and a lock's name taken by any object. A Cluster API IPAddress of another live claim
        of the pool counts for a claim that has no lock yet, and against one whose lock it is only when that
        claim's status names it (a binding made before, by an earlier IPAM): else it is locked (and its lock
        counts) or, not taken up, the user's.
        """
        key, ledger = o.claim_key(claim), self.ledger
        for tag, name in ledger.holders_of(unit):
            if tag == PLANNED:
                return f"another claim of {self.pool_text()} is being given (IPAddress {name})"
            other = (ledger.addresses if tag == METAL3 else ledger.capi_addresses).get(name)
            if other is None or other is address:
                continue
            named = (o.claim_of_address if tag == METAL3 else o.claim_of_capi_address)(other)
            owner = ledger.claim_key_of(other, named)
            if owner == key:
                continue
            holder = ledger.claims.get(owner) if owner is not None else None
            # A claim whose status names its address (bound by an earlier IPAM) goes before an address written
            # by hand: other claims' addresses count against a claim getting its first lock when it is not bound.
            fresh = locking and not self.named_by_status(claim, address)
            if tag == CAPI and holder is None and fresh and self.made_elsewhere(other):
                return _held_text(other)
            if tag == CAPI and (holder is None or not (fresh or self.named_by_status(holder, other))):
                continue
            return _held_text(other)
        kept = ledger.allocator.kept.get(unit)
        if kept is not None and kept != key:
            return (f"is kept for {kept[0]} {kept[2] if len(kept) > 2 else self.snap.namespace}/{kept[1]}, whose "
                    "status names it and whose address objects were deleted")
        namespace = self.lock_namespace(claim)
        lock_name = self.pool.lock_name(unit)
        if locking and self.snap.name_taken(namespace, lock_name):
            lock = self.snap.address_named(namespace, lock_name)
            if lock is None:
                return f"IPAddress {namespace}/{lock_name}, its lock, exists already"
            return _held_text(lock)
        if self.kind.unique_in_namespace or self.kind.outside is not None:
            others = self.snap.held_by_others(namespace, self.pool.version, int(self.pool.address_of(unit)),
                                              every_pool=self.kind.outside is not None)
            if others:
                return _held_text(others[0])
        first = int(self.pool.address_of(unit))
        held = self.global_address_at(namespace, first) if self.kind.unique_in_namespace else None
        if held is not None:
            return _held_text(held)
        if self.kind.cluster_scoped and self.snap.held_elsewhere(
                o.namespace(claim), self.pool.version, first, first + (1 << self.pool.unit_bits) - 1):
            # The claim's namespace: the addresses of the pools there (a global pool's locks are elsewhere).
            others = self.snap.held_by_others(o.namespace(claim), self.pool.version, first, every_pool=True)
            return _held_text(others[0]) if others else f"an address of namespace {o.namespace(claim)} holds"
        if self.snap.kept_elsewhere(o.namespace(claim), self.pool.version, first):
            return ("is kept for a claim of another pool of the namespace, whose status names it and whose address "
                    "objects were deleted")
        return None

    def global_address_at(self, namespace: str, ip: int) -> dict | None:
        """For a namespaced pool: the Cluster API IPAddress of a global pool's claim of the namespace at ``ip``
        (but a separate network's), or None. A global pool's lock is in the lock namespace, which may be this one:
        it does not count."""
        if self.kind.cluster_scoped:
            return None
        shared = {w.owner for w in self.snap.withheld if w.shared}
        for address in self.snap.held_by_others(namespace, self.pool.version, ip, every_pool=True):
            pool = o.pool_of(address)
            if kinds.kind_of(address) == kinds.CAPI_ADDRESS and pool is not None and pool not in shared \
                    and poolkind.REGISTRY[pool.kind].cluster_scoped:
                return address
        return None

    def withheld_from(self, namespace: str) -> list[tuple[int, int]]:
        """The spans of units the pool does not hand to its claims of ``namespace`` (a global pool, for the pools
        of that namespace that own them; nothing for a namespaced pool)."""
        return [(self.pool.unit_of(w.first), self.pool.unit_of(w.last))
                for w in withheld_spans(self.snap.withheld_in(namespace))]

    def made_elsewhere(self, address: dict) -> bool:
        """A Cluster API IPAddress of a live claim this controller does not see (of a namespace not served, under
        ``-n``) that an IPAM made or ``clusterctl move`` copied for its claim (an owner reference names it): its
        claim is bound to it, maybe not locked yet (the Go provider's state), and holds its IP."""
        return not self.snap.serves(o.namespace(address)) and not written_before_its_claim(address)

    def made_for(self, claim: dict, address: dict) -> bool:
        """Whether ``address`` was made for this claim: its status names it, or its owner reference names this
        incarnation of the claim (an address written before its claim can name none)."""
        uid = o.meta(claim).get("uid")
        return self.named_by_status(claim, address) or (
            uid is not None and o.claim_uid_of(address, o.claim_key(claim)) == uid)

    def named_by_status(self, claim: dict, address: dict) -> bool:
        """Whether the claim's status names ``address``: by name, or the IP it says it is bound to."""
        ref = status_ref(claim)
        if ref is not None and ref.get("name") == o.name(address) \
                and ref.get("namespace") in (None, "", o.namespace(address)):
            return True
        ip = _ip_of(address)
        if ip is None or self.pool is None or ip.version != self.pool.version:
            return False
        unit = self.pool.unit_of(int(ip))
        # The ledger read it from the status when the claim was loaded (``kept``); read here only for the claims
        # it keeps nothing for (preallocated ones, those asking for an IP).
        return self.ledger.kept.get(o.claim_key(claim)) == unit or named_ip(claim, self.pool) == unit

    def not_taken_up(self, claim: dict, address: dict) -> bool:
        """Whether a live claim's address object lacking our finalizer is one it does not take up (``serve``
        decides it the same way): it is left as it was written."""
        key = o.claim_key(claim)
        if kinds.kind_of(address) == kinds.CAPI_ADDRESS:
            if self.ledger.addresses_of(key):
                return False  # the claim's lock decides; a Cluster API IPAddress at another IP is a stray
            return self.refusal(claim, address, locking=True) is not None
        return not self.named_by_status(claim, address) and self.refusal(claim, address, locking=False) is not None

    def refuse(self, claim: dict, step: Step, address: dict, refusal: str) -> None:
        """The claim is told why its address object is not taken up (Ready=False, an IPClaim's errorMessage, one
        Warning Event), is given no other IP while that object names it, and the pool lists it. A status that
        names that object already (a binding an earlier IPAM made) keeps naming it: whatever runs on its IP is
        not cut off, and the claim stays first in line for it."""
        self.ledger.conflicts[o.claim_key(claim)] = _bounded(f"{o.namespace(claim)}/{o.name(claim)}: {refusal}", 256)
        ref = status_ref(claim)
        self.fail(claim, step, ADDRESS_CONFLICT,
                  f"{refusal}; it is not taken up, and no other address is given while it names this claim; "
                  "delete it (it is left as written) for the claim to be served",
                  kept_ref=ref is not None and ref.get("name") == o.name(address))

    def keep_one(self, claim: dict, live: list[dict], step: Step) -> dict:
        """A claim has one address; when a race left more, keep the bound one.

        If none of them is bound yet (two replicas raced), the earliest is
        bound — the one every replica picks — and the others are removed
        only once that binding shows, so no replica removes an address that
        another has just bound.
        """
        bound = self.bound_address_name(claim, live)
        live = sorted(live, key=lambda a: (o.name(a) != bound, o.is_deleting(a),
                                           str(o.meta(a).get("creationTimestamp") or ""), o.name(a)))
        keep, extra = live[0], live[1:]
        if bound is None:
            if extra:
                self.plan.notes.append(f"{o.name(claim)}: {len(live)} addresses, none bound yet")
            return keep
        for address in extra:
            _let_go(step, address, self.finalizers.address[kinds.IPADDRESS])
        return keep

    def bound_address_name(self, claim: dict, live: list[dict]) -> str | None:
        """The address among ``live`` that the claim's status (or its Cluster API mirror) names."""
        if kinds.kind_of(claim) == kinds.CAPI_CLAIM:
            mirror = self.bound_mirror(claim)
            ip = _ip_of(mirror) if mirror is not None else None
            return next((o.name(a) for a in live if ip is not None and _ip_of(a) == ip), None)
        named = o.status(claim).get("address")
        name = named.get("name") if isinstance(named, Mapping) else None
        return name if any(o.name(a) == name for a in live) else None

    def bound_mirror(self, claim: dict) -> dict | None:
        """The Cluster API address the claim's status names, else the one named after the claim."""
        mirrors = _live(self.ledger.mirrors_of(o.claim_key(claim)))
        named = o.status(claim).get("addressRef")
        named = named.get("name") if isinstance(named, Mapping) else None
        return (next((m for m in mirrors if o.name(m) == named), None)
                or next((m for m in mirrors if o.name(m) == o.name(claim)), None))

    def ensure_bound(self, claim: dict, address: dict, step: Step) -> None:
        self.ledger.bound[o.claim_key(claim)] = _text_of(address)
        mirror = None
        if kinds.kind_of(claim) == kinds.CAPI_CLAIM:
            mirror = self.ensure_mirror(claim, address, step)
            if mirror is None:
                return
        self.set_claim_status(claim, step, address=address, mirror=mirror)

    def ensure_mirror(self, claim: dict, lock: dict, step: Step) -> dict | None:
        """The Cluster API address of a claim matches its lock; one that does not is replaced, never trusted.

        Returns the mirror to bind, or None while a wrong one is being removed.
        """
        ip = _ip_of(lock)
        mirrors = _live(self.ledger.mirrors_of(o.claim_key(claim)))
        matching = [m for m in mirrors if _ip_of(m) == ip]
        preferred = self.bound_mirror(claim)
        keep = preferred if any(m is preferred for m in matching) else (matching[0] if matching else None)
        stray = [m for m in mirrors if m is not keep]
        for mirror in stray:
            _let_go(step, mirror, self.finalizers.address[kinds.CAPI_ADDRESS])
        if keep is not None:
            self.complete_owners(keep, claim, step)
            return keep
        if any(o.name(m) == o.name(claim) for m in self.ledger.mirrors_of(o.claim_key(claim))):
            # Our name is still taken by the stray one; the next pass creates it.
            self.plan.notes.append(f"{o.name(claim)}: its IPAddress is replaced once the wrong one is gone")
            return None
        taken = self.snap.capi_address_named(o.namespace(claim), o.name(claim))
        if taken is not None:
            # Held by an address of another pool (a claim of this name for another
            # pool, not yet released): say so rather than fail to create it each pass.
            self.fail(claim, step, ALLOCATION_FAILED,
                      f"IPAddress.{kinds.CAPI_IPAM_GROUP} {o.namespace(claim)}/{o.name(claim)} exists already "
                      f"for another pool or claim ({o.spec(taken).get('poolRef', {}).get('name')!s}); "
                      f"{ip_text(_ip_of(lock))} is held for this claim until it goes")
            return None
        settled = _settled(lock, self.snap.lock_settle_seconds)
        if settled is not None and not _passed(settled, self.snap.now):
            # The lock was made by another step moments ago: its maker is most likely writing this very
            # address, which this view may not show yet. Written now, it could land after the claim's release
            # and show the IP with no lock behind it; by the deadline the maker's address shows, or the
            # maker is gone and this pass makes it.
            self.ledger.due[o.claim_key(claim)] = settled
            self.plan.notes.append(f"{o.name(claim)}: its IPAddress is made at {settled} unless its lock's maker "
                                   "shows it first")
            return None
        mirror = self.capi_address_for(claim, lock)
        step.add(Create(mirror))
        return mirror

    def complete_owners(self, mirror: dict, claim: dict, step: Step) -> None:
        """An adopted Cluster API IPAddress written before its claim gets the claim's and the pool's owner
        references after those it has (as the Go IPAM providers' CreateOrPatch gives them), and our
        finalizer, in the claim's step before its status names it; one that has them is not written to.

        A reference to the claim or the pool by the right name but another uid is replaced: ``clusterctl
        move`` gives the copy of an address of a global pool that exists in the target already the uid of the
        source's pool (it does not create that pool, and takes the uid of the object it read), and such a
        reference would name no object in the target. Only its uid is written: every other reference, and
        the order of the list, stay as they were (the garbage collector reads their blockOwnerDeletion)."""
        if not self.kind.keeps_addresses_written_first:
            return
        current = o.owner_references(mirror)
        wanted = self.mirror_owners(claim)

        def same(ref: Mapping[str, Any], want: Mapping[str, Any]) -> bool:
            return ref.get("kind") == want["kind"] and ref.get("name") == want["name"]

        def matches(ref: Mapping[str, Any], want: Mapping[str, Any]) -> bool:
            return same(ref, want) and (want.get("uid") is None or ref.get("uid") == want["uid"])

        def repaired(ref: dict) -> dict:
            want = next((w for w in wanted if same(ref, w) and not matches(ref, w)), None)
            return ref if want is None else {**ref, "uid": want["uid"]}

        owners = [repaired(r) for r in current]
        missing = [w for w in wanted if not any(matches(r, w) for r in owners)]
        if missing or owners != current:
            step.add(SetMetadata(o.ref(mirror), owner_references=tuple(owners + missing),
                                 resource_version=o.meta(mirror).get("resourceVersion")))
        finalizer = self.finalizers.address[kinds.CAPI_ADDRESS]
        if finalizer not in o.finalizers(mirror):
            step.add(_with_finalizer(mirror, finalizer))

    def allocate(self, claim: dict, step: Step) -> None:
        foreign = o.foreign_pool_namespace(claim)
        if foreign is not None:
            return self.fail(claim, step, ALLOCATION_FAILED,
                             f"spec.pool.namespace {foreign!r} must be the claim's own namespace "
                             f"{o.namespace(claim)!r}: an address cannot be owned across namespaces")
        missing = self.missing_cluster(claim)
        if missing is not None and o.claim_key(claim) in self.ledger.kept:
            # Its status names the IP it gets back once the Cluster is there: a wait written over it
            # would let that IP go to another claim meanwhile. Left as it is, as a paused claim's is.
            self.plan.notes.append(f"{o.name(claim)}: waits for {self.cluster_text(missing)}, its IP kept for it")
            return
        if missing is not None:
            return self.wait(claim, step, f"{self.cluster_text(missing)} not found: an address is handed out "
                                          "once it exists (a moved Cluster's claims may be seen before it)")
        pool_ref = self.pool_text()
        if self.pool_obj is None:
            return self.fail(claim, step, POOL_NOT_READY, f"{pool_ref} not found")
        if o.is_deleting(self.pool_obj):
            return self.fail(claim, step, POOL_NOT_READY, f"{pool_ref} is being deleted")
        if self.pool is None:
            return self.fail(claim, step, POOL_NOT_READY, f"{pool_ref} is invalid: {self.pool_problem}")
        key = o.claim_key(claim)
        lock_namespace = self.lock_namespace(claim)
        taken_elsewhere = lambda ip: self.taken_elsewhere(lock_namespace, ip, o.namespace(claim), claim=claim)  # noqa: E731
        avoid = self.withheld_from(o.namespace(claim))
        if self.kind.outside is not None:
            return self.allocate_outside(claim, step, taken_elsewhere)
        requested = o.annotations(claim).get(kinds.IP_ADDRESS_ANNOTATION)
        own = self.ledger.kept.get(key)
        grant, lost = None, None
        if own is not None:
            going = self.still_going(key, own)
            if going:
                # Its IP comes free once that address is gone (a change that brings the claim back).
                self.plan.notes.append(f"{o.name(claim)}: waits for {going} to go, to take its IP back")
                return
            rival = self.rival_for(key, own)
            if rival is not None:
                lost = (f"its address {ip_text(self.pool.address_of(own))} is named by the status of "
                        f"{rival[0]} {rival[1]} too, which was created first; its address objects were deleted")
            else:
                try:
                    grant = self.allocator.reclaim(
                        o.name(claim), own, lambda ip: self.taken_elsewhere(lock_namespace, ip, o.namespace(claim),
                                                                            for_keeper=True, claim=claim),
                        kept_as=key, avoid=avoid, written_over=self.written_over(own))
                except AllocationError as err:
                    lost = f"{err.message}; its address objects were deleted"
        if grant is None:
            self.collisions = {}
            try:
                grant = self.allocator.allocate(o.name(claim), requested, name_taken=taken_elsewhere,
                                                kept_as=key, avoid=avoid)
            except AllocationError as err:
                # The status says what the next pass would (its status no longer naming the IP, nothing is kept
                # for it then): one Warning Event tells of the lost IP, and no second one follows.
                reason, message = (err.reason, err.message) if not self.collisions else self.collided(err)
                return self.fail(claim, step, reason, message, event_message=message + (f"; {lost}" if lost else ""))
        address = self.lock_for(claim, grant.ip, grant.prefix, grant.gateway, grant.dns_servers)
        self.ledger.planned(grant.unit, o.name(address))
        for action in self.guard_actions(claim, grant.unit):
            step.add(action)
        step.add(Create(address))
        if lost:
            step.add(Event(o.ref(claim), "Warning", "AddressChanged",
                           _bounded(f"{lost}, so it is given {ip_text(grant.ip)} instead: whatever runs on "
                                    f"{ip_text(self.pool.address_of(own))} must move")))
        self.ensure_bound(claim, address, step)

    def allocate_outside(self, claim: dict, step: Step, taken_elsewhere: Callable[[int], bool]) -> None:
        """A claim of a kind whose addresses an outside IPAM hands out (``poolkind.Outside``).

        Without a key it is given one (finalizer first, then the key, each a conditional write), and
        nothing is asked: only a key the stored claim carries is. With one, the pass wants it; until the
        answer is a grant the claim is pending (Ready=False: ``AllocationPending``, or the IPAM's refusal),
        and the answer wakes it. A grant is locked and shown as any allocation is.
        """
        outside = self.kind.outside
        ckey = o.claim_key(claim)
        key, problem = outside.read_key(claim)
        if problem is not None:
            return self.fail(claim, step, ALLOCATION_FAILED,
                             f"{problem.field}: {problem.message} (value: {problem.value!r})")
        if key is None:
            finalizer = self.finalizers.claim[kinds.kind_of(claim)]
            if finalizer not in o.finalizers(claim):
                step.add(_with_finalizer(claim, finalizer))
            key = self.keyed[ckey] = outside.new_key(self.snap.rng or random.Random())
            step.add(SetMetadata(o.ref(claim), annotations={outside.annotation: key},
                                 resource_version=o.meta(claim).get("resourceVersion")))
            return
        owner, left = self.key_owner(key, claim), self.moved_with(key, claim)
        if owner is not None or left is not None:
            # Decided again when a claim awaiting this key changes or goes (``Ledger.apply``): the key may be
            # its own then. An owner holding an address frees an IP when it goes, which wakes it too.
            self.ledger.awaiting[ckey] = key
            whose = (f"carried by {kinds.kind_of(owner)[1]} {o.name(owner)} too, whose address it names"
                     if owner is not None else f"that of IPAddressClaim {left[0]}/{left[1]}, which clusterctl move "
                     "took to another cluster with its address")
            return self.fail(claim, step, ALLOCATION_FAILED,
                             f"metadata.annotations[{outside.annotation}]: allocation key {key} is {whose}; remove "
                             "the annotation to be given a key of its own")
        self.plan.intents[key] = Intent.WANT
        answer = self.snap.answers.result(key) if self.snap.answers is not None else None
        held_back = None
        if answer is None and self.snap.answers is not None:
            held_back = self.snap.answers.held_back(key)  # its server down: say so, not only "pending"
        if not isinstance(answer, Granted):
            self.ledger.awaiting[ckey] = key  # the answer filed for its key wakes it
            if held_back is not None:
                # The refusal is another key's probe, whose message changes with every probe: a message of its
                # own keeps the status of every claim waiting behind that server from being rewritten each time.
                reason, message = held_back.reason, (f"{self.pool_text()}: allocation key {key} waits for its IPAM's "
                                                     f"server, which failed lately ({held_back.reason}); it is "
                                                     f"asked once the server answers again")
            elif isinstance(answer, Refused):
                reason, message = answer.reason, answer.message
            else:
                reason, message = (ALLOCATION_PENDING, f"{self.pool_text()}: asked for an address for allocation key "
                                                       f"{key}, not answered yet")
            self.set_claim_status(claim, step, waiting=(reason, _bounded(message)))
            return
        try:
            given = outside.granted(self.pool_obj, answer.address)
            self.allocator.reclaim(o.name(claim), int(given.ip), taken_elsewhere, kept_as=ckey)
        except (ValueError, AllocationError) as err:
            return self.fail(claim, step, ALLOCATION_FAILED,
                             f"the address {answer.address} held for allocation key {key} cannot be given: "
                             f"{getattr(err, 'message', err)}")
        address = self.lock_for(claim, given.ip, given.prefix, given.gateway, given.dns_servers)
        # The key it was made for, on the lock too: a claim that lost its annotation is given it back.
        address["metadata"]["annotations"] = {**(address["metadata"].get("annotations") or {}),
                                              outside.annotation: key}
        self.ledger.planned(int(given.ip), o.name(address))
        step.add(Create(address))
        self.ensure_bound(claim, address, step)

    def rival_for(self, key: o.ClaimKey, ip: int) -> o.ClaimKey | None:
        """Another live claim whose status names ``ip`` too (a status rewritten by hand) and that, holding
        no address either, wants it back: the one created first gets it. None when that is ``key``."""
        ledger = self.ledger
        wanting = [k for k in each(ledger.keepers.get(ip))
                   if k == key or (k in ledger.claims and not self.holds_anything(ledger.claims[k]))]
        if len(wanting) <= 1:
            return None
        first = min(wanting, key=lambda k: (str(o.meta(ledger.claims[k]).get("creationTimestamp") or ""), k))
        return None if first == key else first

    def still_going(self, key: o.ClaimKey, ip: int) -> str | None:
        """What holds ``ip`` that is on its way out: an address of this claim being deleted, or one whose
        claim is gone or going. None when nothing holds it, or a live claim (or a planned allocation) does."""
        going = None
        for tag, name in self.ledger.holders_of(ip):
            if tag == PLANNED:
                return None
            address = (self.ledger.addresses if tag == METAL3 else self.ledger.capi_addresses).get(name)
            named = (o.claim_of_address if tag == METAL3 else o.claim_of_capi_address)(address)
            owner = self.ledger.claim_key_of(address, named)
            claim = self.ledger.claims.get(owner) if owner is not None else None
            if claim is not None and not o.is_deleting(claim) and owner != key:
                return None
            if claim is not None and owner == key and not o.is_deleting(address):
                return None
            going = f"{tag} {name}"
        return going

    def lock_namespace(self, claim: dict) -> str:
        """Where the lock of a claim's IP is: the pool's namespace, or for a pool of cluster scope the one
        namespace of every such lock (a lock per claim's namespace would guard nothing across namespaces)."""
        return self.snap.namespace or self.snap.lock_namespace

    def written_over(self, unit: int) -> bool:
        """Whether all that holds ``unit`` in the pool are Cluster API IPAddresses written before their claims
        that no claim is bound to (``kept.binds_none``): they hold it from no claim whose status names it."""
        ledger = self.ledger

        def binds_no_claim(tag: str, name: AddressKey) -> bool:
            address = ledger.capi_addresses.get(name) if tag == CAPI else None
            if address is None:
                return False
            claim = ledger.claims.get(ledger.claim_key_of(address, o.claim_of_capi_address(address)))
            return binds_none(address, claim)

        holders = ledger.holders_of(unit)
        return bool(holders) and all(binds_no_claim(*holder) for holder in holders)

    # -- the guard of an IP in a claim's namespace ------------------------------------------------

    def guarded(self, claim: dict, unit: int) -> bool:
        """Whether handing ``unit`` to ``claim`` creates its guard in the claim's namespace first: a global IP
        pool's allocation (but one of a separate network), and a namespaced IP pool's of an IP a global pool
        holds. Of two such allocations of one IP in a namespace, which no pass saw the other make (a global
        pool's pass made before the namespaced pool came, carried out after its allocation), the API server
        refuses the second guard, and with it the rest of that step: one IP never goes to two claims there.
        A global pool's pass always guards (it cannot know of a namespaced pool created since); a namespaced
        pool's sees every global pool made before it passes, and one made later withholds its addresses."""
        kind, pool = self.kind, self.pool
        if pool is None or kind.holds_prefixes or kind.outside is not None or pool.unit_length is not None:
            return False
        if kind.cluster_scoped:
            return not separate_network(self.pool_obj)
        return kind.unique_in_namespace and self.snap.global_holds(pool.version, int(pool.address_of(unit)))

    def guard_of(self, claim: dict, unit: int) -> dict | None:
        """The guard of ``unit`` in the claim's namespace, if one is stored."""
        return self.snap.address_named(o.namespace(claim), guard_name(self.pool.address_of(unit)))

    def guard_holds(self, guard: dict, claim: dict | None = None) -> bool:
        """Whether a guard keeps its IP for a claim other than ``claim``: its claim lives (the incarnation it
        owns) and is bound to no other IP (until its address shows, its allocation may be on its way). Else it
        is left over (its allocation refused, its claim gone) and whoever wants the IP deletes it."""
        ref = o.spec(guard).get("claim") or {}
        kind = (kinds.group_of(str(ref.get("apiVersion") or kinds.METAL3_API_VERSION)), str(ref.get("kind") or
                                                                                         kinds.IPCLAIM[1]))
        holder = self.snap.claim_named(kind, o.namespace(guard), str(ref.get("name") or ""))
        if holder is None or not _owned_by(guard, holder) or (claim is not None and _owned_by(guard, claim)):
            return False
        bound, guarded = bound_ip(holder), _ip_of(guard)
        return bound is None or (guarded is not None and int(bound) == int(guarded))

    def guards_of(self, claim: dict, addresses: list[dict]) -> list[dict]:
        """The guards of the claim's IPs that ``addresses`` hold, stored and its own: they go with its lock (the
        garbage collector would take them once the claim is gone)."""
        found = []
        for address in addresses:
            ip = _ip_of(address)
            guard = self.snap.address_named(o.namespace(claim), guard_name(ip)) if ip is not None else None
            if guard is not None and _owned_by(guard, claim) and not o.is_deleting(guard):
                found.append(guard)
        return found

    def guard_actions(self, claim: dict, unit: int) -> list:
        """What guards ``unit`` for ``claim`` before its lock is written: its guard created (a left-over one of
        that name deleted first, that incarnation only); nothing when it has its guard already, or needs none."""
        if not self.guarded(claim, unit):
            return []
        found = self.guard_of(claim, unit)
        if found is not None and _owned_by(found, claim):
            return []  # its own, from an earlier try
        ip = self.pool.address_of(unit)
        claim_ref: dict[str, Any] = {"name": o.name(claim), "namespace": o.namespace(claim),
                                     "apiVersion": claim.get("apiVersion"), "kind": claim.get("kind")}
        pool = self.pool_obj
        guard = {"apiVersion": kinds.METAL3_API_VERSION, "kind": "IPAddress",
                 "metadata": {"name": guard_name(ip), "namespace": o.namespace(claim),
                              "labels": {kinds.GUARD_LABEL: address_label(ip)},
                              # Gone with its claim (the garbage collector), and moved with it.
                              "ownerReferences": [_owner(claim)]},
                 "spec": {"address": ip_text(ip), "claim": claim_ref,
                          "pool": {"apiVersion": pool.get("apiVersion"), "kind": pool.get("kind"),
                                   "name": o.name(pool), "namespace": o.namespace(pool)}}}
        # One found here is left over (``taken_elsewhere`` passed it over): that incarnation goes first.
        return ([Delete(o.ref(found))] if found is not None else []) + [Create(guard)]

    def taken_elsewhere(self, namespace: str, ip: int, claim_namespace: str | None = None,
                        for_keeper: bool = False, claim: dict | None = None) -> bool:
        """In use by something this pool's own addresses do not show.

        The name lock (another pool with the same namePrefix, or any object of
        that name) and any address of another pool of the namespace, of either
        API, at that IP (inside that sub-prefix), or a sub-prefix another prefix
        pool's address holds that meets it, whatever its namePrefix (but a pool's
        this one shares addresses with: see ``overlap``). For a global pool, the
        namespaces looked in are the lock namespace (the other global pools'
        locks) and the claim's (every pool's addresses there). ``for_keeper``:
        for the claim whose status names the IP, whom an address written before
        its claim and bound to none does not keep from it.
        """
        if claim is not None and self.guarded(claim, ip):
            guard = self.guard_of(claim, ip)
            if guard is not None and self.guard_holds(guard, claim):
                return True
        # An outside IPAM knows nothing of the namespace's other pools: an IP one of them holds is refused.
        unique = self.kind.unique_in_namespace or self.kind.outside is not None
        name = self.pool.lock_name(ip)
        if self.snap.name_taken(namespace, name):
            holder = self.snap.address_named(namespace, name)
            held = _ip_of(holder) if holder is not None else None
            if held is not None and held != self.pool.address_of(ip):
                self.collisions[ip] = holder
            return True
        first, version = int(self.pool.address_of(ip)), self.pool.version
        last = first + (1 << self.pool.unit_bits) - 1
        # A claim of another pool of the namespace keeps it (a pool sharing the namePrefix takes the same lock:
        # only its own pool's ledger knows the IP is kept, once the claim's address objects are gone).
        if self.snap.kept_elsewhere(claim_namespace or namespace, version, first):
            return True
        if unique:
            return self.snap.held_elsewhere(namespace, version, first, last, for_keeper=for_keeper)
        if not self.kind.cluster_scoped or claim_namespace is None:
            return False
        return any(self.snap.held_elsewhere(ns, version, first, last, for_keeper=for_keeper)
                   for ns in {namespace, claim_namespace})

    def collided(self, err: AllocationError) -> tuple[str, str]:
        """The reason and message of a claim refused because the name of an IP's lock is another IP's: the
        first such IP, the IPAddress holding its name and that address's pool."""
        unit, holder = min(self.collisions.items(), key=lambda item: item[0])
        ref = o.spec(holder).get("pool") or {}
        pool = f"{ref.get('kind') or kinds.IPPOOL[1]} {ref.get('name')}"
        return NAME_COLLISION, (f"{ip_text(self.pool.address_of(unit))} cannot be locked: its IPAddress name "
                                f"{o.name(holder)} is held by the IPAddress of {ip_text(_ip_of(holder))} of {pool} "
                                f"(their names <namePrefix>-<ip> meet; a namePrefix that does not start with the "
                                f"other's followed by '-' keeps them apart): {err.message}")

    def fail(self, claim: dict, step: Step, reason: str, message: str, kept_ref: bool = False,
             event_message: str | None = None) -> None:
        message = _bounded(message)
        self.ledger.unserved[o.claim_key(claim)] = None
        if self.set_claim_status(claim, step, error=(reason, message), kept_ref=kept_ref):
            step.add(Event(o.ref(claim), "Warning", reason, _bounded(event_message or message)))

    def wait(self, claim: dict, step: Step, message: str) -> None:
        """Not served yet, and not failed: the Ready condition says why, no error (Cluster API Metal3
        takes an IPClaim's errorMessage for a failure of the machine), no Event."""
        self.set_claim_status(claim, step, waiting=(WAITING_FOR_CLUSTER, _bounded(message)))

    # -- what claims and addresses look like -----------------------------------

    def set_claim_status(self, claim: dict, step: Step, address: dict | None = None,
                         error: tuple[str, str] | None = None, mirror: dict | None = None,
                         waiting: tuple[str, str] | None = None, kept_ref: bool = False) -> bool:
        """Write the claim's status if it differs; True when a write was planned.

        A Cluster API claim is bound to its Cluster API address (``mirror``),
        a Metal3 claim to its Metal3 address.
        """
        current = o.status(claim)
        capi = kinds.kind_of(claim) == kinds.CAPI_CLAIM
        v1beta1 = capi and str(claim.get("apiVersion", "")).endswith("/v1beta1")
        if address is not None:
            ready = _condition(current, READY, "True", BOUND_REASON,
                               bound_message(o.spec(address).get("address")), self.snap.now, v1beta1)
            desired: dict[str, Any] = ({"addressRef": {"name": o.name(mirror)}} if capi else
                                       {"address": {"name": o.name(address), "namespace": o.namespace(address)}})
        elif waiting is not None:
            ready = _condition(current, READY, "False", *waiting, self.snap.now, v1beta1)
            desired = {}
        else:
            reason, message = error
            ready = _condition(current, READY, "False", reason, message, self.snap.now, v1beta1)
            desired = {} if capi else {"errorMessage": message}
            if kept_ref:  # the address it was bound to before, named still: whatever runs on it is not cut off
                ref = "addressRef" if capi else "address"
                desired[ref] = current[ref]
        moved = self.moved_condition(claim, current, v1beta1)
        twice = self.twice_condition(claim, current, v1beta1, address) if address is not None else None
        elsewhere = self.homed_elsewhere_condition(claim, current, v1beta1)
        desired["conditions"] = [ready] + [c for c in (moved, twice, elsewhere) if c is not None] + [
            c for c in current.get("conditions") or []
            if isinstance(c, Mapping) and c.get("type") not in (READY, POOL_REFERENCE_CHANGED, DUPLICATE_ADDRESS,
                                                                 ADDRESS_HOMED_ELSEWHERE)]
        if {k: current.get(k) for k in desired} == desired and _lacks_only(current, desired):
            return False
        step.add(SetStatus(o.ref(claim), desired, o.meta(claim).get("resourceVersion")))
        for said, reason in ((moved, POOL_REFERENCE_CHANGED), (twice, DUPLICATE_ADDRESS)):
            if said is not None and (o.condition(current, reason) or {}).get("message") != said["message"]:
                step.add(Event(o.ref(claim), "Warning", reason, said["message"]))
        return True

    def twice_condition(self, claim: dict, current: Mapping[str, Any], v1beta1: bool, address: dict) -> dict | None:
        """For a bound claim whose IP a pool this one keeps its IPs apart from holds for another claim too (their
        overlap was shared as separate networks, and no longer is): the condition naming them; None for any
        other. The claim keeps its IP (whatever runs on it is not cut off) and is decided again when an IP of
        another pool goes free, so the condition goes once the other claim lets the IP go."""
        ip = _ip_of(address)
        key = o.claim_key(claim)
        found = self.snap.held_twice(o.namespace(claim), ip.version, int(ip)) if ip is not None else []
        if not found:
            return None
        others = "; ".join(_held_text(held) for _, _, held in found[:4])
        message = _bounded(f"{ip_text(ip)} of {self.pool_text()} is another claim's too: {others}; the pools overlap, and "
                           f"neither is marked a separate network ({kinds.SEPARATE_NETWORK_ANNOTATION}: \"true\"), so "
                           "one IP is bound to two claims of one network; delete one of the claims (created again, it "
                           "is given another IP), or mark the global pool a separate network again")
        self.ledger.doubles[key] = _bounded(f"{o.namespace(claim)}/{o.name(claim)}: {ip_text(ip)}, held by "
                                            f"{found[0][1]} too", 256)
        self.ledger.unserved[key] = None  # decided again when an address of another pool goes
        return _condition(current, DUPLICATE_ADDRESS, "True", DUPLICATE_ADDRESS, message, self.snap.now, v1beta1)

    def homed_elsewhere_condition(self, claim: dict, current: Mapping[str, Any], v1beta1: bool) -> dict | None:
        """For a claim whose key's outside address a sweep found homed at another cluster's object, whose claim
        carries the key too (the sweep writes the Warning Event): the condition saying so; None for any other."""
        key = self.kind.outside.read_key(claim)[0] if self.kind.outside is not None else None
        message = self.snap.homed_elsewhere(key) if key is not None else None
        if message is None:
            return None
        return _condition(current, ADDRESS_HOMED_ELSEWHERE, "True", ADDRESS_HOMED_ELSEWHERE, _bounded(message),
                          self.snap.now, v1beta1)

    def moved_condition(self, claim: dict, current: Mapping[str, Any], v1beta1: bool) -> dict | None:
        """For a claim whose pool reference names another pool than this one, which served it (the inventory
        files it here while this pool's addresses are its): the condition saying so; None for any other."""
        moved, now = o.reference_now(claim)
        if not moved:
            return None
        field = "spec.pool" if kinds.kind_of(claim) == kinds.IPCLAIM else "spec.poolRef"
        pool = self.pool_text()
        # ``moved_from`` reads the pool back: a controller started afresh finds it here when nothing else names it.
        # The reference as it is now is the user's to write (no schema bounds it): cut, so that the message's
        # bound never cuts the pool that served the claim off.
        message = _bounded(f"{field} was changed to {_clipped(str(o.pool_ref_text(now)), MAX_REFERENCE_TEXT)}"
                           f"{_MOVED_FROM}{pool}{_MOVED_UNTIL}: "
                           f"a pool reference is immutable, so {pool} keeps serving the claim and "
                           f"holds its address until it is deleted; set {field} back, or delete the claim and "
                           "create one for the other pool")
        return _condition(current, POOL_REFERENCE_CHANGED, "True", POOL_REFERENCE_CHANGED, message, self.snap.now,
                          v1beta1)

    def lock_for(self, claim: dict, ip, prefix: int | None, gateway: str | None,
                 dns_servers: tuple[str, ...]) -> dict:
        """The Metal3 IPAddress ``<namePrefix>-<ip>`` that holds ``ip`` for ``claim``."""
        pool = self.pool_obj
        capi = kinds.kind_of(claim) == kinds.CAPI_CLAIM
        claim_ref: dict[str, Any] = {"name": o.name(claim), "namespace": o.namespace(claim)}
        if capi:
            claim_ref = {"apiVersion": claim.get("apiVersion"), "kind": claim.get("kind"), **claim_ref}
        spec: dict[str, Any] = {
            "address": ip_text(ip),
            "pool": {"name": o.name(pool), "namespace": o.namespace(pool)},
            "claim": claim_ref,
        }
        if kinds.kind_of(pool) != kinds.IPPOOL:  # an IPPool's lock names it alone, as Metal3's do
            spec["pool"].update(apiVersion=pool.get("apiVersion"), kind=pool.get("kind"))
        if prefix is not None:
            spec["prefix"] = prefix
        if gateway:
            spec["gateway"] = gateway
        if dns_servers:
            spec["dnsServers"] = list(dns_servers)
        metadata: dict[str, Any] = {
            "name": self.pool.lock_name(self.pool.unit_of(int(ip))),
            "namespace": self.lock_namespace(claim),
            "finalizers": [self.finalizers.address[kinds.IPADDRESS]],
            # Pool and claim, no flags: the Go Metal3 IPAM's shape (a drop-in is read by what it
            # writes). Our finalizer, not the garbage collector, keeps the address while its claim lives.
            # A lock of a pool of cluster scope is in another namespace than its claim: owned by the pool
            # alone (the garbage collector would take an owner across namespaces for one that is gone),
            # and without the claim's labels (its Cluster is of the claim's namespace).
            "ownerReferences": [_owner(pool)] + ([] if self.kind.cluster_scoped else [_owner(claim)]),
        }
        labels = o.labels(claim) if not self.kind.cluster_scoped else {}
        if labels:
            metadata["labels"] = labels
        return {"apiVersion": kinds.METAL3_API_VERSION, "kind": "IPAddress", "metadata": metadata, "spec": spec}

    def mirror_owners(self, claim: dict) -> list[dict]:
        """The owner references of a claim's Cluster API IPAddress: the claim (controller), then the pool."""
        pool = self.pool_obj
        owners = [_owner(claim, controller=True, block=True)]
        if pool is not None:
            owners.append(_owner(pool, controller=False if self.kind.explicit_pool_owner else None, block=True))
        return owners

    def capi_address_for(self, claim: dict, address: dict) -> dict:
        """The Cluster API IPAddress mirroring the Metal3 one that holds the lock."""
        spec = o.spec(address)
        ip_version = 4 if ":" not in str(spec.get("address")) else 6
        claim_pool = o.spec(claim).get("poolRef") or {}
        mirror_spec: dict[str, Any] = {
            "claimRef": {"name": o.name(claim)},
            # The kind of pool the claim asked for (it is filed under this pool only when it is this kind).
            "poolRef": {"apiGroup": claim_pool.get("apiGroup"), "kind": claim_pool.get("kind"),
                        "name": self.snap.pool_name},
            "address": spec.get("address"),
            "prefix": spec.get("prefix") if spec.get("prefix") is not None else (32 if ip_version == 4 else 128),
        }
        if spec.get("gateway"):
            mirror_spec["gateway"] = spec["gateway"]
        metadata: dict[str, Any] = {
            "name": o.name(claim),
            "namespace": o.namespace(claim),
            "finalizers": [self.finalizers.address[kinds.CAPI_ADDRESS]],
            "ownerReferences": self.mirror_owners(claim),
        }
        labels = self.kind.address_labels(claim)  # IPPool: all of them, as the Go Metal3 IPAM copies them
        if labels:
            metadata["labels"] = dict(labels)
        return {"apiVersion": claim.get("apiVersion"), "kind": "IPAddress", "metadata": metadata, "spec": mirror_spec}


# -- small pieces -----------------------------------------------------------

def _with_finalizer(obj: dict, finalizer: str) -> SetFinalizers:
    return SetFinalizers(o.ref(obj), tuple(o.finalizers(obj) + [finalizer]), o.meta(obj).get("resourceVersion"))


def _delete(obj: dict, unless_exists: o.Ref | None = None, guard_pool: o.PoolKey | None = None) -> Delete:
    return Delete(o.ref(obj), unless_exists=unless_exists, guard_pool=guard_pool,
                  resource_version=o.meta(obj).get("resourceVersion"))


def _let_go(step: Step, obj: dict, finalizer: str, unless_exists: o.Ref | None = None) -> None:
    """Delete ``obj`` (unless it is going already) and take our finalizer off it."""
    if not o.is_deleting(obj):
        step.add(_delete(obj, unless_exists=unless_exists, guard_pool=o.pool_of(obj) if unless_exists else None))
    if finalizer in o.finalizers(obj):
        step.add(_without_finalizer(obj, finalizer))


def _without_finalizer(obj: dict, finalizer: str) -> SetFinalizers:
    return SetFinalizers(o.ref(obj), tuple(f for f in o.finalizers(obj) if f != finalizer),
                         o.meta(obj).get("resourceVersion"))


def _owned_by(obj: dict, owner: dict) -> bool:
    """Whether an owner reference of ``obj`` names this incarnation of ``owner`` (its uid)."""
    uid = o.meta(owner).get("uid")
    return uid is not None and any(isinstance(r, Mapping) and r.get("uid") == uid
                                   for r in o.meta(obj).get("ownerReferences") or [])


def _owner(obj: dict, controller: bool | None = None, block: bool = False) -> dict:
    """An owner reference to ``obj``; ``controller`` written when True, or False when given as False."""
    ref = {"apiVersion": obj.get("apiVersion"), "kind": obj.get("kind"), "name": o.name(obj),
           "uid": o.meta(obj).get("uid")}
    if controller is not None:
        ref["controller"] = controller
    if block:
        ref["blockOwnerDeletion"] = True
    return ref


def _moving(obj: dict | None) -> bool:
    """Deleted by ``clusterctl move`` after its copy reached the target: clusterctl's to finish."""
    return obj is not None and o.is_deleting(obj) and o.deleted_for_move(obj)


def _is_cluster_ref(ref: Mapping[str, Any], cluster_name: str) -> bool:
    return (ref.get("kind") == "Cluster" and kinds.group_of(str(ref.get("apiVersion", ""))) == kinds.CLUSTER_GROUP
            and ref.get("name") == cluster_name)


def _claim_ref_of_address(address: dict, key: o.ClaimKey | None) -> o.Ref:
    """The claim an address was made for; with its uid when the owner reference tells it."""
    claim = o.spec(address).get("claim") or {}
    kind, claim_name = key[:2] if key else (kinds.IPCLAIM[1], "")
    api_version = claim.get("apiVersion") or (kinds.METAL3_API_VERSION if kind == kinds.IPCLAIM[1]
                                              else f"{kinds.CAPI_IPAM_GROUP}/{kinds.CAPI_IPAM_VERSIONS[0]}")
    return o.Ref(api_version, kind, str(claim.get("namespace") or o.namespace(address)), claim_name,
                 o.claim_uid_of(address, key) if key else None)


def _address_text(address: dict) -> str:
    """An address object as messages name it: its kind (the Cluster API one with its group) and namespace/name."""
    group = f".{kinds.CAPI_IPAM_GROUP}" if kinds.kind_of(address) == kinds.CAPI_ADDRESS else ""
    return f"IPAddress{group} {o.namespace(address)}/{o.name(address)}"


def _held_text(address: dict) -> str:
    """What holds an address object's IP: the claim it names and the object with its pool."""
    capi = kinds.kind_of(address) == kinds.CAPI_ADDRESS
    named = (o.claim_of_capi_address if capi else o.claim_of_address)(address)
    pool = o.pool_of(address)
    of = f" of {pool.kind[1]} {pool.namespace + '/' if pool.namespace else ''}{pool.name}" if pool is not None else ""
    if named is None:
        return f"{_address_text(address)}{of} holds, for no claim"
    claim_ns = named[2] if len(named) > 2 else str((o.spec(address).get("claim") or {}).get("namespace")
                                                  or o.namespace(address))
    return f"{named[0]} {claim_ns}/{named[1]} holds ({_address_text(address)}{of})"


def _live(addresses: list[dict]) -> list[dict]:
    return [a for a in addresses if not o.is_deleting(a)]


def _ip_of(address: dict):
    """An address object's IP (netaddr), or None when its spec does not hold one."""
    return o.address_ip(address)


def _text_of(address: dict) -> str:
    ip = _ip_of(address)
    written = o.spec(address).get("address")
    if ip is None:
        return str(written)
    text = ip_text(ip)
    # The address's own text when it is canonical: one string for the address and the pool's bound map.
    return written if text == written else text


def _span_text(first: int, last: int, version: int) -> str:
    a, b = ip_text(ip_from_int(first, version)), ip_text(ip_from_int(last, version))
    return a if first == last else f"{a}-{b}"


def _instant(text: str) -> datetime.datetime:
    """An RFC 3339 time as the API server writes it; one that cannot be read is long past."""
    try:
        return o.parse_time(text)
    except ValueError:
        return datetime.datetime.min.replace(tzinfo=datetime.timezone.utc)


def left_with(left: tuple[str, str] | None, claim: dict) -> tuple[str, str] | None:
    """``left``, the claim (namespace, name) seen leave for ``clusterctl move`` carrying an allocation key that
    ``claim`` carries, when ``claim`` is another claim: then ``claim`` carries a copy of that key, whose
    address is the moved claim's in the move's target. None: no claim left with the key, or ``claim`` is that
    claim (back with a move back)."""
    return left if left is not None and left != (o.namespace(claim), o.name(claim)) else None


def first_carrier(claims: list[dict], holds: Callable[[dict], bool]) -> dict:
    """The claim that claims carrying one allocation key share it for: one holding its address (``holds``),
    else the one created first (then by namespace and name)."""
    return min(claims, key=lambda c: (not holds(c), str(o.meta(c).get("creationTimestamp") or ""),
                                      o.namespace(c), o.name(c)))


def _passed(deadline: str, now: str) -> bool:
    return _instant(deadline) <= _instant(now)


#: How long a controller leaves a stored lock to its maker before it writes the Cluster API IPAddress the
#: lock lacks: the maker writes it right after the lock, and a view of IPAddresses may trail one of locks.
#: It narrows, for replicas writing at once (no leader election), a race no write can close: a create has no
#: precondition, so an address written from a view that trails can land after its claim was released.
LOCK_SETTLE_SECONDS = 10


def _settled(lock: dict, seconds: int) -> str | None:
    """When a stored lock is old enough for its missing IPAddress to be made by anyone; None for a lock
    planned in this step (not stored yet) or when nothing is left to a maker."""
    made = o.meta(lock).get("creationTimestamp")
    if not made or seconds <= 0:
        return None
    return o.format_time(_instant(made) + datetime.timedelta(seconds=seconds))


def _bounded(message: str, limit: int = MAX_MESSAGE) -> str:
    return _clipped(message, limit)


def _clipped(text: str, most: int) -> str:
    return text if len(text) <= most else text[:most - 1] + "…"


def _held(addresses: list[dict], finalizer: str) -> list[dict]:
    """The addresses a live claim holds, those not being deleted first: an address being
    deleted is kept by its finalizer while its claim exists (unless deleted for a move).
    A claim bound to an address being deleted keeps it and is not given a second one;
    one being deleted that the claim is not bound to is an extra, let go like any other."""
    held = [a for a in addresses if not o.is_deleting(a)
            or (finalizer in o.finalizers(a) and not o.deleted_for_move(a))]
    return sorted(held, key=o.is_deleting)


_MOVED_FROM, _MOVED_UNTIL = ", away from ", ", which gave the claim its address"


def moved_from(claim: Mapping[str, Any]) -> o.PoolKey | None:
    """The pool a claim's ``PoolReferenceChanged`` condition says served it (``moved_condition`` writes it,
    naming the pool as ``Kind [namespace/]name``; kinds are unique by name), or None."""
    moved = o.condition(o.status(claim), POOL_REFERENCE_CHANGED)
    message = moved.get("message") if moved and moved.get("status") == "True" else None
    # The last of those words are the condition's own: the reference before them may hold them too.
    head, until, _ = message.rpartition(_MOVED_UNTIL) if isinstance(message, str) else ("", "", "")
    _, away, pool = head.rpartition(_MOVED_FROM)
    kind_name, _, where = pool.partition(" ")
    kind = next((k for k in poolkind.REGISTRY if k[1] == kind_name), None) if until and away else None
    if kind is None:
        return None
    namespace, _, name = where.rpartition("/")
    scoped = poolkind.REGISTRY[kind].cluster_scoped
    if not name or (namespace == "") != scoped or (not scoped and namespace != o.namespace(claim)):
        return None
    return o.PoolKey(namespace, name, kind)


def _condition(status: Mapping[str, Any], type_: str, value: str, reason: str, message: str,
               now: str, v1beta1: bool = False) -> dict:
    """A condition that keeps its transition time while its status holds."""
    before = o.condition(status, type_)
    since = before.get("lastTransitionTime") if before and before.get("status") == value else None
    condition = {"type": type_, "status": value, "reason": reason, "message": message,
                 "lastTransitionTime": since or now}
    if v1beta1 and value != "True":
        condition["severity"] = {"PoolExhausted": "Warning", WAITING_FOR_CLUSTER: "Info",
                                 ALLOCATION_PENDING: "Info"}.get(reason, "Error")
    return condition


def _lacks_only(current: Mapping[str, Any], desired: Mapping[str, Any]) -> bool:
    """True when ``current`` holds nothing that ``desired`` would drop (lastUpdated aside)."""
    return all(k in desired or k == "lastUpdated" for k in current)
