"""An IP guarded across pools and namespaces: the guard a global pool's allocation writes in the claim's
namespace, and what holds an IP that this pool's own addresses do not show (``Guards``)."""

from __future__ import annotations

from typing import Any

from .. import kinds
from .. import objects as o
from ..actions import Create, Delete
from ..kept import bound_ip
from ..addresses import FAMILY_BITS, ip_from_int
from ..naming import address_label, guard_name, ip_text
from ..overlap import separate_network
from .pieces import _ip_of, _owned_by, _owner
from .state import PassState


def _span_base(guard: dict, ip) -> int:
    """The first address of the span a guard is part of: its IP, or its sub-prefix's base (``spec.prefix``)."""
    length, width = o.spec(guard).get("prefix"), FAMILY_BITS[ip.version]
    bits = width - length if isinstance(length, int) and not isinstance(length, bool) and 0 <= length <= width else 0
    return int(ip) >> bits << bits


# The most guards one allocation writes: a namespaced sub-prefix holding more addresses of global IP pools is not
# handed out (its allocation could not be guarded against theirs).
GUARDS_PER_ALLOCATION = 256


class Guards(PassState):
    """The guards of an IP or a sub-prefix in a claim's namespace, and what holds an IP elsewhere."""

    def guarded_ips(self, claim: dict, unit: int) -> list[int] | None:
        """The IPs whose guards handing ``unit`` to ``claim`` creates in the claim's namespace first: a global IP
        pool's allocation guards its IP (but one of a separate network's); a namespaced pool's guards each IP of
        its address (its sub-prefix) that a global IP pool holds. Of two such allocations of one IP in a
        namespace, which no pass saw the other make (a global pool's pass made before the namespaced pool came,
        carried out after its allocation), the API server refuses the second guard, and with it the rest of that
        step: one IP never goes to two claims there, whether the other holds it alone or in a sub-prefix. A
        global pool's pass always guards (it cannot know of a namespaced pool created since); a namespaced
        pool's sees every global pool made before it passes, and one made later withholds its addresses.
        None: a sub-prefix holding more than ``GUARDS_PER_ALLOCATION`` such IPs, which is not handed out."""
        kind, pool = self.kind, self.pool
        if pool is None or kind.outside is not None:
            return []
        first = int(pool.address_of(unit))
        if kind.cluster_scoped:
            plain = not kind.holds_prefixes and pool.unit_length is None and not separate_network(self.pool_obj)
            return [first] if plain else []
        if not kind.unique_in_namespace:
            return []
        return self.snap.global_held(pool.version, first, first + (1 << pool.unit_bits) - 1, GUARDS_PER_ALLOCATION)

    def guard_at(self, namespace: str, ip: int) -> dict | None:
        """The guard of ``ip`` (of the pool's family) in ``namespace``, if one is stored."""
        return self.snap.address_named(namespace, guard_name(ip_from_int(ip, self.pool.version)))

    def guard_holds(self, guard: dict, claim: dict | None = None) -> bool:
        """Whether a guard keeps its IP for a claim other than ``claim``: its claim lives (the incarnation it
        owns) and is bound to no other address (until its address shows, its allocation may be on its way; a
        sub-prefix's guards name its length). Else it is left over (its allocation refused, its claim gone) and
        whoever wants the IP deletes it."""
        ref = o.spec(guard).get("claim") or {}
        kind = (kinds.group_of(str(ref.get("apiVersion") or kinds.METAL3_API_VERSION)), str(ref.get("kind") or
                                                                                         kinds.IPCLAIM[1]))
        holder = self.snap.claim_named(kind, o.namespace(guard), str(ref.get("name") or ""))
        if holder is None or not _owned_by(guard, holder) or (claim is not None and _owned_by(guard, claim)):
            return False
        bound, guarded = bound_ip(holder), _ip_of(guard)
        return bound is None or (guarded is not None and bound.version == guarded.version
                                 and int(bound) == _span_base(guard, guarded))

    def guards_of(self, claim: dict, addresses: list[dict]) -> list[dict]:
        """The guards of the claim's IPs that ``addresses`` hold (the IPs of a sub-prefix a global pool holds),
        stored and its own: they go with its lock (the garbage collector would take them once the claim is
        gone)."""
        found, pool = [], self.pool
        for address in addresses:
            ip = _ip_of(address)
            if ip is None:
                continue
            ips = [int(ip)]
            if pool is not None and pool.unit_bits and ip.version == pool.version:
                first = int(pool.address_of(pool.unit_of(int(ip))))
                ips = self.snap.global_held(pool.version, first, first + (1 << pool.unit_bits) - 1,
                                            GUARDS_PER_ALLOCATION) or []
            for value in ips:
                guard = self.snap.address_named(o.namespace(claim), guard_name(ip_from_int(value, ip.version)))
                if guard is not None and _owned_by(guard, claim) and not o.is_deleting(guard):
                    found.append(guard)
        return found

    def guard_actions(self, claim: dict, unit: int) -> list:
        """What guards ``unit`` for ``claim`` before its lock is written: the guard of each of its guarded IPs
        created (a left-over one of that name deleted first, that incarnation only); nothing for one it has its
        guard of already, or when it needs none."""
        actions: list = []
        pool = self.pool_obj
        claim_ref: dict[str, Any] = {"name": o.name(claim), "namespace": o.namespace(claim),
                                     "apiVersion": claim.get("apiVersion"), "kind": claim.get("kind")}
        for value in self.guarded_ips(claim, unit) or []:
            found = self.guard_at(o.namespace(claim), value)
            if found is not None and _owned_by(found, claim):
                continue  # its own, from an earlier try
            ip = ip_from_int(value, self.pool.version)
            guard = {"apiVersion": kinds.METAL3_API_VERSION, "kind": "IPAddress",
                     "metadata": {"name": guard_name(ip), "namespace": o.namespace(claim),
                                  "labels": {kinds.GUARD_LABEL: address_label(ip)},
                                  # Gone with its claim (the garbage collector), and moved with it.
                                  "ownerReferences": [_owner(claim)]},
                     "spec": {"address": ip_text(ip), "claim": claim_ref,
                              "pool": {"apiVersion": pool.get("apiVersion"), "kind": pool.get("kind"),
                                       "name": o.name(pool), "namespace": o.namespace(pool)}}}
            if self.pool.unit_length is not None:
                guard["spec"]["prefix"] = self.pool.unit_length  # the sub-prefix it is a part of
            # One found here is left over (``taken_elsewhere`` passed it over): that incarnation goes first.
            actions += ([Delete(o.ref(found))] if found is not None else []) + [Create(guard)]
        return actions

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
        if claim is not None:
            guarded = self.guarded_ips(claim, ip)
            if guarded is None:
                self.unguardable.add(ip)
                return True
            if any(guard is not None and self.guard_holds(guard, claim)
                   for guard in (self.guard_at(o.namespace(claim), value) for value in guarded)):
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
