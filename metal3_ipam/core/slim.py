"""The slim form of an object: what the controller reads of it, and nothing else.

The API server sends whole objects: managedFields (often larger than the rest
of the object), the last-applied annotation, a Cluster's topology and status.
The inventory holds tens of thousands of claims and addresses for as long as
they live, so each is cut down to what the reconcile, the writer and the
webhooks read of it before it is filed, in the same dict shape (``objects``
reads both alike).

Strings repeated across objects are interned, so that one copy serves them
all: dict keys, namespaces, apiVersion and kind, finalizers, label keys and
values, condition types, reasons and times, pool names, and the names and uids
by which addresses refer to their claims (a claim's uid and the owner
reference of its address are then one string). What is unique to one object
(its resourceVersion, a message) is kept as it came; an address's IP is
interned, as a claim's two addresses hold the same text. Small parts that
many objects have alike (a claim's spec naming its pool, a finalizer list, a
cluster label, the pool's owner reference on every address) are shared: one
dict or list for all of them.
A claim's owner reference on its addresses, and references by name alone
(``{name: X}``), are shared between the claim and its addresses the same way.

Filed objects are therefore read-only: nothing may change them in place (no
code does; ``objects`` hands out copies of labels, finalizers and owner
references). A change is a new object, filed anew.
"""

from __future__ import annotations

import sys
from collections.abc import Mapping
from typing import Any

from metal3_ipam.core import kinds
from metal3_ipam.core import poolkind

_intern = sys.intern

# metadata fields something reads (objects.py, inventory, reconcile, the writer's preconditions).
METADATA_READ = ("name", "namespace", "uid", "resourceVersion", "generation", "creationTimestamp",
             "deletionTimestamp", "finalizers", "labels", "annotations", "ownerReferences")
# Fields whose string values are unique to one object: interning them would only grow the intern table.
_UNIQUE = frozenset(("resourceVersion", "message", "address", "errorMessage", "lastUpdated"))
# Annotations no one reads that can be as large as the object itself.
_DROPPED_ANNOTATIONS = frozenset(("kubectl.kubernetes.io/last-applied-configuration",))
# Kinds whose spec and status are kept whole: a pool's spec is parsed, its status compared as a whole
# (status.indexes may hold tens of thousands of entries: copying it each event would cost more than it saves).
_AS_IS = poolkind.REGISTRY  # the kinds of pool, as registered
# Owner reference fields kept of claims and addresses (a pool's are kept whole): every field the API has,
# since a repair writes the list back and must keep the references it does not mean to change as they were.
_OWNER_FIELDS = ("apiVersion", "kind", "name", "uid", "controller", "blockOwnerDeletion")
# Owner references shared by many objects: the pool's (and a Cluster's) on every address of the pool.
# (Sharing saves memory only: a kind of pool registered after this module was read is not shared.)
_CLAIMS = frozenset((kinds.IPCLAIM, kinds.CAPI_CLAIM))
# Shared parts, by their frozen value. Bounded: when full it starts again (objects filed before
# keep what they share; only new ones stop sharing with them), so labels unique to each object
# never pile up.
MAX_SHARED = 4096
_shared: dict[Any, Any] = {}
# Parts alike between one claim and its addresses, found by a string they already hold (so an entry
# costs a table slot, not a frozen key): the claim's owner reference on each address, by the claim's
# uid; a reference by name alone ({name: X}: a Cluster API claim's status.addressRef and its address's
# spec.claimRef), by X. The claim and its addresses may be filed far apart (a start-up lists each kind
# in turn), so the table holds one pool's worth; when full it starts again, as ``_shared`` does.
MAX_ALIKE = 1 << 17
_alike: dict[str, dict] = {}


def slim(obj: Mapping[str, Any]) -> dict:
    """``obj`` with only the fields the controller reads, its repeated strings interned.

    Anything that is not an object of ours (no kind, no metadata) is returned as it is.
    """
    if not isinstance(obj, dict) or not isinstance(obj.get("metadata"), dict):
        return obj  # type: ignore[return-value]
    kind = kinds.kind_of(obj)
    out: dict[str, Any] = {}
    api_version = obj.get("apiVersion")
    if isinstance(api_version, str):
        out["apiVersion"] = _intern(api_version)
    if isinstance(obj.get("kind"), str):
        out["kind"] = _intern(obj["kind"])
    spec = obj.get("spec")
    # A Metal3 address's name is named again only by an IPClaim's status: one made for a Cluster API
    # claim keeps its own (an interned string costs a slot in the interpreter's table besides).
    own_name = kind == kinds.IPADDRESS and type(spec) is dict and type(spec.get("claim")) is dict \
        and spec["claim"].get("kind") == kinds.CAPI_CLAIM[1]
    out["metadata"] = _metadata(obj["metadata"], kind, own_name)
    if kind == kinds.CLUSTER:
        # Only whether it is paused is read of a Cluster's spec; its status is never read.
        paused = (obj.get("spec") or {}).get("paused") if isinstance(obj.get("spec"), dict) else None
        out["spec"] = {"paused": paused} if paused is not None else {}
        return out
    whole = kind in _AS_IS
    status = obj.get("status")
    if spec is not None:
        if whole:
            out["spec"] = spec
        elif kind in _CLAIMS:
            out["spec"] = _share(spec)  # a claim's spec names its pool, as its neighbours' do
        else:
            out["spec"] = _address_spec(spec) if type(spec) is dict else _compact(spec, True)
    if status is not None:
        out["status"] = status if whole else _compact(status, intern=True)
    return out


def _metadata(meta: dict, kind: tuple[str, str] | None, own_name: bool = False) -> dict:
    out: dict[str, Any] = {}
    for key in METADATA_READ:
        value = meta.get(key)
        if value is None:
            continue
        if key == "annotations" and isinstance(value, dict):
            value = {_intern(k): _value(v) for k, v in value.items() if k not in _DROPPED_ANNOTATIONS}
            if not value:
                continue
        elif key == "resourceVersion" or (key == "name" and own_name):
            pass
        elif key == "uid":
            # A claim's uid is what its addresses' owner references name: one string for all.
            value = _intern(value) if kind in _CLAIMS and type(value) is str else value
        elif key in ("finalizers", "labels"):
            value = _share(value)
        elif key == "ownerReferences" and kind not in _AS_IS and type(value) is list:
            value = _exact([_owner(r) for r in value])
        else:
            value = _compact(value, intern=True)
        out[key] = value
    return out


# (the kinds of pool registered, the owner kinds whose references are shared): worked out again only when the
# registry is another.
_owners: list = [(), frozenset()]


def _shared_owners() -> frozenset:
    registered = tuple(poolkind.REGISTRY)
    if _owners[0] != registered:
        _owners[:] = [registered, frozenset((*(kind for _, kind in registered), "Cluster"))]
    return _owners[1]


def _owner(ref: Any) -> Any:
    if type(ref) is not dict:
        return _compact(ref, True)
    lean = {k: _compact(ref[k], True) for k in _OWNER_FIELDS if k in ref}
    if ref.get("kind") in _shared_owners():
        return _share(lean)
    uid = lean.get("uid")
    return _alike_by(uid, lean) if type(uid) is str else lean


def _alike_by(found_by: str, value: dict) -> dict:
    """The dict filed before under ``found_by`` when it equals ``value`` (then one serves both), else ``value``."""
    known = _alike.get(found_by)
    # Equal, and alike in the types of their values too (True == 1, yet they are different JSON).
    if known is not None and known == value and all(type(v) is type(value[k]) for k, v in known.items()):
        return known
    if len(_alike) >= MAX_ALIKE:
        _alike.clear()
    _alike[found_by] = value
    return value


def _mirrored(spec: dict) -> bool:
    """Whether a Metal3 address (by its spec) has a Cluster API address holding the same IP: it does
    when made for a Cluster API claim (a Cluster API address's spec has no ``claim``: it is one)."""
    claim = spec.get("claim")
    return type(claim) is not dict or claim.get("kind") == kinds.CAPI_CLAIM[1]


def _address_spec(spec: dict) -> dict:
    """An address's spec: its pool reference is its neighbours'; the rest is its own."""
    out = {}
    for key, value in spec.items():
        key = _intern(key) if type(key) is str else key
        if key in ("pool", "poolRef"):
            out[key] = _share(value)
        elif key == "address" and type(value) is str:
            out[key] = _intern(value) if _mirrored(spec) else value
        else:
            out[key] = _compact(value, key not in _UNIQUE)
    return out


def _share(value: Any) -> Any:
    """One copy of ``value`` for every object that has it alike."""
    frozen = _freeze(value)
    if frozen is None:
        return _compact(value, True)
    found = _shared.get(frozen)
    if found is None:
        if len(_shared) >= MAX_SHARED:
            _shared.clear()
        found = _shared[frozen] = _compact(value, True)
    return found


def _freeze(value: Any) -> Any:
    """A hashable image of a JSON value that tells dicts, lists and scalars apart; None if it has none."""
    if type(value) is dict:
        items = []
        for k, v in value.items():
            frozen = _freeze(v)
            if frozen is None:
                return None
            items.append((k, frozen))
        return ("d", tuple(items))
    if type(value) is list:
        items = []
        for v in value:
            frozen = _freeze(v)
            if frozen is None:
                return None
            items.append(frozen)
        return ("l", tuple(items))
    if value is None or type(value) in (str, int, bool, float):
        return (type(value).__name__, value)
    return None


def _value(value: Any) -> Any:
    """An annotation's value: short ones repeat (paused, move markers); long ones are someone else's data."""
    return _intern(value) if isinstance(value, str) and len(value) <= 64 else value


def _compact(value: Any, intern: bool) -> Any:
    """A copy of a JSON value, its keys interned and its string values too where ``intern``."""
    if type(value) is str:
        return _intern(value) if intern else value
    if type(value) is dict:
        # A unique field keeps its own text; what is nested under it (a claim's status.address
        # names its IPAddress and namespace) is interned like anything else.
        out = {_intern(k) if type(k) is str else k:
               (v if k in _UNIQUE or not intern else _intern(v)) if type(v) is str else _compact(v, intern)
               for k, v in value.items()}
        if intern and len(out) == 1 and type(out.get("name")) is str:
            return _alike_by(out["name"], out)  # a reference by name alone: who else names X so is alike
        return out
    if type(value) is list:
        return _exact([_compact(v, intern) for v in value])
    return value


def _exact(items: list) -> list:
    """``items`` in a list of its own length (one built by appending keeps room for more: a conditions or
    owner-references list of one or two would carry two spare slots for as long as it is filed)."""
    return items[:]
