"""A global pool shared by Clusters of which only some are moved by ``clusterctl move`` becomes one pool in each
management cluster: both say so on the pool (``ClaimsElsewhere``, naming the Clusters, one Warning Event), and
the condition goes once it no longer holds (the Clusters moved back and bound here again; those moved in gone).

Two in-memory management clusters; ``move`` does what clusterctl does to a namespace's objects of a global
pool (``cmd/clusterctl/client/cluster/mover.go``): the Cluster paused, copies created in the target (Cluster
paused, claims, then their Cluster API IPAddresses, owner references given the target's uids, the pool's the
source pool's own uid where the target has a pool of that name already), the claims deleted in the source with
``clusterctl.cluster.x-k8s.io/delete-for-move`` and their finalizers stripped, the Cluster deleted, the copy
unpaused.
"""

from __future__ import annotations

import copy
import random

import pytest
from hypothesis import HealthCheck, given, settings, strategies as st

from metal3_ipam.core import kinds
from metal3_ipam.core import objects as o
from metal3_ipam.core.reconcile.elsewhere import CLAIMS_ELSEWHERE, MAX_NAMED, MOVED_AWAY, MOVED_IN, Elsewhere
from metal3_ipam.memory import MemoryApi, converge
from metal3_ipam.testing import go_incluster as gi
from ipam_objects import assert_no_ip_twice, cluster, get, ready

GLOBAL = (gi.GROUP, gi.GLOBAL_IN_CLUSTER_IP_POOL)
CAPI_CLAIM, CAPI_ADDRESS = kinds.CAPI_CLAIM, kinds.CAPI_ADDRESS
NOW = "2024-01-01T00:00:00Z"


def claim(name: str, ns: str, cluster_name: str) -> dict:
    return gi.claim(name, ns, gi.GLOBAL_IN_CLUSTER_IP_POOL, "g", cluster_name=cluster_name)


def management_cluster(*objs: dict, uid: str = "source-g") -> MemoryApi:
    api = MemoryApi(now=NOW)
    pool = gi.ip_pool("g", prefix=24, addresses=["10.9.0.2-10.9.0.40"])
    pool["metadata"]["uid"] = uid  # each management cluster's own
    api.load(pool)
    for obj in objs:
        api.load(obj)
    converge(api, random.Random(0))
    return api


def of_namespace(api: MemoryApi, kind: tuple[str, str], ns: str) -> list[dict]:
    return [copy.deepcopy(x) for x in api.inventory.of_kind(kind) if o.namespace(x) == ns]


def copied(obj: dict, **meta) -> dict:
    """What clusterctl creates in the target: the object without its server fields and status."""
    kept = {k: v for k, v in obj["metadata"].items()
            if k not in ("uid", "resourceVersion", "creationTimestamp", "generation", "deletionTimestamp")}
    out = {k: v for k, v in obj.items() if k != "status"}
    out["metadata"] = {**kept, **meta}
    return out


def set_paused(api: MemoryApi, ns: str, name: str, paused: bool) -> None:
    stored = copy.deepcopy(get(api, kinds.CLUSTER, name, ns))
    stored["spec"]["paused"] = paused
    api._store(stored)


def deleted_for_move(api: MemoryApi, obj: dict) -> None:
    gone = copy.deepcopy(obj)
    gone["metadata"].setdefault("annotations", {})[kinds.DELETE_FOR_MOVE_ANNOTATION] = ""
    gone["metadata"]["deletionTimestamp"] = api.now
    gone["metadata"]["finalizers"] = []
    api._store(gone)


def move(source: MemoryApi, target: MemoryApi, ns: str, cluster_name: str, existing_pool_ref: str = "dropped") -> None:
    """``clusterctl move -n ns`` of one Cluster and its claims of the global pool ``g``. Where the target has a pool
    ``g`` already, the copies' reference to it is ``dropped`` (as clusterctl v1.13 writes them) or names the
    ``source uid``."""
    set_paused(source, ns, cluster_name, True)
    converge(source, random.Random(0))
    source_pool = get(source, GLOBAL, "g", "")
    existed = get(target, GLOBAL, "g", "") is not None
    if not existed:
        target.load(copied(source_pool))
    target_pool_uid = o.meta(get(target, GLOBAL, "g", ""))["uid"]
    the_cluster = get(source, kinds.CLUSTER, cluster_name, ns)
    target.load(copied(the_cluster))
    claims = of_namespace(source, CAPI_CLAIM, ns)
    for c in claims:
        target.load(copied(c))
    for address in of_namespace(source, CAPI_ADDRESS, ns):
        refs = []
        for ref in o.owner_references(address):
            if ref["kind"] == "IPAddressClaim":
                ref = {**ref, "uid": o.meta(get(target, CAPI_CLAIM, ref["name"], ns))["uid"]}
            elif ref["kind"] == gi.GLOBAL_IN_CLUSTER_IP_POOL and existed and existing_pool_ref == "dropped":
                continue
            elif ref["kind"] == gi.GLOBAL_IN_CLUSTER_IP_POOL and not existed:
                ref = {**ref, "uid": target_pool_uid}
            refs.append(ref)
        target.load(copied(address, ownerReferences=refs))
    converge(target, random.Random(0))
    for c in claims:
        deleted_for_move(source, c)
    deleted_for_move(source, get(source, kinds.CLUSTER, cluster_name, ns))
    converge(source, random.Random(0))
    set_paused(target, ns, cluster_name, False)
    converge(target, random.Random(0))


def elsewhere(api: MemoryApi) -> dict:
    return o.condition(o.status(get(api, GLOBAL, "g", "")), CLAIMS_ELSEWHERE) or {}


def warnings(api: MemoryApi) -> list:
    return [e for e in api.events if e.target.name == "g" and e.reason.startswith("ClaimsMoved")]


def assert_served_and_counted(api: MemoryApi) -> None:
    """No IP held twice, every claim bound, the pool's count that of its addresses, no owner reference of an
    address naming an object that is not there."""
    assert_no_ip_twice(api)
    claims = api.inventory.of_kind(CAPI_CLAIM)
    for c in claims:
        condition = ready(api, CAPI_CLAIM, o.name(c), o.namespace(c))
        assert condition.get("status") == "True", (o.namespace(c), o.name(c), condition)
    addresses = api.inventory.of_kind(CAPI_ADDRESS)
    assert o.status(get(api, GLOBAL, "g", ""))["ipAddresses"]["used"] == len(addresses) == len(claims)
    for address in addresses:
        for ref in o.owner_references(address):
            found = api.inventory.get((kinds.group_of(ref["apiVersion"]), ref["kind"]),
                                      "" if ref["kind"] == gi.GLOBAL_IN_CLUSTER_IP_POOL else o.namespace(address),
                                      ref["name"])
            assert found is not None and o.meta(found)["uid"] == ref["uid"], (o.name(address), ref)


def two_clusters() -> tuple[MemoryApi, MemoryApi]:
    """The source serves Clusters b/c2 (10.9.0.2-4) and a/c1 (two claims, 10.9.0.5-6); the target has a pool g of
    its own, serving t/c3 (10.9.0.2)."""
    source = management_cluster(cluster("c1", "a"), cluster("c2", "b"), *(claim(f"s{n}", "b", "c2") for n in range(3)),
                                claim("m1", "a", "c1"), claim("m2", "a", "c1"))
    target = management_cluster(cluster("c3", "t"), claim("t", "t", "c3"), uid="target-g")
    return source, target


@pytest.mark.parametrize("existing_pool_ref", ["dropped", "source uid"])
def test_a_move_of_some_clusters_of_a_global_pool_is_said_on_the_pool_in_both_clusters(existing_pool_ref):
    source, target = two_clusters()
    assert not elsewhere(source) and not elsewhere(target)
    move(source, target, "a", "c1", existing_pool_ref)
    said = elsewhere(source)
    assert said["status"] == "True" and said["reason"] == MOVED_AWAY, said
    assert "[a/c1]" in said["message"] and "another management cluster" in said["message"], said
    there = elsewhere(target)
    assert there["status"] == "True" and there["reason"] == MOVED_IN, there
    assert "[a/c1]" in there["message"], there
    assert [e.type for e in warnings(source)] == ["Warning"] and [e.type for e in warnings(target)] == ["Warning"]
    assert_served_and_counted(source)
    assert_served_and_counted(target)


def test_a_moved_claim_whose_ip_a_claim_of_the_targets_pool_holds_is_told_and_both_pools_say_why():
    source = management_cluster(cluster("c1", "a"), claim("m1", "a", "c1"))
    target = management_cluster(cluster("c3", "t"), claim("t", "t", "c3"), uid="target-g")
    ip = o.spec(get(target, CAPI_ADDRESS, "t", "t"))["address"]
    assert o.spec(get(source, CAPI_ADDRESS, "m1", "a"))["address"] == ip
    move(source, target, "a", "c1")
    assert_no_ip_twice(target)
    told = ready(target, CAPI_CLAIM, "m1", "a")
    assert told["status"] == "False" and told["reason"] == "AddressConflict" and ip in told["message"], told
    assert "a/m1" in o.condition(o.status(get(target, GLOBAL, "g", "")), "AddressesConflicting")["message"]
    assert elsewhere(source).get("reason") == MOVED_AWAY
    assert elsewhere(target).get("reason") == MOVED_IN and "[a/c1]" in elsewhere(target)["message"]


def test_moving_the_clusters_back_clears_the_source_and_the_target_says_they_left():
    source, target = two_clusters()
    move(source, target, "a", "c1")
    move(target, source, "a", "c1")
    assert not elsewhere(source), elsewhere(source)
    there = elsewhere(target)
    assert there.get("reason") == MOVED_AWAY and "[a/c1]" in there["message"], there
    assert len(warnings(source)) == 1 and len(warnings(target)) == 2
    assert_served_and_counted(source)
    assert_served_and_counted(target)
    assert {o.namespace(c) for c in source.inventory.of_kind(CAPI_CLAIM)} == {"a", "b"}


def test_a_pool_created_in_the_target_by_the_move_says_nothing_there_and_the_source_still_says_so():
    source = management_cluster(cluster("c1", "a"), cluster("c2", "b"), claim("m1", "a", "c1"),
                                claim("s", "b", "c2"))
    target = MemoryApi(now=NOW)
    move(source, target, "a", "c1")
    assert elsewhere(source).get("reason") == MOVED_AWAY
    assert not elsewhere(target)
    assert_served_and_counted(target)


def test_the_condition_is_read_back_by_a_controller_started_afresh_without_a_new_event():
    source, target = two_clusters()
    move(source, target, "a", "c1")
    for api in (source, target):
        restarted = MemoryApi(now=NOW)
        for kind in (GLOBAL, kinds.CLUSTER, CAPI_CLAIM, CAPI_ADDRESS, kinds.IPADDRESS):
            for obj in api.inventory.of_kind(kind):
                restarted.load(obj)
        converge(restarted, random.Random(0))
        assert elsewhere(restarted)["message"] == elsewhere(api)["message"]
        assert not warnings(restarted)


def test_the_condition_removed_by_hand_stays_removed():
    source, target = two_clusters()
    move(source, target, "a", "c1")
    for api in (source, target):
        pool = copy.deepcopy(get(api, GLOBAL, "g", ""))
        pool["status"]["conditions"] = [c for c in pool["status"]["conditions"] if c["type"] != CLAIMS_ELSEWHERE]
        api._store(pool)
        converge(api, random.Random(0))
        assert not elsewhere(api)


def test_a_claim_deleted_not_for_a_move_says_nothing():
    source, _ = two_clusters()
    gone = copy.deepcopy(get(source, CAPI_CLAIM, "m1", "a"))
    gone["metadata"]["deletionTimestamp"] = NOW
    source._store(gone)
    converge(source, random.Random(0))
    assert get(source, CAPI_CLAIM, "m1", "a") is None
    assert not elsewhere(source)


NAME = st.from_regex(r"[a-z0-9]([a-z0-9.-]{0,20}[a-z0-9])?", fullmatch=True)
CLUSTERS = st.frozensets(st.builds(lambda ns, n: f"{ns}/{n}", NAME, NAME), max_size=MAX_NAMED)


@given(CLUSTERS, CLUSTERS)
def test_what_the_condition_names_is_read_back_as_it_was_written(away, moved_in):
    said = Elsewhere(away, moved_in)
    if not said:
        return
    status = {"conditions": [{"type": CLAIMS_ELSEWHERE, "status": "True", "reason": said.reason(),
                              "message": said.message()}]}
    assert Elsewhere.read(status) == said


@given(CLUSTERS, CLUSTERS, CLUSTERS)
def test_a_cluster_seen_arrive_while_said_to_have_moved_away_is_coming_back_not_moving_in(away, left, arrived):
    said = Elsewhere(away, frozenset()).seen(left, arrived)
    assert said.away == away | left
    assert said.moved_in == arrived - away - left


MOVES = st.lists(st.sampled_from(["a", "b", "c"]), min_size=1, max_size=4)


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(MOVES)
def test_moves_of_any_clusters_back_and_forth_keep_both_pools_saying_where_claims_live(moved):
    """Clusters x/cx of namespaces a, b, c start in the source; each step moves one namespace to the other
    management cluster (both have the pool). After each: no IP bound twice and every claim told (bound, or
    AddressConflict) in either; each pool names as moved away every Cluster that left it and is not there,
    never one bound there, and as moved in only Clusters it has claims of."""
    sides = {"source": management_cluster(*(cluster(f"c{ns}", ns) for ns in "abc"),
                                          *(claim(f"m{ns}{i}", ns, f"c{ns}") for ns in "abc" for i in range(2))),
             "target": management_cluster(cluster("ct", "t"), claim("t", "t", "ct"), uid="target-g")}
    home = dict.fromkeys("abc", "source")
    left: dict[str, set[str]] = {"source": set(), "target": set()}
    for ns in moved:
        there = "target" if home[ns] == "source" else "source"
        move(sides[home[ns]], sides[there], ns, f"c{ns}")
        left[home[ns]].add(ns)
        home[ns] = there
        for name, api in sides.items():
            assert_no_ip_twice(api)
            for c in api.inventory.of_kind(CAPI_CLAIM):
                condition = ready(api, CAPI_CLAIM, o.name(c), o.namespace(c))
                assert condition.get("status") == "True" or condition.get("reason") == "AddressConflict", condition
            said = Elsewhere.read(o.status(get(api, GLOBAL, "g", "")))
            here = {f"{ns}/c{ns}" for ns in "abc" if home[ns] == name}
            bound_here = {f"{o.namespace(c)}/c{o.namespace(c)}" for c in api.inventory.of_kind(CAPI_CLAIM)
                          if ready(api, CAPI_CLAIM, o.name(c), o.namespace(c)).get("status") == "True"}
            assert {f"{ns}/c{ns}" for ns in left[name] if home[ns] != name} <= said.away, (name, said)
            assert not said.away & bound_here, (name, said)
            assert said.moved_in <= here, (name, said)
