"""A claim bound to its address: one address kept when a race left more, the lock (a Metal3 IPAddress
``<namePrefix>-<ip>``) and the Cluster API IPAddress written as the Go IPAMs write them, and the claim's status
naming them (``Binding``)."""

from __future__ import annotations

import datetime
from collections.abc import Mapping
from typing import Any

from .. import kinds
from .. import objects as o
from ..actions import Create, SetMetadata, Step
from ..allocator import ALLOCATION_FAILED
from ..naming import ip_text
from .pieces import _instant, _ip_of, _let_go, _live, _owner, _passed, _text_of, _with_finalizer
from .state import PassState


#: How long a controller leaves a stored lock to its maker before it writes the Cluster API IPAddress the
#: lock lacks: the maker writes it right after the lock, and a view of IPAddresses may trail one of locks, so
#: replicas writing at once (no leader election) spare a write that would be refused. An address written from a
#: view that trails its claim's deletion is refused by the write on its claim before it (``ensure_mirror``).
LOCK_SETTLE_SECONDS = 10


def _settled(lock: dict, seconds: int) -> str | None:
    """When a stored lock is old enough for its missing IPAddress to be made by anyone; None for a lock
    planned in this step (not stored yet) or when nothing is left to a maker."""
    return _settled_after(o.meta(lock).get("creationTimestamp"), seconds)


def _settled_after(made: str | None, seconds: int) -> str | None:
    """``seconds`` after ``made`` (RFC 3339): when what a maker wrote then is left to it no more; None without a
    time, or when nothing is left to a maker (a time that cannot be read counts as long past: ``_instant``)."""
    if not made or seconds <= 0:
        return None
    return o.format_time(_instant(made) + datetime.timedelta(seconds=seconds))


class Binding(PassState):
    """A claim's lock, its Cluster API IPAddress and its status naming them."""

    def keep_one(self, claim: dict, live: list[dict], step: Step) -> dict:
        """A claim has one address; when a race left more, keep the bound one.

        If none of them is bound yet (two replicas raced), the earliest is
        bound — the one every replica picks — and the others are removed
        only once that binding shows, so no replica removes an address that
        another has just bound.
        """
        bound = self.bound_address_name(claim, live)
        live = sorted(live, key=lambda a: (o.name(a) != bound, o.is_deleting(a),
                                           str(o.meta(a).get("creationTimestamp") or ""), o.name(a)))
        keep, extra = live[0], live[1:]
        if bound is None:
            if extra:
                self.plan.notes.append(f"{o.name(claim)}: {len(live)} addresses, none bound yet")
            return keep
        for address in extra:
            _let_go(step, address, self.finalizers.address[kinds.IPADDRESS])
        return keep

    def bound_address_name(self, claim: dict, live: list[dict]) -> str | None:
        """The address among ``live`` that the claim's status (or its Cluster API mirror) names."""
        if kinds.kind_of(claim) == kinds.CAPI_CLAIM:
            mirror = self.bound_mirror(claim)
            ip = _ip_of(mirror) if mirror is not None else None
            return next((o.name(a) for a in live if ip is not None and _ip_of(a) == ip), None)
        named = o.status(claim).get("address")
        name = named.get("name") if isinstance(named, Mapping) else None
        return name if any(o.name(a) == name for a in live) else None

    def bound_mirror(self, claim: dict) -> dict | None:
        """The Cluster API address the claim's status names, else the one named after the claim."""
        mirrors = _live(self.ledger.mirrors_of(o.claim_key(claim)))
        named = o.status(claim).get("addressRef")
        named = named.get("name") if isinstance(named, Mapping) else None
        return (next((m for m in mirrors if o.name(m) == named), None)
                or next((m for m in mirrors if o.name(m) == o.name(claim)), None))

    def ensure_bound(self, claim: dict, address: dict, step: Step) -> None:
        self.ledger.bound[o.claim_key(claim)] = _text_of(address)
        mirror = None
        if kinds.kind_of(claim) == kinds.CAPI_CLAIM:
            mirror = self.ensure_mirror(claim, address, step)
            if mirror is None:
                return
        self.set_claim_status(claim, step, address=address, mirror=mirror)

    def ensure_mirror(self, claim: dict, lock: dict, step: Step) -> dict | None:
        """The Cluster API address of a claim matches its lock; one that does not is replaced, never trusted.

        Returns the mirror to bind, or None while a wrong one is being removed.
        """
        ip = _ip_of(lock)
        mirrors = _live(self.ledger.mirrors_of(o.claim_key(claim)))
        matching = [m for m in mirrors if _ip_of(m) == ip]
        preferred = self.bound_mirror(claim)
        keep = preferred if any(m is preferred for m in matching) else (matching[0] if matching else None)
        stray = [m for m in mirrors if m is not keep]
        for mirror in stray:
            _let_go(step, mirror, self.finalizers.address[kinds.CAPI_ADDRESS])
        if keep is not None:
            self.complete_owners(keep, claim, step)
            return keep
        if any(o.name(m) == o.name(claim) for m in self.ledger.mirrors_of(o.claim_key(claim))):
            # Our name is still taken by the stray one; the next pass creates it.
            self.plan.notes.append(f"{o.name(claim)}: its IPAddress is replaced once the wrong one is gone")
            return None
        taken = self.snap.capi_address_named(o.namespace(claim), o.name(claim))
        if taken is not None:
            # Held by an address of another pool (a claim of this name for another
            # pool, not yet released): say so rather than fail to create it each pass.
            self.fail(claim, step, ALLOCATION_FAILED,
                      f"IPAddress.{kinds.CAPI_IPAM_GROUP} {o.namespace(claim)}/{o.name(claim)} exists already "
                      f"for another pool or claim ({o.spec(taken).get('poolRef', {}).get('name')!s}); "
                      f"{ip_text(_ip_of(lock))} is held for this claim until it goes")
            return None
        settled = _settled(lock, self.snap.lock_settle_seconds)
        if settled is not None and not _passed(settled, self.snap.now):
            # The lock was made by another step moments ago: its maker is most likely writing this very
            # address, which this view may not show yet. Written now, it could land after the claim's release
            # and show the IP with no lock behind it; by the deadline the maker's address shows, or the
            # maker is gone and this pass makes it.
            self.ledger.deadlines[o.claim_key(claim)] = settled
            self.plan.notes.append(f"{o.name(claim)}: its IPAddress is made at {settled} unless its lock's maker "
                                   "shows it first")
            return None
        # This view may trail the claim's deletion: it saw the address go in the release (address, then lock),
        # or the lock come from a replica that serves a claim deleted since, and not yet why. A create has no
        # precondition, and landing after the release it would show the IP with no lock behind it; so the claim
        # is written right before, on condition that it is unchanged since read, and the step is refused when it
        # changed (a no-op on the API server: no new version, no event).
        step.add(SetMetadata(o.ref(claim), resource_version=o.meta(claim).get("resourceVersion")))
        mirror = self.capi_address_for(claim, lock)
        step.add(Create(mirror))
        return mirror

    def complete_owners(self, mirror: dict, claim: dict, step: Step) -> None:
        """An adopted Cluster API IPAddress written before its claim gets the claim's and the pool's owner
        references after those it has (as the Go IPAM providers' CreateOrPatch gives them), and our
        finalizer, in the claim's step before its status names it; one that has them is not written to.

        A reference to the claim or the pool by the right name but another uid is replaced: ``clusterctl
        move`` gives the copy of an address of a global pool that exists in the target already the uid of the
        source's pool (it does not create that pool, and takes the uid of the object it read), and such a
        reference would name no object in the target. Only its uid is written: every other reference, and
        the order of the list, stay as they were (the garbage collector reads their blockOwnerDeletion)."""
        if not self.kind.keeps_addresses_written_first:
            return
        current = o.owner_references(mirror)
        wanted = self.mirror_owners(claim)

        def same(ref: Mapping[str, Any], want: Mapping[str, Any]) -> bool:
            return ref.get("kind") == want["kind"] and ref.get("name") == want["name"]

        def matches(ref: Mapping[str, Any], want: Mapping[str, Any]) -> bool:
            return same(ref, want) and (want.get("uid") is None or ref.get("uid") == want["uid"])

        def repaired(ref: dict) -> dict:
            want = next((w for w in wanted if same(ref, w) and not matches(ref, w)), None)
            return ref if want is None else {**ref, "uid": want["uid"]}

        owners = [repaired(r) for r in current]
        self.note_moved_in(mirror, claim)
        missing = [w for w in wanted if not any(matches(r, w) for r in owners)]
        if missing or owners != current:
            step.add(SetMetadata(o.ref(mirror), owner_references=tuple(owners + missing),
                                 resource_version=o.meta(mirror).get("resourceVersion")))
        finalizer = self.finalizers.address[kinds.CAPI_ADDRESS]
        if finalizer not in o.finalizers(mirror):
            step.add(_with_finalizer(mirror, finalizer))

    def lock_for(self, claim: dict, ip, prefix: int | None, gateway: str | None,
                 dns_servers: tuple[str, ...]) -> dict:
        """The Metal3 IPAddress ``<namePrefix>-<ip>`` that holds ``ip`` for ``claim``."""
        pool = self.pool_obj
        capi = kinds.kind_of(claim) == kinds.CAPI_CLAIM
        claim_ref: dict[str, Any] = {"name": o.name(claim), "namespace": o.namespace(claim)}
        if capi:
            claim_ref = {"apiVersion": claim.get("apiVersion"), "kind": claim.get("kind"), **claim_ref}
        spec: dict[str, Any] = {
            "address": ip_text(ip),
            "pool": {"name": o.name(pool), "namespace": o.namespace(pool)},
            "claim": claim_ref,
        }
        if kinds.kind_of(pool) != kinds.IPPOOL:  # an IPPool's lock names it alone, as Metal3's do
            spec["pool"].update(apiVersion=pool.get("apiVersion"), kind=pool.get("kind"))
        if prefix is not None:
            spec["prefix"] = prefix
        if gateway:
            spec["gateway"] = gateway
        if dns_servers:
            spec["dnsServers"] = list(dns_servers)
        metadata: dict[str, Any] = {
            "name": self.pool.lock_name(self.pool.unit_of(int(ip))),
            "namespace": self.lock_namespace(claim),
            "finalizers": [self.finalizers.address[kinds.IPADDRESS]],
            # Pool and claim, no flags: the Go Metal3 IPAM's shape (a drop-in is read by what it
            # writes). Our finalizer, not the garbage collector, keeps the address while its claim lives.
            # A lock of a pool of cluster scope is in another namespace than its claim: owned by the pool
            # alone (the garbage collector would take an owner across namespaces for one that is gone),
            # and without the claim's labels (its Cluster is of the claim's namespace).
            "ownerReferences": [_owner(pool)] + ([] if self.kind.cluster_scoped else [_owner(claim)]),
        }
        labels = o.labels(claim) if not self.kind.cluster_scoped else {}
        if labels:
            metadata["labels"] = labels
        return {"apiVersion": kinds.METAL3_API_VERSION, "kind": "IPAddress", "metadata": metadata, "spec": spec}

    def mirror_owners(self, claim: dict) -> list[dict]:
        """The owner references of a claim's Cluster API IPAddress: the claim (controller), then the pool."""
        pool = self.pool_obj
        owners = [_owner(claim, controller=True, block=True)]
        if pool is not None:
            owners.append(_owner(pool, controller=False if self.kind.explicit_pool_owner else None, block=True))
        return owners

    def capi_address_for(self, claim: dict, address: dict) -> dict:
        """The Cluster API IPAddress mirroring the Metal3 one that holds the lock."""
        spec = o.spec(address)
        ip_version = 4 if ":" not in str(spec.get("address")) else 6
        claim_pool = o.spec(claim).get("poolRef") or {}
        mirror_spec: dict[str, Any] = {
            "claimRef": {"name": o.name(claim)},
            # The kind of pool the claim asked for (it is filed under this pool only when it is this kind).
            "poolRef": {"apiGroup": claim_pool.get("apiGroup"), "kind": claim_pool.get("kind"),
                        "name": self.snap.pool_name},
            "address": spec.get("address"),
            "prefix": spec.get("prefix") if spec.get("prefix") is not None else (32 if ip_version == 4 else 128),
        }
        if spec.get("gateway"):
            mirror_spec["gateway"] = spec["gateway"]
        metadata: dict[str, Any] = {
            "name": o.name(claim),
            "namespace": o.namespace(claim),
            "finalizers": [self.finalizers.address[kinds.CAPI_ADDRESS]],
            "ownerReferences": self.mirror_owners(claim),
        }
        labels = self.kind.address_labels(claim)  # IPPool: all of them, as the Go Metal3 IPAM copies them
        if labels:
            metadata["labels"] = dict(labels)
        return {"apiVersion": claim.get("apiVersion"), "kind": "IPAddress", "metadata": metadata, "spec": mirror_spec}
