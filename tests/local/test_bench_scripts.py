"""Every benchmark docs/benchmarks.md names runs: each script starts as ``python -m bench.NAME`` and answers
``--help``.

The benchmarks share ``bench/harness.py``; a helper renamed or moved there
breaks the scripts that import it only when they are run, long after.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

BENCH = Path(__file__).resolve().parents[2] / "bench"
SCRIPTS = sorted(p.stem for p in BENCH.glob("*.py") if 'if __name__ == "__main__"' in p.read_text())


def test_the_benchmarks_page_names_every_benchmark_script():
    readme = (BENCH.parent / "docs" / "benchmarks.md").read_text()
    assert SCRIPTS and all(f"python -m bench.{name}" in readme for name in SCRIPTS), SCRIPTS


@pytest.mark.parametrize("name", SCRIPTS)
def test_a_benchmark_script_starts_and_answers_help(name):
    done = subprocess.run([sys.executable, "-m", f"bench.{name}", "--help"], capture_output=True, text=True,
                          timeout=120, cwd=BENCH.parent)
    assert done.returncode == 0 and "usage" in done.stdout, done.stderr[-2000:]
