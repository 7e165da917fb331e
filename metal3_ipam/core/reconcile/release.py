"""Release and finalizers: addresses whose claim is gone or going, a deleted claim's address let go (or held
until its pool kind's grace period ends), the finalizers that guard what a claim holds (``Release``)."""

from __future__ import annotations

from .. import kinds
from .. import objects as o
from ..actions import Delete, SetFinalizers, Step
from ..asking import Intent
from .. import poolkind
from .pieces import _held, _let_go, _live, _passed, _text_of, _with_finalizer, _without_finalizer
from .state import PassState


def _claim_ref_of_address(address: dict, key: o.ClaimKey | None) -> o.Ref:
    """The claim an address was made for; with its uid when the owner reference tells it."""
    claim = o.spec(address).get("claim") or {}
    kind, claim_name = key[:2] if key else (kinds.IPCLAIM[1], "")
    api_version = claim.get("apiVersion") or (kinds.METAL3_API_VERSION if kind == kinds.IPCLAIM[1]
                                              else f"{kinds.CAPI_IPAM_GROUP}/{kinds.CAPI_IPAM_VERSIONS[0]}")
    return o.Ref(api_version, kind, str(claim.get("namespace") or o.namespace(address)), claim_name,
                 o.claim_uid_of(address, key) if key else None)


class Release(PassState):
    """Addresses whose claim is gone or going, and a deleted claim's release."""

    def tend_address(self, address: dict) -> None:
        key = o.claim_of_address(address)
        self.tend(address, self.claim_key_of(address, key), finalizer=self.finalizers.address[kinds.IPADDRESS],
                  subject=f"IPAddress {o.namespace(address)}/{o.name(address)}",
                  claim_ref=_claim_ref_of_address(address, key))

    def tend_capi_address(self, address: dict) -> None:
        key = o.claim_of_capi_address(address)
        claim_ref = o.Ref(address.get("apiVersion", ""), kinds.CAPI_CLAIM[1], o.namespace(address),
                          key[1] if key else "", o.claim_uid_of(address, key) if key else None)
        self.tend(address, self.claim_key_of(address, key), finalizer=self.finalizers.address[kinds.CAPI_ADDRESS],
                  subject=f"IPAddress.{kinds.CAPI_IPAM_GROUP} {o.namespace(address)}/{o.name(address)}",
                  claim_ref=claim_ref)

    def tend(self, address: dict, key: o.ClaimKey | None, finalizer: str, subject: str, claim_ref: o.Ref) -> None:
        """An address (of either API) goes when its claim is gone; its finalizer goes once it is deleted.

        While its claim lives, an address carries our finalizer: one that lost
        it (an edit, an earlier IPAM) gets it back, so it cannot vanish under
        a claim that still uses it.
        """
        claim = self.ledger.claims.get(key) if key else None
        if kinds.kind_of(address) == kinds.CAPI_ADDRESS:
            self.note_moved_in(address, claim)
        if not self.snap.serves(claim_ref.namespace):
            return  # a claim served elsewhere (``-n``): its IP is held here, its addresses are written there
        step = self.plan.step(subject, about=o.ref(address))  # a write refused for good shows on the address
        if o.is_deleting(address):
            if o.deleted_for_move(address):
                return  # clusterctl strips every finalizer itself; a write here would race it
            keep = claim is not None and not o.is_deleting(claim)
            if finalizer in o.finalizers(address) and not keep:
                step.add(_without_finalizer(address, finalizer))
            return
        if claim is None:
            if self.written_first(address, finalizer):
                return  # written before its claim, which it waits for
            capi_finalizer = self.finalizers.address.get(kinds.CAPI_ADDRESS, "")
            if kinds.kind_of(address) == kinds.IPADDRESS and key is not None and any(
                    not self.written_first(m, capi_finalizer) for m in self.ledger.mirrors_of(key)):
                # The lock goes last, once nothing shows the IP any more: its claim's Cluster API address
                # may be left alone meanwhile (paused with its Cluster, as ``clusterctl move`` leaves the
                # addresses of a global pool in the source until it deletes the Cluster). One written before
                # its claim is no reason: it stays while no claim has it, and holds its IP itself.
                self.plan.notes.append(f"{subject} waits for the Cluster API IPAddress of its claim to go")
                return
            _let_go(step, address, finalizer, unless_exists=claim_ref)
        elif finalizer not in o.finalizers(address) and not o.is_deleting(claim):
            if self.written_first(address, finalizer):
                return  # adopted in its claim's step: owner references, then the finalizer, then the status
            if self.not_taken_up(claim, address):
                return  # the user's, as written: its claim is told why (``refuse``)
            step.add(_with_finalizer(address, finalizer))

    def remember_binding(self, claim: dict) -> None:
        key = o.claim_key(claim)
        live = _held(self.ledger.addresses_of(key), self.finalizers.address[kinds.IPADDRESS]) or _live(self.ledger.mirrors_of(key))
        if live:
            self.ledger.bound[key] = _text_of(live[0])

    def release(self, claim: dict, step: Step, mine: list[dict], finalizer: str) -> None:
        if o.deleted_for_move(claim):
            # Moved, not released; clusterctl strips the finalizers itself. Asked for no more outside.
            self.remember_binding(claim)
            outside_key = self.outside_key(claim)
            if outside_key is not None:
                self.plan.intents[outside_key] = Intent.FORGET
            return
        key = o.claim_key(claim)
        self.ledger.deadlines.pop(key, None)
        if not self.released_outside(claim):
            # Its address stays (objects, finalizers, the IP held) until the outside IPAM let it go.
            self.remember_binding(claim)
            outside_key = self.outside_key(claim)
            refusal = self.answers.release_refused(outside_key) if self.answers is not None else None
            if refusal is not None:
                self.show_release_refused(claim, step, refusal)
            self.ledger.pending_answers[key] = outside_key  # the answer for that key wakes it
            self.plan.notes.append(f"{o.name(claim)}: released once {self.pool_text()}'s IPAM let its address go")
            return
        held_until = self.release_after(claim, mine)
        if held_until is not None:
            # Its address outlives it until then (counted, its IP handed out to no one), both finalizers on.
            self.remember_binding(claim)
            self.ledger.deadlines[key] = held_until
            self.plan.notes.append(f"{o.name(claim)}: its address is released at {held_until}")
            return
        # The visible address first, its lock last: the IP stays guarded until nothing shows it any more.
        for mirror in self.ledger.mirrors_of(key):
            _let_go(step, mirror, self.finalizers.address[kinds.CAPI_ADDRESS])
        for address in mine:
            _let_go(step, address, self.finalizers.address[kinds.IPADDRESS])
        for guard in self.guards_of(claim, mine):
            step.add(Delete(o.ref(guard)))
        gone = {finalizer, *self.stale_finalizers(claim)}
        if gone & set(o.finalizers(claim)):
            step.add(SetFinalizers(o.ref(claim), tuple(f for f in o.finalizers(claim) if f not in gone),
                                   o.meta(claim).get("resourceVersion")))

    def stale_finalizers(self, claim: dict) -> set[str]:
        """The claim finalizers of this controller's other pool kinds a claim of this pool carries (a manifest
        copied with them, a pool reference changed): no pool of those kinds serves it, so none would take them
        off; they go with this pool's. Not an outside IPAM's (its address there may be held by it)."""
        kind = kinds.kind_of(claim)
        return {pool_kind.finalizers.claim[kind] for pool_kind in poolkind.REGISTRY.values()
                if pool_kind.outside is None and kind in pool_kind.finalizers.claim} - {self.finalizers.claim[kind]}

    def release_after(self, claim: dict, mine: list[dict]) -> str | None:
        """Until when a deleted claim's address is held (the kind's reuse grace period, from what is
        stored), when that is still ahead; None: released now. A pool missing or being deleted has none."""
        pool = self.pool_obj
        if pool is None or o.is_deleting(pool) or not (mine or self.ledger.mirrors_of(o.claim_key(claim))):
            return None
        deadline = self.kind.release_after(pool, claim)
        return deadline if deadline is not None and not _passed(deadline, self.snap.now) else None
