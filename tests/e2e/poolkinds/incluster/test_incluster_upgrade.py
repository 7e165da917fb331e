"""In-place upgrade from the Cluster API in-cluster IPAM provider, on a real API server.

The state that provider leaves is written through the API with no controller running
(``metal3_ipam.testing.go_incluster``: its finalizers and names, a namespaced, a global and an IPv6
pool, claims naming their Cluster by label and by ``spec.clusterName``, a claim it had only given its
finalizer, a claim it never saw, an address held in its reuse grace period). Then this controller is
started on it: every allocation is adopted as it is — not one IPAddress object changes, not even its
resourceVersion —, claims get ``Ready``, new claims get only addresses nobody holds (for the global
pool: in any namespace), the held address is released at its deadline and only then handed out again.
"""

from __future__ import annotations

import datetime
import time

from controller_fixtures import CLUSTER_NAME_LABEL, condition
from incluster_fixtures import BIND, assert_go_shape, ip_int, unique_ips
from metal3_ipam.testing import go_incluster as gi
from metal3_ipam.testing.waiting import eventually

GRACE = 30


def _write_go_state(incluster) -> dict:
    """The provider's state; returns names: namespaces, the global pool, the claims by role."""
    a, b = incluster.ns, incluster.namespace()
    g = incluster.global_name("global-a")
    incluster.global_pools.append((gi.GLOBAL_IN_CLUSTER_IP_POOL, g))
    incluster.cluster("cluster-a", namespace=a)
    pools = [
        gi.ip_pool("pool-a", namespace=a, prefix=22, gateway="10.0.0.1", excluded=["10.0.0.3"],
                   addresses=["10.0.0.0/29", "10.0.1.5-10.0.1.6", "10.0.2.9"]),
        gi.ip_pool(g, prefix=24, gateway="192.168.10.1", addresses=["192.168.10.0/29"], allocate_reserved=True,
                   grace_seconds=GRACE),
        gi.ip_pool("pool-v6", namespace=b, prefix=64, addresses=["2001:db8::/126"]),
    ]
    label = {CLUSTER_NAME_LABEL: "cluster-a"}
    claims = [
        gi.claim("m0", a, gi.IN_CLUSTER_IP_POOL, "pool-a", labels=label),
        gi.claim("m1", a, gi.IN_CLUSTER_IP_POOL, "pool-a", cluster_name="cluster-a"),
        gi.claim("g0", a, gi.GLOBAL_IN_CLUSTER_IP_POOL, g, labels={**label, "other": "x"}),
        gi.claim("g0", b, gi.GLOBAL_IN_CLUSTER_IP_POOL, g),
        gi.claim("v0", b, gi.IN_CLUSTER_IP_POOL, "pool-v6"),
        gi.claim("half", a, gi.IN_CLUSTER_IP_POOL, "pool-a", labels=label),    # finalizer only
        gi.claim("fresh", a, gi.IN_CLUSTER_IP_POOL, "pool-a", labels=label),   # never seen
    ]
    incluster.writer.write(pools, claims, serve=[(a, "m0"), (a, "m1"), (a, "g0"), (b, "g0"), (b, "v0")],
                           first_pass_only=[(a, "half")], in_grace=[(b, "g0")])
    return {"a": a, "b": b, "global": g}


def _addresses(incluster) -> dict[tuple[str, str], dict]:
    return {(x["metadata"]["namespace"], x["metadata"]["name"]): x for x in incluster.all_addresses()}


def test_the_writer_leaves_the_providers_state(incluster):
    """No controller: what is written is what the provider writes (checked against the builder)."""
    names = _write_go_state(incluster)
    a, b, g = names["a"], names["b"], names["global"]
    addresses = _addresses(incluster)
    assert {k: v["spec"]["address"] for k, v in addresses.items()} == {
        (a, "m0"): "10.0.0.2", (a, "m1"): "10.0.0.4", (a, "g0"): "192.168.10.0", (b, "g0"): "192.168.10.2",
        (b, "v0"): "2001:db8::1"}
    pools = {(a, "pool-a"): incluster.pool("pool-a"), ("", g): incluster.pool(g, gi.GLOBAL_IN_CLUSTER_IP_POOL),
             (b, "pool-v6"): incluster.pool("pool-v6", namespace=b)}
    for (ns, name), address in addresses.items():
        claim = incluster.get_claim(name, namespace=ns)
        pool_key = ("", g) if address["spec"]["poolRef"]["kind"] == gi.GLOBAL_IN_CLUSTER_IP_POOL \
            else (ns, address["spec"]["poolRef"]["name"])
        assert_go_shape(address, claim, pools[pool_key])
        assert claim["status"] == {"addressRef": {"name": name}}
    assert "labels" not in addresses[(a, "m1")]["metadata"]
    for pool in pools.values():
        assert pool["metadata"]["finalizers"] == [gi.POOL_FINALIZER]
        in_use = [x for x in addresses.values() if gi.names_pool(x, pool)]
        assert pool["status"] == gi.pool_status(pool, in_use), pool["metadata"]["name"]
    assert pools[("", g)]["status"]["ipAddresses"] == {"total": 7, "used": 2, "free": 5, "outOfRange": 0}
    half, fresh = incluster.get_claim("half"), incluster.get_claim("fresh")
    assert half["metadata"]["finalizers"] == [gi.CLAIM_FINALIZER] and not half.get("status")
    assert not fresh["metadata"].get("finalizers") and not fresh.get("status")
    held = incluster.get_claim("g0", namespace=b)
    assert held["metadata"]["deletionTimestamp"] and held["metadata"]["finalizers"] == [gi.CLAIM_FINALIZER]


def _seconds(stamp: str) -> float:
    """An API server's timestamp (whole seconds) on the epoch scale ``time.time()`` has."""
    return datetime.datetime.strptime(stamp, "%Y-%m-%dT%H:%M:%SZ").replace(tzinfo=datetime.timezone.utc).timestamp()


def _exhausted(incluster, name: str, namespace: str) -> bool:
    ready = condition(incluster.get_claim(name, namespace=namespace), "Ready")
    return bool(ready and ready["status"] == "False" and ready.get("reason") == "PoolExhausted"
                and ready.get("message"))


def test_upgrade_from_the_in_cluster_provider_keeps_every_address(controller_factory, incluster):
    names = _write_go_state(incluster)
    a, b, g = names["a"], names["b"], names["global"]
    before = _addresses(incluster)
    adopted_ips = {ip_int(x["spec"]["address"]) for x in before.values()}
    # The held address's deadline, in whole seconds on the API server's clock (the host's).
    deadline = _seconds(incluster.get_claim("g0", namespace=b)["metadata"]["deletionTimestamp"]) + GRACE

    controller_factory(["-A", "--no-leader-elect"], name="upgraded")
    # Every served claim: Ready, with the very same IPAddress object.
    for (ns, name) in [(a, "m0"), (a, "m1"), (a, "g0"), (b, "v0")]:
        address = incluster.served(name, namespace=ns)
        was = before[(ns, name)]
        assert (address["metadata"]["uid"], address["metadata"]["resourceVersion"], address["spec"]) == \
            (was["metadata"]["uid"], was["metadata"]["resourceVersion"], was["spec"]), f"{ns}/{name} changed"
    # Claims the provider had not finished: the lowest addresses nobody holds.
    assert sorted(incluster.ip(n) for n in ("half", "fresh")) == ["10.0.0.5", "10.0.0.6"]

    # The global pool: five free addresses, six new claims over both namespaces. The held 192.168.10.2
    # is not handed out before its deadline; the sixth claim gets it after.
    new = [(a if i % 2 else b, f"new{i}") for i in range(6)]
    for ns, name in new:
        incluster.claim(name, g, gi.GLOBAL_IN_CLUSTER_IP_POOL, namespace=ns)

    def ready_ips():
        out = {}
        for ns, name in new:
            ready = condition(incluster.get_claim(name, namespace=ns), "Ready")
            address = incluster.get_address(name, namespace=ns)
            if ready and ready["status"] == "True" and address:
                out[(ns, name)] = address["spec"]["address"]
        return out if len(out) >= 5 else None

    got = eventually(ready_ips, timeout=BIND, what="five of the six new claims of the global pool served")
    held = incluster.get_address("g0", namespace=b)
    if time.time() < deadline:  # seen before the deadline: a look that ends after it may see the release
        waiting = [k for k in new if k not in got]
        assert len(waiting) == 1, got
        assert sorted(got.values()) == [f"192.168.10.{i}" for i in range(3, 8)], got
        assert held is not None and held["metadata"]["uid"] == before[(b, "g0")]["metadata"]["uid"], held
        ns, name = waiting[0]
        eventually(lambda: time.time() >= deadline or _exhausted(incluster, name, ns), timeout=BIND,
                   what=f"{ns}/{name} Ready=False PoolExhausted while the held address is kept")
    incluster.claim_gone("g0", namespace=b, timeout=max(0.0, deadline - time.time()) + BIND)
    served = {key: incluster.served(key[1], namespace=key[0]) for key in new}
    assert sorted(x["spec"]["address"] for x in served.values()) == [f"192.168.10.{i}" for i in range(2, 8)], served
    (given,) = [x for x in served.values() if x["spec"]["address"] == "192.168.10.2"]
    # Made once the held address's deadline had passed, as the API server stamped it: not by the test's clock.
    assert _seconds(given["metadata"]["creationTimestamp"]) >= deadline, (given["metadata"], deadline)

    # No IP twice, none of the adopted ones handed out again, and the adopted objects as they were.
    after = _addresses(incluster)
    unique_ips(x for x in after.values() if x["spec"]["poolRef"]["kind"] == gi.GLOBAL_IN_CLUSTER_IP_POOL)
    unique_ips(x for x in after.values() if x["spec"]["poolRef"]["name"] == "pool-a")
    fresh_ips = {ip_int(x["spec"]["address"]) for k, x in after.items() if k not in before}
    assert not fresh_ips & (adopted_ips - {ip_int("192.168.10.2")}), "an adopted IP was handed out again"
    for key in [(a, "m0"), (a, "m1"), (a, "g0"), (b, "v0")]:
        assert after[key]["metadata"]["resourceVersion"] == before[key]["metadata"]["resourceVersion"], key
    incluster.wait_counts("pool-a", {"total": 8, "used": 4, "free": 4, "outOfRange": 0})
    incluster.wait_counts(g, {"total": 7, "used": 7, "free": 0, "outOfRange": 0}, gi.GLOBAL_IN_CLUSTER_IP_POOL)
    incluster.wait_counts("pool-v6", {"total": 3, "used": 1, "free": 2, "outOfRange": 0}, namespace=b)
