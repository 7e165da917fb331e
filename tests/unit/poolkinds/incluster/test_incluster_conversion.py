"""v1alpha1 <-> v1alpha2 of the in-cluster IP pools (core/conversion.py): round trips lose nothing."""

from __future__ import annotations

import json

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from metal3_ipam.core import conversion as review_conversion
from metal3_ipam.poolkinds.incluster import conversion as cv

FAST = settings(deadline=None, max_examples=200, suppress_health_check=[HealthCheck.too_slow])
ANNOTATION = cv.CONVERSION_DATA_ANNOTATION

kinds = st.sampled_from(["InClusterIPPool", "GlobalInClusterIPPool"])
ips = st.sampled_from(["10.0.0.1", "10.0.0.9", "192.168.1.0", "2001:db8::1", "2001:db8::ff"])
entries = st.one_of(ips, st.sampled_from(["10.0.0.0/24", "10.0.0.5-10.0.0.9", "2001:db8::/120", "10.0.0.7/29"]))
subnets = st.sampled_from(["10.0.0.0/24", "10.0.0.0/31", "10.0.0.4/32", "10.0.0.5/29", "2001:db8::/64",
                           "2001:db8::/127"])
other_notes = st.dictionaries(st.sampled_from(["a", "example.com/b"]), st.text(max_size=5), max_size=2)


def metadata(draw, kind):
    meta = {"name": "p", "uid": "u-1", "resourceVersion": "7"}
    if kind == "InClusterIPPool":
        meta["namespace"] = "ns"
    notes = draw(other_notes)
    if notes:
        meta["annotations"] = notes
    return meta


@st.composite
def v1alpha1_pools(draw):
    kind = draw(kinds)
    spec = draw(st.fixed_dictionaries({}, optional={
        "addresses": st.lists(entries, max_size=3),
        "subnet": subnets,
        "start": ips,
        "end": ips,
        "prefix": st.integers(0, 128),
        "gateway": ips,
    }))
    obj = {"apiVersion": cv.V1ALPHA1, "kind": kind, "metadata": metadata(draw, kind), "spec": spec}
    if draw(st.booleans()):
        obj["status"] = {"ipAddresses": {"total": 3, "used": 1, "free": 2, "outOfRange": 0}}
    return obj


@st.composite
def v1alpha2_pools(draw):
    kind = draw(kinds)
    spec = {"addresses": draw(st.lists(entries, max_size=3)), "prefix": draw(st.integers(0, 128))}
    spec.update(draw(st.fixed_dictionaries({}, optional={
        "gateway": ips,
        "excludedAddresses": st.lists(entries, max_size=2),
        "allocateReservedIPAddresses": st.booleans(),
        "addressReuseGracePeriodSeconds": st.integers(0, 3600),
    })))
    return {"apiVersion": cv.V1ALPHA2, "kind": kind, "metadata": metadata(draw, kind), "spec": spec}


@FAST
@given(v1alpha1_pools())
def test_v1alpha1_round_trip_loses_nothing(obj):
    up = cv.convert(obj, cv.V1ALPHA2)
    assert up["apiVersion"] == cv.V1ALPHA2
    assert cv.convert(up, cv.V1ALPHA1) == obj


@FAST
@given(v1alpha2_pools())
def test_v1alpha2_round_trip_loses_nothing(obj):
    down = cv.convert(obj, cv.V1ALPHA1)
    assert set(down["spec"]) <= {"addresses", "prefix", "gateway", "subnet", "start", "end"}
    assert cv.convert(down, cv.V1ALPHA2) == obj


@FAST
@given(v1alpha2_pools(), st.data())
def test_an_edit_through_v1alpha1_keeps_the_v1alpha2_only_fields(obj, data):
    down = cv.convert(obj, cv.V1ALPHA1)
    down["spec"]["gateway"] = data.draw(ips)  # a v1alpha1 client's read-modify-write
    down["spec"]["addresses"] = data.draw(st.lists(entries, min_size=1, max_size=2))
    up = cv.convert(down, cv.V1ALPHA2)
    for field in cv.V1ALPHA2_ONLY:
        assert up["spec"].get(field) == obj["spec"].get(field)
    assert up["spec"]["addresses"] == down["spec"]["addresses"] and up["spec"]["gateway"] == down["spec"]["gateway"]


@FAST
@given(v1alpha1_pools(), st.data())
def test_an_edit_through_v1alpha2_wins_over_the_kept_v1alpha1_spec(obj, data):
    up = cv.convert(obj, cv.V1ALPHA2)
    new = data.draw(st.lists(entries, min_size=1, max_size=2))
    if new == up["spec"]["addresses"]:
        return
    up["spec"]["addresses"] = new
    down = cv.convert(up, cv.V1ALPHA1)
    assert down["spec"].get("addresses") == new and "subnet" not in down["spec"]
    assert cv.convert(down, cv.V1ALPHA2)["spec"]["addresses"] == new


@pytest.mark.parametrize("spec, addresses, prefix", [
    ({"subnet": "10.0.0.0/24"}, ["10.0.0.1-10.0.0.254"], 24),
    ({"subnet": "10.0.0.0/24", "start": "10.0.0.10"}, ["10.0.0.10-10.0.0.254"], 24),
    ({"subnet": "10.0.0.0/24", "prefix": 22, "end": "10.0.0.20"}, ["10.0.0.1-10.0.0.20"], 22),
    ({"addresses": ["10.0.1.1"], "start": "10.0.0.1", "end": "10.0.0.5"}, ["10.0.1.1", "10.0.0.1-10.0.0.5"], 0),
    ({"start": "10.0.0.1"}, [], 0),                                    # a lone start: nothing to serve
    ({"subnet": "10.0.0.0/31"}, ["10.0.0.0-10.0.0.1"], 31),          # both addresses (Go: .1-.0, refused)
    ({"subnet": "10.0.0.4/32"}, ["10.0.0.4-10.0.0.4"], 32),
    ({"subnet": "2001:db8::/120"}, ["2001:db8::1-2001:db8::ff"], 120),  # no broadcast in IPv6
])
def test_up_conversion_of_subnet_start_and_end(spec, addresses, prefix):
    obj = {"apiVersion": cv.V1ALPHA1, "kind": "InClusterIPPool", "metadata": {"name": "p"}, "spec": spec}
    up = cv.convert(obj, cv.V1ALPHA2)
    assert (up["spec"]["addresses"], up["spec"]["prefix"]) == (addresses, prefix)
    assert json.loads(up["metadata"]["annotations"][ANNOTATION])["spec"] == spec


def test_an_annotation_written_by_the_go_provider_is_read():
    go_data = json.dumps({"apiVersion": cv.V1ALPHA1, "kind": "GlobalInClusterIPPool",
                          "spec": {"subnet": "10.0.0.0/24", "gateway": "10.0.0.1"},
                          "status": {"ipAddresses": {"total": 253, "used": 0, "free": 253, "outOfRange": 0}}})
    stored = {"apiVersion": cv.V1ALPHA2, "kind": "GlobalInClusterIPPool",
              "metadata": {"name": "g", "annotations": {ANNOTATION: go_data}},
              "spec": {"addresses": ["10.0.0.1-10.0.0.254"], "prefix": 24, "gateway": "10.0.0.1"}}
    down = cv.convert(stored, cv.V1ALPHA1)
    assert down["spec"] == {"subnet": "10.0.0.0/24", "gateway": "10.0.0.1"}
    # Edited since through v1alpha2: the Go provider restores a global pool's stale spec; here the edit wins.
    edited = dict(stored, spec=dict(stored["spec"], gateway="10.0.0.254"))
    assert cv.convert(edited, cv.V1ALPHA1)["spec"] == {"addresses": ["10.0.0.1-10.0.0.254"], "prefix": 24,
                                                       "gateway": "10.0.0.254"}


def review(objects, desired=cv.V1ALPHA2):
    return {"apiVersion": "apiextensions.k8s.io/v1", "kind": "ConversionReview",
            "request": {"uid": "abc", "desiredAPIVersion": desired, "objects": objects}}


def test_conversion_review():
    pool = {"apiVersion": cv.V1ALPHA1, "kind": "InClusterIPPool", "metadata": {"name": "p", "namespace": "n"},
            "spec": {"subnet": "10.0.0.0/30"}}
    same = {"apiVersion": cv.V1ALPHA2, "kind": "InClusterIPPool", "metadata": {"name": "q"},
            "spec": {"addresses": ["10.0.0.1"], "prefix": 24}}
    answer = review_conversion.convert_review(review([pool, same]))
    assert answer["apiVersion"] == "apiextensions.k8s.io/v1" and answer["kind"] == "ConversionReview"
    response = answer["response"]
    assert response["uid"] == "abc" and response["result"] == {"status": "Success"}
    assert [o["spec"]["addresses"] for o in response["convertedObjects"]] == [["10.0.0.1-10.0.0.2"], ["10.0.0.1"]]
    assert all(o["apiVersion"] == cv.V1ALPHA2 for o in response["convertedObjects"])


@pytest.mark.parametrize("objects, desired, named", [
    ([{"apiVersion": cv.V1ALPHA1, "kind": "InClusterIPPool", "metadata": {"name": "p", "namespace": "n"},
       "spec": {"subnet": "10.0.0.0/40"}}], cv.V1ALPHA2, "InClusterIPPool/n/p: spec.subnet: "),
    ([{"apiVersion": cv.V1ALPHA2, "kind": "InClusterPrefixPool", "metadata": {"name": "pp"}, "spec": {}}],
     cv.V1ALPHA1, "InClusterPrefixPool/pp: kind: "),
    ([{"apiVersion": cv.V1ALPHA2, "kind": "InClusterIPPool", "metadata": {"name": "p"}, "spec": {}}],
     "ipam.cluster.x-k8s.io/v1beta1", "InClusterIPPool/p: desiredAPIVersion: "),
    ("nope", cv.V1ALPHA2, "ConversionReview: request.objects: "),
])
def test_a_failed_review_names_object_field_and_value(objects, desired, named):
    response = review_conversion.convert_review(review(objects, desired))["response"]
    assert response["result"]["status"] == "Failure" and response["convertedObjects"] == []
    assert response["result"]["message"].startswith(named) and "(value: " in response["result"]["message"]
