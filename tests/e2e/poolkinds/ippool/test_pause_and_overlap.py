"""Pauses that follow each claim's own Cluster, and pools of one namespace whose ranges overlap.

On a real API server with the module's controller (``-A``). Every write to the
test's namespace is recorded from watches (history.py): a paused claim is shown
untouched by the writes themselves, not by a later look, and "no IP bound to two
live claims" is checked after every single write, across pools and both address kinds.
"""

from __future__ import annotations

import time
from concurrent.futures import ThreadPoolExecutor

from controller_fixtures import (CAPI, CAPI_IPAM_GROUP, CLUSTER, CLUSTER_NAME_LABEL, METAL3, PAUSED, Kube,
                                 condition, ip_key as ip)
from go_state import GoIpam, Grant, adoption_problems
from history import (NamespaceRecorder, State, claim_of_address, claim_of_capi_address,
                     claims_keep_their_ips, ips_by_name, wait_converged)
from metal3_ipam.testing.waiting import eventually


def ip_range(first: str, last: str) -> set[str]:
    return {str(ip(first) + i) for i in range(int(ip(last)) - int(ip(first)) + 1)}


def capi_claim(kube: Kube, name: str, pool: str, *, cluster: str | None = None, labels: dict | None = None,
               annotations: dict | None = None) -> dict:
    """A v1beta2 IPAddressClaim; ``cluster`` sets spec.clusterName."""
    spec: dict = {"poolRef": {"apiGroup": METAL3[0], "kind": "IPPool", "name": pool}}
    if cluster:
        spec["clusterName"] = cluster
    meta: dict = {"name": name}
    if labels:
        meta["labels"] = labels
    if annotations:
        meta["annotations"] = annotations
    return kube.custom.create_namespaced_custom_object(*CAPI, kube.ns, "ipaddressclaims", {
        "apiVersion": f"{CAPI_IPAM_GROUP}/{CAPI[1]}", "kind": "IPAddressClaim", "metadata": meta, "spec": spec})


def delete_claim(kube: Kube, kind: str, name: str) -> None:
    if kind == "IPClaim":
        kube.delete(METAL3, "ipclaims", name)
    else:
        kube.delete(CAPI, "ipaddressclaims", name)


def claim_gone(kube: Kube, kind: str, name: str, timeout: float = 30.0) -> None:
    if kind == "IPClaim":
        kube.gone(METAL3, "ipclaims", name, timeout=timeout)
    else:
        kube.gone(CAPI, "ipaddressclaims", name, timeout=timeout)


def current_rv(kube: Kube) -> int:
    """A resourceVersion no earlier than any write made so far."""
    return int(kube.custom.list_namespaced_custom_object(*METAL3, kube.ns, "ipclaims", limit=1)
               ["metadata"]["resourceVersion"])


_barriers = {"n": 0}


def cluster_barrier(kube: Kube) -> None:
    """Return once the controller has taken in every change to Clusters made before the call.

    A pool names a Cluster that does not exist yet; the Cluster is then created.
    The pool's owner reference to it (with its uid) can only be written once the
    controller has seen that Cluster, and Cluster events reach it in the order
    they were written: so every earlier Cluster change (a pause) has reached it too.
    """
    _barriers["n"] += 1
    name = f"barrier-{_barriers['n']}"
    n = _barriers["n"]
    kube.pool(name, clusterName=name, pools=[{"start": f"10.254.{n}.1", "end": f"10.254.{n}.1"}], prefix=24)
    uid = kube.cluster(name)["metadata"]["uid"]
    eventually(lambda: any(r.get("uid") == uid for r in kube.ippool(name)["metadata"].get("ownerReferences") or []),
               timeout=30, what=f"the controller to see Cluster {name}")


def pause(kube: Kube, cluster: str, paused: bool) -> None:
    kube.patch(CLUSTER, "clusters", cluster, {"spec": {"paused": paused}})


# --------------------------------------------------------------------------- item 2: pause


A_NEW = [("IPClaim", "a-ipc-1"), ("IPAddressClaim", "a-spec-1"), ("IPAddressClaim", "a-label-1")]
A_GOING = [("IPClaim", "a-ipc-0"), ("IPAddressClaim", "a-spec-0")]
A_KEPT = [("IPAddressClaim", "a-label-0")]


def _create(kube: Kube, kind: str, name: str, cluster: str | None, how: str = "label") -> None:
    """A claim of ``cluster``, named by the cluster-name label or (Cluster API claims) spec.clusterName."""
    labels = {CLUSTER_NAME_LABEL: cluster} if cluster and how == "label" else None
    if kind == "IPClaim":
        kube.claim(name, "shared", labels=labels)
    else:
        capi_claim(kube, name, "shared", cluster=cluster if how == "spec" else None, labels=labels)


def _how(name: str) -> str:
    return "spec" if "-spec-" in name else "label"


def _touched(events, before: State, paused: set[tuple[str, str]], new: set[tuple[str, str]]) -> list[str]:
    """Writes that touched a paused claim or its addresses (the test's own creates and deletes aside)."""
    found = []
    for e in events:
        if e.resource in ("addresses", "capi_addresses"):
            key = (claim_of_address if e.resource == "addresses" else claim_of_capi_address)(e.obj)
            if key in paused:
                found.append(f"{e.type} {e.resource} {e.name} (rv {e.rv}) of paused {key}")
            continue
        if e.resource not in ("IPClaim", "IPAddressClaim") or (e.resource, e.name) not in paused:
            continue
        if e.type == "DELETED":
            found.append(f"{e.resource} {e.name} was released (rv {e.rv})")
            continue
        was = {} if (e.resource, e.name) in new else before.objects[e.resource][e.name]
        for part in ("status", "finalizers"):
            now = (e.obj.get("status") or {}) if part == "status" else e.obj["metadata"].get("finalizers") or []
            then = (was.get("status") or {}) if part == "status" else (was.get("metadata") or {}).get(
                "finalizers") or []
            if now != then:
                found.append(f"{e.resource} {e.name}: {part} written (rv {e.rv}): {then} -> {now}")
    return found


def test_shared_pool_pause_follows_each_claims_cluster(controller, kube, control_plane):
    """A pool without clusterName serves two Clusters. While Cluster ca is paused its new claims get
    nothing written (no address, no status, no finalizer) and its deleted claims release nothing,
    while cb's claims on the same pool are served; unpaused, ca's claims are served and released.
    A claim's Cluster is named by the cluster-name label (both kinds) or a v1beta2 spec.clusterName."""
    with NamespaceRecorder(control_plane, kube.ns) as recorder:
        kube.cluster("ca")
        kube.cluster("cb")
        kube.pool("shared", pools=[{"start": "10.170.0.1", "end": "10.170.0.40"}], prefix=24)
        for kind, name in A_GOING + A_KEPT:
            _create(kube, kind, name, "ca", _how(name))
        for kind, name in (("IPClaim", "b-ipc-0"), ("IPAddressClaim", "b-spec-0")):
            _create(kube, kind, name, "cb", _how(name))
        wait_converged(kube, expect_errors=set())

        pause(kube, "ca", True)
        cluster_barrier(kube)
        before = State.listed(kube)
        start = current_rv(kube)
        for kind, name in A_GOING:
            delete_claim(kube, kind, name)
        for kind, name in A_NEW:
            _create(kube, kind, name, "ca", _how(name))
        # Created after ca's claims, in the same watch streams: once they are served, the shared
        # pool has been worked on with ca's new and deleted claims in view.
        b_new = [("IPClaim", "b-ipc-1"), ("IPAddressClaim", "b-spec-1"), ("IPAddressClaim", "b-label-1"),
                 ("IPClaim", "nobody-1")]
        for kind, name in b_new:
            _create(kube, kind, name, None if name.startswith("nobody") else "cb", _how(name))
        kube.bound("b-ipc-1")
        kube.bound("nobody-1")
        kube.capi_bound("b-spec-1")
        kube.capi_bound("b-label-1")
        paused = set(A_NEW + A_GOING + A_KEPT)

        def touched_now() -> list[str]:
            now = State.listed(kube)
            found = [f"{kind} {name} was written: status {now.objects[kind][name].get('status')}, finalizers "
                     f"{now.objects[kind][name]['metadata'].get('finalizers')}"
                     for kind, name in A_NEW if now.objects[kind][name].get("status")
                     or now.objects[kind][name]["metadata"].get("finalizers")]
            found += [f"{kind} {name} was released" for kind, name in A_GOING if name not in now.objects[kind]]
            held_before, held_now = before.holdings(), now.holdings()
            found += [f"{kind} {name} held {dict(held_before.get((kind, name), {}))}, now "
                      f"{dict(held_now.get((kind, name), {}))}" for kind, name in A_NEW + A_GOING + A_KEPT
                      if held_now.get((kind, name)) != held_before.get((kind, name))]
            return found

        # A bounded quiet window: ca's objects are looked at until its deadline, and every write
        # recorded meanwhile is checked afterwards (a write undone before a look is seen too).
        deadline = time.monotonic() + 2.0
        while True:
            found = touched_now()
            if found or time.monotonic() >= deadline:
                break
            time.sleep(0.2)
        recorder.drain(kube)
        window = [e for e in recorder.ordered() if e.rv > start]
        found += _touched(window, before, paused, set(A_NEW))
        assert not found, "claims of the paused Cluster ca were worked on:\n" + "\n".join(found)

        pause(kube, "ca", False)
        going = before.holdings()
        for kind, name in A_GOING:
            claim_gone(kube, kind, name)
        for kind, name in A_GOING:
            for names in going[(kind, name)].values():
                for resource, address in names:
                    # That object: a claim of ca's new ones may take the freed IP, and its lock the name.
                    kube.gone(METAL3 if resource == "addresses" else CAPI, "ipaddresses", address,
                              uid=before.objects[resource][address]["metadata"]["uid"])
        state = wait_converged(kube, expect_errors=set())
        assert all(ips_by_name(state, {name for _, name in A_NEW}).values())

        # A claim of a Cluster that is gone (paused, then deleted) and one whose Cluster never existed
        # are still released on deletion (the latter waits for its Cluster, holding nothing).
        kube.cluster("cd")
        ghosts = {"ghost-ipc", "ghost-spec-0"}
        for kind, name, cluster in (("IPClaim", "d-ipc", "cd"), ("IPAddressClaim", "d-spec-0", "cd"),
                                    ("IPClaim", "ghost-ipc", "ghost"), ("IPAddressClaim", "ghost-spec-0", "ghost")):
            _create(kube, kind, name, cluster, _how(name))
        wait_converged(kube, expect_errors=ghosts, error_reasons={"WaitingForCluster"})
        pause(kube, "cd", True)
        cluster_barrier(kube)
        kube.delete(CLUSTER, "clusters", "cd")
        kube.gone(CLUSTER, "clusters", "cd")
        for kind, name in (("IPClaim", "d-ipc"), ("IPAddressClaim", "d-spec-0"), ("IPClaim", "ghost-ipc"),
                           ("IPAddressClaim", "ghost-spec-0")):
            delete_claim(kube, kind, name)
            claim_gone(kube, kind, name)
        wait_converged(kube, expect_errors=set())
        recorder.drain(kube)
    findings = recorder.replay(claims_keep_their_ips())
    assert not findings, "at some moment:\n" + "\n".join(findings[:40])


# --------------------------------------------------------------------------- item 3: overlap


def _create_many(kube: Kube, claims: list[tuple[str, str, str]]) -> None:
    def make(c):
        kind, name, pool = c
        if kind == "IPClaim":
            kube.claim(name, pool)
        else:
            capi_claim(kube, name, pool)

    with ThreadPoolExecutor(6) as ex:
        list(ex.map(make, claims))


def _pools_in_order(kube: Kube, first: str, second: str) -> None:
    """``first`` is the earlier pool (creationTimestamp, then name), and the controller has seen both:
    it reconciled the second (pools reach it in the order they were written) before any claim comes."""
    a, b = kube.ippool(first), kube.ippool(second)
    assert (a["metadata"]["creationTimestamp"], first) < (b["metadata"]["creationTimestamp"], second)
    eventually(lambda: all((kube.ippool(p).get("status") or {}).get("capacity") for p in (first, second)),
               timeout=30, what=f"the controller to reconcile pools {first} and {second}")


def _served_ips(state: State, names: set[str]) -> set[str]:
    return {a for a in ips_by_name(state, names).values() if a}


def test_overlapping_pools_with_different_prefixes(controller, kube, control_plane):
    """Two pools of one namespace, different namePrefix, ranges .10-.19 and .15-.24, 12 claims on each
    at once: no IP is ever bound to two live claims. The later pool holds the overlap back and says
    so (condition Overlapping and a Warning Event naming the other pool and the range); the earlier
    pool serves all of its range."""
    with NamespaceRecorder(control_plane, kube.ns) as recorder:
        kube.pool("early", namePrefix="early", pools=[{"start": "10.180.0.10", "end": "10.180.0.19"}], prefix=24)
        kube.pool("late", namePrefix="late", pools=[{"start": "10.180.0.15", "end": "10.180.0.24"}], prefix=24)
        _pools_in_order(kube, "early", "late")
        claims = []
        for i in range(12):
            kind = "IPAddressClaim" if i % 3 == 0 else "IPClaim"
            claims += [(kind, f"e-{i}", "early"), (kind, f"l-{i}", "late")]
        _create_many(kube, claims)
        state = wait_converged(kube, timeout=90, error_reasons=None)
        early = _served_ips(state, {n for _, n, p in claims if p == "early"})
        late = _served_ips(state, {n for _, n, p in claims if p == "late"})
        assert early == ip_range("10.180.0.10", "10.180.0.19"), sorted(early)
        assert late == ip_range("10.180.0.20", "10.180.0.24"), sorted(late)

        cond = condition(kube.ippool("late"), "Overlapping")
        assert cond and cond["status"] == "True", cond
        assert "overlap" in cond["reason"].lower(), cond
        assert "early" in cond["message"] and "10.180.0.15" in cond["message"] and "10.180.0.19" in cond["message"], \
            cond
        assert (condition(kube.ippool("early"), "Overlapping") or {}).get("status") != "True"

        def warning():
            return [e for e in kube.events() if e.involved_object.name == "late" and e.involved_object.kind == "IPPool"
                    and e.type == "Warning" and "overlap" in (e.reason or "").lower() and "early" in (e.message or "")]

        eventually(warning, timeout=30, what="a Warning Event on pool late about the overlap with early")
        recorder.drain(kube)
    findings = recorder.replay(claims_keep_their_ips())
    assert not findings, "at some moment:\n" + "\n".join(findings[:40])


def test_addresses_of_another_pool_are_never_handed_out(controller, kube, control_plane):
    """State left by the Go controller: pool b (later, prefix pb) holds 10.190.0.4 (an IPClaim's Metal3
    IPAddress) and 10.190.0.5 (an IPAddressClaim's Cluster API IPAddress only), inside the range of
    pool a (earlier, prefix pa). Pool a never hands them out, even filled to the edge; b's claims
    keep them."""
    with NamespaceRecorder(control_plane, kube.ns) as recorder:
        kube.pool("a", namePrefix="pa", pools=[{"start": "10.190.0.1", "end": "10.190.0.6"}], prefix=24)
        kube.pool("b", namePrefix="pb", pools=[{"start": "10.190.0.4", "end": "10.190.0.9"}], prefix=24)
        _pools_in_order(kube, "a", "b")
        # The holders are paused while their Go-shaped addresses are written, so that this controller
        # finds them as the Go controller left them.
        kube.claim("b-holder", "b", annotations={PAUSED: ""})
        capi_claim(kube, "b-capi-holder", "b", annotations={PAUSED: ""})
        go = GoIpam(kube)
        go.serve("IPClaim", "b-holder", Grant("10.190.0.4", 24, None, []))
        go.serve("IPAddressClaim", "b-capi-holder", Grant("10.190.0.5", 24, None, []))
        kube.patch(METAL3, "ipclaims", "b-holder", {"metadata": {"annotations": {PAUSED: None}}})
        kube.custom.patch_namespaced_custom_object(*CAPI, kube.ns, "ipaddressclaims", "b-capi-holder",
                                                   {"metadata": {"annotations": {PAUSED: None}}})
        # The controller has taken the holders in (pool a's claims come after, in other watch streams).
        eventually(lambda: (condition(kube.ipclaim("b-holder"), "Ready") or {}).get("status") == "True"
                   and any(a["spec"]["claim"].get("kind") == "IPAddressClaim"
                           and a["spec"]["claim"]["name"] == "b-capi-holder" for a in kube.addresses()),
                   timeout=30, what="the holders to be taken over")

        claims = [("IPAddressClaim" if i % 2 else "IPClaim", f"a-{i}", "a") for i in range(8)] + \
                 [("IPAddressClaim" if i % 2 else "IPClaim", f"b-{i}", "b") for i in range(6)]
        _create_many(kube, claims)
        state = wait_converged(kube, timeout=90, error_reasons=None)
        problems = adoption_problems(state, go.served)
        assert not problems, "\n".join(problems)
        assert _served_ips(state, {n for _, n, p in claims if p == "a"}) == \
            {"10.190.0.1", "10.190.0.2", "10.190.0.3", "10.190.0.6"}
        assert _served_ips(state, {n for _, n, p in claims if p == "b"}) == {"10.190.0.7", "10.190.0.8", "10.190.0.9"}
        recorder.drain(kube)
    findings = recorder.replay(claims_keep_their_ips())
    assert not findings, "at some moment:\n" + "\n".join(findings[:40])


def test_a_claim_waits_for_its_cluster_and_says_so_then_is_served_once_it_exists(controller, kube):
    """A claim labelled with a Cluster that does not exist (yet) gets no address: its Ready condition
    says it waits for that Cluster, with no errorMessage and no Warning Event; a pool whose
    spec.clusterName names no Cluster says the same. Once the Cluster is created, both are served."""
    kube.pool("shared", pools=[{"start": "10.175.0.10", "end": "10.175.0.19"}], prefix=24)
    kube.pool("own", clusterName="later", pools=[{"start": "10.176.0.10", "end": "10.176.0.19"}], prefix=24)
    kube.claim("labelled", "shared", labels={CLUSTER_NAME_LABEL: "later"})
    kube.claim("of-own-pool", "own")
    kube.claim("nobody", "shared")
    kube.bound("nobody")  # created last, in the same stream: the others have been looked at

    def waiting(obj: dict | None) -> dict | None:
        ready = condition(obj, "Ready")
        return ready if ready and ready["reason"] == "WaitingForCluster" else None

    for name in ("labelled", "of-own-pool"):
        ready = eventually(lambda: waiting(kube.ipclaim(name)), timeout=30, what=f"{name} to say it waits")
        assert ready["status"] == "False" and f"Cluster {kube.ns}/later not found" in ready["message"], ready
        assert "errorMessage" not in kube.ipclaim(name)["status"]
    ready = eventually(lambda: waiting(kube.ippool("own")), timeout=30, what="pool own to say it waits")
    assert "spec.clusterName" in ready["message"], ready
    assert {a["spec"]["claim"]["name"] for a in kube.addresses()} == {"nobody"}
    assert not [e for e in kube.events() if e.type == "Warning"], [e.message for e in kube.events()]

    kube.cluster("later")
    taken = kube.bound("nobody")["spec"]["address"]
    assert kube.bound("labelled")["spec"]["address"] not in (taken, None)
    assert kube.bound("of-own-pool")["spec"]["address"].startswith("10.176.0.")
    eventually(lambda: (condition(kube.ippool("own"), "Ready") or {}).get("status") == "True",
               timeout=30, what="pool own to be Ready")
