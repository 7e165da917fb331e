"""Reconciling against memory: plans applied to an Inventory, the way the API server would.

``metal3-ipam plan`` runs the controller's reconcile here, to a fixed point,
and the tests use it to check the reconcile's promises without a server. The
store behaves as the API server does where it matters to the reconcile: a
name is taken only once, an object with finalizers is only marked for
deletion, and it goes when its last finalizer does. The garbage collector's
part is played for the guards of IPs only (``naming.guard_name``): a guard
goes once none of its owners lives (the claim that owns it, or the last of the
pools that share it; one stored as a Lease, whose owners are of another
namespace, is collected by the controller alike: ``lockstore.orphan_guards``);
every other object of ours is held by our finalizers and let go by the reconcile.

Locks are stored where the controller stores them (``core.lockstore``): those of
the kinds whose locks are Leases, and the guards, as Leases of the lock namespace
(``leases``), which the inventory sees as the IPAddresses they stand for. Where
Metal3 IPAddresses can be written (``metal3_locks``), each is written as one
too, first, its twin (``hidden``): an earlier version's lock of that name refuses
it. A lock an earlier version wrote as a Metal3 IPAddress holds as it is, and
gets its Lease beside it (``move_locks_over``).
"""

from __future__ import annotations

import copy
import random
import uuid
from dataclasses import dataclass, field

from .core import kinds
from .core import lockstore
from .core import poolkind
from .core import objects as o
from .core.actions import (Create, Delete, Event, Plan, SetFinalizers, SetMetadata, SetStatus, StepVersions,
                           guard_holds)
from .core.inventory import Inventory
from .core.reconcile import reconcile
from . import poolkinds  # noqa: F401  (registers the kinds of pool)

_UID_NAMESPACE = uuid.UUID("7c7d6f0e-0d7b-4d8e-9a59-6d6574616c33")


class Refused(Exception):
    """What the API server would answer with an error (AlreadyExists, NotFound, Conflict)."""


@dataclass
class MemoryApi:
    inventory: Inventory = field(default_factory=Inventory)
    now: str = "1970-01-01T00:00:00Z"
    events: list[Event] = field(default_factory=list)
    _version: int = 0
    # The guards by the uid of the claim owning them: the garbage collector takes them when it goes.
    _guards: dict[str, set[tuple]] = field(default_factory=dict)
    # The Metal3 IPAddresses a Lease of the same name hides from the inventory (as the adapter files them): the
    # twins of the Leases, and locks an earlier version wrote, each held while it is stored.
    hidden: dict[tuple[str, str], dict] = field(default_factory=dict)
    # Whether Metal3 IPAddresses can be written (their CRD served, this controller allowed to): every lock of the
    # Lease store is then written as one too, first (``lockstore``).
    metal3_locks: bool = True

    @property
    def leases(self) -> dict[str, dict]:
        """The Leases that are locks, by name (in the lock namespace): what the inventory's views stand for (a test
        that takes one out of the inventory deletes it, as it does any object)."""
        return {o.name(lease): lease for lease in map(self._lease_of, self.inventory.of_kind(kinds.IPADDRESS))
                if lease is not None}

    def _lease_of(self, view: dict) -> dict | None:
        if not lockstore.stored_in_lease(view):
            return None
        lease = lockstore.to_lease(view, self.inventory.lock_namespace)
        for key in ("uid", "resourceVersion", "creationTimestamp", "deletionTimestamp"):
            if o.meta(view).get(key) is not None:
                lease["metadata"][key] = o.meta(view)[key]
        return lease

    def load(self, obj: dict) -> None:
        """Take an object as it is given (from a file): fill in what the API server would."""
        obj = copy.deepcopy(obj)
        meta = obj.setdefault("metadata", {})
        pool_kind = poolkind.kind_named(kinds.kind_of(obj))
        if pool_kind is None or not pool_kind.cluster_scoped:
            meta.setdefault("namespace", "default")
        meta.setdefault("uid", self._uid(obj))
        meta.setdefault("creationTimestamp", self.now)
        meta.setdefault("resourceVersion", self._next_version())
        meta.setdefault("generation", 1)
        self.inventory.upsert(obj)
        if kinds.kind_of(obj) == kinds.IPADDRESS and o.is_guard(obj):
            for owner in o.owner_references(obj):
                self._guards.setdefault(str(owner.get("uid")), set()).add((o.namespace(obj), o.name(obj)))

    def _uid(self, obj: dict) -> str:
        # Repeatable for repeatable input, and new for each incarnation of a name, as on a server.
        return str(uuid.uuid5(_UID_NAMESPACE, f"{obj.get('apiVersion')}/{obj.get('kind')}/"
                                              f"{o.namespace(obj)}/{o.name(obj)}/{self._version}"))

    def _next_version(self) -> str:
        self._version += 1
        return str(self._version)

    def _get(self, target: o.Ref) -> dict:
        obj = self.inventory.get(target.group_kind, target.namespace, target.name)
        if obj is None:
            raise Refused(f"{target} not found")
        return obj

    def _store(self, obj: dict) -> None:
        # Versions only grow, also past those of objects filed from elsewhere (a server's listing).
        known = str(obj["metadata"].get("resourceVersion") or "")
        if known.isdigit():
            self._version = max(self._version, int(known))
        obj["metadata"]["resourceVersion"] = self._next_version()
        meta = obj["metadata"]
        stored = self.inventory.get(kinds.kind_of(obj), o.namespace(obj), o.name(obj))
        if stored is not None and "spec" in obj and obj.get("spec") != stored.get("spec"):
            # As the API server: generation counts changes of the spec only.
            meta["generation"] = int(o.meta(stored).get("generation") or 1) + 1
        if lockstore.stored_in_lease(obj):
            obj = self._through_lease(obj)
        if meta.get("deletionTimestamp") and not meta.get("finalizers"):
            self.inventory.remove(obj)
            if lockstore.stored_in_lease(obj):
                self._lease_gone(obj)
            self._collect(obj)
        else:
            self.inventory.upsert(obj)

    def _through_lease(self, view: dict) -> dict:
        """The view as stored through the Lease it stands for: what the adapter would file of that Lease."""
        back = lockstore.from_lease(self._lease_of(view))
        assert back is not None
        return back

    def _create_lease(self, lock: dict, twin: bool = True) -> None:
        """A lock of the Lease store created: refused when its Lease exists (the name is the lock); where Metal3
        IPAddresses can be written (and ``twin``), its Metal3 IPAddress is created first, refused when one of
        that name exists (an earlier version's lock)."""
        namespace, name = o.namespace(lock), o.name(lock)
        key = (namespace, name)
        stored = self.inventory.get(kinds.IPADDRESS, namespace, name)
        if lockstore.stored_in_lease(stored):
            raise Refused(f"Lease {self.inventory.lock_namespace}/{lockstore.lease_name(namespace, name)} "
                          f"already exists")
        if twin and self.metal3_locks:
            if stored is not None or key in self.hidden:
                if stored is None:  # learnt, as the adapter reads it after the refusal: it holds as it is
                    self.inventory.upsert(self.hidden.pop(key))
                raise Refused(f"IPAddress {namespace}/{name} already exists")
            made = lockstore.moved_over(lock)
            made["metadata"]["annotations"] = {k: v for k, v in o.annotations(made).items()
                                               if k != lockstore.STORED_IN}
            made["metadata"].update(uid=self._uid(made), creationTimestamp=self.now,
                                    resourceVersion=self._next_version())
            self.hidden[key] = made
        elif stored is not None:
            self.hidden[key] = stored
        view = copy.deepcopy(lock)
        meta = view.setdefault("metadata", {})
        meta.setdefault("annotations", {})[lockstore.STORED_IN] = lockstore.lease_name(namespace, name)
        meta["uid"] = self._uid(lockstore.to_lease(view, self.inventory.lock_namespace))
        meta["creationTimestamp"] = self.now
        meta.pop("resourceVersion", None)
        self._store(view)
        if o.is_guard(view):
            for owner in o.owner_references(view):
                self._guards.setdefault(str(owner.get("uid")), set()).add(key)

    def _lease_gone(self, view: dict) -> None:
        """A Lease deleted: its twin goes with it; a Metal3 IPAddress of another lock it hid is filed again."""
        key = (o.namespace(view), o.name(view))
        hidden = self.hidden.pop(key, None)
        if hidden is not None and not lockstore.same_lock(hidden, view):
            self.inventory.upsert(hidden)

    def _twin_owned(self, view: dict, owners: list[dict]) -> None:
        """The owners a Lease is given, given to its twin too (first, as the adapter does), so that the garbage
        collector keeps the twin as long as the controller keeps the Lease."""
        twin = self.hidden.get((o.namespace(view), o.name(view)))
        if lockstore.stored_in_lease(view) and lockstore.same_lock(twin, view):
            twin["metadata"]["ownerReferences"] = [dict(r) for r in owners]

    def legacy_locks(self) -> list[dict]:
        """The locks that belong in the Lease store and are Metal3 IPAddresses alone (filed), or hidden by the
        Lease of another lock."""
        filed = [obj for obj in self.inventory.of_kind(kinds.IPADDRESS)
                 if lockstore.in_leases(obj) and not lockstore.stored_in_lease(obj)]
        return filed + [x for k, x in self.hidden.items()
                        if not lockstore.same_lock(x, self.inventory.get(kinds.IPADDRESS, *k))]

    def move_locks_over(self, between=lambda: None) -> list[str]:
        """Each lock an earlier version wrote as a Metal3 IPAddress that belongs in the Lease store: its Lease
        created beside it (``between`` called once it is), the IPAddress kept as its twin. Returns what was
        refused (a Lease of another lock of that name: the IPAddress holds as it is)."""
        refused = []
        for legacy in self.legacy_locks():
            key = (o.namespace(legacy), o.name(legacy))
            try:
                self._create_lease(lockstore.moved_over(legacy), twin=False)
            except Refused as err:
                if not lockstore.same_lock(self.inventory.get(kinds.IPADDRESS, *key), legacy):
                    refused.append(str(err))
                    continue
            between()
        return refused

    def _lives(self, owner: dict, namespace: str) -> bool:
        """Whether the object an owner reference names (in ``namespace``, or of cluster scope: a global pool
        owning a guard its claims' namespace's pools meet) is stored, that incarnation."""
        kind = (kinds.group_of(str(owner.get("apiVersion") or "")), str(owner.get("kind")))
        pool_kind = poolkind.kind_named(kind)
        found = self.inventory.get(kind, "" if pool_kind is not None and pool_kind.cluster_scoped else namespace,
                                   str(owner.get("name")))
        return found is not None and o.meta(found).get("uid") == owner.get("uid")

    def _collect(self, gone: dict) -> None:
        """The garbage collector: the guards ``gone`` owned go with it (those of its uid only); ``gone`` is the
        object, or an owner reference to it."""
        uid = gone.get("uid") if "uid" in gone else o.meta(gone).get("uid")
        for namespace, name in sorted(self._guards.pop(str(uid), ())):
            guard = self.inventory.get(kinds.IPADDRESS, namespace, name)
            owners = o.owner_references(guard) if guard is not None else []
            # As the garbage collector: gone once none of its owners lives (a guard the pools share has several).
            if any(r.get("uid") == uid for r in owners) and not any(
                    self._lives(r, namespace) for r in owners if r.get("uid") != uid):
                guard = copy.deepcopy(guard)
                guard["metadata"].setdefault("deletionTimestamp", self.now)
                self._store(guard)

    # -- the actions -------------------------------------------------------

    def apply(self, plan: Plan) -> list[str]:
        """Run every step; a refused action ends its step only. Returns what was refused."""
        refused = []
        for step in plan.steps:
            versions = StepVersions()
            for action in step.actions:
                try:
                    action = versions.current(action)
                    self.do(action)
                    target = getattr(action, "target", None)
                    if target is not None:
                        obj = self.inventory.get(target.group_kind, target.namespace, target.name)
                        versions.wrote(action, obj and obj["metadata"].get("resourceVersion"))
                except Refused as err:
                    refused.append(f"{step.subject}: {err}")
                    break
        return refused

    def do(self, action) -> None:
        if isinstance(action, Event):
            self.events.append(action)
        elif isinstance(action, Create):
            obj = copy.deepcopy(action.obj)
            if lockstore.in_leases(obj):
                self._create_lease(obj)
            elif self.inventory.get(kinds.kind_of(obj), o.namespace(obj), o.name(obj)) is not None:
                raise Refused(f"{obj['kind']} {o.namespace(obj)}/{o.name(obj)} already exists")
            else:
                self.load(obj)
            owners = o.owner_references(obj)
            if o.is_guard(obj) and not any(self._lives(owner, o.namespace(obj)) for owner in owners):
                self._collect(owners[0] if owners else {})  # made for a claim gone already
        elif isinstance(action, Delete):
            guard = action.unless_exists
            where = (guard.group_kind, guard.namespace, guard.name) if guard is not None else None
            if guard is not None and guard_holds(action, self.inventory.get(*where), self.inventory.filed_with(*where)):
                raise Refused(f"{guard} exists: {action.target} is kept")
            obj = copy.deepcopy(self._get(action.target))
            # The preconditions the API server checks on a delete: this incarnation, unchanged since read.
            if action.target.uid and action.target.uid != obj["metadata"].get("uid"):
                raise Refused(f"{action.target} was replaced since it was read")
            if action.resource_version is not None and action.resource_version != obj["metadata"].get("resourceVersion"):
                raise Refused(f"{action.target} changed since it was read")
            obj["metadata"].setdefault("deletionTimestamp", self.now)
            self._store(obj)
        else:
            obj = copy.deepcopy(self._get(action.target))
            meta = obj["metadata"]
            expected = getattr(action, "resource_version", None)
            if expected is not None and expected != meta.get("resourceVersion"):
                raise Refused(f"{action.target} changed since it was read")
            if isinstance(action, SetFinalizers):
                meta["finalizers"] = list(action.finalizers)
            elif isinstance(action, SetMetadata):
                if action.labels:
                    meta.setdefault("labels", {}).update(action.labels)
                if action.annotations:  # as a merge patch: None removes one
                    annotations = meta.setdefault("annotations", {})
                    annotations.update(action.annotations)
                    for name in [k for k, v in action.annotations.items() if v is None]:
                        annotations.pop(name)
                if action.finalizers is not None:
                    meta["finalizers"] = list(action.finalizers)
                if action.owner_references is not None:
                    meta["ownerReferences"] = [dict(r) for r in action.owner_references]
                    self._twin_owned(obj, meta["ownerReferences"])
                    if kinds.kind_of(obj) == kinds.IPADDRESS and o.is_guard(obj):
                        for owner in meta["ownerReferences"]:
                            self._guards.setdefault(str(owner.get("uid")), set()).add((o.namespace(obj),
                                                                                       o.name(obj)))
            elif isinstance(action, SetStatus):
                obj["status"] = copy.deepcopy(action.status)
            if obj != self._get(action.target):  # as the API server: a write that changes nothing keeps the version
                self._store(obj)


def converge(api: MemoryApi, rng: random.Random | None = None, max_rounds: int = 50) -> int:
    """Reconcile every pool until no plan has anything left to do; returns the rounds taken.

    Claims are served in the order the inventory holds them, which for
    loaded files is input order.
    """
    for round_ in range(1, max_rounds + 1):
        busy = False
        for pool_key in api.inventory.pool_keys():
            plan = reconcile(api.inventory.snapshot(pool_key, api.now, rng))
            if plan:
                api.apply(plan)
                busy = True
        if not busy:
            return round_
    raise RuntimeError(f"no fixed point after {max_rounds} rounds")
