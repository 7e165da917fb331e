"""QueuedIPPool (``queued-ipam.test.metal3-ipam.io``): a kind of pool for the tests only, whose addresses an
outside IPAM hands out when the test says so.

It proves the seam (``metal3_ipam.core.poolkind``): a kind with an outside source is this one package and one
line in a list of kinds, and runs through the one claim lifecycle without the core, the controller or the
in-memory model naming it. Three parts, as a real outside kind has:

* ``kind``: the ``PoolKind`` (spec reading, admission, what a grant gives), and ``keys``: the key a claim
  carries, written before anything is asked;
* ``source``: the outside IPAM, in-process: every request waits in a queue until the test answers it
  (granted, refused, or lost), so answers come late, twice or never, in any order;
* ``service``: the adapter half the runtime starts and stops (``Outside.service``): the asks of
  ``core.asking`` sent to the source, its answers filed and the pool woken.
"""

from .kind import FINALIZERS, KEY_ANNOTATION, QUEUED_IP_POOL, QUEUED_IP_POOL_KIND, queued_claim, queued_pool
from .service import QueuedPools
from .source import QueuedSource

KINDS = (QUEUED_IP_POOL_KIND,)

__all__ = ["FINALIZERS", "KEY_ANNOTATION", "KINDS", "QUEUED_IP_POOL", "QUEUED_IP_POOL_KIND", "QueuedPools",
           "QueuedSource", "queued_claim", "queued_pool"]
