"""``metal3-ipam demo``: the whole thing on this machine, with nothing installed beforehand.

Starts a local control plane (etcd + kube-apiserver + kube-controller-manager
on loopback, built by hack/build-binaries.sh on first use), installs the CRDs
and the manifests given (the samples by default), runs the controller until
every claim is bound or in error, prints the objects as ``kubectl get`` would
and stops everything.
"""

from __future__ import annotations

import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from . import manifests
from .controller.api import request
from .core import kinds
from .core import objects as o
from .controller.operator import plural_of

TABLE = "application/json;as=Table;v=v1;g=meta.k8s.io,application/json"


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _path(obj: dict, version: str | None = None) -> str:
    group, _, api_version = obj["apiVersion"].rpartition("/")
    plural = plural_of(kinds.kind_of(obj))
    return f"/apis/{group}/{version or api_version}/namespaces/{o.namespace(obj) or 'default'}/{plural}"


def _settled(api, claims: list[dict]) -> bool:
    for claim in claims:
        current = request(api, "GET", f"{_path(claim)}/{o.name(claim)}")
        status = o.status(current)
        if not (status.get("address") or status.get("addressRef") or status.get("errorMessage")
                or any(c.get("status") == "False" for c in status.get("conditions") or [])):
            return False
    return True


def _print_table(api, title: str, path: str) -> None:
    table = request(api, "GET", path, headers={"Accept": TABLE})
    columns = [c["name"].upper() for c in table["columnDefinitions"] if c.get("priority", 0) == 0]
    indexes = [i for i, c in enumerate(table["columnDefinitions"]) if c.get("priority", 0) == 0]
    rows = [[str(r["cells"][i]) if r["cells"][i] is not None else "" for i in indexes] for r in table["rows"]]
    widths = [max(len(x) for x in [col] + [r[i] for r in rows]) for i, col in enumerate(columns)]
    print(f"\n$ kubectl get {title}")
    for row in [columns] + rows:
        print("   ".join(cell.ljust(w) for cell, w in zip(row, widths)).rstrip())


def main(paths: list[str], timeout: float = 120.0) -> int:
    from kubernetes import client

    from .testing.controlplane import BinariesUnavailable, ControlPlane, default_crd_paths, ensure_binaries
    from .testing.processes import stop_group

    loaded, problems = manifests.load(paths)
    if problems:
        for problem in problems:
            print(problem, file=sys.stderr)
        return 1
    try:
        print("==> control-plane binaries", flush=True)
        ensure_binaries()
    except BinariesUnavailable as err:
        print(f"metal3-ipam demo: {err}", file=sys.stderr)
        return 1
    print("==> starting etcd, kube-apiserver and kube-controller-manager on 127.0.0.1", flush=True)
    with ControlPlane(crd_paths=default_crd_paths()) as plane, tempfile.TemporaryDirectory() as logs:
        api = client.ApiClient(plane.configuration())
        print(f"==> control plane up at {plane.server}; kubeconfig {plane.kubeconfig}", flush=True)
        for item in loaded:
            request(api, "POST", _path(item.obj), body=item.obj)
        print(f"==> created {len(loaded)} object(s) from {', '.join(paths)}", flush=True)
        log_path = Path(logs) / "controller.log"
        with open(log_path, "w") as log:
            controller = subprocess.Popen(
                [sys.executable, "-m", "metal3_ipam.cli", "run", "--kubeconfig", str(plane.kubeconfig),
                 "--no-leader-elect", "--health-address", f"127.0.0.1:{_free_port()}"],
                stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
        try:
            print("==> controller running; waiting for every claim to be served", flush=True)
            claims = [i.obj for i in loaded if kinds.kind_of(i.obj) in (kinds.IPCLAIM, kinds.CAPI_CLAIM)]
            deadline = time.monotonic() + timeout
            while not _settled(api, claims):
                if controller.poll() is not None or time.monotonic() > deadline:
                    print(log_path.read_text(), file=sys.stderr)
                    print("metal3-ipam demo: the claims were not served", file=sys.stderr)
                    return 1
                time.sleep(0.2)
            namespaces = sorted({o.namespace(i.obj) or "default" for i in loaded})
            for ns in namespaces:
                for title, path in (
                        ("ippools", f"/apis/{kinds.METAL3_GROUP}/{kinds.METAL3_VERSION}/namespaces/{ns}/ippools"),
                        ("ipclaims", f"/apis/{kinds.METAL3_GROUP}/{kinds.METAL3_VERSION}/namespaces/{ns}/ipclaims"),
                        ("ipaddresses.ipam.metal3.io",
                         f"/apis/{kinds.METAL3_GROUP}/{kinds.METAL3_VERSION}/namespaces/{ns}/ipaddresses"),
                        ("ipaddressclaims", f"/apis/{kinds.CAPI_IPAM_GROUP}/v1beta2/namespaces/{ns}/ipaddressclaims"),
                        ("ipaddresses.ipam.cluster.x-k8s.io",
                         f"/apis/{kinds.CAPI_IPAM_GROUP}/v1beta2/namespaces/{ns}/ipaddresses")):
                    _print_table(api, f"{title} -n {ns}", path)
        finally:
            stop_group(controller)
        print("\n==> stopped the controller and the control plane", flush=True)
    return 0
