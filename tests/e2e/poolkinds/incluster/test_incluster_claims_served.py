"""Claims of the in-cluster provider's pool kinds served by the controller on the real API server: the
address objects it makes must be ones the API server accepts (their names included)."""

from __future__ import annotations

from controller_fixtures import CAPI, METAL3
from metal3_ipam.core import objects as o
from metal3_ipam.testing.waiting import eventually

GROUP, VERSION = "ipam.cluster.x-k8s.io", "v1alpha2"


def test_a_claim_of_an_in_cluster_ip_pool_is_served_and_released(controller, kube):
    kube.create((GROUP, VERSION), "inclusterippools",
                {"apiVersion": f"{GROUP}/{VERSION}", "kind": "InClusterIPPool", "metadata": {"name": "p"},
                 "spec": {"addresses": ["10.30.0.10-10.30.0.12"], "prefix": 24, "gateway": "10.30.0.1"}})
    kube.capi_claim("m0", "p", group=GROUP, kind="InClusterIPPool")
    address = kube.capi_bound("m0")
    assert (address["spec"]["address"], address["spec"]["prefix"], address["spec"]["gateway"]) == \
        ("10.30.0.10", 24, "10.30.0.1")
    # Its lock and its IP's guard in the namespace (every InClusterIPPool allocation writes one: see
    # docs/pools/incluster.md) are Leases of the lock namespace; where the Metal3 IPAddresses are served, each is
    # one of those too, of the same name (what an earlier version writes and reads).
    at_ip = [a for a in kube.locks() if a["spec"]["address"] == "10.30.0.10"]
    [lock] = [a for a in at_ip if not o.is_guard(a)]
    assert lock["spec"]["claim"]["name"] == "m0" and lock["spec"]["pool"]["kind"] == "InClusterIPPool"
    [guard] = [a for a in at_ip if o.is_guard(a)]
    assert guard["metadata"]["name"] == "10-30-0-10.nsip"
    twins = {a["metadata"]["name"]: a for a in kube.list(METAL3, "ipaddresses") if a["spec"]["address"] == "10.30.0.10"}
    assert set(twins) == {lock["metadata"]["name"], guard["metadata"]["name"]}
    assert twins[lock["metadata"]["name"]]["spec"] == lock["spec"]

    kube.delete(CAPI, "ipaddressclaims", "m0")
    kube.gone(CAPI, "ipaddressclaims", "m0")
    kube.gone(CAPI, "ipaddresses", "m0")
    eventually(lambda: not [a for a in kube.locks() if a["spec"]["address"] == "10.30.0.10"], timeout=30,
               what="the lock and the guard of m0 gone")
    kube.gone(METAL3, "ipaddresses", lock["metadata"]["name"])
    kube.gone(METAL3, "ipaddresses", guard["metadata"]["name"])


def test_claims_of_one_name_in_a_global_in_cluster_ip_pool_are_served_in_their_namespaces(controller, kube):
    """Two claims named alike, in two namespaces, each given its own IP of one GlobalInClusterIPPool."""
    import uuid

    from controller_fixtures import Kube

    other = Kube(kube.api_client, f"{kube.ns}-b")
    kube.core.create_namespace({"metadata": {"name": other.ns}})
    name = f"global-{uuid.uuid4().hex[:6]}"
    kube.custom.create_cluster_custom_object(GROUP, VERSION, "globalinclusterippools", {
        "apiVersion": f"{GROUP}/{VERSION}", "kind": "GlobalInClusterIPPool", "metadata": {"name": name},
        "spec": {"addresses": ["10.31.0.10-10.31.0.12"], "prefix": 24}})
    try:
        for where in (kube, other):
            where.capi_claim("m0", name, group=GROUP, kind="GlobalInClusterIPPool")
        ips = {where.capi_bound("m0")["spec"]["address"] for where in (kube, other)}
        assert len(ips) == 2 and ips <= {"10.31.0.10", "10.31.0.11", "10.31.0.12"}, ips
        for where in (kube, other):
            where.delete(CAPI, "ipaddressclaims", "m0")
            where.gone(CAPI, "ipaddresses", "m0")
    finally:
        kube.custom.delete_cluster_custom_object(GROUP, VERSION, "globalinclusterippools", name)
        kube.core.delete_namespace(other.ns)

    def pool_gone():
        try:
            kube.custom.get_cluster_custom_object(GROUP, VERSION, "globalinclusterippools", name)
        except Exception as err:  # noqa: BLE001  (the 404 is what is waited for)
            return getattr(err, "status", None) == 404
        return False

    eventually(pool_gone, timeout=30, what=f"GlobalInClusterIPPool {name} to go once its addresses are gone")
