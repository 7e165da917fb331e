"""Fixtures for the end-to-end tests: a real etcd + kube-apiserver + kube-controller-manager.

The binaries come from hack/build-binaries.sh (built on first use when missing). If
they cannot be had, every test that needs them fails with the reason; nothing is
skipped and nothing is faked.

What every folder shares is here: the session's servers (one control plane, one NetBox, one
OpenStack, each started once for the whole run), the controller processes and the test's namespace.
The helpers the test modules import are modules of this folder (``controller_fixtures``,
``webhook_fixtures``, ``netbox_fixtures``, ``audit_record``); a folder's own are in its folder, loaded
by its conftest.py. No test module imports another.
"""

from __future__ import annotations

import uuid
from pathlib import Path
from typing import Iterable

import pytest

from controller_fixtures import (REPO, SUMMARY, ControllerProcess, Kube, controller_log_sections,
                                 free_port, note_test_started, start_control_plane)
from metal3_ipam.testing import controlplane as cp_mod
from metal3_ipam.testing import netbox as netbox_mod
from metal3_ipam.testing import openstack as openstack_mod
from metal3_ipam.testing.certs import Authority
from webhook_fixtures import (WebhookController, convert_at, converted_crds, register_webhooks,
                              unregister_webhooks, wait_until_webhooks_answer)


def pytest_terminal_summary(terminalreporter, exitstatus, config):
    lines = config.stash.get(SUMMARY, [])
    if lines:
        terminalreporter.section("metal3-ipam")
        for line in lines:
            terminalreporter.write_line(line)


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


@pytest.fixture
def kube(api_client, namespace) -> Kube:
    """The custom objects of the test's fresh namespace."""
    return Kube(api_client, namespace)


@pytest.fixture
def controller_factory(control_plane, tmp_path):
    """start(args=("-A",), name=..., ready=True) -> a running ControllerProcess, stopped after the test."""
    made: list[ControllerProcess] = []

    def start(args: Iterable[str] = ("-A",), *, name: str | None = None, ready: bool = True,
              verbose: bool = True) -> ControllerProcess:
        proc = ControllerProcess(control_plane.kubeconfig, args, name=name or f"controller-{len(made) + 1}",
                                 log_dir=tmp_path, verbose=verbose)
        made.append(proc)
        proc.start(ready_timeout=60.0 if ready else 0)
        return proc

    try:
        yield start
    finally:
        for proc in made:
            proc.stop()


@pytest.fixture(scope="module")
def shared_controller(control_plane, tmp_path_factory):
    """One controller process for a module's tests: all namespaces, leader election on."""
    proc = ControllerProcess(control_plane.kubeconfig, ["-A", "--leader-election-namespace", "default"],
                             name="shared-controller", log_dir=tmp_path_factory.mktemp("controller"))
    proc.start()
    try:
        yield proc
    finally:
        proc.stop()


@pytest.fixture
def controller(shared_controller):
    """The module's controller, checked to be still running before and after the test."""
    assert shared_controller.alive(), f"the controller died:\n{shared_controller.log_tail(60)}"
    yield shared_controller
    assert shared_controller.alive(), f"the controller died:\n{shared_controller.log_tail(60)}"


def pytest_runtest_logstart(nodeid, location):
    note_test_started()


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item, call):
    """On failure, attach the log of every controller that ran during the test and the tail of every
    running server's logs to the report."""
    outcome = yield
    report = outcome.get_result()
    if not report.failed:
        return
    report.sections.extend(controller_log_sections())
    for cp in cp_mod.live_control_planes():
        report.sections.append((f"control plane {cp.server} logs", cp.format_logs()))
    for nb in netbox_mod.live_netboxes():
        report.sections.append((f"NetBox {nb.url} logs", nb.format_logs()))
    for cloud in openstack_mod.live_openstacks():
        report.sections.append((f"OpenStack {cloud.auth_url} logs", cloud.format_logs()))


# -- a control plane whose API server calls the controller's webhooks over TLS (admission, observability) --
# ``webhook_plane`` is a control plane of the module's own (the webhook configurations it carries would refuse
# every pool of other modules' tests while no controller answers them); ``webhook_controller`` is
# ``metal3-ipam run --webhook-port … --webhook-cert-dir …`` with a serving certificate for 127.0.0.1 from a CA
# of the module's own, its webhooks registered on that plane (webhook_fixtures.register_webhooks) and the
# in-cluster IP pools' conversion pointed at its ``/convert``.

@pytest.fixture(scope="module")
def webhook_plane(control_plane_binaries):
    plane = start_control_plane(control_plane_binaries)
    try:
        yield plane
    finally:
        plane.stop()


@pytest.fixture(scope="module")
def webhook_api(webhook_plane):
    with webhook_plane.api_client() as api:
        yield api


@pytest.fixture(scope="module")
def webhook_controller(webhook_plane, webhook_api, tmp_path_factory):
    cert_dir = tmp_path_factory.mktemp("serving-certs")
    authority = Authority.create()
    authority.issue(cert_dir, hosts=("127.0.0.1",))
    port = free_port()
    process = ControllerProcess(webhook_plane.kubeconfig,
                                ["-A", "--leader-election-namespace", "default", "--webhook-port", str(port),
                                 "--webhook-cert-dir", str(cert_dir)],
                                name="webhook-controller", log_dir=tmp_path_factory.mktemp("controller"))
    process.start()
    configurations = register_webhooks(webhook_api, port, authority.pem)
    try:
        wait_until_webhooks_answer(webhook_api)
        convert_at(webhook_api, converted_crds(), port, authority.pem)
        yield WebhookController(process, port, authority, configurations)
    finally:
        unregister_webhooks(webhook_api, configurations)
        process.stop()
