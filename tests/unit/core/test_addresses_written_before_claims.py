"""An address object written before its claim (by hand, a restore, ``clusterctl move``) is taken up by the claim
only when its pool could have handed its IP out to that claim (SPEC §10, invariant 1).

Otherwise the claim is told why (Ready=False ``AddressConflict`` naming the address object, the IP and what
holds it or why the pool would not give it; an IPClaim's ``status.errorMessage`` too; one Warning Event), the
address is left as the user wrote it (no finalizer, no owner references added, not deleted), the claim is
given no other IP while that address names it, and the pool says which of its claims' addresses conflict. Once
the address goes, the claim is served as any other.
"""

from __future__ import annotations

import random

import pytest

from metal3_ipam.core import kinds
from metal3_ipam.core import objects as o
from metal3_ipam.core.naming import address_name
from metal3_ipam.memory import converge
from metal3_ipam.testing import go_incluster as gi
from go_ipam_objects import go_pool, go_served_capi_claim, go_served_ipclaim
from ipam_objects import (CONFLICT, NS, assert_no_ip_twice, capi_address, capi_claim, converged, get, ipclaim, ippool,
                          live_bindings, loaded, ready)
from hypothesis import HealthCheck, given, note, settings
from hypothesis import strategies as st
from metal3_ipam.core.allocator import never_for
from metal3_ipam.core import poolkind as pool_kinds

ADDRESS, CAPI_ADDRESS, CAPI_CLAIM, IPCLAIM = kinds.IPADDRESS, kinds.CAPI_ADDRESS, kinds.CAPI_CLAIM, kinds.IPCLAIM
IN_CLUSTER = (gi.GROUP, gi.IN_CLUSTER_IP_POOL)


def events_of(api, name: str, reason: str = CONFLICT) -> list:
    return [e for e in api.events if e.target.name == name and e.reason == reason]


def metal3_address(name: str, claim: str, pool: str, ip: str) -> dict:
    """A Metal3 IPAddress as a user writes it before its IPClaim."""
    return {"apiVersion": kinds.METAL3_API_VERSION, "kind": "IPAddress", "metadata": {"name": name, "namespace": NS},
            "spec": {"address": ip, "prefix": 24, "pool": {"name": pool, "namespace": NS},
                     "claim": {"name": claim, "namespace": NS}}}


def incluster_pools() -> list[dict]:
    return [gi.ip_pool("a", namespace=NS, prefix=16, addresses=["10.8.0.0/28"]),
            gi.ip_pool("b", namespace=NS, prefix=16, addresses=["10.8.1.0/28"], gateway="10.8.1.1",
                       excluded=["10.8.1.9"])]


def incluster_claim(name: str, pool: str) -> dict:
    return gi.claim(name, NS, gi.IN_CLUSTER_IP_POOL, pool)


def assert_refused(api, kind, name: str, *words: str) -> None:
    """Told on its Ready condition (and an IPClaim's errorMessage) and in exactly one Warning Event."""
    condition = ready(api, kind, name)
    assert condition.get("status") == "False" and condition.get("reason") == CONFLICT, condition
    for word in words:
        assert word in condition["message"], (word, condition["message"])
    if kind == IPCLAIM:
        assert o.status(get(api, kind, name))["errorMessage"] == condition["message"]
    assert len(events_of(api, name)) == 1, [e.message for e in api.events if e.target.name == name]
    assert events_of(api, name)[0].type == "Warning"


def assert_left_as_written(api, kind, name: str, written: dict) -> None:
    stored = get(api, kind, name)
    assert stored is not None and not o.is_deleting(stored)
    assert o.finalizers(stored) == list(written["metadata"].get("finalizers") or [])
    assert o.owner_references(stored) == list(written["metadata"].get("ownerReferences") or [])
    assert stored["spec"] == written["spec"]


# -- InClusterIPPool ---------------------------------------------------------------------------------------

def test_an_address_at_an_ip_another_pools_claim_holds_is_refused_and_served_once_it_goes():
    """Claim x of pool b holds 10.8.1.0; an IPAddress written for claim y of pool a at that IP, then y."""
    api = converged(*incluster_pools(), incluster_claim("x", "b"))
    held = o.spec(get(api, CAPI_ADDRESS, "x"))["address"]
    written = capi_address("y", "y", IN_CLUSTER, "a", held)
    api.load(written)
    api.load(incluster_claim("y", "a"))
    converge(api, random.Random(0))
    assert_no_ip_twice(api)
    assert ready(api, CAPI_CLAIM, "x")["status"] == "True"
    assert_refused(api, CAPI_CLAIM, "y", f"IPAddress.{kinds.CAPI_IPAM_GROUP} {NS}/y", held, "IPAddressClaim default/x")
    assert_left_as_written(api, CAPI_ADDRESS, "y", written)
    assert not o.finalizers(get(api, CAPI_CLAIM, "y"))
    assert not [a for a in api.inventory.of_kind(ADDRESS) if o.claim_of_address(a) == ("IPAddressClaim", "y")]
    # The pool says which of its claims' addresses conflict.
    pool = get(api, IN_CLUSTER, "a")
    conflict = o.condition(o.status(pool), "AddressesConflicting")
    assert conflict and conflict["status"] == "True" and "y" in conflict["message"] and held in conflict["message"]
    # Passes that change nothing tell it again nowhere.
    converge(api, random.Random(0))
    assert len(events_of(api, "y")) == 1
    # Once the offending address goes, y is served from its own pool.
    api.inventory.remove(get(api, CAPI_ADDRESS, "y"))
    converge(api, random.Random(0))
    assert ready(api, CAPI_CLAIM, "y")["status"] == "True"
    assert o.spec(get(api, CAPI_ADDRESS, "y"))["address"].startswith("10.8.0.")
    assert not o.condition(o.status(get(api, IN_CLUSTER, "a")), "AddressesConflicting")
    assert_no_ip_twice(api)


@pytest.mark.parametrize("ip, words", [("10.8.1.1", ["10.8.1.1", "gateway"]),
                                       ("10.8.1.9", ["10.8.1.9", "excluded"]),
                                       ("192.168.9.9", ["192.168.9.9", "not inside"])])
def test_an_address_the_pool_could_not_have_handed_out_is_refused(ip, words):
    written = capi_address("y", "y", IN_CLUSTER, "b", ip)
    api = converged(*incluster_pools(), written, incluster_claim("y", "b"))
    assert_refused(api, CAPI_CLAIM, "y", f"IPAddress.{kinds.CAPI_IPAM_GROUP} {NS}/y", *words)
    assert_left_as_written(api, CAPI_ADDRESS, "y", written)
    assert not api.inventory.of_kind(ADDRESS) or all(o.spec(a)["address"] != ip for a in api.inventory.of_kind(ADDRESS))


def test_an_address_at_an_ip_the_same_pool_gave_another_claim_is_refused_not_left_silent():
    api = converged(*incluster_pools(), incluster_claim("x", "a"))
    held = o.spec(get(api, CAPI_ADDRESS, "x"))["address"]
    written = capi_address("y-address", "y", IN_CLUSTER, "a", held)
    api.load(written)
    api.load(incluster_claim("y", "a"))
    converge(api, random.Random(0))
    assert_refused(api, CAPI_CLAIM, "y", f"{NS}/y-address", held, "IPAddressClaim default/x")
    assert_left_as_written(api, CAPI_ADDRESS, "y-address", written)
    assert ready(api, CAPI_CLAIM, "x")["status"] == "True"
    assert_no_ip_twice(api)


def test_a_free_address_written_before_its_claim_is_still_adopted():
    written = capi_address("y", "y", IN_CLUSTER, "a", "10.8.0.7")
    api = converged(*incluster_pools(), written, incluster_claim("y", "a"), incluster_claim("z", "a"))
    condition = ready(api, CAPI_CLAIM, "y")
    assert condition["status"] == "True" and condition["message"] == "bound to 10.8.0.7", condition
    assert o.spec(get(api, CAPI_ADDRESS, "z"))["address"] != "10.8.0.7"
    assert not api.events


def test_a_claim_moved_back_with_an_address_another_claim_holds_is_told_and_the_pool_says_so():
    """A global pool: the claim left for another cluster (clusterctl move), its IP went to a new claim here, and
    it comes back with its address (owner references to the claim as clusterctl rewrites them)."""
    api = converged(gi.ip_pool("g", prefix=24, addresses=["10.9.0.2-10.9.0.9"]),
                    gi.claim("m", "ns-a", gi.GLOBAL_IN_CLUSTER_IP_POOL, "g"))
    moved = get(api, CAPI_ADDRESS, "m", "ns-a")
    ip = o.spec(moved)["address"]
    for obj in (moved, get(api, CAPI_CLAIM, "m", "ns-a")):
        api.inventory.remove(obj)
    converge(api, random.Random(0))  # its lock goes with the claim
    api.load(gi.claim("n", "ns-b", gi.GLOBAL_IN_CLUSTER_IP_POOL, "g"))
    converge(api, random.Random(0))
    assert o.spec(get(api, CAPI_ADDRESS, "n", "ns-b"))["address"] == ip
    back = gi.claim("m", "ns-a", gi.GLOBAL_IN_CLUSTER_IP_POOL, "g")
    api.load(back)
    uid = o.meta(get(api, CAPI_CLAIM, "m", "ns-a"))["uid"]
    refs = [{**r, "uid": uid} if r["kind"] == "IPAddressClaim" else r for r in o.owner_references(moved)]
    api.load({**moved, "metadata": {**{k: v for k, v in moved["metadata"].items()
                                       if k not in ("uid", "resourceVersion", "creationTimestamp")},
                                    "ownerReferences": refs}})
    converge(api, random.Random(0))
    assert_no_ip_twice(api)
    condition = ready(api, CAPI_CLAIM, "m", "ns-a")
    assert condition["status"] == "False" and condition["reason"] == CONFLICT
    assert ip in condition["message"] and "ns-b/n" in condition["message"]
    assert len(events_of(api, "m")) == 1
    pool = get(api, (gi.GROUP, gi.GLOBAL_IN_CLUSTER_IP_POOL), "g", "")
    assert "ns-a/m" in o.condition(o.status(pool), "AddressesConflicting")["message"]


# -- IPPool: Cluster API claims and Metal3 IPClaims ----------------------------------------------------------

def ippools() -> list[dict]:
    return [ippool("pa", namePrefix="pa", pools=[{"start": "10.8.0.1", "end": "10.8.0.9"}], prefix=24,
                   preAllocations={"pre": "10.8.0.9"}, excludedAddresses=["10.8.0.8"]),
            ippool("pb", namePrefix="pb", pools=[{"start": "10.8.1.1", "end": "10.8.1.9"}], prefix=24)]


@pytest.mark.parametrize("same_pool", [False, True])
def test_an_ippool_cluster_api_address_at_an_ip_another_claim_holds_is_refused(same_pool):
    api = converged(*ippools(), ipclaim("x", pool="pb"))
    held = get(api, IPCLAIM, "x")["status"]["address"]["name"]
    ip = o.spec(get(api, ADDRESS, held))["address"]
    pool = "pb" if same_pool else "pa"
    written = capi_address("y-address", "y", (kinds.METAL3_GROUP, "IPPool"), pool, ip)
    api.load(written)
    api.load(capi_claim("y", pool=pool))
    converge(api, random.Random(0))
    assert_no_ip_twice(api)
    assert_refused(api, CAPI_CLAIM, "y", f"{NS}/y-address", ip, "IPClaim default/x")
    assert_left_as_written(api, CAPI_ADDRESS, "y-address", written)


@pytest.mark.parametrize("ip, words", [("10.8.0.9", ["preallocated", "pre"]), ("10.8.0.8", ["excluded"]),
                                       ("10.8.1.3", ["not inside"])])
def test_an_ippool_cluster_api_address_the_pool_could_not_have_handed_out_is_refused(ip, words):
    written = capi_address("y-address", "y", (kinds.METAL3_GROUP, "IPPool"), "pa", ip)
    api = converged(*ippools(), written, capi_claim("y", pool="pa"))
    assert_refused(api, CAPI_CLAIM, "y", f"{NS}/y-address", ip, *words)


def test_a_metal3_address_written_before_its_ipclaim_at_another_claims_ip_is_refused():
    api = converged(*ippools(), capi_claim("x", pool="pb"))
    ip = o.spec(get(api, CAPI_ADDRESS, "x"))["address"]
    written = metal3_address(address_name("pa", ip), "y", "pa", ip)
    api.load(written)
    api.load(ipclaim("y", pool="pa"))
    converge(api, random.Random(0))
    assert_no_ip_twice(api)
    assert_refused(api, IPCLAIM, "y", f"IPAddress {NS}/{address_name('pa', ip)}", ip, "IPAddressClaim default/x")
    assert_left_as_written(api, ADDRESS, address_name("pa", ip), written)
    assert not o.finalizers(get(api, IPCLAIM, "y"))
    # The claim is given no other IP while that address names it; once it goes, it is served.
    api.inventory.remove(get(api, ADDRESS, address_name("pa", ip)))
    converge(api, random.Random(0))
    assert ready(api, IPCLAIM, "y")["status"] == "True"
    assert "errorMessage" not in o.status(get(api, IPCLAIM, "y"))


def test_a_metal3_address_written_before_its_ipclaim_outside_the_pool_is_refused():
    written = metal3_address("pa-192-168-9-9", "y", "pa", "192.168.9.9")
    api = converged(*ippools(), written, ipclaim("y", pool="pa"))
    assert_refused(api, IPCLAIM, "y", "192.168.9.9", "not inside")
    assert_left_as_written(api, ADDRESS, "pa-192-168-9-9", written)


def test_go_state_at_the_gateway_and_preallocated_ips_is_still_adopted_as_it_is():
    """The Go Metal3 IPAM hands out the gateway; what it gave out stays with its claims (docs/upgrade.md)."""
    pool = go_pool("gp", NS, {"namePrefix": "gp", "gateway": "10.0.0.1", "prefix": 24,
                              "pools": [{"start": "10.0.0.1", "end": "10.0.0.8"}],
                              "preAllocations": {"pre": "10.0.0.8"}})
    api = converged(pool, *go_served_capi_claim("gw", pool, "10.0.0.1", gateway="10.0.0.1"),
                    *go_served_ipclaim("ipc-gw", pool, "10.0.0.2"), *go_served_capi_claim("pre", pool, "10.0.0.8"))
    for kind, name in ((CAPI_CLAIM, "gw"), (IPCLAIM, "ipc-gw"), (CAPI_CLAIM, "pre")):
        assert ready(api, kind, name)["status"] == "True", (name, ready(api, kind, name))
    assert not api.events


# -- admission ---------------------------------------------------------------------------------------------

def review(api, obj: dict) -> dict:
    from metal3_ipam.controller.admission import Admission
    from ipam_objects import admission_request as request

    return Admission(api.inventory).review(request("CREATE", obj))


@pytest.mark.parametrize("ip, words", [("10.8.1.1", ["gateway"]), ("10.8.1.9", ["excluded"]),
                                       ("192.168.9.9", ["not inside"])])
def test_admission_refuses_an_address_written_before_its_claim_that_its_pool_could_not_hand_out(ip, words):
    api = converged(*incluster_pools())
    response = review(api, capi_address("y", "y", IN_CLUSTER, "b", ip))
    assert not response["allowed"], response
    message = response["status"]["message"]
    for word in ["spec.address", ip, f"InClusterIPPool {NS}/b", *words]:
        assert word in message, (word, message)


@pytest.mark.parametrize("pool", ["a", "b"])
def test_admission_refuses_an_address_written_before_its_claim_at_an_ip_another_address_holds(pool):
    api = converged(*incluster_pools(), incluster_claim("x", "b"))
    held = o.spec(get(api, CAPI_ADDRESS, "x"))["address"]
    response = review(api, capi_address("y", "y", IN_CLUSTER, pool, held))
    assert not response["allowed"], response
    assert f"IPAddressClaim {NS}/x" in response["status"]["message"] and held in response["status"]["message"]


def test_admission_lets_through_what_an_ipam_or_a_move_writes_and_free_addresses():
    api = converged(*incluster_pools(), incluster_claim("x", "b"))
    x = get(api, CAPI_ADDRESS, "x")
    # Its claim's own address (a move's copy: owner reference to the claim), and what a restore brings for the
    # claim that holds the lock already.
    assert review(api, {**x, "metadata": {k: v for k, v in x["metadata"].items() if k != "resourceVersion"}})["allowed"]
    lockless = capi_address("x", "x", IN_CLUSTER, "b", o.spec(x)["address"], prefix=16)
    api.inventory.remove(x)
    assert review(api, lockless)["allowed"]
    assert review(api, capi_address("y", "y", IN_CLUSTER, "a", "10.8.0.7"))["allowed"]
    # The Go Metal3 IPAM's state (an IPPool's gateway) is never judged here: owner references to its claim.
    pool = go_pool("gp", NS, {"namePrefix": "gp", "gateway": "10.0.0.1", "prefix": 24,
                              "pools": [{"start": "10.0.0.1", "end": "10.0.0.8"}]})
    claim, address = go_served_capi_claim("gw", pool, "10.0.0.1", gateway="10.0.0.1")
    api = loaded(pool)
    assert review(api, address)["allowed"]


# -- property: addresses written by hand before their claims, in any pool of the namespace ---------------------


POOLS = {"a": IN_CLUSTER, "b": IN_CLUSTER, "pa": kinds.IPPOOL}


def world() -> list[dict]:
    """Two in-cluster pools and an IPPool of one namespace, the later ones overlapping the earlier."""
    objs = [gi.ip_pool("a", namespace=NS, prefix=24, addresses=["10.8.0.1-10.8.0.6"], gateway="10.8.0.3"),
            gi.ip_pool("b", namespace=NS, prefix=24, addresses=["10.8.0.5-10.8.0.9"], excluded=["10.8.0.8"]),
            ippool("pa", namePrefix="pa", pools=[{"start": "10.8.0.9", "end": "10.8.0.12"}], prefix=24,
                   preAllocations={"pre": "10.8.0.11"})]
    for i, obj in enumerate(objs):
        obj["metadata"]["creationTimestamp"] = f"2024-01-01T00:00:0{i}Z"
    return objs


def claim_for(name: str, pool: str, kind: str) -> dict:
    if pool == "pa":
        return ipclaim(name, pool="pa") if kind == "IPClaim" else capi_claim(name, pool="pa")
    return incluster_claim(name, pool)


def written(name: str, pool: str, kind: str, ip: str) -> dict:
    if kind == "IPClaim":
        return metal3_address(f"hand-{name}", name, "pa", ip)
    return capi_address(f"hand-{name}", name, POOLS[pool], pool, ip)


claims_st = st.lists(st.tuples(st.sampled_from(sorted(POOLS)), st.sampled_from(["IPClaim", "IPAddressClaim"])),
                     max_size=5)
by_hand_st = st.lists(st.tuples(st.sampled_from(sorted(POOLS)), st.sampled_from(["IPClaim", "IPAddressClaim"]),
                                st.one_of(st.integers(0, 13).map(lambda n: f"10.8.0.{n}"),
                                          st.just("192.168.9.9"), st.integers(0, 9).map(lambda k: k))),
                      max_size=4)


def statuses_bind(api) -> dict[str, set]:
    """IP -> live claims whose status binds them to it (Ready=True and the address object it names)."""
    return live_bindings(api)


@settings(deadline=None, max_examples=60, suppress_health_check=[HealthCheck.too_slow])
@given(claims_st, by_hand_st, st.integers(0, 1000))
def test_addresses_written_by_hand_before_their_claims_never_bind_one_ip_twice(served, by_hand, seed):
    api = loaded(*world())
    for i, (pool, kind) in enumerate(served):
        api.load(claim_for(f"s{i}", pool, kind if pool == "pa" else "IPAddressClaim"))
    converge(api, random.Random(seed))
    held = sorted(ip for ip in live_bindings(api))
    hand = {}
    for i, (pool, kind, where) in enumerate(by_hand):
        kind = kind if pool == "pa" else "IPAddressClaim"
        ip = (held[where % len(held)] if held else "10.8.0.1") if isinstance(where, int) else where
        obj = written(f"h{i}", pool, kind, ip)
        note(f"h{i}: {kind} of {pool} at {ip}")
        hand[f"h{i}"] = (pool, kind, obj)
        api.load(obj)
        api.load(claim_for(f"h{i}", pool, kind))
    converge(api, random.Random(seed))
    assert_no_ip_twice(api)
    models = {name: pool_kinds.read(get(api, kind, name))[0] for name, kind in POOLS.items()}
    for name, (pool, kind, obj) in hand.items():
        claim_kind = IPCLAIM if kind == "IPClaim" else CAPI_CLAIM
        condition = ready(api, claim_kind, name)
        stored = get(api, kinds.kind_of(obj), o.name(obj))
        if condition.get("status") == "True":
            if o.status(get(api, claim_kind, name)).get("address" if kind == "IPClaim" else "addressRef", {}).get(
                    "name") == o.name(obj):
                model = models[pool]
                unit = model.unit_of(int(o.address_ip(obj)))
                assert never_for(model, [], name, unit) is None, (name, o.spec(obj)["address"])
        else:
            assert condition.get("reason") in (CONFLICT, "PoolExhausted"), condition
            if condition.get("reason") == CONFLICT:
                assert stored is not None and stored["spec"] == obj["spec"] and not o.finalizers(stored)
                assert not o.finalizers(get(api, claim_kind, name))
    assert not any(plan for plan in (pool_plan_of(api, key) for key in api.inventory.pool_keys())), "no fixed point"
    # Once every address not taken up is deleted, each of those claims is served or told the pool is full.
    for name, (pool, kind, obj) in hand.items():
        if ready(api, IPCLAIM if kind == "IPClaim" else CAPI_CLAIM, name).get("reason") == CONFLICT:
            api.inventory.remove(get(api, kinds.kind_of(obj), o.name(obj)))
    converge(api, random.Random(seed))
    assert_no_ip_twice(api)
    for name, (pool, kind, obj) in hand.items():
        condition = ready(api, IPCLAIM if kind == "IPClaim" else CAPI_CLAIM, name)
        assert condition.get("status") == "True" or condition.get("reason") == "PoolExhausted", (name, condition)


def pool_plan_of(api, key):
    from metal3_ipam.core.reconcile import reconcile

    return reconcile(api.inventory.snapshot(key, api.now, random.Random(0)))


def test_a_lock_written_by_hand_never_takes_the_ip_of_go_state_not_locked_yet():
    """The Go Metal3 IPAM served IPAddressClaim x (its Cluster API IPAddress only, its status naming it); a Metal3
    IPAddress is written by hand for IPClaim y at that IP, named as the lock of it: neither is bound to it, and
    once the hand-written one goes, x is."""
    pool = go_pool("gp", NS, {"namePrefix": "gp", "prefix": 24, "pools": [{"start": "10.0.0.1", "end": "10.0.0.8"}]})
    x_claim, x_address = go_served_capi_claim("x", pool, "10.0.0.5")
    api = converged(pool, x_claim, x_address, metal3_address("gp-10-0-0-5", "y", "gp", "10.0.0.5"),
                    ipclaim("y", pool="gp"))
    assert_no_ip_twice(api)
    refused = ready(api, IPCLAIM, "y")
    assert refused["reason"] == CONFLICT and "IPAddressClaim default/x" in refused["message"], refused
    # x is told too (the lock it needs is taken) and keeps naming its address: it is first in line for its IP.
    assert ready(api, CAPI_CLAIM, "x")["reason"] == CONFLICT
    assert o.status(get(api, CAPI_CLAIM, "x"))["addressRef"] == {"name": "gp-10-0-0-5"}
    api.inventory.remove(get(api, ADDRESS, "gp-10-0-0-5"))
    converge(api, random.Random(0))
    assert ready(api, CAPI_CLAIM, "x")["status"] == "True"
    assert o.spec(get(api, ADDRESS, "gp-10-0-0-5"))["claim"]["name"] == "x"
    assert ready(api, IPCLAIM, "y")["status"] == "True" and ready(api, IPCLAIM, "y")["message"] != "bound to 10.0.0.5"
    assert_no_ip_twice(api)
