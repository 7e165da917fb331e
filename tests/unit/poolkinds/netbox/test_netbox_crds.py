"""The NetBoxIPPool CRD (metal3_ipam/crds.py), offline: names, labels, columns, fields, and its CEL rules
mirrored in Python (the validator of test_crds) so that the schema and the core's reading agree.

The API server serves it in tests/e2e/poolkinds/netbox/test_netbox_pool_crd.py.
"""

from __future__ import annotations

import re
from typing import Any, Callable
from urllib.parse import urlsplit

import pytest
import yaml

from metal3_ipam import crds
from metal3_ipam.poolkinds.netbox import schema as netbox_schema
from metal3_ipam.poolkinds.netbox.pool import read_pool
from crd_validator import CEL_MIRRORS, cel_ip, net, same_family, is_cidr, is_ip, validate_object, walk
from paths import REPO

KIND = "NetBoxIPPool"


def node(path: str) -> dict[str, Any]:
    found = crds.openapi_schema(KIND)
    for part in path.split("."):
        found = found["items"] if part == "[]" else found["properties"][part]
    return found


def test_names_scope_version_and_labels():
    crd = crds.crd_for_kind(KIND)
    assert crd["metadata"]["name"] == "netboxippools.netbox.metal3-ipam.io"
    spec = crd["spec"]
    assert (spec["group"], spec["scope"]) == ("netbox.metal3-ipam.io", "Namespaced")
    assert spec["names"] == {"kind": KIND, "listKind": f"{KIND}List", "plural": "netboxippools",
                             "singular": "netboxippool", "shortNames": ["nbipp"], "categories": ["cluster-api"]}
    [version] = spec["versions"]
    assert (version["name"], version["served"], version["storage"]) == ("v1alpha1", True, True)
    assert version["subresources"] == {"status": {}}
    labels = crd["metadata"]["labels"]
    assert labels["cluster.x-k8s.io/provider"] == "ipam-metal3" and labels["clusterctl.cluster.x-k8s.io"] == ""
    assert labels["clusterctl.cluster.x-k8s.io/move-hierarchy"] == ""  # a pool is a root of clusterctl move
    assert crd in crds.crd_definitions()


def test_printer_columns_name_fields_that_exist():
    [version] = crds.crd_for_kind(KIND)["spec"]["versions"]
    columns = [(c["name"], c["type"], c["jsonPath"]) for c in version["additionalPrinterColumns"]]
    assert columns == [
        ("Prefix", "string", ".spec.source.prefix"),
        ("Range", "string", ".spec.source.ipRange"),
        ("Ready", "string", '.status.conditions[?(@.type=="Ready")].status'),
        ("Reason", "string", '.status.conditions[?(@.type=="Ready")].reason'),
        ("Free", "string", ".status.free"),
        ("Age", "date", ".metadata.creationTimestamp"),
    ]
    for _, column_type, path in columns[:-1]:
        found = crds.openapi_schema(KIND)
        for part in re.split(r"\.(?![^\[]*\])", path.strip(".")):  # no split inside [?(@.type=="Ready")]
            name, _, condition = part.partition("[?")
            found = found["properties"][name]
            if condition:
                found = found["items"]
        assert found["type"] == column_type, path


def test_fields_bounds_and_no_credential_field():
    assert set(node("spec")["properties"]) == {"server", "source", "prefix", "gateway", "dnsServers"}
    assert node("spec")["required"] == ["server", "source"]
    assert set(node("spec.server")["properties"]) == {"url", "caBundle", "tokenSecretRef"}
    assert node("spec.server.tokenSecretRef.key")["default"] == "token"
    assert set(node("spec.source")["properties"]) == {"prefix", "ipRange", "vrf"}
    assert set(node("status")["properties"]) == {"conditions", "observedGeneration", "size", "used", "free",
                                                 "lastChecked"}
    for path, found in walk(crds.openapi_schema(KIND)):
        assert not re.search(r"token$|password|username", path, re.I) or path.endswith("tokenSecretRef"), path
        if found.get("type") == "string" and path not in (".apiVersion", ".kind"):
            assert isinstance(found.get("maxLength"), int), path
        if found.get("type") == "array":
            assert isinstance(found.get("maxItems"), int), path


def _url_ok(value: str) -> bool:
    """isURL (Go's url.ParseRequestURI) with an http(s) scheme and a host, no query or fragment."""
    try:
        parts = urlsplit(value)
    except ValueError:
        return False
    return parts.scheme in ("http", "https") and bool(parts.hostname) and "?" not in value and "#" not in value


def _masked(value: str) -> bool:
    return is_cidr(value) and net(value).network_address == cel_ip(value.split("/")[0])


def _range_ok(value: str) -> bool:
    parts = value.split("-")
    return len(parts) == 2 and is_ip(parts[0]) and is_ip(parts[1]) and same_family(parts[0], parts[1])


def _gateway_in_prefix(spec: dict[str, Any]) -> bool:
    gateway, prefix = spec.get("gateway"), (spec.get("source") or {}).get("prefix")
    if gateway is None or prefix is None or not is_ip(gateway) or not is_cidr(prefix):
        return True
    return cel_ip(gateway).version == net(prefix).version and cel_ip(gateway) in net(prefix)


NETBOX_MIRRORS: dict[str, Callable[[Any, Any], bool]] = {
    netbox_schema.NETBOX_URL_RULE: lambda s, o: _url_ok(s),
    netbox_schema.NETBOX_URL_USERINFO_RULE: lambda s, o: not re.search(r"^[A-Za-z][-A-Za-z0-9+.]*://[^/]*@", s),
    netbox_schema.NETBOX_CA_BUNDLE_RULE: lambda s, o: "-----BEGIN CERTIFICATE-----" in s and "-----END CERTIFICATE-----" in s,
    netbox_schema.NETBOX_PREFIX_RULE: lambda s, o: _masked(s),
    netbox_schema.NETBOX_RANGE_RULE: lambda s, o: _range_ok(s),
    netbox_schema.NETBOX_SOURCE_RULE: lambda s, o: ("prefix" in s) != ("ipRange" in s),
    netbox_schema.NETBOX_GATEWAY_RULE: lambda s, o: _gateway_in_prefix(s),
}


def test_every_rule_has_a_message_and_a_python_mirror():
    for path, found in walk(crds.openapi_schema(KIND)):
        for rule in found.get("x-kubernetes-validations", []):
            assert rule.get("message"), path
            assert rule["rule"] in NETBOX_MIRRORS or rule["rule"] in CEL_MIRRORS, f"no Python mirror for {KIND}{path}: {rule['rule']}"


# The validator of test_crds looks rules up in its CEL_MIRRORS: NetBoxIPPool's are added to it.
CEL_MIRRORS.update(NETBOX_MIRRORS)


# --- NetBoxIPPool: the schema's mirror and the core's reading agree --------------------------

def netbox_pool(**spec: Any) -> dict[str, Any]:
    body: dict[str, Any] = {
        "apiVersion": "netbox.metal3-ipam.io/v1alpha1",
        "kind": "NetBoxIPPool",
        "metadata": {"name": "nb", "namespace": "default"},
        "spec": {"server": {"url": "https://netbox.example.org", "tokenSecretRef": {"name": "token"}},
                 "source": {"prefix": "192.0.2.0/24"}},
    }
    body["spec"].update(spec)
    return body


NETBOX_SERVER = {"url": "https://netbox.example.org", "tokenSecretRef": {"name": "token"}}


@pytest.mark.parametrize("spec,field", [
    ({"server": {**NETBOX_SERVER, "url": "ftp://netbox.example.org"}}, ".spec.server.url"),
    ({"server": {**NETBOX_SERVER, "url": "https://u:p@netbox.example.org"}}, ".spec.server.url"),
    ({"server": {**NETBOX_SERVER, "url": "https://netbox.example.org/?token=x"}}, ".spec.server.url"),
    ({"server": {**NETBOX_SERVER, "caBundle": "x"}}, ".spec.server.caBundle"),
    ({"server": {**NETBOX_SERVER, "tokenSecretRef": {"name": "A_B"}}}, ".spec.server.tokenSecretRef.name"),
    ({"source": {}}, ".spec.source"),
    ({"source": {"prefix": "192.0.2.0/24", "ipRange": "192.0.2.1-192.0.2.2"}}, ".spec.source"),
    ({"source": {"prefix": "192.0.2.1/24"}}, ".spec.source.prefix"),
    ({"source": {"ipRange": "192.0.2.1-2001:db8::1"}}, ".spec.source.ipRange"),
    ({"gateway": "198.51.100.1"}, ".spec"),
    ({"gateway": "2001:db8::1"}, ".spec"),
])
def test_bad_netbox_pools_refused_by_schema_and_core(spec, field):
    body = netbox_pool(**spec)
    errors = validate_object(body)
    assert errors and all(e.startswith(field) for e in errors), errors
    pool, problems = read_pool(body)
    assert pool is None and problems


@pytest.mark.parametrize("spec", [
    {},
    {"gateway": "192.0.2.1", "dnsServers": ["192.0.2.53", "2001:db8::53"], "prefix": 24},
    {"source": {"ipRange": "192.0.2.10-192.0.2.20", "vrf": "65000:1"}},
    {"source": {"prefix": "2001:db8::/64"}, "gateway": "2001:db8::1"},
    {"server": {**NETBOX_SERVER, "url": "http://127.0.0.1:8000/netbox/"}},
])
def test_good_netbox_pools_pass_schema_and_core(spec):
    body = netbox_pool(**spec)
    assert validate_object(body) == []
    pool, problems = read_pool(body)
    assert problems == [] and pool is not None


def test_the_netbox_sample_passes_schema_and_core():
    path = REPO / "samples" / "netbox" / "netboxippool.yaml"
    [pool] = [d for d in yaml.safe_load_all(path.read_text()) if d and d["kind"] == KIND]
    assert validate_object(pool) == []
    read, problems = read_pool(pool)
    assert problems == [] and read is not None
