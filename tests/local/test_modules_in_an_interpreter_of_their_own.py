"""Modules of the package run as commands, or imported first, in an interpreter of their own."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def test_generated_files_are_in_sync():
    result = subprocess.run(
        [sys.executable, "-m", "metal3_ipam.crds", "--check"],
        cwd=ROOT,
        capture_output=True,
        text=True,
    )
    assert result.returncode == 0, result.stderr


def test_the_prefix_pools_core_may_be_imported_first():
    """The prefix pools' spec module imported before anything else (a tool or test of its own) imports."""
    run = subprocess.run([sys.executable, "-c", "import metal3_ipam.poolkinds.incluster.prefix_spec as p; print(p.BITS)"],
                         capture_output=True, text=True, timeout=60)
    assert (run.returncode, run.stdout.strip()) == (0, "128"), run.stderr
