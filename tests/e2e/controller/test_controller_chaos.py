"""The controller under crashes and concurrency, on a real API server.

Each test runs its own controller processes, serving only the test's namespace
(``-n``), and samples the never-allowed invariants in the background for its
whole length: no IP bound to two live claims at any moment, not only at the end.
"""

from __future__ import annotations

import re
import threading
import time
from concurrent.futures import ThreadPoolExecutor

import pytest

from kubernetes import client

from controller_fixtures import (CAPI, METAL3, Kube, Sentinel, assert_invariants, assert_quiet,
                                 check_invariants, resource_versions)
from metal3_ipam.testing.waiting import eventually


@pytest.fixture
def sentinel(control_plane, namespace):
    with Sentinel(control_plane, namespace) as s:
        yield s
    s.assert_clean()


def _create_claims(kube: Kube, names: list[tuple[str, str, str]], workers: int = 4) -> None:
    """(kind, name, pool) triples, created concurrently."""
    def make(item):
        kind, name, pool = item
        if kind == "IPClaim":
            kube.claim(name, pool)
        else:
            kube.capi_claim(name, pool)

    with ThreadPoolExecutor(workers) as ex:
        list(ex.map(make, names))


def _delete_claims(kube: Kube, names: list[tuple[str, str, str]], workers: int = 4) -> None:
    def drop(item):
        kind, name, _ = item
        if kind == "IPClaim":
            kube.delete(METAL3, "ipclaims", name)
        else:
            kube.delete(CAPI, "ipaddressclaims", name)

    with ThreadPoolExecutor(workers) as ex:
        list(ex.map(drop, names))


def _bindings(kube: Kube) -> dict[tuple[str, str], str]:
    """(claim kind, claim name) -> IP of every live Metal3 IPAddress."""
    out = {}
    for a in kube.addresses():
        if not a["metadata"].get("deletionTimestamp"):
            claim = a["spec"]["claim"]
            out[(claim.get("kind") or "IPClaim", claim["name"])] = a["spec"]["address"]
    return out


def _claims(n: int, pools: list[str], capi_every: int = 4) -> list[tuple[str, str, str]]:
    return [("IPAddressClaim" if i % capi_every == 0 else "IPClaim", f"c{i:03d}", pools[i % len(pools)])
            for i in range(n)]


def test_sigkill_while_allocating_and_releasing(controller_factory, kube, sentinel):
    """SIGKILL in the middle of allocating 200 claims, and again of releasing half: restarted,
    the controller converges with no IP given twice, no claim with two addresses, nothing leaked,
    and every claim bound before the crash keeps its exact address."""
    kube.pool("crash", pools=[{"subnet": "10.200.0.0/24"}], prefix=24)
    claims = _claims(200, ["crash"])
    ctl = controller_factory(["-n", kube.ns, "--no-leader-elect"], name="crash")

    creator = threading.Thread(target=_create_claims, args=(kube, claims), name="claim creator")
    creator.start()
    try:
        eventually(lambda: len(kube.addresses()) >= 50, timeout=60, interval=0.05,
                   what="the controller to be allocating")
        ctl.kill()
        allocating_when_killed = creator.is_alive()
    finally:
        creator.join()
    before = _bindings(kube)
    print(f"killed with {len(before)} of 200 claims bound, claims still being created: {allocating_when_killed}")
    assert not check_invariants(kube).broken

    t0 = time.monotonic()
    ctl.start()
    found = assert_invariants(kube, timeout=90, allow_errors=False)
    print(f"restarted and converged in {time.monotonic() - t0:.1f}s")
    assert found.counts["addresses"] == 200 and found.counts["capi_addresses"] == 50, found.counts
    after = _bindings(kube)
    assert {k: after.get(k) for k in before} == before, "a claim bound before the crash changed its address"
    assert len(set(after.values())) == 200

    # Release half, and crash in the middle of it.
    gone, kept = claims[::2], claims[1::2]
    deleter = threading.Thread(target=_delete_claims, args=(kube, gone), name="claim deleter")
    deleter.start()
    try:
        eventually(lambda: len(kube.addresses()) <= 170, timeout=60, interval=0.05,
                   what="the controller to be releasing")
        ctl.kill()
        releasing_when_killed = deleter.is_alive()
    finally:
        deleter.join()
    print(f"killed with {len(kube.addresses())} addresses left, claims still being deleted: {releasing_when_killed}")
    assert not check_invariants(kube).broken
    t0 = time.monotonic()
    ctl.start()
    found = assert_invariants(kube, timeout=90, allow_errors=False)
    print(f"restarted and converged in {time.monotonic() - t0:.1f}s")
    assert found.counts["addresses"] == 100 and found.counts["ipclaims"] + found.counts["capi_claims"] == 100
    final = _bindings(kube)
    assert {(kind, name) for kind, name, _ in kept} == set(final)
    assert all(final[k] == after[k] for k in final), "a surviving claim changed its address"
    status = kube.ippool("crash")["status"]
    assert (status["capacity"], status["allocated"], status["free"]) == ("254", "100", "154")
    assert_quiet(kube, [ctl], seconds=1.5)
    # A clean restart on a converged namespace writes nothing: no status rewritten, no timestamp churn.
    versions = resource_versions(kube)
    assert ctl.stop() == 0, "SIGTERM should end the controller cleanly"
    ctl.start()
    assert_quiet(kube, [ctl], seconds=2.0)
    assert resource_versions(kube) == versions, "the restarted controller rewrote converged objects"


def test_two_replicas_without_leader_election(controller_factory, kube, sentinel):
    """Two active replicas fight over every claim, on two pools sharing one namePrefix and
    overlapping ranges: the name lock and conditional writes keep every invariant."""
    kube.pool("left", namePrefix="dup", pools=[{"start": "10.201.0.1", "end": "10.201.0.150"}], prefix=24)
    kube.pool("right", namePrefix="dup", pools=[{"start": "10.201.0.100", "end": "10.201.0.250"}], prefix=24)
    one = controller_factory(["-n", kube.ns, "--no-leader-elect"], name="replica-1")
    two = controller_factory(["-n", kube.ns, "--no-leader-elect"], name="replica-2")
    claims = _claims(160, ["left", "right"])
    _create_claims(kube, claims, workers=6)
    found = assert_invariants(kube, timeout=90, allow_errors=False)
    assert found.counts["addresses"] == 160, found.counts
    for c in (one, two):
        text = c.log_text()
        print(f"{c.name}: {len(_lines_for(text, kube.ns))} planned writes, {text.count('exists already')} names "
              f"found taken, {text.count('changed since it was read')} stale writes refused")
    both_worked = [c.name for c in (one, two) if f"pool {kube.ns}/" in c.log_text()]
    assert len(both_worked) == 2, f"only {both_worked} did any work; the test proves nothing"

    _delete_claims(kube, claims[:80], workers=6)
    _create_claims(kube, [(k, f"{n}-again", p) for k, n, p in claims[:40]], workers=6)
    found = assert_invariants(kube, timeout=90, allow_errors=False)
    assert found.counts["addresses"] == 120, found.counts
    assert_quiet(kube, [one, two], seconds=2.0)


def _takeovers(controller) -> list[str]:
    """From whom this replica took each Lease over ('': a released one)."""
    return re.findall(r"taken over from '([^']*)'", controller.log_text())


def _leaders(*controllers) -> list:
    return [c for c in controllers if c.alive() and "took leadership" in c.log_text().rsplit("lost leadership", 1)[-1]]


def _lines_for(text: str, namespace: str) -> list[str]:
    return [line for line in text.splitlines() if f"pool {namespace}/" in line]


def test_two_replicas_with_leader_election(controller_factory, kube, sentinel, api_client):
    """Only the holder of the Lease works. When it is killed mid-allocation the standby takes
    over once the Lease expires; a replica stopped with SIGTERM hands over at once."""
    kube.pool("p", pools=[{"subnet": "10.202.0.0/24"}], prefix=24)
    args = ["-n", kube.ns, "--leader-election-namespace", kube.ns]
    first = controller_factory(args, name="elected-1")
    second = controller_factory(args, name="elected-2")
    leader = eventually(lambda: _leaders(first, second), timeout=30, what="a leader")
    assert len(leader) == 1, leader
    leader = leader[0]
    standby = second if leader is first else first
    lease = client.CoordinationV1Api(api_client).read_namespaced_lease("metal3-ipam-controller", kube.ns)
    assert lease.spec.holder_identity

    claims = _claims(150, ["p"])
    creator = threading.Thread(target=_create_claims, args=(kube, claims), name="claim creator")
    creator.start()
    try:
        eventually(lambda: len(kube.addresses()) >= 30, timeout=60, interval=0.05, what="the leader to allocate")
        leader.kill()
        killed_at = time.monotonic()
    finally:
        creator.join()
    eventually(lambda: _leaders(standby), timeout=120, what="the standby to take over the expired Lease")
    takeover = time.monotonic() - killed_at
    while_standby = standby.log_text().split("took leadership", 1)[0]
    assert not _lines_for(while_standby, kube.ns), "the standby worked while the other one led"
    found = assert_invariants(kube, timeout=60, allow_errors=False)
    assert found.counts["addresses"] == 150
    print(f"the standby took over {takeover:.1f}s after the leader was killed")
    # Once the Lease expired: taken from the killed leader still named in it (a holder's Lease is taken only
    # once seen unchanged for a whole lease duration; tests/unit/controller/test_leader_timing.py pins that on a clock).
    assert _takeovers(standby) == re.findall(r"took leadership of lease \S+ as (\S+)", leader.log_text())

    # A graceful stop gives the Lease up: a fresh standby takes over without waiting for expiry.
    third = controller_factory(args, name="elected-3")
    assert not _leaders(third)
    t0 = time.monotonic()
    assert standby.stop() == 0
    eventually(lambda: _leaders(third), timeout=120, what="the new standby to take over")
    handover = time.monotonic() - t0
    _delete_claims(kube, claims[:75])
    found = assert_invariants(kube, timeout=60, allow_errors=False)
    assert found.counts["addresses"] == 75
    print(f"handover after SIGTERM took {handover:.1f}s")
    assert f"lease {kube.ns}/metal3-ipam-controller released" in standby.log_text(), \
        "the stopped replica did not give the Lease up"
    assert _takeovers(third) == [""], "the new standby waited for the Lease to expire"
    assert_quiet(kube, [third], seconds=1.0)
