"""Claims of the in-cluster provider's pool kinds served by the controller on the real API server: the
address objects it makes must be ones the API server accepts (their names included)."""

from __future__ import annotations

from controller_fixtures import CAPI, METAL3, controller, kube, shared_controller  # noqa: F401  (fixtures)

GROUP, VERSION = "ipam.cluster.x-k8s.io", "v1alpha2"


def test_a_claim_of_an_in_cluster_ip_pool_is_served_and_released(controller, kube):
    kube.create((GROUP, VERSION), "inclusterippools",
                {"apiVersion": f"{GROUP}/{VERSION}", "kind": "InClusterIPPool", "metadata": {"name": "p"},
                 "spec": {"addresses": ["10.30.0.10-10.30.0.12"], "prefix": 24, "gateway": "10.30.0.1"}})
    kube.capi_claim("m0", "p", group=GROUP, kind="InClusterIPPool")
    address = kube.capi_bound("m0")
    assert (address["spec"]["address"], address["spec"]["prefix"], address["spec"]["gateway"]) == \
        ("10.30.0.10", 24, "10.30.0.1")
    [lock] = [a for a in kube.list(METAL3, "ipaddresses") if a["spec"]["address"] == "10.30.0.10"]
    assert lock["spec"]["claim"]["name"] == "m0" and lock["spec"]["pool"]["kind"] == "InClusterIPPool"

    kube.delete(CAPI, "ipaddressclaims", "m0")
    kube.gone(CAPI, "ipaddressclaims", "m0")
    kube.gone(CAPI, "ipaddresses", "m0")
    kube.gone(METAL3, "ipaddresses", lock["metadata"]["name"])
