"""helm, as the tests run it: on the chart of this checkout, against a control plane's kubeconfig.

The binary is the one ``hack/build-binaries.sh`` builds (found like the control-plane binaries,
:func:`metal3_ipam.testing.controlplane.find_binaries`). Every call runs with a home of its own
(``HELM_CACHE_HOME`` and friends in a temporary folder), so nothing is read from or written to the
user's helm configuration.

    chart = Helm(binary, workdir)
    objects = chart.template(CHART, values={"certManager": {"enabled": True}})
    chart.run("install", "metal3-ipam", str(CHART), "-n", "metal3-ipam-system", kubeconfig=path)
"""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path
from typing import Mapping

import yaml

from .controlplane import repo_root

RELEASE = "metal3-ipam"
NAMESPACE = "metal3-ipam-system"
SafeLoader = getattr(yaml, "CSafeLoader", yaml.SafeLoader)


def chart_dir(root: Path | None = None) -> Path:
    root = root or repo_root()
    if root is None:
        raise HelmError("no source checkout holding charts/metal3-ipam")
    return root / "charts" / "metal3-ipam"


class HelmError(RuntimeError):
    """helm exited with a failure; the message holds its command line and what it said."""


class Helm:
    def __init__(self, binary: Path, workdir: Path, timeout: float = 300.0) -> None:
        self.binary, self.workdir, self.timeout = Path(binary), Path(workdir), timeout
        self.workdir.mkdir(parents=True, exist_ok=True)

    def env(self) -> dict[str, str]:
        home = self.workdir / "helm-home"
        return {**os.environ, "HELM_CACHE_HOME": str(home / "cache"), "HELM_CONFIG_HOME": str(home / "config"),
                "HELM_DATA_HOME": str(home / "data"), "KUBECONFIG": os.devnull}

    def run(self, *args: str, kubeconfig: Path | None = None, values: Mapping | None = None,
            check: bool = True) -> subprocess.CompletedProcess:
        argv = [str(self.binary), *args]
        if kubeconfig is not None:
            argv += ["--kubeconfig", str(kubeconfig)]
        if values is not None:
            path = self.workdir / f"values-{len(list(self.workdir.glob('values-*.json')))}.json"
            path.write_text(json.dumps(values))
            argv += ["--values", str(path)]
        try:
            done = subprocess.run(argv, capture_output=True, text=True, timeout=self.timeout, env=self.env(),
                                  stdin=subprocess.DEVNULL)
        except (OSError, subprocess.TimeoutExpired) as err:
            raise HelmError(f"{' '.join(argv)}: {err}") from None
        if check and done.returncode != 0:
            raise HelmError(f"{' '.join(argv)} exited with {done.returncode}:\n{done.stderr[-4000:]}")
        return done

    def template(self, chart: Path, values: Mapping | None = None, release: str = RELEASE,
                 namespace: str = NAMESPACE, *extra: str) -> list[dict]:
        """The objects ``helm template`` renders, in its order."""
        done = self.run("template", release, str(chart), "--namespace", namespace, *extra, values=values)
        return [doc for doc in yaml.load_all(done.stdout, Loader=SafeLoader) if doc]
