"""An upgrade in place over locks an earlier version of this controller named, on a real API server.

The earlier version named the Metal3 IPAddress locking each IP ``<pool>-<ip>`` (``gip-<pool>-<ip>`` for
a global pool, ``<pool>-<base>.<length>`` for a sub-prefix), names that met for two pools (``a`` +
1:2::/64 and ``a-1`` + 2::/64). A controller serves an IP pool, a global IP pool and a prefix pool and
stops; its locks are put under the names the earlier version gave them (the state that version leaves).
The controller started again keeps each of them as it is — same object, same resourceVersion, so no IP is
unlocked for a moment —, hands their IPs to no other claim, and once a claim is deleted its old lock goes
with it and the IP is locked anew under the new name for the next claim.
"""

from __future__ import annotations

from controller_fixtures import METAL3
from incluster_fixtures import unique_ips
from metal3_ipam.core.naming import address_name
from metal3_ipam.core.objects import is_guard
from metal3_ipam.poolkinds.incluster.ip_pools import lock_prefix
from metal3_ipam.testing import go_incluster as gi
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


def _renamed_as_before(kube) -> dict[str, dict]:
    """Each lock copied under its old name, then the new one deleted past its finalizer (no controller runs);
    the guards of IPs in their claims' namespaces deleted (the earlier version wrote none)."""
    for lock in kube.list(METAL3, "ipaddresses"):
        meta = lock["metadata"]
        if is_guard(lock):
            kube.delete_past_finalizers(METAL3, "ipaddresses", meta["name"])
            continue
        kube.create(METAL3, "ipaddresses", {
            "apiVersion": lock["apiVersion"], "kind": "IPAddress", "spec": lock["spec"],
            "metadata": {"name": _old_name(lock), **{k: meta[k] for k in ("labels", "ownerReferences", "finalizers")
                                                      if k in meta}}})
        kube.delete_past_finalizers(METAL3, "ipaddresses", meta["name"])
    return {x["metadata"]["name"]: x for x in kube.list(METAL3, "ipaddresses")}


def test_locks_named_by_an_earlier_version_hold_their_ips_through_an_upgrade(controller_factory, incluster, kube):
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

    old = _renamed_as_before(kube)
    assert set(old) == {"pool-a-fd00--1", f"gip-{g}-10-9-0-1", "pp-fd01.64"}, set(old)

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

    # The old locks as they were: never deleted, rewritten or replaced, so their IPs were locked throughout.
    locks = {x["metadata"]["name"]: x for x in kube.list(METAL3, "ipaddresses") if not is_guard(x)}
    for name, was in old.items():
        assert (locks[name]["metadata"]["uid"], locks[name]["metadata"]["resourceVersion"]) == \
            (was["metadata"]["uid"], was["metadata"]["resourceVersion"]), name
    assert {locks[n]["spec"]["address"] for n in locks if n not in old} == \
        {"fd00::2", "fd00::3", "10.9.0.2", "fd01:0:0:1::"}
    assert "pool-a.fd00-0-0-0-0-0-0-2.ip" in locks or "pool-a.fd00-0-0-0-0-0-0-3.ip" in locks
    assert f"{g}.10-9-0-2.gip" in locks and "pp.fd01-0-0-1-0-0-0-0.64.pp" in locks
    unique_ips(incluster.all_addresses())

    # A claim of an old lock deleted: the old lock goes with it, and the waiting claim is locked anew.
    incluster.delete_claim("a0")
    incluster.claim_gone("a0")
    assert incluster.ip("a3") == "fd00::1"
    eventually(lambda: kube.ipaddress("pool-a-fd00--1") is None, timeout=20, what="the old lock of a0 gone")
    assert kube.ipaddress("pool-a.fd00-0-0-0-0-0-0-1.ip")["spec"]["claim"]["name"] == "a3"
