"""The series under controller-runtime's, client-go's and Cluster API's names, and the claims not Ready, from the
pool workers' own work over the in-memory store (a pass is a reconcile of the pool kind's controller, the pools
marked for a pass its work queue, each API request a REST request)."""

from __future__ import annotations

import asyncio
import copy
from types import SimpleNamespace

import pytest
from prometheus_client import REGISTRY

from metal3_ipam.controller import metrics
from metal3_ipam.controller.workers import RESYNC_PRIORITY, PoolWorkers
from metal3_ipam.core import kinds
from metal3_ipam.core import objects as o
from metal3_ipam.testing.waiting import eventually_async
from ipam_objects import NS, capi_claim, ipclaim, ippool, loaded
from metal3_ipam.testing import go_incluster as gi
from pool_workers import POOL, MemoryWriter


def value(metric: str, **labels: str) -> float:
    return REGISTRY.get_sample_value(metric, labels) or 0.0


async def settled(workers: PoolWorkers) -> None:
    await eventually_async(lambda: not any(not t.done() for t in workers._tasks.values()), timeout=30,
                           what="the passes ended")


def passed(api, key=POOL, **options) -> PoolWorkers:
    """Pool workers over ``api`` (``options``: PoolWorkers'), once the passes ``key`` was marked for ended."""
    async def scenario() -> PoolWorkers:
        workers = PoolWorkers(api.inventory, MemoryWriter(api), gather_seconds=0, **options)
        workers.kick([key])
        await settled(workers)
        return workers

    return asyncio.run(scenario())


def test_passes_are_counted_as_reconciles_and_the_queue_as_a_workqueue():
    api = loaded(ippool(pools=[{"start": "10.0.0.1", "end": "10.0.0.2"}]), *[ipclaim(f"c{i}") for i in range(3)])
    queue = {"controller": "ippool", "name": "ippool"}
    before = {name: value(name, **labels) for name, labels in [
        ("controller_runtime_reconcile_total", {"controller": "ippool", "result": "success"}),
        ("capi_reconcile_total", {"controller": "ippool", "result": "success"}),
        ("controller_runtime_reconcile_time_seconds_count", {"controller": "ippool"}),
        ("workqueue_adds_total", queue), ("workqueue_work_duration_seconds_count", queue),
        ("workqueue_queue_duration_seconds_count", queue)]}

    workers = passed(api)
    for name, labels in [("controller_runtime_reconcile_total", {"controller": "ippool", "result": "success"}),
                         ("capi_reconcile_total", {"controller": "ippool", "result": "success"}),
                         ("controller_runtime_reconcile_time_seconds_count", {"controller": "ippool"}),
                         ("workqueue_adds_total", queue), ("workqueue_work_duration_seconds_count", queue),
                         ("workqueue_queue_duration_seconds_count", queue)]:
        assert value(name, **labels) > before[name], name
    # Nothing waits for a pass or runs now; the pool is the controller's one pool.
    state = next(q for q in workers.queues() if q.controller == "ippool")
    assert (state.depth, state.running, state.pools) == ({0: 0, RESYNC_PRIORITY: 0}, [], 1)
    assert value("workqueue_depth", **queue, priority="0") == 0
    assert value("controller_runtime_max_concurrent_reconciles", controller="ippool") >= 1


def test_the_third_claim_of_a_pool_of_two_is_not_ready_as_pool_exhausted():
    api = loaded(ippool(pools=[{"start": "10.0.0.1", "end": "10.0.0.2"}]), *[ipclaim(f"c{i}") for i in range(3)])

    workers = passed(api)
    waiting = workers.claims_not_ready()
    assert list(waiting) == [(POOL, "PoolExhausted")] and waiting[(POOL, "PoolExhausted")][0] == 1
    labels = dict(zip(metrics.POOL_LABELS, metrics.pool_labels(POOL)), reason="PoolExhausted")
    assert value("metal3_ipam_claims_not_ready", **labels) >= 1
    assert value("metal3_ipam_claims_not_ready_oldest_seconds", **labels) >= 0
    assert value("metal3_ipam_releases_total", **dict(zip(metrics.POOL_LABELS, metrics.pool_labels(POOL)))) == 0


def test_a_marked_pool_is_in_the_queue_at_its_priority_until_its_pass():
    api = loaded(ippool(pools=[{"start": "10.0.0.1", "end": "10.0.0.2"}]))

    async def scenario():
        workers = PoolWorkers(api.inventory, MemoryWriter(api), gather_seconds=0, may_act=lambda: False)
        workers._mark(POOL, RESYNC_PRIORITY)
        marked = next(q for q in workers.queues() if q.controller == "ippool").depth
        workers._mark(POOL)  # an event: the same pool, now at the higher priority, counted once
        raised = next(q for q in workers.queues() if q.controller == "ippool").depth
        return marked, raised

    marked, raised = asyncio.run(scenario())
    assert marked == {0: 0, RESYNC_PRIORITY: 1} and raised == {0: 1, RESYNC_PRIORITY: 0}


def test_each_request_of_the_kubernetes_client_is_counted_with_its_code():
    answers = iter([SimpleNamespace(status=201), OSError("connection refused")])

    def request(method, url, *args, **kwargs):
        answer = next(answers)
        if isinstance(answer, Exception):
            raise answer
        return answer

    api_client = SimpleNamespace(rest_client=SimpleNamespace(request=request))
    metrics.count_rest_requests(api_client)
    metrics.count_rest_requests(api_client)  # once only
    host = "k8s.example"
    created = value("rest_client_requests_total", code="201", method="POST", host=host)
    failed = value("rest_client_requests_total", code="<error>", method="GET", host=host)
    api_client.rest_client.request("POST", f"https://{host}:6443/api/v1/namespaces/x/events")
    with pytest.raises(OSError):
        api_client.rest_client.request("GET", f"https://{host}:6443/api/v1/pods")
    assert value("rest_client_requests_total", code="201", method="POST", host=host) == created + 1
    assert value("rest_client_requests_total", code="<error>", method="GET", host=host) == failed + 1


def test_a_kind_of_pool_is_named_as_controller_runtime_names_its_controller():
    assert metrics.controller_name(o.PoolKey(NS, "p").kind) == "ippool"
    assert metrics.controller_name(("ipam.cluster.x-k8s.io", "GlobalInClusterIPPool")) == "globalinclusterippool"


@pytest.mark.parametrize("kind", [(gi.GROUP, gi.IN_CLUSTER_IP_POOL), (gi.GROUP, gi.GLOBAL_IN_CLUSTER_IP_POOL)],
                         ids=["namespaced", "global"])
def test_the_pool_series_of_an_in_cluster_pool_come_from_its_own_status(kind):
    """Each kind says its counts where its status has them (``PoolKind.status_counts``): the in-cluster
    kinds in ``status.ipAddresses``, as the Go provider writes them, so their pools are on the dashboard too."""
    namespace = NS if kind[1] == gi.IN_CLUSTER_IP_POOL else ""
    pool = gi.ip_pool("p", namespace=namespace or None, prefix=24, addresses=["10.0.0.2-10.0.0.6"])
    claims = [capi_claim(f"c{i}", pool="p", api_group=kind[0], kind=kind[1]) for i in range(2)]
    api = loaded(pool, *claims)
    key = o.PoolKey(namespace, "p", kind)

    passed(api, key)
    labels = dict(zip(metrics.POOL_LABELS, metrics.pool_labels(key)))
    assert (value("metal3_ipam_pool_capacity", **labels), value("metal3_ipam_pool_allocated", **labels),
            value("metal3_ipam_pool_free", **labels)) == (5, 2, 3)


def test_a_count_a_status_does_not_say_is_left_out():
    from metal3_ipam.core import poolkind
    kind = poolkind.REGISTRY[(gi.GROUP, gi.IN_CLUSTER_IP_POOL)]
    assert poolkind.status_counts(kind, {"status": {"ipAddresses": {"total": 4, "used": "1", "free": True}}}) == \
        {"capacity": 4, "allocated": 1}
    assert poolkind.status_counts(kind, {}) == {}


def test_a_deleted_pools_usage_series_go_with_it_though_a_waiting_claim_still_names_it():
    """A full pool of two with a third claim waiting is deleted: its two bound claims are deleted, their addresses
    released, the pool's finalizer goes and the pool with it. The waiting claim stays (it is PoolNotReady now);
    the pool's capacity, allocated and free series must go, not say 2 of 2 used for ever."""
    api = loaded(ippool(pools=[{"start": "10.0.0.1", "end": "10.0.0.2"}]), *[ipclaim(f"c{i}") for i in range(3)])
    labels = dict(zip(metrics.POOL_LABELS, metrics.pool_labels(POOL)))

    def deleting(obj: dict) -> None:
        obj = copy.deepcopy(obj)
        obj["metadata"]["deletionTimestamp"] = "2024-01-01T00:00:01Z"
        api._store(obj)

    async def scenario():
        workers = PoolWorkers(api.inventory, MemoryWriter(api), gather_seconds=0)
        workers.kick([POOL])
        await settled(workers)
        assert (value("metal3_ipam_pool_capacity", **labels), value("metal3_ipam_pool_free", **labels)) == (2, 0)
        deleting(api.inventory.get(POOL.kind, POOL.namespace, POOL.name))
        for claim in list(api.inventory.of_kind(kinds.IPCLAIM)):
            if o.status(claim).get("address"):
                deleting(claim)
        for _ in range(5):
            workers.kick([POOL])
            await settled(workers)
        return workers

    workers = asyncio.run(scenario())
    assert api.inventory.get(POOL.kind, POOL.namespace, POOL.name) is None
    assert [o.name(c) for c in api.inventory.of_kind(kinds.IPCLAIM)] == ["c2"]
    assert list(workers.claims_not_ready()) == [(POOL, "PoolNotReady")]
    for series in ("metal3_ipam_pool_capacity", "metal3_ipam_pool_allocated", "metal3_ipam_pool_free"):
        assert REGISTRY.get_sample_value(series, labels) is None, series


def test_a_standby_exports_no_per_pool_series():
    """A replica that may not write (it stands by on the Lease) has passes over nothing: no series of a pool."""
    key = o.PoolKey(NS, "standby-pool")
    api = loaded(ippool(name="standby-pool", pools=[{"start": "10.0.0.1", "end": "10.0.0.2"}]),
                 *[ipclaim(f"c{i}", pool="standby-pool") for i in range(3)])

    workers = passed(api, key, may_act=lambda: False)  # noqa: F841  (scraped while it lives)
    labels = dict(zip(metrics.POOL_LABELS, metrics.pool_labels(key)))
    exported = [s for family in REGISTRY.collect() for s in family.samples
                if {k: s.labels.get(k) for k in labels} == labels]
    assert exported == []


def test_the_dashboard_picks_pools_among_a_series_every_pool_has_though_its_kind_says_no_counts(monkeypatch):
    """The dashboard's namespace, kind and pool variables list the pools of a series each pool has from its first
    pass, not its capacity: a kind that says no counts (OpenStack without maxIPs) is on it too."""
    import dataclasses
    import re

    from metal3_ipam import observability
    from metal3_ipam.core import poolkind

    counted = poolkind.REGISTRY[POOL.kind]
    monkeypatch.setitem(poolkind.REGISTRY, POOL.kind, dataclasses.replace(counted, status_counts={}))
    key = o.PoolKey(NS, "uncounted")
    api = loaded(ippool(name="uncounted", pools=[{"start": "10.0.0.1", "end": "10.0.0.2"}]),
                 ipclaim("c0", pool="uncounted"))

    passed(api, key)
    labels = dict(zip(metrics.POOL_LABELS, metrics.pool_labels(key)))
    assert REGISTRY.get_sample_value("metal3_ipam_pool_capacity", labels) is None
    variables = {v["name"]: v for v in observability.dashboard()["templating"]["list"]}
    for name in ("namespace", "kind", "pool"):
        (series,) = re.findall(r"label_values\((\w+)", variables[name]["definition"])
        exported = {(s.labels.get("namespace"), s.labels.get("pool"), s.labels.get("kind"))
                    for family in REGISTRY.collect() for s in family.samples if s.name.startswith(series)}
        assert tuple(labels.values()) in exported, (name, series)


def test_a_scrape_has_one_sample_per_label_set_however_many_pool_workers_report():
    """Prometheus refuses a scrape with two samples alike: the queues of every source are summed per controller
    (one process runs one set of pool workers; more are alive only in tests, and earlier ones may linger)."""
    api = loaded(ippool(pools=[{"start": "10.0.0.1", "end": "10.0.0.2"}]), *[ipclaim(f"c{i}") for i in range(3)])

    async def scenario():
        first = PoolWorkers(api.inventory, MemoryWriter(api), gather_seconds=0)
        second = PoolWorkers(api.inventory, MemoryWriter(api), gather_seconds=0)
        first.kick([POOL])
        second.kick([POOL])
        await settled(first)
        await settled(second)
        families = list(metrics.LIVE.collect())
        return first, second, families

    first, second, families = asyncio.run(scenario())
    for family in families:
        keys = [tuple(sorted(s.labels.items())) for s in family.samples]
        assert len(keys) == len(set(keys)), f"{family.name}: {keys}"
    most = next(f for f in families if f.name == "controller_runtime_max_concurrent_reconciles")
    [sample] = [s for s in most.samples if s.labels == {"controller": "ippool"}]
    assert sample.value >= 2  # this pool in each of the two
