"""The diagnostics endpoint as Cluster API providers serve it, against a real API server.

``--diagnostics-address`` serves ``/metrics`` over HTTPS to callers the API
server authenticates (TokenReview) and authorises (SubjectAccessReview on the
non-resource URL ``/metrics``, granted by the ``metrics-reader`` ClusterRole of
config/rbac); ``--insecure-diagnostics`` serves it over plain HTTP instead.
The controller runs with a token of a ServiceAccount bound to the roles of
config/rbac only, so those roles are shown to be enough for the reviews.
"""

from __future__ import annotations

import base64
import http.client
import socket
import ssl
import uuid
from pathlib import Path

import pytest
import yaml
from kubernetes import client

from metal3_ipam.controller import permissions

from controller_fixtures import ControllerProcess


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def _token(api: client.ApiClient, namespace: str, name: str) -> str:
    request = client.AuthenticationV1TokenRequest(spec=client.V1TokenRequestSpec(audiences=[],
                                                                                  expiration_seconds=3600))
    return client.CoreV1Api(api).create_namespaced_service_account_token(name, namespace, request).status.token


def _account(api: client.ApiClient, namespace: str, name: str, *cluster_roles: str) -> str:
    """A ServiceAccount bound to ``cluster_roles``; its token."""
    client.CoreV1Api(api).create_namespaced_service_account(
        namespace, client.V1ServiceAccount(metadata=client.V1ObjectMeta(name=name)))
    rbac = client.RbacAuthorizationV1Api(api)
    for role in cluster_roles:
        rbac.create_cluster_role_binding({
            "apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRoleBinding",
            "metadata": {"name": f"{role}-{name}"},
            "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": role},
            "subjects": [{"kind": "ServiceAccount", "name": name, "namespace": namespace}]})
    return _token(api, namespace, name)


@pytest.fixture
def roles(api_client):
    """The ClusterRoles of config/rbac the endpoint concerns (the manager's, diagnostics, metrics-reader), under
    names of this test's own; removed afterwards."""
    suffix = uuid.uuid4().hex[:8]
    made = {}
    rbac = client.RbacAuthorizationV1Api(api_client)
    for role in (permissions.cluster_role(), *permissions.diagnostics_roles()):
        role["metadata"]["name"] = name = f"{role['metadata']['name']}-{suffix}"
        rbac.create_cluster_role(role)
        made[name.rsplit("-", 1)[0]] = name
    yield made
    for name in made.values():
        rbac.delete_cluster_role(name)
    for binding in rbac.list_cluster_role_binding().items:
        if binding.role_ref.name in made.values():
            rbac.delete_cluster_role_binding(binding.metadata.name)


def _controller_account(api: client.ApiClient, namespace: str, roles: dict[str, str]) -> str:
    """The controller's ServiceAccount as config/rbac binds it: the manager's and the diagnostics ClusterRoles, and
    the leader-election Role (Leases: the lock store) in its namespace, which the controller runs as its own."""
    token = _account(api, namespace, "controller", roles["manager-role"], roles["diagnostics-role"])
    rbac = client.RbacAuthorizationV1Api(api)
    rbac.create_namespaced_role(namespace, permissions.leader_election_role())
    rbac.create_namespaced_role_binding(namespace, {
        "apiVersion": "rbac.authorization.k8s.io/v1", "kind": "RoleBinding",
        "metadata": {"name": "controller-leader-election"},
        "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": "leader-election-role"},
        "subjects": [{"kind": "ServiceAccount", "name": "controller", "namespace": namespace}]})
    return token


def _kubeconfig(control_plane, token: str, path: Path) -> Path:
    path.write_text(yaml.safe_dump({
        "apiVersion": "v1", "kind": "Config", "current-context": "sa",
        "clusters": [{"name": "local", "cluster": {
            "server": control_plane.server,
            "certificate-authority-data": base64.b64encode(Path(control_plane.ca_file).read_bytes()).decode()}}],
        "users": [{"name": "sa", "user": {"token": token}}],
        "contexts": [{"name": "sa", "context": {"cluster": "local", "user": "sa"}}]}))
    path.chmod(0o600)
    return path


def _tls(maximum: ssl.TLSVersion | None = None) -> ssl.SSLContext:
    # The endpoint's certificate is self-signed, made at start (as controller-runtime makes one): not verified.
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
    context.check_hostname, context.verify_mode = False, ssl.CERT_NONE
    if maximum is not None:
        context.maximum_version = maximum
    return context


def _get(port: int, token: str | None = None, context: ssl.SSLContext | None = None, path: str = "/metrics",
         method: str = "GET", body: str | None = None) -> tuple[int, str]:
    conn = (http.client.HTTPSConnection("127.0.0.1", port, context=context, timeout=60) if context is not None
            else http.client.HTTPConnection("127.0.0.1", port, timeout=60))
    try:
        conn.request(method, path, body=body, headers={"Authorization": f"Bearer {token}"} if token else {})
        answer = conn.getresponse()
        return answer.status, answer.read().decode(errors="replace")
    finally:
        conn.close()


def test_metrics_need_a_token_allowed_to_get_them(control_plane, api_client, namespace, roles, tmp_path):
    controller_token = _controller_account(api_client, namespace, roles)
    without = _account(api_client, namespace, "scraper-without-role")
    with_role = _account(api_client, namespace, "scraper", roles["metrics-reader"])
    port = _free_port()
    ctl = ControllerProcess(_kubeconfig(control_plane, controller_token, tmp_path / "controller.kubeconfig"),
                            ["-n", namespace, "--no-leader-elect", f"--diagnostics-address=127.0.0.1:{port}",
                             "--leader-election-namespace", namespace, "--tls-min-version=VersionTLS13"],
                            name="diagnostics", log_dir=tmp_path)
    try:
        ctl.start()
        assert _get(port, context=_tls())[0] == 401
        assert _get(port, "not-a-token", _tls())[0] == 401
        status, body = _get(port, without, _tls())
        assert status == 403 and "/metrics" in body, body
        status, body = _get(port, with_role, _tls())
        assert status == 200 and "metal3_ipam_leader" in body, body
        # Below --tls-min-version: the handshake is refused.
        with pytest.raises(ssl.SSLError):
            _get(port, with_role, _tls(maximum=ssl.TLSVersion.TLSv1_2))
        # No plain HTTP on the HTTPS endpoint, and no /metrics beside the probes.
        with pytest.raises((http.client.HTTPException, OSError)):
            assert _get(port, with_role)[0] != 200
        assert ctl.http_status("/metrics") == 404 and ctl.http_status("/readyz") == 200
        assert "Traceback" not in ctl.log_text()
    finally:
        ctl.stop()


def test_profiles_and_the_log_verbosity_need_a_token_allowed_their_own_paths(control_plane, api_client, namespace,
                                                                              roles, tmp_path):
    """``/debug/pprof/`` and ``/debug/flags/v``, as a Go manager serves them beside its metrics (what each holds
    is Python's): each path and verb reviewed on its own, so the metrics reader may not use them."""
    controller_token = _controller_account(api_client, namespace, roles)
    reader = _account(api_client, namespace, "scraper", roles["metrics-reader"])
    rbac = client.RbacAuthorizationV1Api(api_client)
    debugger_role = f"debugger-{uuid.uuid4().hex[:8]}"
    rbac.create_cluster_role({"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRole",
                              "metadata": {"name": debugger_role},
                              "rules": [{"nonResourceURLs": ["/debug/*"], "verbs": ["get", "put"]}]})
    debugger = _account(api_client, namespace, "debugger", debugger_role)
    port = _free_port()
    ctl = ControllerProcess(_kubeconfig(control_plane, controller_token, tmp_path / "controller.kubeconfig"),
                            ["-n", namespace, "--no-leader-elect", f"--diagnostics-address=127.0.0.1:{port}",
                             "--leader-election-namespace", namespace],
                            name="debugging", log_dir=tmp_path)
    try:
        ctl.start()
        status, body = _get(port, reader, _tls(), "/debug/pprof/goroutine")
        assert status == 403 and '"/debug/pprof/goroutine"' in body, body
        assert _get(port, reader, _tls(), "/debug/flags/v", "PUT", "4")[0] == 403
        assert _get(port, debugger, _tls(), "/metrics")[0] == 403

        status, body = _get(port, debugger, _tls(), "/debug/pprof/")
        assert status == 200 and "goroutine" in body and "profile" in body, body
        status, body = _get(port, debugger, _tls(), "/debug/pprof/goroutine")
        assert status == 200 and "asyncio tasks" in body and "threads" in body, body
        status, body = _get(port, debugger, _tls(), "/debug/pprof/profile?seconds=1")
        assert status == 200 and "cProfile of the event loop" in body, body
        status, body = _get(port, debugger, _tls(), "/debug/pprof/profile?seconds=soon")
        assert status == 400 and "'soon'" in body, body
        status, body = _get(port, debugger, _tls(), "/debug/pprof/heap")
        assert status == 200 and "dict" in body, body

        status, body = _get(port, debugger, _tls(), "/debug/flags/v")
        assert status == 200 and body.strip().isdigit(), body
        louder = int(body) + 3
        status, body = _get(port, debugger, _tls(), "/debug/flags/v", "PUT", "loud")
        assert status == 400 and "'loud'" in body, body
        assert _get(port, debugger, _tls(), "/debug/flags/v", "PUT", str(louder))[0] == 200
        assert _get(port, debugger, _tls(), "/debug/flags/v") == (200, f"{louder}\n")
        assert f"log verbosity set to {louder}" in ctl.log_text()
        assert "Traceback" not in ctl.log_text()
    finally:
        ctl.stop()
        rbac.delete_cluster_role(debugger_role)
        rbac.delete_cluster_role_binding(f"{debugger_role}-debugger")


def test_insecure_diagnostics_serve_plain_http_to_anyone(control_plane, namespace, tmp_path):
    port = _free_port()
    ctl = ControllerProcess(control_plane.kubeconfig, ["-n", namespace, "--no-leader-elect",
                                                       f"--diagnostics-address=127.0.0.1:{port}",
                                                       "--insecure-diagnostics"], name="insecure", log_dir=tmp_path)
    try:
        ctl.start()
        status, body = _get(port)
        assert status == 200 and "metal3_ipam_leader" in body
        with pytest.raises(ssl.SSLError):
            _get(port, context=_tls())
    finally:
        ctl.stop()
