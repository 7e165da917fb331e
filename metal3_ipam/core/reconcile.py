"""The reconcile step of one pool: what exists, what should, and the writes between.

``reconcile(snapshot)`` looks at a pool, the claims for it (Metal3 IPClaims and
Cluster API IPAddressClaims), the addresses that reference it, and its Cluster,
and returns a ``Plan``. It is pure: the controller and ``metal3-ipam plan``
both run it and execute the plan their own way.

What it guarantees, whatever it is shown:
- a claim that has an address keeps it: status is rebuilt from the addresses,
  never allocated anew (this is what makes ``clusterctl move`` safe);
- a claim gets at most one address: extra ones (a lost race) are removed;
- every new address is a Metal3 IPAddress named ``<namePrefix>-<ip>``, also
  for Cluster API claims, so one name lock guards every allocation;
- a claim that cannot be served gets an error in its status and an Event,
  written only when the error changes, and does not stop the next claim;
- nothing is written when nothing changed; a paused pool is left alone.

Events are planned for failures only: every API write counts, and a
successful allocation is already recorded by the IPAddress and the claim's
Ready condition.
"""

from __future__ import annotations

import random
from dataclasses import dataclass, field
from collections.abc import Callable, Mapping
from typing import Any

from . import kinds
from . import objects as o
from .actions import Create, Delete, Event, Plan, SetFinalizers, SetMetadata, SetStatus, Step
from .addresses import AddressError, ip_from_int, parse_ip
from .allocator import (ALLOCATION_FAILED, POOL_NOT_READY, AllocationError, Allocator, Grant)
from .naming import address_name
from .pool import Pool, read_pool
from .problems import errors

# status.indexes stays well below the API server's object size limit; the
# IPAddress objects, not this map, are the record of what is allocated.
MAX_INDEXES = 10_000

READY = "Ready"


@dataclass
class Snapshot:
    """Everything one pool's reconcile may look at."""

    namespace: str
    pool_name: str
    pool: dict | None
    cluster: dict | None = None
    claims: list[dict] = field(default_factory=list)          # in the order to serve them
    addresses: list[dict] = field(default_factory=list)       # Metal3 IPAddresses of this pool
    capi_addresses: list[dict] = field(default_factory=list)  # Cluster API IPAddresses of this pool
    name_taken: Callable[[str], bool] = lambda name: False    # any IPAddress of that name in the namespace
    now: str = "1970-01-01T00:00:00Z"
    rng: random.Random | None = None


def reconcile(snap: Snapshot) -> Plan:
    return _Reconciler(snap).run()


class _Reconciler:
    def __init__(self, snap: Snapshot) -> None:
        self.snap = snap
        self.plan = Plan()
        self.pool_obj = snap.pool
        self.pool: Pool | None = None
        self.pool_problem: str | None = None
        if snap.pool is not None:
            pool, problems = read_pool(snap.pool.get("spec"))
            self.pool = pool
            if pool is None:
                first = errors(problems)[0]
                self.pool_problem = f"{first.field}: {first.message} (value: {first.value!r})"
        self.allocator = Allocator(self.pool, snap.rng) if self.pool is not None else None
        self.claims = {o.claim_key(c): c for c in snap.claims}
        self.addresses_of: dict[o.ClaimKey, list[dict]] = {}
        for address in snap.addresses:
            key = o.claim_of_address(address)
            if key is not None:
                self.addresses_of.setdefault(key, []).append(address)
        self.capi_address = {o.name(a): a for a in snap.capi_addresses}
        # claim key -> address text, for status.indexes
        self.bound: dict[o.ClaimKey, str] = {}
        self.created_count = 0

    # -- the pass ---------------------------------------------------------------

    def run(self) -> Plan:
        if o.cluster_paused(self.snap.cluster) or o.is_paused(self.pool_obj):
            self.plan.notes.append("paused")
            return self.plan
        for address in self.snap.addresses:
            self.account(address)
        if self.pool_obj is not None:
            self.pool_metadata()
        for address in self.snap.addresses:
            self.tend_address(address)
        for address in self.snap.capi_addresses:
            self.tend_capi_address(address)
        for claim in self.snap.claims:
            if not o.is_paused(claim):
                self.serve(claim)
            else:
                self.remember_binding(claim)
        if self.pool_obj is not None:
            self.pool_status()
        self.plan.steps = [s for s in self.plan.steps if s.actions]
        return self.plan

    def account(self, address: dict) -> None:
        """An existing address is in use until it is gone, whatever its state."""
        if self.allocator is None:
            return
        try:
            self.allocator.take(int(parse_ip(o.spec(address).get("address"))))
        except AddressError:
            pass

    # -- the pool's own metadata --------------------------------------------

    def pool_metadata(self) -> None:
        pool = self.pool_obj
        # One step for all the pool's own writes, status last: run as separate
        # steps, the status write would overtake a conditional metadata write
        # and make it fail.
        step = self.pool_step = self.plan.step(f"IPPool {o.namespace(pool)}/{o.name(pool)}", about=o.ref(pool))
        ref = o.ref(pool)
        finalizer = kinds.FINALIZERS[kinds.IPPOOL]
        if o.is_deleting(pool):
            in_use = self.snap.addresses or self.snap.capi_addresses
            if finalizer in o.finalizers(pool) and (not in_use or o.deleted_for_move(pool)):
                step.add(_without_finalizer(pool, finalizer))
            elif in_use:
                self.plan.notes.append(f"IPPool {o.name(pool)} waits for {len(self.snap.addresses) + len(self.snap.capi_addresses)} address(es) to go")
            return
        if finalizer not in o.finalizers(pool):
            step.add(_with_finalizer(pool, finalizer))
        cluster_name = o.spec(pool).get("clusterName")
        if not cluster_name:
            return
        labels = None
        if o.labels(pool).get(kinds.CLUSTER_NAME_LABEL) != cluster_name:
            labels = {kinds.CLUSTER_NAME_LABEL: cluster_name}
        owners = None
        cluster = self.snap.cluster
        if cluster is not None:
            wanted = {"apiVersion": cluster.get("apiVersion"), "kind": "Cluster",
                      "name": o.name(cluster), "uid": o.meta(cluster).get("uid")}
            current = o.owner_references(pool)
            others = [r for r in current if not _is_cluster_ref(r, cluster_name)]
            mine = [r for r in current if _is_cluster_ref(r, cluster_name)]
            if len(mine) != 1 or {k: mine[0].get(k) for k in wanted} != wanted or mine[0].get("controller"):
                owners = tuple(others + [wanted])
        if labels or owners:
            step.add(SetMetadata(ref, labels=labels, owner_references=owners,
                                 resource_version=o.meta(pool).get("resourceVersion")))

    def pool_status(self) -> None:
        pool = self.pool_obj
        current = o.status(pool)
        indexes = {o.index_key(k): ip for k, ip in sorted(self.bound.items(), key=lambda kv: o.index_key(kv[0]))}
        desired: dict[str, Any] = {}
        omitted = max(0, len(indexes) - MAX_INDEXES)
        desired["indexes"] = dict(list(indexes.items())[:MAX_INDEXES])
        if omitted:
            desired["indexesOmitted"] = omitted
        if self.pool is not None:
            capacity = self.pool.capacity()
            allocated = len(self.snap.addresses) + self.created_count
            desired["capacity"] = str(capacity)
            desired["allocated"] = str(allocated)
            desired["free"] = str(self.allocator.free_count)
            ready = _condition(current, READY, "True", "PoolReady", "the pool can hand out addresses", self.snap.now)
        else:
            ready = _condition(current, READY, "False", "InvalidSpec", self.pool_problem, self.snap.now)
        if o.is_deleting(pool):
            ready = _condition(current, READY, "False", "Deleting", "the pool is being deleted", self.snap.now)
        desired["conditions"] = [ready]
        comparable = {k: current.get(k) for k in desired}
        if comparable == desired and _lacks_only(current, desired):
            return
        desired["lastUpdated"] = self.snap.now
        self.pool_step.add(SetStatus(o.ref(pool), desired))

    # -- addresses whose claim is gone or going --------------------------------

    def tend_address(self, address: dict) -> None:
        self.tend(address, o.claim_of_address(address), kinds.FINALIZERS[kinds.IPADDRESS],
                  f"IPAddress {o.namespace(address)}/{o.name(address)}", _claim_ref_of_address(address))

    def tend_capi_address(self, address: dict) -> None:
        key = o.claim_of_capi_address(address)
        claim_ref = o.Ref(address.get("apiVersion", ""), kinds.CAPI_CLAIM[1], o.namespace(address),
                          key[1] if key else "")
        self.tend(address, key, kinds.FINALIZERS[kinds.CAPI_ADDRESS],
                  f"IPAddress.{kinds.CAPI_IPAM_GROUP} {o.namespace(address)}/{o.name(address)}", claim_ref)

    def tend(self, address: dict, key: o.ClaimKey | None, finalizer: str, subject: str, claim_ref: o.Ref) -> None:
        """An address (of either API) goes when its claim is gone; its finalizer goes once it is deleted."""
        claim = self.claims.get(key) if key else None
        step = self.plan.step(subject)
        if o.is_deleting(address):
            keep = claim is not None and not o.is_deleting(claim) and not o.deleted_for_move(address)
            if finalizer in o.finalizers(address) and not keep:
                step.add(_without_finalizer(address, finalizer))
            return
        if claim is None:
            _let_go(step, address, finalizer, unless_exists=claim_ref)

    # -- claims --------------------------------------------------------------

    def serve(self, claim: dict) -> None:
        key = o.claim_key(claim)
        kind = kinds.kind_of(claim)
        step = self.plan.step(f"{key[0]} {o.namespace(claim)}/{key[1]}", about=o.ref(claim))
        finalizer = kinds.FINALIZERS[kind]
        mine = self.addresses_of.get(key, [])
        if o.is_deleting(claim):
            others = [f for f in o.finalizers(claim) if f != finalizer]
            if others and finalizer in o.finalizers(claim):
                # Whoever else holds the claim may still use its address (as
                # Metal3 does, release only once ours is the last finalizer).
                self.remember_binding(claim)
                self.plan.notes.append(f"{o.name(claim)}: release waits for finalizers {', '.join(others)}")
                return
            self.release(claim, step, mine, finalizer)
            return
        live = _held(mine)
        if live:
            keep = self.keep_one(claim, live, step)
            self.ensure_bound(claim, keep, step)
        else:
            self.allocate(claim, step)
        # Last, so that binding is not held up behind it. A claim deleted
        # before it carries the finalizer leaves an address without a claim,
        # which the next pass removes (after asking the API server).
        if finalizer not in o.finalizers(claim):
            step.add(_with_finalizer(claim, finalizer))

    def remember_binding(self, claim: dict) -> None:
        live = _held(self.addresses_of.get(o.claim_key(claim), []))
        if live:
            self.bound[o.claim_key(claim)] = str(o.spec(live[0]).get("address"))

    def release(self, claim: dict, step: Step, mine: list[dict], finalizer: str) -> None:
        if not o.deleted_for_move(claim):
            for address in mine:
                _let_go(step, address, kinds.FINALIZERS[kinds.IPADDRESS])
            mirror = self.capi_address.get(o.name(claim)) if kinds.kind_of(claim) == kinds.CAPI_CLAIM else None
            if mirror is not None:
                _let_go(step, mirror, kinds.FINALIZERS[kinds.CAPI_ADDRESS])
        if finalizer in o.finalizers(claim):
            step.add(_without_finalizer(claim, finalizer))

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
            _let_go(step, address, kinds.FINALIZERS[kinds.IPADDRESS])
        return keep

    def bound_address_name(self, claim: dict, live: list[dict]) -> str | None:
        """The address among ``live`` that the claim's status (or its Cluster API mirror) names."""
        if kinds.kind_of(claim) == kinds.CAPI_CLAIM:
            mirror = self.capi_address.get(o.name(claim))
            ip = o.spec(mirror).get("address") if mirror is not None else None
            return next((o.name(a) for a in live if ip is not None and o.spec(a).get("address") == ip), None)
        named = o.status(claim).get("address")
        name = named.get("name") if isinstance(named, Mapping) else None
        return name if any(o.name(a) == name for a in live) else None

    def ensure_bound(self, claim: dict, address: dict, step: Step) -> None:
        self.bound[o.claim_key(claim)] = str(o.spec(address).get("address"))
        if kinds.kind_of(claim) == kinds.CAPI_CLAIM and o.name(claim) not in self.capi_address:
            step.add(Create(self.capi_address_for(claim, address)))
        self.set_claim_status(claim, step, address=address)

    def allocate(self, claim: dict, step: Step) -> None:
        foreign = o.foreign_pool_namespace(claim)
        if foreign is not None:
            return self.fail(claim, step, ALLOCATION_FAILED,
                             f"spec.pool.namespace {foreign!r} must be the claim's own namespace "
                             f"{o.namespace(claim)!r}: an address cannot be owned across namespaces")
        pool_ref = f"IPPool {self.snap.namespace}/{self.snap.pool_name}"
        if self.pool_obj is None:
            return self.fail(claim, step, POOL_NOT_READY, f"{pool_ref} not found")
        if o.is_deleting(self.pool_obj):
            return self.fail(claim, step, POOL_NOT_READY, f"{pool_ref} is being deleted")
        if self.pool is None:
            return self.fail(claim, step, POOL_NOT_READY, f"{pool_ref} is invalid: {self.pool_problem}")
        requested = o.annotations(claim).get(kinds.IP_ADDRESS_ANNOTATION)
        prefix = self.pool.name_prefix
        try:
            grant = self.allocator.allocate(o.name(claim), requested,
                                            name_taken=lambda ip: self.snap.name_taken(
                                                address_name(prefix, ip_from_int(ip, self.pool.version))))
        except AllocationError as err:
            return self.fail(claim, step, err.reason, err.message)
        address = self.address_for(claim, grant)
        self.created_count += 1
        step.add(Create(address))
        self.ensure_bound(claim, address, step)

    def fail(self, claim: dict, step: Step, reason: str, message: str) -> None:
        if self.set_claim_status(claim, step, error=(reason, message)):
            step.add(Event(o.ref(claim), "Warning", reason, message))

    # -- what claims and addresses look like -----------------------------------

    def set_claim_status(self, claim: dict, step: Step, address: dict | None = None,
                         error: tuple[str, str] | None = None) -> bool:
        """Write the claim's status if it differs; True when a write was planned."""
        current = o.status(claim)
        capi = kinds.kind_of(claim) == kinds.CAPI_CLAIM
        v1beta1 = capi and str(claim.get("apiVersion", "")).endswith("/v1beta1")
        if address is not None:
            ready = _condition(current, READY, "True", "AddressAllocated",
                               f"bound to {o.spec(address).get('address')}", self.snap.now, v1beta1)
            desired: dict[str, Any] = ({"addressRef": {"name": o.name(claim)}} if capi else
                                       {"address": {"name": o.name(address), "namespace": o.namespace(address)}})
        else:
            reason, message = error
            ready = _condition(current, READY, "False", reason, message, self.snap.now, v1beta1)
            desired = {} if capi else {"errorMessage": message}
        desired["conditions"] = [ready] + [c for c in current.get("conditions") or []
                                           if isinstance(c, Mapping) and c.get("type") != READY]
        if {k: current.get(k) for k in desired} == desired and _lacks_only(current, desired):
            return False
        step.add(SetStatus(o.ref(claim), desired, o.meta(claim).get("resourceVersion")))
        return True

    def address_for(self, claim: dict, grant: Grant) -> dict:
        pool = self.pool_obj
        capi = kinds.kind_of(claim) == kinds.CAPI_CLAIM
        claim_ref: dict[str, Any] = {"name": o.name(claim), "namespace": o.namespace(claim)}
        if capi:
            claim_ref = {"apiVersion": claim.get("apiVersion"), "kind": claim.get("kind"), **claim_ref}
        spec: dict[str, Any] = {
            "address": str(grant.ip),
            "pool": {"name": o.name(pool), "namespace": o.namespace(pool)},
            "claim": claim_ref,
        }
        if grant.prefix is not None:
            spec["prefix"] = grant.prefix
        if grant.gateway:
            spec["gateway"] = grant.gateway
        if grant.dns_servers:
            spec["dnsServers"] = list(grant.dns_servers)
        metadata: dict[str, Any] = {
            "name": address_name(self.pool.name_prefix, grant.ip),
            "namespace": o.namespace(pool),
            "finalizers": [kinds.FINALIZERS[kinds.IPADDRESS]],
            "ownerReferences": [_owner(pool, block=True), _owner(claim, controller=True)],
        }
        labels = o.labels(claim)
        if labels:
            metadata["labels"] = labels
        return {"apiVersion": kinds.METAL3_API_VERSION, "kind": "IPAddress", "metadata": metadata, "spec": spec}

    def capi_address_for(self, claim: dict, address: dict) -> dict:
        """The Cluster API IPAddress mirroring the Metal3 one that holds the lock."""
        pool = self.pool_obj
        spec = o.spec(address)
        ip_version = 4 if "." in str(spec.get("address")) else 6
        mirror_spec: dict[str, Any] = {
            "claimRef": {"name": o.name(claim)},
            "poolRef": {"apiGroup": kinds.METAL3_GROUP, "kind": kinds.IPPOOL[1], "name": self.snap.pool_name},
            "address": spec.get("address"),
            "prefix": spec.get("prefix") if spec.get("prefix") is not None else (32 if ip_version == 4 else 128),
        }
        if spec.get("gateway"):
            mirror_spec["gateway"] = spec["gateway"]
        metadata: dict[str, Any] = {
            "name": o.name(claim),
            "namespace": o.namespace(claim),
            "finalizers": [kinds.FINALIZERS[kinds.CAPI_ADDRESS]],
            "ownerReferences": [_owner(claim, controller=True, block=True)]
                               + ([_owner(pool, block=True)] if pool is not None else []),
        }
        cluster = o.labels(claim).get(kinds.CLUSTER_NAME_LABEL)
        if cluster:
            metadata["labels"] = {kinds.CLUSTER_NAME_LABEL: cluster}
        return {"apiVersion": claim.get("apiVersion"), "kind": "IPAddress", "metadata": metadata, "spec": mirror_spec}


# -- small pieces -----------------------------------------------------------

def _with_finalizer(obj: dict, finalizer: str) -> SetFinalizers:
    return SetFinalizers(o.ref(obj), tuple(o.finalizers(obj) + [finalizer]), o.meta(obj).get("resourceVersion"))


def _delete(obj: dict, unless_exists: o.Ref | None = None) -> Delete:
    return Delete(o.ref(obj), unless_exists=unless_exists, resource_version=o.meta(obj).get("resourceVersion"))


def _let_go(step: Step, obj: dict, finalizer: str, unless_exists: o.Ref | None = None) -> None:
    """Delete ``obj`` (unless it is going already) and take our finalizer off it."""
    if not o.is_deleting(obj):
        step.add(_delete(obj, unless_exists=unless_exists))
    if finalizer in o.finalizers(obj):
        step.add(_without_finalizer(obj, finalizer))


def _without_finalizer(obj: dict, finalizer: str) -> SetFinalizers:
    return SetFinalizers(o.ref(obj), tuple(f for f in o.finalizers(obj) if f != finalizer),
                         o.meta(obj).get("resourceVersion"))


def _owner(obj: dict, controller: bool = False, block: bool = False) -> dict:
    ref = {"apiVersion": obj.get("apiVersion"), "kind": obj.get("kind"), "name": o.name(obj),
           "uid": o.meta(obj).get("uid")}
    if controller:
        ref["controller"] = True
    if block:
        ref["blockOwnerDeletion"] = True
    return ref


def _is_cluster_ref(ref: Mapping[str, Any], cluster_name: str) -> bool:
    return (ref.get("kind") == "Cluster" and kinds.group_of(str(ref.get("apiVersion", ""))) == kinds.CLUSTER_GROUP
            and ref.get("name") == cluster_name)


def _claim_ref_of_address(address: dict) -> o.Ref:
    claim = o.spec(address).get("claim") or {}
    kind, claim_name = o.claim_of_address(address) or (kinds.IPCLAIM[1], "")
    api_version = claim.get("apiVersion") or (kinds.METAL3_API_VERSION if kind == kinds.IPCLAIM[1]
                                              else f"{kinds.CAPI_IPAM_GROUP}/{kinds.CAPI_IPAM_VERSIONS[0]}")
    return o.Ref(api_version, kind, str(claim.get("namespace") or o.namespace(address)), claim_name)


def _held(addresses: list[dict]) -> list[dict]:
    """The addresses a live claim holds, those not being deleted first: an address being
    deleted is kept by its finalizer while its claim exists (unless deleted for a move).
    A claim bound to an address being deleted keeps it and is not given a second one;
    one being deleted that the claim is not bound to is an extra, let go like any other."""
    finalizer = kinds.FINALIZERS[kinds.IPADDRESS]
    held = [a for a in addresses if not o.is_deleting(a)
            or (finalizer in o.finalizers(a) and not o.deleted_for_move(a))]
    return sorted(held, key=o.is_deleting)


def _condition(status: Mapping[str, Any], type_: str, value: str, reason: str, message: str,
               now: str, v1beta1: bool = False) -> dict:
    """A condition that keeps its transition time while its status holds."""
    before = next((c for c in status.get("conditions") or []
                   if isinstance(c, Mapping) and c.get("type") == type_), None)
    since = before.get("lastTransitionTime") if before and before.get("status") == value else None
    condition = {"type": type_, "status": value, "reason": reason, "message": message,
                 "lastTransitionTime": since or now}
    if v1beta1 and value != "True":
        condition["severity"] = "Error" if reason != "PoolExhausted" else "Warning"
    return condition


def _lacks_only(current: Mapping[str, Any], desired: Mapping[str, Any]) -> bool:
    """True when ``current`` holds nothing that ``desired`` would drop (lastUpdated aside)."""
    return all(k in desired or k == "lastUpdated" for k in current)
