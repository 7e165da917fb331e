"""In-place upgrade from the Go Metal3 IPAM, on a real API server.

The state the Go controller (v1.10 and later) leaves is written through the API
with no controller running (go_state.py builds it from the Go source and from
objects a real Go controller wrote); then this controller is started on it. Every
write to the namespace is recorded from watches and replayed in order, so "no IP
bound to two live claims" and "no claim ever holds two IPs or changes its IP" are
checked after every single write, not only at the end.
"""

from __future__ import annotations

import random
from concurrent.futures import ThreadPoolExecutor

import pytest
import yaml

from controller_fixtures import CAPI, CLUSTER_NAME_LABEL, METAL3, REPO, Kube, condition, ip_key as ip
from go_state import (GO_ADDRESS_FINALIZER, PROVIDER_LABEL, GoAllocationError, GoIpam, Grant,
                      adoption_problems, capi_claim_status, capi_ipaddress_body, go_address_name, go_allocate, ipaddress_body,
                      ipclaim_status, pool_metadata_patch)
from history import (NamespaceRecorder, State, claim_of_address, claim_of_capi_address,
                     claims_keep_their_ips, ips_by_name, moment_violations, wait_converged)
from metal3_ipam.testing.waiting import eventually

CAPTURED = REPO / "tests" / "fixtures" / "go-metal3-ipam-state.yaml"
GO_LABELS = {CLUSTER_NAME_LABEL: "c1", "upgrade-check/role": "old"}
SERVER_FIELDS = ("creationTimestamp", "generation", "resourceVersion", "uid", "managedFields")


# --------------------------------------------------------------------------- the fixtures are faithful


def _captured() -> dict:
    return yaml.safe_load(CAPTURED.read_text())


def _as_written(obj: dict) -> dict:
    """A captured object without what the API server adds."""
    out = {k: v for k, v in obj.items() if k != "status"}
    out["metadata"] = {k: v for k, v in obj["metadata"].items() if k not in SERVER_FIELDS}
    return out


def _claim_from_owner(address: dict, namespace: str) -> dict:
    ref = next(r for r in address["metadata"]["ownerReferences"] if r["kind"] in ("IPClaim", "IPAddressClaim"))
    return {"apiVersion": ref["apiVersion"], "kind": ref["kind"],
            "metadata": {"name": ref["name"], "namespace": namespace, "uid": ref["uid"],
                         "labels": address["metadata"]["labels"]}}


def _bare_pool(pool: dict) -> dict:
    """The pool as its user wrote it, before the Go controller touched it."""
    meta = {k: v for k, v in pool["metadata"].items() if k not in ("finalizers", "labels", "ownerReferences")}
    return {"apiVersion": pool["apiVersion"], "kind": pool["kind"], "metadata": meta, "spec": pool["spec"]}


def test_go_state_builders_match_objects_the_go_controller_wrote():
    """go_state.py writes exactly what a real Go controller wrote (tests/fixtures/go-metal3-ipam-state.yaml)."""
    cap = _captured()
    ns = cap["_about"]["namespace"]
    pools = {"p4": cap["IPPool (p4)"], "p6": cap["IPPool (p6)"]}
    for label, builder in (("ipam.metal3.io IPAddress (v4)", ipaddress_body),
                           ("ipam.metal3.io IPAddress (v6)", ipaddress_body),
                           ("ipam.cluster.x-k8s.io IPAddress (v4)", capi_ipaddress_body),
                           ("ipam.cluster.x-k8s.io IPAddress (v6)", capi_ipaddress_body)):
        want = cap[label]
        pool = pools[want["spec"].get("pool", want["spec"].get("poolRef"))["name"]]
        claim = _claim_from_owner(want, ns)
        spec = pool["spec"]
        grant = Grant(want["spec"]["address"], spec["prefix"], spec.get("gateway"), [])
        assert builder(pool, claim, grant) == _as_written(want), label
        assert want["metadata"]["name"] == go_address_name(spec["namePrefix"], want["spec"]["address"])

    # The Go controller hands out the pool's gateway: the first index of p4's first entry.
    p4 = pools["p4"]["spec"]
    first = go_allocate(p4, "ipc-052", {}, {str(ip(v)) for v in p4["preAllocations"].values()})
    assert (first.ip, first.prefix, first.gateway) == ("192.168.10.1", 24, "192.168.10.1")
    assert cap["ipam.metal3.io IPAddress (v4)"]["spec"]["address"] == first.gateway
    # Preallocated and requested addresses, taken from the second entry with its own gateway.
    pre = go_allocate(p4, "ipc-000", {}, set())
    assert (pre.ip, pre.gateway) == ("192.168.20.200", "192.168.20.1")
    assert cap["IPClaim (preallocated)"]["status"]["address"]["name"] == go_address_name("p4", pre.ip)
    requested = go_allocate(p4, "ipc-004", cap["IPClaim (ipAddress annotation)"]["metadata"]["annotations"], set())
    assert cap["IPClaim (ipAddress annotation)"]["status"]["address"]["name"] == go_address_name("p4", requested.ip)
    with pytest.raises(GoAllocationError):
        go_allocate({"pools": [{"start": "10.0.0.1", "end": "10.0.0.1"}]}, "x", {}, {"10.0.0.1"})

    # Claim statuses and the pool's metadata.
    plain = cap["IPClaim (plain)"]
    assert ipclaim_status({"metadata": {"name": plain["status"]["address"]["name"], "namespace": ns}}) \
        == plain["status"]
    capi = cap["IPAddressClaim (v1beta2)"]
    at = capi["status"]["conditions"][0]["lastTransitionTime"]
    assert capi_claim_status({"metadata": {"name": capi["status"]["addressRef"]["name"]}}, at) == capi["status"]
    cluster = {"apiVersion": "cluster.x-k8s.io/v1beta2", "kind": "Cluster",
               "metadata": {"name": "c1", "uid": pools["p4"]["metadata"]["ownerReferences"][0]["uid"]}}
    patch = pool_metadata_patch(_bare_pool(pools["p4"]), cluster)["metadata"]
    assert patch == {k: pools["p4"]["metadata"][k] for k in ("finalizers", "labels", "ownerReferences")}
    # status.indexes is keyed by the plain claim name, for both claim kinds.
    assert "iac-001" in pools["p4"]["status"]["indexes"]


# --------------------------------------------------------------------------- the Go state


P4 = dict(namePrefix="p4", clusterName="c1", gateway="192.168.10.1", prefix=24,
          pools=[{"start": "192.168.10.1", "end": "192.168.10.12"}],
          preAllocations={"ipc-pre": "192.168.10.11", "iac-pre": "192.168.10.12"})
P6 = dict(namePrefix="p6", clusterName="c1", allocationStrategy="random", gateway="fd00:77::1", prefix=64,
          pools=[{"start": "fd00:77::1:0", "end": "fd00:77::1:ffff", "subnet": "fd00:77::/64"}])

# What the Go controller gives p4's claims, in its order (IPClaims, then IPAddressClaims).
P4_GO = [("IPClaim", "ipc-0", None, "192.168.10.1"),      # the gateway: the Go controller hands it out
         ("IPClaim", "ipc-1", None, "192.168.10.2"),
         ("IPClaim", "ipc-pre", None, "192.168.10.11"),   # preallocated
         ("IPClaim", "ipc-ann", "192.168.10.9", "192.168.10.9"),  # ipAddress annotation
         ("IPAddressClaim", "iac-0", None, "192.168.10.3"),
         ("IPAddressClaim", "iac-1", None, "192.168.10.4"),
         ("IPAddressClaim", "iac-pre", None, "192.168.10.12"),
         ("IPAddressClaim", "iac-ann", "192.168.10.8", "192.168.10.8")]
P4_FREE = {"192.168.10.5", "192.168.10.6", "192.168.10.7", "192.168.10.10"}
P6_GO = [("IPClaim", f"ipc6-{i}", None, None) for i in range(3)] + \
        [("IPAddressClaim", f"iac6-{i}", None, None) for i in range(3)]
P6_HALF = [("IPClaim", "ipc6-half"), ("IPAddressClaim", "iac6-half")]


def _create_claim(kube: Kube, kind: str, name: str, pool: str, requested: str | None = None,
                  labels: dict | None = None) -> dict:
    annotations = {"ipAddress": requested} if requested else None
    if kind == "IPClaim":
        return kube.claim(name, pool, annotations=annotations, labels=labels)
    return kube.capi_claim(name, pool, annotations=annotations, labels=labels)


def _write_go_state(kube: Kube, go: GoIpam) -> None:
    """Pools, claims, addresses and statuses, as the Go controller leaves them (no controller running)."""
    kube.cluster("c1")
    kube.pool("p4", **P4)
    kube.pool("p6", **P6)
    go.write_pool_metadata("p4")
    go.write_pool_metadata("p6")
    for pool, claims in (("p4", P4_GO), ("p6", P6_GO)):
        for kind, name, requested, _ in claims:
            _create_claim(kube, kind, name, pool, requested, GO_LABELS)
        for kind, name, _, want in claims:
            served = go.serve(kind, name)
            if want:
                assert served.ip == want, f"the Go allocation model gave {name} {served.ip}, not {want}"
        go.write_pool_status(pool)
    # The Go controller stopped between creating an address and patching its claim.
    for kind, name in P6_HALF:
        _create_claim(kube, kind, name, "p6", None, GO_LABELS)
        go.serve(kind, name, stop_after_address=True)


def _check_go_state(kube: Kube, go: GoIpam) -> None:
    """The state written is the Go controller's: Cluster API claims have no Metal3 IPAddress."""
    m3 = {a["metadata"]["name"]: a for a in kube.list(METAL3, "ipaddresses")}
    capi = {a["metadata"]["name"]: a for a in kube.list(CAPI, "ipaddresses")}
    half = {name for _, name in P6_HALF}
    for s in go.served:
        if s.claim in half:
            claim = kube.ipclaim(s.claim) if s.kind == "IPClaim" else kube.capi_ipclaim(s.claim)
            assert not claim.get("status") and not claim["metadata"].get("finalizers")
            continue
        if s.kind == "IPClaim":
            a = m3[s.address_name]
            assert a["metadata"]["finalizers"] == [GO_ADDRESS_FINALIZER]
            assert all("controller" not in r for r in a["metadata"]["ownerReferences"])
            assert kube.ipclaim(s.claim)["status"]["address"]["name"] == s.address_name
        else:
            a = capi[s.address_name]
            assert s.address_name == go_address_name(s.name_prefix, s.ip) and s.address_name != s.claim
            assert s.address_name not in m3 or m3[s.address_name]["spec"]["claim"]["name"] != s.claim
            claim = kube.capi_ipclaim(s.claim)
            assert claim["status"]["addressRef"]["name"] == s.address_name
            assert condition(claim, "Ready") == {**condition(claim, "Ready"), "status": "True", "reason": "",
                                                 "message": ""}
        assert a["metadata"]["labels"] == GO_LABELS
    pool = kube.ippool("p4")
    assert pool["status"]["indexes"]["iac-0"] == "192.168.10.3"  # plain claim names, both kinds
    assert pool["metadata"]["ownerReferences"][0]["controller"] is False


def _status(kube: Kube, pool: str) -> tuple[str, str, str]:
    s = kube.ippool(pool)["status"]
    return s.get("capacity"), s.get("allocated"), s.get("free")


def _create_many(kube: Kube, claims: list[tuple[str, str, str]]) -> None:
    with ThreadPoolExecutor(4) as ex:
        list(ex.map(lambda c: _create_claim(kube, c[0], c[1], c[2]), claims))


# --------------------------------------------------------------------------- the upgrade


def test_upgrade_adopts_the_go_controllers_state(controller_factory, kube, control_plane):
    """Go state of two pools (IPv4 sequential with the gateway handed out, preallocations and an
    ipAddress annotation; IPv6 random), claims of both kinds, a few claims not yet served, two whose
    address was written but not their status; this controller started on it. Every allocation is
    adopted as it is, new claims fill the free space to the edge and no further, adopted claims
    release both address kinds, nothing leaks."""
    go = GoIpam(kube, random.Random(7))
    with NamespaceRecorder(control_plane, kube.ns) as recorder:
        _write_go_state(kube, go)
        # Claims the Go controller had not served yet when it was stopped.
        for kind, name, pool in (("IPClaim", "new-ipc-0", "p4"), ("IPAddressClaim", "new-iac-0", "p4"),
                                 ("IPClaim", "new6-ipc-0", "p6"), ("IPAddressClaim", "new6-iac-0", "p6")):
            _create_claim(kube, kind, name, pool)
        _check_go_state(kube, go)
        adopted_ips = {ip(s.ip) for s in go.served}
        assert len(adopted_ips) == len(go.served) == 16

        ctl = controller_factory(["-n", kube.ns, "--no-leader-elect"], name="upgraded")
        # Twice as many new claims as p4 has free addresses, of both kinds: the allocator is forced to the edge.
        p4_new = [("IPClaim", f"new-ipc-{i}", "p4") for i in range(1, 4)] + \
                 [("IPAddressClaim", f"new-iac-{i}", "p4") for i in range(1, 4)]
        p6_new = [("IPClaim", f"new6-ipc-{i}", "p6") for i in range(1, 3)] + \
                 [("IPAddressClaim", f"new6-iac-{i}", "p6") for i in range(1, 3)]
        _create_many(kube, p4_new + p6_new)
        p4_names = {n for _, n, _ in p4_new} | {"new-ipc-0", "new-iac-0"}
        p6_names = {n for _, n, _ in p6_new} | {"new6-ipc-0", "new6-iac-0"}
        assert len(p4_names) == 2 * len(P4_FREE)

        state = wait_converged(kube, timeout=90, expect_errors=p4_names)
        problems = adoption_problems(state, go.served)
        assert not problems, "the Go allocations were not adopted as they are:\n" + "\n".join(problems)
        p4_got = ips_by_name(state, p4_names)
        served = {n: a for n, a in p4_got.items() if a}
        assert set(served.values()) == P4_FREE, f"p4's new claims got {p4_got}; free were {sorted(P4_FREE)}"
        assert len(served) == len(P4_FREE)
        p6_got = ips_by_name(state, p6_names)
        assert all(p6_got.values()) and len(set(p6_got.values())) == len(p6_names), p6_got
        assert not {ip(a) for a in p6_got.values()} & adopted_ips
        assert all(ip("fd00:77::1:0") <= ip(a) <= ip("fd00:77::1:ffff") for a in p6_got.values()), p6_got
        # Status rebuilt: IPClaims by name, Cluster API claims as IPAddressClaim/<name> (checked against
        # the locks by wait_converged); the Go controller's plain keys for Cluster API claims are gone.
        indexes = kube.ippool("p4")["status"]["indexes"]
        assert indexes["IPAddressClaim/iac-0"] == "192.168.10.3" and "iac-0" not in indexes, indexes
        assert indexes["ipc-0"] == "192.168.10.1", indexes
        # The pool's metadata as the Go controller left it: its Cluster owner reference (not a controller
        # reference) and its labels.
        pool = kube.ippool("p4")
        cluster_uid = kube.get(("cluster.x-k8s.io", "v1beta2"), "clusters", "c1")["metadata"]["uid"]
        refs = [r for r in pool["metadata"]["ownerReferences"] if r["kind"] == "Cluster"]
        assert [(r["uid"], bool(r.get("controller"))) for r in refs] == [(cluster_uid, False)], refs
        assert pool["metadata"]["labels"] == {CLUSTER_NAME_LABEL: "c1", PROVIDER_LABEL: "ipam-metal3"}
        # 12 addresses .1-.12 less the gateway; 12 allocations (one is the gateway the Go controller gave out).
        assert _status(kube, "p4") == ("11", "12", "0")
        assert _status(kube, "p6") == ("65536", "14", "65522")

        # Releasing adopted claims of both kinds frees both address kinds; the freed IPs go to waiting
        # claims, except the preallocated one (held for its claim) and the gateway (never handed out).
        by_name = {s.claim: s for s in go.served}
        gone = ["ipc-0", "ipc-1", "iac-0", "iac-pre"]
        # Their address objects of both APIs, by uid: a freed name is soon taken again by a new allocation.
        theirs = {(r, a["metadata"]["uid"]) for r in ("addresses", "capi_addresses")
                  for a in state.objects[r].values()
                  for key in [(claim_of_address if r == "addresses" else claim_of_capi_address)(a)]
                  if key and key[1] in gone}
        assert len(theirs) == 6, theirs  # ipc-0, ipc-1: one each; iac-0, iac-pre: the Go one and the lock
        for name in gone:
            s = by_name[name]
            kube.delete(METAL3 if s.kind == "IPClaim" else CAPI, "ipclaims" if s.kind == "IPClaim"
                        else "ipaddressclaims", name)
        for name in gone:
            s = by_name[name]
            kube.gone(METAL3 if s.kind == "IPClaim" else CAPI, "ipclaims" if s.kind == "IPClaim"
                      else "ipaddressclaims", name, timeout=60)

        def left() -> set:
            return theirs & {(r, a["metadata"]["uid"]) for r, gv in (("addresses", METAL3), ("capi_addresses", CAPI))
                             for a in kube.list(gv, "ipaddresses")}

        eventually(lambda: not left(), timeout=30, what="the released claims' addresses of both APIs to go")
        state = wait_converged(kube, timeout=60, expect_errors=p4_names)
        p4_got = ips_by_name(state, p4_names)
        assert set(a for a in p4_got.values() if a) == P4_FREE | {"192.168.10.2", "192.168.10.3"}, p4_got
        problems = adoption_problems(state, [s for s in go.served if s.claim not in gone])
        assert not problems, "\n".join(problems)
        assert _status(kube, "p4") == ("11", "10", "0")

        # Everything released: no address of either API is left, and the pools can go.
        for c in kube.list(METAL3, "ipclaims"):
            kube.delete(METAL3, "ipclaims", c["metadata"]["name"])
        for c in kube.list(CAPI, "ipaddressclaims"):
            kube.delete(CAPI, "ipaddressclaims", c["metadata"]["name"])
        eventually(lambda: not kube.list(METAL3, "ipaddresses") and not kube.list(CAPI, "ipaddresses")
                   and not kube.list(METAL3, "ipclaims") and not kube.list(CAPI, "ipaddressclaims"),
                   timeout=60, what="every claim and address of both APIs to go")
        def counts_at_zero() -> bool:
            counts = (_status(kube, "p4"), _status(kube, "p6"))
            assert counts == (("11", "0", "9"), ("65536", "0", "65536")), counts
            return True

        # p4 keeps .11 and .12 for their preallocated claims.
        eventually(counts_at_zero, timeout=30, what="the pools' counts to fall to zero")
        for pool in ("p4", "p6"):
            kube.delete(METAL3, "ippools", pool)
            kube.gone(METAL3, "ippools", pool)
        assert ctl.alive()
        recorder.drain(kube)
    findings = recorder.replay(claims_keep_their_ips())
    assert not findings, "at some moment:\n" + "\n".join(findings[:40])
    print(f"{len(recorder.events)} writes replayed, none broke an invariant")


def _p4_free(state: State, pool_spec: dict) -> set[str]:
    """The addresses of a pool this controller may still hand out: its range, less the gateway, the
    preallocated addresses and every IP a live claim holds (any pool, either address kind)."""
    entry = pool_spec["pools"][0]
    first, last = ip(entry["start"]), ip(entry["end"])
    candidates = {str(first + i) for i in range(int(last) - int(first) + 1)}
    held = {str(i) for key, ips in state.holdings().items() if key in state.live_claims() for i in ips}
    return candidates - {pool_spec["gateway"]} - set(pool_spec["preAllocations"].values()) - held


P4_RUNNING = dict(P4, pools=[{"start": "192.168.10.1", "end": "192.168.10.24"}])


def test_go_state_appearing_while_the_controller_runs(controller_factory, kube, control_plane):
    """The Go state appears one object at a time while this controller runs, in the order the Go
    controller writes it (claim, address, claim status), written from a read of the claim taken as it
    appears: no IP a Go-written address holds is ever bound to another claim, every claim ends with
    one address, and new claims then fill the pool to the edge and no further."""
    go = GoIpam(kube, random.Random(11))
    with NamespaceRecorder(control_plane, kube.ns) as recorder:
        ctl = controller_factory(["-n", kube.ns, "--no-leader-elect"], name="running")
        kube.cluster("c1")
        kube.pool("p4", **P4_RUNNING)
        kube.pool("p6", **P6)
        go.write_pool_metadata("p4")
        go.write_pool_metadata("p6")
        go_claims = {(kind, name) for kind, name, _, _ in P4_GO + P6_GO}
        for pool, claims in (("p4", P4_GO), ("p6", P6_GO)):
            for kind, name, requested, _ in claims:
                _create_claim(kube, kind, name, pool, requested, GO_LABELS)
                go.serve_racing(kind, name)
                # Settled before the next claim appears: the Go side's allocation never races this
                # controller's for another claim (two allocators without a common lock would collide
                # whoever is right, which is not what this test is about).
                wait_converged(kube, timeout=30, expect_errors=set(), may_hold_two=go_claims)
            go.write_pool_status(pool)
        assert len(go.served) >= 6, f"the Go side served only {[s.claim for s in go.served]}"

        state = wait_converged(kube, timeout=60, expect_errors=set(), may_hold_two=go_claims)
        free = _p4_free(state, P4_RUNNING)
        p4_new = [("IPClaim" if i % 2 else "IPAddressClaim", f"new-{i}", "p4") for i in range(2 * len(free))]
        _create_many(kube, p4_new + [("IPClaim", "new6-0", "p6"), ("IPAddressClaim", "new6-1", "p6")])
        state = wait_converged(kube, timeout=60, expect_errors={n for _, n, _ in p4_new}, may_hold_two=go_claims)
        got = ips_by_name(state, {n for _, n, _ in p4_new})
        assert {a for a in got.values() if a} == free, f"new claims got {got}; free were {sorted(free)}"

        # A Go-written address either still stands (then its claim holds that IP and no other) or was
        # given up for the controller's own (its name may since hold another claim's address).
        standing = {a["metadata"]["uid"] for r in ("addresses", "capi_addresses") for a in state.objects[r].values()}
        kept, replaced = [], []
        for s in go.served:
            ips = state.holdings().get((s.kind, s.claim), {})
            if s.address_uid in standing:
                assert set(ips) == {ip(s.ip)}, (f"{s.kind} {s.claim} holds {sorted(map(str, ips))} while the Go "
                                                f"address {s.address_name} for {s.ip} still exists")
                kept.append(s.claim)
            else:
                replaced.append(s.claim)
        print(f"Go addresses kept: {len(kept)} {kept}; given up for the controller's own: {replaced}; "
              f"free before the new claims: {sorted(free)}")
        assert ctl.alive()
        recorder.drain(kube)
    # A claim served by both (this controller first, then the Go-shaped address) may hold two IPs for a
    # moment; no IP may ever be held for two live claims, and no other claim may hold two IPs.
    findings = recorder.replay(lambda st, _: moment_violations(st, may_hold_two=go_claims))
    assert not findings, "at some moment:\n" + "\n".join(findings[:40])
