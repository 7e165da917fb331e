"""The kinds of pool a claim can be served from, each read into the one address set the allocator knows.

A pool kind is its (group, kind), the key it is filed under (``objects.PoolKey``
carries it) and a reader of its objects into a ``Pool``. Serving another kind
(the in-cluster provider's ``InClusterIPPool``) is one more reader here and
its kind in ``kinds.POOL_KINDS``; the inventory, the ledger and the reconcile
read every pool through ``read``.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

from . import kinds
from . import objects as o
from .pool import Pool, read_pool
from .problems import Problem

Reader = Callable[[Mapping[str, Any]], tuple[Pool | None, list[Problem]]]

READERS: dict[tuple[str, str], Reader] = {
    kinds.IPPOOL: lambda pool: read_pool(pool.get("spec")),
}


def read(pool: Mapping[str, Any]) -> tuple[Pool | None, list[Problem]]:
    """A pool object's address set, or None with the problems that keep it from being one."""
    kind = kinds.kind_of(pool)
    reader = READERS.get(kind)
    if reader is None:
        return None, [Problem("kind", f"{kind}", f"is not a kind of pool this controller serves ({o.name(pool)})")]
    return reader(pool)
