#!/usr/bin/env python3
"""What admission costs in time: ordinary reviews beside hostile clients, and a huge manifest validated.

The times the tests no longer bound (a slow machine made them fail), measured
side by side in one run:

- the admission webhook server alone in a process (as ``tests/local/test_webhook.py``
  runs it), a fresh one per phase, and an ordinary claim review sent N times on a
  kept connection, as the API server sends it: alone, then beside each load of
  hostile clients (in a process of their own): a dozen reviews just under 64 KiB
  that take long to judge, the largest refused review four at a time, bodies of
  8 MiB, bodies just under the cap, and idle and half-sent connections with some
  of each. Printed per phase: the ordinary review's median and worst round trip,
  the median's ratio to alone, the round trip of the hostile reviews that were
  judged (the yardstick to read them by), and the server's peak memory;
- the loop that plays the controller's (the server's owner, which copies what a
  pool review reads) beside the largest refused review four at a time: how
  often a 10 ms ticker on it ran, its longest gap and the share of the time in
  gaps over 50 ms (judged on that loop, the reviews stalled it nearly all the
  time; the tests show by order that they are not);
- ``metal3-ipam validate`` of an IPPool with 100,000 preAllocations (refused on
  its size) against loading the same file with libyaml and, with ``--pure``,
  with the pure-Python loader.

    python -m bench.admission [--reviews 20] [--loop-seconds 10] [--pure]
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import io
import socket
import statistics
import tempfile
import time
from pathlib import Path

import yaml

from metal3_ipam import poolkinds  # noqa: F401  (registers the kinds of pool)
from metal3_ipam.cli import main as cli
from metal3_ipam.controller.review_body import MAX_REVIEW_BYTES
from metal3_ipam.controller.webhook import hooks
from metal3_ipam.core import kinds
from metal3_ipam.testing import webhook_load as load


CLAIM_PATH = next(h.path for h in hooks() if h.kind == kinds.IPCLAIM)
POOL_PATH = next(h.path for h in hooks() if h.kind == kinds.IPPOOL and not h.mutating)

PHASES = [
    ("alone", {}),
    ("12 costly reviews under 64 KiB", dict(costly_reviews=12)),
    ("4 largest refused reviews", dict(largest_reviews=4)),
    ("60 bodies of 8 MiB", dict(big_bodies=60)),
    ("24 bodies just under the cap", dict(big_bodies=24, big_body_bytes=MAX_REVIEW_BYTES - 1)),
    ("40 idle, 20 half-sent, 4 largest, 8 big", dict(idle=40, half_headers=20, largest_reviews=4, big_bodies=8)),
]


def ordinary_reviews(server: load.ServerProcess, count: int) -> list[float]:
    client = load.KeptAlive(server.port, server.context, timeout=120)
    body = load.review(load.claim_request())
    try:
        client.post(CLAIM_PATH, body)  # the connection made, as the API server's is
        seconds = []
        for _ in range(count):
            started = time.monotonic()
            status, answer = client.post(CLAIM_PATH, body)
            seconds.append(time.monotonic() - started)
            if status != 200:
                print(f"  an ordinary review was answered {status}: {answer[:200]!r}")
        return seconds
    finally:
        client.close()


def webhook_phases(count: int) -> None:
    print(f"{'phase':<42} {'median':>8} {'worst':>8} {'x alone':>8} {'hostile judged':>16} {'peak RSS':>9}")
    alone = None
    for name, kinds_of_load in PHASES:
        with tempfile.TemporaryDirectory() as directory, load.ServerProcess(Path(directory)) as server:
            if kinds_of_load:
                with load.HostileProcess(server.port, server.authority.pem, POOL_PATH, Path(directory),
                                         seconds=600, **kinds_of_load) as hostile:
                    seconds = ordinary_reviews(server, count)
                judged = hostile.costly_seconds + hostile.largest_seconds
            else:
                seconds, judged = ordinary_reviews(server, count), []
            peak = load.rss_bytes(server.pid, "VmHWM")
        median = statistics.median(seconds)
        alone = alone or median
        yardstick = f"{statistics.median(judged):.3f} s ({len(judged)})" if judged else "-"
        print(f"{name:<42} {median:>7.3f}s {max(seconds):>7.3f}s {median / alone:>8.1f} {yardstick:>16} "
              f"{peak / 2**20:>5.0f} MiB", flush=True)


async def _ticks_beside_largest(seconds: float) -> tuple[list[float], list[float]]:
    from metal3_ipam.controller.admission import Admission
    from metal3_ipam.controller.webhook_server import WebhookServer
    from metal3_ipam.core.inventory import Inventory
    from metal3_ipam.testing.certs import Authority

    with tempfile.TemporaryDirectory() as directory:
        authority = Authority.create()
        authority.issue(Path(directory))
        with socket.socket() as s:
            s.bind((load.HOST, 0))
            port = s.getsockname()[1]
        server = await WebhookServer(Admission(Inventory()), load.HOST, port, directory).start()
        loop, gaps = asyncio.get_running_loop(), []

        async def ticker() -> None:
            last = loop.time()
            while True:
                await asyncio.sleep(0.01)
                gaps.append(loop.time() - last)
                last = loop.time()

        hostile = load.HostileProcess(port, authority.pem, POOL_PATH, Path(directory), seconds=600, largest_reviews=4)
        try:
            await asyncio.to_thread(hostile.__enter__)
            ticking = asyncio.create_task(ticker())
            await asyncio.sleep(seconds)
            ticking.cancel()
            await asyncio.to_thread(hostile.__exit__, None, None, None)
        finally:
            await server.close()
    return gaps, hostile.largest_seconds


def loop_beside_largest(seconds: float) -> None:
    gaps, judged = asyncio.run(_ticks_beside_largest(seconds))
    window = sum(gaps)
    stalled = sum(gap for gap in gaps if gap > 0.05)
    yardstick = f"{statistics.median(judged):.3f} s" if judged else "-"
    print(f"controller's loop beside 4 largest refused reviews, {window:.1f} s: {len(gaps)} ticks of 10 ms, longest "
          f"gap {max(gaps, default=0):.3f} s, {stalled / window if window else 0:.0%} of the time in gaps over 50 ms; "
          f"a largest review judged in {yardstick} (median of {len(judged)})", flush=True)


def huge_manifest(pure: bool) -> None:
    held = "\n".join(f"    claim-{i}: 2001:db8::{i:x}" for i in range(100_000))
    text = ("apiVersion: ipam.metal3.io/v1alpha1\nkind: IPPool\nmetadata:\n  name: big\n"
            "spec:\n  namePrefix: big\n  pools:\n  - subnet: 2001:db8::/8\n  preAllocations:\n" + held + "\n")
    loaders = [("libyaml", getattr(yaml, "CSafeLoader", None))] + ([("pure Python", yaml.SafeLoader)] if pure else [])
    times = {}
    for name, loader in loaders:
        if loader is None:
            print(f"  {name}: not available")
            continue
        started = time.perf_counter()
        list(yaml.load_all(text, Loader=loader))
        times[name] = time.perf_counter() - started
    with tempfile.TemporaryDirectory() as directory:
        path = Path(directory) / "huge.yaml"
        path.write_text(text)
        started = time.perf_counter()
        with contextlib.redirect_stdout(io.StringIO()), contextlib.redirect_stderr(io.StringIO()):
            code = cli(["validate", "-f", str(path)])
        took = time.perf_counter() - started
    base = times.get("libyaml")
    print(f"IPPool with 100,000 preAllocations: metal3-ipam validate {took:.2f} s (exit {code})"
          + "".join(f"; loaded with {name} {t:.2f} s" for name, t in times.items())
          + (f"; validate / libyaml load {took / base:.2f}" if base else ""))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--reviews", type=int, default=20, help="ordinary reviews timed per phase (default 20)")
    parser.add_argument("--pure", action="store_true", help="also load the huge manifest with the pure-Python "
                                                            "loader (about 12 s)")
    parser.add_argument("--loop-seconds", type=float, default=10.0,
                        help="how long the controller's loop is watched beside the largest reviews (default 10)")
    args = parser.parse_args()
    webhook_phases(args.reviews)
    loop_beside_largest(args.loop_seconds)
    huge_manifest(args.pure)


if __name__ == "__main__":
    main()
