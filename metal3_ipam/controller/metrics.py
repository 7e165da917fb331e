"""Prometheus metrics of the controller."""

from prometheus_client import Counter, Gauge, Histogram

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
LEADER = Gauge("metal3_ipam_leader", "1 while this replica holds the leader Lease and may write, else 0")
