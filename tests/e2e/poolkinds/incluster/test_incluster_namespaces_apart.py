"""Controllers serving namespaces apart (``-n``) share a GlobalInClusterIPPool, on a real API server.

The pool's addresses without a lock (the Go in-cluster provider's, before the controller serving their
namespace adopts them; one written by hand before its claim) are in a namespace the controller started
here does not serve: it still never hands their IPs out, and counts them as the controller serving their
namespace does, so that their status writes never undo each other. So for an IP a claim there keeps by its
status alone (its address and lock not there yet): the claims of a global pool are watched cluster-wide too.

Two writers that each decided from what they saw (a replica behind the other): a pass of a global pool planned
before a namespaced prefix pool came, carried out after that pool's claim was given a sub-prefix holding the
IP the plan hands out, is refused by the API server (at its write of the claim, which the prefix pool's
allocation wrote, or at the guard of that IP); so is a global prefix pool's pass
landing after namespaced IP pools handed out IPs in its sub-prefix, which their pools guard together. Both
writers store the locks and guards as the controller does, as Leases of the lock namespace.
"""

from __future__ import annotations

import asyncio
import ipaddress
from datetime import datetime, timezone

from kubernetes import client

from incluster_fixtures import unique_ips
from metal3_ipam import poolkinds  # noqa: F401  (registers the kinds of pools the inventory files)
from metal3_ipam.controller.api import ApiWriter
from metal3_ipam.controller.credentials import from_kubeconfig
from metal3_ipam.controller.operator import LEASES, discover
from metal3_ipam.core import kinds, lockstore
from metal3_ipam.core import objects as o
from metal3_ipam.core.inventory import Inventory
from metal3_ipam.core.reconcile import reconcile
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



def _plan_from_the_server(incluster, pool_key: o.PoolKey, locks: str):
    """A pass of ``pool_key`` decided from what the API server holds now, as a controller's cache shows it (the
    locks and guards read from the Leases of the lock namespace): the plan, and the inventory it was made from."""
    inventory = Inventory()
    inventory.lock_namespace = locks
    listed = [(gi.GROUP, gi.POOL_VERSION, gi.PLURALS[kind]) for kind in gi.POOL_KINDS] + [
        (gi.GROUP, gi.CAPI_VERSION, "ipaddressclaims"), (gi.GROUP, gi.CAPI_VERSION, "ipaddresses")]
    for group, version, plural in listed:
        for obj in incluster.custom.list_cluster_custom_object(group, version, plural)["items"]:
            inventory.upsert(obj)
    for view in lease_locks(incluster.custom.api_client, locks):
        inventory.upsert(view)
    return reconcile(inventory.snapshot(pool_key, datetime.now(timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ"))), \
        inventory


def _carry_out(control_plane, api_client, planned, locks: str):
    """A plan carried out as the controller does, its locks and guards written as Leases of ``locks``."""
    plan, inventory = planned

    async def run():
        writer = ApiWriter(from_kubeconfig([str(control_plane.kubeconfig)]), inventory, discover(api_client))
        writer.leases = (LEASES, locks)
        try:
            return await writer.execute(plan)
        finally:
            await writer.close()
    return asyncio.run(run())


def _guard(incluster, locks: str, ns: str, name: str) -> dict:
    """The guard ``name`` of namespace ``ns``, read from its Lease, as the lock it stands for."""
    lease = client.CoordinationV1Api(incluster.custom.api_client).read_namespaced_lease(
        lockstore.lease_name(ns, name), locks)
    return lockstore.from_lease(incluster.custom.api_client.sanitize_for_serialization(lease))


def test_a_global_pools_pass_carried_out_after_a_namespaced_prefix_pool_handed_out_its_ip_there_is_refused(
        control_plane, api_client, controller_factory, incluster):
    """Claim d of a global IP pool is planned fd00::1 by a pass that saw no prefix pool in its namespace; the
    prefix pool created then gives claim p fd00::/127 (another writer, up to date), guarding fd00::1, which
    the global pool holds, and writing claim d. The stale pass lands last: the API server refuses its first
    write (claim d changed since that pass read it), and nothing of d's is written. The controller serving the
    namespace then gives d an IP outside the prefix pool's."""
    locks, ns = incluster.ns, incluster.namespace()
    g = incluster.global_name("beside-prefixes")
    incluster.global_ip_pool(g, prefix=64, addresses=["fd00::1-fd00::8"])
    incluster.claim("d", g, gi.GLOBAL_IN_CLUSTER_IP_POOL, namespace=ns)
    stale = _plan_from_the_server(incluster, o.PoolKey("", g, (gi.GROUP, gi.GLOBAL_IN_CLUSTER_IP_POOL)), locks)
    guard = "fd00-0-0-0-0-0-0-1.nsip"
    assert any(o.name(a.obj) == guard for step in stale[0].steps for a in step.actions if hasattr(a, "obj")), stale
    incluster.prefix_pool("np", namespace=ns, prefixes=["fd00::/126"], allocation_prefix_length=127)
    incluster.claim("p", "np", gi.IN_CLUSTER_PREFIX_POOL, namespace=ns)
    for _ in range(3):  # its finalizer, then its sub-prefix, as passes of a controller would
        fresh = _plan_from_the_server(incluster, o.PoolKey(ns, "np", (gi.GROUP, gi.IN_CLUSTER_PREFIX_POOL)), locks)
        assert not _carry_out(control_plane, api_client, fresh, locks).failures
    assert incluster.get_address("p", namespace=ns)["spec"]["address"] == "fd00::"
    outcome = _carry_out(control_plane, api_client, stale, locks)
    assert outcome.again and any(f"{ns}/d changed since it was read" in failure for failure in outcome.failures), \
        outcome
    assert incluster.get_address("d", namespace=ns) is None
    owner = o.owner_references(_guard(incluster, locks, ns, guard))
    assert [ref["name"] for ref in owner] == ["p"], owner
    controller_factory(["-n", ns, "--lock-namespace", locks, "--no-leader-elect"], name="serving-ns")
    d, p = incluster.served("d", namespace=ns), incluster.served("p", namespace=ns)
    assert p["spec"]["address"] == "fd00::" and p["spec"]["prefix"] == 127, p["spec"]
    assert ipaddress.ip_address(d["spec"]["address"]) not in ipaddress.ip_network("fd00::/127"), d["spec"]


def test_a_global_pools_pass_made_before_its_pool_was_edited_off_the_ip_is_refused_after_a_prefix_pool_took_it(
        control_plane, api_client, controller_factory, incluster):
    """Claim d of a global IP pool is planned fd00::1 by a pass that saw no prefix pool in its namespace; the
    global pool is edited off fd00::1, and a prefix pool created then gives claim p fd00::/127 (another writer,
    up to date): no global pool holds fd00::1 any more, so it guards none of its IPs, but writes claim d, bound
    to nothing, on condition that it is as read. The stale pass lands last: the API server refuses its first
    write, and nothing of d's is written. The controller serving the namespace then gives d the pool's IP."""
    locks, ns = incluster.ns, incluster.namespace()
    g = incluster.global_name("edited-beside-prefixes")
    incluster.global_ip_pool(g, prefix=64, addresses=["fd00::1-fd00::8"])
    incluster.claim("d", g, gi.GLOBAL_IN_CLUSTER_IP_POOL, namespace=ns)
    stale = _plan_from_the_server(incluster, o.PoolKey("", g, (gi.GROUP, gi.GLOBAL_IN_CLUSTER_IP_POOL)), locks)
    assert any(o.name(a.obj) == "fd00-0-0-0-0-0-0-1.nsip" for step in stale[0].steps for a in step.actions
               if hasattr(a, "obj")), stale
    incluster.custom.patch_cluster_custom_object(gi.GROUP, gi.POOL_VERSION, gi.PLURALS[gi.GLOBAL_IN_CLUSTER_IP_POOL],
                                                 g, {"spec": {"addresses": ["fd00::10"]}})
    incluster.prefix_pool("np", namespace=ns, prefixes=["fd00::/126"], allocation_prefix_length=127)
    incluster.claim("p", "np", gi.IN_CLUSTER_PREFIX_POOL, namespace=ns)
    for _ in range(3):  # its finalizer, then its sub-prefix, as passes of a controller would
        fresh = _plan_from_the_server(incluster, o.PoolKey(ns, "np", (gi.GROUP, gi.IN_CLUSTER_PREFIX_POOL)), locks)
        assert not _carry_out(control_plane, api_client, fresh, locks).failures
    assert incluster.get_address("p", namespace=ns)["spec"]["address"] == "fd00::"
    assert kinds.FENCED_ANNOTATION in incluster.get_claim("d", namespace=ns)["metadata"]["annotations"]
    outcome = _carry_out(control_plane, api_client, stale, locks)
    assert outcome.again and any(f"{ns}/d changed since it was read" in failure for failure in outcome.failures), \
        outcome
    assert incluster.get_address("d", namespace=ns) is None
    controller_factory(["-n", ns, "--lock-namespace", locks, "--no-leader-elect"], name="serving-ns")
    assert incluster.served("d", namespace=ns)["spec"]["address"] == "fd00::10"
    assert incluster.served("p", namespace=ns)["spec"]["address"] == "fd00::"


def test_a_global_prefix_pools_pass_landing_after_namespaced_ip_pools_handed_out_ips_in_its_sub_prefix_is_refused(
        control_plane, api_client, controller_factory, incluster):
    """Claim d of a global prefix pool is planned fd00::/126 by a pass that saw no pool in its namespace; two IP
    pools created then give their claims fd00::1 and fd00::3 (another writer, up to date): the first guards the
    sub-prefix for the namespace's pools, the second joins it, each pool and its claim owners. The stale pass lands
    last: the API server refuses its guard. The controller serving the namespace then gives d the next sub-prefix,
    and deletes the guard once both pools and their claims are gone."""
    locks, ns = incluster.ns, incluster.namespace()
    g = incluster.global_name("prefixes-beside-ips")
    incluster.global_pools.append((gi.GLOBAL_IN_CLUSTER_PREFIX_POOL, g))
    incluster.writer.create(gi.prefix_pool(g, prefixes=["fd00::/124"], allocation_prefix_length=126))
    incluster.claim("d", g, gi.GLOBAL_IN_CLUSTER_PREFIX_POOL, namespace=ns)
    stale = _plan_from_the_server(incluster, o.PoolKey("", g, (gi.GROUP, gi.GLOBAL_IN_CLUSTER_PREFIX_POOL)), locks)
    guard = "fd00-0-0-0-0-0-0-0.126.nsip"
    assert any(o.name(a.obj) == guard for step in stale[0].steps for a in step.actions if hasattr(a, "obj")), stale
    for pool, addresses, claim in (("n1", ["fd00::1-fd00::2"], "a1"), ("n2", ["fd00::3"], "a2")):
        incluster.ip_pool(pool, namespace=ns, prefix=64, addresses=addresses)
        incluster.claim(claim, pool, namespace=ns)
        for _ in range(3):  # its finalizer, then its IP, as passes of a controller would
            fresh = _plan_from_the_server(incluster, o.PoolKey(ns, pool, (gi.GROUP, gi.IN_CLUSTER_IP_POOL)), locks)
            assert not _carry_out(control_plane, api_client, fresh, locks).failures
        assert incluster.get_address(claim, namespace=ns) is not None, claim
    owners = o.owner_references(_guard(incluster, locks, ns, guard))
    assert [(ref["kind"], ref["name"]) for ref in owners] == [
        ("InClusterIPPool", "n1"), ("IPAddressClaim", "a1"), ("InClusterIPPool", "n2"), ("IPAddressClaim", "a2")]
    outcome = _carry_out(control_plane, api_client, stale, locks)
    assert outcome.again and any(guard in failure for failure in outcome.failures), outcome
    assert incluster.get_address("d", namespace=ns) is None
    controller_factory(["-n", ns, "--lock-namespace", locks, "--no-leader-elect"], name="serving-ns")
    d = incluster.served("d", namespace=ns)
    assert (d["spec"]["address"], d["spec"]["prefix"]) == ("fd00::4", 126), d["spec"]
    assert {incluster.ip("a1", namespace=ns), incluster.ip("a2", namespace=ns)} == {"fd00::1", "fd00::3"}
    assert [r["name"] for r in o.owner_references(_guard(incluster, locks, ns, guard))] == ["n1", "a1", "n2", "a2"]
    for pool, claim in (("n1", "a1"), ("n2", "a2")):
        incluster.delete_claim(claim, namespace=ns)
        incluster.claim_gone(claim, namespace=ns)
        incluster.custom.delete_namespaced_custom_object(gi.GROUP, gi.POOL_VERSION, ns,
                                                         gi.PLURALS[gi.IN_CLUSTER_IP_POOL], pool)
        eventually(lambda: incluster.pool(pool, namespace=ns) is None, what=f"InClusterIPPool {ns}/{pool} gone")
    # No garbage collector takes a Lease: the controller deletes the guard once none of its owners exists.
    eventually(lambda: not any(o.name(x) == guard for x in lease_locks(incluster.custom.api_client, locks)),
               what=f"the guard {guard} its pools shared, once they and their claims are gone")
