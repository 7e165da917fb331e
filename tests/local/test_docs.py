"""The documentation: README.md says what the project is and gives the two commands; the pages
under docs/ build with MkDocs in strict mode, so a link to a missing page or anchor fails."""

from __future__ import annotations

import re
import shutil
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
README = ROOT / "README.md"


def build(config: Path, site: Path) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "mkdocs", "build", "--strict", "--config-file", str(config),
                           "--site-dir", str(site)], capture_output=True, text=True, timeout=300)


def test_the_docs_build_in_strict_mode(tmp_path):
    done = build(ROOT / "mkdocs.yml", tmp_path / "site")
    assert done.returncode == 0, done.stdout + done.stderr
    assert (tmp_path / "site" / "index.html").exists()


def test_a_link_to_a_missing_page_or_anchor_fails_the_docs_build(tmp_path):
    shutil.copy(ROOT / "mkdocs.yml", tmp_path / "mkdocs.yml")
    shutil.copytree(ROOT / "docs", tmp_path / "docs")
    claims = tmp_path / "docs" / "claims.md"
    claims.write_text(claims.read_text() + "\nSee [nothing](no-such-page.md) and [nowhere](install.md#no-such-anchor).\n")
    done = build(tmp_path / "mkdocs.yml", tmp_path / "site")
    assert done.returncode != 0
    assert "no-such-page.md" in done.stderr and "no-such-anchor" in done.stderr, done.stderr


def test_the_readme_is_short_and_gives_the_run_and_the_test_command():
    text = README.read_text()
    assert len(text.splitlines()) < 100
    assert "metal3-ipam demo" in text and "metal3-ipam run" in text
    assert "bash hack/test.sh" in text


def test_the_readme_points_at_pages_that_exist():
    links = re.findall(r"\]\((docs/[^)#]+)", README.read_text())
    assert links
    assert [link for link in links if not (ROOT / link).is_file()] == []


def test_ci_runs_the_test_command_the_readme_gives():
    run = (ROOT / ".ci" / "run").read_text()
    assert re.search(r"^exec bash .*hack/test\.sh\" \"\$@\"$", run, re.M), run
