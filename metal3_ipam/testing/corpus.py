"""The corpora of manifests: tests/data/invalid, each file one thing the API must refuse, and
tests/data/valid, each file manifests that look wrong and are not.

A file's documents are applied in order; the last one is the subject, the
ones before it the state it meets (they must be accepted; claims among them
are served before the subject comes). The subject is refused: created, or
changed when an earlier document has its kind and name, or deleted when the
header says ``# operation: delete``. The header names what the refusal's
message must contain (``# expect:``, a field path) and which layer refuses it
(``# layer: schema`` — the CRD's OpenAPI schema or CEL rules — or
``webhook``, the admission webhook; offline, ``metal3-ipam validate`` refuses
both kinds).

A valid file's documents are all accepted, in order; ``# warns:`` names a
text one of the warnings must contain.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import yaml

SafeLoader = getattr(yaml, "CSafeLoader", yaml.SafeLoader)


@dataclass(frozen=True)
class Case:
    path: Path
    expect: str
    layer: str
    operation: str  # create, update or delete
    setup: tuple[dict, ...]
    subject: dict
    values: tuple[str, ...] = ()

    @property
    def name(self) -> str:
        return self.path.stem


def key(obj: dict) -> tuple[str, str, str]:
    return (obj["apiVersion"].rpartition("/")[0], obj["kind"], obj["metadata"]["name"])


def read(path: Path) -> Case:
    text = path.read_text()
    header = {}
    values = []
    for line in text.splitlines():
        if not line.startswith("#"):
            break
        word, sep, value = line[1:].strip().partition(":")
        if sep and word in ("expect", "layer", "operation"):
            header[word] = value.strip()
        elif sep and word == "value":
            values.append(value.strip())
    docs = [d for d in yaml.load_all(text, Loader=SafeLoader) if d]
    if not docs or "expect" not in header or header.get("layer") not in ("schema", "webhook"):
        raise ValueError(f"{path}: needs '# expect:', '# layer: schema|webhook' and at least one document")
    *setup, subject = docs
    operation = header.get("operation") or ("update" if any(key(d) == key(subject) for d in setup) else "create")
    return Case(path, header["expect"], header["layer"], operation, tuple(setup), subject, tuple(values))


def cases(directory: Path) -> list[Case]:
    return [read(p) for p in sorted(directory.glob("*.yaml"))]


@dataclass(frozen=True)
class Valid:
    path: Path
    warns: str | None
    docs: tuple[dict, ...]

    @property
    def name(self) -> str:
        return self.path.stem


def valid_cases(directory: Path) -> list[Valid]:
    found = []
    for path in sorted(directory.glob("*.yaml")):
        text = path.read_text()
        warns = next((line.partition(":")[2].strip() for line in text.splitlines()
                      if line.startswith("# warns:")), None)
        found.append(Valid(path, warns, tuple(d for d in yaml.load_all(text, Loader=SafeLoader) if d)))
    return found
