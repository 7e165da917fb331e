"""The in-cluster provider's prefix pools (poolkinds/incluster/prefix_spec.py): allocation, counts and admission.

Properties against a brute force over every aligned sub-prefix of small pools.
"""

from __future__ import annotations

import ipaddress

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from metal3_ipam.poolkinds.incluster import prefix_spec as px
from field_paths import value_at
from prefix_pools import BASE, small_prefix_pools

FAST = settings(deadline=None, max_examples=150, suppress_health_check=[HealthCheck.too_slow])


def pool_of(**spec):
    pool, problems = px.read_prefix_pool(spec)
    assert pool is not None and problems == [], [str(p) for p in problems]
    return pool


@FAST
@given(small_prefix_pools(), st.data())
def test_allocation_is_aligned_inside_not_excluded_and_lowest_first(case, data):
    spec, model, length = case
    pool = pool_of(**spec)
    assert pool.total == len(model)
    used = data.draw(st.lists(st.sampled_from(model), unique=True) if model else st.just([]))
    in_use = [(str(ipaddress.ip_address(a)), length) for a in used]
    handed = []
    while True:
        found = px.first_free_prefix(pool, in_use)
        if found is None:
            break
        address, bits = found
        assert bits == length
        value = int(ipaddress.ip_address(address))
        assert value % (1 << (128 - length)) == 0  # aligned
        assert pool.allocatable(value, bits)
        handed.append(value)
        in_use.append(found)
    assert handed == sorted(set(model) - set(used))  # lowest first, each once, all of them


@FAST
@given(small_prefix_pools(), st.data())
def test_counts_are_the_brute_force_counts(case, data):
    spec, model, length = case
    pool = pool_of(**spec)
    candidates = st.tuples(st.integers(BASE - 4, BASE + 520).map(lambda v: str(ipaddress.ip_address(v))),
                           st.sampled_from([length, length - 1, 128, None]))
    in_use = data.draw(st.lists(st.one_of(candidates, st.just(("10.0.0.1", 24)), st.just(("x", 64))), max_size=10))
    good = set()
    out = 0
    for address, bits in in_use:
        bits = 128 if bits is None else bits  # an address without a prefix is its own /128
        if ":" in address and bits == length and int(ipaddress.ip_address(address)) & ~((1 << (128 - length)) - 1) in model:
            good.add(int(ipaddress.ip_address(address)) >> (128 - length))
        else:
            out += 1
    counts = px.prefix_pool_counts(pool, in_use)
    assert counts == px.Counts(total=len(model), used=len(in_use), free=len(model) - len(good), out_of_range=out)
    assert counts.free >= 0


def test_default_length_and_huge_pools():
    pool = pool_of(prefixes=["2001:db8::/48"])
    assert pool.length == 64 and pool.total == 2**16
    assert px.first_free_prefix(pool, [("2001:db8::", 64)]) == ("2001:db8:0:1::", 64)
    assert px.first_free_prefix(pool, [("2001:db8::", 56)]) == ("2001:db8:0:100::", 64)  # a /56 in use blocks 256
    hosts = pool_of(prefixes=["2001:db8::/48"], allocationPrefixLength=128)
    assert hosts.total == 2**80  # exact
    assert px.prefix_pool_counts(hosts, []).status == {"total": 2**63 - 1, "used": 0, "free": 2**63 - 1,
                                                       "outOfRange": 0}
    assert pool_of(prefixes=["2001:db8::/48"], allocationPrefixLength=0).length == 64


def test_the_gateway_blocks_nothing():
    pool = pool_of(prefixes=["2001:db8::/126"], allocationPrefixLength=128, gateway="2001:db8::")
    assert px.first_free_prefix(pool, []) == ("2001:db8::", 128)


def test_aggregates_sorted_by_address_whatever_the_order():
    pool = pool_of(prefixes=["2001:db8:1::/64", "2001:db8::/64"])
    assert px.first_free_prefix(pool, []) == ("2001:db8::", 64)
    assert px.first_free_prefix(pool, [("2001:db8::", 64)]) == ("2001:db8:1::", 64)
    assert px.first_free_prefix(pool, [("2001:db8::", 64), ("2001:db8:1::", 64)]) is None


# -- admission ---------------------------------------------------------------------------

@pytest.mark.parametrize("spec, field, value, message", [
    ({}, "spec.prefixes", None, "prefixes is required"),
    ({"prefixes": []}, "spec.prefixes", [], "prefixes is required"),
    ({"prefixes": ["2001:db8::/48"], "allocationPrefixLength": 129}, "spec.allocationPrefixLength", 129,
     "allocationPrefixLength must be between 1 and 128"),
    ({"prefixes": ["2001:db8::/48"], "allocationPrefixLength": -1}, "spec.allocationPrefixLength", -1,
     "allocationPrefixLength must be between 1 and 128"),
    ({"prefixes": ["2001:db8::/48", "nope"]}, "spec.prefixes[1]", "nope", "provided entry is not a valid IPv6 CIDR"),
    ({"prefixes": ["2001:db8::1"]}, "spec.prefixes[0]", "2001:db8::1", "provided entry is not a valid IPv6 CIDR"),
    ({"prefixes": ["10.0.0.0/8"]}, "spec.prefixes[0]", "10.0.0.0/8", "only IPv6 prefixes are supported"),
    ({"prefixes": ["2001:db8::1/48"]}, "spec.prefixes[0]", "2001:db8::1/48", "CIDR must be network-aligned"),
    ({"prefixes": ["2001:db8::/80"]}, "spec.prefixes[0]", "2001:db8::/80",
     "CIDR prefix length must be <= allocationPrefixLength (64)"),
    ({"prefixes": ["2001:db8::/48"], "gateway": "zz"}, "spec.gateway", "zz", "provided gateway is not a valid IP"),
    ({"prefixes": ["2001:db8::/48"], "gateway": "10.0.0.1"}, "spec.gateway", "10.0.0.1",
     "provided gateway must be IPv6"),
    ({"prefixes": ["2001:db8::/48"], "excludedPrefixes": ["no"]}, "spec.excludedPrefixes[0]", "no",
     "provided entry is not a valid IP, range, nor CIDR"),
    ({"prefixes": ["2001:db8::/48"], "excludedPrefixes": ["2001:db8::/64", "10.0.0.0/24"]},
     "spec.excludedPrefixes[1]", "10.0.0.0/24", "only IPv6 excluded prefixes are supported"),
])
def test_each_rule(spec, field, value, message):
    pool, problems = px.read_prefix_pool(spec)
    assert pool is None
    assert any(p.field == field and p.value == value and message in p.message for p in problems), problems


def obj(**spec):
    return {"apiVersion": "ipam.cluster.x-k8s.io/v1alpha2", "kind": "InClusterPrefixPool",
            "metadata": {"name": "pp", "namespace": "ns"}, "spec": spec}


junk = st.sampled_from(["2001:db8::/48", "2001:db8::/64", "2001:db8::1/64", "2001:db8::/96", "10.0.0.0/8",
                        "2001:db8::1", "2001:db8::1-2001:db8::9", "x", "", "2001:db8::/129"])


@FAST
@given(st.fixed_dictionaries({}, optional={
    "prefixes": st.lists(junk, max_size=3),
    "excludedPrefixes": st.lists(junk, max_size=3),
    "gateway": junk,
    "allocationPrefixLength": st.one_of(st.integers(-1, 130), st.just("64")),
}))
def test_every_refusal_names_its_field_and_value(spec):
    pool, problems = px.read_prefix_pool(spec)
    assert (pool is None) == bool(problems)
    for problem in problems:
        expected = value_at(spec, problem.field)
        if problem.field == "spec.allocationPrefixLength" and expected in (None, 0):
            expected = 64
        assert problem.value == expected, (problem, spec)


def test_warnings_for_host_length():
    warnings = px.validate_prefix_pool(obj(prefixes=["2001:db8::/120"], allocationPrefixLength=128,
                                           gateway="2001:db8::1"))
    assert [p.warning for p in warnings] == [True, True]
    assert "behaves like host-address allocation" in warnings[0].message
    assert "may also be allocated to claims" in warnings[1].message
    assert px.validate_prefix_pool(obj(prefixes=["2001:db8::/120"], allocationPrefixLength=128,
                                       gateway="2001:db9::1"))[1:] == []
    assert px.validate_prefix_pool(obj(prefixes=["2001:db8::/48"])) == []


def test_update_rules():
    old = obj(prefixes=["2001:db8::/48"])
    [problem] = px.validate_prefix_pool_update(old, obj(prefixes=["2001:db8::/48"], allocationPrefixLength=56))
    assert (problem.field, problem.value) == ("spec.allocationPrefixLength", 56)
    assert problem.message == "spec.allocationPrefixLength is immutable (was 64)"
    assert px.validate_prefix_pool_update(old, obj(prefixes=["2001:db8::/48"], allocationPrefixLength=64)) == []
    in_use = {"a": ("2001:db8:0:5::", 64), "b": ("2001:db8:0:9::", 64)}
    [problem] = px.validate_prefix_pool_update(old, obj(prefixes=["2001:db8::/48"],
                                                        excludedPrefixes=["2001:db8:0:9::1"]), in_use)
    assert problem.value == ["2001:db8:0:9::/64"]
    assert problem.message.startswith("existing allocations become non-allocatable: 2001:db8:0:9::/64 (IPAddress b)")
    assert px.validate_prefix_pool_update(old, obj(prefixes=["2001:db8::/52"]), in_use) == []


def test_delete_rules():
    assert px.validate_prefix_pool_delete(obj(prefixes=["2001:db8::/48"]), {"a": ("2001:db8::", 64)})
    assert px.validate_prefix_pool_delete(obj(prefixes=["2001:db8::/48"]), {}) == []
    skipped = obj(prefixes=["2001:db8::/48"])
    skipped["metadata"]["annotations"] = {"ipam.cluster.x-k8s.io/skip-validate-delete-webhook": "true"}
    assert px.validate_prefix_pool_delete(skipped, {"a": ("2001:db8::", 64)}) == []
