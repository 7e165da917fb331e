#!/usr/bin/env python3
"""Steady state: what one new claim costs in an empty namespace and next to a pool of 50,000.

On one local control plane (etcd + kube-apiserver on loopback), ``metal3-ipam run``
serves one namespace with two IPv4 /16 pools, ``full`` and ``spare``:

1. baseline: single claims, created one at a time and each awaited until bound,
   alternating between the two (still empty) pools;
2. fill: N claims (--fill, default 50,000) created at once in ``full``, until all are
   bound; then at once one claim in ``spare``: the time from the last binding of the
   fill until that claim is bound is how long the controller takes to digest the fill
   before it serves another pool;
3. single claims again, alternating between ``full`` (now holding N) and ``spare``.

For each single claim: its latency (creation sent until the watch sees it bound) and
the controller's CPU for it (utime + stime of the controller process from /proc, read
when the controller has gone quiet before the claim and again after it, so that the
pool status written after the binding counts too). Printed per phase: the median
latency and the mean CPU per claim (mean: the kernel counts CPU in 10 ms ticks), and
their ratios to the baseline; the goal is <= 1.5 for both.

    python -m bench.steady_state [--fill 50000] [--singles 20] [--parallel 16]
"""

from __future__ import annotations

import statistics
import sys
import time

from bench.harness import (ClaimWatch, Claims, Controller, bounded, claim_obj, control_plane, create_namespace,
                           median_ms, parser, path, pool_obj, request, rss_growth, verdict)


GOAL = 1.5
NS = "steady"
POOLS = {"full": "10.20.0.0/16", "spare": "10.30.0.0/16"}


class Singles:
    """Single claims, one at a time, each measured alone."""

    def __init__(self, api, ctrl: Controller, watch: ClaimWatch, timeout: float):
        self.api, self.ctrl, self.watch, self.timeout = api, ctrl, watch, timeout
        self.count = 0
        self.busy = 0  # times the controller did not go quiet within the settle deadline

    def one(self, pool: str) -> tuple[float, float]:
        """(latency s, controller CPU s) of one new claim in ``pool``."""
        self.count += 1
        name = f"single-{self.count:04d}"
        self.busy += not self.ctrl.settle()
        cpu = self.ctrl.cpu_seconds()
        started = time.monotonic()
        request(self.api, "POST", path(NS, "ipclaims"), claim_obj(NS, name, pool))
        latency = self.watch.wait_bound([(NS, name)], self.timeout) - started
        self.busy += not self.ctrl.settle()
        return latency, self.ctrl.cpu_seconds() - cpu

    def alternating(self, pools: list[str], total: int) -> dict[str, list[tuple[float, float]]]:
        """``total`` single claims, to each pool in turn."""
        out: dict[str, list[tuple[float, float]]] = {p: [] for p in pools}
        for i in range(total):
            pool = pools[i % len(pools)]
            out[pool].append(self.one(pool))
        return out


def row(label: str, samples: list[tuple[float, float]], base: tuple[float, float] | None) -> tuple[float, float]:
    latency = median_ms([s[0] for s in samples])
    cpu = statistics.mean(s[1] for s in samples) * 1000
    text = f"{label:<34} {len(samples):>4}  {latency:>9.1f} ms  {cpu:>9.1f} ms"
    if base:
        lat_ratio, cpu_ratio = latency / base[0], cpu / base[1] if base[1] else float("inf")
        text += f"   latency x{lat_ratio:.2f} {verdict(lat_ratio, GOAL)}, CPU x{cpu_ratio:.2f} {verdict(cpu_ratio, GOAL)}"
    print(text)
    return latency, cpu


def main() -> int:
    p = parser(__doc__)
    p.add_argument("--fill", type=bounded(1, 65_000), default=50_000,
                   help="claims that fill the pool 'full' (default 50,000; at most 65,000: it is a /16)")
    p.add_argument("--singles", type=bounded(1, 1000), default=20,
                   help="single claims in the baseline, and in each pool after the fill (default 20)")
    args = p.parse_args()
    with control_plane(args.parallel) as (plane, api, tmp):
        create_namespace(api, NS)
        for name, subnet in POOLS.items():
            request(api, "POST", path(NS, "ippools"), pool_obj(NS, name, subnet, 16))
        with Controller(plane, [NS], tmp / "controller.log", args.parallel).running() as ctrl:
            watch = ClaimWatch(api)
            singles = Singles(api, ctrl, watch, args.timeout)
            baseline = singles.alternating(list(POOLS), args.singles)
            baseline_samples = [s for samples in baseline.values() for s in samples]

            ctrl.settle()
            rss_before = ctrl.rss_kib()
            fill = Claims()
            started = time.monotonic()
            fill.create(api, [claim_obj(NS, f"fill-{i:05d}", "full") for i in range(args.fill)], args.parallel)
            filled = watch.wait_bound(fill.sent, args.timeout)
            request(api, "POST", path(NS, "ipclaims"), claim_obj(NS, "after-fill", "spare"))
            digest = watch.wait_bound([(NS, "after-fill")], args.timeout) - filled
            peak = ctrl.peak_rss_kib()
            quiet_from = time.monotonic()
            quiet = ctrl.settle(timeout=args.timeout)
            quiet_after = time.monotonic() - quiet_from

            after = singles.alternating(list(POOLS), 2 * args.singles)
            busy = singles.busy
            watch.stop()

    print(f"pools 'full' and 'spare' (IPv4 /16 each) in one namespace; {args.singles} single claims per phase")
    print(f"fill: {args.fill} claims in 'full' bound in {filled - started:.1f} s "
          f"({(filled - started) / args.fill * 1000:.2f} ms/claim, {args.parallel} parallel requests)")
    print(f"after the fill, a claim in 'spare' was bound {digest:.2f} s after the last claim of the fill; "
          f"the controller was quiet {quiet_after:.1f} s after that{'' if quiet else ' (still busy at the deadline)'}")
    print(f"controller RSS growth in the fill: {rss_growth(rss_before, peak, args.fill)}")
    print(f"{'phase':<34} {'n':>4}  {'latency (median)':>12}  {'CPU/claim (mean)':>12}")
    base = row("baseline (empty namespace)", baseline_samples, None)
    row(f"'full' pool ({args.fill} claims)", after["full"], base)
    row("'spare' pool (same namespace)", after["spare"], base)
    if busy:
        print(f"note: {busy} times the controller did not go quiet within 30 s around a single claim; "
              "its CPU then includes other work")
    return 0


if __name__ == "__main__":
    sys.exit(main())
