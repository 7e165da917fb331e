"""Installing as clusterctl does: the release, rendered by the real ``clusterctl generate provider``.

``metal3-ipam release`` lays out a local provider repository; clusterctl
(built by hack/build-binaries.sh) renders it from there; the result applies
server-side to a fresh control plane with every object labelled for
clusterctl; and the Deployment's own command and arguments start the
controller under the ServiceAccount the components create, serving claims
and its webhooks.
"""

from __future__ import annotations

import base64
import os
import subprocess
import sys
from pathlib import Path

import pytest
import yaml
from kubernetes import client

from controller_fixtures import REPO, ControllerProcess, free_port
from metal3_ipam import packaging
from metal3_ipam.testing import controlplane as cp_mod
from metal3_ipam.testing.certs import Authority
from webhook_fixtures import call, install, object_path, serves_claims_and_webhooks, use_webhooks_at

VERSION = "v0.1.0"
CERT_MANAGER_CRDS = Path(__file__).resolve().parent / "data" / "cert-manager-crds.yaml"


def clusterctl(binaries_dir: Path, *args: str, home: Path) -> str:
    env = {k: v for k, v in os.environ.items() if not k.startswith("KUBECONFIG")}
    env.update(CLUSTERCTL_DISABLE_VERSIONCHECK="true", HOME=str(home), XDG_CONFIG_HOME=str(home / ".config"))
    done = subprocess.run([str(binaries_dir / "clusterctl"), *args], capture_output=True, text=True, env=env,
                          timeout=120)
    assert done.returncode == 0, f"clusterctl {' '.join(args)} failed:\n{done.stderr}"
    return done.stdout


@pytest.fixture(scope="module")
def rendered_by_clusterctl(control_plane_binaries, kustomize_binary, tmp_path_factory) -> list[dict]:
    repository = tmp_path_factory.mktemp("provider-repository")
    done = subprocess.run([sys.executable, "-m", "metal3_ipam.cli", "release", "--version", VERSION,
                           "-o", str(repository)], capture_output=True, text=True, cwd=REPO, timeout=120)
    assert done.returncode == 0, done.stderr
    components = repository / packaging.PROVIDER_LABEL / VERSION / packaging.COMPONENTS_FILE
    config = tmp_path_factory.mktemp("clusterctl") / "clusterctl.yaml"
    config.write_text(yaml.safe_dump({"providers": [{"name": packaging.PROVIDER_NAME, "type": "IPAMProvider",
                                                     "url": str(components)}]}))
    binaries = cp_mod.ensure_binaries(("clusterctl",), root=REPO)
    home = tmp_path_factory.mktemp("home")
    described = clusterctl(binaries["clusterctl"].parent, "generate", "provider", "--ipam",
                           f"{packaging.PROVIDER_NAME}:{VERSION}", "--config", str(config), "--describe", home=home)
    for variable in packaging.VARIABLES.values():
        assert variable in described, described
    text = clusterctl(binaries["clusterctl"].parent, "generate", "provider", "--ipam",
                      f"{packaging.PROVIDER_NAME}:{VERSION}", "--config", str(config), home=home)
    return [doc for doc in yaml.safe_load_all(text) if doc]


def test_clusterctl_renders_every_object_with_its_labels_and_the_defaults(rendered_by_clusterctl):
    objects = rendered_by_clusterctl
    assert {(o["kind"], o["metadata"]["name"]) for o in objects} == \
        {(o["kind"], o["metadata"]["name"]) for o in packaging.render(REPO / "config" / "default")}
    for obj in objects:
        labels = obj["metadata"].get("labels") or {}
        assert labels.get("clusterctl.cluster.x-k8s.io") == "", obj["metadata"]["name"]
        assert labels.get("cluster.x-k8s.io/provider") == "ipam-metal3", obj["metadata"]["name"]
    (deployment,) = [o for o in objects if o["kind"] == "Deployment"]
    (container,) = deployment["spec"]["template"]["spec"]["containers"]
    assert "--parallel-writes=16" in container["args"] and "--resync-seconds=300" in container["args"]


def test_the_components_apply_and_the_deployment_arguments_start_the_controller(
        rendered_by_clusterctl, control_plane_factory, tmp_path, monkeypatch):
    plane = control_plane_factory(crd_paths=[REPO / "config" / "crd" / "capi", CERT_MANAGER_CRDS])
    objects = rendered_by_clusterctl
    with plane.api_client() as admin:
        # Server-side apply, in clusterctl's order (Namespace, cert-manager objects, the rest).
        install(admin, objects, "clusterctl")
        for obj in objects:
            stored = call(admin, "GET", object_path(obj))
            assert stored.status == 200
            assert stored.body["metadata"]["labels"]["clusterctl.cluster.x-k8s.io"] == ""

        (deployment,) = [o for o in objects if o["kind"] == "Deployment"]
        pod = deployment["spec"]["template"]["spec"]
        (container,) = pod["containers"]
        namespace = deployment["metadata"]["namespace"]

        # What the pod would get: a token of its ServiceAccount, the webhook certificate in the
        # mounted directory, POD_NAMESPACE from the downward API, and ports of its own (here
        # free loopback ports, as every test's controller gets).
        token = client.CoreV1Api(admin).create_namespaced_service_account_token(
            pod["serviceAccountName"], namespace,
            client.AuthenticationV1TokenRequest(spec=client.V1TokenRequestSpec(audiences=[]))).status.token
        kubeconfig = tmp_path / "in-pod.kubeconfig"
        kubeconfig.write_text(yaml.safe_dump({
            "apiVersion": "v1", "kind": "Config", "current-context": "pod",
            "clusters": [{"name": "c", "cluster": {
                "server": plane.server,
                "certificate-authority-data": base64.b64encode(Path(plane.ca_file).read_bytes()).decode()}}],
            "users": [{"name": "pod", "user": {"token": token}}],
            "contexts": [{"name": "pod", "context": {"cluster": "c", "user": "pod"}}]}))
        cert_dir = tmp_path / "serving-certs"
        authority = Authority.create()
        authority.issue(cert_dir)
        webhook_port = free_port()
        assert container["command"] == ["metal3-ipam"] and container["args"][0] == "run"
        args = []
        for arg in container["args"][1:]:
            flag, _, value = arg.partition("=")
            if flag == "--health-address":
                continue  # the test's process runner sets its own
            if flag == "--webhook-port":
                value = str(webhook_port)
            if flag == "--webhook-cert-dir":
                value = str(cert_dir)
            args.append(f"{flag}={value}" if value else flag)
        env = {e["name"]: e for e in container["env"]}
        assert env["POD_NAMESPACE"]["valueFrom"]["fieldRef"]["fieldPath"] == "metadata.namespace"
        monkeypatch.setenv("POD_NAMESPACE", namespace)
        controller = ControllerProcess(kubeconfig, args, name="installed-controller", log_dir=tmp_path)
        controller.start()
        try:
            use_webhooks_at(admin, objects, webhook_port, authority.pem)
            serves_claims_and_webhooks(admin, "installed", pod_namespace=namespace)
            assert "Forbidden" not in controller.log_text(), controller.log_tail(40)
        finally:
            controller.stop()
