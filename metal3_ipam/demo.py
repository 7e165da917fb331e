"""``metal3-ipam demo``: the whole thing on this machine, with nothing installed beforehand.

Starts a local control plane (etcd + kube-apiserver + kube-controller-manager
on loopback, built by hack/build-binaries.sh on first use), installs the CRDs
and the manifests given (the samples by default: an example of every kind of
pool), runs the controller until every claim is bound or in error, prints the
objects as ``kubectl get`` would and stops everything. A pool whose addresses come
from an outside IPAM is served only when its kind says it can be here (its IPAM
answers, ``Outside.unservable``); otherwise it is left out, with its claims and
the Secrets only it names, and the demo says so.
"""

from __future__ import annotations

import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Mapping
from pathlib import Path

from . import manifests
from .controller.api import request
from .core import kinds, poolkind
from .core import objects as o
from .controller.operator import plural_of

CORE_PLURALS = {"Secret": "secrets", "ConfigMap": "configmaps"}

TABLE = "application/json;as=Table;v=v1;g=meta.k8s.io,application/json"


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _path(obj: dict, version: str | None = None) -> str:
    group, _, api_version = obj["apiVersion"].rpartition("/")
    if not group:  # the core group: /api/v1
        return f"/api/{api_version}/namespaces/{o.namespace(obj) or 'default'}/{CORE_PLURALS[obj['kind']]}"
    kind = kinds.kind_of(obj)
    pool_kind = poolkind.REGISTRY.get(kind)
    where = "" if pool_kind is not None and pool_kind.cluster_scoped else f"namespaces/{o.namespace(obj) or 'default'}/"
    return f"/apis/{group}/{version or api_version}/{where}{plural_of(kind)}"


Judge = Callable[[poolkind.PoolKind, dict, Mapping[str, dict]], "str | None"]


def _unservable(pool_kind: poolkind.PoolKind, pool: dict, secrets: Mapping[str, dict]) -> str | None:
    return pool_kind.outside.unservable(pool, secrets) if pool_kind.outside else None


def _is_secret(obj: dict) -> bool:
    return obj.get("apiVersion") == "v1" and obj.get("kind") == "Secret"


def without_unservable(objs: list[dict], unservable: Judge = _unservable) -> tuple[list[dict], list[str]]:
    """``objs`` less each pool its kind cannot serve here (``unservable``: why not, or None, given the pool and
    the Secrets of its namespace among ``objs``), its claims and the Secrets it names (unless a pool kept names
    them too); and one line per pool left out, saying why."""
    left_out, notes = set(), []
    kept_secrets, named_secrets = set(), set()
    given: dict[str, dict[str, dict]] = {}
    for obj in objs:
        if _is_secret(obj):
            given.setdefault(o.namespace(obj) or "default", {})[o.name(obj)] = obj
    for obj in objs:
        pool_kind = poolkind.kind_named(kinds.kind_of(obj))
        if pool_kind is None:
            continue
        why = unservable(pool_kind, obj, given.get(o.namespace(obj) or "default", {}))
        secrets = {(o.namespace(obj), name) for name in (pool_kind.outside.secrets(obj) if pool_kind.outside else ())}
        named_secrets |= secrets
        if why is None:
            kept_secrets |= secrets
        else:
            left_out.add((kinds.kind_of(obj), o.namespace(obj), o.name(obj)))
            notes.append(f"{obj.get('kind')} {o.namespace(obj)}/{o.name(obj)} left out: {why}")
    dropped_secrets = named_secrets - kept_secrets

    def kept(obj: dict) -> bool:
        kind = kinds.kind_of(obj)
        if kind == kinds.CAPI_CLAIM:
            ref = o.spec(obj).get("poolRef") or {}
            return ((ref.get("apiGroup"), ref.get("kind")), o.namespace(obj), ref.get("name")) not in left_out
        if _is_secret(obj):
            return (o.namespace(obj), o.name(obj)) not in dropped_secrets
        return (kind, o.namespace(obj), o.name(obj)) not in left_out

    return [x for x in objs if kept(x)], notes


def _settled(api, claims: list[dict]) -> bool:
    for claim in claims:
        current = request(api, "GET", f"{_path(claim)}/{o.name(claim)}")
        status = o.status(current)
        # Ready=False AllocationPending: an outside IPAM has not answered yet.
        if not (status.get("address") or status.get("addressRef") or status.get("errorMessage")
                or any(c.get("status") == "False" and c.get("reason") != "AllocationPending"
                       for c in status.get("conditions") or [])):
            return False
    return True


def _tables(namespaces: list[str]) -> list[tuple[str, str]]:
    """(title, path) of what the demo prints: the pools of every kind, the claims and addresses of both APIs."""
    found = []
    for kind, pool_kind in sorted(poolkind.REGISTRY.items(), key=lambda item: (item[0][0] != kinds.METAL3_GROUP,
                                                                              item[1].plural)):
        group, version = kind[0], pool_kind.versions[0]
        if pool_kind.cluster_scoped:
            found.append((pool_kind.plural, f"/apis/{group}/{version}/{pool_kind.plural}"))
    for ns in namespaces:
        for kind, pool_kind in sorted(poolkind.REGISTRY.items(), key=lambda item: (item[0][0] != kinds.METAL3_GROUP,
                                                                                  item[1].plural)):
            if not pool_kind.cluster_scoped:
                found.append((f"{pool_kind.plural} -n {ns}",
                              f"/apis/{kind[0]}/{pool_kind.versions[0]}/namespaces/{ns}/{pool_kind.plural}"))
        found += [
            (f"ipclaims -n {ns}", f"/apis/{kinds.METAL3_GROUP}/{kinds.METAL3_VERSION}/namespaces/{ns}/ipclaims"),
            (f"ipaddresses.ipam.metal3.io -n {ns}",
             f"/apis/{kinds.METAL3_GROUP}/{kinds.METAL3_VERSION}/namespaces/{ns}/ipaddresses"),
            (f"ipaddressclaims -n {ns}", f"/apis/{kinds.CAPI_IPAM_GROUP}/v1beta2/namespaces/{ns}/ipaddressclaims"),
            (f"ipaddresses.ipam.cluster.x-k8s.io -n {ns}",
             f"/apis/{kinds.CAPI_IPAM_GROUP}/v1beta2/namespaces/{ns}/ipaddresses")]
    return found


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
        objs, notes = without_unservable([item.obj for item in loaded])
        for note in notes:
            print(f"==> {note}", flush=True)
        for obj in objs:
            request(api, "POST", _path(obj), body=obj)
        print(f"==> created {len(objs)} object(s) from {', '.join(paths)}", flush=True)
        log_path = Path(logs) / "controller.log"
        with open(log_path, "w") as log:
            controller = subprocess.Popen(
                [sys.executable, "-m", "metal3_ipam.cli", "run", "--kubeconfig", str(plane.kubeconfig),
                 "--no-leader-elect", "--health-address", f"127.0.0.1:{_free_port()}"],
                stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
        try:
            print("==> controller running; waiting for every claim to be served", flush=True)
            claims = [obj for obj in objs if kinds.kind_of(obj) in (kinds.IPCLAIM, kinds.CAPI_CLAIM)]
            deadline = time.monotonic() + timeout
            while not _settled(api, claims):
                if controller.poll() is not None or time.monotonic() > deadline:
                    print(log_path.read_text(), file=sys.stderr)
                    print("metal3-ipam demo: the claims were not served", file=sys.stderr)
                    return 1
                time.sleep(0.2)
            namespaces = sorted({o.namespace(obj) or "default" for obj in objs
                                 if not getattr(poolkind.REGISTRY.get(kinds.kind_of(obj)), "cluster_scoped", False)})
            for title, path in _tables(namespaces):
                _print_table(api, title, path)
        finally:
            stop_group(controller)
        print("\n==> stopped the controller and the control plane", flush=True)
    return 0
