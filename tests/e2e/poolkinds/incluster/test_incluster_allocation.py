"""Claims of the in-cluster provider's IP pools, served as that provider serves them, and better.

The scenarios of the provider's own claim tests, written anew against the real API server with the
controller running: reserved, excluded and gateway addresses never handed out, the lowest free
address whatever the order of the pool's entries, single IPs, same-named pools in two namespaces,
a namespaced pool beside a global one with claims in two namespaces, exhaustion then progress after
a release, a pre-existing IPAddress adopted. Every IPAddress is checked against what the provider
writes (``metal3_ipam.testing.go_incluster``); on top, every claim carries a ``Ready`` condition
with the Cluster API contract's reasons and every pool a ``Ready`` condition.
"""

from __future__ import annotations

import pytest

from controller_fixtures import PAUSED, Kube, holds_for
from incluster_fixtures import assert_go_shape, unique_ips
from metal3_ipam.testing import go_incluster as gi

IP_POOL = gi.IN_CLUSTER_IP_POOL
GLOBAL = gi.GLOBAL_IN_CLUSTER_IP_POOL


def test_reserved_and_gateway_addresses_are_never_handed_out(controller, incluster):
    """Network, gateway and broadcast addresses listed in a pool are not handed out: the one claim gets the
    one ordinary address, exactly as the provider writes it; the next says the pool is exhausted."""
    incluster.ip_pool("p", prefix=24, gateway="10.0.1.1", addresses=["10.0.1.0", "10.0.1.1", "10.0.1.2", "10.0.1.255"])
    incluster.claim("a", "p")
    address = incluster.served("a")
    assert address["spec"]["address"] == "10.0.1.2"
    assert_go_shape(address, incluster.get_claim("a"), incluster.pool("p"))
    assert incluster.get_claim("a")["status"]["addressRef"] == {"name": "a"}

    incluster.claim("b", "p")
    incluster.not_ready("b", "PoolExhausted")
    incluster.kube.warning_event("b", "PoolExhausted")
    assert incluster.get_address("b") is None
    incluster.wait_counts("p", {"total": 1, "used": 1, "free": 0, "outOfRange": 0})
    assert gi.POOL_FINALIZER in incluster.pool("p")["metadata"]["finalizers"]


def test_excluded_addresses_are_skipped(controller, incluster):
    incluster.ip_pool("p", prefix=24, gateway="10.1.1.1", addresses=["10.1.1.0/24"],
                      excluded=["10.1.1.2-10.1.1.5", "10.1.1.7"])
    got = []
    for name in ("first", "second", "third"):
        incluster.claim(name, "p")
        got.append(incluster.ip(name))  # one after the other: each is the lowest free one then
    assert got == ["10.1.1.6", "10.1.1.8", "10.1.1.9"]
    incluster.wait_counts("p", {"total": 248, "used": 3, "free": 245, "outOfRange": 0})


def test_the_lowest_free_address_whatever_the_order_of_the_entries(controller, incluster):
    """Entries written high to low, CIDR host bits set: the lowest address first. A pool without a
    gateway writes IPAddresses without one."""
    incluster.ip_pool("p", prefix=24, addresses=["10.0.1.200-10.0.1.201", "10.0.1.3", "10.0.1.2", "10.0.1.9/31"])
    incluster.claim("a", "p")
    a = incluster.served("a")
    assert a["spec"]["address"] == "10.0.1.2" and "gateway" not in a["spec"], a["spec"]
    assert_go_shape(a, incluster.get_claim("a"), incluster.pool("p"))
    got = []
    for name in ("b", "c", "d", "e", "f"):
        incluster.claim(name, "p")
        got.append(incluster.ip(name))
    assert got == ["10.0.1.3", "10.0.1.8", "10.0.1.9", "10.0.1.200", "10.0.1.201"]


def test_a_pool_of_single_ips(controller, incluster):
    incluster.ip_pool("p", prefix=24, gateway="10.0.0.1", addresses=["10.0.0.128", "10.0.0.50"])
    for name in ("a", "b", "c"):
        incluster.claim(name, "p")
    assert sorted(incluster.ip(n) for n in ("a", "b")) == ["10.0.0.128", "10.0.0.50"]
    incluster.not_ready("c", "PoolExhausted")
    incluster.wait_counts("p", {"total": 2, "used": 2, "free": 0, "outOfRange": 0})


def test_same_named_pools_in_two_namespaces_allocate_independently(controller, incluster):
    other = incluster.namespace()
    for ns in (incluster.ns, other):
        incluster.ip_pool("p", namespace=ns, prefix=24, gateway="10.0.0.1", addresses=["10.0.0.2-10.0.0.254"])
        incluster.claim("m", "p", namespace=ns)
    for ns in (incluster.ns, other):
        a = incluster.served("m", namespace=ns)
        assert a["spec"]["address"] == "10.0.0.2", (ns, a["spec"])
        assert_go_shape(a, incluster.get_claim("m", namespace=ns), incluster.pool("p", namespace=ns))
        incluster.wait_counts("p", {"total": 253, "used": 1, "free": 252, "outOfRange": 0}, namespace=ns)


def test_a_namespaced_pool_beside_a_global_one_of_the_same_name(controller, incluster):
    """A namespaced and a cluster-scoped pool of one name are two pools; claims of the global one in two
    namespaces (even of one name) never share an IP, and their IPAddresses live in the claims' namespaces.
    (The two pools' addresses are apart: overlapping, the namespaced pool would own the overlap in its
    namespace, see tests/unit/poolkinds/incluster/test_global_pool_overlap.py.)"""
    other = incluster.namespace()
    name = incluster.global_name("shared")
    incluster.ip_pool(name, prefix=24, gateway="10.0.0.1", addresses=["10.0.0.2-10.0.0.254"])
    incluster.global_ip_pool(name, prefix=24, gateway="10.0.1.1", addresses=["10.0.1.2-10.0.1.254"])
    incluster.claim("local", name, IP_POOL)
    incluster.claim("g", name, GLOBAL)
    incluster.claim("g", name, GLOBAL, namespace=other)
    incluster.claim("g2", name, GLOBAL, namespace=other)

    local = incluster.served("local")
    assert local["spec"]["address"] == "10.0.0.2", local["spec"]
    assert_go_shape(local, incluster.get_claim("local"), incluster.pool(name))
    globals_ = [incluster.served("g"), incluster.served("g", namespace=other), incluster.served("g2", namespace=other)]
    unique_ips(globals_)
    assert sorted(a["spec"]["address"] for a in globals_) == ["10.0.1.2", "10.0.1.3", "10.0.1.4"]
    pool = incluster.pool(name, GLOBAL)
    for a in globals_:
        ns = a["metadata"]["namespace"]
        assert_go_shape(a, incluster.get_claim(a["metadata"]["name"], namespace=ns), pool)
        assert a["spec"]["poolRef"]["kind"] == GLOBAL
    incluster.wait_counts(name, {"total": 253, "used": 3, "free": 250, "outOfRange": 0}, GLOBAL)
    incluster.wait_counts(name, {"total": 253, "used": 1, "free": 252, "outOfRange": 0}, IP_POOL)


@pytest.mark.parametrize("kind", [IP_POOL, GLOBAL])
def test_exhaustion_then_progress_after_a_release(controller, incluster, kind):
    """A full pool: the new claim says so (Ready=False PoolExhausted, a Warning Event) and gets nothing,
    for as long as the pool stays full; once the holder is deleted it gets the freed address."""
    name = incluster.global_name("full")
    make = incluster.global_ip_pool if kind == GLOBAL else incluster.ip_pool
    make(name, prefix=24, gateway="10.0.0.2", addresses=["10.0.0.1"])
    other = incluster.namespace() if kind == GLOBAL else incluster.ns
    incluster.claim("existing", name, kind)
    before = incluster.served("existing")
    incluster.claim("new", name, kind, namespace=other)
    incluster.not_ready("new", "PoolExhausted", namespace=other)
    Kube(incluster.api_client, other).warning_event("new", "PoolExhausted")
    holds_for(lambda: incluster.get_address("new", namespace=other) is None, 2.0, "no address for the new claim")
    assert incluster.get_address("existing")["metadata"]["uid"] == before["metadata"]["uid"]
    incluster.wait_counts(name, {"total": 1, "used": 1, "free": 0, "outOfRange": 0}, kind)

    incluster.delete_claim("existing")
    incluster.claim_gone("existing")
    assert incluster.ip("new", namespace=other) == "10.0.0.1"
    incluster.wait_counts(name, {"total": 1, "used": 1, "free": 0, "outOfRange": 0}, kind)


@pytest.mark.parametrize("foreign_owner", [False, True], ids=["no-owner", "unrelated-owner"])
def test_a_pre_existing_ipaddress_is_adopted_as_it_is(controller, incluster, foreign_owner):
    """An IPAddress written before its claim (no finalizer, no owner references; or an unrelated owner):
    the claim is served with it — same object, same spec — which gains the provider's finalizer and the
    claim and pool owner references after the owners it had."""
    incluster.ip_pool("p", prefix=24, gateway="10.0.0.2", addresses=["10.0.0.1-10.0.0.254"])
    dummy = {"apiVersion": "alpha-dummy", "kind": "dummy-kind", "name": "dummy-name", "uid": "abc-dummy-123"}
    spec = {"claimRef": {"name": "test"}, "poolRef": {"apiGroup": gi.GROUP, "kind": IP_POOL, "name": "p"},
            "address": "10.0.0.9", "prefix": 24, "gateway": "10.0.0.2"}
    meta = {"name": "test", "namespace": incluster.ns}
    if foreign_owner:
        meta["ownerReferences"] = [dummy]
    made = incluster.writer.create({"apiVersion": gi.CAPI_API_VERSION, "kind": "IPAddress", "metadata": meta,
                                    "spec": spec})
    incluster.claim("test", "p")
    incluster.claim("next", "p")
    a = incluster.served("test")
    assert a["metadata"]["uid"] == made["metadata"]["uid"] and a["spec"] == spec
    assert a["metadata"]["finalizers"] == [gi.ADDRESS_FINALIZER]
    claim, pool = incluster.get_claim("test"), incluster.pool("p")
    want = gi.ipaddress_body(claim, pool, gi.Grant("10.0.0.9", 24, "10.0.0.2"))["metadata"]["ownerReferences"]
    assert a["metadata"]["ownerReferences"] == ([dummy] if foreign_owner else []) + want
    assert incluster.ip("next") == "10.0.0.1"  # the adopted address is taken; the lowest free one is not it
    incluster.wait_counts("p", {"total": 253, "used": 2, "free": 251, "outOfRange": 0})


@pytest.mark.parametrize("kind", [IP_POOL, GLOBAL])
def test_a_claim_of_a_missing_pool_says_so_and_is_served_once_the_pool_exists(controller, incluster, kind):
    """The provider ignores such a claim in silence; here it reads Ready=False PoolNotReady until the pool
    appears, then it is served."""
    name = incluster.global_name("later")
    incluster.claim("early", name, kind)
    ready = incluster.not_ready("early", "PoolNotReady")
    assert name in ready["message"], ready
    incluster.kube.warning_event("early", "PoolNotReady")
    make = incluster.global_ip_pool if kind == GLOBAL else incluster.ip_pool
    make(name, prefix=24, addresses=["10.70.0.1-10.70.0.2"])
    assert incluster.ip("early") == "10.70.0.1"


def test_a_claim_of_a_paused_pool_waits_until_it_is_unpaused(controller, incluster):
    incluster.ip_pool("p", prefix=24, addresses=["10.0.0.10-10.0.0.20"], annotations={PAUSED: ""})
    incluster.claim("m", "p")
    holds_for(lambda: incluster.get_address("m") is None, 3.0, "nothing allocated from a paused pool")
    incluster.writer.patch(incluster.pool("p"), {"metadata": {"annotations": {PAUSED: None}}})
    assert incluster.ip("m") == "10.0.0.10"


def test_overlapping_pools_of_a_namespace_never_share_an_ip(controller, incluster):
    """Unlike the provider's independent pools: the overlap belongs to the pool created first, the other one
    withholds it (its counts say so), and a claim it cannot serve says it is exhausted."""
    incluster.ip_pool("first", prefix=24, addresses=["10.0.0.1-10.0.0.4"])
    incluster.wait_counts("first", {"total": 4, "used": 0, "free": 4, "outOfRange": 0})
    incluster.ip_pool("second", prefix=24, addresses=["10.0.0.3-10.0.0.6"])
    for name in ("x", "y", "z"):
        incluster.claim(name, "second")
    for name in ("a", "b", "c", "d"):
        incluster.claim(name, "first")
    assert sorted(incluster.ip(n) for n in ("x", "y")) == ["10.0.0.5", "10.0.0.6"]
    assert sorted(incluster.ip(n) for n in ("a", "b", "c", "d")) == ["10.0.0.1", "10.0.0.2", "10.0.0.3", "10.0.0.4"]
    incluster.not_ready("z", "PoolExhausted")
    incluster.wait_counts("second", {"total": 4, "used": 2, "free": 0, "outOfRange": 0})
