"""IPAddress names (SPEC §5) and the strict address parsing behind them."""

from __future__ import annotations

import netaddr
import pytest

from metal3_ipam.core.addresses import AddressError, host_range, network_of, parse_cidr, parse_ip, parse_span
from metal3_ipam.core.naming import (ip_of_name, MAX_NAME_LENGTH, MAX_PREFIX_LENGTH, address_name, is_dns1123_subdomain,
                                     name_prefix_problem)


@pytest.mark.parametrize("prefix, ip, expected", [
    ("pool1", "192.168.0.13", "pool1-192-168-0-13"),
    ("pfx", "2001:db8::1", "pfx-2001-db8--1"),
    ("test1-prov", "192.168.0.12", "test1-prov-192-168-0-12"),
    ("v6pool", "2001:db8:0:1::100", "v6pool-2001-db8-0-1--100"),
    # A trailing '-' (an address ending in '::') is dropped.
    ("pfx", "2001:db8::", "pfx-2001-db8"),
    ("pfx", "::", "pfx"),
    ("a.b", "10.0.0.1", "a.b-10-0-0-1"),
])
def test_address_name(prefix, ip, expected):
    assert address_name(prefix, ip) == expected
    assert address_name(prefix, netaddr.IPAddress(ip)) == expected


def test_address_name_uses_the_compact_ipv6_form():
    assert address_name("p", "2001:0db8:0000:0000:0000:0000:0000:0001") == "p-2001-db8--1"


@pytest.mark.parametrize("prefix", ["pool1", "a", "test1-prov", "a.b", "x" * MAX_PREFIX_LENGTH, "0abc"])
def test_valid_name_prefixes(prefix):
    assert name_prefix_problem(prefix) is None
    # The longest address text still gives a valid name.
    assert is_dns1123_subdomain(address_name(prefix, "ffff:ffff:ffff:ffff:ffff:ffff:ffff:fffe"))


@pytest.mark.parametrize("prefix", [
    "", None, 5, ["a"], "Pool1", "pool_1", "-pool", "pool.", "pool..a", ".pool", "po ol",
    "pool/1", "x" * (MAX_PREFIX_LENGTH + 1), "pööl", "a.-b",
])
def test_invalid_name_prefixes_are_rejected(prefix):
    assert name_prefix_problem(prefix)


def test_a_prefix_ending_in_a_hyphen_is_accepted_because_the_name_continues_with_the_ip():
    # "pool-" + "-" + ip is still a valid subdomain.
    assert name_prefix_problem("pool-") is None
    assert is_dns1123_subdomain(address_name("pool-", "10.0.0.1"))


def test_max_name_length():
    assert MAX_NAME_LENGTH == 253
    assert is_dns1123_subdomain("a" * 253)
    assert not is_dns1123_subdomain("a" * 254)


@pytest.mark.parametrize("text", ["10.0.0.1", "::1", "2001:db8::1", "0.0.0.0", "::ffff:1.2.3.4"])
def test_parse_ip_accepts(text):
    assert parse_ip(text) == netaddr.IPAddress(text)


@pytest.mark.parametrize("text", ["", " 10.0.0.1", "10.0.0.1 ", "10", "010.0.0.1", "10.0.0.256", "1.2.3",
                                  "0x1.2.3.4", "2001:db8::g", "10.0.0.1/24", None, 167772161, ["10.0.0.1"]])
def test_parse_ip_rejects(text):
    with pytest.raises(AddressError):
        parse_ip(text)


def test_parse_cidr():
    assert parse_cidr("192.168.1.1/26") == netaddr.IPNetwork("192.168.1.0/26")
    assert parse_cidr("2001:db8::1/64") == netaddr.IPNetwork("2001:db8::/64")
    for bad in ["10.0.0.0", "10.0.0.0/33", "10.0.0.0/", "10.0.0.0/a", "::/129", "10.0.0.0/24/1", "10/8",
                "10.0.0.0/0024", 5]:
        with pytest.raises(AddressError):
            parse_cidr(bad)


def test_parse_span():
    assert parse_span("10.0.0.5") == (4, 0x0A000005, 0x0A000005)
    assert parse_span("10.0.0.5-10.0.0.7") == (4, 0x0A000005, 0x0A000007)
    assert parse_span("10.0.0.0/30") == (4, 0x0A000000, 0x0A000003)
    assert parse_span("2001:db8::1-2001:db8::ff")[0] == 6
    for bad in ["10.0.0.7-10.0.0.5", "10.0.0.1-::1", "x", "10.0.0.1-", 7, None]:
        with pytest.raises(AddressError):
            parse_span(bad)


def test_host_range():
    # IPv4 up to /30: network and broadcast left out.
    assert host_range(0, 255, 4, 24) == (1, 254)
    assert host_range(0, 3, 4, 30) == (1, 2)
    # /31 and /32 use every address.
    assert host_range(0, 1, 4, 31) == (0, 1)
    assert host_range(7, 7, 4, 32) == (7, 7)
    # IPv6 has no broadcast.
    assert host_range(0, 2**64 - 1, 6, 64) == (1, 2**64 - 1)
    assert network_of(0x0A000105, 4, 24) == (0x0A000100, 0x0A0001FF)


@pytest.mark.parametrize("prefix,ip", [("pool1", "10.7.0.1"), ("a-b", "1.2.3.4"), ("pfx", "2001:db8::1"),
                                       ("pfx", "2001:db8::"), ("p", "::1")])
def test_a_name_reads_back_as_its_ip(prefix, ip):
    value = netaddr.IPAddress(ip)
    assert ip_of_name(prefix, address_name(prefix, value), value.version) == value


@pytest.mark.parametrize("prefix,name,version", [("pool1", "pool1-10-07-0-1", 4), ("pool", "pool1-10-7-0-1", 4),
                                                 ("pool1", "zeta", 4), ("pool1", "pool1-10-7-0-1-9", 4),
                                                 ("pool1", "pool1-10-7-0", 4)])
def test_names_that_are_not_prefix_and_ip_read_as_nothing(prefix, name, version):
    assert ip_of_name(prefix, name, version) is None
