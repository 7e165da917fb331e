"""Structured findings about user input: which object, which field, which value, and why."""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any


@dataclass(frozen=True)
class ObjectId:
    kind: str
    namespace: str
    name: str

    def __str__(self) -> str:
        return f"{self.kind}/{self.namespace}/{self.name}" if self.namespace else f"{self.kind}/{self.name}"


@dataclass(frozen=True)
class Problem:
    """One thing wrong with a field. ``warning`` findings do not make input invalid."""

    field: str
    value: object
    message: str
    warning: bool = False
    obj: ObjectId | None = field(default=None, compare=False)

    def __str__(self) -> str:
        where = f"{self.obj}: " if self.obj else ""
        level = "warning: " if self.warning else ""
        return f"{where}{level}{self.field}: {self.message} (value: {_show(self.value)})"


def object_id(obj: Any) -> ObjectId:
    """The kind, namespace and name a problem is reported under."""
    meta = obj.get("metadata") if isinstance(obj, Mapping) else None
    meta = meta if isinstance(meta, Mapping) else {}
    kind = obj.get("kind") if isinstance(obj, Mapping) else None
    return ObjectId(str(kind or "?"), str(meta.get("namespace") or ""), str(meta.get("name") or "?"))


def tagged(obj: Any, problems: Iterable[Problem]) -> list[Problem]:
    """``problems`` reported under ``obj``."""
    oid = object_id(obj)
    return [Problem(p.field, p.value, p.message, p.warning, oid) for p in problems]


def _show(value: object) -> str:
    text = repr(value) if not isinstance(value, str) else f'"{value}"'
    return text if len(text) <= 120 else text[:117] + "..."


def errors(problems: list[Problem]) -> list[Problem]:
    return [p for p in problems if not p.warning]
