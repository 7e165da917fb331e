"""What one pass over a pool may look at (``Snapshot``): the pool, its claims and addresses, its Cluster, and
what the inventory answers of the rest of the namespace."""

from __future__ import annotations

import random
from dataclasses import dataclass, field
from collections.abc import Callable
from typing import Any

from .. import kinds
from ..overlap import Withheld
from ..pool import Pool
from ..problems import Problem


@dataclass


class Snapshot:
    """Everything one pool's reconcile may look at."""

    namespace: str
    pool_name: str
    pool: dict | None
    cluster: dict | None = None
    claims: list[dict] = field(default_factory=list)          # in the order to serve them
    addresses: list[dict] = field(default_factory=list)       # Metal3 IPAddresses of this pool
    capi_addresses: list[dict] = field(default_factory=list)  # Cluster API IPAddresses of this pool
    # The callbacks name the namespace looked in: the pool's, or for a pool of cluster scope a claim's.
    name_taken: Callable[[str, str], bool] = lambda namespace, name: False  # any IPAddress of that name there
    # The Metal3 IPAddress of that name there, or None (what holds a name ``name_taken`` says is taken).
    address_named: Callable[[str, str], dict | None] = lambda namespace, name: None
    # An address of another pool of the namespace (either API) holds one of the addresses (version, lo..hi):
    # an IP inside the span, or a sub-prefix meeting it; with ``for_keeper``, not counting an address written
    # before its claim that no claim is bound to (``kept.binds_none``).
    held_elsewhere: Callable[..., bool] = lambda namespace, version, lo, hi, for_keeper=False: False
    # The addresses (either API) at (version, ip) of the namespace's other pools that keep an IP unique there
    # (with ``every_pool``: of any other pool), to name what holds an IP.
    held_by_others: Callable[..., list[dict]] = lambda namespace, version, ip, every_pool=False: []
    # A claim of another pool of the namespace has a status naming (version, ip): kept for it (``kept``).
    kept_elsewhere: Callable[[str, int, int], bool] = lambda namespace, version, ip: False
    # Of those claims, holding no address object, the one that gets (version, ip) back before the claim given
    # (``kept.precedence``), or None.
    keeper_elsewhere: Callable[[str, int, int, dict], dict | None] = lambda namespace, version, ip, claim: None
    # What holds (version, ip) for another claim of the namespace in a pool this one keeps its IPs apart from
    # across namespaces, not as a separate network: (pool, "Kind namespace/name" of the claim, address) each.
    held_twice: Callable[[str, int, int], list] = lambda namespace, version, ip: []
    # The Cluster API claims of every namespace and outside IPAM's pool carrying an allocation key.
    claims_carrying: Callable[[str], list[dict]] = lambda key: []
    # The claim (namespace, name) seen leave for ``clusterctl move`` carrying an allocation key, or None: the
    # key's address is that claim's in the move's target.
    moved_away: Callable[[str], tuple[str, str] | None] = lambda key: None
    # Why an allocation key's outside address is homed at another cluster's object that a claim here may not take
    # it from (a claim there carries the key too), or None.
    homed_elsewhere: Callable[[str], str | None] = lambda key: None
    # Why an allocation key's outside address, which a claim here holds, is gone from its outside IPAM, or None.
    address_lost: Callable[[str], str | None] = lambda key: None
    # For a pool of cluster scope: the Clusters (``namespace/name``) whose claims of it were seen leave for
    # ``clusterctl move`` and that its ``ClaimsElsewhere`` condition may not name yet (``elsewhere``).
    left_for_move: frozenset[str] = frozenset()
    # A Cluster API IPAddress of that name in the namespace, whatever its pool.
    capi_address_named: Callable[[str, str], dict | None] = lambda namespace, name: None
    # The namespace's Cluster of a name, or None: a claim's own Cluster may pause it.
    cluster_named: Callable[[str, str], dict | None] = lambda namespace, name: None
    # Clusters are watched: one not found does not exist (yet). Without Cluster API, none ever does.
    clusters_served: bool = True
    # Parts of the pool's address set that another, overlapping pool owns, or shares with it (``overlap``).
    withheld: list[Withheld] = field(default_factory=list)
    # For a global pool: what it withholds from (or shares with) its claims of a namespace because of the pools
    # there. For a namespaced pool: what global pools with claims in its namespace withhold from them because
    # of it (shown, not withheld).
    withheld_in: Callable[[str], list[Withheld]] = lambda namespace: []
    yielded: list[Withheld] = field(default_factory=list)
    # The pool spec already read (the inventory keeps it per generation); read here when None.
    model: tuple[Pool | None, list[Problem]] | None = None
    # A claim of that (group, kind), namespace and name, or None: whether the claim a guard names lives.
    claim_named: Callable[[tuple[str, str], str, str], dict | None] = lambda kind, namespace, name: None
    # Some global pool whose claims keep their IPs apart from the namespaced pools holds (version, ip) in its
    # address set: a namespaced pool's allocation of it is guarded (``naming.guard_name``).
    global_holds: Callable[[int, int], bool] = lambda version, ip: False
    # The IPs of (version, first, last) that such global pools hold, in order, or None when there are more than
    # the limit given: a namespaced prefix pool's allocation of a sub-prefix guards each of them.
    global_held: Callable[[int, int, int, int], list[int] | None] = lambda version, first, last, limit: []
    # The sub-prefixes (base, length) global prefix pools keeping theirs apart hand out that meet (version, first,
    # last), or None when there are more than the limit: a namespaced pool's allocation there guards each.
    global_blocks: Callable[[int, int, int, int], list[tuple[int, int]] | None] = \
        lambda version, first, last, limit: []
    # A global IP pool of that version keeping its IPs apart is stored (or being deleted), whatever its addresses:
    # a namespaced pool's allocation of an IP guards it.
    global_ip_pool_exists: Callable[[int], bool] = lambda version: False
    # The lengths of the sub-prefixes the prefix pools of (namespace, version) keeping theirs apart hand out: a
    # global pool's allocation to a claim there joins the guard of each sub-prefix of those lengths holding it.
    namespaced_lengths: Callable[[str, int], list[int]] = lambda namespace, version: []
    # The live claims of (namespace) holding no address (whatever their status says), of global pools whose IPs
    # or sub-prefixes of (version) are smaller than a sub-prefix of (length): a namespaced prefix pool's allocation
    # guards the span each names (``kinds.ALLOCATING_ANNOTATION``) inside its own, and writes each.
    global_claims_in_flight: Callable[[str, int, int], list[dict]] = lambda namespace, version, length: []
    # The live claims of (namespace) holding no address, of the namespace's pools (one gone too) that may hand out
    # an address of (version): a global pool's allocation to a claim there keeps off the span each names
    # (``kinds.ALLOCATING_ANNOTATION``), and writes each.
    namespaced_claims_in_flight: Callable[[str, int], list[dict]] = lambda namespace, version: []
    # The lengths of the IPs or sub-prefixes of (version) a claim's global pool may hand out, whatever its spec now:
    # what a namespaced prefix pool's allocation guards of a paused claim in flight, which it does not write.
    global_units: Callable[[dict, int], set[int]] = lambda claim, version: set()
    # The same of a claim's namespaced pool, guarded by a name, or None when not known or not guarded: what a global
    # pool's allocation guards of a paused claim of the namespace in flight (nothing for None).
    namespaced_units: Callable[[dict, int], set[int] | None] = lambda claim, version: None
    # The addresses (of either API, any pool of ours) in a namespace that hold (version, ip): whether a guard's
    # claim has its lock yet.
    addresses_at: Callable[[str, int, int], list[dict]] = lambda namespace, version, ip: []
    # Whether a pool is a global pool marked a separate network: what its claims hold meets no namespace's pool.
    separate_network: Callable[[Any], bool] = lambda key: False  # of an ``objects.PoolKey``
    # Where the locks of a pool of cluster scope live (the controller's namespace): one namespace for all
    # of them, so that the API server's name uniqueness guards each IP across every namespace.
    lock_namespace: str = "default"
    # How long a stored lock of a Cluster API claim without its Cluster API IPAddress is left to whoever made
    # it before this pass writes the address (``LOCK_SETTLE_SECONDS`` in a controller; 0 where one process
    # is all there is: plans, models).
    lock_settle_seconds: int = 0
    # Whether the claims of a namespace are served here (``-n``): an address of a pool of cluster scope whose
    # claim is in a namespace not served is left to the controller that serves it.
    serves: Callable[[str], bool] = lambda namespace: True
    serves_every_namespace: bool = True  # no ``-n``: what a pool of cluster scope shows is all there is
    # --watch-filter: a pool or claim not labelled cluster.x-k8s.io/watch-filter=<this> is not this controller's
    # (left alone as a paused one is: kept, not served); None: every one is.
    watch_filter: str | None = None
    now: str = "1970-01-01T00:00:00Z"
    rng: random.Random | None = None
    pool_kind: tuple[str, str] = kinds.IPPOOL  # the pool's (group, kind), a key of ``poolkind.REGISTRY``
    # For a kind whose addresses an outside IPAM hands out (``poolkind.Outside``): the asks and their answers
    # by key (``core.asking.Asking``: ``result``, ``pending_refusal``, ``release_refused``, ``released``); None: nothing
    # was asked. A pass reads what they were when it started (``outside.Answers``), however long it runs.
    answers: Any = None
