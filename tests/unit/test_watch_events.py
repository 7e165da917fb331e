"""How the lean watch reads the events of one stream (the stream itself is tested against the API server)."""

from __future__ import annotations

import json
import logging

import pytest

from metal3_ipam.controller.api import Resource
from metal3_ipam.controller.watch import Gone, KindWatch, WatchFailed
from metal3_ipam.controller.wire import decode_event
from metal3_ipam.core import kinds


def watch(on_event) -> KindWatch:
    async def relist(kind, namespace):
        raise AssertionError("not listed here")
    w = KindWatch(None, Resource(kinds.METAL3_GROUP, kinds.METAL3_VERSION, "ipclaims"), kinds.IPCLAIM, "ns",
                  on_event, relist)
    w.version = "10"
    return w


def feed(w: KindWatch, event: dict) -> None:
    """One line of the stream, as the API server sends it."""
    w._event(*decode_event(json.dumps(event).encode()))


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
