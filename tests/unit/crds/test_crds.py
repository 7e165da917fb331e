"""The ipam.metal3.io CRDs (metal3_ipam/crds.py, config/crd/) and the manifests in samples/.

The in-cluster provider's pool CRDs have tests of their own (test_incluster_crds.py).

The API server itself is exercised by the end-to-end tests; here the schemas are checked
offline: generated files in sync, bounds that CEL cost estimation needs, names, columns and
labels, and the samples against the schemas. The CEL rules are mirrored in Python below
(every rule of the CRDs must have a mirror, so a new rule cannot slip in untested).
"""

from __future__ import annotations

import ipaddress
import re
from pathlib import Path
from typing import Any

import pytest
import yaml
from hypothesis import given, settings
from hypothesis import strategies as st

from metal3_ipam import crds, schema
from metal3_ipam.poolkinds.ippool import schema as ippool_schema
from crd_validator import CEL_MIRRORS, schema_node, is_ip, validate, validate_object, walk
from paths import REPO

ROOT = REPO
SAMPLES = ROOT / "samples"


# --- generated files ------------------------------------------------------------------------

def test_check_detects_missing_and_changed_files(tmp_path):
    assert crds.main(["--check", "--root", str(tmp_path)]) == 1
    assert crds.main(["--root", str(tmp_path)]) == 0
    assert crds.main(["--check", "--root", str(tmp_path)]) == 0
    target = tmp_path / "config/crd/bases/ipam.metal3.io_ippools.yaml"
    target.write_text(target.read_text() + "# edited\n")
    assert crds.main(["--check", "--root", str(tmp_path)]) == 1
    assert crds.stale_files(tmp_path) == [Path("config/crd/bases/ipam.metal3.io_ippools.yaml")]


def test_one_file_per_kind_and_kustomization_lists_them():
    bases = ROOT / "config/crd/bases"
    by_kind = {}
    for name in ("ippools", "ipclaims", "ipaddresses"):
        docs = [d for d in yaml.safe_load_all((bases / f"ipam.metal3.io_{name}.yaml").read_text()) if d]
        assert len(docs) == 1
        by_kind[docs[0]["spec"]["names"]["kind"]] = docs[0]
    for name in ("inclusterippools", "globalinclusterippools", "inclusterprefixpools", "globalinclusterprefixpools"):
        docs = [d for d in yaml.safe_load_all((bases / f"ipam.cluster.x-k8s.io_{name}.yaml").read_text()) if d]
        assert len(docs) == 1
        by_kind[docs[0]["spec"]["names"]["kind"]] = docs[0]
    [netbox] = [d for d in yaml.safe_load_all((bases / "netbox.metal3-ipam.io_netboxippools.yaml").read_text()) if d]
    by_kind["NetBoxIPPool"] = netbox
    [fips] = [d for d in yaml.safe_load_all(
        (bases / "openstack.metal3-ipam.io_openstackfloatingippools.yaml").read_text()) if d]
    by_kind["OpenStackFloatingIPPool"] = fips
    assert set(by_kind) == {"IPPool", "IPClaim", "IPAddress", "InClusterIPPool", "GlobalInClusterIPPool",
                            "InClusterPrefixPool", "GlobalInClusterPrefixPool", "NetBoxIPPool",
                            "OpenStackFloatingIPPool"}
    for crd in crds.crd_definitions():
        assert by_kind[crd["spec"]["names"]["kind"]] == crd
    kustomization = yaml.safe_load((ROOT / "config/crd/kustomization.yaml").read_text())
    assert kustomization["resources"] == [
        "bases/ipam.metal3.io_ippools.yaml",
        "bases/ipam.metal3.io_ipclaims.yaml",
        "bases/ipam.metal3.io_ipaddresses.yaml",
        "bases/ipam.cluster.x-k8s.io_inclusterippools.yaml",
        "bases/ipam.cluster.x-k8s.io_globalinclusterippools.yaml",
        "bases/ipam.cluster.x-k8s.io_inclusterprefixpools.yaml",
        "bases/ipam.cluster.x-k8s.io_globalinclusterprefixpools.yaml",
        "bases/netbox.metal3-ipam.io_netboxippools.yaml",
        "bases/openstack.metal3-ipam.io_openstackfloatingippools.yaml",
    ]


def test_definitions_are_fresh_copies():
    first = crds.crd_definitions()
    first[0]["spec"]["group"] = "changed"
    crds.openapi_schema("IPPool")["properties"].clear()
    assert crds.crd_definitions()[0]["spec"]["group"] == schema.GROUP
    assert "spec" in crds.openapi_schema("IPPool")["properties"]
    with pytest.raises(KeyError):
        crds.crd_for_kind("Metal3IPPool")


# --- names, versions, labels, columns -------------------------------------------------------

EXPECTED_NAMES = {
    "IPPool": ("ippools", ["ipp", "ippool"]),
    "IPClaim": ("ipclaims", ["ipc", "ipclaim"]),
    "IPAddress": ("ipaddresses", ["ipa", "ipaddress"]),
}


@pytest.mark.parametrize("kind", crds.KINDS)
def test_names_scope_and_version(kind):
    crd = crds.crd_for_kind(kind)
    plural, short_names = EXPECTED_NAMES[kind]
    assert crd["apiVersion"] == "apiextensions.k8s.io/v1"
    assert crd["metadata"]["name"] == f"{plural}.ipam.metal3.io"
    spec = crd["spec"]
    assert spec["group"] == "ipam.metal3.io"
    assert spec["scope"] == "Namespaced"
    names = spec["names"]
    assert names["kind"] == kind
    assert names["plural"] == plural
    assert names["singular"] == kind.lower()
    assert names["listKind"] == f"{kind}List"
    assert names["shortNames"] == short_names
    assert names["categories"] == ["cluster-api"]
    [version] = spec["versions"]
    assert version["name"] == "v1alpha1"
    assert version["served"] is True and version["storage"] is True


@pytest.mark.parametrize("kind", crds.KINDS)
def test_labels(kind):
    labels = crds.crd_for_kind(kind)["metadata"]["labels"]
    assert labels["cluster.x-k8s.io/provider"] == "ipam-metal3"
    assert labels["clusterctl.cluster.x-k8s.io"] == ""
    if kind == "IPPool":
        assert labels["clusterctl.cluster.x-k8s.io/move-hierarchy"] == ""
    else:
        assert "clusterctl.cluster.x-k8s.io/move-hierarchy" not in labels


def test_status_subresources():
    def subresources(kind):
        return crds.crd_for_kind(kind)["spec"]["versions"][0]["subresources"]

    assert subresources("IPPool") == {"status": {}}
    assert subresources("IPClaim") == {"status": {}}
    assert subresources("IPAddress") == {}
    assert "status" not in crds.openapi_schema("IPAddress")["properties"]


EXPECTED_COLUMNS = {
    "IPPool": [
        ("Cluster", "string", ".spec.clusterName"),
        ("Capacity", "string", ".status.capacity"),
        ("Allocated", "string", ".status.allocated"),
        ("Free", "string", ".status.free"),
        ("Age", "date", ".metadata.creationTimestamp"),
    ],
    "IPClaim": [
        ("Pool", "string", ".spec.pool.name"),
        ("Address", "string", ".status.address.name"),
        ("Error", "string", ".status.errorMessage"),
        ("Age", "date", ".metadata.creationTimestamp"),
    ],
    "IPAddress": [
        ("Address", "string", ".spec.address"),
        ("Prefix", "integer", ".spec.prefix"),
        ("Gateway", "string", ".spec.gateway"),
        ("Pool", "string", ".spec.pool.name"),
        ("Claim", "string", ".spec.claim.name"),
        ("Age", "date", ".metadata.creationTimestamp"),
    ],
}


@pytest.mark.parametrize("kind", crds.KINDS)
def test_printer_columns(kind):
    version = crds.crd_for_kind(kind)["spec"]["versions"][0]
    columns = [(c["name"], c["type"], c["jsonPath"]) for c in version["additionalPrinterColumns"]]
    assert columns == EXPECTED_COLUMNS[kind]
    schema = version["schema"]["openAPIV3Schema"]
    for _, column_type, path in columns:
        if path.startswith(".metadata."):
            continue
        node = schema
        for part in path.strip(".").split("."):
            node = node["properties"][part]
        assert node["type"] == column_type, path


# --- schema shape ---------------------------------------------------------------------------


ROOT_FIELDS = {".apiVersion", ".kind"}  # set by the API server, left as the usual plain strings


@pytest.mark.parametrize("kind", crds.KINDS)
def test_every_string_list_and_spec_map_is_bounded(kind):
    for path, node in walk(crds.openapi_schema(kind)):
        if path in ROOT_FIELDS:
            continue
        node_type = node.get("type")
        assert node_type in {"object", "array", "string", "integer", "boolean"}, path
        if node_type == "string":
            assert isinstance(node.get("maxLength"), int), f"{kind}{path} has no maxLength"
        if node_type == "array":
            assert isinstance(node.get("maxItems"), int), f"{kind}{path} has no maxItems"
        if node_type == "object" and "additionalProperties" in node and path.startswith(".spec"):
            assert isinstance(node.get("maxProperties"), int), f"{kind}{path} has no maxProperties"
        if node_type == "integer" and path.endswith("prefix"):
            assert (node["minimum"], node["maximum"]) == (0, 128), path


def test_structural_no_untyped_nodes():
    for kind in crds.KINDS:
        for path, node in walk(crds.openapi_schema(kind)):
            assert "type" in node, f"{kind}{path}"
            assert not ({"anyOf", "oneOf", "allOf", "not"} & set(node)), f"{kind}{path}"


SPEC_FIELDS = {
    "IPPool": {
        "clusterName", "namePrefix", "pools", "prefix", "gateway", "dnsServers",
        "preAllocations", "allocationStrategy", "excludedAddresses",
    },
    "IPClaim": {"pool"},
    "IPAddress": {"claim", "pool", "address", "prefix", "gateway", "dnsServers"},
}
STATUS_FIELDS = {
    "IPPool": {"indexes", "indexesOmitted", "lastUpdated", "capacity", "allocated", "free", "conditions", "observedGeneration"},
    "IPClaim": {"address", "errorMessage", "conditions"},
}
REFERENCE_FIELDS = {"apiVersion", "fieldPath", "kind", "name", "namespace", "resourceVersion", "uid"}


def test_field_names_and_required():
    for kind in crds.KINDS:
        schema = crds.openapi_schema(kind)
        assert schema["required"] == ["spec"]
        assert set(schema["properties"]["spec"]["properties"]) == SPEC_FIELDS[kind]
        if kind in STATUS_FIELDS:
            assert set(schema["properties"]["status"]["properties"]) == STATUS_FIELDS[kind]
    assert schema_node("IPPool", "spec")["required"] == ["namePrefix"]
    assert set(schema_node("IPPool", "spec.pools.[]")["properties"]) == {
        "start", "end", "subnet", "prefix", "gateway", "dnsServers",
    }
    assert schema_node("IPClaim", "spec")["required"] == ["pool"]
    assert sorted(schema_node("IPAddress", "spec")["required"]) == ["address", "claim", "pool"]
    for kind, path in [
        ("IPClaim", "spec.pool"),
        ("IPClaim", "status.address"),
        ("IPAddress", "spec.pool"),
        ("IPAddress", "spec.claim"),
    ]:
        ref = schema_node(kind, path)
        assert set(ref["properties"]) == REFERENCE_FIELDS
        assert ref["x-kubernetes-map-type"] == "atomic"
        assert ref.get("required", []) == ([] if path.startswith("status") else ["name"])


def test_pool_details():
    name_prefix = schema_node("IPPool", "spec.namePrefix")
    assert (name_prefix["minLength"], name_prefix["maxLength"]) == (1, 213)
    strategy = schema_node("IPPool", "spec.allocationStrategy")
    assert strategy["enum"] == ["sequential", "random"]
    assert strategy["default"] == "sequential"
    for count in ("capacity", "allocated", "free"):
        node = schema_node("IPPool", f"status.{count}")
        assert node["type"] == "string" and node["pattern"] == "^[0-9]+$"
        assert node["maxLength"] >= len(str(2**128))
    assert schema_node("IPPool", "status.lastUpdated")["format"] == "date-time"


@pytest.mark.parametrize("kind", ["IPPool", "IPClaim"])
def test_conditions_are_metav1_conditions(kind):
    conditions = schema_node(kind, "status.conditions")
    assert conditions["x-kubernetes-list-type"] == "map"
    assert conditions["x-kubernetes-list-map-keys"] == ["type"]
    item = conditions["items"]
    assert set(item["properties"]) == {
        "type", "status", "reason", "message", "lastTransitionTime", "observedGeneration",
    }
    assert set(item["required"]) == {"type", "status", "reason", "message", "lastTransitionTime"}
    assert item["properties"]["status"]["enum"] == ["True", "False", "Unknown"]


def rules_of(kind: str) -> list[tuple[str, dict[str, Any]]]:
    return [
        (path, rule)
        for path, node in walk(crds.openapi_schema(kind))
        for rule in node.get("x-kubernetes-validations", [])
    ]


def test_immutability_rules_and_messages():
    def find(kind, path):
        return [rule for p, rule in rules_of(kind) if p == path and "oldSelf" in rule["rule"]]

    [rule] = find("IPPool", ".spec.namePrefix")
    assert rule["message"] == "namePrefix is immutable"
    [rule] = find("IPPool", ".spec")
    assert rule["message"] == "allocationStrategy is immutable"
    [rule] = find("IPClaim", ".spec.pool")
    assert rule["message"] == "pool is immutable"
    [rule] = find("IPAddress", ".spec")
    assert rule["message"] == "spec is immutable"
    # Each refusal also names the old and new value (SPEC §9), starting with the same text.
    for kind, path in (("IPPool", ".spec.namePrefix"), ("IPPool", ".spec"), ("IPClaim", ".spec.pool"),
                       ("IPAddress", ".spec")):
        [rule] = find(kind, path)
        assert rule["messageExpression"].startswith(f"'{rule['message']} (")
        assert "oldSelf" in rule["messageExpression"] and "self" in rule["messageExpression"].replace("oldSelf", "")
    # No transition rule may sit on status or on a field that can be absent on one side only.
    for kind in crds.KINDS:
        for path, rule in rules_of(kind):
            if "oldSelf" in rule["rule"]:
                assert path in {".spec", ".spec.namePrefix", ".spec.pool"}, (kind, path)


def test_every_rule_has_a_message_and_a_python_mirror():
    for kind in crds.KINDS:
        for path, rule in rules_of(kind):
            assert rule.get("message"), (kind, path)
            assert rule["rule"] in CEL_MIRRORS, f"no Python mirror for {kind}{path}: {rule['rule']}"


# --- a small validator: structural schema + the CEL rules mirrored in Python ----------------


# --- the validator on hand-written cases -----------------------------------------------------

def pool(**spec: Any) -> dict[str, Any]:
    return {
        "apiVersion": "ipam.metal3.io/v1alpha1",
        "kind": "IPPool",
        "metadata": {"name": "p", "namespace": "default"},
        "spec": {"namePrefix": "p", **spec},
    }


@pytest.mark.parametrize(
    "spec",
    [
        {},
        {"pools": [{"start": "10.0.0.1"}]},
        {"pools": [{"end": "10.0.0.9"}]},
        {"pools": [{"subnet": "10.0.0.0/24", "start": "10.0.0.5", "end": "10.0.0.9"}]},
        {"pools": [{"subnet": "192.168.1.1/26"}]},  # host bits set, as in the Metal3 docs
        {"pools": [{"subnet": "2001:db8::/64", "gateway": "2001:db8::1", "prefix": 64}]},
        {"gateway": "64:ff9b::192.0.2.1"},
        {"excludedAddresses": ["10.0.0.1", "10.0.0.0/30", "10.0.0.5-10.0.0.9", "2001:db8::1-2001:db8::9"]},
        {"preAllocations": {"claim1": "10.0.0.3"}},
        {"allocationStrategy": "random"},
        {"namePrefix": "a.b-c"},
        {"namePrefix": "ends-with-dash-"},
        {"namePrefix": "x" * 213},
    ],
)
def test_valid_pools(spec):
    assert validate_object(pool(**spec)) == []


@pytest.mark.parametrize(
    "spec, expected",
    [
        ({"namePrefix": ""}, "shorter than 1"),
        ({"namePrefix": "x" * 214}, "longer than 213"),
        ({"namePrefix": "Upper"}, "does not match"),
        ({"namePrefix": "a..b"}, "does not match"),
        ({"namePrefix": "a.-b"}, "does not match"),
        ({"namePrefix": "-a"}, "does not match"),
        ({"namePrefix": "a."}, "does not match"),
        ({"pools": [{"prefix": 24}]}, ippool_schema.MSG_POOL_ENTRY_BOUNDS),
        ({"pools": [{"start": "10.0.0.256"}]}, "start must be a valid IP address"),
        ({"pools": [{"start": "10.0.0.01"}]}, "start must be a valid IP address"),
        ({"pools": [{"start": "fe80::1%eth0"}]}, "start must be a valid IP address"),
        ({"pools": [{"start": "::ffff:10.0.0.1"}]}, "start must be a valid IP address"),
        ({"pools": [{"subnet": "10.0.0.0"}]}, "subnet must be a valid CIDR"),
        ({"pools": [{"subnet": "10.0.0.0/33"}]}, "subnet must be a valid CIDR"),
        ({"pools": [{"start": "10.0.0.1", "end": "2001:db8::1"}]}, "same IP family"),
        ({"pools": [{"subnet": "10.0.0.0/24", "start": "10.0.1.1"}]}, "start must be inside subnet"),
        ({"pools": [{"subnet": "10.0.0.0/24", "end": "10.0.1.1"}]}, "end must be inside subnet"),
        ({"pools": [{"start": "10.0.0.1", "prefix": 129}]}, "> 128"),
        ({"prefix": -1}, "< 0"),
        ({"gateway": "gw"}, "gateway must be a valid IP address"),
        ({"dnsServers": ["8.8.8.8", "dns"]}, "dnsServers entries must be valid IP addresses"),
        ({"preAllocations": {"c": "10.0.0"}}, "preAllocations values must be valid IP addresses"),
        ({"allocationStrategy": "first"}, "not in"),
        ({"excludedAddresses": ["10.0.0.1-"]}, "excludedAddresses entries"),
        ({"excludedAddresses": ["10.0.0.1-2001:db8::1"]}, "excludedAddresses entries"),
        ({"excludedAddresses": ["10.0.0.1-10.0.0.2-10.0.0.3"]}, "excludedAddresses entries"),
        ({"unknownField": 1}, "unknown field"),
    ],
)
def test_invalid_pools(spec, expected):
    errors = validate_object(pool(**spec))
    assert any(expected in e for e in errors), errors


def test_pool_transitions():
    old = pool(allocationStrategy="random")
    assert validate_object(pool(namePrefix="q"), pool()) == [".spec.namePrefix: namePrefix is immutable"]
    assert validate_object(pool(allocationStrategy="random"), pool()) == [
        ".spec: allocationStrategy is immutable"
    ]
    assert validate_object(pool(), old) == [".spec: allocationStrategy is immutable"]
    # Setting the field to the value it had by default is no change.
    assert validate_object(pool(allocationStrategy="sequential"), pool()) == []
    old_without_field = pool()
    assert validate(crds.openapi_schema("IPPool"), pool(allocationStrategy="sequential"), old_without_field) == []
    assert validate_object(pool(gateway="10.0.0.1", prefix=24), pool()) == []


def test_claim_and_address_rules():
    claim = {
        "apiVersion": "ipam.metal3.io/v1alpha1",
        "kind": "IPClaim",
        "metadata": {"name": "c", "namespace": "default"},
        "spec": {"pool": {"name": "pool1"}},
    }
    assert validate_object(claim) == []
    moved = {**claim, "spec": {"pool": {"name": "pool2"}}}
    assert validate_object(moved, claim) == [".spec.pool: pool is immutable"]
    assert any("required" in e for e in validate_object({**claim, "spec": {"pool": {"namespace": "x"}}}))
    assert any("required" in e for e in validate_object({**claim, "spec": {}}))

    address = {
        "apiVersion": "ipam.metal3.io/v1alpha1",
        "kind": "IPAddress",
        "metadata": {"name": "test1-prov-192-168-0-13", "namespace": "default"},
        "spec": {
            "pool": {"name": "pool1", "namespace": "default"},
            "claim": {"name": "test1-controlplane-template-0-pool1", "namespace": "default"},
            "address": "192.168.0.13",
            "prefix": 24,
            "gateway": "192.168.0.1",
        },
    }
    assert validate_object(address) == []
    changed = {**address, "spec": {**address["spec"], "gateway": "192.168.0.254"}}
    assert validate_object(changed, address) == [".spec: spec is immutable"]
    assert any("address must be a valid IP" in e for e in validate_object(
        {**address, "spec": {**address["spec"], "address": "192.168.0.300"}}
    ))
    for field in ("claim", "pool", "address"):
        spec = {k: v for k, v in address["spec"].items() if k != field}
        assert f".spec.{field}: required" in validate_object({**address, "spec": spec})


# --- namePrefix pattern versus the IPAddress names it produces ------------------------------

DNS1123_SUBDOMAIN = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$")


def address_name(prefix: str, ip: str) -> str:
    text = str(ipaddress.ip_address(ip)).replace(".", "-").replace(":", "-").rstrip("-")
    return f"{prefix}-{text}"


def valid_object_name(name: str) -> bool:
    return len(name) <= 253 and DNS1123_SUBDOMAIN.match(name) is not None


ips = st.one_of(
    st.ip_addresses(v=4).map(str),
    st.ip_addresses(v=6).filter(lambda a: int(a) > 0).map(str),
)
prefixes = st.text(alphabet="abz09-.A_", min_size=1, max_size=12)


@settings(max_examples=400, deadline=None)
@given(prefix=prefixes, ip=ips)
def test_name_prefix_pattern_accepts_exactly_the_prefixes_giving_valid_names(prefix, ip):
    accepted = re.search(ippool_schema.NAME_PREFIX_PATTERN, prefix) is not None
    if accepted:
        assert valid_object_name(address_name(prefix, ip))
    else:
        # A rejected prefix breaks the names of ordinary IPv4 addresses.
        assert not valid_object_name(address_name(prefix, "192.168.0.1"))


@settings(max_examples=200, deadline=None)
@given(ip=ips)
def test_longest_name_prefix_still_gives_valid_names(ip):
    prefix = "a" * (ippool_schema.MAX_NAME_PREFIX_LEN - 4) + ".b-c"
    assert re.search(ippool_schema.NAME_PREFIX_PATTERN, prefix)
    assert valid_object_name(address_name(prefix, ip))


def test_longest_ipv6_name_fits():
    longest = "1111:2222:3333:4444:5555:6666:7777:8888"
    assert len(address_name("x" * 213, longest)) == 253
    assert len(longest) <= schema.MAX_IP_LEN


# --- samples ---------------------------------------------------------------------------------

def sample_documents() -> list[tuple[str, dict[str, Any]]]:
    docs = []
    for path in sorted(SAMPLES.glob("*.yaml")):
        for doc in yaml.safe_load_all(path.read_text()):
            if doc is not None:
                docs.append((path.name, doc))
    return docs


def test_samples_parse_and_are_complete():
    docs = sample_documents()
    assert docs, "no samples"
    for name, doc in docs:
        assert {"apiVersion", "kind", "metadata"} <= set(doc), name
        assert doc["metadata"].get("name") and doc["metadata"].get("namespace"), name
    kinds = [(d["apiVersion"], d["kind"]) for _, d in docs]
    assert ("cluster.x-k8s.io/v1beta2", "Cluster") in kinds
    assert ("ipam.cluster.x-k8s.io/v1beta2", "IPAddressClaim") in kinds
    assert kinds.count(("ipam.metal3.io/v1alpha1", "IPPool")) >= 2


def every_sample_document() -> list[tuple[str, dict[str, Any]]]:
    """Every document under samples/, its subfolders (a folder per kind of pool) included."""
    return [(str(path.relative_to(SAMPLES)), doc) for path in sorted(SAMPLES.rglob("*.yaml"))
            for doc in yaml.safe_load_all(path.read_text()) if doc is not None]


OUR_GROUPS = {crd["spec"]["group"] for crd in crds.crd_definitions()}


@pytest.mark.parametrize(
    "name, doc",
    [pytest.param(n, d, id=f"{n}:{d['kind']}/{d['metadata']['name']}") for n, d in every_sample_document()
     # NetBoxIPPool's CEL rules are mirrored in test_netbox_crds.py, which checks its sample.
     if d["apiVersion"].rpartition("/")[0] in OUR_GROUPS and d["kind"] not in ("IPAddressClaim", "NetBoxIPPool")],
)
def test_every_sample_of_our_kinds_satisfies_the_crd_schemas(name, doc):
    assert validate_object(doc) == []


def test_samples_hold_an_example_of_every_pool_kind_with_a_claim():
    docs = [d for _, d in every_sample_document()]
    pool_kinds = {kind for crd in crds.crd_definitions() if (kind := crd["spec"]["names"]["kind"]).endswith("Pool")}
    assert pool_kinds <= {d["kind"] for d in docs}, pool_kinds
    claimed = {(d["spec"]["poolRef"]["kind"]) for d in docs if d["kind"] == "IPAddressClaim"}
    claimed |= {"IPPool"} if any(d["kind"] == "IPClaim" for d in docs) else set()
    assert pool_kinds <= claimed, pool_kinds - claimed


def _by_kind(kind: str) -> dict[str, dict[str, Any]]:
    return {d["metadata"]["name"]: d for _, d in sample_documents() if d["kind"] == kind}


def _entry_contains(entry: dict[str, Any], ip: str) -> bool:
    addr = ipaddress.ip_address(ip)
    subnet = ipaddress.ip_network(entry["subnet"], strict=False) if "subnet" in entry else None
    low = ipaddress.ip_address(entry["start"]) if "start" in entry else subnet[1]
    high = ipaddress.ip_address(entry["end"]) if "end" in entry else subnet[-1]
    return low <= addr <= high


def test_samples_fit_together():
    pools = _by_kind("IPPool")
    claims = _by_kind("IPClaim")
    clusters = _by_kind("Cluster")

    pool1 = pools["pool1"]
    assert pool1["metadata"]["namespace"] == "default"
    spec = pool1["spec"]
    assert spec["clusterName"] == "cluster1" and spec["namePrefix"] == "test1-prov"
    assert spec["pools"][0] == {
        "start": "192.168.0.10", "end": "192.168.0.30", "prefix": 25, "gateway": "192.168.0.1",
    }
    assert spec["dnsServers"] and spec["preAllocations"]

    for pool_doc in pools.values():
        assert pool_doc["spec"].get("clusterName", "cluster1") in clusters
    ipv6 = [p for p in pools.values() if ":" in p["spec"]["pools"][0].get("subnet", "")]
    assert ipv6 and ipaddress.ip_network(ipv6[0]["spec"]["pools"][0]["subnet"]).prefixlen == 64
    assert ipv6[0]["spec"]["prefix"] == 64 and is_ip(ipv6[0]["spec"]["gateway"])

    for claim in claims.values():
        assert claim["spec"]["pool"]["name"] in pools
    assert any(c["spec"]["pool"]["name"] == ipv6[0]["metadata"]["name"] for c in claims.values())
    # One claim is named after a preAllocations key.
    assert set(spec["preAllocations"]) & set(claims)
    # One claim asks for a specific address that is in pool1 and not reserved.
    requested = [c for c in claims.values() if "ipAddress" in c["metadata"].get("annotations", {})]
    assert requested
    for claim in requested:
        ip = claim["metadata"]["annotations"]["ipAddress"]
        target = pools[claim["spec"]["pool"]["name"]]["spec"]
        assert any(_entry_contains(e, ip) for e in target["pools"])
        gateways = {target.get("gateway")} | {e.get("gateway") for e in target["pools"]}
        assert ip not in gateways and ip not in target.get("preAllocations", {}).values()

    [capi_claim] = _by_kind("IPAddressClaim").values()
    assert capi_claim["spec"]["poolRef"] == {"apiGroup": "ipam.metal3.io", "kind": "IPPool", "name": "pool1"}
    assert capi_claim["metadata"]["labels"]["cluster.x-k8s.io/cluster-name"] == "cluster1"
