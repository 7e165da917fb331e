"""The kinds of pool claims are served from, each one ``PoolKind`` in ``REGISTRY``.

A pool kind says what the API, the manifests and the admission webhooks need
to know of it (group and kind, scope, plural, served versions, the claim kinds
it serves, its finalizers) and what the one claim lifecycle of ``reconcile``
asks of it: its objects read into the address set the allocator knows, its
admission rules, the Cluster it belongs to, and the counts of its status.
Serving another kind is one module under this package and its ``register``;
the inventory, the ledger, the reconcile, the controller and the generated
manifests iterate the registry.
"""

from __future__ import annotations

from dataclasses import dataclass
from collections.abc import Callable, Mapping
from typing import Any

from .. import kinds
from ..pool import Pool
from ..problems import Problem

GroupKind = tuple[str, str]
NAMESPACED, CLUSTER = "Namespaced", "Cluster"


@dataclass(frozen=True)
class Finalizers:
    """The finalizers a kind's lifecycle puts on the pool, on each kind of claim and of address it serves."""

    pool: str
    claim: Mapping[GroupKind, str]
    address: Mapping[GroupKind, str]


@dataclass(frozen=True)
class Counts:
    """What the ledger knows of a valid pool when its status is written."""

    capacity: int
    allocated: int
    free: int


@dataclass(frozen=True)
class PoolKind:
    kind: GroupKind
    scope: str                                  # NAMESPACED or CLUSTER
    plural: str
    versions: tuple[str, ...]                   # served; the first is the one read and stored
    claim_kinds: tuple[GroupKind, ...]
    finalizers: Finalizers
    # A pool object's address set, or None with the problems that keep it from being one.
    read: Callable[[Mapping[str, Any]], tuple[Pool | None, list[Problem]]]
    # Admission: ``in_use`` maps the name of each live address handed out from the pool to its IP.
    validate: Callable[[Any], list[Problem]]
    validate_update: Callable[[Any, Any, Mapping[str, str] | None], list[Problem]]
    validate_delete: Callable[[Any, Mapping[str, str]], list[Problem]]
    # The defaults a pool created or updated is given, as JSON patch operations; None: it has none.
    default: Callable[[Mapping[str, Any]], list[dict]] | None
    # The Cluster the pool belongs to (its claims wait for it; the pool is labelled and owned by it), or None.
    cluster_name: Callable[[Mapping[str, Any]], str | None]
    # The count fields of the pool's status; with ``indexes``, status.indexes is kept too.
    status: Callable[[Counts], dict[str, Any]]
    indexes: bool

    @property
    def group(self) -> str:
        return self.kind[0]

    @property
    def cluster_scoped(self) -> bool:
        return self.scope == CLUSTER


REGISTRY: dict[GroupKind, PoolKind] = {}


def register(pool_kind: PoolKind) -> None:
    REGISTRY[pool_kind.kind] = pool_kind


def kind_named(group_kind: Any) -> PoolKind | None:
    """The registered kind of pool named ``(group, kind)``, or None."""
    return REGISTRY.get(group_kind) if isinstance(group_kind, tuple) else None


def read(pool: Mapping[str, Any]) -> tuple[Pool | None, list[Problem]]:
    """A pool object's address set, or None with the problems that keep it from being one."""
    kind = kinds.kind_of(pool)
    pool_kind = kind_named(kind)
    if pool_kind is None:
        name = (pool.get("metadata") or {}).get("name") if isinstance(pool.get("metadata"), Mapping) else ""
        return None, [Problem("kind", f"{kind}", f"is not a kind of pool this controller serves ({name or ''})")]
    return pool_kind.read(pool)


from .ippool import IPPOOL_KIND  # noqa: E402  (the kind module reads the names above)

register(IPPOOL_KIND)
