"""Every test runs with the kinds of pool registered, as the controller's entry points do."""

from metal3_ipam import poolkinds  # noqa: F401
