"""The in-cluster kinds' locks and the guards of IPs are Leases in the lock namespace (``core.lockstore``): what
the provider's RBAC grants. The reconcile still decides by a lock's pool, claim and address; the in-memory store
keeps them where the controller does. Locks an earlier version wrote as Metal3 IPAddresses hold until their
Lease exists, and go only then; after ``clusterctl move`` the target rebuilds them before serving new claims."""

from __future__ import annotations

import copy
import random
import string

from hypothesis import given, settings, strategies as st

from metal3_ipam.core import kinds, lockstore
from metal3_ipam.core import objects as o
from metal3_ipam.core.actions import Create
from metal3_ipam.core.naming import is_dns1123_subdomain
from metal3_ipam.core.reconcile import reconcile
from metal3_ipam.memory import Refused, converge
from metal3_ipam.testing import go_incluster as gi
from ipam_objects import assert_no_ip_twice, converged_with_lock_namespace, get, loaded, user_delete

LOCK_NS = "ipam-system"


def _world():
    return [gi.ip_pool("p", namespace="ns-a", addresses=["10.0.0.2-10.0.0.9"], prefix=24),
            gi.ip_pool("g", addresses=["10.1.0.2-10.1.0.9"], prefix=24),
            gi.prefix_pool("pp", namespace="ns-a", prefixes=["fd00::/56"], allocation_prefix_length=64),
            gi.claim("s", "ns-a", gi.IN_CLUSTER_PREFIX_POOL, "pp"),
            gi.claim("a", "ns-a", gi.IN_CLUSTER_IP_POOL, "p"),
            gi.claim("b", "ns-a", gi.IN_CLUSTER_IP_POOL, "p"),
            gi.claim("m", "ns-a", gi.GLOBAL_IN_CLUSTER_IP_POOL, "g"),
            gi.claim("m", "ns-b", gi.GLOBAL_IN_CLUSTER_IP_POOL, "g")]


def _converged():
    return converged_with_lock_namespace(*_world(), lock_namespace=LOCK_NS)


def _locked(api):
    """(namespace, name) -> IP of every lock and guard, whichever store holds it."""
    held = {(o.namespace(x), o.name(x)): o.spec(x)["address"] for x in api.inventory.of_kind(kinds.IPADDRESS)}
    held.update({k: o.spec(x)["address"] for k, x in api.hidden.items()})
    return held


def test_the_locks_and_guards_of_in_cluster_pools_are_leases_in_the_lock_namespace():
    api = _converged()
    views = list(api.inventory.of_kind(kinds.IPADDRESS))
    # a, b, s: locks in ns-a, and a guard for each (every InClusterIPPool allocation writes one, every namespaced
    # prefix pool's allocation the guard of its sub-prefix); m, m: locks of the global pool and a guard in each
    # namespace
    assert len(views) == 10
    assert {o.name(v) for v in views if o.is_guard(v)} and all(lockstore.stored_in_lease(v) for v in views)
    assert sorted(api.leases) == sorted(lockstore.lease_name(o.namespace(v), o.name(v)) for v in views)
    for view in views:
        lease = api.leases[lockstore.lease_name(o.namespace(view), o.name(view))]
        assert lease["metadata"]["namespace"] == LOCK_NS
        assert lease["metadata"]["labels"][lockstore.LOCK_LABEL] == o.namespace(view)
        claim = o.spec(view)["claim"]
        assert lease["spec"]["holderIdentity"] == f"{claim['namespace']}/{claim['name']}"
        assert lease["metadata"].get("ownerReferences") is None  # owners across namespaces: kept in the annotation
        assert lease["metadata"].get("finalizers") == view["metadata"].get("finalizers")
    assert_no_ip_twice(api)


def test_a_second_writer_of_a_lock_is_refused_by_the_name_of_its_lease():
    api = _converged()
    view = next(v for v in api.inventory.of_kind(kinds.IPADDRESS) if o.namespace(v) == "ns-a" and not o.is_guard(v))
    rival = lockstore.moved_over(view)
    rival["metadata"]["annotations"] = {}
    rival["spec"]["claim"] = {**rival["spec"]["claim"], "name": "someone-else"}
    try:
        api.do(Create(rival))
    except Refused as err:
        assert "already exists" in str(err)
    else:
        raise AssertionError("a second lock of one IP was stored")


def test_a_released_claim_deletes_its_lease_and_its_guard():
    api = _converged()
    claim = get(api, kinds.CAPI_CLAIM, "m", "ns-b")
    deleting = copy.deepcopy(claim)
    deleting["metadata"]["deletionTimestamp"] = api.now
    api.inventory.upsert({**deleting, "metadata": {**deleting["metadata"],
                                                   "resourceVersion": str(api._version + 1)}})
    api._version += 1
    converge(api, random.Random(0))
    assert not any(o.spec(x)["claim"]["namespace"] == "ns-b" for x in api.inventory.of_kind(kinds.IPADDRESS))
    assert not any(x["spec"]["holderIdentity"] == "ns-b/m" for x in api.leases.values())


def _legacy_world():
    """What an earlier version left: the same allocations, every lock and guard a Metal3 IPAddress."""
    api = _converged()
    objs = [copy.deepcopy(x) for x in api.inventory.objects.values() if kinds.kind_of(x) != kinds.IPADDRESS]
    legacy = []
    for view in api.inventory.of_kind(kinds.IPADDRESS):
        lock = lockstore.moved_over(view)
        lock["metadata"].pop("annotations", None)
        legacy.append(lock)
    old = loaded(*objs, *legacy)
    old.inventory.lock_namespace = LOCK_NS
    return api, old


def test_locks_written_as_metal3_ipaddresses_hold_and_get_their_leases_beside_them():
    new, old = _legacy_world()
    before = _locked(old)
    assert before and not old.leases
    assert not reconcile_writes(old)  # the reconcile takes them as they are: nothing to do

    def never_unlocked():
        assert before.items() <= _locked(old).items()
    assert old.move_locks_over(between=never_unlocked) == []
    assert not old.legacy_locks()
    # Each IPAddress is kept beside its Lease (an earlier version, still running, reads it), as the twin of a lock
    # written now is.
    assert sorted(old.hidden) == sorted(before) and all(not lockstore.stored_in_lease(x) for x in old.hidden.values())
    assert sorted(old.leases) == sorted(new.leases)
    assert sorted(new.hidden) == sorted(old.hidden)
    for name, lease in old.leases.items():
        assert lockstore.same_lock(lockstore.from_lease(lease), lockstore.from_lease(new.leases[name]))
    assert _locked(old) == before
    assert not reconcile_writes(old)
    assert_no_ip_twice(old)


def test_a_legacy_lock_whose_lease_holds_another_claim_is_kept_and_said():
    new, old = _legacy_world()
    legacy = next(x for x in old.legacy_locks() if o.namespace(x) == "ns-a" and not o.is_guard(x))
    rival = lockstore.moved_over(legacy)
    rival["spec"]["claim"] = {**rival["spec"]["claim"], "name": "someone-else"}
    old.metal3_locks = False  # written by a replica that has no Metal3 IPAddresses (its Lease alone)
    old.do(Create(rival))  # another lock's Lease of that name: it hides the IPAddress, which still holds
    old.metal3_locks = True
    refused = old.move_locks_over()
    assert len(refused) == 1 and "already exists" in refused[0]
    assert (o.namespace(legacy), o.name(legacy)) in {(o.namespace(x), o.name(x)) for x in old.legacy_locks()}


def test_a_lock_is_refused_by_an_earlier_versions_metal3_ipaddress_of_its_name_and_written_there_too():
    """Where Metal3 IPAddresses can be written, a lock is written as one too, first: an earlier version's lock of the
    name refuses it (the API server refuses the second IPAddress), and an earlier version reads it."""
    new, old = _legacy_world()
    legacy = next(x for x in old.inventory.of_kind(kinds.IPADDRESS) if o.namespace(x) == "ns-a" and not o.is_guard(x))
    rival = lockstore.moved_over(legacy)
    rival["spec"]["claim"] = {**rival["spec"]["claim"], "name": "someone-else"}
    try:
        old.do(Create(rival))
    except Refused as err:
        assert f"IPAddress ns-a/{o.name(legacy)} already exists" in str(err)
    else:
        raise AssertionError("a lock was written over an earlier version's lock of its name")
    assert not old.leases
    for view in new.inventory.of_kind(kinds.IPADDRESS):
        twin = new.hidden[(o.namespace(view), o.name(view))]
        assert lockstore.same_lock(twin, view) and not lockstore.stored_in_lease(twin)
        assert o.owner_references(twin) == o.owner_references(view)


def reconcile_writes(api):
    return [w for key in api.inventory.pool_keys()
            for w in reconcile(api.inventory.snapshot(key, api.now, random.Random(0))).writes]


def test_after_a_move_the_target_rebuilds_the_leases_before_it_hands_out_anything():
    """``clusterctl move`` moves claims and their Cluster API IPAddresses; the Leases stay in the source."""
    source = _converged()
    moved = [copy.deepcopy(x) for x in source.inventory.objects.values() if kinds.kind_of(x) != kinds.IPADDRESS]
    target = loaded(*moved, gi.claim("c", "ns-a", gi.IN_CLUSTER_IP_POOL, "p"))
    target.inventory.lock_namespace = LOCK_NS
    pool = o.PoolKey("ns-a", "p", (gi.GROUP, gi.IN_CLUSTER_IP_POOL))
    first = reconcile(target.inventory.snapshot(pool, target.now, random.Random(0)))
    created = [a.obj for a in first.writes if isinstance(a, Create)]
    assert {o.spec(x)["claim"]["name"] for x in created if kinds.kind_of(x) == kinds.IPADDRESS} == {"a", "b"}
    assert not any(kinds.kind_of(x) == kinds.CAPI_ADDRESS for x in created)  # c waits for the locks
    converge(target, random.Random(0))
    assert_no_ip_twice(target)
    ips = {n: o.spec(get(target, kinds.CAPI_ADDRESS, n, "ns-a"))["address"] for n in ("a", "b", "c")}
    assert ips["a"] == o.spec(get(source, kinds.CAPI_ADDRESS, "a", "ns-a"))["address"]
    assert len(set(ips.values())) == 3
    locks = {name for name, lease in source.leases.items() if kinds.GUARD_LABEL not in lease["metadata"]["labels"]}
    assert locks < set(target.leases)
    assert sorted(target.leases) == sorted(lockstore.lease_name(o.namespace(v), o.name(v))
                                           for v in target.inventory.of_kind(kinds.IPADDRESS))


_label = st.text(string.ascii_lowercase + string.digits, min_size=1, max_size=63).map(lambda s: s.strip("-") or "x")
_names = st.lists(_label, min_size=1, max_size=6).map(".".join).filter(lambda n: len(n) <= 253)


@settings(max_examples=300, deadline=None)
@given(st.lists(st.tuples(_label, _names), min_size=2, max_size=8, unique=True))
def test_lease_names_are_names_and_one_per_lock(locks):
    names = [lockstore.lease_name(ns, name) for ns, name in locks]
    assert all(is_dns1123_subdomain(n) for n in names)
    assert len(set(names)) == len(names)


@settings(max_examples=200, deadline=None)
@given(ns=_label, name=_names, ip=st.ip_addresses(v=4).map(str), claim=_label,
       labels=st.dictionaries(st.sampled_from([kinds.CLUSTER_NAME_LABEL, kinds.GUARD_LABEL, "x"]), _label, max_size=2),
       owners=st.lists(st.fixed_dictionaries({"kind": st.just("IPAddressClaim"), "name": _label, "uid": _label}),
                       max_size=2))
def test_a_lease_gives_back_the_lock_it_stores(ns, name, ip, claim, labels, owners):
    lock = {"apiVersion": kinds.METAL3_API_VERSION, "kind": "IPAddress",
            "metadata": {"name": name, "namespace": ns, "finalizers": ["ipaddress.ipam.metal3.io"],
                         "labels": labels, "ownerReferences": owners},
            "spec": {"address": ip, "pool": {"name": "p", "apiVersion": gi.POOL_API_VERSION,
                                             "kind": gi.IN_CLUSTER_IP_POOL, "namespace": ns},
                     "claim": {"name": claim, "namespace": ns}}}
    lease = lockstore.to_lease(lock, LOCK_NS)
    lease["metadata"].update(uid="u", resourceVersion="7")
    back = lockstore.from_lease(lease)
    assert back["spec"] == lock["spec"] and o.name(back) == name and o.namespace(back) == ns
    assert o.labels(back) == labels and o.owner_references(back) == owners
    assert back["metadata"]["finalizers"] == lock["metadata"]["finalizers"]
    assert back["metadata"]["resourceVersion"] == "7" and lockstore.stored_in_lease(back) == o.name(lease)
    assert lockstore.in_leases(back) and lockstore.same_lock(back, lock)


def test_after_a_move_the_source_lets_the_locks_of_what_left_go():
    """clusterctl deletes the moved namespace's pools, claims and addresses past their finalizers; the Leases of
    their locks are not its to delete: the source's controller lets them go, and the guards of the claims gone
    are the upkeep's to collect (``lockstore.orphan_guards``: no garbage collector takes a Lease)."""
    source = _converged()
    for obj in list(source.inventory.objects.values()):
        if o.namespace(obj) == "ns-a" and kinds.kind_of(obj) != kinds.IPADDRESS:
            source._version += 1
            source.inventory.remove({**obj, "metadata": {**obj["metadata"], "resourceVersion": str(source._version)}})
    converge(source, random.Random(0))
    left = {lockstore.from_lease(x)["metadata"]["name"]: lockstore.from_lease(x) for x in source.leases.values()}
    assert not [n for n, x in left.items() if not o.is_guard(x) and o.spec(x)["claim"]["namespace"] == "ns-a"]
    orphans = lockstore.orphan_guards(list(source.inventory.of_kind(kinds.IPADDRESS)), _live_owners(source))
    # The guards of a and b (the namespaced IP pool's), of s (the prefix pool's) and of m (the global pool's) in ns-a.
    assert sorted((o.namespace(g), o.name(g)) for g in orphans) == [
        ("ns-a", "10-0-0-2.nsip"), ("ns-a", "10-0-0-3.nsip"), ("ns-a", "10-1-0-2.nsip"),
        ("ns-a", "fd00-0-0-0-0-0-0-0.64.nsip")]


def _live_owners(api):
    """The uids of the claims and pools stored: what a guard's owners are looked up in."""
    return {str(o.meta(x)["uid"]) for kind in (kinds.CAPI_CLAIM, *((gi.GROUP, k) for k in gi.POOL_KINDS))
            for x in api.inventory.of_kind(kind)}


def test_a_sub_prefix_guard_the_namespaces_pools_share_is_a_lease_kept_until_the_last_of_them_is_gone():
    """A global prefix pool's sub-prefix that two namespaced pools hand IPs out of: one guard, a Lease whose
    annotation names both pools and the claims holding IPs under it as its owners (the second pool and its claim
    added on condition that the Lease is unchanged since read); no upkeep takes it while one of them lives, the
    garbage collector's part once none does."""
    sub = "fd00-0-0-0-0-0-0-4.126.nsip"
    gp = gi.prefix_pool("gp", prefixes=["fd00::/124"], allocation_prefix_length=126)
    first = gi.ip_pool("n1", namespace="ns-a", addresses=["fd00::4-fd00::5"], prefix=64)
    second = gi.ip_pool("n2", namespace="ns-a", addresses=["fd00::6-fd00::7"], prefix=64)
    gp["metadata"]["creationTimestamp"] = "2024-01-01T00:00:00Z"
    first["metadata"]["creationTimestamp"] = second["metadata"]["creationTimestamp"] = "2024-01-01T00:01:00Z"
    api = converged_with_lock_namespace(gp, gi.claim("c", "ns-a", gi.GLOBAL_IN_CLUSTER_PREFIX_POOL, "gp"), first,
                                        second, gi.claim("a", "ns-a", gi.IN_CLUSTER_IP_POOL, "n1"),
                                        gi.claim("b", "ns-a", gi.IN_CLUSTER_IP_POOL, "n2"), lock_namespace=LOCK_NS)
    guard = get(api, kinds.IPADDRESS, sub, "ns-a")
    assert lockstore.stored_in_lease(guard) and lockstore.lease_name("ns-a", sub) in api.leases
    assert sorted(r["name"] for r in o.owner_references(guard)) == ["a", "b", "n1", "n2"]
    assert api.leases[lockstore.lease_name("ns-a", sub)]["metadata"].get("ownerReferences") is None
    views = list(api.inventory.of_kind(kinds.IPADDRESS))
    uids = {o.name(p): str(o.meta(p)["uid"]) for p in [get(api, (gi.GROUP, gi.IN_CLUSTER_IP_POOL), n, "ns-a")
                                                         for n in ("n1", "n2")]
            + [get(api, kinds.CAPI_CLAIM, n, "ns-a") for n in ("a", "b")]}
    assert guard not in lockstore.orphan_guards(views, _live_owners(api))
    assert guard not in lockstore.orphan_guards(views, _live_owners(api) - {uids["n1"], uids["n2"], uids["a"]})
    assert guard in lockstore.orphan_guards(views, _live_owners(api) - set(uids.values()))

    for claim, pool in (("a", "n1"), ("b", "n2")):
        user_delete(api, kinds.CAPI_CLAIM, claim, "ns-a")
        converge(api, random.Random(0))
        user_delete(api, (gi.GROUP, gi.IN_CLUSTER_IP_POOL), pool, "ns-a")
        converge(api, random.Random(0))
        assert get(api, (gi.GROUP, gi.IN_CLUSTER_IP_POOL), pool, "ns-a") is None
        assert (get(api, kinds.IPADDRESS, sub, "ns-a") is not None) == (pool == "n1"), pool
    assert lockstore.lease_name("ns-a", sub) not in api.leases
    api.load(gi.claim("d", "ns-a", gi.GLOBAL_IN_CLUSTER_PREFIX_POOL, "gp"))
    converge(api, random.Random(0))
    assert_no_ip_twice(api)


def test_a_claim_joining_a_shared_sub_prefix_guard_drops_the_claims_gone_from_its_owners():
    """The owners of a guard the namespace's pools share do not grow with every claim ever served: a claim whose
    allocation joins it adds itself and drops the claims that are gone (the pools stay)."""
    sub = "fd00-0-0-0-0-0-0-4.126.nsip"
    gp = gi.prefix_pool("gp", prefixes=["fd00::/124"], allocation_prefix_length=126)
    local = gi.ip_pool("n1", namespace="ns-a", addresses=["fd00::4-fd00::5"], prefix=64)
    gp["metadata"]["creationTimestamp"] = "2024-01-01T00:00:00Z"
    local["metadata"]["creationTimestamp"] = "2024-01-01T00:01:00Z"
    api = converged_with_lock_namespace(gp, gi.claim("c", "ns-a", gi.GLOBAL_IN_CLUSTER_PREFIX_POOL, "gp"), local,
                                        gi.claim("a", "ns-a", gi.IN_CLUSTER_IP_POOL, "n1"), lock_namespace=LOCK_NS)
    assert sorted(r["name"] for r in o.owner_references(get(api, kinds.IPADDRESS, sub, "ns-a"))) == ["a", "n1"]
    user_delete(api, kinds.CAPI_CLAIM, "a", "ns-a")
    converge(api, random.Random(0))
    assert get(api, kinds.CAPI_CLAIM, "a", "ns-a") is None
    api.load(gi.claim("e", "ns-a", gi.IN_CLUSTER_IP_POOL, "n1"))
    converge(api, random.Random(0))
    assert sorted(r["name"] for r in o.owner_references(get(api, kinds.IPADDRESS, sub, "ns-a"))) == ["e", "n1"]
    assert_no_ip_twice(api)


def test_a_guard_whose_claims_lock_is_a_lease_keeps_its_ip_from_a_namespaced_pool_past_the_settle_time():
    """A global pool's pass stopped right after its lock (the claim bound to nothing yet): the guard is not left
    over, for its claim's lock is stored, as a Lease; a namespaced pool created over the IP then never hands it
    out while that lock holds it."""
    glob = gi.ip_pool("g", addresses=["10.9.0.1"], prefix=24)
    glob["metadata"]["creationTimestamp"] = "2024-01-01T00:00:00Z"
    api = converged_with_lock_namespace(glob, lock_namespace=LOCK_NS)
    api.load(gi.claim("d", "ns-a", gi.GLOBAL_IN_CLUSTER_IP_POOL, "g"))
    api.inventory.lock_settle_seconds = 0
    key = o.PoolKey("", "g", (gi.GROUP, gi.GLOBAL_IN_CLUSTER_IP_POOL))
    written = []
    for step in reconcile(api.inventory.snapshot(key, api.now, random.Random(0))).steps:
        for action in step.actions:
            api.do(action)
            if isinstance(action, Create) and kinds.kind_of(action.obj) == kinds.IPADDRESS:
                written.append(action.obj)
            if len(written) == 2:
                break
        if len(written) == 2:
            break
    assert [o.is_guard(x) for x in written] == [True, False]  # the guard, then the lock: stopped there
    lock_key = (kinds.IPADDRESS, o.name(written[1]), LOCK_NS)
    lock = get(api, *lock_key)
    assert lockstore.stored_in_lease(lock) and get(api, kinds.CAPI_ADDRESS, "d", "ns-a") is None
    local = gi.ip_pool("n", namespace="ns-a", addresses=["10.9.0.1"], prefix=24)
    local["metadata"]["creationTimestamp"] = "2024-01-01T00:01:00Z"
    api.load(local)
    api.load(gi.claim("a", "ns-a", gi.IN_CLUSTER_IP_POOL, "n"))
    converge(api, random.Random(0))
    assert_no_ip_twice(api)
    assert get(api, kinds.CAPI_ADDRESS, "a", "ns-a") is None
    assert get(api, kinds.IPADDRESS, "10-9-0-1.nsip", "ns-a") is not None and get(api, *lock_key) is not None
