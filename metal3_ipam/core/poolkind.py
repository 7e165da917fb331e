"""The seam between the claim lifecycle and the kinds of pool: ``PoolKind``, and ``REGISTRY`` of them.

A pool kind says what the API, the manifests and the admission webhooks need
to know of it (group and kind, scope, plural, served versions, the claim kinds
it serves, its finalizers) and what the one claim lifecycle of ``reconcile``
asks of it: its objects read into the address set the allocator knows, its
admission rules, the Cluster it belongs to, and the counts of its status.
Serving another kind is one package under ``metal3_ipam.poolkinds`` and one
line in its list, which registers each kind here; the inventory, the ledger,
the reconcile, the controller and the generated manifests iterate the
registry and never name a kind.
"""

from __future__ import annotations

import dataclasses
import random
import re
import uuid
from dataclasses import dataclass
from collections.abc import Callable, Mapping
from typing import Any

from metal3_ipam.core import kinds
from metal3_ipam.core.naming import HASHED, lock_pool_part
from metal3_ipam.core.pool import Pool
from metal3_ipam.core.problems import Problem

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
class Flag:
    """A flag of ``metal3-ipam run`` a kind brings: ``--<name>``, read with ``parse`` (which raises
    ValueError with what is wrong) into ``Options.kind_flags[dest]``, where its adapter finds it."""

    name: str
    default: Any
    metavar: str
    help: str
    parse: Callable[[str], Any] = str

    @property
    def dest(self) -> str:
        return self.name.replace("-", "_")


@dataclass(frozen=True)
class Rule:
    """A rule of the controller's role (``controller.permissions``): the ``verbs`` it may call on ``resource``
    (a plural, or plural/subresource) of API ``group``, and which calls need them."""

    group: str
    resource: str
    verbs: tuple[str, ...]
    why: str


#: What an allocation key looks like: what :func:`draw_key` makes, and what a user may write for a claim moved in
#: by hand.
KEY_PATTERN = re.compile(r"^[a-z0-9]([-a-z0-9]{0,62}[a-z0-9])?$")


def draw_key(rng: random.Random) -> str:
    """A fresh allocation key, drawn from the pass's random source (the core draws nothing itself): 32 hex digits."""
    return uuid.UUID(int=rng.getrandbits(128), version=4).hex


def annotated_key(obj: Mapping[str, Any], annotation: str, asked: str) -> tuple[str | None, Problem | None]:
    """The allocation key ``obj`` carries in ``annotation`` (None: none yet, give it one), or the problem with the one
    it carries; ``asked`` ends the problem's message: whom the controller asks, and what the key finds again."""
    metadata = obj.get("metadata")
    annotations = metadata.get("annotations") if isinstance(metadata, Mapping) else None
    value = annotations.get(annotation) if isinstance(annotations, Mapping) else None
    if value is None:
        return None, None
    if isinstance(value, str) and KEY_PATTERN.match(value):
        return value, None
    return None, Problem(f"metadata.annotations[{annotation}]", value,
                         "must be an allocation key (1 to 64 lowercase letters, digits and '-'); it is written by "
                         f"the controller before {asked} again")


@dataclass(frozen=True)
class Outside:
    """Where a kind's addresses come from when not from the pool's own address set: an outside IPAM, asked
    by a key the claim carries, whose answer comes later (``core.asking`` keeps the asks and answers).

    The lifecycle writes a key on the claim (``annotation``, a conditional write, with the claim's
    finalizer) before anything is asked; only a key the stored claim carries is asked for; while no answer
    is there the claim is pending (Ready=False with the reason); a grant becomes the lock and the Cluster
    API IPAddress as for every kind; a deleted claim's address is released outside before its objects
    and finalizer go; a claim moved away is forgotten, never released. The pool's status is the outside
    IPAM's (written by the adapter that asks it), not the ledger's counts.
    """

    annotation: str
    # The key a claim carries: (key, None), (None, None) when it has none yet, (None, problem) when it is bad.
    read_key: Callable[[Mapping[str, Any]], tuple[str | None, Problem | None]]
    # A new key, from the pass's random source.
    new_key: Callable[[Any], str]
    # What a claim of the pool (the object) is given for the address the outside IPAM holds for its key.
    granted: Callable[[Mapping[str, Any], str], Any]
    # The adapter half the runtime starts and stops for the kind (it asks the outside IPAM, files the answers
    # and wakes the pools): built from the runtime's parts (``controller.runtime.OutsideParts``); it has
    # ``answers`` (given to each pass as ``Snapshot.answers``), ``passed``, ``pool_gone``, ``start`` and ``close``.
    service: Callable[[Any], Any] | None = None
    # The flags of ``metal3-ipam run`` that set it up.
    flags: tuple[Flag, ...] = ()
    # What the adapter half calls in the API beyond what every kind's lifecycle calls: rules the controller's
    # role grants on top (``controller.permissions``).
    role_rules: tuple[Rule, ...] = ()
    # For ``metal3-ipam demo``: why a pool cannot be served on this machine (its outside IPAM does not answer,
    # and what to set instead), or None when it can, given the pool and the Secrets of its namespace that come
    # with it (by name); and the names of the Secrets of its namespace it names.
    unservable: Callable[[Mapping[str, Any], Mapping[str, Mapping[str, Any]]], str | None] = \
        lambda pool, secrets: None
    secrets: Callable[[Mapping[str, Any]], tuple[str, ...]] = lambda pool: ()


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
    # Where the status says the counts (capacity, allocated, free, ...), as paths from the object's root (the
    # kube-state-metrics configuration reads them there); the default is IPPool's. A kind that says its capacity
    # and what is allocated but no path of "free" has capacity - allocated free.
    status_counts: Mapping[str, tuple[str, ...]] = dataclasses.field(default_factory=lambda: {
        "capacity": ("status", "capacity"), "allocated": ("status", "allocated"), "free": ("status", "free")})
    # -- where the kinds' lifecycles differ (the defaults are IPPool's) --
    # An IP is kept unique among the pools of the namespace (overlaps withheld, other pools' addresses
    # skipped); False: only within the pool (a global pool, whose claims live in every namespace).
    unique_in_namespace: bool = True
    # An address of the pool holds every address of the prefix its ``prefix`` says (a prefix pool's sub-prefix);
    # False: its one IP (an IP pool's ``prefix`` is its network's).
    holds_prefixes: bool = False
    # The labels a claim's Cluster API IPAddress is given, from the claim.
    address_labels: Callable[[Mapping[str, Any]], dict[str, str]] = lambda claim: _labels(claim)
    # The pool's owner reference on a Cluster API IPAddress says ``controller: false`` outright.
    explicit_pool_owner: bool = False
    # A Cluster API IPAddress of the pool written before its claim (no owner reference to a claim, none of
    # our finalizers) stays while no claim has it, and the claim adopting it adds its owner references.
    keeps_addresses_written_first: bool = False
    # How long a deleted claim's address outlives it: the deadline from the pool and the claim as stored
    # (an RFC 3339 time), or None for none. Called only for a claim being deleted of a live pool.
    release_after: Callable[[Mapping[str, Any], Mapping[str, Any]], str | None] = lambda pool, claim: None
    # Where addresses come from: None, the pool's own address set (the allocator answers at once); else an
    # outside IPAM that answers later (see ``Outside``).
    outside: Outside | None = None
    # A pool object at another served apiVersion (the ``/convert`` webhook's work; raises
    # ``conversion.ConversionError``), or None for a kind served at one version.
    convert: Callable[[Mapping[str, Any], str], dict[str, Any]] | None = None
    # The CustomResourceDefinitions the kind installs (``metal3_ipam.crds`` writes them under config/crd/), as
    # fresh dicts; none for a kind whose CRD is installed otherwise.
    crds: Callable[[], list[dict[str, Any]]] = lambda: []
    # A namespaced pool whose allocation of an IP always writes its guard in the namespace (``naming.guard_name``),
    # whatever the global pools' specs are now: a global pool's pass made before an edit or a deletion that
    # dropped the IP, or before this pool's, lands on it and is refused. False: its IP is guarded only while a
    # global IP pool exists (where there is none, Metal3's IPPool writes the objects the Go Metal3 IPAM writes).
    guards_every_ip: bool = False
    # The (IP version, sub-prefix length) a pool's spec names, read alone, or None (a kind handing out single IPs,
    # or no valid length): what a prefix pool whose spec is invalid otherwise still hands out, for the length is
    # immutable and a pass of it made before the edit may still land (``Inventory.unit_lengths``).
    named_unit_length: Callable[[Mapping[str, Any]], tuple[int, int] | None] = lambda pool: None
    # The tag ending the names of the pool's locks (``naming.lock_name``; ``read`` names them with ``locked_as``),
    # one no other kind has; None: Metal3's ``<namePrefix>-<ip>``.
    lock_tag: str | None = None
    # Whether the pool's locks are Leases in the controller's namespace (``core.lockstore``) rather than Metal3
    # IPAddresses: a kind served with RBAC that grants nothing on ipam.metal3.io.
    locks_in_leases: bool = False

    @property
    def group(self) -> str:
        return self.kind[0]

    @property
    def cluster_scoped(self) -> bool:
        return self.scope == CLUSTER


def _labels(obj: Mapping[str, Any]) -> dict[str, str]:
    value = (obj.get("metadata") or {}).get("labels") if isinstance(obj.get("metadata"), Mapping) else None
    return dict(value) if isinstance(value, Mapping) else {}


REGISTRY: dict[GroupKind, PoolKind] = {}


def status_counts(pool_kind: PoolKind, pool: Mapping[str, Any]) -> dict[str, int]:
    """The counts a pool's status says (capacity, allocated, free, ...), where its kind declares them
    (``PoolKind.status_counts``); a count not written yet, or not a whole number, is left out. Free is
    capacity - allocated where the kind declares no path of its own for it."""
    out: dict[str, int] = {}
    for name, path in pool_kind.status_counts.items():
        value: Any = pool
        for part in path:
            value = value.get(part) if isinstance(value, Mapping) else None
        if isinstance(value, bool):
            continue
        if isinstance(value, int) or (isinstance(value, str) and value.isdigit()):
            out[name] = int(value)
    if "free" not in pool_kind.status_counts and {"capacity", "allocated"} <= out.keys():
        out["free"] = max(out["capacity"] - out["allocated"], 0)
    return out


def register(pool_kind: PoolKind) -> None:
    """Serve ``pool_kind``; ValueError when another kind's lock names may end like its own (its tag, or the tag
    of a hashed pool part, is another kind's): two pools' locks could meet."""
    tag = pool_kind.lock_tag
    for kind in REGISTRY.values():
        if tag is not None and kind.kind != pool_kind.kind and kind.lock_tag is not None and (
                {tag, tag + HASHED} & {kind.lock_tag, kind.lock_tag + HASHED}):
            raise ValueError(f"{pool_kind.kind}: lock tag {tag!r} meets {kind.kind}'s {kind.lock_tag!r}")
    REGISTRY[pool_kind.kind] = pool_kind


def unregister(kind: GroupKind) -> None:
    """Serve the kind of pool named ``(group, kind)`` no more (a kind registered for a while: a test's own)."""
    REGISTRY.pop(kind, None)


def lock_tags() -> tuple[str, ...]:
    """The tags of the lock names of the kinds served (``PoolKind.lock_tag``)."""
    return tuple(kind.lock_tag for kind in REGISTRY.values() if kind.lock_tag is not None)


def kind_named(group_kind: Any) -> PoolKind | None:
    """The registered kind of pool named ``(group, kind)``, or None."""
    return REGISTRY.get(group_kind) if isinstance(group_kind, tuple) else None


# Groups whose pool kinds other providers serve too (Cluster API's own IPAM group: the Go providers', Infoblox's
# and others' pools live there): a claim naming such a group is ours only by kind.
SHARED_GROUPS = frozenset({kinds.CAPI_IPAM_GROUP})


def claim_pool_groups() -> dict[str, tuple[str, ...] | None]:
    """Each group of a kind serving Cluster API claims: the kinds a claim's poolRef must name to be
    ours, or None when every kind of the group is ours (a claim naming another one is refused)."""
    groups: dict[str, tuple[str, ...] | None] = {}
    for pool_kind in REGISTRY.values():
        if kinds.CAPI_CLAIM in pool_kind.claim_kinds:
            found = groups.get(pool_kind.group) or ()
            groups[pool_kind.group] = (*found, pool_kind.kind[1]) if pool_kind.group in SHARED_GROUPS else None
    return groups


def serves_claims_of(group: Any, kind: Any) -> bool:
    """Whether a Cluster API claim whose poolRef names ``group`` and ``kind`` is ours to judge and serve."""
    groups = claim_pool_groups()
    if not isinstance(group, str) or group not in groups:  # a group written as a list or a map is none of ours
        return False
    ours = groups[group]
    return ours is None or kind in ours


def read(pool: Mapping[str, Any]) -> tuple[Pool | None, list[Problem]]:
    """A pool object's address set, or None with the problems that keep it from being one."""
    kind = kinds.kind_of(pool)
    pool_kind = kind_named(kind)
    if pool_kind is None:
        name = (pool.get("metadata") or {}).get("name") if isinstance(pool.get("metadata"), Mapping) else ""
        return None, [Problem("kind", f"{kind}", f"is not a kind of pool this controller serves ({name or ''})")]
    return pool_kind.read(pool)


def locked_as(model: Pool, kind: GroupKind, name: str, cluster_scoped: bool, tags: tuple[str, str]) -> Pool:
    """``model`` with the pool part and tag of its lock names (``naming.lock_name``): ``tags`` are the
    kind's (namespaced, cluster-scoped) tags."""
    part, tag = lock_pool_part(kind, name, tags[cluster_scoped], model.unit_length is not None)
    return dataclasses.replace(model, name_prefix=part, lock_tag=tag)
