"""A real Prometheus (3.x, built from its Go module by ``hack/build-binaries.sh``) for the tests, and promtool.

:class:`Prometheus` runs ``prometheus`` on loopback with a scrape configuration and rule files of the
test's, in a directory of its own, and asks its HTTP API (queries, alerts, targets). :func:`promtool`
runs ``promtool``. Both are found (or built) as the control-plane binaries are
(:func:`metal3_ipam.testing.controlplane.ensure_binaries`); both raise :class:`PrometheusUnavailable` when
they cannot be had: the tests fail then, saying how to build them, and never skip.
"""

from __future__ import annotations

import json
import os
import socket
import subprocess
import tempfile
import time
import urllib.error
import urllib.parse
import urllib.request
from pathlib import Path
from typing import Any, Iterable, Sequence

import yaml

from .controlplane import BinariesUnavailable, _pdeathsig_hook, ensure_binaries
from .processes import stop_group

INSTALL_HINT = "build it with `bash hack/build-binaries.sh` (hack/test.sh does it)"
_NO_PROXY = urllib.request.build_opener(urllib.request.ProxyHandler({}))


class PrometheusUnavailable(Exception):
    """prometheus or promtool cannot be had, or Prometheus did not start."""


def binary(name: str) -> str:
    """The path of ``prometheus`` or ``promtool`` (built when missing), or PrometheusUnavailable."""
    try:
        return str(ensure_binaries((name,))[name])
    except BinariesUnavailable as err:
        raise PrometheusUnavailable(f"{name} is unavailable: {INSTALL_HINT}\n{err}") from None


def promtool(*args: str, cwd: os.PathLike | str | None = None, timeout: float = 120.0) -> subprocess.CompletedProcess:
    """``promtool ARGS``, its output captured (check ``returncode``)."""
    return subprocess.run([binary("promtool"), *args], capture_output=True, text=True, cwd=cwd, timeout=timeout,
                          stdin=subprocess.DEVNULL)


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def static_job(name: str, target: str, *, labels: dict[str, str] | None = None, interval: str = "1s",
               metrics_path: str = "/metrics", scheme: str = "http", honor_labels: bool = True,
               **extra: Any) -> dict[str, Any]:
    """A scrape job of one target (``host:port``), as ``scrape_configs`` holds it. ``labels`` are the target's
    (what Kubernetes service discovery would give: ``namespace``, ``pod``); ``extra`` goes into the job as it is
    (``authorization``, ``tls_config`` for an HTTPS endpoint)."""
    return {"job_name": name, "scrape_interval": interval, "scrape_timeout": interval, "metrics_path": metrics_path,
            "scheme": scheme, "honor_labels": honor_labels,
            "static_configs": [{"targets": [target], "labels": dict(labels or {})}], **extra}


class Prometheus:
    """``prometheus`` on 127.0.0.1, with ``jobs`` (see :func:`static_job`) and ``rule_files``, evaluating rules
    every ``evaluation_interval``. A context manager; ``stop()`` ends it."""

    def __init__(self, jobs: Sequence[dict[str, Any]], rule_files: Iterable[os.PathLike | str] = (), *,
                 evaluation_interval: str = "1s", directory: os.PathLike | str | None = None) -> None:
        self.jobs = list(jobs)
        self.rule_files = [str(Path(f).resolve()) for f in rule_files]
        self.evaluation_interval = evaluation_interval
        self.directory: Path | None = Path(directory) if directory else None
        self.port: int | None = None
        self.popen: subprocess.Popen | None = None

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def start(self, timeout: float = 60.0) -> "Prometheus":
        program = binary("prometheus")
        if self.directory is None:
            self.directory = Path(tempfile.mkdtemp(prefix="metal3-ipam-prometheus-"))
        config = {"global": {"scrape_interval": "1s", "evaluation_interval": self.evaluation_interval},
                  "rule_files": self.rule_files, "scrape_configs": self.jobs}
        config_path = self.directory / "prometheus.yml"
        config_path.write_text(yaml.safe_dump(config, sort_keys=False), encoding="utf-8")
        check = promtool("check", "config", str(config_path))
        if check.returncode != 0:
            raise PrometheusUnavailable(f"promtool check config {config_path}: {check.stdout}{check.stderr}")
        self.port = _free_port()
        argv = [program, f"--config.file={config_path}", f"--storage.tsdb.path={self.directory / 'data'}",
                f"--web.listen-address=127.0.0.1:{self.port}", "--web.enable-lifecycle"]
        with open(self.log_path, "ab") as log:
            self.popen = subprocess.Popen(argv, stdin=subprocess.DEVNULL, stdout=log, stderr=subprocess.STDOUT,
                                          cwd=self.directory, start_new_session=True, preexec_fn=_pdeathsig_hook())
        deadline = time.monotonic() + timeout
        while not self._ready():
            if self.popen.poll() is not None:
                raise PrometheusUnavailable(f"prometheus exited with {self.popen.returncode}:\n{self.log_tail()}")
            if time.monotonic() > deadline:
                self.stop()
                raise PrometheusUnavailable(f"prometheus not ready within {timeout:g}s:\n{self.log_tail()}")
            time.sleep(0.1)
        return self

    def _ready(self) -> bool:
        try:
            with _NO_PROXY.open(f"{self.url}/-/ready", timeout=2) as answer:
                return answer.status == 200
        except (urllib.error.URLError, OSError):
            return False

    def stop(self) -> None:
        if self.popen is not None and self.popen.poll() is None:
            stop_group(self.popen, grace=10.0)

    def __enter__(self) -> "Prometheus":
        return self.start() if self.popen is None else self

    def __exit__(self, *exc: Any) -> None:
        self.stop()

    @property
    def log_path(self) -> Path:
        return Path(self.directory or ".") / "prometheus.log"

    def log_tail(self, lines: int = 40) -> str:
        try:
            return "\n".join(self.log_path.read_text(errors="replace").splitlines()[-lines:])
        except OSError:
            return ""

    # -- the HTTP API -----------------------------------------------------------------------------

    def api(self, path: str, **params: str) -> Any:
        """GET /api/v1/<path>: its ``data``, or an AssertionError with Prometheus's error."""
        url = f"{self.url}/api/v1/{path}" + (f"?{urllib.parse.urlencode(params)}" if params else "")
        try:
            with _NO_PROXY.open(url, timeout=30) as answer:
                body = json.load(answer)
        except urllib.error.HTTPError as err:
            body = json.loads(err.read() or b"{}")
        if body.get("status") != "success":
            raise AssertionError(f"{url}: {body.get('errorType')}: {body.get('error')}")
        return body["data"]

    def query(self, expr: str) -> list[dict[str, Any]]:
        """An instant query: its series (``metric`` labels and ``value``)."""
        data = self.api("query", query=expr)
        return data["result"] if data["resultType"] in ("vector", "matrix") else [data]

    def alerts(self, name: str | None = None, state: str | None = None) -> list[dict[str, Any]]:
        """The alerts Prometheus holds (pending or firing), of one name and state if given."""
        return [a for a in self.api("alerts")["alerts"]
                if (name is None or a["labels"].get("alertname") == name) and (state is None or a["state"] == state)]

    def targets_up(self) -> list[dict[str, Any]]:
        return [t for t in self.api("targets")["activeTargets"] if t["health"] == "up"]
