"""What operators trust the controller with: state left by the Go IPAM, pauses by a claim's
own Cluster, pools that overlap, object identity, canonical names, bounded status."""

from __future__ import annotations

import json
import random

import netaddr
import pytest

from metal3_ipam.core import kinds
from metal3_ipam.core import objects as o
from metal3_ipam.core.actions import Create, SetFinalizers
from metal3_ipam.core.inventory import Inventory
from metal3_ipam.core.naming import address_name, ip_text
from metal3_ipam.memory import converge
from go_ipam_objects import go_pool, go_served_capi_claim, go_served_ipclaim
from ipam_objects import (NS, all_plans, capi_addresses, capi_claim, cluster, converged, get, ipclaim, ippool,
                          loaded, metal3_addresses, pool_plan, user_delete)

POOL, IPCLAIM, CAPI_CLAIM = kinds.IPPOOL, kinds.IPCLAIM, kinds.CAPI_CLAIM
ADDRESS, CAPI_ADDRESS = kinds.IPADDRESS, kinds.CAPI_ADDRESS


def live_bindings(api) -> dict[str, set[tuple[str, str]]]:
    """IP -> the live claims (kind, name) that a live address of either API holds it for."""
    claims = {(c["kind"], o.name(c)) for kind in (IPCLAIM, CAPI_CLAIM) for c in api.inventory.of_kind(kind)
              if not o.is_deleting(c)}
    held: dict[str, set] = {}
    for a in metal3_addresses(api):
        key = o.claim_of_address(a)
        if key in claims and not o.is_deleting(a):
            held.setdefault(ip_text(netaddr.IPAddress(o.spec(a)["address"])), set()).add(key)
    for a in capi_addresses(api):
        key = o.claim_of_capi_address(a)
        if key in claims and not o.is_deleting(a):
            held.setdefault(ip_text(netaddr.IPAddress(o.spec(a)["address"])), set()).add(key)
    return held


def assert_no_ip_twice(api) -> None:
    twice = {ip: who for ip, who in live_bindings(api).items() if len(who) > 1}
    assert not twice, f"IPs bound to two live claims: {twice}"


def ips_of_claim(api, kind: str, name: str) -> set[str]:
    return {ip for ip, who in live_bindings(api).items() if (kind, name) in who}


# -- 1. in-place upgrade from the Go Metal3 IPAM --------------------------------------------

def go_cluster_state():
    c1 = {**cluster("c1"), "metadata": {"name": "c1", "namespace": NS, "uid": "c1-uid"}}
    p4 = go_pool("p4", NS, {"namePrefix": "p4", "clusterName": "c1", "gateway": "192.168.10.1", "prefix": 24,
                            "pools": [{"start": "192.168.10.1", "end": "192.168.10.6"},
                                      {"subnet": "192.168.20.0/29", "gateway": "192.168.20.1", "prefix": 24}],
                            "preAllocations": {"ipc-pre": "192.168.20.6", "iac-pre": "192.168.20.5"}},
                 cluster=c1, indexes={"ipc-gw": "192.168.10.1", "iac-1": "192.168.10.2"})
    labels = {kinds.CLUSTER_NAME_LABEL: "c1", "role": "old"}
    objs = [c1, p4]
    # The Go IPAM hands out the pool's gateway: that allocation is adopted as it is.
    objs += go_served_ipclaim("ipc-gw", p4, "192.168.10.1", labels, gateway="192.168.10.1")
    objs += go_served_capi_claim("iac-1", p4, "192.168.10.2", labels, gateway="192.168.10.1")
    objs += go_served_capi_claim("iac-2", p4, "192.168.10.3", labels, gateway="192.168.10.1")
    objs += go_served_ipclaim("ipc-3", p4, "192.168.10.4", labels, gateway="192.168.10.1")
    objs += go_served_ipclaim("ipc-pre", p4, "192.168.20.6", labels, gateway="192.168.20.1")
    objs += go_served_capi_claim("iac-pre", p4, "192.168.20.5", labels, gateway="192.168.20.1")
    objs += go_served_capi_claim("iac-req", p4, "192.168.20.2", labels, gateway="192.168.20.1")
    return objs


def test_go_state_is_adopted_as_it_is_and_nothing_adopted_is_handed_out_again():
    before = go_cluster_state()
    served = {(obj["kind"], o.name(obj)): obj for obj in before if obj["kind"] in ("IPClaim", "IPAddressClaim")}
    go_addresses = {(obj["apiVersion"], o.name(obj)): o.meta(obj)["uid"] for obj in before
                    if obj["kind"] == "IPAddress"}
    new_claims = [ipclaim(f"new-{i}", pool="p4") for i in range(6)] + \
                 [capi_claim(f"newc-{i}", pool="p4") for i in range(6)]
    api = converged(*before, *new_claims)

    assert_no_ip_twice(api)
    expected = {"ipc-gw": "192.168.10.1", "iac-1": "192.168.10.2", "iac-2": "192.168.10.3",
                "ipc-3": "192.168.10.4", "ipc-pre": "192.168.20.6", "iac-pre": "192.168.20.5",
                "iac-req": "192.168.20.2"}
    for (kind, name), _ in served.items():
        assert ips_of_claim(api, kind, name) == {expected[name]}, name
    # Every address the Go IPAM wrote is still there, the same object.
    for (api_version, name), uid in go_addresses.items():
        kind = ADDRESS if api_version.startswith(kinds.METAL3_GROUP) else CAPI_ADDRESS
        assert o.meta(get(api, kind, name))["uid"] == uid, name
    # Each adopted Cluster API allocation got its lock, pointing at the claim.
    for name in ("iac-1", "iac-2", "iac-pre", "iac-req"):
        lock = get(api, ADDRESS, address_name("p4", expected[name]))
        assert o.claim_of_address(lock) == ("IPAddressClaim", name)
        assert o.status(get(api, CAPI_CLAIM, name))["addressRef"] == {"name": address_name("p4", expected[name])}
        # no second Cluster API address named after the claim
        assert get(api, CAPI_ADDRESS, name) is None
    # New claims are served from what is left: 10 usable addresses (two gateways out), 6 of them adopted
    # (the seventh adopted address is the gateway itself), so 4 for the 12 new claims.
    new_ips = {ip for ip, who in live_bindings(api).items() if any(n.startswith("new") for _, n in who)}
    assert not new_ips & set(expected.values())
    served_new = [c for c in new_claims if ips_of_claim(api, c["kind"], o.name(c))]
    assert len(served_new) == len(new_ips) == 4
    pool_status = o.status(get(api, POOL, "p4"))
    assert pool_status["indexes"]["IPAddressClaim/iac-1"] == "192.168.10.2"
    assert pool_status["indexes"]["ipc-gw"] == "192.168.10.1"
    assert pool_status["allocated"] == str(len(live_bindings(api)))
    assert not any(all_plans(api))


def test_adopted_locks_come_before_any_new_allocation():
    api = loaded(*go_cluster_state(), ipclaim("new-0", pool="p4"), capi_claim("newc-0", pool="p4"))
    plan = pool_plan(api, "p4")
    created = [a.obj for a in plan.writes if isinstance(a, Create)]
    assert sorted(o.name(c) for c in created) == sorted(
        address_name("p4", ip) for ip in ("192.168.10.2", "192.168.10.3", "192.168.20.5", "192.168.20.2"))
    assert all(c["kind"] == "IPAddress" and c["apiVersion"] == kinds.METAL3_API_VERSION for c in created)
    api.apply(plan)
    plan = pool_plan(api, "p4")
    assert {o.name(a.obj) for a in plan.writes if isinstance(a, Create)} >= {"p4-192-168-10-5", "newc-0"}


def test_deleting_adopted_claims_releases_every_address_of_both_apis():
    api = converged(*go_cluster_state())
    for kind, name in ((CAPI_CLAIM, "iac-1"), (IPCLAIM, "ipc-3")):
        user_delete(api, kind, name)
    converge(api, random.Random(0))
    assert get(api, CAPI_ADDRESS, "p4-192-168-10-2") is None
    assert get(api, ADDRESS, "p4-192-168-10-2") is None
    assert get(api, ADDRESS, "p4-192-168-10-4") is None
    assert get(api, CAPI_CLAIM, "iac-1") is None
    # and the freed IPs go to the next claims
    api.load(ipclaim("later", pool="p4"))
    converge(api, random.Random(0))
    assert ips_of_claim(api, "IPClaim", "later") == {"192.168.10.2"}


def test_go_capi_address_alone_holds_its_ip_against_another_pool_with_the_same_prefix():
    pool_a = go_pool("pa", NS, {"namePrefix": "shared", "pools": [{"start": "10.0.0.1", "end": "10.0.0.3"}]})
    pool_b = ippool("pb", namePrefix="shared", pools=[{"start": "10.0.0.1", "end": "10.0.0.3"}])
    objs = [pool_a, *go_served_capi_claim("iac", pool_a, "10.0.0.1"), pool_b, ipclaim("b1", pool="pb")]
    api = loaded(*objs)
    # Pool B goes first, before pool A has made the adopted lock.
    api.apply(pool_plan(api, "pb"))
    converge(api, random.Random(0))
    assert_no_ip_twice(api)
    assert ips_of_claim(api, "IPClaim", "b1") == {"10.0.0.2"}
    assert ips_of_claim(api, "IPAddressClaim", "iac") == {"10.0.0.1"}


def test_a_mirror_whose_ip_differs_from_its_lock_is_replaced():
    api = converged(ippool(), capi_claim("c"))
    lock_ip = o.spec(get(api, CAPI_ADDRESS, "c"))["address"]
    wrong = get(api, CAPI_ADDRESS, "c")
    wrong = {**wrong, "spec": {**wrong["spec"], "address": "192.168.0.19"}}
    wrong["metadata"] = {**wrong["metadata"], "resourceVersion": api._next_version()}
    api.inventory.upsert(wrong)
    converge(api, random.Random(0))
    assert o.spec(get(api, CAPI_ADDRESS, "c"))["address"] == lock_ip
    assert_no_ip_twice(api)


def test_a_live_address_that_lost_our_finalizer_gets_it_back():
    api = converged(ippool(), ipclaim("c"), capi_claim("k"))
    for kind, name in ((ADDRESS, "pool1-192-168-0-10"), (CAPI_ADDRESS, "k")):
        obj = get(api, kind, name)
        api.inventory.upsert({**obj, "metadata": {**obj["metadata"], "finalizers": [],
                                                   "resourceVersion": api._next_version()}})
    plan = pool_plan(api)
    assert {(a.target.name, a.finalizers) for a in plan.writes if isinstance(a, SetFinalizers)} == {
        ("pool1-192-168-0-10", (kinds.FINALIZERS[ADDRESS],)), ("k", (kinds.FINALIZERS[CAPI_ADDRESS],))}


# -- 2. a claim whose own Cluster is paused ---------------------------------------------------

@pytest.mark.parametrize("how", ["label", "spec.clusterName"])
def test_claim_of_a_paused_cluster_is_left_alone_on_a_shared_pool(how):
    def claim_of(name, cluster_name):
        if how == "label":
            return capi_claim(name, labels={kinds.CLUSTER_NAME_LABEL: cluster_name})
        claim = capi_claim(name)
        claim["spec"]["clusterName"] = cluster_name
        return claim
    api = converged(ippool(), cluster("a", paused=True), cluster("b"),
                    claim_of("ka", "a"), claim_of("kb", "b"),
                    ipclaim("ia", labels={kinds.CLUSTER_NAME_LABEL: "a"}))
    assert ips_of_claim(api, "IPAddressClaim", "kb")
    assert not ips_of_claim(api, "IPAddressClaim", "ka") and not ips_of_claim(api, "IPClaim", "ia")
    assert o.status(get(api, CAPI_CLAIM, "ka")) == {} and o.finalizers(get(api, CAPI_CLAIM, "ka")) == []
    # Unpaused: served.
    api.inventory.upsert({**cluster("a"), "metadata": {"name": "a", "namespace": NS,
                                                       "resourceVersion": api._next_version()}})
    converge(api, random.Random(0))
    assert ips_of_claim(api, "IPAddressClaim", "ka") and ips_of_claim(api, "IPClaim", "ia")


def test_paused_cluster_keeps_its_claims_addresses_on_delete_and_a_missing_cluster_does_not():
    api = converged(ippool(), cluster("a"), ipclaim("ia", labels={kinds.CLUSTER_NAME_LABEL: "a"}),
                    ipclaim("gone", labels={kinds.CLUSTER_NAME_LABEL: "no-such-cluster"}))
    api.inventory.upsert({**cluster("a", paused=True),
                          "metadata": {"name": "a", "namespace": NS, "resourceVersion": api._next_version()}})
    user_delete(api, IPCLAIM, "ia")
    user_delete(api, IPCLAIM, "gone")
    converge(api, random.Random(0))
    assert get(api, IPCLAIM, "ia") is not None and address_name("pool1", "192.168.0.10") in {
        o.name(a) for a in metal3_addresses(api)}
    assert get(api, IPCLAIM, "gone") is None
    assert not [a for a in metal3_addresses(api) if o.claim_of_address(a) == ("IPClaim", "gone")]


def test_claims_arriving_before_their_addresses_in_a_paused_move_target_are_not_served():
    """clusterctl creates owners first: the claim, then its addresses; the Cluster arrives paused."""
    api = loaded(ippool(), cluster("a", paused=True),
                 capi_claim("k", labels={kinds.CLUSTER_NAME_LABEL: "a"}),
                 ipclaim("i", labels={kinds.CLUSTER_NAME_LABEL: "a"}))
    converge(api, random.Random(0))
    assert not metal3_addresses(api) and not capi_addresses(api)
    assert o.status(get(api, IPCLAIM, "i")) == {} and o.status(get(api, CAPI_CLAIM, "k")) == {}


# -- 3. no IP twice in a namespace, whatever the namePrefixes ---------------------------------

def overlapping_pools():
    early = ippool("early", namePrefix="a", pools=[{"start": "10.0.0.1", "end": "10.0.0.10"}])
    early["metadata"]["creationTimestamp"] = "2024-01-01T00:00:00Z"
    late = ippool("late", namePrefix="b", pools=[{"start": "10.0.0.6", "end": "10.0.0.12"}])
    late["metadata"]["creationTimestamp"] = "2024-01-02T00:00:00Z"
    return early, late


def test_overlapping_pools_with_different_prefixes_never_bind_one_ip_twice():
    early, late = overlapping_pools()
    claims = [ipclaim(f"e{i}", pool="early") for i in range(12)] + [capi_claim(f"l{i}", pool="late") for i in range(12)]
    random.Random(3).shuffle(claims)
    api = converged(late, early, *claims)
    assert_no_ip_twice(api)
    late_ips = {ip for ip, who in live_bindings(api).items() if any(n.startswith("l") for _, n in who)}
    assert late_ips == {"10.0.0.11", "10.0.0.12"}
    (cond,) = [c for c in o.status(get(api, POOL, "late"))["conditions"] if c["type"] == "Overlapping"]
    assert cond["status"] == "True" and "10.0.0.6-10.0.0.10" in cond["message"] and "early" in cond["message"]
    assert not [c for c in o.status(get(api, POOL, "early"))["conditions"] if c["type"] == "Overlapping"]
    warnings = [e for e in api.events if e.reason == "OverlapsOtherPool"]
    assert len(warnings) == 1 and warnings[0].target.name == "late"


def test_a_pool_whose_every_address_an_earlier_pool_owns_is_not_ready():
    """Nothing it could hand out is left to it: Ready says so (with the reason of the Overlapping condition),
    rather than 'the pool can hand out addresses' while its claims are told it is exhausted. A pool keeping
    some addresses of its own stays Ready."""
    early, late = overlapping_pools()
    inside = ippool("inside", namePrefix="c", pools=[{"start": "10.0.0.3", "end": "10.0.0.5"}])
    inside["metadata"]["creationTimestamp"] = "2024-01-03T00:00:00Z"
    api = converged(early, late, inside, ipclaim("x", pool="inside"))
    ready = o.condition(o.status(get(api, POOL, "inside")), "Ready")
    assert ready["status"] == "False" and ready["reason"] == "OverlapsOtherPool", ready
    assert "IPPool early" in ready["message"] and "10.0.0.3-10.0.0.5" in ready["message"], ready
    claim = o.condition(o.status(get(api, IPCLAIM, "x")), "Ready")
    assert claim["status"] == "False" and claim["reason"] == "PoolExhausted", claim
    assert o.condition(o.status(get(api, POOL, "late")), "Ready")["status"] == "True"
    assert o.condition(o.status(get(api, POOL, "early")), "Ready")["status"] == "True"


def test_an_ip_held_by_another_pools_address_is_never_handed_out():
    early, late = overlapping_pools()
    # The later pool's address at 10.0.0.6 exists already (left by another IPAM): pool "early" skips it.
    claim = ipclaim("old", pool="late")
    held = {"apiVersion": kinds.METAL3_API_VERSION, "kind": "IPAddress",
            "metadata": {"name": "b-10-0-0-6", "namespace": NS},
            "spec": {"address": "10.0.0.6", "pool": {"name": "late", "namespace": NS},
                     "claim": {"name": "old", "namespace": NS}}}
    api = converged(early, late, claim, held, *[ipclaim(f"e{i}", pool="early") for i in range(10)])
    assert_no_ip_twice(api)
    assert ips_of_claim(api, "IPClaim", "old") == {"10.0.0.6"}
    assert "10.0.0.6" not in {ip for ip, who in live_bindings(api).items() if ("IPClaim", "e5") in who}


# -- 4. and 5. identity: incarnations and listings ---------------------------------------------

def obj_at(name: str, uid: str, version: int, **extra) -> dict:
    address = {"apiVersion": kinds.METAL3_API_VERSION, "kind": "IPAddress",
               "metadata": {"name": name, "namespace": NS, "uid": uid, "resourceVersion": str(version)},
               "spec": {"address": "10.0.0.1", "pool": {"name": "p", "namespace": NS},
                        "claim": {"name": "c", "namespace": NS}}}
    address["metadata"].update(extra)
    return address


def test_late_events_of_an_earlier_incarnation_never_touch_the_new_one():
    inv = Inventory()
    inv.upsert(obj_at("a", "old", 10))
    inv.upsert(obj_at("a", "old", 12, deletionTimestamp="t"))
    inv.upsert(obj_at("a", "new", 20))          # our create's answer: the name reused
    inv.remove(obj_at("a", "old", 13))          # the old one's DELETED event, late
    inv.upsert(obj_at("a", "old", 12, deletionTimestamp="t"))  # repeated, late
    stored = inv.get(kinds.IPADDRESS, NS, "a")
    assert o.meta(stored)["uid"] == "new" and not o.is_deleting(stored)
    assert inv.name_taken(NS, "a") and inv.holders(NS, 4, int(netaddr.IPAddress("10.0.0.1")))


def test_a_listing_taken_before_a_deletion_does_not_bring_the_object_back():
    inv = Inventory()
    inv.remove(obj_at("a", "u", 30))  # the watch told of the deletion first
    inv.settle_listing(kinds.IPADDRESS, None, [obj_at("a", "u", 25)], "28")
    assert inv.get(kinds.IPADDRESS, NS, "a") is None
    assert not inv.name_taken(NS, "a")


def test_a_listing_drops_what_it_proves_gone_and_keeps_what_is_newer():
    inv = Inventory()
    inv.upsert(obj_at("gone", "u1", 5))
    inv.upsert(obj_at("newer", "u2", 50))
    inv.settle_listing(kinds.IPADDRESS, None, [], "40")
    assert inv.get(kinds.IPADDRESS, NS, "gone") is None
    assert inv.get(kinds.IPADDRESS, NS, "newer") is not None


def test_a_deleted_then_recreated_claim_is_not_shown_twice_or_lost():
    inv = Inventory()
    claim = ipclaim("c", pool="p")
    claim["metadata"].update(uid="one", resourceVersion="3")
    inv.upsert(claim)
    second = ipclaim("c", pool="p")
    second["metadata"].update(uid="two", resourceVersion="9")
    inv.upsert(second)
    inv.remove({**claim, "metadata": {**claim["metadata"], "resourceVersion": "4"}})
    assert [o.meta(c)["uid"] for c in inv.claims_of((NS, "p"))] == ["two"]


# -- 9. pool status stays far below etcd's object limit --------------------------------------------

def test_pool_status_with_10000_longest_named_claims_stays_small():
    pool = ippool("big", namePrefix="v6", pools=[{"subnet": "2001:db8::/64"}])
    claims = []
    for i in range(10_000):
        name = f"{i:06d}-" + "x" * 246  # 253 characters: the longest legal name
        claims.append(capi_claim(name, pool="big"))
    api = converged(pool, *claims)
    size = len(json.dumps(get(api, POOL, "big")).encode())
    pool_status = o.status(get(api, POOL, "big"))
    assert size < 300 * 1024, size
    assert pool_status["indexesOmitted"] + len(pool_status["indexes"]) == 10_000
    assert pool_status["allocated"] == "10000"


# -- 10. canonical names -----------------------------------------------------------------------

def test_ipv6_names_and_addresses_are_rfc5952_and_never_collide():
    assert ip_text(netaddr.IPAddress("::102:304")) == "::102:304"
    assert address_name("p", "::102:304") != address_name("p", "::1:2:3:4")
    api = converged(ippool("p6", namePrefix="p6", pools=[{"start": "::102:304", "end": "::102:304"},
                                                         {"start": "::1:2:3:4", "end": "::1:2:3:4"}]),
                    ipclaim("x", pool="p6"), ipclaim("y", pool="p6"))
    assert sorted(o.spec(a)["address"] for a in metal3_addresses(api)) == ["::102:304", "::1:2:3:4"]
    assert sorted(o.name(a) for a in metal3_addresses(api)) == ["p6---1-2-3-4", "p6---102-304"]


def test_a_claim_name_reused_on_another_pool_does_not_keep_the_old_claims_addresses():
    api = converged(ippool("pa", namePrefix="pa", pools=[{"start": "10.0.0.1", "end": "10.0.0.3"}]),
                    ippool("pb", namePrefix="pb", pools=[{"start": "10.0.1.1", "end": "10.0.1.3"}]),
                    capi_claim("c", pool="pb"))
    old = get(api, CAPI_CLAIM, "c")
    # The claim goes without our release (its finalizer was stripped), and comes back for pool pa.
    api.inventory.remove({**old, "metadata": {**old["metadata"], "resourceVersion": api._next_version()}})
    api.load(capi_claim("c", pool="pa"))
    converge(api, random.Random(0))
    assert ips_of_claim(api, "IPAddressClaim", "c") == {"10.0.0.1"}
    assert get(api, ADDRESS, "pb-10-0-1-1") is None
    assert o.spec(get(api, CAPI_ADDRESS, "c"))["address"] == "10.0.0.1"
