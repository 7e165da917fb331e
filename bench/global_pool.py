#!/usr/bin/env python3
"""A global pool across namespaces: N claims of one GlobalInClusterIPPool over M namespaces, beside N of an InClusterIPPool.

On one local control plane (etcd + kube-apiserver on loopback), two phases,
each with a controller of its own (``metal3-ipam run`` serving every
namespace, started on a clean slate and ready before the first claim):

- namespaced: one InClusterIPPool (a /16) and N Cluster API IPAddressClaims
  of it in its namespace;
- global: one GlobalInClusterIPPool (a /16) and N IPAddressClaims of it
  spread round robin over M namespaces (the locks of its IPs all in the
  controller's lock namespace, so that no IP is handed out twice across them).

In each phase the claims are created at once (P requests in flight) and the
clock stops when the last one's ``status.addressRef`` is set. Printed per
phase: the total time, the per-claim latency (creation sent until the watch
sees ``status.addressRef``) worst, 99th percentile and median, the writes per
claim (the API server's counters), and that every IP was handed out once.
After its figures each phase deletes its claims and waits until they are gone,
so the next starts clean; the time of that release is printed too. Also
printed: the ratios global/namespaced and the load average of the machine
at the start of each phase (the benchmark shares the machine).

    python -m bench.global_pool [--claims 1000] [--namespaces 100] [--parallel 16]

``BENCH_CLAIMS=N`` sets the number of claims when ``--claims`` is not given.
"""

from __future__ import annotations

import os
import sys
import time
from collections import Counter
from dataclasses import dataclass
from pathlib import Path

from metal3_ipam import poolkinds  # noqa: F401  (registers the kinds of pool)
from metal3_ipam.testing import go_incluster as gi

from bench.harness import (CAPI_CLAIMS, ClaimWatch, Claims, Controller, bounded, control_plane,
                           create_incluster_pool, create_namespace, describe_writes, latencies_text, load_average,
                           parser, request, totals_text, write_counts)


PREFIX = 16
CREATED = ("POST", f"ipaddressclaims.{gi.GROUP}", "")


@dataclass
class Result:
    seconds: float
    latencies: list[float]  # sorted
    writes: Counter
    release_seconds: float
    load: str  # the machine's load average when the claims were created


def run_phase(plane, api, tmp: Path, label: str, pool_ns: str | None, claim_namespaces: list[str], n: int,
              subnet: str, parallel: int, timeout: int) -> Result:
    """``n`` claims of one pool (global when ``pool_ns`` is None) round robin over ``claim_namespaces``."""
    for ns in claim_namespaces:
        create_namespace(api, ns)
    pool_name = f"bench-{label}"
    pool = create_incluster_pool(api, pool_name, pool_ns, [subnet], PREFIX)
    objs = [gi.claim(f"claim-{i:05d}", claim_namespaces[i % len(claim_namespaces)], pool["kind"], pool_name)
            for i in range(n)]
    with Controller(plane, [], tmp / f"controller-{label}.log", parallel).running() as ctrl:
        ctrl.settle()
        watch = ClaimWatch(api, CAPI_CLAIMS)
        claims = Claims(CAPI_CLAIMS)
        before, load = write_counts(api, grouped=True), load_average()
        started = time.monotonic()
        claims.create(api, objs, parallel)
        elapsed = watch.wait_bound(claims.sent, timeout) - started
        ctrl.settle()
        writes = write_counts(api, grouped=True) - before - Counter({CREATED: n})
        latencies = sorted(watch.bound[k] - sent for k, sent in claims.sent.items())
        addresses = [a for a in request(api, "GET", f"/apis/{gi.GROUP}/{gi.CAPI_VERSION}/ipaddresses")["items"]
                     if a["spec"]["poolRef"]["name"] == pool_name]
        ips = Counter(a["spec"]["address"] for a in addresses)
        twice = {ip: c for ip, c in ips.items() if c > 1}
        if twice or len(ips) != n:
            raise SystemExit(f"{label}: {n} claims hold {len(ips)} distinct IPs; held more than once: {twice}")
        print(f"{label}: {n} claims bound to {len(ips)} distinct IPs, {ctrl.cpu_seconds():.1f} s controller CPU")

        started = time.monotonic()
        claims.delete(api, parallel)
        release = watch.wait_gone(claims.sent, timeout) - started
        watch.stop()
    return Result(elapsed, latencies, writes, release, load)


def main() -> int:
    p = parser(__doc__)
    p.add_argument("--claims", type=bounded(1, 65_000), default=int(os.environ.get("BENCH_CLAIMS", 1000)),
                   help="claims of each pool (default $BENCH_CLAIMS or 1000; at most 65,000: each is a /16)")
    p.add_argument("--namespaces", type=bounded(1, 1000), default=100,
                   help="namespaces the global pool's claims are spread over (default 100)")
    args = p.parse_args()
    n = args.claims
    began = time.monotonic()
    load_before = load_average()
    with control_plane(args.parallel) as (plane, api, tmp):
        local = run_phase(plane, api, tmp, "namespaced", "local", ["local"], n, "10.20.0.0/16",
                          args.parallel, args.timeout)
        spread = run_phase(plane, api, tmp, "global", None, [f"g-{i:03d}" for i in range(args.namespaces)], n,
                           "10.30.0.0/16", args.parallel, args.timeout)
    print(f"claims: {n} per pool, {args.parallel} parallel requests; the global pool's over {args.namespaces} "
          f"namespaces")
    for label, r in (("InClusterIPPool, one namespace", local),
                     (f"GlobalInClusterIPPool, {args.namespaces} namespaces", spread)):
        print(f"{label}: all bound in {r.seconds:.2f} s ({r.seconds / n * 1000:.2f} ms/claim); per-claim latency "
              f"{latencies_text(r.latencies)}; released in {r.release_seconds:.2f} s; load at its start {r.load}")
        print(f"  writes per claim besides its creation: {sum(r.writes.values()) / n:.2f} "
              f"({describe_writes(r.writes, n)})")
    print(f"global/namespaced: total {spread.seconds / local.seconds:.2f}, worst latency "
          f"{spread.latencies[-1] / local.latencies[-1]:.2f}")
    print(totals_text(began, load_before))
    return 0


if __name__ == "__main__":
    sys.exit(main())
