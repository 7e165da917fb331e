"""Fixtures of the controller's tests: the garbage collector as the controller runs it, and what it walks."""

from __future__ import annotations

import gc

import pytest


@pytest.fixture
def collector():
    """The collector as the controller runs it: on, everything kept so far frozen; left on and unfrozen."""
    enabled = gc.isenabled()
    gc.enable()
    gc.collect()
    gc.freeze()
    yield
    gc.unfreeze()
    gc.enable() if enabled else gc.disable()
    gc.collect()


@pytest.fixture
def walked():
    """The objects each full collection walks (everything tracked and not frozen when it starts)."""
    sizes: list[int] = []

    def callback(phase: str, info: dict) -> None:
        if phase == "start" and info["generation"] == 2:
            sizes.append(len(gc.get_objects()))

    gc.callbacks.append(callback)
    yield sizes
    gc.callbacks.remove(callback)
