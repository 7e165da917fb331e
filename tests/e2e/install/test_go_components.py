"""The Go providers' own released components, with only the image changed to this one, run as they say.

The Go in-cluster provider's file (``in-cluster-components.yaml``) is run the same way, with its CRDs and RBAC
only (no ipam.metal3.io): ready (the Metal3 kinds said not served), its webhooks answer, an invalid pool is
refused, a v1alpha1 pool converts, claims of its four kinds are bound (their locks Leases in its namespace), it
leads on the provider's own Lease, and SIGTERM ends it. For the Go Metal3 IPAM's:

The file (``data/go-components/metal3-ipam-components.yaml``, rendered from
the Go provider's ``config/default``) is applied to a control plane as
clusterctl applies it (its variables given their defaults), with the CRDs
of Cluster API and cert-manager beside it and the serving certificate that
cert-manager would issue made by the test. Its manager container is then
run by podman exactly as its Deployment says: ``command: [/manager]``, its
arguments, probes, security context and mounts, and in-cluster credentials
from a token of its own ServiceAccount, so the Go provider's RBAC is all it
has. It becomes ready on the Deployment's probe port; every webhook path of
the file answers (the defaulting ones too: ``failurePolicy: Fail``); an
invalid pool is refused; claims of both APIs are bound; no Lease is taken
(the Deployment does not pass ``--leader-elect``); ``/metrics`` is served
on the diagnostics port over HTTPS for authorised callers only; SIGTERM
ends it within the grace period.
"""

from __future__ import annotations

import http.client
import re
import ssl
from pathlib import Path

import pytest
import yaml
from kubernetes import client
from kubernetes.client.rest import ApiException

from controller_fixtures import CAPI, REPO, Kube, check_invariants, free_port, start_control_plane
from metal3_ipam.core.objects import is_guard
from metal3_ipam.testing import image as image_mod
from metal3_ipam.testing.locks import lease_locks
from metal3_ipam.testing.waiting import eventually
from metal3_ipam.testing.certs import Authority
from image_fixtures import CERT_MANAGER_CRDS, kubelet_for
from webhook_fixtures import (call, install, new_namespace, use_webhooks_at,
                              wait_until_webhooks_answer)

METAL3_COMPONENTS = REPO / "tests" / "fixtures" / "go-components" / "metal3-ipam-components.yaml"
_VARIABLE = re.compile(r"\$\{([A-Za-z0-9_]+):=([^}]*)\}")


def components(path: Path, image: str) -> list[dict]:
    """The file as clusterctl applies it (each ``${VAR:=default}`` its default), its manager's image replaced."""
    text = _VARIABLE.sub(lambda m: m.group(2), path.read_text())
    objects = [obj for obj in yaml.safe_load_all(text) if obj]
    for obj in objects:
        if obj["kind"] == "Deployment":
            for container in obj["spec"]["template"]["spec"]["containers"]:
                if container["name"] == "manager":
                    container["image"] = image
    return objects


def _installed(control_plane_binaries, tmp_path_factory, path, image: str, certs_name: str):
    """A control plane with a Go provider's components file applied as clusterctl applies it (only the image
    changed), its webhooks pointed at a port of this machine with a certificate of their Service's name."""
    objects = components(path, image)
    plane = start_control_plane(control_plane_binaries, serving_hosts=[image_mod.HOST_LOOPBACK],
                                crd_paths=[REPO / "config" / "crd" / "capi", CERT_MANAGER_CRDS])
    try:
        with plane.api_client() as admin:
            install(admin, objects, "clusterctl")
            certs = tmp_path_factory.mktemp(certs_name)
            authority = Authority.create()
            authority.issue(certs)
            image_mod.readable(certs)
            webhook_port = free_port()
            use_webhooks_at(admin, objects, webhook_port, authority.pem)
            yield objects, (plane, admin, certs, webhook_port)
    finally:
        plane.stop()


@pytest.fixture(scope="module")
def metal3_go(control_plane_binaries, built, tmp_path_factory):
    yield from _installed(control_plane_binaries, tmp_path_factory, METAL3_COMPONENTS, built.tag,
                          "ipam-webhook-service-cert")


def _https_status(port: int, token: str | None = None) -> int:
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
    context.check_hostname, context.verify_mode = False, ssl.CERT_NONE
    conn = http.client.HTTPSConnection("127.0.0.1", port, context=context, timeout=10)
    try:
        conn.request("GET", "/metrics", headers={"Authorization": f"Bearer {token}"} if token else {})
        return conn.getresponse().status
    finally:
        conn.close()


def test_the_go_metal3_components_run_this_image_unchanged_but_for_the_image(metal3_go, tmp_path):
    objects, installed = metal3_go
    plane, admin, certs, webhook_port = installed
    (deployment,) = [o for o in objects if o["kind"] == "Deployment"]
    namespace = deployment["metadata"]["namespace"]
    pod = deployment["spec"]["template"]["spec"]
    (container,) = pod["containers"]
    assert container["command"] == ["/manager"] and "env" not in container  # no POD_NAMESPACE either
    kubelet = kubelet_for(installed, pod, container, tmp_path, namespace=namespace)
    with image_mod.Container(pod, container, kubelet) as running:
        running.wait_ready()
        assert running.probe("livenessProbe") == 200
        log = running.logs()
        assert "Traceback" not in log, log[-4000:]

        wait_until_webhooks_answer(admin)
        ns = new_namespace(admin, "go-metal3")
        kube = Kube(admin, ns)
        # Through the defaulting and validating webhooks of the file (failurePolicy Fail): the pool is
        # defaulted as the Go IPAM defaults it, the claims and the addresses the controller writes pass.
        pool = kube.pool("p", pools=[{"start": "10.0.0.1", "end": "10.0.0.9"}])
        assert pool["spec"]["allocationStrategy"] == "sequential"
        kube.claim("c", "p")
        kube.capi_claim("d", "p")
        served = {kube.bound("c", timeout=60)["spec"]["address"], kube.capi_bound("d", timeout=60)["spec"]["address"]}
        assert served == {"10.0.0.1", "10.0.0.2"}
        # No IP twice. (The Go CRDs have no schema for the counts and conditions this controller adds to
        # status: the API server prunes them, so "converged" in this project's sense is not asked.)
        findings = check_invariants(kube)
        assert not findings.broken, findings
        refused = call(admin, "POST", f"/apis/ipam.metal3.io/v1alpha1/namespaces/{ns}/ippools",
                       {"apiVersion": "ipam.metal3.io/v1alpha1", "kind": "IPPool", "metadata": {"name": "q"},
                        "spec": {"namePrefix": "q", "pools": [{"start": "10.0.1.9", "end": "10.0.1.1"}]}},
                       "application/json")
        assert refused.status in (400, 422) and "admission webhook" in refused.message, refused.message

        # No leader election without --leader-elect, as in Go: no Lease in the controller's namespace.
        with pytest.raises(ApiException) as missing:
            client.CoordinationV1Api(admin).read_namespaced_lease("controller-leader-election-ipam-capm3", namespace)
        assert missing.value.status == 404

        # The diagnostics endpoint of the Deployment's `metrics` port: HTTPS, reviewed by the API server.
        metrics = running.port("metrics")
        assert _https_status(metrics) == 401
        image_mod.ends_cleanly(running)


# -- the Go in-cluster provider's components ------------------------------------------------------------------

IN_CLUSTER_COMPONENTS = REPO / "tests" / "fixtures" / "go-components" / "in-cluster-components.yaml"
IC = "ipam.cluster.x-k8s.io"


def _pool(kind: str, name: str, spec: dict, version: str = "v1alpha2") -> dict:
    return {"apiVersion": f"{IC}/{version}", "kind": kind, "metadata": {"name": name}, "spec": spec}


@pytest.fixture(scope="module")
def in_cluster_go(control_plane_binaries, built, tmp_path_factory):
    """The in-cluster provider's file applied as clusterctl applies it: its CRDs and RBAC, no ipam.metal3.io."""
    yield from _installed(control_plane_binaries, tmp_path_factory, IN_CLUSTER_COMPONENTS, built.tag,
                          "in-cluster-webhook-service-cert")


def test_the_go_in_cluster_components_run_this_image_unchanged_but_for_the_image(in_cluster_go, tmp_path):
    objects, installed = in_cluster_go
    plane, admin, certs, webhook_port = installed
    (deployment,) = [o for o in objects if o["kind"] == "Deployment"]
    namespace = deployment["metadata"]["namespace"]
    pod = deployment["spec"]["template"]["spec"]
    (container,) = [c for c in pod["containers"] if c["name"] == "manager"]
    assert container["command"] == ["/manager"] and container["args"] == ["--leader-elect"]
    assert call(admin, "GET", "/apis/ipam.metal3.io").status == 404  # only the provider's CRDs
    kubelet = kubelet_for(installed, pod, container, tmp_path, namespace=namespace)
    with image_mod.Container(pod, container, kubelet) as running:
        running.wait_ready()
        assert running.probe("livenessProbe") == 200
        # The kinds whose CRDs are missing are not served: one line in the log, and said by /readyz.
        log = running.logs()
        assert "Traceback" not in log, log[-4000:]
        assert [line for line in log.splitlines() if "ipam.metal3.io is not served" in line], log[-4000:]
        said = running.said("readinessProbe")
        assert said.startswith("ok") and "not served (CRD not installed)" in said and "IPPool.ipam.metal3.io" in said

        invalid = _pool("InClusterIPPool", "probe", {"addresses": ["10.0.0.9-10.0.0.1"], "prefix": 24})
        wait_until_webhooks_answer(admin, invalid)
        ns = new_namespace(admin, "go-in-cluster")
        kube = Kube(admin, ns)
        refused = call(admin, "POST", f"/apis/{IC}/v1alpha2/namespaces/{ns}/inclusterippools", invalid,
                       "application/json")
        assert refused.status in (400, 422) and "admission webhook" in refused.message, refused.message

        # A v1alpha1 pool is converted by this controller's /convert, as the provider's CRDs ask.
        old = call(admin, "POST", f"/apis/{IC}/v1alpha1/namespaces/{ns}/inclusterippools",
                   _pool("InClusterIPPool", "old", {"subnet": "10.8.0.0/24", "start": "10.8.0.10",
                                                    "end": "10.8.0.12"}, "v1alpha1"), "application/json")
        assert old.status == 201, old.message
        converted = call(admin, "GET", f"/apis/{IC}/v1alpha2/namespaces/{ns}/inclusterippools/old").body
        assert converted["spec"]["addresses"] == ["10.8.0.10-10.8.0.12"] and converted["spec"]["prefix"] == 24

        # Claims of the four kinds, bound with the provider's RBAC only; their locks are Leases in its namespace.
        suffix = ns.rpartition("-")[2]
        pools = [("InClusterIPPool", "ip", {"addresses": ["10.5.0.1-10.5.0.3"], "prefix": 24}),
                 ("GlobalInClusterIPPool", f"gip-{suffix}", {"addresses": ["10.6.0.1-10.6.0.3"], "prefix": 24}),
                 ("InClusterPrefixPool", "pp", {"prefixes": ["fd00:5::/56"], "allocationPrefixLength": 64}),
                 ("GlobalInClusterPrefixPool", f"gpp-{suffix}",
                  {"prefixes": ["fd00:6::/56"], "allocationPrefixLength": 64})]
        for kind, name, spec in pools:
            plural = f"{kind.lower()}s"
            where = "" if kind.startswith("Global") else f"namespaces/{ns}/"
            made = call(admin, "POST", f"/apis/{IC}/v1alpha2/{where}{plural}", _pool(kind, name, spec),
                        "application/json")
            assert made.status == 201, made.message
            kube.capi_claim(f"c-{kind.lower()}", name, group=IC, kind=kind)
        served = {kind: kube.capi_bound(f"c-{kind.lower()}", timeout=60)["spec"]["address"] for kind, _, _ in pools}
        assert served == {"InClusterIPPool": "10.5.0.1", "GlobalInClusterIPPool": "10.6.0.1",
                          "InClusterPrefixPool": "fd00:5::", "GlobalInClusterPrefixPool": "fd00:6::"}, served
        locks = lease_locks(admin, namespace)
        assert {lk["spec"]["address"] for lk in locks if not is_guard(lk)} == set(served.values()), locks
        # Leader election on the provider's own Lease, as its Deployment asks (--leader-elect).
        lease = client.CoordinationV1Api(admin).read_namespaced_lease("7bb7acb4.ipam.cluster.x-k8s.io", namespace)
        assert lease.spec.holder_identity
        log = running.logs()
        assert "Traceback" not in log, log[-4000:]
        # A refusal, not a port or a resourceVersion whose digits begin with 403.
        assert not [line for line in log.splitlines() if re.search(r"\b403\b", line) and "Event" not in line], \
            log[-4000:]

        image_mod.ends_cleanly(running)

    # Started again, it lists the locks (the Leases): a claim released now lets its Lease go.
    with image_mod.Container(pod, container, kubelet) as again:
        again.wait_ready()
        kube.delete(CAPI, "ipaddressclaims", "c-inclusterippool")
        kube.gone(CAPI, "ipaddressclaims", "c-inclusterippool")
        eventually(lambda: "10.5.0.1" not in {lk["spec"]["address"] for lk in lease_locks(admin, namespace)},
                   timeout=30, what="the Lease of the released claim's lock gone")
        image_mod.ends_cleanly(again)
