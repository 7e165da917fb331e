"""OpenStackFloatingIPPool's spec as the controller reads it (admission and the passes), and what a floating IP
carries: its description (the allocation key) and tags (the owner, the pool with its namespace)."""

from __future__ import annotations

import random

import pytest

from metal3_ipam.core import poolkind
from metal3_ipam.core.addresses import parse_ip
from metal3_ipam.poolkinds.openstack import pool as p
from metal3_ipam.poolkinds.openstack.kind import OPENSTACK_FLOATING_IP_POOL_KIND as KIND
from metal3_ipam.poolkinds import KINDS


def pool(**spec) -> dict:
    return {"apiVersion": p.API_VERSION, "kind": p.KIND, "metadata": {"name": "fips", "namespace": "ns"},
            "spec": {"identityRef": {"name": "cloud"}, **spec}}


def fields(obj) -> dict:
    return {problem.field: problem.message for problem in KIND.validate(obj)}


def test_the_kind_is_registered_and_serves_cluster_api_claims():
    assert KIND in KINDS
    assert poolkind.serves_claims_of(p.GROUP, p.KIND)
    assert KIND.outside is not None and KIND.outside.annotation == p.KEY_ANNOTATION


def test_a_pool_with_a_secret_only_takes_capos_defaults():
    model, problems = p.read_pool(pool())
    assert problems == []
    assert model.identity == p.Identity("cloud", "openstack", None)
    assert model.network == p.NetworkFilter() and model.network.query() == {"router:external": "true"}
    assert model.reclaim_policy == p.DELETE and model.deletes and model.max_ips is None


def test_a_network_is_named_by_id_or_by_filter_never_both():
    assert "spec.floatingIPNetwork" in fields(pool(floatingIPNetwork={"id": "6f0c8a64-1b1e-4f4e-9d0a-8cb1d7a7e2a1",
                                                                      "filter": {"name": "public"}}))
    assert "spec.floatingIPNetwork.id" in fields(pool(floatingIPNetwork={"id": "public"}))
    assert "spec.floatingIPNetwork.filter" in fields(pool(floatingIPNetwork={"filter": {}}))
    model, _ = p.read_pool(pool(floatingIPNetwork={"filter": {"name": "public", "tags": ["a", "b"],
                                                              "notTagsAny": ["c"]}}))
    assert model.network.query() == {"router:external": "true", "name": "public", "tags": "a,b",
                                     "not-tags-any": "c"}


def test_bad_values_are_named_with_their_field():
    problems = fields(pool(reclaimPolicy="Keep", maxIPs=-1, preAllocatedFloatingIPs=["203.0.113.5", "2001:db8::1",
                                                                                    "203.0.113.5"],
                           identityRef={"name": "Cloud!", "type": "ClusterIdentity"}))
    assert set(problems) == {"spec.reclaimPolicy", "spec.maxIPs", "spec.preAllocatedFloatingIPs[1]",
                             "spec.preAllocatedFloatingIPs[2]", "spec.identityRef.name", "spec.identityRef.type"}
    assert "IPv4" in problems["spec.preAllocatedFloatingIPs[1]"]
    assert fields({"metadata": {"name": "x", "namespace": "ns"}, "spec": {}}) == {
        "spec.identityRef": "is required: the Secret holding the clouds.yaml"}


def test_the_cloud_may_not_change_while_floating_ips_are_in_use():
    old, new = pool(), pool(identityRef={"name": "other"})
    assert KIND.validate_update(old, new, {}) == []
    [problem] = KIND.validate_update(old, new, {"m-0": "203.0.113.7"})
    assert problem.field == "spec.identityRef" and "203.0.113.7" in problem.message
    assert KIND.validate_update(old, pool(maxIPs=3), {"m-0": "203.0.113.7"}) == []


def test_a_preallocated_address_a_claim_holds_may_not_be_dropped_from_the_spec():
    old = pool(preAllocatedFloatingIPs=["203.0.113.5", "203.0.113.6"])
    dropped = pool(preAllocatedFloatingIPs=["203.0.113.6"])
    [problem] = KIND.validate_update(old, dropped, {"m-0": "203.0.113.5", "m-1": "203.0.113.6"})
    assert problem.field == "spec.preAllocatedFloatingIPs" and problem.value == ["203.0.113.6"]
    assert "203.0.113.5" in problem.message and "m-0" in problem.message
    assert KIND.validate_update(old, dropped, {"m-1": "203.0.113.6"}) == []  # the dropped one is free
    assert KIND.validate_update(old, pool(preAllocatedFloatingIPs=["203.0.113.6", "203.0.113.5"]),
                                {"m-0": "203.0.113.5"}) == []


@pytest.mark.parametrize("policy, keep, deletes", [("Delete", False, True), ("Retain", False, False),
                                                   ("Delete", True, False)])
def test_a_release_deletes_only_with_delete_and_without_release_without_delete(policy, keep, deletes):
    model, _ = p.read_pool(pool(reclaimPolicy=policy, releaseWithoutDelete=keep))
    assert model.deletes is deletes


def test_a_claim_is_given_its_floating_ip_with_prefix_32_and_no_gateway():
    grant = KIND.outside.granted(pool(), "203.0.113.7")
    assert grant.ip == parse_ip("203.0.113.7") and grant.entry.prefix == 32 and grant.entry.gateway is None
    with pytest.raises(ValueError):
        KIND.outside.granted(pool(), "2001:db8::7")


def test_the_key_is_in_the_description_and_the_pools_namespace_in_its_tag():
    key = KIND.outside.new_key(random.Random(1))
    assert p.KEY_PATTERN.match(key)
    assert p.key_in("metal3-ipam", p.description("metal3-ipam", key)) == key
    assert p.key_in("other", p.description("metal3-ipam", key)) is None
    assert p.key_in("metal3-ipam", p.available_description("metal3-ipam")) is None
    assert p.pool_tag("metal3-ipam", "a", "fips") != p.pool_tag("metal3-ipam", "b", "fips")
    long = p.pool_tag("metal3-ipam", "n" * 63, "x" * 253)
    assert len(long) <= p.MAX_TAG_LEN and long != p.pool_tag("metal3-ipam", "n" * 63, "x" * 252 + "y")
    assert p.capo_tag("fips") == "cluster-api-provider-openstack-fip-pool-fips"


def test_a_claims_key_must_look_like_one():
    claim = {"metadata": {"annotations": {p.KEY_ANNOTATION: "Not A Key"}}}
    key, problem = p.claim_key(claim)
    assert key is None and problem.field == f"metadata.annotations[{p.KEY_ANNOTATION}]"
