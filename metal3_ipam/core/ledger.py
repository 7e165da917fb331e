"""A pool's ledger: what its claims and addresses come to, kept across reconciles.

Rebuilding a pool's allocation state from every address at every event makes
one claim cost as much as the whole pool. The ledger keeps that state and is
told what changed (an object stored or gone, by key): it updates its indexes
in O(changes) and names the claims and addresses whose decision may differ
now (the dirty ones). The decision for one claim or one address stays the
reconcile's (``reconcile.plan_pass``); a full reconcile is that same decision
over a ledger loaded from every object of the pool.

What it keeps:
- the pool's claims and addresses (of both APIs) by name, and the addresses
  by the claim they name;
- the allocator, with every IP an address of the pool holds marked held, counted
  by the address objects holding it (two addresses of one IP are one use);
- the IP each claim's status says it holds (``kept``; see ``kept.own_ip``),
  kept in the allocator for the first claim naming it, so that a claim whose
  address objects a user deleted gets it back and no other claim takes it;
- what the decisions left behind: the bound map (``status.indexes``), claims
  that could not be served (tried again when an IP is freed), adoptions
  being made, claims and addresses left for the next pass.

It knows only what it was told: ``state()`` is what an audit compares with a
ledger loaded afresh from the inventory.
"""

from __future__ import annotations

import itertools
import random
from collections.abc import Callable, Generator, Iterable, Iterator
from typing import Any

from . import kinds
from . import objects as o
from .addresses import FAMILY_BITS
from .allocator import Allocator
from .indexes import StatusIndex
from .kept import own_ip, precedence
from .pool import Pool
from .several import each, entry_of

ObjKey = tuple[tuple[str, str], str, str]  # (group, kind), namespace, name
# An address of the pool is known by its name; in a pool of cluster scope, whose addresses are in
# the namespaces of their claims, by (namespace, name).
AddressKey = str | tuple[str, str]
Holder = tuple[str, AddressKey]  # ("IPAddress" | "IPAddress.capi" | "planned", address key)

CLAIM_KINDS = (kinds.IPCLAIM, kinds.CAPI_CLAIM)
METAL3 = "IPAddress"
CAPI = "IPAddress.capi"
PLANNED = "planned"
# Objects accounted between two yields when a ledger is loaded: about a millisecond of work.
LOAD_CHUNK = 128


class _Allocator(Allocator):
    """An allocator that notes what a pass holds, so what was only planned is given back after it."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.planned: set[int] | None = None

    def hold(self, ip: int) -> None:
        super().hold(ip)
        if self.planned is not None:
            self.planned.add(ip)


class Ledger:
    def __init__(self) -> None:
        self.ident: tuple | None = None
        self.pool: Pool | None = None
        self.allocator: _Allocator | None = None
        self.cluster_scoped = False  # the pool is of cluster scope: addresses are known by (namespace, name)
        self.claims: dict[o.ClaimKey, dict] = {}
        self.claims_version = 0  # bumped whenever a claim is added or dropped (``claims`` changed)
        # What the pool's ``ClaimsElsewhere`` condition was found to say, and for what (``elsewhere``): a pass
        # that changed no claim does not walk them again.
        self.elsewhere: tuple | None = None
        self.addresses: dict[AddressKey, dict] = {}        # Metal3 IPAddresses of the pool, by key
        self.capi_addresses: dict[AddressKey, dict] = {}   # Cluster API IPAddresses of the pool, by key
        # Addresses by the claim they name (whatever its incarnation; see claim_key_of): the one
        # address object, or a dict of them by name when there are several (one is the rule, and a
        # dict per claim would be the largest part of the ledger).
        self.named: dict[o.ClaimKey, dict | dict[str, dict]] = {}
        self.mirrors_named: dict[o.ClaimKey, dict | dict[str, dict]] = {}
        # IP -> what holds it: address objects of either API, and allocations a pass planned
        # (a Holder). One entry, or ``several.Several`` of them when several hold the IP (see ``holders_of``).
        self.holders: dict[int, Any] = {}
        # Claim -> the IP its status says it holds; IP -> the claims whose status names it (one, or Several).
        self.kept: dict[o.ClaimKey, int] = {}
        self.keepers: dict[int, Any] = {}
        # -- what the decisions left --
        self.bound: dict[o.ClaimKey, str] = {}      # claim -> address text, for status.indexes
        self.bound_version = 0                      # bumped whenever ``bound`` changes
        self.index = StatusIndex()                  # ``bound`` in status.indexes order, kept in step
        self.pending_free: dict[o.ClaimKey, None] = {}  # claims given an error, pending a free IP or name
        # Claims whose address object is not taken up (its IP another's, or one the pool could not hand out)
        # -> what the pool's status says of it; ``conflicts_version`` is bumped whenever it changes.
        self.conflicts: dict[o.ClaimKey, str] = {}
        self.conflicts_version = 0
        # Bound claims whose IP an overlapping pool, no longer a separate network, holds for another claim too
        # -> what the pool's status says of it; a change bumps ``conflicts_version`` too.
        self.doubles: dict[o.ClaimKey, str] = {}
        # Claims whose decision waits for an outside IPAM's answer (a pool kind with ``outside``) -> the
        # allocation key asked for: decided again when that key is answered (``answered``) or on ``wake``,
        # not when an IP goes free (nothing of this pool stands in their way).
        self.pending_answers: dict[o.ClaimKey, str] = {}
        self.pending_claims: dict[o.ClaimKey, None] = {}
        # Deleted claims whose address is held until a deadline (RFC 3339): decided again once it passed.
        self.deadlines: dict[o.ClaimKey, str] = {}
        self.pending_addresses: dict[Holder, None] = {}
        # A full reconcile is due: set when writes of a pass failed, when the pool was paused.
        self.needs_full = True
        # The status key (see reconcile.pool_status) for which the pool's status was found current.
        self.status_clean: tuple | None = None
        self.status_pending = False  # a status write was put off (counts and indexes only)
        self._freed = False  # an IP went free since the last pass (or another pool let one go: ``wake``)
        self._woken = False  # every pending claim is decided again in the next pass (``wake``)
        self._answered: set[str] = set()  # allocation keys answered since the last pass (``answered``)
        # Addresses of the pool that went (or moved), ever: the IPs and names they let go may be what
        # another pool of the namespace waits for (its claims given an error; see ``wake``).
        self.released = 0

    # -- the pool itself ---------------------------------------------------

    @staticmethod
    def ident_of(pool_obj: dict | None, model: Pool | None, withheld: Iterable) -> tuple:
        """What the ledger's allocator is built from: a change of any of it means a full reload."""
        meta = o.meta(pool_obj) if pool_obj is not None else {}
        # The API server bumps generation on every spec change; objects from files have none.
        spec = repr(o.spec(pool_obj)) if pool_obj is not None and meta.get("generation") is None else None
        return (meta.get("uid"), meta.get("generation"), spec, tuple(withheld), pool_obj is None, model is None)

    def reset(self, ident: tuple, pool: Pool | None, withheld: list[tuple[int, int]],
              rng: random.Random | None, cluster_scoped: bool = False) -> None:
        self.__init__()
        self.cluster_scoped = cluster_scoped
        self.ident = ident
        self.pool = pool
        self.allocator = _Allocator(pool, rng, withheld=withheld) if pool is not None else None
        self.needs_full = False

    def load(self, claims: list[dict], addresses: list[dict], capi_addresses: list[dict]) -> Iterator[None]:
        """Account every object of the pool; yields now and then so a big pool does not hold the loop."""
        for n, obj in enumerate(addresses + capi_addresses + claims, 1):
            self.add(obj)
            if n % LOAD_CHUNK == 0:
                yield

    # -- being told what changed ---------------------------------------------

    def apply(self, changes: Iterable[tuple[ObjKey, dict | None]]) -> tuple[dict, dict]:
        """Take the changes (key, the object now filed in this pool or None); returns what to decide again.

        Dirty are: changed claims and the addresses naming them, the claims of
        the addresses at an IP a changed claim's status keeps or kept, changed
        addresses and the claims they named before and name now; then what
        an earlier pass left over, and the claims given an error when an IP went free.
        """
        claims: dict[o.ClaimKey, None] = dict.fromkeys(self.pending_claims)
        addresses: dict[Holder, None] = dict.fromkeys(self.pending_addresses)
        self.pending_claims, self.pending_addresses = {}, {}
        for key, obj in changes:
            kind, namespace, name = key
            if kind in CLAIM_KINDS:
                ckey = (kind[1], name, namespace) if self.cluster_scoped else (kind[1], name)
                old = self.claims.get(ckey)
                if ckey in self.pending_answers:
                    # The claims refused for carrying its key (see reconcile's ``key_owner``) await it too.
                    self._answered.add(self.pending_answers[ckey])
                kept_before = self.kept.get(ckey)
                if old is not None:
                    self.drop(old)
                if obj is not None:
                    self.add(obj)
                claims[ckey] = None
                if self.kept.get(ckey) != kept_before:
                    # An IP kept for it, or no longer: an address of another claim at that IP not taken up
                    # for it may be now, or one taken up may no longer be.
                    for ip in (kept_before, self.kept.get(ckey)):
                        claims.update(dict.fromkeys(self._claims_at(ip)))
                for address_key in self._keys(self.named.get(ckey)):
                    addresses[(METAL3, address_key)] = None
                for address_key in self._keys(self.mirrors_named.get(ckey)):
                    addresses[(CAPI, address_key)] = None
            elif kind in (kinds.IPADDRESS, kinds.CAPI_ADDRESS):
                tag, stored, claim_of = ((METAL3, self.addresses, o.claim_of_address) if kind == kinds.IPADDRESS
                                         else (CAPI, self.capi_addresses, o.claim_of_capi_address))
                akey = (namespace, name) if self.cluster_scoped else name
                old = stored.get(akey)
                for version in (old, obj):
                    if version is not None:
                        named = claim_of(version)
                        if named is not None:
                            claims[named] = None
                            if obj is None and tag == CAPI:
                                # The claim's lock waits for its Cluster API address to go (``tend``).
                                for address_key in self._keys(self.named.get(named)):
                                    addresses[(METAL3, address_key)] = None
                if old is not None:
                    self.drop(old)
                    if obj is None or o.address_ip(old) != o.address_ip(obj):
                        self.released += 1  # its IP and name are no longer held by it
                        # The claims of what else holds its IP: one not taken up for it may be now.
                        claims.update(dict.fromkeys(self._claims_at(self._ip(old))))
                if obj is not None:
                    self.add(obj)
                addresses[(tag, akey)] = None
        if self._freed:
            self._freed = False
            for ckey in self.pending_free:
                claims[ckey] = None
        if self._woken or self._answered:
            for ckey, key in self.pending_answers.items():
                if self._woken or key in self._answered:
                    claims[ckey] = None
            self._woken = False
            self._answered = set()
        return claims, addresses

    def _claims_at(self, ip: int | None) -> list[o.ClaimKey]:
        """The claims named by the address objects holding ``ip``."""
        found = []
        for tag, key in self.holders_of(ip) if ip is not None else ():
            address = (self.addresses if tag == METAL3 else self.capi_addresses).get(key) if tag != PLANNED else None
            named = (o.claim_of_address if tag == METAL3 else o.claim_of_capi_address)(address) if address else None
            if named is not None:
                found.append(named)
        return found

    def conflict(self, key: o.ClaimKey, text: str | None) -> None:
        """Note (or, with None, forget) that a claim's address is not taken up, and why."""
        if self.conflicts.get(key) != text:
            if text is None:
                del self.conflicts[key]
            else:
                self.conflicts[key] = text
            self.conflicts_version += 1

    def key_of(self, address: dict) -> AddressKey:
        """The key of an address of the pool."""
        return _key_of(address, self.cluster_scoped)

    def _keys(self, entry: dict | None) -> Iterable[AddressKey]:
        """The keys of the addresses of a ``named`` entry."""
        if entry is None:
            return ()
        return list(entry) if type(entry) is _ByName else (self.key_of(entry),)

    def add(self, obj: dict) -> None:
        kind = kinds.kind_of(obj)
        name = self.key_of(obj)
        if kind in CLAIM_KINDS:
            key = o.claim_key(obj)
            self.claims[key] = obj
            self.claims_version += 1
            ip = own_ip(obj, self.pool) if self.pool is not None else None
            if ip is not None:
                self.kept[key] = ip
                self.keepers[ip] = entry_of((*each(self.keepers.get(ip)), key))
                self._keep(ip)
            return
        if kind == kinds.IPADDRESS:
            stored, index, named = self.addresses, self.named, o.claim_of_address(obj)
        else:
            stored, index, named = self.capi_addresses, self.mirrors_named, o.claim_of_capi_address(obj)
        stored[name] = obj
        if named is not None:
            known = index.get(named)
            if known is None or (type(known) is not _ByName and self.key_of(known) == name):
                index[named] = obj
            elif type(known) is _ByName:
                known[name] = obj
            else:
                index[named] = _ByName({self.key_of(known): known, name: obj})
        ip = self._ip(obj)
        if ip is not None:
            self.hold(ip, obj)
            span = self._span(obj)
            if span is not None and self.allocator is not None:
                self.allocator.cover(*span)

    def drop(self, obj: dict) -> None:
        kind = kinds.kind_of(obj)
        name = self.key_of(obj)
        if kind in CLAIM_KINDS:
            key = o.claim_key(obj)
            self.claims.pop(key, None)
            self.claims_version += 1
            self.pending_free.pop(key, None)
            self.pending_answers.pop(key, None)
            self.deadlines.pop(key, None)
            if key in self.conflicts:
                self.conflict(key, None)
            if self.doubles.pop(key, None) is not None:
                self.conflicts_version += 1
            self.unbind(key)
            ip = self.kept.pop(key, None)
            if ip is not None:
                self.keepers[ip] = entry_of(k for k in each(self.keepers.get(ip)) if k != key)
                if self.keepers[ip] is None:
                    del self.keepers[ip]
                self._keep(ip)
            return
        if kind == kinds.IPADDRESS:
            tag, stored, index, named = METAL3, self.addresses, self.named, o.claim_of_address(obj)
        else:
            tag, stored, index, named = CAPI, self.capi_addresses, self.mirrors_named, o.claim_of_capi_address(obj)
        stored.pop(name, None)
        known = index.get(named) if named is not None else None
        if type(known) is _ByName:
            known.pop(name, None)
            if len(known) == 1:
                index[named] = next(iter(known.values()))
        elif known is not None and self.key_of(known) == name:
            del index[named]
        ip = self._ip(obj)
        if ip is not None:
            self.let_go(ip, (tag, name))
            span = self._span(obj)
            if span is not None and self.allocator is not None and self.allocator.uncover(*span):
                self._freed = True

    def keeper_of(self, ip: int) -> o.ClaimKey | None:
        """The claim ``ip`` is kept for: of the claims whose status names it, the first by ``kept.precedence``."""
        keepers = each(self.keepers.get(ip))
        if len(keepers) <= 1:
            return keepers[0] if keepers else None
        return min(keepers, key=lambda k: precedence(self.claims[k]))

    def _keep(self, ip: int) -> None:
        """The allocator keeps ``ip`` for its keeper, or no longer keeps it."""
        if self.allocator is None:
            return
        keeper = self.keeper_of(ip)
        if keeper is None:
            if ip in self.allocator.kept and ip not in self.allocator.held:
                self._freed = True  # free now: the claims in error are tried again
            self.allocator.unkeep(ip)
        else:
            self.allocator.keep(ip, keeper)

    def _ip(self, address: dict) -> int | None:
        """The unit an address holds in this pool's allocator (its IP, or the sub-prefix holding its
        address): of the pool's family, else none."""
        if self.pool is None:
            return None
        ip = o.address_ip(address)
        return self.pool.unit_of(int(ip)) if ip is not None and ip.version == self.pool.version else None

    def _span(self, address: dict) -> tuple[int, int] | None:
        """The units an address of a prefix pool holds whole when its prefix is shorter than the pool's
        length (as the Go provider's first fit skips every sub-prefix it overlaps), or None."""
        pool = self.pool
        length = o.spec(address).get("prefix")
        if pool is None or pool.unit_length is None or isinstance(length, bool) or not isinstance(length, int) \
                or not 0 <= length < pool.unit_length:
            return None
        bits = FAMILY_BITS[pool.version] - length
        base = (int(o.address_ip(address)) >> bits) << bits
        return pool.unit_of(base), pool.unit_of(base + (1 << bits) - 1)

    def hold(self, ip: int, holder: Holder | dict) -> None:
        """``holder`` holds ``ip``: an address object (of either API), or a Holder (a planned allocation)."""
        held = self.holders.get(ip)
        if held is None:
            self.holders[ip] = holder
            if self.allocator is not None:
                planned, self.allocator.planned = self.allocator.planned, None
                self.allocator.hold(ip)
                self.allocator.planned = planned
            return
        who = self._holder(holder)
        self.holders[ip] = entry_of((*(e for e in each(held) if self._holder(e) != who), holder))

    def holders_of(self, ip: int) -> list[Holder]:
        """What holds ``ip``, as (tag, name) pairs."""
        return [self._holder(e) for e in each(self.holders.get(ip))]

    def let_go(self, ip: int, holder: Holder) -> None:
        held = each(self.holders.get(ip))
        rest = tuple(e for e in held if self._holder(e) != holder)
        if len(rest) == len(held):
            return
        if rest:
            self.holders[ip] = entry_of(rest)
        else:
            del self.holders[ip]
            if self.allocator is not None:
                self.allocator.release(ip)
            if holder[0] != PLANNED:  # an allocation only planned was free before the pass
                self._freed = True

    def wake(self) -> None:
        """Another pool of the namespace let an IP or an address name go: the claims given an error are tried again.

        Their error may be that pool's doing (an IP its address held, a name
        its address had), and nothing in this pool's own changes says so. The
        claims pending an outside answer are decided again too: a wake is also
        how a change of the outside IPAM's server (down, back, an ask timed out)
        reaches what they show.
        """
        self._freed = True
        self._woken = True

    def answered(self, key: str) -> None:
        """The outside IPAM answered for allocation key ``key``: the claims pending its answer are decided again.

        Only those: the other claims pending an answer are no nearer to theirs (a pool waiting for a
        thousand releases must not decide all of them again at each answer).
        """
        self._answered.add(key)

    def take_wakes(self, other: "Ledger") -> None:
        """What woke ``other`` and is not decided yet wakes this one (a ledger built afresh replacing it)."""
        self._freed |= other._freed
        self._woken |= other._woken
        self._answered |= other._answered

    # -- a pass ----------------------------------------------------------------

    def begin(self) -> None:
        """A pass starts deciding: what the allocator takes from now on is only planned."""
        if self.allocator is not None:
            self.allocator.planned = set()

    def _holder(self, entry: Holder | dict) -> Holder:
        return _holder(entry, self.cluster_scoped)

    def planned(self, ip: int, address_name: str) -> None:
        """An allocation the pass plans: held until the pass is over (``settle``)."""
        self.hold(ip, (PLANNED, address_name))

    def settle(self) -> None:
        """The pass was carried out: what it only planned is given back.

        An allocation that was written comes back as its address (a change
        to apply); one that was not must not stay held.
        """
        if self.allocator is None:
            return
        planned, self.allocator.planned = self.allocator.planned or set(), None
        for ip in planned:
            if ip in self.holders:
                for holder in [h for h in self.holders_of(ip) if h[0] == PLANNED]:
                    self.let_go(ip, holder)
            elif ip in self.allocator.held:
                self.allocator.release(ip)  # skipped as held elsewhere: looked at again next time

    def unbind(self, key: o.ClaimKey) -> None:
        if self.bound.pop(key, None) is not None:
            self.rebound(key)

    def rebound(self, key: o.ClaimKey) -> None:
        """The binding of ``key`` changed (whoever changed ``bound``): the status must say so."""
        self.bound_version += 1
        self.index.touch(key)

    def dismantle(self) -> Iterator[None]:
        """Empty the ledger a piece at a time (freeing a big pool's state at once holds the event loop too)."""
        for container in (self.claims, self.addresses, self.capi_addresses, self.named, self.mirrors_named,
                          self.holders, self.kept, self.keepers, self.bound, self.pending_free, self.pending_answers,
                          self.conflicts, self.doubles):
            while container:
                for _ in range(min(4 * LOAD_CHUNK, len(container))):
                    container.popitem()
                yield
        self.allocator = None

    # -- reading ----------------------------------------------------------------

    def claim_key_of(self, address: dict, key: o.ClaimKey | None) -> o.ClaimKey | None:
        """``key`` when the address belongs to the claim of that name (or to no known claim).

        An address owned by another incarnation of the name that the claim is
        younger than is a leftover of a deleted claim, not this claim's. (A
        copy made by a move or a restore has its claim created first, and
        clusterctl rewrites owner uids anyway: such addresses stay the claim's.)
        """
        claim = self.claims.get(key) if key is not None else None
        if claim is None:
            return key
        owner_uid = o.claim_uid_of(address, key)
        claim_uid = o.meta(claim).get("uid")
        if owner_uid is None or claim_uid is None or owner_uid == claim_uid:
            return key
        if o.is_deleting(address) and not o.deleted_for_move(address):
            # Let go already, and made for another incarnation (one served from a lagging cache after this one
            # was created is younger than it): kept for this claim, it would hold its finalizer for good.
            return None
        claim_born = str(o.meta(claim).get("creationTimestamp") or "")
        address_born = str(o.meta(address).get("creationTimestamp") or "")
        return None if claim_born and address_born and claim_born > address_born else key

    def addresses_of(self, key: o.ClaimKey) -> list[dict]:
        """The Metal3 addresses made for this incarnation of the claim."""
        return [a for a in _objects(self.named.get(key)) if self.claim_key_of(a, key) == key]

    def mirrors_of(self, key: o.ClaimKey) -> list[dict]:
        """The Cluster API addresses of the claim: ours are named after it, the Go IPAM's <namePrefix>-<ip>."""
        return [a for a in _objects(self.mirrors_named.get(key)) if self.claim_key_of(a, key) == key]

    @property
    def allocated(self) -> int:
        return len(self.holders)

    @property
    def free(self) -> int:
        """The units the pool may hand out, as its status counts them: the allocator's free ones and those the
        pass only passed over as in use by another pool (taken until ``settle`` gives them back), so that the
        count does not depend on which claims a pass served."""
        allocator = self.allocator
        passed_over = sum(1 for ip in allocator.planned or () if ip not in self.holders and ip in allocator.held)
        return allocator.free_count + passed_over

    @property
    def pending_steps(self) -> bool:
        return bool(self.pending_claims or self.pending_addresses)

    def state(self, decisions: bool = True) -> dict[str, Any]:
        """What must equal a ledger loaded afresh from the same objects (and, with
        ``decisions``, given a full pass over them), in one go: for tests (the audit uses ``compare``)."""
        state: dict[str, Any] = {
            "claims": {k: _version(c) for k, c in self.claims.items()},
            "addresses": {n: _version(a) for n, a in self.addresses.items()},
            "capi_addresses": {n: _version(a) for n, a in self.capi_addresses.items()},
            "named": {k: sorted(self._keys(v)) for k, v in self.named.items()},
            "mirrors_named": {k: sorted(self._keys(v)) for k, v in self.mirrors_named.items()},
            "holders": {ip: sorted(self.holders_of(ip)) for ip in self.holders},
            "kept": dict(self.kept),
            "kept_for": dict(self.allocator.kept) if self.allocator is not None else None,
            "free": [list(f.intervals()) for f in self.allocator.free] if self.allocator is not None else None,
            "held": set(self.allocator.held) if self.allocator is not None else None,
        }
        if decisions:
            state["bound"] = dict(self.bound)
            state["pending_free"] = set(self.pending_free)
            state["pending_answers"] = dict(self.pending_answers)
        return state


class _ByName(dict):
    """Several addresses naming one claim, by name (the ``named`` indexes hold the address itself when it is one)."""


def _objects(entry: dict | None) -> Iterable[dict]:
    if entry is None:
        return ()
    return list(entry.values()) if type(entry) is _ByName else (entry,)


def _key_of(address: dict, cluster_scoped: bool = False) -> AddressKey:
    return (o.namespace(address), o.name(address)) if cluster_scoped else o.name(address)


def _holder(entry: Holder | dict, cluster_scoped: bool = False) -> Holder:
    """The (tag, key) of what holds an IP: an address object, or a planned allocation's Holder itself."""
    if type(entry) is tuple:
        return entry
    return (METAL3 if kinds.kind_of(entry) == kinds.IPADDRESS else CAPI, _key_of(entry, cluster_scoped))


def _sorted_holders(held: Any, cluster_scoped: bool = False) -> list[Holder]:
    return sorted(_holder(e, cluster_scoped) for e in each(held))


def _version(obj: dict) -> tuple:
    meta = o.meta(obj)
    return (meta.get("uid"), meta.get("resourceVersion"))


def compare(kept: Ledger, fresh: Ledger) -> Generator[None, None, list[str]]:
    """Where a ledger kept from changes differs from one loaded afresh from the same objects.

    In pieces, yielding between them: the audit runs it on the event loop.
    Returns one line per part that differs, with a few examples.
    """
    found: list[str] = []
    for part, x, y, view in (
            ("claims", kept.claims, fresh.claims, _version),
            ("addresses", kept.addresses, fresh.addresses, _version),
            ("capi_addresses", kept.capi_addresses, fresh.capi_addresses, _version),
            ("named", kept.named, fresh.named, lambda entry: sorted(fresh._keys(entry))),
            ("mirrors_named", kept.mirrors_named, fresh.mirrors_named, lambda entry: sorted(fresh._keys(entry))),
            ("holders", kept.holders, fresh.holders, lambda held: _sorted_holders(held, fresh.cluster_scoped)),
            ("kept", kept.kept, fresh.kept, lambda ip: ip)):
        yield from compare_maps(part, x, y, view, found)
    if (kept.allocator is None) != (fresh.allocator is None):
        found.append("allocator: one of them has none")
    elif kept.allocator is not None:
        yield from compare_maps("kept for", kept.allocator.kept, fresh.allocator.kept, lambda who: who, found)
        if kept.allocator.held != fresh.allocator.held:
            found.append(f"held: only kept {sorted(kept.allocator.held - fresh.allocator.held)[:3]}, "
                         f"only recomputed {sorted(fresh.allocator.held - kept.allocator.held)[:3]}")
        for n, (a, b) in enumerate(itertools.zip_longest(
                (span for f in kept.allocator.free for span in f.intervals()),
                (span for f in fresh.allocator.free for span in f.intervals())), 1):
            if a != b:
                found.append(f"free: kept {a} where recomputed {b}")
                break
            if n % 1024 == 0:
                yield
    return found


def compare_maps(part: str, x: dict, y: dict, view: Callable[[Any], Any], found: list[str]) -> Iterator[None]:
    """Append to ``found`` how the maps ``x`` (kept) and ``y`` (recomputed) differ, as seen through ``view``."""
    differing: list[Any] = []
    for n, key in enumerate(x, 1):
        if key not in y or view(x[key]) != view(y[key]):
            differing.append(key)
        if n % 1024 == 0:
            yield
    for n, key in enumerate(y, 1):
        if key not in x:
            differing.append(key)
        if n % 1024 == 0:
            yield
    if differing:
        found.append(f"{part}: {len(differing)} differ, e.g. " + ", ".join(
            f"{k!r}: {view(x[k]) if k in x else None!r} != {view(y[k]) if k in y else None!r}" for k in differing[:3]))
