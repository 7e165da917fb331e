"""An in-memory index of the objects that matter, grouped by the pool they concern.

The controller feeds it from watch events and from the API server's answers to
its own writes, ``metal3-ipam plan`` from files; either way a pool's snapshot
is assembled from it without listing anything, and every change says which
pools it concerns so only those are reconciled.

An object is one incarnation of a name: its uid. Watch streams lag behind the
answers to our own writes, a LIST taken at start-up may be filed after the
watch already reported a deletion, and a released name is reused at once by
the next allocation (the normal sequential case). So every object is filed
with its resourceVersion, deletions leave a tombstone, and news older than
what is known of a name — an event about an earlier incarnation, a listing
taken before a deletion — is dropped instead of overwriting newer knowledge.
"""

from __future__ import annotations

import random
from collections import OrderedDict
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Callable, Iterable, Iterator

from . import kinds
from . import lockstore
from . import objects as o
from . import poolkind
from .addresses import FAMILY_BITS
from .intervals import IntervalSet, normalise
from .kept import binds_none, bound_ip, left_by_a_refused_pass, left_by_an_earlier_incarnation, own_ip, precedence
from .overlap import PoolFacts, Withheld, merged, separate_network, withheld_by_pool
from .pool import Pool
from .problems import Problem
from .reconcile import POOL_REFERENCE_CHANGED, Snapshot, moved_from, waited_for
from .reconcile.elsewhere import Elsewhere, cluster_of
from .several import Several, each, entry_of

ObjKey = tuple[tuple[str, str], str, str]  # (group, kind), namespace, name

# How many deletions are remembered to reject late news of them. A tombstone
# only matters until the watch stream has caught up with the deletion.
MAX_TOMBSTONES = 100_000
# Objects of a listing filed between two yields to the event loop (a few ms of work).
SETTLE_STEP = 200


@dataclass
class _PoolGroup:
    claims: dict[o.ClaimKey, dict] = field(default_factory=dict)
    addresses: dict[str, dict] = field(default_factory=dict)
    capi_addresses: dict[str, dict] = field(default_factory=dict)

    def __bool__(self) -> bool:
        return bool(self.claims or self.addresses or self.capi_addresses)


DEFAULT_LOCK_NAMESPACE = "default"

def served() -> tuple[tuple[str, str], ...]:
    """The kinds the inventory files: the registered kinds of pool, the claims, addresses and Clusters."""
    return (*poolkind.REGISTRY, kinds.IPCLAIM, kinds.IPADDRESS, kinds.CAPI_CLAIM, kinds.CAPI_ADDRESS, kinds.CLUSTER)
ADDRESS_KINDS = (kinds.IPADDRESS, kinds.CAPI_ADDRESS)
CLAIM_KINDS = (kinds.IPCLAIM, kinds.CAPI_CLAIM)


def version_number(version: object) -> int | None:
    """A resourceVersion as a number, when it is one (the API server's are; files have none)."""
    return int(version) if isinstance(version, str) and version.isdigit() else None


def version_of(obj: dict) -> int | None:
    """An object's resourceVersion as a number (``version_number``)."""
    return version_number(o.meta(obj).get("resourceVersion"))


def _uid(obj: dict) -> str | None:
    return o.meta(obj).get("uid")


def _is_older(incoming: dict, known_version: int | None) -> bool:
    """True when ``incoming`` is news from before what is known of its name."""
    version = version_of(incoming)
    if version is not None and known_version is not None:
        return version < known_version
    return False


def older(obj: dict, than: dict) -> bool:
    """True when ``obj`` is an earlier version than ``than`` (both versions known)."""
    return _is_older(obj, version_of(than))


def _same_version(incoming: dict, stored: dict) -> bool:
    """The version already filed, as it was filed (a listing again, the watch echo of an answer
    filed): nothing new, and the copy filed stays (it may be out of the collector's reach already)."""
    version = version_of(incoming)
    return version is not None and version == version_of(stored) and incoming == stored


def _address_ip(obj: dict) -> int | tuple[int, int] | None:
    ip = o.address_ip(obj)
    return None if ip is None else _ip_key(ip.version, int(ip))


def _version_and_value(key: int | tuple[int, int]) -> tuple[int, int]:
    """An IP as ``_ip_key`` writes it, as (version, number)."""
    return key if isinstance(key, tuple) else (4, key)


def _prefix_held(obj: dict, pool: o.PoolKey | None) -> tuple[int, int, int] | None:
    """(version, length, base) of the sub-prefix an address of a prefix pool holds whole (its ``prefix``
    shorter than the family's), or None: an IP pool's address holds its IP alone."""
    pool_kind = poolkind.REGISTRY.get(pool.kind) if pool is not None else None
    ip = o.address_ip(obj) if pool_kind is not None and pool_kind.holds_prefixes else None
    length = o.spec(obj).get("prefix") if ip is not None else None
    if type(length) is not int or not 0 <= length < FAMILY_BITS[ip.version]:
        return None
    bits = FAMILY_BITS[ip.version] - length
    return ip.version, length, int(ip) >> bits << bits


def _ip_key(version: int, ip: int) -> int | tuple[int, int]:
    """How an IP is known in ``_holders``: an IPv4 address as its number (most are IPv4: a tuple apiece
    would cost more than the number), an IPv6 one with its version (an int never equals a tuple)."""
    return ip if version == 4 else (version, ip)


def _member(pool: o.PoolKey, namespace: str, name: str) -> str | tuple[str, str]:
    """The key of an address in its pool's group: its name; in a pool of cluster scope (namespace ""),
    whose addresses are in their claims' namespaces, (namespace, name)."""
    return name if pool.namespace else (namespace, name)


def keeps_apart(kind: tuple[str, str]) -> bool:
    """Pools of the kind keep their IPs apart from the pools they overlap (``core.overlap``): the namespaced
    kinds whose IPs are unique in their namespace, with the pools of their namespace; the global kinds, whose
    claims may be in any namespace, with every other global pool and the namespaced pools of the namespaces
    where they have claims."""
    pool_kind = poolkind.REGISTRY[kind]
    return pool_kind.unique_in_namespace or (pool_kind.cluster_scoped and pool_kind.outside is None)


def _pool_generation(pool: dict) -> tuple | None:
    """What identifies a pool's spec: the API server bumps generation only on spec changes."""
    generation = o.meta(pool).get("generation")
    uid = _uid(pool)
    return (uid, generation) if generation is not None and uid else None


class Inventory:
    def __init__(self) -> None:
        self.objects: dict[ObjKey, dict] = {}
        self.groups: dict[o.PoolKey, _PoolGroup] = {}
        # Clusters are watched and filed here (Cluster API is installed): a claim of a Cluster not
        # filed waits for it (``reconcile``).
        self.clusters_served = True
        # Where the locks of the pools of cluster scope live: one namespace, so that the API server's name
        # uniqueness guards each of their IPs across every namespace (the controller's own, set by the adapter).
        self.lock_namespace = DEFAULT_LOCK_NAMESPACE
        # How long a lock made elsewhere is left to its maker (``Snapshot.lock_settle_seconds``; set by the adapter).
        self.lock_settle_seconds = 0
        # The namespaces whose claims are served (None: all). A pool of cluster scope has claims in others too,
        # which another controller serves: their addresses are not this one's to judge.
        self.namespaces: frozenset[str] | None = None
        # --watch-filter: only pools and claims labelled cluster.x-k8s.io/watch-filter=<this> are served; the
        # others are left alone as if paused (None: all are served).
        self.watch_filter: str | None = None
        self.filed = 0  # objects stored so far, new or replacing another (what the collector may come to walk)
        # (Where each object is filed, and which Metal3 IPAddress names are taken, are read off
        # ``objects``: see ``_filed``, ``name_taken``. A map of either costs an entry per object.)
        # Addresses of both APIs of our pools, per namespace and IP: who holds an IP (its key,
        # or Several when several hold it: a set per IP would cost more than the address).
        self._holders: dict[str, dict[int | tuple[int, int], ObjKey | Several]] = {}
        # The same IPs per namespace and IP version as a set of intervals (an IP inside a span is found in
        # O(log n)), and the sub-prefixes addresses of prefix pools hold whole, per namespace, by (version,
        # length) and base address: an address inside one is held, as a sub-prefix holding one is
        # (``held_elsewhere``).
        self._held_ips: dict[str, dict[int, IntervalSet]] = {}
        self._prefixes: dict[str, dict[tuple[int, int], dict[int, ObjKey | Several]]] = {}
        # Deleted names: (key, store) -> (resourceVersion, uid) of the deletion. Where two stores hold the locks
        # (``lockstore``), each store's deletions are its own: one's is no news of the other's object of the name.
        self._tombstones: OrderedDict[tuple[ObjKey, str | None], tuple[int | None, str | None]] = OrderedDict()
        # Parsed pool specs, by (uid, generation); and per namespace, what the pools of that namespace and the
        # global pools with claims there withhold of each other (namespace "": the global ones among themselves).
        self._models: dict[ObjKey, tuple[tuple | None, Pool | None, list[Problem]]] = {}
        self._withheld: dict[str, dict[o.PoolKey, list[Withheld]]] = {}
        # The (version, sub-prefix length) each pool's valid specs had (an IP pool's: one IP's), by its uid: kept
        # through an edit (what a pass of it made before may still hand out; ``unit_lengths``, ``_may_hand_out``).
        self._lengths: dict[ObjKey, tuple[str | None, frozenset[tuple[int, int]]]] = {}
        # Each pool's (uid, last generation read, whether every generation of its spec since its first was read
        # here): only then do its valid specs read (``_lengths``) tell every family a pass of it may hand out.
        self._generations: dict[ObjKey, tuple[str | None, int, bool]] = {}
        # The IP each claim's status says it holds (``kept.own_ip``), per namespace of the claims and IP: what a
        # claim whose address objects were deleted gets back, which no pool of the namespace may hand out
        # meanwhile (only the claim's own pool's ledger keeps it).
        self._status_ips: dict[str, dict[int | tuple[int, int], ObjKey | Several]] = {}
        # How many claims and Cluster API addresses each global pool has in each namespace: it keeps its IPs
        # apart from the namespaced pools of the namespaces where it has some (``withheld``).
        self._spread: dict[o.PoolKey, dict[str, int]] = {}
        # The change log: per pool, the keys of its claims and addresses stored or gone since
        # the pool's ledger last took them (``drain``), and the pools whose ledger must be
        # loaded afresh (a pool of the namespace came, went or changed spec; a Cluster paused).
        self._changes: dict[o.PoolKey, dict[ObjKey, None]] = {}
        self._reload: set[o.PoolKey] = set()
        # The claims whose status says they wait for a claim of their namespace (a global pool's claim waiting for
        # a paused claim of the namespace's pools: ``reconcile.waited_for``), by the claim waited for, and back:
        # a change of that claim, or of an address naming it, is a change of theirs too (their pool decides them
        # again), as nothing filed with their own pool changes when it is unpaused, named, served or gone.
        self._waiters: dict[ObjKey, dict[ObjKey, None]] = {}
        self._waits_for: dict[ObjKey, ObjKey] = {}
        # The pools of each namespace, without a walk over every object.
        self._pool_names: dict[str, set[o.PoolKey]] = {}
        # Claims of an outside IPAM's pools by the allocation key they carry, in every namespace: a key is one
        # address in that IPAM, whatever the claim's namespace or pool (a manifest copied with its annotation).
        self._outside_keys: dict[str, ObjKey | Several] = {}
        # The claims filed with the pool that served them rather than the one they name: a claim whose pool
        # reference was changed (no webhook stopped it) stays with the pool its addresses are of, which
        # keeps its IP from every other claim and releases it when the claim goes (see ``_home``).
        self._homes: dict[ObjKey, o.PoolKey] = {}
        # The allocation keys of claims seen deleted for ``clusterctl move``
        # (``clusterctl.cluster.x-k8s.io/delete-for-move``): their addresses are the copies' in the target, and a
        # sweep here must never release them, also once a move stopped half-way is undone here (the kind's sweep).
        # Each key names the claim that left, (namespace, name): a claim of another name carrying it is a copy
        # and never takes the moved claim's address, also while that claim is back here (a move back); that
        # claim deleted here, not for a move, ends the entry (its copies may take the key over then).
        # What this process saw, and what the outside IPAM says: each sweep remembers the claims named by addresses
        # whose home this controller took off (``moved-from=`` an object here), so a restart forgets none of those.
        self.moved_away: OrderedDict[str, tuple[str, str]] = OrderedDict()
        # For each such key, the uids of the objects the claim belonged to when it left (its Cluster, its pool):
        # the outside IPAM may name them after they are gone (the source's Cluster deleted by the same move).
        self.moved_away_from: dict[str, frozenset[str]] = {}
        # The allocation keys whose outside address the last sweep found homed at another cluster's object, which
        # this cluster's claims may not take over (the kind's sweep): what the claims carrying them say.
        self.homed_elsewhere: dict[str, str] = {}
        # The allocation keys whose outside address the kind's sweep found gone from the outside IPAM while a claim
        # here holds it (deleted there behind this controller): what the claims carrying them say.
        self.address_lost: dict[str, str] = {}
        # Per pool of cluster scope, the Clusters (``namespace/name``) whose claims of it were seen leave for
        # ``clusterctl move``, until the pool's ``ClaimsElsewhere`` condition names them (or a claim of theirs is
        # bound here again): the condition is the record, this bridges the time until it is written.
        self.left_for_move: dict[o.PoolKey, set[str]] = {}

    @staticmethod
    def key(obj: dict) -> ObjKey | None:
        kind = kinds.kind_of(obj)
        if kind not in served() or not o.name(obj):
            return None
        return (kind, o.namespace(obj), o.name(obj))

    def keeps(self, key: ObjKey, obj: dict) -> bool:
        """Whether ``obj`` is filed here: under ``-n`` the Cluster API IPAddresses and IPAddressClaims are
        watched in every namespace, and those of a namespace not served are kept only when of a pool of cluster
        scope."""
        return self.namespaces is None or key[0] not in (kinds.CAPI_ADDRESS, kinds.CAPI_CLAIM) \
            or key[1] in self.namespaces or of_every_namespace(obj)

    # -- feeding -----------------------------------------------------------

    def upsert(self, obj: dict) -> set[o.PoolKey]:
        """Store ``obj`` (new or changed); returns the pools it concerns.

        News older than what is known of the name (a stored newer version, or
        a deletion after it) is dropped and concerns no pool.
        """
        key = self.key(obj)
        if key is None:
            return set()
        if not self.keeps(key, obj):
            return self.remove(obj) if key in self.objects else set()
        if key[0] not in ADDRESS_KINDS:
            return self._upsert(key, obj)
        named = {_claim_named_by(self.objects.get(key)), _claim_named_by(obj)} - {None}
        return self._upsert(key, obj) | self._rehome(named)

    def _upsert(self, key: ObjKey, obj: dict) -> set[o.PoolKey]:
        stored = self.objects.get(key)
        # A lock of one store filed over the other's (``lockstore``): two objects, whose versions tell nothing of
        # each other; the adapter decides which one is filed.
        if stored is not None and _store(stored) == _store(obj) \
                and (_is_older(obj, version_of(stored)) or _same_version(obj, stored)):
            return set()
        tombstone = self._tombstones.get((key, _store(obj)))
        if tombstone is not None:
            if _is_older(obj, tombstone[0]) or version_of(obj) == tombstone[0] \
                    or (tombstone[0] is None and _uid(obj) == tombstone[1] and _uid(obj) is not None):
                return set()
            del self._tombstones[(key, _store(obj))]
        if stored is not None and key[0] in CLAIM_KINDS and o.deleted_for_move(obj) \
                and _uid(stored) in (_uid(obj), None):
            obj = _leaving_with(obj, stored)  # the same claim (an earlier one of its name carried its own)
        self.filed += 1
        before = self._as_filed(key, stored) if stored is not None else None
        home = self._home(key, obj) if key[0] in CLAIM_KINDS else None
        self._index_status_ip(key, stored, obj)
        if stored is not None and key[0] not in poolkind.REGISTRY and key[0] != kinds.CLUSTER \
                and self._filed(key) == (home if key[0] in CLAIM_KINDS else o.pool_of(obj)) \
                and _address_ip(stored) == _address_ip(obj) \
                and o.spec(stored).get("prefix") == o.spec(obj).get("prefix"):
            # Same place: replace in place, so claims keep the order they came in.
            self.objects[key] = obj
            if key[0] in CLAIM_KINDS:
                self._set_home(key, obj, home)
            self._index_outside_key(key, before, self._as_filed(key, obj))
            self._note_wait(key, obj)
            return self._file(key, obj) | self._wake_waiters(key, stored, obj)
        was_filed = self._filed(key)
        touched = self._unfile(key, obj)
        self.objects[key] = obj
        if key[0] in CLAIM_KINDS:
            self._set_home(key, obj, home)
        self._index_outside_key(key, before, self._as_filed(key, obj))
        touched |= self._file(key, obj, previous=stored)
        self._note_wait(key, obj)
        touched |= self._wake_waiters(key, stored, obj)
        return touched | self._spread_moved(key, was_filed, self._filed(key))

    # -- claims and the pool that served them ------------------------------------

    def _home(self, key: ObjKey, claim: dict) -> o.PoolKey | None:
        """The pool a claim is filed with: the one it names, unless addresses of another pool of ours are
        its (they name it, and its uid, or its status names their IP) and none of the one it names is; or,
        with none left, the pool it was filed with while it carries that pool's finalizer (its address
        objects deleted by hand: that pool gives its IP back, or releases it when it goes). Meant for a
        reference changed by hand (it is immutable), whatever it names now: a pool of another provider, another
        API group, another of our pools."""
        requested = o.pool_of(claim)
        homes = set()
        for address_key in self._addresses_of(key, claim):
            address = self.objects.get(address_key)
            pool = self._filed(address_key)
            if pool is None or _claim_named_by(address) != key or not _serves(address, claim):
                continue
            if pool == requested:
                return requested
            homes.add(pool)
        before = self._filed(key) if key in self.objects else None  # where it is filed until now
        if not homes:
            homes = {next((pool for pool in self._last_homes(key, claim, before) if pool != requested
                           and poolkind.REGISTRY[pool.kind].finalizers.claim.get(key[0]) in o.finalizers(claim)),
                          None)} - {None}
        if homes:
            home = before if before in homes else min(homes)
        elif o.is_deleting(claim):
            home = self._releaser(key, claim, requested)
        else:
            return requested
        # Only where the claim can be shown as that pool's (an IPClaim's pool is of its own namespace).
        return home if home is not None and o.pool_of(o.served_by(claim, home)) == home else requested

    def _last_homes(self, key: ObjKey, claim: dict, before: o.PoolKey | None) -> Iterator[o.PoolKey]:
        """Where a claim nothing of ours names any more (its address objects deleted) was served, most trusted
        first: the pool it is filed with; the pool its ``PoolReferenceChanged`` condition names; the pool of
        the kind whose finalizer it carries that its reference names, when that pool holds the IP its status
        says it is bound to (a reference changed in kind or group alone, seen by no controller)."""
        if before is not None and before.kind in poolkind.REGISTRY:
            yield before
        served = moved_from(claim)
        if served is not None:
            yield served
        ip = bound_ip(claim)
        ref = o.spec(claim).get("pool" if key[0] == kinds.IPCLAIM else "poolRef")
        name = ref.get("name") if isinstance(ref, Mapping) else None
        if ip is None or not isinstance(name, str) or not name:
            return
        requested = o.pool_of(claim)
        own = poolkind.REGISTRY[requested.kind].finalizers.claim.get(key[0]) \
            if requested is not None and requested.kind in poolkind.REGISTRY else None
        for kind, pool_kind in poolkind.REGISTRY.items():
            finalizer = pool_kind.finalizers.claim.get(key[0])
            if finalizer not in o.finalizers(claim) or finalizer == own:
                continue  # a finalizer its own kind writes too (the Go provider's one for every kind) tells nothing
            guess = o.PoolKey("" if pool_kind.cluster_scoped else key[1], name, kind)
            pool = self.objects.get((kind, guess.namespace, name))
            model = self.pool_model(pool)[0] if pool is not None else None
            if model is not None and ip.version == model.version and model.entry_of(model.unit_of(int(ip))):
                yield guess

    @staticmethod
    def _releaser(key: ObjKey, claim: dict, requested: o.PoolKey | None) -> o.PoolKey | None:
        """For a deleted claim holding no address of ours: the pool that takes its finalizer off. Its own, unless
        it carries the claim finalizer of another kind of ours, and its status says this controller bound it (a
        reference changed away, whose addresses went while no controller saw where it was filed): then the
        pool of that kind named as its reference names, whose pass has nothing left to release."""
        finalizers = o.finalizers(claim)
        own = poolkind.REGISTRY[requested.kind].finalizers.claim.get(key[0]) if requested is not None else None
        if own in finalizers or not (bound_ip(claim) is not None
                                     or o.condition(o.status(claim), POOL_REFERENCE_CHANGED) is not None):
            return requested
        ref = o.spec(claim).get("pool" if key[0] == kinds.IPCLAIM else "poolRef")
        name = ref.get("name") if isinstance(ref, Mapping) else None
        for kind, pool_kind in poolkind.REGISTRY.items():
            if isinstance(name, str) and name and pool_kind.finalizers.claim.get(key[0]) in finalizers:
                return o.PoolKey("" if pool_kind.cluster_scoped else key[1], name, kind)
        return requested

    def _addresses_of(self, key: ObjKey, claim: dict) -> Iterator[ObjKey]:
        """Where a claim's addresses are, found from the claim (no index of addresses by claim: it would cost
        as much as a tenth of what a claim costs): its Cluster API address, named after it or as its status
        names it; the Metal3 address its status names; and the locks at the IP its Ready condition names."""
        kind, namespace, name = key
        ref = o.status(claim).get("addressRef" if kind == kinds.CAPI_CLAIM else "address")
        named = ref.get("name") if isinstance(ref, Mapping) and isinstance(ref.get("name"), str) else None
        if kind == kinds.CAPI_CLAIM:
            yield (kinds.CAPI_ADDRESS, namespace, name)
            if named and named != name:
                yield (kinds.CAPI_ADDRESS, namespace, named)
        elif named:
            yield (kinds.IPADDRESS, str(ref.get("namespace") or namespace), named)
        ip = bound_ip(claim)
        if ip is not None:
            for where in {namespace, self.lock_namespace}:
                yield from (k for k in self.holders(where, ip.version, int(ip)) if k[0] == kinds.IPADDRESS)

    def _set_home(self, key: ObjKey, claim: dict, home: o.PoolKey | None) -> None:
        if home is not None and home != o.pool_of(claim):
            self._homes[key] = home
        else:
            self._homes.pop(key, None)

    def _rehome(self, claim_keys: Iterable[ObjKey]) -> set[o.PoolKey]:
        """The claims an address changed names, filed again where they now belong."""
        touched: set[o.PoolKey] = set()
        for key in claim_keys:
            claim = self.objects.get(key)
            if claim is None:
                continue
            home, was_filed = self._home(key, claim), self._filed(key)
            if home == was_filed:
                continue
            before = self._as_filed(key, claim)
            touched |= self._unfile(key, claim)
            self._set_home(key, claim, home)
            self._index_outside_key(key, before, self._as_filed(key, claim))
            touched |= self._file(key, claim)
            touched |= self._spread_moved(key, was_filed, self._filed(key))
        return touched

    def _as_filed(self, key: ObjKey, obj: dict) -> dict:
        """The object as its pool's group holds it: a claim filed with a pool it does not name is shown so."""
        home = self._homes.get(key)
        return o.served_by(obj, home) if home is not None else obj

    def holds(self, kind: tuple[str, str], meta: dict) -> bool:
        """True when the object ``meta`` describes is no news: its name is stored at that
        resourceVersion or a newer one (``upsert`` would drop it; an equal version is the same object)."""
        version = version_number(meta.get("resourceVersion"))
        stored = self.objects.get((kind, str(meta.get("namespace") or ""), str(meta.get("name") or "")))
        if stored is not None and _store(stored) != _store({"metadata": meta}):
            return False  # news of the other store's object of that name (``lockstore``)
        known = version_of(stored) if stored is not None else None
        return version is not None and known is not None and version <= known

    def remove(self, obj: dict) -> set[o.PoolKey]:
        """A deletion of ``obj``'s incarnation; one about an older incarnation changes nothing."""
        key = self.key(obj)
        if key is None or (key not in self.objects and not self.keeps(key, obj)):
            return set()  # news of what is never filed here leaves no tombstone either
        stored = self.objects.get(key)
        if stored is not None and _store(stored) != _store(obj):
            stored = None  # the other store's object of that name stays (``lockstore``): only this one is buried
        elif stored is not None:
            if _is_older(obj, version_of(stored)):
                return set()
            if version_of(obj) is None and _uid(obj) and _uid(stored) and _uid(obj) != _uid(stored):
                return set()
        self._bury((key, _store(obj)),
                   version_of(obj) if version_of(obj) is not None else (stored and version_of(stored)),
                   _uid(obj) or (stored and _uid(stored)))
        if stored is None:
            return set()
        filed = self._as_filed(key, stored)
        if key[0] in CLAIM_KINDS and (o.deleted_for_move(obj) or o.deleted_for_move(stored)):
            self._left_for_move(self._filed(key), filed)
        if key[0] == kinds.CAPI_CLAIM and (o.deleted_for_move(obj) or o.deleted_for_move(stored)):
            self._moved_away(_outside_key(filed), key[1:], self._belonged_to(key, filed))
        elif key[0] == kinds.CAPI_CLAIM and self.moved_away.get(_outside_key(filed)) == key[1:]:
            del self.moved_away[_outside_key(filed)]  # the claim that came back is deleted here
            self.moved_away_from.pop(_outside_key(filed), None)
        self._index_outside_key(key, filed, None)
        self._index_status_ip(key, stored, None)
        was_filed = self._filed(key)
        touched = self._unfile(key, None)
        del self.objects[key]
        self._homes.pop(key, None)
        if key[0] in ADDRESS_KINDS:
            touched |= self._rehome({_claim_named_by(stored)} - {None})
        self._note_wait(key, None)
        touched |= self._wake_waiters(key, stored, None)
        return touched | self._spread_moved(key, was_filed, None)

    def _note_wait(self, key: ObjKey, claim: dict | None) -> None:
        """Note whom a claim stored (or, None, gone) waits for (``_waiters``)."""
        if key[0] not in CLAIM_KINDS:
            return
        before, after = self._waits_for.get(key), waited_for(claim) if claim is not None else None
        if before == after:
            return
        if before is not None:
            waiters = self._waiters[before]
            del waiters[key]
            if not waiters:
                del self._waiters[before]
            del self._waits_for[key]
        if after is not None:
            self._waiters.setdefault(after, {})[key] = None
            self._waits_for[key] = after

    def _wake_waiters(self, key: ObjKey, old: dict | None, new: dict | None) -> set[o.PoolKey]:
        """A claim, or an address naming one (before or now), stored or gone: the claims waiting for that claim
        are changes of their pools (``_waiters``); returns those pools."""
        if key[0] in CLAIM_KINDS:
            named = {key}
        elif key[0] in ADDRESS_KINDS:
            named = {_claim_named_by(old), _claim_named_by(new)} - {None}
        else:
            return set()
        touched = set()
        for claim in named:
            for waiter in self._waiters.get(claim, ()):
                pool = self._filed(waiter)
                if pool is not None:
                    self._changes.setdefault(pool, {})[waiter] = None
                    touched.add(pool)
        return touched

    def _index_outside_key(self, key: ObjKey, old: dict | None, new: dict | None) -> None:
        if key[0] != kinds.CAPI_CLAIM:
            return
        before, after = _outside_key(old), _outside_key(new)
        if before == after:
            return
        if before is not None:
            rest = entry_of(k for k in each(self._outside_keys.get(before)) if k != key)
            if rest is None:
                self._outside_keys.pop(before, None)
            else:
                self._outside_keys[before] = rest
        if after is not None:
            known = each(self._outside_keys.get(after))
            if key not in known:
                self._outside_keys[after] = entry_of((*known, key))

    def _status_ip(self, claim: dict | None) -> int | tuple[int, int] | None:
        """The IP a claim's status says it holds in its pool (read with the pool's spec, filed before it).

        A claim naming no pool of ours that carries the claim finalizer of a kind of ours (its reference
        changed where no webhook stopped it, maybe while no controller ran) holds the IP its Ready condition
        says this controller bound it to: kept from every pool of the namespace while it lives."""
        pool = o.pool_of(claim) if claim is not None else None
        if claim is not None and (pool is None or pool.kind not in poolkind.REGISTRY):
            return _orphan_status_ip(claim, kinds.kind_of(claim))
        if pool is None:
            return None
        pool_obj = self.objects.get((pool.kind, pool.namespace, pool.name))
        model = self.pool_model(pool_obj)[0] if pool_obj is not None else None
        unit = own_ip(claim, model) if model is not None else None
        return None if unit is None else _ip_key(model.version, int(model.address_of(unit)))

    def _index_status_ip(self, key: ObjKey, old: dict | None, new: dict | None) -> None:
        if key[0] not in (kinds.IPCLAIM, kinds.CAPI_CLAIM):
            return
        before, after = self._status_ip(old), self._status_ip(new)
        if before == after:
            return
        named = self._status_ips.setdefault(key[1], {})
        if before is not None:
            rest = entry_of(k for k in each(named.get(before)) if k != key)
            if rest is None:
                named.pop(before, None)
            else:
                named[before] = rest
        if after is not None and key not in each(named.get(after)):
            named[after] = entry_of((*each(named.get(after)), key))
        if not named:
            del self._status_ips[key[1]]

    def _reindex_status_ips(self, pool_key: o.PoolKey) -> None:
        """A pool came or changed its spec: its claims' statuses are read with it again (claims filed before
        their pool, as a start-up's listings may file them, were not read at all). One walk over the index of
        each namespace concerned, one read per claim."""
        group = self.groups.get(pool_key)
        claims = {self.key(c): c for c in group.claims.values()} if group is not None else {}
        for namespace in {key[1] for key in claims}:
            named = self._status_ips.get(namespace, {})
            for ip, holders in list(named.items()):
                rest = entry_of(k for k in each(holders) if k not in claims)
                if rest is None:
                    del named[ip]
                else:
                    named[ip] = rest
        for key, claim in claims.items():
            self._index_status_ip(key, None, claim)

    def kept_by_claims(self, pool_key: o.PoolKey) -> dict[str, str]:
        """``<kind> <name>`` -> IP of each live claim of the pool that holds no live address and whose status
        names an IP of it: the IP kept for it (``kept``), what admission keeps a preallocation from giving
        away."""
        group = self.groups.get(pool_key)
        pool_obj = self.objects.get((pool_key.kind, pool_key.namespace, pool_key.name))
        model = self.pool_model(pool_obj)[0] if pool_obj is not None else None
        if group is None or model is None:
            return {}
        holding = {o.claim_of_address(a) for a in group.addresses.values() if not o.is_deleting(a)}
        holding |= {o.claim_of_capi_address(a) for a in group.capi_addresses.values() if not o.is_deleting(a)}
        found = {}
        for claim in group.claims.values():
            unit = None if (kinds.kind_of(claim)[1], o.name(claim)) in holding else own_ip(claim, model)
            if unit is not None:
                found[f"{kinds.kind_of(claim)[1]} {o.name(claim)}"] = str(model.address_of(unit))
        return found

    def kept_elsewhere(self, pools_apart: set[o.PoolKey], namespace: str, version: int, ip: int) -> bool:
        """A live claim of ``namespace`` in another pool than ``pools_apart`` has a status naming ``ip``: its own
        IP, which it gets back if its address objects are gone (``kept``), and which no pool may hand out."""
        return any(self._filed(k) not in pools_apart
                   for k in each(self._status_ips.get(namespace, {}).get(_ip_key(version, ip))))

    def keeper_elsewhere(self, pools_apart: set[o.PoolKey], namespace: str, version: int, ip: int,
                         claim: dict) -> dict | None:
        """Of the live claims of ``namespace`` in other pools than ``pools_apart`` whose status names ``ip``, the
        first by ``kept.precedence`` if it goes before ``claim``, whose status names it too: the IP is kept for that
        one. A claim holding an address of its pool is bound by that address, not by its status: it counts for
        nothing here. One naming no pool of ours (``_orphan_status_ip``) holds the IP while it lives."""
        first, order = None, precedence(claim)
        for key in each(self._status_ips.get(namespace, {}).get(_ip_key(version, ip))):
            pool, other = self._filed(key), self.objects.get(key)
            if pool in pools_apart or other is None:
                continue
            if pool is None or pool.kind not in poolkind.REGISTRY:
                return other
            if self.holds_address(pool, other):
                continue
            if precedence(other) < order:
                first, order = other, precedence(other)
        return first

    def remember_moved_away(self, outside_key: str, claim: tuple[str, str], uids: Iterable[str] = ()) -> None:
        """Count the claim (namespace, name) as seen leave for ``clusterctl move`` carrying ``outside_key``: what
        the outside IPAM says of it (an address whose home this controller took off, ``moved-from=``), after a
        restart; ``uids``: the objects it belonged to, as far as the outside IPAM names them."""
        self._moved_away(outside_key, claim, frozenset(uids))

    def _moved_away(self, outside_key: str | None, claim: tuple[str, str], uids: frozenset[str] = frozenset()
                    ) -> None:
        if outside_key is None:
            return
        self.moved_away[outside_key] = claim
        self.moved_away.move_to_end(outside_key)
        self.moved_away_from[outside_key] = uids
        while len(self.moved_away) > MAX_TOMBSTONES:
            self.moved_away_from.pop(self.moved_away.popitem(last=False)[0], None)

    def _belonged_to(self, key: ObjKey, claim: dict) -> frozenset[str]:
        """The uids of the Cluster and the pool of ``claim`` (filed under ``key``), as far as they are here."""
        cluster, pool_key = o.cluster_name_of(claim), self._filed(key)
        owners = [self.get(kinds.CLUSTER, o.namespace(claim), cluster) if cluster else None,
                  self.get(pool_key.kind, pool_key.namespace, pool_key.name) if pool_key is not None else None]
        return frozenset(uid for obj in owners if obj is not None and (uid := _uid(obj)))

    def _left_for_move(self, pool_key: o.PoolKey | None, claim: dict) -> None:
        cluster = cluster_of(claim)
        if pool_key is not None and cluster is not None and poolkind.REGISTRY[pool_key.kind].cluster_scoped:
            self.left_for_move.setdefault(pool_key, set()).add(cluster)

    def _back_from_move(self, pool_key: o.PoolKey, obj: dict) -> None:
        """The Clusters left for a move that ``obj`` shows back (a claim of theirs bound here) or recorded
        (the pool's ``ClaimsElsewhere`` condition names them) are no longer this inventory's to tell."""
        left = self.left_for_move.get(pool_key)
        if left is None:
            return
        if pool_key.kind == kinds.kind_of(obj):
            left -= Elsewhere.read(o.status(obj)).away
        elif not o.is_deleting(obj) and not o.deleted_for_move(obj) and bound_ip(obj) is not None:
            left.discard(cluster_of(obj) or "")
        if not left:
            del self.left_for_move[pool_key]

    def claims_carrying(self, outside_key: str) -> list[dict]:
        """The Cluster API claims of any namespace and any outside IPAM's pool that carry ``outside_key``."""
        return [self._as_filed(k, self.objects[k]) for k in each(self._outside_keys.get(outside_key))
                if k in self.objects]

    def forget(self, kind: tuple[str, str], namespace: str, name: str) -> set[o.PoolKey]:
        """The API server says the name does not exist now: drop what is stored of it."""
        stored = self.get(kind, namespace, name)
        return self.remove(stored) if stored is not None else set()

    def _bury(self, key: tuple[ObjKey, str | None], version: int | None, uid: str | None) -> None:
        known = self._tombstones.get(key)
        if known is not None and known[0] is not None and (version is None or version < known[0]):
            return  # a later deletion is known already: older news must not reopen the name
        self._tombstones[key] = (version, uid)
        self._tombstones.move_to_end(key)
        while len(self._tombstones) > MAX_TOMBSTONES:
            self._tombstones.popitem(last=False)

    def settle_listing(self, kind: tuple[str, str], namespace: str | None, items: Iterable[dict],
                       list_version: str | None) -> set[o.PoolKey]:
        """File a complete LIST of ``kind`` (in ``namespace``, or everywhere) taken at ``list_version``.

        Listed objects are filed like events. A stored object the listing does
        not hold and that is older than the listing was deleted while no watch
        reported it (a watch gap): it goes.
        """
        touched: set[o.PoolKey] = set()
        for part in self.settle_listing_in_steps(kind, namespace, items, list_version):
            touched |= part
        return touched

    def settle_listing_in_steps(self, kind: tuple[str, str], namespace: str | None, items: Iterable[dict],
                                list_version: str | None, step: int = SETTLE_STEP) -> Iterator[set[o.PoolKey]]:
        """``settle_listing`` a few objects at a time: yields the pools each ``step`` objects touched.

        Between two of them the caller may let other work run (the event loop's
        watch events, health probes, lease renewals): filing 50,000 objects at
        once would stop all of it for seconds. Events filed meanwhile are no
        different from events that came before or after the listing: each name
        keeps the newest of what is known of it (newer versions, tombstones),
        and only objects no newer than the listing can be proved gone by it.
        """
        listing = self.listing(kind, namespace)
        yield from listing.file(items, step)
        yield from listing.finish(list_version, step)

    def listing(self, kind: tuple[str, str], namespace: str | None,
                only: Callable[[dict], bool] | None = None) -> "Listed":
        """A LIST of ``kind`` (in ``namespace``, or everywhere) filed as its pages come: see ``Listed``; ``only``:
        the stored objects it speaks for (locks of one store, where two stores hold objects of the kind)."""
        return Listed(self, kind, namespace, only)

    def _filed(self, key: ObjKey) -> o.PoolKey | None:
        """The pool the object stored under ``key`` is filed with (None: none, or nothing stored)."""
        obj = self.objects.get(key)
        if obj is None:
            return None
        kind, ns, name = key
        if kind in poolkind.REGISTRY:
            return o.PoolKey(ns, name, kind)
        if kind in CLAIM_KINDS and key in self._homes:
            return self._homes[key]
        return None if kind == kinds.CLUSTER else o.pool_of(obj)

    def _file(self, key: ObjKey, obj: dict, previous: dict | None = None) -> set[o.PoolKey]:
        kind, ns, name = key
        if kind in poolkind.REGISTRY:
            pool_key = o.PoolKey(ns, name, kind)
            self._pool_names.setdefault(ns, set()).add(pool_key)
            touched = {pool_key}
            self._back_from_move(pool_key, obj)
            if previous is None or _pool_generation(obj) is None or _pool_generation(previous) != _pool_generation(obj) \
                    or o.meta(previous).get("creationTimestamp") != o.meta(obj).get("creationTimestamp") \
                    or separate_network(previous) != separate_network(obj):
                touched |= self._pools_changed(ns)
                self.pool_model(obj)  # each spec read as it comes: the families its passes may hand out
                self._reindex_status_ips(pool_key)
            return touched
        if kind == kinds.CLUSTER:
            if previous is not None and o.cluster_paused(previous) == o.cluster_paused(obj) \
                    and _uid(previous) == _uid(obj):
                return set()  # status churn of a Cluster concerns no pool
            return self._reloaded(self.pools_of_clusters_in(ns))
        pool = self._filed(key)
        if pool is None:
            return set()
        if kind in ADDRESS_KINDS:
            ip = _address_ip(obj)
            if ip is not None:
                held = self._holders.setdefault(ns, {})
                known = each(held.get(ip))
                if key not in known:
                    held[ip] = entry_of((*known, key))
                    if not known:
                        version, value = _version_and_value(ip)
                        self._held_ips.setdefault(ns, {}).setdefault(version, IntervalSet()).add(value)
            self._file_prefix(ns, key, _prefix_held(obj, pool), True)
        self._changes.setdefault(pool, {})[key] = None
        group = self.groups.setdefault(pool, _PoolGroup())
        if kind in CLAIM_KINDS:
            filed = self._as_filed(key, obj)
            group.claims[o.claim_key(filed)] = filed
            self._back_from_move(pool, obj)
        elif kind == kinds.IPADDRESS:
            group.addresses[_member(pool, ns, name)] = obj
        else:
            group.capi_addresses[_member(pool, ns, name)] = obj
        return {pool}

    def _unfile(self, key: ObjKey, incoming: dict | None) -> set[o.PoolKey]:
        kind, ns, name = key
        if key not in self.objects:
            return set()
        old = self.objects[key]
        pool = self._filed(key)
        if kind in ADDRESS_KINDS:
            ip = _address_ip(old)
            held = self._holders.get(ns, {})
            known = each(held.get(ip))
            if key in known:
                rest = entry_of(k for k in known if k != key)
                if rest is None:
                    del held[ip]
                    version, value = _version_and_value(ip)
                    self._held_ips[ns][version].discard(value)
                else:
                    held[ip] = rest
            self._file_prefix(ns, key, _prefix_held(old, o.pool_of(old)), False)
        if kind == kinds.CLUSTER:
            return self._reloaded(self.pools_of_clusters_in(ns)) if incoming is None else set()
        if kind in poolkind.REGISTRY:
            if incoming is None:
                self._models.pop(key, None)
                self._lengths.pop(key, None)
                self._generations.pop(key, None)
                names = self._pool_names.get(ns, set())
                names.discard(pool)
                if not names:
                    self._pool_names.pop(ns, None)
                return ({pool} if pool else set()) | self._pools_changed(ns)
            return {pool} if pool else set()
        if pool is None:
            return set()
        self._changes.setdefault(pool, {})[key] = None
        group = self.groups.get(pool)
        if group is not None:
            if kind in CLAIM_KINDS:
                group.claims.pop(o.claim_key(self._as_filed(key, old)), None)
            elif kind == kinds.IPADDRESS:
                group.addresses.pop(_member(pool, ns, name), None)
            else:
                group.capi_addresses.pop(_member(pool, ns, name), None)
            if not group:
                del self.groups[pool]
        return {pool}

    def _file_prefix(self, ns: str, key: ObjKey, held: tuple[int, int, int] | None, add: bool) -> None:
        """File (or unfile) an address under the sub-prefix (version, length, base) it holds whole."""
        if held is None:
            return
        version, length, base = held
        bases = self._prefixes.setdefault(ns, {}).setdefault((version, length), {})
        known = each(bases.get(base))
        if add and key in known:
            return
        rest = entry_of((*known, key) if add else (k for k in known if k != key))
        if rest is None:
            bases.pop(base, None)
            if not bases:
                del self._prefixes[ns][(version, length)]
        else:
            bases[base] = rest

    def _spread_moved(self, key: ObjKey, before: o.PoolKey | None, after: o.PoolKey | None) -> set[o.PoolKey]:
        """A claim or Cluster API address filed under ``after`` instead of ``before``: where a global pool
        has a claim or an address first, or none any more, what it and the pools of that namespace withhold of
        each other may change (if it does, they are passed, and load afresh: ``reconcile.needs_full``)."""
        kind, namespace, _ = key
        if before == after or kind in poolkind.REGISTRY or kind in (kinds.CLUSTER, kinds.IPADDRESS):
            return set()
        touched: set[o.PoolKey] = set()
        for pool, step in ((before, -1), (after, 1)):
            if pool is None or pool.namespace or pool.kind not in poolkind.REGISTRY or not keeps_apart(pool.kind):
                continue
            counts = self._spread.setdefault(pool, {})
            count = counts.get(namespace, 0) + step
            if count > 0:
                counts[namespace] = count
            else:
                counts.pop(namespace, None)
                if not counts:
                    del self._spread[pool]
            if (count == 1 and step == 1) or count == 0:
                before = self._withheld.pop(namespace, None) or {}
                if before != self._withheld_in(namespace):
                    touched |= self.pools_in(namespace)
        return touched

    def _pools_changed(self, namespace: str) -> set[o.PoolKey]:
        """A pool of ``namespace`` came, went or changed its spec: what every pool of the namespace withholds
        may change (they are loaded afresh), and what the global pools with claims there withhold from those
        claims (loaded afresh too: their claims waiting there are decided again). A global pool's change
        concerns every pool: those of the namespaces are passed, and load afresh if what they withhold or
        show changed (``reconcile.needs_full``)."""
        if namespace:
            self._withheld.pop(namespace, None)
            return self._reloaded(self.pools_in(namespace) | {key for key in self.pools_in("")
                                                               if self.has_claims_in(key, namespace)})
        self._withheld.clear()
        return self._reloaded(self.pools_in("")) | {key for key in self.pool_keys()
                                                    if key.kind in poolkind.REGISTRY and keeps_apart(key.kind)}

    def _reloaded(self, pools: set[o.PoolKey]) -> set[o.PoolKey]:
        self._reload |= pools
        for pool in pools:
            self._changes.pop(pool, None)  # a ledger loaded afresh needs no list of changes
        return pools

    def drain(self, pool_key: o.PoolKey) -> tuple[bool, list[tuple[ObjKey, dict | None]]]:
        """What changed in the pool since the last drain: (load afresh, [(key, object now or None)]).

        The object is None when it is gone or now filed under another pool.
        """
        pool_key = o.PoolKey(*pool_key)
        reload = pool_key in self._reload
        self._reload.discard(pool_key)
        keys = self._changes.pop(pool_key, {})
        if reload:
            return True, []
        return False, [(key, self._as_filed(key, self.objects[key]) if self._filed(key) == pool_key else None)
                       for key in keys]

    def pending(self, pool_key: o.PoolKey) -> bool:
        """Something of the pool changed since its last drain (the writer files the answers to a pass's writes)."""
        pool_key = o.PoolKey(*pool_key)
        return pool_key in self._reload or bool(self._changes.get(pool_key))

    # -- reading -------------------------------------------------------------

    def get(self, kind: tuple[str, str], namespace: str, name: str) -> dict | None:
        return self.objects.get((kind, namespace, name))

    def of_kind(self, kind: tuple[str, str]) -> Iterable[dict]:
        return [obj for (k, _, _), obj in self.objects.items() if k == kind]

    def filed_with(self, kind: tuple[str, str], namespace: str, name: str) -> o.PoolKey | None:
        """The pool the object of that name is filed with (a claim: the pool that serves it; see ``_home``)."""
        return self._filed((kind, namespace, name))

    def pools_in(self, namespace: str) -> set[o.PoolKey]:
        return set(self._pool_names.get(namespace, ())) | {key for key in self.groups if key.namespace == namespace}

    def pools_of_clusters_in(self, namespace: str) -> set[o.PoolKey]:
        """The pools whose claims a Cluster of the namespace may pause: those of the namespace, and the pools
        of cluster scope (filed under namespace ""), whose claims may be in any namespace."""
        return self.pools_in(namespace) | self.pools_in("") if namespace else self.pools_in(namespace)

    def pools_of_cluster(self, namespace: str, cluster: str) -> set[o.PoolKey]:
        return {key for key in self._pool_names.get(namespace, ())
                if poolkind.REGISTRY[key.kind].cluster_name(self.objects[(key.kind, namespace, key.name)]) == cluster}

    def pool_keys(self) -> list[o.PoolKey]:
        """Every pool that exists or is referred to, in a stable order."""
        keys = {key for keys in self._pool_names.values() for key in keys}
        return sorted(keys | set(self.groups))

    def claims_of(self, pool_key: o.PoolKey) -> list[dict]:
        group = self.groups.get(pool_key)
        return list(group.claims.values()) if group else []

    def name_taken(self, namespace: str, name: str) -> bool:
        return (kinds.IPADDRESS, namespace, name) in self.objects

    def holders(self, namespace: str, version: int, ip: int) -> set[ObjKey]:
        """The addresses (of either API, any pool of ours) in ``namespace`` that hold ``ip``."""
        return set(each(self._holders.get(namespace, {}).get(_ip_key(version, ip))))

    def held_elsewhere(self, pool_key: o.PoolKey, namespace: str, version: int, lo: int, hi: int,
                       mates: Iterable[o.PoolKey] = (), for_keeper: bool = False) -> bool:
        """Whether an address of ``namespace`` (either API, a pool of ours other than ``pool_key`` and its
        ``mates``, the pools it shares addresses with as separate networks) holds any of the addresses
        ``lo``..``hi`` (an IP, or an aligned sub-prefix): an IP inside the span, or a sub-prefix a prefix
        pool's address holds whole that meets it. Sub-prefixes are aligned, so one that meets the span either
        holds ``lo`` or lies inside it (and then so does its address): O(log n) for the IPs, and one look per
        length of sub-prefix held in the namespace. ``for_keeper``: asked for the claim whose status names the
        IP, which an address written before its claim and bound to none does not hold it from (``binds_none``)."""
        own = {pool_key, *mates}

        def elsewhere(keys: Iterable[ObjKey]) -> bool:
            return any(self._filed(k) not in own and not (for_keeper and self._binds_none(k)) for k in keys)

        ips = self._held_ips.get(namespace, {}).get(version)
        at = ips.next_from(lo) if ips else None
        while at is not None and at <= hi:
            if elsewhere(self.holders(namespace, version, at)):
                return True
            at = ips.next_from(at + 1)
        for (held_version, length), bases in self._prefixes.get(namespace, {}).items():
            bits = FAMILY_BITS[held_version] - length
            if held_version == version and elsewhere(each(bases.get(lo >> bits << bits))):
                return True
        return False

    def held_twice(self, pool_key: o.PoolKey, mates: Iterable[o.PoolKey], namespace: str, version: int,
                   ip: int) -> list[tuple[o.PoolKey, str, dict]]:
        """What holds ``ip`` for a claim of ``namespace`` of ``pool_key`` that a pool it keeps its IPs apart from
        across namespaces holds for another claim: each such address with its pool and the claim it holds it for
        ("Kind namespace/name"). Between a global pool and another global pool (their locks, in the lock
        namespace), or a namespaced pool of ``namespace``; not the pools it shares addresses with as separate
        networks (``mates``), nor an address written before its claim that no claim is bound to. A pool whose
        separate-network annotation was removed while both handed the IP out finds it here."""
        if not keeps_apart(pool_key.kind) or (pool_key.namespace and not self._pool_names.get("")):
            return []  # a namespaced pool where there is no global pool: nothing to look at
        apart = {pool_key, *mates}
        spaces = [namespace] + ([self.lock_namespace] if not pool_key.namespace else [])
        found: dict[str, tuple[o.PoolKey, dict]] = {}
        for space in dict.fromkeys(spaces):
            at = self.addresses_at(space, version, ip)
            for filed, address in at:
                if filed in apart or not keeps_apart(filed.kind) or o.is_deleting(address) \
                        or (filed.namespace and (filed.namespace != namespace or pool_key.namespace)):
                    continue
                capi = kinds.kind_of(address) == kinds.CAPI_ADDRESS
                claim = o.claim_named_by(address)
                if claim is None or (capi and self._binds_none(self.key(address))):
                    continue
                (kind, claim_namespace, claim_name), holder = claim, self.get(*claim)
                if left_by_a_refused_pass(address, holder) or left_by_an_earlier_incarnation(
                        address, holder, (self.get(*named) for named in map(o.claim_named_by, (a for _, a in at))
                                          if named), self.separate_network):
                    continue  # never bound, and going
                found.setdefault(f"{kind[1]} {claim_namespace}/{claim_name}", (filed, address))
        return [(filed, who, address) for who, (filed, address) in sorted(found.items())]

    def _binds_none(self, key: ObjKey) -> bool:
        address = self.objects.get(key)
        if address is None:
            return False
        claim = o.claim_of_capi_address(address) if kinds.kind_of(address) == kinds.CAPI_ADDRESS else None
        return binds_none(address, self.get(kinds.CAPI_CLAIM, o.namespace(address), claim[1]) if claim else None)

    def separate_network(self, key: o.PoolKey | None) -> bool:
        """Whether ``key`` is a stored global pool marked a separate network (``overlap.separate_network``)."""
        pool = self.objects.get((key.kind, key.namespace, key.name)) if key is not None else None
        return pool is not None and separate_network(pool)

    def addresses_at(self, namespace: str, version: int, ip: int) -> list[tuple[o.PoolKey, dict]]:
        """The addresses (of either API, any pool of ours) in ``namespace`` that hold ``ip``, with their pool."""
        found = []
        for key in sorted(self.holders(namespace, version, ip)):
            filed = self._filed(key)
            if filed is not None:
                found.append((filed, self.objects[key]))
        return found

    def held_by_others(self, pool_key: o.PoolKey, namespace: str, version: int, ip: int,
                       every_pool: bool = False) -> list[dict]:
        """The addresses in ``namespace`` holding ``ip`` for another pool among those keeping an IP unique in
        their namespace (a global pool's locks in the lock namespace are not of them), or with ``every_pool``
        of any other pool (what an outside IPAM's pool refuses)."""
        return [address for filed, address in self.addresses_at(namespace, version, ip)
                if filed != pool_key and (every_pool or poolkind.REGISTRY[filed.kind].unique_in_namespace)]

    def pool_model(self, pool: dict) -> tuple[Pool | None, list[Problem]]:
        """The pool's spec read once per generation (status writes do not change it)."""
        key = self.key(pool)
        ident = _pool_generation(pool)
        cached = self._models.get(key)
        if ident is not None and cached is not None and cached[0] == ident:
            return cached[1], cached[2]
        model, problems = poolkind.read(pool)
        if ident is not None:
            self._models[key] = (ident, model, problems)
            self._spec_read(key, pool)
        if model is not None:  # an IP pool's as the length of one IP
            uid, known = self._lengths.get(key, (None, frozenset()))
            fresh = known if uid == _uid(pool) else frozenset()
            unit = model.unit_length if model.unit_length is not None else FAMILY_BITS[model.version]
            self._lengths[key] = (_uid(pool), fresh | {(model.version, unit)})
        return model, problems

    def _spec_read(self, key: ObjKey, pool: dict) -> None:
        """Count one generation of a pool's spec read (``_generations``)."""
        generation = o.meta(pool).get("generation")
        if isinstance(generation, bool) or not isinstance(generation, int):
            return
        uid, last, every = self._generations.get(key, (None, 0, True))
        if uid != _uid(pool):
            last, every = 0, True
        if generation != last:
            self._generations[key] = (_uid(pool), generation, every and generation == last + 1)

    def _every_spec_read(self, pool: dict) -> bool:
        """Whether every generation of a pool's spec up to its own was read here (``pool_model`` reads the current
        one); not where a controller started after an edit, or its cache skipped one. One whose spec's generation
        is not known counts as read whole."""
        if _pool_generation(pool) is None:
            return True
        uid, last, every = self._generations.get(self.key(pool), (None, 0, True))
        return every and uid == _uid(pool) and last == o.meta(pool).get("generation")

    def unit_lengths(self, key: o.PoolKey, version: int) -> set[int]:
        """The lengths of the sub-prefixes a prefix pool keeping its IPs apart hands out (one being deleted too),
        of ``version``: its spec's, or while its spec is invalid, those its valid specs had (a sub-prefix length
        is immutable at admission, and a pass of it made before the edit may still land), and where none was seen
        here (a controller started after the edit), the length the invalid spec still names."""
        if not keeps_apart(key.kind) or not poolkind.REGISTRY[key.kind].holds_prefixes:
            return set()
        pool = self.objects[(key.kind, key.namespace, key.name)]
        model, _ = self.pool_model(pool)
        uid, known = self._lengths.get(self.key(pool), (None, frozenset()))
        lengths = {length for v, length in known if v == version} if uid == _uid(pool) else set()
        if model is not None and model.version == version and model.unit_length is not None:
            lengths.add(model.unit_length)
        named = poolkind.REGISTRY[key.kind].named_unit_length(pool) if model is None and not lengths else None
        if named is not None and named[0] == version:
            lengths.add(named[1])
        return lengths

    def withheld(self, pool_key: o.PoolKey) -> list[Withheld]:
        """What other overlapping pools own of this pool's addresses, and what it shares with pools it
        overlaps where either is a separate network (``core.overlap``); among the kinds that keep their IPs
        apart only (``keeps_apart``: the others' pools are independent of every other). A namespaced pool is
        compared with the pools of its namespace and the global pools with claims (or addresses) there; a
        global pool here with the other global pools only: what it withholds from its claims of a namespace
        because of the pools there is ``withheld_in``'s (every controller serving a global pool under ``-n``
        sees the global pools, not every namespace's)."""
        if not keeps_apart(pool_key.kind):
            return []
        return self._withheld_in(pool_key.namespace).get(pool_key, [])

    def withheld_in(self, pool_key: o.PoolKey, namespace: str) -> list[Withheld]:
        """What a global pool withholds from (or shares with) its claims of ``namespace`` because of the
        namespaced pools there: a namespaced pool owns its overlap with a global pool in its namespace."""
        if pool_key.namespace or not namespace or not keeps_apart(pool_key.kind):
            return []
        return self._withheld_in(namespace).get(pool_key, [])

    def yielded(self, pool_key: o.PoolKey) -> list[Withheld]:
        """For a namespaced pool, the parts of it that global pools with claims in its namespace withhold
        from those claims (each with that global pool as ``owner``): what its Overlapping condition shows."""
        if not pool_key.namespace or not keeps_apart(pool_key.kind):
            return []
        return merged(Withheld(w.first, w.last, key, "") for key, items in self._withheld_in(pool_key.namespace).items()
                      if not key.namespace for w in items if w.owner == pool_key and not w.shared)

    def _withheld_in(self, namespace: str) -> dict[o.PoolKey, list[Withheld]]:
        """What the pools of ``namespace`` and the global pools with claims there withhold of each other (every
        pair with a pool of the namespace in it); for namespace "", every global pool of each other."""
        if namespace not in self._withheld:
            keys = sorted(self._pool_names.get(namespace, ()))
            if namespace:
                keys += sorted(k for k in self._pool_names.get("", ()) if namespace in self._spread.get(k, ()))
            facts = [f for f in (self._facts(key) for key in keys) if f is not None]
            self._withheld[namespace] = withheld_by_pool(
                facts, compared=(lambda a, b: bool(a.key.namespace or b.key.namespace)) if namespace else
                (lambda a, b: True))
        return self._withheld[namespace]

    def has_claims_in(self, pool_key: o.PoolKey, namespace: str) -> bool:
        """A global pool has claims (or their addresses) in ``namespace``: it keeps its IPs apart from the pools
        there."""
        return namespace in self._spread.get(pool_key, ())

    def global_holds(self, version: int, ip: int) -> bool:
        """Whether a global IP pool that keeps its IPs apart from the namespaced pools (not a separate network)
        holds ``ip`` in its address set: its allocations to a claim of any namespace guard the IP there, and so
        must a namespaced pool's (``reconcile``'s guards). A walk over the global pools, which are few."""
        return bool(self.global_held(version, ip, ip, 1))

    def global_held(self, version: int, first: int, last: int, limit: int) -> list[int] | None:
        """The IPs from ``first`` to ``last`` (a namespaced sub-prefix) that global IP pools keeping their IPs
        apart hold in their address sets, in order: a namespaced pool's allocation of that span guards each
        (``reconcile``'s guards). None when there are more than ``limit``."""
        spans = []
        for key in self._pool_names.get("", ()):
            facts = self._facts(key, deleting=True) if not poolkind.REGISTRY[key.kind].holds_prefixes else None
            model = facts.pool if facts is not None and not facts.apart else None
            if model is not None and model.version == version:
                spans += [(max(e.first, first), min(e.last, last)) for e in model.entries
                          if e.first <= last and e.last >= first]
        spans = normalise(spans)
        if sum(hi - lo + 1 for lo, hi in spans) > limit:
            return None
        return [ip for lo, hi in spans for ip in range(lo, hi + 1)]

    def global_ip_pool_exists(self, version: int) -> bool:
        """Whether a global IP pool keeping its IPs apart that may hand out ``version`` is stored (one being deleted
        too), whatever its addresses or family now (``_may_hand_out``): a namespaced pool's allocation of an IP
        guards it, for a pass of that pool made before an edit took the IP away may still land (``reconcile``'s
        guards)."""
        for key in self._pool_names.get("", ()):
            pool = self.objects[(key.kind, key.namespace, key.name)]
            if keeps_apart(key.kind) and not poolkind.REGISTRY[key.kind].holds_prefixes \
                    and not separate_network(pool) and self._may_hand_out(key, pool, version):
                return True
        return False

    def global_blocks(self, version: int, first: int, last: int, limit: int) -> list[tuple[int, int]] | None:
        """The sub-prefixes, as (base, length), that global prefix pools keeping their IPs apart hand out and
        that meet ``first`` to ``last`` (a namespaced pool's IP or sub-prefix), in order: a namespaced pool's
        allocation there guards each for its namespace's pools (``reconcile``'s guards). The one holding the
        whole span, of each pool whose sub-prefixes are as large or larger, whatever the pool's prefixes are
        now (its length is immutable; a pass of it made before an edit took the span away may still land);
        those inside the span, of a pool whose sub-prefixes are smaller, as its prefixes are now. None when
        there are more than ``limit``."""
        found: set[tuple[int, int]] = set()
        for key in self._pool_names.get("", ()):
            if separate_network(self.objects[(key.kind, key.namespace, key.name)]):
                continue
            for length in self.unit_lengths(key, version):
                bits = FAMILY_BITS[version] - length
                if last - first + 1 <= 1 << bits:
                    found.add((first >> bits << bits, length))
            facts = self._facts(key, deleting=True) if poolkind.REGISTRY[key.kind].holds_prefixes else None
            model = facts.pool if facts is not None and not facts.apart else None
            if model is None or model.version != version or model.unit_length is None \
                    or last - first + 1 <= 1 << (FAMILY_BITS[version] - model.unit_length):
                continue
            lo, hi = model.unit_of(first), model.unit_of(last)
            for entry in model.entries:
                start, end = max(entry.first, lo), min(entry.last, hi)
                if end - start + 1 + len(found) > limit:
                    return None
                found.update((int(model.address_of(unit)), model.unit_length) for unit in range(start, end + 1))
        return sorted(found)

    def global_claims_in_flight(self, namespace: str, version: int, length: int) -> list[dict]:
        """The live claims of ``namespace`` that hold no address, of global pools keeping their IPs apart (one being
        deleted too, and one gone, whatever it handed out) whose IPs or sub-prefixes are smaller than a sub-prefix of
        ``length``: a pass allocating for one
        may be on its way, made before a namespaced pool's sub-prefix holding its IP could be seen
        (``reconcile``'s guards: such a pass names its IP on the claim first, and the namespaced pool's allocation
        guards the IPs named so and writes each claim, so that a pass made before it is refused). What a claim
        holds is what its pass goes by (``holds_address``), not what its status says: one whose Ready condition
        names an IP whose address objects were deleted is given an IP by its next pass. Those of a global pool gone
        too: a pass of it made before may still land, of any family and length."""
        found = []
        for key in sorted(k for k in self.groups if not k.namespace and k.kind in poolkind.REGISTRY):
            pool = self.objects.get((key.kind, key.namespace, key.name))
            if not keeps_apart(key.kind) or poolkind.REGISTRY[key.kind].outside is not None:
                continue
            # A pool gone (deleted before its first pass wrote its finalizer) leaves no length to go by: a pass of
            # it may be on its way with any.
            if pool is not None and (separate_network(pool) or not self.has_claims_in(key, namespace)
                                     or not any(unit > length for unit in self._global_units(key, version))):
                continue
            found += [claim for claim in self.claims_of(key) if o.namespace(claim) == namespace
                      and not o.is_deleting(claim) and not self.holds_address(key, claim)]
        return found

    def global_units(self, claim: dict, version: int) -> set[int]:
        """The lengths of the IPs or sub-prefixes of ``version`` the global pool a claim is filed under may hand
        out (an IP's: every bit), whatever its spec is now; none for a claim of another pool."""
        key = self._filed(self.key(claim))
        if key is None or key.namespace or (key.kind, "", key.name) not in self.objects:
            return set()
        return self._global_units(key, version)

    def _global_units(self, key: o.PoolKey, version: int) -> set[int]:
        if poolkind.REGISTRY[key.kind].holds_prefixes:
            return self.unit_lengths(key, version)
        pool = self.objects[(key.kind, key.namespace, key.name)]
        return {FAMILY_BITS[version]} if self._may_hand_out(key, pool, version) else set()

    def namespaced_units(self, claim: dict, version: int) -> set[int] | None:
        """The lengths of the IPs or sub-prefixes of ``version`` the namespaced pool a claim is filed under may hand
        out and guards by a name (``reconcile``'s guards), whatever its spec is now; None when they are not known
        (a prefix pool gone) or its allocation may guard none (a kind that guards its IP only while a global IP
        pool exists): nothing is guarded for it then."""
        key = self._filed(self.key(claim))
        if key is None or not key.namespace or key.kind not in poolkind.REGISTRY:
            return None
        pool_kind, pool = poolkind.REGISTRY[key.kind], self.objects.get((key.kind, key.namespace, key.name))
        if pool_kind.holds_prefixes:
            return self.unit_lengths(key, version) if pool is not None else None
        if pool is not None and not self._may_hand_out(key, pool, version):
            return set()
        return {FAMILY_BITS[version]} if pool_kind.guards_every_ip else None

    def namespaced_claims_in_flight(self, namespace: str, version: int) -> list[dict]:
        """The live claims of ``namespace`` that hold no address, of the namespace's pools keeping their IPs apart
        that hand out addresses themselves (one being deleted or gone too, whose pass may still land; an outside
        IPAM's are not): a pass allocating for one may be on its way, made before a global pool handing out an IP
        or sub-prefix meeting its own could be seen (``reconcile``'s guards: such a pass names its IP or sub-prefix
        on the claim first, and a global pool's allocation to a claim of the namespace keeps off the spans named so
        and writes each claim, so that a pass made before it is refused)."""
        found = []
        for key in sorted(k for k in self.groups if k.namespace == namespace):
            pool_kind = poolkind.REGISTRY.get(key.kind)
            if pool_kind is None or not pool_kind.unique_in_namespace or pool_kind.outside is not None:
                continue
            pool = self.objects.get((key.kind, key.namespace, key.name))
            if pool is not None and not self._may_hand_out(key, pool, version):
                continue
            found += [claim for claim in self.claims_of(key)
                      if not o.is_deleting(claim) and not self.holds_address(key, claim)]
        return found

    def _may_hand_out(self, key: o.PoolKey, pool: dict, version: int) -> bool:
        """Whether an IP pool's pass may hand out an address of ``version``: its spec's family, or one a valid spec
        of it seen here had (a pass made before an edit may still land); while its spec is invalid and none was
        seen, any; and any where a spec of it was not read here (an edit made before this controller started may
        have changed its family, which the webhook allows while no address is in use)."""
        model, _ = self.pool_model(pool)
        uid, known = self._lengths.get(self.key(pool), (None, frozenset()))
        seen = {v for v, _ in known} if uid == _uid(pool) else set()
        return version in seen or (model is None and not seen) or not self._every_spec_read(pool)

    def holds_address(self, pool_key: o.PoolKey, claim: dict) -> bool:
        """Whether a claim of ``pool_key`` holds an address of that pool, as its pass sees it (``reconcile``: a
        lock not let go, or a live Cluster API IPAddress, made for this incarnation of the claim), so that its
        pass keeps or takes that up and hands it nothing new. Looked for where the claim's addresses are
        (``_addresses_of``); one found nowhere there counts as none."""
        finalizer = poolkind.REGISTRY[pool_key.kind].finalizers.address.get(kinds.IPADDRESS)
        uid = o.meta(claim).get("uid")
        for key in self._addresses_of(self.key(claim), claim):
            address = self.objects.get(key)
            if address is None or self._filed(key) != pool_key or o.is_guard(address):
                continue
            capi = key[0] == kinds.CAPI_ADDRESS
            named = (o.claim_of_capi_address if capi else o.claim_of_address)(address)
            if named is None or named[0] != claim.get("kind") or named[1] != o.name(claim) \
                    or (named[2] if len(named) > 2 else o.namespace(address)) != o.namespace(claim):
                continue
            owner = o.claim_uid_of(address, named)
            if owner is not None and uid is not None and owner != uid:
                continue  # another incarnation's
            if not o.is_deleting(address) or (not capi and finalizer in o.finalizers(address)
                                              and not o.deleted_for_move(address)):
                return True
        return False

    def namespaced_lengths(self, namespace: str, version: int) -> list[int]:
        """The lengths of the sub-prefixes the prefix pools of ``namespace`` keeping their IPs apart hand out (one
        being deleted too), whatever their prefixes are now (``unit_lengths``): a global pool's allocation to a
        claim there meets any such sub-prefix holding its own under that length (``reconcile``'s guards)."""
        return sorted({length for key in self._pool_names.get(namespace, ())
                       for length in self.unit_lengths(key, version)})

    def near_pools(self, pool_key: o.PoolKey) -> list[tuple[PoolFacts, bool]]:
        """The pools a pool keeps its IPs apart from across namespaces, with whether it does now (see
        ``withheld``): for a global pool every other pool that keeps apart, for a namespaced pool the global
        ones. What the admission webhook warns of; the pools of its own namespace are not among them."""
        if pool_key.kind not in poolkind.REGISTRY or not keeps_apart(pool_key.kind):
            return []
        if pool_key.namespace:
            keys = [(k, self.has_claims_in(k, pool_key.namespace)) for k in sorted(self._pool_names.get("", ()))]
        else:
            keys = [(k, not k.namespace or self.has_claims_in(pool_key, k.namespace)) for k in self.pool_keys()
                    if k in self._pool_names.get(k.namespace, ()) and k != pool_key]
        found = [(self._facts(k), now) for k, now in keys]
        return [(facts, now) for facts, now in found if facts is not None]

    def _facts(self, key: o.PoolKey, deleting: bool = False) -> PoolFacts | None:
        """What deciding the pool's overlaps looks at, or None when it takes no part (being deleted, invalid,
        of a kind whose pools are independent). ``deleting``: a pool being deleted takes part too (what a
        namespaced pool's allocation guards: a pass of it made before its deletion may still land)."""
        pool = self.objects[(key.kind, key.namespace, key.name)]
        if (o.is_deleting(pool) and not deleting) or not keeps_apart(key.kind):
            return None
        model, _ = self.pool_model(pool)
        if model is None:
            return None
        lock_namespace = key.namespace or self.lock_namespace
        return PoolFacts(key, str(o.meta(pool).get("creationTimestamp") or ""), model, lock_namespace,
                         separate_network(pool))

    def size_of(self, pool_key: o.PoolKey) -> int:
        """How many claims and addresses are filed under the pool."""
        group = self.groups.get(pool_key)
        return len(group.claims) + len(group.addresses) + len(group.capi_addresses) if group is not None else 0

    def snapshot(self, pool_key: o.PoolKey, now: str, rng: random.Random | None = None,
                 members: bool = True) -> Snapshot:
        """What a reconcile of the pool looks at; without ``members``, only the pool and its
        surroundings (a pass over what changed takes the pool's objects from its ledger)."""
        pool_key = o.PoolKey(*pool_key)
        ns, name = pool_key.namespace, pool_key.name
        pool = self.get(pool_key.kind, ns, name)
        cluster = None
        model = None
        if pool is not None:
            model = self.pool_model(pool)
            cluster_name = poolkind.REGISTRY[pool_key.kind].cluster_name(pool)
            if cluster_name:
                cluster = self.get(kinds.CLUSTER, ns, cluster_name)
        group = self.groups.get(pool_key, _PoolGroup()) if members else _PoolGroup()
        live = pool is not None and not o.is_deleting(pool)
        withheld = self.withheld(pool_key) if live else []

        def mates(namespace: str) -> set[o.PoolKey]:
            """This pool and those whose addresses it may share (separate networks): theirs hold nothing back
            here, in ``namespace``."""
            return {pool_key, *(w.owner for w in (*withheld, *self.withheld_in(pool_key, namespace)) if w.shared)}

        return Snapshot(
            namespace=ns, pool_name=name, pool=pool, cluster=cluster,
            claims=list(group.claims.values()),
            addresses=list(group.addresses.values()),
            capi_addresses=list(group.capi_addresses.values()),
            name_taken=self.name_taken,
            address_named=lambda namespace, address_name: self.get(kinds.IPADDRESS, namespace, address_name),
            claims_carrying=self.claims_carrying,
            moved_away=self.moved_away.get,
            homed_elsewhere=self.homed_elsewhere.get,
            address_lost=self.address_lost.get,
            left_for_move=frozenset(self.left_for_move.get(pool_key, ())),
            held_elsewhere=lambda namespace, version, lo, hi, for_keeper=False: self.held_elsewhere(
                pool_key, namespace, version, lo, hi, mates(namespace), for_keeper),
            held_by_others=lambda namespace, version, ip, every_pool=False: self.held_by_others(
                pool_key, namespace, version, ip, every_pool),
            kept_elsewhere=lambda namespace, version, ip: self.kept_elsewhere(mates(namespace), namespace, version, ip),
            keeper_elsewhere=lambda namespace, version, ip, claim: self.keeper_elsewhere(
                mates(namespace), namespace, version, ip, claim),
            held_twice=lambda namespace, version, ip: self.held_twice(pool_key, mates(namespace), namespace, version,
                                                                      ip),
            cluster_named=lambda namespace, cluster_name: self.get(kinds.CLUSTER, namespace, cluster_name),
            claim_named=self.get,
            global_holds=self.global_holds,
            global_held=self.global_held,
            global_blocks=self.global_blocks,
            global_ip_pool_exists=self.global_ip_pool_exists,
            namespaced_lengths=self.namespaced_lengths,
            global_claims_in_flight=self.global_claims_in_flight,
            namespaced_claims_in_flight=self.namespaced_claims_in_flight,
            global_units=self.global_units,
            namespaced_units=self.namespaced_units,
            addresses_at=lambda namespace, version, ip: [a for _, a in self.addresses_at(namespace, version, ip)],
            separate_network=self.separate_network,
            clusters_served=self.clusters_served,
            capi_address_named=lambda namespace, address_name: self.get(kinds.CAPI_ADDRESS, namespace, address_name),
            withheld=withheld,
            withheld_in=(lambda namespace: self.withheld_in(pool_key, namespace)) if live else (lambda namespace: []),
            yielded=self.yielded(pool_key) if live else [],
            lock_namespace=self.lock_namespace,
            lock_settle_seconds=self.lock_settle_seconds,
            serves=(lambda namespace: True) if self.namespaces is None else self.namespaces.__contains__,
            serves_every_namespace=self.namespaces is None,
            watch_filter=self.watch_filter,
            model=model,
            now=now, rng=rng, pool_kind=pool_key.kind)


class Listed:
    """One LIST being filed into an inventory page by page (``file``), then closed (``finish``).

    A LIST of 50,000 objects comes in pages of a few hundred; each is filed as
    it comes, so no whole listing is ever held, and nothing listed waits
    unfiled (new objects to be walked by the collector, seen objects to be
    dropped). Only once every page was filed does the listing prove anything
    gone: what it did not hold, stored at a version no newer than the listing's.
    """

    def __init__(self, inventory: Inventory, kind: tuple[str, str], namespace: str | None,
                 only: Callable[[dict], bool] | None = None) -> None:
        self.inventory = inventory
        self.kind = kind
        self.namespace = namespace
        self.only = only
        self.seen: set[ObjKey] = set()

    def file(self, items: Iterable[dict], step: int = SETTLE_STEP,
             pending: Callable[[dict], bool] | None = None) -> Iterator[set[o.PoolKey]]:
        """File listed objects like events; yields the pools each ``step`` of them touched.

        An object ``pending`` says is pending (its caller files it later itself) is listed, not filed.
        """
        touched: set[o.PoolKey] = set()
        for done, item in enumerate(items, 1):
            key = self.inventory.key(item)
            if key is not None and (key in self.inventory.objects or self.inventory.keeps(key, item)):
                self.seen.add(key)
                if pending is None or not pending(item):
                    touched |= self.inventory.upsert(item)
            if done % step == 0:
                yield touched
                touched = set()
        if touched:
            yield touched

    def finish(self, list_version: str | None, step: int = SETTLE_STEP) -> Iterator[set[o.PoolKey]]:
        """Every page filed: what the listing (taken at ``list_version``) proves gone goes.

        Yields the pools touched, now and then (looking a key over costs a
        fraction of filing an object: many more per yield), and always once.
        """
        inventory = self.inventory
        touched: set[o.PoolKey] = set()
        at = version_number(list_version)
        if at is not None:
            work = 0
            for key in list(inventory.objects):
                work += 1
                if key[0] == self.kind and key not in self.seen \
                        and not (self.namespace and key[1] != self.namespace):
                    stored = inventory.objects.get(key)  # as it is now: it may have changed since
                    version = version_of(stored) if stored is not None else None
                    if version is not None and version <= at and (self.only is None or self.only(stored)):
                        touched |= inventory.remove({**stored, "metadata": {**stored["metadata"],
                                                                           "resourceVersion": str(at)}})
                        work += 20
                if work >= step * 20:
                    work = 0
                    yield touched
                    touched = set()
        yield touched


def _store(obj: dict) -> str | None:
    """The store a lock's news come from: the Lease it stands for (``lockstore.STORED_IN``), or None (the object
    itself). Resource versions order one store's news only against the deletions that store saw."""
    return "lease" if lockstore.stored_in_lease(obj) else None


def of_every_namespace(obj: dict) -> bool:
    """A Cluster API IPAddress or IPAddressClaim of a pool of cluster scope: every controller of the pool files
    it, whatever namespaces it serves (``-n``), so that each withholds its IP (also one a claim's status alone
    keeps, its address not there yet) and counts it alike; only the controller serving its namespace writes
    to it (``Snapshot.serves``)."""
    if kinds.kind_of(obj) not in (kinds.CAPI_ADDRESS, kinds.CAPI_CLAIM):
        return False
    pool = o.pool_of(obj)
    return pool is not None and not pool.namespace


def _leaving_with(obj: dict, stored: dict) -> dict:
    """A claim annotated for deletion by ``clusterctl move``, with the annotations it carried before as well:
    clusterctl's patch (a JSON patch ``add`` of ``/metadata/annotations``) replaces them all with its own, and the
    claim leaves carrying what it carried (the key of its outside IPAM's address, say)."""
    kept = {**o.annotations(stored), **o.annotations(obj)}
    if kept == o.annotations(obj):
        return obj
    return {**obj, "metadata": {**o.meta(obj), "annotations": kept}}


def _outside_key(claim: dict | None) -> str | None:
    """The allocation key a claim of an outside IPAM's pool carries, or None."""
    pool = o.pool_of(claim) if claim is not None else None
    pool_kind = poolkind.REGISTRY.get(pool.kind) if pool is not None else None
    if pool_kind is None or pool_kind.outside is None:
        return None
    return pool_kind.outside.read_key(claim)[0]


def _claim_named_by(address: dict | None) -> ObjKey | None:
    """The claim (kind, namespace, name) an address of either API names, or None."""
    if address is None:
        return None
    kind = kinds.kind_of(address)
    if kind == kinds.IPADDRESS:
        ref = o.spec(address).get("claim")
        claim_kind = kinds.CAPI_CLAIM if isinstance(ref, Mapping) and ref.get("kind") == kinds.CAPI_CLAIM[1] \
            else kinds.IPCLAIM
    elif kind == kinds.CAPI_ADDRESS:
        ref, claim_kind = o.spec(address).get("claimRef"), kinds.CAPI_CLAIM
    else:
        return None
    if not isinstance(ref, Mapping) or not ref.get("name"):
        return None
    namespace = ref.get("namespace") if kind == kinds.IPADDRESS else None
    return (claim_kind, str(namespace or o.namespace(address)), str(ref["name"]))


def _serves(address: dict, claim: dict) -> bool:
    """Whether ``address`` is this incarnation's of the claim it names: its owner reference has the claim's
    uid; without one (a lock of a pool of cluster scope), the claim's status names its IP."""
    uid = o.claim_uid_of(address, (claim.get("kind"), o.name(claim)))
    if uid is not None:
        return uid == _uid(claim)
    ip = bound_ip(claim)
    return ip is not None and o.address_ip(address) == ip


def _orphan_status_ip(claim: dict, kind: tuple[str, str]) -> tuple[int, int] | None:
    """The IP a live claim naming no pool of ours is bound to by this controller (its Ready condition), when
    it carries the claim finalizer of one of our kinds; else None."""
    if o.is_deleting(claim):
        return None
    finalizers = o.finalizers(claim)
    if not any(kind_.finalizers.claim.get(kind) in finalizers for kind_ in poolkind.REGISTRY.values()):
        return None
    ip = bound_ip(claim)
    return None if ip is None else _ip_key(ip.version, int(ip))
