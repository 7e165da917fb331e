"""Management clusters set up the way ``clusterctl move`` expects them, and clusterctl itself.

clusterctl (v1.13, contract v1beta2) moves nothing unless, on both sides:

- the Cluster CRD stores ``v1beta2`` and clusterctl's inventory CRD
  (``providers.clusterctl.cluster.x-k8s.io``, v1alpha3) is installed;
- every provider of the source's inventory is in the target's, at the same or
  a newer version;

and, in the source, every Cluster to move reports
``status.initialization.infrastructureProvisioned`` and a ``ControlPlaneInitialized``
condition that is True, and none is paused already. It then considers only
objects whose CRD carries the ``clusterctl.cluster.x-k8s.io`` label (plus
Secrets and ConfigMaps), at the CRD's storage version, reached from a Cluster
(or a CRD labelled ``clusterctl.cluster.x-k8s.io/move-hierarchy``) through
owner references; an object goes only after all its owners.

A move carries no status: a Cluster arrives in the target without the status
above, which the Cluster API controllers would rebuild there. Tests that move
back call :func:`mark_clusters_provisioned` on the target first, as those
controllers would.

    prepare_management_cluster(source)
    prepare_management_cluster(target)
    mark_clusters_provisioned(source.api_client(), "ns")
    run = Clusterctl(binary, workdir).move(source, target, "ns", timeout=600)
"""

from __future__ import annotations

import datetime
import os
import re
import subprocess
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Iterable, Sequence

from .controlplane import ControlPlane, ControlPlaneError, default_crd_paths
from .processes import stop_group

CLUSTER_GROUP = "cluster.x-k8s.io"
CLUSTER_VERSION = "v1beta2"  # the contract clusterctl v1.13 requires as the Cluster CRD's storage version
INVENTORY_GROUP = "clusterctl.cluster.x-k8s.io"
INVENTORY_VERSION = "v1alpha3"
INVENTORY_CRD = f"providers.{INVENTORY_GROUP}"
CLUSTERCTL_LABEL = "clusterctl.cluster.x-k8s.io"
PROVIDER_LABEL = "cluster.x-k8s.io/provider"
CONTROL_PLANE_INITIALIZED = "ControlPlaneInitialized"

_MANIFEST_PREFIX = {
    "CoreProvider": "",
    "BootstrapProvider": "bootstrap-",
    "ControlPlaneProvider": "control-plane-",
    "InfrastructureProvider": "infrastructure-",
    "IPAMProvider": "ipam-",
}


@dataclass(frozen=True)
class Provider:
    """One entry of clusterctl's inventory."""

    name: str       # providerName: cluster-api, metal3, ...
    type: str       # CoreProvider, InfrastructureProvider, IPAMProvider, ...
    namespace: str  # where the provider runs; the inventory object lives there
    version: str    # semantic version with a leading v

    @property
    def label(self) -> str:
        """clusterctl's name for it, also the ``cluster.x-k8s.io/provider`` label of its CRDs."""
        return _MANIFEST_PREFIX[self.type] + self.name

    def body(self) -> dict:
        return {
            "apiVersion": f"{INVENTORY_GROUP}/{INVENTORY_VERSION}",
            "kind": "Provider",
            "metadata": {
                "name": self.label,
                "namespace": self.namespace,
                "labels": {CLUSTERCTL_LABEL: "", PROVIDER_LABEL: self.label},
            },
            "providerName": self.name,
            "type": self.type,
            "version": self.version,
        }


#: The providers whose CRDs the tests install: Cluster API core (Cluster, the IPAM
#: contract), Metal3 infrastructure (Metal3Data) and this IPAM provider.
PROVIDERS: tuple[Provider, ...] = (
    Provider("cluster-api", "CoreProvider", "capi-system", "v1.13.6"),
    Provider("metal3", "InfrastructureProvider", "capm3-system", "v1.11.0"),
    Provider("metal3", "IPAMProvider", "metal3-ipam-system", "v0.1.0"),
)


# --------------------------------------------------------------------------- setting up


def prepare_management_cluster(cp: ControlPlane, providers: Sequence[Provider] = PROVIDERS,
                               crd_paths: Iterable[os.PathLike | str] | None = None) -> None:
    """CRDs (default: config/crd/bases and config/crd/capi) and the provider inventory.

    Raises :class:`ControlPlaneError` naming what clusterctl would refuse.
    """
    from kubernetes import client

    paths = list(crd_paths) if crd_paths is not None else default_crd_paths()
    if paths:
        cp.apply_crds(paths)
    with cp.api_client() as api:
        ext = client.ApiextensionsV1Api(api)
        _check_crds(ext)
        install_inventory(api, providers)


def _check_crds(ext) -> None:
    from kubernetes.client.rest import ApiException

    try:
        cluster = ext.read_custom_resource_definition(f"clusters.{CLUSTER_GROUP}")
        ext.read_custom_resource_definition(INVENTORY_CRD)
    except ApiException as exc:
        raise ControlPlaneError(f"clusterctl needs the Cluster and the inventory CRDs: {exc.status} {exc.reason}") from None
    stored = [v.name for v in cluster.spec.versions if v.storage]
    if stored != [CLUSTER_VERSION]:
        raise ControlPlaneError(f"CRD clusters.{CLUSTER_GROUP} stores {stored}; clusterctl needs {CLUSTER_VERSION}")
    if CLUSTERCTL_LABEL not in (cluster.metadata.labels or {}):
        raise ControlPlaneError(f"CRD clusters.{CLUSTER_GROUP} lacks the {CLUSTERCTL_LABEL} label")


def install_inventory(api_client, providers: Sequence[Provider] = PROVIDERS) -> None:
    """The providers' namespaces and inventory objects (left as they are when present)."""
    from kubernetes import client
    from kubernetes.client.rest import ApiException

    core = client.CoreV1Api(api_client)
    objects = client.CustomObjectsApi(api_client)
    for provider in providers:
        try:
            core.create_namespace(client.V1Namespace(metadata=client.V1ObjectMeta(name=provider.namespace)))
        except ApiException as exc:
            if exc.status != 409:
                raise
        try:
            objects.create_namespaced_custom_object(INVENTORY_GROUP, INVENTORY_VERSION, provider.namespace,
                                                    "providers", provider.body())
        except ApiException as exc:
            if exc.status != 409:
                raise


def mark_cluster_provisioned(api_client, namespace: str, name: str) -> dict:
    """Write the status the Cluster API controllers give a running cluster (what clusterctl checks)."""
    from kubernetes import client

    now = datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")
    objects = client.CustomObjectsApi(api_client)
    cluster = objects.get_namespaced_custom_object(CLUSTER_GROUP, CLUSTER_VERSION, namespace, "clusters", name)
    body = {"status": {
        "initialization": {"infrastructureProvisioned": True, "controlPlaneInitialized": True},
        "conditions": [{
            "type": CONTROL_PLANE_INITIALIZED, "status": "True", "reason": "Initialized", "message": "",
            "lastTransitionTime": now, "observedGeneration": cluster["metadata"].get("generation", 1),
        }],
    }}
    return objects.patch_namespaced_custom_object_status(CLUSTER_GROUP, CLUSTER_VERSION, namespace, "clusters",
                                                         name, body)


def mark_clusters_provisioned(api_client, namespace: str) -> list[str]:
    """:func:`mark_cluster_provisioned` for every Cluster of the namespace; their names."""
    from kubernetes import client

    items = client.CustomObjectsApi(api_client).list_namespaced_custom_object(
        CLUSTER_GROUP, CLUSTER_VERSION, namespace, "clusters")["items"]
    names = sorted(c["metadata"]["name"] for c in items)
    for name in names:
        mark_cluster_provisioned(api_client, namespace, name)
    return names


# --------------------------------------------------------------------------- running clusterctl


class ClusterctlFailed(AssertionError):
    """clusterctl exited non-zero or did not finish in time."""


_RETRY = re.compile(r'Retrying with backoff.*?cause="((?:[^"\\]|\\.)*)"')


@dataclass
class Run:
    """One clusterctl invocation: what ran, how it ended, how long it took, what it said."""

    argv: list[str]
    returncode: int | None
    seconds: float
    log_path: Path
    timed_out: bool = False
    stopped_on_retry: bool = False

    def output(self) -> str:
        try:
            return self.log_path.read_text(errors="replace")
        except OSError:
            return ""

    def tail(self, lines: int = 60) -> str:
        return "\n".join(self.output().splitlines()[-lines:])

    def retries(self) -> list[str]:
        """The causes of every operation clusterctl had to retry (logged at -v 5).

        A move that nothing disturbs retries nothing; each retry of a write costs
        at least half a second, growing to minutes for one object.
        """
        return _RETRY.findall(self.output())

    def check(self) -> "Run":
        if self.stopped_on_retry:
            raise ClusterctlFailed(f"{' '.join(self.argv)} had to retry after {self.seconds:.1f}s and was stopped "
                                   f"(a move nothing disturbs retries nothing); causes:\n"
                                   + "\n".join(self.retries()[:20]) + f"\nlast output:\n{self.tail()}")
        if self.timed_out:
            raise ClusterctlFailed(f"{' '.join(self.argv)} did not finish within {self.seconds:.0f}s "
                                   f"(killed); last output:\n{self.tail()}")
        if self.returncode != 0:
            raise ClusterctlFailed(f"{' '.join(self.argv)} exited with {self.returncode} after "
                                   f"{self.seconds:.1f}s; last output:\n{self.tail()}")
        return self


class Clusterctl:
    """clusterctl with a configuration of its own (no user config, no release check).

    ``workdir`` holds its (empty) configuration file and one log per run.
    """

    def __init__(self, binary: os.PathLike | str, workdir: os.PathLike | str, verbosity: int = 5) -> None:
        self.binary = str(binary)
        self.workdir = Path(workdir)
        self.workdir.mkdir(parents=True, exist_ok=True)
        self.config = self.workdir / "clusterctl.yaml"
        self.config.write_text("{}\n")
        self.verbosity = verbosity
        self.runs = 0

    def move(self, source: ControlPlane, target: ControlPlane, namespace: str, timeout: float,
             stop_on_retry: bool = False) -> Run:
        return self.start_move(source, target, namespace).wait(timeout, stop_on_retry)

    def start_move(self, source: ControlPlane, target: ControlPlane, namespace: str) -> "Running":
        return self.start(["move", "--kubeconfig", str(source.kubeconfig), "--to-kubeconfig", str(target.kubeconfig),
                           "--namespace", namespace])

    def to_directory(self, source: ControlPlane, namespace: str, directory: os.PathLike | str,
                     timeout: float, stop_on_retry: bool = False) -> Run:
        return self.start(["move", "--kubeconfig", str(source.kubeconfig), "--namespace", namespace,
                           "--to-directory", str(directory)]).wait(timeout, stop_on_retry)

    def from_directory(self, target: ControlPlane, directory: os.PathLike | str, timeout: float,
                       stop_on_retry: bool = False) -> Run:
        # The restore writes to --to-kubeconfig (--kubeconfig is refused with --from-directory).
        return self.start(["move", "--to-kubeconfig", str(target.kubeconfig), "--from-directory",
                           str(directory)]).wait(timeout, stop_on_retry)

    def start(self, args: Sequence[str]) -> "Running":
        """Start ``clusterctl ARGS`` in its own process group, logging to a file of the workdir."""
        self.runs += 1
        log_path = self.workdir / f"clusterctl-{self.runs}-{args[0]}.log"
        argv = [self.binary, *args, "--config", str(self.config), "-v", str(self.verbosity)]
        env = {k: v for k, v in os.environ.items() if not k.startswith("KUBECONFIG")}
        env["CLUSTERCTL_DISABLE_VERSIONCHECK"] = "true"
        env["XDG_CONFIG_HOME"] = str(self.workdir / "config")
        with open(log_path, "wb") as log:
            log.write(("$ " + " ".join(argv) + "\n").encode())
            log.flush()
            proc = subprocess.Popen(argv, stdin=subprocess.DEVNULL, stdout=log, stderr=subprocess.STDOUT, env=env,
                                    start_new_session=True)
        return Running(argv, proc, log_path)


class Running:
    """A clusterctl process under way."""

    def __init__(self, argv: list[str], proc: subprocess.Popen, log_path: Path) -> None:
        self.argv = argv
        self.proc = proc
        self.log_path = log_path
        self.started = time.monotonic()

    def logged(self, marker: str) -> bool:
        """Whether clusterctl has written ``marker`` to its log yet."""
        return marker.encode() in self.log_path.read_bytes()

    def wait(self, timeout: float, stop_on_retry: bool = False) -> Run:
        """Wait for the end; never raises on failure (see :meth:`Run.check`).

        clusterctl is killed ``timeout`` seconds after it started, and with
        ``stop_on_retry`` as soon as it logs a retry: a disturbed move retries
        each object for minutes, one at a time.
        """
        proc, deadline = self.proc, self.started + timeout
        watcher = _LogWatcher(self.log_path)
        returncode: int | None = None
        timed_out = retried = False
        try:
            while returncode is None:
                try:
                    returncode = proc.wait(timeout=min(0.5, max(0.0, deadline - time.monotonic())))
                except subprocess.TimeoutExpired:
                    if stop_on_retry and watcher.seen(b"Retrying with backoff"):
                        retried = True
                    elif time.monotonic() < deadline:
                        continue
                    else:
                        timed_out = True
                    stop_group(proc, grace=5.0)
                    break
        except BaseException:
            stop_group(proc, grace=5.0)
            raise
        return Run(self.argv, None if (timed_out or retried) else returncode, time.monotonic() - self.started,
                   self.log_path, timed_out, retried)


class _LogWatcher:
    """Looks for a marker in the part of a growing log not read yet."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self.offset = 0

    def seen(self, marker: bytes) -> bool:
        with open(self.path, "rb") as f:
            f.seek(max(0, self.offset - len(marker)))
            chunk = f.read()
            self.offset = f.tell()
        return marker in chunk
