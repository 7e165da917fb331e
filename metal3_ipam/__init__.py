"""metal3-ipam: an IP address manager for Cluster API, the Metal3 way."""
