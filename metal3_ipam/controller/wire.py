"""Objects to and from the API server's JSON: bodies encoded, answers decoded without what nothing reads.

An IPPool with 20,000 bindings comes as about 430 KiB of JSON, half of it
managedFields (one entry per key of ``status.indexes``), and it comes twice
for every status write: the PATCH answer and the watch event. Built whole
into Python objects that ``slim`` then drops, it cost more than the rest of a
claim's work. Here objects are decoded (by msgspec) against a schema of the
fields ``slim`` reads: the rest is skipped by the decoder, never built.

Whatever does not fit the schema (a Status, an object whose metadata is not
a map) is decoded plainly, so nothing is lost: ``slim`` and the callers see
the same dicts as before, less the fields they never read.

A watch event about a version already known (the echo of our own write,
whose answer was filed) is not decoded past its metadata: for a big pool,
that echo is the whole object again.

Request bodies are encoded by msgspec too: a big pool's status (20,000
``status.indexes`` entries) takes about a tenth of ``json.dumps``'s time.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

import msgspec

from ..core.slim import METADATA_READ

_Metadata = msgspec.defstruct("Metadata", [(field, Any, None) for field in METADATA_READ])
_TOP = ("apiVersion", "kind", "metadata", "spec", "status")
_Object = msgspec.defstruct("Object", [("apiVersion", Any, None), ("kind", Any, None),
                                       ("metadata", _Metadata | None, None), ("spec", Any, None),
                                       ("status", Any, None)])
_Head = msgspec.defstruct("Head", [("metadata", _Metadata | None, None)])  # the rest is skipped
_Event = msgspec.defstruct("Event", [("type", Any, None), ("object", msgspec.Raw, msgspec.Raw(b"null"))])
_List = msgspec.defstruct("List", [("metadata", Any, None), ("items", list[msgspec.Raw] | None, None)])

_objects = msgspec.json.Decoder(_Object)
_heads = msgspec.json.Decoder(_Head)
_events = msgspec.json.Decoder(_Event)
_lists = msgspec.json.Decoder(_List)


def encode(body: Any) -> bytes:
    """A request body as JSON (UTF-8, as the API server reads it).

    msgspec writes a NaN or an infinity as null, which a merge patch reads as
    "remove this field"; such a body is refused here instead (ValueError), as
    ``json.dumps`` would. A body with no null in it contains neither.
    """
    data = msgspec.json.encode(body)
    if b"null" in data:
        json.dumps(body, allow_nan=False)  # raises on a NaN or an infinity
    return data


def decode_object(raw: bytes | str) -> Any:
    """One API object (apiVersion, kind, metadata, spec and status: what is read of it); anything else whole."""
    try:
        decoded = _objects.decode(raw)
    except msgspec.ValidationError:
        return json.loads(raw)
    if decoded.metadata is None or decoded.kind == "Status":
        return json.loads(raw)  # not an object of a kind (a Status has details, code, reason)
    out = {}
    for field in _TOP:
        value = getattr(decoded, field)
        if value is not None:
            out[field] = value
    out["metadata"] = _metadata_of(decoded.metadata)
    return out


def decode_event(raw: bytes, known: Callable[[dict], bool] | None = None) -> tuple[Any, Any, bool]:
    """A watch event's type, its object (an ERROR's Status whole), and whether it is no news.

    An ADDED or MODIFIED event whose metadata ``known`` says is no news is
    decoded no further: its object is then only its metadata.
    """
    event = _events.decode(raw)
    body = bytes(event.object)
    if event.type == "ERROR":
        return event.type, json.loads(body), False
    if known is not None and event.type in ("ADDED", "MODIFIED"):
        try:
            head = _heads.decode(body)
        except msgspec.ValidationError:
            head = None
        if head is not None and head.metadata is not None:
            meta = _metadata_of(head.metadata)
            if known(meta):
                return event.type, {"metadata": meta}, True
    return event.type, decode_object(body), False


def _metadata_of(meta: Any) -> dict:
    return {field: value for field in METADATA_READ if (value := getattr(meta, field)) is not None}


def decode_list(raw: bytes) -> dict:
    """A LIST answer: its metadata (resourceVersion, continue) and its items, each as ``decode_object`` makes it."""
    page = _lists.decode(raw)
    return {"metadata": page.metadata or {}, "items": [decode_object(bytes(item)) for item in page.items or ()]}
