#!/usr/bin/env python3
"""Many pools: 1,000 pools × 10 claims created at once, until all are bound.

Side by side, on one local control plane (etcd + kube-apiserver on loopback):

- controller: one namespace with --pools IPv4 /24 pools, ``metal3-ipam run`` started
  and every pool Ready; then --claims claims per pool are created at once (round
  robin over the pools, --parallel requests in flight) and the clock stops when the
  last one is bound. The API server's request counters give the writes the
  controller made, by verb and resource (the claims' own creation not counted);
- floor: a plain client, no controller, in another namespace with the same pools,
  creates the same claims the same way and then makes exactly the writes the
  controller made per claim, with the same parallelism.

Printed: both times and their ratio, the worst single-claim latency (creation sent
until the watch sees the claim bound) with the median and the 99th percentile, the
writes per claim of each side, and the controller's RSS growth per bound claim.

    python -m bench.many_pools [--pools 1000] [--claims 10] [--parallel 16]
"""

from __future__ import annotations

import sys
import time
from collections import Counter
from pathlib import Path

from bench.harness import (ClaimWatch, Claims, Controller, Floor, Slot, bounded, claim_obj, control_plane,
                           create_namespace, latencies_text, parser, print_writes, path, pool_obj, request, rss_growth,
                           run_parallel, write_counts)


def pool_name(i: int) -> str:
    return f"pool-{i:05d}"


def subnet(i: int) -> str:
    return f"10.{100 + i // 256}.{i % 256}.0/24"


def create_pools(api, ns: str, pools: int, parallel: int) -> dict[str, dict]:
    created: dict[str, dict] = {}

    def one(i: int) -> None:
        created[pool_name(i)] = request(api, "POST", path(ns, "ippools"), pool_obj(ns, pool_name(i), subnet(i), 24))

    run_parallel(one, range(pools), parallel)
    return created


def claim_objs(ns: str, pools: int, claims: int) -> list[dict]:
    # Round robin: every pool gets its first claim before any gets its second.
    return [claim_obj(ns, f"{pool_name(i)}-{j:03d}", pool_name(i)) for j in range(claims) for i in range(pools)]


def wait_pools_ready(api, ns: str, pools: int, timeout: float) -> float:
    started = time.monotonic()
    while True:
        items = request(api, "GET", path(ns, "ippools"))["items"]
        ready = sum(1 for pool in items if any(c.get("type") == "Ready" and c.get("status") == "True"
                                               for c in (pool.get("status") or {}).get("conditions") or []))
        if ready >= pools:
            return time.monotonic() - started
        if time.monotonic() - started > timeout:
            raise SystemExit(f"only {ready} of {pools} pools Ready after {timeout:.0f} s")
        time.sleep(0.5)


def run_controller(plane, api, tmp: Path, args):
    ns = "pools"
    create_namespace(api, ns)
    create_pools(api, ns, args.pools, args.parallel)
    with Controller(plane, [ns], tmp / "controller.log", args.parallel).running() as ctrl:
        ready_s = wait_pools_ready(api, ns, args.pools, args.timeout)
        ctrl.settle(timeout=args.timeout)
        ready_rss = ctrl.rss_kib()
        watch = ClaimWatch(api)
        claims = Claims()
        n = args.pools * args.claims
        before = write_counts(api)
        started = time.monotonic()
        claims.create(api, claim_objs(ns, args.pools, args.claims), args.parallel)
        elapsed = watch.wait_bound(claims.sent, args.timeout) - started
        watch.stop()
        ctrl.settle(timeout=args.timeout)
        writes = write_counts(api) - before - Counter({("POST", "ipclaims", ""): n})
        latencies = sorted(watch.bound[k] - sent for k, sent in claims.sent.items())
        print(f"controller: all {args.pools} pools Ready {ready_s:.1f} s after start; "
              f"{ctrl.cpu_seconds():.1f} s CPU in all")
        return elapsed, writes, latencies, ready_rss, ctrl.peak_rss_kib()


def run_floor(api, args, controller_writes: Counter) -> tuple[float, Counter, Floor]:
    ns = "floor"
    create_namespace(api, ns)
    pools = create_pools(api, ns, args.pools, args.parallel)
    objs = claim_objs(ns, args.pools, args.claims)
    floor = Floor(api, controller_writes, len(objs))
    claims = Claims()
    before = write_counts(api)
    started = time.monotonic()
    claims.create(api, objs, args.parallel)
    slots = [Slot(claims.created[(ns, f"{pool_name(i)}-{j:03d}")], pools[pool_name(i)],
                  f"10.{100 + i // 256}.{i % 256}.{j + 1}", 24)
             for j in range(args.claims) for i in range(args.pools)]
    floor.run(slots, args.parallel)
    elapsed = time.monotonic() - started
    return elapsed, write_counts(api) - before - Counter({("POST", "ipclaims", ""): len(objs)}), floor


def main() -> int:
    p = parser(__doc__)
    p.add_argument("--pools", type=bounded(1, 10_000), default=1000, help="pools in the namespace (default 1,000)")
    p.add_argument("--claims", type=bounded(1, 250), default=10, help="claims per pool, each a /24 (default 10)")
    args = p.parse_args()
    n = args.pools * args.claims
    with control_plane(args.parallel) as (plane, api, tmp):
        ctrl_s, ctrl_writes, latencies, ready_rss, peak = run_controller(plane, api, tmp, args)
        floor_s, floor_writes, floor = run_floor(api, args, ctrl_writes)
    ratio = ctrl_s / floor_s
    print(f"{args.pools} pools x {args.claims} claims = {n} claims created at once, {args.parallel} parallel requests per side")
    print(f"controller (metal3-ipam run, until all bound): {ctrl_s:.2f} s, {ctrl_s / n * 1000:.2f} ms/claim")
    print(f"floor (plain client, the same writes):         {floor_s:.2f} s, {floor_s / n * 1000:.2f} ms/claim")
    print(f"ratio controller/floor: {ratio:.2f}")
    print(f"single-claim latency: {latencies_text(latencies)}")
    print_writes(ctrl_writes, floor_writes, floor.not_copied, n)
    print(f"controller RSS growth: {rss_growth(ready_rss, peak, n)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
