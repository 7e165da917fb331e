"""``clusterctl move`` between two live control planes, a controller on each (SPEC §7, §10 invariant 4).

The real clusterctl (built by hack/build-binaries.sh) moves a namespace the way
users pivot: the controller in the target runs throughout. In the source: two
Clusters, three pools (IPv4 with several entries and preAllocations, IPv6, and a
pool without ``clusterName`` shared by both Clusters' claims) and claims of both
kinds, owned as CAPM3 owns them (Cluster -> Metal3Data -> claim), all bound.

After each move: every claim has exactly the address it had (the full claim ->
IP map, and every address object's spec), the target controller created and
deleted no address, statuses are rebuilt, owner references point at the
target's objects, the source holds nothing of the namespace, clusterctl
retried nothing, and new claims in the target collide with no moved address.
The same holds on the way back and through ``--to-directory`` /
``--from-directory`` into a fresh control plane.

Each step prints what it measured (objects moved, seconds the move took,
seconds until the target's statuses were rebuilt); run with ``-s`` to see them.

The number of claims is ``$METAL3_IPAM_MOVE_CLAIMS`` (default 300).
"""

from __future__ import annotations

import os
import re
import signal
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field

from controller_fixtures import (CAPI, CLUSTER, CLUSTER_NAME_LABEL, METAL3, ControllerProcess, Kube,
                                 check_invariants, condition, ip_key)
from move_fixtures import INFRA, MOVE_TIMEOUT, address_counters, diff, owner_ref, planned_writes, report
from move_fixtures import dangling_owner_references as owners_missing
from metal3_ipam.testing import controlplane as cp_mod
from metal3_ipam.testing.clusterctl import (Clusterctl, Run, mark_clusters_provisioned,
                                            prepare_management_cluster)
from metal3_ipam.testing.waiting import eventually

CLAIMS = int(os.environ.get("METAL3_IPAM_MOVE_CLAIMS", "300"))
REBUILD_TIMEOUT = 120.0

# What a move carries, in creation order: (group, version), plural, kind.
MOVED_KINDS = (
    (CLUSTER, "clusters", "Cluster"),
    (INFRA, "metal3datas", "Metal3Data"),
    (METAL3, "ippools", "IPPool"),
    (METAL3, "ipclaims", "IPClaim"),
    (CAPI, "ipaddressclaims", "IPAddressClaim"),
    (METAL3, "ipaddresses", "IPAddress"),
    (CAPI, "ipaddresses", "IPAddress.ipam.cluster.x-k8s.io"),
)


# --------------------------------------------------------------------------- the scene


POOLS = {
    # clusterName alpha: three entries (used in order), per-entry prefix and gateway, preAllocations
    "v4": {
        "clusterName": "alpha", "namePrefix": "alpha-v4",
        "pools": [
            {"start": "10.1.0.10", "end": "10.1.0.40"},
            {"subnet": "10.1.1.0/26", "prefix": 26, "gateway": "10.1.1.1"},
            {"start": "10.1.2.100", "end": "10.1.2.199", "dnsServers": ["10.1.2.2"]},
        ],
        "prefix": 24, "gateway": "10.1.0.1", "dnsServers": ["10.1.0.2"],
        "preAllocations": {"alpha-m003-v4": "10.1.2.150", "alpha-m004-v4": "10.1.1.50"},
    },
    "v6": {
        "clusterName": "alpha", "namePrefix": "alpha-v6",
        "pools": [{"subnet": "2001:db8:a::/64"}], "prefix": 64, "gateway": "2001:db8:a::1",
        "preAllocations": {"alpha-m002-v6": "2001:db8:a::99"},
    },
    # no clusterName: claims of both Clusters draw from it
    "shared": {
        "namePrefix": "shared",
        "pools": [{"subnet": "10.2.0.0/23", "gateway": "10.2.0.1"}], "prefix": 23,
        "preAllocations": {"beta-m005-shared": "10.2.1.200", "alpha-m006-shared": "10.2.1.201"},
    },
}
POOL_ORDER = ("v4", "v6", "shared")


@dataclass(frozen=True)
class Machine:
    """A Metal3Data: one host's rendered data, owning one claim per pool it uses."""

    cluster: str
    index: int
    pools: tuple[str, ...]
    tag: str = "m"

    @property
    def name(self) -> str:
        return f"{self.cluster}-{self.tag}{self.index:03d}"

    def claims(self) -> list[tuple[str, str, str]]:
        """(kind, claim name, pool): both kinds on every pool, alternating."""
        out = []
        for pool in self.pools:
            kind = "IPClaim" if (self.index + POOL_ORDER.index(pool)) % 2 == 0 else "IPAddressClaim"
            out.append((kind, f"{self.name}-{pool}", pool))
        return out


def machines_for(claims: int) -> list[Machine]:
    """alpha's hosts claim from v4, v6 and shared; beta's from shared only (7:9 of the claims)."""
    alpha = max(1, round(claims * 7 / 30))
    beta = max(1, claims - 3 * alpha)
    return ([Machine("alpha", i, POOL_ORDER) for i in range(alpha)]
            + [Machine("beta", i, ("shared",)) for i in range(beta)])


def create_scene(kube: Kube, machines: list[Machine]) -> None:
    """Clusters (reporting provisioned), pools, Metal3Data owned by their Cluster, claims owned by their Metal3Data."""
    clusters = {name: kube.cluster(name) for name in ("alpha", "beta")}
    mark_clusters_provisioned(kube.api_client, kube.ns)
    for name, spec in POOLS.items():
        kube.pool(name, **spec)
    create_machines(kube, machines, clusters)


def create_machines(kube: Kube, machines: list[Machine], clusters: dict[str, dict] | None = None) -> None:
    if clusters is None:
        clusters = {c["metadata"]["name"]: c for c in kube.list(CLUSTER, "clusters")}

    def one(machine: Machine) -> None:
        cluster = clusters[machine.cluster]
        data = kube.create(INFRA, "metal3datas", {
            "apiVersion": "/".join(INFRA), "kind": "Metal3Data",
            "metadata": {"name": machine.name, "labels": {CLUSTER_NAME_LABEL: machine.cluster},
                         "ownerReferences": [owner_ref(cluster, controller=False)]},
            "spec": {"index": machine.index},
        })
        for kind, name, pool in machine.claims():
            meta = {"name": name, "ownerReferences": [owner_ref(data, controller=True)]}
            if kind == "IPClaim":
                meta["labels"] = {CLUSTER_NAME_LABEL: machine.cluster}
                kube.create(METAL3, "ipclaims", {"apiVersion": "/".join(METAL3), "kind": "IPClaim",
                                                 "metadata": meta, "spec": {"pool": {"name": pool}}})
            else:
                # v1beta2 names its Cluster in spec.clusterName; every other host also has the label.
                if machine.index % 2:
                    meta["labels"] = {CLUSTER_NAME_LABEL: machine.cluster}
                kube.create(CAPI, "ipaddressclaims", {
                    "apiVersion": "/".join(CAPI), "kind": "IPAddressClaim", "metadata": meta,
                    "spec": {"clusterName": machine.cluster,
                             "poolRef": {"apiGroup": "ipam.metal3.io", "kind": "IPPool", "name": pool}},
                })

    with ThreadPoolExecutor(max_workers=8) as pool:
        list(pool.map(one, machines))


# --------------------------------------------------------------------------- what is compared


@dataclass
class State:
    """The IPAM facts of a namespace that a move must carry unchanged."""

    claims: dict[tuple[str, str], str]             # (kind, claim) -> IP, followed through the claim's status
    addresses: dict[str, dict]                     # Metal3 IPAddress name -> spec
    capi_addresses: dict[str, dict]                # Cluster API IPAddress name -> spec
    pool_counts: dict[str, tuple[str, str, str]]   # pool -> (capacity, allocated, free)
    objects: dict[str, int] = field(default_factory=dict)  # kind -> count, of every kind a move carries

    @property
    def total(self) -> int:
        return sum(self.objects.values())


def read_state(kube: Kube) -> State:
    """Everything of the namespace, every claim followed through its status to its address."""
    listed = {kind: kube.list(gv, plural) for gv, plural, kind in MOVED_KINDS}
    addresses = {a["metadata"]["name"]: a for a in listed["IPAddress"]}
    capi_addresses = {a["metadata"]["name"]: a for a in listed["IPAddress.ipam.cluster.x-k8s.io"]}
    claims: dict[tuple[str, str], str] = {}
    for c in listed["IPClaim"]:
        ref = (c.get("status") or {}).get("address") or {}
        claims[("IPClaim", c["metadata"]["name"])] = addresses[ref["name"]]["spec"]["address"] if \
            ref.get("name") in addresses else None
    for c in listed["IPAddressClaim"]:
        ref = (c.get("status") or {}).get("addressRef") or {}
        ready = (condition(c, "Ready") or {}).get("status") == "True"
        claims[("IPAddressClaim", c["metadata"]["name"])] = capi_addresses[ref["name"]]["spec"]["address"] if \
            ready and ref.get("name") in capi_addresses else None
    pool_counts = {}
    for p in listed["IPPool"]:
        status = p.get("status") or {}
        pool_counts[p["metadata"]["name"]] = (status.get("capacity"), status.get("allocated"), status.get("free"))
    return State(claims, {n: a["spec"] for n, a in addresses.items()},
                 {n: a["spec"] for n, a in capi_addresses.items()}, pool_counts,
                 {kind: len(items) for kind, items in listed.items()})


def assert_same_ipam(before: State, after: State, where: str) -> None:
    problems = (diff("claim", before.claims, after.claims)
                + diff("IPAddress", before.addresses, after.addresses)
                + diff("IPAddress.ipam.cluster.x-k8s.io", before.capi_addresses, after.capi_addresses)
                + diff("pool (capacity, allocated, free)", before.pool_counts, after.pool_counts)
                + diff("objects of kind", before.objects, after.objects))
    assert not problems, f"{where}: the move changed IPAM state:\n" + "\n".join(problems)


class InvariantBroken(Exception):
    """What must never happen happened: not retried by ``eventually``, failed at once."""


def converged(kube: Kube) -> bool:
    """Every claim bound, with its status, and every pool's indexes and counts right (check_invariants)."""
    findings = check_invariants(kube, allow_errors=False)
    if findings.broken:
        raise InvariantBroken(f"invariants broken in {kube.ns}:\n{findings}")
    return not findings.pending


def wait_converged(kube: Kube, timeout: float, what: str) -> float:
    """Seconds until :func:`converged`; fails with the last findings at the deadline."""
    started = time.monotonic()
    try:
        eventually(lambda: converged(kube), timeout=timeout, interval=0.25, what=what)
    except AssertionError:
        raise AssertionError(f"{what}: not converged within {timeout:g}s:\n{check_invariants(kube)}") from None
    return time.monotonic() - started


def dangling_owner_references(kube: Kube) -> list[str]:
    """Owner references of the namespace's objects that name no object of that uid (a move changes uids)."""
    return owners_missing([o for gv, plural, _ in MOVED_KINDS for o in kube.list(gv, plural)])


def leftovers(kube: Kube) -> dict[str, list[str]]:
    return {kind: names for gv, plural, kind in MOVED_KINDS
            if (names := sorted(o["metadata"]["name"] for o in kube.list(gv, plural)))}


# --------------------------------------------------------------------------- what the controllers did


@dataclass
class Side:
    """One management cluster: its control plane, a client on the namespace, the controller on it."""

    name: str
    cp: cp_mod.ControlPlane
    kube: Kube
    controller: ControllerProcess


def check_arrival(target: Side, expected: State, run: Run, what: str, controller_offset: int,
                  counters_before: tuple[float, float]) -> State:
    """After clusterctl finished: statuses rebuilt, the same IPAM state, nothing allocated or released."""
    rebuilt = wait_converged(target.kube, REBUILD_TIMEOUT, f"{what}: statuses rebuilt in {target.name}")
    after = read_state(target.kube)
    report(f"{what}: {after.total} objects ({after.objects}); clusterctl took {run.seconds:.1f} s; "
           f"statuses rebuilt {rebuilt:.1f} s after it ended")
    assert_same_ipam(expected, after, what)
    # Nothing created or deleted, not even planned: the Cluster resumes in the target's
    # inventory only once the moved addresses are all known there.
    writes = planned_writes(target.controller, controller_offset, target.kube.ns)
    made = [w for w in writes if w.split(": ", 1)[1].startswith(("create", "Delete"))]
    report(f"{what}: controller on {target.name} planned {len(writes)} writes meanwhile "
           f"({sorted({w.split(': ', 1)[1].split()[0] for w in writes})})")
    assert not made, f"{what}: the controller on {target.name} created or deleted objects:\n" + "\n".join(made[:30])
    assert address_counters(target.controller, target.kube.ns) == counters_before, \
        f"{what}: the controller on {target.name} counted allocations or releases"
    assert not (bad := dangling_owner_references(target.kube)), \
        f"{what}: owner references left pointing at the source's uids:\n" + "\n".join(bad[:20])
    assert not run.retries(), f"{what}: clusterctl had to retry:\n" + "\n".join(run.retries()[:20])
    return after


def move(clusterctl: Clusterctl, source: Side, target: Side, expected: State, what: str) -> State:
    """clusterctl move source -> target with both controllers running; every check of one direction."""
    ns = source.kube.ns
    mark_clusters_provisioned(source.kube.api_client, ns)
    source_offset, target_offset = source.controller.log_size(), target.controller.log_size()
    counters = address_counters(target.controller, ns)
    run = clusterctl.move(source.cp, target.cp, ns, timeout=MOVE_TIMEOUT, stop_on_retry=True).check()
    after = check_arrival(target, expected, run, what, target_offset, counters)

    def source_empty() -> bool:
        left = leftovers(source.kube)
        assert not left, f"left in {source.name}: {left}"
        return True

    eventually(source_empty, timeout=30, what=f"{what}: nothing of the namespace left in {source.name}")
    # While clusterctl deletes, the source controller leaves everything alone but the status
    # of a pool without clusterName (not paused: it has no Cluster) as its addresses go.
    # clusterctl neither writes status nor reads it once it deletes (every copy is made
    # first), and none of its writes has a precondition that such a write could spoil.
    source_writes = planned_writes(source.controller, source_offset, ns)
    racing = [w for w in source_writes if not re.fullmatch(r"IPPool \S+: SetStatus IPPool \S+", w)]
    report(f"{what}: controller on {source.name} planned {len(source_writes)} writes during the move, "
           f"{len(source_writes) - len(racing)} of them pool status")
    assert not racing, (f"{what}: the controller on {source.name} wrote to objects clusterctl was moving:\n"
                        + "\n".join(racing[:30]))
    return after


# --------------------------------------------------------------------------- fixtures


def side(name: str, cp: cp_mod.ControlPlane, namespace: str, controller: ControllerProcess) -> Side:
    return Side(name, cp, Kube(cp.api_client(), namespace), controller)


# --------------------------------------------------------------------------- the tests


def test_move_there_and_back_then_through_a_directory(control_plane, control_plane_factory, namespace,
                                                       controllers, clusterctl, tmp_path):
    machines = machines_for(CLAIMS)
    prepare_management_cluster(control_plane)
    # The source's controller watches the test's namespace only (the session control plane
    # holds other tests' namespaces); the targets' watch everything, as installed controllers do.
    a = side("A", control_plane, namespace, controllers(control_plane, "A", ("-n", namespace)))
    started = time.monotonic()
    create_scene(a.kube, machines)
    wait_converged(a.kube, 300, "every claim bound in the source")
    original = read_state(a.kube)
    assert all(original.claims.values()) and len(original.claims) == sum(len(m.claims()) for m in machines)
    report(f"{len(original.claims)} claims on 3 pools bound in {time.monotonic() - started:.1f} s")

    b_cp = control_plane_factory()
    prepare_management_cluster(b_cp)
    b = side("B", b_cp, namespace, controllers(b_cp, "B"))

    # -- there -----------------------------------------------------------------------------
    there = move(clusterctl, a, b, original, "move A -> B")

    # New claims in the target (a new host per Cluster) collide with none of the moved addresses.
    new = [Machine("alpha", 0, POOL_ORDER, tag="new"), Machine("alpha", 1, POOL_ORDER, tag="new"),
           Machine("beta", 0, ("shared",), tag="new")]
    create_machines(b.kube, new)
    wait_converged(b.kube, 60, "new claims bound in B")
    grown = read_state(b.kube)
    fresh = {k: ip for k, ip in grown.claims.items() if k not in there.claims}
    assert len(fresh) == sum(len(m.claims()) for m in new) and all(fresh.values())
    moved_ips = {ip_key(ip) for ip in there.claims.values()}
    assert not [(k, ip) for k, ip in fresh.items() if ip_key(ip) in moved_ips], "a new claim got a moved address"
    assert {k: ip for k, ip in grown.claims.items() if k in there.claims} == there.claims

    # -- and back (the new claims too) -------------------------------------------------------
    back = move(clusterctl, b, a, grown, "move B -> A")

    # -- through a directory, into a fresh control plane --------------------------------------
    backup = tmp_path / "backup"
    backup.mkdir()
    mark_clusters_provisioned(a.kube.api_client, namespace)
    saved = clusterctl.to_directory(a.cp, namespace, backup, timeout=MOVE_TIMEOUT, stop_on_retry=True).check()
    files = sorted(p.name for p in backup.iterdir())
    report(f"to directory: {len(files)} files in {saved.seconds:.1f} s")
    assert len(files) == back.total, f"{len(files)} files for {back.total} objects"
    # The source keeps everything, unpaused again, unchanged.
    assert_same_ipam(back, read_state(a.kube), "A after --to-directory")
    assert not any(c["spec"].get("paused") for c in a.kube.list(CLUSTER, "clusters"))

    b.controller.stop()
    b.cp.stop()  # two control planes at a time
    c_cp = control_plane_factory()
    prepare_management_cluster(c_cp)
    c = side("C", c_cp, namespace, controllers(c_cp, "C"))
    offset, counters = c.controller.log_size(), address_counters(c.controller, namespace)
    restored = clusterctl.from_directory(c.cp, backup, timeout=MOVE_TIMEOUT, stop_on_retry=True).check()
    check_arrival(c, back, restored, "restore into C", offset, counters)


def test_move_while_claims_are_being_served(control_plane, control_plane_factory, namespace, controllers,
                                            clusterctl):
    """clusterctl fixes the set of objects it moves before it pauses the Clusters. Claims created
    just before the move are being served by the source's controller as the move starts: an
    address made before clusterctl looked is moved with its claim; one made after it looked is
    left behind (and collected with its claim), and that claim is served anew in the target.
    Whatever the timing, nothing is half-done: every claim ends with exactly one address, a
    moved address still belongs to its claim with its IP, a claim settled before keeps its IP,
    and nothing is left in the source."""
    prepare_management_cluster(control_plane)
    # No leader election: the controller is held (SIGSTOP) below, and must act as soon as it is let go.
    a = side("A", control_plane, namespace,
             controllers(control_plane, "A", ("-n", namespace, "--no-leader-elect")))
    create_scene(a.kube, machines_for(30))
    wait_converged(a.kube, 120, "the first claims bound in A")
    settled = read_state(a.kube)
    b_cp = control_plane_factory()
    prepare_management_cluster(b_cp)
    b = side("B", b_cp, namespace, controllers(b_cp, "B"))

    # The late claims are created while the controller on A is held; it is let go as
    # clusterctl starts, and serves them while clusterctl lists the namespace kind by kind
    # and pauses the Clusters (serving them all takes longer than clusterctl takes to list).
    late = ([Machine("alpha", i, POOL_ORDER, tag="late") for i in range(20)]
            + [Machine("beta", i, ("shared",), tag="late") for i in range(40)])
    os.killpg(a.controller.popen.pid, signal.SIGSTOP)
    try:
        create_machines(a.kube, late)
        running = clusterctl.start_move(a.cp, b.cp, namespace)
    finally:
        os.killpg(a.controller.popen.pid, signal.SIGCONT)
    run = running.wait(MOVE_TIMEOUT, stop_on_retry=True).check()
    wait_converged(b.kube, REBUILD_TIMEOUT, "every claim bound in B")
    after = read_state(b.kube)

    assert {k: after.claims.get(k) for k in settled.claims} == settled.claims
    assert set(after.claims) == set(settled.claims) | {(kind, name) for m in late for kind, name, _ in m.claims()}
    copied = set(re.findall(r'Creating IPAddress="([^"]+)"', run.output()))
    moved_locks = {n: spec for n, spec in after.addresses.items() if n in copied}
    moved_mirrors = {n: spec for n, spec in after.capi_addresses.items() if n in copied}
    assert len(moved_locks) + len(moved_mirrors) == len(copied), "an address clusterctl copied is gone from B"
    for name, spec in moved_locks.items():
        kind = spec["claim"].get("kind") or "IPClaim"
        assert after.claims[(kind, spec["claim"]["name"])] == spec["address"], f"{name} lost its claim"
    for name, spec in moved_mirrors.items():
        assert after.claims[("IPAddressClaim", spec["claimRef"]["name"])] == spec["address"], f"{name} changed"
    late_locks = {spec["claim"]["name"] for spec in moved_locks.values()} & {n for m in late for _, n, _ in m.claims()}
    report(f"in flight: {len(late_locks)} of {sum(len(m.claims()) for m in late)} late claims had their address "
           f"copied; the rest were served in B; clusterctl took {run.seconds:.1f} s")

    def source_empty() -> bool:
        left = leftovers(a.kube)
        assert not left, f"left in A: {left}"
        return True

    # Addresses made after clusterctl looked stay behind until the garbage collector follows
    # their deleted claims (it rediscovers owners on its own schedule).
    eventually(source_empty, timeout=90, what="nothing of the namespace left in A")


def test_claim_arriving_with_its_cluster_api_address_but_not_its_lock_keeps_its_ip(
        control_plane, control_plane_factory, namespace, controllers, clusterctl):
    """clusterctl lists kind after kind, in no fixed order, before it pauses: when the source's
    controller serves a Cluster API claim in that instant, the claim's Cluster API IPAddress can
    be listed (and moved) while the Metal3 IPAddress that locks its IP was not. The target must
    then keep the IP the claim's consumers may already have read, and give it to no other claim.

    The source here holds that state as the move leaves it (no controller runs on it)."""
    prepare_management_cluster(control_plane)
    a = Kube(control_plane.api_client(), namespace)
    cluster = a.cluster("gamma")
    mark_clusters_provisioned(a.api_client, namespace)
    pool = a.pool("p", clusterName="gamma", namePrefix="gamma",
                  pools=[{"subnet": "10.3.0.0/24", "gateway": "10.3.0.1"}], prefix=24)
    data = a.create(INFRA, "metal3datas", {"apiVersion": "/".join(INFRA), "kind": "Metal3Data",
                                           "metadata": {"name": "gamma-m000",
                                                        "ownerReferences": [owner_ref(cluster, controller=False)]},
                                           "spec": {}})

    def capi_claim(name: str) -> dict:
        return a.create(CAPI, "ipaddressclaims", {
            "apiVersion": "/".join(CAPI), "kind": "IPAddressClaim",
            "metadata": {"name": name, "ownerReferences": [owner_ref(data, controller=True)]},
            "spec": {"clusterName": "gamma", "poolRef": {"apiGroup": "ipam.metal3.io", "kind": "IPPool", "name": "p"}},
        })

    half = capi_claim("half")
    a.create(CAPI, "ipaddresses", {
        "apiVersion": "/".join(CAPI), "kind": "IPAddress",
        "metadata": {"name": "half", "ownerReferences": [owner_ref(half, controller=True),
                                                         {**owner_ref(pool, controller=False)}]},
        "spec": {"claimRef": {"name": "half"}, "poolRef": {"apiGroup": "ipam.metal3.io", "kind": "IPPool", "name": "p"},
                 "address": "10.3.0.4", "prefix": 24, "gateway": "10.3.0.1"},
    })
    for i in range(4):  # sequential allocation would hand out 10.3.0.2 to .5
        capi_claim(f"fresh-{i}")

    b_cp = control_plane_factory()
    prepare_management_cluster(b_cp)
    b = side("B", b_cp, namespace, controllers(b_cp, "B"))
    clusterctl.move(control_plane, b_cp, namespace, timeout=MOVE_TIMEOUT, stop_on_retry=True).check()
    wait_converged(b.kube, REBUILD_TIMEOUT, "every claim bound in B")
    after = read_state(b.kube)
    assert after.claims[("IPAddressClaim", "half")] == "10.3.0.4", after.claims
    assert after.capi_addresses["half"]["address"] == "10.3.0.4"
    holders = sorted(k for k, ip in after.claims.items() if ip == "10.3.0.4")
    assert holders == [("IPAddressClaim", "half")], f"10.3.0.4 went to {holders}"
