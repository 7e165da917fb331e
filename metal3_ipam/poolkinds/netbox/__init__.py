"""NetBoxIPPool (``netbox.metal3-ipam.io``): addresses asked of a NetBox server by the key each claim carries;
the pool's spec, NetBox's answers, the asynchronous client, the asks and the sweep of what no claim carries."""
