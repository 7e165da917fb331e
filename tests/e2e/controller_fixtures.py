"""The controller as a separate process, and what the end-to-end tests check with it.

Helpers (the fixtures built on them are in conftest.py):

- :class:`ControllerProcess` runs ``python -m metal3_ipam.cli run`` against a
  control plane with its own health port and log file; ``stop()`` sends SIGTERM,
  ``kill()`` SIGKILL, ``freeze()``/``thaw()`` SIGSTOP/SIGCONT. The log of every controller that took part in a failed
  test is attached to the report.
- :class:`Kube`: small helpers over the custom objects of one namespace.
- :func:`check_invariants` / :func:`assert_invariants`: SPEC §10 over every
  object of a namespace; :class:`Sentinel` checks the never-allowed ones over
  and over in a thread while a test runs.
"""

from __future__ import annotations

import ipaddress
import os
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
import uuid
import urllib.error
import urllib.request
from collections import defaultdict
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Iterable, Iterator

import pytest
from kubernetes import client
from kubernetes.client.rest import ApiException

from metal3_ipam.testing.locks import lease_locks
from metal3_ipam.core import poolkind
from metal3_ipam.core.kinds import GUARD_LABEL
from metal3_ipam.testing import controlplane as cp_mod
from metal3_ipam.testing.waiting import eventually

METAL3 = ("ipam.metal3.io", "v1alpha1")
CAPI_IPAM_GROUP = "ipam.cluster.x-k8s.io"
CAPI = (CAPI_IPAM_GROUP, "v1beta2")
CLUSTER = ("cluster.x-k8s.io", "v1beta2")

FIN_POOL = "ippool.ipam.metal3.io"
FIN_CLAIM = "ipclaim.ipam.metal3.io"
FIN_ADDRESS = "ipaddress.ipam.metal3.io"
FIN_CAPI_CLAIM = "ipam.metal3.io/ipaddressclaim"
FIN_CAPI_ADDRESS = "ipam.metal3.io/ipaddress"
PAUSED = "cluster.x-k8s.io/paused"
CLUSTER_NAME_LABEL = "cluster.x-k8s.io/cluster-name"

_NO_PROXY = urllib.request.build_opener(urllib.request.ProxyHandler({}))


#: Lines for the end of pytest's output (conftest's pytest_terminal_summary), captured output or not: figures
#: such as the image's size.
SUMMARY = pytest.StashKey[list]()

#: The checkout these tests belong to (the package under test may be installed elsewhere, e.g. by tox).
REPO = Path(__file__).resolve().parents[2]


def free_port() -> int:
    """A TCP port free on loopback now."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


# --------------------------------------------------------------------------- the process


def _die_with_parent():
    """A preexec_fn making Linux SIGKILL the controller when the test process dies (None elsewhere),
    so an interrupted run leaves no controller behind."""
    if not sys.platform.startswith("linux"):
        return None
    import ctypes

    prctl = ctypes.CDLL(None, use_errno=True).prctl

    def hook() -> None:  # runs in the child, between fork and exec
        prctl(1, int(signal.SIGKILL), 0, 0, 0)  # PR_SET_PDEATHSIG

    return hook

_ALL: list["ControllerProcess"] = []
_TEST_STARTED = {"at": 0.0}


class ControllerProcess:
    """``metal3-ipam run`` in its own process (group), logging to a file."""

    def __init__(self, kubeconfig: os.PathLike | str, args: Iterable[str] = ("-A",), *, name: str = "controller",
                 log_dir: os.PathLike | str | None = None, verbose: bool = True, manager: bool = False) -> None:
        """``manager``: run as the image's ``/manager`` does (``metal3_ipam.cli:manager``: the Go managers'
        defaults, so ``args`` may be a Go provider's command line)."""
        self.kubeconfig = str(kubeconfig)
        self.entry = (["-c", "import sys; from metal3_ipam.cli import manager; sys.exit(manager())"] if manager
                      else ["-m", "metal3_ipam.cli", "run"])
        # Leader election is off unless asked for: these replicas elect unless told not to.
        args = list(args)
        self.args = args + ([] if "--no-leader-elect" in args else ["--leader-elect"]) + (["-v"] if verbose else [])
        self.name = name
        self.log_dir = Path(log_dir or tempfile.mkdtemp(prefix="metal3-ipam-controller-"))
        self.log_path = self.log_dir / f"{name}.log"
        self.port: int | None = None
        self.popen: subprocess.Popen | None = None
        self.started_at = 0.0
        self.stopped_at: float | None = None
        self.starts = 0
        _ALL.append(self)

    # -- lifecycle ------------------------------------------------------------

    def start(self, ready_timeout: float = 60.0) -> "ControllerProcess":
        assert not self.alive(), f"{self.name} is running already"
        self.port = free_port()
        argv = [sys.executable, *self.entry, "--kubeconfig", self.kubeconfig,
                "--health-address", f"127.0.0.1:{self.port}", *self.args]
        env = {k: v for k, v in os.environ.items() if not k.startswith("KUBECONFIG")}
        env["PYTHONUNBUFFERED"] = "1"
        with open(self.log_path, "ab") as log:
            log.write(f"----- start #{self.starts + 1}: {' '.join(argv)}\n".encode())
            self.popen = subprocess.Popen(argv, stdin=subprocess.DEVNULL, stdout=log, stderr=subprocess.STDOUT,
                                          env=env, start_new_session=True, preexec_fn=_die_with_parent())
        self.starts += 1
        self.started_at = time.monotonic()
        self.stopped_at = None
        if ready_timeout:
            self.wait_ready(ready_timeout)
        return self

    def wait_ready(self, timeout: float = 60.0) -> None:
        def ready() -> bool:
            if not self.alive():
                raise ControllerDied(f"{self.name} exited with status {self.popen.returncode} before it was ready;"
                                     f" log:\n{self.log_tail(60)}")
            return self.http_status("/readyz") == 200

        eventually(ready, timeout=timeout, interval=0.1, what=f"{self.name} /readyz",
                   retry_on=(AssertionError, OSError))

    def alive(self) -> bool:
        return self.popen is not None and self.popen.poll() is None

    def stop(self, timeout: float = 20.0) -> int | None:
        """SIGTERM, and the exit status; SIGKILL when it does not end within ``timeout``."""
        if self.popen is None:
            return None
        if self.popen.poll() is None:
            self._signal(signal.SIGTERM)
            self._signal(signal.SIGCONT)  # a frozen process handles SIGTERM only once it runs
            try:
                self.popen.wait(timeout=timeout)
            except subprocess.TimeoutExpired:
                self._note(f"did not stop within {timeout:g}s of SIGTERM; SIGKILL")
                self._signal(signal.SIGKILL)
                self.popen.wait(timeout=10)
                self.stopped_at = time.monotonic()
                return None
        self.stopped_at = time.monotonic()
        return self.popen.returncode

    def freeze(self) -> None:
        """SIGSTOP: the process stops where it is, as in a long GC pause or a paused VM."""
        self._signal(signal.SIGSTOP)
        self._note("frozen with SIGSTOP")

    def thaw(self) -> None:
        self._signal(signal.SIGCONT)
        self._note("thawed with SIGCONT")

    def kill(self) -> None:
        """SIGKILL: a crash, no goodbye (the Lease, if held, is not released)."""
        if self.popen is not None and self.popen.poll() is None:
            self._signal(signal.SIGKILL)
            self.popen.wait(timeout=10)
            self._note("killed with SIGKILL")
        self.stopped_at = time.monotonic()

    def _signal(self, sig: int) -> None:
        try:
            os.killpg(self.popen.pid, sig)
        except (ProcessLookupError, PermissionError):
            pass

    def _note(self, text: str) -> None:
        with open(self.log_path, "ab") as log:
            log.write(f"----- {text}\n".encode())

    # -- looking at it ----------------------------------------------------------

    def http_status(self, path: str, timeout: float = 2.0) -> int:
        try:
            with _NO_PROXY.open(f"http://127.0.0.1:{self.port}{path}", timeout=timeout) as resp:
                return resp.status
        except urllib.error.HTTPError as err:
            return err.code

    def metrics(self) -> dict[str, float]:
        """The /metrics samples: 'name{label="v",...}' -> value (labels sorted)."""
        from prometheus_client.parser import text_string_to_metric_families

        with _NO_PROXY.open(f"http://127.0.0.1:{self.port}/metrics", timeout=5) as resp:
            text = resp.read().decode()
        samples = {}
        for family in text_string_to_metric_families(text):
            for s in family.samples:
                labels = ",".join(f'{k}="{v}"' for k, v in sorted(s.labels.items()))
                samples[f"{s.name}{{{labels}}}" if labels else s.name] = s.value
        return samples

    def log_text(self) -> str:
        try:
            return self.log_path.read_text(errors="replace")
        except OSError:
            return ""

    def log_size(self) -> int:
        try:
            return self.log_path.stat().st_size
        except OSError:
            return 0

    def log_since(self, offset: int) -> str:
        try:
            with open(self.log_path, "rb") as f:
                f.seek(offset)
                return f.read().decode(errors="replace")
        except OSError:
            return ""

    def log_tail(self, lines: int = 150) -> str:
        return "\n".join(self.log_text().splitlines()[-lines:])

    def __repr__(self) -> str:
        return f"<ControllerProcess {self.name} {'running' if self.alive() else 'stopped'} port={self.port}>"


class ControllerDied(AssertionError):
    pass


# --------------------------------------------------------------------------- reports


def note_test_started() -> None:
    _TEST_STARTED["at"] = time.monotonic()


def controller_log_sections() -> list[tuple[str, str]]:
    """The log of every controller that ran during the current test, as report sections."""
    sections = []
    for proc in _ALL:
        took_part = proc.alive() or (proc.stopped_at is not None and proc.stopped_at >= _TEST_STARTED["at"])
        if took_part and proc.starts:
            sections.append((f"controller {proc.name} log (last 200 lines; {proc.log_path})", proc.log_tail(200)))
    return sections


# --------------------------------------------------------------------------- objects


class Kube:
    """The custom objects of one namespace."""

    def __init__(self, api_client: client.ApiClient, namespace: str) -> None:
        self.api_client = api_client
        self.ns = namespace
        self.custom = client.CustomObjectsApi(api_client)
        self.core = client.CoreV1Api(api_client)

    # -- generic ---------------------------------------------------------------

    def create(self, gv: tuple[str, str], plural: str, body: dict) -> dict:
        return self.custom.create_namespaced_custom_object(*gv, self.ns, plural, body)

    def get(self, gv: tuple[str, str], plural: str, name: str) -> dict | None:
        try:
            return self.custom.get_namespaced_custom_object(*gv, self.ns, plural, name)
        except ApiException as err:
            if err.status == 404:
                return None
            raise

    def list(self, gv: tuple[str, str], plural: str) -> list[dict]:
        return self.custom.list_namespaced_custom_object(*gv, self.ns, plural)["items"]

    def patch(self, gv: tuple[str, str], plural: str, name: str, body: dict) -> dict:
        return self.custom.patch_namespaced_custom_object(*gv, self.ns, plural, name, body)

    def delete(self, gv: tuple[str, str], plural: str, name: str) -> None:
        try:
            self.custom.delete_namespaced_custom_object(*gv, self.ns, plural, name)
        except ApiException as err:
            if err.status != 404:
                raise

    def delete_past_finalizers(self, gv: tuple[str, str], plural: str, name: str, timeout: float = 30.0) -> None:
        """Delete ``name`` as a user does past its finalizers, so that none of them runs: its finalizers taken
        off, then the object deleted at that very version. A controller that writes its finalizer back in
        between (it serves a live claim) makes the delete refused as stale, and both are done again."""
        def attempt() -> bool:
            stripped = self.patch(gv, plural, name, {"metadata": {"finalizers": None}})["metadata"]
            options = client.V1DeleteOptions(preconditions=client.V1Preconditions(
                resource_version=stripped["resourceVersion"], uid=stripped["uid"]))
            try:
                self.custom.delete_namespaced_custom_object(*gv, self.ns, plural, name, body=options)
            except ApiException as err:
                if err.status == 409:
                    return False
                raise
            return True

        eventually(attempt, timeout=timeout, what=f"{plural} {self.ns}/{name} deleted with no finalizer")
        self.gone(gv, plural, name, timeout=timeout)

    # -- ours --------------------------------------------------------------------

    def pool(self, name: str, **spec: Any) -> dict:
        spec.setdefault("namePrefix", name)
        return self.create(METAL3, "ippools", {"apiVersion": "/".join(METAL3), "kind": "IPPool",
                                               "metadata": {"name": name}, "spec": spec})

    def claim(self, name: str, pool: str, *, annotations: dict | None = None, labels: dict | None = None,
              pool_namespace: str | None = None) -> dict:
        ref = {"name": pool}
        if pool_namespace:
            ref["namespace"] = pool_namespace
        meta: dict[str, Any] = {"name": name}
        if annotations:
            meta["annotations"] = annotations
        if labels:
            meta["labels"] = labels
        return self.create(METAL3, "ipclaims", {"apiVersion": "/".join(METAL3), "kind": "IPClaim",
                                                "metadata": meta, "spec": {"pool": ref}})

    def capi_claim(self, name: str, pool: str, *, version: str = "v1beta2", annotations: dict | None = None,
                   labels: dict | None = None, group: str = "ipam.metal3.io", kind: str = "IPPool") -> dict:
        meta: dict[str, Any] = {"name": name}
        if annotations:
            meta["annotations"] = annotations
        if labels:
            meta["labels"] = labels
        body = {"apiVersion": f"{CAPI_IPAM_GROUP}/{version}", "kind": "IPAddressClaim", "metadata": meta,
                "spec": {"poolRef": {"apiGroup": group, "kind": kind, "name": pool}}}
        return self.custom.create_namespaced_custom_object(CAPI_IPAM_GROUP, version, self.ns, "ipaddressclaims",
                                                           body)

    def cluster(self, name: str, paused: bool = False) -> dict:
        return self.create(CLUSTER, "clusters", {"apiVersion": "/".join(CLUSTER), "kind": "Cluster",
                                                 "metadata": {"name": name}, "spec": {"paused": paused}})

    def apply_yaml(self, path: os.PathLike | str) -> list[dict]:
        """Create every object of a manifest file in this namespace (whatever namespace it names)."""
        import yaml

        created = []
        for doc in yaml.safe_load_all(Path(path).read_text()):
            if not doc:
                continue
            doc["metadata"]["namespace"] = self.ns
            for ref_field in ("pool",):
                ref = (doc.get("spec") or {}).get(ref_field)
                if isinstance(ref, dict) and ref.get("namespace"):
                    ref["namespace"] = self.ns
            group, version = doc["apiVersion"].split("/")
            plural = doc["kind"].lower() + ("es" if doc["kind"].endswith("ss") else "s")
            created.append(self.custom.create_namespaced_custom_object(group, version, self.ns, plural, doc))
        return created

    def ippool(self, name: str) -> dict | None:
        return self.get(METAL3, "ippools", name)

    def ipclaim(self, name: str) -> dict | None:
        return self.get(METAL3, "ipclaims", name)

    def ipaddress(self, name: str) -> dict | None:
        return self.get(METAL3, "ipaddresses", name)

    def locks(self, lock_namespace: str = "default") -> list[dict]:
        """The locks of this namespace stored as Leases (in ``lock_namespace``), as the IPAddresses they stand for."""
        return [x for x in lease_locks(self.api_client, lock_namespace) if x["metadata"]["namespace"] == self.ns]

    def capi_ipclaim(self, name: str) -> dict | None:
        return self.get(CAPI, "ipaddressclaims", name)

    def capi_ipaddress(self, name: str) -> dict | None:
        return self.get(CAPI, "ipaddresses", name)

    def addresses(self) -> list[dict]:
        return self.list(METAL3, "ipaddresses")

    def events(self) -> list[client.CoreV1Event]:
        return self.core.list_namespaced_event(self.ns).items

    # -- waiting ----------------------------------------------------------------

    def bound(self, claim: str, timeout: float = 30.0) -> dict:
        """Wait for an IPClaim to be bound; returns its IPAddress."""
        def check():
            c = self.ipclaim(claim)
            ref = ((c or {}).get("status") or {}).get("address")
            return self.ipaddress(ref["name"]) if ref else None

        return eventually(check, timeout=timeout, what=f"IPClaim {self.ns}/{claim} to be bound")

    def capi_bound(self, claim: str, timeout: float = 30.0) -> dict:
        """Wait for an IPAddressClaim to be Ready; returns its Cluster API IPAddress."""
        def check():
            c = self.capi_ipclaim(claim)
            status = (c or {}).get("status") or {}
            ready = condition(c, "Ready") if c else None
            ref = status.get("addressRef") or {}
            if ready and ready["status"] == "True" and ref.get("name"):
                return self.capi_ipaddress(ref["name"])
            return None

        return eventually(check, timeout=timeout, what=f"IPAddressClaim {self.ns}/{claim} to be Ready")

    def claim_error(self, claim: str, timeout: float = 30.0) -> str:
        def check():
            c = self.ipclaim(claim)
            return ((c or {}).get("status") or {}).get("errorMessage")

        return eventually(check, timeout=timeout, what=f"IPClaim {self.ns}/{claim} to get an errorMessage")

    def gone(self, gv: tuple[str, str], plural: str, name: str, timeout: float = 30.0, *,
             uid: str | None = None) -> None:
        """Wait until the object ``name`` is gone; with ``uid``, until that one is (the name may be taken anew)."""
        def check() -> bool:
            obj = self.get(gv, plural, name)
            return obj is None or (uid is not None and obj["metadata"]["uid"] != uid)

        eventually(check, timeout=timeout,
                   what=f"{plural} {self.ns}/{name}{f' (uid {uid})' if uid else ''} to be gone")

    def warning_event(self, object_name: str, reason: str, timeout: float = 30.0) -> client.CoreV1Event:
        def check():
            for e in self.events():
                if e.involved_object.name == object_name and e.type == "Warning" and e.reason == reason:
                    return e
            return None

        return eventually(check, timeout=timeout, what=f"a Warning Event {reason} on {object_name}")


def condition(obj: dict | None, type_: str) -> dict | None:
    for c in ((obj or {}).get("status") or {}).get("conditions") or []:
        if c.get("type") == type_:
            return c
    return None


def ip_key(text: str):
    return ipaddress.ip_address(text)


# --------------------------------------------------------------------------- invariants


@dataclass
class Findings:
    """What :func:`check_invariants` found: ``broken`` must never happen, ``pending`` may before convergence."""

    broken: list[str] = field(default_factory=list)
    pending: list[str] = field(default_factory=list)
    counts: dict[str, int] = field(default_factory=dict)

    def __bool__(self) -> bool:
        return bool(self.broken or self.pending)

    def __str__(self) -> str:
        lines = [f"never allowed: {p}" for p in self.broken] + [f"not converged: {p}" for p in self.pending]
        return "\n".join(lines[:60]) + (f"\n... and {len(lines) - 60} more" if len(lines) > 60 else "")


def _alive(obj: dict) -> bool:
    return not obj["metadata"].get("deletionTimestamp")


def _claim_key_of_address(address: dict) -> tuple[str, str, str] | None:
    claim = (address.get("spec") or {}).get("claim") or {}
    if not claim.get("name"):
        return None
    kind = "IPAddressClaim" if claim.get("kind") == "IPAddressClaim" else "IPClaim"
    return (kind, claim.get("namespace") or address["metadata"]["namespace"], claim["name"])


def check_invariants(kube: Kube, *, allow_errors: bool = True, expect_errors: Iterable[str] = ()) -> Findings:
    """SPEC §10 over every object of the namespace.

    Never allowed (at any moment): an IP held by two live addresses, or two live
    claims; a claim whose status names an address that was made for another
    claim; a Cluster API IPAddress whose address differs from the lock it mirrors.

    Once converged: every live claim has exactly one address (status pointing at
    it, the address's spec.claim naming the claim) or an error and no address;
    no address without a live claim; every live pool's status.indexes and
    counts match its addresses. ``allow_errors=False`` makes any claim error a
    finding except for the claims named in ``expect_errors``.
    """
    f = Findings()
    pools = {p["metadata"]["name"]: p for p in kube.list(METAL3, "ippools")}
    ipclaims = kube.list(METAL3, "ipclaims")
    capi_claims = kube.list(CAPI, "ipaddressclaims")
    addresses = kube.list(METAL3, "ipaddresses")
    capi_addresses = kube.list(CAPI, "ipaddresses")
    expect_errors = set(expect_errors)
    f.counts = {"pools": len(pools), "ipclaims": len(ipclaims), "capi_claims": len(capi_claims),
                "addresses": len(addresses), "capi_addresses": len(capi_addresses)}

    claims: dict[tuple[str, str, str], dict] = {}
    for c in ipclaims:
        claims[("IPClaim", kube.ns, c["metadata"]["name"])] = c
    for c in capi_claims:
        ref = c["spec"].get("poolRef") or {}
        if ref.get("apiGroup") == "ipam.metal3.io" and ref.get("kind") == "IPPool":
            claims[("IPAddressClaim", kube.ns, c["metadata"]["name"])] = c
    live_claims = {k: c for k, c in claims.items() if _alive(c)}

    # -- never allowed -------------------------------------------------------
    by_ip: dict[Any, list[dict]] = defaultdict(list)
    for a in addresses:
        if _alive(a) or FIN_ADDRESS in (a["metadata"].get("finalizers") or []):
            by_ip[ip_key(a["spec"]["address"])].append(a)
    for ip, holders in by_ip.items():
        owners = {_claim_key_of_address(a) for a in holders}
        live_owners = {k for k in owners if k in live_claims}
        if len(live_owners) > 1:
            f.broken.append(f"{ip} is held for {len(live_owners)} live claims: "
                            f"{sorted(live_owners)} (addresses {[a['metadata']['name'] for a in holders]})")
    capi_by_ip: dict[Any, list[str]] = defaultdict(list)
    for a in capi_addresses:
        if _alive(a):
            capi_by_ip[ip_key(a["spec"]["address"])].append(a["spec"]["claimRef"]["name"])
    for ip, names in capi_by_ip.items():
        if len(names) > 1:
            f.broken.append(f"{ip} is in {len(names)} live Cluster API IPAddresses: {sorted(names)}")

    address_by_name = {a["metadata"]["name"]: a for a in addresses}
    addresses_of: dict[tuple[str, str, str], list[dict]] = defaultdict(list)
    for a in addresses:
        key = _claim_key_of_address(a)
        if key:
            addresses_of[key].append(a)
    capi_address_by_name = {a["metadata"]["name"]: a for a in capi_addresses}

    for key, c in claims.items():
        kind, _, name = key
        status = c.get("status") or {}
        if kind == "IPClaim":
            ref = status.get("address")
            if ref and ref.get("name") in address_by_name:
                a = address_by_name[ref["name"]]
                if _claim_key_of_address(a) != key:
                    f.broken.append(f"IPClaim {name} points at {ref['name']}, made for {_claim_key_of_address(a)}")
        else:
            mirror = capi_address_by_name.get(name)
            held = [a for a in addresses_of.get(key, []) if _alive(a)]
            if mirror is not None and held and _alive(mirror):
                if ip_key(mirror["spec"]["address"]) not in {ip_key(a["spec"]["address"]) for a in held}:
                    f.broken.append(f"IPAddressClaim {name}: Cluster API IPAddress says {mirror['spec']['address']},"
                                    f" the lock says {[a['spec']['address'] for a in held]}")

    # -- once converged --------------------------------------------------------
    for key, c in live_claims.items():
        kind, _, name = key
        status = c.get("status") or {}
        mine = addresses_of.get(key, [])
        ready = condition(c, "Ready")
        if kind == "IPClaim":
            error = status.get("errorMessage")
            ref = status.get("address")
            if len(mine) > 1:
                f.pending.append(f"IPClaim {name} has {len(mine)} addresses: {[a['metadata']['name'] for a in mine]}")
            elif len(mine) == 1:
                if not ref or ref.get("name") != mine[0]["metadata"]["name"]:
                    f.pending.append(f"IPClaim {name}: status.address {ref} but its address is "
                                     f"{mine[0]['metadata']['name']}")
                if error:
                    f.pending.append(f"IPClaim {name} has an address and an errorMessage {error!r}")
                if ref and (ref.get("namespace") or kube.ns) != mine[0]["metadata"]["namespace"]:
                    f.pending.append(f"IPClaim {name}: status.address namespace {ref}")
                if FIN_CLAIM not in (c["metadata"].get("finalizers") or []):
                    f.pending.append(f"IPClaim {name} lacks its finalizer")
                if not ready or ready["status"] != "True":
                    f.pending.append(f"IPClaim {name} is bound but Ready is {ready}")
            else:
                if not error:
                    f.pending.append(f"IPClaim {name} has neither an address nor an error (status {status})")
                elif (not allow_errors) and name not in expect_errors:
                    f.pending.append(f"IPClaim {name} has an error: {error}")
                if ref:
                    f.pending.append(f"IPClaim {name} points at {ref} which does not exist")
        else:
            mirror = capi_address_by_name.get(name)
            ref = status.get("addressRef") or {}
            if len(mine) > 1:
                f.pending.append(f"IPAddressClaim {name} has {len(mine)} addresses")
            elif len(mine) == 1:
                if mirror is None:
                    f.pending.append(f"IPAddressClaim {name} has no Cluster API IPAddress")
                if ref.get("name") != name:
                    f.pending.append(f"IPAddressClaim {name}: status.addressRef {ref}")
                if not ready or ready["status"] != "True":
                    f.pending.append(f"IPAddressClaim {name} is bound but Ready is {ready}")
                if FIN_CAPI_CLAIM not in (c["metadata"].get("finalizers") or []):
                    f.pending.append(f"IPAddressClaim {name} lacks its finalizer")
            else:
                if not ready or ready["status"] != "False" or not ready.get("reason"):
                    f.pending.append(f"IPAddressClaim {name} has neither an address nor Ready=False (Ready {ready})")
                elif (not allow_errors) and name not in expect_errors:
                    f.pending.append(f"IPAddressClaim {name} has an error: {ready['reason']} {ready.get('message')}")
                if mirror is not None:
                    f.pending.append(f"IPAddressClaim {name} has a Cluster API IPAddress but no lock")

    for a in addresses:
        key = _claim_key_of_address(a)
        if key not in live_claims:
            f.pending.append(f"IPAddress {a['metadata']['name']} outlives its claim {key}")
        elif not _alive(a):
            f.pending.append(f"IPAddress {a['metadata']['name']} is being deleted while its claim lives")
        pool_ref = a["spec"].get("pool") or {}
        if pool_ref.get("name") not in pools:
            f.pending.append(f"IPAddress {a['metadata']['name']} refers to a missing pool {pool_ref}")
    for a in capi_addresses:
        key = ("IPAddressClaim", kube.ns, a["spec"]["claimRef"]["name"])
        if key not in live_claims:
            f.pending.append(f"Cluster API IPAddress {a['metadata']['name']} outlives its claim")

    for name, p in pools.items():
        if not _alive(p):
            continue
        mine = [a for a in addresses if (a["spec"].get("pool") or {}).get("name") == name]
        expected = {}
        for a in mine:
            kind, _, claim_name = _claim_key_of_address(a)
            expected[claim_name if kind == "IPClaim" else f"{kind}/{claim_name}"] = a["spec"]["address"]
        status = p.get("status") or {}
        indexes = status.get("indexes") or {}
        if {k: ip_key(v) for k, v in indexes.items()} != {k: ip_key(v) for k, v in expected.items()}:
            f.pending.append(f"IPPool {name} status.indexes {indexes} != addresses {expected}")
        if status.get("allocated") != str(len(mine)):
            f.pending.append(f"IPPool {name} status.allocated {status.get('allocated')!r} != {len(mine)}")
        for count in ("capacity", "allocated", "free"):
            if not isinstance(status.get(count), str) or not status[count].isdigit():
                f.pending.append(f"IPPool {name} status.{count} is {status.get(count)!r}, not a count string")
        if FIN_POOL not in (p["metadata"].get("finalizers") or []):
            f.pending.append(f"IPPool {name} lacks its finalizer")
    return f


def assert_invariants(kube: Kube, timeout: float = 30.0, **kwargs: Any) -> Findings:
    """Fail at once on what must never happen; wait up to ``timeout`` for the rest to converge."""
    return until_converged(lambda: check_invariants(kube, **kwargs), timeout, kube.ns)


def until_converged(check: Callable[[], Findings], timeout: float, where: str) -> Findings:
    """``check()`` again and again: fail at once on anything broken, return once nothing is pending, fail
    with what still is after ``timeout``."""
    deadline = time.monotonic() + timeout
    while True:
        last = check()
        assert not last.broken, f"invariants broken in {where}:\n{last}"
        if not last.pending:
            return last
        if time.monotonic() >= deadline:
            raise AssertionError(f"{where} did not converge within {timeout:g}s ({last.counts}):\n{last}")
        time.sleep(0.25)


class Sentinel:
    """Checks the never-allowed invariants of a namespace over and over, in a thread of its own.

    ``check(api_client) -> Findings`` replaces :func:`check_invariants` of the namespace (other kinds, other
    namespaces)."""

    def __init__(self, control_plane, namespace: str, interval: float = 0.3,
                 check: Callable[[client.ApiClient], "Findings"] | None = None) -> None:
        self.control_plane = control_plane
        self.namespace = namespace
        self.interval = interval
        self.check = check or (lambda api: check_invariants(Kube(api, namespace)))
        self.broken: list[str] = []
        self.rounds = 0
        self.errors: list[str] = []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="invariant sentinel", daemon=True)

    def __enter__(self) -> "Sentinel":
        self._thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self._stop.set()
        self._thread.join(timeout=30)

    def _run(self) -> None:
        with self.control_plane.api_client() as api:
            while not self._stop.is_set():
                try:
                    found = self.check(api)
                except Exception as err:  # a list may fail while the API server is busy; keep looking
                    self.errors.append(repr(err))
                else:
                    self.rounds += 1
                    self.broken.extend(found.broken)
                self._stop.wait(self.interval)

    def assert_clean(self) -> None:
        assert self.rounds > 0, f"the sentinel never completed a round: {self.errors[-3:]}"
        assert not self.broken, "invariants broken while running:\n" + "\n".join(self.broken[:40])


def resource_versions(kube: Kube) -> dict[tuple[str, str], str]:
    out = {}
    for gv, plural in ((METAL3, "ippools"), (METAL3, "ipclaims"), (METAL3, "ipaddresses"),
                       (CAPI, "ipaddressclaims"), (CAPI, "ipaddresses")):
        for obj in kube.list(gv, plural):
            out[(f"{plural}.{gv[0]}", obj["metadata"]["name"])] = obj["metadata"]["resourceVersion"]
    return out


def assert_quiet(kube: Kube, controllers: Iterable[ControllerProcess], seconds: float = 2.0) -> None:
    """Over ``seconds`` after convergence: no object of the namespace changes, and no
    controller plans or is refused anything for it (a hot loop would show in both)."""
    controllers = list(controllers)
    before = resource_versions(kube)
    offsets = [c.log_size() for c in controllers]
    events_before = len(kube.events())
    time.sleep(seconds)  # a bounded observation window, not a synchronisation
    after = resource_versions(kube)
    changed = {k: (before.get(k), v) for k, v in after.items() if before.get(k) != v}
    changed.update({k: (v, None) for k, v in before.items() if k not in after})
    assert not changed, f"objects of {kube.ns} kept changing after convergence: {changed}"
    for c, offset in zip(controllers, offsets):
        lines = [line for line in c.log_since(offset).splitlines() if f" {kube.ns}/" in line]
        assert not lines, f"{c.name} kept working on {kube.ns} after convergence:\n" + "\n".join(lines[:30])
    assert len(kube.events()) == events_before, "Events kept coming after convergence"


def holds_for(check: Callable[[], Any], seconds: float, what: str, interval: float = 0.2) -> None:
    """``check()`` stays truthy for the whole window (for things that must *not* happen)."""
    deadline = time.monotonic() + seconds
    while True:
        value = check()
        assert value, f"{what} stopped holding: {value!r}"
        if time.monotonic() >= deadline:
            return
        time.sleep(interval)


def strip_and_delete(kube: Kube, gv: tuple[str, str], plural: str, name: str) -> None:
    """Delete the object ``name`` as a user does by hand, finalizers stripped, and wait until it is gone.

    Gone is that object, by uid: the controller makes a new one of the same name for the claim that
    holds the IP as soon as it sees the old one go (often before the next read), which is what the test
    checks afterwards. Waiting for the name itself to be free waited on that new object for ever.
    """
    uid = kube.get(gv, plural, name)["metadata"]["uid"]
    kube.delete(gv, plural, name)
    kube.patch(gv, plural, name, {"metadata": {"uid": uid, "finalizers": None}})
    kube.gone(gv, plural, name, uid=uid)


def own_ip(kube: Kube, kind: str, name: str) -> str | None:
    if kind == "IPClaim":
        ref = ((kube.ipclaim(name) or {}).get("status") or {}).get("address")
        address = kube.ipaddress(ref["name"]) if ref else None
        return address["spec"]["address"] if address else None
    claim = kube.capi_ipclaim(name) or {}
    ready = condition(claim, "Ready")
    ref = (claim.get("status") or {}).get("addressRef") or {}
    mirror = kube.capi_ipaddress(ref["name"]) if ref.get("name") and ready and ready["status"] == "True" else None
    locks = [a for a in [*kube.addresses(), *kube.locks()] if a["spec"]["claim"]["name"] == name
             and GUARD_LABEL not in (a["metadata"].get("labels") or {})
             and a["spec"]["claim"].get("kind") == "IPAddressClaim" and not a["metadata"].get("deletionTimestamp")]
    if mirror is None or len(locks) != 1 or locks[0]["spec"]["address"] != mirror["spec"]["address"]:
        return None
    return mirror["spec"]["address"]


def start_control_plane(binaries, **kwargs) -> cp_mod.ControlPlane:
    """A started control plane (every CRD of the checkout unless ``crd_paths`` says otherwise), or a failed test."""
    kwargs.setdefault("crd_paths", cp_mod.default_crd_paths(REPO))
    cp = cp_mod.ControlPlane(binaries, **kwargs)
    try:
        return cp.start()
    except cp_mod.ControlPlaneError as exc:
        reason = str(exc)
    pytest.fail(f"control plane failed to start:\n{reason}", pytrace=False)


# -- controllers running as users with limited rights ---------------------------------------------

# What the controller must read to start at all: every kind it watches, and what kopf looks at.
# (The groups of the kinds of pool come from the registry: every kind served, whatever its group.)
READ_RULES = [{"apiGroups": sorted({"ipam.metal3.io", "ipam.cluster.x-k8s.io", "cluster.x-k8s.io"} | {
                   kind.group for kind in poolkind.REGISTRY.values()}),
               "resources": ["*"], "verbs": ["get", "list", "watch"]},
              {"apiGroups": ["apiextensions.k8s.io"], "resources": ["customresourcedefinitions"],
               "verbs": ["get", "list", "watch"]},
              {"apiGroups": [""], "resources": ["namespaces"], "verbs": ["get", "list", "watch"]},
              # The lock store of the in-cluster kinds: Leases (in the controller's namespace, as its Role grants).
              {"apiGroups": ["coordination.k8s.io"], "resources": ["leases"], "verbs": ["get", "list", "watch"]}]


def rules_with_ipaddress_verbs(verbs: list[str]) -> list[dict]:
    """Every right the controller uses, but only ``verbs`` on Metal3 IPAddresses."""
    return [{"apiGroups": ["ipam.metal3.io"], "resources": ["ippools", "ippools/status", "ipclaims",
                                                            "ipclaims/status"], "verbs": ["*"]},
            {"apiGroups": ["ipam.metal3.io"], "resources": ["ipaddresses"], "verbs": verbs},
            # Cluster API's groups and every other group of a kind of pool served (in-cluster, NetBox, OpenStack).
            {"apiGroups": sorted({"ipam.cluster.x-k8s.io", "cluster.x-k8s.io"} | {
                kind.group for kind in poolkind.REGISTRY.values() if kind.group != "ipam.metal3.io"}),
             "resources": ["*"], "verbs": ["*"]},
            *READ_RULES[1:-1],
            {"apiGroups": ["coordination.k8s.io"], "resources": ["leases"], "verbs": ["*"]},
            {"apiGroups": [""], "resources": ["events"], "verbs": ["create"]}]


@contextmanager
def controller_as_user(control_plane, api_client, namespace: str, log_dir: Path, user: str,
                       rules: list[dict], trust: str = "file") -> Iterator[ControllerProcess]:
    """A controller (not started yet) of ``namespace`` that authenticates by client certificate as ``user``,
    who has ``rules`` cluster-wide; stopped, and its rights taken back, at the end."""
    rbac = client.RbacAuthorizationV1Api(api_client)
    rbac.create_cluster_role({"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRole",
                              "metadata": {"name": user}, "rules": rules})
    rbac.create_cluster_role_binding({
        "apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRoleBinding", "metadata": {"name": user},
        "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": user},
        "subjects": [{"kind": "User", "name": user, "apiGroup": "rbac.authorization.k8s.io"}]})
    try:
        cert, key = control_plane.client_certificate(user)
        kubeconfig = control_plane.write_kubeconfig(f"kubeconfig-{user}", user, {
            "client-certificate": str(cert), "client-key": str(key)}, trust=trust)
        proc = ControllerProcess(kubeconfig, ["-n", namespace, "--no-leader-elect"], name=user, log_dir=log_dir)
        try:
            yield proc
        finally:
            proc.stop()
    finally:
        rbac.delete_cluster_role_binding(user)
        rbac.delete_cluster_role(user)


def grant_writes(api_client, namespace: str, subject: dict) -> None:
    """Every right on the Metal3 kinds, and Events, in ``namespace`` for ``subject`` (a RoleBinding subject)."""
    rbac = client.RbacAuthorizationV1Api(api_client)
    name = f"writer-{uuid.uuid4().hex[:6]}"
    rbac.create_namespaced_role(namespace, {
        "apiVersion": "rbac.authorization.k8s.io/v1", "kind": "Role", "metadata": {"name": name},
        "rules": [{"apiGroups": ["ipam.metal3.io"], "resources": ["*"], "verbs": ["*"]},
                  {"apiGroups": [""], "resources": ["events"], "verbs": ["create"]}]})
    rbac.create_namespaced_role_binding(namespace, {
        "apiVersion": "rbac.authorization.k8s.io/v1", "kind": "RoleBinding", "metadata": {"name": name},
        "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": name},
        "subjects": [subject]})
