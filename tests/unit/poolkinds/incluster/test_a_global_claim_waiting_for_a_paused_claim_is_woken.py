"""A claim of a global pool in a namespace waits while a paused claim of the namespace's pools may still be handed,
by a pass of its pool made before the pause, what no guard of the global pool's allocation meets (``paused_unmet``:
an IPPool's pass made while no global IP pool existed, a prefix pool's gone with its length). The wait ends as soon
as that claim is unpaused, names what it is handed, is served, or is gone, or its Cluster is: the passes those events
bring serve the waiting claim, each pool's ledger kept across passes as the controller keeps it, with no audit or
full resync to find it (``kept_passes``). Run through the real reconcile in the in-memory store."""

from __future__ import annotations

import copy

import pytest
from hypothesis import HealthCheck, settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, initialize, invariant, rule

from metal3_ipam.core import kinds
from metal3_ipam.core import objects as o
from metal3_ipam.core.actions import Plan, Step
from metal3_ipam.core.reconcile import reconcile, waited_for
from metal3_ipam.testing import go_incluster as gi
from ipam_objects import cluster, converged_with_lock_namespace, get, held_spans, user_delete
from kept_passes import KeptPasses

NS = "default"
GLOBAL_PREFIXES = (gi.GROUP, gi.GLOBAL_IN_CLUSTER_PREFIX_POOL)
PREFIXES = (gi.GROUP, gi.IN_CLUSTER_PREFIX_POOL)
GLOBAL = o.PoolKey("", "g", GLOBAL_PREFIXES)
CREATED = {"creationTimestamp": "2024-01-01T00:00:00Z"}
# The namespaced pool's kind, the length it hands out, and what became of it after its pass for the paused claim
# was made: what no guard of the global pool's allocation meets.
UNMET = [(kinds.IPPOOL, 128, "edited"), (PREFIXES, 127, "deleted")]


def _namespaced(kind, length):
    if kind == PREFIXES:
        pool = gi.prefix_pool("n", prefixes=["fd00::/124"], namespace=NS, allocation_prefix_length=length)
    else:
        pool = {"apiVersion": kinds.METAL3_API_VERSION, "kind": "IPPool", "metadata": {"name": "n", "namespace": NS},
                "spec": {"namePrefix": "n", "pools": [{"start": "fd00::", "end": "fd00::f"}], "prefix": 64}}
    pool["metadata"].update(CREATED)
    return pool


def _claim_of_n(kind):
    if kind == kinds.IPPOOL:
        claim = {"apiVersion": gi.CAPI_API_VERSION, "kind": "IPAddressClaim", "metadata": {"name": "a", "namespace": NS},
                 "spec": {"poolRef": {"apiGroup": kinds.METAL3_GROUP, "kind": "IPPool", "name": "n"}}}
    else:
        claim = gi.claim("a", NS, kind[1], "n")
    claim["metadata"]["labels"] = {kinds.CLUSTER_NAME_LABEL: "cl"}
    return claim


def _pause(api, paused):
    api._store({**cluster("cl", paused=paused), "metadata": copy.deepcopy(get(api, kinds.CLUSTER, "cl")["metadata"])})


def _waiting(local_kind, local_length, how):
    """Claim a (of Cluster cl) of the namespaced pool n; n's pass for it made, then cl paused and n deleted or edited
    off fd00::/124; then claim d of a global prefix pool over fd00::/124, which the passes leave waiting for a. The
    store, the passes, and n's pass (naming a's span first) on its way."""
    api = converged_with_lock_namespace(_namespaced(local_kind, local_length), cluster("cl"))
    api.load(_claim_of_n(local_kind))
    on_its_way = reconcile(api.inventory.snapshot(o.PoolKey(NS, "n", local_kind), api.now))
    _pause(api, True)
    if how == "deleted":
        user_delete(api, local_kind, "n", NS)
        api.apply(reconcile(api.inventory.snapshot(o.PoolKey(NS, "n", local_kind), api.now)))
        assert get(api, local_kind, "n", NS) is None
    else:
        pool = copy.deepcopy(get(api, local_kind, "n", NS))
        pool["spec"]["pools"] = [{"start": "fd00::100", "end": "fd00::100"}]
        api._store(pool)
    passes = KeptPasses(api)
    passes.settle()
    pool = gi.prefix_pool("g", prefixes=["fd00::/124"], allocation_prefix_length=126)
    pool["metadata"].update(CREATED)
    api.load(pool)
    api.load(gi.claim("d", NS, GLOBAL_PREFIXES[1], "g"))
    passes.settle()
    assert get(api, kinds.CAPI_ADDRESS, "d", NS) is None
    ready = o.condition(o.status(get(api, kinds.CAPI_CLAIM, "d")), "Ready")
    assert (ready["status"], ready["reason"]) == ("False", "WaitingForCluster"), ready
    return api, passes, on_its_way


def _settle_incrementally(passes):
    """The passes the events brought, the global pool's over its ledger as kept (not loaded afresh)."""
    before = len(passes.full_passes)
    passes.settle()
    assert GLOBAL not in passes.full_passes[before:], passes.full_passes[before:]


def _served_apart(api, local_kind, local_length):
    assert get(api, kinds.CAPI_ADDRESS, "d", NS) is not None
    ready = o.condition(o.status(get(api, kinds.CAPI_CLAIM, "d")), "Ready")
    assert ready["status"] == "True", ready
    spans = held_spans(api, {GLOBAL_PREFIXES[1]: 126, local_kind[1]: local_length})
    assert all(len(claims) == 1 for claims in spans.values()), spans


@pytest.mark.parametrize("local_kind, local_length, how", UNMET)
def test_a_global_claim_waiting_for_a_paused_claim_is_served_by_the_passes_after_that_claim_is_deleted(
        local_kind, local_length, how):
    api, passes, _ = _waiting(local_kind, local_length, how)
    user_delete(api, kinds.CAPI_CLAIM, "a")
    _settle_incrementally(passes)
    _served_apart(api, local_kind, local_length)


@pytest.mark.parametrize("local_kind, local_length, how", UNMET)
def test_a_global_claim_waiting_for_a_paused_claim_is_served_by_the_passes_after_that_claim_is_served(
        local_kind, local_length, how):
    """n's pass made before the pause lands (a is not written meanwhile: its lock, address and status go through)."""
    api, passes, on_its_way = _waiting(local_kind, local_length, how)
    api.apply(on_its_way)
    assert get(api, kinds.CAPI_ADDRESS, "a", NS) is not None
    _settle_incrementally(passes)
    _served_apart(api, local_kind, local_length)


@pytest.mark.parametrize("local_kind, local_length, how", UNMET)
def test_a_global_claim_waiting_for_a_paused_claim_is_served_by_the_passes_after_that_claim_names_its_span(
        local_kind, local_length, how):
    """n's pass made before the pause names what it hands out on claim a (its first action) and stops there: the
    global pool's allocation keeps off what a names, and the rest of n's pass may land later."""
    api, passes, on_its_way = _waiting(local_kind, local_length, how)
    (step,) = [s for s in on_its_way.steps if s.subject.endswith(f"{NS}/a")]
    api.do(step.actions[0])
    assert kinds.ALLOCATING_ANNOTATION in o.annotations(get(api, kinds.CAPI_CLAIM, "a"))
    _settle_incrementally(passes)
    assert get(api, kinds.CAPI_ADDRESS, "d", NS) is not None
    api.apply(Plan(steps=[Step(step.subject, step.actions[1:], step.about)]))
    passes.settle()
    _served_apart(api, local_kind, local_length)


@pytest.mark.parametrize("local_kind, local_length, how", UNMET)
def test_a_global_claim_waiting_for_a_paused_claim_is_served_by_the_passes_after_its_cluster_is_unpaused(
        local_kind, local_length, how):
    api, passes, _ = _waiting(local_kind, local_length, how)
    _pause(api, False)
    passes.settle()
    _served_apart(api, local_kind, local_length)


@pytest.mark.parametrize("local_kind, local_length, how", UNMET)
def test_a_global_claim_waiting_for_a_paused_claim_is_served_by_the_passes_after_its_cluster_is_deleted(
        local_kind, local_length, how):
    api, passes, _ = _waiting(local_kind, local_length, how)
    api.inventory.remove(copy.deepcopy(get(api, kinds.CLUSTER, "cl")))
    passes.settle()
    _served_apart(api, local_kind, local_length)


def test_a_change_of_another_claim_of_the_namespace_brings_the_waiting_claims_pool_no_pass():
    """Claim b of n (of no Cluster) created and served: d still waits for a, and its pool is not passed."""
    api, passes, _ = _waiting(kinds.IPPOOL, 128, "edited")
    before = len(passes.passed)
    b = _claim_of_n(kinds.IPPOOL)
    b["metadata"].update(name="b", labels={})
    api.load(b)
    passes.settle()
    assert get(api, kinds.CAPI_ADDRESS, "b", NS) is not None
    assert GLOBAL not in passes.passed[before:], passes.passed[before:]
    assert get(api, kinds.CAPI_ADDRESS, "d", NS) is None


class WaitsInTheWorld(RuleBasedStateMachine):
    """From claim d of the global pool waiting for paused claim a: n's pass made before the pause landing an action
    at a time, claims of either pool created (of Cluster cl or none) and deleted, cl paused and unpaused, each
    followed by the passes it brings. Once they settle, no claim waits for a reason that no longer holds: a pass
    over its pool's ledger loaded afresh would leave it as it is."""

    @initialize(case=st.sampled_from(UNMET))
    def start(self, case):
        self.local_kind = case[0]
        self.api, self.passes, on_its_way = _waiting(*case)
        (step,) = [s for s in on_its_way.steps if s.subject.endswith(f"{NS}/a")]
        self.subject, self.on_its_way = step.subject, list(step.actions)
        self.made = 0

    @rule()
    def an_action_of_ns_pass_made_before_the_pause_lands(self):
        if self.on_its_way:
            self.api.apply(Plan(steps=[Step(self.subject, [self.on_its_way.pop(0)])]))
        self.passes.settle()

    @rule(of_global=st.booleans(), of_cluster=st.booleans())
    def user_creates_a_claim(self, of_global, of_cluster):
        self.made += 1
        claim = gi.claim(f"c{self.made}", NS, GLOBAL_PREFIXES[1], "g") if of_global else _claim_of_n(self.local_kind)
        claim["metadata"]["name"] = f"c{self.made}"
        if not of_cluster:
            claim["metadata"].pop("labels", None)
        self.api.load(claim)
        self.passes.settle()

    @rule(k=st.integers(0, 20))
    def user_deletes_a_claim(self, k):
        claims = sorted(o.name(c) for c in self.api.inventory.of_kind(kinds.CAPI_CLAIM) if not o.is_deleting(c))
        if claims:
            user_delete(self.api, kinds.CAPI_CLAIM, claims[k % len(claims)])
        self.passes.settle()

    @rule(paused=st.booleans())
    def user_pauses_or_unpauses_the_cluster(self, paused):
        _pause(self.api, paused)
        self.passes.settle()

    @invariant()
    def no_claim_waits_for_a_reason_that_no_longer_holds(self):
        inventory, plans = self.api.inventory, {}
        for claim in inventory.of_kind(kinds.CAPI_CLAIM):
            if waited_for(claim) is None:
                continue
            key = (kinds.CAPI_CLAIM, NS, o.name(claim))
            pool = inventory.filed_with(*key)
            if pool not in plans:
                plans[pool] = reconcile(inventory.snapshot(pool, self.api.now))
            decided = [s for s in plans[pool].steps
                       if s.about is not None and (s.about.group_kind, s.about.namespace, s.about.name) == key]
            assert not decided, (o.status(claim), plans[pool].describe())


WaitsInTheWorld.TestCase.settings = settings(max_examples=40, stateful_step_count=10, deadline=None,
                                             suppress_health_check=[HealthCheck.too_slow])
test_no_claim_waits_for_a_paused_claim_once_its_wait_ended = WaitsInTheWorld.TestCase
