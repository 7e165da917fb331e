"""The Helm chart installed on a real API server, its Deployment run as the kubelet would run it, and upgraded.

``helm install`` puts charts/metal3-ipam on a control plane of the module's own, with its defaults (the chart
makes the webhooks' certificate). The controller image is built as in tests/e2e/test_image.py, and the
Deployment's container is run with podman from the Deployment the API server holds
(:mod:`metal3_ipam.testing.image`). There is no Service routing on loopback: as in the image test, the
webhook configurations and the conversion webhooks are pointed at the container's published port, with a
certificate for 127.0.0.1, and given back their Service before each ``helm upgrade`` (as they are in a
cluster). ``helm upgrade`` to a new image tag then keeps the CRDs, the chart's certificate and every pool,
claim and address (same uids, same IPs), and the new image serves the next claim; ``helm uninstall`` keeps
the CRDs and everything in them, and a new ``helm install`` of the release takes the CRDs up again.
"""

from __future__ import annotations

import time
from pathlib import Path

import pytest
import yaml
from kubernetes import client

from controller_fixtures import REPO, SUMMARY, Kube, assert_invariants, free_port, start_control_plane
from metal3_ipam.testing import image as image_mod
from metal3_ipam.testing.certs import Authority
from metal3_ipam.testing.helm import NAMESPACE, RELEASE, Helm, chart_dir
from webhook_fixtures import call, object_path, serves_claims_and_webhooks, use_webhooks_at

ROOT = REPO
CHART = chart_dir(ROOT)
# Tags of this test's own (the chart's default, v0.1.0, is the image test's): the first install, the upgrade.
INSTALL_TAG, UPGRADE_TAG = "helm-e2e-install", "helm-e2e-upgrade"
CLAIMS_NAMESPACE = "helm"
# Every kind whose objects the upgrade must keep: (group/version, plural).
KEPT = [("ipam.metal3.io/v1alpha1", "ippools"), ("ipam.metal3.io/v1alpha1", "ipclaims"),
        ("ipam.metal3.io/v1alpha1", "ipaddresses"), ("ipam.cluster.x-k8s.io/v1beta2", "ipaddressclaims"),
        ("ipam.cluster.x-k8s.io/v1beta2", "ipaddresses"), ("ipam.cluster.x-k8s.io/v1alpha2", "inclusterippools")]


def report(request, line: str) -> None:
    request.config.stash.setdefault(SUMMARY, []).append(line)


@pytest.fixture(scope="module")
def helm(helm_binary, tmp_path_factory) -> Helm:
    return Helm(helm_binary, tmp_path_factory.mktemp("helm"))


@pytest.fixture(scope="module")
def plane(control_plane_binaries):
    """A control plane whose certificate also names the host as containers see it; the CRDs come from the chart."""
    cp = start_control_plane(control_plane_binaries, serving_hosts=[image_mod.HOST_LOOPBACK],
                             crd_paths=[ROOT / "config" / "crd" / "capi"])
    try:
        yield cp
    finally:
        cp.stop()


@pytest.fixture(scope="module")
def built(request) -> image_mod.Built:
    """The image of this checkout under the tag the release is installed with (podman must work: no skipping);
    both of the test's tags are removed at the end."""
    try:
        built = image_mod.build(ROOT, f"localhost/metal3-ipam:{INSTALL_TAG}", image_mod.base_image())
    except image_mod.ImageError as err:
        pytest.fail(f"the image could not be built:\n{err}", pytrace=False)
    report(request, f"image {built.tag}: built in {built.seconds:.0f}s")
    try:
        yield built
    finally:
        for tag in (INSTALL_TAG, UPGRADE_TAG):
            image_mod.podman("image", "rm", f"localhost/metal3-ipam:{tag}", check=False)


def manifest(helm: Helm, plane) -> list[dict]:
    """What the release holds (``helm get manifest``)."""
    done = helm.run("get", "manifest", RELEASE, "--namespace", NAMESPACE, kubeconfig=plane.kubeconfig)
    return [doc for doc in yaml.safe_load_all(done.stdout) if doc]


def the_services_again(admin, objects: list[dict]) -> None:
    """The webhook configurations and conversion webhooks as the chart made them (calling the Service)."""
    for obj in objects:
        if obj["kind"] in ("ValidatingWebhookConfiguration", "MutatingWebhookConfiguration"):
            answer = call(admin, "PATCH", object_path(obj), {"webhooks": obj["webhooks"]},
                          "application/merge-patch+json")
            assert answer.status == 200, answer.message
        conversion = ((obj.get("spec") or {}).get("conversion") or {}).get("webhook")
        if obj["kind"] == "CustomResourceDefinition" and conversion:
            config = {**conversion["clientConfig"], "url": None}
            client.ApiextensionsV1Api(admin).patch_custom_resource_definition(
                obj["metadata"]["name"], {"spec": {"conversion": {"webhook": {"clientConfig": config}}}})


def running_deployment(admin) -> tuple[dict, dict]:
    """The pod spec and manager container of the Deployment as the API server holds it (what a kubelet runs)."""
    deployment = client.AppsV1Api(admin).read_namespaced_deployment(f"{RELEASE}-controller-manager", NAMESPACE)
    pod = admin.sanitize_for_serialization(deployment.spec.template.spec)
    (container,) = [c for c in pod["containers"] if c["name"] == "manager"]
    return pod, container


def kubelet_for(plane, admin, pod, container, certs: Path, webhook_port: int, folder: Path) -> image_mod.Kubelet:
    (secret,) = [v["secret"]["secretName"] for v in pod["volumes"] if "secret" in v]
    ports = {p["name"]: p["containerPort"] for p in container["ports"]}
    return image_mod.Kubelet(
        secrets={secret: certs}, fields={"metadata.namespace": NAMESPACE},
        service_account=image_mod.service_account_folder(admin, pod, NAMESPACE, plane.ca_file, folder),
        api_port=int(plane.server.rpartition(":")[2]),
        published={number: webhook_port if name == "webhook-server" else free_port() for name, number in ports.items()})


def stopped(running: image_mod.Container) -> None:
    """SIGTERM, as a rollout sends it: the controller ends with status 0, without a traceback (how long it takes
    is the image test's concern)."""
    code, _ = running.terminate()
    log = running.logs()
    assert code == 0 and "Traceback" not in log, f"exit code {code}; log:\n{log[-4000:]}"


def kept_objects(admin) -> dict[tuple[str, str, str], tuple[str, object]]:
    """(resource, namespace, name) -> (uid, spec) of every pool, claim and address."""
    custom = client.CustomObjectsApi(admin)
    out = {}
    for group_version, plural in KEPT:
        group, version = group_version.split("/")
        for obj in custom.list_cluster_custom_object(group, version, plural)["items"]:
            meta = obj["metadata"]
            out[(f"{plural}.{group}", meta.get("namespace", ""), meta["name"])] = (meta["uid"], obj.get("spec"))
    return out


def crd_uids(admin) -> dict[str, str]:
    return {crd.metadata.name: crd.metadata.uid
            for crd in client.ApiextensionsV1Api(admin).list_custom_resource_definition().items}


def test_helm_install_serves_claims_and_upgrade_and_uninstall_keep_every_pool_claim_and_address(
        helm, plane, built, tmp_path, request):
    with plane.api_client() as admin:
        started = time.monotonic()
        helm.run("install", RELEASE, str(CHART), "--namespace", NAMESPACE, "--create-namespace",
                 "--set", f"image.tag={INSTALL_TAG}", kubeconfig=plane.kubeconfig)
        report(request, f"helm install: {time.monotonic() - started:.1f}s")
        objects = manifest(helm, plane)
        pod, container = running_deployment(admin)
        assert container["image"] == built.tag

        certs = tmp_path / "webhook-server-cert"
        authority = Authority.create()
        authority.issue(certs)
        image_mod.readable(certs)
        webhook_port = free_port()
        secret_before = client.CoreV1Api(admin).read_namespaced_secret("webhook-server-cert", NAMESPACE).data
        crds_before = crd_uids(admin)

        kubelet = kubelet_for(plane, admin, pod, container, certs, webhook_port, tmp_path / "sa-1")
        with image_mod.Container(pod, container, kubelet) as running:
            use_webhooks_at(admin, objects, webhook_port, authority.pem)
            running.wait_ready()
            serves_claims_and_webhooks(admin, CLAIMS_NAMESPACE, pod_namespace=NAMESPACE)
            stopped(running)
        before = kept_objects(admin)
        assert {resource for resource, _, _ in before} == \
            {f"{plural}.{gv.split('/')[0]}" for gv, plural in KEPT}, sorted(before)

        # A new image tag (the same build under another name), then helm upgrade to it.
        image_mod.podman("tag", built.tag, f"localhost/metal3-ipam:{UPGRADE_TAG}")
        the_services_again(admin, objects)
        started = time.monotonic()
        helm.run("upgrade", RELEASE, str(CHART), "--namespace", NAMESPACE, "--reuse-values",
                 "--set", f"image.tag={UPGRADE_TAG}",
                 kubeconfig=plane.kubeconfig)
        report(request, f"helm upgrade: {time.monotonic() - started:.1f}s")
        objects = manifest(helm, plane)
        pod, container = running_deployment(admin)
        assert container["image"] == f"localhost/metal3-ipam:{UPGRADE_TAG}"
        # The chart's certificate, the CRDs and everything in them are the ones of before.
        assert client.CoreV1Api(admin).read_namespaced_secret("webhook-server-cert", NAMESPACE).data == \
            secret_before
        assert crd_uids(admin) == crds_before
        assert kept_objects(admin) == before

        kubelet = kubelet_for(plane, admin, pod, container, certs, webhook_port, tmp_path / "sa-2")
        with image_mod.Container(pod, container, kubelet) as running:
            use_webhooks_at(admin, objects, webhook_port, authority.pem)
            running.wait_ready()
            kube = Kube(admin, CLAIMS_NAMESPACE)
            kube.claim("after-upgrade", "p")
            assert kube.bound("after-upgrade", timeout=60)["spec"]["address"] == "10.0.0.3"
            assert_invariants(kube)
            stopped(running)
        after = kept_objects(admin)
        assert {k: v for k, v in after.items() if k in before} == before

        # helm uninstall keeps the CRDs (helm.sh/resource-policy: keep), and so every object; installing the
        # release again takes them up.
        the_services_again(admin, objects)
        helm.run("uninstall", RELEASE, "--namespace", NAMESPACE, kubeconfig=plane.kubeconfig)
        assert crd_uids(admin) == crds_before
        assert kept_objects(admin) == after
        helm.run("install", RELEASE, str(CHART), "--namespace", NAMESPACE, kubeconfig=plane.kubeconfig)
        assert crd_uids(admin) == crds_before
