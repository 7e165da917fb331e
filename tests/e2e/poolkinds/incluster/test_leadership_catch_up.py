"""A replica that takes the lead writes nothing before it has listed the locks afresh, on a real API server.

The leader of an earlier version, which named the in-cluster pools' locks ``<pool>-<ip>``, may lock an IP
just before it hands the Lease over. The API server refuses a second lock of one name only: a new leader
deciding from watches that do not show that lock yet would lock the IP again, under its own name
(``<pool>.<ip>.ip``), for another claim. The controller runs in this process with its watch events of
Metal3 IPAddresses, and of the claim the earlier leader was serving, held back until the test lets them
through: its view trails by exactly as much as the test wants.
"""

from __future__ import annotations

import asyncio
import datetime
import uuid

from kubernetes import client

from controller_fixtures import METAL3
from incluster_fixtures import InCluster
from metal3_ipam.controller.leader import LeaseTiming
from metal3_ipam.controller.runtime import Options, Runtime
from metal3_ipam.core import kinds
from metal3_ipam.core import objects as o
from metal3_ipam.testing.waiting import eventually_async

TIMING = LeaseTiming(lease_duration=4.0, renew_deadline=3.0, retry_period=0.5)
EARLIER = "earlier-version"
X, Y = "10.44.0.1", "10.44.0.2"


class HeldBack:
    """The runtime's watch events, those ``held`` picks kept back until ``let_through``."""

    def __init__(self, runtime: Runtime, held) -> None:
        self.deliver = runtime.controller.on_event
        self.held = held
        self.kept: list[tuple[str, dict]] = []
        self.holding = True
        runtime.controller.on_event = self.on_event  # what the watches are given when they start

    def on_event(self, event_type: str, obj: dict) -> None:
        if self.holding and self.held(obj):
            self.kept.append((event_type, obj))
        else:
            self.deliver(event_type, obj)

    def let_through(self) -> None:
        self.holding = False
        for event_type, obj in self.kept:
            self.deliver(event_type, obj)


def _lease(api: client.ApiClient, namespace: str, name: str, holder: str) -> None:
    now = datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%dT%H:%M:%S.%fZ")
    client.CoordinationV1Api(api).create_namespaced_lease(namespace, {
        "apiVersion": "coordination.k8s.io/v1", "kind": "Lease", "metadata": {"name": name},
        "spec": {"holderIdentity": holder, "leaseDurationSeconds": 3600, "renewTime": now, "acquireTime": now,
                 "leaseTransitions": 0}})


def _hand_over(api: client.ApiClient, namespace: str, name: str) -> None:
    """What a stopping leader does last: the holder emptied, so a standby takes over at its next attempt."""
    client.CoordinationV1Api(api).patch_namespaced_lease(name, namespace, {"spec": {"holderIdentity": ""}})


def _earlier_lock(pool: dict, claim: dict) -> dict:
    """The lock an earlier version wrote for ``claim`` at X: named ``<pool>-<ip>``, its spec as now."""
    def owner(obj: dict) -> dict:
        return {"apiVersion": obj["apiVersion"], "kind": obj["kind"], "name": obj["metadata"]["name"],
                "uid": obj["metadata"]["uid"]}

    return {
        "apiVersion": "/".join(METAL3), "kind": "IPAddress",
        "metadata": {"name": f"{pool['metadata']['name']}-{X.replace('.', '-')}",
                     "finalizers": [kinds.FINALIZERS[kinds.IPADDRESS]],
                     "ownerReferences": [owner(pool), owner(claim)]},
        "spec": {"address": X, "prefix": 24,
                 "pool": {"apiVersion": pool["apiVersion"], "kind": pool["kind"], "name": pool["metadata"]["name"],
                          "namespace": pool["metadata"]["namespace"]},
                 "claim": {"apiVersion": claim["apiVersion"], "kind": claim["kind"],
                           "name": claim["metadata"]["name"], "namespace": claim["metadata"]["namespace"]}}}


def _ips_locked(kube) -> dict[str, list[str]]:
    """The locks by IP (the guards of the namespace's IPs left out), whichever store holds each lock (the Leases
    of the lock namespace, the namespace itself here; Metal3 IPAddresses, the Leases' twins and those an earlier
    version wrote), each name once."""
    locks: dict[str, set[str]] = {}
    for lock in [*kube.locks(kube.ns), *kube.list(METAL3, "ipaddresses")]:
        if not o.is_guard(lock):
            locks.setdefault(lock["spec"]["address"], set()).add(lock["metadata"]["name"])
    return {ip: sorted(names) for ip, names in locks.items()}


def test_a_lock_written_just_before_a_handover_holds_its_ip_for_the_new_leader(control_plane, incluster: InCluster,
                                                                                 kube):
    ns, api = incluster.ns, incluster.api_client
    lease = f"lease-{uuid.uuid4().hex[:8]}"
    pool = incluster.ip_pool("pool-a", addresses=[f"{X}-{Y}"], prefix=24)
    _lease(api, ns, lease, EARLIER)
    options = Options(kubeconfig=str(control_plane.kubeconfig), namespaces=[ns], health_host="127.0.0.1",
                      health_port=0, lease_namespace=ns, lease_name=lease, lock_namespace=ns, lease_timing=TIMING,
                      resync_seconds=3600)

    async def scenario() -> None:
        runtime = Runtime(options)
        await runtime.connect()
        runtime.assemble()
        held = HeldBack(runtime, lambda obj: kinds.kind_of(obj) == kinds.IPADDRESS
                        or (kinds.kind_of(obj) == kinds.CAPI_CLAIM and obj["metadata"]["name"] == "earlier"))
        try:
            await runtime.start()
            await eventually_async(lambda: runtime.loaded, timeout=30, what="the inventory loaded")
            assert not runtime.may_write(), "the lease is the earlier version's"

            # The earlier version's leader locks X for a claim of its own, then hands the lease over.
            earlier = await asyncio.to_thread(incluster.claim, "earlier", "pool-a")
            await asyncio.to_thread(kube.create, METAL3, "ipaddresses", _earlier_lock(pool, earlier))
            await asyncio.to_thread(_hand_over, api, ns, lease)
            await eventually_async(runtime.may_write, timeout=30, what="the lease taken and writes allowed")
            # Its writes are given up by the API server once its tenure is over.
            assert 0 < runtime.write_deadline() <= TIMING.renew_deadline

            # A claim of the pool now gets the other IP, though the new leader's watch still holds X's lock back.
            await asyncio.to_thread(incluster.claim, "new", "pool-a")
            assert await asyncio.to_thread(incluster.ip, "new") == Y
            assert held.kept, "the watch of IPAddresses showed nothing: the test held nothing back"

            held.let_through()
            assert await asyncio.to_thread(incluster.ip, "earlier", timeout=60) == X
            # The earlier version's lock, given a Lease under its name, and this version's; both kept as Metal3
            # IPAddresses too.
            want = {X: ["pool-a-10-44-0-1"], Y: ["pool-a.10-44-0-2.ip"]}
            await eventually_async(lambda: _ips_locked(kube) == want, timeout=30,
                                   what=f"the locks to be {want}, not {_ips_locked(kube)}")
            await eventually_async(lambda: sorted(x["metadata"]["name"] for x in kube.locks(kube.ns)
                                                  if not o.is_guard(x)) == ["pool-a-10-44-0-1", "pool-a.10-44-0-2.ip"],
                                   timeout=30, what="both locks stored as Leases")
            assert sorted(x["metadata"]["name"] for x in kube.list(METAL3, "ipaddresses") if not o.is_guard(x)) \
                == ["pool-a-10-44-0-1", "pool-a.10-44-0-2.ip"]
        finally:
            await runtime.stop()

    asyncio.run(scenario())
