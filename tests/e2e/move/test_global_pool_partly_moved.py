"""``clusterctl move`` of only some of the Clusters of a global pool, there and back (SPEC §7, §10 invariant 1).

Management cluster A serves ``GlobalInClusterIPPool`` ``split`` to two Clusters of two namespaces: ``stays/keep``
and ``moves/go``. B has a pool of that name already, serving a Cluster of its own (``local/here``). The real
clusterctl moves namespace ``moves`` to B: the pool is now one in each management cluster, each unaware of the
other's claims. Both say so: A's pool ``ClaimsElsewhere`` (``ClaimsMovedAway``) and B's (``ClaimsMovedIn``), each
naming ``moves/go``, with one Warning Event each. B's own claims hold IPs the moved ones arrive with: those are
told (``AddressConflict``), never bound twice. New hosts of ``go`` are served in B, from IPs B thinks free (some
held in A by ``keep``), then the namespace moves back: in A no IP is bound twice, every moved-back claim carries
its Ready condition (bound, or told why not), the pool counts what it holds, no owner reference dangles, A's
condition is gone (``go`` is bound here again) and B's now says ``go`` moved away.
"""

from __future__ import annotations

import ipaddress

from controller_fixtures import CLUSTER, CLUSTER_NAME_LABEL, condition, free_port
from move_fixtures import INFRA, MOVE_TIMEOUT, owner_ref, report
from move_fixtures import dangling_owner_references as owners_missing
from webhook_fixtures import convert_at, converted_crds, register_webhooks
from metal3_ipam.core.objects import is_guard
from metal3_ipam.testing import go_incluster as gi
from metal3_ipam.testing.certs import Authority
from metal3_ipam.testing.clusterctl import mark_clusters_provisioned, prepare_management_cluster
from metal3_ipam.testing.locks import held_locks
from metal3_ipam.testing.waiting import eventually

LOCK_NAMESPACE = "metal3-ipam-system"
GV = (gi.GROUP, gi.CAPI_VERSION)
POOL_GV = (gi.GROUP, gi.POOL_VERSION)
POOL = "split"
STAYS, MOVES, LOCAL = ("stays", "keep"), ("moves", "go"), ("local", "here")
HOSTS = 4
TIMEOUT = 120.0


class Side:
    """One management cluster with a controller serving its webhooks."""

    def __init__(self, name: str, cp, controllers, tmp_path) -> None:
        from kubernetes import client

        prepare_management_cluster(cp)
        cert_dir = tmp_path / f"certs-{name}"
        authority = Authority.create()
        authority.issue(cert_dir, hosts=("127.0.0.1",))
        port = free_port()
        self.controller = controllers(cp, name, ("-A", "--lock-namespace", LOCK_NAMESPACE,
                                                 "--leader-election-namespace", LOCK_NAMESPACE,
                                                 "--webhook-port", str(port), "--webhook-cert-dir", str(cert_dir)))
        with cp.api_client() as api:
            register_webhooks(api, port, authority.pem)
            convert_at(api, converted_crds(), port, authority.pem)
        self.name, self.cp, self.api = name, cp, cp.api_client()
        self.custom, self.core = client.CustomObjectsApi(self.api), client.CoreV1Api(self.api)
        self.custom.create_cluster_custom_object(*POOL_GV, "globalinclusterippools", gi.ip_pool(
            POOL, addresses=["10.62.0.10-10.62.0.60"], prefix=24, gateway="10.62.0.1"))

    def pool(self) -> dict:
        return self.custom.get_cluster_custom_object(*POOL_GV, "globalinclusterippools", POOL)

    def list(self, gv, plural: str, namespace: str) -> list[dict]:
        return self.custom.list_namespaced_custom_object(*gv, namespace, plural)["items"]

    def claims(self) -> list[dict]:
        return self.custom.list_cluster_custom_object(*GV, "ipaddressclaims")["items"]

    def addresses(self) -> list[dict]:
        return [a for a in self.custom.list_cluster_custom_object(*GV, "ipaddresses")["items"]
                if a["spec"]["poolRef"]["name"] == POOL]

    def cluster(self, where: tuple[str, str]) -> None:
        from kubernetes import client

        self.core.create_namespace(client.V1Namespace(metadata=client.V1ObjectMeta(name=where[0])))
        self.custom.create_namespaced_custom_object(*CLUSTER, where[0], "clusters", {
            "apiVersion": "/".join(CLUSTER), "kind": "Cluster", "metadata": {"name": where[1]}, "spec": {}})
        mark_clusters_provisioned(self.api, where[0])

    def hosts(self, where: tuple[str, str], tag: str, count: int) -> None:
        """Per host, an infrastructure machine owned by the Cluster owning one claim of the pool, labelled with
        the Cluster (clusterctl moves what the Cluster's tree owns)."""
        namespace, cluster_name = where
        (cluster,) = [c for c in self.list(CLUSTER, "clusters", namespace) if c["metadata"]["name"] == cluster_name]
        for index in range(count):
            data = self.custom.create_namespaced_custom_object(*INFRA, namespace, "metal3datas", {
                "apiVersion": "/".join(INFRA), "kind": "Metal3Data",
                "metadata": {"name": f"{cluster_name}-{tag}{index}", "labels": {CLUSTER_NAME_LABEL: cluster_name},
                             "ownerReferences": [owner_ref(cluster, controller=True)]},
                "spec": {"index": index}})
            body = gi.claim(f"{cluster_name}-{tag}{index}", namespace, gi.GLOBAL_IN_CLUSTER_IP_POOL, POOL,
                            labels={CLUSTER_NAME_LABEL: cluster_name})
            body["metadata"]["ownerReferences"] = [owner_ref(data, controller=True)]
            self.custom.create_namespaced_custom_object(*GV, namespace, "ipaddressclaims", body)

    def warnings(self, reason: str) -> list:
        return [e for e in self.core.list_namespaced_event("default").items
                if e.involved_object.name == POOL and e.reason == reason and e.type == "Warning"]


def told(claim: dict) -> dict | None:
    """The claim's Ready condition once it says something: bound, or why not."""
    ready = condition(claim, "Ready")
    return ready if ready and (ready["status"] == "True" or ready.get("reason") == "AddressConflict") else None


def settled(side: Side, expected: int) -> dict[str, str]:
    """Every claim of the pool told (bound, or AddressConflict); no IP bound twice; the pool counting the IPs
    bound, each under a lock; no owner reference naming nothing. Returns claim -> IP of those bound."""
    claims = side.claims()
    assert len(claims) == expected, f"{side.name}: {len(claims)} claims, expected {expected}"
    silent = [f"{c['metadata']['namespace']}/{c['metadata']['name']}" for c in claims if told(c) is None]
    assert not silent, f"{side.name}: claims with no word: {silent}"
    addresses = {(a["metadata"]["namespace"], a["metadata"]["name"]): a for a in side.addresses()}
    bound: dict[str, str] = {}
    for c in claims:
        if condition(c, "Ready")["status"] == "True":
            name = (c["metadata"]["namespace"], (c.get("status") or {}).get("addressRef", {}).get("name"))
            bound[f"{name[0]}/{c['metadata']['name']}"] = addresses[name]["spec"]["address"]
    ips = sorted(ipaddress.ip_address(ip) for ip in bound.values())
    assert len(ips) == len(set(ips)), f"{side.name}: an IP bound twice: {sorted(bound.items(), key=lambda x: x[1])}"
    counts = (side.pool().get("status") or {}).get("ipAddresses") or {}
    locks = [a for a in held_locks(side.api, LOCK_NAMESPACE)
             if a["metadata"]["namespace"] == LOCK_NAMESPACE and a["spec"]["pool"]["name"] == POOL
             and not is_guard(a)]
    assert counts.get("used") == len(bound) == len(locks), \
        f"{side.name}: the pool counts {counts}, {len(bound)} claims bound, {len(locks)} locks"
    objects = [x for namespace in (STAYS[0], MOVES[0], LOCAL[0])
               for gv, plural in ((CLUSTER, "clusters"), (INFRA, "metal3datas"), (GV, "ipaddressclaims"),
                                  (GV, "ipaddresses"))
               for x in side.list(gv, plural, namespace)]
    dangling = owners_missing(objects, [side.pool()])
    assert not dangling, f"{side.name}: owner references naming nothing: {dangling[:10]}"
    return bound


def claims_elsewhere(side: Side, reason: str | None) -> dict:
    """The pool's ClaimsElsewhere condition, of that reason and naming the moved Cluster ({}: absent, as
    wanted with no reason)."""
    said = condition(side.pool(), "ClaimsElsewhere")
    if reason is None:
        assert said is None, f"{side.name}: {said}"
        return {}
    assert said is not None and said["status"] == "True" and said["reason"] == reason, \
        f"{side.name}: {said}; pool uid {side.pool()['metadata']['uid']}; " + "; ".join(
            f"{a['metadata']['namespace']}/{a['metadata']['name']} {a['metadata'].get('ownerReferences')}"
            for a in side.addresses())
    assert f"[{MOVES[0]}/{MOVES[1]}]" in said["message"], said
    return said


def test_a_global_pool_partly_moved_says_so_in_both_clusters_and_moving_back_binds_no_ip_twice(
        control_plane_factory, controllers, clusterctl, tmp_path):
    a = Side("A", control_plane_factory(), controllers, tmp_path)
    for where in (STAYS, MOVES):
        a.cluster(where)
        a.hosts(where, "h", HOSTS)
    first = eventually(lambda: settled(a, 2 * HOSTS), timeout=TIMEOUT, what="every claim served in A")
    b = Side("B", control_plane_factory(), controllers, tmp_path)
    b.cluster(LOCAL)
    b.hosts(LOCAL, "h", 2)
    own = eventually(lambda: settled(b, 2), timeout=TIMEOUT, what="B's own claims served")
    assert condition(a.pool(), "ClaimsElsewhere") is None and condition(b.pool(), "ClaimsElsewhere") is None

    run = clusterctl.start_move(a.cp, b.cp, MOVES[0]).wait(MOVE_TIMEOUT, stop_on_retry=True).check()
    report(f"moved {MOVES[0]} A -> B in {run.seconds:.1f} s")
    eventually(lambda: settled(b, 2 + HOSTS), timeout=TIMEOUT, what="every claim of B told")
    eventually(lambda: settled(a, HOSTS), timeout=TIMEOUT, what="A left with the claims that stay")
    eventually(lambda: claims_elsewhere(a, "ClaimsMovedAway"), timeout=TIMEOUT, what="A's pool says claims left")
    eventually(lambda: claims_elsewhere(b, "ClaimsMovedIn"), timeout=TIMEOUT, what="B's pool says claims came")
    # A moved claim whose IP one of B's own claims holds is told, and only such a one.
    conflicts = sorted(f"{c['metadata']['namespace']}/{c['metadata']['name']}" for c in b.claims()
                       if condition(c, "Ready")["status"] == "False")
    expected = sorted(name for name, ip in first.items() if name.startswith(f"{MOVES[0]}/") and ip in own.values())
    assert conflicts == expected, (conflicts, expected, own)
    assert len(a.warnings("ClaimsMovedAway")) == 1 and len(b.warnings("ClaimsMovedIn")) == 1

    # B hands out IPs that A's staying claims hold: it knows nothing of them.
    b.hosts(MOVES, "new", 2)
    eventually(lambda: settled(b, 4 + HOSTS), timeout=TIMEOUT, what="the new hosts of go served in B")

    mark_clusters_provisioned(b.api, MOVES[0])
    run = clusterctl.start_move(b.cp, a.cp, MOVES[0]).wait(MOVE_TIMEOUT, stop_on_retry=True).check()
    report(f"moved {MOVES[0]} B -> A in {run.seconds:.1f} s")
    bound = eventually(lambda: settled(a, 2 * HOSTS + 2), timeout=TIMEOUT, what="every claim of A told")
    report(f"A after moving back: {len(bound)} of {2 * HOSTS + 2} claims bound")
    assert all(f"{STAYS[0]}/{STAYS[1]}-h{i}" in bound for i in range(HOSTS)), bound  # those that stayed keep theirs
    eventually(lambda: settled(b, 2), timeout=TIMEOUT, what="B left with its own claims")
    eventually(lambda: claims_elsewhere(a, None) == {}, timeout=TIMEOUT, what="A's pool condition gone")
    eventually(lambda: claims_elsewhere(b, "ClaimsMovedAway"), timeout=TIMEOUT, what="B's pool says claims left")
    assert len(a.warnings("ClaimsMovedAway")) == 1 and len(b.warnings("ClaimsMovedAway")) == 1
