#!/usr/bin/env python3
"""Allocation against release: N claims created at once until all are bound, then deleted at once until all are gone.

On one local control plane with ``metal3-ipam run``: for each phase, the
wall time, the controller's CPU, and the requests the API server answered,
by verb and resource (from its own counters), per claim. The goal is a
release no slower than the allocation (ratio release/allocation <= 1).

First, the floor of each phase in another namespace: a plain client makes
the requests the controller's run makes per claim, in the same order and
with the same parallelism (allocation: create the claim, create its address,
patch the claim's status, add its finalizer; release: delete the claim,
delete its address, take the address's finalizer off, take the claim's off).
What the API server needs for a deletion against a creation shows there.

    python -m bench.release_throughput [--claims 1000] [--parallel 16]

BENCH_PROFILE=<file> runs the controller under cProfile (written at exit).
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import threading
import time
from collections import Counter
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

from kubernetes import client, watch

from metal3_ipam import poolkinds  # noqa: F401  (registers the kinds of pool)
from metal3_ipam.controller.api import request
from metal3_ipam.core import kinds
from metal3_ipam.core.naming import address_name
from metal3_ipam.testing.controlplane import ControlPlane, default_crd_paths, ensure_binaries

from bench.harness import Controller, claim_obj, path, pool_obj, raw_get


GROUP, VERSION = "ipam.metal3.io", "v1alpha1"
NS = "release"


def _pool(ns: str) -> dict:
    return pool_obj(ns, "bench", "10.10.0.0/16", 16, "10.10.0.1")


def _claim(ns: str, i: int) -> dict:
    return claim_obj(ns, f"claim-{i:05d}", "bench")


def requests_so_far(api: client.ApiClient) -> Counter:
    """Requests the API server answered, by (verb, resource), from its own metrics."""
    counts: Counter = Counter()
    for line in raw_get(api, "/metrics", "text/plain").decode().splitlines():
        if not line.startswith("apiserver_request_total{"):
            continue
        labels = dict(part.split("=", 1) for part in line[line.index("{") + 1:line.rindex("}")].split(","))
        verb, resource = labels.get("verb", "").strip('"'), labels.get("resource", "").strip('"')
        sub = labels.get("subresource", '""').strip('"')
        counts[(verb, resource + (f"/{sub}" if sub else ""))] += int(float(line.rsplit(" ", 1)[1]))
    return counts


class Follow:
    """The claims of the namespace as a watch tells them: which are bound, which are gone."""

    def __init__(self, api: client.ApiClient, version: str) -> None:
        self.bound: set[str] = set()
        self.gone: set[str] = set()
        self.changed = threading.Condition()
        self.watcher = watch.Watch()
        self.stopped = False
        threading.Thread(target=self._run, args=(api, version), daemon=True).start()

    def _run(self, api: client.ApiClient, version: str) -> None:
        custom = client.CustomObjectsApi(api)
        while not self.stopped:
            try:  # a stream the server or the connection ends goes on from the last version seen
                for event in self.watcher.stream(custom.list_namespaced_custom_object, GROUP, VERSION, NS,
                                                 "ipclaims", resource_version=version, timeout_seconds=240):
                    version = event["object"]["metadata"]["resourceVersion"]
                    name = event["object"]["metadata"]["name"]
                    with self.changed:
                        if event["type"] == "DELETED":
                            self.gone.add(name)
                        elif (event["object"].get("status") or {}).get("address"):
                            self.bound.add(name)
                        self.changed.notify_all()
            except Exception as err:  # noqa: BLE001 - the bench must not hang on a broken stream
                print(f"(claims watch: {type(err).__name__}: {err}; resuming)", file=sys.stderr)
                self.watcher = watch.Watch()

    def stop(self) -> None:
        self.stopped = True
        self.watcher.stop()

    def wait(self, what: set[str], n: int, timeout: float) -> bool:
        deadline = time.monotonic() + timeout
        with self.changed:
            while len(what) < n:
                left = deadline - time.monotonic()
                if left <= 0:
                    return False
                self.changed.wait(left)
        return True


def phase(api, ctrl: Controller, act, done) -> tuple[float, float, Counter]:
    before, cpu = requests_so_far(api), ctrl.cpu_seconds()
    started = time.perf_counter()
    act()
    if not done():
        raise SystemExit("the phase did not finish in time")
    elapsed = time.perf_counter() - started
    time.sleep(1.0)  # the last pool status writes
    return elapsed, ctrl.cpu_seconds() - cpu, requests_so_far(api) - before


def floor(api: client.ApiClient, n: int, parallel: int) -> tuple[float, float]:
    """Allocation and release by a plain client: the same requests per claim, no controller."""
    ns = "floor"
    request(api, "POST", "/api/v1/namespaces", {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": ns}})
    request(api, "POST", path(ns, "ippools"), _pool(ns))
    patch = {"Content-Type": "application/merge-patch+json", "Accept": "application/json"}

    def allocate(i: int) -> None:
        name = f"claim-{i:05d}"
        request(api, "POST", path(ns, "ipclaims"), _claim(ns, i))
        ip = f"10.10.{(i + 2) // 256}.{(i + 2) % 256}"
        lock = address_name("bench", ip)
        request(api, "POST", path(ns, "ipaddresses"), {
            "apiVersion": f"{GROUP}/{VERSION}", "kind": "IPAddress",
            "metadata": {"name": lock, "namespace": ns, "finalizers": [kinds.FINALIZERS[kinds.IPADDRESS]]},
            "spec": {"address": ip, "prefix": 16, "gateway": "10.10.0.1", "pool": {"name": "bench", "namespace": ns},
                     "claim": {"name": name, "namespace": ns}}})
        request(api, "PATCH", f"{path(ns, 'ipclaims')}/{name}/status",
                {"status": {"address": {"name": lock, "namespace": ns}}}, headers=patch)
        request(api, "PATCH", f"{path(ns, 'ipclaims')}/{name}",
                {"metadata": {"finalizers": [kinds.FINALIZERS[kinds.IPCLAIM]]}}, headers=patch)

    def release(i: int) -> None:
        name = f"claim-{i:05d}"
        lock = address_name("bench", f"10.10.{(i + 2) // 256}.{(i + 2) % 256}")
        request(api, "DELETE", f"{path(ns, 'ipclaims')}/{name}")
        request(api, "DELETE", f"{path(ns, 'ipaddresses')}/{lock}", {"propagationPolicy": "Background"})
        request(api, "PATCH", f"{path(ns, 'ipaddresses')}/{lock}", {"metadata": {"finalizers": []}}, headers=patch)
        request(api, "PATCH", f"{path(ns, 'ipclaims')}/{name}", {"metadata": {"finalizers": []}}, headers=patch)

    times = []
    for work in (allocate, release):
        started = time.perf_counter()
        with ThreadPoolExecutor(parallel) as workers:
            list(workers.map(work, range(n)))
        times.append(time.perf_counter() - started)
    return times[0], times[1]


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--claims", type=int, default=1000)
    parser.add_argument("--parallel", type=int, default=16)
    args = parser.parse_args()
    n = args.claims
    ensure_binaries()
    with ControlPlane(crd_paths=default_crd_paths(), controller_manager=False) as plane, \
            tempfile.TemporaryDirectory() as tmp:
        api = client.ApiClient(plane.configuration())
        api.configuration.connection_pool_maxsize = args.parallel + 4
        request(api, "POST", "/api/v1/namespaces", {"apiVersion": "v1", "kind": "Namespace",
                                                   "metadata": {"name": NS}})
        floor_bind, floor_release = floor(api, n, args.parallel)
        request(api, "POST", path(NS, "ippools"), _pool(NS))
        ctrl = Controller(plane, [NS], Path(tmp) / "controller.log", args.parallel)
        ctrl.start()
        try:
            follow = Follow(api, request(api, "GET", path(NS, "ipclaims"))["metadata"]["resourceVersion"])

            def create() -> None:
                with ThreadPoolExecutor(args.parallel) as workers:
                    list(workers.map(lambda i: request(api, "POST", path(NS, "ipclaims"), _claim(NS, i)), range(n)))

            def delete() -> None:
                with ThreadPoolExecutor(args.parallel) as workers:
                    list(workers.map(lambda i: request(api, "DELETE", f"{path(NS, 'ipclaims')}/claim-{i:05d}"),
                                     range(n)))

            bind = phase(api, ctrl, create, lambda: follow.wait(follow.bound, n, 600))
            release = phase(api, ctrl, delete, lambda: follow.wait(follow.gone, n, 600))
            follow.stop()
        finally:
            ctrl.stop()
    print(f"{n} claims on one pool, {args.parallel} parallel requests")
    print(f"{'phase':<12}{'time':>9}{'ms/claim':>10}{'CPU ms/claim':>14}{'requests/claim':>16}")
    for name, (elapsed, cpu, counts) in (("allocation", bind), ("release", release)):
        print(f"{name:<12}{elapsed:>8.2f}s{elapsed / n * 1000:>10.2f}{cpu / n * 1000:>14.2f}"
              f"{sum(counts.values()) / n:>16.2f}")
    for name, (_, _, counts) in (("allocation", bind), ("release", release)):
        shown = ", ".join(f"{verb} {resource} {count / n:.2f}" for (verb, resource), count in counts.most_common()
                          if count and verb not in ("WATCH",))
        print(f"  {name} requests per claim: {shown}")
    print(f"floor (plain client, the same 4 requests per claim): allocation {floor_bind:.2f} s, "
          f"release {floor_release:.2f} s, ratio {floor_release / floor_bind:.2f}")
    ratio = release[0] / bind[0]
    print(f"controller/floor: allocation {bind[0] / floor_bind:.2f}, release {release[0] / floor_release:.2f}")
    print(f"ratio release/allocation: {ratio:.2f} (goal <= 1) {'PASS' if ratio <= 1 else 'FAIL'}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
