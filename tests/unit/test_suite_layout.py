"""The test suite collects as one: ``tox`` runs ``pytest tests``, and the unit and end-to-end folders share
one module namespace (they are not packages), so one basename in both stops collection of the whole run."""

from __future__ import annotations

import ast
from collections import Counter
from pathlib import Path

TESTS = Path(__file__).resolve().parents[1]


def test_no_two_test_modules_share_a_basename():
    names = Counter(p.name for p in TESTS.rglob("*.py") if "__pycache__" not in p.parts)
    assert not [n for n, count in names.items() if count > 1 and n != "conftest.py"], sorted(
        str(p.relative_to(TESTS)) for p in TESTS.rglob("*.py") if names[p.name] > 1 and p.name != "conftest.py")


def test_no_end_to_end_test_module_imports_another():
    """What end-to-end modules share is in a conftest.py or a helper module, so each runs alone."""
    e2e = TESTS / "e2e"
    test_modules = {p.stem for p in e2e.rglob("test_*.py")}
    found = []
    for path in e2e.rglob("*.py"):
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Import):
                names = [alias.name for alias in node.names]
            elif isinstance(node, ast.ImportFrom) and node.module:
                names = [node.module]
            else:
                continue
            found += [f"{path.relative_to(TESTS)} imports {name}"
                      for name in names if name.split(".")[0] in test_modules]
    assert not found, found
