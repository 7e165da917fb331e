"""Controllers serving namespaces apart (``-n``) share a GlobalInClusterIPPool, on a real API server.

The pool's addresses without a lock (the Go in-cluster provider's, before the controller serving their
namespace adopts them; one written by hand before its claim) are in a namespace the controller started
here does not serve: it still never hands their IPs out, and counts them as the controller serving their
namespace does, so that their status writes never undo each other. So for an IP a claim there keeps by its
status alone (its address and lock not there yet): the claims of a global pool are watched cluster-wide too.
"""

from __future__ import annotations

from incluster_fixtures import unique_ips
from metal3_ipam.testing import go_incluster as gi
from metal3_ipam.testing.locks import lease_locks
from metal3_ipam.testing.waiting import eventually

FULL = {"total": 4, "used": 4, "free": 0, "outOfRange": 0}


def _written_by_hand(name: str, ns: str, pool: str, ip: str) -> dict:
    """A Cluster API IPAddress of the global pool as a user writes it before its claim."""
    return {"apiVersion": gi.CAPI_API_VERSION, "kind": "IPAddress", "metadata": {"name": name, "namespace": ns},
            "spec": {"claimRef": {"name": name}, "address": ip, "prefix": 24,
                     "poolRef": {"apiGroup": gi.GROUP, "kind": gi.GLOBAL_IN_CLUSTER_IP_POOL, "name": pool}}}


def test_a_controller_of_other_namespaces_withholds_and_counts_a_global_pools_addresses_without_locks(
        controller_factory, incluster):
    """The Go provider's address of ns a (no lock yet) and one written by hand there hold two of the pool's four
    IPs. The controller of ns b, alone, gives its claims the other two and refuses the third; the pool counts
    all four used. The controller of ns a then adopts the Go provider's address (its lock is made) and the
    counts stay as they are."""
    locks, a, b = incluster.ns, incluster.namespace(), incluster.namespace()
    g = incluster.global_name("apart")
    incluster.global_pools.append((gi.GLOBAL_IN_CLUSTER_IP_POOL, g))
    incluster.writer.write([gi.ip_pool(g, prefix=24, addresses=["10.9.0.1-10.9.0.4"])],
                           [gi.claim("go", a, gi.GLOBAL_IN_CLUSTER_IP_POOL, g)], serve=[(a, "go")])
    go_ip = incluster.get_address("go", namespace=a)["spec"]["address"]
    incluster.writer.create(_written_by_hand("w", a, g, "10.9.0.4"))
    controller_factory(["-n", b, "--lock-namespace", locks, "--no-leader-elect"], name="serving-b")
    for name in ("b1", "b2", "b3"):
        incluster.claim(name, g, gi.GLOBAL_IN_CLUSTER_IP_POOL, namespace=b)
    given = {incluster.ip("b1", namespace=b), incluster.ip("b2", namespace=b)}
    assert given == {"10.9.0.1", "10.9.0.2", "10.9.0.3"} - {go_ip}, given
    incluster.not_ready("b3", "PoolExhausted", namespace=b)
    incluster.wait_counts(g, FULL, gi.GLOBAL_IN_CLUSTER_IP_POOL)
    controller_factory(["-n", a, "--lock-namespace", locks, "--no-leader-elect"], name="serving-a")
    incluster.served("go", namespace=a)
    eventually(lambda: any(x["spec"]["address"] == go_ip for x in lease_locks(incluster.custom.api_client, locks)),
               what=f"the lock of {go_ip}")
    incluster.wait_counts(g, FULL, gi.GLOBAL_IN_CLUSTER_IP_POOL)
    unique_ips(x for x in incluster.all_addresses() if x["metadata"]["name"] != "w")
    assert incluster.get_address("w", namespace=a)["spec"]["address"] == "10.9.0.4"


def test_a_controller_of_other_namespaces_never_hands_out_an_ip_a_global_pools_claim_keeps_by_its_status(
        controller_factory, incluster):
    """A claim of ns a restored with its status (Ready, bound to the pool's first IP, its address named) before
    its address and lock. The controller of ns b, alone, gives its claims the pool's other two IPs and refuses
    the third; the pool counts the kept IP as neither used nor free; the claim of ns a is left as it is."""
    locks, a, b = incluster.ns, incluster.namespace(), incluster.namespace()
    g = incluster.global_name("kept")
    incluster.global_ip_pool(g, prefix=24, addresses=["10.9.1.1-10.9.1.3"])
    incluster.claim("kept", g, gi.GLOBAL_IN_CLUSTER_IP_POOL, namespace=a)
    ready = {"type": "Ready", "status": "True", "reason": "AddressAllocated", "message": "bound to 10.9.1.1",
             "lastTransitionTime": "2024-01-01T00:00:00Z"}
    kept = incluster.custom.patch_namespaced_custom_object_status(
        gi.GROUP, gi.CAPI_VERSION, a, "ipaddressclaims", "kept",
        {"status": {"addressRef": {"name": "kept"}, "conditions": [ready]}})
    controller_factory(["-n", b, "--lock-namespace", locks, "--no-leader-elect"], name="serving-b")
    for name in ("b1", "b2", "b3"):
        incluster.claim(name, g, gi.GLOBAL_IN_CLUSTER_IP_POOL, namespace=b)
    given = {incluster.ip("b1", namespace=b), incluster.ip("b2", namespace=b)}
    assert given == {"10.9.1.2", "10.9.1.3"}, given
    incluster.not_ready("b3", "PoolExhausted", namespace=b)
    incluster.wait_counts(g, {"total": 3, "used": 2, "free": 0, "outOfRange": 0}, gi.GLOBAL_IN_CLUSTER_IP_POOL)
    now = incluster.get_claim("kept", namespace=a)
    assert now["metadata"]["resourceVersion"] == kept["metadata"]["resourceVersion"], now
    assert not incluster.addresses(namespace=a)
