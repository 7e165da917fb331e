"""A kind of pool lives in its package: outside it, only the one list of kinds (``poolkinds/__init__.py``) names
it. The core, the runtime, the CRD generator, the command line and the demo speak of "a kind of pool" and "an
outside IPAM" and learn the rest from the registry. The test harnesses (``metal3_ipam/testing``) start the real
systems and may name them."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from paths import REPO

PACKAGE = REPO / "metal3_ipam"
LIST_OF_KINDS = PACKAGE / "poolkinds" / "__init__.py"
# The Go providers' command lines, which the image takes as they are (a matter of deployment, not of a kind of pool):
# the Go in-cluster provider's main.go is named there as the program whose flags these are.
GO_COMMAND_LINES = PACKAGE / "goflags.py"

# How each kind is named; Kubernetes' own "in-cluster" configuration (a pod's service account) is no kind.
NAMES = {
    "netbox": re.compile(r"netbox", re.IGNORECASE),
    "incluster": re.compile(r"incluster|in-cluster (provider|kind|pool|ip|prefix)", re.IGNORECASE),
}


def _files() -> list[Path]:
    return sorted(path for path in PACKAGE.rglob("*") if path.is_file() and "__pycache__" not in path.parts
                  and PACKAGE / "testing" not in path.parents)


@pytest.mark.parametrize("package", sorted(NAMES))
def test_only_its_package_and_the_list_of_kinds_name_a_kind(package):
    own = PACKAGE / "poolkinds" / package
    naming = [path.relative_to(PACKAGE.parent).as_posix() for path in _files()
              if NAMES[package].search(path.read_text(encoding="utf-8", errors="replace"))
              and own not in path.parents and path not in (LIST_OF_KINDS, GO_COMMAND_LINES)]
    assert naming == []


def test_the_list_of_kinds_is_found_and_names_every_kind():
    text = LIST_OF_KINDS.read_text(encoding="utf-8")
    assert all(name.search(text) for name in NAMES.values())
