"""The leader elector and the writer's gate, in this process, against a real API server.

The module has a control plane of its own, because its tests stop, freeze and
restart the API server. Timings are shorter than the defaults (lease 6 s,
renew deadline 4 s, retry 1 s) to keep the tests short; the logic is the same.
Each test runs one asyncio scenario; waits poll with a deadline.
"""

from __future__ import annotations

import asyncio
import logging
import os
import signal
import time
import urllib.error
import urllib.request
import uuid
from typing import Callable

import pytest
from kubernetes import client
from kubernetes.client.rest import ApiException

from metal3_ipam.controller import health
from metal3_ipam.controller.credentials import from_kubeconfig
from metal3_ipam.controller.api import ApiWriter, Resource
from metal3_ipam.controller.leader import LeaderElector, LeaseTiming
from metal3_ipam.controller.runtime import liveness
from metal3_ipam.core import kinds
from metal3_ipam.core.actions import Create, Plan
from metal3_ipam.core.inventory import Inventory

from controller_fixtures import free_port, start_control_plane

TIMING = LeaseTiming(lease_duration=6.0, renew_deadline=4.0, retry_period=1.0)
# How long the tests wait for what must come (generous: a loaded machine is slow, never wrong). What must not
# come too early is bounded by the lease duration, which fences the leader: a replica steps down before the
# Lease can be taken from it, however late it notices.
PATIENCE = 60.0
NS = "default"


@pytest.fixture(scope="module")
def plane(control_plane_binaries):
    cp = start_control_plane(control_plane_binaries, controller_manager=False)
    try:
        yield cp
    finally:
        _thaw(cp)
        cp.stop()


@pytest.fixture
def plane_up(plane):
    """The module's control plane with its API server running, also after a test that stopped it."""
    _thaw(plane)
    if "kube-apiserver" not in plane.pids():
        plane.start_apiserver()
    yield plane
    _thaw(plane)
    if "kube-apiserver" not in plane.pids():
        plane.start_apiserver()


def _thaw(cp) -> None:
    pid = cp.pids().get("kube-apiserver")
    if pid:
        try:
            os.kill(pid, signal.SIGCONT)
        except ProcessLookupError:
            pass


class Changes:
    """An on_change listener: when leadership came and went, on the monotonic clock."""

    def __init__(self) -> None:
        self.seen: list[tuple[float, bool]] = []

    def __call__(self, leading: bool) -> None:
        self.seen.append((time.monotonic(), leading))

    def first(self, leading: bool, after: float = 0.0) -> float | None:
        return next((t for t, value in self.seen if value is leading and t >= after), None)


def _elector(cp, lease: str, identity: str, changes: Changes | None = None) -> LeaderElector:
    return LeaderElector(cp.api_client(), NS, lease, TIMING, identity=identity, on_change=changes or Changes())


async def _until(check: Callable[[], object], timeout: float, what: str, interval: float = 0.05) -> float:
    """Poll ``check`` until truthy; returns the monotonic time it first was."""
    deadline = time.monotonic() + timeout
    while not check():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout:g}s waiting for {what}")
        await asyncio.sleep(interval)
    return time.monotonic()


async def _holds(check: Callable[[], object], seconds: float, what: str) -> None:
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        assert check(), f"{what} stopped holding"
        await asyncio.sleep(0.05)


def _stepped_down(elector: LeaderElector, cut_off: float) -> bool:
    """Polled once the API server stopped answering at ``cut_off``: whether ``elector`` stepped down. Until it
    does, it must not act past its renew deadline from ``cut_off`` (no renew begun later can succeed), shorter
    than the lease duration another replica waits for: judged on its own clock, at every use, however late
    its election task is to notice on a loaded machine."""
    past_deadline = time.monotonic() >= cut_off + TIMING.renew_deadline
    assert not (past_deadline and elector.may_act()), "acted past its renew deadline"
    return not elector.leading


def _lease_name() -> str:
    return f"lease-{uuid.uuid4().hex[:8]}"


def _lease_api(cp) -> client.CoordinationV1Api:
    return client.CoordinationV1Api(cp.api_client())


def _holder(cp, lease: str) -> str:
    return _lease_api(cp).read_namespaced_lease(lease, NS).spec.holder_identity or ""


# --------------------------------------------------------------------------- the test helper itself


def test_api_server_restarts_on_its_port_with_its_data(plane_up):
    api = client.CoreV1Api(plane_up.api_client())
    name = f"kept-{uuid.uuid4().hex[:6]}"
    api.create_namespaced_config_map(NS, {"metadata": {"name": name}, "data": {"k": "v"}})
    server = plane_up.server
    plane_up.stop_apiserver(grace=5)
    with pytest.raises(urllib.error.URLError):
        urllib.request.urlopen(server + "/readyz", timeout=2)  # noqa: S310 - loopback
    plane_up.start_apiserver()
    assert plane_up.server == server
    assert api.read_namespaced_config_map(name, NS).data == {"k": "v"}


# --------------------------------------------------------------------------- failures of the API server


def test_connection_refused_ends_leadership_by_the_deadline_and_the_election_goes_on(plane_up, caplog):
    """The API server goes away (connection refused, not an ApiException): the leader stops by its
    renew deadline, the election task keeps running and trying, a candidate started meanwhile
    neither fails nor leads, and once the server is back the holder of the record leads again."""
    caplog.set_level(logging.INFO, logger="metal3_ipam.leader")
    lease = _lease_name()

    async def scenario() -> None:
        a_changes, b_changes = Changes(), Changes()
        a = _elector(plane_up, lease, "a", a_changes)
        task_a = a.start()
        await _until(a.may_act, 20, "a to lead")
        await asyncio.to_thread(plane_up.stop_apiserver, 5)
        gone_at = time.monotonic()
        # Its last successful renew started before the server went away: the deadline follows it, and it
        # stops before another replica could take the Lease over.
        lost_at = await _until(lambda: _stepped_down(a, gone_at), PATIENCE, "a to step down")
        assert not a.may_act()
        b = _elector(plane_up, lease, "b", b_changes)
        task_b = b.start()
        # The outage goes on: attempts keep failing.
        await _until(lambda: a._failed_attempts >= 2 and b._failed_attempts >= 2, PATIENCE, "attempts to go on")
        for elector, task in ((a, task_a), (b, task_b)):
            assert not task.done(), f"{elector.identity}: the election task ended"
            assert elector.failure is None and not elector.leading
            assert elector._failed_attempts >= 2, f"{elector.identity} stopped trying"
        # From this thread, blocking the loop a moment: a process started from a worker thread would be
        # killed when that thread ends (the control plane's die-with-parent hook is per thread).
        plane_up.start_apiserver()
        back_at = await _until(a.may_act, TIMING.lease_duration + 5, "a, still named by the record, to lead again")
        print(f"stepped down {lost_at - gone_at:.2f}s after the API server went away; "
              f"led again {back_at - gone_at:.1f}s after")
        # b saw the record for the first time after the restart: it waits, and a's renewals keep it waiting.
        await _holds(lambda: not b.leading, TIMING.lease_duration + 2, "b standing by")
        assert b_changes.seen == []
        await a.stop()
        await b.stop()
        a.close()
        b.close()

    asyncio.run(scenario())
    failed = [r for r in caplog.records if "attempt failed" in r.getMessage()]
    assert failed and any("refused" in r.getMessage().lower() or "Max retries" in r.getMessage() for r in failed), \
        [r.getMessage() for r in failed[:3]]


def test_a_hung_renew_steps_down_by_the_deadline(plane_up):
    """The API server is frozen (SIGSTOP): connections are accepted and nothing answers. The leader's
    renew hangs; it steps down by the renew deadline all the same, and leads again once it thaws."""
    lease = _lease_name()
    pid = plane_up.pids()["kube-apiserver"]

    async def scenario() -> None:
        a = _elector(plane_up, lease, "a")
        task = a.start()
        await _until(a.may_act, 20, "a to lead")
        os.kill(pid, signal.SIGSTOP)
        try:
            frozen_at = time.monotonic()
            lost_at = await _until(lambda: _stepped_down(a, frozen_at), PATIENCE, "a to step down")
            assert not a.may_act() and not task.done()
            await asyncio.sleep(TIMING.attempt_timeout + TIMING.retry_period)
            assert not task.done() and a.failure is None
        finally:
            os.kill(pid, signal.SIGCONT)
        await _until(a.may_act, TIMING.lease_duration + 10, "a to lead again after the thaw")
        print(f"stepped down {lost_at - frozen_at:.2f}s after the API server froze")
        await a.stop()
        a.close()

    asyncio.run(scenario())


# --------------------------------------------------------------------------- clocks and expiry


def _hand_made_lease(cp, lease: str, holder: str, renew_time: str) -> None:
    _lease_api(cp).create_namespaced_lease(NS, {
        "apiVersion": "coordination.k8s.io/v1", "kind": "Lease", "metadata": {"name": lease},
        "spec": {"holderIdentity": holder, "leaseDurationSeconds": int(TIMING.lease_duration),
                 "renewTime": renew_time, "acquireTime": renew_time, "leaseTransitions": 0}})


def test_a_skewed_renew_time_is_not_taken_over_while_its_holder_renews(plane_up):
    """The holder's clock says 2001: every renewTime it writes is decades old by ours. As long
    as the record keeps changing, the candidate waits; once it stops changing, the candidate
    takes over a lease duration (as it observed it) later, not before."""
    lease = _lease_name()
    _hand_made_lease(plane_up, lease, "skewed-holder", "2001-01-01T00:00:00.000001Z")
    api = _lease_api(plane_up)

    async def scenario() -> None:
        changes = Changes()
        b = _elector(plane_up, lease, "b", changes)
        b.start()
        renewals = 0
        last_renewal = time.monotonic()
        until = time.monotonic() + 2 * TIMING.lease_duration
        while time.monotonic() < until:  # the holder renews every retry period, stamps in 2001
            renewals += 1
            stamp = f"2001-01-01T00:00:{renewals % 60:02d}.{renewals:06d}Z"
            sent = time.monotonic()  # before the change is stored, so before b can have seen it
            await asyncio.to_thread(api.patch_namespaced_lease, lease, NS, {"spec": {"renewTime": stamp}})
            last_renewal = sent
            assert not b.leading, f"b stole the lease after {renewals} renewals"
            await asyncio.sleep(TIMING.retry_period)
        assert changes.seen == [] and _holder(plane_up, lease) == "skewed-holder"
        taken_at = await _until(b.may_act, PATIENCE, "b to take the lease the holder left")
        waited = taken_at - last_renewal
        print(f"taken over {waited:.2f}s after the holder's last renewal")
        assert waited >= TIMING.lease_duration, f"taken over {waited:.2f}s after the last renewal"
        assert _holder(plane_up, lease) == "b"
        await b.stop()
        b.close()

    asyncio.run(scenario())


def test_an_unchanged_record_observed_for_longer_than_the_lease_is_taken_over(plane_up):
    """A holder whose clock ran ahead (renewTime in 2999), then died: compared with the local
    clock its lease would never expire; observed unchanged for a lease duration, it is taken."""
    lease = _lease_name()
    _hand_made_lease(plane_up, lease, "dead-holder", "2999-01-01T00:00:00.000001Z")

    async def scenario() -> None:
        b = _elector(plane_up, lease, "b")
        started = time.monotonic()
        b.start()
        taken_at = await _until(b.may_act, PATIENCE, "b to take over the dead holder's lease")
        waited = taken_at - started
        print(f"taken over {waited:.2f}s after the candidate started watching")
        assert waited >= TIMING.lease_duration
        lease_now = _lease_api(plane_up).read_namespaced_lease(lease, NS)
        assert lease_now.spec.holder_identity == "b" and lease_now.spec.lease_transitions == 1
        await b.stop()
        b.close()

    asyncio.run(scenario())


# --------------------------------------------------------------------------- shutdown


def test_step_down_on_shutdown_lets_a_standby_take_over_at_once(plane_up, caplog):
    """A released Lease is taken over as released (not once it expired)."""
    caplog.set_level(logging.INFO, logger="metal3_ipam.leader")
    lease = _lease_name()

    async def scenario() -> None:
        a, b = _elector(plane_up, lease, "a"), _elector(plane_up, lease, "b")
        a.start()
        await _until(a.may_act, 20, "a to lead")
        b.start()
        await _holds(lambda: not b.leading, 2 * TIMING.retry_period, "b standing by")
        await a.stop()
        assert not a.may_act()
        assert await a.release()
        released_at = time.monotonic()
        taken_at = await _until(b.may_act, PATIENCE, "b to take over")
        print(f"handover took {taken_at - released_at:.2f}s")
        taken = [r.getMessage() for r in caplog.records if f"lease {NS}/{lease}: taken over" in r.getMessage()]
        assert taken == [f"lease {NS}/{lease}: taken over from '' (unchanged for 0.0s as seen here)"], \
            f"b waited for expiry: {taken}"
        assert not await a.release(), "a released a lease it no longer holds"
        assert _holder(plane_up, lease) == "b"
        await b.stop()
        a.close()
        b.close()

    asyncio.run(scenario())


# --------------------------------------------------------------------------- the election never dies silently


def test_an_election_that_ends_by_itself_fails_liveness_and_says_why(plane_up, caplog):
    lease = _lease_name()

    async def scenario() -> None:
        a = _elector(plane_up, lease, "a")
        task = a.start()
        await _until(a.may_act, 20, "a to lead")
        port = free_port()
        runner = await health.serve("127.0.0.1", port, alive=liveness(asyncio.Event(), a), ready=lambda: [])
        try:
            assert await asyncio.to_thread(_get, port, "/healthz") == (200, "ok\n")
            task.cancel()  # not through stop(): as if it had died
            await asyncio.gather(task, return_exceptions=True)
            assert not a.leading and not a.may_act()
            status, text = await asyncio.to_thread(_get, port, "/healthz")
            assert status == 503 and "leader election task ended (cancelled)" in text, text
        finally:
            await runner.cleanup()
            a.close()

    asyncio.run(scenario())
    errors = [r for r in caplog.records if r.levelno == logging.ERROR and r.name == "metal3_ipam.leader"]
    assert errors and "will not lead again" in errors[0].getMessage()


def _get(port: int, path: str) -> tuple[int, str]:
    opener = urllib.request.build_opener(urllib.request.ProxyHandler({}))
    try:
        with opener.open(f"http://127.0.0.1:{port}{path}", timeout=5) as resp:
            return resp.status, resp.read().decode()
    except urllib.error.HTTPError as err:
        return err.code, err.read().decode()


# --------------------------------------------------------------------------- the writer's gate


def _pool(namespace: str, name: str) -> dict:
    return {"apiVersion": "ipam.metal3.io/v1alpha1", "kind": "IPPool",
            "metadata": {"name": name, "namespace": namespace},
            "spec": {"namePrefix": name, "pools": [{"start": "10.9.0.10", "end": "10.9.0.20"}], "prefix": 24}}


def _writer(cp, may_write: Callable[[], bool], write_deadline: Callable[[], float | None] = lambda: None) -> ApiWriter:
    resources = {kinds.IPPOOL: Resource("ipam.metal3.io", "v1alpha1", "ippools")}
    return ApiWriter(from_kubeconfig([str(cp.kubeconfig)]), Inventory(), resources, parallel=4, may_write=may_write,
                     write_deadline=write_deadline)


def _pools_on_server(cp) -> set[str]:
    items = client.CustomObjectsApi(cp.api_client()).list_namespaced_custom_object(
        "ipam.metal3.io", "v1alpha1", NS, "ippools")["items"]
    return {item["metadata"]["name"] for item in items}


def test_a_closed_gate_stops_every_step_before_it_writes(plane_up):
    tag = uuid.uuid4().hex[:6]
    plan = Plan()
    for i in range(3):
        step = plan.step(f"pool {i}")
        step.add(Create(_pool(NS, f"gated-{tag}-{i}a")))
        step.add(Create(_pool(NS, f"gated-{tag}-{i}b")))
    gate = {"open": True, "checks": 0}

    def may_write() -> bool:
        gate["checks"] += 1
        return gate["open"]

    async def scenario():
        writer = _writer(plane_up, may_write)
        try:
            gate["open"] = False
            closed = await writer.execute(plan)
            gate["open"] = True
            first = plan.steps[0]
            opened = await writer.execute(Plan(steps=[first]))
            return closed, opened
        finally:
            await writer.close()

    closed, opened = asyncio.run(scenario())
    assert (closed.done, closed.stopped, closed.failures, closed.again) == (0, 3, [], False)
    assert opened.done == 2 and opened.stopped == 0
    assert {n for n in _pools_on_server(plane_up) if tag in n} == {f"gated-{tag}-0a", f"gated-{tag}-0b"}


def test_a_write_whose_step_was_allowed_is_still_stopped_if_leadership_ends_before_it_is_sent(plane_up):
    """The gate closes between the step's check and the request leaving (a pause at that point
    would do the same): the request is dropped before its bytes go out; the step is stopped, not
    failed, and the writer goes on working once writing is allowed again."""
    tag = uuid.uuid4().hex[:6]
    checks: list[bool] = []

    def may_write() -> bool:
        checks.append(not checks or allowed["again"])  # only the very first check passes
        return checks[-1]

    allowed = {"again": False}

    async def scenario():
        writer = _writer(plane_up, may_write)
        try:
            plan = Plan()
            plan.step("pool").add(Create(_pool(NS, f"late-{tag}")))
            stopped = await writer.execute(plan)
            allowed["again"] = True
            plan = Plan()
            plan.step("pool").add(Create(_pool(NS, f"later-{tag}")))
            after = await writer.execute(plan)
            return stopped, after
        finally:
            await writer.close()

    stopped, after = asyncio.run(scenario())
    assert checks[:2] == [True, False], checks
    assert (stopped.done, stopped.stopped, stopped.failures) == (0, 1, [])
    assert after.done == 1 and after.failures == []
    assert {n for n in _pools_on_server(plane_up) if tag in n} == {f"later-{tag}"}


def test_a_write_is_given_up_by_the_api_server_once_the_tenure_it_was_sent_in_is_over(plane_up):
    """A write already on its way when leadership ends must not be stored after a standby may have taken
    over: it carries the API server's deadline, the time left of the tenure it was sent in. One sent with a
    microsecond left is answered with a timeout and never stored; one with the tenure ahead is stored."""
    tag = uuid.uuid4().hex[:6]
    left = {"seconds": 1e-6}

    async def scenario():
        writer = _writer(plane_up, lambda: True, write_deadline=lambda: left["seconds"])
        try:
            plan = Plan()
            plan.step("pool").add(Create(_pool(NS, f"late-{tag}")))
            late = await writer.execute(plan)
            left["seconds"] = TIMING.renew_deadline
            plan = Plan()
            plan.step("pool").add(Create(_pool(NS, f"in-time-{tag}")))
            in_time = await writer.execute(plan)
            return late, in_time
        finally:
            await writer.close()

    late, in_time = asyncio.run(scenario())
    assert late.done == 0 and late.again and len(late.failures) == 1, late
    assert "504" in late.failures[0], late.failures
    assert in_time.done == 1 and in_time.failures == [], in_time
    # The late create was answered before the second one was sent; the server stores nothing after its deadline.
    assert {n for n in _pools_on_server(plane_up) if tag in n} == {f"in-time-{tag}"}


def test_the_time_left_of_a_tenure_is_what_its_writes_are_given(plane_up):
    """While it leads, the elector's writes have at most the renew deadline (the time until it would stop);
    once it stopped, none."""
    lease = _lease_name()

    async def scenario() -> None:
        a = _elector(plane_up, lease, "a")
        assert a.time_left() == 0
        a.start()
        await _until(a.may_act, 20, "a to lead")
        assert 0 < a.time_left() <= TIMING.renew_deadline
        await a.stop()
        assert a.time_left() == 0
        assert await a.release()
        a.close()

    asyncio.run(scenario())


def test_lease_read_errors_other_than_not_found_are_failed_attempts(plane_up):
    """A 403 (no RBAC on leases) is neither the end of the election nor leadership."""
    lease = _lease_name()
    configuration = plane_up.configuration()
    configuration.api_key = {"authorization": "not-a-valid-token"}
    configuration.api_key_prefix = {"authorization": "Bearer"}

    async def scenario() -> None:
        a = LeaderElector(client.ApiClient(configuration), NS, lease, TIMING, identity="a")
        task = a.start()
        await _until(lambda: a._failed_attempts >= 2, 10, "two failed attempts")
        assert not a.leading and not task.done() and a.failure is None
        await a.stop()
        a.close()

    asyncio.run(scenario())
    with pytest.raises(ApiException) as err:
        _lease_api(plane_up).read_namespaced_lease(lease, NS)
    assert err.value.status == 404
