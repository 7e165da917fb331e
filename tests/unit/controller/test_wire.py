"""Objects decoded against the schema of what is read equal those decoded whole, once slimmed."""

from __future__ import annotations

import json

import pytest
import yaml
from hypothesis import given, settings
from hypothesis import strategies as st

from metal3_ipam.controller.wire import decode_event, decode_list, decode_object, encode
from metal3_ipam.core.slim import slim
from paths import REPO

ROOT = REPO
# Objects the Go Metal3 IPAM wrote on a real API server (with their managedFields), and the samples.
STATE = yaml.safe_load((ROOT / "tests/fixtures/go-metal3-ipam-state.yaml").read_text())
OBJECTS = [obj for key, obj in STATE.items() if not key.startswith("_")] + [
    d for path in sorted((ROOT / "samples").glob("*.yaml")) for d in yaml.safe_load_all(path.read_text()) if d]


def as_served(obj: dict) -> dict:
    """``obj`` as the API server sends it: with managedFields of every field set, and kubectl's annotation."""
    def fields(value):
        return {f"f:{k}": fields(v) for k, v in value.items()} if isinstance(value, dict) else {}
    meta = dict(obj.get("metadata") or {})
    meta["managedFields"] = [{"manager": "kubectl", "operation": "Update", "apiVersion": obj.get("apiVersion"),
                              "time": "2026-11-21T23:48:33Z", "fieldsType": "FieldsV1",
                              "fieldsV1": fields({k: v for k, v in obj.items() if k not in ("apiVersion", "kind")})}]
    meta["annotations"] = {**(meta.get("annotations") or {}),
                           "kubectl.kubernetes.io/last-applied-configuration": json.dumps(obj)}
    return {**obj, "metadata": meta}


def test_the_objects_are_of_every_kind_the_controller_reads():
    assert {obj["kind"] for obj in OBJECTS} >= {"IPPool", "IPClaim", "IPAddress", "IPAddressClaim", "Cluster"}


@pytest.mark.parametrize("obj", OBJECTS, ids=lambda obj: f"{obj.get('kind')}/{obj.get('metadata', {}).get('name')}")
def test_an_object_decodes_to_what_slim_keeps_of_it(obj):
    raw = json.dumps(as_served(obj)).encode()
    decoded = decode_object(raw)
    assert "managedFields" not in decoded["metadata"]
    assert slim(decoded) == slim(json.loads(raw))


JSON = st.recursive(st.none() | st.booleans() | st.integers() | st.text(max_size=5),
                    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=5), inner, max_size=3),
                    max_leaves=10)
FIELDS = st.sampled_from(["name", "namespace", "uid", "resourceVersion", "labels", "annotations", "finalizers",
                          "ownerReferences", "deletionTimestamp", "managedFields", "generation", "other"])


@settings(max_examples=300, deadline=None)
@given(top=st.dictionaries(st.sampled_from(["apiVersion", "kind", "metadata", "spec", "status", "other"]), JSON),
       meta=st.dictionaries(FIELDS, JSON))
def test_any_json_decodes_to_what_slim_keeps_of_it(top, meta):
    """Whatever shape the server (or a bad object) sends: never an exception, never a different reading."""
    if "metadata" in top and isinstance(top["metadata"], dict):
        top["metadata"] = meta
    raw = json.dumps(top).encode()
    assert slim(decode_object(raw)) == slim(json.loads(raw))


def test_a_status_answer_is_kept_whole():
    status = {"kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Success",
              "details": {"name": "a", "kind": "ipaddresses", "uid": "u"}}
    assert decode_object(json.dumps(status)) == status


def test_watch_events_and_their_errors():
    pool = {"apiVersion": "ipam.metal3.io/v1alpha1", "kind": "IPPool",
            "metadata": {"name": "p", "resourceVersion": "7", "managedFields": [{"manager": "x"}]},
            "status": {"indexes": {"a": "10.0.0.1"}}}
    kind, obj, stale = decode_event(json.dumps({"type": "MODIFIED", "object": pool}).encode())
    assert not stale
    assert kind == "MODIFIED" and obj["metadata"] == {"name": "p", "resourceVersion": "7"}
    assert obj["status"] == pool["status"]
    gone = {"kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Failure", "code": 410,
            "reason": "Expired", "message": "too old resource version"}
    assert decode_event(json.dumps({"type": "ERROR", "object": gone}).encode()) == ("ERROR", gone, False)
    assert decode_event(b'{"type": "BOOKMARK", "object": {"kind": "IPPool", "metadata": {"resourceVersion": "9"}}}') \
        == ("BOOKMARK", {"kind": "IPPool", "metadata": {"resourceVersion": "9"}}, False)


def test_an_event_no_news_is_decoded_no_further_than_its_metadata():
    pool = {"apiVersion": "ipam.metal3.io/v1alpha1", "kind": "IPPool",
            "metadata": {"name": "p", "namespace": "ns", "resourceVersion": "7", "managedFields": [{"manager": "x"}]},
            "status": {"indexes": {"a": "10.0.0.1"}}}
    asked = []

    def known(meta):
        asked.append(meta)
        return meta["resourceVersion"] == "7"

    for kind in ("ADDED", "MODIFIED"):
        assert decode_event(json.dumps({"type": kind, "object": pool}).encode(), known) == \
            (kind, {"metadata": {"name": "p", "namespace": "ns", "resourceVersion": "7"}}, True)
    # A deletion is always news (it also comes at a new version); so is a version not known.
    kind, obj, stale = decode_event(json.dumps({"type": "DELETED", "object": pool}).encode(), known)
    assert not stale and obj["status"] == pool["status"]
    newer = {**pool, "metadata": {**pool["metadata"], "resourceVersion": "8"}}
    kind, obj, stale = decode_event(json.dumps({"type": "MODIFIED", "object": newer}).encode(), known)
    assert not stale and obj["status"] == pool["status"]
    assert [m["resourceVersion"] for m in asked] == ["7", "7", "8"]


def test_a_list_page_keeps_its_continue_token_and_its_items():
    page = {"kind": "IPClaimList", "metadata": {"resourceVersion": "12", "continue": "abc"},
            "items": [{"kind": "IPClaim", "metadata": {"name": "a", "managedFields": []}, "spec": {"pool": {"name": "p"}}}]}
    decoded = decode_list(json.dumps(page).encode())
    assert decoded == {"metadata": {"resourceVersion": "12", "continue": "abc"},
                       "items": [{"kind": "IPClaim", "metadata": {"name": "a"}, "spec": {"pool": {"name": "p"}}}]}
    assert decode_list(b'{"metadata": {}, "items": null}') == {"metadata": {}, "items": []}


@settings(max_examples=300)
@given(body=JSON)
def test_a_body_encodes_to_json_that_reads_back_as_it_was(body):
    assert json.loads(encode(body)) == body


def test_a_body_with_text_beyond_ascii_or_control_characters_reads_back_as_it_was():
    body = {"status": {"indexes": {"clé-\u2028\"\\\x00": "2001:db8::1"}, "errorMessage": "naïve \U0001F600"}}
    assert json.loads(encode(body).decode("utf-8")) == body
