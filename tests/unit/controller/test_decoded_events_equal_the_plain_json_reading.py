"""Watch events and LIST pages decoded against what is read equal the plain JSON reading, once slimmed.

``wire`` decodes the objects inside watch events and LIST pages against a
schema of the fields ``slim`` reads. Whatever the server sends in them
(floats, any text, escaped or not, an object that is not one of ours, a
Status, null), the controller must see what ``slim(json.loads(...))`` gives.
"""

from __future__ import annotations

import json

from hypothesis import given, settings
from hypothesis import strategies as st

from metal3_ipam.controller.wire import decode_event, decode_list
from metal3_ipam.core.slim import slim

TEXT = st.text(st.characters(blacklist_categories=("Cs",)), max_size=6)
SCALARS = st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False, allow_infinity=False) | TEXT
JSON = st.recursive(SCALARS, lambda inner: st.lists(inner, max_size=3) | st.dictionaries(TEXT, inner, max_size=3),
                    max_leaves=10)
OBJECTS = st.fixed_dictionaries(
    {}, optional={"apiVersion": st.sampled_from(["ipam.metal3.io/v1alpha1", "ipam.cluster.x-k8s.io/v1beta1", "v1"]),
                  "kind": st.sampled_from(["IPPool", "IPClaim", "IPAddress", "IPAddressClaim", "Status"]) | JSON,
                  "metadata": st.dictionaries(st.sampled_from(["name", "uid", "resourceVersion", "labels",
                                                               "finalizers", "managedFields", "generation"]) | TEXT,
                                              JSON) | JSON,
                  "spec": JSON, "status": JSON, "code": JSON, "details": JSON}) | JSON


def _plain(obj):
    return json.dumps(slim(json.loads(json.dumps(obj))))


@settings(max_examples=400, deadline=None)
@given(kind=st.sampled_from(["ADDED", "MODIFIED", "DELETED", "BOOKMARK", "ERROR"]), obj=OBJECTS,
       ascii_only=st.booleans())
def test_an_event_carries_what_its_object_reads_as(kind, obj, ascii_only):
    event_type, decoded, _ = decode_event(json.dumps({"type": kind, "object": obj}, ensure_ascii=ascii_only).encode())
    assert event_type == kind
    assert json.dumps(slim(decoded)) == _plain(obj)  # the same values, of the same types, in the same order


@settings(max_examples=200, deadline=None)
@given(items=st.lists(OBJECTS.filter(lambda obj: isinstance(obj, dict)), max_size=4),
       meta=st.dictionaries(st.sampled_from(["resourceVersion", "continue", "remainingItemCount"]), TEXT))
def test_a_page_carries_what_its_items_read_as(items, meta):
    page = decode_list(json.dumps({"kind": "IPClaimList", "metadata": meta, "items": items}).encode())
    assert page["metadata"] == meta
    assert [json.dumps(slim(item)) for item in page["items"]] == [_plain(item) for item in items]
