"""What a claim is told: its Ready condition, its errorMessage, the conditions that say its pool reference
changed or its IP is held twice, and the Warning Events that go with them (``ClaimStatus``)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from .. import kinds
from .. import objects as o
from ..actions import Event, SetStatus, Step
from ..kept import BOUND_REASON, bound_message
from ..naming import ip_text
from .. import poolkind
from .pieces import MAX_REFERENCE_TEXT, _bounded, _clipped, _held_text, _ip_of
from .state import PassState


READY = "Ready"
# A claim of a kind whose addresses an outside IPAM hands out, asked and not answered yet.
ALLOCATION_PENDING = "AllocationPending"
# A claim whose key's outside address is homed in another cluster, whose claim carries the key too.
ADDRESS_HOMED_ELSEWHERE = "AddressHomedElsewhere"
# A bound claim whose key's outside address is gone from its outside IPAM (deleted there behind the controller):
# it keeps its address object, and its IP is no other claim's while that stands.
ADDRESS_LOST = "AddressLost"
# A claim whose pool reference was changed away from the pool that served it, which keeps serving it.
POOL_REFERENCE_CHANGED = "PoolReferenceChanged"
# A claim's address object not taken up (its IP another's, or one its pool could not have handed out), and the
# pool's condition naming every such claim.
ADDRESS_CONFLICT = "AddressConflict"
# A bound claim whose IP a pool it keeps its IPs apart from holds for another claim too (the pools overlap, and
# the separate-network annotation that let both hand it out was removed), and the pool's condition naming them.
DUPLICATE_ADDRESS = "DuplicateAddress"
WAITING_FOR_CLUSTER = "WaitingForCluster"


_MOVED_FROM, _MOVED_UNTIL = ", away from ", ", which gave the claim its address"
# How the Ready condition of a claim of a global pool waiting for a paused claim of its namespace's pools begins
# (``Allocation.wait_for_paused``): followed by that claim's kind and name (``waiting_text``, ``waited_for``).
_WAITS_FOR = "waits for "


def moved_from(claim: Mapping[str, Any]) -> o.PoolKey | None:
    """The pool a claim's ``PoolReferenceChanged`` condition says served it (``moved_condition`` writes it,
    naming the pool as ``Kind [namespace/]name``; kinds are unique by name), or None."""
    moved = o.condition(o.status(claim), POOL_REFERENCE_CHANGED)
    message = moved.get("message") if moved and moved.get("status") == "True" else None
    # The last of those words are the condition's own: the reference before them may hold them too.
    head, until, _ = message.rpartition(_MOVED_UNTIL) if isinstance(message, str) else ("", "", "")
    _, away, pool = head.rpartition(_MOVED_FROM)
    kind_name, _, where = pool.partition(" ")
    kind = next((k for k in poolkind.REGISTRY if k[1] == kind_name), None) if until and away else None
    if kind is None:
        return None
    namespace, _, name = where.rpartition("/")
    scoped = poolkind.REGISTRY[kind].cluster_scoped
    if not name or (namespace == "") != scoped or (not scoped and namespace != o.namespace(claim)):
        return None
    return o.PoolKey(namespace, name, kind)


def waiting_text(claim_text: str) -> str:
    """The beginning of the Ready condition's message of a claim waiting for the claim ``claim_text`` names
    (``Kind name``, and what it says further: its pool)."""
    return f"{_WAITS_FOR}{claim_text}"


def waited_for(claim: Mapping[str, Any]) -> tuple[tuple[str, str], str, str] | None:
    """The claim (kind, namespace, name) that a claim's Ready condition says it waits for (``waiting_text``: a
    paused claim of its namespace's pools, ``Allocation.wait_for_paused``), or None: when that claim changes or
    goes, the claim is decided again (``Inventory``), as nothing of its own pool changes then."""
    ready = o.condition(o.status(claim), READY)
    message = ready.get("message") if ready and ready.get("status") == "False" \
        and ready.get("reason") == WAITING_FOR_CLUSTER else None
    if not isinstance(message, str) or not message.startswith(_WAITS_FOR):
        return None
    kind_name, _, rest = message[len(_WAITS_FOR):].partition(" ")
    kind = next((k for k in (kinds.IPCLAIM, kinds.CAPI_CLAIM) if k[1] == kind_name), None)
    name = rest.partition(" ")[0]
    return (kind, o.namespace(claim), name) if kind is not None and name else None


def _condition(status: Mapping[str, Any], type_: str, value: str, reason: str, message: str,
               now: str, v1beta1: bool = False) -> dict:
    """A condition that keeps its transition time while its status holds."""
    before = o.condition(status, type_)
    since = before.get("lastTransitionTime") if before and before.get("status") == value else None
    condition = {"type": type_, "status": value, "reason": reason, "message": message,
                 "lastTransitionTime": since or now}
    if v1beta1 and value != "True":
        condition["severity"] = {"PoolExhausted": "Warning", WAITING_FOR_CLUSTER: "Info",
                                 ALLOCATION_PENDING: "Info"}.get(reason, "Error")
    return condition


def _lacks_only(current: Mapping[str, Any], desired: Mapping[str, Any]) -> bool:
    """True when ``current`` holds nothing that ``desired`` would drop (lastUpdated aside)."""
    return all(k in desired or k == "lastUpdated" for k in current)


class ClaimStatus(PassState):
    """What a claim is told."""

    def fail(self, claim: dict, step: Step, reason: str, message: str, kept_ref: bool = False,
             event_message: str | None = None) -> None:
        message = _bounded(message)
        self.ledger.pending_free[o.claim_key(claim)] = None
        if self.set_claim_status(claim, step, error=(reason, message), kept_ref=kept_ref):
            step.add(Event(o.ref(claim), "Warning", reason, _bounded(event_message or message)))

    def set_pending(self, claim: dict, step: Step, message: str) -> None:
        """Not served yet, and not failed: the Ready condition says why, no error (Cluster API Metal3
        takes an IPClaim's errorMessage for a failure of the machine), no Event."""
        self.set_claim_status(claim, step, pending=(WAITING_FOR_CLUSTER, _bounded(message)))

    def set_claim_status(self, claim: dict, step: Step, address: dict | None = None,
                         error: tuple[str, str] | None = None, mirror: dict | None = None,
                         pending: tuple[str, str] | None = None, kept_ref: bool = False) -> bool:
        """Write the claim's status if it differs; True when a write was planned.

        A Cluster API claim is bound to its Cluster API address (``mirror``),
        a Metal3 claim to its Metal3 address.
        """
        current = o.status(claim)
        capi = kinds.kind_of(claim) == kinds.CAPI_CLAIM
        v1beta1 = capi and str(claim.get("apiVersion", "")).endswith("/v1beta1")
        if address is not None:
            ready = _condition(current, READY, "True", BOUND_REASON,
                               bound_message(o.spec(address).get("address")), self.snap.now, v1beta1)
            desired: dict[str, Any] = ({"addressRef": {"name": o.name(mirror)}} if capi else
                                       {"address": {"name": o.name(address), "namespace": o.namespace(address)}})
        elif pending is not None:
            ready = _condition(current, READY, "False", *pending, self.snap.now, v1beta1)
            desired = {}
        else:
            reason, message = error
            ready = _condition(current, READY, "False", reason, message, self.snap.now, v1beta1)
            desired = {} if capi else {"errorMessage": message}
            if kept_ref:  # the address it was bound to before, named still: whatever runs on it is not cut off
                ref = "addressRef" if capi else "address"
                desired[ref] = current[ref]
        moved = self.moved_condition(claim, current, v1beta1)
        twice = self.twice_condition(claim, current, v1beta1, address) if address is not None else None
        elsewhere = self.homed_elsewhere_condition(claim, current, v1beta1)
        lost = self.address_lost_condition(claim, current, v1beta1)
        desired["conditions"] = [ready] + [c for c in (moved, twice, elsewhere, lost) if c is not None] + [
            c for c in current.get("conditions") or []
            if isinstance(c, Mapping) and c.get("type") not in (READY, POOL_REFERENCE_CHANGED, DUPLICATE_ADDRESS,
                                                                 ADDRESS_HOMED_ELSEWHERE, ADDRESS_LOST)]
        if {k: current.get(k) for k in desired} == desired and _lacks_only(current, desired):
            return False
        step.add(SetStatus(o.ref(claim), desired, o.meta(claim).get("resourceVersion")))
        for said, reason in ((moved, POOL_REFERENCE_CHANGED), (twice, DUPLICATE_ADDRESS)):
            if said is not None and (o.condition(current, reason) or {}).get("message") != said["message"]:
                step.add(Event(o.ref(claim), "Warning", reason, said["message"]))
        return True

    def twice_condition(self, claim: dict, current: Mapping[str, Any], v1beta1: bool, address: dict) -> dict | None:
        """For a bound claim whose IP a pool this one keeps its IPs apart from holds for another claim too (their
        overlap was shared as separate networks, and no longer is): the condition naming them; None for any
        other. The claim keeps its IP (whatever runs on it is not cut off) and is decided again when an IP of
        another pool goes free, so the condition goes once the other claim lets the IP go."""
        ip = _ip_of(address)
        key = o.claim_key(claim)
        found = self.snap.held_twice(o.namespace(claim), ip.version, int(ip)) if ip is not None else []
        if not found:
            return None
        others = "; ".join(_held_text(held) for _, _, held in found[:4])
        message = _bounded(f"{ip_text(ip)} of {self.pool_text()} is another claim's too: {others}; the pools overlap, and "
                           f"neither is marked a separate network ({kinds.SEPARATE_NETWORK_ANNOTATION}: \"true\"), so "
                           "one IP is bound to two claims of one network; delete one of the claims (created again, it "
                           "is given another IP), or mark the global pool a separate network again")
        self.ledger.doubles[key] = _bounded(f"{o.namespace(claim)}/{o.name(claim)}: {ip_text(ip)}, held by "
                                            f"{found[0][1]} too", 256)
        self.ledger.pending_free[key] = None  # decided again when an address of another pool goes
        return _condition(current, DUPLICATE_ADDRESS, "True", DUPLICATE_ADDRESS, message, self.snap.now, v1beta1)

    def moved_condition(self, claim: dict, current: Mapping[str, Any], v1beta1: bool) -> dict | None:
        """For a claim whose pool reference names another pool than this one, which served it (the inventory
        files it here while this pool's addresses are its): the condition saying so; None for any other."""
        moved, now = o.reference_now(claim)
        if not moved:
            return None
        field = "spec.pool" if kinds.kind_of(claim) == kinds.IPCLAIM else "spec.poolRef"
        pool = self.pool_text()
        # ``moved_from`` reads the pool back: a controller started afresh finds it here when nothing else names it.
        # The reference as it is now is the user's to write (no schema bounds it): cut, so that the message's
        # bound never cuts the pool that served the claim off.
        message = _bounded(f"{field} was changed to {_clipped(str(o.pool_ref_text(now)), MAX_REFERENCE_TEXT)}"
                           f"{_MOVED_FROM}{pool}{_MOVED_UNTIL}: "
                           f"a pool reference is immutable, so {pool} keeps serving the claim and "
                           f"holds its address until it is deleted; set {field} back, or delete the claim and "
                           "create one for the other pool")
        return _condition(current, POOL_REFERENCE_CHANGED, "True", POOL_REFERENCE_CHANGED, message, self.snap.now,
                          v1beta1)
