"""An IP guarded across pools and namespaces: the guard a global pool's allocation writes in the claim's
namespace, and what holds an IP that this pool's own addresses do not show (``Guards``)."""

from __future__ import annotations

from typing import Any

from .. import kinds
from .. import objects as o
from ..actions import Create, Delete
from ..kept import bound_ip
from ..naming import address_label, guard_name, ip_text
from ..overlap import separate_network
from .pieces import _ip_of, _owned_by, _owner
from .state import PassState


class Guards(PassState):
    """The guard of an IP in a claim's namespace, and what holds an IP elsewhere."""

    def guarded(self, claim: dict, unit: int) -> bool:
        """Whether handing ``unit`` to ``claim`` creates its guard in the claim's namespace first: a global IP
        pool's allocation (but one of a separate network), and a namespaced IP pool's of an IP a global pool
        holds. Of two such allocations of one IP in a namespace, which no pass saw the other make (a global
        pool's pass made before the namespaced pool came, carried out after its allocation), the API server
        refuses the second guard, and with it the rest of that step: one IP never goes to two claims there.
        A global pool's pass always guards (it cannot know of a namespaced pool created since); a namespaced
        pool's sees every global pool made before it passes, and one made later withholds its addresses."""
        kind, pool = self.kind, self.pool
        if pool is None or kind.holds_prefixes or kind.outside is not None or pool.unit_length is not None:
            return False
        if kind.cluster_scoped:
            return not separate_network(self.pool_obj)
        return kind.unique_in_namespace and self.snap.global_holds(pool.version, int(pool.address_of(unit)))

    def guard_of(self, claim: dict, unit: int) -> dict | None:
        """The guard of ``unit`` in the claim's namespace, if one is stored."""
        return self.snap.address_named(o.namespace(claim), guard_name(self.pool.address_of(unit)))

    def guard_holds(self, guard: dict, claim: dict | None = None) -> bool:
        """Whether a guard keeps its IP for a claim other than ``claim``: its claim lives (the incarnation it
        owns) and is bound to no other IP (until its address shows, its allocation may be on its way). Else it
        is left over (its allocation refused, its claim gone) and whoever wants the IP deletes it."""
        ref = o.spec(guard).get("claim") or {}
        kind = (kinds.group_of(str(ref.get("apiVersion") or kinds.METAL3_API_VERSION)), str(ref.get("kind") or
                                                                                         kinds.IPCLAIM[1]))
        holder = self.snap.claim_named(kind, o.namespace(guard), str(ref.get("name") or ""))
        if holder is None or not _owned_by(guard, holder) or (claim is not None and _owned_by(guard, claim)):
            return False
        bound, guarded = bound_ip(holder), _ip_of(guard)
        return bound is None or (guarded is not None and int(bound) == int(guarded))

    def guards_of(self, claim: dict, addresses: list[dict]) -> list[dict]:
        """The guards of the claim's IPs that ``addresses`` hold, stored and its own: they go with its lock (the
        garbage collector would take them once the claim is gone)."""
        found = []
        for address in addresses:
            ip = _ip_of(address)
            guard = self.snap.address_named(o.namespace(claim), guard_name(ip)) if ip is not None else None
            if guard is not None and _owned_by(guard, claim) and not o.is_deleting(guard):
                found.append(guard)
        return found

    def guard_actions(self, claim: dict, unit: int) -> list:
        """What guards ``unit`` for ``claim`` before its lock is written: its guard created (a left-over one of
        that name deleted first, that incarnation only); nothing when it has its guard already, or needs none."""
        if not self.guarded(claim, unit):
            return []
        found = self.guard_of(claim, unit)
        if found is not None and _owned_by(found, claim):
            return []  # its own, from an earlier try
        ip = self.pool.address_of(unit)
        claim_ref: dict[str, Any] = {"name": o.name(claim), "namespace": o.namespace(claim),
                                     "apiVersion": claim.get("apiVersion"), "kind": claim.get("kind")}
        pool = self.pool_obj
        guard = {"apiVersion": kinds.METAL3_API_VERSION, "kind": "IPAddress",
                 "metadata": {"name": guard_name(ip), "namespace": o.namespace(claim),
                              "labels": {kinds.GUARD_LABEL: address_label(ip)},
                              # Gone with its claim (the garbage collector), and moved with it.
                              "ownerReferences": [_owner(claim)]},
                 "spec": {"address": ip_text(ip), "claim": claim_ref,
                          "pool": {"apiVersion": pool.get("apiVersion"), "kind": pool.get("kind"),
                                   "name": o.name(pool), "namespace": o.namespace(pool)}}}
        # One found here is left over (``taken_elsewhere`` passed it over): that incarnation goes first.
        return ([Delete(o.ref(found))] if found is not None else []) + [Create(guard)]

    def taken_elsewhere(self, namespace: str, ip: int, claim_namespace: str | None = None,
                        for_keeper: bool = False, claim: dict | None = None) -> bool:
        """In use by something this pool's own addresses do not show.

        The name lock (another pool with the same namePrefix, or any object of
        that name) and any address of another pool of the namespace, of either
        API, at that IP (inside that sub-prefix), or a sub-prefix another prefix
        pool's address holds that meets it, whatever its namePrefix (but a pool's
        this one shares addresses with: see ``overlap``). For a global pool, the
        namespaces looked in are the lock namespace (the other global pools'
        locks) and the claim's (every pool's addresses there). ``for_keeper``:
        for the claim whose status names the IP, whom an address written before
        its claim and bound to none does not keep from it.
        """
        if claim is not None and self.guarded(claim, ip):
            guard = self.guard_of(claim, ip)
            if guard is not None and self.guard_holds(guard, claim):
                return True
        # An outside IPAM knows nothing of the namespace's other pools: an IP one of them holds is refused.
        unique = self.kind.unique_in_namespace or self.kind.outside is not None
        name = self.pool.lock_name(ip)
        if self.snap.name_taken(namespace, name):
            holder = self.snap.address_named(namespace, name)
            held = _ip_of(holder) if holder is not None else None
            if held is not None and held != self.pool.address_of(ip):
                self.collisions[ip] = holder
            return True
        first, version = int(self.pool.address_of(ip)), self.pool.version
        last = first + (1 << self.pool.unit_bits) - 1
        # A claim of another pool of the namespace keeps it (a pool sharing the namePrefix takes the same lock:
        # only its own pool's ledger knows the IP is kept, once the claim's address objects are gone).
        if self.snap.kept_elsewhere(claim_namespace or namespace, version, first):
            return True
        if unique:
            return self.snap.held_elsewhere(namespace, version, first, last, for_keeper=for_keeper)
        if not self.kind.cluster_scoped or claim_namespace is None:
            return False
        return any(self.snap.held_elsewhere(ns, version, first, last, for_keeper=for_keeper)
                   for ns in {namespace, claim_namespace})
