"""OpenStackFloatingIPPool (``openstack.metal3-ipam.io``): floating IPs of an OpenStack project handed to Cluster
API claims, asked of Neutron by the key each claim carries; the pool's spec, the Neutron client, the asks and the
sweep of what no claim carries."""
