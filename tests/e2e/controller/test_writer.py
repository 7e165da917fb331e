"""The REST writer against a real API server: what each answer leads to.

- refused for good (401, 403, 413, 422): a log line naming verb and object, the
  refusal metric, the error on the claim (IPClaim errorMessage + Ready=False,
  IPAddressClaim Ready=False, reason AllocationFailed) or the pool's Ready
  condition, one Warning Event, and the step not tried again before its backoff;
- 404: gone (a delete's goal reached; a status write has nothing left to do);
- 409: a name taken, a stale read, a delete whose preconditions failed: read
  again and decided again;
- 5xx and timeouts (a local failing peer, not a Kubernetes): retried, no backoff
  of their own, nothing written on the claim.

And the in-memory executor agrees with it on what a delete promises.
"""

from __future__ import annotations

import asyncio
import copy
import inspect
import logging
import time
import uuid
from contextlib import asynccontextmanager

import pytest
from aiohttp import web
from kubernetes import client
from prometheus_client import REGISTRY

from controller_fixtures import CAPI, METAL3, Kube, condition, free_port
from metal3_ipam.controller import credentials as creds_mod
from metal3_ipam.controller.api import ApiWriter
from metal3_ipam.controller.refusals import Backoff
from metal3_ipam.core import objects as o
from metal3_ipam.core.actions import Create, Delete, Plan, SetFinalizers, SetStatus
from metal3_ipam.core.inventory import Inventory
from metal3_ipam.memory import MemoryApi
from metal3_ipam.testing.waiting import eventually

FIN = "ipaddress.ipam.metal3.io"


@pytest.fixture
def admin(control_plane):
    return creds_mod.from_kubeconfig([str(control_plane.kubeconfig)])


@asynccontextmanager
async def writer_for(credentials, resources, inventory=None, **kwargs):
    writer = ApiWriter(credentials, inventory or Inventory(), resources, **kwargs)
    try:
        yield writer
    finally:
        await writer.close()


def refusals(verb: str, kind: str, code: int) -> float:
    return REGISTRY.get_sample_value("metal3_ipam_write_refusals_total",
                                     {"verb": verb, "kind": kind, "code": str(code)}) or 0.0


def address(ns: str, name: str, ip: str = "10.80.0.1", claim: str = "c1", **extra) -> dict:
    obj = {"apiVersion": "ipam.metal3.io/v1alpha1", "kind": "IPAddress",
           "metadata": {"name": name, "namespace": ns},
           "spec": {"address": ip, "pool": {"name": "p", "namespace": ns}, "claim": {"name": claim, "namespace": ns}}}
    obj["metadata"].update(extra)
    return obj


def pool_and_claims(kube: Kube, inventory: Inventory) -> tuple[dict, dict, dict]:
    pool = kube.pool("p", pools=[{"start": "10.80.0.1", "end": "10.80.0.9"}], prefix=24)
    claim = kube.claim("c1", "p")
    capi_claim = kube.create(CAPI, "ipaddressclaims", {
        "apiVersion": "/".join(CAPI), "kind": "IPAddressClaim", "metadata": {"name": "k1"},
        "spec": {"poolRef": {"apiGroup": "ipam.metal3.io", "kind": "IPPool", "name": "p"}}})
    for obj in (pool, claim, capi_claim):
        inventory.upsert(obj)
    return pool, claim, capi_claim


def claim_step(plan: Plan, claim: dict, *actions):
    step = plan.step(f"{claim['kind']} {o.namespace(claim)}/{o.name(claim)}", about=o.ref(claim))
    for action in actions:
        step.add(action)
    return step


def limited_user(control_plane, api_client, namespace: str, rules: list[dict]) -> creds_mod.Credentials:
    """A client-certificate user with only ``rules`` in ``namespace``."""
    name = f"limited-{uuid.uuid4().hex[:6]}"
    rbac = client.RbacAuthorizationV1Api(api_client)
    if rules:
        rbac.create_namespaced_role(namespace, {"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "Role",
                                                "metadata": {"name": name}, "rules": rules})
        rbac.create_namespaced_role_binding(namespace, {
            "apiVersion": "rbac.authorization.k8s.io/v1", "kind": "RoleBinding", "metadata": {"name": name},
            "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": name},
            "subjects": [{"kind": "User", "name": name, "apiGroup": "rbac.authorization.k8s.io"}]})
    cert, key = control_plane.client_certificate(name)
    path = control_plane.write_kubeconfig(f"kubeconfig-{name}", name, {"client-certificate": str(cert),
                                                                        "client-key": str(key)})
    return creds_mod.from_kubeconfig([str(path)])


# --------------------------------------------------------------------------- refused for good


def test_401_bad_token(control_plane, resources, kube, caplog):
    inventory = Inventory()
    _, claim, _ = pool_and_claims(kube, inventory)
    path = control_plane.write_kubeconfig(f"bad-{kube.ns}", "nobody", {"token": "not-a-token"})
    credentials = creds_mod.from_kubeconfig([str(path)])
    before = refusals("create", "IPAddress.ipam.metal3.io", 401)

    async def scenario():
        async with writer_for(credentials, resources, inventory) as writer:
            plan = Plan()
            claim_step(plan, claim, Create(address(kube.ns, "p-10-80-0-1")))
            first = await writer.execute(plan)
            second = await writer.execute(plan)
            return first, second, writer.readiness()

    with caplog.at_level(logging.INFO, logger="metal3_ipam"):
        first, second, readiness = asyncio.run(scenario())
    assert first.again and first.done == 0
    assert f"create IPAddress {kube.ns}/p-10-80-0-1 refused: 401 Unauthorized" in first.failures[0]
    assert f"IPClaim {kube.ns}/c1: create IPAddress {kube.ns}/p-10-80-0-1 refused: 401" in caplog.text
    assert refusals("create", "IPAddress.ipam.metal3.io", 401) == before + 1
    # Bounded: the second pass does not send it again before its backoff.
    assert second.again and "refused before; tried again in" in second.failures[0]
    assert refusals("create", "IPAddress.ipam.metal3.io", 401) == before + 1
    assert readiness and "every write is refused" in readiness and "401" in readiness
    assert "cannot write: every write is refused" in caplog.text


def test_403_is_written_on_the_claims_with_one_event(control_plane, api_client, resources, kube):
    """RBAC forbids creating addresses but lets the status and Events be written: both claim kinds say why."""
    inventory = Inventory()
    _, claim, capi_claim = pool_and_claims(kube, inventory)
    credentials = limited_user(control_plane, api_client, kube.ns, [
        {"apiGroups": ["ipam.metal3.io"], "resources": ["ipclaims/status"], "verbs": ["patch"]},
        {"apiGroups": ["ipam.cluster.x-k8s.io"], "resources": ["ipaddressclaims/status"], "verbs": ["patch"]},
        {"apiGroups": [""], "resources": ["events"], "verbs": ["create"]}])
    before = refusals("create", "IPAddress.ipam.metal3.io", 403)

    async def scenario():
        backoff = Backoff(first=0.2, cap=0.4)
        async with writer_for(credentials, resources, inventory, refusal_backoff=backoff) as writer:
            plan = Plan()
            claim_step(plan, claim, Create(address(kube.ns, "p-10-80-0-1")))
            claim_step(plan, capi_claim, Create(address(kube.ns, "p-10-80-0-2", ip="10.80.0.2", claim="k1")))
            first = await writer.execute(plan)
            await asyncio.sleep(0.5)  # past the backoff (0.2 s, doubled to 0.4 s at most): it is tried again
            again = await writer.execute(plan)
            return first, again, writer.readiness()

    first, again, readiness = asyncio.run(scenario())
    assert first.again and first.done == 0 and len(first.failures) == 2
    assert again.again and not any("refused before" in f for f in again.failures), "tried again after the backoff"
    assert refusals("create", "IPAddress.ipam.metal3.io", 403) == before + 4
    assert readiness is None, "status writes are accepted: the controller can write"

    stored = kube.ipclaim("c1")
    message = stored["status"]["errorMessage"]
    assert message.startswith(f"create IPAddress {kube.ns}/p-10-80-0-1 refused: 403 ")
    assert "cannot create resource \"ipaddresses\"" in message
    ready = condition(stored, "Ready")
    assert (ready["status"], ready["reason"], ready["message"]) == ("False", "AllocationFailed", message)
    capi = kube.capi_ipclaim("k1")
    capi_ready = condition(capi, "Ready")
    assert (capi_ready["status"], capi_ready["reason"]) == ("False", "AllocationFailed")
    assert capi_ready["message"].startswith(f"create IPAddress {kube.ns}/p-10-80-0-2 refused: 403 ")
    assert "errorMessage" not in capi.get("status", {})

    events = eventually(lambda: [e for e in kube.events() if e.reason == "AllocationFailed"] or None,
                        what="the Warning Events")
    assert {(e.involved_object.kind, e.involved_object.name, e.type) for e in events} == \
        {("IPClaim", "c1", "Warning"), ("IPAddressClaim", "k1", "Warning")}
    assert len(events) == 2, "the same refusal again is not a second Event"


def test_413_a_status_too_large_is_a_pool_condition(resources, admin, kube):
    inventory = Inventory()
    pool, _, _ = pool_and_claims(kube, inventory)
    # About 3.5 MiB: over the API server's 3 MiB request limit.
    huge = {"indexes": {f"claim-{i:06d}-{'x' * 40}": "10.80.0.1" for i in range(60_000)}}
    before = refusals("patch-status", "IPPool.ipam.metal3.io", 413)

    async def scenario():
        async with writer_for(admin, resources, inventory) as writer:
            plan = Plan()
            plan.step(f"IPPool {kube.ns}/p", about=o.ref(pool)).add(SetStatus(o.ref(pool), huge))
            return await writer.execute(plan)

    outcome = asyncio.run(scenario())
    assert outcome.again and "413" in outcome.failures[0]
    assert refusals("patch-status", "IPPool.ipam.metal3.io", 413) == before + 1
    ready = condition(kube.ippool("p"), "Ready")
    assert (ready["status"], ready["reason"]) == ("False", "WriteRefused")
    assert ready["message"].startswith(f"patch-status IPPool {kube.ns}/p refused: 413 ")
    kube.warning_event("p", "WriteRefused")


def test_422_an_invalid_object_is_written_on_its_claim(resources, admin, kube):
    inventory = Inventory()
    _, claim, _ = pool_and_claims(kube, inventory)
    before = refusals("create", "IPAddress.ipam.metal3.io", 422)

    # A first delay longer than the test: the second try comes within it however slow the machine is.
    backoff = Backoff(first=600.0, cap=600.0)

    async def scenario():
        async with writer_for(admin, resources, inventory, refusal_backoff=backoff) as writer:
            plan = Plan()
            claim_step(plan, claim, Create(address(kube.ns, "p-bad", ip="not-an-ip")),
                       SetStatus(o.ref(claim), {"address": {"name": "p-bad"}}))
            started = time.monotonic()
            first = await writer.execute(plan)
            second = await writer.execute(plan)
            key = (f"IPClaim {kube.ns}/c1", "create", "IPAddress.ipam.metal3.io")
            return first, second, backoff.wait(key, started), backoff.wait(key, time.monotonic())

    first, second, wait_from_start, wait_at_end = asyncio.run(scenario())
    assert first.again and "422" in first.failures[0]
    assert "refused before" in second.failures[0]
    assert 0 < wait_at_end <= backoff.first <= wait_from_start  # once refused, for the first delay
    assert refusals("create", "IPAddress.ipam.metal3.io", 422) == before + 1
    stored = kube.ipclaim("c1")
    assert stored["status"]["errorMessage"].startswith(f"create IPAddress {kube.ns}/p-bad refused: 422 ")
    assert "address" not in stored["status"], "the rest of the step was not carried out"
    assert condition(stored, "Ready")["reason"] == "AllocationFailed"
    kube.warning_event("c1", "AllocationFailed")


# --------------------------------------------------------------------------- 404 and 409


def test_404_gone(resources, admin, kube):
    inventory = Inventory()
    _, claim, _ = pool_and_claims(kube, inventory)
    missing = o.Ref("ipam.metal3.io/v1alpha1", "IPAddress", kube.ns, "p-10-80-0-7")

    async def scenario():
        async with writer_for(admin, resources, inventory) as writer:
            plan = Plan()
            plan.step("delete").add(Delete(missing, resource_version="1"))
            plan.step("finalizers").add(SetFinalizers(missing, (), "1"))
            gone_claim = o.Ref(claim["apiVersion"], "IPClaim", kube.ns, "nope")
            plan.step("status", about=gone_claim).add(SetStatus(gone_claim, {"errorMessage": "x"}))
            return await writer.execute(plan)

    outcome = asyncio.run(scenario())
    assert outcome.done == 2 and outcome.deleted == [missing]
    assert outcome.failures == [f"status: IPClaim {kube.ns}/nope is gone"]
    assert not outcome.again


def test_409_name_taken_and_stale_reads(resources, admin, kube):
    inventory = Inventory()
    pool_and_claims(kube, inventory)
    taken = kube.create(METAL3, "ipaddresses", address(kube.ns, "p-10-80-0-3", ip="10.80.0.3", claim="other"))
    stale = copy.deepcopy(taken)
    kube.patch(METAL3, "ipaddresses", "p-10-80-0-3", {"metadata": {"labels": {"changed": "yes"}}})

    async def scenario():
        async with writer_for(admin, resources, inventory) as writer:
            plan = Plan()
            plan.step("create").add(Create(address(kube.ns, "p-10-80-0-3", ip="10.80.0.3")))
            plan.step("finalizers").add(SetFinalizers(o.ref(stale), (FIN,), o.meta(stale)["resourceVersion"]))
            return await writer.execute(plan)

    outcome = asyncio.run(scenario())
    assert outcome.again and outcome.done == 0
    assert sorted(outcome.failures) == [
        f"create: IPAddress {kube.ns}/p-10-80-0-3 exists already",
        f"finalizers: IPAddress {kube.ns}/p-10-80-0-3 changed since it was read"]
    held = inventory.get(("ipam.metal3.io", "IPAddress"), kube.ns, "p-10-80-0-3")
    assert held["spec"]["claim"]["name"] == "other", "who holds the name was read into the inventory"


# --------------------------------------------------------------------------- delete preconditions: both executors


def _stored(kube: Kube, name: str) -> dict | None:
    return kube.get(METAL3, "ipaddresses", name)


def _run_both(admin, resources, kube: Kube, state: dict, plan: Plan):
    """The plan through the REST writer (against the API server) and the in-memory executor (fed the same
    object as the API server holds it); returns (REST outcome, memory refusals, memory's object)."""
    memory = MemoryApi()
    memory.inventory.upsert(copy.deepcopy(state))

    async def rest():
        inventory = Inventory()
        inventory.upsert(copy.deepcopy(state))
        async with writer_for(admin, resources, inventory) as writer:
            return await writer.execute(plan)

    outcome = asyncio.run(rest())
    refused = memory.apply(plan)
    return outcome, refused, memory.inventory.get(("ipam.metal3.io", "IPAddress"), kube.ns, o.name(state))


def _let_go(ref: o.Ref, version: str | None) -> Plan:
    plan = Plan()
    step = plan.step(f"IPAddress {ref.namespace}/{ref.name}")
    step.add(Delete(ref, resource_version=version))
    step.add(SetFinalizers(ref, (), version))
    return plan


def test_delete_of_a_changed_object_is_refused_by_both_executors(resources, admin, kube):
    read = kube.create(METAL3, "ipaddresses", address(kube.ns, "p-10-80-0-4", ip="10.80.0.4", finalizers=[FIN]))
    now = kube.patch(METAL3, "ipaddresses", "p-10-80-0-4", {"metadata": {"labels": {"changed": "yes"}}})

    outcome, refused, in_memory = _run_both(admin, resources, kube, now, _let_go(o.ref(read), o.meta(read)[
        "resourceVersion"]))
    assert outcome.again and outcome.failures == [
        f"IPAddress {kube.ns}/p-10-80-0-4: IPAddress {kube.ns}/p-10-80-0-4 changed since it was read; not deleted"]
    assert refused == [f"IPAddress {kube.ns}/p-10-80-0-4: IPAddress {kube.ns}/p-10-80-0-4 changed since it was read"]
    stored = _stored(kube, "p-10-80-0-4")
    assert stored and not stored["metadata"].get("deletionTimestamp") and stored["metadata"]["finalizers"] == [FIN]
    assert in_memory and not in_memory["metadata"].get("deletionTimestamp")


def test_delete_of_a_replaced_object_is_refused_by_both_executors(resources, admin, kube):
    old = kube.create(METAL3, "ipaddresses", address(kube.ns, "p-10-80-0-5", ip="10.80.0.5"))
    kube.delete(METAL3, "ipaddresses", "p-10-80-0-5")
    kube.gone(METAL3, "ipaddresses", "p-10-80-0-5")
    new = kube.create(METAL3, "ipaddresses", address(kube.ns, "p-10-80-0-5", ip="10.80.0.5", claim="c2"))
    assert o.meta(new)["uid"] != o.meta(old)["uid"]

    plan = Plan()
    plan.step("orphan").add(Delete(o.ref(old)))  # the uid alone: it must be that incarnation
    outcome, refused, in_memory = _run_both(admin, resources, kube, new, plan)
    assert outcome.again and "changed since it was read" in outcome.failures[0]
    assert refused == [f"orphan: IPAddress {kube.ns}/p-10-80-0-5 was replaced since it was read"]
    assert _stored(kube, "p-10-80-0-5")["spec"]["claim"]["name"] == "c2"
    assert in_memory["spec"]["claim"]["name"] == "c2"


def test_delete_of_an_unchanged_object_goes_through_in_both_executors(resources, admin, kube):
    read = kube.create(METAL3, "ipaddresses", address(kube.ns, "p-10-80-0-6", ip="10.80.0.6", finalizers=[FIN]))
    outcome, refused, in_memory = _run_both(admin, resources, kube, read,
                                            _let_go(o.ref(read), o.meta(read)["resourceVersion"]))
    assert not outcome.failures and outcome.done == 2 and not refused
    kube.gone(METAL3, "ipaddresses", "p-10-80-0-6")
    assert in_memory is None


# --------------------------------------------------------------------------- a failing peer: 5xx, timeouts


@asynccontextmanager
async def failing_peer(answer):
    """A plain HTTP server on 127.0.0.1 answering every request with ``answer(request)``."""
    seen = []

    async def handle(request: web.Request) -> web.StreamResponse:
        seen.append((request.method, request.path))
        return await answer(request)

    app = web.Application()
    app.router.add_route("*", "/{tail:.*}", handle)
    runner = web.AppRunner(app, shutdown_timeout=0.1)
    await runner.setup()
    port = free_port()
    await web.TCPSite(runner, "127.0.0.1", port).start()
    try:
        yield f"http://127.0.0.1:{port}", seen
    finally:
        await runner.cleanup()


def _claim_ref_plan(ns: str = "ns") -> tuple[Plan, Inventory]:
    claim = {"apiVersion": "ipam.metal3.io/v1alpha1", "kind": "IPClaim",
             "metadata": {"name": "c1", "namespace": ns, "uid": "u1", "resourceVersion": "1"},
             "spec": {"pool": {"name": "p"}}}
    inventory = Inventory()
    inventory.upsert(claim)
    plan = Plan()
    claim_step(plan, claim, Create(address(ns, "p-10-80-0-1")))
    return plan, inventory


@pytest.mark.parametrize("status", [500, 503, 429])
def test_server_errors_are_retried_without_a_refusal(resources, status):
    async def answer(_):
        return web.json_response({"kind": "Status", "message": "try later", "code": status}, status=status)

    async def scenario():
        async with failing_peer(answer) as (url, seen):
            plan, inventory = _claim_ref_plan()
            credentials = creds_mod.Credentials(server=url)
            async with writer_for(credentials, resources, inventory) as writer:
                first = await writer.execute(plan)
                second = await writer.execute(plan)
                return first, second, list(seen), len(writer.backoff), writer.readiness(), inventory

    first, second, seen, backed_off, readiness, inventory = asyncio.run(scenario())
    assert first.again and first.failures == [f"IPClaim ns/c1: {status} try later"]
    assert second.again and second.failures == first.failures, "retried at once: the worker's backoff paces it"
    assert seen == [("POST", "/apis/ipam.metal3.io/v1alpha1/namespaces/ns/ipaddresses")] * 2
    assert backed_off == 0 and readiness is None
    assert refusals("create", "IPAddress.ipam.metal3.io", status) == 0
    assert "errorMessage" not in inventory.get(("ipam.metal3.io", "IPClaim"), "ns", "c1").get("status", {})


def test_timeouts_are_retried_without_a_refusal(resources):
    never = asyncio.Event()

    async def answer(_):
        await never.wait()  # never answers
        return web.Response()

    async def scenario():
        async with failing_peer(answer) as (url, seen):
            plan, inventory = _claim_ref_plan()
            credentials = creds_mod.Credentials(server=url)
            async with writer_for(credentials, resources, inventory, request_timeout=0.5) as writer:
                started = time.monotonic()
                outcome = await writer.execute(plan)
                took = time.monotonic() - started
                never.set()
                return outcome, took, len(writer.backoff), writer.readiness()

    outcome, took, backed_off, readiness = asyncio.run(scenario())
    assert outcome.again and outcome.done == 0
    assert outcome.failures[0].startswith("IPClaim ns/c1: 0 ") and "Timeout" in outcome.failures[0]
    default = inspect.signature(ApiWriter).parameters["request_timeout"].default
    # Its own timeout ended it (0.5 s), not the default one (60 s): load can only make it later, and not by a minute.
    assert 0.4 <= took < default
    assert backed_off == 0 and readiness is None


def test_connection_refused_is_retried_without_a_refusal(resources):
    async def scenario():
        plan, inventory = _claim_ref_plan()
        credentials = creds_mod.Credentials(server=f"http://127.0.0.1:{free_port()}")
        async with writer_for(credentials, resources, inventory) as writer:
            return await writer.execute(plan), len(writer.backoff)

    outcome, backed_off = asyncio.run(scenario())
    assert outcome.again and outcome.failures[0].startswith("IPClaim ns/c1: 0 ClientConnectorError")
    assert backed_off == 0
