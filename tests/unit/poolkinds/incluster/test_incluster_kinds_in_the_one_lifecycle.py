"""The pool kinds behind one claim lifecycle, driven through the real reconcile with the registered
in-cluster kinds: what the API server would refuse, and what the webhooks must see of a pool of cluster scope."""

from __future__ import annotations

import random

import pytest

from metal3_ipam.poolkinds.incluster import spec as ic
from metal3_ipam.core import kinds
from metal3_ipam.core import objects as o
from metal3_ipam.core.naming import is_dns1123_subdomain
from metal3_ipam.core.validation import addresses_in_use
from metal3_ipam.memory import converge
from ipam_objects import capi_claim, loaded

NAMESPACED = ic.IN_CLUSTER_IP_POOL
GLOBAL = ic.GLOBAL_IN_CLUSTER_IP_POOL


def in_cluster_pool(kind: tuple[str, str], name: str, addresses: list[str], prefix: int, ns: str = "ns-a") -> dict:
    meta = {"name": name} if kind == GLOBAL else {"name": name, "namespace": ns}
    return {"apiVersion": ic.API_VERSION, "kind": kind[1], "metadata": meta,
            "spec": {"addresses": addresses, "prefix": prefix}}


def claim_of(kind: tuple[str, str], name: str, ns: str, pool: str = "p") -> dict:
    return capi_claim(name, pool=pool, ns=ns, api_group=kind[0], kind=kind[1])


@pytest.mark.parametrize("kind", [NAMESPACED, GLOBAL], ids=lambda k: k[1])
@pytest.mark.parametrize("addresses, prefix", [(["10.8.0.1-10.8.0.3"], 24), (["2001:db8::1-2001:db8::3"], 64)],
                         ids=["ipv4", "ipv6"])
def test_every_object_made_for_an_in_cluster_pools_claim_has_a_name_the_api_server_accepts(kind, addresses, prefix):
    """Object names are DNS-1123 subdomains (the API server refuses any other): the locks of an in-cluster
    pool's IPs too, or no claim of such a pool is ever served on a real API server."""
    api = loaded(in_cluster_pool(kind, "p", addresses, prefix), claim_of(kind, "c0", "ns-a"), claim_of(kind, "c1", "ns-a"))
    converge(api, random.Random(0))
    made = [*api.inventory.of_kind(kinds.IPADDRESS), *api.inventory.of_kind(kinds.CAPI_ADDRESS)]
    assert len([a for a in made if not o.is_guard(a)]) == 4, made  # and a global pool's guards of its IPs
    assert [o.name(a) for a in made if not is_dns1123_subdomain(o.name(a))] == []


def test_the_addresses_in_use_of_a_global_pool_name_each_claims_namespace():
    """Two claims of one name in two namespaces hold two IPs of a global pool: both are in use (the webhook
    refuses an update that drops either, and a delete names both), not one under a shared name."""
    addresses = [
        {"apiVersion": "ipam.cluster.x-k8s.io/v1beta2", "kind": "IPAddress",
         "metadata": {"name": "c", "namespace": ns},
         "spec": {"address": ip, "prefix": 24, "claimRef": {"name": "c"},
                  "poolRef": {"apiGroup": GLOBAL[0], "kind": GLOBAL[1], "name": "p"}}}
        for ns, ip in (("ns-a", "10.8.0.1"), ("ns-b", "10.8.0.2"))]
    in_use = addresses_in_use(addresses, "", "p", GLOBAL)
    assert sorted(in_use.values()) == ["10.8.0.1", "10.8.0.2"], in_use
    old = in_cluster_pool(GLOBAL, "p", ["10.8.0.1-10.8.0.2"], 24)
    new = in_cluster_pool(GLOBAL, "p", ["10.8.0.1"], 24)
    problems = ic.validate_ip_pool_update(old, new, in_use)
    assert [p.value for p in problems] == ["10.8.0.2"]
    assert "ns-b/c" in problems[0].message


def test_a_claim_of_a_kind_of_pool_of_cluster_scope_registered_after_another_left_is_keyed_by_namespace(monkeypatch):
    """The registry read as it is: one kind of pool gone and one of cluster scope come (as many kinds as before)
    keys the new kind's claims by namespace too, whatever claim keys were made in between."""
    import dataclasses

    from metal3_ipam.core import poolkind as pools
    from shared_pool_kind import SHARED, SHARED_KIND

    namespaced = ("pools.test.metal3.io", "NamespacedPool")
    monkeypatch.setitem(pools.REGISTRY, namespaced, dataclasses.replace(SHARED_KIND, kind=namespaced,
                                                                        scope=pools.NAMESPACED))
    claim = capi_claim("c", ns="ns-a", api_group=SHARED[0], kind=SHARED[1])
    assert o.claim_key(claim) == ("IPAddressClaim", "c")  # SharedPool is no kind of pool yet
    monkeypatch.delitem(pools.REGISTRY, namespaced)
    monkeypatch.setitem(pools.REGISTRY, SHARED, SHARED_KIND)
    assert o.claim_key(claim) == ("IPAddressClaim", "c", "ns-a")


def test_a_claims_name_reused_before_its_old_incarnations_addresses_were_made_and_let_go_is_served():
    """Under a lagging cache an IPAddressClaim's old incarnation is served after a new one of its name was
    created: its addresses are younger than the live claim. Let go (deleted) but for the finalizers (the step
    stopped between the delete and the finalizer write), they are no address of the live claim: they go,
    and the live claim gets an address of its own or an error, never nothing."""
    from ipam_objects import NS, converged, ippool

    def owners(controller):
        flags = {"controller": True, "blockOwnerDeletion": True} if controller else {}
        return [{"apiVersion": "ipam.cluster.x-k8s.io/v1beta2", "kind": "IPAddressClaim", "name": "c2",
                 "uid": "uid-old", **flags},
                {"apiVersion": "ipam.metal3.io/v1alpha1", "kind": "IPPool", "name": "pool1", "uid": "pool-uid"}]

    going = {"creationTimestamp": "2024-01-01T00:00:15Z", "deletionTimestamp": "2024-01-01T00:00:16Z",
             "namespace": NS}
    claim = capi_claim("c2")
    claim["metadata"].update(uid="uid-new", creationTimestamp="2024-01-01T00:00:10Z")
    pool = ippool()
    pool["metadata"]["uid"] = "pool-uid"
    lock = {"apiVersion": "ipam.metal3.io/v1alpha1", "kind": "IPAddress",
            "metadata": {"name": "pool1-192-168-0-10", **going, "finalizers": [kinds.FINALIZERS[kinds.IPADDRESS]],
                         "ownerReferences": owners(False)},
            "spec": {"address": "192.168.0.10", "prefix": 24, "pool": {"name": "pool1", "namespace": NS},
                     "claim": {"name": "c2", "namespace": NS, "kind": "IPAddressClaim",
                               "apiVersion": "ipam.cluster.x-k8s.io/v1beta2"}}}
    mirror = {"apiVersion": "ipam.cluster.x-k8s.io/v1beta2", "kind": "IPAddress",
              "metadata": {"name": "c2", **going, "finalizers": [kinds.FINALIZERS[kinds.CAPI_ADDRESS]],
                           "ownerReferences": owners(True)},
              "spec": {"address": "192.168.0.10", "prefix": 24, "claimRef": {"name": "c2"},
                       "poolRef": {"apiGroup": "ipam.metal3.io", "kind": "IPPool", "name": "pool1"}}}
    api = converged(pool, claim, lock, mirror)
    left = [(kinds.kind_of(a), o.meta(a).get("uid")) for kind in (kinds.IPADDRESS, kinds.CAPI_ADDRESS)
            for a in api.inventory.of_kind(kind) if o.is_deleting(a)]
    assert left == [], left
    ready = o.condition(o.status(api.inventory.get(kinds.CAPI_CLAIM, NS, "c2")), "Ready")
    assert ready is not None and ready["status"] == "True", o.status(api.inventory.get(kinds.CAPI_CLAIM, NS, "c2"))


def test_a_deleted_claims_ip_of_an_in_cluster_pool_is_not_reused_within_the_pools_grace_period():
    """SPEC §12: addressReuseGracePeriodSeconds behaves as in the Go provider: a deleted claim's IP stays held
    until its deletionTimestamp plus the grace period; another claim gets another IP meanwhile."""
    from ipam_objects import user_delete

    pool = in_cluster_pool(NAMESPACED, "p", ["10.8.0.1-10.8.0.3"], 24)
    pool["spec"]["addressReuseGracePeriodSeconds"] = 3600
    api = loaded(pool, claim_of(NAMESPACED, "a", "ns-a"))
    converge(api, random.Random(0))
    first = o.spec(api.inventory.get(kinds.CAPI_ADDRESS, "ns-a", "a"))["address"]
    user_delete(api, kinds.CAPI_CLAIM, "a", "ns-a")
    converge(api, random.Random(0))
    api.load(claim_of(NAMESPACED, "b", "ns-a"))
    converge(api, random.Random(0))
    second = o.spec(api.inventory.get(kinds.CAPI_ADDRESS, "ns-a", "b"))["address"]
    assert second != first, f"{first} handed out again within the grace period"
