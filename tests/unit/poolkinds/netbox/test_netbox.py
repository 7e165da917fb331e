"""NetBox's answers and keys, read without a server (metal3_ipam.poolkinds.netbox.source)."""

from __future__ import annotations

import ipaddress
from types import SimpleNamespace

import pytest
from hypothesis import given
from hypothesis import strategies as st

from metal3_ipam.core.asking import Asking, Op, Refused, backoff
from metal3_ipam.poolkinds.netbox import service
from metal3_ipam.poolkinds.netbox.source import (
    KEY_FIELD,
    Reason,
    check_key_field,
    classify,
    is_key_conflict,
    key_of,
    owned_key,
    parse_parent,
    usable_size,
)

owners = st.text(st.characters(blacklist_characters="/", blacklist_categories=("Cs",)), min_size=1, max_size=20
                 ).filter(lambda s: s == s.strip())
keys = st.text(st.characters(blacklist_categories=("Cs",)), min_size=1, max_size=40).filter(lambda s: s == s.strip())


@given(owners, keys)
def test_a_key_is_read_back_by_its_owner_alone(owner, key):
    value = owned_key(owner, key)
    assert key_of(owner, value) == key
    assert key_of(owner + "x", value) is None
    assert key_of(owner, key) is None or key.startswith(owner + "/")


@given(owners, st.one_of(st.none(), st.integers(), st.text(max_size=30)))
def test_key_of_never_raises_on_what_netbox_holds(owner, value):
    key = key_of(owner, value)
    assert key is None or owned_key(owner, key) == value


@pytest.mark.parametrize("owner", ["", " a", "a/b", None])
def test_an_owner_with_a_separator_or_blank_is_refused(owner):
    with pytest.raises(ValueError, match="owner"):
        owned_key(owner, "k")


def _netbox_usable(network) -> int:
    """NetBox's rule, address by address: IPv4 drops network and broadcast, IPv6 the subnet-router anycast."""
    hosts = list(network)
    if network.prefixlen >= network.max_prefixlen - 1:
        return len(hosts)
    if network.version == 4:
        return len(hosts[1:-1])
    return len(hosts[1:])


@given(st.integers(0, 2**32 - 1), st.integers(22, 32), st.booleans())
def test_usable_size_of_an_ipv4_prefix(addr, length, is_pool):
    net = ipaddress.ip_network((addr, length), strict=False)
    assert usable_size(net, is_pool=is_pool) == (net.num_addresses if is_pool else _netbox_usable(net))


@given(st.integers(0, 2**128 - 1), st.integers(118, 128))
def test_usable_size_of_an_ipv6_prefix(addr, length):
    net = ipaddress.ip_network((addr, length), strict=False)
    assert usable_size(net) == _netbox_usable(net)


def test_parent_specs():
    prefix = parse_parent("192.0.2.0/24")
    assert (prefix.kind, prefix.text, prefix.vrf) == ("prefix", "192.0.2.0/24", None)
    ranged = parse_parent(" 192.0.2.10 - 192.0.2.20 ", "blue")
    assert (ranged.kind, ranged.text, str(ranged)) == ("ip-range", "192.0.2.10-192.0.2.20",
                                                       "192.0.2.10-192.0.2.20 in VRF blue")
    assert parse_parent("2001:db8::/64").end == ipaddress.ip_address("2001:db8::ffff:ffff:ffff:ffff")


@pytest.mark.parametrize("spec, words", [
    ("192.0.2.1/24", "not a prefix"),
    ("192.0.2.20-192.0.2.10", "ends before"),
    ("192.0.2.1-2001:db8::1", "different families"),
    ("a-b", "two addresses"),
    ("", "neither"),
])
def test_a_bad_parent_is_refused_naming_the_value(spec, words):
    with pytest.raises(ValueError, match=words) as info:
        parse_parent(spec)
    assert repr(spec) in str(info.value)


def test_answers_are_classified():
    unique = {"__all__": [f"Custom field '{KEY_FIELD}' must have a unique value."]}
    assert is_key_conflict(unique) and not is_key_conflict({"address": ["Duplicate"]})
    cases = [
        (401, {"detail": "x"}, Reason.TOKEN_REFUSED),
        (403, {"detail": "Invalid v2 token"}, Reason.TOKEN_REFUSED),
        (404, {"detail": "No Prefix matches the given query."}, Reason.NOT_FOUND),
        (409, {"detail": "Insufficient resources are available to satisfy the request"}, Reason.FULL),
        (400, unique, Reason.KEY_CONFLICT),
        (400, {"status": ["bad"]}, Reason.INVALID),
        (500, "<html>", Reason.SERVER_ERROR),
        (503, None, Reason.SERVER_ERROR),
    ]
    for status, body, reason in cases:
        refusal = classify(status, body, "allocating for key 'k'")
        assert refusal.reason is reason and refusal.status == status
        assert refusal.message.startswith("allocating for key 'k'")
    assert "Invalid v2 token" in classify(403, {"detail": "Invalid v2 token"}, "x").message


def test_key_field_definition():
    good = {"type": {"value": "text"}, "object_types": ["ipam.ipaddress"], "unique": True,
            "filter_logic": {"value": "exact"}}
    assert check_key_field(good) == []
    assert "does not exist" in check_key_field(None)[0]
    assert any("not unique" in p for p in check_key_field({**good, "unique": False}))
    assert any("type 'integer'" in p for p in check_key_field({**good, "type": {"value": "integer"}}))
    assert any("ipam.ipaddress" in p for p in check_key_field({**good, "object_types": ["dcim.device"]}))
    assert any("disabled" in p for p in check_key_field({**good, "filter_logic": {"value": "disabled"}}))


@given(st.integers(-3, 200))
def test_backoff_doubles_up_to_its_cap(attempt):
    delay = backoff(attempt, base=1.0, cap=300.0)
    assert 0 <= delay <= 300
    assert backoff(attempt + 1) >= delay
    if 1 <= attempt <= 8:
        assert delay == 2 ** (attempt - 1)


def test_a_python_too_old_for_netbox_is_refused_by_name(tmp_path, monkeypatch):
    from metal3_ipam.testing import netbox as harness

    fake = tmp_path / "python"
    fake.write_text("#!/bin/sh\necho 3 11\n")
    fake.chmod(0o755)
    monkeypatch.setenv("METAL3_IPAM_NETBOX_PYTHON", str(fake))
    with pytest.raises(harness.NetBoxUnavailable, match="METAL3_IPAM_NETBOX_PYTHON=.*python.*3, 11"):
        harness.find_python()
    fake.write_text("#!/bin/sh\necho 3 12\n")
    assert harness.find_python() == fake


def test_the_netbox_cache_is_keyed_by_version(monkeypatch, tmp_path):
    from metal3_ipam.testing import netbox as harness

    monkeypatch.delenv("METAL3_IPAM_NETBOX_CACHE", raising=False)
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))
    assert harness.cache_dir("4.7.3") == tmp_path / "metal3-ipam" / "netbox-4.7.3"
    monkeypatch.setenv("METAL3_IPAM_NETBOX_CACHE", str(tmp_path / "elsewhere"))
    assert harness.cache_dir() == tmp_path / "elsewhere"


def test_an_ask_netbox_does_not_answer_in_time_leaves_its_claim_with_reason_netbox_timeout():
    parts = SimpleNamespace(api=None, flags={}, inventory=None, writer=None, wake=lambda pool, key: None,
                            may_act=lambda: True)
    asking = service.service(parts).answers
    assert isinstance(asking, Asking)
    asking.want("k", "pool", "server", now=0.0)
    [ask] = asking.due(now=0.0)
    assert ask.op is Op.ALLOCATE
    asking.due(now=ask.deadline)  # the deadline passes unanswered
    refused = asking.state("k").result
    assert isinstance(refused, Refused) and refused.reason == Reason.TIMEOUT.value == "NetBoxTimeout"
