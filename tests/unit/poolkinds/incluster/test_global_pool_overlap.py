"""Global pools overlapping other global pools, or namespaced pools of a namespace where they have claims: by
default one of two overlapping pools owns the overlap and the other withholds it — of two global pools the one
created first (then by kind and name), as among the namespaced pools of a namespace; of a global pool and a
namespaced one, the namespaced pool. A global pool annotated ``ipam.metal3.io/separate-network: "true"`` (its
addresses are another network's) shares its overlaps instead, and both pools say so. A global pool and a
namespaced pool of a namespace where it has no claim are independent, as in the Go provider. Run through the
real reconcile to its fixed point in the in-memory store."""

from __future__ import annotations

import copy
import random

import netaddr
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from metal3_ipam.core import kinds
from metal3_ipam.core import objects as o
from metal3_ipam.core.actions import Create, Plan, Step
from metal3_ipam.core.reconcile import reconcile
from metal3_ipam.memory import converge
from metal3_ipam.testing import go_incluster as gi
from ipam_objects import converged_with_lock_namespace as _converged, held_spans
from ipam_objects import dated_ip_pool as _pool
from ipam_objects import admission_request, cluster, get, inventory_of, user_delete

NS = "default"
GLOBAL = (gi.GROUP, gi.GLOBAL_IN_CLUSTER_IP_POOL)
LOCAL = (gi.GROUP, gi.IN_CLUSTER_IP_POOL)
APART = {kinds.SEPARATE_NETWORK_ANNOTATION: "true"}


def _claim(name, pool, kind=gi.GLOBAL_IN_CLUSTER_IP_POOL, ns=NS):
    return gi.claim(name, ns, kind, pool)


def _ips(api):
    """(namespace, claim) -> IP of every live Cluster API IPAddress."""
    return {(o.namespace(a), o.name(a)): o.spec(a)["address"] for a in api.inventory.of_kind(kinds.CAPI_ADDRESS)
            if not o.is_deleting(a)}


def _overlapping(api, kind, name, ns=""):
    found = [c for c in o.status(get(api, kind, name, ns)).get("conditions", []) if c["type"] == "Overlapping"]
    return found[0] if found else None


def test_a_global_pool_with_claims_in_a_namespace_withholds_its_overlap_with_the_pools_there_whenever_created():
    """The namespaced pool owns the overlap, also when created after the global pool."""
    api = _converged(_pool("g", ["10.9.0.1-10.9.0.4"], "2024-01-01T00:00:00Z"),
                    _pool("n", ["10.9.0.3-10.9.0.6"], "2024-01-01T00:01:00Z", namespace=NS),
                    *[_claim(f"g{i}", "g") for i in range(3)],
                    *[_claim(f"n{i}", "n", gi.IN_CLUSTER_IP_POOL) for i in range(5)])
    ips = _ips(api)
    assert sorted(ip for (_, name), ip in ips.items() if name.startswith("g")) == ["10.9.0.1", "10.9.0.2"]
    assert sorted(ip for (_, name), ip in ips.items() if name.startswith("n")) == [f"10.9.0.{i}" for i in (3, 4, 5, 6)]
    # The namespaced pool says so: the global pool's status is written by every controller serving it (under -n,
    # each sees its own namespaces), so it says only what each sees alike.
    condition = _overlapping(api, LOCAL, "n", NS)
    assert condition["reason"] == "OverlapsGlobalPool"
    assert "10.9.0.3-10.9.0.4" in condition["message"] and "GlobalInClusterIPPool g" in condition["message"]
    assert _overlapping(api, GLOBAL, "g") is None
    assert o.condition(o.status(get(api, kinds.CAPI_CLAIM, "g2")), "Ready")["reason"] == "PoolExhausted"


def test_a_global_pool_withholds_its_overlap_with_a_namespaced_pool_from_its_claims_of_that_namespace_only():
    api = _converged(_pool("n", ["10.9.0.1-10.9.0.2"], "2024-01-01T00:00:00Z", namespace=NS),
                     _pool("g", ["10.9.0.1-10.9.0.3"], "2024-01-01T00:01:00Z"),
                     _claim("here", "g"), _claim("there", "g"), _claim("a", "g", ns="other"),
                     _claim("b", "g", ns="other"))
    assert _ips(api) == {(NS, "here"): "10.9.0.3", ("other", "a"): "10.9.0.1", ("other", "b"): "10.9.0.2"}
    ready = o.condition(o.status(get(api, kinds.CAPI_CLAIM, "there")), "Ready")
    assert ready["reason"] == "PoolExhausted" and "owned by pools of the namespace" in ready["message"]


def test_a_later_global_pool_says_which_earlier_global_pool_owns_their_overlap():
    api = _converged(_pool("g1", ["10.8.0.1-10.8.0.2"], "2024-01-01T00:00:00Z"),
                    _pool("g2", ["10.8.0.2-10.8.0.3"], "2024-01-01T00:01:00Z"))
    condition = _overlapping(api, GLOBAL, "g2")
    assert condition["status"] == "True" and condition["reason"] == "OverlapsOtherPool"
    assert "10.8.0.2" in condition["message"] and "GlobalInClusterIPPool g1" in condition["message"]
    assert _overlapping(api, GLOBAL, "g1") is None
    assert [e.target.name for e in api.events if e.reason == "OverlapsOtherPool"] == ["g2"]


def test_global_pools_marked_as_separate_networks_both_hand_out_their_overlap_and_say_so():
    api = _converged(_pool("g1", ["10.8.0.1"], "2024-01-01T00:00:00Z"),
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
    api = _converged(_pool("g", ["10.9.0.1-10.9.0.2"], "2024-01-01T00:00:00Z"),
                    _pool("n", ["10.9.0.1-10.9.0.2"], "2024-01-01T00:01:00Z", namespace="team"),
                    _claim("a", "g", ns="other"), _claim("b", "n", gi.IN_CLUSTER_IP_POOL, ns="team"))
    assert _ips(api) == {("other", "a"): "10.9.0.1", ("team", "b"): "10.9.0.1"}
    assert _overlapping(api, LOCAL, "n", "team") is None and _overlapping(api, GLOBAL, "g") is None


def test_a_global_pools_first_claim_in_a_namespace_never_takes_an_ip_a_namespaced_pool_handed_out_there():
    """The namespaced pool handed out the overlap while the global pool had no claim in its namespace, and
    claims of the global pool elsewhere had some of it too: from the global pool's first claim there on, it
    withholds the overlap from its claims there; those of other namespaces keep it."""
    api = _converged(_pool("g", ["10.9.0.1-10.9.0.8"], "2024-01-01T00:00:00Z"),
                    _pool("n", ["10.9.0.1-10.9.0.6"], "2024-01-01T00:01:00Z", namespace=NS),
                    _claim("a", "n", gi.IN_CLUSTER_IP_POOL), _claim("b", "n", gi.IN_CLUSTER_IP_POOL),
                    _claim("x", "g", ns="other"))
    assert _ips(api) == {(NS, "a"): "10.9.0.1", (NS, "b"): "10.9.0.2", ("other", "x"): "10.9.0.1"}
    api.load(_claim("c", "g"))
    api.load(_claim("y", "g", ns="other"))
    converge(api, random.Random(0))
    api.load(_claim("d", "n", gi.IN_CLUSTER_IP_POOL))
    converge(api, random.Random(0))
    assert _ips(api) == {(NS, "a"): "10.9.0.1", (NS, "b"): "10.9.0.2", (NS, "c"): "10.9.0.7", (NS, "d"): "10.9.0.3",
                         ("other", "x"): "10.9.0.1", ("other", "y"): "10.9.0.2"}
    assert "GlobalInClusterIPPool g" in _overlapping(api, LOCAL, "n", NS)["message"]


def test_a_namespaced_pool_says_a_global_pool_withholds_their_overlap_while_it_has_claims_there():
    api = _converged(_pool("n", ["10.9.0.1"], "2024-01-01T00:00:00Z", namespace=NS),
                     _pool("g", ["10.9.0.1-10.9.0.2"], "2024-01-01T00:00:00Z"), _claim("here", "g"))
    assert _ips(api) == {(NS, "here"): "10.9.0.2"}
    assert _overlapping(api, LOCAL, "n", NS)["reason"] == "OverlapsGlobalPool"
    user_delete(api, kinds.CAPI_CLAIM, "here")
    converge(api, random.Random(0))
    assert _ips(api) == {} and _overlapping(api, LOCAL, "n", NS) is None


def test_a_namespaced_pool_created_where_a_global_pool_has_claims_skips_the_ips_they_hold():
    api = _converged(_pool("g", ["10.9.0.1-10.9.0.8"], "2024-01-01T00:00:00Z"), _claim("c", "g"))
    assert _ips(api) == {(NS, "c"): "10.9.0.1"}
    api.load(_pool("n", ["10.9.0.1-10.9.0.3"], "2024-01-01T00:01:00Z", namespace=NS))
    api.load(_claim("a", "n", gi.IN_CLUSTER_IP_POOL))
    api.load(_claim("d", "g"))
    converge(api, random.Random(0))
    assert _ips(api) == {(NS, "c"): "10.9.0.1", (NS, "a"): "10.9.0.2", (NS, "d"): "10.9.0.4"}


def test_a_namespaced_pool_created_while_a_global_pool_hands_out_an_ip_there_never_hands_out_the_same():
    api = _converged(_pool("g", ["10.9.0.1-10.9.0.8"], "2024-01-01T00:00:00Z"), _claim("c", "g"))
    api.load(_claim("d", "g"))
    on_its_way = reconcile(api.inventory.snapshot(o.PoolKey("", "g", GLOBAL), api.now))
    api.load(_pool("n", ["10.9.0.1-10.9.0.3"], "2024-01-01T00:01:00Z", namespace=NS))
    api.load(_claim("a", "n", gi.IN_CLUSTER_IP_POOL))
    api.apply(reconcile(api.inventory.snapshot(o.PoolKey(NS, "n", LOCAL), api.now)))
    api.apply(on_its_way)
    converge(api, random.Random(0))
    ips = list(_ips(api).values())
    assert len(ips) == len(set(ips)), _ips(api)


def test_a_namespaced_pools_allocation_carried_out_after_a_global_pools_of_the_same_ip_there_is_refused():
    """The other order: the global pool's allocation lands first, and the namespaced pool's guard is refused."""
    api = _converged(_pool("g", ["10.9.0.1-10.9.0.8"], "2024-01-01T00:00:00Z"), _claim("c", "g"))
    api.load(_claim("d", "g"))
    global_plan = reconcile(api.inventory.snapshot(o.PoolKey("", "g", GLOBAL), api.now))
    api.load(_pool("n", ["10.9.0.1-10.9.0.3"], "2024-01-01T00:01:00Z", namespace=NS))
    api.load(_claim("a", "n", gi.IN_CLUSTER_IP_POOL))
    local_plan = reconcile(api.inventory.snapshot(o.PoolKey(NS, "n", LOCAL), api.now))
    assert not api.apply(global_plan)
    assert [r for r in api.apply(local_plan) if "10-9-0-2.nsip already exists" in r]
    converge(api, random.Random(0))
    assert _ips(api) == {(NS, "c"): "10.9.0.1", (NS, "d"): "10.9.0.2", (NS, "a"): "10.9.0.3"}


def test_an_address_written_before_its_claim_of_a_namespaced_pool_is_refused_where_a_global_pools_claim_holds_it():
    api = _converged(_pool("g", ["10.9.0.1-10.9.0.8"], "2024-01-01T00:00:00Z"), _claim("c", "g"))
    api.load(_pool("n", ["10.9.0.1-10.9.0.3"], "2024-01-01T00:01:00Z", namespace=NS))
    api.load({"apiVersion": gi.CAPI_API_VERSION, "kind": "IPAddress", "metadata": {"name": "a", "namespace": NS},
              "spec": {"claimRef": {"name": "a"}, "poolRef": {"apiGroup": gi.GROUP, "kind": LOCAL[1], "name": "n"},
                       "address": "10.9.0.1", "prefix": 24}})
    api.load(_claim("a", "n", gi.IN_CLUSTER_IP_POOL))
    converge(api, random.Random(0))
    ready = o.condition(o.status(get(api, kinds.CAPI_CLAIM, "a")), "Ready")
    assert ready["status"] == "False" and ready["reason"] == "AddressConflict", ready
    assert "which IPAddressClaim default/c holds" in ready["message"] and "GlobalInClusterIPPool g" in ready["message"]


def _guards(api):
    """(namespace, name) -> the uid of the claim owning it, of every guard of an IP."""
    return {(o.namespace(a), o.name(a)): o.owner_references(a)[0]["uid"]
            for a in api.inventory.of_kind(kinds.IPADDRESS) if o.is_guard(a)}


def test_a_claims_guard_goes_with_its_lock_when_it_is_released():
    api = _converged(_pool("g", ["10.9.0.1-10.9.0.8"], "2024-01-01T00:00:00Z"), _claim("c", "g"))
    claim = get(api, kinds.CAPI_CLAIM, "c")
    assert _guards(api) == {(NS, "10-9-0-1.nsip"): o.meta(claim)["uid"]}
    user_delete(api, kinds.CAPI_CLAIM, "c")
    converge(api, random.Random(0))
    assert get(api, kinds.CAPI_CLAIM, "c") is None and not list(api.inventory.of_kind(kinds.IPADDRESS))


def test_a_guard_left_by_a_claim_that_is_gone_keeps_nothing():
    """Its claim gone before the garbage collector took it: the next allocation of its IP replaces it."""
    api = _converged(_pool("g", ["10.9.0.1-10.9.0.8"], "2024-01-01T00:00:00Z"))
    claim_ref = {"apiVersion": gi.CAPI_API_VERSION, "kind": "IPAddressClaim", "name": "old", "namespace": NS}
    api.load({"apiVersion": kinds.METAL3_API_VERSION, "kind": "IPAddress",
              "metadata": {"name": "10-9-0-1.nsip", "namespace": NS, "labels": {kinds.GUARD_LABEL: "10-9-0-1"},
                           "ownerReferences": [{**claim_ref, "uid": "gone"}]},
              "spec": {"address": "10.9.0.1", "claim": claim_ref,
                       "pool": {"apiVersion": gi.POOL_API_VERSION, "kind": GLOBAL[1], "name": "g"}}})
    api.load(_claim("c", "g"))
    converge(api, random.Random(0))
    assert _ips(api) == {(NS, "c"): "10.9.0.1"}
    assert _guards(api) == {(NS, "10-9-0-1.nsip"): o.meta(get(api, kinds.CAPI_CLAIM, "c"))["uid"]}


def test_a_global_pool_skips_the_ips_a_pool_being_deleted_still_holds_in_its_claims_namespace():
    """A pool being deleted owns nothing any more, but its addresses hold their IPs until they are gone."""
    api = _converged(_pool("n", ["10.9.0.1-10.9.0.2"], "2024-01-01T00:00:00Z", namespace=NS),
                    _claim("a", "n", gi.IN_CLUSTER_IP_POOL))
    user_delete(api, LOCAL, "n")
    api.load(_pool("g", ["10.9.0.1-10.9.0.2"], "2024-01-01T00:01:00Z"))
    api.load(_claim("b", "g"))
    converge(api, random.Random(0))
    assert _ips(api) == {(NS, "a"): "10.9.0.1", (NS, "b"): "10.9.0.2"}


def test_an_ip_a_global_pools_claim_cannot_take_in_its_namespace_stays_free_for_its_claims_elsewhere():
    """An address of another pool written by hand in one namespace keeps its IP from the global pool's claims
    there only: the pool counts it free (every controller counts alike, whichever claims it serves), and a claim
    of another namespace, served in the same pass as a claim refused here, is given it."""
    written = {"apiVersion": gi.CAPI_API_VERSION, "kind": "IPAddress", "metadata": {"name": "w", "namespace": NS},
               "spec": {"claimRef": {"name": "w"}, "poolRef": {"apiGroup": gi.GROUP, "kind": LOCAL[1], "name": "n"},
                        "address": "10.9.0.2", "prefix": 24}}
    api = _converged(_pool("g", ["10.9.0.1-10.9.0.2"], "2024-01-01T00:00:00Z"), written,
                     _claim("b", "g", ns="other"), _claim("here", "g"))
    assert _ips(api) == {(NS, "w"): "10.9.0.2", ("other", "b"): "10.9.0.1"}
    assert o.status(get(api, GLOBAL, "g", ""))["ipAddresses"] == {"total": 2, "used": 1, "free": 1, "outOfRange": 0}
    api.load(_claim("there", "g", ns="third"))
    converge(api, random.Random(0))
    assert _ips(api) == {(NS, "w"): "10.9.0.2", ("other", "b"): "10.9.0.1", ("third", "there"): "10.9.0.2"}
    assert o.condition(o.status(get(api, kinds.CAPI_CLAIM, "here")), "Ready")["reason"] == "PoolExhausted"


def test_a_global_pool_marked_as_a_separate_network_shares_its_overlap_with_a_namespaced_pool():
    """Separate networks: a claim of each pool in one namespace may hold the same IP, as the user said."""
    api = _converged(_pool("n", ["10.9.0.1"], "2024-01-01T00:00:00Z", namespace=NS),
                    _pool("g", ["10.9.0.1"], "2024-01-01T00:01:00Z", annotations=APART),
                    _claim("a", "n", gi.IN_CLUSTER_IP_POOL), _claim("b", "g"))
    assert _ips(api) == {(NS, "a"): "10.9.0.1", (NS, "b"): "10.9.0.1"}
    condition = _overlapping(api, LOCAL, "n", NS)
    assert condition["reason"] == "SharesAddresses" and "GlobalInClusterIPPool g" in condition["message"]


def test_a_separate_network_annotation_other_than_true_shares_nothing():
    api = _converged(_pool("g1", ["10.8.0.1"], "2024-01-01T00:00:00Z"),
                    _pool("g2", ["10.8.0.1"], "2024-01-01T00:01:00Z",
                          annotations={kinds.SEPARATE_NETWORK_ANNOTATION: "false"}),
                    _claim("a", "g1"), _claim("b", "g2", ns="other"))
    assert _ips(api) == {(NS, "a"): "10.8.0.1"}
    assert _overlapping(api, GLOBAL, "g2")["reason"] == "OverlapsOtherPool"


def test_annotating_a_global_pool_as_a_separate_network_hands_out_the_overlap_it_withheld():
    api = _converged(_pool("g1", ["10.8.0.1"], "2024-01-01T00:00:00Z"),
                    _pool("g2", ["10.8.0.1"], "2024-01-01T00:01:00Z"),
                    _claim("a", "g1"), _claim("b", "g2", ns="other"))
    assert _ips(api) == {(NS, "a"): "10.8.0.1"}
    pool = get(api, GLOBAL, "g2", "")
    api.inventory.upsert({**pool, "metadata": {**pool["metadata"], "annotations": APART,
                                               "resourceVersion": api._next_version()}})
    converge(api, random.Random(0))
    assert _ips(api) == {(NS, "a"): "10.8.0.1", ("other", "b"): "10.8.0.1"}


def test_global_pools_created_in_the_same_second_are_ordered_by_kind_and_name():
    """The order is the same on every replica: creationTimestamp, then kind, then name."""
    api = _converged(_pool("b", ["10.8.0.1"], "2024-01-01T00:00:00Z"),
                    _pool("a", ["10.8.0.1"], "2024-01-01T00:00:00Z"),
                    _claim("x", "b"), _claim("y", "a", ns="other"))
    assert _ips(api) == {("other", "y"): "10.8.0.1"}
    assert _overlapping(api, GLOBAL, "b")["reason"] == "OverlapsOtherPool"


# -- admission: the webhook warns of every overlap a global pool takes part in -------------------------------

def _review(*live, operation="CREATE", obj, old=None):
    from metal3_ipam.controller.admission import Admission
    return Admission(inventory_of(*live)).review(admission_request(operation, obj, old))


def test_a_global_pool_overlapping_an_earlier_global_pool_is_admitted_with_a_warning():
    response = _review(_pool("g1", ["10.8.0.1-10.8.0.4"], "2024-01-01T00:00:00Z"),
                       obj=_pool("g2", ["10.8.0.3-10.8.0.9"], "2024-01-01T00:01:00Z"))
    assert response["allowed"]
    (warning,) = response["warnings"]
    assert "10.8.0.3-10.8.0.4" in warning and "GlobalInClusterIPPool g1" in warning
    assert "created earlier" in warning and "does not hand" in warning
    assert kinds.SEPARATE_NETWORK_ANNOTATION in warning


def test_a_global_pool_marked_as_a_separate_network_is_told_it_shares_its_overlap():
    response = _review(_pool("g1", ["10.8.0.1-10.8.0.4"], "2024-01-01T00:00:00Z"),
                       obj=_pool("g2", ["10.8.0.4"], "2024-01-01T00:01:00Z", annotations=APART))
    (warning,) = response["warnings"]
    assert "10.8.0.4" in warning and "both hand it out" in warning


def test_a_namespaced_pool_overlapping_a_global_pool_with_claims_in_its_namespace_is_warned():
    glob = _pool("g", ["10.9.0.1-10.9.0.4"], "2024-01-01T00:00:00Z")
    local = _pool("n", ["10.9.0.3-10.9.0.6"], "2024-01-01T00:01:00Z", namespace=NS)
    (warning,) = _review(glob, _claim("a", "g"), obj=local)["warnings"]
    assert "10.9.0.3-10.9.0.4" in warning and "GlobalInClusterIPPool g, which does not hand it to its claims" in warning
    # Without a claim of the global pool in the namespace they are independent, for now: said so.
    (warning,) = _review(glob, _claim("a", "g", ns="other"), obj=local)["warnings"]
    assert f"once GlobalInClusterIPPool g has a claim in namespace {NS}" in warning


def test_a_global_pool_is_warned_of_the_namespaced_pools_it_overlaps():
    local = _pool("n", ["10.9.0.3-10.9.0.6"], "2024-01-01T00:00:00Z", namespace=NS)
    (warning,) = _review(local, obj=_pool("g", ["10.9.0.1-10.9.0.4"], "2024-01-01T00:01:00Z"))["warnings"]
    assert f"InClusterIPPool {NS}/n" in warning and "10.9.0.3-10.9.0.4" in warning
    assert "they are independent for now" in warning
    (warning,) = _review(local, _claim("a", "g"), obj=_pool("g", ["10.9.0.1-10.9.0.4"], "2024-01-01T00:01:00Z"))[
        "warnings"]
    assert "a pool of the namespace goes before a global pool" in warning
    assert f"does not hand it to its claims of namespace {NS}" in warning


def test_pools_that_do_not_overlap_a_global_pool_get_no_warning():
    response = _review(_pool("g1", ["10.8.0.1-10.8.0.4"], "2024-01-01T00:00:00Z"),
                       _pool("n", ["10.9.0.1"], "2024-01-01T00:00:00Z", namespace=NS),
                       obj=_pool("g2", ["10.8.0.5"], "2024-01-01T00:01:00Z"))
    assert response == {"uid": "u-1", "allowed": True}


def test_a_separate_network_annotation_is_true_or_false():
    response = _review(obj=_pool("g", ["10.8.0.1"], "2024-01-01T00:00:00Z",
                                 annotations={kinds.SEPARATE_NETWORK_ANNOTATION: "yes"}))
    assert not response["allowed"]
    message = response["status"]["message"]
    assert f"metadata.annotations[{kinds.SEPARATE_NETWORK_ANNOTATION}]" in message and '"yes"' in message


def test_a_separate_network_annotation_on_a_namespaced_pool_is_warned_of_as_having_no_effect():
    (warning,) = _review(obj=_pool("n", ["10.9.0.1"], "2024-01-01T00:00:00Z", namespace=NS,
                                   annotations=APART))["warnings"]
    assert kinds.SEPARATE_NETWORK_ANNOTATION in warning and "global pool" in warning


def test_an_edit_of_the_separate_network_annotation_reaches_the_webhook():
    """Its match condition lets through a change of the annotation on a global pool, not only of the spec."""
    from metal3_ipam.controller.webhook import hooks
    hook = next(h for h in hooks() if h.kind == GLOBAL and h.operations == ("CREATE", "UPDATE") and not h.mutating)
    (condition,) = hook.match_conditions
    assert kinds.SEPARATE_NETWORK_ANNOTATION in condition["expression"]


def test_a_namespaced_prefix_pool_created_while_a_global_pool_hands_out_an_ip_there_never_holds_it_too():
    api = _converged(_pool("g", ["fd00::1-fd00::8"], "2024-01-01T00:00:00Z"), _claim("c", "g"))
    api.load(_claim("d", "g"))
    on_its_way = reconcile(api.inventory.snapshot(o.PoolKey("", "g", GLOBAL), api.now))
    prefixes = gi.prefix_pool("np", prefixes=["fd00::2/127"], namespace=NS, allocation_prefix_length=127)
    prefixes["metadata"]["creationTimestamp"] = "2024-01-01T00:01:00Z"
    api.load(prefixes)
    api.load(_claim("a", "np", gi.IN_CLUSTER_PREFIX_POOL))
    api.apply(reconcile(api.inventory.snapshot(o.PoolKey(NS, "np", (gi.GROUP, gi.IN_CLUSTER_PREFIX_POOL)), api.now)))
    api.apply(on_its_way)
    converge(api, random.Random(0))
    ips = list(_ips(api).values())
    assert len(ips) == len(set(ips)), _ips(api)


PREFIX = (gi.GROUP, gi.IN_CLUSTER_PREFIX_POOL)


def _prefix_pool(name, prefixes, length, created="2024-01-01T00:01:00Z"):
    pool = gi.prefix_pool(name, prefixes=prefixes, namespace=NS, allocation_prefix_length=length)
    pool["metadata"]["creationTimestamp"] = created
    return pool


def test_a_namespaced_prefix_pools_sub_prefix_carried_out_after_a_global_pools_ip_in_it_is_refused():
    """The other order: the global pool's allocation lands first, and the prefix pool's allocation is refused
    whole (it read the global pool's claim before that pass wrote it, and writes it first on that condition); it
    hands out the next sub-prefix."""
    api = _converged(_pool("g", ["fd00::1-fd00::8"], "2024-01-01T00:00:00Z"), _claim("c", "g"))
    api.load(_claim("d", "g"))
    global_plan = reconcile(api.inventory.snapshot(o.PoolKey("", "g", GLOBAL), api.now))
    api.load(_prefix_pool("np", ["fd00::2/127", "fd00::10/127"], 127))
    api.load(_claim("a", "np", gi.IN_CLUSTER_PREFIX_POOL))
    local_plan = reconcile(api.inventory.snapshot(o.PoolKey(NS, "np", PREFIX), api.now))
    assert not api.apply(global_plan)
    assert api.apply(local_plan) == [f"IPAddressClaim {NS}/a: IPAddressClaim {NS}/d changed since it was read"]
    assert not [o.name(a) for a in api.inventory.of_kind(kinds.IPADDRESS) if "fd00-0-0-0-0-0-0-2.127" in o.name(a)]
    converge(api, random.Random(0))
    assert _ips(api) == {(NS, "c"): "fd00::1", (NS, "d"): "fd00::2", (NS, "a"): "fd00::10"}


def test_a_namespaced_sub_prefixs_guards_of_a_global_pools_ips_in_it_go_with_its_lock():
    """Each IP of the sub-prefix a global pool holds is guarded (not those it does not hold), and so is the
    sub-prefix itself; a global pool's claim of the namespace takes none of them, and joins the guard of the
    namespaced pool's sub-prefix holding its IP (with its pool); released, the claim's guards go."""
    api = _converged(_pool("g", ["fd00::3-fd00::8"], "2024-01-01T00:00:00Z"),
                     _prefix_pool("np", ["fd00::/126"], 126), _claim("a", "np", gi.IN_CLUSTER_PREFIX_POOL))
    claim = get(api, kinds.CAPI_CLAIM, "a")
    assert _ips(api) == {(NS, "a"): "fd00::"}
    assert _guards(api) == {(NS, "fd00-0-0-0-0-0-0-3.nsip"): o.meta(claim)["uid"],
                            (NS, "fd00-0-0-0-0-0-0-0.126.nsip"): o.meta(claim)["uid"]}
    api.load(_claim("c", "g"))
    converge(api, random.Random(0))
    assert _ips(api)[(NS, "c")] == "fd00::4"
    user_delete(api, kinds.CAPI_CLAIM, "a")
    converge(api, random.Random(0))
    assert _guards(api) == {(NS, "fd00-0-0-0-0-0-0-4.nsip"): o.meta(get(api, kinds.CAPI_CLAIM, "c"))["uid"],
                            (NS, "fd00-0-0-0-0-0-0-4.126.nsip"): o.meta(get(api, GLOBAL, "g", ""))["uid"]}


def test_a_namespaced_sub_prefix_holding_more_global_pool_ips_than_can_be_guarded_is_not_handed_out():
    """Guarding it would take more than 256 writes: the next sub-prefix is handed out instead."""
    api = _converged(_pool("g", ["fd00::1-fd00::201"], "2024-01-01T00:00:00Z"),
                     _prefix_pool("np", ["fd00::/118"], 119), _claim("a", "np", gi.IN_CLUSTER_PREFIX_POOL))
    assert _ips(api) == {(NS, "a"): "fd00::200"}
    assert set(_guards(api)) == {(NS, "fd00-0-0-0-0-0-0-200.nsip"), (NS, "fd00-0-0-0-0-0-0-201.nsip"),
                                 (NS, "fd00-0-0-0-0-0-0-200.119.nsip")}
    api.load(_claim("b", "np", gi.IN_CLUSTER_PREFIX_POOL))
    converge(api, random.Random(0))
    ready = o.condition(o.status(get(api, kinds.CAPI_CLAIM, "b")), "Ready")
    assert ready["reason"] == "PoolExhausted", ready
    assert "fd00::/119 meet more than 256 addresses or sub-prefixes of global pools" in ready["message"], ready


# -- a global pool and a namespaced pool of either kind, their passes landing in any order -------------------

EVENTS = ("global claim", "global plans", "global lands", "global pool edited", "local pool created",
          "local pool edited", "local pool deleted", "local claim", "local plans", "local lands")
GLOBAL_PREFIXES = (gi.GROUP, gi.GLOBAL_IN_CLUSTER_PREFIX_POOL)


def _global_prefix_pool(name, prefixes, length):
    pool = gi.prefix_pool(name, prefixes=prefixes, allocation_prefix_length=length)
    pool["metadata"]["creationTimestamp"] = "2024-01-01T00:00:00Z"
    return pool


# (the global pool, the namespaced pool created, its spec once edited, the length of each kind's addresses):
# a global IP pool and a namespaced prefix pool; a global prefix pool (/126) and a namespaced IP pool, a
# namespaced prefix pool of smaller sub-prefixes (its pools share the guard of each /126 they meet) or of
# larger ones (each holding two /126).
SHAPES = {
    "ip-prefix": (_pool("g", ["fd00::1-fd00::8"], "2024-01-01T00:00:00Z"),
                  _prefix_pool("n", ["fd00::/126"], 127), {"prefixes": ["fd00::2/127", "fd00::4/127"]},
                  {GLOBAL[1]: 128, PREFIX[1]: 127}),
    "prefix-ip": (_global_prefix_pool("g", ["fd00::/124"], 126), _pool("n", ["fd00::4-fd00::7"],
                                                                         "2024-01-01T00:01:00Z", namespace=NS),
                  {"addresses": ["fd00::1-fd00::2", "fd00::9"], "prefix": 24},
                  {GLOBAL_PREFIXES[1]: 126, LOCAL[1]: 128}),
    "prefix-narrower": (_global_prefix_pool("g", ["fd00::/124"], 126), _prefix_pool("n", ["fd00::4/126"], 127),
                        {"prefixes": ["fd00::/127", "fd00::8/127"]}, {GLOBAL_PREFIXES[1]: 126, PREFIX[1]: 127}),
    "prefix-wider": (_global_prefix_pool("g", ["fd00::/124"], 126), _prefix_pool("n", ["fd00::/124"], 125),
                     {"prefixes": ["fd00::8/125"]}, {GLOBAL_PREFIXES[1]: 126, PREFIX[1]: 125}),
}



@settings(max_examples=300, deadline=None)
@given(shape=st.sampled_from(sorted(SHAPES)), order=st.permutations(EVENTS), settled=st.booleans(),
       seed=st.integers(0, 1000))
def test_a_global_pool_and_a_namespaced_pool_never_hold_one_ip_for_two_claims_in_any_order(
        shape, order, settled, seed):
    """A pass's writes land after others' (a replica behind, or slow): the namespaced pool created, edited,
    deleted and claimed from while allocations of the global pool there are on their way, the global pool edited
    off the namespaced pool's addresses, and the other way round. With ``settled``, the global pool has a claim in
    the namespace before; else its first one is on its way."""
    glob, local, edited_spec, lengths = SHAPES[shape]
    global_kind, local_kind = kinds.kind_of(glob), kinds.kind_of(local)
    rng = random.Random(seed)
    api = _converged(glob, *([_claim("c", "g", global_kind[1])] if settled else []))
    on_its_way: dict[str, list] = {"global": [], "local": []}
    keys = {"global": o.PoolKey("", "g", global_kind), "local": o.PoolKey(NS, "n", local_kind)}
    for event in order:
        side, what = event.split(" ", 1)
        if what == "claim":
            api.load(_claim("d", "g", global_kind[1]) if side == "global" else _claim("a", "n", local_kind[1]))
        elif what == "pool created":
            api.load(local)
        elif what == "pool edited" and side == "global":
            _changed(global_kind, "g", "", "edited")(api)
        elif what == "pool edited" and get(api, local_kind, "n", NS) is not None:
            edited = copy.deepcopy(get(api, local_kind, "n", NS))
            edited["spec"] = {**edited["spec"], **edited_spec}
            api._store(edited)
        elif what == "pool deleted" and get(api, local_kind, "n", NS) is not None:
            user_delete(api, local_kind, "n", NS)
        elif what == "plans" and (side == "global" or get(api, local_kind, "n", NS) is not None):
            on_its_way[side].append(reconcile(api.inventory.snapshot(keys[side], api.now, rng)))
        elif what == "lands" and on_its_way[side]:
            api.apply(on_its_way[side].pop(0))
        assert all(len(claims) == 1 for claims in held_spans(api, lengths).values()), (event, held_spans(api, lengths))
    converge(api, rng)
    assert all(len(claims) == 1 for claims in held_spans(api, lengths).values()), held_spans(api, lengths)
    for claim in api.inventory.of_kind(kinds.CAPI_CLAIM):
        assert o.condition(o.status(claim), "Ready") is not None, o.name(claim)


def test_a_namespaced_ip_pool_created_while_a_global_prefix_pool_hands_out_a_sub_prefix_there_never_holds_it_too():
    """The global prefix pool's allocation guards its sub-prefix; the namespaced IP pool's allocation of an IP in
    it guards that sub-prefix for the namespace's pools, first: the API server refuses the global one's."""
    api = _converged(_global_prefix_pool("gp", ["fd00::/124"], 126),
                     _claim("c", "gp", gi.GLOBAL_IN_CLUSTER_PREFIX_POOL))
    api.load(_claim("d", "gp", gi.GLOBAL_IN_CLUSTER_PREFIX_POOL))
    on_its_way = reconcile(api.inventory.snapshot(o.PoolKey("", "gp", GLOBAL_PREFIXES), api.now))
    api.load(_pool("n", ["fd00::4-fd00::7"], "2024-01-01T00:01:00Z", namespace=NS))
    api.load(_claim("a", "n", gi.IN_CLUSTER_IP_POOL))
    api.apply(reconcile(api.inventory.snapshot(o.PoolKey(NS, "n", LOCAL), api.now)))
    api.apply(on_its_way)
    converge(api, random.Random(0))
    assert held_spans(api, {GLOBAL_PREFIXES[1]: 126, LOCAL[1]: 128}) == {
        **{(NS, str(netaddr.IPAddress(f"fd00::{i:x}"))): {"c"} for i in range(4)}, (NS, "fd00::4"): {"a"},
        **{(NS, str(netaddr.IPAddress(f"fd00::{i:x}"))): {"d"} for i in range(8, 12)}}
    (guard,) = [a for a in api.inventory.of_kind(kinds.IPADDRESS) if o.is_guard(a) and "126" in o.name(a)
                and [r["kind"] for r in o.owner_references(a)] == ["InClusterIPPool", kinds.CAPI_CLAIM[1]]]
    assert o.name(guard) == "fd00-0-0-0-0-0-0-4.126.nsip" and o.spec(guard)["prefix"] == 126


# -- a global pool's pass landing after it was deleted or edited ---------------------------------------------


def _global_pass_on_its_way_then(change):
    """A global pool's pass for a claim of the namespace made, then ``change`` to the global pool, then a
    namespaced pool over its IPs created and its claim served, and the global pool's pass landing last."""
    api = _converged(_pool("g", ["10.9.0.1-10.9.0.8"], "2024-01-01T00:00:00Z"), _claim("c", "g"))
    api.load(_claim("d", "g"))
    on_its_way = reconcile(api.inventory.snapshot(o.PoolKey("", "g", GLOBAL), api.now))
    change(api)
    api.load(_pool("n", ["10.9.0.1-10.9.0.3"], "2024-01-01T00:01:00Z", namespace=NS))
    api.load(_claim("a", "n", gi.IN_CLUSTER_IP_POOL))
    api.apply(reconcile(api.inventory.snapshot(o.PoolKey(NS, "n", LOCAL), api.now)))
    api.apply(on_its_way)
    converge(api, random.Random(0))
    return api


def test_a_global_pools_pass_landing_after_its_deletion_never_takes_an_ip_a_namespaced_pool_handed_out_meanwhile():
    api = _global_pass_on_its_way_then(lambda api: user_delete(api, GLOBAL, "g", ""))
    held = held_spans(api)
    assert all(len(claims) == 1 for claims in held.values()), held


@pytest.mark.parametrize("length", [128, 124])
@pytest.mark.parametrize("named", [False, True])
def test_a_global_pools_first_pass_landing_after_its_pool_went_never_takes_what_a_namespaced_prefix_pool_handed_out(
        length, named):
    """A global pool's first pass (an IP, or a /124 holding the namespaced pool's /127) made, the pool deleted
    before that pass wrote its finalizer (gone at once: no length of it is left to go by), a namespaced prefix pool
    created and its claim served, the global pass landing last: the namespaced allocation writes the gone pool's
    waiting claim, refusing that pass, or (``named``: the pass wrote the claim first) guards what the claim names,
    the /124 holding its /127 by the guard's name that pass writes."""
    api = _converged()
    glob = _pool("g", ["fd00::-fd00::ff"], "2024-01-01T00:00:00Z") if length == 128 else \
        _global_prefix_pool("g", ["fd00::/120"], 124)
    kind = kinds.kind_of(glob)
    api.load(glob)
    api.load(_claim("d", "g", kind[1]))
    on_its_way = reconcile(api.inventory.snapshot(o.PoolKey("", "g", kind), api.now))
    if named:
        (step,) = [s for s in on_its_way.steps if s.subject.endswith(f"{NS}/d")]
        api.do(step.actions[0])
        on_its_way = Plan(steps=[Step(step.subject, step.actions[1:], step.about)])
    user_delete(api, kind, "g", "")
    assert get(api, kind, "g", "") is None
    api.load(_prefix_pool("n", ["fd00::/124"], 127))
    api.load(_claim("a", "n", PREFIX[1]))
    api.apply(reconcile(api.inventory.snapshot(o.PoolKey(NS, "n", PREFIX), api.now)))
    api.apply(on_its_way)
    converge(api, random.Random(0))
    held = held_spans(api, {kind[1]: length, PREFIX[1]: 127})
    assert all(len(claims) == 1 for claims in held.values()), held
    assert held[(NS, "fd00::")] == {"a"}


def test_a_global_pools_pass_landing_after_an_edit_that_dropped_the_ip_never_takes_it_from_a_namespaced_pool():
    def drop_the_ip(api):
        pool = copy.deepcopy(get(api, GLOBAL, "g", ""))
        pool["spec"]["addresses"] = ["10.9.0.1", "10.9.0.5-10.9.0.8"]
        api._store(pool)
    api = _global_pass_on_its_way_then(drop_the_ip)
    held = held_spans(api)
    assert all(len(claims) == 1 for claims in held.values()), held


def _namespaced_pass_on_its_way_then(change):
    """A namespaced pool's pass made before any global pool was there, then ``change`` to the namespaced pool, then
    a global pool over its IPs created and its claim of the namespace served, the namespaced pass landing last."""
    api = _converged(_pool("n", ["10.9.0.1-10.9.0.3"], "2024-01-01T00:00:00Z", namespace=NS),
                     _claim("b", "n", gi.IN_CLUSTER_IP_POOL))
    api.load(_claim("a", "n", gi.IN_CLUSTER_IP_POOL))
    on_its_way = reconcile(api.inventory.snapshot(o.PoolKey(NS, "n", LOCAL), api.now))
    change(api)
    api.load(_pool("g", ["10.9.0.1-10.9.0.8"], "2024-01-01T00:01:00Z"))
    api.load(_claim("d", "g"))
    api.apply(reconcile(api.inventory.snapshot(o.PoolKey("", "g", GLOBAL), api.now)))
    api.apply(on_its_way)
    converge(api, random.Random(0))
    return api


def test_a_namespaced_pools_pass_landing_after_its_deletion_never_takes_an_ip_a_new_global_pool_handed_out():
    api = _namespaced_pass_on_its_way_then(lambda api: user_delete(api, LOCAL, "n"))
    held = held_spans(api)
    assert all(len(claims) == 1 for claims in held.values()), held


def test_a_namespaced_pools_pass_landing_after_an_edit_that_dropped_the_ip_never_takes_it_from_a_new_global_pool():
    def drop_the_ip(api):
        pool = copy.deepcopy(get(api, LOCAL, "n"))
        pool["spec"]["addresses"] = ["10.9.0.1"]
        api._store(pool)
    api = _namespaced_pass_on_its_way_then(drop_the_ip)
    held = held_spans(api)
    assert all(len(claims) == 1 for claims in held.values()), held


def _stopped_after_its_guard(api, pool_key):
    """The pool's passes carried out until a claim's guard is written, and stopped right after it (the controller
    killed, or the next write failing)."""
    for _ in range(10):
        for step in reconcile(api.inventory.snapshot(pool_key, api.now)).steps:
            for action in step.actions:
                api.do(action)
                if isinstance(action, Create) and o.is_guard(action.obj):
                    return
    raise AssertionError("no guard written")


def test_a_guard_written_before_a_crash_for_a_claim_that_then_waits_keeps_no_ip_from_a_namespaced_pool():
    api = _converged(_pool("g", ["10.9.0.1"], "2024-01-01T00:00:00Z"))
    api.load(_claim("d", "g"))
    _stopped_after_its_guard(api, o.PoolKey("", "g", GLOBAL))
    api.load(_pool("n", ["10.9.0.1"], "2024-01-01T00:01:00Z", namespace=NS))  # it owns the overlap from now on
    api.load(_claim("a", "n", gi.IN_CLUSTER_IP_POOL))
    converge(api, random.Random(0))
    assert _ips(api) == {(NS, "a"): "10.9.0.1"}, (_ips(api), o.condition(o.status(get(api, kinds.CAPI_CLAIM, "a")),
                                                                        "Ready"))


# -- the same orders, for each shape of a prefix pool against an IP or prefix pool ----------------------------

# The spec of each kind once edited to hold none of the other pool's addresses (nor of the IP or sub-prefix on
# its way).
AWAY = {GLOBAL[1]: {"addresses": ["fd00::10"]}, GLOBAL_PREFIXES[1]: {"prefixes": ["fd00::10/126"]},
        LOCAL[1]: {"addresses": ["fd00::100"]}, PREFIX[1]: {"prefixes": ["fd00::100/126"]}}


def _changed(kind, name, ns, how):
    def change(api):
        if how == "deleted":
            return user_delete(api, kind, name, ns)
        pool = copy.deepcopy(get(api, kind, name, ns))
        pool["spec"] = {**pool["spec"], **AWAY[kind[1]]}
        api._store(pool)
    return change


ORDERS = [(shape, how) for shape in sorted(SHAPES) for how in ("deleted", "edited")]


@pytest.mark.parametrize("shape, how", ORDERS)
def test_a_global_pools_pass_landing_after_its_pool_changed_never_takes_what_a_namespaced_pool_handed_out(shape, how):
    glob, local, _, lengths = SHAPES[shape]
    global_kind, local_kind = kinds.kind_of(glob), kinds.kind_of(local)
    api = _converged(glob, _claim("c", "g", global_kind[1]))
    api.load(_claim("d", "g", global_kind[1]))
    on_its_way = reconcile(api.inventory.snapshot(o.PoolKey("", "g", global_kind), api.now))
    _changed(global_kind, "g", "", how)(api)
    api.load(copy.deepcopy(local))
    api.load(_claim("a", "n", local_kind[1]))
    api.apply(reconcile(api.inventory.snapshot(o.PoolKey(NS, "n", local_kind), api.now)))
    api.apply(on_its_way)
    converge(api, random.Random(0))
    assert all(len(claims) == 1 for claims in held_spans(api, lengths).values()), held_spans(api, lengths)


@pytest.mark.parametrize("shape, how", ORDERS)
def test_a_namespaced_pools_pass_landing_after_its_pool_changed_never_takes_what_a_new_global_pool_handed_out(
        shape, how):
    glob, local, _, lengths = SHAPES[shape]
    global_kind, local_kind = kinds.kind_of(glob), kinds.kind_of(local)
    api = _converged(copy.deepcopy(local), _claim("b", "n", local_kind[1]))
    api.load(_claim("a", "n", local_kind[1]))
    on_its_way = reconcile(api.inventory.snapshot(o.PoolKey(NS, "n", local_kind), api.now))
    _changed(local_kind, "n", NS, how)(api)
    api.load(copy.deepcopy(glob))
    api.load(_claim("d", "g", global_kind[1]))
    api.apply(reconcile(api.inventory.snapshot(o.PoolKey("", "g", global_kind), api.now)))
    api.apply(on_its_way)
    converge(api, random.Random(0))
    assert all(len(claims) == 1 for claims in held_spans(api, lengths).values()), held_spans(api, lengths)


# -- the same orders, for a Metal3 IPPool against a global in-cluster IP pool --------------------------------

IPPOOL = kinds.IPPOOL


def _ippool(addresses, created="2024-01-01T00:01:00Z"):
    start, _, end = addresses.partition("-")
    pool = {"apiVersion": kinds.METAL3_API_VERSION, "kind": "IPPool",
            "metadata": {"name": "n", "namespace": NS, "creationTimestamp": created},
            "spec": {"namePrefix": "n", "pools": [{"start": start, "end": end or start}], "prefix": 24}}
    return pool


def _ippool_claim(name):
    return {"apiVersion": gi.CAPI_API_VERSION, "kind": "IPAddressClaim", "metadata": {"name": name, "namespace": NS},
            "spec": {"poolRef": {"apiGroup": kinds.METAL3_GROUP, "kind": "IPPool", "name": "n"}}}


def _change(kind, name, ns, how, addresses):
    def change(api):
        if how == "deleted":
            return user_delete(api, kind, name, ns)
        pool = copy.deepcopy(get(api, kind, name, ns))
        pool["spec"] = {**pool["spec"], **addresses}
        api._store(pool)
    return change


@pytest.mark.parametrize("how", ["deleted", "edited"])
def test_a_global_pools_pass_landing_after_its_pool_changed_never_takes_what_an_ippool_handed_out(how):
    api = _converged(_pool("g", ["10.9.0.1-10.9.0.8"], "2024-01-01T00:00:00Z"), _claim("c", "g"))
    api.load(_claim("d", "g"))
    on_its_way = reconcile(api.inventory.snapshot(o.PoolKey("", "g", GLOBAL), api.now))
    _change(GLOBAL, "g", "", how, {"addresses": ["10.9.0.1", "10.9.0.7-10.9.0.8"]})(api)
    api.load(_ippool("10.9.0.1-10.9.0.3"))
    api.load(_ippool_claim("a"))
    api.apply(reconcile(api.inventory.snapshot(o.PoolKey(NS, "n", IPPOOL), api.now)))
    api.apply(on_its_way)
    converge(api, random.Random(0))
    held = held_spans(api)
    assert all(len(claims) == 1 for claims in held.values()), held


def test_a_global_pools_pass_landing_after_its_pool_changed_family_never_takes_what_an_ippool_handed_out():
    """The global pool's pass for d (10.9.0.1) made, the pool edited to IPv6 (no address of it in use): no global
    IPv4 pool is left, and the IPPool's allocation of 10.9.0.1 must still guard it, as the pass on its way does."""
    api = _converged(_pool("g", ["10.9.0.1-10.9.0.8"], "2024-01-01T00:00:00Z"))
    api.load(_claim("d", "g"))
    on_its_way = reconcile(api.inventory.snapshot(o.PoolKey("", "g", GLOBAL), api.now))
    _change(GLOBAL, "g", "", "edited", {"addresses": ["fd00::1"]})(api)
    api.load(_ippool("10.9.0.1-10.9.0.3"))
    api.load(_ippool_claim("a"))
    api.apply(reconcile(api.inventory.snapshot(o.PoolKey(NS, "n", IPPOOL), api.now)))
    api.apply(on_its_way)
    converge(api, random.Random(0))
    held = held_spans(api)
    assert all(len(claims) == 1 for claims in held.values()), held


@pytest.mark.parametrize("how", ["deleted", "edited"])
def test_an_ippools_pass_landing_after_its_pool_changed_never_takes_what_a_new_global_pool_handed_out(how):
    api = _converged(_ippool("10.9.0.1-10.9.0.3", "2024-01-01T00:00:00Z"), _ippool_claim("b"))
    api.load(_ippool_claim("a"))
    on_its_way = reconcile(api.inventory.snapshot(o.PoolKey(NS, "n", IPPOOL), api.now))
    _change(IPPOOL, "n", NS, how, {"pools": [{"start": "10.9.0.1", "end": "10.9.0.1"}]})(api)
    api.load(_pool("g", ["10.9.0.1-10.9.0.8"], "2024-01-01T00:01:00Z"))
    api.load(_claim("d", "g"))
    api.apply(reconcile(api.inventory.snapshot(o.PoolKey("", "g", GLOBAL), api.now)))
    api.apply(on_its_way)
    converge(api, random.Random(0))
    held = held_spans(api)
    assert all(len(claims) == 1 for claims in held.values()), held


@pytest.mark.parametrize("order", ["global first", "ippool first"])
def test_an_ippool_created_while_a_global_pools_allocation_is_on_its_way_never_holds_its_ip_too(order):
    api = _converged(_pool("g", ["10.9.0.1-10.9.0.8"], "2024-01-01T00:00:00Z"), _claim("c", "g"))
    api.load(_claim("d", "g"))
    global_plan = reconcile(api.inventory.snapshot(o.PoolKey("", "g", GLOBAL), api.now))
    api.load(_ippool("10.9.0.1-10.9.0.3"))
    api.load(_ippool_claim("a"))
    local_plan = reconcile(api.inventory.snapshot(o.PoolKey(NS, "n", IPPOOL), api.now))
    for plan in ([global_plan, local_plan] if order == "global first" else [local_plan, global_plan]):
        api.apply(plan)
    converge(api, random.Random(0))
    held = held_spans(api)
    assert all(len(claims) == 1 for claims in held.values()), held


# -- a global pool's pass and a namespaced prefix pool's allocation meet on the global pool's claim ----------

def _global_ip_pass_then_a_prefix_pool_there(claim_d, *more):
    """A global IP pool's pass for claim ``d`` made, its pool edited off the IP, and a prefix pool over that IP
    created in the namespace: (the store, the pass on its way, the prefix pool's plan)."""
    api = _converged(_pool("g", ["fd00::1-fd00::8"], "2024-01-01T00:00:00Z"), _claim("c", "g"), *more)
    api.load(claim_d)
    on_its_way = reconcile(api.inventory.snapshot(o.PoolKey("", "g", GLOBAL), api.now))
    pool = copy.deepcopy(get(api, GLOBAL, "g", ""))
    pool["spec"]["addresses"] = ["fd00::1", "fd00::10"]
    api._store(pool)
    api.load(_prefix_pool("n", ["fd00::/126"], 127))
    api.load(_claim("a", "n", gi.IN_CLUSTER_PREFIX_POOL))
    return api, on_its_way, reconcile(api.inventory.snapshot(o.PoolKey(NS, "n", PREFIX), api.now))


def test_a_global_pools_pass_made_before_a_prefix_pool_existed_is_refused_once_its_allocation_wrote_the_claim():
    api, on_its_way, local_plan = _global_ip_pass_then_a_prefix_pool_there(_claim("d", "g"))
    assert not api.apply(local_plan)
    assert o.annotations(get(api, kinds.CAPI_CLAIM, "d"))[kinds.FENCED_ANNOTATION]
    assert api.apply(on_its_way) == [f"IPAddressClaim {NS}/d: IPAddressClaim {NS}/d changed since it was read"]
    assert _ips(api) == {(NS, "c"): "fd00::1", (NS, "a"): "fd00::2"}


def test_a_prefix_pools_allocation_guards_the_ip_a_global_pools_claim_names_as_being_handed_to_it():
    """The global pool's pass wrote the claim before the prefix pool's pass read it: the prefix pool guards the IP
    the claim names, and whichever of the two guards of it lands second is refused."""
    api, on_its_way, _ = _global_ip_pass_then_a_prefix_pool_there(_claim("d", "g"))
    (step,) = [s for s in on_its_way.steps if s.subject == f"IPAddressClaim {NS}/d"]
    api.do(step.actions[0])  # the claim written first, the rest of that pass on its way
    assert o.annotations(get(api, kinds.CAPI_CLAIM, "d"))[kinds.ALLOCATING_ANNOTATION] == "fd00::2"
    local_plan = reconcile(api.inventory.snapshot(o.PoolKey(NS, "n", PREFIX), api.now))
    assert [o.name(a.obj) for a in local_plan.writes if isinstance(a, Create) and o.is_guard(a.obj)] == [
        "fd00-0-0-0-0-0-0-2.127.nsip", "fd00-0-0-0-0-0-0-2.nsip"]
    assert not api.apply(local_plan)
    rest = Plan(steps=[Step(step.subject, step.actions[1:], step.about)])
    assert api.apply(rest) == [f"IPAddressClaim {NS}/d: Lease ipam-system/{NS}.fd00-0-0-0-0-0-0-2.nsip already exists"]
    converge(api, random.Random(0))
    assert _ips(api) == {(NS, "c"): "fd00::1", (NS, "a"): "fd00::2", (NS, "d"): "fd00::10"}


def test_a_prefix_pools_allocation_writes_no_paused_claim_of_a_global_pool():
    paused = _claim("d", "g")
    paused["metadata"]["annotations"] = {kinds.PAUSED_ANNOTATION: ""}
    api, _, local_plan = _global_ip_pass_then_a_prefix_pool_there(paused)
    assert not [a for a in local_plan.writes if getattr(a, "target", None) and a.target.name == "d"]


def test_a_global_pools_pass_for_a_claim_whose_cluster_was_paused_since_never_takes_what_a_prefix_pool_handed_out():
    claim = _claim("d", "g")
    claim["metadata"]["labels"] = {kinds.CLUSTER_NAME_LABEL: "cl"}
    api, on_its_way, _ = _global_ip_pass_then_a_prefix_pool_there(claim, cluster("cl"))
    api._store({**cluster("cl", paused=True), "metadata": copy.deepcopy(get(api, kinds.CLUSTER, "cl")["metadata"])})
    api.apply(reconcile(api.inventory.snapshot(o.PoolKey(NS, "n", PREFIX), api.now)))
    api.apply(on_its_way)
    spans = held_spans(api, {GLOBAL[1]: 128, PREFIX[1]: 127})
    assert all(len(claims) == 1 for claims in spans.values()), spans


@pytest.mark.parametrize("how", ["deleted", "edited"])
def test_a_namespaced_pass_of_single_address_sub_prefixes_landing_late_never_takes_what_a_global_ip_pool_handed_out(
        how):
    """A sub-prefix of 128 bits is one IP: its guard is the IP's, which a global IP pool's allocation writes."""
    api = _converged(_prefix_pool("n", ["fd00::/126"], 128), _claim("b", "n", gi.IN_CLUSTER_PREFIX_POOL))
    api.load(_claim("a", "n", gi.IN_CLUSTER_PREFIX_POOL))
    on_its_way = reconcile(api.inventory.snapshot(o.PoolKey(NS, "n", PREFIX), api.now))
    _changed(PREFIX, "n", NS, how)(api)
    api.load(_pool("g", ["fd00::1-fd00::8"], "2024-01-01T00:01:00Z"))
    api.load(_claim("d", "g"))
    api.apply(reconcile(api.inventory.snapshot(o.PoolKey("", "g", GLOBAL), api.now)))
    api.apply(on_its_way)
    converge(api, random.Random(0))
    spans = held_spans(api, {GLOBAL[1]: 128, PREFIX[1]: 128})
    assert all(len(claims) == 1 for claims in spans.values()), spans
