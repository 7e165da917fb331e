"""Property tests of the SPEC §10 invariants that hold without a server.

- the interval set behaves as a set of integers (a stateful model test);
- allocations are unique, inside the pool, never a gateway, an excluded address
  or another claim's preallocation; sequential is the lowest free; a released
  address comes back;
- IPAddress names are unique and valid DNS-1123 subdomains;
- validation, pool reading and the file loaders never raise;
- the reconcile reaches a fixed point where every claim has exactly one address
  or an error, no IP is bound twice, nothing is leaked, and one more pass plans
  nothing.
"""

from __future__ import annotations

import ipaddress
import json
import random
import string

import netaddr
import pytest
import yaml
from hypothesis import HealthCheck, assume, given, note, settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, initialize, invariant, precondition, rule

from metal3_ipam import manifests
from metal3_ipam.cli import main as cli_main
from metal3_ipam.core import kinds
from metal3_ipam.core import objects as o
from metal3_ipam.core.allocator import POOL_EXHAUSTED, AllocationError, Allocator
from metal3_ipam.core.intervals import IntervalSet, normalise, subtract
from metal3_ipam.core.naming import address_name, is_dns1123_subdomain, name_prefix_problem
from metal3_ipam.core.pool import read_pool
from metal3_ipam.core.validation import (overlap_warnings, validate, validate_ipaddress_update,
                                         validate_ipclaim_update, validate_pool_update)
from metal3_ipam.memory import converge
from ipam_objects import NS, all_plans, capi_claim, ipclaim, ippool, loaded, user_delete

FAST = settings(deadline=None, max_examples=60, suppress_health_check=[HealthCheck.too_slow])


# =============================================================================================
# IntervalSet against a set of integers
# =============================================================================================

def _check_tree(node, lo_bound=None, hi_bound=None):
    """BST order on disjoint intervals, heap order on priorities, exact subtree totals."""
    if node is None:
        return 0
    assert node.lo <= node.hi
    if lo_bound is not None:
        assert node.lo > lo_bound + 1  # disjoint and not adjacent
    if hi_bound is not None:
        assert node.hi < hi_bound - 1
    for child in (node.left, node.right):
        if child is not None:
            assert child.prio <= node.prio
    total = (node.hi - node.lo + 1 + _check_tree(node.left, lo_bound, node.lo)
             + _check_tree(node.right, node.hi, hi_bound))
    assert node.total == total
    return total


class IntervalSetMachine(RuleBasedStateMachine):
    # Small values so that joins and splits happen; an offset so that big integers are used too.
    values = st.integers(min_value=0, max_value=120)

    @initialize(offset=st.sampled_from([0, 2**32, 2**64 - 60, 2**127]),
                spans=st.lists(st.tuples(st.integers(0, 120), st.integers(0, 120)), max_size=6))
    def start(self, offset, spans):
        self.offset = offset
        self.set = IntervalSet((offset + a, offset + b) for a, b in spans)
        self.model = {offset + v for a, b in spans for v in range(a, b + 1)}

    @rule(v=values)
    def add(self, v):
        v += self.offset
        assert self.set.add(v) == (v not in self.model)
        self.model.add(v)

    @rule(v=values)
    def discard(self, v):
        v += self.offset
        assert self.set.discard(v) == (v in self.model)
        self.model.discard(v)

    @precondition(lambda self: self.model)
    @rule()
    def take_first(self):
        first = self.set.first()
        assert first == min(self.model)
        self.set.discard(first)
        self.model.discard(first)

    @precondition(lambda self: self.model)
    @rule(data=st.data())
    def nth(self, data):
        i = data.draw(st.integers(0, len(self.model) - 1))
        assert self.set.nth(i) == sorted(self.model)[i]

    @rule(v=values)
    def contains(self, v):
        assert (v + self.offset in self.set) == (v + self.offset in self.model)

    @rule()
    def copy_is_equal(self):
        assert list(self.set.copy().intervals()) == list(self.set.intervals())

    @invariant()
    def same_members(self):
        assert self.set.size == len(self.model)
        assert bool(self.set) == bool(self.model)
        assert list(self.set) == sorted(self.model)
        intervals = list(self.set.intervals())
        assert intervals == normalise(intervals)
        assert self.set.interval_count == len(intervals)
        assert _check_tree(self.set._root) == len(self.model)


TestIntervalSet = IntervalSetMachine.TestCase
TestIntervalSet.settings = settings(deadline=None, max_examples=120, stateful_step_count=40)


spans = st.lists(st.tuples(st.integers(0, 60), st.integers(0, 60)), max_size=8)


@FAST
@given(spans, spans)
def test_subtract_and_normalise_match_sets(a, b):
    def members(intervals):
        return {v for lo, hi in intervals for v in range(lo, hi + 1)}

    na, nb = normalise(a), normalise(b)
    assert members(na) == members(a)
    assert all(hi + 1 < lo2 for (_, hi), (lo2, _) in zip(na, na[1:]))
    result = subtract(na, nb)
    assert members(result) == members(a) - members(b)
    assert result == normalise(result)


# =============================================================================================
# Allocation
# =============================================================================================

V4_BASE = int(ipaddress.IPv4Address("10.0.0.0"))
V6_BASE = int(ipaddress.IPv6Address("2001:db8::"))


def text(value: int, version: int) -> str:
    return str(netaddr.IPAddress(value, version))


@st.composite
def pool_specs(draw, version=None, size=64):
    """A valid pool spec in [base, base+size), and the facts about it."""
    version = version or draw(st.sampled_from([4, 6]))
    base = V4_BASE if version == 4 else V6_BASE
    cuts = sorted(draw(st.sets(st.integers(1, size - 1), min_size=1, max_size=8)))
    bounds = [0] + cuts + [size]
    entries = []
    for lo, hi in zip(bounds, bounds[1:]):
        if draw(st.booleans()):
            entries.append((base + lo, base + hi - 1))
    assume(entries)
    if draw(st.booleans()):
        entries.reverse()  # declaration order differs from address order
    members = [v for lo, hi in entries for v in range(lo, hi + 1)]
    gateway = draw(st.sampled_from(members)) if draw(st.booleans()) else None
    excluded = draw(st.lists(st.sampled_from(members), max_size=4, unique=True))
    reserved = set(excluded) | ({gateway} if gateway is not None else set())
    candidates = [m for m in members if m not in reserved]
    held = draw(st.lists(st.sampled_from(candidates), max_size=3, unique=True)) if candidates else []
    spec = {
        "namePrefix": "p",
        "allocationStrategy": draw(st.sampled_from(["sequential", "random"])),
        "pools": [{"start": text(lo, version), "end": text(hi, version)} for lo, hi in entries],
        "excludedAddresses": [text(v, version) for v in excluded],
        "preAllocations": {f"held{i}": text(v, version) for i, v in enumerate(held)},
    }
    if gateway is not None:
        spec["gateway"] = text(gateway, version)
    return spec, entries, reserved, {f"held{i}": v for i, v in enumerate(held)}


@FAST
@given(pool_specs(), st.lists(st.tuples(st.sampled_from(["alloc", "release", "held", "ask"]), st.integers(0, 10**6)),
                              max_size=80), st.integers(0, 2**32))
def test_allocations_are_unique_inside_and_never_reserved(facts, ops, seed):
    spec, entries, reserved, held = facts
    pool, problems = read_pool(spec)
    assert pool is not None, [str(p) for p in problems]
    alloc = Allocator(pool, random.Random(seed))
    holders = {v: c for c, v in held.items()}
    members = [v for lo, hi in entries for v in range(lo, hi + 1)]
    owned: dict[int, str] = {}
    n = 0
    for op, k in ops:
        free_model = [v for lo, hi in entries for v in range(lo, hi + 1)
                      if v not in reserved and v not in holders and v not in owned]
        assert alloc.free_count == len(free_model)
        if op == "release" and owned:
            ip = sorted(owned)[k % len(owned)]
            del owned[ip]
            alloc.release(ip)
            continue
        claim, requested = f"c{n}", None
        n += 1
        if op == "held" and held:
            claim = sorted(held)[k % len(held)]
        elif op == "ask":
            requested = text(members[k % len(members)], pool.version)
        try:
            grant = alloc.allocate(claim, requested)
        except AllocationError as err:
            if op == "alloc":
                assert err.reason == POOL_EXHAUSTED and not free_model
            continue
        ip = int(grant.ip)
        assert ip not in owned, "handed out twice"
        assert pool.entry_of(ip) is grant.entry and any(lo <= ip <= hi for lo, hi in entries)
        assert ip not in reserved
        assert holders.get(ip, claim) == claim, "someone else's preallocation"
        if claim in held:
            assert ip == held[claim]
        if requested is not None and claim not in held:
            assert ip == int(netaddr.IPAddress(requested))
        if op == "alloc" and pool.strategy == "sequential":
            assert ip == free_model_first(entries, reserved, holders, owned)
        if op == "alloc" and pool.strategy == "random":
            first_entry = next(e for e in entries if any(v in free_model for v in range(e[0], e[1] + 1)))
            assert first_entry[0] <= ip <= first_entry[1]
        owned[ip] = claim


def free_model_first(entries, reserved, holders, owned) -> int:
    for lo, hi in entries:  # declaration order
        for v in range(lo, hi + 1):
            if v not in reserved and v not in holders and v not in owned:
                return v
    raise AssertionError("no free address in the model")


@FAST
@given(pool_specs(), st.integers(0, 10**6))
def test_release_then_allocate_gives_it_back(facts, k):
    spec, entries, reserved, held = facts
    spec = dict(spec, allocationStrategy="sequential")
    pool, _ = read_pool(spec)
    alloc = Allocator(pool)
    taken = []
    while True:
        try:
            taken.append(int(alloc.allocate(f"c{len(taken)}").ip))
        except AllocationError:
            break
    assume(taken)
    ip = taken[k % len(taken)]
    alloc.release(ip)
    assert int(alloc.allocate("again").ip) == ip
    with pytest.raises(AllocationError):
        alloc.allocate("more")


@FAST
@given(st.integers(0, 2**64 - 1), st.integers(1, 200))
def test_huge_ipv6_pool_random_allocations_stay_unique(seed, n):
    pool, _ = read_pool({"namePrefix": "p", "allocationStrategy": "random", "pools": [{"subnet": "2001:db8::/64"}]})
    alloc = Allocator(pool, random.Random(seed))
    ips = {int(alloc.allocate(f"c{i}").ip) for i in range(n)}
    assert len(ips) == n
    assert alloc.free_count == 2**64 - 1 - n


# =============================================================================================
# Names
# =============================================================================================

name_prefixes = st.from_regex(r"\A[a-z0-9]([-a-z0-9]{0,20}[a-z0-9])?(\.[a-z0-9]([-a-z0-9]{0,10}[a-z0-9])?){0,3}\Z")


@FAST
@given(name_prefixes, st.sampled_from([4, 6]), st.sets(st.integers(0, 2**128 - 1), min_size=1, max_size=50))
def test_names_are_unique_and_valid(prefix, version, values):
    assert name_prefix_problem(prefix) is None
    ips = {v % (2**32 if version == 4 else 2**128) for v in values}
    names = {address_name(prefix, netaddr.IPAddress(v, version)) for v in ips}
    assert len(names) == len(ips)
    assert all(is_dns1123_subdomain(n) for n in names)
    assert all(n.startswith(prefix) for n in names)


@FAST
@given(st.text(max_size=30))
def test_a_name_prefix_accepted_always_makes_valid_names(prefix):
    if name_prefix_problem(prefix) is None:
        for ip in ("0.0.0.0", "255.255.255.255", "::", "ffff:ffff:ffff:ffff:ffff:ffff:ffff:ffff", "::1", "1::"):
            assert is_dns1123_subdomain(address_name(prefix, ip))


# =============================================================================================
# Nothing raises on arbitrary input
# =============================================================================================

scalars = st.one_of(st.none(), st.booleans(), st.integers(-2**70, 2**70), st.floats(allow_nan=False),
                    st.text(max_size=12),
                    st.sampled_from(["10.0.0.1", "10.0.0.0/24", "2001:db8::1", "10.0.0.1-10.0.0.9", "", "a",
                                     "sequential", "random", "ipam.metal3.io", "IPPool", "256.0.0.1", "::/0"]))
json_values = st.recursive(scalars, lambda inner: st.one_of(
    st.lists(inner, max_size=4), st.dictionaries(st.text(max_size=8), inner, max_size=4)), max_leaves=25)

FIELDS = ["namePrefix", "pools", "start", "end", "subnet", "prefix", "gateway", "dnsServers", "preAllocations",
          "allocationStrategy", "excludedAddresses", "clusterName", "pool", "name", "namespace", "poolRef",
          "apiGroup", "kind", "address", "claim", "claimRef"]
# Objects shaped like ours, with wrong values in the right places.
shaped = st.recursive(scalars, lambda inner: st.one_of(
    st.lists(inner, max_size=3), st.dictionaries(st.sampled_from(FIELDS), inner, max_size=5)), max_leaves=30)

API_KINDS = [("ipam.metal3.io/v1alpha1", "IPPool"), ("ipam.metal3.io/v1alpha1", "IPClaim"),
             ("ipam.metal3.io/v1alpha1", "IPAddress"), ("ipam.cluster.x-k8s.io/v1beta2", "IPAddressClaim"),
             ("ipam.cluster.x-k8s.io/v1beta1", "IPAddress"), ("cluster.x-k8s.io/v1beta2", "Cluster"),
             ("v1", "ConfigMap")]


@st.composite
def objects(draw):
    api_version, kind = draw(st.sampled_from(API_KINDS))
    obj = {"apiVersion": api_version, "kind": kind}
    metadata = draw(st.one_of(json_values, st.fixed_dictionaries(
        {"name": st.one_of(st.sampled_from(["a", "pool1", "x"]), json_values)},
        optional={"namespace": st.one_of(st.just("default"), json_values),
                  "annotations": st.one_of(st.fixed_dictionaries({"ipAddress": scalars}), json_values),
                  "labels": json_values, "finalizers": json_values, "deletionTimestamp": scalars,
                  "ownerReferences": json_values})))
    if draw(st.booleans()):
        obj["metadata"] = metadata
    if draw(st.booleans()):
        obj["spec"] = draw(st.one_of(shaped, json_values))
    if draw(st.booleans()):
        obj["status"] = draw(json_values)
    return obj


anything = st.one_of(json_values, objects())


@settings(deadline=None, max_examples=300)
@given(anything, anything)
def test_validation_never_raises(a, b):
    for obj in (a, b):
        for problem in validate(obj):
            assert isinstance(str(problem), str)
        read_pool(a.get("spec") if isinstance(a, dict) else a)
    validate_pool_update(a, b, {"x": "10.0.0.1", "y": "nope"})
    validate_ipclaim_update(a, b)
    validate_ipaddress_update(a, b)
    overlap_warnings(a, [b, a])


@settings(deadline=None, max_examples=300)
@given(st.one_of(shaped, json_values))
def test_read_pool_never_raises_and_builds_only_valid_pools(spec):
    pool, problems = read_pool(spec)
    if pool is not None:
        assert not [p for p in problems if not p.warning]
        assert pool.capacity() >= 0
        Allocator(pool).free_count  # noqa: B018 - building the free space must work too
    else:
        assert problems


@st.composite
def manifest_files(draw):
    docs = draw(st.lists(anything, max_size=4))
    form = draw(st.sampled_from(["yaml", "json", "list", "raw"]))
    if form == "yaml":
        return "m.yaml", yaml.safe_dump_all(docs)
    if form == "json":
        return "m.json", json.dumps(docs[0] if docs else None)
    if form == "list":
        return "m.yaml", yaml.safe_dump({"apiVersion": "v1", "kind": "List", "items": docs})
    return draw(st.sampled_from(["m.yaml", "m.json"])), draw(st.text(alphabet=string.printable + "äß{}[]:-", max_size=60))


@settings(deadline=None, max_examples=150, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(manifest_files())
def test_loaders_and_commands_never_raise(tmp_path, capsys, file):
    name, content = file
    path = tmp_path / name
    path.write_text(content)
    loaded_objects, problems = manifests.load([str(path)])
    assert all(isinstance(item.obj, dict) for item in loaded_objects)
    for command in ("validate", "plan"):
        code = cli_main([command, "-f", str(path)])
        out, err = capsys.readouterr()
        assert code in (0, 1)
        assert "Traceback" not in out + err


# =============================================================================================
# The reconcile: random scenarios to a fixed point
# =============================================================================================

CLAIM_NAMES = [f"c{i}" for i in range(6)] + ["held0", "held1"]


@st.composite
def scenarios(draw):
    """Pools of one namespace (some sharing a namePrefix, whose ranges may overlap), claims of both kinds."""
    n_pools = draw(st.integers(1, 3))
    pools = []
    for i in range(n_pools):
        prefix = draw(st.sampled_from(["a", "b"]))
        half = 0 if prefix == "a" else 128  # pools with different prefixes never overlap
        lo = draw(st.sampled_from([1, 1, 2, 4, 6]))  # pools of one prefix often overlap
        hi = lo + draw(st.integers(0, 8))
        spec = {"namePrefix": prefix, "allocationStrategy": draw(st.sampled_from(["sequential", "random"])),
                "pools": [{"start": f"10.0.0.{half + lo}", "end": f"10.0.0.{half + hi}"}]}
        if draw(st.booleans()):
            spec["gateway"] = f"10.0.0.{half + draw(st.integers(lo, hi))}"
        if draw(st.booleans()):
            spec["preAllocations"] = {"held0": f"10.0.0.{half + draw(st.integers(lo, hi))}"}
        if draw(st.integers(0, 9)) == 0:
            spec["pools"][0]["end"] = f"10.0.0.{half}"  # now invalid: start after end
        pools.append(ippool(f"pool{i}", **spec))
    pool_names = [o.name(p) for p in pools] + ["ghost"]
    claims = {}
    for _ in range(draw(st.integers(0, 14))):
        kind = draw(st.sampled_from(["IPClaim", "IPAddressClaim"]))
        name = draw(st.sampled_from(CLAIM_NAMES))
        pool = pool_names[-1] if draw(st.integers(0, 9)) == 0 else draw(st.sampled_from(pool_names[:-1]))
        ip = f"10.0.0.{draw(st.integers(0, 255))}" if draw(st.integers(0, 4)) == 0 else None
        make = ipclaim if kind == "IPClaim" else capi_claim
        claims[(kind, name)] = make(name, pool=pool, ip=ip)
    deletions = draw(st.lists(st.sampled_from(sorted(claims)), unique=True)) if claims else []
    late = draw(st.lists(st.tuples(st.sampled_from(["IPClaim", "IPAddressClaim"]), st.sampled_from(CLAIM_NAMES),
                                   st.sampled_from(pool_names)), max_size=4))
    # After the first fixed point: addresses deleted by a user (their claims live on), and second
    # addresses for claims, as a race between two workers could leave them.
    troubles = draw(st.lists(st.tuples(st.sampled_from(["delete-address", "duplicate"]), st.integers(0, 50),
                                       st.booleans()), max_size=3))
    return pools, list(claims.values()), deletions, late, troubles, draw(st.booleans()), draw(st.integers(0, 1000))


def inject_duplicate(api, address: dict, newer: bool) -> None:
    """A second address for the claim of ``address``: the lowest address of its pool that is
    free and unheld, named as the controller would name it."""
    pool = api.inventory.get(kinds.IPPOOL, NS, o.pool_of(address)[1])
    spec = o.spec(pool)
    pool_obj, _ = read_pool(spec)
    used = {o.spec(a)["address"] for a in api.inventory.of_kind(kinds.IPADDRESS)}
    for entry in pool_obj.entries:
        for lo, hi in pool_obj.allocatable(entry):
            for value in range(lo, hi + 1):
                ip = str(netaddr.IPAddress(value, pool_obj.version))
                name = address_name(pool_obj.name_prefix, ip)
                if ip not in used and not api.inventory.name_taken(NS, name):
                    second = json.loads(json.dumps(address))
                    second["metadata"] = {k: v for k, v in second["metadata"].items()
                                          if k not in ("uid", "resourceVersion", "deletionTimestamp")}
                    second["metadata"]["name"] = name
                    second["metadata"]["creationTimestamp"] = "2099-01-01T00:00:00Z" if newer else "1999-01-01T00:00:00Z"
                    second["metadata"]["finalizers"] = ["ipaddress.ipam.metal3.io"]
                    second["spec"]["address"] = ip
                    api.load(second)
                    return


def check_invariants(api):
    inv = api.inventory
    m3 = list(inv.of_kind(kinds.IPADDRESS))
    mirrors = {o.name(a): a for a in inv.of_kind(kinds.CAPI_ADDRESS)}
    # No IP bound twice, no name twice (names are unique by construction of the store).
    ips = [o.spec(a)["address"] for a in m3]
    assert len(ips) == len(set(ips)), sorted(ips)
    by_claim: dict = {}
    for a in m3:
        by_claim.setdefault(o.claim_of_address(a), []).append(a)
    claims = [c for k in (kinds.IPCLAIM, kinds.CAPI_CLAIM) for c in inv.of_kind(k)]
    claim_keys = {o.claim_key(c) for c in claims}
    # Nothing leaked: every address belongs to a claim that exists.
    assert set(by_claim) <= claim_keys, set(by_claim) - claim_keys
    for claim in claims:
        key = o.claim_key(claim)
        mine = by_claim.get(key, [])
        status = o.status(claim)
        ready = [c for c in status.get("conditions") or [] if c.get("type") == "Ready"]
        assert len(mine) <= 1, f"{key} holds {len(mine)} addresses"
        assert len(ready) == 1, f"{key} has no Ready condition: {status}"
        if mine:
            address = mine[0]
            assert ready[0]["status"] == "True"
            assert "errorMessage" not in status
            pool = inv.get(kinds.IPPOOL, NS, o.pool_of(claim)[1])
            spec = o.spec(pool)
            assert o.name(address).startswith(spec["namePrefix"] + "-")
            assert is_dns1123_subdomain(o.name(address))
            pool_obj, _ = read_pool(spec)
            ip = int(netaddr.IPAddress(o.spec(address)["address"]))
            assert pool_obj.entry_of(ip) is not None and not pool_obj.is_reserved(ip)
            assert pool_obj.holder_of(ip) in (None, key[1])
            if key[0] == "IPClaim":
                assert status["address"]["name"] == o.name(address)
            else:
                assert status["addressRef"] == {"name": key[1]}
                assert mirrors[key[1]]["spec"]["address"] == o.spec(address)["address"]
        else:
            assert ready[0]["status"] == "False" and ready[0]["message"]
            if key[0] == "IPClaim":
                assert status["errorMessage"] == ready[0]["message"]
    # Cluster API mirrors only for claims that exist.
    assert set(mirrors) <= {k[1] for k in claim_keys if k[0] == "IPAddressClaim"}
    # Pool status: the claims bound to its addresses.
    for pool in inv.of_kind(kinds.IPPOOL):
        pool_obj, _ = read_pool(o.spec(pool))
        if pool_obj is None:
            continue
        expected = {o.index_key(o.claim_of_address(a)): o.spec(a)["address"] for a in m3
                    if o.pool_of(a) == (NS, o.name(pool))}
        assert o.status(pool)["indexes"] == expected
    # A fixed point: one more pass of every pool plans nothing.
    for plan in all_plans(api):
        assert not plan, plan.describe()


@settings(deadline=None, max_examples=120, suppress_health_check=[HealthCheck.too_slow])
@given(scenarios())
def test_reconcile_converges_to_one_address_or_an_error_per_claim(scenario):
    pools, claims, deletions, late, troubles, stale_first, seed = scenario
    note(f"pools={[o.spec(p) for p in pools]}")
    api = loaded(*pools, *claims)
    rng = random.Random(seed)
    if stale_first:
        # Every pool plans from one reading, as workers behind a lagging cache would.
        plans = all_plans(api)
        for plan in plans:
            api.apply(plan)
    converge(api, rng)
    check_invariants(api)

    for trouble, k, flag in troubles:
        addresses = sorted(api.inventory.of_kind(kinds.IPADDRESS), key=o.name)
        if not addresses:
            break
        address = addresses[k % len(addresses)]
        if trouble == "delete-address":
            user_delete(api, kinds.IPADDRESS, o.name(address))
        else:
            inject_duplicate(api, address, newer=flag)
    converge(api, rng)
    check_invariants(api)
    before = {o.spec(a)["address"]: o.claim_of_address(a) for a in api.inventory.of_kind(kinds.IPADDRESS)}

    for kind_name in deletions:
        kind = kinds.IPCLAIM if kind_name[0] == "IPClaim" else kinds.CAPI_CLAIM
        user_delete(api, kind, kind_name[1])
    for kind, name, pool in late:
        if api.inventory.get(kinds.IPCLAIM if kind == "IPClaim" else kinds.CAPI_CLAIM, NS, name) is None:
            api.load((ipclaim if kind == "IPClaim" else capi_claim)(name, pool=pool))
    converge(api, rng)
    check_invariants(api)
    after = {o.spec(a)["address"]: o.claim_of_address(a) for a in api.inventory.of_kind(kinds.IPADDRESS)}
    # Claims that stayed kept their addresses.
    deleted = {(k, n) for k, n in deletions}
    for ip, key in before.items():
        if key not in deleted:
            assert after.get(ip) == key
    # Deleted claims are gone with their addresses (unless a late claim of that name came back).
    for key in deleted:
        if key not in {(k, n) for k, n, _ in late}:
            kind = kinds.IPCLAIM if key[0] == "IPClaim" else kinds.CAPI_CLAIM
            assert api.inventory.get(kind, NS, key[1]) is None
            assert key not in after.values()
