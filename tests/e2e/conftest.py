"""Fixtures for the end-to-end tests: a real etcd + kube-apiserver + kube-controller-manager.

The binaries come from hack/build-binaries.sh (built on first use when missing). If
they cannot be had, every test that needs them fails with the reason; nothing is
skipped and nothing is faked.
"""

from __future__ import annotations

import uuid
from pathlib import Path

import pytest

from controller_fixtures import SUMMARY, start_control_plane
from metal3_ipam.testing import controlplane as cp_mod
from metal3_ipam.testing import netbox as netbox_mod
from metal3_ipam.testing import openstack as openstack_mod

def pytest_terminal_summary(terminalreporter, exitstatus, config):
    lines = config.stash.get(SUMMARY, [])
    if lines:
        terminalreporter.section("metal3-ipam")
        for line in lines:
            terminalreporter.write_line(line)


# The checkout these tests belong to (the package under test may be installed elsewhere, e.g. by tox).
REPO = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="session")
def control_plane_binaries():
    try:
        return cp_mod.ensure_binaries(root=REPO)
    except cp_mod.BinariesUnavailable as exc:
        reason = str(exc)
    pytest.fail(f"control-plane binaries unavailable:\n{reason}", pytrace=False)


@pytest.fixture(scope="session")
def kustomize_binary() -> Path:
    """kustomize, which renders config/ (metal3-ipam release, packaging.render); built when missing."""
    try:
        return cp_mod.ensure_binaries(("kustomize",), root=REPO)["kustomize"]
    except cp_mod.BinariesUnavailable as exc:
        reason = str(exc)
    pytest.fail(f"kustomize unavailable:\n{reason}", pytrace=False)


@pytest.fixture(scope="session")
def helm_binary() -> Path:
    """helm, which lints, renders and installs charts/metal3-ipam; built when missing."""
    try:
        return cp_mod.ensure_binaries(("helm",), root=REPO)["helm"]
    except cp_mod.BinariesUnavailable as exc:
        reason = str(exc)
    pytest.fail(f"helm unavailable:\n{reason}", pytrace=False)


@pytest.fixture(scope="session")
def control_plane(control_plane_binaries):
    """One control plane for the whole session, with every CRD of config/crd/{bases,capi} installed."""
    cp = start_control_plane(control_plane_binaries)
    try:
        yield cp
    finally:
        cp.stop()


@pytest.fixture(scope="session")
def netbox():
    """One real NetBox (PostgreSQL, Redis, gunicorn on loopback) for the whole session, its key field made.

    Installed and migrated on first use into ~/.cache/metal3-ipam/netbox-<version>
    (hack/prepare-netbox.sh does it ahead); fails, never skips, when it cannot be had.
    """
    nb = netbox_mod.NetBox()
    try:
        nb.start()
        nb.ensure_key_field()
    except netbox_mod.NetBoxError as exc:
        nb.stop()
        pytest.fail(f"NetBox unavailable:\n{exc}", pytrace=False)
    try:
        yield nb
    finally:
        nb.stop()


@pytest.fixture(scope="session")
def openstack():
    """One real Keystone and Neutron (over MariaDB, on loopback) for the whole session: a project with a
    ``member`` and the ``admin``, an external network ``public`` (metal3_ipam.testing.openstack).

    Installed and migrated on first use into ~/.cache/metal3-ipam/openstack-<versions>
    (hack/prepare-openstack.sh does it ahead); fails, never skips, when it cannot be had.
    Tests leave it as they found it (``openstack.reset()`` deletes every floating IP).
    """
    cloud = openstack_mod.OpenStack()
    reason = None
    try:
        cloud.start()
    except openstack_mod.OpenStackError as exc:
        reason = str(exc)
    except OSError as exc:  # urllib's: a server stopped answering while the start made its objects
        reason = f"{exc!r}\n{cloud.format_logs()}"
    if reason is not None:
        cloud.stop()
        pytest.fail(f"OpenStack unavailable:\n{reason}", pytrace=False)
    try:
        yield cloud
    finally:
        cloud.stop()


@pytest.fixture
def control_plane_factory(control_plane_binaries):
    """make(**ControlPlane kwargs) -> a further, independent control plane, stopped after the test."""
    created: list[cp_mod.ControlPlane] = []

    def make(**kwargs) -> cp_mod.ControlPlane:
        cp = start_control_plane(control_plane_binaries, **kwargs)
        created.append(cp)
        return cp

    try:
        yield make
    finally:
        for cp in created:
            cp.stop()


@pytest.fixture
def api_client(control_plane):
    with control_plane.api_client() as client:
        yield client


@pytest.fixture
def namespace(control_plane, api_client):
    """A fresh namespace for one test; deleted afterwards (not waited for)."""
    from kubernetes import client
    from kubernetes.client.rest import ApiException

    name = f"t-{uuid.uuid4().hex[:10]}"
    core = client.CoreV1Api(api_client)
    core.create_namespace(client.V1Namespace(metadata=client.V1ObjectMeta(name=name)))
    yield name
    try:
        core.delete_namespace(name)
    except ApiException as exc:
        if exc.status != 404:
            raise


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item, call):
    """On failure, attach the tail of every running control plane's logs to the report."""
    outcome = yield
    report = outcome.get_result()
    if not report.failed:
        return
    for cp in cp_mod.live_control_planes():
        report.sections.append((f"control plane {cp.server} logs", cp.format_logs()))
    for nb in netbox_mod.live_netboxes():
        report.sections.append((f"NetBox {nb.url} logs", nb.format_logs()))
    for cloud in openstack_mod.live_openstacks():
        report.sections.append((f"OpenStack {cloud.auth_url} logs", cloud.format_logs()))
