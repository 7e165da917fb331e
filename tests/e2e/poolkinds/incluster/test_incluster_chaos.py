"""The in-cluster provider's pool kinds under concurrency, a lagging cache, crashes and freezes.

Their IPAddresses are named after claims, so what keeps one IP from two claims is the lock per IP
(sub-prefix) the controller writes first (a global pool's all in one namespace). These tests run two
controller processes against a real API server of the module's own, which audits every write, so the
record says which replica wrote what and when: an ``InClusterIPPool``, a ``GlobalInClusterIPPool`` whose
claims live in three namespaces and an ``InClusterPrefixPool``. A sentinel thread reads the whole world
at one revision of the store over and over and fails the test on any moment where an IP (sub-prefix) of a
pool is held by two IPAddresses, a claim has two, or an IPAddress stands without its own lock
(``incluster_fixtures.check_incluster``); at the end every live claim must have exactly one IPAddress,
nothing may be left of deleted claims, and the pools' counts must be right.
"""

from __future__ import annotations

import datetime
import threading
import time
import uuid
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path

import pytest
import yaml

from kubernetes import client

from audit_record import assert_never_at_once, audit_args, wall, writes
from controller_fixtures import ControllerProcess, Kube, Sentinel, start_control_plane
from incluster_fixtures import InCluster, PoolKey, assert_converged, check_incluster, snapshot
from metal3_ipam.testing import go_incluster as gi
from metal3_ipam.testing.lagging_proxy import LaggingProxy
from metal3_ipam.testing.waiting import eventually

REPLICAS = ("replica-1", "replica-2")
# Shorter than the defaults to keep the tests within minutes; the fencing does not depend on them.
LEASE, RENEW, RETRY = 8.0, 5.0, 1.0
TIMING_ARGS = ["--leader-elect-lease-duration", f"{LEASE:g}s", "--leader-elect-renew-deadline", f"{RENEW:g}s",
               "--leader-elect-retry-period", f"{RETRY:g}s"]


# --------------------------------------------------------------------------- set-up


@pytest.fixture(scope="module")
def audited(control_plane_binaries, tmp_path_factory):
    """A control plane of this module's own whose API server audits every write."""
    args, log = audit_args(tmp_path_factory.mktemp("audit"))
    cp = start_control_plane(control_plane_binaries, controller_manager=False, extra_apiserver_args=args)
    try:
        yield cp, log
    finally:
        cp.stop()


@dataclass
class World:
    """The test's pools and claims on the audited control plane, and its replicas' identities."""

    cp: object
    audit_log: Path
    incluster: InCluster
    namespaces: list[str]
    kubeconfigs: dict[str, Path]
    audit_from: int
    totals: dict[PoolKey, int] = field(default_factory=dict)
    pools: dict[str, tuple[str, str]] = field(default_factory=dict)  # short name -> (kind, name)

    @property
    def custom(self) -> client.CustomObjectsApi:
        return self.incluster.custom

    @property
    def ns(self) -> str:
        return self.namespaces[0]

    def args(self, *more: str) -> list[str]:
        """Serve the test's namespaces, the global pool's locks in the first one."""
        return [a for ns in self.namespaces for a in ("-n", ns)] + ["--lock-namespace", self.ns, *more]

    def check(self, api: client.ApiClient):
        return check_incluster(snapshot(client.CustomObjectsApi(api), self.namespaces, self.totals, self.ns),
                               self.totals)

    def converged(self, timeout: float = 90.0):
        return assert_converged(self.custom, self.namespaces, self.totals, timeout=timeout, lock_namespace=self.ns)

    def bindings(self) -> dict[tuple[str, str], str]:
        """(namespace, claim) -> the address of every live IPAddress of the test's pools."""
        snap = snapshot(self.custom, self.namespaces, self.totals, self.ns)
        return {(a["metadata"]["namespace"], a["spec"]["claimRef"]["name"]): a["spec"]["address"]
                for a in snap.addresses if not a["metadata"].get("deletionTimestamp")
                and a["spec"]["poolRef"]["kind"] in gi.POOL_KINDS}

    def writes(self):
        return writes(self.audit_log, {name: name for name in REPLICAS}, self.audit_from)

    def kubeconfig_via(self, name: str, server: str) -> Path:
        """The replica's kubeconfig, talking to ``server`` (same CA, same credentials)."""
        config = yaml.safe_load(self.kubeconfigs[name].read_text())
        config["clusters"][0]["cluster"]["server"] = server
        path = self.kubeconfigs[name].with_name(f"{name}-via-{server.rsplit(':', 1)[1]}.kubeconfig")
        path.write_text(yaml.safe_dump(config))
        path.chmod(0o600)
        return path


@pytest.fixture
def world(audited, tmp_path):
    cp, audit_log = audited
    with cp.api_client() as api:
        first = f"t-{uuid.uuid4().hex[:10]}"
        client.CoreV1Api(api).create_namespace({"metadata": {"name": first}})
        incluster = InCluster(api, Kube(api, first))
        namespaces = [first, incluster.namespace(), incluster.namespace()]
        kubeconfigs = {}
        for name in REPLICAS:
            cert, key = cp.client_certificate(name, ["system:masters"], name=f"{first}-{name}")
            kubeconfigs[name] = cp.write_kubeconfig(f"{first}-{name}.kubeconfig", name, {
                "client-certificate": str(cert), "client-key": str(key)})
        w = World(cp, audit_log, incluster, namespaces, kubeconfigs,
                  audit_log.stat().st_size if audit_log.exists() else 0)
        try:
            yield w
        finally:
            incluster.cleanup()


@pytest.fixture
def replicas(world, tmp_path):
    """make(name, args, kubeconfig=None) -> a started ControllerProcess as that replica; stopped afterwards."""
    made: list[ControllerProcess] = []

    def make(name: str, args: list[str], kubeconfig: Path | None = None) -> ControllerProcess:
        proc = ControllerProcess(kubeconfig or world.kubeconfigs[name], args, name=name, log_dir=tmp_path)
        made.append(proc)
        return proc.start()

    try:
        yield make
    finally:
        for proc in made:
            proc.stop()


def _pools(world: World, *, prefix_pool: bool = True) -> None:
    """A namespaced and a global IP pool (and a prefix pool) of the test, each tight enough to reuse IPs."""
    ic = world.incluster
    ic.ip_pool("local", prefix=24, addresses=["10.50.0.1-10.50.0.70"])
    world.totals[PoolKey(gi.IN_CLUSTER_IP_POOL, world.ns, "local")] = 70
    world.pools["local"] = (gi.IN_CLUSTER_IP_POOL, "local")
    name = ic.global_name("g")
    ic.global_ip_pool(name, prefix=24, addresses=["10.60.0.1-10.60.0.90"])
    world.totals[PoolKey(gi.GLOBAL_IN_CLUSTER_IP_POOL, "", name)] = 90
    world.pools["global"] = (gi.GLOBAL_IN_CLUSTER_IP_POOL, name)
    if prefix_pool:
        ic.prefix_pool("pp", prefixes=["fd00:10::/56"], allocation_prefix_length=64)
        world.totals[PoolKey(gi.IN_CLUSTER_PREFIX_POOL, world.ns, "pp")] = 256
        world.pools["prefix"] = (gi.IN_CLUSTER_PREFIX_POOL, "pp")


def _claims(world: World, tag: str, local: int, global_: int, prefix: int = 0) -> list[tuple[str, str, str]]:
    """(namespace, name, pool short name): the local and prefix pools' claims in the first namespace, the
    global pool's round robin over the three."""
    out = [(world.ns, f"{tag}-l{i:03d}", "local") for i in range(local)]
    out += [(world.namespaces[i % 3], f"{tag}-g{i:03d}", "global") for i in range(global_)]
    out += [(world.ns, f"{tag}-p{i:03d}", "prefix") for i in range(prefix)]
    return out


def _create(world: World, claims: list[tuple[str, str, str]], workers: int = 6) -> None:
    def make(item):
        ns, name, pool = item
        kind, pool_name = world.pools[pool]
        world.incluster.claim(name, pool_name, kind, namespace=ns)

    with ThreadPoolExecutor(workers) as ex:
        list(ex.map(make, claims))


def _delete(world: World, claims: list[tuple[str, str, str]], workers: int = 6) -> None:
    with ThreadPoolExecutor(workers) as ex:
        list(ex.map(lambda item: world.incluster.delete_claim(item[1], namespace=item[0]), claims))


def _live(world: World, claims: list[tuple[str, str, str]]) -> set[tuple[str, str]]:
    return {(ns, name) for ns, name, _ in claims}


def _summary(world: World) -> dict[str, dict[str, int]]:
    """Per replica, of the test's objects: its writes, those the API server accepted, the IPAddresses and locks
    it created, and the writes refused as conflicts (a name taken, or an object changed since it was read)."""
    out = {name: {"writes": 0, "accepted": 0, "created": 0, "conflicts": 0} for name in REPLICAS}
    for w in world.writes():
        if w.namespace not in world.namespaces:
            continue
        out[w.writer]["writes"] += 1
        out[w.writer]["accepted"] += w.code is not None and w.code < 300
        out[w.writer]["created"] += w.resource == "ipaddresses" and w.code == 201
        out[w.writer]["conflicts"] += w.code == 409
    return out


def _leading(proc: ControllerProcess) -> bool:
    return proc.alive() and proc.metrics().get("metal3_ipam_leader") == 1.0


# --------------------------------------------------------------------------- without leader election


@pytest.mark.parametrize("lag", [False, True], ids=["direct", "one-replica-lagging"])
def test_two_replicas_without_leader_election(world, replicas, lag):
    """Two active replicas fight over 150 claims of three pools, then over the release of a third of them
    and 60 new ones created at the same time (more than the pools hold until the releases are through).
    Lagging: the second replica talks to the API server through a proxy that holds every answer and watch
    event of a connection for up to 1.5 s, so its cache trails the other's writes."""
    _pools(world)
    proxy = two = None
    kubeconfig = None
    if lag:
        host, port = world.cp.server.removeprefix("https://").rsplit(":", 1)
        proxy = LaggingProxy((host, int(port)), max_delay=1.5, seed=11).start()
        kubeconfig = world.kubeconfig_via("replica-2", proxy.url)
    try:
        with Sentinel(world.cp, world.ns, check=world.check) as sentinel:
            one = replicas("replica-1", world.args("--no-leader-elect"))
            two = replicas("replica-2", world.args("--no-leader-elect"), kubeconfig)
            first = _claims(world, "a", local=60, global_=75, prefix=15)
            t0 = time.monotonic()
            _create(world, first)
            found = world.converged()
            bound_in = time.monotonic() - t0
            assert found.counts["addresses"] == 150, found.counts
            worked = _summary(world)

            gone, new = first[::3], _claims(world, "b", local=25, global_=30, prefix=5)
            t0 = time.monotonic()
            deleter = threading.Thread(target=_delete, args=(world, gone), name="claim deleter")
            deleter.start()
            try:
                _create(world, new)
            finally:
                deleter.join()
            found = world.converged()
            churned_in = time.monotonic() - t0
            assert found.counts["addresses"] == 160, found.counts
            # A replica that lags may still write from its view of a claim already gone: an IPAddress for no
            # claim, which is taken back (the Sentinel checks that it never holds an IP another claim has).
            want = _live(world, first) - _live(world, gone) | _live(world, new)
            eventually(lambda: set(world.bindings()) == want, timeout=60,
                       what="the addresses to be those of the live claims")
            assert world.converged().counts["addresses"] == 160
        sentinel.assert_clean()
        assert one.alive() and two.alive()
    finally:
        if proxy is not None:
            if two is not None:
                two.stop()  # before its proxy goes
            proxy.stop()
    summary = _summary(world)
    print(f"bound 150 in {bound_in:.1f}s, released 50 and bound 60 more in {churned_in:.1f}s; "
          f"{sentinel.rounds} sentinel rounds; per replica after the first burst {worked}, in all {summary}")
    # Both fought. Without lag each made IPAddresses and locks; with it the lagging replica mostly loses the
    # race for the names and writes from a view that is behind, which the API server refuses: the guard at
    # work (the fast one may never lose).
    idle = [name for name, s in summary.items() if not s["accepted"] or not (lag or s["created"])]
    if lag and not summary["replica-2"]["conflicts"]:
        idle.append("replica-2 (no write of it refused)")
    assert not idle, f"{idle} did not take part: the test proves nothing ({summary})"
    if proxy is not None:
        lagged = [c for c in proxy.connections if c.delay >= 0.5 and c.to_client > 0]
        print(f"lagging proxy: {len(proxy.connections)} connections, delays "
              f"{sorted(round(c.delay, 2) for c in proxy.connections)}, "
              f"{sum(c.to_client for c in proxy.connections)} bytes held back")
        assert lagged, f"no connection of replica-2 was held back 0.5 s or more: {proxy.connections}"


# --------------------------------------------------------------------------- with leader election


def test_leader_killed_then_frozen(world, replicas):
    """The leader is killed (SIGKILL) in the middle of a burst: the standby takes over once the Lease
    expires, every claim bound before the crash keeps its IP, nothing is given twice. Then the new
    leader is frozen (SIGSTOP) in the middle of a burst and of releases, past its Lease: the other one
    takes over and works; thawed (SIGCONT), the old leader writes nothing more. The audit record shows
    the replicas' writes in runs that never overlap."""
    _pools(world, prefix_pool=False)
    args = world.args("--leader-election-namespace", world.ns, "--parallel-writes", "4", *TIMING_ARGS)
    procs = {name: replicas(name, args) for name in REPLICAS}
    with Sentinel(world.cp, world.ns, check=world.check) as sentinel:
        leader = eventually(lambda: [p for p in procs.values() if _leading(p)], timeout=30, what="a leader")
        assert len(leader) == 1, leader
        leader = leader[0]
        standby = next(p for p in procs.values() if p is not leader)

        # (a) SIGKILL in the middle of a burst.
        first = _claims(world, "a", local=50, global_=70)
        creator = threading.Thread(target=_create, args=(world, first), name="claim creator")
        creator.start()
        try:
            eventually(lambda: len(world.bindings()) >= 20, timeout=60, interval=0.05,
                       what=f"{leader.name} to be allocating")
            leader.kill()
            killed_at = time.monotonic()
            before = world.bindings()
        finally:
            creator.join()
        eventually(lambda: _leading(standby), timeout=LEASE + RENEW + 20, what=f"{standby.name} to take over")
        takeover = time.monotonic() - killed_at
        world.converged()
        after = world.bindings()
        assert {k: after.get(k) for k in before} == before, "a claim bound before the crash changed its address"
        assert set(after) == _live(world, first)
        print(f"killed {leader.name} with {len(before)} of 120 bound; {standby.name} took over after {takeover:.1f}s")

        # (b) SIGSTOP the new leader in the middle of a burst and of releases, past its Lease.
        killed = leader
        leader, standby = standby, killed
        standby.start()
        offset = leader.log_size()
        second, gone = _claims(world, "b", local=30, global_=35), first[::4]
        deleter = threading.Thread(target=_delete, args=(world, gone), name="claim deleter")
        creator = threading.Thread(target=_create, args=(world, second), name="claim creator")
        deleter.start()
        creator.start()
        try:
            eventually(lambda: len(set(world.bindings()) & _live(world, second)) >= 3, timeout=60, interval=0.02,
                       what=f"{leader.name} to be serving the second burst")
            leader.freeze()
            frozen_at = time.monotonic()
            frozen_wall = wall()
        finally:
            creator.join()
            deleter.join()
        eventually(lambda: _leading(standby), timeout=LEASE + RENEW + 30, what=f"{standby.name} to take over")
        takeover = time.monotonic() - frozen_at
        world.converged()
        thawed_wall = wall()
        leader.thaw()
        eventually(lambda: "lost leadership" in leader.log_since(offset), timeout=30,
                   what=f"{leader.name} to learn it lost the Lease")
        assert _leading(standby) and not _leading(leader)
        found = world.converged()
        final = world.bindings()
        assert set(final) == _live(world, first) - _live(world, gone) | _live(world, second)
        assert all(final[k] == after[k] for k in final if k in after), "a surviving claim changed its address"
        assert found.counts["addresses"] == 120 - len(gone) + len(second), found.counts
    sentinel.assert_clean()

    record = world.writes()
    frozen_one = leader.name
    late = [w for w in record if w.writer == frozen_one and w.received >= thawed_wall]
    assert not late, f"{frozen_one} wrote after it was thawed: {[w.what for w in late[:10]]}"
    by_new = [w for w in record if w.writer == standby.name and w.received >= frozen_wall]
    assert by_new, f"{standby.name} wrote nothing after it took over from the frozen {frozen_one}"
    takeovers = sum(p.log_text().count("took leadership") for p in procs.values())
    assert {w.writer for w in record} == set(REPLICAS), "both replicas must have written to prove anything"
    assert_never_at_once(record, takeovers)
    fenced = [line for line in leader.log_text().split("thawed with SIGCONT", 1)[-1].splitlines()
              if "no longer leading" in line]
    print(f"{standby.name} took over {takeover:.1f}s after {frozen_one} froze; {len(by_new)} writes by it since; "
          f"{len(record)} writes in all, {takeovers} takeovers; after the thaw: {fenced[:3] or 'no pass was stopped'}")


# --------------------------------------------------------------------------- the reuse grace period


def test_addresses_in_their_grace_period_survive_sigkill(world, replicas):
    """A pool with ``addressReuseGracePeriodSeconds``: half its claims deleted and as many new ones created
    (the pool is full, so only the held IPs could serve them), the controller killed (SIGKILL) in the
    middle and started again. The held addresses survive, and no IP goes to a new claim before its old
    claim's deadline (deletionTimestamp + grace, both as the API server stamps them)."""
    grace = 8
    world.incluster.ip_pool("grace", prefix=24, addresses=["10.70.0.1-10.70.0.40"], grace_seconds=grace)
    world.totals[PoolKey(gi.IN_CLUSTER_IP_POOL, world.ns, "grace")] = 40
    world.pools["grace"] = (gi.IN_CLUSTER_IP_POOL, "grace")
    old = [(world.ns, f"old{i:02d}", "grace") for i in range(40)]
    new = [(world.ns, f"new{i:02d}", "grace") for i in range(20)]
    with Sentinel(world.cp, world.ns, check=world.check) as sentinel:
        ctl = replicas("replica-1", world.args("--no-leader-elect"))
        _create(world, old)
        world.converged()
        held = world.bindings()
        gone = old[::2]
        deleter = threading.Thread(target=_delete, args=(world, gone), name="claim deleter")
        deleter.start()
        try:
            eventually(lambda: sum(1 for ns, name, _ in gone if (world.incluster.get_claim(name, namespace=ns) or {})
                                   .get("metadata", {}).get("deletionTimestamp")) >= 5,
                       timeout=30, interval=0.05, what="claims to be deleted")
            ctl.kill()
        finally:
            deleter.join()
        _create(world, new)
        deadlines = {}
        for ns, name, _ in gone:
            claim = world.incluster.get_claim(name, namespace=ns)
            assert claim is not None, f"{ns}/{name} was released at once, its grace period ignored"
            stamp = datetime.datetime.strptime(claim["metadata"]["deletionTimestamp"], "%Y-%m-%dT%H:%M:%SZ")
            deadlines[held[(ns, name)]] = stamp + datetime.timedelta(seconds=grace)
        ctl.start()
        for ns, name, _ in gone:  # every held address survived the crash and the restart, until its deadline
            kept = world.incluster.get_address(name, namespace=ns) is not None
            deadline = deadlines[held[(ns, name)]].replace(tzinfo=datetime.timezone.utc).timestamp()
            assert kept or time.time() >= deadline, f"{ns}/{name} lost its address"  # a slow look may see it go
        found = world.converged(timeout=grace + 60)
        assert found.counts["addresses"] == 40, found.counts
    sentinel.assert_clean()
    early = []
    for ns, name, _ in new:
        address = world.incluster.get_address(name, namespace=ns)
        made = datetime.datetime.strptime(address["metadata"]["creationTimestamp"], "%Y-%m-%dT%H:%M:%SZ")
        ip = address["spec"]["address"]
        assert ip in deadlines, f"{ns}/{name} got {ip}, which no deleted claim held: the pool was full"
        if made < deadlines[ip]:
            early.append(f"{name}: {ip} made {made.time()}, its old claim's deadline {deadlines[ip].time()}")
    assert not early, "IPs handed out before their grace period ended:\n" + "\n".join(early)
    print(f"{len(gone)} claims in their grace period across a SIGKILL; {sentinel.rounds} sentinel rounds")
