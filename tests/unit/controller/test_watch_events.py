"""How the lean watch reads the events of one stream (the stream itself is tested against the API server)."""

from __future__ import annotations

import json
import logging

import pytest
from hypothesis import given, settings, strategies as st

from metal3_ipam.controller.api import Resource
from metal3_ipam.controller.watch import Gone, KindWatch, WatchFailed
from metal3_ipam.controller.wire import decode_event
from metal3_ipam.core import kinds
from metal3_ipam.core.inventory import Inventory


def watch(on_event, known=None) -> KindWatch:
    async def relist(kind, namespace):
        raise AssertionError("not listed here")
    w = KindWatch(None, Resource(kinds.METAL3_GROUP, kinds.METAL3_VERSION, "ipclaims"), kinds.IPCLAIM, "ns",
                  on_event, relist, known=known)
    w.version = "10"
    return w


def feed(w: KindWatch, event: dict) -> None:
    """One line of the stream, as the API server sends it."""
    w._event(*decode_event(json.dumps(event).encode(), w.known))


def test_events_are_filed_with_their_kind_and_move_the_version_bookmarks_only_move_it():
    seen = []
    w = watch(lambda kind, obj: seen.append((kind, obj)))
    feed(w, {"type": "ADDED", "object": {"metadata": {"name": "a", "resourceVersion": "11"}}})
    feed(w, {"type": "BOOKMARK", "object": {"kind": "IPClaim", "metadata": {"resourceVersion": "15"}}})
    assert seen == [("ADDED", {"apiVersion": kinds.METAL3_API_VERSION, "kind": "IPClaim",
                               "metadata": {"name": "a", "resourceVersion": "11"}})]
    assert w.version == "15"


def test_410_in_the_stream_asks_for_a_listing_other_errors_fail_the_stream():
    w = watch(lambda kind, obj: None)
    with pytest.raises(Gone):
        feed(w, {"type": "ERROR", "object": {"kind": "Status", "code": 410, "message": "too old resource version"}})
    with pytest.raises(WatchFailed, match="500"):
        feed(w, {"type": "ERROR", "object": {"kind": "Status", "code": 500, "message": "boom"}})
    assert w.version == "10"


def test_an_object_that_fails_to_be_filed_does_not_stop_the_stream(caplog):
    def fail(kind, obj):
        raise ValueError("a bug")
    w = watch(fail)
    with caplog.at_level(logging.ERROR, logger="metal3_ipam.watch"):
        feed(w, {"type": "MODIFIED", "object": {"metadata": {"name": "a", "resourceVersion": "12"}}})
    assert w.version == "12" and "filing MODIFIED a failed" in caplog.text


def test_an_event_the_inventory_holds_already_moves_the_version_and_is_not_filed():
    """The echo of a write whose answer was filed: no news, so it is not decoded nor filed; a newer
    version, an unknown name and a deletion are filed."""
    inventory = Inventory()
    claim = {"apiVersion": kinds.METAL3_API_VERSION, "kind": "IPClaim",
             "metadata": {"name": "a", "namespace": "ns", "resourceVersion": "12", "uid": "u"},
             "spec": {"pool": {"name": "p"}}}
    inventory.upsert(claim)
    seen = []
    w = watch(lambda kind, obj: seen.append((kind, obj["metadata"]["name"], obj["metadata"]["resourceVersion"])),
              known=inventory.holds)
    feed(w, {"type": "MODIFIED", "object": claim})  # the echo
    feed(w, {"type": "MODIFIED", "object": {**claim, "metadata": {**claim["metadata"], "resourceVersion": "11"}}})
    assert seen == [] and w.version == "11"
    feed(w, {"type": "MODIFIED", "object": {**claim, "metadata": {**claim["metadata"], "resourceVersion": "13"}}})
    feed(w, {"type": "ADDED", "object": {**claim, "metadata": {**claim["metadata"], "name": "b"}}})
    feed(w, {"type": "DELETED", "object": {**claim, "metadata": {**claim["metadata"], "resourceVersion": "14"}}})
    assert seen == [("MODIFIED", "a", "13"), ("ADDED", "b", "12"), ("DELETED", "a", "14")]


@settings(max_examples=300, deadline=None)
@given(events=st.lists(st.tuples(st.sampled_from(["ADDED", "MODIFIED", "DELETED"]), st.sampled_from("abc"),
                                 st.integers(1, 30)), max_size=30))
def test_skipping_what_the_inventory_holds_files_what_filing_everything_files(events):
    """Events lag, repeat and reorder, and a name is reused by a new uid. As the API server does, one
    version of a name is one object (its content, uid included, follows from name and version)."""
    def obj(name, version):
        uid = f"{name}-{version // 10}"  # the name is reused every ten versions
        return {"apiVersion": kinds.METAL3_API_VERSION, "kind": "IPClaim",
                "metadata": {"name": name, "namespace": "ns", "resourceVersion": str(version), "uid": uid},
                "spec": {"pool": {"name": f"p{version % 3}"}}}

    inventories = []
    for skip in (False, True):
        inventory = Inventory()

        def on_event(kind, obj, inventory=inventory):
            (inventory.remove if kind == "DELETED" else inventory.upsert)(obj)

        w = watch(on_event, known=inventory.holds if skip else None)
        for kind, name, version in events:
            feed(w, {"type": kind, "object": obj(name, version)})
        inventories.append(inventory)
    plain, skipping = inventories
    assert skipping.objects == plain.objects
    assert skipping._tombstones == plain._tombstones
