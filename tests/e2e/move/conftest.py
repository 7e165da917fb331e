"""What the ``clusterctl move`` tests share: the real clusterctl and controllers on either control plane."""

from __future__ import annotations

import pytest

from controller_fixtures import REPO, ControllerProcess
from metal3_ipam.testing import controlplane as cp_mod
from metal3_ipam.testing.clusterctl import Clusterctl


@pytest.fixture(scope="module")
def clusterctl(tmp_path_factory) -> Clusterctl:
    """The real clusterctl built by hack/build-binaries.sh, with a configuration of its own."""
    try:
        binaries = cp_mod.ensure_binaries(("clusterctl",), root=REPO)
    except cp_mod.BinariesUnavailable as exc:
        reason = str(exc)
    else:
        return Clusterctl(binaries["clusterctl"], tmp_path_factory.mktemp("clusterctl"))
    pytest.fail(f"clusterctl unavailable:\n{reason}", pytrace=False)


@pytest.fixture
def controllers(tmp_path):
    """start(control_plane, name, args) -> a running controller on that control plane, stopped after the test."""
    made: list[ControllerProcess] = []

    def start(cp: cp_mod.ControlPlane, name: str, args=("-A",)) -> ControllerProcess:
        proc = ControllerProcess(cp.kubeconfig, args, name=name, log_dir=tmp_path)
        made.append(proc)
        return proc.start()

    try:
        yield start
    finally:
        for proc in made:
            proc.stop()
