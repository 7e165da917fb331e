#!/usr/bin/env python3
"""Allocation cost of the pure core: it must not grow with the pool or the number of allocations.

(a) fill an IPv4 /16 (65,534 addresses) sequentially through the Allocator;
(b) 100,000 allocations from an IPv6 /64, sequential and random;
(c) fill a /16 through the whole reconcile path: an IPPool and N IPClaims in the
    in-memory API store, reconciled to a fixed point (``converge``), as
    ``metal3-ipam plan`` and the controller's workers do.

For (a) and (b): time per allocation over the first and the last 1,000
allocations and their ratio (goal <= 2: no growth with the number allocated),
total time (goal for (a): <= 3 s), each the best of --repeat runs, and peak memory of the allocation
(tracemalloc, in a second run so that tracing does not skew the times).
For (c): total time, the rounds to the fixed point, and the process's peak RSS.

Each goal prints PASS or FAIL; the exit status is 0 either way unless --strict.

    python -m bench.allocator [--strict] [--repeat 3] [--claims 65534] [--skip-reconcile]
"""

from __future__ import annotations

import argparse
import random
import resource
import sys
import time
import tracemalloc

from metal3_ipam import poolkinds  # noqa: F401  (registers the kinds of pool)
from metal3_ipam.core.allocator import Allocator
from metal3_ipam.core.pool import read_pool
from metal3_ipam.memory import MemoryApi, converge


WINDOW = 1000
RATIO_GOAL = 2.0
FILL_GOAL_S = 3.0

results: list[tuple[str, bool]] = []


def goal(label: str, ok: bool, detail: str) -> None:
    results.append((label, ok))
    print(f"  {'PASS' if ok else 'FAIL'}  {label}: {detail}")


def make_allocator(spec: dict, seed: int = 1) -> Allocator:
    pool, problems = read_pool(spec)
    if pool is None:
        raise SystemExit(f"bad pool spec: {[str(p) for p in problems]}")
    return Allocator(pool, random.Random(seed))


def run_allocations(spec: dict, count: int) -> tuple[float, float, float, set]:
    """Allocate ``count`` addresses; returns (first-window s/alloc, last-window s/alloc, total s, ips)."""
    alloc = make_allocator(spec)
    names = [f"claim-{i}" for i in range(count)]
    ips = set()
    clock = time.perf_counter
    start = clock()
    first_end = last_start = None
    for i, name in enumerate(names):
        if i == count - WINDOW:
            last_start = clock()
        ips.add(int(alloc.allocate(name).ip))
        if i == WINDOW - 1:
            first_end = clock()
    end = clock()
    return (first_end - start) / WINDOW, (end - last_start) / WINDOW, end - start, ips


def peak_memory(spec: dict, count: int) -> int:
    """Peak bytes traced while building the allocator and allocating ``count`` addresses."""
    tracemalloc.start()
    alloc = make_allocator(spec)
    for i in range(count):
        alloc.allocate(f"claim-{i}")
    _, peak = tracemalloc.get_traced_memory()
    tracemalloc.stop()
    return peak


def scenario(title: str, spec: dict, count: int, repeat: int, fill_goal: float | None = None) -> None:
    print(f"{title}: {count:,} allocations, best of {repeat} run(s)")
    runs = [run_allocations(spec, count) for _ in range(repeat)]
    # Each figure is the best of the runs (as timeit does): a pause of the machine
    # in one run is not a property of the allocator.
    first, last, total = (min(r[i] for r in runs) for i in range(3))
    for *_, ips in runs:
        if len(ips) != count:
            goal("unique addresses", False, f"{len(ips):,} distinct of {count:,}")
    ratio = last / first
    print(f"  first {WINDOW:,}: {first * 1e6:.1f} us/allocation; last {WINDOW:,}: {last * 1e6:.1f} us/allocation"
          f" (all runs: first {', '.join(f'{r[0] * 1e6:.1f}' for r in runs)};"
          f" last {', '.join(f'{r[1] * 1e6:.1f}' for r in runs)})")
    goal(f"last/first ratio <= {RATIO_GOAL:g}", ratio <= RATIO_GOAL, f"{ratio:.2f}")
    detail = f"{total:.2f} s total, {total / count * 1e6:.1f} us/allocation on average"
    if fill_goal is not None:
        goal(f"filled in <= {fill_goal:g} s", total <= fill_goal, detail)
    else:
        print(f"  total: {detail}")
    peak = peak_memory(spec, count)
    print(f"  peak memory (tracemalloc): {peak / 2**20:.1f} MiB ({peak / count:.0f} bytes/allocation)")


def reconcile_fill(claims: int) -> None:
    print(f"(c) /16 through the reconcile path: 1 IPPool + {claims:,} IPClaims, MemoryApi + converge")
    api = MemoryApi()
    api.load({"apiVersion": "ipam.metal3.io/v1alpha1", "kind": "IPPool",
              "metadata": {"name": "pool16", "namespace": "default"},
              "spec": {"namePrefix": "pool16", "pools": [{"subnet": "10.0.0.0/16"}], "prefix": 16,
                       "gateway": "10.0.0.1"}})
    start = time.perf_counter()
    for i in range(claims):
        api.load({"apiVersion": "ipam.metal3.io/v1alpha1", "kind": "IPClaim",
                  "metadata": {"name": f"claim-{i}", "namespace": "default"},
                  "spec": {"pool": {"name": "pool16"}}})
    loaded = time.perf_counter()
    rounds = converge(api, random.Random(0))
    end = time.perf_counter()
    addresses = [obj for (kind, _, _), obj in api.inventory.objects.items() if kind == ("ipam.metal3.io", "IPAddress")]
    distinct = len({obj["spec"]["address"] for obj in addresses})
    pool_status = api.inventory.get(("ipam.metal3.io", "IPPool"), "default", "pool16")["status"]
    print(f"  loading the claims: {loaded - start:.2f} s; converge: {end - loaded:.2f} s in {rounds} rounds "
          f"({(end - loaded) / claims * 1e6:.0f} us/claim)")
    print(f"  {len(addresses):,} IPAddresses, {distinct:,} distinct IPs; pool status: capacity {pool_status['capacity']}, "
          f"allocated {pool_status['allocated']}, free {pool_status['free']}")
    expected = min(claims, 65_533)  # a /16 has 65,534 hosts; the gateway is one of them
    goal("every claim served once, no IP twice", len(addresses) == distinct == expected,
         f"{distinct:,} of {expected:,}")
    print(f"  peak RSS of this process so far: {resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024:.0f} MiB")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--strict", action="store_true", help="exit 1 when a goal is missed")
    parser.add_argument("--claims", type=int, default=65_534,
                        help="IPClaims for the reconcile-path fill (default 65,534: a whole /16)")
    parser.add_argument("--skip-reconcile", action="store_true", help="skip (c)")
    parser.add_argument("--repeat", type=int, default=3, help="runs of (a) and (b); the best is reported (default 3)")
    args = parser.parse_args(argv)

    print(f"Python {sys.version.split()[0]}; windows of {WINDOW:,} allocations")
    repeat = max(1, args.repeat)
    scenario("(a) IPv4 /16, sequential", {"namePrefix": "v4", "pools": [{"subnet": "10.0.0.0/16"}]}, 65_534,
             repeat, fill_goal=FILL_GOAL_S)
    scenario("(b) IPv6 /64, sequential", {"namePrefix": "v6", "pools": [{"subnet": "2001:db8::/64"}]}, 100_000,
             repeat)
    scenario("(b) IPv6 /64, random",
             {"namePrefix": "v6", "allocationStrategy": "random", "pools": [{"subnet": "2001:db8::/64"}]}, 100_000,
             repeat)
    if not args.skip_reconcile:
        reconcile_fill(args.claims)
    failed = [label for label, ok in results if not ok]
    print(f"{'FAIL' if failed else 'PASS'}: {len(results) - len(failed)} of {len(results)} goals met"
          + (f" (missed: {', '.join(failed)})" if failed else ""))
    return 1 if failed and args.strict else 0


if __name__ == "__main__":
    sys.exit(main())
