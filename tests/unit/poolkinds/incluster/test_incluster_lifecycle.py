"""Claims of the in-cluster provider's IP pools through the one claim lifecycle (``reconcile``, to a fixed
point in the in-memory store): the IPAddress as that provider writes it, a lock per IP (for a global pool in
the one lock namespace), the reuse grace period from what is stored, adoption of its state, pause."""

from __future__ import annotations

import copy
import random

import pytest

from metal3_ipam.core import kinds
from metal3_ipam.core import objects as o
from metal3_ipam.core.actions import Create, Delete, SetFinalizers, SetMetadata, SetStatus, StepVersions
from metal3_ipam.core.reconcile import LOCK_SETTLE_SECONDS, plan_pass, reconcile, run_to_end
from metal3_ipam.core.inventory import of_every_namespace
from metal3_ipam.core.ledger import Ledger
from metal3_ipam.core.slim import slim
from metal3_ipam.memory import Refused, converge
from metal3_ipam.testing import go_incluster as gi
from ipam_objects import converged, get, loaded, user_delete

NS = "default"
POOL = o.PoolKey(NS, "p", (gi.GROUP, gi.IN_CLUSTER_IP_POOL))
LOCK_NS = "default"


def _pool(**spec):
    spec.setdefault("prefix", 24)
    spec.setdefault("addresses", ["10.0.0.2-10.0.0.9"])
    return gi.ip_pool("p", namespace=NS, **spec)


def _global(**spec):
    spec.setdefault("prefix", 24)
    spec.setdefault("addresses", ["10.0.0.2-10.0.0.9"])
    return gi.ip_pool("g", **spec)


def _claim(name, ns=NS, kind=gi.IN_CLUSTER_IP_POOL, pool="p", **kwargs):
    return gi.claim(name, ns, kind, pool, **kwargs)


def _address(api, name, ns=NS):
    return get(api, kinds.CAPI_ADDRESS, name, ns)


def _locks(api):
    return {(o.namespace(a), o.name(a)): o.spec(a)["address"] for a in api.inventory.of_kind(kinds.IPADDRESS)
            if not o.is_guard(a)}


def _guards(api):
    return {(o.namespace(a), o.name(a)): o.spec(a)["address"] for a in api.inventory.of_kind(kinds.IPADDRESS)
            if o.is_guard(a)}


def _watched(obj, served):
    """Whether a controller run with ``-n <served>`` sees ``obj`` (locks aside): what is of its namespace or of
    cluster scope, and the Cluster API IPAddresses and IPAddressClaims of global pools of every namespace."""
    return o.namespace(obj) in ("", served) or of_every_namespace(obj)


def _key(kind, ns, name):
    return o.PoolKey(ns, name, (gi.GROUP, kind))


def test_the_address_is_what_the_provider_writes_and_its_ip_is_locked():
    api = converged(_pool(gateway="10.0.0.1"), _claim("a", labels={kinds.CLUSTER_NAME_LABEL: "c", "other": "x"}),
                    gi_cluster("c"))
    claim, pool = get(api, kinds.CAPI_CLAIM, "a"), get(api, (gi.GROUP, gi.IN_CLUSTER_IP_POOL), "p")
    address = _address(api, "a")
    want = gi.ipaddress_body(claim, pool, gi.Grant("10.0.0.2", 24, "10.0.0.1"))
    assert {k: address[k] for k in ("apiVersion", "kind", "spec")} == {k: want[k] for k in ("apiVersion", "kind", "spec")}
    for field in ("name", "namespace", "finalizers", "ownerReferences", "labels"):
        assert address["metadata"].get(field) == want["metadata"].get(field), field
    assert address["metadata"]["ownerReferences"][1]["controller"] is False
    assert address["metadata"]["labels"] == {kinds.CLUSTER_NAME_LABEL: "c"}  # the provider copies this one only
    assert gi.CLAIM_FINALIZER in claim["metadata"]["finalizers"]
    assert claim["status"]["addressRef"] == {"name": "a"}
    ready = o.condition(claim["status"], "Ready")
    assert ready["status"] == "True" and ready["reason"] == "AddressAllocated"
    assert _locks(api) == {(NS, "p.10-0-0-2.ip"): "10.0.0.2"}
    assert gi.POOL_FINALIZER in pool["metadata"]["finalizers"]
    assert pool["status"]["ipAddresses"] == {"total": 8, "used": 1, "free": 7, "outOfRange": 0}
    assert o.condition(pool["status"], "Ready")["status"] == "True"


def gi_cluster(name, ns=NS, paused=False, annotations=None):
    meta = {"name": name, "namespace": ns}
    if annotations:
        meta["annotations"] = annotations
    return {"apiVersion": "cluster.x-k8s.io/v1beta2", "kind": "Cluster", "metadata": meta, "spec": {"paused": paused}}


def test_a_global_pools_locks_live_in_the_lock_namespace_and_keep_its_ips_apart_across_namespaces():
    api = converged(_global(), _claim("m", "ns-a", gi.GLOBAL_IN_CLUSTER_IP_POOL, "g"),
                    _claim("m", "ns-b", gi.GLOBAL_IN_CLUSTER_IP_POOL, "g"))
    ips = {ns: o.spec(_address(api, "m", ns))["address"] for ns in ("ns-a", "ns-b")}
    assert sorted(ips.values()) == ["10.0.0.2", "10.0.0.3"]
    assert _locks(api) == {(LOCK_NS, f"g.{ip.replace('.', '-')}.gip"): ip for ip in ips.values()}
    # Each IP guarded in its claim's namespace too, against the namespaced pools there.
    assert _guards(api) == {(ns, f"{ip.replace('.', '-')}.nsip"): ip for ns, ip in ips.items()}
    for lock in api.inventory.of_kind(kinds.IPADDRESS):
        if o.is_guard(lock):
            continue
        owners = lock["metadata"]["ownerReferences"]
        assert [r["kind"] for r in owners] == [gi.GLOBAL_IN_CLUSTER_IP_POOL]  # no owner across namespaces
        assert "labels" not in lock["metadata"]


def test_a_lock_held_in_the_lock_namespace_keeps_its_ip_from_a_claim_of_any_namespace():
    """A lagging cache: another replica's lock for 10.0.0.2 is the only trace of its allocation."""
    pool = _global()
    api = loaded(pool, _claim("m", "ns-b", gi.GLOBAL_IN_CLUSTER_IP_POOL, "g"))
    stored_pool = api.inventory.get((gi.GROUP, gi.GLOBAL_IN_CLUSTER_IP_POOL), "", "g")
    api.load({"apiVersion": kinds.METAL3_API_VERSION, "kind": "IPAddress",
              "metadata": {"name": "g.10-0-0-2.gip", "namespace": LOCK_NS, "finalizers": ["ipaddress.ipam.metal3.io"]},
              "spec": {"address": "10.0.0.2", "pool": {"name": "g", "apiVersion": gi.POOL_API_VERSION,
                                                       "kind": gi.GLOBAL_IN_CLUSTER_IP_POOL},
                       "claim": {"apiVersion": gi.CAPI_API_VERSION, "kind": "IPAddressClaim", "name": "other",
                                 "namespace": "ns-a"}}})
    plan = reconcile(api.inventory.snapshot(_key(gi.GLOBAL_IN_CLUSTER_IP_POOL, "", "g"), api.now, random.Random(0)))
    created = [a.obj for a in plan.writes if isinstance(a, Create)]
    assert [(o.namespace(c), o.name(c)) for c in created if c["kind"] == "IPAddress"
            and c["apiVersion"] == kinds.METAL3_API_VERSION] == [("ns-b", "10-0-0-3.nsip"), (LOCK_NS, "g.10-0-0-3.gip")]
    assert stored_pool is not None


def test_write_order_lock_address_status_and_release_the_other_way_round():
    api = loaded(_pool(), _claim("a"))
    plan = reconcile(api.inventory.snapshot(POOL, api.now, random.Random(0)))
    (claim_step,) = [s for s in plan.steps if s.about is not None and s.about.kind == "IPAddressClaim"]
    kinds_written = [(type(a).__name__, getattr(a, "obj", {}).get("apiVersion"), o.is_guard(getattr(a, "obj", {})))
                     for a in claim_step.actions]
    # The claim named the IP first (a global pool's pass made before fences it), then the IP's guard, which a
    # global pool's allocation of that IP in the namespace would write too. The claim is written again, on
    # condition that it is unchanged since read, right before its address: none is created for a claim deleted since.
    assert kinds_written[:6] == [("SetMetadata", None, False), ("Create", kinds.METAL3_API_VERSION, True),
                                 ("Create", kinds.METAL3_API_VERSION, False), ("SetMetadata", None, False),
                                 ("Create", gi.CAPI_API_VERSION, False), ("SetStatus", None, False)]
    converge(api, random.Random(0))
    user_delete(api, kinds.CAPI_CLAIM, "a")
    plan = reconcile(api.inventory.snapshot(POOL, api.now, random.Random(0)))
    (claim_step,) = [s for s in plan.steps if s.about is not None and s.about.kind == "IPAddressClaim"]
    order = [(type(a).__name__, a.target.api_version) for a in claim_step.actions]
    assert order == [("Delete", gi.CAPI_API_VERSION), ("SetFinalizers", gi.CAPI_API_VERSION),
                     ("Delete", kinds.METAL3_API_VERSION), ("SetFinalizers", kinds.METAL3_API_VERSION),
                     ("Delete", kinds.METAL3_API_VERSION), ("SetFinalizers", gi.CAPI_API_VERSION)]  # its guard last


def test_the_grace_period_holds_the_address_until_the_deadline_from_what_is_stored():
    api = converged(gi.ip_pool("p", namespace=NS, prefix=24, addresses=["10.0.0.2"], grace_seconds=30),
                    _claim("old"), now="2024-01-01T00:00:00Z")
    user_delete(api, kinds.CAPI_CLAIM, "old")  # deletionTimestamp 00:00:00: deadline 00:00:30
    api.load(_claim("new"))
    api.now = "2024-01-01T00:00:29Z"
    converge(api, random.Random(0))
    assert get(api, kinds.CAPI_CLAIM, "old") is not None and _address(api, "old") is not None
    assert gi.CLAIM_FINALIZER in get(api, kinds.CAPI_CLAIM, "old")["metadata"]["finalizers"]
    assert _address(api, "new") is None
    assert o.condition(get(api, kinds.CAPI_CLAIM, "new")["status"], "Ready")["reason"] == "PoolExhausted"
    pool = get(api, (gi.GROUP, gi.IN_CLUSTER_IP_POOL), "p")
    assert pool["status"]["ipAddresses"] == {"total": 1, "used": 1, "free": 0, "outOfRange": 0}
    plan = reconcile(api.inventory.snapshot(POOL, api.now, random.Random(0)))
    assert plan.due == "2024-01-01T00:00:30Z"
    # A restart is a ledger loaded afresh: the deadline is read again from the claim and the pool.
    api.now = "2024-01-01T00:00:30Z"
    converge(api, random.Random(0))
    assert get(api, kinds.CAPI_CLAIM, "old") is None and o.spec(_address(api, "new"))["address"] == "10.0.0.2"


def test_an_incremental_pass_releases_at_the_deadline_with_nothing_else_changed():
    api = converged(gi.ip_pool("p", namespace=NS, prefix=24, addresses=["10.0.0.2"], grace_seconds=5), _claim("old"),
                    now="2024-01-01T00:00:00Z")
    user_delete(api, kinds.CAPI_CLAIM, "old")
    ledger = Ledger()
    snap = api.inventory.snapshot(POOL, api.now, random.Random(0))
    api.inventory.drain(POOL)
    plan = run_to_end(plan_pass(ledger, snap, full=True))
    assert not plan.writes and plan.due == "2024-01-01T00:00:05Z"
    ledger.settle()
    later = api.inventory.snapshot(POOL, "2024-01-01T00:00:05Z", random.Random(0), members=False)
    plan = run_to_end(plan_pass(ledger, later, []))
    assert any(isinstance(a, Delete) and a.target.name == "old" for a in plan.writes)
    assert plan.due is None


def test_a_pool_deleted_first_skips_the_grace_period():
    api = converged(gi.ip_pool("p", namespace=NS, prefix=24, addresses=["10.0.0.2"], grace_seconds=300),
                    _claim("m"))
    user_delete(api, (gi.GROUP, gi.IN_CLUSTER_IP_POOL), "p")
    user_delete(api, kinds.CAPI_CLAIM, "m")
    converge(api, random.Random(0))
    assert get(api, kinds.CAPI_CLAIM, "m") is None and _address(api, "m") is None and not _locks(api)
    assert get(api, (gi.GROUP, gi.IN_CLUSTER_IP_POOL), "p") is None


def test_the_go_providers_state_is_adopted_as_it_is():
    """Its addresses unchanged (same objects, no write), a lock created for each, the held one kept until its
    deadline, the claims it had not served given the lowest free addresses, none of the adopted IPs."""
    state = gi.GoInCluster()
    state.add(gi.ip_pool("p", namespace=NS, prefix=24, gateway="10.0.0.1", addresses=["10.0.0.2-10.0.0.9"],
                         grace_seconds=60))
    state.add(gi.ip_pool("g", prefix=24, addresses=["10.0.0.2-10.0.0.9"], grace_seconds=60))
    for claim in [_claim("m0"), _claim("m1"), _claim("g0", "ns-a", gi.GLOBAL_IN_CLUSTER_IP_POOL, "g"),
                  _claim("g0", "ns-b", gi.GLOBAL_IN_CLUSTER_IP_POOL, "g"), _claim("half"), _claim("fresh")]:
        state.add(claim)
    for ns, name in [(NS, "m0"), (NS, "m1"), ("ns-a", "g0"), ("ns-b", "g0")]:
        state.serve(ns, name)
    state.claims[(NS, "half")] = gi.with_finalizer(state.claims[(NS, "half")], gi.CLAIM_FINALIZER)
    state.delete_claim("ns-b", "g0", "2024-01-01T00:00:00Z")
    objs = state.objects()
    api = loaded(*objs, now="2024-01-01T00:00:10Z")
    before = {(o.namespace(a), o.name(a)): a for a in api.inventory.of_kind(kinds.CAPI_ADDRESS)}
    converge(api, random.Random(0))
    after = {(o.namespace(a), o.name(a)): a for a in api.inventory.of_kind(kinds.CAPI_ADDRESS)}
    for key, was in before.items():
        assert after[key] == was, key
    assert sorted(_locks(api).values()) == sorted(
        [o.spec(a)["address"] for k, a in before.items() if k != ("ns-b", "g0")]
        + [o.spec(after[(NS, "half")])["address"], o.spec(after[(NS, "fresh")])["address"]])
    adopted = {o.spec(a)["address"] for k, a in before.items() if k[1].startswith("m")}
    assert {o.spec(after[(NS, n)])["address"] for n in ("half", "fresh")}.isdisjoint(adopted)
    assert get(api, kinds.CAPI_CLAIM, "g0", "ns-b") is not None  # in its grace period
    api.load(_claim("new", "ns-c", gi.GLOBAL_IN_CLUSTER_IP_POOL, "g"))
    converge(api, random.Random(0))
    held = {o.spec(before[(ns, "g0")])["address"] for ns in ("ns-a", "ns-b")}
    assert o.spec(_address(api, "new", "ns-c"))["address"] not in held


def test_an_address_written_before_its_claim_waits_for_it_and_is_adopted_with_its_owners():
    dummy = {"apiVersion": "alpha-dummy", "kind": "dummy-kind", "name": "dummy-name", "uid": "abc-dummy-123"}
    written = {"apiVersion": gi.CAPI_API_VERSION, "kind": "IPAddress",
               "metadata": {"name": "test", "namespace": NS, "ownerReferences": [dummy]},
               "spec": {"claimRef": {"name": "test"}, "poolRef": {"apiGroup": gi.GROUP, "kind": gi.IN_CLUSTER_IP_POOL,
                                                                  "name": "p"},
                        "address": "10.0.0.5", "prefix": 24}}
    api = converged(_pool(), written)
    assert _address(api, "test") is not None  # no claim yet: left alone, and its IP held
    api.load(_claim("test"))
    api.load(_claim("next"))
    converge(api, random.Random(0))
    address = _address(api, "test")
    assert o.spec(address)["address"] == "10.0.0.5" and address["metadata"]["finalizers"] == [gi.ADDRESS_FINALIZER]
    claim, pool = get(api, kinds.CAPI_CLAIM, "test"), get(api, (gi.GROUP, gi.IN_CLUSTER_IP_POOL), "p")
    want = gi.ipaddress_body(claim, pool, gi.Grant("10.0.0.5", 24, None))["metadata"]["ownerReferences"]
    assert address["metadata"]["ownerReferences"] == [dummy] + want
    assert o.spec(_address(api, "next"))["address"] == "10.0.0.2"


def test_an_address_written_before_its_claim_is_completed_before_the_claim_names_it():
    """One pass adopting it: the claim's step gives the address its owner references and finalizer, then the
    claim's status names it (never a Ready claim whose address has no owners); nothing else writes the address
    in that pass (two steps writing it from one reading would refuse each other)."""
    written = {"apiVersion": gi.CAPI_API_VERSION, "kind": "IPAddress", "metadata": {"name": "test", "namespace": NS},
               "spec": {"claimRef": {"name": "test"}, "poolRef": {"apiGroup": gi.GROUP, "kind": gi.IN_CLUSTER_IP_POOL,
                                                                  "name": "p"},
                        "address": "10.0.0.5", "prefix": 24}}
    api = converged(_pool(), written)
    api.load(_claim("test"))
    snap = api.inventory.snapshot(POOL, api.now, random.Random(0))
    plan = run_to_end(plan_pass(Ledger(), snap, full=True))
    on_address = [(step.subject, type(a).__name__) for step in plan.steps for a in step.actions
                  if getattr(a, "target", None) is not None and a.target.kind == "IPAddress"
                  and a.target.group_kind == kinds.CAPI_ADDRESS]
    claim_step = next(step for step in plan.steps if step.subject.endswith(f"{NS}/test") and "Claim" in step.subject)
    assert {subject for subject, _ in on_address} == {claim_step.subject}, on_address
    names = [type(a).__name__ for a in claim_step.actions]
    assert names.index("SetMetadata") < names.index("SetFinalizers") < names.index("SetStatus"), names


def test_a_claim_of_a_paused_cluster_named_by_spec_cluster_name_first_waits():
    api = converged(_pool(), gi_cluster("paused", paused=True), gi_cluster("live"),
                    _claim("m", cluster_name="paused", labels={kinds.CLUSTER_NAME_LABEL: "live"}))
    assert _address(api, "m") is None


def test_a_deleted_claim_of_a_gone_cluster_is_released_from_a_paused_pool():
    api = converged(_pool(), gi_cluster("c"), _claim("m", cluster_name="c"))
    assert _address(api, "m") is not None
    api.inventory.remove(get(api, kinds.CLUSTER, "c"))
    pool = get(api, (gi.GROUP, gi.IN_CLUSTER_IP_POOL), "p")
    pool = {**pool, "metadata": {**pool["metadata"], "annotations": {kinds.PAUSED_ANNOTATION: ""},
                                 "resourceVersion": api._next_version()}}
    api.inventory.upsert(pool)
    user_delete(api, kinds.CAPI_CLAIM, "m")
    converge(api, random.Random(0))
    assert get(api, kinds.CAPI_CLAIM, "m") is None and _address(api, "m") is None and not _locks(api)


def test_overlapping_pools_of_a_namespace_never_hand_out_one_ip_twice():
    """Unlike the Go provider's independent pools: the overlap belongs to the pool created first (then by kind
    and name), and the other one withholds it, so two claims of a namespace never share an IP."""
    other = gi.ip_pool("q", namespace=NS, prefix=24, addresses=["10.0.0.5-10.0.0.12"])
    api = converged(_pool(), other, _claim("a"), _claim("b", pool="q"), _claim("c", pool="q"))
    assert o.spec(_address(api, "a"))["address"] == "10.0.0.2"
    assert [o.spec(_address(api, n))["address"] for n in ("b", "c")] == ["10.0.0.10", "10.0.0.11"]
    counts = get(api, (gi.GROUP, gi.IN_CLUSTER_IP_POOL), "q")["status"]["ipAddresses"]
    assert counts["used"] == 2 and counts["free"] == 1, counts


def test_an_ippool_and_an_in_cluster_pool_of_a_namespace_never_hand_out_one_ip_twice():
    ippool = {"apiVersion": "ipam.metal3.io/v1alpha1", "kind": "IPPool",
              "metadata": {"name": "m", "namespace": NS, "creationTimestamp": "2020-01-01T00:00:00Z"},
              "spec": {"namePrefix": "m", "pools": [{"start": "10.0.0.2", "end": "10.0.0.4"}], "prefix": 24}}
    metal3_claim = {"apiVersion": "ipam.metal3.io/v1alpha1", "kind": "IPClaim",
                    "metadata": {"name": "x", "namespace": NS}, "spec": {"pool": {"name": "m"}}}
    api = converged(ippool, metal3_claim, _pool(), _claim("a"))
    held = {o.spec(a)["address"] for a in api.inventory.of_kind(kinds.IPADDRESS) if o.name(a).startswith("m-")}
    assert held == {"10.0.0.2"} and o.spec(_address(api, "a"))["address"] == "10.0.0.5"


def test_the_workers_pass_over_the_pool_again_at_the_deadline_and_keep_no_other_state():
    import asyncio
    import datetime
    from metal3_ipam.controller.workers import PoolWorkers, utc_now
    from pool_workers import MemoryWriter, until_quiet

    api = converged(gi.ip_pool("p", namespace=NS, prefix=24, addresses=["10.0.0.2"], grace_seconds=30), _claim("old"),
                    now=utc_now())
    user_delete(api, kinds.CAPI_CLAIM, "old")
    deleted = o.parse_time(get(api, kinds.CAPI_CLAIM, "old")["metadata"]["deletionTimestamp"])

    async def scenario():
        workers = PoolWorkers(api.inventory, MemoryWriter(api))
        await until_quiet(workers, POOL)
        due, handle = workers._due_handles[POOL]
        assert due == o.format_time(deleted + datetime.timedelta(seconds=30))
        left = handle.when() - asyncio.get_running_loop().time()
        assert 0 < left <= 30 + 1, left
        assert get(api, kinds.CAPI_CLAIM, "old") is not None and _address(api, "old") is not None
        # A controller started after the deadline (a ledger of its own, no timer): released at its first pass.
        past = get(api, kinds.CAPI_CLAIM, "old")
        past = {**past, "metadata": {**past["metadata"], "resourceVersion": api._next_version(),
                                     "deletionTimestamp": o.format_time(deleted - datetime.timedelta(seconds=31))}}
        api.inventory.upsert(past)
        later = PoolWorkers(api.inventory, MemoryWriter(api))
        await until_quiet(later, POOL)
        assert get(api, kinds.CAPI_CLAIM, "old") is None and _address(api, "old") is None and not _locks(api)
        assert POOL not in later._due_handles
        await workers.stop()
        await later.stop()

    asyncio.run(scenario())


def test_a_controller_watching_some_namespaces_leaves_the_global_pools_locks_of_the_others_alone():
    """With ``-n ns-b`` it does not know ns-a's claim: the lock and address of that claim are not its to judge,
    and their IP is still taken for its own claims."""
    api = converged(_global(), _claim("m", "ns-a", gi.GLOBAL_IN_CLUSTER_IP_POOL, "g"))
    held = o.spec(_address(api, "m", "ns-a"))["address"]
    mine = loaded(*[x for x in api.inventory.objects.values()
                    if o.namespace(x) in ("", "ns-b", LOCK_NS) and kinds.kind_of(x) != kinds.CAPI_CLAIM],
                  _claim("m", "ns-b", gi.GLOBAL_IN_CLUSTER_IP_POOL, "g"))
    mine.inventory.namespaces = frozenset({"ns-b"})
    plan = reconcile(mine.inventory.snapshot(_key(gi.GLOBAL_IN_CLUSTER_IP_POOL, "", "g"), mine.now, random.Random(0)))
    assert not [a for a in plan.writes if isinstance(a, (Delete, SetFinalizers)) and a.target.namespace == LOCK_NS]
    created = [a.obj for a in plan.writes if isinstance(a, Create) and a.obj["apiVersion"] == gi.CAPI_API_VERSION]
    assert [o.spec(c)["address"] for c in created] == ["10.0.0.3"] and held == "10.0.0.2"


def test_a_controller_watching_some_namespaces_keeps_the_finalizers_of_deleted_addresses_of_the_others():
    """With ``-n ns-b`` it sees the lock of ns-a's claim and, a global pool's, its Cluster API IPAddress, but
    not the claim: both deleted by hand while the claim lives, their finalizers are the controller's of ns-a
    to judge (it keeps them while the claim uses the address), never this one's."""
    api = converged(_global(), _claim("m", "ns-a", gi.GLOBAL_IN_CLUSTER_IP_POOL, "g"))
    for obj in [_address(api, "m", "ns-a"), *api.inventory.of_kind(kinds.IPADDRESS)]:
        user_delete(api, kinds.kind_of(obj), o.name(obj), o.namespace(obj))
    mine = loaded(*[x for x in api.inventory.objects.values() if kinds.kind_of(x) != kinds.CAPI_CLAIM])
    mine.inventory.namespaces = frozenset({"ns-b"})
    plan = reconcile(mine.inventory.snapshot(_key(gi.GLOBAL_IN_CLUSTER_IP_POOL, "", "g"), mine.now, random.Random(0)))
    assert [a for a in plan.writes if getattr(a, "target", None) is not None
            and a.target.namespace in ("ns-a", LOCK_NS)] == []


def test_controllers_serving_namespaces_apart_count_a_global_pool_alike_while_a_claim_keeps_an_ip_without_address():
    """ns-a's claim is restored with its status (Ready, bound to its IP) and its Cluster paused, before its
    address and lock: the controller of ns-a and that of ns-b plan the same counts for the pool."""
    api = converged(_global(), gi_cluster("c", "ns-a"),
                    _claim("m", "ns-a", gi.GLOBAL_IN_CLUSTER_IP_POOL, "g", labels={kinds.CLUSTER_NAME_LABEL: "c"}))
    objects = [x for x in api.inventory.objects.values()
               if kinds.kind_of(x) not in (kinds.IPADDRESS, kinds.CAPI_ADDRESS, kinds.CLUSTER)]
    objects.append(gi_cluster("c", "ns-a", paused=True))
    counts = []
    for served in ("ns-a", "ns-b"):
        mine = loaded(*[x for x in objects if _watched(x, served)])
        mine.inventory.namespaces = frozenset({served})
        plan = reconcile(mine.inventory.snapshot(_key(gi.GLOBAL_IN_CLUSTER_IP_POOL, "", "g"), mine.now,
                                                 random.Random(0)))
        written = [a.status for a in plan.writes if isinstance(a, SetStatus) and not a.target.namespace]
        counts.append((written or [o.status(get(api, (gi.GROUP, gi.GLOBAL_IN_CLUSTER_IP_POOL), "g", ""))])[0]
                      ["ipAddresses"])
    assert counts[0] == counts[1], counts


def test_a_controller_serving_other_namespaces_never_hands_out_an_ip_a_claim_of_another_keeps():
    """ns-a's claim is restored with its status (Ready, bound to its IP) and its Cluster paused, before its
    address and lock: the controller of ns-b gives its new claim another IP."""
    api = converged(_global(), gi_cluster("c", "ns-a"),
                    _claim("m", "ns-a", gi.GLOBAL_IN_CLUSTER_IP_POOL, "g", labels={kinds.CLUSTER_NAME_LABEL: "c"}))
    kept = o.spec(_address(api, "m", "ns-a"))["address"]
    restored = [x for x in api.inventory.objects.values()
                if kinds.kind_of(x) not in (kinds.IPADDRESS, kinds.CAPI_ADDRESS, kinds.CLUSTER)]
    mine = loaded(*[x for x in restored if _watched(x, "ns-b")], gi_cluster("c", "ns-a", paused=True),
                  _claim("n", "ns-b", gi.GLOBAL_IN_CLUSTER_IP_POOL, "g"))
    mine.inventory.namespaces = frozenset({"ns-b"})
    plan = reconcile(mine.inventory.snapshot(_key(gi.GLOBAL_IN_CLUSTER_IP_POOL, "", "g"), mine.now, random.Random(0)))
    given = {o.spec(a.obj)["address"] for a in plan.writes if isinstance(a, Create)}
    assert len(given) == 1 and kept not in given, (kept, given)


@pytest.mark.parametrize("pool_paused", [False, True], ids=["pool-serving", "pool-paused"])
def test_a_controller_serving_other_namespaces_writes_nothing_for_a_global_pools_claims_it_sees_there(pool_paused):
    """With ``-n ns-b`` it sees the global pool's claims of ns-a (not their Clusters): a bound one, one waiting
    for its Cluster, one deleted while its Cluster is out of sight. Each is the controller's of ns-a to serve or
    release: nothing is written to them, their addresses or their locks, and their IPs are not handed out."""
    api = converged(_global(), gi_cluster("c", "ns-a"),
                    *[_claim(name, "ns-a", gi.GLOBAL_IN_CLUSTER_IP_POOL, "g", labels={kinds.CLUSTER_NAME_LABEL: "c"})
                      for name in ("m", "d")])
    held = {o.spec(_address(api, name, "ns-a"))["address"] for name in ("m", "d")}
    user_delete(api, kinds.CAPI_CLAIM, "d", "ns-a")
    pool = get(api, (gi.GROUP, gi.GLOBAL_IN_CLUSTER_IP_POOL), "g", "")
    if pool_paused:
        pool = {**pool, "metadata": {**pool["metadata"], "annotations": {gi.PAUSED_ANNOTATION: "true"}}}
    seen = [x for x in api.inventory.objects.values()
            if (_watched(x, "ns-b") or o.namespace(x) == LOCK_NS)
            and kinds.kind_of(x) not in (kinds.CLUSTER, (gi.GROUP, gi.GLOBAL_IN_CLUSTER_IP_POOL))]
    mine = loaded(*seen, pool, _claim("w", "ns-a", gi.GLOBAL_IN_CLUSTER_IP_POOL, "g",
                                      labels={kinds.CLUSTER_NAME_LABEL: "later"}),
                  _claim("n", "ns-b", gi.GLOBAL_IN_CLUSTER_IP_POOL, "g"))
    mine.inventory.namespaces = frozenset({"ns-b"})
    plan = reconcile(mine.inventory.snapshot(_key(gi.GLOBAL_IN_CLUSTER_IP_POOL, "", "g"), mine.now, random.Random(0)))
    assert [a for a in plan.writes if (getattr(a, "target", None) or o.ref(a.obj)).namespace in ("ns-a", LOCK_NS)
            and (not isinstance(a, Create) or o.spec(a.obj)["address"] in held)] == []
    given = {o.spec(a.obj)["address"] for a in plan.writes if isinstance(a, Create)}
    assert len(given) == (0 if pool_paused else 1) and not given & held, (given, held)


def test_a_controller_serving_other_namespaces_times_no_global_pool_claim_it_does_not_serve():
    """The allocation latency (from a claim seen waiting to its binding) is the serving controller's to measure:
    with ``-n ns-b``, a waiting claim of ns-a starts no clock here, its own claim does."""
    import asyncio

    from metal3_ipam.controller.workers import PoolWorkers
    from pool_workers import MemoryWriter, until_quiet

    api = loaded(_global(), _claim("m", "ns-a", gi.GLOBAL_IN_CLUSTER_IP_POOL, "g",
                                   labels={kinds.CLUSTER_NAME_LABEL: "later"}),
                 _claim("n", "ns-b", gi.GLOBAL_IN_CLUSTER_IP_POOL, "g", labels={kinds.CLUSTER_NAME_LABEL: "later"}))
    api.inventory.namespaces = frozenset({"ns-b"})
    pool = _key(gi.GLOBAL_IN_CLUSTER_IP_POOL, "", "g")

    async def scenario():
        workers = PoolWorkers(api.inventory, MemoryWriter(api))
        await until_quiet(workers, pool)
        assert {key[1] for key in workers._waiting_since} == {(kinds.CAPI_CLAIM[1], "n", "ns-b")}
        await workers.stop()

    asyncio.run(scenario())


def test_a_moved_address_of_a_global_pool_that_was_in_the_target_already_is_kept_and_owned_by_it():
    """``clusterctl move`` copies a global pool's IPAddresses but not its locks (they live in the lock
    namespace), and where the pool exists in the target already it writes the source pool's uid into their
    owner reference. The address keeps its IP and gets an owner reference to the target's pool in place of
    that one, its lock is made at its IP after the guard of its IP in the claim's namespace (as its allocation
    wrote them in the source), and nothing else is created or deleted."""
    source = converged(_global(), _claim("m", "ns-a", gi.GLOBAL_IN_CLUSTER_IP_POOL, "g"))
    moved = _address(source, "m", "ns-a")
    target = converged(_global())
    pool = get(target, (gi.GROUP, gi.GLOBAL_IN_CLUSTER_IP_POOL), "g", "")
    claim = {**_claim("m", "ns-a", gi.GLOBAL_IN_CLUSTER_IP_POOL, "g"),
             "status": get(source, kinds.CAPI_CLAIM, "m", "ns-a")["status"]}
    claim["metadata"]["finalizers"] = [gi.CLAIM_FINALIZER]
    target.load(claim)
    claim = get(target, kinds.CAPI_CLAIM, "m", "ns-a")
    stale_pool = {**o.owner_references(moved)[1], "uid": "uid-of-the-source-pool"}
    assert stale_pool["kind"] == gi.GLOBAL_IN_CLUSTER_IP_POOL
    claim_ref = {**o.owner_references(moved)[0], "uid": o.meta(claim)["uid"]}
    target.load({**moved, "metadata": {**{k: v for k, v in moved["metadata"].items()
                                          if k not in ("uid", "resourceVersion", "creationTimestamp")},
                                       "ownerReferences": [claim_ref, stale_pool]}})
    converge(target, random.Random(0))
    address = _address(target, "m", "ns-a")
    assert o.spec(address) == o.spec(moved)
    assert o.owner_references(address) == [claim_ref, {**stale_pool, "uid": o.meta(pool)["uid"]}]
    assert o.spec(moved)["address"] == "10.0.0.2" and _locks(target) == {(LOCK_NS, "g.10-0-0-2.gip"): "10.0.0.2"}
    assert [(kinds.kind_of(c), o.namespace(c), o.name(c)) for c in target.created] \
        == [(kinds.IPADDRESS, "ns-a", "10-0-0-2.nsip"), (kinds.IPADDRESS, LOCK_NS, "g.10-0-0-2.gip")]


@pytest.mark.parametrize("pool_first", [False, True], ids=["claim-then-pool", "pool-then-claim"])
def test_repairing_a_moved_address_pool_uid_keeps_its_other_owner_references_as_they_were(pool_first):
    """The moved address is filed as the controller files it (slimmed): the repair of the stale pool uid
    changes that uid and nothing else: every other owner reference keeps all its fields (blockOwnerDeletion
    too, which the garbage collector honours) and the list keeps its order."""
    source = converged(_global(), _claim("m", "ns-a", gi.GLOBAL_IN_CLUSTER_IP_POOL, "g"))
    moved = _address(source, "m", "ns-a")
    target = converged(_global())
    pool = get(target, (gi.GROUP, gi.GLOBAL_IN_CLUSTER_IP_POOL), "g", "")
    claim = {**_claim("m", "ns-a", gi.GLOBAL_IN_CLUSTER_IP_POOL, "g"),
             "status": get(source, kinds.CAPI_CLAIM, "m", "ns-a")["status"]}
    claim["metadata"]["finalizers"] = [gi.CLAIM_FINALIZER]
    target.load(claim)
    claim = get(target, kinds.CAPI_CLAIM, "m", "ns-a")
    claim_ref, pool_ref = o.owner_references(moved)
    claim_ref = {**claim_ref, "uid": o.meta(claim)["uid"]}
    stale_pool = {**pool_ref, "uid": "uid-of-the-source-pool"}
    assert claim_ref["blockOwnerDeletion"] is True and stale_pool["blockOwnerDeletion"] is True
    owners = [stale_pool, claim_ref] if pool_first else [claim_ref, stale_pool]
    target.load({**moved, "metadata": {**{k: v for k, v in moved["metadata"].items()
                                          if k not in ("uid", "resourceVersion", "creationTimestamp")},
                                       "ownerReferences": owners}})
    filed = _address(target, "m", "ns-a")
    target.inventory.upsert(slim(filed))
    converge(target, random.Random(0))
    repaired = [{**r, "uid": o.meta(pool)["uid"]} if r is stale_pool else r for r in owners]
    assert o.owner_references(_address(target, "m", "ns-a")) == repaired


def test_the_lock_of_a_claim_gone_while_its_cluster_is_paused_goes_after_its_address():
    """As ``clusterctl move`` leaves a global pool's address in the source: its claim gone (finalizers
    stripped) while its Cluster is paused. The address waits with its Cluster, and so does the lock of its IP
    (nothing would show the IP without it); once the Cluster is gone, the address goes, then the lock."""
    api = converged(_global(), gi_cluster("c", "ns-a"),
                    _claim("m", "ns-a", gi.GLOBAL_IN_CLUSTER_IP_POOL, "g", labels={kinds.CLUSTER_NAME_LABEL: "c"}))
    assert _address(api, "m", "ns-a") is not None and _locks(api)
    cluster = get(api, kinds.CLUSTER, "c", "ns-a")
    api.inventory.upsert({**cluster, "metadata": {**cluster["metadata"], "resourceVersion": api._next_version()},
                          "spec": {"paused": True}})
    api.inventory.remove(get(api, kinds.CAPI_CLAIM, "m", "ns-a"))
    converge(api, random.Random(0))
    assert _address(api, "m", "ns-a") is not None
    assert _locks(api) == {(LOCK_NS, "g.10-0-0-2.gip"): "10.0.0.2"}
    api.inventory.remove(get(api, kinds.CLUSTER, "c", "ns-a"))
    converge(api, random.Random(0))
    assert _address(api, "m", "ns-a") is None and not _locks(api)


def test_a_young_lock_without_its_address_is_left_to_its_maker_until_it_settles():
    """Another replica made the lock and the IPAddress moments ago, and this replica's view shows the lock
    but not the address yet. Creating the address from that view could land after the claim was deleted
    and released (address, then lock): an IPAddress of a gone claim showing an IP no lock holds any more,
    which the next claim may get. So a lock made by another step is completed only once it is
    ``LOCK_SETTLE_SECONDS`` old (a maker that crashed in between); until then the pass comes back then."""
    api = converged(_pool(), _claim("a"), now="2024-01-01T00:00:00Z")
    api.inventory.lock_settle_seconds = LOCK_SETTLE_SECONDS  # as a controller has it
    address = _address(api, "a")
    assert address is not None
    api.inventory.remove(address)  # the view that trails: the lock shows, the address not yet
    api.now = "2024-01-01T00:00:03Z"
    plan = reconcile(api.inventory.snapshot(POOL, api.now, random.Random(0)))
    made = [a.obj for a in plan.writes if isinstance(a, Create)]
    assert not made, [(o.namespace(m), o.name(m)) for m in made]
    assert LOCK_SETTLE_SECONDS == 10 and plan.due == "2024-01-01T00:00:10Z"

    api.now = "2024-01-01T00:00:10Z"  # settled: its maker is gone, this pass makes the address
    plan = reconcile(api.inventory.snapshot(POOL, api.now, random.Random(0)))
    made = [a.obj for a in plan.writes if isinstance(a, Create)]
    assert [(m["apiVersion"], o.name(m), o.spec(m)["address"]) for m in made] == [
        (gi.CAPI_API_VERSION, "a", "10.0.0.2")]
    assert plan.due is None


PREFIX_POOL = o.PoolKey(NS, "pp", (gi.GROUP, gi.IN_CLUSTER_PREFIX_POOL))
# Each pool kind of a namespace with the claim its test makes, the pool's key and what the claim is given first.
KINDS = {"ip": (_pool(), _claim("a"), POOL, "10.0.0.2"),
         "prefix": (gi.prefix_pool("pp", namespace=NS, prefixes=["fd00:10::/56"], allocation_prefix_length=64),
                    _claim("a", kind=gi.IN_CLUSTER_PREFIX_POOL, pool="pp"), PREFIX_POOL, "fd00:10::")}


def _stale_pass_of(api, claim, pool=POOL):
    """The pass a replica whose view shows ``claim`` bound, its lock, but not its Cluster API IPAddress plans (it
    saw that address go and not yet why, or not yet the address its lock's maker wrote): its step creates the
    address, after a write on condition that the claim is unchanged since read."""
    address = _address(api, claim)
    api.inventory.remove(address)
    plan = reconcile(api.inventory.snapshot(pool, api.now, random.Random(0)))
    api.inventory.upsert(address)
    made = [a.obj for a in plan.writes if isinstance(a, Create)]
    assert [(kinds.kind_of(m), o.name(m)) for m in made] == [(kinds.CAPI_ADDRESS, claim)]
    return plan


@pytest.mark.parametrize("kind", sorted(KINDS))
@pytest.mark.parametrize("settle", [0, LOCK_SETTLE_SECONDS])
def test_an_address_planned_from_a_view_that_trails_its_claims_deletion_is_never_written_after_the_release(kind,
                                                                                                         settle):
    """A replica sees a bound claim's Cluster API IPAddress go (the other replica releasing the claim: address,
    then lock, then the claim's finalizer) before it sees the claim deleted; its view shows the claim bound and
    its lock, settled, so it writes the address anew. A create has no precondition, so landing after the release
    it would show the IP (sub-prefix) with no lock behind it, for the next claim to be given too. The step writes
    the claim first on condition that it is unchanged since read: refused, nothing of the claim is written."""
    pool, claim, key, ip = KINDS[kind]
    api = converged(pool, claim)
    api.inventory.lock_settle_seconds = settle  # as a controller has it, or left at 0
    api.now = "2024-01-01T00:01:00Z"  # the lock settled long ago
    stale = _stale_pass_of(api, "a", key)
    user_delete(api, kinds.CAPI_CLAIM, "a")
    converge(api, random.Random(0))  # released: address, then lock, then the claim's finalizer
    assert get(api, kinds.CAPI_CLAIM, "a") is None and _address(api, "a") is None and not _locks(api)

    refused = api.apply(stale)  # the trailing replica's pass lands
    assert refused and "not found" in refused[0], refused
    assert _address(api, "a") is None and not _locks(api)

    api.load(gi.claim("b", NS, o.spec(claim)["poolRef"]["kind"], o.spec(claim)["poolRef"]["name"]))
    converge(api, random.Random(0))
    assert o.spec(_address(api, "b"))["address"] == ip  # free again, given to the next claim alone
    assert [o.spec(a)["address"] for a in api.inventory.of_kind(kinds.CAPI_ADDRESS)] == [ip]


def _land(api, actions, versions):
    """``actions`` of one step land in order until one is refused (True when all did), each expecting the version
    the step's writes before it wrote, as the controller runs a step."""
    for action in actions:
        action = versions.current(action)
        try:
            api.do(action)
        except Refused:
            return False
        target = getattr(action, "target", None)
        obj = target is not None and api.inventory.get(target.group_kind, target.namespace, target.name)
        if obj:
            versions.wrote(action, obj["metadata"].get("resourceVersion"))
    return True


@pytest.mark.parametrize("kind", sorted(KINDS))
def test_a_claim_served_anew_whose_release_comes_between_its_lock_and_its_address_gets_no_address(kind):
    """The trailing view saw the claim's address and lock go (deleted by hand, or in a release it has not seen
    yet) and serves the claim anew: its own IP locked again, then its address. The claim is deleted and released
    after the lock landed (the lock of a deleting claim goes with it) and before the address: the write on the
    claim right before the address is refused, so no address stands at an IP no lock holds."""
    pool, claim, key, ip = KINDS[kind]
    api = converged(pool, claim)
    view = copy.deepcopy(api.inventory)
    gone = [*view.of_kind(kinds.CAPI_ADDRESS), *(a for a in view.of_kind(kinds.IPADDRESS) if not o.is_guard(a))]
    for obj in gone:
        view.remove(obj)
    stale = reconcile(view.snapshot(key, api.now, random.Random(0)))
    (step,) = [s for s in stale.steps if any(isinstance(a, Create) for a in s.actions)]
    at = next(i for i, a in enumerate(step.actions)
              if isinstance(a, Create) and kinds.kind_of(a.obj) == kinds.IPADDRESS and not o.is_guard(a.obj)) + 1
    assert [o.spec(a.obj)["address"] for a in step.actions[at:] if isinstance(a, Create)] == [ip]  # its address
    for obj in gone:  # deleted (their finalizers taken off), as that view saw them go
        stored = api.inventory.get(kinds.kind_of(obj), o.namespace(obj), o.name(obj))
        api.do(SetFinalizers(o.ref(stored), (), o.meta(stored)["resourceVersion"]))
        api.do(Delete(o.ref(stored)))
    versions = StepVersions()
    assert _land(api, step.actions[:at], versions)  # up to its lock
    assert _locks(api)
    user_delete(api, kinds.CAPI_CLAIM, "a")
    converge(api, random.Random(0))  # released: its lock goes, then the claim's finalizer
    assert get(api, kinds.CAPI_CLAIM, "a") is None and not _locks(api)

    assert not _land(api, step.actions[at:], versions)  # the write on the claim is refused: it is gone
    assert _address(api, "a") is None and not _locks(api)


def test_an_address_planned_from_a_view_that_trails_never_takes_the_ip_from_the_claim_that_got_it_since():
    """The stale pass lands after the next claim was given the IP: refused before it writes anything, so no
    second IPAddress shows the IP even for a moment; the live claim keeps its address, lock and status."""
    api = converged(_pool(), _claim("a"))
    stale = _stale_pass_of(api, "a")
    user_delete(api, kinds.CAPI_CLAIM, "a")
    converge(api, random.Random(0))
    api.load(_claim("b"))
    converge(api, random.Random(0))
    assert o.spec(_address(api, "b"))["address"] == "10.0.0.2"
    bound = get(api, kinds.CAPI_CLAIM, "b")["status"]

    assert api.apply(stale)
    assert _address(api, "a") is None
    assert o.spec(_address(api, "b"))["address"] == "10.0.0.2"
    assert get(api, kinds.CAPI_CLAIM, "b")["status"] == bound
    assert _locks(api) == {(LOCK_NS, "p.10-0-0-2.ip"): "10.0.0.2"}


def test_an_address_whose_create_lands_after_a_release_between_its_steps_writes_goes_at_the_next_pass():
    """What is left of the race: the claim deleted and released between the step's write on the claim and its
    create (two writes of one replica in a row). The address stands at an IP no lock holds, its claim gone;
    while it stands its IP is kept from the next claim, and the next pass removes it."""
    api = converged(_pool(), _claim("a"))
    stale = _stale_pass_of(api, "a")
    (step,) = stale.steps
    at = next(i for i, a in enumerate(step.actions) if isinstance(a, Create))
    fence, create = step.actions[:at], step.actions[at]
    assert [(type(a), a.target.name) for a in fence] == [(SetMetadata, "a")] and fence[0].resource_version
    api.do(fence[0])  # the claim is unchanged so far
    user_delete(api, kinds.CAPI_CLAIM, "a")
    converge(api, random.Random(0))  # released: address, then lock, then the claim's finalizer
    assert get(api, kinds.CAPI_CLAIM, "a") is None and _address(api, "a") is None and not _locks(api)

    api.do(create)  # the create lands: nothing refuses it
    assert o.spec(_address(api, "a"))["address"] == "10.0.0.2" and not _locks(api)

    api.load(_claim("b"))
    converge(api, random.Random(0))
    assert _address(api, "a") is None
    assert o.spec(_address(api, "b"))["address"] == "10.0.0.3"
    assert _locks(api) == {(LOCK_NS, "p.10-0-0-3.ip"): "10.0.0.3"}


def test_a_pools_free_count_keeps_an_ip_only_another_pools_address_holds_whichever_claims_a_pass_served():
    """As the Go provider counts: ``free`` is the set less what this pool's addresses hold. An IP an address of
    another pool holds (written by hand before its claim) is passed over by a waiting claim, and counted free
    by a pass that serves that claim as by one that does not."""
    written = {"apiVersion": gi.CAPI_API_VERSION, "kind": "IPAddress", "metadata": {"name": "w", "namespace": NS},
               "spec": {"claimRef": {"name": "w"}, "poolRef": {"apiGroup": gi.GROUP, "kind": gi.IN_CLUSTER_IP_POOL,
                                                              "name": "q"}, "address": "10.0.0.3", "prefix": 24}}
    api = converged(_pool(addresses=["10.0.0.2-10.0.0.3"]), written, _claim("a"), _claim("b"))
    assert o.spec(_address(api, "a"))["address"] == "10.0.0.2"
    assert o.condition(o.status(get(api, kinds.CAPI_CLAIM, "b")), "Ready")["reason"] == "PoolExhausted"
    counts = get(api, (gi.GROUP, gi.IN_CLUSTER_IP_POOL), "p")["status"]["ipAddresses"]
    assert counts == {"total": 2, "used": 1, "free": 1, "outOfRange": 0}
