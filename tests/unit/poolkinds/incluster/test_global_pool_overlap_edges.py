"""Global pools overlapping the namespaced pools of their claims' namespaces, at the edges: addresses written
before their claims, kept IPs, and a global pool's claims coming and going in a namespace (SPEC §10,
invariant 1)."""

from __future__ import annotations

import random

import pytest

from metal3_ipam.core import kinds
from metal3_ipam.core import objects as o
from metal3_ipam.memory import converge
from metal3_ipam.testing import go_incluster as gi
from metal3_ipam.controller.admission import Admission
from ipam_objects import (CONFLICT, admission_request, assert_no_ip_twice, capi_address, capi_claim, get, ippool,
                          ipclaim, ready, strip_and_delete)
from ipam_objects import converged_with_lock_namespace as _converged
from ipam_objects import dated_ip_pool as _pool

NS = "default"
GLOBAL = (gi.GROUP, gi.GLOBAL_IN_CLUSTER_IP_POOL)
LOCAL = (gi.GROUP, gi.IN_CLUSTER_IP_POOL)


def _ips(api):
    return {(o.namespace(a), o.name(a)): o.spec(a)["address"] for a in api.inventory.of_kind(kinds.CAPI_ADDRESS)
            if not o.is_deleting(a)}


def test_a_global_pools_address_written_before_its_claim_at_an_ip_a_namespaced_pool_gave_there_is_refused():
    api = _converged(_pool("n", ["10.9.0.1-10.9.0.2"], "2024-01-01T00:00:00Z", namespace=NS),
                     _pool("g", ["10.9.0.1-10.9.0.4"], "2024-01-01T00:01:00Z"),
                     gi.claim("x", NS, gi.IN_CLUSTER_IP_POOL, "n"),
                     gi.claim("here", NS, gi.GLOBAL_IN_CLUSTER_IP_POOL, "g"))
    assert _ips(api)[(NS, "x")] == "10.9.0.1"
    api.load(capi_address("y", "y", GLOBAL, "g", "10.9.0.1"))
    api.load(gi.claim("y", NS, gi.GLOBAL_IN_CLUSTER_IP_POOL, "g"))
    converge(api, random.Random(0))
    assert_no_ip_twice(api)
    assert ready(api, kinds.CAPI_CLAIM, "y").get("reason") == CONFLICT


def test_a_global_pools_address_written_before_its_claim_in_an_overlap_a_namespaced_pool_owns_is_refused():
    """The namespaced pool owns the overlap: the global pool could not have handed 10.9.0.1 to a claim of that
    namespace, free as it is, so the claim does not take it up."""
    api = _converged(_pool("n", ["10.9.0.1-10.9.0.2"], "2024-01-01T00:00:00Z", namespace=NS),
                     _pool("g", ["10.9.0.1-10.9.0.4"], "2024-01-01T00:01:00Z"),
                     gi.claim("here", NS, gi.GLOBAL_IN_CLUSTER_IP_POOL, "g"))
    api.load(capi_address("y", "y", GLOBAL, "g", "10.9.0.1"))
    api.load(gi.claim("y", NS, gi.GLOBAL_IN_CLUSTER_IP_POOL, "g"))
    converge(api, random.Random(0))
    condition = ready(api, kinds.CAPI_CLAIM, "y")
    assert condition.get("reason") == CONFLICT and "withheld" in condition.get("message", ""), condition


def test_an_address_written_before_its_claim_never_takes_an_ip_another_pool_keeps_for_its_claim():
    """Two IPPools of one namePrefix: zeta of zz keeps 10.7.0.1 (its address objects were deleted); an address
    written by hand for a claim of aa at that IP is refused, and zeta gets its IP back."""
    keeper = ippool("zz", namePrefix="m", pools=[{"start": "10.7.0.1", "end": "10.7.0.3"}], prefix=24)
    other = ippool("aa", namePrefix="m", pools=[{"start": "10.7.0.1", "end": "10.7.0.3"}], prefix=24)
    api = _converged(keeper, other, ipclaim("zeta", pool="zz"))
    strip_and_delete(api, kinds.IPADDRESS, "m-10-7-0-1")
    api.load(capi_address("new", "new", (kinds.METAL3_GROUP, "IPPool"), "aa", "10.7.0.1"))
    api.load(capi_claim("new", pool="aa"))
    converge(api, random.Random(0))
    assert [e.message for e in api.events if e.reason == CONFLICT and e.target.name == "new"][0].startswith(
        f"IPAddress.{kinds.CAPI_IPAM_GROUP} {NS}/new holds 10.7.0.1, which is kept for a claim of another pool")


@pytest.mark.parametrize("pool", ["zz", "aa"])
def test_a_keeper_gets_its_ip_back_though_an_address_written_for_another_claim_holds_it(pool):
    """zeta of zz keeps 10.7.0.1 (its address objects were deleted); an address written by hand for a claim of
    ``pool`` at that IP is refused, and holds the IP from no one: zeta gets it back, not another IP."""
    keeper = ippool("zz", namePrefix="m", pools=[{"start": "10.7.0.1", "end": "10.7.0.3"}], prefix=24)
    other = ippool("aa", namePrefix="m", pools=[{"start": "10.7.0.1", "end": "10.7.0.3"}], prefix=24)
    api = _converged(keeper, other, ipclaim("zeta", pool="zz"))
    strip_and_delete(api, kinds.IPADDRESS, "m-10-7-0-1")
    api.load(capi_address("new", "new", (kinds.METAL3_GROUP, "IPPool"), pool, "10.7.0.1"))
    api.load(capi_claim("new", pool=pool))
    converge(api, random.Random(0))
    assert not [e.message for e in api.events if e.reason == "AddressChanged"]
    assert o.status(get(api, kinds.IPCLAIM, "zeta"))["address"]["name"] == "m-10-7-0-1"
    assert ready(api, kinds.CAPI_CLAIM, "new").get("reason") == CONFLICT


@pytest.mark.parametrize("other_namespaced", [False, True])
def test_unmarking_a_separate_network_while_two_claims_of_a_namespace_share_an_ip_is_told(other_namespaced):
    """g2, a separate network, hands out 10.8.0.1 as g1 does; its annotation is removed (past the webhook) while
    claims of both hold that IP in one namespace. Both keep it, and the pools, the claims and a Warning Event
    name the other claim."""
    apart = {kinds.SEPARATE_NETWORK_ANNOTATION: "true"}
    kind = gi.IN_CLUSTER_IP_POOL if other_namespaced else gi.GLOBAL_IN_CLUSTER_IP_POOL
    api = _converged(_pool("g1", ["10.8.0.1-10.8.0.2"], "2024-01-01T00:00:00Z",
                           namespace=NS if other_namespaced else None),
                     _pool("g2", ["10.8.0.1-10.8.0.2"], "2024-01-01T00:01:00Z", annotations=apart),
                     gi.claim("a", NS, kind, "g1"), gi.claim("b", NS, gi.GLOBAL_IN_CLUSTER_IP_POOL, "g2"))
    assert _ips(api) == {(NS, "a"): "10.8.0.1", (NS, "b"): "10.8.0.1"}
    pool = get(api, GLOBAL, "g2", "")
    api.inventory.upsert({**pool, "metadata": {**pool["metadata"], "annotations": {},
                                               "resourceVersion": api._next_version()}})
    converge(api, random.Random(0))
    told = [c["message"] for c in o.status(get(api, GLOBAL, "g2", "")).get("conditions", []) if c["status"] == "True"]
    told += [o.condition(o.status(get(api, kinds.CAPI_CLAIM, "b")), "Ready")["message"]]
    told += [e.message for e in api.events if e.type == "Warning"]
    assert any("10.8.0.1" in text and "IPAddressClaim default/a" in text for text in told), told


def _sharing(other_namespaced: bool, b_pool: str = "g2"):
    """g1 (global, or namespaced in default) and g2 (global, a separate network) over one range; claim a of g1 and
    claim b of ``b_pool`` in default, converged."""
    apart = {kinds.SEPARATE_NETWORK_ANNOTATION: "true"}
    kind = gi.IN_CLUSTER_IP_POOL if other_namespaced else gi.GLOBAL_IN_CLUSTER_IP_POOL
    return _converged(_pool("g1", ["10.8.0.1-10.8.0.2"], "2024-01-01T00:00:00Z",
                            namespace=NS if other_namespaced else None),
                      _pool("g2", ["10.8.0.1-10.8.0.2"], "2024-01-01T00:01:00Z", annotations=apart),
                      _pool("g3", ["10.8.0.5-10.8.0.6"], "2024-01-01T00:02:00Z"),
                      gi.claim("a", NS, kind, "g1"), gi.claim("b", NS, gi.GLOBAL_IN_CLUSTER_IP_POOL, b_pool))


def _unmarking(api, value=None):
    pool = get(api, GLOBAL, "g2", "")
    annotations = {} if value is None else {kinds.SEPARATE_NETWORK_ANNOTATION: value}
    changed = {**pool, "metadata": {**pool["metadata"], "annotations": annotations}}
    return Admission(api.inventory).review(admission_request("UPDATE", changed, pool))


@pytest.mark.parametrize("value", [None, "false"])
@pytest.mark.parametrize("other_namespaced", [False, True])
def test_removing_a_separate_network_annotation_while_two_claims_hold_one_ip_is_refused(other_namespaced, value):
    api = _sharing(other_namespaced)
    assert _ips(api) == {(NS, "a"): "10.8.0.1", (NS, "b"): "10.8.0.1"}
    response = _unmarking(api, value)
    assert not response["allowed"], response
    message = response["status"]["message"]
    assert f"metadata.annotations[{kinds.SEPARATE_NETWORK_ANNOTATION}]" in message
    assert "10.8.0.1 is held by IPAddressClaim default/b of this pool and by IPAddressClaim default/a" in message


def test_removing_a_separate_network_annotation_while_no_ip_is_held_twice_is_allowed():
    """b is a claim of g3, which overlaps neither: g2 holds nothing g1 holds."""
    api = _sharing(False, b_pool="g3")
    assert _ips(api) == {(NS, "a"): "10.8.0.1", (NS, "b"): "10.8.0.5"}
    assert _unmarking(api)["allowed"]
