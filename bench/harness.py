"""What the end-to-end benchmarks share: one local control plane, the controller as a
black box (``metal3-ipam run`` in a subprocess), a watch that times when claims are
bound, the API server's own write counters, and a plain client that makes the same
writes as the controller (the floor the controller is compared with).

Only loopback traffic: the control plane (etcd + kube-apiserver) and the controller's
health endpoint listen on 127.0.0.1.

Environment knobs, for looking into a run:
- ``BENCH_CONTROLLER_LOG=PATH``: keep the controller's log there (and log every write);
- ``BENCH_PROFILE=PATH``: run the controller under cProfile, profile written there;
- ``BENCH_CONTROLLER_PARALLEL=N``: the controller's ``--parallel-writes`` instead of the
  benchmark's parallelism.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import re
import socket
import statistics
import subprocess
import sys
import tempfile
import threading
import time
import urllib.request
from collections import Counter
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable, Iterable, Iterator

from kubernetes import client, watch
from kubernetes.client.rest import ApiException

from metal3_ipam import poolkinds  # noqa: F401  (registers the kinds of pool)
from metal3_ipam.controller.api import request
from metal3_ipam.core import kinds
from metal3_ipam.core.naming import address_name
from metal3_ipam.testing import go_incluster as gi
from metal3_ipam.testing.controlplane import ControlPlane, default_crd_paths, ensure_binaries
from metal3_ipam.testing.processes import stop_group


ROOT = Path(__file__).resolve().parent.parent


GROUP, VERSION = kinds.METAL3_GROUP, "v1alpha1"
API_VERSION = f"{GROUP}/{VERSION}"
WRITE_VERBS = ("POST", "PUT", "PATCH", "DELETE", "APPLY")
MERGE_PATCH = {"Content-Type": "application/merge-patch+json", "Accept": "application/json"}
# A write as the API server counts it: (verb, resource, subresource).
WriteKey = tuple[str, str, str]
ClaimKey = tuple[str, str]  # (namespace, name)

# Loopback only: never through a proxy from the environment.
_LOCAL = urllib.request.build_opener(urllib.request.ProxyHandler({}))


# --------------------------------------------------------------------------- arguments


def positive(text: str) -> int:
    """An argparse type: a whole number >= 1, with a clear message otherwise."""
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a whole number, not {text!r}") from None
    if value < 1:
        raise argparse.ArgumentTypeError(f"must be at least 1, not {value}")
    return value


def bounded(low: int, high: int) -> Callable[[str], int]:
    def parse(text: str) -> int:
        value = positive(text)
        if not low <= value <= high:
            raise argparse.ArgumentTypeError(f"must be between {low} and {high}, not {value}")
        return value
    parse.__name__ = f"number {low}..{high}"
    return parse


def parser(doc: str) -> argparse.ArgumentParser:
    """An argument parser with the module docstring's first line as description and
    the options every benchmark has."""
    p = argparse.ArgumentParser(description=doc.splitlines()[0])
    p.add_argument("--parallel", type=bounded(1, 256), default=16,
                   help="parallel requests of the benchmark's client, and the controller's --parallel-writes (default 16)")
    p.add_argument("--timeout", type=positive, default=3600, metavar="SECONDS",
                   help="give up waiting for claims to be bound after this long (default 3600)")
    return p


def claims_argument(p: argparse.ArgumentParser, default: int, most: int, what: str) -> None:
    """``--claims``: ``$BENCH_CLAIMS`` when not given, else ``default``; at most ``most`` (``what`` says why)."""
    p.add_argument("--claims", type=bounded(1, most), default=int(os.environ.get("BENCH_CLAIMS", default)),
                   help=f"claims of the one pool (default $BENCH_CLAIMS or {default}; at most {most:,}: {what})")


# --------------------------------------------------------------------------- objects


def path(ns: str, plural: str, name: str | None = None, sub: str | None = None) -> str:
    p = f"/apis/{GROUP}/{VERSION}/namespaces/{ns}/{plural}"
    return p + (f"/{name}" if name else "") + (f"/{sub}" if sub else "")


def pool_obj(ns: str, name: str, subnet: str, prefix: int, gateway: str | None = None) -> dict:
    spec: dict = {"namePrefix": name, "pools": [{"subnet": subnet}], "prefix": prefix}
    if gateway:
        spec["gateway"] = gateway
    return {"apiVersion": API_VERSION, "kind": "IPPool", "metadata": {"name": name, "namespace": ns}, "spec": spec}


def claim_obj(ns: str, name: str, pool: str) -> dict:
    return {"apiVersion": API_VERSION, "kind": "IPClaim", "metadata": {"name": name, "namespace": ns},
            "spec": {"pool": {"name": pool}}}


def incluster_pool_path(kind: str, ns: str | None, name: str | None = None, sub: str | None = None) -> str:
    """The path of an in-cluster provider's pool (``gi.IN_CLUSTER_IP_POOL`` in ``ns``, a global one with None)."""
    where = f"namespaces/{ns}/" if ns else ""
    return (f"/apis/{gi.GROUP}/{gi.POOL_VERSION}/{where}{gi.PLURALS[kind]}" + (f"/{name}" if name else "")
            + (f"/{sub}" if sub else ""))


def create_incluster_pool(api: client.ApiClient, name: str, ns: str | None, addresses: list[str], prefix: int,
                          gateway: str | None = None) -> dict:
    """An InClusterIPPool in ``ns``, or a GlobalInClusterIPPool when ``ns`` is None, as created."""
    body = gi.ip_pool(name, namespace=ns, addresses=addresses, prefix=prefix, gateway=gateway)
    return request(api, "POST", incluster_pool_path(body["kind"], ns), body)


def create_namespace(api: client.ApiClient, ns: str) -> None:
    request(api, "POST", "/api/v1/namespaces", {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": ns}})


@dataclass(frozen=True)
class ClaimResource:
    """A kind of claim the benchmarks create and watch: where it lives and when it counts as bound."""
    group: str
    version: str
    plural: str
    bound: Callable[[dict], bool]  # of the claim's status

    def path(self, ns: str, name: str | None = None) -> str:
        return f"/apis/{self.group}/{self.version}/namespaces/{ns}/{self.plural}" + (f"/{name}" if name else "")


#: Metal3 IPClaims: bound once ``status.address`` names their IPAddress.
IPCLAIMS = ClaimResource(GROUP, VERSION, "ipclaims", lambda status: bool(status.get("address")))
#: Cluster API IPAddressClaims: bound once ``status.addressRef`` names their IPAddress.
CAPI_CLAIMS = ClaimResource(gi.GROUP, gi.CAPI_VERSION, "ipaddressclaims",
                            lambda status: bool((status.get("addressRef") or {}).get("name")))


@dataclass
class Claims:
    """Claims the benchmark creates, with when each creation was sent and the server's answer."""
    resource: ClaimResource = IPCLAIMS
    sent: dict[ClaimKey, float] = field(default_factory=dict)
    created: dict[ClaimKey, dict] = field(default_factory=dict)

    def create(self, api: client.ApiClient, objs: list[dict], parallel: int) -> None:
        def one(obj: dict) -> None:
            key = (obj["metadata"]["namespace"], obj["metadata"]["name"])
            self.sent[key] = time.monotonic()
            self.created[key] = request(api, "POST", self.resource.path(key[0]), obj)

        run_parallel(one, objs, parallel)

    def delete(self, api: client.ApiClient, parallel: int) -> None:
        """Delete every claim created (the user's deletion; releasing is the controller's)."""
        run_parallel(lambda key: request(api, "DELETE", self.resource.path(*key)), list(self.created), parallel)


def wait_gone(api: client.ApiClient, p: str, timeout: float) -> float:
    """Poll until GET ``p`` answers 404; the seconds it took."""
    started = time.monotonic()
    while True:
        try:
            request(api, "GET", p)
        except ApiException as exc:
            if exc.status == 404:
                return time.monotonic() - started
            raise
        if time.monotonic() - started > timeout:
            raise SystemExit(f"{p} still there after {timeout:.0f} s")
        time.sleep(0.05)


def run_parallel(work: Callable, items: Iterable, parallel: int) -> None:
    with ThreadPoolExecutor(parallel) as pool:
        for _ in pool.map(work, items):
            pass


# --------------------------------------------------------------------------- control plane


@contextlib.contextmanager
def control_plane(parallel: int) -> Iterator[tuple[ControlPlane, client.ApiClient, Path]]:
    """A started control plane, an admin client with room for ``parallel`` requests twice (a floor's user
    and its writes), a scratch dir."""
    ensure_binaries()
    with ControlPlane(crd_paths=default_crd_paths(), controller_manager=False) as plane, \
            tempfile.TemporaryDirectory() as tmp:
        api = client.ApiClient(plane.configuration())
        api.configuration.connection_pool_maxsize = 2 * parallel + 8
        yield plane, api, Path(tmp)


def raw_get(api: client.ApiClient, p: str, accept: str = "application/json") -> bytes:
    """The body of a GET as the API server sends it."""
    method, url, headers, _, _ = api.param_serialize("GET", p, header_params={"Accept": accept},
                                                     auth_settings=["BearerToken"])
    response = api.call_api(method, url, header_params=headers)
    response.read()
    return response.data


_LABEL = re.compile(r'(\w+)="([^"]*)"')


def write_counts(api: client.ApiClient, grouped: bool = False) -> Counter[WriteKey]:
    """Every mutating request the API server has answered so far, by (verb, resource, subresource);
    ``grouped``: the resource as ``plural.group`` (two groups' ``ipaddresses`` told apart)."""
    counts: Counter[WriteKey] = Counter()
    for line in raw_get(api, "/metrics", "text/plain").decode().splitlines():
        if not line.startswith("apiserver_request_total{"):
            continue
        labels = dict(_LABEL.findall(line[: line.rindex("}")]))
        # The API server renews its own identity lease on its own; the controller runs
        # without leader election here, so leases are never its writes.
        if labels.get("verb") in WRITE_VERBS and labels.get("resource") != "leases":
            resource = labels.get("resource", "")
            if grouped and labels.get("group"):
                resource = f"{resource}.{labels['group']}"
            counts[(labels["verb"], resource, labels.get("subresource", ""))] += int(float(line.rsplit(" ", 1)[1]))
    return counts


def describe_writes(counts: Counter[WriteKey], per: int) -> str:
    """``PATCH ipclaims/status 1.00, POST ipaddresses 1.00, ...`` per claim."""
    parts = [f"{verb} {res}{'/' + sub if sub else ''} " + (f"{n / per:.2f}" if n * 100 >= per else f"{n} in all")
             for (verb, res, sub), n in sorted(counts.items(), key=lambda kv: -kv[1]) if n]
    return ", ".join(parts) or "none"


# --------------------------------------------------------------------------- the controller


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def cpu_seconds(pid: int) -> float:
    """utime + stime of a process so far (all its threads), from /proc."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def server_cpu_seconds(plane: ControlPlane) -> float:
    """CPU seconds of the control plane's processes so far (kube-apiserver and etcd): what a side's requests,
    and the watches that follow them, cost the server."""
    return sum(cpu_seconds(pid) for pid in plane.pids().values())


class Controller:
    """``metal3-ipam run`` for some namespaces, as a subprocess: started, waited ready, measured, stopped."""

    def __init__(self, plane: ControlPlane, namespaces: list[str], log: Path, parallel: int, tree: Path = ROOT):
        self.plane, self.namespaces, self.parallel = plane, namespaces, parallel
        self.tree = tree  # the source tree run (another checkout, to compare)
        self.log = Path(os.environ.get("BENCH_CONTROLLER_LOG") or log)
        self.proc: subprocess.Popen | None = None
        self.port = 0

    def start(self, timeout: float = 600) -> float:
        """Start the controller; the seconds until its /readyz answers 200."""
        self.port = free_port()
        profile = ["-m", "cProfile", "-o", os.environ["BENCH_PROFILE"]] if os.environ.get("BENCH_PROFILE") else []
        scope = [arg for ns in self.namespaces for arg in ("-n", ns)]
        writes = os.environ.get("BENCH_CONTROLLER_PARALLEL", str(self.parallel))
        verbose = ["-v"] if os.environ.get("BENCH_CONTROLLER_LOG") else []
        started = time.monotonic()
        with open(self.log, "a") as out:
            self.proc = subprocess.Popen(
                [sys.executable, *profile, "-m", "metal3_ipam.cli", "run", "--kubeconfig", str(self.plane.kubeconfig),
                 *scope, "--no-leader-elect", "--health-address", f"127.0.0.1:{self.port}",
                 "--parallel-writes", writes, *verbose],
                stdout=out, stderr=subprocess.STDOUT, start_new_session=True, cwd=self.tree,
                env={**os.environ, "PYTHONPATH": str(self.tree)})
        deadline = started + timeout
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise SystemExit(f"the controller exited before it was ready; see {self.log}")
            try:
                with _LOCAL.open(f"http://127.0.0.1:{self.port}/readyz", timeout=2) as r:
                    if r.status == 200:
                        return time.monotonic() - started
            except OSError:
                pass
            time.sleep(0.05)
        raise SystemExit(f"the controller was not ready within {timeout:.0f} s; see {self.log}")

    def stop(self) -> float | None:
        """SIGTERM; the seconds until the process ended (None: it was not running)."""
        if self.proc is None:
            return None
        asked = time.monotonic()
        stop_group(self.proc)
        self.proc = None
        return time.monotonic() - asked

    @contextlib.contextmanager
    def running(self) -> Iterator["Controller"]:
        """Started and ready inside the block, stopped after it."""
        self.start()
        try:
            yield self
        finally:
            self.stop()

    @property
    def pid(self) -> int:
        assert self.proc is not None, "the controller is not running"
        return self.proc.pid

    def cpu_seconds(self) -> float:
        """utime + stime of the controller process so far (all its threads), from /proc."""
        return cpu_seconds(self.pid)

    def _status_kib(self, key: str) -> int:
        for line in Path(f"/proc/{self.pid}/status").read_text().splitlines():
            if line.startswith(key + ":"):
                return int(line.split()[1])
        raise SystemExit(f"/proc/{self.pid}/status has no {key}")

    def rss_kib(self) -> int:
        return self._status_kib("VmRSS")

    def peak_rss_kib(self) -> int:
        return self._status_kib("VmHWM")

    def metric(self, name: str) -> float:
        with _LOCAL.open(f"http://127.0.0.1:{self.port}/metrics", timeout=5) as r:
            for line in r.read().decode().splitlines():
                if line.startswith(name + " "):
                    return float(line.split()[1])
        return float("nan")

    def settle(self, quiet: float = 0.5, timeout: float = 30.0) -> bool:
        """Wait until the controller has used no CPU for ``quiet`` seconds (its work after the
        last event is done); False if it was still busy at the deadline."""
        deadline = time.monotonic() + timeout
        last, since = self.cpu_seconds(), time.monotonic()
        while time.monotonic() < deadline:
            time.sleep(0.05)
            now = self.cpu_seconds()
            if now != last:
                last, since = now, time.monotonic()
            elif time.monotonic() - since >= quiet:
                return True
        return False


# --------------------------------------------------------------------------- watching claims


class ClaimWatch:
    """Watches every claim of a kind (IPClaims unless told) in the cluster and notes when each was first
    seen bound (as ``resource.bound`` says), refused (Ready False, with its reason) or gone."""

    def __init__(self, api: client.ApiClient, resource: ClaimResource = IPCLAIMS):
        self.resource = resource
        self.bound: dict[ClaimKey, float] = {}
        self.refused: dict[ClaimKey, str] = {}
        self.gone: dict[ClaimKey, float] = {}
        self._order: list[ClaimKey] = []  # bound claims, in the order they were seen bound
        self._changed = threading.Condition()
        self._watch = watch.Watch()
        objects = client.CustomObjectsApi(api)
        since = objects.list_cluster_custom_object(resource.group, resource.version, resource.plural,
                                                   limit=1)["metadata"]["resourceVersion"]
        self._error: BaseException | None = None
        self._thread = threading.Thread(target=self._follow, args=(objects, since), daemon=True)
        self._thread.start()

    def _follow(self, objects: client.CustomObjectsApi, since: str) -> None:
        r = self.resource
        try:
            for event in self._watch.stream(objects.list_cluster_custom_object, r.group, r.version, r.plural,
                                            resource_version=since):
                obj = event["object"]
                meta, status = obj.get("metadata") or {}, obj.get("status") or {}
                key = (meta.get("namespace"), meta.get("name"))
                if event["type"] == "DELETED":
                    with self._changed:
                        self.gone[key] = time.monotonic()
                        self._changed.notify_all()
                    continue
                if r.bound(status) and key not in self.bound:
                    with self._changed:
                        self.bound[key] = time.monotonic()
                        self._order.append(key)
                        self._changed.notify_all()
                elif not r.bound(status):
                    ready = next((c for c in status.get("conditions") or [] if c.get("type") == "Ready"), None)
                    if ready and ready.get("status") == "False" and self.refused.get(key) != ready.get("reason"):
                        with self._changed:
                            self.refused[key] = ready.get("reason")
                            self._changed.notify_all()
        except BaseException as exc:  # noqa: BLE001 - handed to the waiting thread
            with self._changed:
                self._error = exc
                self._changed.notify_all()

    def wait(self, done: Callable[[], bool], timeout: float, what: Callable[[], str]) -> None:
        """Block until ``done()`` holds (checked on every change the watch sees), or exit saying ``what()``."""
        deadline = time.monotonic() + timeout
        with self._changed:
            while not done():
                if self._error is not None:
                    raise SystemExit(f"the claim watch failed: {self._error!r}")
                left = deadline - time.monotonic()
                if left <= 0:
                    raise SystemExit(f"timed out after {timeout:.0f} s waiting for {what()}")
                self._changed.wait(min(left, 1.0))

    def wait_bound(self, keys: Iterable[ClaimKey], timeout: float) -> float:
        """Wait until every claim of ``keys`` is bound; when the last one was."""
        keys = list(keys)
        with self._changed:
            missing = set(keys) - self.bound.keys()
            seen = len(self._order)

        def done() -> bool:
            # Only the claims bound since the last look: a check per event stays cheap at 65,536 claims.
            nonlocal seen
            missing.difference_update(self._order[seen:])
            seen = len(self._order)
            return not missing

        self.wait(done, timeout, lambda: f"{len(missing)} of {len(keys)} claims to be bound")
        return max(self.bound[k] for k in keys)

    def wait_gone(self, keys: Iterable[ClaimKey], timeout: float) -> float:
        """Wait until every claim of ``keys`` is deleted (its finalizers off); when the last one went."""
        keys = list(keys)
        self.wait(lambda: all(k in self.gone for k in keys), timeout,
                  lambda: f"{sum(k not in self.gone for k in keys)} of {len(keys)} claims to be gone")
        return max(self.gone[k] for k in keys)

    def stop(self) -> None:
        self._watch.stop()


# --------------------------------------------------------------------------- the floor


@dataclass(frozen=True)
class Slot:
    """One claim as the floor allocates it: the claim, its pool and the address it gets."""
    claim: dict
    pool: dict
    ip: str
    prefix: int


class Floor:
    """A plain client making, per claim, the writes the controller made per claim.

    ``counts`` are the controller's writes of one run by (verb, resource, subresource)
    (``write_counts``, grouped or not as ``ORDER`` names them);
    of each kind, claim i of n makes floor((i+1)·c/n) − floor(i·c/n), so that the floor
    makes exactly c of them in all, spread evenly (a pool status patch the controller
    made once per batch is made once per batch of claims here too). Kinds of write the
    floor cannot imitate are listed in ``not_copied``. Other kinds of pool (or a release
    instead of a binding) give their own ``ORDER`` and ``writes``.
    """

    ORDER = (("PATCH", "ippools", ""), ("PATCH", "ipclaims", ""), ("POST", "ipaddresses", ""), ("PATCH", "ipclaims", "status"),
             ("PATCH", "ippools", "status"), ("POST", "events", ""))

    def __init__(self, api: client.ApiClient, counts: Counter[WriteKey], claims: int):
        self.api, self.claims = api, claims
        self.counts = {k: c for k, c in counts.items() if c}
        self.not_copied = {k: c for k, c in self.counts.items() if k not in self.ORDER}
        self._indexes: dict[str, dict[str, str]] = {}
        self._lock = threading.Lock()

    def share(self, key: WriteKey, i: int) -> int:
        c = self.counts.get(key, 0)
        return (i + 1) * c // self.claims - i * c // self.claims

    def make(self, i: int, slot: Slot) -> None:
        """Claim i's share of each kind of write, in ``ORDER``."""
        write = self.writes(slot)
        for key in self.ORDER:
            for _ in range(self.share(key, i)):
                try:
                    write[key]()
                except ApiException as exc:
                    if exc.status != 409:  # a second create of one name: refused, and counted, as the controller's
                        raise

    def writes(self, slot: Slot) -> dict[WriteKey, Callable[[], object]]:
        """Each kind of write of ``ORDER`` for one claim, ready to be made."""
        ns, claim_name = slot.claim["metadata"]["namespace"], slot.claim["metadata"]["name"]
        pool_name = slot.pool["metadata"]["name"]
        name = address_name(pool_name, slot.ip)
        return {
            ("PATCH", "ippools", ""): lambda: request(
                self.api, "PATCH", path(ns, "ippools", pool_name),
                {"metadata": {"finalizers": [kinds.FINALIZERS[kinds.IPPOOL]]}}, headers=MERGE_PATCH),
            ("PATCH", "ipclaims", ""): lambda: request(
                self.api, "PATCH", path(ns, "ipclaims", claim_name),
                {"metadata": {"finalizers": [kinds.FINALIZERS[kinds.IPCLAIM]]}}, headers=MERGE_PATCH),
            ("POST", "ipaddresses", ""): lambda: request(self.api, "POST", path(ns, "ipaddresses"), {
                "apiVersion": API_VERSION, "kind": "IPAddress",
                "metadata": {"name": name, "namespace": ns, "finalizers": [kinds.FINALIZERS[kinds.IPADDRESS]],
                             "ownerReferences": [_owner(slot.pool, block=True), _owner(slot.claim, controller=True)]},
                "spec": {"address": slot.ip, "prefix": slot.prefix, "pool": {"name": pool_name, "namespace": ns},
                         "claim": {"name": claim_name, "namespace": ns}}}),
            ("PATCH", "ipclaims", "status"): lambda: request(
                self.api, "PATCH", path(ns, "ipclaims", claim_name, "status"),
                {"status": {"address": {"name": name, "namespace": ns},
                            "conditions": [_ready("AddressAllocated", f"bound to {slot.ip}")]}}, headers=MERGE_PATCH),
            ("PATCH", "ippools", "status"): lambda: self._pool_status(ns, pool_name, claim_name, slot.ip),
            ("POST", "events", ""): lambda: request(self.api, "POST", f"/api/v1/namespaces/{ns}/events", {
                "apiVersion": "v1", "kind": "Event", "metadata": {"generateName": f"{claim_name}.", "namespace": ns},
                "involvedObject": {"apiVersion": API_VERSION, "kind": "IPClaim", "name": claim_name, "namespace": ns},
                "type": "Normal", "reason": "AddressAllocated", "message": f"bound to {slot.ip}",
                "source": {"component": "metal3-ipam-bench"}}),
        }

    def _pool_status(self, ns: str, pool_name: str, claim_name: str, ip: str) -> None:
        # The controller's pool status carries every binding of the pool; so does the floor's.
        with self._lock:
            indexes = self._indexes.setdefault(f"{ns}/{pool_name}", {})
            indexes[claim_name] = ip
            body = {"status": {"indexes": dict(indexes), "allocated": str(len(indexes)),
                               "conditions": [_ready("PoolReady", "the pool can hand out addresses")],
                               "lastUpdated": _now()}}
        request(self.api, "PATCH", path(ns, "ippools", pool_name, "status"), body, headers=MERGE_PATCH)

    def run(self, slots: list[Slot], parallel: int) -> None:
        run_parallel(lambda item: self.make(*item), list(enumerate(slots)), parallel)

    def behind(self, user: Callable[[int], Slot], n: int, parallel: int) -> None:
        """As the controller side runs: the user's request for each of ``n`` claims (``user(i)``, its
        creation or deletion, ``parallel`` in flight) and, as each is answered, that claim's writes
        (``parallel`` in flight of their own, as the controller's ``--parallel-writes``)."""
        with ThreadPoolExecutor(parallel) as writers:
            futures = []

            def one(i: int) -> None:
                futures.append(writers.submit(self.make, i, user(i)))

            run_parallel(one, range(n), parallel)
            for future in futures:
                future.result()


def _owner(obj: dict, block: bool = False, controller: bool = False) -> dict:
    ref = {"apiVersion": obj["apiVersion"], "kind": obj["kind"], "name": obj["metadata"]["name"],
           "uid": obj["metadata"]["uid"]}
    if block:
        ref["blockOwnerDeletion"] = True
    if controller:
        ref["controller"] = True
    return ref


def _now() -> str:
    return time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())


def _ready(reason: str, message: str) -> dict:
    return {"type": "Ready", "status": "True", "reason": reason, "message": message, "lastTransitionTime": _now()}


# --------------------------------------------------------------------------- reporting


def print_writes(controller: Counter[WriteKey], floor: Counter[WriteKey], not_copied: dict[WriteKey, int],
                 n: int, besides: str = "creation") -> None:
    """The writes per claim of both sides (besides the claim's own ``besides``), and what the floor could not
    imitate."""
    head = f"writes per claim besides its {besides}: "
    print(f"{head}controller {sum(controller.values()) / n:.2f} ({describe_writes(controller, n)})")
    print(f"{' ' * len(head)}floor      {sum(floor.values()) / n:.2f} ({describe_writes(floor, n)})")
    if not_copied:
        print(f"not made by the floor (no plain-client equivalent): {describe_writes(Counter(not_copied), n)}")


def load_average() -> str:
    """The machine's load average over 1, 5 and 15 minutes (the benchmarks share it)."""
    return " ".join(f"{x:.2f}" for x in os.getloadavg())


def totals_text(began: float, load_before: str) -> str:
    """The seconds since ``began`` (monotonic) and the machine's load then and now (the benchmarks share it)."""
    return (f"total: {time.monotonic() - began:.1f} s; load average (1, 5, 15 min) before {load_before}, "
            f"after {load_average()} on {os.cpu_count()} CPUs")


def latencies_text(latencies: list[float]) -> str:
    """``worst 1.20 s, 99th percentile 1.10 s, median 0.60 s`` of latencies sorted lowest first."""
    p99 = latencies[min(len(latencies) - 1, int(len(latencies) * 0.99))]
    return (f"worst {latencies[-1]:.2f} s, 99th percentile {p99:.2f} s, "
            f"median {statistics.median(latencies):.2f} s")


def median_ms(seconds: list[float]) -> float:
    return statistics.median(seconds) * 1000 if seconds else float("nan")


def verdict(value: float, goal: float) -> str:
    return f"(goal <= {goal:g}) {'PASS' if value <= goal else 'FAIL'}"


def rss_growth(start_kib: int, peak_kib: int, claims: int) -> str:
    return f"{(peak_kib - start_kib) / max(claims, 1):.1f} KiB per bound claim (peak RSS {peak_kib / 1024:.1f} MiB " \
           f"- {start_kib / 1024:.1f} MiB when ready, over {claims} claims)"
