"""The controller image, built from the Dockerfile and run with podman the way the shipped Deployment runs it.

No registry is needed: the base (``PYTHON_IMAGE`` of the Dockerfile) is a
Debian made by ``mmdebstrap`` from Debian packages, cached in
``~/.cache/metal3-ipam/image-base`` under a key of what it holds and imported
into podman once. :func:`build` builds the Dockerfile on it (podman's layer
cache keeps the dependency layers between runs); :func:`run_argv` turns a
container of a rendered Deployment into a ``podman run`` command line:
entrypoint, arguments, environment (downward-API fields given their values),
security context, resource limits, volumes and ports, plus what the kubelet
adds to every pod (the ServiceAccount's token and CA, the API server's
address).

podman runs with ``--runtime runc`` and explicit ulimits no higher than the
host's hard limits (:func:`ulimit_flags`): its defaults fail on these machines.
"""

from __future__ import annotations

import dataclasses
import fcntl
import hashlib
import json
import os
import platform
import re
import resource
import subprocess
import time
import urllib.error
import urllib.request
import uuid
from pathlib import Path
from typing import Mapping, Sequence

from .waiting import eventually

PODMAN = ("podman", "--runtime", "runc")
BASE_SUITE = "bookworm"
BASE_PACKAGES = ("python3", "python3-venv", "ca-certificates")
# Documentation, manuals and translations are of no use in a base image.
BASE_OPTIONS = ("--variant=minbase",
                *(f"--dpkgopt=path-exclude=/usr/share/{d}/*" for d in ("doc", "man", "info", "locale")))
#: Images built by :func:`build` carry this label.
LABEL = "io.metal3-ipam.image-test"
SERVICE_ACCOUNT_DIR = "/var/run/secrets/kubernetes.io/serviceaccount"
#: The host's loopback as a container on slirp4netns sees it.
HOST_LOOPBACK = "10.0.2.2"
NETWORK = "slirp4netns:allow_host_loopback=true"
HOST_CA_BUNDLE = Path("/etc/ssl/certs/ca-certificates.crt")


class ImageError(RuntimeError):
    """podman or mmdebstrap failed, or a manifest asks for what this module cannot give."""


def podman(*args: str, timeout: float = 120.0, check: bool = True) -> subprocess.CompletedProcess:
    argv = [*PODMAN, *args]
    try:
        done = subprocess.run(argv, capture_output=True, text=True, timeout=timeout, stdin=subprocess.DEVNULL)
    except (OSError, subprocess.TimeoutExpired) as err:
        raise ImageError(f"{' '.join(argv)}: {err}") from None
    if check and done.returncode != 0:
        raise ImageError(f"{' '.join(argv)} exited with {done.returncode}:\n{done.stderr[-4000:]}")
    return done


def ulimit_flags() -> list[str]:
    """``--ulimit`` for open files and processes: podman's defaults exceed the hard limits here."""
    flags = []
    for name, which, wanted in (("nofile", resource.RLIMIT_NOFILE, 65536), ("nproc", resource.RLIMIT_NPROC, 4096)):
        hard = resource.getrlimit(which)[1]
        value = wanted if hard == resource.RLIM_INFINITY else min(hard, wanted)
        flags += ["--ulimit", f"{name}={value}:{value}"]
    return flags


# --------------------------------------------------------------------------- the base


def base_key() -> str:
    """What the base holds (suite, options, packages, architecture), as a short hash."""
    what = json.dumps([BASE_SUITE, BASE_OPTIONS, BASE_PACKAGES, platform.machine()])
    return hashlib.sha256(what.encode()).hexdigest()[:16]


def cache_dir() -> Path:
    cache = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(cache) / "metal3-ipam" / "image-base"


def base_tarball(timeout: float = 900.0) -> Path:
    """The base's root filesystem as a tarball, made by mmdebstrap on first use (about a minute)."""
    directory = cache_dir()
    directory.mkdir(parents=True, exist_ok=True)
    path = directory / f"{BASE_SUITE}-{base_key()}.tar"
    with open(directory / ".lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if path.is_file():
            return path
        partial = path.with_suffix(".part")
        argv = ["mmdebstrap", "--format=tar", *BASE_OPTIONS, f"--include={','.join(BASE_PACKAGES)}", BASE_SUITE,
                str(partial)]
        try:
            done = subprocess.run(argv, capture_output=True, text=True, timeout=timeout, stdin=subprocess.DEVNULL)
        except (OSError, subprocess.TimeoutExpired) as err:
            raise ImageError(f"{' '.join(argv)}: {err}") from None
        if done.returncode != 0:
            partial.unlink(missing_ok=True)
            raise ImageError(f"{' '.join(argv)} exited with {done.returncode}:\n{done.stderr[-4000:]}")
        partial.rename(path)
        return path


def base_image() -> str:
    """The base imported into podman (once per key): the Dockerfile's ``PYTHON_IMAGE``."""
    tag = f"localhost/metal3-ipam-base:{BASE_SUITE}-{base_key()}"
    if podman("image", "exists", tag, check=False).returncode != 0:
        podman("import", str(base_tarball()), tag, timeout=600)
    return tag


# --------------------------------------------------------------------------- the build


@dataclasses.dataclass(frozen=True)
class Built:
    tag: str
    size: int  # bytes, as podman reports the image
    seconds: float


def build(root: Path, tag: str, base: str, timeout: float = 1800.0) -> Built:
    """``podman build`` of ``root``'s Dockerfile on ``base``; the image ``tag`` named before is removed."""
    argv = ["build", "--network", "host", *ulimit_flags(), "--build-arg", f"PYTHON_IMAGE={base}",
            "--label", f"{LABEL}=true", "-t", tag, "-f", str(root / "Dockerfile")]
    if HOST_CA_BUNDLE.is_file():
        # pip in the build trusts what pip on the host trusts (a proxy's CA, say): only for the RUN steps.
        argv += ["-v", f"{HOST_CA_BUNDLE}:/etc/ssl/certs/ca-certificates.crt:ro"]
    before = image_id(tag)
    started = time.monotonic()
    podman(*argv, str(root), timeout=timeout)
    seconds = time.monotonic() - started
    if before and before != image_id(tag):
        # The image this tag named before, not the build stage's layers: they are the cache of the next build.
        podman("image", "rm", before, check=False)
    size = int(podman("image", "inspect", "--format", "{{.Size}}", tag).stdout.strip())
    return Built(tag, size, seconds)


def image_id(tag: str) -> str | None:
    done = podman("image", "inspect", "--format", "{{.Id}}", tag, check=False)
    return done.stdout.strip() if done.returncode == 0 else None


# --------------------------------------------------------------------------- running a Deployment's container


@dataclasses.dataclass
class Kubelet:
    """What the kubelet would give the pod, here: secrets and the service account as folders, field values, ports."""

    secrets: Mapping[str, Path] = dataclasses.field(default_factory=dict)  # Secret name -> folder of its keys
    fields: Mapping[str, str] = dataclasses.field(default_factory=dict)  # downward API fieldPath -> value
    service_account: Path | None = None  # folder with token, ca.crt, namespace
    api_host: str = HOST_LOOPBACK
    api_port: int | None = None
    published: Mapping[int, int] = dataclasses.field(default_factory=dict)  # container port -> host loopback port
    user: tuple[int, int] | None = None  # as OpenShift assigns one, in place of the manifest's
    leave_out: Sequence[str] = ()  # volumes not given (to see the container fail without them)


_BINARY = {"Ki": 2**10, "Mi": 2**20, "Gi": 2**30, "Ti": 2**40, "": 1, "k": 10**3, "M": 10**6, "G": 10**9}


def quantity_bytes(text: str) -> int:
    m = re.fullmatch(r"(\d+)(Ki|Mi|Gi|Ti|k|M|G|)", str(text))
    if not m:
        raise ImageError(f"memory quantity {text!r}: not understood")
    return int(m[1]) * _BINARY[m[2]]


def quantity_cpus(text: str) -> str:
    text = str(text)
    return f"{int(text[:-1]) / 1000:g}" if text.endswith("m") else f"{float(text):g}"


def grace_seconds(pod: dict) -> int:
    return int(pod.get("terminationGracePeriodSeconds", 30))


def run_argv(pod: dict, container: dict, kubelet: Kubelet, name: str) -> list[str]:
    """``podman run`` arguments (after ``podman --runtime runc``) for ``container`` of the pod spec ``pod``."""
    argv = ["run", "--detach", "--name", name, "--hostname", name, "--pull=never", "--network", NETWORK,
            *ulimit_flags(), "--stop-timeout", str(grace_seconds(pod))]
    security = {**(pod.get("securityContext") or {}), **(container.get("securityContext") or {})}
    uid, gid = kubelet.user or (security.get("runAsUser"), security.get("runAsGroup"))
    if security.get("runAsNonRoot") and uid in (0, None):
        raise ImageError(f"container {container['name']}: runAsNonRoot needs a numeric runAsUser other than 0")
    if uid is not None:
        argv += ["--user", f"{uid}:{gid if gid is not None else 0}"]
    if security.get("readOnlyRootFilesystem"):
        argv += ["--read-only", "--read-only-tmpfs=false"]  # podman adds writable /tmp, /run... otherwise
    capabilities = security.get("capabilities") or {}
    argv += [f"--cap-drop={c.lower()}" for c in capabilities.get("drop") or []]
    argv += [f"--cap-add={c.lower()}" for c in capabilities.get("add") or []]
    if security.get("allowPrivilegeEscalation") is False:
        argv += ["--security-opt=no-new-privileges"]
    seccomp = (security.get("seccompProfile") or {}).get("type", "RuntimeDefault")
    if seccomp == "Unconfined":
        argv += ["--security-opt=seccomp=unconfined"]
    elif seccomp != "RuntimeDefault":  # RuntimeDefault: podman's own profile, which it applies by default
        raise ImageError(f"container {container['name']}: seccompProfile {seccomp} not supported here")
    limits = (container.get("resources") or {}).get("limits") or {}
    if "memory" in limits:
        argv += ["--memory", str(quantity_bytes(limits["memory"]))]
    if "cpu" in limits:
        argv += ["--cpus", quantity_cpus(limits["cpu"])]

    for variable in container.get("env") or []:
        if "value" in variable:
            value = variable["value"]
        else:
            path = ((variable.get("valueFrom") or {}).get("fieldRef") or {}).get("fieldPath")
            if path not in kubelet.fields:
                raise ImageError(f"env {variable['name']}: no value for {variable.get('valueFrom')}")
            value = kubelet.fields[path]
        argv += ["--env", f"{variable['name']}={value}"]
    if kubelet.service_account is not None:
        argv += ["--env", f"KUBERNETES_SERVICE_HOST={kubelet.api_host}",
                 "--env", f"KUBERNETES_SERVICE_PORT={kubelet.api_port}",
                 "--mount", f"type=bind,source={kubelet.service_account},destination={SERVICE_ACCOUNT_DIR},ro=true"]

    volumes = {v["name"]: v for v in pod.get("volumes") or []}
    for mount in container.get("volumeMounts") or []:
        if mount["name"] in kubelet.leave_out:
            continue
        volume = volumes[mount["name"]]
        if "emptyDir" in volume:
            spec = f"type=tmpfs,destination={mount['mountPath']},tmpfs-mode=1777"
            size = (volume["emptyDir"] or {}).get("sizeLimit")
            argv += ["--mount", spec + (f",tmpfs-size={quantity_bytes(size)}" if size else "")]
        elif "secret" in volume:  # secret volumes are read-only whatever the mount says
            source = kubelet.secrets[volume["secret"]["secretName"]]
            argv += ["--mount", f"type=bind,source={source},destination={mount['mountPath']},ro=true"]
        else:
            raise ImageError(f"volume {mount['name']}: only emptyDir and secret volumes are supported here")

    declared = {port["containerPort"]: port.get("protocol", "TCP") for port in container.get("ports") or []}
    # A pod's ports are reachable whether the container declares them or not (a probe may name a number only).
    for container_port in [*declared, *(p for p in kubelet.published if p not in declared)]:
        host_port = kubelet.published.get(container_port)
        if host_port:
            argv += ["--publish", f"127.0.0.1:{host_port}:{container_port}/{declared.get(container_port, 'TCP').lower()}"]
    if container.get("command"):
        argv += ["--entrypoint", json.dumps(container["command"])]
    return [*argv, container["image"], *(container.get("args") or [])]


# --------------------------------------------------------------------------- one run of a container


def readable(folder: Path) -> Path:
    """As the kubelet writes a Secret volume with defaultMode 420: readable by whatever user the pod runs as."""
    folder.chmod(0o755)
    for f in folder.iterdir():
        f.chmod(0o644)
    return folder


def service_account_folder(admin, pod: dict, namespace: str, ca_file: Path, folder: Path) -> Path:
    """What the kubelet mounts at /var/run/secrets/kubernetes.io/serviceaccount: a token of the pod's account."""
    from kubernetes import client

    token = client.CoreV1Api(admin).create_namespaced_service_account_token(
        pod["serviceAccountName"], namespace,
        client.AuthenticationV1TokenRequest(spec=client.V1TokenRequestSpec(audiences=[]))).status.token
    folder.mkdir()
    (folder / "token").write_text(token)
    (folder / "ca.crt").write_bytes(Path(ca_file).read_bytes())
    (folder / "namespace").write_text(namespace)
    return readable(folder)


class Container:
    """One run of the manager container, removed afterwards."""

    def __init__(self, pod: dict, container: dict, kubelet: Kubelet) -> None:
        self.pod, self.spec, self.kubelet = pod, container, kubelet
        self.name = f"metal3-ipam-test-{uuid.uuid4().hex[:8]}"
        self.argv = run_argv(pod, container, kubelet, self.name)

    def __enter__(self) -> "Container":
        podman(*self.argv)
        return self

    def __exit__(self, *exc) -> None:
        podman("rm", "--force", "--time", "0", self.name, check=False)

    def port(self, name: str) -> int:
        (number,) = [p["containerPort"] for p in self.spec["ports"] if p["name"] == name]
        return self.kubelet.published[number]

    def logs(self) -> str:
        done = podman("logs", self.name, check=False)
        return done.stdout + done.stderr

    def state(self) -> dict:
        (info,) = json.loads(podman("inspect", self.name).stdout)
        return info["State"]

    def ended(self) -> dict | None:
        state = self.state()
        return None if state["Running"] else state

    def exec(self, *argv: str) -> str:
        return podman("exec", self.name, *argv).stdout

    def probe_url(self, which: str) -> str:
        """Where a probe is reached from the host: its port by name or number, as published."""
        probe = self.spec[which]["httpGet"]
        port = self.kubelet.published.get(probe["port"], probe["port"]) if isinstance(probe["port"], int) \
            else self.port(probe["port"])
        return f"http://127.0.0.1:{port}{probe['path']}"

    def probe(self, which: str) -> int:
        try:
            with urllib.request.urlopen(self.probe_url(which), timeout=5) as answer:
                return answer.status
        except urllib.error.HTTPError as err:
            return err.code

    def wait_ready(self, timeout: float = 90.0) -> None:
        def ready() -> bool:
            if not self.state()["Running"]:
                raise AssertionError(f"the container ended: {self.state()}\n{self.logs()[-4000:]}")
            return self.probe("readinessProbe") == 200

        try:
            eventually(ready, timeout=timeout, interval=0.5, what="/readyz of the container",
                       retry_on=(OSError,))
        except AssertionError:
            raise AssertionError(f"not ready ({self.said('readinessProbe')}); log:\n{self.logs()[-4000:]}") from None

    def said(self, which: str) -> str:
        """What a probe's endpoint answers (its body), or why it does not."""
        try:
            with urllib.request.urlopen(self.probe_url(which), timeout=5) as answer:
                return answer.read().decode(errors="replace")
        except urllib.error.HTTPError as err:
            return err.read().decode(errors="replace")
        except OSError as err:
            return str(err)

    def terminate(self) -> tuple[int, float]:
        """SIGTERM, as the kubelet sends it: (exit code, seconds it took). Waited for three grace periods,
        however loaded the machine: a stop that waits for something of its own (a request's timeout, a
        pass that never ends) outlasts that, while a loaded machine only draws out the steps of one."""
        started = time.monotonic()
        podman("kill", "--signal", "TERM", self.name)
        grace = grace_seconds(self.pod)
        state = eventually(self.ended, timeout=3 * grace, interval=0.1, what="the container to end after SIGTERM")
        return state["ExitCode"], time.monotonic() - started


def ends_cleanly(running: Container) -> None:
    code, seconds = running.terminate()
    log = running.logs()
    print(f"ended {seconds:.1f} s after SIGTERM (grace period {grace_seconds(running.pod)} s)")
    assert code == 0, f"exit code {code} after SIGTERM; log:\n{log[-4000:]}"
    assert "Traceback" not in log, log[-4000:]
