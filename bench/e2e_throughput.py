#!/usr/bin/env python3
"""End-to-end throughput: N claims created at once on one pool, until all are bound.

Side by side, on one local control plane (etcd + kube-apiserver on loopback):

- controller: ``metal3-ipam run`` is started and ready; N IPClaims are created
  with P requests in flight, and the clock stops when the last one is bound.
  The API server's request counters give the writes the controller made, by
  verb and resource (the claims' own creation not counted);
- floor: a plain client, no controller, creates the same N IPClaims the same
  way and then makes exactly the writes the controller made per claim (its
  finalizer patches, IPAddress creations, claim status patches, pool status
  patches, Events, in the controller's numbers), with the same parallelism.

Both clocks start at the first claim creation. The ratio controller/floor is
the price of running a controller (watching, planning, deciding) over the
bare writes it makes; the goal is <= 1.3 at 1,000 claims. Also printed: the
writes per claim of each side, the controller's CPU, peak RSS and RSS growth
per bound claim.

    python -m bench.e2e_throughput [--claims 1000] [--parallel 16]
"""

from __future__ import annotations

import sys
import time
from collections import Counter
from pathlib import Path

from bench.harness import (ClaimWatch, Claims, Controller, Floor, Slot, bounded, claim_obj, control_plane,
                           create_namespace, path, pool_obj, parser, print_writes, request, rss_growth,
                           verdict, write_counts)


GOAL = 1.3
SUBNET, PREFIX, GATEWAY = "10.10.0.0/16", 16, "10.10.0.1"


def claims_of(ns: str, n: int) -> list[dict]:
    return [claim_obj(ns, f"claim-{i:05d}", "bench") for i in range(n)]


def run_controller(plane, api, tmp: Path, n: int, parallel: int, timeout: int):
    ns = "controller"
    create_namespace(api, ns)
    request(api, "POST", path(ns, "ippools"), pool_obj(ns, "bench", SUBNET, PREFIX, GATEWAY))
    with Controller(plane, [ns], tmp / "controller.log", parallel).running() as ctrl:
        ready_rss = ctrl.rss_kib()
        watch = ClaimWatch(api)
        claims = Claims()
        before = write_counts(api)
        started = time.monotonic()
        claims.create(api, claims_of(ns, n), parallel)
        elapsed = watch.wait_bound(claims.sent, timeout) - started
        watch.stop()
        # The pool status written after the last binding is part of the run.
        ctrl.settle()
        writes = write_counts(api) - before - Counter({("POST", "ipclaims", ""): n})
        print(f"controller: {ctrl.metric('metal3_ipam_reconcile_seconds_count'):.0f} pool passes, "
              f"{ctrl.metric('metal3_ipam_reconcile_seconds_sum'):.2f} s in passes (planning + writing), "
              f"{ctrl.cpu_seconds():.2f} s CPU in all")
        return elapsed, writes, ready_rss, ctrl.peak_rss_kib()


def run_floor(api, n: int, parallel: int, controller_writes: Counter) -> tuple[float, Counter, Floor]:
    ns = "floor"
    create_namespace(api, ns)
    pool = request(api, "POST", path(ns, "ippools"), pool_obj(ns, "bench", SUBNET, PREFIX, GATEWAY))
    floor = Floor(api, controller_writes, n)
    claims = Claims()
    before = write_counts(api)
    started = time.monotonic()
    claims.create(api, claims_of(ns, n), parallel)
    slots = [Slot(claims.created[(ns, f"claim-{i:05d}")], pool, f"10.10.{(i + 2) // 256}.{(i + 2) % 256}", PREFIX)
             for i in range(n)]
    floor.run(slots, parallel)
    elapsed = time.monotonic() - started
    return elapsed, write_counts(api) - before - Counter({("POST", "ipclaims", ""): n}), floor


def main() -> int:
    p = parser(__doc__)
    p.add_argument("--claims", type=bounded(1, 65_000), default=1000,
                   help="claims on the one pool (default 1000; at most 65,000: it is a /16)")
    args = p.parse_args()
    with control_plane(args.parallel) as (plane, api, tmp):
        ctrl_s, ctrl_writes, ready_rss, peak_rss = run_controller(plane, api, tmp, args.claims, args.parallel,
                                                                  args.timeout)
        floor_s, floor_writes, floor = run_floor(api, args.claims, args.parallel, ctrl_writes)
    n = args.claims
    ratio = ctrl_s / floor_s
    print(f"claims: {n} on one /16 pool, {args.parallel} parallel requests per side")
    print(f"controller (metal3-ipam run, claims created until all bound): {ctrl_s:.2f} s, {ctrl_s / n * 1000:.2f} ms/claim")
    print(f"floor (plain client, claims + the controller's writes):      {floor_s:.2f} s, {floor_s / n * 1000:.2f} ms/claim")
    print(f"ratio controller/floor: {ratio:.2f} {verdict(ratio, GOAL)}")
    print_writes(ctrl_writes, floor_writes, floor.not_copied, n)
    print(f"controller RSS growth: {rss_growth(ready_rss, peak_rss, n)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
