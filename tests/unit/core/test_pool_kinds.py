"""A second kind of pool is an addition: one ``PoolKind`` in the registry; nothing else changes.

An IPPool and a pool of another kind with the same name in one namespace are
two pools: their claims are filed apart, each is served from its own
addresses, and each pool's key says its kind.
"""

from __future__ import annotations

import dataclasses
import random

import netaddr
import pytest

from metal3_ipam.core import kinds
from metal3_ipam.core import objects as o
from metal3_ipam.core import poolkind as pools
from metal3_ipam.poolkinds.ippool import IPPOOL_KIND
from metal3_ipam.memory import converge
from ipam_objects import NS, capi_claim, ippool, loaded
from other_kind import OTHER, OTHER_FINALIZER, other_pool


def test_a_pool_key_names_its_kind_and_an_ippool_key_equals_its_plain_pair():
    ippool_key = o.PoolKey(NS, "p")
    assert ippool_key == (NS, "p") and hash(ippool_key) == hash((NS, "p")) and ippool_key.kind == kinds.IPPOOL
    assert o.PoolKey(NS, "p", OTHER) != ippool_key and o.PoolKey(NS, "p", OTHER) != (NS, "p")
    assert len({ippool_key, (NS, "p"), o.PoolKey(NS, "p", OTHER)}) == 2


def test_a_claim_for_a_kind_not_served_is_nobody_s():
    claim = capi_claim("k", pool="p", api_group=OTHER[0], kind=OTHER[1])
    assert o.pool_of(claim) is None


def test_two_kinds_of_pool_with_one_name_are_two_pools(other_kind):
    api = loaded(ippool("p", pools=[{"start": "10.0.0.1", "end": "10.0.0.9"}]),
                 other_pool("p", ["10.9.0.1-10.9.0.9"]),
                 capi_claim("from-ippool", pool="p"),
                 capi_claim("from-other", pool="p", api_group=OTHER[0], kind=OTHER[1]))
    keys = api.inventory.pool_keys()
    assert sorted(k.kind for k in keys) == sorted([kinds.IPPOOL, OTHER])
    converge(api, random.Random(0))
    held = {o.spec(a)["claimRef"]["name"]: (o.spec(a)["poolRef"]["kind"], o.spec(a)["address"])
            for a in api.inventory.of_kind(kinds.CAPI_ADDRESS)}
    assert held["from-ippool"][0] == "IPPool" and netaddr.IPAddress(held["from-ippool"][1]) in netaddr.IPRange(
        "10.0.0.1", "10.0.0.9")
    assert held["from-other"][0] == OTHER[1] and netaddr.IPAddress(held["from-other"][1]) in netaddr.IPRange(
        "10.9.0.1", "10.9.0.9")
    other = api.inventory.get(OTHER, NS, "p")
    assert OTHER_FINALIZER in o.finalizers(other) and o.status(other)["allocated"] == "1"


def test_pools_of_two_kinds_with_one_name_that_overlap_never_hand_out_one_ip_twice(other_kind):
    """An IPPool (namePrefix "ip") and a pool of another kind named like it (its own prefix) whose
    ranges overlap: the name lock does not guard them (the prefixes differ), so the later pool must
    withhold what the earlier one owns. Known by name alone, the two would pass for one pool."""
    api = loaded(ippool("p", namePrefix="ip", pools=[{"start": "10.0.0.1", "end": "10.0.0.4"}]),
                 other_pool("p", ["10.0.0.1-10.0.0.4"]),
                 *[capi_claim(f"ip{i}", pool="p") for i in range(4)],
                 *[capi_claim(f"other{i}", pool="p", api_group=OTHER[0], kind=OTHER[1]) for i in range(4)])
    converge(api, random.Random(0))
    held = [o.spec(a)["address"] for a in api.inventory.of_kind(kinds.CAPI_ADDRESS)]
    assert len(held) == 4 and len(set(held)) == 4, f"one IP handed out twice: {sorted(held)}"
    # Created at once: the earlier is the one whose kind sorts first.
    later = api.inventory.get(kinds.IPPOOL, NS, "p")
    overlap = next(c for c in o.status(later)["conditions"] if c["type"] == "Overlapping")
    assert f"{OTHER[1]} p, namePrefix p" in overlap["message"], overlap["message"]


def test_the_metric_series_of_two_kinds_of_pool_with_one_name_are_two(other_kind):
    from metal3_ipam.controller import metrics

    ippool_key, other_key = o.PoolKey(NS, "p"), o.PoolKey(NS, "p", OTHER)
    metrics.POOL_FREE.labels(*metrics.pool_labels(ippool_key)).set(1)
    metrics.POOL_FREE.labels(*metrics.pool_labels(other_key)).set(2)
    metrics.POOL_FREE.remove(*metrics.pool_labels(other_key))
    assert metrics.pool_labels(ippool_key) == (NS, "p", "IPPool")
    assert metrics.POOL_FREE.labels(*metrics.pool_labels(ippool_key))._value.get() == 1


# -- the adapter reads the registry -------------------------------------------------

def test_a_kind_of_pool_is_discovered_at_its_own_versions_beside_the_claims_of_its_group(other_kind, monkeypatch):
    """The in-cluster provider's pools are v1alpha2 of the group whose claims are v1beta2: each is
    found at its own version (one version per group would miss one of them)."""
    from metal3_ipam.controller import operator

    served = {"/apis/ipam.metal3.io": ["v1alpha1"], "/apis/ipam.cluster.x-k8s.io": ["v1beta2", "v1alpha2"],
              "/apis/ipam.example.com": ["v1alpha2"], "/apis/netbox.metal3-ipam.io": ["v1alpha1"],
              "/apis/openstack.metal3-ipam.io": ["v1alpha1"], "/apis/cluster.x-k8s.io": ["v1beta2"]}
    monkeypatch.setattr(operator, "request",
                        lambda api, verb, path: {"versions": [{"version": v} for v in served[path]]})
    resources = operator.discover(None)
    assert (resources[OTHER].version, resources[OTHER].plural) == ("v1alpha2", "otherpools")
    assert resources[kinds.CAPI_CLAIM].version == "v1beta2" and resources[kinds.IPPOOL].version == "v1alpha1"
    assert any(OTHER in group_kinds for _, _, group_kinds in operator.wanted_kinds())


def test_a_kind_of_pool_has_its_webhooks_with_the_rule_scope_of_its_kind(other_kind):
    from metal3_ipam.controller import webhook

    hooks = webhook.pool_hooks(pools.REGISTRY[OTHER])
    assert [(h.name, h.path, h.mutating) for h in hooks] == [
        ("default.otherpool.ipam.example.com",
         "/mutate-ipam-example-com-v1alpha2-otherpool", True),
        ("validation.otherpool.ipam.example.com",
         "/validate-ipam-example-com-v1alpha2-otherpool", False),
        ("deletion.otherpool.ipam.example.com",
         "/validate-ipam-example-com-v1alpha2-otherpool", False)]
    rule = hooks[1].configuration({})["rules"][0]
    assert rule == {"apiGroups": [OTHER[0]], "apiVersions": ["v1alpha2"], "operations": ["CREATE", "UPDATE"],
                    "resources": ["otherpools"], "scope": "Namespaced"}
    global_hooks = webhook.pool_hooks(dataclasses.replace(pools.REGISTRY[OTHER], scope=pools.CLUSTER))
    assert {h.configuration({})["rules"][0]["scope"] for h in global_hooks} == {"Cluster"}
    # The IPPool's, generated alike, are those the manifests always had.
    assert [h.name for h in webhook.hooks()[:3]] == ["default.ippool.ipam.metal3.io", "validation.ippool.ipam.metal3.io",
                                                    "deletion.ippool.ipam.metal3.io"]


def test_a_pool_of_another_kind_is_validated_by_its_kind(other_kind):
    from metal3_ipam.core.validation import validate

    bad = other_pool("p", [])
    bad["spec"]["prefix"] = "wide"
    assert validate(bad) == pools.REGISTRY[OTHER].validate(bad) and validate(bad)


@pytest.fixture
def registry(monkeypatch):
    monkeypatch.setattr(pools, "REGISTRY", dict(pools.REGISTRY))
    return pools.REGISTRY


@pytest.mark.parametrize("tag", ["ip", "iph"])
def test_a_kind_whose_lock_names_could_end_like_another_kinds_is_refused(registry, tag):
    """``ip`` is the in-cluster IP pool's tag, ``iph`` that tag after a hashed pool part."""
    with pytest.raises(ValueError, match=f"lock tag '{tag}' meets"):
        pools.register(dataclasses.replace(IPPOOL_KIND, kind=OTHER, lock_tag=tag))
    assert OTHER not in registry


def test_a_kind_whose_lock_tag_no_other_kind_meets_is_served(registry):
    kind = dataclasses.replace(IPPOOL_KIND, kind=OTHER, lock_tag="i")  # hashed: "ih"
    pools.register(kind)
    assert registry[OTHER] is kind and "i" in pools.lock_tags()


def test_a_kind_installed_that_this_controller_may_not_list_is_not_served(monkeypatch, caplog):
    """The in-cluster provider's RBAC beside the Metal3 CRDs (installed for another provider): the Metal3 kinds are
    not served, said once, instead of a listing refused forever."""
    from metal3_ipam.controller import operator

    served = {"/apis/ipam.metal3.io": ["v1alpha1"], "/apis/ipam.cluster.x-k8s.io": ["v1beta2", "v1alpha2"],
              "/apis/netbox.metal3-ipam.io": [], "/apis/openstack.metal3-ipam.io": [],
              "/apis/cluster.x-k8s.io": ["v1beta2"]}
    monkeypatch.setattr(operator, "request",
                        lambda api, verb, path: {"versions": [{"version": v} for v in served[path]]})
    denied: set = set()
    resources = operator.discover(None, lambda group, version, plural, ns: group != kinds.METAL3_GROUP, None, denied)
    assert kinds.IPPOOL not in resources and kinds.IPADDRESS not in resources
    assert kinds.CAPI_CLAIM in resources and any(k[0] == kinds.CAPI_IPAM_GROUP for k in resources if k in pools.REGISTRY)
    assert denied == {kinds.IPPOOL, kinds.IPCLAIM, kinds.IPADDRESS}
    assert [r.message for r in caplog.records if "may not list" in r.message] == [
        "ipam.metal3.io is served, but this controller may not list IPPool, IPClaim, IPAddress (RBAC): not served"]
    said = operator.unserved_kinds(resources, denied)
    assert said[-1] == "not served (not listable by this controller): IPPool.ipam.metal3.io, " \
                       "IPClaim.ipam.metal3.io, IPAddress.ipam.metal3.io"


@pytest.mark.parametrize("group", [[], {}, ["ipam.cluster.x-k8s.io"], None, 7])
def test_a_claims_pool_group_that_is_not_a_string_is_none_of_ours(group):
    assert not pools.serves_claims_of(group, "InClusterIPPool")
