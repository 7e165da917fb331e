#!/usr/bin/env python3
"""End-to-end throughput: N claims created at once on one pool, until all are bound.

Side by side, on one local control plane (etcd + kube-apiserver on loopback):

- floor: a plain client, no controller, makes the writes an allocation needs
  at the least: it creates the N IPClaims, then N IPAddresses and N claim
  status patches, with the same number of parallel requests as the controller;
- controller: ``metal3-ipam run`` is started and ready; the same N IPClaims are
  created the same way, and the clock stops when the last one is bound.

Both clocks start at the first claim creation. The ratio controller/floor is
the price of running a controller (watching, planning, finalizers, pool
status) over the bare writes; the goal is <= 1.5. Also printed: the writes
each side made (from the API server's own request counters) and the
controller's peak RSS.

    python bench/e2e_throughput.py [--claims 1000] [--parallel 16]
"""

from __future__ import annotations

import argparse
import os
import socket
import subprocess
import sys
import tempfile
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from kubernetes import client, watch  # noqa: E402

from metal3_ipam.controller.api import request  # noqa: E402
from metal3_ipam.core.naming import address_name  # noqa: E402
from metal3_ipam.testing.controlplane import ControlPlane, default_crd_paths, ensure_binaries  # noqa: E402
from metal3_ipam.testing.processes import stop_group  # noqa: E402

GROUP, VERSION = "ipam.metal3.io", "v1alpha1"
WRITE_VERBS = ("POST", "PUT", "PATCH", "DELETE")


def base(ns: str, plural: str) -> str:
    return f"/apis/{GROUP}/{VERSION}/namespaces/{ns}/{plural}"


def pool(ns: str) -> dict:
    return {"apiVersion": f"{GROUP}/{VERSION}", "kind": "IPPool", "metadata": {"name": "bench", "namespace": ns},
            "spec": {"namePrefix": "bench", "pools": [{"subnet": "10.10.0.0/16"}], "prefix": 16,
                     "gateway": "10.10.0.1"}}


def claim(ns: str, i: int) -> dict:
    return {"apiVersion": f"{GROUP}/{VERSION}", "kind": "IPClaim",
            "metadata": {"name": f"claim-{i:05d}", "namespace": ns}, "spec": {"pool": {"name": "bench"}}}


def writes_so_far(api: client.ApiClient) -> int:
    """Mutating requests the API server has answered, from its own metrics."""
    text = request_text(api, "/metrics")
    total = 0
    for line in text.splitlines():
        if line.startswith("apiserver_request_total{") and any(f'verb="{v}"' in line for v in WRITE_VERBS):
            total += int(float(line.rsplit(" ", 1)[1]))
    return total


def request_text(api: client.ApiClient, path: str) -> str:
    method, url, headers, body, _ = api.param_serialize("GET", path, header_params={"Accept": "text/plain"},
                                                        auth_settings=["BearerToken"])
    response = api.call_api(method, url, header_params=headers)
    response.read()
    return response.data.decode()


def create_claims(api: client.ApiClient, ns: str, n: int, parallel: int) -> None:
    with ThreadPoolExecutor(parallel) as pool_:
        list(pool_.map(lambda i: request(api, "POST", base(ns, "ipclaims"), claim(ns, i)), range(n)))


def run_floor(api: client.ApiClient, n: int, parallel: int) -> tuple[float, int]:
    ns = "floor"
    request(api, "POST", base(ns, "ippools"), pool(ns))
    created = writes_so_far(api)
    started = time.perf_counter()
    create_claims(api, ns, n, parallel)

    def allocate(i: int) -> None:
        ip = f"10.10.{(i + 2) // 256}.{(i + 2) % 256}"
        name = address_name("bench", ip)
        request(api, "POST", base(ns, "ipaddresses"), {
            "apiVersion": f"{GROUP}/{VERSION}", "kind": "IPAddress",
            "metadata": {"name": name, "namespace": ns},
            "spec": {"address": ip, "prefix": 16, "gateway": "10.10.0.1",
                     "pool": {"name": "bench", "namespace": ns},
                     "claim": {"name": f"claim-{i:05d}", "namespace": ns}}})
        request(api, "PATCH", f"{base(ns, 'ipclaims')}/claim-{i:05d}/status",
                {"status": {"address": {"name": name, "namespace": ns}}},
                headers={"Content-Type": "application/merge-patch+json", "Accept": "application/json"})

    with ThreadPoolExecutor(parallel) as pool_:
        list(pool_.map(allocate, range(n)))
    return time.perf_counter() - started, writes_so_far(api) - created


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def wait_ready(port: int, proc: subprocess.Popen, timeout: float = 60) -> None:
    import urllib.request
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise SystemExit("the controller exited before it was ready")
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{port}/readyz", timeout=2) as r:
                if r.status == 200:
                    return
        except OSError:
            pass
        time.sleep(0.1)
    raise SystemExit("the controller did not become ready")


def cpu_seconds(pid: int) -> float:
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def scrape(port: int, name: str) -> float:
    import urllib.request
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5) as r:
        for line in r.read().decode().splitlines():
            if line.startswith(name + " "):
                return float(line.split()[1])
    return float("nan")


def peak_rss_mib(pid: int) -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmHWM:"):
            return int(line.split()[1]) / 1024
    return float("nan")


def run_controller(plane: ControlPlane, api: client.ApiClient, n: int, parallel: int, log: Path) -> tuple[float, int, float]:
    ns = "controller"
    request(api, "POST", base(ns, "ippools"), pool(ns))
    port = free_port()
    with open(log, "w") as out:
        profile = ["-m", "cProfile", "-o", os.environ["BENCH_PROFILE"]] if os.environ.get("BENCH_PROFILE") else []
        proc = subprocess.Popen([sys.executable, *profile, "-m", "metal3_ipam.cli", "run", "--kubeconfig", str(plane.kubeconfig),
                                 "-n", ns, "--no-leader-elect", "--health-address", f"127.0.0.1:{port}", "--parallel-writes", str(int(os.environ.get("BENCH_CONTROLLER_PARALLEL", parallel))), *(["-v"] if os.environ.get("BENCH_CONTROLLER_LOG") else [])],
                                stdout=out, stderr=subprocess.STDOUT, start_new_session=True, cwd=ROOT)
    try:
        wait_ready(port, proc)
        bound: set[str] = set()
        all_bound = threading.Event()
        listing = request(api, "GET", base(ns, "ipclaims"))
        watcher = watch.Watch()

        def follow() -> None:
            custom = client.CustomObjectsApi(api)
            for event in watcher.stream(custom.list_namespaced_custom_object, GROUP, VERSION, ns, "ipclaims",
                                        resource_version=listing["metadata"]["resourceVersion"]):
                obj = event["object"]
                if (obj.get("status") or {}).get("address"):
                    bound.add(obj["metadata"]["name"])
                    if len(bound) >= n:
                        all_bound.set()
                        return

        threading.Thread(target=follow, daemon=True).start()
        before = writes_so_far(api)
        started = time.perf_counter()
        create_claims(api, ns, n, parallel)
        if not all_bound.wait(timeout=600):
            raise SystemExit(f"only {len(bound)} of {n} claims bound in 600 s; see {log}")
        elapsed = time.perf_counter() - started
        watcher.stop()
        # Let the pool status settle, then count every write of the run.
        time.sleep(1.0)
        print(f"controller: {scrape(port, 'metal3_ipam_reconcile_seconds_count'):.0f} pool passes, "
              f"{scrape(port, 'metal3_ipam_reconcile_seconds_sum'):.2f} s in passes (planning + writing), "
              f"{cpu_seconds(proc.pid):.2f} s CPU in all")
        return elapsed, writes_so_far(api) - before, peak_rss_mib(proc.pid)
    finally:
        stop_group(proc)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--claims", type=int, default=1000)
    parser.add_argument("--parallel", type=int, default=16, help="parallel requests, both sides (default 16)")
    args = parser.parse_args()
    ensure_binaries()
    with ControlPlane(crd_paths=default_crd_paths(), controller_manager=False) as plane, \
            tempfile.TemporaryDirectory() as tmp:
        api = client.ApiClient(plane.configuration())
        api.configuration.connection_pool_maxsize = args.parallel + 4
        for ns in ("floor", "controller"):
            request(api, "POST", "/api/v1/namespaces", {"apiVersion": "v1", "kind": "Namespace",
                                                       "metadata": {"name": ns}})
        floor_s, floor_writes = run_floor(api, args.claims, args.parallel)
        log = Path(os.environ.get("BENCH_CONTROLLER_LOG") or Path(tmp) / "controller.log")
        ctrl_s, ctrl_writes, rss = run_controller(plane, api, args.claims, args.parallel, log)
    ratio = ctrl_s / floor_s
    print(f"claims: {args.claims} on one /16 pool, {args.parallel} parallel requests per side")
    print(f"floor (plain client, create claims + addresses + status patches): {floor_s:.2f} s, "
          f"{floor_writes} writes, {floor_s / args.claims * 1000:.2f} ms/claim")
    print(f"controller (metal3-ipam run, claims created until all bound):     {ctrl_s:.2f} s, "
          f"{ctrl_writes} writes, {ctrl_s / args.claims * 1000:.2f} ms/claim")
    print(f"ratio controller/floor: {ratio:.2f} (goal <= 1.5) {'PASS' if ratio <= 1.5 else 'FAIL'}")
    print(f"writes per claim: floor {floor_writes / args.claims:.2f}, controller {ctrl_writes / args.claims:.2f}")
    print(f"controller peak RSS: {rss:.1f} MiB")
    return 0


if __name__ == "__main__":
    sys.exit(main())
