#!/usr/bin/env python3
"""A restart at scale, on a real control plane: time until ready, until a new claim is served, and the writes it makes.

A pool with N bound IPClaims and their IPAddresses (as the controller leaves
them: finalizers, owner references, status) is made with a plain client.
Then ``metal3-ipam run`` starts over it, once for each source tree given
(``--compare DIR`` adds another, e.g. an earlier checkout), one after the
other on the same control plane. For each: seconds until /readyz answers,
controller CPU by then, seconds from ready until a claim created then is
bound, the writes the API server answered from start until then (a
restart over a converged state should write almost nothing), and the seconds
from SIGTERM until the process ended (the Go managers take about 1.2 s).

    python -m bench.startup_e2e [--claims 10000] [--compare /path/to/other/checkout]
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

from kubernetes import client

from metal3_ipam import poolkinds  # noqa: F401  (registers the kinds of pool)
from metal3_ipam.controller.api import request
from metal3_ipam.core import kinds
from metal3_ipam.core.naming import address_name
from metal3_ipam.testing.controlplane import ControlPlane, default_crd_paths, ensure_binaries

from bench.release_throughput import requests_so_far
from bench.harness import Controller, claim_obj, path, pool_obj


ROOT = Path(__file__).resolve().parent.parent


NS = "restart"
def _claim(i: int) -> dict:
    return claim_obj(NS, f"claim-{i:05d}", "bench")


PATCH = {"Content-Type": "application/merge-patch+json", "Accept": "application/json"}


def converged_pool(api: client.ApiClient, n: int, parallel: int) -> None:
    made = request(api, "POST", path(NS, "ippools"), pool_obj(NS, "bench", "10.10.0.0/16", 16, "10.10.0.1"))
    request(api, "PATCH", f"{path(NS, 'ippools')}/bench", {"metadata": {"finalizers": [kinds.FINALIZERS[kinds.IPPOOL]]}},
            headers=PATCH)
    pool_owner = {"apiVersion": kinds.METAL3_API_VERSION, "kind": "IPPool", "name": "bench",
                  "uid": made["metadata"]["uid"], "blockOwnerDeletion": True}

    def bound(i: int) -> None:
        body = _claim(i)
        body["metadata"]["finalizers"] = [kinds.FINALIZERS[kinds.IPCLAIM]]
        made = request(api, "POST", path(NS, "ipclaims"), body)
        ip = f"10.10.{(i + 2) // 256}.{(i + 2) % 256}"
        name = address_name("bench", ip)
        request(api, "POST", path(NS, "ipaddresses"), {
            "apiVersion": kinds.METAL3_API_VERSION, "kind": "IPAddress",
            "metadata": {"name": name, "namespace": NS, "finalizers": [kinds.FINALIZERS[kinds.IPADDRESS]],
                         "ownerReferences": [pool_owner, {
                             "apiVersion": kinds.METAL3_API_VERSION, "kind": "IPClaim",
                             "name": body["metadata"]["name"], "uid": made["metadata"]["uid"],
                             "controller": True}]},
            "spec": {"address": ip, "prefix": 16, "gateway": "10.10.0.1", "pool": {"name": "bench", "namespace": NS},
                     "claim": {"name": body["metadata"]["name"], "namespace": NS}}})
        request(api, "PATCH", f"{path(NS, 'ipclaims')}/{body['metadata']['name']}/status", {"status": {
            "address": {"name": name, "namespace": NS},
            "conditions": [{"type": "Ready", "status": "True", "reason": "AddressAllocated",
                            "message": f"bound to {ip}", "lastTransitionTime": "2026-01-01T00:00:00Z"}]}},
                headers=PATCH)

    with ThreadPoolExecutor(parallel) as workers:
        list(workers.map(bound, range(n)))


def restart(plane: ControlPlane, api: client.ApiClient, tree: Path, probe: int, log: Path, parallel: int) -> dict:
    before = requests_so_far(api)
    ctrl = Controller(plane, [NS], log, parallel, tree=tree)
    result: dict = {}
    try:
        ready = ctrl.start(timeout=900)
        cpu_ready = ctrl.cpu_seconds()
        asked = time.monotonic()
        request(api, "POST", path(NS, "ipclaims"), _claim(probe))
        name = _claim(probe)["metadata"]["name"]
        while not (request(api, "GET", f"{path(NS, 'ipclaims')}/{name}").get("status") or {}).get("address"):
            if time.monotonic() - asked > 600:
                raise SystemExit(f"{name} not bound in 600 s; see {log}")
            time.sleep(0.02)
        served = time.monotonic() - asked
        time.sleep(2.0)  # what the start-up passes still write
        writes = {k: v for k, v in (requests_so_far(api) - before).items()
                  if k[0] in ("POST", "PUT", "PATCH", "DELETE") and v}
        result = {"ready": ready, "cpu_ready": cpu_ready, "served": served, "cpu": ctrl.cpu_seconds(), "writes": writes}
    finally:
        result["stop"] = ctrl.stop()
    return result


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--claims", type=int, default=10_000)
    parser.add_argument("--parallel", type=int, default=16)
    parser.add_argument("--compare", action="append", default=[], help="another source tree to restart too")
    args = parser.parse_args()
    ensure_binaries()
    trees = [Path(p).resolve() for p in args.compare] + [ROOT]
    with ControlPlane(crd_paths=default_crd_paths(), controller_manager=False) as plane, \
            tempfile.TemporaryDirectory() as tmp:
        api = client.ApiClient(plane.configuration())
        api.configuration.connection_pool_maxsize = args.parallel + 4
        request(api, "POST", "/api/v1/namespaces", {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": NS}})
        made = time.monotonic()
        converged_pool(api, args.claims, args.parallel)
        print(f"{args.claims} bound IPClaims + IPAddresses made in {time.monotonic() - made:.0f} s")
        results = [(tree, restart(plane, api, tree, 90_000 + i, Path(tmp) / f"controller-{i}.log", args.parallel))
                   for i, tree in enumerate(trees)]
    print(f"restart over {2 * args.claims} objects ({args.claims} bound claims and their addresses)")
    print(f"{'tree':<40}{'ready':>9}{'CPU at ready':>14}{'new claim bound':>17}{'CPU total':>11}{'stop':>8}  writes")
    for tree, r in results:
        writes = ", ".join(f"{verb} {resource} {count}" for (verb, resource), count in sorted(r["writes"].items()))
        print(f"{str(tree)[-40:]:<40}{r['ready']:>8.1f}s{r['cpu_ready']:>13.1f}s{r['served']:>16.2f}s"
              f"{r['cpu']:>10.1f}s{r['stop']:>7.1f}s  {writes}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
