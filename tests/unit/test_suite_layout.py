"""The test suite collects as one: ``tox`` runs ``pytest tests``, and no folder of tests is a package, so every
module of tests/ shares one namespace: one basename in two folders stops collection of the whole run. Test
modules share code through the helper modules (tests/unit/helpers, on pytest's ``pythonpath``) and
``conftest.py`` fixtures, never by importing one another."""

from __future__ import annotations

import ast
from collections import Counter
from pathlib import Path

TESTS = Path(__file__).resolve().parents[1]
UNIT = TESTS / "unit"


def _modules(folder: Path) -> list[Path]:
    return [p for p in folder.rglob("*.py") if "__pycache__" not in p.parts]


def test_no_two_test_modules_share_a_basename():
    # A package (a folder with __init__.py, such as a kind of pool the tests register) has its own namespace.
    loose = [p for p in _modules(TESTS) if not (p.parent / "__init__.py").exists()]
    names = Counter(p.name for p in loose)
    assert not [n for n, count in names.items() if count > 1 and n != "conftest.py"], sorted(
        str(p.relative_to(TESTS)) for p in loose if names[p.name] > 1 and p.name != "conftest.py")


def test_no_unit_test_module_imports_another():
    importing = []
    for path in _modules(UNIT):
        for node in ast.walk(ast.parse(path.read_text())):
            names = ([a.name for a in node.names] if isinstance(node, ast.Import)
                     else [node.module or ""] if isinstance(node, ast.ImportFrom) else [])
            importing += [f"{path.relative_to(TESTS)} imports {n}" for n in names if n.split(".")[0].startswith("test_")]
    assert not importing, importing


def test_unit_tests_open_no_socket_and_start_no_process():
    """``tox -e unit`` is pure: what needs a socket or a process of its own is in tests/local."""
    impure = ("socket", "subprocess", "multiprocessing", "http.server", "http.client", "aiohttp", "urllib.request")
    found = []
    for path in _modules(UNIT):
        for node in ast.walk(ast.parse(path.read_text())):
            names = ([a.name for a in node.names] if isinstance(node, ast.Import)
                     else [node.module or ""] if isinstance(node, ast.ImportFrom) else [])
            found += [f"{path.relative_to(TESTS)} imports {n}" for n in names
                      if any(n == i or n.startswith(f"{i}.") for i in impure)]
    assert not found, found
