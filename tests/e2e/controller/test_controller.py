"""The controller, as a separate process, on a real API server.

One controller process (``metal3-ipam run -A``, leader election on) serves every
test of this module; each test works in a namespace of its own and ends with
:func:`assert_invariants` over everything in it.
"""

from __future__ import annotations

import pytest

from controller_fixtures import (CAPI, CLUSTER, CLUSTER_NAME_LABEL, FIN_ADDRESS, FIN_CAPI_ADDRESS, FIN_CAPI_CLAIM,
                                 FIN_CLAIM, FIN_POOL, METAL3, PAUSED, REPO, Kube, assert_invariants, assert_quiet,
                                 condition, holds_for, ip_key as ip)
from metal3_ipam.testing.waiting import eventually

SAMPLES = REPO / "samples"


def owner(obj: dict, kind: str) -> dict:
    refs = [r for r in obj["metadata"].get("ownerReferences") or [] if r["kind"] == kind]
    assert len(refs) == 1, f"{obj['metadata']['name']}: owner references {obj['metadata'].get('ownerReferences')}"
    return refs[0]


def address_of(kube: Kube, claim: str) -> str:
    return kube.bound(claim)["spec"]["address"]


# --------------------------------------------------------------------------- allocation


def test_seed_pool_and_samples(controller, kube):
    """The Metal3 documentation's pool (samples/), with its claims, a CAPI claim and an IPv6 pool."""
    for name in ("cluster.yaml", "ippool.yaml", "ipclaims.yaml", "capi-ipaddressclaim.yaml", "ipv6.yaml"):
        kube.apply_yaml(SAMPLES / name)
    assert_invariants(kube, allow_errors=False)

    pre = kube.bound("claim1")
    assert pre["metadata"]["name"] == "test1-prov-192-168-0-12"
    assert pre["spec"] == {
        "address": "192.168.0.12", "prefix": 25, "gateway": "192.168.0.1", "dnsServers": ["8.8.8.8", "8.8.4.4"],
        "pool": {"name": "pool1", "namespace": kube.ns}, "claim": {"name": "claim1", "namespace": kube.ns},
    }
    static = kube.bound("test1-worker-static-pool1")
    assert static["metadata"]["name"] == "test1-prov-192-168-1-140"
    assert (static["spec"]["address"], static["spec"]["prefix"], static["spec"]["gateway"]) == \
        ("192.168.1.140", 24, "192.168.1.1")
    # The others take the lowest free addresses of the first entry, skipping claim1's.
    first_entry = {address_of(kube, "test1-controlplane-template-0-pool1"),
                   address_of(kube, "test1-controlplane-template-1-pool1"),
                   kube.capi_bound("cluster1-worker-0-eth0")["spec"]["address"]}
    assert first_entry == {"192.168.0.10", "192.168.0.11", "192.168.0.13"}

    v6 = kube.bound("v6-claim-0")
    assert v6["metadata"]["name"] == "v6pool-2001-db8-0-1--100"
    assert (v6["spec"]["address"], v6["spec"]["prefix"], v6["spec"]["gateway"], v6["spec"]["dnsServers"]) == \
        ("2001:db8:0:1::100", 64, "2001:db8:0:1::1", ["2001:db8:0:1::53"])

    def pool1_status(pool):
        status = pool["status"]
        # 21 (.0.10-.30) + 61 (192.168.1.0/26 less its broadcast and the gateway) + 126 (.1.128/25)
        assert (status["capacity"], status["allocated"], status["free"]) == ("208", "5", "203")
        assert status["indexes"]["claim1"] == "192.168.0.12"
        assert status["indexes"]["test1-worker-static-pool1"] == "192.168.1.140"
        assert "IPAddressClaim/cluster1-worker-0-eth0" in status["indexes"]
    pool = settled(kube, "pool1", pool1_status)
    assert condition(pool, "Ready")["status"] == "True"
    assert pool["metadata"]["labels"][CLUSTER_NAME_LABEL] == "cluster1"
    cluster = kube.get(CLUSTER, "clusters", "cluster1")
    ref = owner(pool, "Cluster")
    assert ref["uid"] == cluster["metadata"]["uid"] and not ref.get("controller")
    assert FIN_POOL in pool["metadata"]["finalizers"]

    def v6_status(pool):
        # 2^64 - 1 hosts, less the gateway and the 254 excluded addresses: more than 64 bits can count
        assert pool["status"]["capacity"] == str(2**64 - 256)
        assert (pool["status"]["allocated"], pool["status"]["free"]) == ("1", str(2**64 - 257))
    settled(kube, "v6pool", v6_status)
    assert (controller.http_status("/healthz"), controller.http_status("/readyz")) == (200, 200)
    metrics = controller.metrics()
    assert metrics[f'metal3_ipam_allocations_total{{kind="IPPool",namespace="{kube.ns}",pool="pool1"}}'] == 5
    assert metrics[f'metal3_ipam_pool_free{{kind="IPPool",namespace="{kube.ns}",pool="pool1"}}'] == 203
    assert_quiet(kube, [controller], seconds=1.5)


def test_ipclaim_allocation_and_release(controller, kube):
    pool = kube.pool("p", namePrefix="node", pools=[{"start": "10.10.0.5", "end": "10.10.0.9"}], prefix=24,
                     gateway="10.10.0.1", dnsServers=["10.10.0.53"])
    kube.cluster("c1")  # the claims' Cluster: a claim of a Cluster not known waits for it
    kube.claim("a", "p", labels={CLUSTER_NAME_LABEL: "c1", "role": "worker"})
    address = kube.bound("a")
    claim = kube.ipclaim("a")
    assert claim["status"]["address"] == {"name": "node-10-10-0-5", "namespace": kube.ns}
    assert not claim["status"].get("errorMessage")
    assert condition(claim, "Ready")["status"] == "True"
    assert FIN_CLAIM in claim["metadata"]["finalizers"]

    assert address["metadata"]["name"] == "node-10-10-0-5"
    assert address["spec"] == {"address": "10.10.0.5", "prefix": 24, "gateway": "10.10.0.1",
                               "dnsServers": ["10.10.0.53"], "pool": {"name": "p", "namespace": kube.ns},
                               "claim": {"name": "a", "namespace": kube.ns}}
    assert address["metadata"]["labels"] == {CLUSTER_NAME_LABEL: "c1", "role": "worker"}
    assert address["metadata"]["finalizers"] == [FIN_ADDRESS]
    by_pool, by_claim = owner(address, "IPPool"), owner(address, "IPClaim")
    assert by_pool["uid"] == pool["metadata"]["uid"] and not by_pool.get("controller")
    assert by_claim["uid"] == claim["metadata"]["uid"] and not by_claim.get("controller")
    assert_invariants(kube, allow_errors=False)

    kube.claim("b", "p")
    assert address_of(kube, "b") == "10.10.0.6"
    # Deleting a claim frees its IP: the address and both finalizers go, the next claim gets it back.
    kube.delete(METAL3, "ipclaims", "a")
    kube.gone(METAL3, "ipclaims", "a")
    kube.gone(METAL3, "ipaddresses", "node-10-10-0-5")
    eventually(lambda: kube.ippool("p")["status"]["indexes"] == {"b": "10.10.0.6"}, timeout=20,
               what="pool indexes without a")
    kube.claim("c", "p")
    assert address_of(kube, "c") == "10.10.0.5"
    assert_invariants(kube, allow_errors=False)
    settled(kube, "p", counts("5", "2", "3"))


@pytest.mark.parametrize("version", ["v1beta2", "v1beta1"])
def test_capi_claim_allocation(controller, kube, version):
    pool = kube.pool("p", namePrefix="capi", pools=[{"subnet": "10.20.0.0/29", "gateway": "10.20.0.1"}],
                     prefix=29)
    kube.cluster("c1")  # the claims' Cluster: a claim of a Cluster not known waits for it
    kube.capi_claim("m0-eth0", "p", version=version, labels={CLUSTER_NAME_LABEL: "c1", "other": "x"})
    # Claims for another provider's pools are not ours, even with the same pool name.
    kube.capi_claim("foreign-kind", "p", kind="InfobloxIPPool")
    kube.capi_claim("foreign-group", "p", group="ipam.cluster.x-k8s.io")

    mirror = kube.capi_bound("m0-eth0")
    claim = kube.custom.get_namespaced_custom_object("ipam.cluster.x-k8s.io", version, kube.ns, "ipaddressclaims",
                                                     "m0-eth0")
    assert claim["status"]["addressRef"] == {"name": "m0-eth0"}
    ready = condition(claim, "Ready")
    assert ready["status"] == "True" and ready["reason"]
    assert FIN_CAPI_CLAIM in claim["metadata"]["finalizers"]

    assert mirror["metadata"]["name"] == "m0-eth0"
    assert mirror["spec"]["claimRef"] == {"name": "m0-eth0"}
    assert mirror["spec"]["poolRef"] == {"apiGroup": "ipam.metal3.io", "kind": "IPPool", "name": "p"}
    assert (mirror["spec"]["address"], mirror["spec"]["prefix"], mirror["spec"]["gateway"]) == \
        ("10.20.0.2", 29, "10.20.0.1")
    assert mirror["metadata"]["labels"] == {CLUSTER_NAME_LABEL: "c1", "other": "x"}
    assert mirror["metadata"]["finalizers"] == [FIN_CAPI_ADDRESS]
    by_claim, by_pool = owner(mirror, "IPAddressClaim"), owner(mirror, "IPPool")
    assert by_claim["uid"] == claim["metadata"]["uid"]
    assert by_claim.get("controller") is True and by_claim.get("blockOwnerDeletion") is True
    assert by_pool["uid"] == pool["metadata"]["uid"]
    assert not by_pool.get("controller") and by_pool.get("blockOwnerDeletion") is True

    # The lock behind it: a Metal3 IPAddress named after the IP, pointing at the CAPI claim.
    lock = kube.ipaddress("capi-10-20-0-2")
    assert lock["spec"]["claim"]["kind"] == "IPAddressClaim" and lock["spec"]["claim"]["name"] == "m0-eth0"
    settled(kube, "p", indexes_are({"IPAddressClaim/m0-eth0": "10.20.0.2"}))

    assert_invariants(kube, allow_errors=False)
    for name in ("foreign-kind", "foreign-group"):
        foreign = kube.capi_ipclaim(name)
        assert not foreign["metadata"].get("finalizers") and not foreign.get("status"), foreign
        assert kube.capi_ipaddress(name) is None

    kube.delete(CAPI, "ipaddressclaims", "m0-eth0")
    kube.gone(CAPI, "ipaddressclaims", "m0-eth0")
    kube.gone(CAPI, "ipaddresses", "m0-eth0")
    kube.gone(METAL3, "ipaddresses", "capi-10-20-0-2")
    assert_invariants(kube)


def test_preallocations_and_requested_addresses(controller, kube):
    kube.pool("p", pools=[{"start": "10.30.0.10", "end": "10.30.0.19"}], prefix=24,
              preAllocations={"pre": "10.30.0.10", "pre-capi": "10.30.0.11", "absent": "10.30.0.12",
                              "pre-mismatch": "10.30.0.13"})
    kube.claim("pre", "p")
    kube.capi_claim("pre-capi", "p")
    kube.claim("asks", "p", annotations={"ipAddress": "10.30.0.17"})
    kube.capi_claim("asks-capi", "p", annotations={"ipAddress": "10.30.0.18"})
    assert address_of(kube, "pre") == "10.30.0.10"
    assert kube.capi_bound("pre-capi")["spec"]["address"] == "10.30.0.11"
    assert address_of(kube, "asks") == "10.30.0.17"
    assert kube.capi_bound("asks-capi")["spec"]["address"] == "10.30.0.18"

    # Plain claims never get an address preallocated to a claim, even one that does not exist.
    for i in range(4):
        kube.claim(f"plain-{i}", "p")
    plain = sorted((ip(address_of(kube, f"plain-{i}")) for i in range(4)))
    assert plain == [ip("10.30.0.14"), ip("10.30.0.15"), ip("10.30.0.16"), ip("10.30.0.19")]
    kube.claim("one-too-many", "p")
    assert "no free address" in kube.claim_error("one-too-many")

    # Requests that cannot be met are errors on the claim, and change nothing else.
    kube.claim("outside", "p", annotations={"ipAddress": "10.99.0.1"})
    kube.claim("taken", "p", annotations={"ipAddress": "10.30.0.17"})
    kube.claim("held", "p", annotations={"ipAddress": "10.30.0.12"})
    kube.claim("pre-mismatch", "p", annotations={"ipAddress": "10.30.0.14"})
    kube.capi_claim("capi-taken", "p", annotations={"ipAddress": "10.30.0.17"})
    assert "not inside" in kube.claim_error("outside")
    assert "already in use" in kube.claim_error("taken")
    assert "preallocated to claim absent" in kube.claim_error("held")
    assert "conflict" in kube.claim_error("pre-mismatch")
    capi_error = eventually(lambda: (condition(kube.capi_ipclaim("capi-taken"), "Ready") or {}).get("reason"),
                            timeout=20, what="capi-taken to fail")
    assert capi_error == "AllocationFailed"
    assert "already in use" in condition(kube.capi_ipclaim("capi-taken"), "Ready")["message"]
    kube.warning_event("outside", "AllocationFailed")
    kube.warning_event("capi-taken", "AllocationFailed")

    # The preallocated IP is waiting for its claim.
    kube.claim("absent", "p")
    assert address_of(kube, "absent") == "10.30.0.12"
    assert_invariants(kube, expect_errors={"one-too-many", "outside", "taken", "held", "pre-mismatch",
                                           "capi-taken"}, allow_errors=False)
    assert_quiet(kube, [controller], seconds=1.5)


def test_exhaustion_and_recovery(controller, kube):
    kube.pool("small", pools=[{"start": "10.40.0.1", "end": "10.40.0.3"}], prefix=24)
    for name in ("a", "b", "c"):
        kube.claim(name, "small")
    for name in ("a", "b", "c"):
        kube.bound(name)
    kube.claim("d", "small")
    assert kube.claim_error("d") == "no free address left in the pool"
    d_ready = condition(kube.ipclaim("d"), "Ready")
    assert (d_ready["status"], d_ready["reason"]) == ("False", "PoolExhausted")
    kube.capi_claim("e", "small")
    e_ready = eventually(lambda: condition(kube.capi_ipclaim("e"), "Ready"), timeout=20, what="e Ready")
    assert (e_ready["status"], e_ready["reason"]) == ("False", "PoolExhausted")
    assert e_ready["message"]
    kube.warning_event("d", "PoolExhausted")
    kube.warning_event("e", "PoolExhausted")
    settled(kube, "small", counts("3", "3", "0"))
    # Errors are not hot loops: nothing is rewritten, no Event repeated.
    assert_quiet(kube, [controller], seconds=2.0)

    # Freeing an address serves the claims in error, one at a time, in the order they came.
    b_ip = address_of(kube, "b")
    kube.delete(METAL3, "ipclaims", "b")
    assert address_of(kube, "d") == b_ip
    assert not kube.ipclaim("d")["status"].get("errorMessage")
    assert condition(kube.ipclaim("d"), "Ready")["status"] == "True"
    assert condition(kube.capi_ipclaim("e"), "Ready")["status"] == "False"
    c_ip = address_of(kube, "c")
    kube.delete(METAL3, "ipclaims", "c")
    assert kube.capi_bound("e")["spec"]["address"] == c_ip
    assert_invariants(kube, allow_errors=False)


def test_entries_in_order_with_overrides(controller, kube):
    kube.pool("ordered", pools=[
        {"start": "192.168.0.10", "end": "192.168.0.11", "prefix": 25, "gateway": "192.168.0.1",
         "dnsServers": ["1.1.1.1"]},
        {"subnet": "10.0.0.0/30", "prefix": 30},
        {"start": "172.16.0.5", "end": "172.16.0.7", "gateway": "172.16.0.1"},
    ], prefix=24, gateway="10.0.0.1", dnsServers=["9.9.9.9"], excludedAddresses=["172.16.0.5"])
    for i in range(5):
        kube.claim(f"c{i}", "ordered")
    got = {kube.bound(f"c{i}")["spec"]["address"]: kube.bound(f"c{i}")["spec"] for i in range(5)}
    # the first entry is used up before the second, the second before the third;
    # gateways, the /30's broadcast and the excluded address are never handed out
    assert sorted(got, key=ip) == ["10.0.0.2", "172.16.0.6", "172.16.0.7", "192.168.0.10", "192.168.0.11"]
    expected = {
        "192.168.0.10": (25, "192.168.0.1", ["1.1.1.1"]),
        "192.168.0.11": (25, "192.168.0.1", ["1.1.1.1"]),
        "10.0.0.2": (30, "10.0.0.1", ["9.9.9.9"]),
        "172.16.0.6": (24, "172.16.0.1", ["9.9.9.9"]),
        "172.16.0.7": (24, "172.16.0.1", ["9.9.9.9"]),
    }
    assert {a: (s["prefix"], s["gateway"], s["dnsServers"]) for a, s in got.items()} == expected
    kube.claim("c5", "ordered")
    assert "no free address" in kube.claim_error("c5")
    settled(kube, "ordered", counts("5", "5", "0"))
    assert_invariants(kube, expect_errors={"c5"}, allow_errors=False)


def test_entries_used_in_order_one_claim_at_a_time(controller, kube):
    kube.pool("seq", pools=[{"start": "10.50.1.7", "end": "10.50.1.8"}, {"start": "10.50.0.1", "end": "10.50.0.2"}],
              prefix=16)
    order = []
    for i in range(4):
        kube.claim(f"c{i}", "seq")
        order.append(address_of(kube, f"c{i}"))
    assert order == ["10.50.1.7", "10.50.1.8", "10.50.0.1", "10.50.0.2"]
    kube.delete(METAL3, "ipclaims", "c0")
    kube.gone(METAL3, "ipaddresses", "seq-10-50-1-7")
    kube.claim("c4", "seq")
    assert address_of(kube, "c4") == "10.50.1.7"
    assert_invariants(kube, allow_errors=False)


def test_metal3_and_capi_claims_never_share_an_ip(controller, kube):
    kube.pool("shared", pools=[{"start": "10.60.0.1", "end": "10.60.0.10"}], prefix=24)
    for i in range(5):  # the same names in both kinds
        kube.claim(f"m{i}", "shared")
        kube.capi_claim(f"m{i}", "shared")
    ips = [address_of(kube, f"m{i}") for i in range(5)] + \
          [kube.capi_bound(f"m{i}")["spec"]["address"] for i in range(5)]
    assert len(set(ips)) == 10, ips
    settled(kube, "shared", lambda pool: _same(set(pool["status"]["indexes"]),
                                               {f"m{i}" for i in range(5)} | {f"IPAddressClaim/m{i}" for i in range(5)}))
    kube.claim("m5", "shared")
    kube.capi_claim("m5", "shared")
    assert "no free address" in kube.claim_error("m5")
    eventually(lambda: (condition(kube.capi_ipclaim("m5"), "Ready") or {}).get("reason") == "PoolExhausted",
               timeout=20, what="CAPI m5 exhausted")
    assert_invariants(kube, expect_errors={"m5"}, allow_errors=False)

    # Deleting the IPClaim m0 leaves the IPAddressClaim m0 alone; the freed IP goes to a waiting claim.
    capi_m0 = kube.capi_bound("m0")["spec"]["address"]
    m0 = address_of(kube, "m0")
    kube.delete(METAL3, "ipclaims", "m0")
    kube.gone(METAL3, "ipclaims", "m0")
    # One of the two claims in error gets it (which one depends on the order the two
    # kinds' watch streams delivered them); the other stays exhausted.
    def m0_reused():
        ipclaim, capi = kube.ipclaim("m5"), kube.capi_ipclaim("m5")
        got = []
        if (ipclaim.get("status") or {}).get("address"):
            got.append(kube.ipaddress(ipclaim["status"]["address"]["name"])["spec"]["address"])
        if (condition(capi, "Ready") or {}).get("status") == "True":
            got.append(kube.capi_ipaddress("m5")["spec"]["address"])
        return got

    assert eventually(m0_reused, timeout=20, what="m0's IP to go to a waiting claim") == [m0]
    holds_for(lambda: len(m0_reused()) == 1, 0.5, "the other m5 stays pending")
    assert kube.capi_bound("m0")["spec"]["address"] == capi_m0
    assert_invariants(kube, allow_errors=True)


def test_claim_waits_for_missing_pool(controller, kube):
    kube.claim("early", "later")
    kube.capi_claim("early", "later")
    assert "not found" in kube.claim_error("early")
    reason = eventually(lambda: (condition(kube.capi_ipclaim("early"), "Ready") or {}).get("reason"),
                        timeout=20, what="CAPI claim to fail")
    assert reason == "PoolNotReady"
    kube.warning_event("early", "PoolNotReady")
    kube.pool("later", pools=[{"start": "10.70.0.1", "end": "10.70.0.2"}], prefix=24)
    assert {address_of(kube, "early"), kube.capi_bound("early")["spec"]["address"]} == {"10.70.0.1", "10.70.0.2"}
    assert not kube.ipclaim("early")["status"].get("errorMessage")
    assert_invariants(kube, allow_errors=False)


def test_claims_deleted_right_after_creation_leak_nothing(controller, kube):
    kube.pool("p", pools=[{"subnet": "10.80.0.0/24"}], prefix=24)
    for i in range(20):
        kube.claim(f"c{i}", "p")
        kube.capi_claim(f"c{i}", "p")
        kube.delete(METAL3, "ipclaims", f"c{i}")
        kube.delete(CAPI, "ipaddressclaims", f"c{i}")
    kube.claim("survivor", "p")
    keep = {"survivor", kube.bound("survivor")["metadata"]["name"]}

    def all_gone():
        left = kube.list(METAL3, "ipclaims") + kube.list(CAPI, "ipaddressclaims") + kube.addresses() + \
            kube.list(CAPI, "ipaddresses")
        names = sorted(o["metadata"]["name"] for o in left if o["metadata"]["name"] not in keep)
        assert not names, f"still there: {names}"
        return True

    eventually(all_gone, timeout=30, what="every deleted claim and its addresses to go")
    assert assert_invariants(kube, allow_errors=False).counts["addresses"] == 1


# --------------------------------------------------------------------------- lifecycle


def test_deleting_a_pool_waits_for_its_addresses(controller, kube):
    kube.pool("p", pools=[{"start": "10.90.0.1", "end": "10.90.0.9"}], prefix=24)
    kube.claim("a", "p")
    kube.capi_claim("b", "p")
    kube.bound("a")
    kube.capi_bound("b")
    kube.delete(METAL3, "ippools", "p")
    deleting = eventually(lambda: (condition(kube.ippool("p"), "Ready") or {}).get("reason") == "Deleting"
                          and kube.ippool("p"), timeout=20, what="the pool to be marked Deleting")
    assert deleting["metadata"]["deletionTimestamp"] and FIN_POOL in deleting["metadata"]["finalizers"]
    # no new allocations from a pool that is going
    kube.claim("late", "p")
    assert "being deleted" in kube.claim_error("late")
    holds_for(lambda: kube.ippool("p") is not None and kube.ipaddress("p-10-90-0-1") is not None, 1.0,
              "the pool and its addresses stay while claims hold them")

    kube.delete(METAL3, "ipclaims", "a")
    kube.gone(METAL3, "ipclaims", "a")
    assert kube.ippool("p") is not None, "the pool went while the CAPI claim still held an address"
    kube.delete(CAPI, "ipaddressclaims", "b")
    kube.gone(METAL3, "ippools", "p")
    assert kube.addresses() == [] and kube.list(CAPI, "ipaddresses") == []
    kube.delete(METAL3, "ipclaims", "late")
    kube.gone(METAL3, "ipclaims", "late")
    assert_invariants(kube)


def _pause_cluster(kube: Kube, name: str, paused: bool) -> None:
    kube.patch(CLUSTER, "clusters", name, {"spec": {"paused": paused}})


@pytest.mark.parametrize("how", ["cluster", "pool-annotation"])
def test_pause_stops_and_resumes_work(controller, kube, how):
    kube.cluster("c1")
    kube.pool("p", clusterName="c1", pools=[{"start": "10.100.0.1", "end": "10.100.0.9"}], prefix=24)
    kube.claim("before", "p")
    before_ip = address_of(kube, "before")
    eventually(lambda: kube.ippool("p")["metadata"].get("labels", {}).get(CLUSTER_NAME_LABEL) == "c1",
               timeout=20, what="pool labelled with its cluster")
    if how == "cluster":
        _pause_cluster(kube, "c1", True)
    else:
        kube.patch(METAL3, "ippools", "p", {"metadata": {"annotations": {PAUSED: ""}}})
    # A control pool on another (unpaused) cluster keeps being served meanwhile.
    kube.cluster("c2")
    kube.pool("control", clusterName="c2", pools=[{"start": "10.100.1.1", "end": "10.100.1.9"}], prefix=24)

    kube.claim("during", "p")
    kube.capi_claim("during-capi", "p")
    kube.delete(METAL3, "ipclaims", "before")
    kube.claim("control-claim", "control")
    kube.bound("control-claim")

    def untouched():
        during, capi = kube.ipclaim("during"), kube.capi_ipclaim("during-capi")
        before = kube.ipclaim("before")
        return (not during.get("status") and not during["metadata"].get("finalizers")
                and not capi.get("status") and before is not None and before["metadata"]["deletionTimestamp"]
                and kube.ipaddress(f"p-{before_ip.replace('.', '-')}") is not None)

    holds_for(untouched, 2.0, "a paused pool is left alone (no allocation, no release)")

    if how == "cluster":
        _pause_cluster(kube, "c1", False)
    else:
        kube.patch(METAL3, "ippools", "p", {"metadata": {"annotations": {PAUSED: None}}})
    kube.bound("during")
    kube.capi_bound("during-capi")
    kube.gone(METAL3, "ipclaims", "before")
    kube.gone(METAL3, "ipaddresses", f"p-{before_ip.replace('.', '-')}")
    assert_invariants(kube, allow_errors=False)


def test_paused_claim_is_left_alone(controller, kube):
    kube.pool("p", pools=[{"start": "10.110.0.1", "end": "10.110.0.9"}], prefix=24)
    kube.claim("paused", "p", annotations={PAUSED: ""})
    kube.capi_claim("paused-capi", "p", annotations={PAUSED: ""})
    kube.claim("normal", "p")
    assert address_of(kube, "normal") == "10.110.0.1"
    holds_for(lambda: not kube.ipclaim("paused").get("status") and not kube.capi_ipclaim("paused-capi").get("status"),
              1.5, "paused claims are not served")
    kube.patch(METAL3, "ipclaims", "paused", {"metadata": {"annotations": {PAUSED: None}}})
    kube.custom.patch_namespaced_custom_object(*CAPI, kube.ns, "ipaddressclaims", "paused-capi",
                                               {"metadata": {"annotations": {PAUSED: None}}})
    kube.bound("paused")
    kube.capi_bound("paused-capi")
    assert_invariants(kube, allow_errors=False)


def test_deleted_cluster_does_not_block_teardown(controller, kube):
    kube.cluster("gone")
    kube.pool("p", clusterName="gone", pools=[{"start": "10.120.0.1", "end": "10.120.0.9"}], prefix=24)
    kube.claim("a", "p")
    kube.capi_claim("b", "p")
    kube.bound("a")
    kube.capi_bound("b")
    eventually(lambda: any(r["kind"] == "Cluster" for r in kube.ippool("p")["metadata"].get("ownerReferences", [])),
               timeout=20, what="the pool to be owned by its cluster")
    # The cluster was paused, then deleted: its pause must not outlive it.
    _pause_cluster(kube, "gone", True)
    kube.delete(CLUSTER, "clusters", "gone")
    kube.gone(CLUSTER, "clusters", "gone")
    kube.delete(METAL3, "ipclaims", "a")
    kube.delete(CAPI, "ipaddressclaims", "b")
    kube.gone(METAL3, "ipclaims", "a")
    kube.gone(CAPI, "ipaddressclaims", "b")
    eventually(lambda: kube.addresses() == [] and kube.list(CAPI, "ipaddresses") == [], timeout=30,
               what="every address to go")
    # The garbage collector removes the pool its Cluster owned; its finalizer does not hold it.
    kube.gone(METAL3, "ippools", "p", timeout=60)
    assert_invariants(kube)


def test_overlapping_pools_with_one_name_prefix(controller, kube):
    """Metal3 #1437: two pools, one namePrefix, overlapping ranges: no double allocation, no hot loop."""
    kube.pool("left", namePrefix="shared", pools=[{"start": "10.130.0.10", "end": "10.130.0.19"}], prefix=24)
    kube.pool("right", namePrefix="shared", pools=[{"start": "10.130.0.15", "end": "10.130.0.24"}], prefix=24)
    for i in range(5):
        kube.claim(f"l{i}", "left")
        kube.claim(f"r{i}", "right")
    ips = [address_of(kube, f"{side}{i}") for side in "lr" for i in range(5)]
    assert len(set(ips)) == 10, ips
    assert all(ip("10.130.0.10") <= ip(a) <= ip("10.130.0.19") for a in ips[:5])
    assert all(ip("10.130.0.15") <= ip(a) <= ip("10.130.0.24") for a in ips[5:])
    # An IP the other pool holds cannot be asked for either.
    taken_by_right = next(a for a in ips[5:] if ip(a) <= ip("10.130.0.19"))
    kube.claim("wants-right", "left", annotations={"ipAddress": taken_by_right})
    assert "already in use" in kube.claim_error("wants-right")
    assert_invariants(kube, expect_errors={"wants-right"}, allow_errors=False)
    assert_quiet(kube, [controller], seconds=3.0)
    for name in ("left", "right"):
        settled(kube, name, lambda pool: _same(sorted(pool["status"]["indexes"]),
                                               sorted(f"{pool['metadata']['name'][0]}{i}" for i in range(5))))


def test_pool_growth_serves_claims_in_error(controller, kube):
    kube.pool("grows", pools=[{"start": "10.140.0.1", "end": "10.140.0.1"}], prefix=24)
    kube.claim("a", "grows")
    kube.claim("b", "grows")
    kube.capi_claim("c", "grows")
    kube.bound("a")
    assert kube.claim_error("b") == "no free address left in the pool"
    kube.patch(METAL3, "ippools", "grows", {"spec": {"pools": [{"start": "10.140.0.1", "end": "10.140.0.3"}]}})
    assert {address_of(kube, "b"), kube.capi_bound("c")["spec"]["address"]} == {"10.140.0.2", "10.140.0.3"}
    assert_invariants(kube, allow_errors=False)


def test_invalid_pool_is_reported_then_fixed(controller, kube):
    # Mixed address families pass the CRD schema but not the pool rules.
    kube.pool("mixed", pools=[{"start": "10.150.0.1", "end": "10.150.0.5"}, {"subnet": "2001:db8:150::/64"}])
    kube.claim("a", "mixed")
    kube.capi_claim("b", "mixed")
    error = kube.claim_error("a")
    assert "IPPool" in error and "mixed" in error and "invalid" in error, error
    ready = eventually(lambda: condition(kube.ippool("mixed"), "Ready"), timeout=20, what="pool Ready condition")
    assert (ready["status"], ready["reason"]) == ("False", "InvalidSpec") and ready["message"], ready
    reason = eventually(lambda: (condition(kube.capi_ipclaim("b"), "Ready") or {}).get("reason"), timeout=20,
                        what="CAPI claim to fail")
    assert reason == "PoolNotReady"
    kube.warning_event("a", "PoolNotReady")
    assert kube.addresses() == []
    kube.patch(METAL3, "ippools", "mixed", {"spec": {"pools": [{"start": "10.150.0.1", "end": "10.150.0.5"}],
                                                     "prefix": 24}})
    kube.bound("a")
    kube.capi_bound("b")
    assert condition(kube.ippool("mixed"), "Ready")["status"] == "True"
    assert_invariants(kube, allow_errors=False)


def test_random_strategy(controller, kube):
    kube.pool("rnd", pools=[{"subnet": "10.160.0.0/16"}], prefix=16, allocationStrategy="random")
    for i in range(8):
        kube.claim(f"c{i}", "rnd")
    ips = [ip(address_of(kube, f"c{i}")) for i in range(8)]
    assert len(set(ips)) == 8
    assert all(ip("10.160.0.1") <= a <= ip("10.160.255.254") for a in ips)
    assert sorted(ips) != [ip(f"10.160.0.{i}") for i in range(1, 9)], "random pool handed out the lowest addresses"
    assert_invariants(kube, allow_errors=False)


def test_status_is_rebuilt_not_reallocated(controller, kube):
    """Status is a cache: wiped (as after clusterctl move), it comes back the same from the addresses."""
    kube.pool("p", pools=[{"start": "10.170.0.1", "end": "10.170.0.20"}], prefix=24)
    for i in range(4):
        kube.claim(f"c{i}", "p")
        kube.capi_claim(f"k{i}", "p")
    assert_invariants(kube, allow_errors=False)
    names = sorted(a["metadata"]["name"] for a in kube.addresses())
    claim_status = {f"c{i}": kube.ipclaim(f"c{i}")["status"]["address"] for i in range(4)}
    indexes = settled(kube, "p", lambda pool: _same(len(pool["status"]["indexes"]), 8))["status"]["indexes"]

    for i in range(4):
        kube.custom.patch_namespaced_custom_object_status(*METAL3, kube.ns, "ipclaims", f"c{i}", {"status": None})
        kube.custom.patch_namespaced_custom_object_status(*CAPI, kube.ns, "ipaddressclaims", f"k{i}",
                                                          {"status": None})
    kube.custom.patch_namespaced_custom_object_status(*METAL3, kube.ns, "ippools", "p", {"status": None})
    eventually(lambda: kube.ippool("p").get("status", {}).get("indexes") == indexes, timeout=20,
               what="pool status.indexes rebuilt")
    assert_invariants(kube, allow_errors=False)
    assert {f"c{i}": kube.ipclaim(f"c{i}")["status"]["address"] for i in range(4)} == claim_status
    assert sorted(a["metadata"]["name"] for a in kube.addresses()) == names, "addresses were allocated anew"


def test_deleting_an_address_in_use_keeps_it(controller, kube):
    kube.pool("p", pools=[{"start": "10.180.0.1", "end": "10.180.0.9"}], prefix=24)
    kube.claim("a", "p")
    address = kube.bound("a")
    name = address["metadata"]["name"]
    kube.delete(METAL3, "ipaddresses", name)
    kube.claim("b", "p")
    assert address_of(kube, "b") == "10.180.0.2", "the address of a live claim was handed out again"
    held = kube.ipaddress(name)
    assert held is not None and held["metadata"]["deletionTimestamp"] and FIN_ADDRESS in held["metadata"]["finalizers"]
    assert kube.ipclaim("a")["status"]["address"]["name"] == name
    assert [a["metadata"]["name"] for a in kube.addresses() if a["spec"]["claim"]["name"] == "a"] == [name]
    # Its claim going lets it go.
    kube.delete(METAL3, "ipclaims", "a")
    kube.gone(METAL3, "ipaddresses", name)
    kube.gone(METAL3, "ipclaims", "a")
    assert_invariants(kube, allow_errors=False)


@pytest.fixture
def other_namespace(kube):
    from kubernetes import client

    name = f"{kube.ns}-other"
    kube.core.create_namespace(client.V1Namespace(metadata=client.V1ObjectMeta(name=name)))
    yield Kube(kube.api_client, name)
    kube.core.delete_namespace(name)


def test_claim_for_a_pool_in_another_namespace_is_refused(controller, kube, other_namespace):
    """An address cannot be owned across namespaces: such a claim gets an error, and a claim
    of the same name in the pool's namespace is served as usual."""
    kube.pool("p", pools=[{"start": "10.190.0.1", "end": "10.190.0.9"}], prefix=24)
    other_namespace.claim("x", "p", pool_namespace=kube.ns)
    kube.claim("x", "p", pool_namespace=kube.ns)
    assert address_of(kube, "x") == "10.190.0.1"
    error = other_namespace.claim_error("x")
    assert "spec.pool.namespace" in error and "own namespace" in error, error
    other_namespace.warning_event("x", "AllocationFailed")
    assert other_namespace.addresses() == []
    assert [a["spec"]["claim"] for a in kube.addresses()] == [{"name": "x", "namespace": kube.ns}]
    settled(kube, "p", indexes_are({"x": "10.190.0.1"}))
    assert_invariants(kube, allow_errors=False)
    other_namespace.delete(METAL3, "ipclaims", "x")
    other_namespace.gone(METAL3, "ipclaims", "x")


def test_deleting_the_namespace_tears_everything_down(controller, kube):
    """kubectl delete namespace: pools, claims and addresses of both APIs are all marked for
    deletion at once; the finalizers must let go in an order that cannot deadlock."""
    from kubernetes.client.rest import ApiException

    kube.cluster("c1")
    kube.pool("p", clusterName="c1", pools=[{"start": "10.210.0.1", "end": "10.210.0.20"}], prefix=24)
    for i in range(5):
        kube.claim(f"c{i}", "p")
        kube.capi_claim(f"c{i}", "p")
    assert_invariants(kube, allow_errors=False)
    kube.core.delete_namespace(kube.ns)

    def namespace_gone() -> bool:
        try:
            kube.core.read_namespace(kube.ns)
        except ApiException as err:
            if err.status == 404:
                return True
            raise
        return False

    eventually(namespace_gone, timeout=90, interval=0.5, what=f"namespace {kube.ns} to be deleted")


# -- the pool's status ---------------------------------------------------------------------------

def settled(kube, name: str, check) -> dict:
    """The pool once ``check(pool)`` holds: counts and indexes are written at most about once a second."""
    def passes():
        pool = kube.ippool(name)
        check(pool)
        return pool
    return eventually(passes, timeout=20, what=f"IPPool {name} status", retry_on=(AssertionError, KeyError))


def counts(capacity: str, allocated: str, free: str):
    def check(pool):
        status = pool["status"]
        assert (status["capacity"], status["allocated"], status["free"]) == (capacity, allocated, free), status
    return check


def indexes_are(expected: dict):
    def check(pool):
        assert pool["status"]["indexes"] == expected, pool["status"]
    return check


def _same(got, expected) -> None:
    assert got == expected, (got, expected)
