"""What the tests of the controller's parts share: the API resources of the session's control plane."""

from __future__ import annotations

import pytest
from kubernetes import client

from metal3_ipam.controller.operator import discover


@pytest.fixture(scope="module")
def resources(control_plane):
    """The session control plane's resources of every kind the controller watches (``operator.discover``)."""
    with client.ApiClient(control_plane.configuration()) as api:
        return discover(api)
