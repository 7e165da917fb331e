"""The test suite collects as one: ``tox`` runs ``pytest tests``, and no folder of tests is a package, so every
module of tests/ shares one namespace: one basename in two folders stops collection of the whole run. Test
modules share code through helper modules (tests/unit/helpers, on pytest's ``pythonpath``; the end-to-end
helpers beside tests/e2e/conftest.py) and ``conftest.py`` fixtures, never by importing one another; and the
unit tests open no socket and start no process, so ``tox -e unit`` is pure."""

from __future__ import annotations

import ast
from collections import Counter
from pathlib import Path

TESTS = Path(__file__).resolve().parents[1]
UNIT = TESTS / "unit"


def _modules(folder: Path) -> list[Path]:
    return [p for p in folder.rglob("*.py") if "__pycache__" not in p.parts]


def _imported(path: Path) -> list[str]:
    names = []
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            names += [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom) and node.module:
            names.append(node.module)
    return names


def test_no_two_test_modules_share_a_basename():
    # A package (a folder with __init__.py, such as a kind of pool the tests register) has its own namespace.
    loose = [p for p in _modules(TESTS) if not (p.parent / "__init__.py").exists()]
    names = Counter(p.name for p in loose)
    assert not [n for n, count in names.items() if count > 1 and n != "conftest.py"], sorted(
        str(p.relative_to(TESTS)) for p in loose if names[p.name] > 1 and p.name != "conftest.py")


def test_no_end_to_end_test_module_imports_another():
    """What end-to-end modules share is in a conftest.py or a helper module, so each runs alone."""
    e2e = TESTS / "e2e"
    test_modules = {p.stem for p in e2e.rglob("test_*.py")}
    found = [f"{path.relative_to(TESTS)} imports {name}" for path in _modules(e2e) for name in _imported(path)
             if name.split(".")[0] in test_modules]
    assert not found, found


def test_no_unit_or_local_test_module_imports_another():
    found = [f"{path.relative_to(TESTS)} imports {name}" for folder in (UNIT, TESTS / "local")
             for path in _modules(folder) for name in _imported(path) if name.split(".")[0].startswith("test_")]
    assert not found, found


def test_unit_tests_open_no_socket_and_start_no_process():
    """``tox -e unit`` is pure: what needs a socket or a process of its own is in tests/local."""
    impure = ("socket", "subprocess", "multiprocessing", "http.server", "http.client", "aiohttp", "urllib.request")
    found = [f"{path.relative_to(TESTS)} imports {name}" for path in _modules(UNIT) for name in _imported(path)
             if any(name == i or name.startswith(f"{i}.") for i in impure)]
    assert not found, found
