"""Where the checkout the tests belong to lies, whichever folder of tests a module is in."""

from __future__ import annotations

from pathlib import Path

REPO = Path(__file__).resolve().parents[3]
TESTS = REPO / "tests"
