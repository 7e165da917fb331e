"""``clusterctl move`` of the in-cluster provider's pools, both ways (SPEC §7, §10 invariant 4).

The real clusterctl moves a namespace between two live control planes, a controller on each with
its admission webhooks registered (so clusterctl's deletions in the source pass the pool delete
webhook). In the source: a Cluster, a namespaced ``InClusterIPPool`` and a cluster-scoped
``GlobalInClusterIPPool``, and for each of ``$METAL3_IPAM_INCLUSTER_MOVE_MACHINES`` (default 30)
hosts one claim of each pool, owned as Cluster API owns them (Cluster -> infrastructure machine ->
claim), all served.

What clusterctl does with these kinds (cmd/clusterctl/client/cluster/objectgraph.go, mover.go): it
considers the CRDs labelled ``clusterctl.cluster.x-k8s.io``; a CRD labelled
``clusterctl.cluster.x-k8s.io/move-hierarchy`` has every object moved with what it owns, as the
in-cluster provider labels its pool CRDs. A namespaced pool and its claims' IPAddresses (owned by claim
and pool) move and are deleted in the source. A global pool is listed whatever the
namespace, created in the target unless it is there already, and never deleted from the source;
what it owns (its IPAddresses) is copied but never deleted from the source either. The locks of both
pools' IPs (``<pool>.<ip>.ip`` and ``<pool>.<ip>.gip``) are Leases of the controller's lock namespace,
not in the moved namespace; where Metal3 IPAddresses are served, each is also one of those of its name
(its twin), and the namespaced pool's twins (in its namespace, owned by claim and pool) move and are
deleted in the source. The target makes the global pool's locks anew for the IPAddresses that arrive.

After each move: every claim has the IP it had (the full claim -> IP map, every IPAddress's spec),
the locks of both pools are in the target's lock namespace at the same IPs (the namespaced pool's
given Leases as they arrive, the global pool's rebuilt), the target created no Cluster API IPAddress
and deleted nothing,
the pools' counts are rebuilt, owner references name the target's objects; in the source, nothing
of the namespace is left, nothing was handed out during the move, and the global pool (still
there) holds no lock of a moved IP. New claims in the target collide with no moved IP.

Run with ``-s`` to see what each step measured.
"""

from __future__ import annotations

import os
import time
from concurrent.futures import ThreadPoolExecutor
from collections.abc import Callable
from dataclasses import dataclass, field

from controller_fixtures import CLUSTER, CLUSTER_NAME_LABEL, METAL3, ControllerProcess, condition, free_port, ip_key
from move_fixtures import INFRA, MOVE_TIMEOUT, diff, owner_ref, planned_writes, report
from move_fixtures import dangling_owner_references as owners_missing
from webhook_fixtures import convert_at, converted_crds, register_webhooks
from metal3_ipam.core.objects import is_guard as _is_guard
from metal3_ipam.testing.locks import lease_locks, metal3_locks
from metal3_ipam.testing import controlplane as cp_mod
from metal3_ipam.testing import go_incluster as gi
from metal3_ipam.testing.certs import Authority
from metal3_ipam.testing.clusterctl import (Clusterctl, mark_clusters_provisioned,
                                            prepare_management_cluster)
from metal3_ipam.testing.waiting import eventually

MACHINES = int(os.environ.get("METAL3_IPAM_INCLUSTER_MOVE_MACHINES", "30"))
LOCK_NAMESPACE = "metal3-ipam-system"  # the controller's own, as installed
GROUP_VERSION = (gi.GROUP, gi.CAPI_VERSION)
POOL_GROUP_VERSION = (gi.GROUP, gi.POOL_VERSION)
CLUSTER_NAME = "delta"
POOL = "net"  # the namespaced InClusterIPPool
REBUILD_TIMEOUT = 120.0

# What the move carries of the namespace, in creation order: (group, version), plural, kind.
MOVED_KINDS = (
    (CLUSTER, "clusters", "Cluster"),
    (INFRA, "metal3datas", "Metal3Data"),
    (POOL_GROUP_VERSION, "inclusterippools", "InClusterIPPool"),
    (GROUP_VERSION, "ipaddressclaims", "IPAddressClaim"),
    (GROUP_VERSION, "ipaddresses", "IPAddress.ipam.cluster.x-k8s.io"),
    (METAL3, "ipaddresses", "IPAddress"),
)


# --------------------------------------------------------------------------- one management cluster


@dataclass
class Side:
    """One management cluster: its control plane, the controller on it, the global pool's name."""

    name: str
    cp: cp_mod.ControlPlane
    controller: ControllerProcess
    namespace: str
    global_pool: str

    def __post_init__(self) -> None:
        from kubernetes import client

        self.api = self.cp.api_client()
        self.custom = client.CustomObjectsApi(self.api)

    def list(self, gv: tuple[str, str], plural: str, namespace: str | None = None) -> list[dict]:
        return self.custom.list_namespaced_custom_object(*gv, namespace or self.namespace, plural)["items"]

    def create(self, gv: tuple[str, str], plural: str, body: dict) -> dict:
        return self.custom.create_namespaced_custom_object(*gv, self.namespace, plural, body)

    def global_pool_object(self) -> dict | None:
        from kubernetes.client.rest import ApiException

        try:
            return self.custom.get_cluster_custom_object(*POOL_GROUP_VERSION, "globalinclusterippools",
                                                        self.global_pool)
        except ApiException as err:
            if err.status == 404:
                return None
            raise

    def global_locks(self, namespace: str | None = None) -> dict[str, dict]:
        """The locks of the global pool's IPs in the lock namespace held for claims of ``namespace`` (default:
        the moved one): name -> spec."""
        return {a["metadata"]["name"]: a["spec"] for a in lease_locks(self.api, LOCK_NAMESPACE)
                if (a["spec"].get("pool") or {}).get("name") == self.global_pool and not _is_guard(a)
                and a["spec"]["claim"].get("namespace") == (namespace or self.namespace)}

    def global_lock_twins(self, namespace: str | None = None) -> list[str]:
        """The names of the Metal3 IPAddresses of the lock namespace standing for locks of the global pool's IPs
        held for claims of ``namespace`` (default: the moved one): a lock's twin, which goes after its Lease."""
        return sorted(a["metadata"]["name"] for a in metal3_locks(self.api)
                      if a["metadata"]["namespace"] == LOCK_NAMESPACE and not _is_guard(a)
                      and ((a.get("spec") or {}).get("pool") or {}).get("name") == self.global_pool
                      and ((a.get("spec") or {}).get("claim") or {}).get("namespace") == (namespace or self.namespace))

    def locks(self) -> dict[str, dict]:
        """The locks of the namespaced pool's IPs (Leases of the lock namespace): name -> spec."""
        return {a["metadata"]["name"]: a["spec"] for a in lease_locks(self.api, LOCK_NAMESPACE)
                if a["metadata"]["namespace"] == self.namespace and not _is_guard(a)
                and (a["spec"].get("pool") or {}).get("name") == POOL}

    def ours(self, pool: str) -> bool:
        """Whether a pool key the controller logs ("<namespace>/<name>") is one of this test's."""
        return pool in (f"{self.namespace}/{POOL}", f"/{self.global_pool}")


def start_side(name: str, cp: cp_mod.ControlPlane, controllers, tmp_path, namespace: str, global_pool: str) -> Side:
    """Management cluster CRDs and inventory, a controller serving its webhooks, the webhooks registered."""
    prepare_management_cluster(cp)
    cert_dir = tmp_path / f"certs-{name}"
    authority = Authority.create()
    authority.issue(cert_dir, hosts=("127.0.0.1",))
    port = free_port()
    controller = controllers(cp, name, ("-A", "--lock-namespace", LOCK_NAMESPACE, "--leader-election-namespace",
                                        LOCK_NAMESPACE, "--webhook-port", str(port), "--webhook-cert-dir",
                                        str(cert_dir)))
    with cp.api_client() as api:
        register_webhooks(api, port, authority.pem)
        convert_at(api, converted_crds(), port, authority.pem)
    return Side(name, cp, controller, namespace, global_pool)


# --------------------------------------------------------------------------- the scene


def claim_names(index: int, tag: str = "m") -> dict[str, str]:
    """A host's claims: pool kind -> claim name."""
    host = f"{CLUSTER_NAME}-{tag}{index:03d}"
    return {gi.IN_CLUSTER_IP_POOL: f"{host}-net", gi.GLOBAL_IN_CLUSTER_IP_POOL: f"{host}-shared"}


def create_pools(side: Side) -> None:
    side.create(POOL_GROUP_VERSION, "inclusterippools",
                gi.ip_pool(POOL, namespace=side.namespace, addresses=["10.60.0.0/24"], prefix=24, gateway="10.60.0.1"))
    side.custom.create_cluster_custom_object(*POOL_GROUP_VERSION, "globalinclusterippools", gi.ip_pool(
        side.global_pool, addresses=["10.61.0.10-10.61.0.250"], prefix=24, gateway="10.61.0.1",
        excluded=["10.61.0.20-10.61.0.29"]))


def create_hosts(side: Side, indexes: range, tag: str = "m") -> None:
    """Per host, an infrastructure machine owned by the Cluster, owning one claim of each pool (labelled with
    the Cluster, as Cluster API's providers create them; every other one names it in spec.clusterName too)."""
    (cluster,) = [c for c in side.list(CLUSTER, "clusters") if c["metadata"]["name"] == CLUSTER_NAME]

    def one(index: int) -> None:
        data = side.create(INFRA, "metal3datas", {
            "apiVersion": "/".join(INFRA), "kind": "Metal3Data",
            "metadata": {"name": f"{CLUSTER_NAME}-{tag}{index:03d}", "labels": {CLUSTER_NAME_LABEL: CLUSTER_NAME},
                         "ownerReferences": [owner_ref(cluster, controller=True)]},
            "spec": {"index": index},
        })
        for kind, name in claim_names(index, tag).items():
            pool = POOL if kind == gi.IN_CLUSTER_IP_POOL else side.global_pool
            body = gi.claim(name, side.namespace, kind, pool, labels={CLUSTER_NAME_LABEL: CLUSTER_NAME},
                            cluster_name=CLUSTER_NAME if index % 2 else None)
            body["metadata"]["ownerReferences"] = [owner_ref(data, controller=True)]
            side.create(GROUP_VERSION, "ipaddressclaims", body)

    with ThreadPoolExecutor(max_workers=8) as pool:
        list(pool.map(one, indexes))


# --------------------------------------------------------------------------- what is compared


@dataclass
class State:
    """The IPAM facts of the namespace (and of the global pool) that a move must carry unchanged."""

    claims: dict[str, str | None]        # claim -> IP of the IPAddress its Ready status names
    addresses: dict[str, dict]           # Cluster API IPAddress -> spec
    locks: dict[str, dict]               # the namespaced pool's locks in the namespace -> spec
    global_locks: dict[str, str]         # the global pool's locks in the lock namespace -> "IP claim-namespace/claim"
    counts: dict[str, dict | None]       # pool kind -> status.ipAddresses
    objects: dict[str, int] = field(default_factory=dict)
    owners: dict[str, list] = field(default_factory=dict)  # Cluster API IPAddress -> its owner references, less uids

    @property
    def total(self) -> int:
        return sum(self.objects.values())


def read_state(side: Side) -> State:
    listed = {kind: side.list(gv, plural) for gv, plural, kind in MOVED_KINDS}
    addresses = {a["metadata"]["name"]: a for a in listed["IPAddress.ipam.cluster.x-k8s.io"]}
    claims: dict[str, str | None] = {}
    for c in listed["IPAddressClaim"]:
        ref = (c.get("status") or {}).get("addressRef") or {}
        ready = (condition(c, "Ready") or {}).get("status") == "True"
        name = c["metadata"]["name"]
        claims[name] = addresses[name]["spec"]["address"] if ready and ref.get("name") == name \
            and name in addresses else None
    pools = {p["metadata"]["name"]: p for p in listed["InClusterIPPool"]}
    counts = {gi.IN_CLUSTER_IP_POOL: ((pools.get(POOL) or {}).get("status") or {}).get("ipAddresses"),
              gi.GLOBAL_IN_CLUSTER_IP_POOL: ((side.global_pool_object() or {}).get("status") or {}).get("ipAddresses")}
    global_locks = {name: f"{spec['address']} {spec['claim'].get('namespace')}/{spec['claim']['name']}"
                    for name, spec in side.global_locks().items()}
    # A move gives owners new uids, and clusterctl writes the references in an order of its own (from a Go map);
    # every other field of each reference stays (blockOwnerDeletion too, also where the controller repaired a uid).
    owners = {n: sorted(({k: v for k, v in r.items() if k != "uid"}
                         for r in a["metadata"].get("ownerReferences") or []),
                        key=lambda r: (r.get("kind", ""), r.get("name", "")))
              for n, a in addresses.items()}
    return State(claims, {n: a["spec"] for n, a in addresses.items()},
                 side.locks(), global_locks,
                 counts,
                 {kind: len(items) for kind, items in listed.items()}, owners)


def assert_same_ipam(before: State, after: State, where: str) -> None:
    problems = (diff("claim", before.claims, after.claims)
                + diff("IPAddress.ipam.cluster.x-k8s.io", before.addresses, after.addresses)
                + diff(f"lock of {POOL}", before.locks, after.locks)
                + diff("lock of the global pool", before.global_locks, after.global_locks)
                + diff("status.ipAddresses of", before.counts, after.counts)
                + diff("objects of kind", before.objects, after.objects)
                + diff("owner references (but uids) of IPAddress.ipam.cluster.x-k8s.io", before.owners, after.owners))
    assert not problems, f"{where}: the move changed IPAM state:\n" + "\n".join(problems)


def served(side: Side, expected_claims: int) -> State:
    """Every claim of the namespace Ready with its IPAddress, the pools' counts those of the addresses."""
    state = read_state(side)
    pending = sorted(n for n, ip in state.claims.items() if ip is None)
    assert len(state.claims) == expected_claims and not pending, \
        f"{len(state.claims)} claims, not served: {pending[:10]}"
    held = {kind: sum(1 for a in state.addresses.values() if a["poolRef"]["kind"] == kind)
            for kind in (gi.IN_CLUSTER_IP_POOL, gi.GLOBAL_IN_CLUSTER_IP_POOL)}
    for kind, used in held.items():
        counts = state.counts[kind] or {}
        assert counts.get("used") == used and counts.get("free") == counts.get("total", 0) - used, \
            f"{kind}: status.ipAddresses {counts}, {used} IPAddresses"
    assert len(state.locks) == held[gi.IN_CLUSTER_IP_POOL] and len(state.global_locks) == held[gi.GLOBAL_IN_CLUSTER_IP_POOL], \
        f"{len(state.locks)} locks of {POOL}, {len(state.global_locks)} of the global pool"
    ips = [ip_key(a["address"]) for a in state.addresses.values() if a["poolRef"]["kind"] == gi.GLOBAL_IN_CLUSTER_IP_POOL]
    assert len(ips) == len(set(ips)), "an IP of the global pool held twice"
    return state


def wait_served(side: Side, expected_claims: int, timeout: float, what: str) -> tuple[State, float]:
    started = time.monotonic()
    state = eventually(lambda: served(side, expected_claims), timeout=timeout, interval=0.25, what=what)
    return state, time.monotonic() - started


def dangling_owner_references(side: Side) -> list[str]:
    """Owner references of the namespace's objects naming no object of that uid there (the global pool included)."""
    pool = side.global_pool_object()
    return owners_missing([o for gv, plural, _ in MOVED_KINDS for o in side.list(gv, plural)], [pool] if pool else [])


def leftovers(side: Side) -> dict[str, list[str]]:
    return {kind: names for gv, plural, kind in MOVED_KINDS
            if (names := sorted(o["metadata"]["name"] for o in side.list(gv, plural)))}


# --------------------------------------------------------------------------- a move, checked


def move(clusterctl: Clusterctl, source: Side, target: Side, expected: State, what: str,
         meanwhile: Callable[[], None] = lambda: None, source_neighbours: int = 0) -> State:
    """clusterctl move source -> target with both controllers running, ``meanwhile`` run as it starts; every
    check of one direction. ``source_neighbours``: the global pool's IPAddresses of other namespaces there."""
    mark_clusters_provisioned(source.api, source.namespace)
    source_offset, target_offset = source.controller.log_size(), target.controller.log_size()
    running = clusterctl.start_move(source.cp, target.cp, source.namespace)
    meanwhile()
    run = running.wait(MOVE_TIMEOUT, stop_on_retry=True).check()
    after, rebuilt = wait_served(target, len(expected.claims), REBUILD_TIMEOUT, f"{what}: every claim served in {target.name}")
    report(f"{what}: {after.total} objects ({after.objects}); clusterctl took {run.seconds:.1f} s; "
           f"served and counted {rebuilt:.1f} s after it ended")
    expected_here = State(expected.claims, expected.addresses, expected.locks,
                          {name.replace(source.global_pool, target.global_pool, 1): lock
                           for name, lock in expected.global_locks.items()}, expected.counts, expected.objects,
                          expected.owners)
    assert_same_ipam(expected_here, after, f"{what} ({target.name})")
    assert not run.retries(), f"{what}: clusterctl had to retry:\n" + "\n".join(run.retries()[:20])

    # The target created no Cluster API IPAddress and deleted nothing: it has both pools' locks in its lock
    # namespace, at the moved IPs, and wrote statuses and metadata.
    writes = planned_writes(target.controller, target_offset, pools=target.ours)
    made = [w for w in writes if w.split(": ", 1)[1].startswith(("create", "Delete"))]
    # The namespaced pool's locks came with the move as Metal3 IPAddresses (the Leases' twins, where that kind is
    # served), and are given their Leases there (no plan writes that); the global pool's are rebuilt.
    locks = [w for w in made if w.split(": ", 1)[1].startswith(f"create IPAddress {LOCK_NAMESPACE}/")
             and w.split(": ", 1)[1].split()[2].endswith(".gip")]
    report(f"{what}: controller on {target.name} planned {len(writes)} writes, {len(locks)} of them locks "
           f"({sorted({w.split(': ', 1)[1].split()[0] for w in writes})})")
    # A lock of the lock namespace deleted before the target made the moved claim's lock of that name is one of
    # the target's own earlier claims (released before the move) its cache still held: cleanup, never a moved IP's.
    # So is a lock of the namespaced pool deleted as the claim incarnation it was held for is gone: one of the
    # target's claims from before an earlier move away (its cache still held the lock, or its twin), never a moved
    # claim, which has a uid of its own here (clusterctl rewrites the owner references of what it creates, the locks
    # it moves included, to the new uids). The delete's guard names that incarnation; one naming a claim of the
    # namespace here, or none, is a fault.
    live_claims = {c["metadata"]["uid"] for c in target.list(GROUP_VERSION, "ipaddressclaims")}
    made_locks: set[str] = set()
    for w in list(made):
        subject, act = w.split(": ", 1)
        words = act.split()
        deletes_subject = words[:3] == ["Delete", *subject.split()]
        if act.startswith(f"create IPAddress {LOCK_NAMESPACE}/"):
            made_locks.add(words[2])
        elif deletes_subject and subject.startswith(f"IPAddress {LOCK_NAMESPACE}/") and words[2] not in made_locks:
            made.remove(w)
        elif deletes_subject and subject.startswith(f"IPAddress {target.namespace}/") \
                and (guard := stale_claim_guard(act)) is not None and guard not in live_claims:
            made.remove(w)
            report(f"{what}: controller on {target.name} let go of a lock of an earlier claim: {act}")
    assert len(locks) == len(after.global_locks) and not set(made) - set(locks), \
        f"{what}: the controller on {target.name} created or deleted:\n" + "\n".join(sorted(set(made) - set(locks))[:30])
    assert not (bad := dangling_owner_references(target)), \
        f"{what}: owner references naming no object of {target.name}:\n" + "\n".join(bad[:20])

    # The source: nothing of the namespace left, and the global pool (clusterctl leaves it) holds no lock of
    # a moved IP and counts none of them; nothing was handed out there meanwhile.
    def source_empty() -> bool:
        left = leftovers(source)
        assert not left, f"left in {source.name}: {left}"
        locks_left = source.global_locks()
        assert not locks_left, f"locks of the global pool left in {source.name}: {sorted(locks_left)}"
        twins_left = source.global_lock_twins()
        assert not twins_left, f"twins of the global pool's locks left in {source.name}: {twins_left}"
        locks_left = source.locks()
        assert not locks_left, f"locks of {POOL} left in {source.name}: {sorted(locks_left)}"
        counts = ((source.global_pool_object() or {}).get("status") or {}).get("ipAddresses") or {}
        assert counts.get("used") == source_neighbours, f"{source.name}: the global pool counts {counts}"
        return True

    eventually(source_empty, timeout=60, what=f"{what}: nothing of the namespace left in {source.name}")
    source_writes = planned_writes(source.controller, source_offset, pools=source.ours)
    created = [w for w in source_writes if w.split(": ", 1)[1].startswith("create")
               and f" {source.namespace}/" in w.split(": ", 1)[0]]
    report(f"{what}: controller on {source.name} planned {len(source_writes)} writes during the move")
    assert not created, f"{what}: the controller on {source.name} handed out addresses to moved claims:\n" \
        + "\n".join(created[:30])
    # clusterctl leaves the global pool's addresses in the source (it deletes nothing a global object owns);
    # the controller there lets each go once its Cluster is gone, and the lock of its IP after it.
    deleted = {w.split(": ", 1)[1].split()[2]: n for n, w in enumerate(source_writes)
               if w.split(": ", 1)[1].startswith("Delete IPAddress")}
    early = [f"{lock} ({held})" for lock, held in expected.global_locks.items()
             if deleted.get(f"{LOCK_NAMESPACE}/{lock}", -1) < deleted.get(held.split()[1], len(source_writes))]
    assert not early, f"{what}: in {source.name}, locks let go before the IPAddress showing their IP: {early[:10]}"
    return after


def stale_claim_guard(act: str) -> str | None:
    """The uid of the claim incarnation a planned delete waits to be gone ("Delete <kind> <ns>/<name> unless
    IPAddressClaim <ns>/<claim> uid <uid> exists"), or None when it names none."""
    words = act.split()
    if len(words) == 9 and words[0] == "Delete" and (words[3], words[4], words[6], words[8]) == \
            ("unless", "IPAddressClaim", "uid", "exists"):
        return words[7]
    return None


def grow(side: Side, state: State, tag: str, hosts: int) -> State:
    """New hosts in ``side``: their claims are served with IPs none of ``state``'s claims holds."""
    create_hosts(side, range(hosts), tag=tag)
    grown, _ = wait_served(side, len(state.claims) + 2 * hosts, 60, f"new claims served in {side.name}")
    fresh = {n: ip for n, ip in grown.claims.items() if n not in state.claims}
    taken = {ip_key(ip) for ip in state.claims.values()}
    assert len(fresh) == 2 * hosts and not [n for n, ip in fresh.items() if ip_key(ip) in taken], \
        f"new claims got moved IPs: {fresh}"
    assert {n: grown.claims[n] for n in state.claims} == state.claims
    return grown


def deletion_refused(side: Side, pool: str) -> str:
    """The message of the delete webhook refusing a dry run of deleting the namespaced pool."""
    from kubernetes.client.rest import ApiException

    try:
        side.custom.delete_namespaced_custom_object(*POOL_GROUP_VERSION, side.namespace, "inclusterippools", pool,
                                                    dry_run="All")
    except ApiException as err:
        assert err.status == 422, err
        return err.body
    raise AssertionError(f"InClusterIPPool {side.namespace}/{pool}, in use, could be deleted")


# --------------------------------------------------------------------------- the test


def test_incluster_pools_move_there_and_back(control_plane_factory, controllers, clusterctl, tmp_path):
    namespace = "incluster-move"
    global_pool = f"{namespace}-shared"
    a = start_side("A", control_plane_factory(), controllers, tmp_path, namespace, global_pool)
    from kubernetes import client

    client.CoreV1Api(a.api).create_namespace(client.V1Namespace(metadata=client.V1ObjectMeta(name=namespace)))
    a.create(CLUSTER, "clusters", {"apiVersion": "/".join(CLUSTER), "kind": "Cluster",
                                   "metadata": {"name": CLUSTER_NAME}, "spec": {}})
    mark_clusters_provisioned(a.api, namespace)
    create_pools(a)
    started = time.monotonic()
    create_hosts(a, range(MACHINES))
    original, _ = wait_served(a, 2 * MACHINES, 120, "every claim served in A")
    report(f"{len(original.claims)} claims on 2 pools served in {time.monotonic() - started:.1f} s")

    # The webhooks are in place: the namespaced pool, in use, is not deleted but for a move.
    refused = deletion_refused(a, POOL)
    assert "Pool has IPAddresses allocated" in refused and "clusterctl.cluster.x-k8s.io/delete-for-move" not in refused

    b = start_side("B", control_plane_factory(), controllers, tmp_path, namespace, global_pool)
    # As the move starts, claims of the global pool in another namespace of A, which stays: they are
    # served there meanwhile, none with an IP that moves (those are in use in B).
    neighbours = "neighbours"
    client.CoreV1Api(a.api).create_namespace(client.V1Namespace(metadata=client.V1ObjectMeta(name=neighbours)))

    def neighbours_claim() -> None:
        for i in range(5):
            a.custom.create_namespaced_custom_object(*GROUP_VERSION, neighbours, "ipaddressclaims", gi.claim(
                f"n{i}", neighbours, gi.GLOBAL_IN_CLUSTER_IP_POOL, global_pool))

    def neighbours_served() -> dict[str, str]:
        got = {address["metadata"]["name"]: address["spec"]["address"]
               for address in a.list(GROUP_VERSION, "ipaddresses", neighbours)}
        assert len(got) == 5, got
        return got

    there = move(clusterctl, a, b, original, "move A -> B", meanwhile=neighbours_claim, source_neighbours=5)
    kept = eventually(neighbours_served, timeout=30, what="the claims of the other namespace served in A")
    moved_ips = {ip_key(ip) for ip in original.claims.values()}
    assert not [ip for ip in kept.values() if ip_key(ip) in moved_ips], f"A handed out moved IPs: {kept}"
    assert len(a.global_locks(neighbours)) == 5
    # They go before the namespace comes back: B, which knows nothing of them, hands their IPs out meanwhile
    # (two management clusters serving one global pool each on its own do not know of each other's claims).
    a.custom.delete_collection_namespaced_custom_object(*GROUP_VERSION, neighbours, "ipaddressclaims")
    eventually(lambda: not a.list(GROUP_VERSION, "ipaddresses", neighbours) and not a.global_locks(neighbours)
               and not a.global_lock_twins(neighbours), timeout=30, what="the other namespace's claims released in A")
    grown = grow(b, there, "new", 3)
    back = move(clusterctl, b, a, grown, "move B -> A")
    grow(a, back, "back", 2)
