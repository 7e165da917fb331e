"""The allocation keys of a kind whose addresses an outside IPAM hands out (``poolkind.Outside``): the key
written before anything is asked, one claim per key, what the pass wants of each key (``Plan.intents``), and
the answers the pass reads (``OutsideKeys``)."""

from __future__ import annotations

import random
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from .. import kinds
from .. import objects as o
from ..actions import Create, SetMetadata, SetStatus, Step
from ..allocator import ALLOCATION_FAILED, AllocationError
from ..asking import Granted, Intent, Refused
from .conditions import ADDRESS_HOMED_ELSEWHERE, ADDRESS_LOST, ALLOCATION_PENDING, READY, _condition
from .pieces import _bounded, _with_finalizer
from .state import PassState


def left_with(left: tuple[str, str] | None, claim: dict) -> tuple[str, str] | None:
    """``left``, the claim (namespace, name) seen leave for ``clusterctl move`` carrying an allocation key that
    ``claim`` carries, when ``claim`` is another claim: then ``claim`` carries a copy of that key, whose
    address is the moved claim's in the move's target. None: no claim left with the key, or ``claim`` is that
    claim (back with a move back)."""
    return left if left is not None and left != (o.namespace(claim), o.name(claim)) else None


def first_carrier(claims: list[dict], holds: Callable[[dict], bool]) -> dict:
    """The claim that claims carrying one allocation key share it for: one holding its address (``holds``),
    else the one created first (then by namespace and name)."""
    return min(claims, key=lambda c: (not holds(c), str(o.meta(c).get("creationTimestamp") or ""),
                                      o.namespace(c), o.name(c)))


@dataclass(frozen=True)
class Answers:
    """What an outside IPAM had answered for some allocation keys when a pass started, read from the asking state
    (``core.asking.Asking``) by the same four questions: a value, whatever is filed while the pass runs (an
    answer filed meanwhile wakes the claims pending its key for the next pass). Of a key not taken, nothing is
    known (as of a key never asked for)."""

    results: Mapping[str, Granted | Refused] = field(default_factory=dict)
    pending_refusals: Mapping[str, Refused] = field(default_factory=dict)
    refused_releases: Mapping[str, Refused] = field(default_factory=dict)
    released_keys: frozenset[str] = frozenset()

    @classmethod
    def of(cls, asking: Any, keys: Iterable[str]) -> Answers:
        """What ``asking`` answers now for each of ``keys``."""
        results, pending, refused, released = {}, {}, {}, set()
        for key in keys:
            result = asking.result(key)
            if result is not None:
                results[key] = result
            refusal = asking.pending_refusal(key)
            if refusal is not None:
                pending[key] = refusal
            refusal = asking.release_refused(key)
            if refusal is not None:
                refused[key] = refusal
            if asking.released(key):
                released.add(key)
        return cls(results, pending, refused, frozenset(released))

    def result(self, key: str) -> Granted | Refused | None:
        return self.results.get(key)

    def pending_refusal(self, key: str) -> Refused | None:
        return self.pending_refusals.get(key)

    def release_refused(self, key: str) -> Refused | None:
        return self.refused_releases.get(key)

    def released(self, key: str) -> bool:
        return key in self.released_keys


class OutsideKeys(PassState):
    """The allocation keys of an outside IPAM's pool, and its answers."""

    def take_answers(self, claim_keys: Iterable[o.ClaimKey]) -> None:
        """The answers this pass reads (``answers``), taken as it starts: for the key of each claim it may decide,
        or of every claim of a pool being deleted (it releases them all). None: nothing was asked."""
        if self.snap.answers is None or self.kind.outside is None:
            self.answers = None
            return
        claims = self.ledger.claims
        deciding = claims.values() if self.pool_obj is not None and o.is_deleting(self.pool_obj) \
            else (claims.get(key) for key in claim_keys)
        read_key = self.kind.outside.read_key
        keys = {read_key(claim)[0] for claim in deciding if claim is not None}
        keys.discard(None)
        self.answers = Answers.of(self.snap.answers, keys)

    def outside_key(self, claim: dict) -> str | None:
        """The allocation key a claim of a kind with ``outside`` carries or is given this pass; else None."""
        outside = self.kind.outside
        if outside is None:
            return None
        return self.keyed.get(o.claim_key(claim)) or outside.read_key(claim)[0]

    def carriers_of(self, key: str, claim: dict) -> list[dict]:
        """The other claims carrying allocation key ``key`` (a manifest copied with its annotation, an
        annotation written by hand): one key is one address in the outside IPAM, so one claim's. Copies of a
        claim that left for ``clusterctl move`` with the key are refused, so they count for nothing."""
        if self._carriers is None:
            self._carriers = {}
            for other in self.ledger.claims.values():
                other_key = self.kind.outside.read_key(other)[0]
                if other_key is not None:
                    self._carriers.setdefault(other_key, []).append(other)
        ckey, pool = o.claim_key(claim), o.pool_of(claim)
        here = [other for other in self._carriers.get(key, ()) if o.claim_key(other) != ckey]
        elsewhere = [other for other in self.snap.claims_carrying(key)
                     if o.pool_of(other) != pool or o.namespace(other) != o.namespace(claim)]
        return [other for other in here + elsewhere if self.moved_with(key, other) is None]

    def key_owner(self, key: str, claim: dict) -> dict | None:
        """Another claim the shared key ``key`` belongs to: one holding an address, else the one created
        first. None when it is ``claim``'s own."""
        others = self.carriers_of(key, claim)
        if not others:
            return None
        first = first_carrier([claim, *others], self.holds_key)
        return None if first is claim else first

    def moved_with(self, key: str, claim: dict) -> tuple[str, str] | None:
        """The claim (namespace, name) that left for ``clusterctl move`` carrying ``key``, when that is not
        ``claim``: the key's address is that claim's in the move's target, never a copy's here."""
        return left_with(self.snap.moved_away(key), claim)

    def holds_key(self, claim: dict) -> bool:
        """Whether a claim carrying an allocation key holds its address: this pool's by its ledger, another
        pool's by its status."""
        if claim is self.ledger.claims.get(o.claim_key(claim)):
            return self.holds_anything(claim)
        return bool((o.status(claim) or {}).get("addressRef")) or o.is_deleting(claim)

    def restore_outside_key(self, claim: dict, lock: dict, step: Step) -> None:
        """A claim of an outside IPAM's pool holding a lock but carrying no key (its annotation removed by hand,
        or a claim of a name reused holding what its predecessor left) is given back the key the lock was
        made for: the outside IPAM holds the address by that key, and only by it is it released."""
        outside = self.kind.outside
        if outside is None or outside.read_key(claim) != (None, None):
            return
        key = outside.read_key(lock)[0]
        if key is None:
            return
        finalizer = self.finalizers.claim[kinds.kind_of(claim)]
        if finalizer not in o.finalizers(claim):
            step.add(_with_finalizer(claim, finalizer))
        self.keyed[o.claim_key(claim)] = key
        step.add(SetMetadata(o.ref(claim), annotations={outside.annotation: key},
                             resource_version=o.meta(claim).get("resourceVersion")))

    def allocate_outside(self, claim: dict, step: Step, held_elsewhere: Callable[[int], bool]) -> None:
        """A claim of a kind whose addresses an outside IPAM hands out (``poolkind.Outside``).

        Without a key it is given one (finalizer first, then the key, each a conditional write), and
        nothing is asked: only a key the stored claim carries is. With one, the pass wants it; until the
        answer is a grant the claim is pending (Ready=False: ``AllocationPending``, or the IPAM's refusal),
        and the answer wakes it. A grant is locked and shown as any allocation is.
        """
        outside = self.kind.outside
        ckey = o.claim_key(claim)
        key, problem = outside.read_key(claim)
        if problem is not None:
            return self.fail(claim, step, ALLOCATION_FAILED,
                             f"{problem.field}: {problem.message} (value: {problem.value!r})")
        if key is None:
            finalizer = self.finalizers.claim[kinds.kind_of(claim)]
            if finalizer not in o.finalizers(claim):
                step.add(_with_finalizer(claim, finalizer))
            key = self.keyed[ckey] = outside.new_key(self.snap.rng or random.Random())
            step.add(SetMetadata(o.ref(claim), annotations={outside.annotation: key},
                                 resource_version=o.meta(claim).get("resourceVersion")))
            return
        owner, left = self.key_owner(key, claim), self.moved_with(key, claim)
        if owner is not None or left is not None:
            # Decided again when a claim pending this key changes or goes (``Ledger.apply``): the key may be
            # its own then. An owner holding an address frees an IP when it goes, which wakes it too.
            self.ledger.pending_answers[ckey] = key
            whose = (f"carried by {kinds.kind_of(owner)[1]} {o.name(owner)} too, whose address it names"
                     if owner is not None else f"that of IPAddressClaim {left[0]}/{left[1]}, which clusterctl move "
                     "took to another cluster with its address")
            return self.fail(claim, step, ALLOCATION_FAILED,
                             f"metadata.annotations[{outside.annotation}]: allocation key {key} is {whose}; remove "
                             "the annotation to be given a key of its own")
        self.plan.intents[key] = Intent.WANT
        answer = self.answers.result(key) if self.answers is not None else None
        refusal = None
        if answer is None and self.answers is not None:
            refusal = self.answers.pending_refusal(key)  # its server down: say so, not only "pending"
        if not isinstance(answer, Granted):
            self.ledger.pending_answers[ckey] = key  # the answer filed for its key wakes it
            if refusal is not None:
                # The refusal is another key's probe, whose message changes with every probe: a message of its
                # own keeps the status of every claim waiting behind that server from being rewritten each time.
                reason, message = refusal.reason, (f"{self.pool_text()}: allocation key {key} waits for its IPAM's "
                                                     f"server, which failed lately ({refusal.reason}); it is "
                                                     f"asked once the server answers again")
            elif isinstance(answer, Refused):
                reason, message = answer.reason, answer.message
            else:
                reason, message = (ALLOCATION_PENDING, f"{self.pool_text()}: asked for an address for allocation key "
                                                       f"{key}, not answered yet")
            self.set_claim_status(claim, step, pending=(reason, _bounded(message)))
            return
        try:
            given = outside.granted(self.pool_obj, answer.address)
            self.allocator.reclaim(o.name(claim), int(given.ip), held_elsewhere, kept_as=ckey)
        except (ValueError, AllocationError) as err:
            return self.fail(claim, step, ALLOCATION_FAILED,
                             f"the address {answer.address} held for allocation key {key} cannot be given: "
                             f"{getattr(err, 'message', err)}")
        address = self.lock_for(claim, given.ip, given.prefix, given.gateway, given.dns_servers)
        # The key it was made for, on the lock too: a claim that lost its annotation is given it back.
        address["metadata"]["annotations"] = {**(address["metadata"].get("annotations") or {}),
                                              outside.annotation: key}
        self.ledger.planned(int(given.ip), o.name(address))
        step.add(Create(address))
        self.ensure_bound(claim, address, step)

    def released_outside(self, claim: dict) -> bool:
        """Whether a deleted claim's address is let go by its outside IPAM (True for the other kinds, and for
        a claim that carries no key: nothing was asked for it); its release is asked for meanwhile. A pool
        that is gone names no IPAM to ask: what it made is left to a sweep."""
        key = self.outside_key(claim)
        if key is None or self.pool_obj is None:
            return True
        if any(not o.is_deleting(other) for other in self.carriers_of(key, claim)) or self.moved_with(key, claim):
            return True  # the key and its address are a live claim's (this one carried a copy of its key)
        ckey = o.claim_key(claim)
        holds = self.ledger.addresses_of(ckey) or self.ledger.mirrors_of(ckey)
        self.plan.intents[key] = Intent.RELEASE if holds else Intent.RELEASE_UNBOUND
        return self.answers is not None and self.answers.released(key)

    def show_release_refused(self, claim: dict, step: Step, refusal: Refused) -> None:
        """A deleted claim whose release the outside IPAM refused says why it stays: Ready=False with the
        refusal (its addressRef kept: the address is held until the release goes through)."""
        current = o.status(claim)
        v1beta1 = str(claim.get("apiVersion", "")).endswith("/v1beta1")
        message = _bounded(f"its address is released by {self.pool_text()}'s IPAM before it goes, which refused: "
                           f"{refusal.message}")
        ready = _condition(current, READY, "False", refusal.reason, message, self.snap.now, v1beta1)
        desired = {**current, "conditions": [ready] + [c for c in current.get("conditions") or []
                                                      if isinstance(c, Mapping) and c.get("type") != READY]}
        if desired != current:
            step.add(SetStatus(o.ref(claim), desired, o.meta(claim).get("resourceVersion")))

    def release_waiting_keys(self) -> list[str]:
        """A pool being deleted names its outside IPAM for the last time (gone, it names no server to ask): the
        key of each claim of it holding no address is released there now, as is a deleted claim's (an
        allocation still out for it, or carried out unanswered, may have made an address). Returns the keys
        not released yet, which keep the pool. A paused claim's key is left alone (its copy may carry it in
        the target of a move) and keeps the pool; a claim deleted for a move carries its key away."""
        unreleased = []
        for claim in self.ledger.claims.values():
            key = self.outside_key(claim)
            if key is None or o.deleted_for_move(claim):
                continue
            if self.claim_paused(claim):
                unreleased.append(key)
            elif (o.is_deleting(claim) or not self.holds_anything(claim)) and not self.released_outside(claim):
                unreleased.append(key)
        return unreleased

    def homed_elsewhere_condition(self, claim: dict, current: Mapping[str, Any], v1beta1: bool) -> dict | None:
        """For a claim whose key's outside address a sweep found homed at another cluster's object, whose claim
        carries the key too (the sweep writes the Warning Event): the condition saying so; None for any other."""
        key = self.kind.outside.read_key(claim)[0] if self.kind.outside is not None else None
        message = self.snap.homed_elsewhere(key) if key is not None else None
        if message is None:
            return None
        return _condition(current, ADDRESS_HOMED_ELSEWHERE, "True", ADDRESS_HOMED_ELSEWHERE, _bounded(message),
                          self.snap.now, v1beta1)

    def address_lost_condition(self, claim: dict, current: Mapping[str, Any], v1beta1: bool) -> dict | None:
        """For a claim whose key's outside address its IPAM's sweep found gone (the kind's sweep writes the Warning
        Event): the condition saying so; None for any other."""
        key = self.kind.outside.read_key(claim)[0] if self.kind.outside is not None else None
        message = self.snap.address_lost(key) if key is not None else None
        if message is None:
            return None
        return _condition(current, ADDRESS_LOST, "True", ADDRESS_LOST, _bounded(message), self.snap.now, v1beta1)
