"""A pool's ledger kept from changes equals one loaded afresh, and its passes keep SPEC §10.

The world of test_model (an API store apart from the controller's cache, fed by
lagging, reordered, repeated watch events and late LISTs, with overlapping
pools, a pausing Cluster, names reused by new incarnations and state the Go
IPAM left) is reused; only the controller's pass differs: it drains the
pool's changes into the pool's ledger and decides what they made dirty, at
most a few steps per pass, with writes the store sometimes refuses. After
every pass the ledger equals one loaded from the cache as the pass saw it,
and when it left nothing for later, its bindings are those a full pass finds.
"""

from __future__ import annotations

import copy

from hypothesis import HealthCheck, settings
from hypothesis import strategies as st
from hypothesis.stateful import initialize, rule

from metal3_ipam.core import kinds
from metal3_ipam.core import objects as o
from metal3_ipam.core.actions import Create
from metal3_ipam.core.indexes import StatusIndex
from metal3_ipam.core.ledger import Ledger, compare, compare_maps
from metal3_ipam.core.reconcile import needs_full, plan_pass, run_to_end
from metal3_ipam.memory import Refused
from world_model import ControllerInTheWorld


class KeptLedgersInTheWorld(ControllerInTheWorld):
    @initialize(seed=st.integers(0, 10_000), shared_prefix=st.booleans(), with_go=st.booleans(),
                max_steps=st.sampled_from([1, 2, 3, None]))
    def start(self, seed, shared_prefix, with_go, max_steps):
        super().start(seed, shared_prefix, with_go)
        self.ledgers: dict[tuple[str, str], Ledger] = {}
        self.max_steps = max_steps
        self.refuse_at: int | None = None
        self.full_passes = 0

    @rule(k=st.integers(0, 6))
    def a_write_of_the_next_pass_is_refused(self, k):
        """A conflict, a timeout, a webhook saying no: the write does not happen."""
        self.refuse_at = k

    def run_pass(self, pool_key) -> bool:
        ledger = self.ledgers.setdefault(pool_key, Ledger())
        reload, changes = self.cache.drain(pool_key)
        # The pool's objects as this pass sees them (the cache's objects are replaced, never changed).
        seen = self.cache.snapshot(pool_key, self.store.now, self.rng)
        context = self.cache.snapshot(pool_key, self.store.now, self.rng, members=False)
        if reload or needs_full(ledger, context):
            self.full_passes += 1
            ledger = self.ledgers[pool_key] = Ledger()
            plan = run_to_end(plan_pass(ledger, seen, full=True, max_steps=self.max_steps))
        else:
            plan = run_to_end(plan_pass(ledger, context, changes, max_steps=self.max_steps,
                                        status_due=self.rng.random() < 0.5))
        # A full pass over what this pass saw, before the plan is carried out (it looks up names in the cache).
        fresh = Ledger()
        full_plan = run_to_end(plan_pass(fresh, seen, full=True))
        fresh.settle()
        refused = self.execute(plan)
        ledger.settle()
        if refused:
            ledger.needs_full = True
        self.kept_equals_recomputed(ledger, fresh, full_plan)
        return bool(plan) or ledger.pending_steps or ledger.status_pending

    def execute(self, plan) -> bool:
        refused = False
        count = 0
        for step in plan.steps:
            for action in step.actions:
                try:
                    if self.refuse_at is not None and count == self.refuse_at:
                        self.refuse_at = None
                        raise Refused("refused on purpose")
                    count += 1
                    self.store.do(action)
                except Refused:
                    refused = True
                    if isinstance(action, Create):
                        taken = self.store.inventory.get(kinds.kind_of(action.obj), o.namespace(action.obj),
                                                         o.name(action.obj))
                        if taken is not None:
                            self.cache.upsert(copy.deepcopy(taken))
                    break
                self.answer(action)
        return refused

    def kept_equals_recomputed(self, ledger: Ledger, fresh: Ledger, full_plan) -> None:
        if ledger.needs_full:
            return  # paused, or writes refused: the next pass loads it afresh anyway
        assert ledger.state(decisions=False) == fresh.state(decisions=False), run_to_end(compare(ledger, fresh))
        assert not run_to_end(compare(ledger, fresh))
        # status.indexes as kept in order across passes, against the bindings sorted afresh.
        assert run_to_end(ledger.index.build(ledger.bound)) == run_to_end(StatusIndex().build(ledger.bound))
        allocating = any(isinstance(a, Create) and kinds.kind_of(a.obj) == kinds.IPADDRESS
                         for a in full_plan.writes)
        if not ledger.pending_steps and not allocating:
            found: list[str] = []
            run_to_end(compare_maps("bound", ledger.bound, fresh.bound, lambda text: text, found))
            assert ledger.bound == fresh.bound and not found, found


KeptLedgersInTheWorld.TestCase.settings = settings(
    max_examples=150, stateful_step_count=40, deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.filter_too_much])
test_a_ledger_kept_from_changes_equals_a_recompute_after_any_events = KeptLedgersInTheWorld.TestCase


def test_a_kept_ledger_binds_a_claim_refused_for_an_ip_another_claim_no_longer_keeps():
    """A Go-written address is not taken up while its IP is kept for another claim whose status names it.

    Once that status is rewritten to name another IP, the claim of the address is decided again and bound,
    by a ledger kept from changes as by one loaded afresh (a draw of the property above, shrunk)."""
    state = KeptLedgersInTheWorld()
    state.start(seed=379, max_steps=1, shared_prefix=True, with_go=True)
    for capi, paused_cluster, pool in [(False, False, "pa"), (True, False, "pa"), (False, False, "pa"),
                                       (True, True, "pa"), (False, True, "pa"), (True, False, "gopool"),
                                       (False, False, "gopool")]:
        state.user_creates_claim(capi=capi, paused_cluster=paused_cluster, pool=pool)
    state.user_rewrites_a_claim_status(j=28, k=14)
    for capi, paused_cluster, pool in [(False, False, "pa"), (False, False, "pa"), (True, True, "pb"),
                                       (False, False, "pb")]:
        state.user_creates_claim(capi=capi, paused_cluster=paused_cluster, pool=pool)
    state.user_rewrites_a_claim_status(j=32, k=11)
    state.teardown()  # every pass compares the kept ledger with a recompute
    assert [ledger.bound.get(("IPClaim", "go-0")) for key, ledger in state.ledgers.items()
            if key[1] == "gopool"] == ["10.0.0.1"]
