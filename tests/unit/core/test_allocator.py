"""Choosing addresses (SPEC §4) with the Allocator."""

from __future__ import annotations

import random
from collections import Counter

import pytest

from metal3_ipam.core.addresses import parse_ip
from metal3_ipam.core.allocator import (ALLOCATION_FAILED, POOL_EXHAUSTED, AllocationError, Allocator)
from metal3_ipam.core.pool import read_pool


def ip(text: str) -> int:
    return int(parse_ip(text))


def allocator(seed: int = 1, **spec) -> Allocator:
    spec.setdefault("namePrefix", "p")
    pool, problems = read_pool(spec)
    assert pool is not None, [str(p) for p in problems]
    return Allocator(pool, random.Random(seed))


def grab(alloc: Allocator, n: int, prefix: str = "c") -> list[str]:
    return [str(alloc.allocate(f"{prefix}{i}").ip) for i in range(n)]


def test_sequential_gives_the_lowest_free_address():
    alloc = allocator(pools=[{"start": "10.0.0.10", "end": "10.0.0.20"}])
    assert grab(alloc, 3) == ["10.0.0.10", "10.0.0.11", "10.0.0.12"]


def test_sequential_skips_gateway_excluded_and_preallocated():
    alloc = allocator(gateway="10.0.0.1", excludedAddresses=["10.0.0.3", "10.0.0.5-10.0.0.6"],
                      preAllocations={"other": "10.0.0.2"},
                      pools=[{"subnet": "10.0.0.0/29"}])
    # Hosts .1-.6: .1 gateway, .2 held for "other", .3/.5/.6 excluded -> only .4 is free.
    assert grab(alloc, 1) == ["10.0.0.4"]
    with pytest.raises(AllocationError) as err:
        alloc.allocate("next")
    assert err.value.reason == POOL_EXHAUSTED
    # The held address still goes to its claim.
    assert str(alloc.allocate("other").ip) == "10.0.0.2"


def test_entries_are_used_in_declaration_order():
    alloc = allocator(pools=[{"start": "10.0.5.1", "end": "10.0.5.2"},
                             {"start": "10.0.0.1", "end": "10.0.0.2"},
                             {"start": "10.0.9.1", "end": "10.0.9.1"}])
    assert grab(alloc, 5) == ["10.0.5.1", "10.0.5.2", "10.0.0.1", "10.0.0.2", "10.0.9.1"]


def test_random_stays_in_the_first_entry_with_a_free_address():
    alloc = allocator(allocationStrategy="random",
                      pools=[{"start": "10.0.0.1", "end": "10.0.0.50"}, {"start": "10.0.1.1", "end": "10.0.1.50"}])
    first = grab(alloc, 50)
    assert sorted(first, key=ip) == [f"10.0.0.{i}" for i in range(1, 51)]
    assert first != sorted(first, key=ip)  # not sequential
    assert grab(alloc, 1, prefix="d")[0].startswith("10.0.1.")


def test_random_is_roughly_uniform():
    counts: Counter[str] = Counter()
    for seed in range(2000):
        alloc = allocator(seed=seed, allocationStrategy="random", excludedAddresses=["10.0.0.2"],
                          pools=[{"start": "10.0.0.1", "end": "10.0.0.4"}])
        counts[str(alloc.allocate("c").ip)] += 1
    assert set(counts) == {"10.0.0.1", "10.0.0.3", "10.0.0.4"}
    assert all(550 < n < 790 for n in counts.values()), counts


def test_random_in_a_huge_ipv6_pool():
    alloc = allocator(allocationStrategy="random", pools=[{"subnet": "2001:db8::/64"}])
    ips = grab(alloc, 200)
    assert len(set(ips)) == 200
    assert all(ip("2001:db8::1") <= ip(x) <= ip("2001:db8::ffff:ffff:ffff:ffff") for x in ips)


def test_preallocated_claim_gets_its_ip():
    alloc = allocator(pools=[{"start": "10.0.0.1", "end": "10.0.0.10"}], preAllocations={"claim1": "10.0.0.5"})
    grant = alloc.allocate("claim1")
    assert str(grant.ip) == "10.0.0.5"
    assert grant.entry.index == 0


def test_preallocated_claim_with_matching_annotation():
    alloc = allocator(pools=[{"start": "10.0.0.1", "end": "10.0.0.10"}], preAllocations={"claim1": "10.0.0.5"})
    assert str(alloc.allocate("claim1", requested="10.0.0.5").ip) == "10.0.0.5"


def test_preallocated_claim_with_a_different_annotation_is_a_conflict():
    alloc = allocator(pools=[{"start": "10.0.0.1", "end": "10.0.0.10"}], preAllocations={"claim1": "10.0.0.5"})
    with pytest.raises(AllocationError) as err:
        alloc.allocate("claim1", requested="10.0.0.6")
    assert err.value.reason == ALLOCATION_FAILED
    assert "conflict" in err.value.message and "10.0.0.5" in err.value.message and "10.0.0.6" in err.value.message
    # Nothing was taken.
    assert alloc.free_count == 9


def test_annotation_gets_exactly_that_ip():
    alloc = allocator(pools=[{"start": "10.0.0.1", "end": "10.0.0.10"}])
    assert str(alloc.allocate("c", requested="10.0.0.7").ip) == "10.0.0.7"
    # The sequential ones go around it.
    assert grab(alloc, 7, prefix="s") == [f"10.0.0.{i}" for i in (1, 2, 3, 4, 5, 6, 8)]


@pytest.mark.parametrize("requested, words", [
    ("10.0.1.1", "not inside"),
    ("10.0.0.1", "gateway or excluded"),      # the gateway
    ("10.0.0.9", "gateway or excluded"),      # excluded
    ("10.0.0.5", "preallocated to claim other"),
    ("10.0.0.3", "already in use"),
    ("not-an-ip", "not an IP address"),
    ("2001:db8::1", "IPv6"),
])
def test_annotation_errors(requested, words):
    alloc = allocator(gateway="10.0.0.1", excludedAddresses=["10.0.0.9"], preAllocations={"other": "10.0.0.5"},
                      pools=[{"start": "10.0.0.1", "end": "10.0.0.10"}])
    alloc.allocate("first", requested="10.0.0.3")
    free = alloc.free_count
    with pytest.raises(AllocationError) as err:
        alloc.allocate("c", requested=requested)
    assert err.value.reason == ALLOCATION_FAILED
    assert words in err.value.message
    assert alloc.free_count == free


def test_preallocated_ip_in_use_is_an_error():
    alloc = allocator(pools=[{"start": "10.0.0.1", "end": "10.0.0.10"}], preAllocations={"claim1": "10.0.0.5"})
    alloc.hold(ip("10.0.0.5"))
    with pytest.raises(AllocationError) as err:
        alloc.allocate("claim1")
    assert "already in use" in err.value.message


def test_exhaustion():
    alloc = allocator(pools=[{"subnet": "10.0.0.0/30"}])
    assert grab(alloc, 2) == ["10.0.0.1", "10.0.0.2"]
    with pytest.raises(AllocationError) as err:
        alloc.allocate("c3")
    assert err.value.reason == POOL_EXHAUSTED == "PoolExhausted"
    assert err.value.message


def test_release_then_allocate_gives_it_back():
    alloc = allocator(pools=[{"start": "10.0.0.1", "end": "10.0.0.10"}])
    grab(alloc, 5)
    alloc.release(ip("10.0.0.3"))
    assert grab(alloc, 1, prefix="again")[0] == "10.0.0.3"


def test_release_keeps_reserved_and_held_addresses_out():
    alloc = allocator(gateway="10.0.0.1", excludedAddresses=["10.0.0.2"], preAllocations={"c": "10.0.0.3"},
                      pools=[{"start": "10.0.0.1", "end": "10.0.0.5"}])
    assert alloc.free_count == 2
    for text in ("10.0.0.1", "10.0.0.2", "10.0.0.3", "10.1.0.0"):
        alloc.release(ip(text))
    assert alloc.free_count == 2
    assert grab(alloc, 2) == ["10.0.0.4", "10.0.0.5"]


def test_take_marks_addresses_in_use():
    alloc = allocator(pools=[{"start": "10.0.0.1", "end": "10.0.0.5"}])
    alloc.hold(ip("10.0.0.1"))
    alloc.hold(ip("10.0.0.2"))
    alloc.hold(ip("192.168.0.1"))  # outside: harmless
    assert alloc.free_count == 3
    assert grab(alloc, 1) == ["10.0.0.3"]


def test_name_taken_addresses_are_skipped_not_fought_over():
    alloc = allocator(pools=[{"start": "10.0.0.1", "end": "10.0.0.5"}])
    elsewhere = {ip("10.0.0.1"), ip("10.0.0.2"), ip("10.0.0.4")}
    assert str(alloc.allocate("c", name_taken=lambda i: i in elsewhere).ip) == "10.0.0.3"
    assert str(alloc.allocate("d", name_taken=lambda i: i in elsewhere).ip) == "10.0.0.5"
    with pytest.raises(AllocationError) as err:
        alloc.allocate("e", name_taken=lambda i: i in elsewhere)
    assert err.value.reason == POOL_EXHAUSTED
    with pytest.raises(AllocationError) as err:
        alloc.allocate("f", requested="10.0.0.1", name_taken=lambda i: i in elsewhere)
    assert "already in use" in err.value.message


def test_grant_carries_prefix_gateway_and_dns_of_its_entry_or_the_defaults():
    alloc = allocator(prefix=24, gateway="10.0.0.1", dnsServers=["8.8.8.8"],
                      pools=[{"start": "10.0.0.10", "end": "10.0.0.10", "prefix": 25, "gateway": "10.0.0.2",
                              "dnsServers": ["1.1.1.1"]},
                             {"start": "10.0.0.20", "end": "10.0.0.20"}])
    a, b = alloc.allocate("a"), alloc.allocate("b")
    assert (str(a.ip), a.prefix, a.gateway, a.dns_servers) == ("10.0.0.10", 25, "10.0.0.2", ("1.1.1.1",))
    assert (str(b.ip), b.prefix, b.gateway, b.dns_servers) == ("10.0.0.20", 24, "10.0.0.1", ("8.8.8.8",))


def test_ipv6_pool_with_exclusions():
    alloc = allocator(gateway="2001:db8:0:1::1", excludedAddresses=["2001:db8:0:1::2-2001:db8:0:1::ff"],
                      pools=[{"subnet": "2001:db8:0:1::/64"}], prefix=64)
    assert grab(alloc, 2) == ["2001:db8:0:1::100", "2001:db8:0:1::101"]
    assert alloc.free_count == 2**64 - 1 - 255 - 2


def test_filling_a_pool_gives_every_address_once():
    alloc = allocator(gateway="10.0.0.1", excludedAddresses=["10.0.0.100-10.0.0.120"],
                      allocationStrategy="random", pools=[{"subnet": "10.0.0.0/24"}])
    ips = []
    while True:
        try:
            ips.append(int(alloc.allocate(f"c{len(ips)}").ip))
        except AllocationError as err:
            assert err.reason == POOL_EXHAUSTED
            break
    expected = set(range(ip("10.0.0.2"), ip("10.0.0.254") + 1)) - set(range(ip("10.0.0.100"), ip("10.0.0.120") + 1))
    assert len(ips) == len(set(ips)) and set(ips) == expected


def test_a_kept_ip_goes_to_its_claim_alone_and_comes_back_free_once_no_longer_kept():
    pool, _ = read_pool({"namePrefix": "p", "pools": [{"start": "10.0.0.1", "end": "10.0.0.3"}]})
    alloc = Allocator(pool)
    one = int(parse_ip("10.0.0.1"))
    alloc.hold(one)
    alloc.keep(one, ("IPClaim", "zeta"))
    alloc.release(one)  # its address went: still kept
    assert alloc.free_count == 2
    assert str(alloc.allocate("new").ip) == "10.0.0.2"
    with pytest.raises(AllocationError, match="10.0.0.1 is kept for IPClaim zeta"):
        alloc.allocate("asks", "10.0.0.1", kept_as=("IPClaim", "asks"))
    assert str(alloc.reclaim("zeta", one, lambda ip: False, kept_as=("IPClaim", "zeta")).ip) == "10.0.0.1"
    alloc.release(one)
    alloc.unkeep(one)
    assert alloc.free_count == 2 and str(alloc.allocate("later").ip) == "10.0.0.1"
