"""Pause and the Cluster of a claim of the in-cluster provider's pools, on the real API server.

The provider's scenarios written anew: a claim whose Cluster (named by ``spec.clusterName`` or by the
``cluster.x-k8s.io/cluster-name`` label) is paused — by ``spec.paused`` or by the paused annotation —
gets nothing until the Cluster is unpaused; a claim paused itself likewise; a claim whose Cluster is
not found gets nothing (and, better than the provider, says why on its ``Ready`` condition) until the
Cluster appears; a served claim whose Cluster is gone is released when deleted, even from a paused
pool (where the provider would hold it forever).
"""

from __future__ import annotations

import pytest

from controller_fixtures import CLUSTER_NAME_LABEL, PAUSED, holds_for
from metal3_ipam.testing import go_incluster as gi

HOLD = 3.0  # how long "nothing happens" is watched for; a served claim takes well under a second


def _pool(incluster) -> None:
    incluster.ip_pool("p", prefix=24, gateway="10.0.0.1", addresses=["10.0.0.2-10.0.0.254"])


def _nothing_for(incluster, name: str, what: str) -> None:
    holds_for(lambda: incluster.get_address(name) is None and
              not ((incluster.get_claim(name) or {}).get("status") or {}).get("addressRef"), HOLD, what)


@pytest.mark.parametrize("named_by", ["spec.clusterName", "label"])
@pytest.mark.parametrize("paused_by", ["spec.paused", "annotation"])
def test_a_claim_of_a_paused_cluster_waits_until_it_is_unpaused(controller, incluster, named_by, paused_by):
    _pool(incluster)
    incluster.cluster("c1", paused=paused_by == "spec.paused",
                      annotations={PAUSED: ""} if paused_by == "annotation" else None)
    if named_by == "label":
        incluster.claim("m", "p", labels={CLUSTER_NAME_LABEL: "c1"})
    else:
        incluster.claim("m", "p", cluster_name="c1")
    _nothing_for(incluster, "m", f"nothing allocated while the Cluster is paused by {paused_by}")

    if paused_by == "annotation":
        incluster.patch_cluster("c1", {"metadata": {"annotations": {PAUSED: None}}})
    else:
        incluster.patch_cluster("c1", {"spec": {"paused": False}})
    address = incluster.served("m")
    assert address["spec"]["address"] == "10.0.0.2"
    # The provider copies the label, never spec.clusterName.
    labels = address["metadata"].get("labels") or {}
    assert labels == ({CLUSTER_NAME_LABEL: "c1"} if named_by == "label" else {}), labels


def test_a_claim_whose_cluster_appears_paused_waits_for_it(controller, incluster):
    """Claim first, then its Cluster created paused: nothing until it is unpaused."""
    _pool(incluster)
    incluster.claim("m", "p", labels={CLUSTER_NAME_LABEL: "c1"})
    incluster.not_ready("m", "WaitingForCluster")
    incluster.cluster("c1", paused=True)
    _nothing_for(incluster, "m", "nothing allocated while the Cluster is paused")
    incluster.patch_cluster("c1", {"spec": {"paused": False}})
    assert incluster.ip("m") == "10.0.0.2"


@pytest.mark.parametrize("named_by", ["spec.clusterName", "label"])
def test_a_claim_whose_cluster_is_not_found_waits_and_says_so(controller, incluster, named_by):
    _pool(incluster)
    if named_by == "label":
        incluster.claim("m", "p", labels={CLUSTER_NAME_LABEL: "an-unfindable-cluster"})
    else:
        incluster.claim("m", "p", cluster_name="an-unfindable-cluster")
    ready = incluster.not_ready("m", "WaitingForCluster")
    assert "an-unfindable-cluster" in ready["message"], ready
    _nothing_for(incluster, "m", "nothing allocated while the Cluster is missing")
    incluster.cluster("an-unfindable-cluster")
    assert incluster.ip("m") == "10.0.0.2"


def test_a_paused_claim_waits_until_it_is_unpaused(controller, incluster):
    _pool(incluster)
    incluster.claim("m", "p", annotations={PAUSED: ""})
    _nothing_for(incluster, "m", "nothing allocated while the claim is paused")
    incluster.writer.patch(incluster.get_claim("m"), {"metadata": {"annotations": {PAUSED: None}}})
    address = incluster.served("m")
    assert address["spec"]["address"] == "10.0.0.2"
    assert address["metadata"]["finalizers"] == [gi.ADDRESS_FINALIZER]


@pytest.mark.parametrize("pool_paused", [False, True], ids=["pool", "paused-pool"])
def test_a_claim_whose_cluster_is_gone_is_released_when_deleted(controller, incluster, pool_paused):
    """Served while its Cluster existed; the Cluster deleted, then the claim: the claim and its address go,
    also when the pool is paused (the provider checks the pool's pause first and holds the claim)."""
    _pool(incluster)
    incluster.cluster("c1")
    incluster.claim("m", "p", cluster_name="c1")
    incluster.served("m")
    incluster.delete_cluster("c1")
    if pool_paused:
        incluster.writer.patch(incluster.pool("p"), {"metadata": {"annotations": {PAUSED: ""}}})
    incluster.delete_claim("m")
    incluster.claim_gone("m")
