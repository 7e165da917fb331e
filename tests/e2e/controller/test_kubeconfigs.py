"""Any kubeconfig kubectl accepts: the controller reads, watches and writes as the one user it names.

Each form the local control plane can issue runs ``metal3-ipam run --kubeconfig``
for a claim created after start (so kopf's watch, the reads and the writes all
had to authenticate); the service-account token rotation of a pod is checked
with the credentials and the writer directly against the same API server.
"""

from __future__ import annotations

import asyncio
import base64
import os
import time
import uuid
from pathlib import Path

import pytest
from kubernetes import client

from controller_fixtures import (METAL3, READ_RULES, ControllerProcess, Kube, assert_invariants,
                                 controller_as_user, grant_writes, rules_with_ipaddress_verbs)
from metal3_ipam.controller import credentials as creds_mod
from metal3_ipam.controller.api import ApiWriter
from metal3_ipam.controller.operator import discover
from metal3_ipam.core.actions import Create, Plan
from metal3_ipam.core.inventory import Inventory
from metal3_ipam.testing.waiting import eventually

CLIENT_CN = "metal3-ipam-test"


def cert_user(control_plane, inline: bool) -> dict:
    cert, key = control_plane.client_certificate(CLIENT_CN, ["system:masters"])
    if inline:
        return {"client-certificate-data": base64.b64encode(cert.read_bytes()).decode(),
                "client-key-data": base64.b64encode(key.read_bytes()).decode()}
    return {"client-certificate": str(cert), "client-key": str(key)}


def token_file_user(control_plane, tmp_path) -> dict:
    path = tmp_path / "token"
    path.write_text(control_plane.token + "\n")
    return {"tokenFile": str(path)}


def exec_user(control_plane, tmp_path) -> dict:
    plugin = control_plane.exec_plugin(f"plugin-{uuid.uuid4().hex[:6]}", control_plane.token, expires_in=3600)
    return {"exec": {"apiVersion": "client.authentication.k8s.io/v1", "command": str(plugin),
                     "interactiveMode": "Never"}}


FORMS = {
    # The reported one: a client certificate with verification off went out anonymously.
    "client-certificate-inline-insecure": (lambda cp, tmp: cert_user(cp, inline=True), "insecure"),
    "client-certificate-files-insecure": (lambda cp, tmp: cert_user(cp, inline=False), "insecure"),
    "client-certificate-inline-ca-data": (lambda cp, tmp: cert_user(cp, inline=True), "data"),
    "client-certificate-files-ca-file": (lambda cp, tmp: cert_user(cp, inline=False), "file"),
    "token-ca-data": (lambda cp, tmp: {"token": cp.token}, "data"),
    "token-insecure": (lambda cp, tmp: {"token": cp.token}, "insecure"),
    "token-file-ca-file": (token_file_user, "file"),
    "exec-plugin-ca-data": (exec_user, "data"),
    "exec-plugin-insecure": (exec_user, "insecure"),
}


@pytest.mark.parametrize("form", list(FORMS))
def test_controller_serves_claims_with_every_kubeconfig_form(control_plane, kube, tmp_path, form):
    user, trust = FORMS[form]
    entry = user(control_plane, tmp_path)
    kubeconfig = control_plane.write_kubeconfig(f"kubeconfig-{form}-{uuid.uuid4().hex[:6]}", "someone", entry,
                                                trust=trust)
    proc = ControllerProcess(kubeconfig, ["-n", kube.ns, "--no-leader-elect"], name=f"controller-{form}",
                             log_dir=tmp_path)
    try:
        proc.start()
        # Created after the controller is ready: the watch (kopf), the reads and the writes all took part.
        kube.pool("p", pools=[{"start": "10.50.0.10", "end": "10.50.0.19"}], prefix=24)
        kube.claim("c1", "p")
        address = kube.bound("c1", timeout=60)
        assert address["spec"]["address"] == "10.50.0.10"
        assert_invariants(kube, allow_errors=False)
        assert proc.http_status("/readyz") == 200
        log = proc.log_text()
        assert " 403" not in log and " 401" not in log, log[-3000:]
        if "exec" in entry:
            runs = Path(entry["exec"]["command"] + ".runs")
            assert int(runs.read_text()) >= 1
    finally:
        proc.stop()


# --------------------------------------------------------------------------- service-account token rotation


def _service_account_token(api_client, namespace: str, name: str) -> str:
    core = client.CoreV1Api(api_client)
    core.create_namespaced_service_account(namespace, client.V1ServiceAccount(metadata=client.V1ObjectMeta(name=name)))
    request = client.AuthenticationV1TokenRequest(spec=client.V1TokenRequestSpec(audiences=[],
                                                                                  expiration_seconds=3600))
    return core.create_namespaced_service_account_token(name, namespace, request).status.token


def _who(configuration) -> str:
    with client.ApiClient(configuration) as api:
        review = client.AuthenticationV1Api(api).create_self_subject_review(
            client.V1SelfSubjectReview(api_version="authentication.k8s.io/v1", kind="SelfSubjectReview"))
    return review.status.user_info.username


def _address(namespace: str, name: str) -> dict:
    return {"apiVersion": "ipam.metal3.io/v1alpha1", "kind": "IPAddress",
            "metadata": {"name": name, "namespace": namespace},
            "spec": {"address": "10.60.0.1", "pool": {"name": "p"}, "claim": {"name": "c"}}}


def _rotate(directory: Path, token: str) -> None:
    """As the kubelet does: a new timestamped folder, and the ..data symlink swapped to it by rename."""
    folder = directory / f"..{time.monotonic_ns()}"
    folder.mkdir()
    (folder / "token").write_text(token)
    (directory / "..data_tmp").symlink_to(folder.name)
    os.replace(directory / "..data_tmp", directory / "..data")


def test_in_cluster_token_rotation_reaches_reads_writes_and_kopf(control_plane, api_client, namespace, tmp_path):
    without_rights = _service_account_token(api_client, namespace, "no-rights")
    writer_token = _service_account_token(api_client, namespace, "writer")
    grant_writes(api_client, namespace, {"kind": "ServiceAccount", "name": "writer", "namespace": namespace})

    sa_dir = tmp_path / "serviceaccount"
    sa_dir.mkdir()
    (sa_dir / "ca.crt").write_bytes(control_plane.ca_file.read_bytes())
    _rotate(sa_dir, without_rights)
    (sa_dir / "token").symlink_to("..data/token")
    host, port = control_plane.server.removeprefix("https://").rsplit(":", 1)
    credentials = creds_mod.in_cluster({"KUBERNETES_SERVICE_HOST": host, "KUBERNETES_SERVICE_PORT": port},
                                       str(sa_dir))
    configuration = credentials.configuration()
    assert _who(configuration) == f"system:serviceaccount:{namespace}:no-rights"

    async def write(name: str):
        with client.ApiClient(control_plane.configuration()) as admin:
            resources = discover(admin)
        writer = ApiWriter(credentials, Inventory(), resources)
        try:
            plan = Plan()
            plan.step(f"IPAddress {namespace}/{name}").add(Create(_address(namespace, name)))
            return await writer.execute(plan)
        finally:
            await writer.close()

    refused = asyncio.run(write("before"))
    assert refused.done == 0 and "403" in refused.failures[0], refused.failures

    _rotate(sa_dir, writer_token)
    # The next request of every client goes out with the new token.
    assert _who(configuration) == f"system:serviceaccount:{namespace}:writer"
    accepted = asyncio.run(write("after"))
    assert accepted.done == 1 and not accepted.failures, accepted.failures
    assert credentials.connection_info().token == writer_token


def test_exec_plugin_credential_refused_with_401_is_renewed_and_the_write_retried(control_plane, namespace, tmp_path):
    """The first credential a plugin prints is already revoked: the writer runs it again and sends once more."""
    plugin = tmp_path / "plugin"
    plugin.write_text(f"""#!/bin/sh
n=$(cat {tmp_path}/runs 2>/dev/null || echo 0)
echo $((n + 1)) > {tmp_path}/runs
if [ "$n" = 0 ]; then token=revoked; else token={control_plane.token}; fi
echo '{{"apiVersion": "client.authentication.k8s.io/v1", "kind": "ExecCredential", "status": {{"token": "'$token'"}}}}'
""")
    plugin.chmod(0o700)
    kubeconfig = control_plane.write_kubeconfig("exec-401", "someone", {"exec": {
        "apiVersion": "client.authentication.k8s.io/v1", "command": str(plugin)}})
    credentials = creds_mod.from_kubeconfig([str(kubeconfig)])
    assert credentials.authorization() == "Bearer revoked"

    async def write():
        with client.ApiClient(control_plane.configuration()) as admin:
            resources = discover(admin)
        writer = ApiWriter(credentials, Inventory(), resources)
        try:
            plan = Plan()
            plan.step("IPAddress").add(Create(_address(namespace, "renewed")))
            return await writer.execute(plan)
        finally:
            await writer.close()

    outcome = asyncio.run(write())
    assert outcome.done == 1 and not outcome.failures, outcome.failures
    assert (tmp_path / "runs").read_text().strip() == "2"
    assert Kube(client.ApiClient(control_plane.configuration()), namespace).get(METAL3, "ipaddresses", "renewed")


# --------------------------------------------------------------------------- a controller that cannot write


def test_readiness_says_when_no_write_is_allowed(control_plane, api_client, kube, tmp_path):
    """A user who may read and watch but not write: /readyz turns 503 saying why, and recovers once RBAC allows."""
    reader = f"reader-{uuid.uuid4().hex[:6]}"
    with controller_as_user(control_plane, api_client, kube.ns, tmp_path, reader, READ_RULES,
                            trust="insecure") as proc:
        proc.start()
        kube.pool("p", pools=[{"start": "10.70.0.10", "end": "10.70.0.19"}], prefix=24)
        kube.claim("c1", "p")
        eventually(lambda: proc.http_status("/readyz") == 503, timeout=30, what="/readyz to say not ready")
        body = _body(proc, "/readyz")
        assert "every write is refused" in body and "403" in body, body
        assert "cannot write: every write is refused" in proc.log_text()
        samples = proc.metrics()
        refused = {k: v for k, v in samples.items() if k.startswith("metal3_ipam_write_refusals_total{")}
        assert any('code="403"' in k and v >= 1 for k, v in refused.items()), refused

        grant_writes(api_client, kube.ns, {"kind": "User", "name": reader,
                                            "apiGroup": "rbac.authorization.k8s.io"})
        kube.bound("c1", timeout=90)
        eventually(lambda: proc.http_status("/readyz") == 200, timeout=30, what="/readyz to recover")
        # Said by whichever comes first: a write that goes through, or the access review asked while unready.
        log_text = proc.log_text()
        assert "writes are accepted again" in log_text or "writes are allowed again" in log_text, log_text[-2000:]


def _body(proc: ControllerProcess, path: str) -> str:
    import urllib.error
    import urllib.request

    opener = urllib.request.build_opener(urllib.request.ProxyHandler({}))
    try:
        with opener.open(f"http://127.0.0.1:{proc.port}{path}", timeout=5) as resp:
            return resp.read().decode()
    except urllib.error.HTTPError as err:
        return err.read().decode()


def test_a_create_forbidden_by_rbac_is_on_the_claim_once_and_retried_slowly(control_plane, api_client, kube,
                                                                             tmp_path):
    """Everything allowed but creating Metal3 IPAddresses: the claim says so (errorMessage, Ready=False,
    one Warning Event), the controller stays ready, and the create is tried again on a growing delay."""
    user = f"no-create-{uuid.uuid4().hex[:6]}"
    rules = rules_with_ipaddress_verbs(["get", "list", "watch", "patch", "delete"])
    with controller_as_user(control_plane, api_client, kube.ns, tmp_path, user, rules) as proc:
        proc.start()
        kube.pool("p", pools=[{"start": "10.90.0.10", "end": "10.90.0.19"}], prefix=24)
        kube.claim("c1", "p")
        message = kube.claim_error("c1")
        assert message.startswith(f"create IPAddress {kube.ns}/p-10-90-0-10 refused: 403 "), message
        ready = [c for c in kube.ipclaim("c1")["status"]["conditions"] if c["type"] == "Ready"][0]
        assert (ready["status"], ready["reason"], ready["message"]) == ("False", "AllocationFailed", message)
        kube.warning_event("c1", "AllocationFailed")
        assert f"IPClaim {kube.ns}/c1: create IPAddress {kube.ns}/p-10-90-0-10 refused: 403" in proc.log_text()

        def tries() -> float:
            return proc.metrics().get('metal3_ipam_write_refusals_total{code="403",'
                                      'kind="IPAddress.ipam.metal3.io",verb="create"}', 0.0)

        first = tries()
        time.sleep(6.0)  # an observation window: how often it is tried, not a synchronisation
        later = tries()
        # Delays of 1, 2, 4 s (and the pool's own backoff): a handful of tries, never a loop.
        assert 1 <= first and later - first <= 4, (first, later)
        events = [e for e in kube.events() if e.involved_object.name == "c1" and e.reason == "AllocationFailed"]
        assert len(events) == 1, [e.message for e in events]
        assert proc.http_status("/readyz") == 200, "other writes are accepted: the controller can write"


def test_rotated_client_certificate_files_reach_the_writer(control_plane, namespace, tmp_path, monkeypatch):
    """cert-manager style: the files named in the kubeconfig are replaced; the writer's next connections use them."""
    monkeypatch.setattr(creds_mod, "TLS_FILES_RECHECK_SECONDS", 0.0)
    nobody_cert, nobody_key = control_plane.client_certificate("nobody-at-all", name="rotating-old")
    admin_cert, admin_key = control_plane.client_certificate(CLIENT_CN, ["system:masters"], name="rotating-new")
    cert, key = tmp_path / "tls.crt", tmp_path / "tls.key"
    cert.write_bytes(nobody_cert.read_bytes())
    key.write_bytes(nobody_key.read_bytes())
    kubeconfig = control_plane.write_kubeconfig("rotating", "someone", {"client-certificate": str(cert),
                                                                         "client-key": str(key)})
    credentials = creds_mod.from_kubeconfig([str(kubeconfig)])
    with client.ApiClient(control_plane.configuration()) as admin:
        resources = discover(admin)

    async def scenario():
        writer = ApiWriter(credentials, Inventory(), resources)
        try:
            plan = Plan()
            plan.step("before").add(Create(_address(namespace, "cert-before")))
            before = await writer.execute(plan)
            for source, target in ((admin_cert, cert), (admin_key, key)):
                staged = target.with_suffix(".new")
                staged.write_bytes(source.read_bytes())
                os.replace(staged, target)
            plan = Plan()
            plan.step("after").add(Create(_address(namespace, "cert-after")))
            return before, await writer.execute(plan)
        finally:
            await writer.close()

    before, after = asyncio.run(scenario())
    assert "403" in before.failures[0] and "nobody-at-all" in before.failures[0], before.failures
    assert after.done == 1 and not after.failures, after.failures
