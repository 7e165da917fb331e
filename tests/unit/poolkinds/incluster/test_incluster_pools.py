"""The in-cluster provider's IP pools (poolkinds/incluster/spec.py): the address set, counts, grace and admission.

Properties against a brute-force model of the Go provider's reading (with the
point-to-point exception this project makes), and tables from the objects
the real Go provider wrote (/work/shared/fixtures/go-incluster-state.yaml,
kept as tests/fixtures/go-incluster-state.yaml).
"""

from __future__ import annotations

import datetime
import ipaddress
import re
from pathlib import Path

import pytest
import yaml
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from metal3_ipam.poolkinds.incluster import spec as ic
from metal3_ipam.core.allocator import POOL_EXHAUSTED, AllocationError, Allocator
from field_paths import value_at
from paths import TESTS

FAST = settings(deadline=None, max_examples=150, suppress_health_check=[HealthCheck.too_slow])
FIXTURE = TESTS / "fixtures" / "go-incluster-state.yaml"


def ip(text: str) -> int:
    return int(ipaddress.ip_address(text))


def pool_of(**spec):
    pool, problems = ic.read_ip_pool(spec)
    assert pool is not None and problems == [], [str(p) for p in problems]
    return pool


def members(pool) -> list[int]:
    return [v for e in pool.entries for v in range(e.first, e.last + 1) if ic.in_set(pool, v)]


def lowest_free(pool, used=()):
    allocator = Allocator(pool)
    for value in used:
        allocator.hold(ip(value))
    return str(allocator.allocate("claim").ip)


def problems_of(spec) -> list[tuple[str, object, str]]:
    pool, problems = ic.read_ip_pool(spec)
    assert pool is None
    return [(p.field, p.value, p.message) for p in problems]


# -- the fixture, counted and allocated as the Go provider did -----------------------------

def fixture():
    docs = [d for d in yaml.safe_load_all(FIXTURE.read_text()) if d]
    pools = {d["metadata"]["name"]: d for d in docs if d["kind"].endswith("Pool")}
    addresses = [d for d in docs if d["kind"] == "IPAddress"]
    return pools, addresses, docs


def test_the_fixture_is_the_shared_one():
    shared = Path("/work/shared/fixtures/go-incluster-state.yaml")
    if shared.exists():  # on a CI machine only the copy exists
        assert shared.read_text() == FIXTURE.read_text()


@pytest.mark.parametrize("name", ["global-a", "pool-a", "pool-v6"])
def test_counts_of_the_go_fixture(name):
    pools, addresses, _ = fixture()
    pool = pool_of(**pools[name]["spec"])
    in_use = [a["spec"]["address"] for a in addresses if a["spec"]["poolRef"]["name"] == name]
    assert ic.ip_pool_counts(pool, in_use).status == pools[name]["status"]["ipAddresses"]


def test_allocations_of_the_go_fixture():
    pools, addresses, _ = fixture()
    pool_a = pool_of(**pools["pool-a"]["spec"])
    assert lowest_free(pool_a) == "10.0.0.2"            # .0 reserved (network of the /22), .1 the gateway
    assert lowest_free(pool_a, ["10.0.0.2"]) == "10.0.0.4"  # .3 excluded
    assert ic.in_set(pool_a, ip("10.0.0.7"))             # the /22 reserves nothing at the /29's end
    global_a = pool_of(**pools["global-a"]["spec"])
    assert lowest_free(global_a) == "192.168.10.0"      # allocateReservedIPAddresses
    assert lowest_free(global_a, ["192.168.10.0"]) == "192.168.10.2"
    v6 = pool_of(**pools["pool-v6"]["spec"])
    assert lowest_free(v6) == "2001:db8::1"
    assert [str(ipaddress.ip_address(v)) for v in members(v6)] == ["2001:db8::1", "2001:db8::2", "2001:db8::3"]
    # Every address the Go provider handed out is in its pool's set, with the pool's prefix and gateway.
    for address in addresses:
        pool = pool_of(**pools[address["spec"]["poolRef"]["name"]]["spec"])
        entry = pool.entry_of(ip(address["spec"]["address"]))
        assert ic.in_set(pool, ip(address["spec"]["address"]))
        assert entry.prefix == address["spec"]["prefix"] and entry.gateway == address["spec"].get("gateway")


def test_grace_deadline_of_the_held_address():
    pools, _, docs = fixture()
    [held] = [d for d in docs if d["kind"] == "IPAddressClaim" and d["metadata"].get("deletionTimestamp")]
    seconds = ic.grace_seconds(pools[held["spec"]["poolRef"]["name"]]["spec"])
    deadline = ic.grace_deadline(held["metadata"]["deletionTimestamp"], seconds)
    assert ic.format_time(deadline) == "2026-11-24T15:49:49Z"


def test_grace_deadline_cases():
    assert ic.grace_deadline(None, 600) is None
    assert ic.grace_deadline("2026-11-24T15:39:49Z", 0) is None
    assert ic.grace_deadline("2026-11-24T15:39:49Z", None) is None
    assert ic.grace_deadline("2026-11-24T23:59:59Z", 2) == datetime.datetime(2026, 11, 25, 0, 0, 1,
                                                                           tzinfo=datetime.timezone.utc)
    assert ic.format_time(ic.grace_deadline("2026-11-24T16:39:49+01:00", 60)) == "2026-11-24T15:40:49Z"
    with pytest.raises(ValueError):
        ic.grace_deadline("yesterday", 5)


# -- where this project departs from the Go provider, on purpose ---------------------------

@pytest.mark.parametrize("addresses, prefix, expected", [
    (["10.0.0.0/31"], 31, ["10.0.0.0", "10.0.0.1"]),   # Go serves nothing
    (["10.0.0.7/32"], 32, ["10.0.0.7"]),               # Go serves nothing
    (["2001:db8::/127"], 127, ["2001:db8::", "2001:db8::1"]),
    (["2001:db8::5"], 128, ["2001:db8::5"]),
    (["10.0.0.0/30"], 30, ["10.0.0.1", "10.0.0.2"]),   # as Go: network and broadcast reserved
    (["2001:db8::/126"], 126, ["2001:db8::1", "2001:db8::2", "2001:db8::3"]),  # no broadcast in IPv6
])
def test_point_to_point_prefixes_serve_every_address(addresses, prefix, expected):
    pool = pool_of(addresses=addresses, prefix=prefix)
    assert members(pool) == [ip(e) for e in expected]


def test_free_is_right_when_addresses_fall_out_of_range():
    # The Go provider reads free = total - used = 2 - 7 = -5 here.
    pool = pool_of(addresses=["10.0.0.1-10.0.0.2"], prefix=24)
    in_use = ["10.0.0.1"] + [f"10.0.0.{i}" for i in range(10, 16)]
    assert ic.ip_pool_counts(pool, in_use).status == {"total": 2, "used": 7, "free": 1, "outOfRange": 6}


def test_counts_beyond_int64_are_exact_inside_and_saturate_in_the_status():
    pool = pool_of(addresses=["2001:db8::/32"], prefix=32)
    counts = ic.ip_pool_counts(pool, ["2001:db8::1", "2001:db8::", "10.0.0.1", "junk"])
    assert counts.total == 2**96 - 1 and counts.free == 2**96 - 2
    assert counts.status == {"total": 2**63 - 1, "used": 4, "free": 2**63 - 1, "outOfRange": 3}
    small = pool_of(addresses=["2001:db8::/65"], prefix=64)
    assert ic.ip_pool_counts(small, []).status["total"] == 2**63 - 1  # 2^63 itself is one too many
    fits = pool_of(addresses=["2001:db8::/66"], prefix=64)
    assert ic.ip_pool_counts(fits, []).status["total"] == 2**62 - 1


def test_exhaustion():
    pool = pool_of(addresses=["10.0.0.1-10.0.0.2"], prefix=24)
    with pytest.raises(AllocationError) as err:
        lowest_free(pool, ["10.0.0.1", "10.0.0.2"])
    assert err.value.reason == POOL_EXHAUSTED


# -- properties against a brute-force model --------------------------------------------------

@st.composite
def small_pools(draw):
    """A valid pool spec inside one small network of either family, and the model of its set."""
    version = draw(st.sampled_from([4, 6]))
    bits = 32 if version == 4 else 128
    prefix = draw(st.integers(bits - 6, bits))
    base = ip("10.20.30.0") if version == 4 else ip("2001:db8::100")
    size = 1 << (bits - prefix)
    net = base & ~(size - 1)

    def text(v):
        return str(ipaddress.ip_address(v))

    def entry():
        kind = draw(st.sampled_from(["ip", "range", "cidr"]))
        if kind == "ip":
            return text(net + draw(st.integers(0, size - 1)))
        if kind == "range":
            a, b = sorted(draw(st.lists(st.integers(0, size - 1), min_size=2, max_size=2)))
            return f"{text(net + a)}-{text(net + b)}"
        length = draw(st.integers(prefix, bits))
        block = 1 << (bits - length)
        start = net + draw(st.integers(0, size // block - 1)) * block
        return f"{text(start + draw(st.integers(0, block - 1)))}/{length}"  # host bits ignored

    addresses = [entry() for _ in range(draw(st.integers(1, 4)))]
    excluded = [entry() for _ in range(draw(st.integers(0, 3)))]
    spec = {"addresses": addresses, "prefix": prefix}
    if excluded:
        spec["excludedAddresses"] = excluded
    gateway = draw(st.one_of(st.none(), st.integers(0, size - 1)))
    if gateway is not None:
        spec["gateway"] = text(net + gateway)
    reserved_allowed = draw(st.booleans())
    if reserved_allowed or draw(st.booleans()):
        spec["allocateReservedIPAddresses"] = reserved_allowed

    def span(t):
        if "/" in t:
            n = ipaddress.ip_network(t, strict=False)
            return int(n[0]), int(n[-1])
        a, _, b = t.partition("-")
        return ip(a), ip(b or a)

    model = set()
    for t in addresses:
        lo, hi = span(t)
        model |= set(range(lo, hi + 1))
    for t in excluded:
        lo, hi = span(t)
        model -= set(range(lo, hi + 1))
    if gateway is not None:
        model.discard(net + gateway)
    if not reserved_allowed and prefix < bits - 1:
        lowest_net = min(span(t)[0] for t in addresses) & ~(size - 1)
        model.discard(lowest_net)
        if version == 4:
            model.discard(lowest_net + size - 1)
    return spec, model, (net, net + size - 1)


@FAST
@given(small_pools())
def test_the_set_is_the_model(case):
    spec, model, _ = case
    pool = pool_of(**spec)
    assert set(members(pool)) == model
    assert pool.capacity() == len(model)
    entries = [(e.first, e.last) for e in pool.entries]
    assert entries == sorted(entries) and all(a[1] + 1 < b[0] for a, b in zip(entries, entries[1:]))


@FAST
@given(small_pools(), st.data())
def test_never_a_reserved_excluded_or_gateway_address(case, data):
    spec, model, (net_first, net_last) = case
    pool = pool_of(**spec)
    for value in members(pool):
        assert value != (ip(spec["gateway"]) if "gateway" in spec else None)
        for t in spec.get("excludedAddresses", []):
            if "/" in t:
                assert ipaddress.ip_address(value) not in ipaddress.ip_network(t, strict=False)
            else:
                a, _, b = t.partition("-")
                assert not ip(a) <= value <= ip(b or a)
        bits = 32 if pool.version == 4 else 128
        if not spec.get("allocateReservedIPAddresses") and spec["prefix"] < bits - 1:
            assert value != net_first and not (pool.version == 4 and value == net_last)


@FAST
@given(small_pools(), st.data())
def test_lowest_free_first_whatever_the_order(case, data):
    spec, model, _ = case
    shuffled = dict(spec, addresses=data.draw(st.permutations(spec["addresses"])))
    used = data.draw(st.lists(st.sampled_from(sorted(model)), unique=True) if model else st.just([]))
    allocator = Allocator(pool_of(**shuffled))
    for value in used:
        allocator.hold(value)
    handed = []
    for _ in range(len(model) - len(used)):
        handed.append(int(allocator.allocate("claim").ip))
    assert handed == sorted(model - set(used))
    with pytest.raises(AllocationError):
        allocator.allocate("claim")


@FAST
@given(small_pools(), st.data())
def test_counts_are_the_brute_force_counts(case, data):
    spec, model, (net_first, net_last) = case
    pool = pool_of(**spec)
    bits = 32 if pool.version == 4 else 128
    around = st.integers(max(0, net_first - 3), min(2**bits - 1, net_last + 3)).map(
        lambda v: str(ipaddress.ip_address(v)))
    in_use = data.draw(st.lists(st.one_of(around, st.just("10.0.0.1"), st.just("2001:db8::1"), st.just("x")),
                                max_size=12))
    parsed = [ip(t) if re.fullmatch(r"[0-9a-f:.]+", t) and ipaddress.ip_address(t).version == pool.version
              else None for t in in_use]
    in_range = {v for v in parsed if v in model}
    assert ic.ip_pool_counts(pool, in_use) == ic.Counts(
        total=len(model), used=len(in_use), free=len(model) - len(in_range),
        out_of_range=sum(1 for v in parsed if v not in model))


# -- refusals name their field and value ------------------------------------------------------

junk_text = st.sampled_from(["10.0.0.1", "10.0.0.0/30", "10.0.0.9-10.0.0.3", "10.0.0.1-10.0.0.4", "2001:db8::1",
                             "2001:db8::/126", "10.0.0.0/33", "x", "", "10.1.0.0/24", "192.168.0.1",
                             "10.0.0.1-2001:db8::1", "10.0.0.256", " 10.0.0.1"])


@FAST
@given(st.fixed_dictionaries({}, optional={
    "addresses": st.one_of(st.lists(junk_text, max_size=4), st.just("10.0.0.1"), st.lists(st.integers(), max_size=1)),
    "excludedAddresses": st.one_of(st.lists(junk_text, max_size=3), st.just([None])),
    "gateway": st.one_of(junk_text, st.integers()),
    "prefix": st.one_of(st.integers(-2, 130), st.just("24"), st.just(True)),
    "allocateReservedIPAddresses": st.one_of(st.booleans(), st.just("yes")),
    "addressReuseGracePeriodSeconds": st.one_of(st.integers(-5, 5), st.just(2**31), st.just(1.5)),
}))
def test_every_refusal_names_its_field_and_value(spec):
    pool, problems = ic.read_ip_pool(spec)
    assert (pool is None) == bool(problems)
    for problem in problems:
        assert problem.field.startswith("spec")
        value = value_at(spec, problem.field)
        assert problem.value == value, (problem, spec)
        assert repr(value) in str(problem) or f'"{value}"' in str(problem)


@pytest.mark.parametrize("spec, field, value, message", [
    ({"prefix": 24}, "spec.addresses", None, "addresses is required"),
    ({"addresses": [], "prefix": 24}, "spec.addresses", [], "addresses is required"),
    ({"addresses": ["10.0.0.1", "nope"], "prefix": 24}, "spec.addresses[1]", "nope",
     "provided address is not a valid IP, range, nor CIDR"),
    ({"addresses": ["10.0.0.2-10.0.0.1"], "prefix": 24}, "spec.addresses[0]", "10.0.0.2-10.0.0.1",
     "provided address is not a valid IP, range, nor CIDR"),
    ({"addresses": ["10.0.0.1", "2001:db8::1"], "prefix": 24}, "spec.addresses[1]", "2001:db8::1",
     "provided addresses are of mixed IP families"),
    ({"addresses": ["10.0.0.1"], "prefix": -1}, "spec.prefix", -1, "a valid prefix is required"),
    ({"addresses": ["10.0.0.1"]}, "spec.prefix", None, "a valid prefix is required"),
    ({"addresses": ["10.0.0.1"], "prefix": 33}, "spec.prefix", 33, "provided prefix is not valid"),
    ({"addresses": ["10.0.0.1"], "prefix": 24, "gateway": "10.0.0.x"}, "spec.gateway", "10.0.0.x",
     "provided gateway is not a valid IP address"),
    ({"addresses": ["10.0.0.1"], "prefix": 24, "gateway": "2001:db8::1"}, "spec.gateway", "2001:db8::1",
     "provided gateway and addresses are of mixed IP families"),
    ({"addresses": ["10.0.0.1"], "prefix": 24, "excludedAddresses": ["10.0.0.1", "bad"]},
     "spec.excludedAddresses[1]", "bad", "provided address is not a valid IP, range, nor CIDR"),
    ({"addresses": ["10.0.0.1"], "prefix": 24, "excludedAddresses": ["10.0.0.1", "2001:db8::/64"]},
     "spec.excludedAddresses[1]", "2001:db8::/64", "addresses and excluded addresses are of mixed IP families"),
    ({"addresses": ["10.0.0.1"], "prefix": 24, "addressReuseGracePeriodSeconds": -1},
     "spec.addressReuseGracePeriodSeconds", -1, "addressReuseGracePeriodSeconds must not be negative"),
    ({"addresses": ["10.0.0.1", "10.0.1.1"], "prefix": 24}, "spec.addresses[1]", "10.0.1.1",
     "provided address belongs to a different subnet than others"),
    ({"addresses": ["10.0.1.0/24", "10.0.0.0/16"], "prefix": 24}, "spec.addresses[1]", "10.0.0.0/16",
     "provided address belongs to a different subnet than others"),
    # Ours: the Go provider accepts a gateway outside the prefix.
    ({"addresses": ["10.0.0.1"], "prefix": 24, "gateway": "10.0.1.1"}, "spec.gateway", "10.0.1.1",
     "is outside the pool's network 10.0.0.0/24"),
])
def test_each_rule(spec, field, value, message):
    found = problems_of(spec)
    assert any(f == field and v == value and message in m for f, v, m in found), found


def test_refusals_name_the_object():
    obj = {"apiVersion": "ipam.cluster.x-k8s.io/v1alpha2", "kind": "InClusterIPPool",
           "metadata": {"name": "p", "namespace": "ns"}, "spec": {"addresses": ["x"], "prefix": 24}}
    [problem] = ic.validate_ip_pool(obj)
    assert str(problem) == ('InClusterIPPool/ns/p: spec.addresses[0]: provided address is not a valid IP, range, '
                            'nor CIDR (value: "x")')


# -- update and delete ----------------------------------------------------------------------

def pool_object(annotations=None, **spec):
    meta = {"name": "p", "namespace": "ns"}
    if annotations:
        meta["annotations"] = annotations
    return {"apiVersion": "ipam.cluster.x-k8s.io/v1alpha2", "kind": "InClusterIPPool", "metadata": meta,
            "spec": spec}


OLD = pool_object(addresses=["10.0.0.0/24"], prefix=24, gateway="10.0.0.1")


@pytest.mark.parametrize("spec, field, lost", [
    ({"addresses": ["10.0.0.0/25"], "prefix": 24, "gateway": "10.0.0.1"}, "spec.addresses", {"10.0.0.200"}),
    ({"addresses": ["10.0.0.0/24"], "prefix": 24, "gateway": "10.0.0.200"}, "spec.gateway", {"10.0.0.200"}),
    ({"addresses": ["10.0.0.0/24"], "prefix": 24, "gateway": "10.0.0.1", "excludedAddresses": ["10.0.0.190-10.0.0.210"]},
     "spec.excludedAddresses[0]", {"10.0.0.200"}),
    ({"addresses": ["10.0.0.200/32"], "prefix": 30}, "spec.allocateReservedIPAddresses", {"10.0.0.200", "10.0.0.5"}),
    ({"addresses": ["2001:db8::/64"], "prefix": 64}, "spec.addresses", {"10.0.0.200", "10.0.0.5"}),
])
def test_an_update_may_not_lose_an_address_in_use(spec, field, lost):
    problems = ic.validate_ip_pool_update(OLD, pool_object(**spec), {"m0": "10.0.0.200", "m1": "10.0.0.5"})
    by_value = {p.value: p for p in problems}
    assert set(by_value) == lost
    assert by_value["10.0.0.200"].field == field and "(IPAddress m0)" in by_value["10.0.0.200"].message
    assert "pool addresses do not contain allocated addresses" in by_value["10.0.0.200"].message


def test_an_update_keeping_the_addresses_in_use_is_allowed():
    new = pool_object(addresses=["10.0.0.0/25"], prefix=24, gateway="10.0.0.1", excludedAddresses=["10.0.0.100"])
    assert ic.validate_ip_pool_update(OLD, new, {"m0": "10.0.0.5", "odd": "not-an-ip"}) == []
    assert ic.validate_ip_pool_update(OLD, pool_object(addresses=["10.0.0.1"], prefix=24), {}) == []


def test_delete():
    in_use = {"m0": "10.0.0.5"}
    [problem] = ic.validate_ip_pool_delete(OLD, in_use)
    assert "Pool has IPAddresses allocated" in problem.message and "m0" in str(problem.value)
    assert ic.validate_ip_pool_delete(OLD, {}) == []
    skip = pool_object({"ipam.cluster.x-k8s.io/skip-validate-delete-webhook": ""}, **OLD["spec"])
    moved = pool_object({"clusterctl.cluster.x-k8s.io/delete-for-move": ""}, **OLD["spec"])
    assert ic.validate_ip_pool_delete(skip, in_use) == []
    assert ic.validate_ip_pool_delete(moved, in_use) == []


@FAST
@given(small_pools(), st.data())
def test_an_update_is_refused_exactly_for_the_addresses_in_use_it_drops(case, data):
    spec, model, (net_first, net_last) = case
    around = st.integers(max(0, net_first - 2), net_last + 2).map(lambda v: str(ipaddress.ip_address(v)))
    in_use = {f"a{i}": text for i, text in enumerate(data.draw(st.lists(around, max_size=6, unique=True)))}
    problems = ic.validate_ip_pool_update(OLD, pool_object(**spec), in_use)
    assert {p.value for p in problems} == {t for t in in_use.values() if ip(t) not in model}
    for problem in problems:
        value = ip(problem.value)
        assert problem.field.startswith(("spec.addresses", "spec.gateway", "spec.excludedAddresses[",
                                         "spec.allocateReservedIPAddresses"))
        if problem.field == "spec.gateway":
            assert value == ip(spec["gateway"])
        elif problem.field.startswith("spec.excludedAddresses["):
            assert str(value_at(spec, problem.field)) in problem.message
