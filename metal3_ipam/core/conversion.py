"""Answering a ConversionReview: each object converted by its kind of pool, or the Failure of the first that
cannot be.

The API server sends a ConversionReview for a kind whose CRD serves several versions through the webhook; each
kind that does says how in ``PoolKind.convert``. No I/O: a review in, its response out.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from metal3_ipam.core import poolkind


# Where the webhook server answers ConversionReviews (the CRDs' conversion webhooks name it).
CONVERSION_PATH = "/convert"


class ConversionError(ValueError):
    """An object that cannot be converted: which object, field and value, and why."""

    def __init__(self, obj: str, field: str, value: object, message: str) -> None:
        super().__init__(f"{obj}: {field}: {message} (value: {value!r})")


def object_name(obj: Mapping[str, Any]) -> str:
    """``Kind/[namespace/]name`` of an object under conversion, as its errors name it."""
    meta = obj.get("metadata") if isinstance(obj.get("metadata"), Mapping) else {}
    where = f"{meta.get('namespace')}/" if meta.get("namespace") else ""
    return f"{obj.get('kind')}/{where}{meta.get('name', '?')}"


def convert(obj: Mapping[str, Any], desired: str) -> dict[str, Any]:
    """``obj`` at ``desired`` apiVersion, by its kind's ``convert``; raises ConversionError."""
    converting = {kind.kind[1]: kind for kind in poolkind.REGISTRY.values() if kind.convert is not None}
    kind = obj.get("kind")
    if kind not in converting:
        raise ConversionError(object_name(obj), "kind", kind, f"is not one of {', '.join(sorted(converting))}")
    return converting[kind].convert(obj, desired)


def convert_review(review: Mapping[str, Any]) -> dict[str, Any]:
    """The response to an ``apiextensions.k8s.io/v1`` ConversionReview: every object converted, or a
    Failure naming the first one that cannot be (the API server then converts none)."""
    request = review.get("request") if isinstance(review, Mapping) else None
    request = request if isinstance(request, Mapping) else {}
    try:
        objects = request.get("objects")
        if not isinstance(objects, list) or not all(isinstance(o, Mapping) for o in objects):
            raise ConversionError("ConversionReview", "request.objects", objects, "must be a list of objects")
        return review_response(review, [convert(o, request.get("desiredAPIVersion")) for o in objects])
    except ConversionError as err:
        return review_response(review, [], err)


def review_response(review: Mapping[str, Any], converted: list, failure: ConversionError | None = None
                    ) -> dict[str, Any]:
    """The answer to a ConversionReview: its objects ``converted``, or the Failure of one that could not be
    (keys in this order: ``convertedObjects`` before ``result``, so an answer can be written out object by
    object before its result)."""
    request = review.get("request") if isinstance(review, Mapping) else None
    request = request if isinstance(request, Mapping) else {}
    response: dict[str, Any] = {"uid": request.get("uid", ""), "convertedObjects": [] if failure else converted,
                                "result": {"status": "Failure", "message": str(failure)} if failure
                                else {"status": "Success"}}
    return {"apiVersion": review.get("apiVersion", "apiextensions.k8s.io/v1") if isinstance(review, Mapping)
            else "apiextensions.k8s.io/v1", "kind": "ConversionReview", "response": response}
