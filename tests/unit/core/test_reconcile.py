"""The pool reconcile (SPEC §6–8), run against the in-memory store to a fixed point."""

from __future__ import annotations

import copy
import random

import pytest

from metal3_ipam.core import kinds
from metal3_ipam.core import objects as o
from metal3_ipam.core.actions import Create, SetStatus
from metal3_ipam.core.reconcile import reconcile
from metal3_ipam.memory import MemoryApi, converge
from ipam_objects import (CAPI, CAPI_V1BETA1, NS, address_of, all_plans, capi_addresses, capi_claim, cluster,
                          converged, get, ip_of, ipclaim, ippool, loaded, metal3_addresses, pool_plan, set_meta,
                          snapshot, user_delete)
from ipam_objects import ADDRESS, CAPI_ADDRESS, CAPI_CLAIM, IPCLAIM, POOL


def status(api, kind, name):
    return o.status(get(api, kind, name))


def ready(api, kind, name) -> dict:
    (cond,) = [c for c in status(api, kind, name).get("conditions", []) if c["type"] == "Ready"]
    return cond


def settled(api: MemoryApi) -> bool:
    return not any(all_plans(api))


def all_bound_ips(api) -> list[str]:
    return [str(o.spec(a)["address"]) for a in metal3_addresses(api)]


# -- the basic allocation ------------------------------------------------------------

def test_claims_get_sequential_addresses_with_status_finalizers():
    api = converged(ippool(), ipclaim("c1"), ipclaim("c2"))
    assert ip_of(api, "c1") == "192.168.0.10"
    assert ip_of(api, "c2") == "192.168.0.11"
    assert status(api, IPCLAIM, "c1")["address"] == {"name": "pool1-192-168-0-10", "namespace": NS}
    assert ready(api, IPCLAIM, "c1")["status"] == "True"
    assert "errorMessage" not in status(api, IPCLAIM, "c1")
    assert o.finalizers(get(api, IPCLAIM, "c1")) == ["ipclaim.ipam.metal3.io"]
    assert o.finalizers(get(api, POOL, "pool1")) == ["ippool.ipam.metal3.io"]
    address = get(api, ADDRESS, "pool1-192-168-0-10")
    assert o.finalizers(address) == ["ipaddress.ipam.metal3.io"]
    pool_status = status(api, POOL, "pool1")
    assert pool_status["indexes"] == {"c1": "192.168.0.10", "c2": "192.168.0.11"}
    assert (pool_status["capacity"], pool_status["allocated"], pool_status["free"]) == ("11", "2", "9")
    assert ready(api, POOL, "pool1")["status"] == "True"
    assert pool_status["lastUpdated"] == api.now
    assert [o.name(obj) for obj in api.created] == ["pool1-192-168-0-10", "pool1-192-168-0-11"]
    # Success needs no Event: the address and the Ready condition record it.
    assert api.events == []


def test_address_object_carries_entry_values_refs_owners_and_claim_labels():
    pool = ippool(prefix=24, gateway="192.168.0.1", dnsServers=["8.8.8.8"],
                  pools=[{"start": "192.168.0.10", "end": "192.168.0.10", "prefix": 25, "gateway": "192.168.0.2",
                          "dnsServers": ["1.1.1.1"]},
                         {"start": "192.168.0.20", "end": "192.168.0.20"}])
    api = converged(cluster("cluster1"), pool, ipclaim("a", labels={"team": "x", kinds.CLUSTER_NAME_LABEL: "cluster1"}),
                    ipclaim("b"))
    a = get(api, ADDRESS, "pool1-192-168-0-10")
    assert a["apiVersion"] == "ipam.metal3.io/v1alpha1" and a["kind"] == "IPAddress"
    assert a["spec"] == {"address": "192.168.0.10", "prefix": 25, "gateway": "192.168.0.2", "dnsServers": ["1.1.1.1"],
                         "pool": {"name": "pool1", "namespace": NS}, "claim": {"name": "a", "namespace": NS}}
    assert a["metadata"]["labels"] == {"team": "x", kinds.CLUSTER_NAME_LABEL: "cluster1"}
    owners = {r["kind"]: r for r in a["metadata"]["ownerReferences"]}
    assert owners["IPPool"]["uid"] == get(api, POOL, "pool1")["metadata"]["uid"]
    assert owners["IPClaim"]["uid"] == get(api, IPCLAIM, "a")["metadata"]["uid"]
    # The Go Metal3 IPAM's shape: pool then claim, neither controller nor blockOwnerDeletion.
    assert [r["kind"] for r in a["metadata"]["ownerReferences"]] == ["IPPool", "IPClaim"]
    assert all(set(r) == {"apiVersion", "kind", "name", "uid"} for r in a["metadata"]["ownerReferences"])
    b = get(api, ADDRESS, "pool1-192-168-0-20")
    assert (b["spec"]["prefix"], b["spec"]["gateway"], b["spec"]["dnsServers"]) == (24, "192.168.0.1", ["8.8.8.8"])
    assert "labels" not in b["metadata"]


def test_preallocated_claim_and_ip_annotation():
    pool = ippool(preAllocations={"held": "192.168.0.10"})
    api = converged(pool, ipclaim("first"), ipclaim("wants", ip="192.168.0.15"), ipclaim("held"))
    assert ip_of(api, "first") == "192.168.0.11"
    assert ip_of(api, "wants") == "192.168.0.15"
    assert ip_of(api, "held") == "192.168.0.10"


def test_preallocated_ip_stays_reserved_while_its_claim_is_absent():
    api = converged(ippool(pools=[{"start": "192.168.0.10", "end": "192.168.0.11"}],
                           preAllocations={"held": "192.168.0.10"}), ipclaim("a"), ipclaim("b"))
    assert ip_of(api, "a") == "192.168.0.11"
    assert address_of(api, "IPClaim", "b") == []
    assert ready(api, IPCLAIM, "b")["reason"] == "PoolExhausted"


def test_ipv6_counts_are_exact_strings():
    pool = ippool(namePrefix="pfx", pools=[{"subnet": "2001:db8::/64"}], gateway="2001:db8::1")
    api = converged(pool, ipclaim("c"))
    assert ip_of(api, "c") == "2001:db8::2"
    assert get(api, ADDRESS, "pfx-2001-db8--2") is not None
    pool_status = status(api, POOL, "pool1")
    assert pool_status["capacity"] == str(2**64 - 2)
    assert pool_status["allocated"] == "1"
    assert pool_status["free"] == str(2**64 - 3)


def test_counts_past_2_to_the_64_are_exact():
    api = converged(ippool(namePrefix="big", pools=[{"subnet": "2001:db8::/48"}], excludedAddresses=["2001:db8::/120"]),
                    ipclaim("c"))
    assert ip_of(api, "c") == "2001:db8::100"
    pool_status = status(api, POOL, "pool1")
    assert pool_status["capacity"] == str(2**80 - 256) == "1208925819614629174705920"
    assert pool_status["free"] == str(2**80 - 257)


def test_indexes_are_capped_and_the_rest_counted(monkeypatch):
    from metal3_ipam.core import indexes
    # Room for three entries of the form "cN":"192.168.0.1N" (24 bytes each).
    monkeypatch.setattr(indexes, "MAX_INDEXES_BYTES", 2 + 3 * 24)
    api = converged(ippool(), *[ipclaim(f"c{i}") for i in range(5)])
    pool_status = status(api, POOL, "pool1")
    assert len(pool_status["indexes"]) == 3
    assert pool_status["indexesOmitted"] == 2
    assert pool_status["allocated"] == "5"
    assert settled(api)


def test_pool_is_labelled_and_owned_by_its_cluster_and_the_uid_is_refreshed():
    api = converged(cluster("cluster1"), ippool(clusterName="cluster1"))
    pool = get(api, POOL, "pool1")
    assert pool["metadata"]["labels"][kinds.CLUSTER_NAME_LABEL] == "cluster1"
    # As the Go Metal3 IPAM labels a pool of a Cluster, so selectors on the provider find new pools.
    assert pool["metadata"]["labels"][kinds.PROVIDER_LABEL] == "ipam-metal3"
    (ref,) = pool["metadata"]["ownerReferences"]
    assert (ref["kind"], ref["name"], ref["uid"]) == ("Cluster", "cluster1", get(api, kinds.CLUSTER, "cluster1")["metadata"]["uid"])
    assert not ref.get("controller")
    assert ref["apiVersion"].startswith("cluster.x-k8s.io/")
    # The Cluster is recreated (as after a move): a new UID.
    set_meta(api, kinds.CLUSTER, "cluster1", uid="new-uid")
    converge(api)
    (ref,) = get(api, POOL, "pool1")["metadata"]["ownerReferences"]
    assert ref["uid"] == "new-uid"
    assert settled(api)


def test_pool_keeps_unrelated_owner_references():
    pool = ippool(clusterName="cluster1")
    other = {"apiVersion": "example.com/v1", "kind": "Thing", "name": "t", "uid": "u1"}
    pool["metadata"]["ownerReferences"] = [other]
    api = converged(cluster("cluster1"), pool)
    refs = get(api, POOL, "pool1")["metadata"]["ownerReferences"]
    assert other in refs and len(refs) == 2


# -- errors ------------------------------------------------------------------------------

def test_claim_errors_have_events_and_do_not_block_other_claims():
    api = converged(ippool(pools=[{"start": "192.168.0.10", "end": "192.168.0.11"}]),
                    ipclaim("bad", ip="10.9.9.9"), ipclaim("a"), ipclaim("d", ip="192.168.0.11"), ipclaim("b"),
                    ipclaim("e", ip="192.168.0.10"))
    assert ip_of(api, "a") == "192.168.0.10"
    assert ip_of(api, "d") == "192.168.0.11"
    expected = {"bad": ("AllocationFailed", "not inside"), "b": ("PoolExhausted", "no free address"),
                "e": ("AllocationFailed", "already in use")}
    for name, (reason, words) in expected.items():
        assert address_of(api, "IPClaim", name) == []
        assert words in status(api, IPCLAIM, name)["errorMessage"]
        cond = ready(api, IPCLAIM, name)
        assert (cond["status"], cond["reason"]) == ("False", reason)
        assert cond["message"] == status(api, IPCLAIM, name)["errorMessage"]
    # One Warning event per error, not one per pass.
    warnings = [(e.target.name, e.reason) for e in api.events if e.type == "Warning"]
    assert sorted(warnings) == sorted((n, r) for n, (r, _) in expected.items())
    assert settled(api)


def test_sequential_order_follows_claim_order_and_the_rest_are_exhausted():
    api = converged(ippool(pools=[{"start": "192.168.0.10", "end": "192.168.0.11"}]),
                    ipclaim("a"), ipclaim("b"), ipclaim("c"))
    assert (ip_of(api, "a"), ip_of(api, "b")) == ("192.168.0.10", "192.168.0.11")
    assert ready(api, IPCLAIM, "c")["reason"] == "PoolExhausted"
    assert status(api, IPCLAIM, "c")["errorMessage"]
    (event,) = [e for e in api.events if e.type == "Warning"]
    assert (event.target.name, event.reason) == ("c", "PoolExhausted")


def test_preallocated_claim_with_a_conflicting_annotation_gets_an_error():
    api = converged(ippool(preAllocations={"c": "192.168.0.12"}), ipclaim("c", ip="192.168.0.13"))
    assert address_of(api, "IPClaim", "c") == []
    assert "conflict" in status(api, IPCLAIM, "c")["errorMessage"]


def test_missing_pool_is_an_error_on_the_claim():
    api = converged(ipclaim("c", pool="nowhere"))
    assert "IPPool default/nowhere not found" in status(api, IPCLAIM, "c")["errorMessage"]
    assert ready(api, IPCLAIM, "c")["reason"] == "PoolNotReady"
    assert metal3_addresses(api) == []
    # Nothing to release, so no finalizer: deletable with the controller gone, as the Go IPAM leaves it.
    assert o.finalizers(get(api, IPCLAIM, "c")) == []


@pytest.mark.parametrize("kind", [IPCLAIM, CAPI_CLAIM])
def test_a_claim_that_holds_nothing_carries_no_finalizer(kind):
    """Exhausted, or its pool missing: no finalizer; one left from before is taken off; given an address, it gets one."""
    make = ipclaim if kind == IPCLAIM else capi_claim
    finalizer = kinds.FINALIZERS[kind]
    full = ippool(pools=[{"start": "192.168.0.10", "end": "192.168.0.10"}])
    stale = make("late")
    stale["metadata"]["finalizers"] = [finalizer, "example.com/other"]
    api = converged(full, make("first"), stale, make("lost", pool="nowhere"))
    assert o.finalizers(get(api, kind, "first")) == [finalizer]
    assert ready(api, kind, "late")["reason"] == "PoolExhausted"
    assert o.finalizers(get(api, kind, "late")) == ["example.com/other"]
    assert o.finalizers(get(api, kind, "lost")) == []
    user_delete(api, kind, "first")
    converge(api)
    assert o.finalizers(get(api, kind, "late")) == ["example.com/other", finalizer]
    assert settled(api)


def test_invalid_pool_is_an_error_on_the_claim_and_the_pool():
    api = converged(ippool(pools=[{"start": "192.168.0.20", "end": "192.168.0.10"}]), ipclaim("c"))
    assert "invalid" in status(api, IPCLAIM, "c")["errorMessage"]
    assert "spec.pools[0]" in status(api, IPCLAIM, "c")["errorMessage"]
    cond = ready(api, POOL, "pool1")
    assert (cond["status"], cond["reason"]) == ("False", "InvalidSpec")
    assert "spec.pools[0]" in cond["message"]


def test_claim_in_error_is_retried_when_an_address_is_freed():
    api = converged(ippool(pools=[{"start": "192.168.0.10", "end": "192.168.0.10"}]), ipclaim("a"), ipclaim("b"))
    assert ready(api, IPCLAIM, "b")["reason"] == "PoolExhausted"
    user_delete(api, IPCLAIM, "a")
    converge(api)
    assert get(api, IPCLAIM, "a") is None
    assert ip_of(api, "b") == "192.168.0.10"
    assert "errorMessage" not in status(api, IPCLAIM, "b")
    assert ready(api, IPCLAIM, "b")["status"] == "True"


def test_claim_in_error_is_retried_when_the_pool_grows():
    api = converged(ippool(pools=[{"start": "192.168.0.10", "end": "192.168.0.10"}]), ipclaim("a"), ipclaim("b"))
    pool = copy.deepcopy(get(api, POOL, "pool1"))
    pool["spec"]["pools"] = [{"start": "192.168.0.10", "end": "192.168.0.11"}]
    pool["metadata"]["generation"] += 1  # as the API server counts a change of spec
    api.inventory.upsert(pool)
    converge(api)
    assert ip_of(api, "b") == "192.168.0.11"


# -- status only when changed -----------------------------------------------------------

def test_nothing_is_written_after_convergence_even_as_time_passes():
    api = converged(cluster("cluster1"), ippool(clusterName="cluster1", preAllocations={"p": "192.168.0.20"}),
                    ipclaim("a"), ipclaim("p"), ipclaim("bad", ip="10.0.0.1"), capi_claim("k"),
                    ippool("empty", pools=[{"start": "192.168.0.10", "end": "192.168.0.10"}]),
                    ipclaim("x", pool="empty"), ipclaim("y", pool="empty"))
    before = copy.deepcopy(api.inventory.objects)
    api.now = "2030-06-01T00:00:00Z"
    for plan in all_plans(api):
        assert not plan, plan.describe()
    assert converge(api) == 1
    assert api.inventory.objects == before


def test_conditions_keep_their_transition_time():
    api = converged(ippool(pools=[{"start": "192.168.0.10", "end": "192.168.0.10"}]), ipclaim("a"), ipclaim("b"))
    first = ready(api, IPCLAIM, "b")["lastTransitionTime"]
    api.now = "2030-01-01T00:00:00Z"
    user_delete(api, IPCLAIM, "a")
    converge(api)
    assert ready(api, IPCLAIM, "b")["lastTransitionTime"] == "2030-01-01T00:00:00Z" != first
    assert ready(api, POOL, "pool1")["lastTransitionTime"] == "2024-01-01T00:00:00Z"
    assert status(api, POOL, "pool1")["lastUpdated"] == "2030-01-01T00:00:00Z"


# -- Cluster API claims -------------------------------------------------------------------

def test_capi_claim_gets_a_locking_metal3_address_and_a_capi_mirror():
    pool = ippool(prefix=24, gateway="192.168.0.1")
    claim = capi_claim("m0", labels={kinds.CLUSTER_NAME_LABEL: "cluster1", "other": "x"})
    api = converged(cluster("cluster1"), pool, claim)
    assert ip_of(api, "m0", kind="IPAddressClaim") == "192.168.0.10"
    lock = get(api, ADDRESS, "pool1-192-168-0-10")
    assert lock["spec"]["claim"] == {"apiVersion": CAPI, "kind": "IPAddressClaim", "name": "m0", "namespace": NS}
    mirror = get(api, CAPI_ADDRESS, "m0")
    assert mirror["apiVersion"] == CAPI
    assert mirror["spec"] == {"claimRef": {"name": "m0"},
                              "poolRef": {"apiGroup": "ipam.metal3.io", "kind": "IPPool", "name": "pool1"},
                              "address": "192.168.0.10", "prefix": 24, "gateway": "192.168.0.1"}
    owners = {r["kind"]: r for r in mirror["metadata"]["ownerReferences"]}
    assert owners["IPAddressClaim"]["controller"] is True and owners["IPAddressClaim"]["blockOwnerDeletion"] is True
    assert owners["IPAddressClaim"]["uid"] == get(api, CAPI_CLAIM, "m0")["metadata"]["uid"]
    assert not owners["IPPool"].get("controller") and owners["IPPool"]["blockOwnerDeletion"] is True
    # Every label of the claim, as the Go Metal3 IPAM copies them.
    assert mirror["metadata"]["labels"] == get(api, CAPI_CLAIM, "m0")["metadata"]["labels"]
    assert mirror["metadata"]["labels"][kinds.CLUSTER_NAME_LABEL] == "cluster1" and len(mirror["metadata"]["labels"]) > 1
    assert mirror["metadata"]["finalizers"] == ["ipam.metal3.io/ipaddress"]
    claim_now = get(api, CAPI_CLAIM, "m0")
    assert claim_now["metadata"]["finalizers"] == ["ipam.metal3.io/ipaddressclaim"]
    assert claim_now["status"]["addressRef"] == {"name": "m0"}
    cond = ready(api, CAPI_CLAIM, "m0")
    assert cond["status"] == "True"
    assert status(api, POOL, "pool1")["indexes"] == {"IPAddressClaim/m0": "192.168.0.10"}


def test_capi_mirror_prefix_defaults_to_a_host_prefix():
    api = converged(ippool(pools=[{"start": "192.168.0.10", "end": "192.168.0.10"}]), capi_claim("m"))
    assert get(api, CAPI_ADDRESS, "m")["spec"]["prefix"] == 32
    assert "gateway" not in get(api, CAPI_ADDRESS, "m")["spec"]


@pytest.mark.parametrize("group, kind", [("ipam.cluster.x-k8s.io", "InfobloxIPPool"), ("example.com", "IPPool"),
                                         ("ipam.metal3.io", "GlobalIPPool"), (None, "IPPool")])
def test_capi_claim_for_another_group_or_kind_is_ignored(group, kind):
    foreign = capi_claim("foreign", api_group=group, kind=kind)
    api = converged(ippool(), foreign, ipclaim("mine"))
    assert get(api, CAPI_CLAIM, "foreign") == api.inventory.get(CAPI_CLAIM, NS, "foreign")
    stored = get(api, CAPI_CLAIM, "foreign")
    assert "status" not in stored and not o.finalizers(stored)
    assert address_of(api, "IPAddressClaim", "foreign") == []
    assert capi_addresses(api) == []
    assert ip_of(api, "mine") == "192.168.0.10"


def test_v1beta1_capi_claim_error_condition_has_a_severity():
    api = converged(ippool(pools=[{"start": "192.168.0.10", "end": "192.168.0.10"}]),
                    ipclaim("a"), capi_claim("m", api_version=CAPI_V1BETA1))
    cond = ready(api, CAPI_CLAIM, "m")
    assert (cond["status"], cond["reason"]) == ("False", "PoolExhausted")
    assert cond["severity"] == "Warning"
    assert cond["message"]
    assert "errorMessage" not in status(api, CAPI_CLAIM, "m")


def test_v1beta2_capi_claim_errors():
    api = converged(ippool(), capi_claim("m", ip="10.1.1.1"))
    cond = ready(api, CAPI_CLAIM, "m")
    assert (cond["status"], cond["reason"]) == ("False", "AllocationFailed")
    assert "severity" not in cond
    api = converged(capi_claim("m", pool="nowhere"))
    assert ready(api, CAPI_CLAIM, "m")["reason"] == "PoolNotReady"


def test_claims_of_both_kinds_with_one_name_get_different_ips_and_index_keys():
    api = converged(ippool(), ipclaim("node-0"), capi_claim("node-0"))
    metal3_ip = ip_of(api, "node-0", kind="IPClaim")
    capi_ip = ip_of(api, "node-0", kind="IPAddressClaim")
    assert metal3_ip != capi_ip
    assert status(api, POOL, "pool1")["indexes"] == {"node-0": metal3_ip, "IPAddressClaim/node-0": capi_ip}
    assert get(api, CAPI_ADDRESS, "node-0")["spec"]["address"] == capi_ip
    assert status(api, IPCLAIM, "node-0")["address"]["name"] == f"pool1-{metal3_ip.replace('.', '-')}"
    # Deleting one leaves the other alone.
    user_delete(api, CAPI_CLAIM, "node-0")
    converge(api)
    assert ip_of(api, "node-0") == metal3_ip
    assert address_of(api, "IPAddressClaim", "node-0") == []
    assert capi_addresses(api) == []
    assert status(api, POOL, "pool1")["indexes"] == {"node-0": metal3_ip}


def test_preallocation_and_annotation_apply_to_capi_claims():
    api = converged(ippool(preAllocations={"m0": "192.168.0.15"}), capi_claim("m0"), capi_claim("m1", ip="192.168.0.18"),
                    ipclaim("c"))
    assert ip_of(api, "m0", kind="IPAddressClaim") == "192.168.0.15"
    assert ip_of(api, "m1", kind="IPAddressClaim") == "192.168.0.18"
    assert ip_of(api, "c") == "192.168.0.10"


def test_missing_capi_mirror_is_recreated():
    api = converged(ippool(), capi_claim("m"))
    mirror = get(api, CAPI_ADDRESS, "m")
    api.inventory.remove(mirror)
    converge(api)
    assert get(api, CAPI_ADDRESS, "m")["spec"]["address"] == "192.168.0.10"
    assert len(metal3_addresses(api)) == 1


# -- deletion ---------------------------------------------------------------------------------

def test_deleting_a_claim_releases_its_address():
    api = converged(ippool(), ipclaim("a"), ipclaim("b"))
    user_delete(api, IPCLAIM, "a")
    converge(api)
    assert get(api, IPCLAIM, "a") is None
    assert get(api, ADDRESS, "pool1-192-168-0-10") is None
    assert status(api, POOL, "pool1")["indexes"] == {"b": "192.168.0.11"}
    api.load(ipclaim("c"))
    converge(api)
    assert ip_of(api, "c") == "192.168.0.10"


def test_a_deleting_claim_keeps_its_address_while_other_finalizers_hold_it():
    api = converged(ippool(), ipclaim("a"))
    claim = get(api, IPCLAIM, "a")
    set_meta(api, IPCLAIM, "a", finalizers=["consumer.example.com/protect"] + claim["metadata"]["finalizers"])
    user_delete(api, IPCLAIM, "a")
    converge(api)
    assert get(api, ADDRESS, "pool1-192-168-0-10") is not None
    assert status(api, POOL, "pool1")["indexes"] == {"a": "192.168.0.10"}
    claim = get(api, IPCLAIM, "a")
    set_meta(api, IPCLAIM, "a", finalizers=[f for f in claim["metadata"]["finalizers"] if "example" not in f])
    converge(api)
    assert get(api, IPCLAIM, "a") is None
    assert get(api, ADDRESS, "pool1-192-168-0-10") is None


def test_deleting_a_capi_claim_releases_both_addresses():
    api = converged(ippool(), capi_claim("m"))
    user_delete(api, CAPI_CLAIM, "m")
    converge(api)
    assert get(api, CAPI_CLAIM, "m") is None
    assert metal3_addresses(api) == [] and capi_addresses(api) == []


def test_deleted_preallocated_claim_keeps_its_ip_reserved():
    api = converged(ippool(pools=[{"start": "192.168.0.10", "end": "192.168.0.11"}], preAllocations={"p": "192.168.0.10"}),
                    ipclaim("p"))
    user_delete(api, IPCLAIM, "p")
    converge(api)
    assert metal3_addresses(api) == []
    api.load(ipclaim("x"))
    api.load(ipclaim("y"))
    converge(api)
    assert ip_of(api, "x") == "192.168.0.11"
    assert ready(api, IPCLAIM, "y")["reason"] == "PoolExhausted"
    api.load(ipclaim("p"))
    converge(api)
    assert ip_of(api, "p") == "192.168.0.10"


def test_claim_deleted_before_it_was_served_leaves_nothing():
    api = loaded(ippool(), ipclaim("a"))
    # First pass puts the finalizer on and allocates; the claim is deleted right after.
    converge(api)
    user_delete(api, IPCLAIM, "a")
    converge(api)
    assert metal3_addresses(api) == [] and get(api, IPCLAIM, "a") is None
    # A claim marked for deletion before any address was made just loses its finalizer.
    api.load(ippool("other", namePrefix="other", pools=[{"start": "10.0.0.1", "end": "10.0.0.1"}]))
    claim = ipclaim("b", pool="other")
    claim["metadata"].update(finalizers=["ipclaim.ipam.metal3.io"], deletionTimestamp=api.now)
    api.load(claim)
    converge(api)
    assert get(api, IPCLAIM, "b") is None and metal3_addresses(api) == []


def test_address_of_a_live_claim_is_protected_and_stays_the_claims_only_address():
    api = converged(ippool(), ipclaim("a"))
    user_delete(api, ADDRESS, "pool1-192-168-0-10")
    converge(api)
    (address,) = metal3_addresses(api)
    assert o.name(address) == "pool1-192-168-0-10"
    assert o.is_deleting(address) and o.finalizers(address) == ["ipaddress.ipam.metal3.io"]
    assert status(api, IPCLAIM, "a")["address"]["name"] == "pool1-192-168-0-10"
    assert settled(api)
    # The claim goes: so does the address.
    user_delete(api, IPCLAIM, "a")
    converge(api)
    assert metal3_addresses(api) == [] and get(api, IPCLAIM, "a") is None


def test_orphan_address_is_removed():
    api = converged(ippool(), ipclaim("a"))
    claim = get(api, IPCLAIM, "a")
    api.inventory.remove(claim)  # gone without its finalizer running
    assert api.apply(pool_plan(api)) == []
    converge(api)
    assert metal3_addresses(api) == []
    assert status(api, POOL, "pool1")["indexes"] == {}


def test_orphan_capi_mirror_is_removed():
    api = converged(ippool(), capi_claim("m"))
    api.inventory.remove(get(api, CAPI_CLAIM, "m"))
    converge(api)
    assert metal3_addresses(api) == [] and capi_addresses(api) == []


def test_delete_for_move_releases_nothing_and_writes_nothing():
    """clusterctl annotates, deletes and then strips every finalizer itself: a write of
    ours to those objects would race its own (and a lost race costs it a retry)."""
    api = converged(ippool(), ipclaim("a"), capi_claim("m"))
    move = {kinds.DELETE_FOR_MOVE_ANNOTATION: ""}
    for name in ("pool1-192-168-0-10", "pool1-192-168-0-11"):
        user_delete(api, ADDRESS, name, annotations=move)
    user_delete(api, CAPI_ADDRESS, "m", annotations=move)
    user_delete(api, IPCLAIM, "a", annotations=move)
    user_delete(api, CAPI_CLAIM, "m", annotations=move)
    plan = pool_plan(api)
    assert [w for w in plan.writes if not isinstance(w, SetStatus)] == []
    api.apply(plan)
    assert len(metal3_addresses(api)) == 2 and len(capi_addresses(api)) == 1
    assert o.is_deleting(get(api, IPCLAIM, "a")) and o.is_deleting(get(api, CAPI_CLAIM, "m"))


def test_pool_deletion_waits_for_its_addresses():
    api = converged(ippool(), ipclaim("a"), capi_claim("m"))
    user_delete(api, POOL, "pool1")
    api.load(ipclaim("late"))
    converge(api)
    pool = get(api, POOL, "pool1")
    assert pool is not None and o.finalizers(pool) == ["ippool.ipam.metal3.io"]
    assert (ready(api, POOL, "pool1")["status"], ready(api, POOL, "pool1")["reason"]) == ("False", "Deleting")
    assert "being deleted" in status(api, IPCLAIM, "late")["errorMessage"]
    assert address_of(api, "IPClaim", "late") == []
    user_delete(api, IPCLAIM, "a")
    converge(api)
    assert get(api, POOL, "pool1") is not None  # the Cluster API claim still holds one
    user_delete(api, CAPI_CLAIM, "m")
    converge(api)
    assert get(api, POOL, "pool1") is None
    assert metal3_addresses(api) == [] and capi_addresses(api) == []


def test_pool_deleted_for_move_is_left_to_clusterctl():
    api = converged(ippool(), ipclaim("a"))
    user_delete(api, POOL, "pool1", annotations={kinds.DELETE_FOR_MOVE_ANNOTATION: ""})
    assert not pool_plan(api)
    assert get(api, POOL, "pool1") is not None and len(metal3_addresses(api)) == 1


# -- pause -------------------------------------------------------------------------------------

def paused_annotation():
    return {kinds.PAUSED_ANNOTATION: ""}


@pytest.mark.parametrize("how", ["cluster", "pool"])
def test_paused_pool_changes_nothing_then_resumes(how):
    pool = ippool(clusterName="cluster1", annotations=paused_annotation() if how == "pool" else None)
    api = converged(cluster("cluster1", paused=how == "cluster"), pool, ipclaim("a"))
    assert metal3_addresses(api) == []
    assert "status" not in get(api, IPCLAIM, "a") and not o.finalizers(get(api, IPCLAIM, "a"))
    assert "status" not in get(api, POOL, "pool1") and not o.finalizers(get(api, POOL, "pool1"))
    assert api.events == []
    plan = pool_plan(api)
    assert not plan and "paused" in plan.notes
    # Resume.
    if how == "cluster":
        c = copy.deepcopy(get(api, kinds.CLUSTER, "cluster1"))
        c["spec"]["paused"] = False
        api.inventory.upsert(c)
    else:
        set_meta(api, POOL, "pool1", annotations={})
    converge(api)
    assert ip_of(api, "a") == "192.168.0.10"


def test_paused_cluster_blocks_release_too():
    api = converged(cluster("cluster1"), ippool(clusterName="cluster1"), ipclaim("a"))
    c = copy.deepcopy(get(api, kinds.CLUSTER, "cluster1"))
    c["spec"]["paused"] = True
    api.inventory.upsert(c)
    user_delete(api, IPCLAIM, "a")
    before = copy.deepcopy(api.inventory.objects)
    converge(api)
    assert api.inventory.objects == before
    c["spec"]["paused"] = False
    api.inventory.upsert(c)
    converge(api)
    assert metal3_addresses(api) == [] and get(api, IPCLAIM, "a") is None


def test_claim_whose_cluster_is_gone_is_still_released():
    api = converged(cluster("cluster1"), ippool(clusterName="cluster1"), ipclaim("a"))
    api.inventory.remove(get(api, kinds.CLUSTER, "cluster1"))
    user_delete(api, IPCLAIM, "a")
    converge(api)
    assert metal3_addresses(api) == [] and get(api, IPCLAIM, "a") is None


def test_a_paused_pool_still_releases_a_deleted_claim_whose_cluster_is_gone():
    """Nothing resumes a claim whose Cluster is gone: held by a paused pool it would never go. A deleted
    claim whose Cluster is there, and any claim not deleted, wait for the pool as before."""
    label = kinds.CLUSTER_NAME_LABEL
    api = converged(cluster("gone"), cluster("here"), ippool(),
                    ipclaim("orphan", labels={label: "gone"}), ipclaim("kept", labels={label: "here"}),
                    ipclaim("live", labels={label: "gone"}))
    set_meta(api, POOL, "pool1", annotations=paused_annotation())
    api.inventory.remove(get(api, kinds.CLUSTER, "gone"))
    user_delete(api, IPCLAIM, "orphan")
    user_delete(api, IPCLAIM, "kept")
    converge(api)
    assert get(api, IPCLAIM, "orphan") is None and address_of(api, "IPClaim", "orphan") == []
    assert ip_of(api, "kept") == "192.168.0.11" and ip_of(api, "live") == "192.168.0.12"
    assert "paused" in pool_plan(api).notes


def test_a_cluster_paused_by_its_annotation_pauses_its_claims():
    label = kinds.CLUSTER_NAME_LABEL
    held = cluster("cluster1")
    held["metadata"]["annotations"] = paused_annotation()
    api = converged(held, ippool(), ipclaim("a", labels={label: "cluster1"}), ipclaim("b"))
    assert address_of(api, "IPClaim", "a") == [] and ip_of(api, "b") == "192.168.0.10"
    set_meta(api, kinds.CLUSTER, "cluster1", annotations={})
    converge(api)
    assert ip_of(api, "a") == "192.168.0.11"


def test_paused_claim_is_left_alone_while_others_are_served():
    api = converged(ippool(), ipclaim("quiet", annotations=paused_annotation()), ipclaim("b"))
    assert address_of(api, "IPClaim", "quiet") == []
    assert "status" not in get(api, IPCLAIM, "quiet")
    assert ip_of(api, "b") == "192.168.0.10"
    set_meta(api, IPCLAIM, "quiet", annotations={})
    converge(api)
    assert ip_of(api, "quiet") == "192.168.0.11"


def test_paused_claim_keeps_its_address_and_index_and_is_not_released():
    api = converged(ippool(), ipclaim("a"))
    set_meta(api, IPCLAIM, "a", annotations=paused_annotation())
    user_delete(api, IPCLAIM, "a")
    converge(api)
    assert ip_of(api, "a") == "192.168.0.10"
    assert status(api, POOL, "pool1")["indexes"] == {"a": "192.168.0.10"}
    assert settled(api)


# -- move: status rebuilt from the addresses -------------------------------------------------

def moved_copy(obj: dict) -> dict:
    """What clusterctl move creates in the target: spec and metadata, no status, new identity."""
    obj = copy.deepcopy(obj)
    obj.pop("status", None)
    for field in ("uid", "resourceVersion", "creationTimestamp", "deletionTimestamp"):
        obj["metadata"].pop(field, None)
    return obj


def test_move_rebuilds_status_from_the_addresses_and_allocates_nothing():
    source = converged(cluster("cluster1"), ippool(clusterName="cluster1", preAllocations={"p": "192.168.0.19"}),
                       ipclaim("a"), ipclaim("b"), ipclaim("p"), capi_claim("m"), capi_claim("a"),
                       ipclaim("wants", ip="192.168.0.17"))
    before = {(o.name(a), o.spec(a)["address"]) for a in metal3_addresses(source)}
    # Free one address low in the pool so a fresh allocation would be noticed.
    user_delete(source, IPCLAIM, "a")
    converge(source)
    before = {(o.name(a), o.spec(a)["address"]) for a in metal3_addresses(source)}
    objects = [moved_copy(obj) for obj in source.inventory.objects.values()]
    random.Random(5).shuffle(objects)

    target = loaded(*objects, now="2025-01-01T00:00:00Z")
    converge(target)
    assert target.created == []
    assert {(o.name(a), o.spec(a)["address"]) for a in metal3_addresses(target)} == before
    for kind, name in [("IPClaim", "b"), ("IPClaim", "p"), ("IPClaim", "wants"),
                       ("IPAddressClaim", "m"), ("IPAddressClaim", "a")]:
        assert address_of(target, kind, name) == address_of(source, kind, name)
    assert status(target, IPCLAIM, "b") == {**status(source, IPCLAIM, "b"),
                                            "conditions": status(target, IPCLAIM, "b")["conditions"]}
    assert status(target, CAPI_CLAIM, "m")["addressRef"] == {"name": "m"}
    src_status, tgt_status = status(source, POOL, "pool1"), status(target, POOL, "pool1")
    for key in ("indexes", "capacity", "allocated", "free"):
        assert tgt_status[key] == src_status[key], key
    assert settled(target)


def test_capi_claim_moved_with_its_capi_address_but_not_its_lock_keeps_that_ip():
    """clusterctl lists kind by kind before it pauses: a claim served in between can arrive with
    its Cluster API IPAddress and without the Metal3 lock. Its consumers may have read that IP."""
    source = converged(ippool(), ipclaim("x"), capi_claim("m"))
    assert ip_of(source, "m", "IPAddressClaim") == "192.168.0.11"
    objects = [moved_copy(obj) for obj in source.inventory.objects.values()
               if not (kinds.kind_of(obj) == ADDRESS and o.claim_of_address(obj) == ("IPAddressClaim", "m"))]
    # Claims served before it in the target's pass would take the lowest free addresses.
    target = loaded(ipclaim("new"), capi_claim("new-capi"), *objects)
    converge(target)
    assert ip_of(target, "m", "IPAddressClaim") == "192.168.0.11"
    assert o.spec(get(target, CAPI_ADDRESS, "m"))["address"] == "192.168.0.11"
    assert ip_of(target, "x") == "192.168.0.10"
    assert sorted(all_bound_ips(target)) == ["192.168.0.10", "192.168.0.11", "192.168.0.12", "192.168.0.13"]
    assert settled(target)


def test_status_rebuilt_for_addresses_without_claim_status():
    # Addresses and claims only, the way a backup restore might give them.
    api = converged(ippool(), ipclaim("a"), ipclaim("b"))
    objects = [moved_copy(obj) for obj in api.inventory.objects.values()]
    fresh = loaded(*objects)
    plan = reconcile(fresh.inventory.snapshot((NS, "pool1"), fresh.now))
    assert not [a for a in plan.writes if isinstance(a, Create)]
    statuses = {a.target.name: a.status for a in plan.writes if isinstance(a, SetStatus)}
    assert statuses["a"]["address"]["name"] == "pool1-192-168-0-10"
    assert statuses["pool1"]["indexes"] == {"a": "192.168.0.10", "b": "192.168.0.11"}


# -- races and conflicts -------------------------------------------------------------------------

def test_second_address_for_one_claim_is_removed_keeping_the_one_the_status_names():
    api = converged(ippool(), ipclaim("a"))
    first = get(api, ADDRESS, "pool1-192-168-0-10")
    second = copy.deepcopy(first)
    second["metadata"]["name"] = "pool1-192-168-0-11"
    second["metadata"]["creationTimestamp"] = "2024-01-02T00:00:00Z"
    second["spec"]["address"] = "192.168.0.11"
    second["metadata"].pop("uid")
    api.load(second)
    # The status names the newer one: it is kept.
    claim = copy.deepcopy(get(api, IPCLAIM, "a"))
    claim["status"]["address"]["name"] = "pool1-192-168-0-11"
    api.inventory.upsert(claim)
    # One pass marks the extra for deletion and lets it go: nothing is refused.
    assert api.apply(pool_plan(api)) == []
    assert get(api, ADDRESS, "pool1-192-168-0-10") is None
    converge(api)
    assert ip_of(api, "a") == "192.168.0.11"
    assert get(api, ADDRESS, "pool1-192-168-0-10") is None
    assert status(api, POOL, "pool1")["indexes"] == {"a": "192.168.0.11"}


def test_second_address_without_status_keeps_the_oldest():
    api = converged(ippool(), ipclaim("a"))
    second = copy.deepcopy(get(api, ADDRESS, "pool1-192-168-0-10"))
    second["metadata"].update(name="pool1-192-168-0-15", creationTimestamp="2025-01-01T00:00:00Z")
    second["metadata"].pop("uid")
    second["spec"]["address"] = "192.168.0.15"
    claim = copy.deepcopy(get(api, IPCLAIM, "a"))
    claim.pop("status")
    api.inventory.upsert(claim)
    api.load(second)
    converge(api)
    assert ip_of(api, "a") == "192.168.0.10"
    assert status(api, IPCLAIM, "a")["address"]["name"] == "pool1-192-168-0-10"


def test_two_pools_with_one_name_prefix_and_overlapping_ranges_do_not_double_allocate():
    a = ippool("a", namePrefix="shared", pools=[{"start": "192.168.0.10", "end": "192.168.0.15"}])
    b = ippool("b", namePrefix="shared", pools=[{"start": "192.168.0.13", "end": "192.168.0.20"}])
    claims = [ipclaim(f"a{i}", pool="a") for i in range(4)] + [ipclaim(f"b{i}", pool="b") for i in range(6)]
    api = loaded(a, b, *claims)
    # Both pools plan from the same reading, as two workers with a lagging cache would.
    plans = [reconcile(api.inventory.snapshot(key, api.now)) for key in api.inventory.pool_keys()]
    refused = [line for plan in plans for line in api.apply(plan)]
    assert any("already exists" in line for line in refused)
    rounds = converge(api)
    assert rounds < 10
    ips = all_bound_ips(api)
    assert len(ips) == len(set(ips)) == 10
    for i in range(4):
        assert 10 <= int(ip_of(api, f"a{i}").rsplit(".", 1)[1]) <= 15
    for i in range(6):
        assert 13 <= int(ip_of(api, f"b{i}").rsplit(".", 1)[1]) <= 20
    assert settled(api)


def test_address_name_taken_by_another_pool_is_skipped_in_one_pass():
    a = ippool("a", namePrefix="shared", pools=[{"start": "192.168.0.10", "end": "192.168.0.12"}])
    b = ippool("b", namePrefix="shared", pools=[{"start": "192.168.0.10", "end": "192.168.0.12"}])
    api = converged(a, ipclaim("x", pool="a"))
    api.load(b)
    api.load(ipclaim("y", pool="b"))
    api.load(ipclaim("z", pool="b", ip="192.168.0.10"))
    plan = pool_plan(api, "b")
    created = [a.obj["metadata"]["name"] for a in plan.writes if isinstance(a, Create)]
    assert created == ["shared-192-168-0-11"]
    converge(api)
    assert ip_of(api, "y") == "192.168.0.11"
    assert "already in use" in status(api, IPCLAIM, "z")["errorMessage"]


def test_refused_step_does_not_stop_other_claims():
    api = loaded(ippool(), ipclaim("a"), ipclaim("b"))
    plan = reconcile(api.inventory.snapshot((NS, "pool1"), api.now))
    # Someone else takes the first address's name between reading and writing.
    # (an address of another pool, for a claim of its own).
    squatter = {"apiVersion": "ipam.metal3.io/v1alpha1", "kind": "IPAddress",
                "metadata": {"name": "pool1-192-168-0-10", "namespace": NS},
                "spec": {"address": "192.168.0.10", "pool": {"name": "elsewhere"}, "claim": {"name": "zz"}}}
    api.load(squatter)
    api.load(ipclaim("zz", pool="elsewhere"))
    refused = api.apply(plan)
    assert len(refused) == 1 and "IPClaim default/a" in refused[0]
    assert ip_of(api, "b") == "192.168.0.11"
    converge(api)
    assert ip_of(api, "a") == "192.168.0.12"


def test_reconcile_without_a_pool_object_serves_errors_only():
    plan = reconcile(snapshot(None, claims=[ipclaim("c")]))
    assert not [a for a in plan.writes if isinstance(a, Create)]
    (st,) = [a.status for a in plan.writes if isinstance(a, SetStatus)]
    assert "not found" in st["errorMessage"]
