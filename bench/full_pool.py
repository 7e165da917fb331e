#!/usr/bin/env python3
"""One full IPv4 /16 on a real API server: 65,536 claims on a pool of 65,534 addresses.

On one local control plane (etcd + kube-apiserver on loopback), ``metal3-ipam run``
serves one namespace with one IPv4 pool without gateway (a /16 by default, --size to
take a smaller network, e.g. --size 20 for a /20). As many claims as the network has
addresses are created at once (--parallel requests in flight): all but two are bound,
the last two are refused with PoolExhausted. Printed:

- the time until every claim is bound or refused, per claim;
- the controller's writes per claim (from the API server's request counters, by verb
  and resource; the claims' own creation not counted);
- the controller's peak RSS and its growth per bound claim;
- the size of the pool object (its JSON as the API server sends it);
- a restart at that size: the two refused claims and one bound claim are deleted (so
  that one address is free), the controller is stopped and started again, and the
  time until it is ready (/readyz) and until a new claim is bound to the freed
  address, with the writes it made meanwhile.

    python -m bench.full_pool [--size 16] [--parallel 16]
"""

from __future__ import annotations

import sys
import time
from collections import Counter

from bench.harness import (ClaimWatch, Claims, Controller, bounded, claim_obj, control_plane, create_namespace,
                           describe_writes, parser, path, pool_obj, raw_get, request, rss_growth, wait_gone, write_counts)


NS, POOL = "full", "full"
EXHAUSTED = "PoolExhausted"


def main() -> int:
    p = parser(__doc__)
    p.add_argument("--size", type=bounded(16, 29), default=16,
                   help="prefix length of the pool's IPv4 network, 16 to 29 (default 16: 65,536 claims)")
    args = p.parse_args()
    claims_n = 2 ** (32 - args.size)
    capacity = claims_n - 2  # the network and broadcast addresses are never handed out
    with control_plane(args.parallel) as (plane, api, tmp):
        create_namespace(api, NS)
        request(api, "POST", path(NS, "ippools"), pool_obj(NS, POOL, f"10.40.0.0/{args.size}", args.size))
        ctrl = Controller(plane, [NS], tmp / "controller.log", args.parallel)
        try:
            ctrl.start()
            ready_rss = ctrl.rss_kib()
            watch = ClaimWatch(api)
            claims = Claims()
            names = [f"claim-{i:05d}" for i in range(claims_n)]

            def settled() -> bool:
                if len(watch.bound) < capacity:
                    return False
                return sum(1 for k, why in watch.refused.items() if why == EXHAUSTED and k not in watch.bound) \
                    >= claims_n - capacity

            before = write_counts(api)
            started = time.monotonic()
            claims.create(api, [claim_obj(NS, n, POOL) for n in names], args.parallel)
            watch.wait(settled, args.timeout,
                       lambda: f"{capacity} claims bound (have {len(watch.bound)}) and 2 refused with {EXHAUSTED}")
            elapsed = time.monotonic() - started
            bound_n = len(watch.bound)
            ctrl.settle(timeout=args.timeout)
            writes = write_counts(api) - before - Counter({("POST", "ipclaims", ""): claims_n})
            peak = ctrl.peak_rss_kib()
            pool_bytes = len(raw_get(api, path(NS, "ippools", POOL)))
            exhausted = [k for k, why in watch.refused.items() if why == EXHAUSTED and k not in watch.bound]

            # One free address for the claim after the restart: the refused claims would take it first.
            for _, name in exhausted:
                request(api, "DELETE", path(NS, "ipclaims", name))
            for _, name in exhausted:
                wait_gone(api, path(NS, "ipclaims", name), args.timeout)
            victim = names[0]
            address = request(api, "GET", path(NS, "ipclaims", victim))["status"]["address"]["name"]
            released_from = time.monotonic()
            request(api, "DELETE", path(NS, "ipclaims", victim))
            wait_gone(api, path(NS, "ipaddresses", address), args.timeout)
            released = time.monotonic() - released_from
            ctrl.settle(timeout=args.timeout)

            ctrl.stop()
            before_restart = write_counts(api)
            ready_s = ctrl.start(timeout=args.timeout)
            restart_rss = ctrl.rss_kib()
            served_from = time.monotonic()
            request(api, "POST", path(NS, "ipclaims"), claim_obj(NS, "after-restart", POOL))
            served = watch.wait_bound([(NS, "after-restart")], args.timeout) - served_from
            ctrl.settle(timeout=args.timeout)
            restart_writes = write_counts(api) - before_restart - Counter({("POST", "ipclaims", ""): 1})
            watch.stop()
        finally:
            ctrl.stop()
    print(f"pool: IPv4 /{args.size} without gateway, {capacity} addresses; {claims_n} claims created at once, "
          f"{args.parallel} parallel requests")
    print(f"all bound or refused in {elapsed:.1f} s ({elapsed / claims_n * 1000:.2f} ms/claim); "
          f"{bound_n} bound, {len(exhausted)} refused with {EXHAUSTED}")
    print(f"controller writes per claim besides its creation: {sum(writes.values()) / claims_n:.2f} "
          f"({describe_writes(writes, claims_n)})")
    print(f"controller RSS growth: {rss_growth(ready_rss, peak, capacity)}")
    print(f"pool object: {pool_bytes} bytes ({pool_bytes / 1024:.1f} KiB) as JSON")
    print(f"one bound claim released (claim deleted until its IPAddress is gone) in {released:.2f} s")
    print(f"restart at {capacity} allocations: ready (/readyz) {ready_s:.2f} s after start, a new claim bound "
          f"{served:.2f} s after that; {ready_s + served:.2f} s in all, RSS {restart_rss / 1024:.1f} MiB when ready")
    print(f"writes from the restart until that claim was served: {sum(restart_writes.values())} "
          f"({describe_writes(restart_writes, 1)})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
