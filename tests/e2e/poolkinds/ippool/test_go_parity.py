"""The objects this controller writes, against those the Go Metal3 IPAM writes, on a real API server.

A drop-in is judged by its objects: other tools (CAPM3, selectors, the garbage
collector, ``clusterctl move``) read them. The expected shapes are the Go
IPAM's, built by ``go_state`` from its ``ipam/ippool_manager.go`` and
``controllers/ippool_controller.go`` and checked here against objects a real Go
controller wrote (``tests/fixtures/go-metal3-ipam-state.yaml``). Where this
controller differs on purpose (docs/pools/ippool.md, "Differences from the Go Metal3 IPAM"),
the test says so and checks exactly that difference.
"""

from __future__ import annotations

import yaml
from kubernetes import client

from controller_fixtures import (CAPI, CLUSTER_NAME_LABEL, FIN_CAPI_CLAIM, FIN_CLAIM, METAL3,
                                 REPO, assert_invariants, condition, holds_for)
from go_state import (PROVIDER_LABEL, capi_ipaddress_body, go_allocate, ipaddress_body,
                      pool_metadata_patch)
from metal3_ipam.testing.waiting import eventually

FIXTURE = REPO / "tests" / "fixtures" / "go-metal3-ipam-state.yaml"
OWNER_KEYS = {"apiVersion", "kind", "name", "uid"}


def go_written() -> dict[str, dict]:
    """The objects the real Go controller wrote, by their heading in the fixture."""
    return yaml.safe_load(FIXTURE.read_text())


def go_metal3_address(kube, pool_name: str, claim_name: str, taken: set[str] = frozenset()) -> dict:
    """The Metal3 IPAddress the Go IPAM would write for this IPClaim, from the live pool and claim."""
    pool, claim = kube.ippool(pool_name), kube.ipclaim(claim_name)
    return ipaddress_body(pool, claim, go_allocate(pool["spec"], claim_name, None, set(taken)))


def go_capi_address(kube, pool_name: str, claim_name: str, taken: set[str] = frozenset()) -> dict:
    """The Cluster API IPAddress the Go IPAM would write for this IPAddressClaim (named ``<namePrefix>-<ip>``)."""
    pool, claim = kube.ippool(pool_name), kube.capi_ipclaim(claim_name)
    return capi_ipaddress_body(pool, claim, go_allocate(pool["spec"], claim_name, None, set(taken)))


# --------------------------------------------------------------------------- 1. owner references


def test_metal3_ipaddress_owner_references_are_the_go_ipams(controller, kube):
    """Pool then claim, neither ``controller`` nor ``blockOwnerDeletion``: as the Go IPAM writes them.

    The Cluster API IPAddress keeps the contract's flags (SPEC §6); the Metal3
    IPAddress behind a Cluster API claim (the lock) has the Go shape too.
    """
    kube.pool("p", namePrefix="own", pools=[{"start": "10.30.0.10", "end": "10.30.0.19"}], prefix=24,
              gateway="10.30.0.1", dnsServers=["10.30.0.53"])
    kube.cluster("c1")
    kube.claim("a", "p", labels={CLUSTER_NAME_LABEL: "c1", "role": "worker"})
    ours = kube.bound("a")
    go = go_metal3_address(kube, "p", "a")
    # Object by object: the same name, finalizers, owner references, labels and spec.
    for field in ("name", "finalizers", "ownerReferences", "labels"):
        assert ours["metadata"][field] == go["metadata"][field], field
    assert ours["spec"] == go["spec"]
    # And the same shape as the objects a real Go controller wrote.
    written = [o for heading, o in go_written().items() if heading.startswith("ipam.metal3.io IPAddress")]
    assert written and all([set(r) for r in o["metadata"]["ownerReferences"]] == [OWNER_KEYS, OWNER_KEYS]
                           and [r["kind"] for r in o["metadata"]["ownerReferences"]] == ["IPPool", "IPClaim"]
                           for o in written)
    assert [set(r) for r in ours["metadata"]["ownerReferences"]] == [OWNER_KEYS, OWNER_KEYS]

    kube.capi_claim("m", "p", labels={CLUSTER_NAME_LABEL: "c1"})
    mirror = kube.capi_bound("m")
    lock = eventually(lambda: next((a for a in kube.addresses() if a["spec"]["claim"]["name"] == "m"), None),
                      timeout=30, what="the lock of m")
    assert [(r["kind"], r["name"], set(r)) for r in lock["metadata"]["ownerReferences"]] == \
        [("IPPool", "p", OWNER_KEYS), ("IPAddressClaim", "m", OWNER_KEYS)]
    flags = {r["kind"]: (r.get("controller"), r.get("blockOwnerDeletion")) for r in mirror["metadata"]["ownerReferences"]}
    assert flags == {"IPAddressClaim": (True, True), "IPPool": (None, True)}

    # The garbage collector needs no flag: a claim deleted in the foreground goes with its address
    # (our finalizer releases it), and the IP is handed out again.
    client.CustomObjectsApi(kube.api_client).delete_namespaced_custom_object(
        *METAL3, kube.ns, "ipclaims", "a", propagation_policy="Foreground")
    kube.gone(METAL3, "ipclaims", "a")
    kube.gone(METAL3, "ipaddresses", ours["metadata"]["name"])
    kube.claim("b", "p")
    assert kube.bound("b")["spec"]["address"] == ours["spec"]["address"]
    assert_invariants(kube, allow_errors=False)


# --------------------------------------------------------------------------- 2. a pool without any prefix


def test_a_pool_without_any_prefix_gives_the_subnets_prefix_where_the_go_ipam_gives_none(controller, kube):
    """The one deliberate difference of this pool: ``prefix: 29`` where the Go IPAM writes none (Metal3) or 0 (CAPI).

    Everything else of both addresses is what the Go IPAM writes (the admission
    warning naming both behaviours is checked in test_webhooks.py).
    """
    kube.pool("np", namePrefix="np", pools=[{"subnet": "10.85.0.0/29"}])
    kube.claim("a", "np", labels={"role": "worker"})
    ours = kube.bound("a")
    go = go_metal3_address(kube, "np", "a")
    assert "prefix" not in go["spec"]
    assert ours["spec"] == {**go["spec"], "prefix": 29}
    assert ours["metadata"]["name"] == go["metadata"]["name"]

    kube.capi_claim("m", "np", labels={"role": "worker"})
    mirror = kube.capi_bound("m")
    go_capi = go_capi_address(kube, "np", "m", taken={ours["spec"]["address"]})
    assert go_capi["spec"]["prefix"] == 0
    assert mirror["spec"] == {**go_capi["spec"], "prefix": 29}
    lock = kube.ipaddress(go_capi["metadata"]["name"])  # our lock takes the name the Go IPAM gives its address
    assert lock["spec"]["prefix"] == 29 and lock["spec"]["address"] == mirror["spec"]["address"]
    assert_invariants(kube, allow_errors=False)


# --------------------------------------------------------------------------- 3. the pool's provider label


def test_a_pool_of_a_cluster_gets_the_go_ipams_labels(controller, kube):
    kube.cluster("c1")
    kube.pool("p", clusterName="c1", pools=[{"start": "10.31.0.10", "end": "10.31.0.19"}], prefix=24)
    kube.pool("shared", pools=[{"start": "10.32.0.10", "end": "10.32.0.19"}], prefix=24)
    go_labels = pool_metadata_patch(kube.ippool("p"), None)["metadata"]["labels"]
    assert go_labels == {CLUSTER_NAME_LABEL: "c1", PROVIDER_LABEL: "ipam-metal3"}
    written = go_written()["IPPool (p4)"]["metadata"]["labels"]
    assert written[PROVIDER_LABEL] == "ipam-metal3"
    eventually(lambda: kube.ippool("p")["metadata"].get("labels") == go_labels, timeout=30,
               what="the pool labelled as the Go IPAM labels it")
    # A selector on the provider label finds the new pool (and not the one without a Cluster, as with Go).
    found = client.CustomObjectsApi(kube.api_client).list_namespaced_custom_object(
        *METAL3, kube.ns, "ippools", label_selector=f"{PROVIDER_LABEL}=ipam-metal3")["items"]
    assert [p["metadata"]["name"] for p in found] == ["p"]
    assert not (kube.ippool("shared")["metadata"].get("labels") or {})


# --------------------------------------------------------------------------- 4. no finalizer without something to release


def test_a_claim_with_nothing_to_release_gets_no_finalizer(controller, kube):
    """A claim of a pool that does not exist is told so (SPEC §8) and left deletable, as the Go IPAM leaves it."""
    kube.claim("lost", "nowhere")
    kube.capi_claim("lost-capi", "nowhere")
    assert "IPPool" in kube.claim_error("lost") and "not found" in kube.claim_error("lost")
    eventually(lambda: (condition(kube.capi_ipclaim("lost-capi"), "Ready") or {}).get("reason") == "PoolNotReady",
               timeout=30, what="lost-capi to be PoolNotReady")
    holds_for(lambda: not kube.ipclaim("lost")["metadata"].get("finalizers")
              and not kube.capi_ipclaim("lost-capi")["metadata"].get("finalizers"), seconds=1.5,
              what="no finalizer on the claims of a missing pool")
    # One left from before (an earlier IPAM or version) holds nothing: it is taken off.
    stale = kube.claim("stale", "nowhere")
    kube.patch(METAL3, "ipclaims", "stale", {"metadata": {"finalizers": [FIN_CLAIM]}})
    eventually(lambda: not kube.ipclaim("stale")["metadata"].get("finalizers"), timeout=30,
               what="the finalizer of a claim that holds nothing to be taken off")
    assert stale["metadata"]["uid"] == kube.ipclaim("stale")["metadata"]["uid"]
    # Deletable at once, controller or not.
    kube.delete(METAL3, "ipclaims", "lost")
    kube.delete(CAPI, "ipaddressclaims", "lost-capi")
    assert kube.ipclaim("lost") is None and kube.capi_ipclaim("lost-capi") is None
    # Once the pool exists, the claim is served and carries the finalizer that guards its address.
    kube.pool("nowhere", pools=[{"start": "10.33.0.10", "end": "10.33.0.19"}], prefix=24)
    kube.bound("stale")
    assert kube.ipclaim("stale")["metadata"]["finalizers"] == [FIN_CLAIM]
    kube.capi_claim("late", "nowhere")
    kube.capi_bound("late")
    assert kube.capi_ipclaim("late")["metadata"]["finalizers"] == [FIN_CAPI_CLAIM]
    assert_invariants(kube, allow_errors=False)


# --------------------------------------------------------------------------- 5. labels of the Cluster API IPAddress


def test_the_capi_ipaddress_carries_every_label_of_its_claim(controller, kube):
    kube.cluster("c1")
    kube.pool("p", namePrefix="lbl", pools=[{"start": "10.34.0.10", "end": "10.34.0.19"}], prefix=24)
    labels = {CLUSTER_NAME_LABEL: "c1", "cluster.x-k8s.io/deployment-name": "md-0",
              "cluster.x-k8s.io/set-name": "md-0-abc", "role": "worker"}
    kube.capi_claim("m", "p", labels=labels)
    mirror = kube.capi_bound("m")
    assert mirror["metadata"]["labels"] == go_capi_address(kube, "p", "m")["metadata"]["labels"] == labels
    # Selectors by role or machine set find it, as they find the Go IPAM's.
    found = client.CustomObjectsApi(kube.api_client).list_namespaced_custom_object(
        *CAPI, kube.ns, "ipaddresses", label_selector="cluster.x-k8s.io/set-name=md-0-abc,role=worker")["items"]
    assert [a["metadata"]["name"] for a in found] == ["m"]
    # What a real Go controller wrote: the claim's labels, all of them.
    written = go_written()
    assert written["ipam.cluster.x-k8s.io IPAddress (v4)"]["metadata"]["labels"] == \
        written["IPAddressClaim (v1beta2)"]["metadata"]["labels"]
    assert_invariants(kube, allow_errors=False)
