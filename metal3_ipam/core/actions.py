"""What a reconcile asks to be done: API writes and Events, grouped in steps.

A ``Step`` is the work for one object (a claim, an orphan address, the pool):
its actions run in order and the first that fails abandons the rest of that
step only, so one failing claim never holds back another. The controller
executes steps against the API server, ``metal3-ipam plan`` against an
in-memory store; both read the same plan.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from typing import Any, Union

from .asking import Intent
from .objects import Ref, meta, pool_of


@dataclass(frozen=True)
class Create:
    obj: dict


@dataclass(frozen=True)
class Delete:
    target: Ref
    # Delete only if this object is really gone (the cache may not have seen it yet);
    # with a uid, only that incarnation of the name counts.
    unless_exists: Ref | None = None
    # ... and with a pool, only when it is for that pool, or filed with it (see ``guard_holds``): a claim
    # of that name for another pool does not keep this pool's address.
    guard_pool: tuple[str, str] | None = None
    # The version the target was read at. Marking an object with finalizers for
    # deletion is a write that changes its version: a later action of the same
    # step on it (removing the finalizer) must expect the version this wrote.
    resource_version: str | None = None


@dataclass(frozen=True)
class SetFinalizers:
    """Replace the finalizer list, on condition that the object is unchanged since it was read."""

    target: Ref
    finalizers: tuple[str, ...]
    resource_version: str | None


@dataclass(frozen=True)
class SetMetadata:
    """Merge labels and annotations (an annotation given None is removed) and replace owner references, and the
    finalizer list when given."""

    target: Ref
    labels: dict[str, str] | None = None
    owner_references: tuple[dict, ...] | None = None
    resource_version: str | None = None
    annotations: dict[str, str | None] | None = None
    finalizers: tuple[str, ...] | None = None


@dataclass(frozen=True)
class SetStatus:
    """Replace the status; with a resource version, only if nobody wrote the object since it was read."""

    target: Ref
    status: dict
    resource_version: str | None = None


@dataclass(frozen=True)
class Event:
    target: Ref
    type: str  # Normal | Warning
    reason: str
    message: str


Action = Union[Create, Delete, SetFinalizers, SetMetadata, SetStatus, Event]


def guard_holds(action: "Delete", found: dict | None, filed: tuple | None = None) -> bool:
    """Whether the object a Delete's guard found keeps the target from being deleted; ``filed``: the pool the
    inventory files it with (a claim whose pool reference was changed stays with the pool that served it)."""
    if found is None:
        return False
    guard = action.unless_exists
    if guard.uid is not None and meta(found).get("uid") != guard.uid:
        return False
    return action.guard_pool is None or action.guard_pool in (pool_of(found), filed)


@dataclass
class Step:
    subject: str
    actions: list[Action] = field(default_factory=list)
    # The claim or pool this work is for: where a write the API server
    # refuses for good is reported (its status, an Event).
    about: Ref | None = None

    def add(self, action: Action) -> None:
        self.actions.append(action)


@dataclass
class Plan:
    steps: list[Step] = field(default_factory=list)
    # Some work could not be decided now (e.g. waiting for an address to go);
    # the next reconcile, triggered by that change, picks it up.
    notes: list[str] = field(default_factory=list)
    # The earliest time (RFC 3339) at which a pass over the pool has work that nothing else will bring
    # (a deleted claim's address held until then): the caller passes over the pool again at that time.
    due: str | None = None
    # What the pass wants of the keys its claims carry in an outside IPAM (``pools.Outside``): the caller
    # hands them to the asks (``core.asking``), which it runs; an answer brings the pool's next pass.
    intents: dict[str, Intent] = field(default_factory=dict)

    def step(self, subject: str, about: Ref | None = None) -> Step:
        step = Step(subject, about=about)
        self.steps.append(step)
        return step

    @property
    def writes(self) -> list[Action]:
        return [a for s in self.steps for a in s.actions if not isinstance(a, Event)]

    def __bool__(self) -> bool:
        return any(s.actions for s in self.steps)

    def describe(self) -> list[str]:
        return [f"{s.subject}: {_describe(a)}" for s in self.steps for a in s.actions]


def _describe(action: Any) -> str:
    if isinstance(action, Create):
        meta = action.obj.get("metadata", {})
        return f"create {action.obj.get('kind')} {meta.get('namespace')}/{meta.get('name')}"
    if isinstance(action, Event):
        return f"event {action.type} {action.reason}: {action.message}"
    if isinstance(action, Delete) and action.unless_exists is not None:
        # Which claim's going it waits for, that incarnation: the lock of a claim deleted (or moved away) and that
        # of its namesake made since are told apart in the log.
        guard = action.unless_exists
        return f"Delete {action.target} unless {guard}{f' uid {guard.uid}' if guard.uid else ''} exists"
    return f"{type(action).__name__} {action.target}"


class StepVersions:
    """Resource versions written within one step.

    A plan is made from one reading, so two writes of a step to one object
    carry the same expected version; the second must expect what the first
    wrote, not what was read. Only that chain is followed: a write by anyone
    else still makes the precondition fail.
    """

    def __init__(self) -> None:
        self._latest: dict[tuple, tuple[str | None, str | None]] = {}

    @staticmethod
    def _key(target: Ref) -> tuple:
        return (target.group_kind, target.namespace, target.name)

    def current(self, action: Action) -> Action:
        expected = getattr(action, "resource_version", None)
        if expected is None:
            return action
        read, written = self._latest.get(self._key(action.target), (None, None))
        if read == expected and written is not None:
            return dataclasses.replace(action, resource_version=written)
        return action

    def wrote(self, action: Action, new_version: str | None) -> None:
        key = self._key(action.target)
        read = self._latest.get(key, (getattr(action, "resource_version", None), None))[0]
        self._latest[key] = (read, new_version)
