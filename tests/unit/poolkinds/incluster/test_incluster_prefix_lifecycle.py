"""Claims of the in-cluster provider's prefix pools through the one claim lifecycle (``reconcile``, to a fixed
point in the in-memory store): aligned sub-prefixes lowest first, the IPAddress as that provider writes it,
a lock per sub-prefix apart from every IP pool's locks, counts exact whatever the size, and never a
sub-prefix twice, excluded, or outside the pool (a property against the provider's own first fit)."""

from __future__ import annotations

import ipaddress
import random

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from metal3_ipam.core import kinds
from metal3_ipam.core import objects as o
from metal3_ipam.core import poolkind as pools
from metal3_ipam.core.actions import Create
from metal3_ipam.core.reconcile import reconcile
from metal3_ipam.core.naming import MAX_NAME_LENGTH
from metal3_ipam.memory import converge
from metal3_ipam.testing import go_incluster as gi
from ipam_objects import converged, get, loaded, user_delete
from prefix_pools import small_prefix_pools

NS = "default"
LOCK_NS = "default"
PREFIX = (gi.GROUP, gi.IN_CLUSTER_PREFIX_POOL)
GLOBAL_PREFIX = (gi.GROUP, gi.GLOBAL_IN_CLUSTER_PREFIX_POOL)


def _pool(name="pp", **spec):
    spec.setdefault("prefixes", ["fd10::/55", "fd00:0:0:100::/56"])
    return gi.prefix_pool(name, namespace=NS, **spec)


def _claim(name, ns=NS, kind=gi.IN_CLUSTER_PREFIX_POOL, pool="pp", **kwargs):
    return gi.claim(name, ns, kind, pool, **kwargs)


def _address(api, name, ns=NS):
    return get(api, kinds.CAPI_ADDRESS, name, ns)


def _locks(api):
    return {(o.namespace(a), o.name(a)): (o.spec(a)["address"], o.spec(a).get("prefix"))
            for a in api.inventory.of_kind(kinds.IPADDRESS) if not o.is_guard(a)}


def _guards(api):
    return {(o.namespace(a), o.name(a)): (o.spec(a)["address"], o.spec(a).get("prefix"))
            for a in api.inventory.of_kind(kinds.IPADDRESS) if o.is_guard(a)}


def test_the_address_is_the_sub_prefix_as_the_provider_writes_it_and_its_lock_names_base_and_length():
    api = converged(_pool(allocation_prefix_length=56, excluded=["fd10:0:0:100::/56"], gateway="fd10::1"),
                    _claim("a", labels={kinds.CLUSTER_NAME_LABEL: "c", "other": "x"}), _claim("b"),
                    {"apiVersion": "cluster.x-k8s.io/v1beta2", "kind": "Cluster",
                     "metadata": {"name": "c", "namespace": NS}, "spec": {}})
    pool = get(api, PREFIX, "pp")
    claim = get(api, kinds.CAPI_CLAIM, "a")
    # The provider's first fit, on its own model: fd00:0:0:100::/56 is lower than fd10::/56.
    want = gi.ipaddress_body(claim, pool, gi.allocate(pool, []))
    address = _address(api, "a")
    assert address["spec"] == want["spec"] == {
        "address": "fd00:0:0:100::", "prefix": 56, "gateway": "fd10::1", "claimRef": {"name": "a"},
        "poolRef": {"apiGroup": gi.GROUP, "kind": gi.IN_CLUSTER_PREFIX_POOL, "name": "pp"}}
    for field in ("name", "namespace", "finalizers", "ownerReferences", "labels"):
        assert address["metadata"].get(field) == want["metadata"].get(field), field
    assert o.spec(_address(api, "b"))["address"] == "fd10::"  # the gateway blocks nothing
    assert claim["status"]["addressRef"] == {"name": "a"}
    ready = o.condition(claim["status"], "Ready")
    assert (ready["status"], ready["reason"]) == ("True", "AddressAllocated")
    assert _locks(api) == {(NS, "pp.fd00-0-0-100-0-0-0-0.56.pp"): ("fd00:0:0:100::", 56),
                           (NS, "pp.fd10-0-0-0-0-0-0-0.56.pp"): ("fd10::", 56)}
    assert gi.POOL_FINALIZER in pool["metadata"]["finalizers"]
    assert pool["status"]["ipAddresses"] == {"total": 2, "used": 2, "free": 0, "outOfRange": 0}
    assert pool["status"]["ipAddresses"] == gi.pool_status(pool, [_address(api, "a"), _address(api, "b")])["ipAddresses"]
    assert o.condition(pool["status"], "Ready")["status"] == "True"


def test_exhausted_then_served_once_a_sub_prefix_is_released():
    api = converged(_pool(prefixes=["fd00::/63"]), _claim("a"), _claim("b"), _claim("c"))
    assert [o.spec(_address(api, n))["address"] for n in ("a", "b")] == ["fd00::", "fd00:0:0:1::"]
    assert _address(api, "c") is None
    ready = o.condition(get(api, kinds.CAPI_CLAIM, "c")["status"], "Ready")
    assert (ready["status"], ready["reason"]) == ("False", "PoolExhausted")
    user_delete(api, kinds.CAPI_CLAIM, "a")
    converge(api, random.Random(0))
    assert o.spec(_address(api, "c"))["address"] == "fd00::"
    assert get(api, PREFIX, "pp")["status"]["ipAddresses"] == {"total": 2, "used": 2, "free": 0, "outOfRange": 0}


def test_a_global_prefix_pools_locks_live_in_the_lock_namespace_and_keep_its_sub_prefixes_apart():
    api = converged(gi.prefix_pool("g", prefixes=["fd00::/48"]),
                    *(_claim("m", ns, gi.GLOBAL_IN_CLUSTER_PREFIX_POOL, "g") for ns in ("ns-a", "ns-b", "ns-c")))
    bases = {o.spec(_address(api, "m", ns))["address"] for ns in ("ns-a", "ns-b", "ns-c")}
    assert bases == {"fd00::", "fd00:0:0:1::", "fd00:0:0:2::"}
    assert set(_locks(api)) == {(LOCK_NS, "g.fd00-0-0-0-0-0-0-0.64.gpp"), (LOCK_NS, "g.fd00-0-0-1-0-0-0-0.64.gpp"),
                                (LOCK_NS, "g.fd00-0-0-2-0-0-0-0.64.gpp")}
    for lock in api.inventory.of_kind(kinds.IPADDRESS):
        if not o.is_guard(lock):
            assert [r["kind"] for r in lock["metadata"]["ownerReferences"]] == [gi.GLOBAL_IN_CLUSTER_PREFIX_POOL]
    # Each sub-prefix is guarded in its claim's namespace too (a namespaced pool there would meet it).
    assert _guards(api) == {("ns-a", "fd00-0-0-0-0-0-0-0.64.nsip"): ("fd00::", 64),
                            ("ns-b", "fd00-0-0-1-0-0-0-0.64.nsip"): ("fd00:0:0:1::", 64),
                            ("ns-c", "fd00-0-0-2-0-0-0-0.64.nsip"): ("fd00:0:0:2::", 64)}
    assert get(api, GLOBAL_PREFIX, "g", "")["status"]["ipAddresses"] == {
        "total": 65536, "used": 3, "free": 65533, "outOfRange": 0}


def test_a_prefix_pool_and_an_ip_pool_of_one_name_and_one_address_never_share_it():
    """Of one namespace, one name and overlapping: the earlier pool (here by kind, the timestamps being equal)
    hands out fd00::, the later withholds the sub-prefix holding it, and says its pool is exhausted."""
    ip_pool = gi.ip_pool("x", namespace=NS, addresses=["fd00::"], prefix=64, allocate_reserved=True)
    api = converged(ip_pool, _pool("x", prefixes=["fd00::/64"]), _claim("p", pool="x"),
                    gi.claim("i", NS, gi.IN_CLUSTER_IP_POOL, "x"))
    assert o.spec(_address(api, "i"))["address"] == "fd00::"
    assert _address(api, "p") is None
    (ready,) = [c for c in get(api, kinds.CAPI_CLAIM, "p")["status"]["conditions"] if c["type"] == "Ready"]
    assert ready["reason"] == "PoolExhausted"
    assert set(_locks(api)) == {(NS, "x.fd00-0-0-0-0-0-0-0.ip")}


def test_a_lock_held_by_another_replica_is_skipped_not_handed_out_again():
    """A lagging cache: only another replica's lock shows that fd00::/64 is taken."""
    api = loaded(_pool(prefixes=["fd00::/62"]), _claim("a"))
    api.load({"apiVersion": kinds.METAL3_API_VERSION, "kind": "IPAddress",
              "metadata": {"name": "pp.fd00-0-0-0-0-0-0-0.64.pp", "namespace": NS,
                           "finalizers": ["ipaddress.ipam.metal3.io"]},
              "spec": {"address": "fd00::", "prefix": 64,
                       "pool": {"name": "other", "apiVersion": gi.POOL_API_VERSION, "kind": gi.IN_CLUSTER_PREFIX_POOL},
                       "claim": {"apiVersion": gi.CAPI_API_VERSION, "kind": "IPAddressClaim", "name": "z"}}})
    plan = reconcile(api.inventory.snapshot(o.PoolKey(NS, "pp", PREFIX), api.now, random.Random(0)))
    created = [a.obj for a in plan.writes if isinstance(a, Create)]
    assert [(o.name(c), o.spec(c)["address"]) for c in created] == [
        ("fd00-0-0-1-0-0-0-0.64.nsip", "fd00:0:0:1::"), ("pp.fd00-0-0-1-0-0-0-0.64.pp", "fd00:0:0:1::"),
        ("a", "fd00:0:0:1::")]


def test_huge_pools_are_intervals_and_their_counts_exact():
    """A /32 cut into /64s is 2^32 sub-prefixes and ::/0 2^64: one interval each, counted exactly; the status
    says what an int64 holds (the provider's math.MaxInt) beyond it. ::/0 cut into /128s leaves out the 2^32
    IPv4-mapped addresses (no lock of one could be written): two intervals."""
    for prefixes, length, total, intervals in ((["2001:db8::/32"], 64, 2**32, 1), (["::/0"], 64, 2**64, 1),
                                               (["::/0"], 128, 2**128 - 2**32, 2)):
        body = _pool(prefixes=prefixes, allocation_prefix_length=length)
        model, problems = pools.read(body)
        assert problems == [] and model.capacity() == total and len(model.entries) == intervals
        api = converged(body, _claim("a"), _claim("b"))
        assert [o.spec(_address(api, n))["address"] for n in ("a", "b")] == \
            [prefixes[0].partition("/")[0], str(ipaddress.IPv6Address(int(ipaddress.IPv6Address(
                prefixes[0].partition("/")[0])) + (1 << (128 - length))))]
        counts = get(api, PREFIX, "pp")["status"]["ipAddresses"]
        assert counts == {"total": min(total, 2**63 - 1), "used": 2, "free": min(total - 2, 2**63 - 1),
                          "outOfRange": 0}
        assert all(type(v) is int for v in counts.values())


def test_lock_names_fit_for_the_longest_pool_name_and_address():
    name = "p" * 253
    for body in (gi.prefix_pool(name, namespace=NS, prefixes=["ffff:ffff:ffff:ffff:ffff:ffff:ffff:ff00/120"],
                                allocation_prefix_length=128),
                 gi.prefix_pool(name, prefixes=["ffff:ffff:ffff:ffff:ffff:ffff:ffff:ff00/120"],
                                allocation_prefix_length=128)):
        model, _ = pools.read(body)
        lock = model.lock_name(model.entries[0].last)
        assert len(lock) <= MAX_NAME_LENGTH and lock.endswith(".ffff-ffff-ffff-ffff-ffff-ffff-ffff-ffff.128.pph") \
            or lock.endswith(".ffff-ffff-ffff-ffff-ffff-ffff-ffff-ffff.128.gpph"), lock
    # The longest name kept whole: 253 less ".<address>.128.pph" (a hashed one's suffix, the longest).
    for length, whole in ((205, True), (206, False)):
        model, _ = pools.read(_pool("q" * length, prefixes=["ffff:ffff:ffff:ffff:ffff:ffff:ffff:ff00/120"],
                                    allocation_prefix_length=128))
        lock = model.lock_name(model.entries[0].last)
        assert lock.startswith("q" * length + ".") == whole and len(lock) <= MAX_NAME_LENGTH, lock


# -- the property: whatever claims come and go, sub-prefixes are aligned, disjoint, inside, not excluded,
#    and each new one is the provider's lowest free one.

def pools_and_steps():
    """Prefixes inside 2001:db8::/120 cut into sub-prefixes of 121..128 bits, exclusions, a gateway (the
    pools of the pure logic's properties), then claims created and deleted."""
    steps = st.lists(st.tuples(st.sampled_from(["create", "delete"]), st.integers(0, 7)), min_size=1, max_size=10)
    return st.tuples(small_prefix_pools(), steps)


def _span(text):
    if "/" in text:
        net = ipaddress.ip_network(text, strict=False)
        return int(net[0]), int(net[-1])
    a, _, b = text.partition("-")
    return int(ipaddress.ip_address(a)), int(ipaddress.ip_address(b or a))


@settings(deadline=None, max_examples=40, suppress_health_check=[HealthCheck.too_slow])
@given(pools_and_steps())
def test_sub_prefixes_handed_out_are_aligned_disjoint_inside_and_never_excluded(case):
    (spec, _, length), steps = case
    pool = gi.prefix_pool("pp", namespace=NS, prefixes=spec["prefixes"], allocation_prefix_length=length,
                          excluded=spec.get("excludedPrefixes"), gateway=spec.get("gateway"))
    inside = [_span(p) for p in spec["prefixes"]]
    excluded = [_span(e) for e in spec.get("excludedPrefixes") or []]
    api = converged(pool)
    live: set[str] = set()
    for action, n in steps:
        name = f"c{n}"
        if action == "create" and name not in live:
            in_use = [a for a in api.inventory.of_kind(kinds.CAPI_ADDRESS) if not o.is_deleting(a)]
            try:
                expected = gi.find_free_prefix(spec, [(o.spec(a)["address"], o.spec(a)["prefix"]) for a in in_use])
            except gi.Exhausted:
                expected = None
            api.load(_claim(name))
            converge(api, random.Random(n))
            live.add(name)
            got = _address(api, name)
            assert (None if got is None else (o.spec(got)["address"], o.spec(got)["prefix"])) == expected
        elif action == "delete" and name in live:
            user_delete(api, kinds.CAPI_CLAIM, name)
            converge(api, random.Random(n))
            live.discard(name)
        held = []
        for address in api.inventory.of_kind(kinds.CAPI_ADDRESS):
            first = int(ipaddress.ip_address(o.spec(address)["address"]))
            last = first + (1 << (128 - length)) - 1
            assert o.spec(address)["prefix"] == length
            assert first % (1 << (128 - length)) == 0, "aligned"
            assert any(lo <= first and last <= hi for lo, hi in inside), "inside the pool"
            assert not any(lo <= last and first <= hi for lo, hi in excluded), "no excluded address"
            held.append((first, last))
        held.sort()
        assert all(a[1] < b[0] for a, b in zip(held, held[1:])), "disjoint"
        assert len(_locks(api)) == len(held)


def test_the_go_providers_prefix_state_is_adopted_as_it_is():
    """Its IPAddresses unchanged (same objects, no write), a lock for each, and the claims it had not served
    given the lowest sub-prefixes free, none of the adopted ones (a global pool's across namespaces too)."""
    state = gi.GoInCluster()
    state.add(_pool(prefixes=["fd00::/60"], gateway="fd00::1"))
    state.add(gi.prefix_pool("g", prefixes=["fd01::/62"]))
    for claim in [_claim("m0"), _claim("m1"), _claim("g0", "ns-a", gi.GLOBAL_IN_CLUSTER_PREFIX_POOL, "g"),
                  _claim("g0", "ns-b", gi.GLOBAL_IN_CLUSTER_PREFIX_POOL, "g"), _claim("fresh"),
                  _claim("g1", "ns-c", gi.GLOBAL_IN_CLUSTER_PREFIX_POOL, "g")]:
        state.add(claim)
    for ns, name in [(NS, "m0"), (NS, "m1"), ("ns-a", "g0"), ("ns-b", "g0")]:
        state.serve(ns, name)
    api = loaded(*state.objects())
    before = {(o.namespace(a), o.name(a)): a for a in api.inventory.of_kind(kinds.CAPI_ADDRESS)}
    assert {k: o.spec(a)["address"] for k, a in before.items()} == {
        (NS, "m0"): "fd00::", (NS, "m1"): "fd00:0:0:1::", ("ns-a", "g0"): "fd01::", ("ns-b", "g0"): "fd01:0:0:1::"}
    converge(api, random.Random(0))
    after = {(o.namespace(a), o.name(a)): a for a in api.inventory.of_kind(kinds.CAPI_ADDRESS)}
    for key, was in before.items():
        assert after[key] == was, key
    assert (o.spec(after[(NS, "fresh")])["address"], o.spec(after[("ns-c", "g1")])["address"]) == \
        ("fd00:0:0:2::", "fd01:0:0:2::")
    assert set(_locks(api)) == {(NS, "pp.fd00-0-0-0-0-0-0-0.64.pp"), (NS, "pp.fd00-0-0-1-0-0-0-0.64.pp"),
                                (NS, "pp.fd00-0-0-2-0-0-0-0.64.pp"),
                                (LOCK_NS, "g.fd01-0-0-0-0-0-0-0.64.gpp"), (LOCK_NS, "g.fd01-0-0-1-0-0-0-0.64.gpp"),
                                (LOCK_NS, "g.fd01-0-0-2-0-0-0-0.64.gpp")}
    assert get(api, PREFIX, "pp")["status"]["ipAddresses"] == {"total": 16, "used": 3, "free": 13, "outOfRange": 0}


def test_a_sub_prefix_excluded_under_its_claim_stays_and_counts_out_of_range():
    """Past the webhook (it refuses this): the claim keeps its sub-prefix, ``free`` stays right, and the
    sub-prefix is not handed out again once released."""
    api = converged(_pool(prefixes=["fd00::/62"]), _claim("a"), _claim("b"))
    assert o.spec(_address(api, "a"))["address"] == "fd00::"
    pool = get(api, PREFIX, "pp")
    api.inventory.upsert({**pool, "spec": {**pool["spec"], "excludedPrefixes": ["fd00::5"]},
                          "metadata": {**pool["metadata"], "generation": 2}})
    converge(api, random.Random(0))
    assert o.spec(_address(api, "a"))["address"] == "fd00::"
    assert get(api, PREFIX, "pp")["status"]["ipAddresses"] == {"total": 3, "used": 2, "free": 2, "outOfRange": 1}
    user_delete(api, kinds.CAPI_CLAIM, "a")
    api.load(_claim("c"))
    converge(api, random.Random(0))
    assert o.spec(_address(api, "c"))["address"] == "fd00:0:0:2::"
    assert get(api, PREFIX, "pp")["status"]["ipAddresses"] == {"total": 3, "used": 2, "free": 1, "outOfRange": 0}
