"""Claims of a Cluster that is not known wait for it, and say so on the claim.

``clusterctl move`` creates a Cluster before its claims, and a claim of it seen
first may still have a moved address on its way: given an IP now, it would end
with two (SPEC §10, 2 and 4). So a claim of a Cluster not known (by its label,
its v1beta2 ``spec.clusterName``, or its pool's ``spec.clusterName``) is given
nothing new until the Cluster is known; what it already holds, and its release,
go on as ever.
"""

from __future__ import annotations

from metal3_ipam.core import kinds
from metal3_ipam.core import objects as o
from metal3_ipam.memory import converge
from ipam_objects import (CAPI_V1BETA1, NS, capi_claim, cluster, converged, get, ip_of, ipclaim, ippool, loaded,
                          metal3_addresses, user_delete)

LABEL = {kinds.CLUSTER_NAME_LABEL: "c1"}


def _ready(obj: dict) -> dict:
    return next(c for c in o.status(obj)["conditions"] if c["type"] == "Ready")


def test_a_claim_of_a_cluster_not_known_waits_and_says_so_then_is_served_once_it_exists():
    api = converged(ippool(), ipclaim("a", labels=LABEL))
    assert metal3_addresses(api) == []
    claim = get(api, kinds.IPCLAIM, "a")
    ready = _ready(claim)
    assert (ready["status"], ready["reason"]) == ("False", "WaitingForCluster"), ready
    assert f"Cluster {NS}/c1 not found" in ready["message"], ready
    # Not a failure: Cluster API Metal3 takes an IPClaim's errorMessage for a failed machine.
    assert "errorMessage" not in o.status(claim)
    assert not [e for e in api.events if e.type == "Warning"], api.events

    api.load(cluster("c1"))
    converge(api)
    assert ip_of(api, "a") == "192.168.0.10"
    assert _ready(get(api, kinds.IPCLAIM, "a"))["status"] == "True"


def test_a_capi_claim_naming_its_cluster_in_spec_waits_too_and_v1beta1_says_it_as_information():
    v1beta2 = capi_claim("m2")
    v1beta2["spec"]["clusterName"] = "c1"
    v1beta1 = capi_claim("m1", api_version=CAPI_V1BETA1, labels=LABEL)
    api = converged(ippool(), v1beta2, v1beta1)
    assert metal3_addresses(api) == []
    assert _ready(get(api, kinds.CAPI_CLAIM, "m2"))["reason"] == "WaitingForCluster"
    condition = _ready(get(api, kinds.CAPI_CLAIM, "m1"))
    assert (condition["reason"], condition["severity"]) == ("WaitingForCluster", "Info"), condition


def test_a_pool_of_a_cluster_not_known_hands_out_nothing_and_says_so():
    api = converged(ippool(clusterName="c1"), ipclaim("a"))
    assert metal3_addresses(api) == []
    ready = _ready(get(api, kinds.IPPOOL, "pool1"))
    assert (ready["status"], ready["reason"]) == ("False", "WaitingForCluster"), ready
    assert "spec.clusterName" in ready["message"] and f"{NS}/c1" in ready["message"], ready
    assert _ready(get(api, kinds.IPCLAIM, "a"))["reason"] == "WaitingForCluster"

    api.load(cluster("c1"))
    converge(api)
    assert ip_of(api, "a") == "192.168.0.10"
    assert _ready(get(api, kinds.IPPOOL, "pool1"))["status"] == "True"


def test_what_a_claim_holds_is_kept_and_released_whether_its_cluster_is_known_or_not():
    """The Cluster is deleted (its claims orphaned, or its deletion seen before theirs): a claim keeps
    its address, and one deleted lets it go, as with the Cluster there."""
    api = converged(cluster("c1"), ippool(), ipclaim("a", labels=LABEL), ipclaim("b", labels=LABEL))
    before = {ip_of(api, "a"), ip_of(api, "b")}
    api.inventory.remove(get(api, kinds.CLUSTER, "c1"))
    user_delete(api, kinds.IPCLAIM, "b")
    converge(api)
    assert ip_of(api, "a") in before
    assert _ready(get(api, kinds.IPCLAIM, "a"))["status"] == "True"
    assert get(api, kinds.IPCLAIM, "b") is None, "the deleted claim was not released"
    assert [o.spec(a)["claim"]["name"] for a in metal3_addresses(api)] == ["a"]


def test_without_cluster_api_a_cluster_label_holds_nothing_up():
    """No Cluster kind is served (Cluster API is not installed): no Cluster will ever be known, and a
    claim carrying the label (copied from a template) is served as ever."""
    api = loaded(ippool(clusterName="c1"), ipclaim("a", labels=LABEL))
    api.inventory.clusters_served = False
    converge(api)
    assert ip_of(api, "a") == "192.168.0.10"


def test_plan_with_clusters_in_its_files_says_on_stderr_which_claims_wait_for_which_cluster(capsys, tmp_path):
    """``plan`` over files that hold Clusters, but not the one a claim names: the claim waits, as in the
    controller, and stderr says so (files without any Cluster plan as if every Cluster named runs)."""
    import yaml
    from cli_run import run

    files = tmp_path / "objects.yaml"
    files.write_text(yaml.safe_dump_all([cluster("other"), ippool(), ipclaim("a", labels=LABEL)]))
    code, out, err = run(capsys, "plan", "-f", str(files))
    assert code == 0
    assert not [d for d in yaml.safe_load_all(out) if d and d["kind"] == "IPAddress"]
    assert f"waits: IPClaim {NS}/a: Cluster {NS}/c1 not found" in err, err
