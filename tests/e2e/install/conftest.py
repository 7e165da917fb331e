"""Fixtures of the install tests: config/default rendered, its manager container, and the image built."""

from __future__ import annotations

import time

import pytest

from controller_fixtures import REPO, SUMMARY
from metal3_ipam import packaging
from metal3_ipam.testing import image as image_mod


def report(request, line: str) -> None:
    """A line in pytest's summary at the end, captured output or not (-s)."""
    request.config.stash.setdefault(SUMMARY, []).append(line)


@pytest.fixture(scope="module")
def rendered(kustomize_binary) -> list[dict]:
    return packaging.render(REPO / "config" / "default", kustomize_binary)


@pytest.fixture(scope="module")
def manager(rendered) -> tuple[dict, dict]:
    (deployment,) = [o for o in rendered if o["kind"] == "Deployment"]
    pod = deployment["spec"]["template"]["spec"]
    (container,) = [c for c in pod["containers"] if c["name"] == "manager"]
    return pod, container


@pytest.fixture(scope="module")
def built(manager, request) -> image_mod.Built:
    """The Dockerfile built under the name the manifest runs (podman must work: no skipping)."""
    _, container = manager
    try:
        started = time.monotonic()
        base = image_mod.base_image()
        base_seconds = time.monotonic() - started
        built = image_mod.build(REPO, container["image"], base)
    except image_mod.ImageError as err:
        pytest.fail(f"the image could not be built:\n{err}", pytrace=False)
    report(request, f"image {built.tag}: {built.size / 1e6:.0f} MB, built in {built.seconds:.0f}s "
                    f"(base {base} ready in {base_seconds:.0f}s)")
    return built
