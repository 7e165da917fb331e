"""Reading a NetBoxIPPool (metal3_ipam/poolkinds/netbox/pool.py): the pool, or problems naming field and value."""

from __future__ import annotations

import ipaddress

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from metal3_ipam.poolkinds.netbox.pool import (
    KIND,
    HandedOut,
    SecretKeyRef,
    Server,
    handed_out,
    read_pool,
)

CA = "-----BEGIN CERTIFICATE-----\nMIIBszCCAVmgAwIBAgIU\n-----END CERTIFICATE-----\n"


def body(spec=None, **fields) -> dict:
    spec = spec if spec is not None else {
        "server": {"url": "https://netbox.example.org/", "tokenSecretRef": {"name": "nb-token"}},
        "source": {"prefix": "192.0.2.0/24"},
    }
    return {"apiVersion": "netbox.metal3-ipam.io/v1alpha1", "kind": KIND,
            "metadata": {"name": "pool", "namespace": "ns", "generation": 3}, "spec": {**spec, **fields}}


def problems_of(obj) -> list[str]:
    pool, problems = read_pool(obj)
    assert (pool is None) == bool(problems)
    return [str(p) for p in problems]


def test_a_pool_reads_with_defaults():
    pool, problems = read_pool(body(gateway="192.0.2.1", dnsServers=["192.0.2.53"], prefix=24))
    assert problems == []
    assert pool.server == Server("https://netbox.example.org")
    assert pool.token == SecretKeyRef("nb-token", "token")
    assert (pool.parent.kind, str(pool.parent.network), pool.parent.vrf) == ("prefix", "192.0.2.0/24", None)
    assert (pool.prefix, str(pool.gateway), [str(d) for d in pool.dns_servers]) == (24, "192.0.2.1", ["192.0.2.53"])
    assert (pool.namespace, pool.name, pool.generation, pool.family) == ("ns", "pool", 3, 4)
    assert str(pool.id) == "NetBoxIPPool/ns/pool"


def test_an_ip_range_in_a_vrf_over_https_with_a_ca():
    spec = {"server": {"url": "https://nb:8443/netbox", "caBundle": CA,
                       "tokenSecretRef": {"name": "s", "key": "api.token"}},
            "source": {"ipRange": "2001:db8::10-2001:db8::20", "vrf": "65000:1"}}
    pool, problems = read_pool(body(spec, prefix=64))
    assert problems == []
    assert pool.server == Server("https://nb:8443/netbox", CA) and pool.token == SecretKeyRef("s", "api.token")
    assert (pool.parent.kind, pool.parent.text, pool.parent.vrf) == ("ip-range", "2001:db8::10-2001:db8::20", "65000:1")


SERVER = {"url": "https://netbox.example.org", "tokenSecretRef": {"name": "nb-token"}}


@pytest.mark.parametrize("spec,field,value", [
    ({"source": {"prefix": "192.0.2.0/24"}}, "spec.server.url", "None"),
    ({"server": {**SERVER, "url": "netbox.example.org"}, "source": {"prefix": "192.0.2.0/24"}},
     "spec.server.url", '"netbox.example.org"'),
    ({"server": {**SERVER, "url": "https://admin:pw@netbox"}, "source": {"prefix": "192.0.2.0/24"}},
     "spec.server.url", "user or password"),
    ({"server": {**SERVER, "url": "https://netbox:99999"}, "source": {"prefix": "192.0.2.0/24"}},
     "spec.server.url", '"https://netbox:99999"'),
    ({"server": {**SERVER, "url": "http://netbox", "caBundle": CA}, "source": {"prefix": "192.0.2.0/24"}},
     "spec.server.caBundle", "not https://"),
    ({"server": {**SERVER, "caBundle": "-----BEGIN CERTIFICATE-----\n%%%\n-----END CERTIFICATE-----"},
      "source": {"prefix": "192.0.2.0/24"}}, "spec.server.caBundle", "base64"),
    ({"server": {"url": "https://nb", "tokenSecretRef": {}}, "source": {"prefix": "192.0.2.0/24"}},
     "spec.server.tokenSecretRef.name", "None"),
    ({"server": {"url": "https://nb", "tokenSecretRef": {"name": "s", "key": ""}},
      "source": {"prefix": "192.0.2.0/24"}}, "spec.server.tokenSecretRef.key", '""'),
    ({"server": SERVER, "source": {}}, "spec.source", "exactly one"),
    ({"server": SERVER, "source": {"prefix": "192.0.2.0/24", "ipRange": "192.0.2.1-192.0.2.2"}},
     "spec.source", "exactly one"),
    ({"server": SERVER, "source": {"prefix": "192.0.2.1/24"}}, "spec.source.prefix", '"192.0.2.1/24"'),
    ({"server": SERVER, "source": {"prefix": "192.0.2.0"}}, "spec.source.prefix", '"192.0.2.0"'),
    ({"server": SERVER, "source": {"ipRange": "192.0.2.9-192.0.2.1"}}, "spec.source.ipRange", "ends before"),
    ({"server": SERVER, "source": {"ipRange": "192.0.2.9"}}, "spec.source.ipRange", '"192.0.2.9"'),
    ({"server": SERVER, "source": {"ipRange": "::ffff:192.0.2.1-::ffff:192.0.2.9"}}, "spec.source.ipRange",
     "IPv4-mapped"),
    ({"server": SERVER, "source": {"prefix": "192.0.2.0/24", "vrf": " blue"}}, "spec.source.vrf", '" blue"'),
    ({"server": SERVER, "source": {"prefix": 7}}, "spec.source.prefix", "must be a string"),
])
def test_problems_name_field_and_value(spec, field, value):
    found = problems_of(body(spec))
    assert any(f"NetBoxIPPool/ns/pool: {field}: " in p and value in p for p in found), found


@pytest.mark.parametrize("fields,field,value", [
    ({"prefix": 33}, "spec.prefix", "33"),
    ({"prefix": True}, "spec.prefix", "True"),
    ({"gateway": "192.0.2.300"}, "spec.gateway", "192.0.2.300"),
    ({"gateway": "2001:db8::1"}, "spec.gateway", "IPv6 but the source"),
    ({"gateway": "198.51.100.1"}, "spec.gateway", "outside spec.source.prefix"),
    ({"dnsServers": "192.0.2.53"}, "spec.dnsServers", "list"),
    ({"dnsServers": ["192.0.2.53", "x"]}, "spec.dnsServers[1]", '"x"'),
])
def test_problems_of_what_is_handed_out(fields, field, value):
    found = problems_of(body(**fields))
    assert any(f": {field}: " in p and value in p for p in found), found


def test_a_range_must_fit_the_prefix_handed_out():
    spec = {"server": SERVER, "source": {"ipRange": "192.0.2.250-192.0.3.5"}}
    assert any("spec.prefix: a /24 network does not hold" in p for p in problems_of(body(spec, prefix=24)))
    assert problems_of(body(spec, prefix=22)) == []


def test_every_problem_is_reported_at_once():
    found = problems_of(body({"server": {"url": "x"}, "source": {}}, gateway="gw"))
    fields = {p.split(": ")[1] for p in found}
    assert {"spec.server.url", "spec.server.tokenSecretRef.name", "spec.source", "spec.gateway"} <= fields


json_values = st.recursive(
    st.none() | st.booleans() | st.integers() | st.text(max_size=20),
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=10), inner, max_size=3),
    max_leaves=10)
FIELDS = ["server", "source", "prefix", "gateway", "dnsServers"]


@settings(deadline=None, max_examples=200, suppress_health_check=[HealthCheck.too_slow])
@given(st.dictionaries(st.sampled_from(FIELDS), json_values), st.sampled_from([None, "x", 5, []]))
def test_any_input_reads_or_names_its_problems_never_raises(spec, metadata):
    obj = {"kind": KIND, "spec": spec}
    if metadata is not None:
        obj["metadata"] = metadata if metadata != [] else {"name": []}
    pool, problems = read_pool(obj)
    assert (pool is None) == bool(problems)
    assert all(p.field.startswith("spec") and p.message for p in problems)


@settings(deadline=None)
@given(st.ip_addresses(v=4), st.integers(16, 30), st.booleans())
def test_valid_prefix_pools_read_back_what_they_say(address, length, with_gateway):
    network = ipaddress.ip_network(f"{address}/{length}", strict=False)
    fields = {"gateway": str(network[1])} if with_gateway else {}
    pool, problems = read_pool(body({"server": SERVER, "source": {"prefix": str(network)}}, **fields))
    assert problems == []
    assert pool.parent.network == network
    assert pool.gateway == (network[1] if with_gateway else None)


def test_handed_out_takes_netboxs_mask_unless_it_is_a_host_mask():
    pool, _ = read_pool(body({"server": SERVER, "source": {"ipRange": "192.0.2.10-192.0.2.20"}},
                             prefix=24, gateway="192.0.2.1", dnsServers=["192.0.2.53"]))
    gw, dns = ipaddress.ip_address("192.0.2.1"), (ipaddress.ip_address("192.0.2.53"),)
    assert handed_out(pool, "192.0.2.10/25") == HandedOut(ipaddress.ip_address("192.0.2.10"), 25, gw, dns)
    assert handed_out(pool, "192.0.2.11/32") == HandedOut(ipaddress.ip_address("192.0.2.11"), 24, gw, dns)
    bare, _ = read_pool(body())
    assert handed_out(bare, "192.0.2.12/32") == HandedOut(ipaddress.ip_address("192.0.2.12"), 32, None, ())


def test_condition_reasons_of_refusals():
    from metal3_ipam.poolkinds.netbox.source import Reason
    from metal3_ipam.poolkinds.netbox.pool import condition_reason

    prefix, _ = read_pool(body())
    ranged, _ = read_pool(body({"server": SERVER, "source": {"ipRange": "192.0.2.1-192.0.2.9"}}))
    assert condition_reason(Reason.NOT_FOUND, prefix.parent) == "PrefixNotFound"
    assert condition_reason("NetBoxNotFound", ranged.parent) == "IPRangeNotFound"
    assert condition_reason(Reason.TOKEN_REFUSED) == "TokenRefused"
    assert condition_reason(Reason.UNREACHABLE) == "NetBoxUnreachable"
    assert condition_reason(Reason.FULL) == "PoolExhausted"
    assert condition_reason("TokenMissing") == "TokenMissing"  # already a condition reason
    assert {condition_reason(r) for r in Reason} >= {"TokenRefused", "NetBoxUnreachable", "PrefixNotFound"}


def test_pool_status_ready_counts_and_transition_time():
    from metal3_ipam.poolkinds.netbox.pool import Survey, pool_status

    pool, _ = read_pool(body())
    ready = pool_status(pool, Survey(size=254, used=4), now="2026-01-02T00:00:00Z")
    [condition] = ready["conditions"]
    assert (condition["status"], condition["reason"], condition["observedGeneration"]) == ("True", "Serving", 3)
    assert "254 addresses, 4 held" in condition["message"] and "192.0.2.0/24" in condition["message"]
    assert (ready["size"], ready["used"], ready["free"], ready["observedGeneration"]) == ("254", "4", "250", 3)
    down = pool_status(pool, Survey(reason="NetBoxUnreachable", message="NetBox at x is unreachable"),
                       now="2026-01-03T00:00:00Z", previous=ready)
    [condition] = down["conditions"]
    assert (condition["status"], condition["reason"], condition["message"]) == (
        "False", "NetBoxUnreachable", "NetBox at x is unreachable")
    assert condition["lastTransitionTime"] == "2026-01-03T00:00:00Z"
    assert down["free"] == "250" and down["lastChecked"] == "2026-01-03T00:00:00Z"
    still = pool_status(pool, Survey(reason="NetBoxUnreachable", message="again"), now="2026-01-04T00:00:00Z",
                        previous=down)
    assert still["conditions"][0]["lastTransitionTime"] == "2026-01-03T00:00:00Z"
    over = pool_status(pool, Survey(size=2, used=5), now="2026-01-05T00:00:00Z")
    assert over["free"] == "0"


def test_claim_keys():
    from metal3_ipam.core.poolkind import draw_key
    from metal3_ipam.poolkinds.netbox.pool import KEY_ANNOTATION, claim_key

    class Drawn:  # the pass's random source, drawing these 128 bits
        @staticmethod
        def getrandbits(bits):
            assert bits == 128
            return 0x12345678123456781234567812345678

    key = draw_key(Drawn())
    assert key == "12345678123446789234567812345678"  # a version-4 uuid of those bits, as 32 hex digits
    assert claim_key({"metadata": {"annotations": {KEY_ANNOTATION: key}}}) == (key, None)
    assert claim_key({"metadata": {"name": "c"}}) == (None, None)
    assert claim_key({}) == (None, None)
    for bad in ("", "A" * 3, "x/y", "a" * 65, 7, "-a"):
        found, problem = claim_key({"metadata": {"annotations": {KEY_ANNOTATION: bad}}})
        assert found is None and problem.field == f"metadata.annotations[{KEY_ANNOTATION}]" and problem.value == bad
