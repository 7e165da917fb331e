"""What the tests of the in-cluster provider's pool kinds share: an :class:`InCluster` per test."""

from __future__ import annotations

from typing import Iterable

import pytest

from incluster_fixtures import InCluster


@pytest.fixture
def incluster(api_client, kube) -> Iterable[InCluster]:
    """The test's namespace for the in-cluster pool kinds, with further namespaces and cluster-scoped pools
    of its own, cleaned up afterwards."""
    ic = InCluster(api_client, kube)
    try:
        yield ic
    finally:
        ic.cleanup()
