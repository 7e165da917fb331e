"""The entry points of a pass (``reconcile``, ``plan_pass``, ``load``, ``needs_full``) and the pass itself: the
addresses and claims it decides, in slices that yield, within a budget of steps; each claim served as its state
says (released, kept, adopted or given an address)."""

from __future__ import annotations

import itertools
from contextlib import contextmanager
from collections.abc import Generator, Iterable, Iterator

from .. import kinds
from .. import objects as o
from ..actions import Plan
from ..ledger import CAPI, METAL3, Ledger, ObjKey
from ..overlap import withheld_spans
from .. import poolkind
from ..pool import Pool
from ..problems import Problem
from .adoption import Adoption
from .allocation import Allocation
from .binding import Binding
from .conditions import ClaimStatus
from .guards import Guards
from .outside import OutsideKeys
from .pieces import _add_finalizer, _held, _instant, _live, _moving, _passed, _without_finalizer
from .pool_status import PoolStatus
from .release import Release
from .snapshot import Snapshot


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
    indexes is put off (``ledger.status_pending``).
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
        claims.update((key, None) for key, deadline in list(ledger.deadlines.items()) if _passed(deadline, snap.now))
    plan = yield from _Reconciler(snap, ledger, model, status_due).run(claims, addresses, max_steps)
    plan.due = min(ledger.deadlines.values(), key=_instant, default=None)
    return plan


def _model(snap: Snapshot) -> tuple[Pool | None, list[Problem]]:
    if snap.pool is None:
        return None, []
    return snap.model if snap.model is not None else poolkind.read(snap.pool)


# Decisions between two yields of a pass: about a millisecond of work (the caller
# decides how many such pieces it runs before the event loop gets its turn).
DECISIONS_PER_YIELD = 32


class _Reconciler(Release, Adoption, Binding, Allocation, Guards, OutsideKeys, PoolStatus, ClaimStatus):
    """One pass over a pool: every part of the decisions, over one state."""

    def run(self, claim_keys: Iterable[o.ClaimKey], address_keys: Iterable[tuple[str, str]],
            max_steps: int | None) -> Generator[None, None, Plan]:
        ledger = self.ledger
        self.take_answers(claim_keys)  # before the first yield: the answers are a value for the whole pass
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
                ledger.pending_addresses[(tag, name)] = None
                continue
            address = (ledger.addresses if tag == METAL3 else ledger.capi_addresses).get(name)
            if address is None or self.address_paused(address):
                continue
            with self._counted(budget):
                (self.tend_address if tag == METAL3 else self.tend_capi_address)(address)
            decided += 1
            if decided % DECISIONS_PER_YIELD == 0:
                yield
        holding, pending = [], []
        for n, key in enumerate(claim_keys, 1):
            claim = ledger.claims.get(key)
            if claim is None:
                ledger.unbind(key)
                ledger.pending_free.pop(key, None)
                ledger.pending_answers.pop(key, None)
            elif not self.snap.serves(o.namespace(claim)):
                pass  # served elsewhere (``-n``): what it holds or its status keeps is held here all the same
            elif not self.claim_paused(claim) and not self.holds_anything(claim):
                pending.append(claim)
            else:
                holding.append(claim)
            if n % (4 * DECISIONS_PER_YIELD) == 0:
                yield
        # Claims whose address objects were deleted get their own IP back before any other is served.
        pending.sort(key=lambda claim: o.claim_key(claim) not in ledger.kept)
        for claim in holding:
            if budget[0] <= 0:
                ledger.pending_claims[o.claim_key(claim)] = None
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
        if self.adopting or ledger.pending_claims:
            if self.adopting:
                self.plan.notes.append(f"{len(pending)} claim(s) wait until {self.adopting} adopted address(es) hold their lock")
            for claim in pending:
                ledger.pending_claims[o.claim_key(claim)] = None
        else:
            for claim in pending:
                if budget[0] <= 0:
                    ledger.pending_claims[o.claim_key(claim)] = None
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
        self.ledger.pending_free.pop(key, None)
        self.ledger.pending_answers.pop(key, None)
        with self._counted(budget):
            yield
        if self.ledger.bound.get(key) != bound:
            self.ledger.rebound(key)
        if self.ledger.conflicts.get(key) != conflict or self.ledger.doubles.get(key) != double:
            self.ledger.conflicts_version += 1

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
        self.ledger.deadlines.pop(key, None)  # a live claim has no deadline but the one this pass may set again
        live = _held(mine, self.finalizers.address[kinds.IPADDRESS])
        written = self.written_over_lock(claim, live) if live else None
        if self.fenced_leftovers(claim, live, step):
            pass  # what a refused pass left goes, never taken up; the claim is served anew once it is gone
        elif written is not None:
            self.adopt_over(claim, live, *written, step)
        elif live:
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
            _add_finalizer(step, claim, finalizer)
        elif not holds and finalizer in o.finalizers(claim):
            step.add(_without_finalizer(claim, finalizer))
