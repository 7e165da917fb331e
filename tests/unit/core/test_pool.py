"""The address set of a pool (SPEC §3) as read_pool builds it."""

from __future__ import annotations

import pytest

from metal3_ipam.core.addresses import parse_ip
from metal3_ipam.core.pool import read_pool


def ip(text: str) -> int:
    return int(parse_ip(text))


def span(a: str, b: str) -> tuple[int, int]:
    return ip(a), ip(b)


def pool_of(**spec):
    spec.setdefault("namePrefix", "p")
    pool, problems = read_pool(spec)
    assert pool is not None, [str(p) for p in problems]
    assert not [p for p in problems if not p.warning]
    return pool


def ranges(pool) -> list[tuple[int, int]]:
    return [(e.first, e.last) for e in pool.entries]


def problems_of(**spec) -> list[str]:
    spec.setdefault("namePrefix", "p")
    pool, problems = read_pool(spec)
    assert pool is None
    return [str(p) for p in problems if not p.warning]


# -- the range of one entry ------------------------------------------------------

def test_start_and_end():
    pool = pool_of(pools=[{"start": "10.0.0.5", "end": "10.0.0.9"}])
    assert ranges(pool) == [span("10.0.0.5", "10.0.0.9")]
    assert pool.capacity() == 5
    assert pool.version == 4
    assert pool.strategy == "sequential"


def test_single_address_entry():
    pool = pool_of(pools=[{"start": "10.0.0.5", "end": "10.0.0.5"}])
    assert pool.capacity() == 1


@pytest.mark.parametrize("subnet, first, last", [
    ("192.168.1.0/24", "192.168.1.1", "192.168.1.254"),
    ("192.168.1.1/26", "192.168.1.1", "192.168.1.62"),   # host bits set: the network is meant
    ("192.168.1.128/25", "192.168.1.129", "192.168.1.254"),
    ("10.0.0.0/30", "10.0.0.1", "10.0.0.2"),
    ("10.0.0.0/31", "10.0.0.0", "10.0.0.1"),             # RFC 3021: every address
    ("10.0.0.7/32", "10.0.0.7", "10.0.0.7"),
    ("10.0.0.0/16", "10.0.0.1", "10.0.255.254"),
    ("2001:db8::/64", "2001:db8::1", "2001:db8::ffff:ffff:ffff:ffff"),  # no broadcast in IPv6
    ("2001:db8::/127", "2001:db8::", "2001:db8::1"),
    ("2001:db8::5/128", "2001:db8::5", "2001:db8::5"),
])
def test_subnet_only(subnet, first, last):
    pool = pool_of(pools=[{"subnet": subnet}])
    assert ranges(pool) == [span(first, last)]


def test_subnet_capacity_ipv4():
    assert pool_of(pools=[{"subnet": "10.0.0.0/24"}]).capacity() == 254
    assert pool_of(pools=[{"subnet": "10.0.0.0/30"}]).capacity() == 2
    assert pool_of(pools=[{"subnet": "10.0.0.0/31"}]).capacity() == 2
    assert pool_of(pools=[{"subnet": "10.0.0.0/32"}]).capacity() == 1


def test_start_with_subnet_runs_to_the_last_host():
    pool = pool_of(pools=[{"start": "10.0.0.100", "subnet": "10.0.0.0/24"}])
    assert ranges(pool) == [span("10.0.0.100", "10.0.0.254")]


def test_end_with_subnet_starts_after_the_network_address():
    pool = pool_of(pools=[{"end": "10.0.0.20", "subnet": "10.0.0.0/24"}])
    assert ranges(pool) == [span("10.0.0.1", "10.0.0.20")]


def test_start_end_and_subnet():
    pool = pool_of(pools=[{"start": "10.0.0.5", "end": "10.0.0.20", "subnet": "10.0.0.0/24"}])
    assert ranges(pool) == [span("10.0.0.5", "10.0.0.20")]


@pytest.mark.parametrize("where", ["entry", "pool"])
def test_start_only_runs_to_the_end_of_the_network_of_the_prefix(where):
    entry = {"start": "10.0.0.200"}
    spec = {"pools": [entry]}
    (entry if where == "entry" else spec)["prefix"] = 24
    pool = pool_of(**spec)
    assert ranges(pool) == [span("10.0.0.200", "10.0.0.254")]
    assert pool.entries[0].prefix == 24


def test_end_only_with_prefix():
    pool = pool_of(pools=[{"end": "10.0.0.9", "prefix": 24}])
    assert ranges(pool) == [span("10.0.0.1", "10.0.0.9")]


def test_start_only_ipv6_with_prefix():
    pool = pool_of(prefix=64, pools=[{"start": "2001:db8::ff00"}])
    assert ranges(pool) == [span("2001:db8::ff00", "2001:db8::ffff:ffff:ffff:ffff")]


def test_start_only_without_any_prefix_is_an_error():
    lines = problems_of(pools=[{"start": "10.0.0.1"}])
    assert any("spec.pools[0].start" in line and "10.0.0.1" in line and "prefix" in line for line in lines)


# -- what is never handed out -----------------------------------------------------

def test_gateways_and_excluded_addresses_are_reserved():
    pool = pool_of(
        gateway="10.0.0.1",
        pools=[{"subnet": "10.0.0.0/24"}, {"subnet": "10.0.1.0/24", "gateway": "10.0.1.254"}],
        excludedAddresses=["10.0.0.5", "10.0.0.10-10.0.0.19", "10.0.1.0/28"],
    )
    # Entry 0 uses the default gateway, entry 1 its own.
    assert pool.entries[0].gateway == "10.0.0.1"
    assert pool.entries[1].gateway == "10.0.1.254"
    for reserved in ["10.0.0.1", "10.0.1.254", "10.0.0.5", "10.0.0.10", "10.0.0.19", "10.0.1.1", "10.0.1.15"]:
        assert pool.is_reserved(ip(reserved)), reserved
        assert not any(lo <= ip(reserved) <= hi for e in pool.entries for lo, hi in pool.allocatable(e))
    for free in ["10.0.0.2", "10.0.0.9", "10.0.0.20", "10.0.1.16", "10.0.1.253"]:
        assert not pool.is_reserved(ip(free)), free
    # 254 - gateway - 1 - 10  +  254 - gateway - 15 (10.0.1.1-15; .0 is not a host)
    assert pool.capacity() == (254 - 1 - 1 - 10) + (254 - 1 - 15)


def test_default_gateway_reserved_even_when_an_entry_overrides_it():
    pool = pool_of(gateway="10.0.0.1", pools=[{"subnet": "10.0.0.0/24", "gateway": "10.0.0.254"}])
    assert pool.is_reserved(ip("10.0.0.1"))
    assert pool.is_reserved(ip("10.0.0.254"))


def test_preallocations_are_held_for_their_claim_only():
    pool = pool_of(pools=[{"start": "10.0.0.1", "end": "10.0.0.10"}],
                   preAllocations={"claim1": "10.0.0.3", "claim2": "10.0.0.7"})
    assert pool.preallocations == {"claim1": ip("10.0.0.3"), "claim2": ip("10.0.0.7")}
    assert pool.holder_of(ip("10.0.0.3")) == "claim1"
    assert pool.holder_of(ip("10.0.0.4")) is None
    entry = pool.entries[0]
    assert pool.allocatable(entry) == [span("10.0.0.1", "10.0.0.2"), span("10.0.0.4", "10.0.0.6"),
                                       span("10.0.0.8", "10.0.0.10")]
    # Capacity counts them: they are handed out, to their claims.
    assert pool.capacity() == 10


def test_entries_keep_declaration_order_and_entry_of_finds_each():
    pool = pool_of(pools=[{"start": "10.0.2.1", "end": "10.0.2.5"},
                          {"start": "10.0.0.1", "end": "10.0.0.5"},
                          {"start": "10.0.1.1", "end": "10.0.1.5"}])
    assert [e.index for e in pool.entries] == [0, 1, 2]
    assert ranges(pool)[0] == span("10.0.2.1", "10.0.2.5")
    assert pool.entry_of(ip("10.0.0.3")).index == 1
    assert pool.entry_of(ip("10.0.1.5")).index == 2
    assert pool.entry_of(ip("10.0.2.1")).index == 0
    assert pool.entry_of(ip("10.0.0.6")) is None
    assert pool.entry_of(ip("9.255.255.255")) is None


def test_prefix_gateway_and_dns_fall_back_to_pool_defaults():
    pool = pool_of(prefix=24, gateway="10.0.0.1", dnsServers=["8.8.8.8"],
                   pools=[{"start": "10.0.0.10", "end": "10.0.0.20", "prefix": 25, "gateway": "10.0.0.2",
                           "dnsServers": ["1.1.1.1", "1.0.0.1"]},
                          {"start": "10.0.0.30", "end": "10.0.0.40"},
                          {"subnet": "10.0.1.0/26"}])
    first, second, third = pool.entries
    assert (first.prefix, first.gateway, first.dns_servers) == (25, "10.0.0.2", ("1.1.1.1", "1.0.0.1"))
    assert (second.prefix, second.gateway, second.dns_servers) == (24, "10.0.0.1", ("8.8.8.8",))
    # The pool's default prefix wins over the subnet's length, as in Metal3.
    assert third.prefix == 24


def test_subnet_gives_the_prefix_when_no_default():
    pool = pool_of(pools=[{"subnet": "10.0.1.0/26"}])
    assert pool.entries[0].prefix == 26
    assert pool.entries[0].gateway is None
    assert pool.entries[0].dns_servers == ()


def test_prefix_zero_means_unset():
    pool = pool_of(prefix=0, pools=[{"start": "10.0.0.1", "end": "10.0.0.2", "prefix": 0}])
    assert pool.entries[0].prefix is None


def test_ipv6_capacity_beyond_64_bits_is_exact():
    pool = pool_of(pools=[{"subnet": "2001:db8::/48"}])
    assert pool.capacity() == 2**80 - 1
    assert pool.version == 6


def test_random_strategy_is_read():
    assert pool_of(allocationStrategy="random", pools=[{"subnet": "10.0.0.0/24"}]).strategy == "random"


# -- spec problems (the pool is not built) ------------------------------------------

@pytest.mark.parametrize("spec, path, value", [
    ({"pools": "10.0.0.0/24"}, "spec.pools", "10.0.0.0/24"),
    ({"pools": [{}]}, "spec.pools[0]", "{}"),
    ({"pools": ["10.0.0.1"]}, "spec.pools[0]", "10.0.0.1"),
    ({"pools": [{"start": "10.0.0.300", "end": "10.0.0.5"}]}, "spec.pools[0].start", "10.0.0.300"),
    ({"pools": [{"start": "10.0.0.9", "end": "10.0.0.5"}]}, "spec.pools[0]", "10.0.0.9"),
    ({"pools": [{"subnet": "10.0.0.0/33"}]}, "spec.pools[0].subnet", "10.0.0.0/33"),
    ({"pools": [{"subnet": "10.0.0.0/24", "start": "10.0.1.1"}]}, "spec.pools[0].start", "10.0.1.1"),
    ({"pools": [{"subnet": "10.0.0.0/24", "end": "10.0.1.1"}]}, "spec.pools[0].end", "10.0.1.1"),
    ({"pools": [{"subnet": "10.0.0.0/24"}, {"subnet": "2001:db8::/64"}]}, "spec.pools[1].subnet", "2001:db8::/64"),
    ({"gateway": "2001:db8::1", "pools": [{"subnet": "10.0.0.0/24"}]}, "spec.gateway", "2001:db8::1"),
    ({"pools": [{"subnet": "10.0.0.0/24", "gateway": "fe80::1"}]}, "spec.pools[0].gateway", "fe80::1"),
    ({"pools": [{"subnet": "10.0.0.0/24", "prefix": 33}]}, "spec.pools[0].prefix", "33"),
    ({"pools": [{"subnet": "10.0.0.0/24", "prefix": 129}]}, "spec.pools[0].prefix", "129"),
    ({"pools": [{"subnet": "10.0.0.0/24", "prefix": "24"}]}, "spec.pools[0].prefix", "24"),
    ({"prefix": 40, "pools": [{"subnet": "10.0.0.0/24"}]}, "spec.prefix", "40"),
    ({"pools": [{"start": "10.0.0.1", "end": "10.0.1.1", "prefix": 24}]}, "spec.pools[0].prefix", "24"),
    ({"pools": [{"subnet": "10.0.0.0/24", "dnsServers": ["8.8.8.x"]}]}, "spec.pools[0].dnsServers[0]", "8.8.8.x"),
    ({"dnsServers": "8.8.8.8", "pools": [{"subnet": "10.0.0.0/24"}]}, "spec.dnsServers", "8.8.8.8"),
    ({"pools": [{"subnet": "10.0.0.0/24"}], "excludedAddresses": ["10.0.0.x"]}, "spec.excludedAddresses[0]", "10.0.0.x"),
    ({"pools": [{"subnet": "10.0.0.0/24"}], "excludedAddresses": ["::ffff:10.0.0.1"]}, "spec.excludedAddresses[0]",
     "::ffff:10.0.0.1"),
    ({"pools": [{"subnet": "10.0.0.0/24"}], "preAllocations": {"c": "10.0.1.5"}}, "spec.preAllocations[c]", "10.0.1.5"),
    ({"pools": [{"subnet": "10.0.0.0/24"}], "preAllocations": {"c": "nope"}}, "spec.preAllocations[c]", "nope"),
    ({"gateway": "10.0.0.1", "pools": [{"subnet": "10.0.0.0/24"}], "preAllocations": {"c": "10.0.0.1"}},
     "spec.preAllocations[c]", "10.0.0.1"),
    ({"pools": [{"subnet": "10.0.0.0/24"}], "excludedAddresses": ["10.0.0.8/29"], "preAllocations": {"c": "10.0.0.9"}},
     "spec.preAllocations[c]", "10.0.0.9"),
    ({"pools": [{"subnet": "10.0.0.0/24"}], "preAllocations": {"a": "10.0.0.5", "b": "10.0.0.5"}},
     "spec.preAllocations[b]", "10.0.0.5"),
    ({"pools": [{"subnet": "10.0.0.0/24"}], "preAllocations": ["10.0.0.5"]}, "spec.preAllocations", "10.0.0.5"),
    ({"pools": [{"subnet": "10.0.0.0/24"}], "allocationStrategy": "roundrobin"}, "spec.allocationStrategy", "roundrobin"),
    ({"namePrefix": "Bad_Prefix", "pools": [{"subnet": "10.0.0.0/24"}]}, "spec.namePrefix", "Bad_Prefix"),
    ({"namePrefix": "", "pools": [{"subnet": "10.0.0.0/24"}]}, "spec.namePrefix", '""'),
    ({"namePrefix": "x" * 300, "pools": [{"subnet": "10.0.0.0/24"}]}, "spec.namePrefix", "xxxx"),
    ({"clusterName": 5, "pools": [{"subnet": "10.0.0.0/24"}]}, "spec.clusterName", "5"),
])
def test_invalid_specs_name_the_field_and_the_value(spec, path, value):
    lines = problems_of(**spec)
    assert any(f"{path}:" in line and value in line for line in lines), lines


def test_overlapping_entries_are_rejected():
    lines = problems_of(pools=[{"start": "10.0.0.1", "end": "10.0.0.20"}, {"subnet": "10.0.0.0/28"}])
    assert any("spec.pools[1]" in line and "overlaps" in line for line in lines), lines
    lines = problems_of(pools=[{"start": "10.0.0.1", "end": "10.0.0.20"}, {"start": "10.0.0.20", "end": "10.0.0.30"}])
    assert any("overlaps" in line for line in lines), lines


def test_adjacent_entries_do_not_overlap():
    pool = pool_of(pools=[{"start": "10.0.0.1", "end": "10.0.0.20"}, {"start": "10.0.0.21", "end": "10.0.0.30"}])
    assert pool.capacity() == 30


@pytest.mark.parametrize("spec", [None, [], "x", 5, {"pools": "10.0.0.0/24"}, {"pools": [None]}])
def test_spec_that_is_not_a_pool(spec):
    pool, problems = read_pool(spec)
    assert pool is None and problems
