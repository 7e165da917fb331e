"""Fixtures of the controller's tests: the garbage collector as the controller runs it, what it walks, and pools
built as the largest are."""

from __future__ import annotations

import gc

import pytest

from metal3_ipam.controller import workers as workers_module


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


@pytest.fixture
def big_pools(monkeypatch):
    """Every pool built the way a pool of PAUSE_AT claims and addresses is: collector paused, memory frozen."""
    monkeypatch.setattr(workers_module, "PAUSE_AT", 0)
