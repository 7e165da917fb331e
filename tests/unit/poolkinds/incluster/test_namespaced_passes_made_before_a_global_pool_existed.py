"""A namespaced pool's pass made while no global pool over its addresses existed, landing after its pool was
deleted (gone: it had no address yet) or edited off the IP, and a global pool created meanwhile handed the IP or a
sub-prefix holding it to a claim of the namespace. The two allocations must meet on one guard's name, whatever
each pass saw of the other pool. Unlike the shapes of test_global_pool_overlap, no other claim of the namespaced
pool holds an IP next to the one on its way (which keeps the global pool off that sub-prefix whatever the guards).
Run through the real reconcile in the in-memory store."""

from __future__ import annotations

import copy
import random

import pytest

from metal3_ipam.core import kinds, poolkind
from metal3_ipam.core import objects as o
from metal3_ipam.core.actions import Plan, Step, StepVersions
from metal3_ipam.core.reconcile import reconcile
from metal3_ipam.memory import MemoryApi, converge
from metal3_ipam.testing import go_incluster as gi
from ipam_objects import converged_with_lock_namespace as _converged, held_spans
from ipam_objects import capi_address, cluster, get, set_meta, user_delete

NS = "default"
GLOBAL_IPS = (gi.GROUP, gi.GLOBAL_IN_CLUSTER_IP_POOL)
GLOBAL_PREFIXES = (gi.GROUP, gi.GLOBAL_IN_CLUSTER_PREFIX_POOL)
IPS = (gi.GROUP, gi.IN_CLUSTER_IP_POOL)
PREFIXES = (gi.GROUP, gi.IN_CLUSTER_PREFIX_POOL)
CREATED = {"creationTimestamp": "2024-01-01T00:00:00Z"}


def _global(length):
    """A global pool over fd00::/124: of IPs (``length`` 128), or handing out sub-prefixes of ``length``."""
    if length == 128:
        pool = gi.ip_pool("g", addresses=["fd00::-fd00::f"], prefix=64)
    else:
        pool = gi.prefix_pool("g", prefixes=["fd00::/124"], allocation_prefix_length=length)
    pool["metadata"].update(CREATED)
    return pool


def _namespaced(kind, length):
    """A pool of the namespace over fd00::/124 of ``kind``: IPs, or sub-prefixes of ``length``."""
    if kind == IPS:
        pool = gi.ip_pool("n", namespace=NS, addresses=["fd00::-fd00::f"], prefix=64)
    elif kind == PREFIXES:
        pool = gi.prefix_pool("n", prefixes=["fd00::/124"], namespace=NS, allocation_prefix_length=length)
    else:
        pool = {"apiVersion": kinds.METAL3_API_VERSION, "kind": "IPPool", "metadata": {"name": "n", "namespace": NS},
                "spec": {"namePrefix": "n", "pools": [{"start": "fd00::", "end": "fd00::f"}], "prefix": 64}}
    pool["metadata"].update(CREATED)
    return pool


AWAY = {IPS: {"addresses": ["fd00::100"]}, PREFIXES: {"prefixes": ["fd00::100/124"]},
        kinds.IPPOOL: {"pools": [{"start": "fd00::100", "end": "fd00::100"}]}}


def _claim(name, pool, kind):
    if kind == kinds.IPPOOL:
        return {"apiVersion": gi.CAPI_API_VERSION, "kind": "IPAddressClaim",
                "metadata": {"name": name, "namespace": NS},
                "spec": {"poolRef": {"apiGroup": kinds.METAL3_GROUP, "kind": "IPPool", "name": pool}}}
    return gi.claim(name, NS, kind[1], pool)


# (the namespaced pool's kind, its length; the global pool's length)
CASES = [(IPS[1], 128, 126), ("IPPool", 128, 126), (PREFIXES[1], 127, 126), (PREFIXES[1], 125, 126),
         (PREFIXES[1], 126, 126), (PREFIXES[1], 127, 128), (IPS[1], 128, 128)]


def _pool_changed(api, local_kind, how: str) -> None:
    """The namespaced pool n deleted (no address holds it: gone once its finalizer is taken off) or edited off the
    IPs its pass on its way hands out."""
    if how == "deleted":
        user_delete(api, local_kind, "n", NS)
        api.apply(reconcile(api.inventory.snapshot(o.PoolKey(NS, "n", local_kind), api.now)))
        assert get(api, local_kind, "n", NS) is None
    else:
        pool = copy.deepcopy(get(api, local_kind, "n", NS))
        pool["spec"] = {**pool["spec"], **AWAY[local_kind]}
        api._store(pool)


def _started_afresh(api: MemoryApi) -> MemoryApi:
    """A controller started now: its view holds every object as it is now, and none of their earlier specs."""
    started = MemoryApi(now=api.now)
    started.inventory.lock_namespace = api.inventory.lock_namespace
    for obj in api.inventory.objects.values():
        started.inventory.upsert(copy.deepcopy(obj))
    return started


@pytest.mark.parametrize("local, local_length, global_length, how",
                         [(*case, how) for case in CASES for how in ("deleted", "edited")])
def test_a_namespaced_pass_made_before_a_global_pool_existed_never_takes_what_that_pool_handed_out(
        local, local_length, global_length, how):
    local_kind = kinds.IPPOOL if local == "IPPool" else (gi.GROUP, local)
    global_kind = GLOBAL_IPS if global_length == 128 else GLOBAL_PREFIXES
    api = _converged(_namespaced(local_kind, local_length))
    api.load(_claim("a", "n", local_kind))
    on_its_way = reconcile(api.inventory.snapshot(o.PoolKey(NS, "n", local_kind), api.now))
    _pool_changed(api, local_kind, how)
    api.load(_global(global_length))
    api.load(_claim("d", "g", global_kind))
    api.apply(reconcile(api.inventory.snapshot(o.PoolKey("", "g", global_kind), api.now)))
    api.apply(on_its_way)
    converge(api, random.Random(0))
    spans = held_spans(api, {global_kind[1]: global_length, local_kind[1]: local_length})
    assert all(len(claims) == 1 for claims in spans.values()), spans


def test_a_global_pools_allocation_by_a_controller_started_after_a_prefix_pool_became_invalid_meets_its_pass():
    """A namespaced prefix pool's pass (fd00::/127) made; its spec edited invalid (an unaligned prefix, the webhook
    bypassed); a controller started afresh serves a global IP pool created over it; the namespaced pass lands."""
    api = _converged(gi.prefix_pool("n", prefixes=["fd00::/126"], namespace=NS, allocation_prefix_length=127))
    api.load(_claim("a", "n", PREFIXES))
    on_its_way = reconcile(api.inventory.snapshot(o.PoolKey(NS, "n", PREFIXES), api.now))
    pool = copy.deepcopy(get(api, PREFIXES, "n", NS))
    pool["spec"]["prefixes"] = ["fd00::1/126"]
    api._store(pool)
    api.load(_global(128))
    api.load(_claim("d", "g", GLOBAL_IPS))
    api.apply(reconcile(_started_afresh(api).inventory.snapshot(o.PoolKey("", "g", GLOBAL_IPS), api.now)))
    api.apply(on_its_way)
    converge(api, random.Random(0))
    spans = held_spans(api, {GLOBAL_IPS[1]: 128, PREFIXES[1]: 127})
    assert all(len(claims) == 1 for claims in spans.values()), spans


@pytest.mark.parametrize("local", [IPS[1], "IPPool"])
def test_a_global_pools_allocation_keeps_off_the_ip_a_namespaced_pools_claim_names_as_being_handed_to_it(local):
    """The namespaced pool's pass wrote its claim (naming its first IP) before the global pool's pass read it, the
    rest of it on its way: the global pool's allocation keeps off the span holding that IP, and writes the claim,
    which refuses only the status write of the namespaced pass; the claim takes up what that pass wrote."""
    local_kind = kinds.IPPOOL if local == "IPPool" else (gi.GROUP, local)
    api = _converged(_namespaced(local_kind, 128))
    api.load(_claim("a", "n", local_kind))
    on_its_way = reconcile(api.inventory.snapshot(o.PoolKey(NS, "n", local_kind), api.now))
    (step,) = [s for s in on_its_way.steps if s.subject.endswith(f"{NS}/a")]
    api.do(step.actions[0])
    named = o.annotations(get(api, kinds.CAPI_CLAIM, "a"))[kinds.ALLOCATING_ANNOTATION]
    assert named in ("fd00::", "fd00::1"), named  # each kind's first IP of fd00::/124, in fd00::/126
    user_delete(api, local_kind, "n", NS)
    api.load(_global(126))
    api.load(_claim("d", "g", GLOBAL_PREFIXES))
    global_plan = reconcile(api.inventory.snapshot(o.PoolKey("", "g", GLOBAL_PREFIXES), api.now))
    assert kinds.FENCED_ANNOTATION in next(a.annotations for a in global_plan.writes
                                           if getattr(a, "target", None) and a.target.name == "a")
    assert not api.apply(global_plan)
    api.apply(Plan(steps=[Step(step.subject, step.actions[1:], step.about)]))
    converge(api, random.Random(0))
    assert o.spec(get(api, kinds.CAPI_ADDRESS, "d", NS))["address"] == "fd00::4"
    spans = held_spans(api, {GLOBAL_PREFIXES[1]: 126, local_kind[1]: 128})
    assert all(len(claims) == 1 for claims in spans.values()), spans


PAUSED = [(IPS[1], 128, "edited"), (IPS[1], 128, "deleted"), ("IPPool", 128, "edited"), (PREFIXES[1], 127, "edited"),
          (PREFIXES[1], 127, "deleted")]


@pytest.mark.parametrize("local, local_length, how", PAUSED)
def test_a_namespaced_pass_for_a_claim_whose_cluster_was_paused_since_never_takes_what_a_global_pool_handed_out(
        local, local_length, how):
    """A paused claim is not written: the global pool's allocation guards each IP or sub-prefix of its own of the
    length the namespaced pool hands out, as the namespaced pool's allocation guards it, and the two meet on one
    guard's name; where no name could meet (an IPPool's pass made while no global IP pool existed, a prefix pool
    gone with its length), the global pool hands nothing to a claim of the namespace meanwhile."""
    local_kind = kinds.IPPOOL if local == "IPPool" else (gi.GROUP, local)
    api, on_its_way = _paused_after_its_pass(local_kind, local_length, how)
    api.load(_global(126))
    api.load(_claim("d", "g", GLOBAL_PREFIXES))
    api.apply(reconcile(api.inventory.snapshot(o.PoolKey("", "g", GLOBAL_PREFIXES), api.now)))
    api.apply(on_its_way)
    spans = held_spans(api, {GLOBAL_PREFIXES[1]: 126, local_kind[1]: local_length})
    assert all(len(claims) == 1 for claims in spans.values()), spans


def _paused_after_its_pass(local_kind, local_length, how, named_first=False):
    """Claim a (of Cluster cl) of the namespaced pool; its pool's pass made (``named_first``: the claim written as
    its first action, naming what it hands out), then cl paused and the pool deleted or edited off fd00::/124.
    The store, and the pass (the rest of it) on its way."""
    api = _converged(_namespaced(local_kind, local_length), cluster("cl"))
    claim = _claim("a", "n", local_kind)
    claim["metadata"]["labels"] = {kinds.CLUSTER_NAME_LABEL: "cl"}
    api.load(claim)
    on_its_way = reconcile(api.inventory.snapshot(o.PoolKey(NS, "n", local_kind), api.now))
    if named_first:
        (step,) = [s for s in on_its_way.steps if s.subject.endswith(f"{NS}/a")]
        api.do(step.actions[0])
        named = get(api, kinds.CAPI_CLAIM, "a")
        assert kinds.ALLOCATING_ANNOTATION in o.annotations(named)
        # The rest of the step expects the version its first write made, as the controller runs a step.
        versions = StepVersions()
        versions.wrote(step.actions[0], o.meta(named)["resourceVersion"])
        rest = [versions.current(a) for a in step.actions[1:]]
        on_its_way = Plan(steps=[Step(s.subject, rest, s.about) if s is step else s for s in on_its_way.steps])
    _pause(api, True)
    _pool_changed(api, local_kind, how)
    return api, on_its_way


def _pause(api, paused):
    api._store({**cluster("cl", paused=paused), "metadata": copy.deepcopy(get(api, kinds.CLUSTER, "cl")["metadata"])})


@pytest.mark.parametrize("local, local_length, how", PAUSED)
def test_a_global_pools_allocation_keeps_off_what_a_paused_claim_of_a_namespaced_pool_names_as_being_handed_to_it(
        local, local_length, how):
    """The namespaced pass named its IP or sub-prefix on claim a before a's Cluster was paused, the rest of it on its
    way: the global pool's allocation reads the paused claim (without writing it) and keeps off that span, the
    namespaced pass lands, and once unpaused every claim keeps what it has."""
    local_kind = kinds.IPPOOL if local == "IPPool" else (gi.GROUP, local)
    api, on_its_way = _paused_after_its_pass(local_kind, local_length, how, named_first=True)
    api.load(_global(126))
    api.load(_claim("d", "g", GLOBAL_PREFIXES))
    api.apply(reconcile(api.inventory.snapshot(o.PoolKey("", "g", GLOBAL_PREFIXES), api.now)))
    assert o.spec(get(api, kinds.CAPI_ADDRESS, "d", NS))["address"] == "fd00::4"
    api.apply(on_its_way)  # but its writes of the claim as read before it was named, and of its pool gone
    named = o.annotations(get(api, kinds.CAPI_CLAIM, "a"))[kinds.ALLOCATING_ANNOTATION].partition("/")[0]
    lengths = {GLOBAL_PREFIXES[1]: 126, local_kind[1]: local_length}
    spans = held_spans(api, lengths)
    assert spans[(NS, named)] == {"a"} and spans[(NS, "fd00::4")] == {"d"}, spans
    _pause(api, False)
    converge(api, random.Random(0))
    spans = held_spans(api, lengths)
    assert all(len(claims) == 1 for claims in spans.values()), spans


@pytest.mark.parametrize("local, local_length, how", PAUSED)
def test_a_global_pools_allocation_keeps_off_what_a_paused_claim_names_however_old_that_naming(
        local, local_length, how):
    """A paused claim is not written, so nothing would refuse its pass made before the pause: what it names is kept
    off whatever the naming's age, and the pass on its way lands with its status."""
    local_kind = kinds.IPPOOL if local == "IPPool" else (gi.GROUP, local)
    api, on_its_way = _paused_after_its_pass(local_kind, local_length, how, named_first=True)
    api.inventory.lock_settle_seconds = 30
    api.now = "2024-01-01T00:01:00Z"  # the naming is 60 s old
    api.load(_global(126))
    api.load(_claim("d", "g", GLOBAL_PREFIXES))
    api.apply(reconcile(api.inventory.snapshot(o.PoolKey("", "g", GLOBAL_PREFIXES), api.now)))
    api.apply(on_its_way)
    lengths = {GLOBAL_PREFIXES[1]: 126, local_kind[1]: local_length}
    spans = held_spans(api, lengths)
    assert all(len(claims) == 1 for claims in spans.values()), spans
    _pause(api, False)
    converge(api, random.Random(0))
    spans = held_spans(api, lengths)
    assert all(len(claims) == 1 for claims in spans.values()), spans


@pytest.mark.parametrize("local, local_length, how", [("IPPool", 128, "edited"), (PREFIXES[1], 127, "deleted")])
def test_a_global_pool_hands_nothing_in_a_namespace_while_a_paused_claim_there_may_be_handed_what_no_guard_meets(
        local, local_length, how):
    """Claim a's pass, made before its Cluster was paused and before the global pool existed, guards what it hands
    out by no name the global pool's allocation could meet (an IPPool's, a prefix pool's gone with its length):
    claim d of the global pool waits, its Ready condition naming claim a, until a's Cluster is unpaused; then both
    are served apart."""
    local_kind = kinds.IPPOOL if local == "IPPool" else (gi.GROUP, local)
    api, on_its_way = _paused_after_its_pass(local_kind, local_length, how)
    api.load(_global(126))
    api.load(_claim("d", "g", GLOBAL_PREFIXES))
    api.apply(reconcile(api.inventory.snapshot(o.PoolKey("", "g", GLOBAL_PREFIXES), api.now)))
    assert get(api, kinds.CAPI_ADDRESS, "d", NS) is None
    (ready,) = [c for c in o.status(get(api, kinds.CAPI_CLAIM, "d"))["conditions"] if c["type"] == "Ready"]
    assert (ready["status"], ready["reason"]) == ("False", "WaitingForCluster"), ready
    assert "IPAddressClaim a of" in ready["message"] and "Cluster default/cl is paused" in ready["message"], ready
    api.apply(on_its_way)  # but its write of its pool's status, when that is gone
    _pause(api, False)
    converge(api, random.Random(0))
    spans = held_spans(api, {GLOBAL_PREFIXES[1]: 126, local_kind[1]: local_length})
    assert all(len(claims) == 1 for claims in spans.values()), spans
    assert get(api, kinds.CAPI_ADDRESS, "d", NS) is not None


def test_a_global_pools_allocation_in_one_namespace_writes_the_claims_in_flight_of_the_next_ones_pools():
    """The global pool's pass serves a claim of another namespace first (no claim of a namespaced pool waiting
    there), then claim d of the namespace where an IPPool's pass for claim a, made before the global pool existed,
    is on its way (its pool edited off the IP since): d's allocation still writes claim a, whose pass is refused."""
    pool = _namespaced(kinds.IPPOOL, 128)
    pool["spec"]["pools"] = [{"start": "fd00::2", "end": "fd00::f"}]  # a's IP: the global pool's second
    api = _converged(pool)
    api.load(_claim("a", "n", kinds.IPPOOL))
    on_its_way = reconcile(api.inventory.snapshot(o.PoolKey(NS, "n", kinds.IPPOOL), api.now))
    pool = copy.deepcopy(get(api, kinds.IPPOOL, "n", NS))
    pool["spec"] = {**pool["spec"], **AWAY[kinds.IPPOOL]}
    api._store(pool)
    api.load(_global(128))
    api.load(gi.claim("x", "another", GLOBAL_IPS[1], "g"))
    api.load(_claim("d", "g", GLOBAL_IPS))
    for _ in range(2):  # d's allocation waits for the pass after the one that wrote claims in flight already
        api.apply(reconcile(api.inventory.snapshot(o.PoolKey("", "g", GLOBAL_IPS), api.now)))
    assert {o.namespace(a) for a in api.inventory.of_kind(kinds.CAPI_ADDRESS)} >= {"another", NS}
    assert o.spec(get(api, kinds.CAPI_ADDRESS, "d", NS))["address"] == "fd00::2"
    api.apply(on_its_way)
    converge(api, random.Random(0))
    spans = held_spans(api, {GLOBAL_IPS[1]: 128, kinds.IPPOOL[1]: 128})
    assert all(len(claims) == 1 for claims in spans.values()), spans


def test_a_global_pools_claim_gets_an_ip_a_namespaced_claim_named_by_a_pass_that_stopped_before_its_lock():
    pool = _namespaced(kinds.IPPOOL, 128)
    pool["spec"]["pools"] = [{"start": "fd00::1", "end": "fd00::1"}]
    api = _converged(pool)
    api.inventory.lock_settle_seconds = 30
    api.load(_claim("z", "n", kinds.IPPOOL))
    plan = reconcile(api.inventory.snapshot(o.PoolKey(NS, "n", kinds.IPPOOL), api.now))
    (step,) = [s for s in plan.steps if s.subject.endswith(f"{NS}/z")]
    api.do(step.actions[0])  # its first write only: the pass stops there
    assert o.annotations(get(api, kinds.CAPI_CLAIM, "z"))[kinds.ALLOCATING_ANNOTATION] == "fd00::1"
    user_delete(api, kinds.IPPOOL, "n", NS)
    api.apply(reconcile(api.inventory.snapshot(o.PoolKey(NS, "n", kinds.IPPOOL), api.now)))
    assert get(api, kinds.IPPOOL, "n", NS) is None
    api.load(gi.ip_pool("g", addresses=["fd00::1"], prefix=64))
    api.load(_claim("d", "g", GLOBAL_IPS))
    converge(api, random.Random(0))
    api.now = "2024-01-02T00:00:00Z"
    converge(api, random.Random(0))
    assert o.spec(get(api, kinds.CAPI_ADDRESS, "d", NS) or {}).get("address") == "fd00::1", \
        o.condition(o.status(get(api, kinds.CAPI_CLAIM, "d")), "Ready")


def test_a_global_pools_allocation_by_a_controller_started_after_an_ippool_changed_family_meets_its_pass():
    """An IPPool's pass for claim a (fd00::1) made while no global pool existed; the pool's addresses edited to
    IPv4 (the webhook allows it, no address being in use); a controller started afresh, which never read the IPv6
    spec, serves a global IPv6 IP pool created over fd00::1; the IPPool's pass lands. The global pool's allocation
    still writes claim a, refusing that pass: a pass made before an edit this controller did not read may hand out
    either family."""
    pool = _namespaced(kinds.IPPOOL, 128)
    pool["spec"]["pools"] = [{"start": "fd00::1", "end": "fd00::f"}]  # the global pool's first IP first
    api = _converged(pool)
    api.load(_claim("a", "n", kinds.IPPOOL))
    on_its_way = reconcile(api.inventory.snapshot(o.PoolKey(NS, "n", kinds.IPPOOL), api.now))
    pool = copy.deepcopy(get(api, kinds.IPPOOL, "n", NS))
    pool["spec"] = {**pool["spec"], "pools": [{"start": "10.0.0.1", "end": "10.0.0.9"}], "prefix": 24}
    api._store(pool)
    api.load(_global(128))
    api.load(_claim("d", "g", GLOBAL_IPS))
    api.apply(reconcile(_started_afresh(api).inventory.snapshot(o.PoolKey("", "g", GLOBAL_IPS), api.now)))
    api.apply(on_its_way)
    converge(api, random.Random(0))
    spans = held_spans(api, {GLOBAL_IPS[1]: 128})
    assert all(len(claims) == 1 for claims in spans.values()), spans


def test_a_namespaced_pass_whose_lock_lands_after_its_naming_settled_never_takes_what_a_global_pool_handed_out():
    """z's pass names fd00::1 and its lock and address land after the naming settled, once a global pool handed
    fd00::1 to d: that allocation wrote z first, removing the naming, so z's status write is refused and z takes up
    nothing its pass made (they go)."""
    pool = _namespaced(kinds.IPPOOL, 128)
    pool["spec"]["pools"] = [{"start": "fd00::1", "end": "fd00::1"}]
    api = _converged(pool)
    api.inventory.lock_settle_seconds = 30
    api.load(_claim("z", "n", kinds.IPPOOL))
    plan = reconcile(api.inventory.snapshot(o.PoolKey(NS, "n", kinds.IPPOOL), api.now))
    (step,) = [s for s in plan.steps if s.subject.endswith(f"{NS}/z")]
    api.do(step.actions[0])  # its naming lands; the rest of the pass is delayed
    assert o.annotations(get(api, kinds.CAPI_CLAIM, "z"))[kinds.ALLOCATING_ANNOTATION] == "fd00::1"
    _pool_changed(api, kinds.IPPOOL, "deleted")  # or edited: the pass on its way was made before
    api.now = "2024-01-01T00:00:31Z"  # 31 s on: past the naming's settle time (30 s)
    api.load(gi.ip_pool("g", addresses=["fd00::1"], prefix=64))
    api.load(_claim("d", "g", GLOBAL_IPS))
    converge(api, random.Random(0))
    assert o.spec(get(api, kinds.CAPI_ADDRESS, "d", NS) or {}).get("address") == "fd00::1"
    for action in step.actions[1:]:  # the delayed writes land
        try:
            api.do(action)
        except Exception:  # refused: the pass stops
            break
    converge(api, random.Random(0))
    held = [o.spec(get(api, kinds.CAPI_ADDRESS, name, NS) or {}).get("address") for name in ("z", "d")]
    assert held.count("fd00::1") <= 1, held


def test_a_namespaced_pass_made_by_a_replica_whose_clock_is_behind_never_takes_what_a_global_pool_handed_out():
    """The naming's time is the naming replica's clock: read as settled at once, it is let go by a global pool's
    allocation that writes the claim, and the pass landing after takes nothing (its time spares it nothing more)."""
    pool = _namespaced(kinds.IPPOOL, 128)
    pool["spec"]["pools"] = [{"start": "fd00::1", "end": "fd00::1"}]
    api = _converged(pool)
    api.inventory.lock_settle_seconds = 30
    api.now = "2024-01-01T00:01:00Z"
    api.load(_claim("z", "n", kinds.IPPOOL))
    plan = reconcile(api.inventory.snapshot(o.PoolKey(NS, "n", kinds.IPPOOL), "2024-01-01T00:00:00Z"))  # 60 s behind
    (step,) = [s for s in plan.steps if s.subject.endswith(f"{NS}/z")]
    api.do(step.actions[0])  # its naming lands
    _pool_changed(api, kinds.IPPOOL, "deleted")
    api.load(gi.ip_pool("g", addresses=["fd00::1"], prefix=64))
    api.load(_claim("d", "g", GLOBAL_IPS))
    converge(api, random.Random(0))
    assert o.spec(get(api, kinds.CAPI_ADDRESS, "d", NS) or {}).get("address") == "fd00::1"
    api.now = "2024-01-01T00:01:01Z"
    for action in step.actions[1:]:  # the rest of the pass lands a second on
        try:
            api.do(action)
        except Exception:  # refused: the pass stops
            break
    converge(api, random.Random(0))
    held = [o.spec(get(api, kinds.CAPI_ADDRESS, name, NS) or {}).get("address") for name in ("z", "d")]
    assert held.count("fd00::1") <= 1, held


def _named_then_stopped(since):
    """Claim z of IPPool n (fd00::1 only) named fd00::1 by a pass that stopped there, its allocating-since then
    ``since`` (None: removed), its pool deleted; a global IP pool over fd00::1 and its claim d created. The api, the
    stopped pass's step."""
    pool = _namespaced(kinds.IPPOOL, 128)
    pool["spec"]["pools"] = [{"start": "fd00::1", "end": "fd00::1"}]
    api = _converged(pool)
    api.inventory.lock_settle_seconds = 30
    api.load(_claim("z", "n", kinds.IPPOOL))
    plan = reconcile(api.inventory.snapshot(o.PoolKey(NS, "n", kinds.IPPOOL), api.now))
    (step,) = [s for s in plan.steps if s.subject.endswith(f"{NS}/z")]
    api.do(step.actions[0])
    z = copy.deepcopy(get(api, kinds.CAPI_CLAIM, "z"))
    z["metadata"]["annotations"].pop(kinds.ALLOCATING_SINCE_ANNOTATION)
    if since is not None:
        z["metadata"]["annotations"][kinds.ALLOCATING_SINCE_ANNOTATION] = since
    api._store(z)
    _pool_changed(api, kinds.IPPOOL, "deleted")
    api.load(gi.ip_pool("g", addresses=["fd00::1"], prefix=64))
    api.load(_claim("d", "g", GLOBAL_IPS))
    return api, step


def test_a_global_pools_claim_gets_an_ip_a_namespaced_claim_named_with_no_time_by_a_pass_that_stopped():
    """A naming of no time is given the global pool's pass's time (with its write of the claim): once settled, d is
    handed fd00::1."""
    api, _ = _named_then_stopped(None)
    converge(api, random.Random(0))
    api.now = "2024-02-01T00:00:00Z"
    converge(api, random.Random(0))
    assert o.spec(get(api, kinds.CAPI_ADDRESS, "d", NS) or {}).get("address") == "fd00::1", \
        o.condition(o.status(get(api, kinds.CAPI_CLAIM, "d")), "Ready")


def test_a_namespaced_pass_whose_naming_time_was_rewritten_unreadable_never_takes_what_a_global_pool_handed_out():
    """A naming whose time cannot be read is given the global pool's pass's time (with its write of the claim): d is
    not handed fd00::1 until that time settles; z's pass, landing meanwhile, takes up what it made, never d's IP."""
    api, step = _named_then_stopped("yesterday")
    converge(api, random.Random(0))
    assert o.spec(get(api, kinds.CAPI_ADDRESS, "d", NS) or {}).get("address") != "fd00::1"
    for action in step.actions[1:]:  # the rest of the pass lands
        try:
            api.do(action)
        except Exception:  # refused: the pass stops
            break
    converge(api, random.Random(0))
    held = [o.spec(get(api, kinds.CAPI_ADDRESS, name, NS) or {}).get("address") for name in ("z", "d")]
    assert held.count("fd00::1") <= 1, held


def _landing(api, actions) -> None:
    """``actions`` land in order until one is refused (the rest of its step is then abandoned)."""
    for action in actions:
        try:
            api.do(action)
        except Exception:  # refused: the pass stops
            return


def _a_naming_a_global_pool_took():
    """IPClaim z of IPPool n (fd00::1-2): its pass lands its naming of fd00::1 only; n is edited to fd00::2, and past
    the naming's settle time a global pool's allocation hands fd00::1 to d (fencing z, its naming let go). Returns
    the API and z's step, the rest of which is still on its way."""
    pool = _namespaced(kinds.IPPOOL, 128)
    pool["spec"]["pools"] = [{"start": "fd00::1", "end": "fd00::2"}]
    api = _converged(pool)
    api.inventory.lock_settle_seconds = 30
    api.load(_claim("z", "n", kinds.IPPOOL))
    plan = reconcile(api.inventory.snapshot(o.PoolKey(NS, "n", kinds.IPPOOL), api.now))
    (first,) = [s for s in plan.steps if s.subject.endswith(f"{NS}/z")]
    api.do(first.actions[0])  # its naming of fd00::1 lands; the rest of the pass is delayed
    pool = copy.deepcopy(get(api, kinds.IPPOOL, "n", NS))
    pool["spec"]["pools"] = [{"start": "fd00::2", "end": "fd00::2"}]
    api._store(pool)
    api.now = "2024-01-01T00:00:31Z"  # past the naming's settle time
    api.load(gi.ip_pool("g", addresses=["fd00::1"], prefix=64))
    api.load(_claim("d", "g", GLOBAL_IPS))
    for _ in range(3):
        api.apply(reconcile(api.inventory.snapshot(o.PoolKey("", "g", GLOBAL_IPS), api.now)))
    assert o.spec(get(api, kinds.CAPI_ADDRESS, "d", NS) or {}).get("address") == "fd00::1"
    return api, first


def test_a_refused_pass_whose_lock_lands_after_the_claims_next_naming_never_holds_what_a_global_pool_handed_out():
    """The objects of a pass refused by a global pool's allocation may land after the claim's next pass named again
    (two replicas, the first one slow): they are let go all the same, and the claim is served from its pool."""
    api, first = _a_naming_a_global_pool_took()
    plan = reconcile(api.inventory.snapshot(o.PoolKey(NS, "n", kinds.IPPOOL), api.now))
    (second,) = [s for s in plan.steps if s.subject.endswith(f"{NS}/z")]
    api.do(second.actions[0])  # the next pass names fd00::2
    assert o.annotations(get(api, kinds.CAPI_CLAIM, "z"))[kinds.ALLOCATING_ANNOTATION] == "fd00::2"
    _landing(api, first.actions[1:])  # the first pass's lock and address land; its status write is refused
    _landing(api, second.actions[1:])  # its IPAddress create refused: the name is the first pass's address's
    converge(api, random.Random(0))
    spans = held_spans(api, {GLOBAL_IPS[1]: 128, kinds.IPPOOL[1]: 128})
    assert all(len(claims) == 1 for claims in spans.values()), spans
    assert get(api, kinds.CAPI_ADDRESS, "z", NS) is None  # the leftovers went, never bound
    # The second pass's lock stands with no address: its maker may still write one, until it settles.
    api.now = "2024-01-01T00:01:02Z"
    converge(api, random.Random(0))
    spans = held_spans(api, {GLOBAL_IPS[1]: 128, kinds.IPPOOL[1]: 128})
    assert all(len(claims) == 1 for claims in spans.values()), spans
    assert o.spec(get(api, kinds.CAPI_ADDRESS, "z", NS) or {}).get("address") == "fd00::2", \
        o.condition(o.status(get(api, kinds.CAPI_CLAIM, "z")), "Ready")


def _deleted_by_force(api, name: str) -> None:
    """Claim ``name`` deleted with its finalizers taken off first (by hand, as users force a delete; or never
    written: an earlier version added ours after the claim's status): gone at once, whatever it left."""
    set_meta(api, kinds.CAPI_CLAIM, name, finalizers=[])
    user_delete(api, kinds.CAPI_CLAIM, name)


def _served_from_its_pool_the_old_objects_gone(api) -> None:
    """After the passes: the z of now holds fd00::2 from its pool, the lock its refused pass left at fd00::1 (d's)
    is gone, and no IP or sub-prefix is held twice."""
    converge(api, random.Random(0))
    assert o.spec(get(api, kinds.CAPI_ADDRESS, "z", NS) or {}).get("address") == "fd00::2", \
        o.condition(o.status(get(api, kinds.CAPI_CLAIM, "z")), "Ready")
    assert get(api, kinds.IPADDRESS, "n-fd00--1", NS) is None
    spans = held_spans(api, {GLOBAL_IPS[1]: 128, kinds.IPPOOL[1]: 128})
    assert all(len(claims) == 1 for claims in spans.values()), spans


def test_a_claim_recreated_after_its_refused_pass_landed_is_served_from_its_pool_and_the_old_objects_go():
    """z's pass (fd00::1) lands its naming only; a global pool's allocation hands fd00::1 to d, letting z's naming
    go (and saying so on d); the rest of z's pass lands as far as it can (lock n-fd00--1; its IPAddress, behind a
    write of z, and its status refused); z is deleted by force (``_deleted_by_force``) and a new z (another uid)
    created in the same second: the old incarnation's objects are no address of the new one (d's allocation let
    that incarnation go), so they go, and the new z is served from its pool."""
    api, step = _a_naming_a_global_pool_took()
    _landing(api, step.actions[1:])  # its lock lands; the write of z before its address is refused
    old = o.meta(get(api, kinds.CAPI_CLAIM, "z"))["uid"]
    _deleted_by_force(api, "z")
    assert get(api, kinds.CAPI_CLAIM, "z") is None
    api.load(_claim("z", "n", kinds.IPPOOL))
    assert o.meta(get(api, kinds.CAPI_CLAIM, "z"))["uid"] != old
    _served_from_its_pool_the_old_objects_gone(api)


def test_a_claim_deleted_after_its_refused_pass_landed_lets_its_objects_go_and_one_made_again_is_served():
    """As above, z deleted as users delete (our finalizer, written with its naming, holds it): its release takes
    the lock and address its refused pass left, the finalizer comes off, and a z made again is served."""
    api, step = _a_naming_a_global_pool_took()
    _landing(api, step.actions[1:])
    assert kinds.FINALIZERS[kinds.CAPI_CLAIM] in o.finalizers(get(api, kinds.CAPI_CLAIM, "z"))
    user_delete(api, kinds.CAPI_CLAIM, "z")
    converge(api, random.Random(0))
    assert get(api, kinds.CAPI_CLAIM, "z") is None
    assert get(api, kinds.IPADDRESS, "n-fd00--1", NS) is None and get(api, kinds.CAPI_ADDRESS, "z", NS) is None
    api.load(_claim("z", "n", kinds.IPPOOL))
    _served_from_its_pool_the_old_objects_gone(api)


def test_a_claim_recreated_before_its_refused_pass_landed_is_served_from_its_pool_and_the_old_objects_go():
    """As above, but the new z is created before the rest of the old one's pass lands: its lock and address, owned
    by the incarnation d's allocation let go, are younger than the new z, and go all the same."""
    api, step = _a_naming_a_global_pool_took()
    _deleted_by_force(api, "z")
    api.load(_claim("z", "n", kinds.IPPOOL))
    _landing(api, step.actions[1:])  # the lock lands; the write of z before its address (the old uid) is refused
    assert get(api, kinds.IPADDRESS, "n-fd00--1", NS) is not None
    _served_from_its_pool_the_old_objects_gone(api)


def test_a_claim_recreated_after_the_garbage_collector_took_the_old_claims_references_off_its_objects_is_served():
    """As above, the new z created in the same second the old one's lock landed; the garbage collector
    then takes the reference to the old z off them (their pool, another owner, lives): owned by no claim now, they
    name z at the IP d holds, and d's allocation let an incarnation of z other than the live one go: they go."""
    api, step = _a_naming_a_global_pool_took()
    _landing(api, step.actions[1:])
    _deleted_by_force(api, "z")
    assert get(api, kinds.IPADDRESS, "n-fd00--1", NS) is not None  # its address is refused behind its claim's write
    for kind, name in ((kinds.IPADDRESS, "n-fd00--1"), (kinds.CAPI_ADDRESS, "z")):
        if get(api, kind, name, NS) is None:
            continue
        obj = copy.deepcopy(get(api, kind, name, NS))
        obj["metadata"]["ownerReferences"] = [r for r in obj["metadata"]["ownerReferences"]
                                              if r["kind"] != kinds.CAPI_CLAIM[1]]
        assert obj["metadata"]["ownerReferences"], name  # its pool's
        api._store(obj)
    api.load(_claim("z", "n", kinds.IPPOOL))
    _served_from_its_pool_the_old_objects_gone(api)


def test_a_claim_recreated_over_the_objects_of_an_incarnation_no_allocation_let_go_keeps_its_ip():
    """d's allocation let z's first incarnation go (its let-go-from lists that uid) and z was served fd00::2; the
    global pool g is then marked a separate network, z is deleted, n edited to fd00::1 alone, and a second z is
    served fd00::1 (shared with d's network, as marked); w of n waits, the pool exhausted. The second z is deleted
    by force, the garbage collector takes its reference off its lock and IPAddress (their pool lives), and z is made
    again: those objects are the second incarnation's, which no allocation let go, and are taken up as they are when
    d lists nothing (the new z keeps fd00::1, w still waits)."""
    api, step = _a_naming_a_global_pool_took()
    _landing(api, step.actions[1:])
    converge(api, random.Random(0))
    assert o.spec(get(api, kinds.CAPI_ADDRESS, "z", NS))["address"] == "fd00::2"
    first = o.meta(get(api, kinds.CAPI_CLAIM, "z"))["uid"]
    assert o.annotations(get(api, kinds.CAPI_CLAIM, "d"))[kinds.LET_GO_FROM_ANNOTATION] == f"IPAddressClaim/z={first}"
    set_meta(api, GLOBAL_IPS, "g", "", annotations={**o.annotations(get(api, GLOBAL_IPS, "g", "")),
                                                  kinds.SEPARATE_NETWORK_ANNOTATION: "true"})
    user_delete(api, kinds.CAPI_CLAIM, "z")
    converge(api, random.Random(0))
    pool = copy.deepcopy(get(api, kinds.IPPOOL, "n", NS))
    pool["spec"]["pools"] = [{"start": "fd00::1", "end": "fd00::1"}]
    api._store(pool)
    api.load(_claim("z", "n", kinds.IPPOOL))
    converge(api, random.Random(0))
    assert o.spec(get(api, kinds.CAPI_ADDRESS, "z", NS))["address"] == "fd00::1"  # the second z, a separate network
    api.load(_claim("w", "n", kinds.IPPOOL))
    converge(api, random.Random(0))
    assert o.condition(o.status(get(api, kinds.CAPI_CLAIM, "w")), "Ready")["reason"] == "PoolExhausted"
    made = {name: o.meta(get(api, kind, name, NS))["uid"] for kind, name in ((kinds.IPADDRESS, "n-fd00--1"),
                                                                            (kinds.CAPI_ADDRESS, "z"))}
    _deleted_by_force(api, "z")
    for kind, name in ((kinds.IPADDRESS, "n-fd00--1"), (kinds.CAPI_ADDRESS, "z")):
        obj = copy.deepcopy(get(api, kind, name, NS))
        obj["metadata"]["ownerReferences"] = [r for r in obj["metadata"]["ownerReferences"]
                                              if r["kind"] != kinds.CAPI_CLAIM[1]]
        api._store(obj)
    api.load(_claim("z", "n", kinds.IPPOOL))
    converge(api, random.Random(0))
    ready = o.condition(o.status(get(api, kinds.CAPI_CLAIM, "z")), "Ready")
    assert (ready["status"], ready["message"]) == ("True", "bound to fd00::1"), ready
    assert {name: o.meta(get(api, kind, name, NS) or {}).get("uid") for kind, name in (
        (kinds.IPADDRESS, "n-fd00--1"), (kinds.CAPI_ADDRESS, "z"))} == made  # taken up, not made anew
    assert o.condition(o.status(get(api, kinds.CAPI_CLAIM, "w")), "Ready")["reason"] == "PoolExhausted"


def test_a_claim_restored_with_the_objects_its_let_go_incarnation_was_given_later_keeps_its_ip():
    """d's allocation let z's naming of fd00::1 go (its let-go-from lists z's uid) and z was served fd00::2; the
    global pool g is then marked a separate network, n edited to fd00::1 alone, and z's objects at fd00::2 deleted by
    hand: the same z is served fd00::1 (shared with d's network, as marked); w of n waits, the pool exhausted. z is
    then restored as a restore writes it: the claim made again (another uid), its lock and IPAddress as they were,
    owned by the uid it had. They are the objects that incarnation was given after d's allocation, and are taken up
    as they are when d lists nothing (z keeps fd00::1, w still waits)."""
    api, step = _a_naming_a_global_pool_took()
    _landing(api, step.actions[1:])
    converge(api, random.Random(0))
    set_meta(api, GLOBAL_IPS, "g", "", annotations={**o.annotations(get(api, GLOBAL_IPS, "g", "")),
                                                  kinds.SEPARATE_NETWORK_ANNOTATION: "true"})
    pool = copy.deepcopy(get(api, kinds.IPPOOL, "n", NS))
    pool["spec"]["pools"] = [{"start": "fd00::1", "end": "fd00::1"}]
    api._store(pool)
    for kind, name in ((kinds.CAPI_ADDRESS, "z"), (kinds.IPADDRESS, "n-fd00--2")):
        set_meta(api, kind, name, NS, finalizers=[])
        user_delete(api, kind, name, NS)
    converge(api, random.Random(0))
    assert o.condition(o.status(get(api, kinds.CAPI_CLAIM, "z")), "Ready")["message"] == "bound to fd00::1"
    let_go = o.meta(get(api, kinds.CAPI_CLAIM, "z"))["uid"]
    assert o.annotations(get(api, kinds.CAPI_CLAIM, "d"))[kinds.LET_GO_FROM_ANNOTATION] == f"IPAddressClaim/z={let_go}"
    api.load(_claim("w", "n", kinds.IPPOOL))
    converge(api, random.Random(0))
    assert o.condition(o.status(get(api, kinds.CAPI_CLAIM, "w")), "Ready")["reason"] == "PoolExhausted"
    objects = ((kinds.IPADDRESS, "n-fd00--1"), (kinds.CAPI_ADDRESS, "z"))
    made = {name: o.meta(get(api, kind, name, NS))["uid"] for kind, name in objects}
    old = copy.deepcopy(get(api, kinds.CAPI_CLAIM, "z"))
    _deleted_by_force(api, "z")
    api.load({"apiVersion": old["apiVersion"], "kind": old["kind"], "spec": old["spec"],
              "metadata": {"name": "z", "namespace": NS, "annotations": dict(o.annotations(old))}})
    converge(api, random.Random(0))
    ready = o.condition(o.status(get(api, kinds.CAPI_CLAIM, "z")), "Ready")
    assert (ready["status"], ready["message"]) == ("True", "bound to fd00::1"), ready
    assert {name: o.meta(get(api, kind, name, NS) or {}).get("uid") for kind, name in objects} == made
    assert o.condition(o.status(get(api, kinds.CAPI_CLAIM, "w")), "Ready")["reason"] == "PoolExhausted"


SOURCE_UID = "uid-of-z-in-the-source-cluster"


def _moved_in(step: Step, uid: str, ip: str) -> list[dict]:
    """The lock and Cluster API IPAddress ``step`` creates for claim z, at ``ip``, as a move or a restore that kept
    the owner uids of the cluster they came from writes them: owned by incarnation ``uid`` of z."""
    objs = []
    for action in step.actions:
        obj = copy.deepcopy(getattr(action, "obj", None))
        if obj is None or obj["kind"] != "IPAddress" or o.is_guard(obj):
            continue
        for ref in obj["metadata"]["ownerReferences"]:
            if ref["kind"] == kinds.CAPI_CLAIM[1]:
                ref["uid"] = uid
        obj["spec"]["address"] = ip
        if obj["metadata"]["name"].startswith("n-"):
            obj["metadata"]["name"] = f"n-{ip.replace(':', '-')}"
        objs.append(obj)
    assert sorted(obj["apiVersion"] for obj in objs) == [f"{kinds.CAPI_IPAM_GROUP}/v1beta2", kinds.METAL3_API_VERSION]
    return objs


@pytest.mark.parametrize("ip", ["fd00::2", "fd00::1"], ids=["a-free-ip", "the-ip-a-global-pool-took"])
def test_a_claim_moved_in_with_objects_of_another_uid_keeps_them_where_a_global_pool_let_an_earlier_one_go(ip):
    """Claim z's naming of fd00::1 is let go by a global pool's allocation to d (which says so on d); z is deleted
    and a claim z arrives by a move, then its lock and IPAddress, owned by the uid z had in the source. Only the
    incarnation d's allocation let go is one whose objects go: z keeps fd00::2 (in its pool, free), and at fd00::1
    (d's) it is told AddressConflict and its objects are left as written, never deleted; no IP is bound twice."""
    api, step = _a_naming_a_global_pool_took()
    let_go = o.meta(get(api, kinds.CAPI_CLAIM, "z"))["uid"]
    assert o.annotations(get(api, kinds.CAPI_CLAIM, "d"))[kinds.LET_GO_FROM_ANNOTATION] == f"IPAddressClaim/z={let_go}"
    _deleted_by_force(api, "z")
    api.load(_claim("z", "n", kinds.IPPOOL))  # clusterctl creates the claim first (its status is not moved)
    moved = _moved_in(step, SOURCE_UID, ip)
    for obj in moved:
        api.load(obj)
    converge(api, random.Random(0))
    for obj in moved:
        stored = api.inventory.get(kinds.kind_of(obj), NS, o.name(obj))
        assert stored is not None and not o.is_deleting(stored), o.name(obj)
    assert o.spec(get(api, kinds.CAPI_ADDRESS, "d", NS))["address"] == "fd00::1"
    ready = o.condition(o.status(get(api, kinds.CAPI_CLAIM, "z")), "Ready")
    if ip == "fd00::2":
        assert (ready["status"], ready["message"]) == ("True", "bound to fd00::2"), ready
        assert o.spec(get(api, kinds.CAPI_ADDRESS, "z", NS))["address"] == "fd00::2"
    else:
        assert (ready["status"], ready["reason"]) == ("False", "AddressConflict"), ready
    spans = held_spans(api, {GLOBAL_IPS[1]: 128, kinds.IPPOOL[1]: 128})
    assert all(len(claims) == 1 for claims in spans.values()), spans


def test_a_namespaced_pass_from_a_view_of_pools_older_than_its_claims_never_takes_what_a_global_pool_handed_out():
    """The write of a namespaced claim by a global pool's allocation refuses the passes that read the claim before
    it; a pass that reads it after, from a view of the pools and addresses older than that allocation, must not
    hand out what it handed out either."""
    pool = _namespaced(kinds.IPPOOL, 128)
    pool["spec"]["pools"] = [{"start": "fd00::1", "end": "fd00::1"}]
    api = _converged(pool)
    api.load(_claim("z", "n", kinds.IPPOOL))
    lagging = _started_afresh(api).inventory  # from here its watches of pools and addresses lag
    pool = copy.deepcopy(get(api, kinds.IPPOOL, "n", NS))
    pool["spec"]["pools"] = [{"start": "fd00::2", "end": "fd00::2"}]
    api._store(pool)
    api.load(gi.ip_pool("g", addresses=["fd00::1"], prefix=64))
    api.load(_claim("d", "g", GLOBAL_IPS))
    for _ in range(3):
        api.apply(reconcile(api.inventory.snapshot(o.PoolKey("", "g", GLOBAL_IPS), api.now)))
    assert o.spec(get(api, kinds.CAPI_ADDRESS, "d", NS) or {}).get("address") == "fd00::1"
    assert kinds.FENCED_ANNOTATION in o.annotations(get(api, kinds.CAPI_CLAIM, "z"))
    lagging.upsert(copy.deepcopy(get(api, kinds.CAPI_CLAIM, "z")))  # its claims' watch delivered that write
    api.apply(reconcile(lagging.snapshot(o.PoolKey(NS, "n", kinds.IPPOOL), api.now)))
    converge(api, random.Random(0))
    spans = held_spans(api, {GLOBAL_IPS[1]: 128, kinds.IPPOOL[1]: 128})
    assert all(len(claims) == 1 for claims in spans.values()), spans


@pytest.mark.parametrize("named", [True, False], ids=["named-in-the-source", "served-by-the-go-provider"])
@pytest.mark.parametrize("local", ["IPPool", IPS[1]])
def test_a_claim_moved_before_its_address_keeps_that_address_when_a_global_pool_allocates_in_its_namespace(
        local, named):
    local_kind = kinds.IPPOOL if local == "IPPool" else (gi.GROUP, local)
    api = _converged(_namespaced(local_kind, 128), gi.ip_pool("g", addresses=["fd00::20-fd00::2f"], prefix=64))
    api.inventory.lock_settle_seconds = 30
    claim = _claim("z", "n", local_kind)
    if named:  # the naming of the allocation made in the source, copied with the claim
        claim["metadata"]["annotations"] = {kinds.ALLOCATING_ANNOTATION: "fd00::3",
                                            kinds.ALLOCATING_SINCE_ANNOTATION: "2023-06-01T00:00:00Z"}
    api.load(claim)  # the claim arrives first
    api.load(_claim("d", "g", GLOBAL_IPS))
    for _ in range(3):
        api.apply(reconcile(api.inventory.snapshot(o.PoolKey("", "g", GLOBAL_IPS), api.now)))
    assert o.spec(get(api, kinds.CAPI_ADDRESS, "d", NS) or {}).get("address") == "fd00::20"
    z = get(api, kinds.CAPI_CLAIM, "z")
    owner = {"apiVersion": z["apiVersion"], "kind": z["kind"], "name": "z", "uid": o.meta(z)["uid"],
             "controller": True, "blockOwnerDeletion": True}
    finalizer = poolkind.REGISTRY[local_kind].finalizers.address[kinds.CAPI_ADDRESS]
    api.load(capi_address("z", "z", local_kind, "n", "fd00::3", prefix=64, ownerReferences=[owner],
                          finalizers=[finalizer]))  # then its address, as clusterctl move writes it
    converge(api, random.Random(0))
    assert o.status(get(api, kinds.CAPI_CLAIM, "z")).get("addressRef") == {"name": "z"}
    assert o.spec(get(api, kinds.CAPI_ADDRESS, "z", NS))["address"] == "fd00::3"
