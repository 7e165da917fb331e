#!/usr/bin/env python3
"""An InClusterPrefixPool handing out 10,000 /64s of a /48: the time of each 1,000, first to last.

In process, no API server: one ``InClusterPrefixPool`` (``fd00:0:0::/48``,
``allocationPrefixLength: 64``, 65,536 sub-prefixes) in the in-memory API
store, served by the controller's own passes (the pool's change log drained
into its ledger, only what changed decided, as the workers do; the plans'
writes applied to the store, whose changes feed the next pass). Claims are
created 1,000 at a time and the passes run until every one of them is bound.
Beside it, the same claims on an ``InClusterIPPool`` of ``fd01::/64`` handing
out single addresses the same way: what the lifecycle costs per claim whatever
the kind. Printed: the time of each batch of both, per claim, the ratio of the
last batch to the first (flat: about 1), the prefix pool's counts, and how many
intervals the free space of its ledger's allocator holds (the address set
stays a handful of intervals, never one entry per sub-prefix). Checked: every
claim holds its own aligned /64 of the /48, lowest first, under its own lock.

    python -m bench.prefix_pool [--claims 10000] [--batch 1000] [--length 64]
"""

from __future__ import annotations

import argparse
import ipaddress
import random
import sys
import time

from metal3_ipam import poolkinds  # noqa: F401  (registers the kinds of pool)
from metal3_ipam.core import kinds
from metal3_ipam.core import objects as o
from metal3_ipam.core.ledger import Ledger
from metal3_ipam.core.reconcile import plan_pass, run_to_end
from metal3_ipam.memory import MemoryApi
from metal3_ipam.testing import go_incluster as gi


NS, PREFIX = "bench", "fd00::/48"
PREFIX_POOL = o.PoolKey(NS, "pp", (gi.GROUP, gi.IN_CLUSTER_PREFIX_POOL))
IP_POOL = o.PoolKey(NS, "ip", (gi.GROUP, gi.IN_CLUSTER_IP_POOL))
NOW = "2024-01-01T00:00:00Z"


class Passes:
    """The controller's passes over one pool, their writes applied to the in-memory store."""

    def __init__(self, api: MemoryApi, pool: o.PoolKey) -> None:
        self.api = api
        self.pool = pool
        self.ledger = Ledger()

    def until_quiet(self, max_passes: int = 100) -> int:
        for n in range(1, max_passes + 1):
            reload, changes = self.api.inventory.drain(self.pool)
            if reload or self.ledger.needs_full:
                self.ledger = Ledger()
                snapshot = self.api.inventory.snapshot(self.pool, NOW, random.Random(0))
                plan = run_to_end(plan_pass(self.ledger, snapshot, full=True))
            elif not changes and not self.ledger.pending_steps:
                return n - 1
            else:
                context = self.api.inventory.snapshot(self.pool, NOW, random.Random(0), members=False)
                plan = run_to_end(plan_pass(self.ledger, context, changes, status_due=True))
            refused = self.api.apply(plan)
            assert not refused, refused
            self.ledger.settle()
        raise RuntimeError(f"not quiet after {max_passes} passes")


class Served:
    """One pool in its own in-memory store, its claims created a batch at a time and served to the end."""

    def __init__(self, pool_obj: dict, pool: o.PoolKey) -> None:
        self.api = MemoryApi(now=NOW)
        self.api.load(pool_obj)
        self.pool = pool
        self.passes = Passes(self.api, pool)
        self.passes.until_quiet()
        self.made = 0
        self.cpu: list[float] = []   # the CPU seconds of each batch (this process: others' load aside)
        self.wall: list[float] = []

    def batch(self, n: int) -> None:
        wall, cpu = time.perf_counter(), time.process_time()
        for i in range(self.made, self.made + n):
            self.api.load(gi.claim(f"c{i:06d}", NS, self.pool.kind[1], self.pool.name))
        self.passes.until_quiet()
        self.cpu.append(time.process_time() - cpu)
        self.wall.append(time.perf_counter() - wall)
        self.made += n


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--claims", type=int, default=10_000, help="claims in all (default 10,000)")
    parser.add_argument("--batch", type=int, default=1_000, help="claims created at a time (default 1,000)")
    parser.add_argument("--length", type=int, default=64, help="allocationPrefixLength, 49 to 128 (default 64)")
    args = parser.parse_args(argv)
    if not 48 < args.length <= 128:
        parser.error("--length must be from 49 to 128")
    size = 1 << (args.length - 48)
    if not 0 < args.claims <= size or args.batch <= 0:
        parser.error(f"--claims must be from 1 to {size} (the /{args.length}s of a /48), --batch positive")

    print(f"InClusterPrefixPool: {PREFIX} in /{args.length}s ({size:,} sub-prefixes), {args.claims:,} claims, "
          f"{args.batch:,} at a time; beside it an InClusterIPPool of fd01::/64, batch for batch (in process: the "
          "controller's passes over an in-memory store; CPU seconds of this process, wall clock in brackets)")
    prefix_pool = Served(gi.prefix_pool(PREFIX_POOL.name, namespace=NS, prefixes=[PREFIX],
                                        allocation_prefix_length=args.length), PREFIX_POOL)
    ip_pool = Served(gi.ip_pool(IP_POOL.name, namespace=NS, addresses=["fd01::/64"], prefix=64), IP_POOL)
    print(f"  {'claims':<15} {'prefix pool':>12} {'per claim':>10} {'(wall)':>9}   {'IP pool':>8} {'per claim':>10}")
    while prefix_pool.made < args.claims:
        n = min(args.batch, args.claims - prefix_pool.made)
        first = prefix_pool.made + 1
        prefix_pool.batch(n)
        ip_pool.batch(n)
        print(f"  {first:>6,}-{prefix_pool.made:<8,} {prefix_pool.cpu[-1]:10.3f} s {prefix_pool.cpu[-1] / n * 1e6:7.0f} µs"
              f" ({prefix_pool.wall[-1]:6.2f} s)   {ip_pool.cpu[-1]:6.3f} s {ip_pool.cpu[-1] / n * 1e6:7.0f} µs")
    api, passes, times, ip_times = prefix_pool.api, prefix_pool.passes, prefix_pool.cpu, ip_pool.cpu

    step = 1 << (128 - args.length)
    base = int(ipaddress.IPv6Address(PREFIX.partition("/")[0]))
    got = {o.name(a): (int(ipaddress.IPv6Address(o.spec(a)["address"])), o.spec(a)["prefix"])
           for a in api.inventory.of_kind(kinds.CAPI_ADDRESS)}
    want = {f"c{i:06d}": (base + i * step, args.length) for i in range(args.claims)}
    assert got == want, "every claim holds its own aligned sub-prefix, lowest first"
    locks = {o.spec(a)["address"] for a in api.inventory.of_kind(kinds.IPADDRESS)}
    assert len(locks) == args.claims, f"{len(locks)} locks for {args.claims} claims"
    counts = api.inventory.get(PREFIX_POOL.kind, NS, PREFIX_POOL.name)["status"]["ipAddresses"]
    intervals = sum(len(list(f.intervals())) for f in passes.ledger.allocator.free)
    print(f"  prefix pool: last/first {times[-1] / times[0]:.2f}, slowest/fastest {max(times) / min(times):.2f}; "
          f"IP pool: last/first {ip_times[-1] / ip_times[0]:.2f}")
    print(f"  status.ipAddresses {counts}; the allocator's free space: {intervals} interval(s)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
