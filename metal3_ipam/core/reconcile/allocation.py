"""A new address for a claim from the pool's own address set: its own IP back first when its status names
one, else what the allocator gives; a lock's name held by another IP's address said so (``Allocation``)."""

from __future__ import annotations

from .. import kinds
from .. import objects as o
from ..actions import Create, Event, Step
from ..allocator import ALLOCATION_FAILED, POOL_NOT_READY, AllocationError
from ..kept import precedence, served
from ..ledger import METAL3, PLANNED
from ..naming import ip_text
from ..poolkind import kind_named
from ..several import each
from .conditions import waiting_text
from .guards import GUARDS_PER_ALLOCATION
from .pieces import _bounded, _ip_of
from .state import PassState


# The name of the IPAddress locking a claim's IP is another IP's (two Metal3 IPPools' ``<namePrefix>-<ip>``
# names meet: ``a`` + 1:2::5 and ``a-1`` + 2::5), as the Go Metal3 IPAM reports it.
NAME_COLLISION = "IPAddressNameCollision"


class Allocation(PassState):
    """A new address for a claim from the pool's own address set."""

    def allocate(self, claim: dict, step: Step) -> None:
        foreign = o.foreign_pool_namespace(claim)
        if foreign is not None:
            return self.fail(claim, step, ALLOCATION_FAILED,
                             f"spec.pool.namespace {foreign!r} must be the claim's own namespace "
                             f"{o.namespace(claim)!r}: an address cannot be owned across namespaces")
        missing = self.missing_cluster(claim)
        if missing is not None and o.claim_key(claim) in self.ledger.kept:
            # Its status names the IP it gets back once the Cluster is there: a wait written over it
            # would let that IP go to another claim meanwhile. Left as it is, as a paused claim's is.
            self.plan.notes.append(f"{o.name(claim)}: waits for {self.cluster_text(missing)}, its IP kept for it")
            return
        if missing is not None:
            return self.set_pending(claim, step, f"{self.cluster_text(missing)} not found: an address is handed out "
                                          "once it exists (a moved Cluster's claims may be seen before it)")
        pool_ref = self.pool_text()
        if self.pool_obj is None:
            return self.fail(claim, step, POOL_NOT_READY, f"{pool_ref} not found")
        if o.is_deleting(self.pool_obj):
            return self.fail(claim, step, POOL_NOT_READY, f"{pool_ref} is being deleted")
        if self.pool is None:
            return self.fail(claim, step, POOL_NOT_READY, f"{pool_ref} is invalid: {self.pool_problem}")
        if self.fencing_waits(claim):
            # Nothing in the store will change for it: decided again in the pass that follows this one.
            self.ledger.pending_claims[o.claim_key(claim)] = None
            self.plan.notes.append(f"{o.name(claim)}: allocated at the next pass (this one wrote the claims of global "
                                   "pools whose allocation may be on its way already)")
            return
        key = o.claim_key(claim)
        paused = self.paused_unmet(claim)
        if paused is not None:
            return self.wait_for_paused(claim, step, paused)
        lock_namespace = self.lock_namespace(claim)
        held_elsewhere = lambda ip: self.held_elsewhere(lock_namespace, ip, o.namespace(claim), claim=claim)  # noqa: E731
        avoid = self.withheld_from(o.namespace(claim))
        if self.kind.outside is not None:
            return self.allocate_outside(claim, step, held_elsewhere)
        requested = o.annotations(claim).get(kinds.IP_ADDRESS_ANNOTATION)
        own = self.ledger.kept.get(key)
        grant, lost = None, None
        if own is not None:
            going = self.still_going(key, own)
            if going:
                # Its IP comes free once that address is gone (a change that brings the claim back).
                self.plan.notes.append(f"{o.name(claim)}: waits for {going} to go, to take its IP back")
                return
            rival = self.rival_for(claim, own)
            if rival is not None:
                lost = (f"its address {ip_text(self.pool.address_of(own))} is named by the status of "
                        f"{self.claim_text(rival)} too, {_goes_first(rival, claim)}; its address objects were deleted")
            else:
                try:
                    grant = self.allocator.reclaim(
                        o.name(claim), own, lambda ip: self.held_elsewhere(lock_namespace, ip, o.namespace(claim),
                                                                            for_keeper=True, claim=claim),
                        kept_as=key, avoid=avoid, written_over=self.written_over(own))
                except AllocationError as err:
                    lost = f"{err.message}; its address objects were deleted"
        if grant is None:
            self.collisions, self.unguardable = {}, set()
            try:
                passed_over = self.passed_over.setdefault(o.namespace(claim), set()) \
                    if self.kind.cluster_scoped else None
                grant = self.allocator.allocate(o.name(claim), requested, name_taken=held_elsewhere,
                                                kept_as=key, avoid=avoid, passed_over=passed_over)
            except AllocationError as err:
                # The status says what the next pass would (its status no longer naming the IP, nothing is kept
                # for it then): one Warning Event tells of the lost IP, and no second one follows.
                reason, message = (err.reason, err.message) if not self.collisions else self.collided(err)
                if self.unguardable and not self.collisions:
                    message += (f"; {len(self.unguardable)} free sub-prefix(es) such as "
                                f"{ip_text(self.pool.address_of(min(self.unguardable)))}/{self.pool.unit_length} "
                                f"meet more than {GUARDS_PER_ALLOCATION} addresses or sub-prefixes of global "
                                f"pools (or that a paused claim of a global pool may be handed), and a namespaced "
                                f"pool hands out none such (its allocation could not be guarded against theirs)")
                return self.fail(claim, step, reason, message, event_message=message + (f"; {lost}" if lost else ""))
        address = self.lock_for(claim, grant.ip, grant.prefix, grant.gateway, grant.dns_servers)
        self.ledger.planned(grant.unit, o.name(address))
        for action in self.guard_actions(claim, grant.unit):
            step.add(action)
        step.add(Create(address))
        if lost:
            step.add(Event(o.ref(claim), "Warning", "AddressChanged",
                           _bounded(f"{lost}, so it is given {ip_text(grant.ip)} instead: whatever runs on "
                                    f"{ip_text(self.pool.address_of(own))} must move")))
        self.ensure_bound(claim, address, step)

    def wait_for_paused(self, claim: dict, step: Step, paused: dict) -> None:
        """The claim waits for a paused claim of its namespace's pools whose pass no allocation of this pool can
        be kept apart from (``paused_unmet``); its status says so (one naming its IP is left as it is). Decided
        again when that claim's Cluster is unpaused or deleted (which brings this pool a pass), and when that claim
        or an address naming it changes or goes (the inventory reads whom it waits for: ``waited_for``)."""
        cluster = self.cluster_text((o.namespace(paused), o.cluster_name_of(paused) or ""))
        if o.claim_key(claim) in self.ledger.kept:
            self.plan.notes.append(f"{o.name(claim)}: waits for {self.claim_text(paused)} ({cluster} paused), "
                                   "its IP kept for it")
            return
        pool = o.pool_of(paused)
        kind = kind_named(pool.kind) if pool is not None else None
        why = (f"{pool.kind[1]} {pool.name} is gone, and the length of its sub-prefixes with it"
               if kind is not None and kind.holds_prefixes else
               "its pool guards what it hands out by no name while no global IP pool exists")
        self.set_pending(claim, step, f"{waiting_text(self.claim_text(paused))} to be unpaused ({cluster} is "
                                      f"paused): a pass of its pool made before the pause may still hand it an "
                                      f"address this pool could hand out too ({why}), and could not be kept apart "
                                      f"from it")

    def rival_for(self, claim: dict, ip: int) -> dict | None:
        """Another live claim whose status names ``ip`` too (a status rewritten by hand) and that, holding no
        address either, wants it back before ``claim`` (``kept.precedence``), of this pool or of another pool of
        the namespace; None when ``claim`` goes first."""
        ledger, key = self.ledger, o.claim_key(claim)
        wanting = [k for k in each(ledger.keepers.get(ip))
                   if k == key or (k in ledger.claims and not self.holds_anything(ledger.claims[k]))]
        first = min(wanting, key=lambda k: precedence(ledger.claims[k])) if len(wanting) > 1 else key
        if first != key:
            return ledger.claims[first]
        return self.snap.keeper_elsewhere(o.namespace(claim), self.pool.version, int(self.pool.address_of(ip)), claim)

    def claim_text(self, claim: dict) -> str:
        """A claim as a message names it: its kind and name, and its pool when that is not this one."""
        text = f"{kinds.kind_of(claim)[1]} {o.name(claim)}"
        pool = o.pool_of(claim)
        if pool is None or (pool.kind, pool.name) == (self.kind.kind, self.snap.pool_name):
            return text
        return f"{text} of {pool.kind[1]} {pool.namespace + '/' if pool.namespace else ''}{pool.name}"

    def still_going(self, key: o.ClaimKey, ip: int) -> str | None:
        """What holds ``ip`` that is on its way out: an address of this claim being deleted, or one whose
        claim is gone or going. None when nothing holds it, or a live claim (or a planned allocation) does."""
        going = None
        for tag, name in self.ledger.holders_of(ip):
            if tag == PLANNED:
                return None
            address = (self.ledger.addresses if tag == METAL3 else self.ledger.capi_addresses).get(name)
            named = (o.claim_of_address if tag == METAL3 else o.claim_of_capi_address)(address)
            owner = self.ledger.claim_key_of(address, named)
            claim = self.ledger.claims.get(owner) if owner is not None else None
            if claim is not None and not o.is_deleting(claim) and owner != key:
                return None
            if claim is not None and owner == key and not o.is_deleting(address):
                return None
            going = f"{tag} {name}"
        return going

    def collided(self, err: AllocationError) -> tuple[str, str]:
        """The reason and message of a claim refused because the name of an IP's lock is another IP's: the
        first such IP, the IPAddress holding its name and that address's pool."""
        unit, holder = min(self.collisions.items(), key=lambda item: item[0])
        ref = o.spec(holder).get("pool") or {}
        pool = f"{ref.get('kind') or kinds.IPPOOL[1]} {ref.get('name')}"
        return NAME_COLLISION, (f"{ip_text(self.pool.address_of(unit))} cannot be locked: its IPAddress name "
                                f"{o.name(holder)} is held by the IPAddress of {ip_text(_ip_of(holder))} of {pool} "
                                f"(their names <namePrefix>-<ip> meet; a namePrefix that does not start with the "
                                f"other's followed by '-' keeps them apart): {err.message}")


def _goes_first(rival: dict, claim: dict) -> str:
    """Why ``rival`` gets the IP both statuses name before ``claim`` (``kept.precedence``)."""
    if served(rival) and not served(claim):
        return "which an IPAM served (this claim carries no claim finalizer: none ever served it)"
    return "which was created first"
