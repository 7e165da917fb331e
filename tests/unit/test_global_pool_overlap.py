"""Global pools overlapping other global pools, or namespaced pools of a namespace where they have claims: by
default the overlap belongs to the pool created first (then by kind and name) and the later one withholds it,
as the namespaced pools of a namespace do; a global pool annotated ``ipam.metal3.io/separate-network: "true"``
(its addresses are another network's) shares its overlaps instead, and both pools say so. A global pool and a
namespaced pool of a namespace where it has no claim are independent, as in the Go provider. Run through the
real reconcile to its fixed point in the in-memory store."""

from __future__ import annotations

import random

from metal3_ipam.core import kinds
from metal3_ipam.core import objects as o
from metal3_ipam.memory import converge
from metal3_ipam.testing import go_incluster as gi
from ipam_objects import converged, get, loaded

NS = "default"
GLOBAL = (gi.GROUP, gi.GLOBAL_IN_CLUSTER_IP_POOL)
LOCAL = (gi.GROUP, gi.IN_CLUSTER_IP_POOL)
APART = {kinds.SEPARATE_NETWORK_ANNOTATION: "true"}


def _pool(name, addresses, at, namespace=None, annotations=None):
    pool = gi.ip_pool(name, namespace=namespace, addresses=addresses, prefix=24, annotations=annotations)
    pool["metadata"]["creationTimestamp"] = at
    return pool


def _claim(name, pool, kind=gi.GLOBAL_IN_CLUSTER_IP_POOL, ns=NS):
    return gi.claim(name, ns, kind, pool)


def _ips(api):
    """(namespace, claim) -> IP of every live Cluster API IPAddress."""
    return {(o.namespace(a), o.name(a)): o.spec(a)["address"] for a in api.inventory.of_kind(kinds.CAPI_ADDRESS)
            if not o.is_deleting(a)}


def _overlapping(api, kind, name, ns=""):
    found = [c for c in o.status(get(api, kind, name, ns)).get("conditions", []) if c["type"] == "Overlapping"]
    return found[0] if found else None


def test_a_namespaced_pool_created_after_a_global_pool_withholds_their_overlap():
    api = converged(_pool("g", ["10.9.0.1-10.9.0.4"], "2024-01-01T00:00:00Z"),
                    _pool("n", ["10.9.0.3-10.9.0.6"], "2024-01-01T00:01:00Z", namespace=NS),
                    *[_claim(f"g{i}", "g") for i in range(4)],
                    *[_claim(f"n{i}", "n", gi.IN_CLUSTER_IP_POOL) for i in range(3)])
    ips = _ips(api)
    assert sorted(ip for (_, name), ip in ips.items() if name.startswith("g")) == [f"10.9.0.{i}" for i in (1, 2, 3, 4)]
    assert sorted(ip for (_, name), ip in ips.items() if name.startswith("n")) == ["10.9.0.5", "10.9.0.6"]
    condition = _overlapping(api, LOCAL, "n", NS)
    assert condition["reason"] == "OverlapsOtherPool"
    assert "10.9.0.3-10.9.0.4" in condition["message"] and "GlobalInClusterIPPool g" in condition["message"]
    assert _overlapping(api, GLOBAL, "g") is None


def test_a_global_pool_withholds_its_overlap_with_an_earlier_namespaced_pool_from_every_namespace():
    """Once it has a claim in the namespaced pool's namespace, the overlap is the namespaced pool's, whichever
    namespace a claim of the global pool is in."""
    api = converged(_pool("n", ["10.9.0.1-10.9.0.2"], "2024-01-01T00:00:00Z", namespace=NS),
                    _pool("g", ["10.9.0.1-10.9.0.4"], "2024-01-01T00:01:00Z"),
                    _claim("here", "g"), _claim("a", "g", ns="other"), _claim("b", "g", ns="other"))
    assert sorted(_ips(api).values()) == ["10.9.0.3", "10.9.0.4"]
    condition = _overlapping(api, GLOBAL, "g")
    assert condition["reason"] == "OverlapsOtherPool" and f"InClusterIPPool {NS}/n" in condition["message"]
    assert o.condition(o.status(get(api, kinds.CAPI_CLAIM, "b", "other")), "Ready")["reason"] == "PoolExhausted"


def test_a_later_global_pool_says_which_earlier_global_pool_owns_their_overlap():
    api = converged(_pool("g1", ["10.8.0.1-10.8.0.2"], "2024-01-01T00:00:00Z"),
                    _pool("g2", ["10.8.0.2-10.8.0.3"], "2024-01-01T00:01:00Z"))
    condition = _overlapping(api, GLOBAL, "g2")
    assert condition["status"] == "True" and condition["reason"] == "OverlapsOtherPool"
    assert "10.8.0.2" in condition["message"] and "GlobalInClusterIPPool g1" in condition["message"]
    assert _overlapping(api, GLOBAL, "g1") is None
    assert [e.target.name for e in api.events if e.reason == "OverlapsOtherPool"] == ["g2"]


def test_global_pools_marked_as_separate_networks_both_hand_out_their_overlap_and_say_so():
    api = converged(_pool("g1", ["10.8.0.1"], "2024-01-01T00:00:00Z"),
                    _pool("g2", ["10.8.0.1"], "2024-01-01T00:01:00Z", annotations=APART),
                    _claim("a", "g1"), _claim("b", "g2", ns="other"))
    assert _ips(api) == {(NS, "a"): "10.8.0.1", ("other", "b"): "10.8.0.1"}
    for mine, theirs in (("g1", "g2"), ("g2", "g1")):
        condition = _overlapping(api, GLOBAL, mine)
        assert condition["status"] == "True" and condition["reason"] == "SharesAddresses", condition
        assert f"GlobalInClusterIPPool {theirs}" in condition["message"]
        assert kinds.SEPARATE_NETWORK_ANNOTATION in condition["message"]


def test_a_global_pool_and_a_namespaced_pool_of_a_namespace_where_it_has_no_claim_are_independent():
    """As in the Go provider: an overlap with a pool of a namespace the global pool's claims are not in
    hands no IP to two claims of one namespace (Go state of this shape keeps serving after an upgrade)."""
    api = converged(_pool("g", ["10.9.0.1-10.9.0.2"], "2024-01-01T00:00:00Z"),
                    _pool("n", ["10.9.0.1-10.9.0.2"], "2024-01-01T00:01:00Z", namespace="team"),
                    _claim("a", "g", ns="other"), _claim("b", "n", gi.IN_CLUSTER_IP_POOL, ns="team"))
    assert _ips(api) == {("other", "a"): "10.9.0.1", ("team", "b"): "10.9.0.1"}
    assert _overlapping(api, LOCAL, "n", "team") is None and _overlapping(api, GLOBAL, "g") is None


def test_a_global_pools_first_claim_in_a_namespace_never_takes_an_ip_a_namespaced_pool_handed_out_there():
    """The global pool came first, the namespaced pool handed out the overlap while the global pool had no
    claim in its namespace: a claim of the global pool there skips those IPs, and the namespaced pool
    withholds the overlap from then on."""
    api = converged(_pool("g", ["10.9.0.1-10.9.0.4"], "2024-01-01T00:00:00Z"),
                    _pool("n", ["10.9.0.1-10.9.0.6"], "2024-01-01T00:01:00Z", namespace=NS),
                    _claim("a", "n", gi.IN_CLUSTER_IP_POOL), _claim("b", "n", gi.IN_CLUSTER_IP_POOL))
    assert _ips(api) == {(NS, "a"): "10.9.0.1", (NS, "b"): "10.9.0.2"}
    api.load(_claim("c", "g"))
    converge(api, random.Random(0))
    api.load(_claim("d", "n", gi.IN_CLUSTER_IP_POOL))
    converge(api, random.Random(0))
    assert _ips(api) == {(NS, "a"): "10.9.0.1", (NS, "b"): "10.9.0.2", (NS, "c"): "10.9.0.3", (NS, "d"): "10.9.0.5"}
    assert "GlobalInClusterIPPool g" in _overlapping(api, LOCAL, "n", NS)["message"]


def test_a_global_pool_marked_as_a_separate_network_shares_its_overlap_with_a_namespaced_pool():
    """Separate networks: a claim of each pool in one namespace may hold the same IP, as the user said."""
    api = converged(_pool("n", ["10.9.0.1"], "2024-01-01T00:00:00Z", namespace=NS),
                    _pool("g", ["10.9.0.1"], "2024-01-01T00:01:00Z", annotations=APART),
                    _claim("a", "n", gi.IN_CLUSTER_IP_POOL), _claim("b", "g"))
    assert _ips(api) == {(NS, "a"): "10.9.0.1", (NS, "b"): "10.9.0.1"}
    assert _overlapping(api, LOCAL, "n", NS)["reason"] == "SharesAddresses"
    assert _overlapping(api, GLOBAL, "g")["reason"] == "SharesAddresses"


def test_a_separate_network_annotation_other_than_true_shares_nothing():
    api = converged(_pool("g1", ["10.8.0.1"], "2024-01-01T00:00:00Z"),
                    _pool("g2", ["10.8.0.1"], "2024-01-01T00:01:00Z",
                          annotations={kinds.SEPARATE_NETWORK_ANNOTATION: "false"}),
                    _claim("a", "g1"), _claim("b", "g2", ns="other"))
    assert _ips(api) == {(NS, "a"): "10.8.0.1"}
    assert _overlapping(api, GLOBAL, "g2")["reason"] == "OverlapsOtherPool"


def test_annotating_a_global_pool_as_a_separate_network_hands_out_the_overlap_it_withheld():
    api = converged(_pool("g1", ["10.8.0.1"], "2024-01-01T00:00:00Z"),
                    _pool("g2", ["10.8.0.1"], "2024-01-01T00:01:00Z"),
                    _claim("a", "g1"), _claim("b", "g2", ns="other"))
    assert _ips(api) == {(NS, "a"): "10.8.0.1"}
    pool = get(api, GLOBAL, "g2", "")
    api.inventory.upsert({**pool, "metadata": {**pool["metadata"], "annotations": APART,
                                               "resourceVersion": api._next_version()}})
    converge(api, random.Random(0))
    assert _ips(api) == {(NS, "a"): "10.8.0.1", ("other", "b"): "10.8.0.1"}


def test_a_global_pool_never_hands_out_an_ip_another_pool_holds_in_its_claims_namespace():
    """An earlier global pool edited into a namespaced pool's range: the namespaced pool's addresses there
    stay its own (the global pool skips them for claims of that namespace)."""
    api = converged(_pool("g", ["10.9.0.5"], "2024-01-01T00:00:00Z"),
                    _pool("n", ["10.9.0.1-10.9.0.2"], "2024-01-01T00:01:00Z", namespace=NS),
                    _claim("a", "n", gi.IN_CLUSTER_IP_POOL), _claim("b", "n", gi.IN_CLUSTER_IP_POOL))
    pool = get(api, GLOBAL, "g", "")
    api.inventory.upsert({**pool, "metadata": {**pool["metadata"], "generation": 2,
                                               "resourceVersion": api._next_version()},
                          "spec": {**pool["spec"], "addresses": ["10.9.0.1-10.9.0.3"]}})
    api.load(_claim("c", "g"))
    converge(api, random.Random(0))
    assert _ips(api) == {(NS, "a"): "10.9.0.1", (NS, "b"): "10.9.0.2", (NS, "c"): "10.9.0.3"}


def test_a_global_pool_created_later_in_the_same_second_is_ordered_by_kind_and_name():
    """Pools created in one second: the order is kind, then name, the same on every replica."""
    api = converged(_pool("b", ["10.8.0.1"], "2024-01-01T00:00:00Z"),
                    _pool("a", ["10.8.0.1"], "2024-01-01T00:00:00Z"),
                    _claim("x", "b"), _claim("y", "a", ns="other"))
    assert _ips(api) == {("other", "y"): "10.8.0.1"}
    assert _overlapping(api, GLOBAL, "b")["reason"] == "OverlapsOtherPool"


def test_a_global_pool_first_in_order_makes_an_existing_namespaced_pool_withhold_their_overlap():
    """A new global pool earlier in kind order (same second) than a namespaced pool makes the namespaced
    pool withhold the overlap from then on: its pass comes, and its claims after that skip the overlap."""
    api = loaded(_pool("n", ["10.9.0.1-10.9.0.3"], "2024-01-01T00:00:00Z", namespace=NS))
    converge(api, random.Random(0))
    api.load(_pool("g", ["10.9.0.1"], "2024-01-01T00:00:00Z"))
    api.load(_claim("b", "g"))
    converge(api, random.Random(0))
    api.load(_claim("a", "n", gi.IN_CLUSTER_IP_POOL))
    converge(api, random.Random(0))
    assert _ips(api) == {(NS, "a"): "10.9.0.2", (NS, "b"): "10.9.0.1"}
    assert "10.9.0.1" in _overlapping(api, LOCAL, "n", NS)["message"]
