"""Prometheus metrics of the controller."""

import urllib.parse
from dataclasses import dataclass, field
import weakref
from typing import Any, Iterable

import aiohttp
from prometheus_client import REGISTRY, Counter, Gauge, Histogram
from prometheus_client.core import GaugeMetricFamily
from prometheus_client.metrics_core import Metric

from ..core.objects import PoolKey

# A pool's series are labelled by its namespace, name and kind (two kinds of pool may share a name):
# ``labels(*pool_labels(key))``.
POOL_LABELS = ["namespace", "pool", "kind"]


def pool_labels(pool: PoolKey) -> tuple[str, str, str]:
    """The label values of a pool's series."""
    key = PoolKey(*pool)
    return key.namespace, key.name, key.kind[1]


POOL_CAPACITY = Gauge("metal3_ipam_pool_capacity", "Addresses the pool can hand out", POOL_LABELS)
POOL_ALLOCATED = Gauge("metal3_ipam_pool_allocated", "Addresses in use", POOL_LABELS)
POOL_FREE = Gauge("metal3_ipam_pool_free", "Addresses a new claim could get", POOL_LABELS)
ALLOCATIONS = Counter("metal3_ipam_allocations_total", "Addresses allocated", POOL_LABELS)
RELEASES = Counter("metal3_ipam_releases_total", "Addresses released", POOL_LABELS)
AUDIT_MISMATCHES = Counter(
    "metal3_ipam_audit_mismatches_total",
    "Audits that found a pool's kept allocation state differing from a recompute (then replaced by it)",
    POOL_LABELS)
# The series labelled by pool, dropped when the pool is gone.
PER_POOL = (POOL_CAPACITY, POOL_ALLOCATED, POOL_FREE, ALLOCATIONS, RELEASES, AUDIT_MISMATCHES)
ERRORS = Counter("metal3_ipam_errors_total", "Claims that could not be served, by reason", ["reason"])
WRITE_REFUSALS = Counter(
    "metal3_ipam_write_refusals_total", "Writes the API server refused for good (not allowed, too large, invalid)",
    ["verb", "kind", "code"])
ALLOCATION_SECONDS = Histogram(
    "metal3_ipam_allocation_seconds", "From a claim first seen waiting to its binding",
    buckets=(0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 120))
RECONCILE_SECONDS = Histogram(
    "metal3_ipam_reconcile_seconds", "One pass over a pool, planning and writing",
    buckets=(0.001, 0.005, 0.01, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30))
LEADER = Gauge("metal3_ipam_leader", "1 while this replica may write (holds the leader Lease, or runs without "
              "leader election), else 0")
EXTERNAL_IPAM_UP = Gauge(
    "metal3_ipam_external_ipam_up",
    "For a pool whose addresses an outside IPAM hands out: 1 when its server answered the last "
    "request (survey or ask), 0 when it was unreachable, timed out or failed (5xx)", POOL_LABELS)
PER_POOL += (EXTERNAL_IPAM_UP,)
# The series that describe the pool object itself: they go with it, even while a claim still names it.
POOL_STATE = (POOL_CAPACITY, POOL_ALLOCATED, POOL_FREE, EXTERNAL_IPAM_UP)


def remove_pool_series(pool: PoolKey, series: Iterable[Any] = PER_POOL) -> None:
    """Drop ``pool``'s series of the metrics ``series``."""
    for metric in series:
        try:
            metric.remove(*pool_labels(pool))
        except KeyError:  # this pool never had that series
            pass
READY = Gauge("metal3_ipam_ready", "1 while /readyz answers ok, else 0 (read at each scrape)")


# -- Under the names the field's stock dashboards query (controller-runtime, client-go, Cluster API) ---------
# A pass over a pool is a reconcile of the controller named after the pool's kind (``controller_name``);
# the pools waiting for a pass are its work queue (label ``name``, and ``controller`` as controller-runtime
# sets both); each request to the API server is a REST request.

def controller_name(kind: tuple[str, str]) -> str:
    """The controller of a kind of pool, as controller-runtime names a kind's controller: ``ippool``."""
    return kind[1].lower()


_RECONCILE_BUCKETS = (0.005, 0.01, 0.025, 0.05, 0.1, 0.15, 0.2, 0.25, 0.3, 0.35, 0.4, 0.45, 0.5, 0.6, 0.7,
                      0.8, 0.9, 1.0, 1.25, 1.5, 1.75, 2.0, 2.5, 3.0, 3.5, 4.0, 4.5, 5, 6, 7, 8, 9, 10, 15, 20,
                      25, 30, 40, 50, 60)
_QUEUE_BUCKETS = tuple(10.0 ** e for e in range(-8, 2))  # client-go's: 10 ns to 10 s, by tens
RECONCILE_TOTAL = Counter("controller_runtime_reconcile_total",
                          "Passes over pools, by controller (kind of pool) and result "
                          "(success, error, requeue, requeue_after)", ["controller", "result"])
RECONCILE_ERRORS = Counter("controller_runtime_reconcile_errors_total",
                           "Passes over pools that failed or whose writes are retried after a backoff",
                           ["controller"])
RECONCILE_TIME = Histogram("controller_runtime_reconcile_time_seconds", "One pass over a pool",
                           ["controller"], buckets=_RECONCILE_BUCKETS)
CAPI_RECONCILE_TOTAL = Counter("capi_reconcile_total", "Passes over pools, by controller and result (as "
                               "controller_runtime_reconcile_total)", ["controller", "result"])
CAPI_RECONCILE_TIME = Histogram("capi_reconcile_time_seconds", "One pass over a pool", ["controller"],
                                buckets=_RECONCILE_BUCKETS)
QUEUE_LABELS = ["controller", "name"]
WORKQUEUE_ADDS = Counter("workqueue_adds_total", "Pools marked for a pass while not already waiting for one",
                         QUEUE_LABELS)
WORKQUEUE_RETRIES = Counter("workqueue_retries_total", "Passes put off after a failure (retried after a backoff)",
                            QUEUE_LABELS)
WORKQUEUE_QUEUE_SECONDS = Histogram("workqueue_queue_duration_seconds",
                                    "From a pool marked for a pass to the pass's start", QUEUE_LABELS,
                                    buckets=_QUEUE_BUCKETS)
WORKQUEUE_WORK_SECONDS = Histogram("workqueue_work_duration_seconds", "One pass over a pool", QUEUE_LABELS,
                                   buckets=_QUEUE_BUCKETS)
REST_REQUESTS = Counter("rest_client_requests_total",
                        "Requests to the API server, by status code (<error>: no answer), method and host",
                        ["code", "method", "host"])
WEBHOOK_REQUESTS = Counter("controller_runtime_webhook_requests_total",
                           "Admission and conversion reviews answered, by path and HTTP status", ["webhook", "code"])
WEBHOOK_IN_FLIGHT = Gauge("controller_runtime_webhook_requests_in_flight", "Reviews being answered",
                          ["webhook"])
WEBHOOK_LATENCY = Histogram("controller_runtime_webhook_latency_seconds", "From a review read to its answer",
                            ["webhook"])


# The controllers of the kinds of pool served (``init_controller``).
CONTROLLERS: set[str] = set()


def init_controller(name: str) -> None:
    """A controller's counters and histograms, at zero from the start as controller-runtime has them (a
    dashboard's rate of errors is 0, not absent, while there were none)."""
    CONTROLLERS.add(name)
    for result in ("success", "error", "requeue", "requeue_after"):
        RECONCILE_TOTAL.labels(name, result)
        CAPI_RECONCILE_TOTAL.labels(name, result)
    RECONCILE_ERRORS.labels(name)
    RECONCILE_TIME.labels(name)
    CAPI_RECONCILE_TIME.labels(name)
    for metric in (WORKQUEUE_ADDS, WORKQUEUE_RETRIES, WORKQUEUE_QUEUE_SECONDS, WORKQUEUE_WORK_SECONDS):
        metric.labels(name, name)


@dataclass
class QueueState:
    """A controller's work queue and passes, as read at a scrape."""

    controller: str
    depth: dict[int, int] = field(default_factory=lambda: {0: 0, -100: 0})  # priority -> pools waiting
    running: list[float] = field(default_factory=list)  # seconds each pass under way has been running
    pools: int = 0


class _Live:
    """The series read from the controller's state at each scrape: the queue and passes under way per
    controller, and the claims not Ready per pool and reason. ``track`` gives it a source (the pool workers)."""

    def __init__(self) -> None:
        self.sources: "weakref.WeakSet[Any]" = weakref.WeakSet()

    def collect(self) -> Iterable[Metric]:
        depth = GaugeMetricFamily("workqueue_depth", "Pools waiting for a pass, by priority (-100: marked by "
                                  "a resync or a relist)", labels=[*QUEUE_LABELS, "priority"])
        unfinished = GaugeMetricFamily("workqueue_unfinished_work_seconds",
                                       "Seconds the passes under way have been running, summed", labels=QUEUE_LABELS)
        longest = GaugeMetricFamily("workqueue_longest_running_processor_seconds",
                                    "Seconds the longest pass under way has been running", labels=QUEUE_LABELS)
        active = GaugeMetricFamily("controller_runtime_active_workers", "Passes under way",
                                   labels=["controller"])
        most = GaugeMetricFamily("controller_runtime_max_concurrent_reconciles",
                                 "Passes that may run at once: one per pool of the kind", labels=["controller"])
        waiting = GaugeMetricFamily("metal3_ipam_claims_not_ready", "Claims not bound, by their Ready reason "
                                    "(Pending: none yet)", labels=[*POOL_LABELS, "reason"])
        oldest = GaugeMetricFamily("metal3_ipam_claims_not_ready_oldest_seconds",
                                   "Seconds the longest-waiting of those claims has not been Ready",
                                   labels=[*POOL_LABELS, "reason"])
        # One sample per label set, whatever the number of sources (a scrape with two alike is refused): the
        # counts of every source summed, the longest and the oldest their maximum.
        families = {f.name: f for f in (depth, unfinished, longest, active, most, waiting, oldest)}
        sums: dict[tuple[str, tuple[str, ...]], float] = {}
        maxima: dict[tuple[str, tuple[str, ...]], float] = {}

        def add(family: GaugeMetricFamily, labels: list[str], value: float) -> None:
            key = (family.name, tuple(labels))
            sums[key] = sums.get(key, 0.0) + value

        def most_of(family: GaugeMetricFamily, labels: list[str], value: float) -> None:
            key = (family.name, tuple(labels))
            maxima[key] = max(maxima.get(key, value), value)

        for source in list(self.sources):
            for queue in source.queues():
                names = [queue.controller, queue.controller]
                for priority, count in sorted(queue.depth.items()):
                    add(depth, [*names, str(priority)], count)
                add(unfinished, names, sum(queue.running))
                most_of(longest, names, max(queue.running, default=0.0))
                add(active, [queue.controller], len(queue.running))
                add(most, [queue.controller], queue.pools)
            for (pool, reason), (count, seconds) in sorted(source.claims_not_ready().items()):
                add(waiting, [*pool_labels(pool), reason], count)
                most_of(oldest, [*pool_labels(pool), reason], seconds)
        for values in (sums, maxima):
            for (name, labels), value in values.items():
                families[name].add_metric(list(labels), value)
        return [depth, unfinished, longest, active, most, waiting, oldest]


LIVE = _Live()
REGISTRY.register(LIVE)


def track(source: Any) -> None:
    """Read ``source.queues()`` and ``source.claims_not_ready()`` at each scrape while it lives."""
    LIVE.sources.add(source)


def rest_request(code: int | str, method: str, host: str) -> None:
    REST_REQUESTS.labels(str(code), method.upper(), host).inc()


def rest_trace() -> aiohttp.TraceConfig:
    """Counts each request of an aiohttp session in ``rest_client_requests_total``."""
    async def ended(_session: Any, _context: Any, params: aiohttp.TraceRequestEndParams) -> None:
        rest_request(params.response.status, params.method, params.url.host or "")

    async def failed(_session: Any, _context: Any, params: aiohttp.TraceRequestExceptionParams) -> None:
        rest_request("<error>", params.method, params.url.host or "")

    trace = aiohttp.TraceConfig()
    trace.on_request_end.append(ended)
    trace.on_request_exception.append(failed)
    return trace


def count_rest_requests(api_client: Any) -> None:
    """Counts each request of a kubernetes client (its REST client's ``request``) in ``rest_client_requests_total``."""
    rest = api_client.rest_client
    inner = rest.request
    if getattr(inner, "counted", False):
        return

    def request(method: str, url: str, *args: Any, **kwargs: Any) -> Any:
        host = urllib.parse.urlsplit(url).hostname or ""
        try:
            response = inner(method, url, *args, **kwargs)
        except Exception:
            rest_request("<error>", method, host)
            raise
        rest_request(response.status, method, host)
        return response

    request.counted = True  # type: ignore[attr-defined]
    rest.request = request
