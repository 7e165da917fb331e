"""The in-cluster provider's pool CRDs (metal3_ipam/crds.py): the Go provider's shapes, offline.

The API server installs and serves them in tests/e2e/poolkinds/incluster/test_incluster_crds_served.py.
"""

from __future__ import annotations

import pytest

from metal3_ipam import crds
from metal3_ipam.poolkinds.incluster import schema as incluster_schema
from metal3_ipam.poolkinds.incluster import conversion
from metal3_ipam.poolkinds.incluster import spec as incluster
from metal3_ipam.poolkinds.incluster import prefix_spec as prefixes

EXPECTED = {
    # kind: (plural, scope, versions)
    "InClusterIPPool": ("inclusterippools", "Namespaced", ["v1alpha1", "v1alpha2"]),
    "GlobalInClusterIPPool": ("globalinclusterippools", "Cluster", ["v1alpha1", "v1alpha2"]),
    "InClusterPrefixPool": ("inclusterprefixpools", "Namespaced", ["v1alpha2"]),
    "GlobalInClusterPrefixPool": ("globalinclusterprefixpools", "Cluster", ["v1alpha2"]),
}
COUNTS = [("Total", "integer", ".status.ipAddresses.total"), ("Free", "integer", ".status.ipAddresses.free"),
          ("Used", "integer", ".status.ipAddresses.used")]


def versions(kind):
    return {v["name"]: v for v in crds.crd_for_kind(kind)["spec"]["versions"]}


@pytest.mark.parametrize("kind", incluster_schema.KINDS)
def test_names_scope_versions_and_labels(kind):
    crd = crds.crd_for_kind(kind)
    plural, scope, names = EXPECTED[kind]
    assert crd["metadata"]["name"] == f"{plural}.ipam.cluster.x-k8s.io"
    assert crd["spec"]["group"] == "ipam.cluster.x-k8s.io" and crd["spec"]["scope"] == scope
    assert crd["spec"]["names"] == {"kind": kind, "listKind": f"{kind}List", "plural": plural,
                                    "singular": kind.lower(), "categories": ["cluster-api"]}  # no short names
    found = versions(kind)
    assert list(found) == names
    assert found["v1alpha2"]["served"] and found["v1alpha2"]["storage"]
    if "v1alpha1" in found:
        assert found["v1alpha1"]["served"] and not found["v1alpha1"]["storage"] and found["v1alpha1"]["deprecated"]
    for version in found.values():
        assert version["subresources"] == {"status": {}}
    labels = crd["metadata"]["labels"]
    assert labels["clusterctl.cluster.x-k8s.io/move-hierarchy"] == ""
    assert labels["cluster.x-k8s.io/provider"] == "ipam-metal3" and labels["clusterctl.cluster.x-k8s.io"] == ""


@pytest.mark.parametrize("kind", incluster_schema.KINDS)
def test_conversion_only_where_there_are_two_versions(kind):
    spec = crds.crd_for_kind(kind)["spec"]
    if "IPPool" in kind:
        assert spec["conversion"] == {"strategy": "Webhook", "webhook": {
            "conversionReviewVersions": ["v1"],
            "clientConfig": {"service": {"name": "webhook-service", "namespace": "system", "path": "/convert"}}}}
    else:
        assert "conversion" not in spec


@pytest.mark.parametrize("kind", incluster_schema.KINDS)
def test_printer_columns(kind):
    def columns(version):
        return [(c["name"], c["type"], c["jsonPath"]) for c in versions(kind)[version]["additionalPrinterColumns"]]

    first = ("Addresses", "string", ".spec.addresses") if "IPPool" in kind else ("Prefixes", "string", ".spec.prefixes")
    assert columns("v1alpha2") == [first] + COUNTS
    if "IPPool" in kind:
        old = [("Subnet", "string", ".spec.subnet"), ("First", "string", ".spec.start"),
               ("Last", "string", ".spec.end")]
        if not kind.startswith("Global"):
            old.append(first)
        assert columns("v1alpha1") == old + COUNTS


@pytest.mark.parametrize("kind", incluster_schema.KINDS)
def test_spec_and_status_fields(kind):
    schema = crds.openapi_schema(kind)
    spec = schema["properties"]["spec"]
    if "IPPool" in kind:
        assert set(spec["properties"]) == {"addresses", "prefix", "gateway", "excludedAddresses",
                                           "allocateReservedIPAddresses", "addressReuseGracePeriodSeconds"}
        assert spec["required"] == ["addresses", "prefix"]
        assert (spec["properties"]["prefix"]["minimum"], spec["properties"]["prefix"]["maximum"]) == (0, 128)
        grace = spec["properties"]["addressReuseGracePeriodSeconds"]
        assert (grace["format"], grace["minimum"], grace["maximum"]) == ("int32", 0, incluster.MAX_GRACE_SECONDS)
        assert set(conversion.V1ALPHA2_ONLY) <= set(spec["properties"])
        old = versions(kind)["v1alpha1"]["schema"]["openAPIV3Schema"]["properties"]["spec"]
        assert set(old["properties"]) == {"addresses", "subnet", "start", "end", "prefix", "gateway"}
        assert not set(conversion.V1ALPHA2_ONLY) & set(old["properties"])
    else:
        assert set(spec["properties"]) == {"prefixes", "allocationPrefixLength", "gateway", "excludedPrefixes"}
        length = spec["properties"]["allocationPrefixLength"]
        assert (length["default"], length["minimum"], length["maximum"]) == (
            prefixes.DEFAULT_ALLOCATION_PREFIX_LENGTH, 1, 128)
    counts = schema["properties"]["status"]["properties"]["ipAddresses"]
    assert sorted(counts["required"]) == ["free", "outOfRange", "total", "used"]
    assert {name: node["type"] for name, node in counts["properties"].items()} == dict.fromkeys(
        ["total", "used", "free", "outOfRange"], "integer")
    assert incluster.MAX_COUNT == 2**63 - 1  # the largest integer the API server keeps exactly
