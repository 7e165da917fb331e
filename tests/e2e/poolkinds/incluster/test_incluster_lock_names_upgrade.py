"""An upgrade in place over locks an earlier version of this controller wrote, on a real API server.

The earlier version wrote the lock of each IP as a Metal3 IPAddress, named ``<pool>-<ip>`` (``gip-<pool>-<ip>``
for a global pool, ``<pool>-<base>.<length>`` for a sub-prefix), names that met for two pools (``a`` +
1:2::/64 and ``a-1`` + 2::/64). A controller serves an IP pool, a global IP pool and a prefix pool and
stops; its locks are put back as that version left them (Metal3 IPAddresses under those names, no Lease).
The controller started again moves each to a Lease of the lock namespace under its name: the Lease first, the
IPAddress deleted only once it exists, so at every revision of the store (watched from before the start) each
of those IPs is locked by one or the other; it hands their IPs to no other claim, and once a claim is deleted
its old lock goes with it and the IP is locked anew under the new name for the next claim.
"""

from __future__ import annotations

import threading

from kubernetes import client, watch

from controller_fixtures import METAL3, Kube
from incluster_fixtures import unique_ips
from metal3_ipam.core import lockstore
from metal3_ipam.core.naming import address_name
from metal3_ipam.core.objects import is_guard
from metal3_ipam.poolkinds.incluster.ip_pools import lock_prefix
from metal3_ipam.testing import go_incluster as gi
from metal3_ipam.testing.locks import lease_locks, metal3_locks
from metal3_ipam.testing.waiting import eventually

TAGS = {gi.GLOBAL_IN_CLUSTER_IP_POOL: "gip", gi.GLOBAL_IN_CLUSTER_PREFIX_POOL: "gpp"}


def _old_name(lock: dict) -> str:
    """The name the earlier version gave ``lock``."""
    pool, spec = lock["spec"]["pool"], lock["spec"]
    kind = (gi.GROUP, pool["kind"])
    length = spec.get("prefix") if pool["kind"].endswith("PrefixPool") else None
    name = address_name(lock_prefix(kind, pool["name"], TAGS.get(pool["kind"]), room=len(".128") if length else 0),
                        spec["address"])
    return f"{name}.{length}" if length else name


def _renamed_as_before(kube, incluster) -> dict[str, dict]:
    """Each lock written back as the earlier version left it: a Metal3 IPAddress under its old name, the Lease
    deleted past its finalizer (no controller runs), and its twin, the Metal3 IPAddress of its new name, too; the
    guards of IPs deleted (that version wrote none)."""
    for lock in lease_locks(kube.api_client, kube.ns):
        meta = lock["metadata"]
        lease = meta["annotations"][lockstore.STORED_IN]
        where = Kube(kube.api_client, meta["namespace"])
        if where.get(METAL3, "ipaddresses", meta["name"]) is not None:
            where.delete_past_finalizers(METAL3, "ipaddresses", meta["name"])
        if not is_guard(lock):
            where.create(METAL3, "ipaddresses", {
                "apiVersion": lock["apiVersion"], "kind": "IPAddress", "spec": lock["spec"],
                "metadata": {"name": _old_name(lock), **{k: meta[k] for k in ("labels", "ownerReferences", "finalizers")
                                                          if k in meta}}})
        leases = client.CoordinationV1Api(kube.api_client)
        leases.patch_namespaced_lease(lease, kube.ns, {"metadata": {"finalizers": None}})
        leases.delete_namespaced_lease(lease, kube.ns)
    return {x["metadata"]["name"]: x for x in metal3_locks(kube.api_client)
            if x["metadata"]["namespace"] in (kube.ns, incluster.ns)}


class Record:
    """Every change of the locks of both stores from one revision on, in the store's order (a watch per store)."""

    def __init__(self, kube, since: str) -> None:
        self.events: list[tuple[int, str, str, dict]] = []
        self.watches = [watch.Watch(), watch.Watch()]
        leases = client.CoordinationV1Api(kube.api_client)
        custom = client.CustomObjectsApi(kube.api_client)
        self.threads = [
            threading.Thread(target=self._follow, daemon=True, args=(self.watches[0], "lease", lambda **kw: (
                leases.list_namespaced_lease(kube.ns, label_selector=lockstore.LOCK_LABEL, **kw)), kube.api_client)),
            threading.Thread(target=self._follow, daemon=True, args=(self.watches[1], "metal3", lambda **kw: (
                custom.list_cluster_custom_object(*METAL3, "ipaddresses", **kw)), None))]
        self.since = since
        self.stopped = False
        for thread in self.threads:
            thread.start()

    def _follow(self, w, store, lister, api) -> None:
        try:
            self._read(w, store, lister, api)
        except Exception:  # noqa: BLE001  (the stream cut when the control plane stops, after the test)
            if not self.stopped:
                raise

    def _read(self, w, store, lister, api) -> None:
        for event in w.stream(lister, resource_version=self.since, timeout_seconds=600):
            obj = event["object"]
            obj = api.sanitize_for_serialization(obj) if api is not None else obj
            if store == "lease":
                obj = lockstore.from_lease(obj)
                if obj is None:
                    continue
            self.events.append((int(obj["metadata"]["resourceVersion"]), event["type"], store, obj))

    def stop(self) -> list[tuple[int, str, str, dict]]:
        self.stopped = True
        for w in self.watches:
            w.stop()
        return sorted(self.events, key=lambda e: e[0])


def _always_locked(events, old: dict[str, dict]) -> None:
    """Replayed in the store's order: each old lock's IP is held by its IPAddress or its Lease at every step."""
    held = {("metal3", x["metadata"]["namespace"], name) for name, x in old.items()}
    seen = {(kind, store, obj["metadata"]["name"]) for _, kind, store, obj in events}
    for name in old:  # the Lease given was recorded: what follows is no vacuous truth
        assert ("ADDED", "lease", name) in seen, (name, sorted(seen))
    for revision, kind, store, obj in events:
        key = (store, obj["metadata"]["namespace"], obj["metadata"]["name"])
        if kind == "DELETED":
            held.discard(key)
        else:
            held.add(key)
        for name, x in old.items():
            ns = x["metadata"]["namespace"]
            assert ("metal3", ns, name) in held or ("lease", ns, name) in held, \
                f"{x['spec']['address']} ({ns}/{name}) unlocked at revision {revision}"


def test_locks_written_by_an_earlier_version_move_to_leases_and_hold_their_ips(controller_factory, incluster,
                                                                                 kube):
    ns, other = incluster.ns, incluster.namespace()
    g = incluster.global_name("locks")
    incluster.ip_pool("pool-a", addresses=["fd00::1-fd00::3"], prefix=64)
    incluster.global_ip_pool(g, addresses=["10.9.0.1-10.9.0.2"], prefix=24)
    incluster.prefix_pool("pp", prefixes=["fd01::/63"])
    incluster.claim("a0", "pool-a")
    incluster.claim("g0", g, gi.GLOBAL_IN_CLUSTER_IP_POOL)
    incluster.claim("p0", "pp", gi.IN_CLUSTER_PREFIX_POOL)
    args = ["-A", "--no-leader-elect", "--lock-namespace", ns]
    first = controller_factory(args, name="earlier")
    assert [incluster.ip(n) for n in ("a0", "g0", "p0")] == ["fd00::1", "10.9.0.1", "fd01::"]
    first.stop()

    old = _renamed_as_before(kube, incluster)
    assert set(old) == {"pool-a-fd00--1", f"gip-{g}-10-9-0-1", "pp-fd01.64"}, set(old)
    since = client.CoordinationV1Api(kube.api_client).list_namespaced_lease(ns).metadata.resource_version
    record = Record(kube, since)

    controller_factory(args, name="upgraded")
    incluster.claim("a1", "pool-a")
    incluster.claim("a2", "pool-a")
    incluster.claim("g1", g, gi.GLOBAL_IN_CLUSTER_IP_POOL, namespace=other)
    incluster.claim("p1", "pp", gi.IN_CLUSTER_PREFIX_POOL)
    assert sorted(incluster.ip(n) for n in ("a1", "a2")) == ["fd00::2", "fd00::3"]
    assert incluster.ip("g1", namespace=other) == "10.9.0.2"
    assert incluster.ip("p1") == "fd01:0:0:1::"
    incluster.claim("a3", "pool-a")
    incluster.not_ready("a3", "PoolExhausted")

    # The old locks given Leases under their old names beside them, the IPAddresses kept (an earlier version reads
    # them), their IPs locked throughout.
    eventually(lambda: set(old) <= {x["metadata"]["name"] for x in lease_locks(kube.api_client, ns)}, timeout=30,
               what="the earlier version's locks given their Leases")
    assert set(old) <= {x["metadata"]["name"] for x in metal3_locks(kube.api_client)}
    locks = {x["metadata"]["name"]: x for x in lease_locks(kube.api_client, ns) if not is_guard(x)}
    for name, was in old.items():
        assert locks[name]["spec"] == was["spec"] and locks[name]["metadata"]["namespace"] == \
            was["metadata"]["namespace"], name
    _always_locked(record.stop(), old)
    assert {locks[n]["spec"]["address"] for n in locks if n not in old} == \
        {"fd00::2", "fd00::3", "10.9.0.2", "fd01:0:0:1::"}
    assert "pool-a.fd00-0-0-0-0-0-0-2.ip" in locks or "pool-a.fd00-0-0-0-0-0-0-3.ip" in locks
    assert f"{g}.10-9-0-2.gip" in locks and "pp.fd01-0-0-1-0-0-0-0.64.pp" in locks
    unique_ips(incluster.all_addresses())

    # A claim of an old lock deleted: the old lock goes with it, and the waiting claim is locked anew.
    incluster.delete_claim("a0")
    incluster.claim_gone("a0")
    assert incluster.ip("a3") == "fd00::1"

    def names() -> set[str]:
        return {x["metadata"]["name"] for x in lease_locks(kube.api_client, ns)}
    eventually(lambda: "pool-a-fd00--1" not in names(), timeout=20, what="the old lock of a0 gone")
    eventually(lambda: "pool-a-fd00--1" not in {x["metadata"]["name"] for x in metal3_locks(kube.api_client)},
               timeout=20, what="the earlier version's IPAddress of a0 gone")
    [lock] = [x for x in lease_locks(kube.api_client, ns) if x["metadata"]["name"] == "pool-a.fd00-0-0-0-0-0-0-1.ip"]
    assert lock["spec"]["claim"]["name"] == "a3"
