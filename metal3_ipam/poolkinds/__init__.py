"""The kinds of pool this controller serves: one package each, and this one list.

Importing this package registers every kind in ``core.poolkind.REGISTRY``, in
the order below (the order of the generated manifests and of listings). The
core and the runtime read the registry and never name a kind; only the entry
points (the command line, the manifest generators, the test harnesses)
import this package.
"""

from __future__ import annotations

from metal3_ipam.core.poolkind import PoolKind, register
from metal3_ipam.poolkinds.incluster.ip_pools import GLOBAL_IN_CLUSTER_IP_POOL_KIND, IN_CLUSTER_IP_POOL_KIND
from metal3_ipam.poolkinds.incluster.prefix_pools import GLOBAL_IN_CLUSTER_PREFIX_POOL_KIND, IN_CLUSTER_PREFIX_POOL_KIND
from metal3_ipam.poolkinds.ippool import IPPOOL_KIND
from metal3_ipam.poolkinds.netbox.kind import NETBOX_IP_POOL_KIND
from metal3_ipam.poolkinds.openstack.kind import OPENSTACK_FLOATING_IP_POOL_KIND

KINDS: tuple[PoolKind, ...] = (
    IPPOOL_KIND,
    IN_CLUSTER_IP_POOL_KIND,
    GLOBAL_IN_CLUSTER_IP_POOL_KIND,
    IN_CLUSTER_PREFIX_POOL_KIND,
    GLOBAL_IN_CLUSTER_PREFIX_POOL_KIND,
    NETBOX_IP_POOL_KIND,
    OPENSTACK_FLOATING_IP_POOL_KIND,
)

for _kind in KINDS:
    register(_kind)
