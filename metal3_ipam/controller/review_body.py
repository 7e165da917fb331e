"""A review's body read before it is judged: an AdmissionReview or a ConversionReview as the API server sends
it, within bounds on its size and on what parsing it costs; anything else is :class:`Malformed`, which says
what is wrong (answered 400, or 413 past a bound).

A ConversionReview holds a whole LIST: it is walked object by object (:func:`read_conversion_body`), never
parsed at once. :func:`clipped` bounds what of a body's text is repeated in answers and log lines.
"""

from __future__ import annotations

import array
import json
import math
import re
from dataclasses import dataclass
from typing import Any, Callable, Iterator


def clipped(text: str, limit: int) -> str:
    """``text`` cut to at most ``limit`` characters, ending in "…" when cut."""
    return text if len(text) <= limit else text[:limit - 1] + "…"


# -- reading a review -------------------------------------------------------------------

# The largest body read. The API server sends an AdmissionReview of the object as it came in a
# request (kube-apiserver's MaxRequestBodyBytes: 3 MiB; the mutating hook sees it before the CRD
# schema's caps do) and, on an update or a delete, the object as stored (bounded by etcd's request
# limit, 1.5 MiB by default; some clusters raise it towards the 3 MiB the API server accepts),
# re-encoded as JSON, plus an envelope of a few KiB (uid, kinds, userInfo with its groups). Two
# objects of 3 MiB and 256 KiB of envelope cover everything it can send; a larger body is not
# from it and is refused with 413 before it is read.
MAX_REVIEW_BYTES = 2 * 3 * 1024 * 1024 + 256 * 1024
# Objects and lists a body may hold (its "{" and "[" outside strings: an object's annotations may
# hold 256 KiB of brackets). The largest review the CRD schemas let through has a few thousand (256 pool
# entries, 4096 preAllocations in one map, managedFields); this bound keeps a body's parsed form
# under ~15 times its size (a body of empty lists would be ~25 times).
MAX_REVIEW_CONTAINERS = 100_000
REVIEW_VERSION = "admission.k8s.io/v1"
OPERATIONS = ("CREATE", "UPDATE", "DELETE", "CONNECT")
MAX_UID_CHARS = 128  # echoed in the answer; the API server's are 36
# The request's fields that are read, or that the API server always sends in this shape.
_REQUEST_FIELDS: dict[str, tuple[type, ...]] = {
    "uid": (str,), "operation": (str,), "kind": (dict,), "resource": (dict,), "subResource": (str,),
    "requestKind": (dict,), "requestResource": (dict,), "requestSubResource": (str,), "name": (str,),
    "namespace": (str,), "object": (dict, type(None)), "oldObject": (dict, type(None)), "userInfo": (dict,),
    "dryRun": (bool,), "options": (dict, type(None)),
}


class Malformed(ValueError):
    """A body that is not an AdmissionReview the API server would send: answered 400, or 413."""

    def __init__(self, reason: str, status: int = 400) -> None:
        super().__init__(clipped(reason, 200))
        self.status = status


def _no_constant(name: str) -> Any:
    raise Malformed(f"{name} is not a JSON value")


def _finite(text: str) -> float:
    value = float(text)
    if not math.isfinite(value):
        raise Malformed(f"the number {clipped(text, 40)} is out of range")
    return value


_JSON_STRING = re.compile(rb'"[^"\\]*(?:\\.[^"\\]*)*"', re.S)


def _containers(body: bytes | bytearray) -> int:
    """The objects and lists a JSON body holds, brackets inside its strings not counted (an annotation may hold
    256 KiB of them): exact for as much of the body as parses."""
    bare = _JSON_STRING.sub(b'""', body)
    return bare.count(b"{") + bare.count(b"[")


def _json_object(body: bytes | bytearray) -> dict:
    """A review's body parsed, within the bounds on its size and its objects and lists; else :class:`Malformed`."""
    if len(body) > MAX_REVIEW_BYTES:
        raise Malformed(f"the body has {len(body)} bytes; at most {MAX_REVIEW_BYTES} are read", 413)
    if body.count(b"{") + body.count(b"[") > MAX_REVIEW_CONTAINERS \
            and _containers(body) > MAX_REVIEW_CONTAINERS:
        raise Malformed(f"the body holds more than {MAX_REVIEW_CONTAINERS} objects and lists", 413)
    try:
        review = json.loads(body, parse_constant=_no_constant, parse_float=_finite)
    except RecursionError:
        raise Malformed("the body is nested too deeply") from None
    except Malformed:
        raise
    except ValueError as err:  # UnicodeDecodeError too; and integers of over 4300 digits
        raise Malformed(f"the body is not JSON: {err}") from None
    if not isinstance(review, dict):
        raise Malformed("the body is not a JSON object")
    return review


def _enveloped(body: bytes | bytearray, api_version: str, kind: str) -> tuple[dict, dict]:
    """A review of ``api_version`` and ``kind`` and its ``request`` object, or :class:`Malformed`."""
    review = _json_object(body)
    if review.get("apiVersion") != api_version or review.get("kind") != kind:
        raise Malformed(f"not a{'n' if kind[0] in 'AEIOU' else ''} {kind} of {api_version} (apiVersion "
                        f"{_shown(review.get('apiVersion'))}, kind {_shown(review.get('kind'))})")
    request = review.get("request")
    if not isinstance(request, dict):
        raise Malformed(f"request is {_shown(request)}, not an object")
    return review, request


def read_review(body: bytes | bytearray) -> tuple[str, dict]:
    """The apiVersion and ``request`` of an AdmissionReview body, or :class:`Malformed` saying what is wrong."""
    _, request = _enveloped(body, REVIEW_VERSION, "AdmissionReview")
    for name, types in _REQUEST_FIELDS.items():
        if name in request and not isinstance(request[name], types):
            raise Malformed(f"request.{name} is {_shown(request[name])}, not "
                            + " or ".join("null" if t is type(None) else _JSON_TYPES[t] for t in types))
    uid, operation, kind = request.get("uid"), request.get("operation"), request.get("kind")
    if not uid or len(uid) > MAX_UID_CHARS:
        raise Malformed(f"request.uid {_shown(uid)} is missing or longer than {MAX_UID_CHARS} characters")
    if operation not in OPERATIONS:
        raise Malformed(f"request.operation {_shown(operation)} is not one of {', '.join(OPERATIONS)}")
    if not isinstance(kind, dict) or not all(isinstance(kind.get(k, ""), str) for k in ("group", "version", "kind")):
        raise Malformed(f"request.kind {_shown(kind)} is not a group, version and kind")
    return REVIEW_VERSION, request


_JSON_TYPES = {str: "a string", dict: "an object", bool: "a boolean"}

CONVERSION_REVIEW_VERSION = "apiextensions.k8s.io/v1"


# The largest body ``/convert`` reads. kube-apiserver converts a custom resource as the storage of the version
# asked decodes it, one object per ConversionReview (measured with 1.35: a LIST of 40 pools at v1alpha1 comes
# as reviews of one object each); but its converter takes lists too (apiextensions-apiserver's webhook
# converter sends every object of a list that is not at the desired version in one review), and its request
# limit (3 MiB) bounds each object, not a list. 32 MiB holds tens of thousands of the pools converted as the API
# server stores them (about 600 bytes each with one writer's managedFields), or ten objects at that limit; a
# larger body is refused (413). A review is read object by object (:func:`read_conversion_body`) and its
# answer written so: one costs its body, its answer and the parse of one object, never the parse of the
# whole list; the bodies of ConversionReviews held at once are bounded apart from the AdmissionReviews'
# (``Limits``), so a conversion under way never has a pool's create refused.
MAX_CONVERSION_BYTES = 32 * 1024 * 1024
# The bytes of a conversion body per object of it, at least: the API server's objects carry apiVersion, kind
# and metadata, so a body of many tiny objects (each costing the reader more than its bytes) is not one.
MIN_CONVERTED_OBJECT_BYTES = 64
_WHITESPACE = re.compile(rb"[ \t\n\r]*")
_FIRST_READ = 4096  # bytes a value is first looked for in; four times more each time it is longer


@dataclass(frozen=True)
class ConversionBody:
    """A ConversionReview's body as :func:`read_conversion_body` found it: its envelope (the review with
    ``request.objects`` empty) and where each object lies in the body (parsed again, one at a time, to be
    converted)."""

    review: dict
    body: bytes | bytearray
    starts: array.array
    ends: array.array

    def objects(self) -> Iterator[dict]:
        for start, end in zip(self.starts, self.ends):
            yield _json_object(self.body[start:end])


def read_conversion_body(body: bytes | bytearray) -> ConversionBody:
    """A ConversionReview body as the API server sends it to a CRD's conversion webhook (its ``request`` has a
    uid, the desired apiVersion and a list of objects; whether each can be converted is ``core.conversion``'s
    to say, in the answer), read without
    ever parsing more than one value of it at a time: each object of ``request.objects`` and each other
    value at most :data:`MAX_REVIEW_BYTES` long and within :data:`MAX_REVIEW_CONTAINERS` objects and lists,
    as a whole AdmissionReview is; the review but its objects within the same bounds; the objects at least
    :data:`MIN_CONVERTED_OBJECT_BYTES` each on average. Else :class:`Malformed` (413 past a bound)."""
    if len(body) > MAX_CONVERSION_BYTES:
        raise Malformed(f"the body has {len(body)} bytes; at most {MAX_CONVERSION_BYTES} are read", 413)
    reader = _ConversionReader(body)
    review = reader.envelope()
    if review.get("apiVersion") != CONVERSION_REVIEW_VERSION or review.get("kind") != "ConversionReview":
        raise Malformed(f"not a ConversionReview of {CONVERSION_REVIEW_VERSION} (apiVersion "
                        f"{_shown(review.get('apiVersion'))}, kind {_shown(review.get('kind'))})")
    request = review.get("request")
    if not isinstance(request, dict):
        raise Malformed(f"request is {_shown(request)}, not an object")
    if reader.objects_seen != 1:
        raise Malformed("request.objects is missing" if not reader.objects_seen else "request.objects is given twice")
    uid, desired = request.get("uid"), request.get("desiredAPIVersion")
    if not isinstance(uid, str) or not uid or len(uid) > MAX_UID_CHARS:
        raise Malformed(f"request.uid {_shown(uid)} is missing or longer than {MAX_UID_CHARS} characters")
    if not isinstance(desired, str) or not desired:
        raise Malformed(f"request.desiredAPIVersion {_shown(desired)} is not an apiVersion")
    return ConversionBody(review, body, reader.starts, reader.ends)


class _ConversionReader:
    """Walks a ConversionReview body: the top-level object and its ``request`` key by key, the objects of
    ``request.objects`` one at a time, every other value parsed whole (within the bounds)."""

    def __init__(self, body: bytes | bytearray) -> None:
        self.body = body
        self.envelope_bytes = 0  # of the values parsed that are not objects of request.objects
        self.objects_seen = 0
        self.starts, self.ends = array.array("Q"), array.array("Q")

    def envelope(self) -> dict:
        at = self._skip(0)
        if self.body[at:at + 1] != b"{":
            raise Malformed("the body is not a JSON object")
        review, at = self._object(at, self._top_field)
        if self._skip(at) != len(self.body):
            raise Malformed("the body is not JSON: extra data after the review")
        return review

    def _top_field(self, key: str, at: int) -> tuple[Any, int]:
        if key == "request" and self.body[at:at + 1] == b"{":
            return self._object(at, self._request_field)
        return self._value(at)

    def _request_field(self, key: str, at: int) -> tuple[Any, int]:
        if key != "objects":
            return self._value(at)
        self.objects_seen += 1
        if self.body[at:at + 1] != b"[":
            value, end = self._value(at)
            raise Malformed(f"request.objects is {_shown(value)}, not a list of objects")
        at = self._skip(at + 1)
        if self.body[at:at + 1] == b"]":
            return [], at + 1
        while True:
            if self.body[at:at + 1] != b"{":
                value, _ = self._value(at)
                raise Malformed(f"request.objects holds {_shown(value)}, not only objects")
            _, end = _value_at(self.body, at)
            self.starts.append(at)
            self.ends.append(end)
            if len(self.starts) * MIN_CONVERTED_OBJECT_BYTES > len(self.body):
                raise Malformed(f"request.objects holds more than one object per {MIN_CONVERTED_OBJECT_BYTES} "
                                "bytes of the body", 413)
            at = self._skip(end)
            if self.body[at:at + 1] == b"]":
                return [], at + 1
            if self.body[at:at + 1] != b",":
                raise Malformed("the body is not JSON: request.objects is not a list")
            at = self._skip(at + 1)

    def _object(self, at: int, field: Callable[[str, int], tuple[Any, int]]) -> tuple[dict, int]:
        """The object at ``at`` (a ``{``), each value read by ``field(key, start)``; and the byte after it."""
        out: dict[str, Any] = {}
        at = self._skip(at + 1)
        if self.body[at:at + 1] == b"}":
            return out, at + 1
        while True:
            key, at = self._value(at)
            at = self._skip(at)
            if not isinstance(key, str) or self.body[at:at + 1] != b":":
                raise Malformed("the body is not JSON: an object's key is not a string followed by ':'")
            out[key], at = field(key, self._skip(at + 1))
            at = self._skip(at)
            if self.body[at:at + 1] == b"}":
                return out, at + 1
            if self.body[at:at + 1] != b",":
                raise Malformed("the body is not JSON: expected ',' or '}' in an object")
            at = self._skip(at + 1)

    def _value(self, at: int) -> tuple[Any, int]:
        value, end = _value_at(self.body, at)
        self.envelope_bytes += end - at
        if self.envelope_bytes > MAX_REVIEW_BYTES:
            raise Malformed(f"the review holds more than {MAX_REVIEW_BYTES} bytes besides its objects", 413)
        return value, end

    def _skip(self, at: int) -> int:
        return _WHITESPACE.match(self.body, at).end()  # type: ignore[union-attr]


def _value_at(body: bytes | bytearray, at: int) -> tuple[Any, int]:
    """The JSON value that starts at byte ``at`` of ``body``, and the byte after it: parsed from a slice that
    grows until it holds the value, at most :data:`MAX_REVIEW_BYTES` long (longer: 413), within the bounds
    of :func:`_json_object`."""
    size = _FIRST_READ
    while True:
        piece = body[at:at + size]
        whole = at + size >= len(body)
        try:
            text = piece.decode()
        except UnicodeDecodeError as err:
            if whole or err.start < len(piece) - 3:
                raise Malformed(f"the body is not JSON: {err}") from None
            text = piece[:err.start].decode()  # a character cut at the slice's end
        if piece.count(b"{") + piece.count(b"[") > MAX_REVIEW_CONTAINERS and _containers(piece) > MAX_REVIEW_CONTAINERS:
            raise Malformed(f"a value holds more than {MAX_REVIEW_CONTAINERS} objects and lists", 413)
        try:
            value, end = _DECODER.raw_decode(text)
        except RecursionError:
            raise Malformed("the body is nested too deeply") from None
        except json.JSONDecodeError as err:
            cut = err.pos >= len(text) - 8 or err.msg.startswith("Unterminated string")
            if whole or not cut:
                raise Malformed(f"the body is not JSON: {err}") from None
            if size >= MAX_REVIEW_BYTES:
                raise Malformed(f"a value of the body is longer than {MAX_REVIEW_BYTES} bytes", 413)
            size = min(MAX_REVIEW_BYTES, size * 4)
            continue
        except ValueError as err:  # integers of over 4300 digits
            raise Malformed(f"the body is not JSON: {err}") from None
        if end >= len(text) and not whole and type(value) in (int, float):  # it may go on past the slice
            if size >= MAX_REVIEW_BYTES:
                raise Malformed(f"a value of the body is longer than {MAX_REVIEW_BYTES} bytes", 413)
            size = min(MAX_REVIEW_BYTES, size * 4)
            continue
        return value, at + len(text[:end].encode())


_DECODER = json.JSONDecoder(parse_constant=_no_constant, parse_float=_finite)


def _shown(value: Any) -> str:
    """A value of a malformed request, short enough for a log line."""
    if value is None:
        return "null"
    if isinstance(value, (dict, list)):
        return f"a{'n object' if isinstance(value, dict) else ' list'} of {len(value)}"
    return clipped(repr(value), 60)

