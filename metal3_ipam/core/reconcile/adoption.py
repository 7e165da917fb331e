"""Address objects taken up as they are: a Cluster API claim served with only a Cluster API IPAddress (an
earlier IPAM's, or one written before its claim) gets its lock; an address the claim may not take up is
refused, and the claim told why (``Adoption``)."""

from __future__ import annotations

from collections.abc import Mapping

from .. import kinds
from .. import objects as o
from ..actions import Create, Delete, SetMetadata, Step
from ..allocator import ALLOCATION_FAILED
from ..kept import binds_none, left_by_an_earlier_incarnation, let_go_span, named_ip, of_another_incarnation, status_ref
from ..ledger import CAPI, METAL3, PLANNED, AddressKey
from ..naming import ip_text
from ..overlap import withheld_spans
from .. import poolkind
from ..validation import written_before_its_claim
from .conditions import ADDRESS_CONFLICT
from .guards import GUARDS_PER_ALLOCATION, Span
from .pieces import _address_text, _bounded, _held, _held_text, _ip_of, _let_go, _live
from .state import PassState


class Adoption(PassState):
    """Address objects a claim takes up as they are, or is refused."""

    def adopt(self, claim: dict, step: Step) -> None:
        """A Cluster API claim served with only a Cluster API IPAddress keeps it, and gets its lock.

        This is the state the Go Metal3 IPAM leaves (its address is named
        ``<namePrefix>-<ip>``). The lock is a Metal3 IPAddress at the same IP,
        so from now on the name lock guards this IP like any other.
        """
        mirror = self.first_mirror(claim, _live(self.ledger.mirrors_of(o.claim_key(claim))))
        ip = _ip_of(mirror)
        if ip is None or self.pool is None:
            return self.fail(claim, step, ALLOCATION_FAILED,
                             f"its IPAddress {o.name(mirror)} holds {o.spec(mirror).get('address')!r}, which cannot be "
                             f"adopted: " + ("not an IP address" if ip is None else f"{self.kind.kind[1]} {self.snap.pool_name} is invalid"))
        refusal = self.refusal(claim, mirror, locking=True)
        if refusal is not None:
            # Its IP is another's (the lock's name taken included: state an earlier IPAM left, where two pools
            # with one namePrefix gave one IP twice), or one the pool could not have given it.
            return self.refuse(claim, step, mirror, refusal)
        if self.guard_waits(claim, mirror, ip, step):
            return
        lock = self.lock_of(claim, mirror, ip, step)
        self.ledger.bound[o.claim_key(claim)] = ip_text(ip)
        self.complete_owners(mirror, claim, step)
        self.set_claim_status(claim, step, address=lock, mirror=mirror)

    def first_mirror(self, claim: dict, mirrors: list[dict]) -> dict:
        """Of a claim's live Cluster API IPAddresses, the one it takes up: the one its status names, else the
        earliest (every replica picks the same)."""
        named = o.status(claim).get("addressRef")
        named = named.get("name") if isinstance(named, Mapping) else None
        return sorted(mirrors, key=lambda a: (o.name(a) != named, str(o.meta(a).get("creationTimestamp") or ""),
                                              o.name(a)))[0]

    def guard_waits(self, claim: dict, mirror: dict, ip, step: Step) -> bool:
        """Whether taking ``mirror`` up waits (or fails): the guard its IP needs in the claim's namespace
        (``guard_spans``) is another claim's, whose allocation may be on its way (a pass made before this one could
        see it); this claim is served again once that allocation lands (its address then holds the IP: refused)
        or its guard is left over. Fails when the IP could not be guarded at all."""
        unit = self.pool.unit_of(int(ip))
        spans = self.guard_spans(claim, unit)
        if spans is None:
            self.fail(claim, step, ALLOCATION_FAILED,
                      f"{_address_text(mirror)} holds {ip_text(ip)}, which cannot be taken up: it meets more than "
                      f"{GUARDS_PER_ALLOCATION} addresses or sub-prefixes of global pools (it could not be guarded "
                      "against theirs)")
            return True
        taken = next((span for span in spans if self.span_taken(claim, span)), None)
        if taken is None:
            return False
        self.plan.notes.append(f"{o.name(claim)}: {_address_text(mirror)} is taken up once the guard "
                               f"{o.name(self.guard_at(o.namespace(claim), taken))} of another claim's allocation of "
                               f"{ip_text(ip)} lands with its address or is left over")
        return True

    def lock_of(self, claim: dict, mirror: dict, ip, step: Step) -> dict:
        """The lock created for an address taken up as it is, at its IP, with its prefix and gateway, after the
        guards an allocation of that IP by this pool writes."""
        spec = o.spec(mirror)
        entry = self.pool.entry_of(self.pool.unit_of(int(ip)))
        lock = self.lock_for(claim, ip, prefix=spec.get("prefix"), gateway=spec.get("gateway") or None,
                             dns_servers=entry.dns_servers if entry is not None else ())
        self.adopting += 1
        for action in self.guard_actions(claim, self.pool.unit_of(int(ip))):  # before its lock, as an allocation's
            step.add(action)
        step.add(Create(lock))
        return lock

    def written_over_lock(self, claim: dict, live: list[dict]) -> tuple[dict, str | None] | None:
        """The Cluster API IPAddress written for ``claim`` before it was served (a restore, a move) that the
        claim's locks at other IPs give way to, with why the claim may not take it up (``refusal``) or None;
        None when the locks decide (``ensure_mirror``).

        A view that did not show that address yet locked a free IP for the claim: its create of the claim's
        IPAddress was refused, the name being the written one's. Such a lock holds an IP the claim was never
        bound to: its status names none of them, and no IPAddress of the claim shows their IPs. The claim is
        then served as it would have been had the address been seen first: taken up as it is, or refused.
        A lock the status names, or whose IP an IPAddress of the claim shows, decides: the claim may have been
        read bound to it, and an address written later at another IP is a stray.
        """
        if kinds.kind_of(claim) != kinds.CAPI_CLAIM or not self.kind.keeps_addresses_written_first \
                or self.pool is None:
            return None
        mirrors = _live(self.ledger.mirrors_of(o.claim_key(claim)))
        if not mirrors:
            return None
        mirror = self.first_mirror(claim, mirrors)
        ip = _ip_of(mirror)
        others = [lock for lock in live if _ip_of(lock) != ip]
        if ip is None or not others:
            return None
        if any(self.named_by_status(claim, lock) for lock in others):
            return None
        shown = {_ip_of(m) for m in mirrors}
        if any(_ip_of(lock) in shown for lock in others):
            return None
        locking = len(others) == len(live)
        refusal = self.refusal(claim, mirror, locking=locking)
        return None if refusal is not None and not locking else (mirror, refusal)

    def adopt_over(self, claim: dict, live: list[dict], mirror: dict, refusal: str | None, step: Step) -> None:
        """``claim`` takes up ``mirror`` (``written_over_lock``): its lock (created unless there, after a write on
        condition that the claim is unchanged since read, and its guards), the address's owner references and
        finalizer, the status naming it; or, refused it, is told why. Then its other locks
        go, and their guards: after a status that never names them (a status write refused, the claim changed since it was read,
        keeps them)."""
        ip = _ip_of(mirror)
        lock = next((lock for lock in live if _ip_of(lock) == ip), None)
        if refusal is not None:
            self.refuse(claim, step, mirror, refusal)
        else:
            if lock is None:
                if self.guard_waits(claim, mirror, ip, step):
                    return
                # The rule holds of the claim as read: a view behind shows a claim bound since as unserved. The
                # step is refused as a whole, before it locks a new IP, when the claim changed since.
                step.add(SetMetadata(o.ref(claim), resource_version=o.meta(claim).get("resourceVersion")))
                lock = self.lock_of(claim, mirror, ip, step)
            self.ledger.bound[o.claim_key(claim)] = ip_text(ip)
            self.complete_owners(mirror, claim, step)
            self.set_claim_status(claim, step, address=lock, mirror=mirror)
        others = [other for other in live if other is not lock]
        for other in others:
            _let_go(step, other, self.finalizers.address[kinds.IPADDRESS])
        for guard in self.guards_of(claim, others):  # they go with their locks, as on release
            step.add(Delete(o.ref(guard)))
        self.plan.notes.append(f"{o.name(claim)}: {'refused' if refusal else 'takes up'} {_address_text(mirror)} "
                               f"at {ip_text(ip)}, written before it; its lock at another IP, never bound, goes")

    def fenced_leftovers(self, claim: dict, live: list[dict], step: Step) -> bool:
        """Whether the claim's own address objects that its status does not name include what a pass of its pool
        left, refused by an allocation of the other side that took what that pass hands out: that allocation
        removed the claim's naming, settled, and wrote the span it named in its place (``kinds.LET_GO_ANNOTATION``,
        which a naming made after it removes; ``Guards.fence``); the claim names nothing since. Every pass that
        named there was made before that write, and its status write was refused. Its locks and the Cluster API
        IPAddresses made for it inside that span then go, with their guards, and are not taken up: what they
        hold is the other claim's. So do those such a pass made for an earlier incarnation of the claim's name
        (``left_by_an_earlier_incarnation``). The claim is served anew once they are gone (it names again).
        Objects of the claim elsewhere (moved or restored with it) are taken up as ever; one its status names
        binds it."""
        key, uid, span = o.claim_key(claim), o.meta(claim).get("uid"), let_go_span(claim)
        if uid is None or self.kind.outside is not None:
            return False
        if span is not None and self.pool_obj is not None and not self.names_allocation():
            span = None  # a pool gone is read as naming: its passes, made before, may have named

        def inside(address: dict) -> bool:
            ip = o.address_ip(address)
            return span is not None and ip is not None and span[0] <= int(ip) <= span[1]

        finalizer = self.finalizers.address[kinds.CAPI_ADDRESS]
        mirrors = [m for m in _held(self.ledger.mirrors_of(key), finalizer)
                   if (o.claim_uid_of(m, key) == uid and inside(m)) or self.left_by_an_earlier_incarnation(claim, m)]
        locks = [lock for lock in live if inside(lock) or self.left_by_an_earlier_incarnation(claim, lock)]
        if not (locks or mirrors) \
                or any(self.named_by_status(claim, a) for a in live + list(self.ledger.mirrors_of(key))):
            return False
        for mirror in mirrors:
            _let_go(step, mirror, finalizer)
        for lock in locks:
            _let_go(step, lock, self.finalizers.address[kinds.IPADDRESS])
        for guard in self.guards_of(claim, locks):  # they go with their locks, as on release
            step.add(Delete(o.ref(guard)))
        self.plan.notes.append(f"{o.name(claim)}: its address objects were made by a pass refused by an allocation "
                               "of another pool that took what it named; they go, not taken up")
        return True

    def left_by_an_earlier_incarnation(self, claim: dict, address: dict) -> bool:
        """Whether ``address``, not made for this incarnation of the claim, is what a refused pass of an earlier one
        left (``kept.left_by_an_earlier_incarnation``), asked of the claims whose address or guard holds its IP in
        the claim's namespace."""
        ip = _ip_of(address)
        if ip is None or self.pool is None or not of_another_incarnation(address, claim):
            return False
        namespace = o.namespace(claim)
        takers = [self.snap.claim_named(*named) for named in map(o.claim_named_by, self.snap.addresses_at(
            namespace, ip.version, int(ip))) if named is not None]
        guard = self.guard_at(namespace, Span(int(ip))) if ip.version == self.pool.version else None
        return left_by_an_earlier_incarnation(address, claim, takers + ([self.holder(guard)] if guard else []),
                                              self.snap.separate_network)

    def refusal(self, claim: dict, address: dict, locking: bool) -> str | None:
        """Why ``claim`` may not take up ``address`` (its own address object, of either API, that it is not
        bound to yet), or None when it may.

        Refused: an IP of another family than the pool's; one the pool could not have given this claim (outside
        it, a gateway or excluded, withheld for an earlier pool, another claim's preallocation), asked only of an
        address written before its claim: one the claim's status names or whose owner reference names this
        claim (made by an IPAM, or moved with it by ``clusterctl move``) stays with it as it was given; and an
        IP another claim holds (``rival``). ``locking``: the claim has no lock yet, and would get one here.
        """
        ip, pool = _ip_of(address), self.pool
        if ip is None or pool is None:
            return None
        held = f"{_address_text(address)} holds {ip_text(ip)}"
        if ip.version != pool.version:
            return f"{held}, which is not of {self.pool_text()}'s family (IPv{pool.version})"
        unit = pool.unit_of(int(ip))
        rival = self.rival(claim, address, unit, locking)
        if rival is not None:
            return f"{held}, which {rival}"
        if self.kind.outside is None and not self.made_for(claim, address):
            never = self.allocator.never_for(o.name(claim), unit)
            if never is None and any(lo <= unit <= hi for lo, hi in self.withheld_from(o.namespace(claim))):
                never = (f"is withheld from its claims of namespace {o.namespace(claim)}: a pool of the namespace "
                         "owns it")
            if never is not None:
                return f"{held}, which {self.pool_text()} could not have handed out: {ip_text(ip)} {never}"
        return None

    def rival(self, claim: dict, address: dict, unit: int, locking: bool) -> str | None:
        """What holds ``unit`` for another claim, named; None when nothing does.

        Every lock (a Metal3 IPAddress) of another claim or of none, every allocation of this pass, an IP kept for
        another claim whose status names it, any address of another pool of the namespace (for the kinds whose
        IPs are unique there), and a lock's name taken by any object. A Cluster API IPAddress of another live claim
        of the pool counts for a claim that has no lock yet, and against one whose lock it is only when that
        claim's status names it (a binding made before, by an earlier IPAM): else it is locked (and its lock
        counts) or, not taken up, the user's.
        """
        key, ledger = o.claim_key(claim), self.ledger
        for tag, name in ledger.holders_of(unit):
            if tag == PLANNED:
                return f"another claim of {self.pool_text()} is being given (IPAddress {name})"
            other = (ledger.addresses if tag == METAL3 else ledger.capi_addresses).get(name)
            if other is None or other is address:
                continue
            named = (o.claim_of_address if tag == METAL3 else o.claim_of_capi_address)(other)
            owner = ledger.claim_key_of(other, named)
            if owner == key:
                continue
            holder = ledger.claims.get(owner) if owner is not None else None
            # A claim whose status names its address (bound by an earlier IPAM) goes before an address written
            # by hand: other claims' addresses count against a claim getting its first lock when it is not bound.
            fresh = locking and not self.named_by_status(claim, address)
            if tag == CAPI and holder is None and fresh and self.made_elsewhere(other):
                return _held_text(other)
            if tag == CAPI and (holder is None or not (fresh or self.named_by_status(holder, other))):
                continue
            return _held_text(other)
        kept = ledger.allocator.kept.get(unit)
        if kept is not None and kept != key:
            return (f"is kept for {kept[0]} {kept[2] if len(kept) > 2 else self.snap.namespace}/{kept[1]}, whose "
                    "status names it and whose address objects were deleted")
        namespace = self.lock_namespace(claim)
        lock_name = self.pool.lock_name(unit)
        if locking and self.snap.name_taken(namespace, lock_name):
            lock = self.snap.address_named(namespace, lock_name)
            if lock is None:
                return f"IPAddress {namespace}/{lock_name}, its lock, exists already"
            return _held_text(lock)
        if self.kind.unique_in_namespace or self.kind.outside is not None:
            others = self.snap.held_by_others(namespace, self.pool.version, int(self.pool.address_of(unit)),
                                              every_pool=self.kind.outside is not None)
            if others:
                return _held_text(others[0])
        first = int(self.pool.address_of(unit))
        held = self.global_address_at(namespace, first) if self.kind.unique_in_namespace else None
        if held is not None:
            return _held_text(held)
        if self.kind.cluster_scoped and self.snap.held_elsewhere(
                o.namespace(claim), self.pool.version, first, first + (1 << self.pool.unit_bits) - 1):
            # The claim's namespace: the addresses of the pools there (a global pool's locks are elsewhere).
            others = self.snap.held_by_others(o.namespace(claim), self.pool.version, first, every_pool=True)
            return _held_text(others[0]) if others else f"an address of namespace {o.namespace(claim)} holds"
        if self.snap.kept_elsewhere(o.namespace(claim), self.pool.version, first):
            return ("is kept for a claim of another pool of the namespace, whose status names it and whose address "
                    "objects were deleted")
        return None

    def global_address_at(self, namespace: str, ip: int) -> dict | None:
        """For a namespaced pool: the Cluster API IPAddress of a global pool's claim of the namespace at ``ip``
        (but a separate network's), or None. A global pool's lock is in the lock namespace, which may be this one:
        it does not count."""
        if self.kind.cluster_scoped:
            return None
        shared = {w.owner for w in self.snap.withheld if w.shared}
        for address in self.snap.held_by_others(namespace, self.pool.version, ip, every_pool=True):
            pool = o.pool_of(address)
            if kinds.kind_of(address) == kinds.CAPI_ADDRESS and pool is not None and pool not in shared \
                    and poolkind.REGISTRY[pool.kind].cluster_scoped:
                return address
        return None

    def withheld_from(self, namespace: str) -> list[tuple[int, int]]:
        """The spans of units the pool does not hand to its claims of ``namespace`` (a global pool, for the pools
        of that namespace that own them; nothing for a namespaced pool)."""
        return [(self.pool.unit_of(w.first), self.pool.unit_of(w.last))
                for w in withheld_spans(self.snap.withheld_in(namespace))]

    def made_elsewhere(self, address: dict) -> bool:
        """A Cluster API IPAddress of a live claim this controller does not see (of a namespace not served, under
        ``-n``) that an IPAM made or ``clusterctl move`` copied for its claim (an owner reference names it): its
        claim is bound to it, maybe not locked yet (the Go provider's state), and holds its IP."""
        return not self.snap.serves(o.namespace(address)) and not written_before_its_claim(address)

    def made_for(self, claim: dict, address: dict) -> bool:
        """Whether ``address`` was made for this claim: its status names it, or its owner reference names this
        incarnation of the claim (an address written before its claim can name none)."""
        uid = o.meta(claim).get("uid")
        return self.named_by_status(claim, address) or (
            uid is not None and o.claim_uid_of(address, o.claim_key(claim)) == uid)

    def named_by_status(self, claim: dict, address: dict) -> bool:
        """Whether the claim's status names ``address``: by name, or the IP it says it is bound to."""
        ref = status_ref(claim)
        if ref is not None and ref.get("name") == o.name(address) \
                and ref.get("namespace") in (None, "", o.namespace(address)):
            return True
        ip = _ip_of(address)
        if ip is None or self.pool is None or ip.version != self.pool.version:
            return False
        unit = self.pool.unit_of(int(ip))
        # The ledger read it from the status when the claim was loaded (``kept``); read here only for the claims
        # it keeps nothing for (preallocated ones, those asking for an IP).
        return self.ledger.kept.get(o.claim_key(claim)) == unit or named_ip(claim, self.pool) == unit

    def not_taken_up(self, claim: dict, address: dict) -> bool:
        """Whether a live claim's address object lacking our finalizer is one it does not take up (``serve``
        decides it the same way): it is left as it was written."""
        key = o.claim_key(claim)
        if kinds.kind_of(address) == kinds.CAPI_ADDRESS:
            mine = self.ledger.addresses_of(key)
            if mine:
                # The claim's lock decides (a Cluster API IPAddress at another IP is a stray), unless it gives way.
                over = self.written_over_lock(claim, _held(mine, self.finalizers.address[kinds.IPADDRESS]))
                return over is not None and over[0] is address and over[1] is not None
            return self.refusal(claim, address, locking=True) is not None
        return not self.named_by_status(claim, address) and self.refusal(claim, address, locking=False) is not None

    def refuse(self, claim: dict, step: Step, address: dict, refusal: str) -> None:
        """The claim is told why its address object is not taken up (Ready=False, an IPClaim's errorMessage, one
        Warning Event), is given no other IP while that object names it, and the pool lists it. A status that
        names that object already (a binding an earlier IPAM made) keeps naming it: whatever runs on its IP is
        not cut off, and the claim stays first in line for it."""
        self.ledger.conflicts[o.claim_key(claim)] = _bounded(f"{o.namespace(claim)}/{o.name(claim)}: {refusal}", 256)
        ref = status_ref(claim)
        self.fail(claim, step, ADDRESS_CONFLICT,
                  f"{refusal}; it is not taken up, and no other address is given while it names this claim; "
                  "delete it (it is left as written) for the claim to be served",
                  kept_ref=ref is not None and ref.get("name") == o.name(address))

    def written_first(self, address: dict, finalizer: str) -> bool:
        """A Cluster API IPAddress written before its claim, for a kind that keeps such: no owner reference
        to a claim, none of our finalizers (nothing of ours made it, nothing of ours lets it go)."""
        return (self.kind.keeps_addresses_written_first and kinds.kind_of(address) == kinds.CAPI_ADDRESS
                and finalizer not in o.finalizers(address)
                and not any(r.get("kind") == kinds.CAPI_CLAIM[1] for r in o.owner_references(address)))

    def written_over(self, unit: int) -> bool:
        """Whether all that holds ``unit`` in the pool are Cluster API IPAddresses written before their claims
        that no claim is bound to (``kept.binds_none``): they hold it from no claim whose status names it."""
        ledger = self.ledger

        def binds_no_claim(tag: str, name: AddressKey) -> bool:
            address = ledger.capi_addresses.get(name) if tag == CAPI else None
            if address is None:
                return False
            claim = ledger.claims.get(ledger.claim_key_of(address, o.claim_of_capi_address(address)))
            return binds_none(address, claim)

        holders = ledger.holders_of(unit)
        return bool(holders) and all(binds_no_claim(*holder) for holder in holders)
