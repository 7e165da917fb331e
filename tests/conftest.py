"""Every test runs with the kinds of pool registered, as the controller's entry points do.

The helper modules of the end-to-end folders have their asserts rewritten as the tests' are (a failed
``assert`` there shows its values): registered here, before any conftest.py below imports them.
"""

import pytest

from metal3_ipam import poolkinds  # noqa: F401

pytest.register_assert_rewrite(
    "controller_fixtures", "webhook_fixtures", "netbox_fixtures", "audit_record",  # tests/e2e
    "move_fixtures",  # tests/e2e/move
    "incluster_fixtures",  # tests/e2e/poolkinds/incluster
)
