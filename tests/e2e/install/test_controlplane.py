"""Smoke tests of the control plane the end-to-end tests run on.

They prove that what the other e2e tests rely on is real: the CRDs are served,
the API server enforces the OpenAPI schema and CEL rules of our CRDs, the
garbage collector honours owner references, and control planes are isolated.
"""

from __future__ import annotations

import os
import time
import uuid

import pytest
import yaml
from kubernetes import client, config
from kubernetes.client.rest import ApiException

from controller_fixtures import METAL3, REPO
from metal3_ipam.testing.controlplane import default_crd_paths
from metal3_ipam.testing.waiting import eventually

CAPI_IPAM = "ipam.cluster.x-k8s.io"

PROJECT_CRDS = {"ippools.ipam.metal3.io", "ipclaims.ipam.metal3.io", "ipaddresses.ipam.metal3.io",
                "netboxippools.netbox.metal3-ipam.io"}
CAPI_CRDS = {
    "clusters.cluster.x-k8s.io",
    "ipaddressclaims.ipam.cluster.x-k8s.io",
    "ipaddresses.ipam.cluster.x-k8s.io",
}


def _crd_names_on_disk() -> set[str]:
    names = set()
    for d in default_crd_paths(REPO):
        for f in sorted(d.glob("*.y*ml")):
            for doc in yaml.safe_load_all(f.read_text()):
                if doc and doc.get("kind") == "CustomResourceDefinition":
                    names.add(doc["metadata"]["name"])
    return names


def _ippool(name: str, **spec) -> dict:
    body = {
        "apiVersion": "/".join(METAL3),
        "kind": "IPPool",
        "metadata": {"name": name},
        "spec": {"namePrefix": "test", "pools": [{"start": "192.168.0.10", "end": "192.168.0.20"}], "prefix": 24},
    }
    body["spec"].update(spec)
    return body


def _error_message(exc: ApiException) -> str:
    return f"{exc.status} {exc.reason} {exc.body}"


def test_crds_established(control_plane, api_client):
    on_disk = _crd_names_on_disk()
    assert CAPI_CRDS <= on_disk, "config/crd/capi is incomplete"
    assert PROJECT_CRDS <= on_disk, f"config/crd/bases lacks {sorted(PROJECT_CRDS - on_disk)}"
    ext = client.ApiextensionsV1Api(api_client)
    for name in sorted(on_disk):
        crd = ext.read_custom_resource_definition(name)
        conditions = {c.type: c.status for c in crd.status.conditions}
        assert conditions.get("Established") == "True", (name, conditions)
        assert conditions.get("NamesAccepted") == "True", (name, conditions)


def test_valid_ippool_accepted(api_client, namespace):
    api = client.CustomObjectsApi(api_client)
    created = api.create_namespaced_custom_object(*METAL3, namespace, "ippools", _ippool("pool-ok"))
    assert created["spec"]["namePrefix"] == "test"
    got = api.get_namespaced_custom_object(*METAL3, namespace, "ippools", "pool-ok")
    assert got["spec"]["pools"] == [{"start": "192.168.0.10", "end": "192.168.0.20"}]
    assert got["metadata"]["uid"] == created["metadata"]["uid"]


def test_ippool_without_name_prefix_rejected(api_client, namespace):
    api = client.CustomObjectsApi(api_client)
    body = _ippool("pool-no-prefix")
    del body["spec"]["namePrefix"]
    with pytest.raises(ApiException) as info:
        api.create_namespaced_custom_object(*METAL3, namespace, "ippools", body)
    assert info.value.status == 422, _error_message(info.value)
    assert "spec.namePrefix" in info.value.body, _error_message(info.value)


def test_name_prefix_immutable(api_client, namespace):
    api = client.CustomObjectsApi(api_client)
    api.create_namespaced_custom_object(*METAL3, namespace, "ippools", _ippool("pool-immutable"))
    with pytest.raises(ApiException) as info:
        api.patch_namespaced_custom_object(
            *METAL3, namespace, "ippools", "pool-immutable", {"spec": {"namePrefix": "other"}}
        )
    assert info.value.status == 422, _error_message(info.value)
    assert "namePrefix is immutable" in info.value.body, _error_message(info.value)
    got = api.get_namespaced_custom_object(*METAL3, namespace, "ippools", "pool-immutable")
    assert got["spec"]["namePrefix"] == "test"


def test_capi_ipam_claim_served_in_both_versions(api_client, namespace):
    api = client.CustomObjectsApi(api_client)
    claim = {
        "apiVersion": f"{CAPI_IPAM}/v1beta1",
        "kind": "IPAddressClaim",
        "metadata": {"name": "claim-1"},
        "spec": {"poolRef": {"apiGroup": "ipam.metal3.io", "kind": "IPPool", "name": "pool"}},
    }
    api.create_namespaced_custom_object(CAPI_IPAM, "v1beta1", namespace, "ipaddressclaims", claim)
    v2 = api.get_namespaced_custom_object(CAPI_IPAM, "v1beta2", namespace, "ipaddressclaims", "claim-1")
    assert v2["spec"]["poolRef"] == claim["spec"]["poolRef"]
    # status is a subresource: writable through /status only
    v2["status"] = {
        "addressRef": {"name": "claim-1"},
        "conditions": [{"type": "Ready", "status": "True", "reason": "Allocated", "message": "",
                        "lastTransitionTime": "2025-01-01T00:00:00Z", "observedGeneration": 1}],
    }
    api.replace_namespaced_custom_object_status(CAPI_IPAM, "v1beta2", namespace, "ipaddressclaims", "claim-1", v2)
    v1 = api.get_namespaced_custom_object(CAPI_IPAM, "v1beta1", namespace, "ipaddressclaims", "claim-1")
    assert v1["status"]["addressRef"] == {"name": "claim-1"}

    bad = dict(claim, apiVersion=f"{CAPI_IPAM}/v1beta2", metadata={"name": "claim-bad"},
               spec={"poolRef": {"apiGroup": "ipam.metal3.io", "name": "p"}})
    with pytest.raises(ApiException) as info:
        api.create_namespaced_custom_object(CAPI_IPAM, "v1beta2", namespace, "ipaddressclaims", bad)
    assert info.value.status == 422 and "spec.poolRef.kind" in info.value.body, _error_message(info.value)


def test_owner_reference_garbage_collection(api_client, namespace):
    core = client.CoreV1Api(api_client)
    owner = core.create_namespaced_config_map(
        namespace, client.V1ConfigMap(metadata=client.V1ObjectMeta(name="owner"), data={"a": "1"})
    )
    ref = client.V1OwnerReference(
        api_version="v1", kind="ConfigMap", name="owner", uid=owner.metadata.uid, block_owner_deletion=True
    )
    core.create_namespaced_config_map(
        namespace, client.V1ConfigMap(metadata=client.V1ObjectMeta(name="dependent", owner_references=[ref]))
    )
    core.delete_namespaced_config_map("owner", namespace)

    def dependent_gone() -> bool:
        try:
            core.read_namespaced_config_map("dependent", namespace)
        except ApiException as exc:
            if exc.status == 404:
                return True
            raise
        return False

    eventually(dependent_gone, timeout=60, what="the garbage collector to delete the dependent ConfigMap")


def test_kubeconfig_file_works(control_plane):
    with config.new_client_from_config(config_file=str(control_plane.kubeconfig)) as api:
        version = client.VersionApi(api).get_code()
        assert version.git_version == "v1.35.4"
        review = client.AuthenticationV1Api(api).create_self_subject_review(
            client.V1SelfSubjectReview(api_version="authentication.k8s.io/v1", kind="SelfSubjectReview")
        )
        assert "system:masters" in review.status.user_info.groups


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    # a zombie is dead for our purposes
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0] != "Z"
    except OSError:
        return False


def test_two_control_planes_at_once(control_plane, api_client, control_plane_factory):
    started = time.monotonic()
    other = control_plane_factory()
    start_seconds = time.monotonic() - started
    assert other.server != control_plane.server
    assert other.dir != control_plane.dir
    assert other.etcd_url != control_plane.etcd_url

    name = f"only-in-other-{uuid.uuid4().hex[:6]}"
    with other.api_client() as other_api:
        client.CoreV1Api(other_api).create_namespace(client.V1Namespace(metadata=client.V1ObjectMeta(name=name)))
        client.CoreV1Api(other_api).read_namespace(name)
        # the second one is fully equipped too: CRDs and validation
        with pytest.raises(ApiException) as info:
            body = _ippool("p")
            del body["spec"]["namePrefix"]
            client.CustomObjectsApi(other_api).create_namespaced_custom_object(*METAL3, "default", "ippools", body)
        assert info.value.status == 422
    with pytest.raises(ApiException) as info:
        client.CoreV1Api(api_client).read_namespace(name)
    assert info.value.status == 404

    pids, directory = other.pids(), other.dir
    assert set(pids) == {"etcd", "kube-apiserver", "kube-controller-manager"}
    other.stop()
    assert not any(_alive(pid) for pid in pids.values()), pids
    assert not directory.exists()
    assert "kube-apiserver" in other.logs()  # logs survive stop
    # the session control plane is unaffected
    client.CoreV1Api(api_client).list_namespace(limit=1)
    print(f"second control plane started in {start_seconds:.1f}s ({other.startup_seconds})")


def test_crds_applied_again_over_stored_pools_of_a_converted_kind(control_plane, api_client, namespace):
    """Applying config/crd again on a plane that holds in-cluster IP pools (as a clusterctl preparation does
    after other tests ran): the CRDs' v1alpha1 needs the controller's conversion webhook, which this plane
    does not run; the route is served all the same, and the apply says so rather than failing."""
    objects = client.CustomObjectsApi(api_client)
    objects.create_namespaced_custom_object(CAPI_IPAM, "v1alpha2", namespace, "inclusterippools", {
        "apiVersion": f"{CAPI_IPAM}/v1alpha2", "kind": "InClusterIPPool", "metadata": {"name": "stored"},
        "spec": {"addresses": ["10.9.0.1-10.9.0.9"], "prefix": 24}})
    with pytest.raises(ApiException) as refused:  # 429 while that version's cache cannot be filled
        objects.list_namespaced_custom_object(CAPI_IPAM, "v1alpha1", namespace, "inclusterippools")
    assert refused.value.status in (429, 500) and "conversion webhook" in refused.value.body, refused.value.body
    assert "inclusterippools.ipam.cluster.x-k8s.io" in control_plane.apply_crds(default_crd_paths(REPO))
