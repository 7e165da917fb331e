"""A kind of pool of cluster scope, added by one module of the tests and its registration.

Claims of one such pool from two namespaces, each named ``g0``, are two
claims: the real reconcile gives each its own IP, their two Cluster API
IPAddresses (both named ``g0``) live in their claims' namespaces, and the
pool's key has namespace "".
"""

from __future__ import annotations

import random

import pytest

from metal3_ipam.core import kinds
from metal3_ipam.core import objects as o
from metal3_ipam.core import poolkind as pools
from metal3_ipam.core.reconcile import reconcile
from metal3_ipam.memory import converge
from ipam_objects import capi_claim, ippool, loaded
from shared_pool_kind import (ADDRESS_FINALIZER, CLAIM_FINALIZER, POOL_FINALIZER, SHARED, SHARED_KIND,
                              shared_pool)


@pytest.fixture
def shared_kind(monkeypatch):
    monkeypatch.setitem(pools.REGISTRY, SHARED, SHARED_KIND)


def shared_claim(name: str, ns: str, pool: str = "global") -> dict:
    return capi_claim(name, pool=pool, ns=ns, api_group=SHARED[0], kind=SHARED[1])


def test_a_pool_of_cluster_scope_is_known_by_name_and_its_claims_by_namespace_too(shared_kind):
    a, b = shared_claim("g0", "ns-a"), shared_claim("g0", "ns-b")
    assert o.pool_of(a) == o.pool_of(b) == o.PoolKey("", "global", SHARED)
    assert o.claim_key(a) != o.claim_key(b)
    # The claims of a namespaced pool keep the key they had.
    assert o.claim_key(capi_claim("g0", ns="ns-a")) == ("IPAddressClaim", "g0")


def test_claims_of_one_name_in_two_namespaces_get_two_ips_from_one_pool_of_cluster_scope(shared_kind):
    api = loaded(shared_pool("global", ["10.8.0.1-10.8.0.3"]),
                 shared_claim("g0", "ns-a"), shared_claim("g0", "ns-b"), shared_claim("g1", "ns-b"),
                 # An IPPool over the same addresses, of a namespace where the global pool has no claim: a pool of
                 # its own (in a namespace of its claims, their overlap would be withheld by the later pool).
                 ippool("pool1", ns="ns-c", pools=[{"start": "10.8.0.1", "end": "10.8.0.3"}]),
                 capi_claim("p0", ns="ns-c"))
    assert o.PoolKey("", "global", SHARED) in api.inventory.pool_keys()
    converge(api, random.Random(0))

    held = {(o.namespace(a), o.name(a)): o.spec(a) for a in api.inventory.of_kind(kinds.CAPI_ADDRESS)}
    shared = {key: spec["address"] for key, spec in held.items() if spec["poolRef"]["kind"] == SHARED[1]}
    assert set(shared) == {("ns-a", "g0"), ("ns-b", "g0"), ("ns-b", "g1")}, held
    assert sorted(shared.values()) == ["10.8.0.1", "10.8.0.2", "10.8.0.3"]
    for (ns, name), ip in shared.items():
        claim = next(c for c in api.inventory.of_kind(kinds.CAPI_CLAIM)
                     if o.namespace(c) == ns and o.name(c) == name and o.spec(c)["poolRef"]["kind"] == SHARED[1])
        assert o.status(claim)["addressRef"] == {"name": name}
        assert o.condition(o.status(claim), "Ready")["status"] == "True", o.status(claim)
        assert o.finalizers(claim) == [CLAIM_FINALIZER]
    # The lock of each IP is in the one lock namespace (whatever its claim's) and names the pool by kind,
    # filed under the pool's key: the API server's name uniqueness guards the IP across namespaces.
    locks = [a for a in api.inventory.of_kind(kinds.IPADDRESS) if o.spec(a)["pool"]["name"] == "global"
             and not o.is_guard(a)]
    assert {(o.namespace(a), o.spec(a)["address"]) for a in locks} == {
        (api.inventory.lock_namespace, ip) for ip in shared.values()}
    assert all(o.pool_of(a) == o.PoolKey("", "global", SHARED) and o.finalizers(a) == [ADDRESS_FINALIZER]
               for a in locks)

    pool = api.inventory.get(SHARED, "", "global")
    assert o.finalizers(pool) == [POOL_FINALIZER]
    assert o.status(pool)["ipAddresses"] == {"total": 3, "used": 3, "free": 0}
    assert "indexes" not in o.status(pool)
    # The IPPool's claim is served from its own pool, as before; its status keeps Metal3's shape.
    assert held[("ns-c", "p0")]["poolRef"]["kind"] == "IPPool"
    assert o.status(api.inventory.get(kinds.IPPOOL, "ns-c", "pool1"))["indexes"] == {
        "IPAddressClaim/p0": held[("ns-c", "p0")]["address"]}


def test_a_fourth_claim_of_a_full_pool_of_cluster_scope_is_refused_and_a_release_serves_it(shared_kind):
    api = loaded(shared_pool("global", ["10.8.0.1-10.8.0.2"]),
                 shared_claim("g0", "ns-a"), shared_claim("g0", "ns-b"))
    converge(api, random.Random(0))
    api.load(shared_claim("g0", "ns-c"))
    converge(api, random.Random(0))
    waiting = api.inventory.get(kinds.CAPI_CLAIM, "ns-c", "g0")
    assert o.condition(o.status(waiting), "Ready")["status"] == "False"
    # The claim of ns-a is deleted: its IP goes, and the claim of ns-c gets it.
    gone = api.inventory.get(kinds.CAPI_CLAIM, "ns-a", "g0")
    ip = next(o.spec(a)["address"] for a in api.inventory.of_kind(kinds.CAPI_ADDRESS) if o.namespace(a) == "ns-a")
    deleting = dict(gone, metadata=dict(o.meta(gone), deletionTimestamp="2024-01-01T00:00:01Z",
                                        resourceVersion="999"))
    api.inventory.upsert(deleting)
    converge(api, random.Random(0))
    assert api.inventory.get(kinds.CAPI_ADDRESS, "ns-a", "g0") is None
    served = api.inventory.get(kinds.CAPI_ADDRESS, "ns-c", "g0")
    assert served is not None and o.spec(served)["address"] == ip


def test_the_reconcile_of_a_pool_of_cluster_scope_plans_locks_in_the_lock_namespace(shared_kind):
    api = loaded(shared_pool("global", ["10.8.0.1-10.8.0.9"]), shared_claim("g0", "ns-a"), shared_claim("g0", "ns-b"))
    api.inventory.lock_namespace = "ipam-system"
    plan = reconcile(api.inventory.snapshot(o.PoolKey("", "global", SHARED), api.now, random.Random(0)))
    created = [a.obj for a in plan.writes if type(a).__name__ == "Create"]
    locks = [c for c in created if kinds.kind_of(c) == kinds.IPADDRESS and not o.is_guard(c)]
    assert sorted(o.namespace(c) for c in locks) == ["ipam-system", "ipam-system"]
    assert all([r["kind"] for r in o.owner_references(c)] == [SHARED[1]] for c in locks)
    assert len({o.spec(c)["address"] for c in locks}) == 2
    assert all(o.spec(c)["pool"] == {"name": "global", "namespace": "", "apiVersion": f"{SHARED[0]}/v1alpha1",
                                      "kind": SHARED[1]} for c in locks)


def test_a_kind_of_pool_of_cluster_scope_is_listed_cluster_wide_when_namespaces_are_watched(shared_kind):
    from metal3_ipam.controller.api import Resource
    from metal3_ipam.controller.operator import listings

    resources = {SHARED: Resource(SHARED[0], "v1alpha1", "sharedpools"),
                 kinds.IPPOOL: Resource(kinds.METAL3_GROUP, kinds.METAL3_VERSION, "ippools")}
    listed = {(listing.kind, listing.namespace) for listing in listings(None, resources, ["ns-a", "ns-b"])}
    assert listed == {(SHARED, None), (kinds.IPPOOL, "ns-a"), (kinds.IPPOOL, "ns-b")}


def test_cluster_api_addresses_and_claims_are_listed_cluster_wide_under_namespaces_with_a_kind_of_cluster_scope(
        shared_kind):
    """Every controller of a pool of cluster scope files its addresses and claims in every namespace
    (``Inventory.keeps``); without such a kind served they are listed in the namespaces watched alone."""
    from metal3_ipam.controller.api import Resource
    from metal3_ipam.controller.operator import listings

    resources = {kinds.CAPI_CLAIM: Resource(kinds.CAPI_IPAM_GROUP, "v1beta1", "ipaddressclaims"),
                 kinds.CAPI_ADDRESS: Resource(kinds.CAPI_IPAM_GROUP, "v1beta1", "ipaddresses")}
    shared = {SHARED: Resource(SHARED[0], "v1alpha1", "sharedpools")}
    listed = {(x.kind, x.namespace) for x in listings(None, {**resources, **shared}, ["ns-a", "ns-b"])}
    assert listed == {(SHARED, None), (kinds.CAPI_ADDRESS, None), (kinds.CAPI_CLAIM, None)}
    listed = {(listing.kind, listing.namespace) for listing in listings(None, resources, ["ns-a", "ns-b"])}
    assert listed == {(kind, ns) for kind in resources for ns in ("ns-a", "ns-b")}


def test_the_status_of_a_pool_of_cluster_scope_goes_to_its_cluster_wide_path(shared_kind):
    from metal3_ipam.controller.api import Resource

    pool = o.PoolKey("", "global", SHARED)
    assert Resource(SHARED[0], "v1alpha1", "sharedpools").path(pool.namespace, pool.name, "status") == \
        "/apis/pools.test.metal3.io/v1alpha1/sharedpools/global/status"
