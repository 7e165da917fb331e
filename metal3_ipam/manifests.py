"""Reading Kubernetes objects from files and folders, for the offline commands.

Accepts files or folders (searched recursively for *.yaml, *.yml, *.json),
multi-document YAML and ``kind: List`` documents. Problems with the files
themselves (unreadable, not YAML, not an object) are reported, not raised.
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass
from pathlib import Path

import yaml

SUFFIXES = (".yaml", ".yml", ".json")

# libyaml's loader, where PyYAML was built with it: a pool with thousands of
# preAllocations reads in a fraction of the pure-Python loader's time.
SafeLoader = getattr(yaml, "CSafeLoader", yaml.SafeLoader)


@dataclass(frozen=True)
class Loaded:
    path: str
    obj: dict


@dataclass(frozen=True)
class FileProblem:
    path: str
    message: str

    def __str__(self) -> str:
        return f"{self.path}: {self.message}"


class UsageError(Exception):
    pass


def expand(paths: list[str]) -> list[Path]:
    files: list[Path] = []
    for text in paths:
        path = Path(text)
        if path.is_dir():
            files += sorted(p for p in path.rglob("*") if p.suffix in SUFFIXES and p.is_file())
        elif path.exists():
            files.append(path)
        else:
            raise UsageError(f"{text}: no such file or directory")
    return files


def load(paths: list[str]) -> tuple[list[Loaded], list[FileProblem]]:
    objects: list[Loaded] = []
    problems: list[FileProblem] = []
    for path in expand(paths):
        try:
            text = path.read_text(encoding="utf-8")
        except (OSError, UnicodeDecodeError) as err:
            problems.append(FileProblem(str(path), f"cannot be read: {getattr(err, 'strerror', None) or err}"))
            continue
        try:
            documents = ([json.loads(text)] if path.suffix == ".json"
                         else list(yaml.load_all(text, Loader=SafeLoader)))
        except (yaml.YAMLError, ValueError) as err:
            where = getattr(err, "problem_mark", None)
            at = f" at line {where.line + 1}, column {where.column + 1}" if where else ""
            reason = getattr(err, "problem", None) or str(err).splitlines()[0]
            problems.append(FileProblem(str(path), f"is not valid {'JSON' if path.suffix == '.json' else 'YAML'}{at}: {reason}"))
            continue
        for number, doc in enumerate(documents, start=1):
            _collect(str(path), number, doc, objects, problems)
    return objects, problems


def _collect(path: str, number: int, doc: object, objects: list[Loaded], problems: list[FileProblem]) -> None:
    if doc is None:
        return
    if not isinstance(doc, dict) or not isinstance(doc.get("kind"), str):
        problems.append(FileProblem(path, f"document {number} is not a Kubernetes object (no kind)"))
        return
    if doc["kind"] == "List" or (doc["kind"].endswith("List") and isinstance(doc.get("items"), list)):
        items = doc.get("items")
        if items is not None and not isinstance(items, list):
            problems.append(FileProblem(path, f"document {number} is a {doc['kind']} whose items are not a list"))
            return
        for item in items or []:
            _collect(path, number, item, objects, problems)
        return
    if "metadata" in doc and not isinstance(doc["metadata"], dict):
        problems.append(FileProblem(path, f"document {number} ({doc['kind']}) has a metadata that is not an object"))
        return
    objects.append(Loaded(path, doc))


def relative(path: str) -> str:
    try:
        return os.path.relpath(path)
    except ValueError:
        return path
