"""The test suite collects as one: ``tox`` runs ``pytest tests``, and the unit and end-to-end folders share
one module namespace (they are not packages), so one basename in both stops collection of the whole run."""

from __future__ import annotations

from collections import Counter
from pathlib import Path

TESTS = Path(__file__).resolve().parents[1]


def test_no_two_test_modules_share_a_basename():
    names = Counter(p.name for p in TESTS.rglob("*.py") if "__pycache__" not in p.parts)
    assert not [n for n, count in names.items() if count > 1 and n != "conftest.py"], sorted(
        str(p.relative_to(TESTS)) for p in TESTS.rglob("*.py") if names[p.name] > 1 and p.name != "conftest.py")
