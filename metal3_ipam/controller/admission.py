"""What the admission webhooks decide: the answer to an AdmissionReview, from the rules and the live state.

The API server asks before an IPPool, IPClaim, IPAddress, or a Cluster API
IPAddressClaim on one of our pools is created, changed or (for pools)
deleted. The answer comes from the same rules as ``metal3-ipam validate``
(:mod:`metal3_ipam.core.validation`); the rules that need the live state (a
pool overlapping another of its namespace, a pool update dropping an address
in use, a pool deleted while addresses are handed out from it) read the
controller's inventory, which the watches keep current; the pools a new or
changed pool is checked against for overlap are read from the API server
(see ``Admission.current_pools``).

What an answer may carry is bounded (:data:`MESSAGE_CHARS`): the API server shows it to whoever made the
request. Judging runs on the webhook server's judge threads, on what :meth:`Admission.live` copied of the
inventory on the controller's loop (:mod:`metal3_ipam.controller.webhook_server`).
"""

from __future__ import annotations

import base64
import json
import logging
from dataclasses import dataclass, field
from typing import Any, Callable, Iterable

from ..core import kinds
from ..core import poolkind
from ..core import objects as o
from ..core.inventory import Inventory
from ..core.naming import is_dns1123_subdomain
from ..core.overlap import separate_network
from ..core.problems import Problem
from ..core.validation import (addresses_in_use, capi_address_problems, overlap_problems, preallocated_kept_problems,
                               shared_address_problems, unmarked_network_problems, validate, validate_delete,
                               validate_update, written_before_its_claim)
from .review_body import clipped

log = logging.getLogger("metal3_ipam.webhook")


def is_namespace_name(name: Any) -> bool:
    """Whether ``name`` can name a namespace (a DNS-1123 label)."""
    return isinstance(name, str) and 0 < len(name) <= 63 and "." not in name and is_dns1123_subdomain(name)


# What Admission.review is given for ``live``: read the inventory here (one thread, as in tests and
# ``metal3-ipam validate``), or the controller's loop did not copy it in time (answered 503).
HERE, BUSY = object(), object()


# -- the answers ----------------------------------------------------------------------

class Admission:
    """Answers AdmissionReview requests from the rules and the inventory (read only)."""

    def __init__(self, inventory: Inventory, loaded: Callable[[], bool] = lambda: True,
                 namespaces: Iterable[str] = (), list_pools: Callable[[str], list[dict]] | None = None) -> None:
        self.inventory = inventory
        self.loaded = loaded
        # The pools of a namespace as the API server holds them now (blocking; see ``current_pools``).
        self.list_pools = list_pools
        # Namespaces the controller watches (empty: all). Elsewhere the inventory knows nothing.
        self.namespaces = set(namespaces)

    def current_pools(self, request: dict) -> list[dict] | None:
        """For a pool created or changed, the other pools of its namespace read from the API server.

        The inventory learns of a pool from the watch, a moment after it was
        created: two pools created back to back would each be judged without
        the other, and an overlap under different namePrefixes let in. Pools
        are created rarely, so the overlap check reads them afresh. None when
        that read fails (the inventory answers then) or is not needed.
        """
        obj = request.get("object")
        if self.list_pools is None or request.get("operation") == "DELETE" or kinds.kind_of(obj) != kinds.IPPOOL:
            return None
        namespace = request.get("namespace") or o.namespace(obj)
        if not is_namespace_name(namespace) or not self._knows(namespace):
            # Not a namespace's name (a review sent straight to the port): it would go into the path listed.
            return None
        try:
            return self.list_pools(namespace)
        except Exception as err:  # noqa: BLE001 - any failure: judged from the inventory instead
            log.warning("listing the IPPools of %s for an admission review failed (%s); judged from the "
                        "controller's inventory", namespace, getattr(err, "reason", None) or err)
            return None

    def review(self, request: dict, mutating: bool = False, pools: list[dict] | None = None,
               live: "Live | None | object" = HERE) -> dict:
        """The ``response`` of an AdmissionReview for its ``request``; ``pools`` from :meth:`current_pools`,
        ``live`` from :meth:`live` (:data:`HERE`: read here; :data:`BUSY`: it could not be read in time)."""
        uid = request.get("uid", "")
        operation = request.get("operation")
        obj = request.get("object") if operation != "DELETE" else request.get("oldObject")
        if not isinstance(obj, dict):
            return _allowed(uid)
        obj = _with_namespace(obj, request.get("namespace"))
        if mutating:
            return self._default(uid, obj)
        old = _with_namespace(request.get("oldObject"), request.get("namespace"))
        if live is HERE:
            live = self.live(request)
        if live is BUSY:
            if operation == "DELETE":  # never held on what is not known (see _judge)
                return _allowed(uid)
            return _denied(uid, 503, "ServiceUnavailable", "the IPAM controller is busy; try again in a few seconds")
        try:
            problems = self._judge(operation, obj, old, pools, live)
        except _NotReady as not_ready:
            return _denied(uid, 503, "ServiceUnavailable", str(not_ready))
        errors = [p for p in problems if not p.warning]
        warnings = [_short(p) for p in problems if p.warning]
        if errors:
            return _denied(uid, 422, "Invalid", _invalid_message(obj, errors), warnings, errors)
        return _allowed(uid, warnings)

    @staticmethod
    def reads_inventory(request: dict, mutating: bool = False) -> bool:
        """Whether answering ``request`` reads the inventory: validating a pool (see :meth:`_judge`), or a Cluster
        API IPAddress of one of our pools written before its claim (see :meth:`address_problems`)."""
        obj = request.get("object") if request.get("operation") != "DELETE" else request.get("oldObject")
        if mutating:
            return False
        if kinds.kind_of(obj) == kinds.CAPI_ADDRESS:
            return request.get("operation") == "CREATE" and o.pool_of(obj) is not None \
                and written_before_its_claim(obj)
        return kinds.kind_of(obj) in poolkind.REGISTRY

    def live(self, request: dict, mutating: bool = False) -> "Live | None":
        """What judging ``request`` reads of the inventory, copied out of it; None when nothing.

        Runs where the inventory is kept (the controller's event loop) and
        costs a lookup per pool of the namespace and per address of the pool:
        the judging itself runs elsewhere, on these copies.
        """
        if not self.reads_inventory(request, mutating):
            return None
        operation = request.get("operation")
        obj = _with_namespace(request.get("object") if operation != "DELETE" else request.get("oldObject"),
                              request.get("namespace"))
        namespace = o.namespace(obj)
        kind = kinds.kind_of(obj)
        if namespace and not self._knows(namespace):  # a pool of cluster scope is known whatever is watched
            return None
        if kind == kinds.CAPI_ADDRESS:
            return Live(loaded=bool(self.loaded()), in_use={}, pools=[], problems=self.address_problems(obj))
        pool = o.PoolKey(namespace, o.name(obj), kind)
        group = self.inventory.groups.get(pool)
        addresses = [*group.addresses.values(), *group.capi_addresses.values()] if group is not None else []
        # The other pools of the namespace that keep an IP unique there with it (IPPool's rule on overlapping
        # namePrefixes, and the warning on overlaps with pools of the other kinds).
        others = [self.inventory.get(key.kind, namespace, key.name) for key in self.inventory.pools_in(namespace)
                  if poolkind.REGISTRY[key.kind].unique_in_namespace] if _unique_in_namespace(kind) else []
        problems, old = [], request.get("oldObject")
        if operation == "UPDATE" and isinstance(old, dict) and separate_network(old) and not separate_network(obj):
            problems = unmarked_network_problems(old, obj, self.doubles_unmarked(pool, addresses))
        return Live(loaded=bool(self.loaded()), in_use=addresses_in_use(addresses, namespace, pool.name, kind),
                    pools=[p for p in others if p is not None and not o.is_deleting(p)],
                    near=self.inventory.near_pools(pool), lock_namespace=self.inventory.lock_namespace,
                    kept=self.inventory.kept_by_claims(pool), problems=problems)

    def doubles_unmarked(self, pool: o.PoolKey, addresses: list[dict]) -> list[tuple[str, str, str]]:
        """The IPs a global pool's addresses hold that a pool it shares them with as separate networks holds for
        another claim (it and the pools still marked apart aside), were its own annotation removed: (IP, its
        claim, the other claim) each."""
        still_apart = {facts.key for facts, _ in self.inventory.near_pools(pool) if facts.apart}
        found = []
        for address in addresses:
            ip = o.address_ip(address)
            capi = kinds.kind_of(address) == kinds.CAPI_ADDRESS
            claim = (o.claim_of_capi_address if capi else o.claim_of_address)(address)
            if ip is None or claim is None or o.is_deleting(address):
                continue
            namespace = claim[2] if len(claim) > 2 else o.namespace(address)
            mine = f"{claim[0]} {namespace}/{claim[1]}"
            found += [(str(ip), mine, f"{who} of {filed.kind[1]} {filed.namespace + '/' if filed.namespace else ''}"
                                      f"{filed.name}")
                      for filed, who, _ in self.inventory.held_twice(pool, still_apart, namespace, ip.version, int(ip))]
        return found

    def address_problems(self, obj: dict) -> list[Problem]:
        """A Cluster API IPAddress written before its claim, judged against its pool and the addresses of its
        namespace as the inventory holds them (the controller refuses its claim such an address anyway)."""
        key = o.pool_of(obj)
        pool = self.inventory.get(key.kind, key.namespace, key.name) if key is not None else None
        if pool is None or o.is_deleting(pool):
            return []  # not known yet (just created, or not watched): the controller judges the claim
        model, _ = self.inventory.pool_model(pool)
        ip = o.address_ip(obj)
        if model is None or ip is None or ip.version != model.version:
            return capi_address_problems(obj, pool)
        withheld = [(model.unit_of(w.first), model.unit_of(w.last)) for w in self.inventory.withheld(key)]
        namespace, claim = o.namespace(obj), o.claim_of_capi_address(obj)
        unique = poolkind.REGISTRY[key.kind].unique_in_namespace
        held = [a for filed, a in self.inventory.addresses_at(namespace, ip.version, int(ip))
                if filed == key or (unique and poolkind.REGISTRY[filed.kind].unique_in_namespace)]
        lock_namespace = namespace if not poolkind.REGISTRY[key.kind].cluster_scoped else self.inventory.lock_namespace
        lock = self.inventory.get(kinds.IPADDRESS, lock_namespace, model.lock_name(model.unit_of(int(ip))))
        if lock is not None:
            held.append(lock)
        others = [a for a in held if not o.is_deleting(a) and not _names_claim(a, namespace, claim)]
        return capi_address_problems(obj, pool, withheld, others)

    def _judge(self, operation: str | None, obj: dict, old: dict | None,
               pools: list[dict] | None = None, live: "Live | None" = None) -> list[Problem]:
        if operation == "DELETE":
            if live is None or not live.loaded:
                # Never hold a deletion on what is not known: the pool's finalizer keeps it anyway.
                return []
            return validate_delete(obj, live.in_use)
        if live is not None and not live.loaded:
            raise _NotReady("the IPAM controller is still reading the cluster; try again in a few seconds")
        if operation == "UPDATE" and isinstance(old, dict):
            problems = validate_update(old, obj, live.in_use if live is not None else None)
            if live is not None and live.kept:
                problems += preallocated_kept_problems(obj, live.kept)
        else:
            problems = validate(obj)
        if live is not None and _unique_in_namespace(kinds.kind_of(obj)) and not [p for p in problems if not p.warning]:
            others = live.pools
            if pools is not None:  # the namespace's IPPools as the API server holds them now
                others = [p for p in others if kinds.kind_of(p) != kinds.IPPOOL] + pools
            problems += overlap_problems(obj, [p for p in others if not o.is_deleting(p)])
        if live is not None:
            problems += live.problems
        if live is not None and live.near and not [p for p in problems if not p.warning]:
            problems += shared_address_problems(obj, live.near, live.lock_namespace)
        return problems

    def _knows(self, namespace: str) -> bool:
        return not self.namespaces or namespace in self.namespaces

    @staticmethod
    def _default(uid: str, obj: dict) -> dict:
        """The defaults of the object's kind of pool, as a JSON patch."""
        kind = poolkind.kind_named(kinds.kind_of(obj))
        patch = kind.default(obj) if kind is not None and kind.default is not None else []
        response = _allowed(uid)
        if patch:
            response["patchType"] = "JSONPatch"
            response["patch"] = base64.b64encode(json.dumps(patch).encode()).decode()
        return response


@dataclass(frozen=True)
class Live:
    """The inventory's part in judging a pool: copied on the controller's loop, read on a judge's thread."""

    loaded: bool
    in_use: dict[str, str]  # address name -> IP, of the pool under review
    pools: list[dict]       # the namespace's pools of the kinds that keep an IP unique there, but those being deleted
    problems: list[Problem] = field(default_factory=list)  # found while reading (a Cluster API IPAddress)
    # The pools it keeps its IPs apart from across namespaces, and whether it does now (``Inventory.near_pools``).
    near: list = field(default_factory=list)
    lock_namespace: str = ""
    kept: dict[str, str] = field(default_factory=dict)  # "<kind> <name>" -> IP kept for a claim of the pool


class _NotReady(Exception):
    pass


def _unique_in_namespace(kind: Any) -> bool:
    """A kind of pool whose IPs are unique among the pools of its namespace (overlaps withheld and warned)."""
    pool_kind = poolkind.kind_named(kind)
    return pool_kind is not None and pool_kind.unique_in_namespace


def _names_claim(address: dict, namespace: str, claim: o.ClaimKey | None) -> bool:
    """Whether an address (of either API) was made for the Cluster API claim ``claim`` of ``namespace``."""
    if kinds.kind_of(address) == kinds.CAPI_ADDRESS:
        return o.namespace(address) == namespace and o.claim_of_capi_address(address) == claim
    named = o.spec(address).get("claim") or {}
    return claim is not None and named.get("kind") == kinds.CAPI_CLAIM[1] and named.get("name") == claim[1] \
        and (named.get("namespace") or o.namespace(address)) == namespace


def _with_namespace(obj: Any, namespace: Any) -> Any:
    """The object as stored: in the request's namespace (a create may leave metadata.namespace out)."""
    if not isinstance(obj, dict) or not isinstance(namespace, str) or not namespace:
        return obj
    meta = obj.get("metadata") if isinstance(obj.get("metadata"), dict) else {}
    if meta.get("namespace") == namespace:
        return obj
    return dict(obj, metadata=dict(meta, namespace=namespace))


# What an answer may carry: the API server shows the message to whoever made the request, puts the
# warnings in its response headers, and we log the message. A refusal of the largest object the
# rules can find fault with (hundreds of problems) stays a few KiB.
MESSAGE_CHARS = 4096       # a refusal's message
SHOWN_CHARS = 512          # one cause's or one warning's text
SHOWN_ITEMS = 16           # causes, warnings


def _listed(items: list[str], what: str) -> list[str]:
    shown = [clipped(item, SHOWN_CHARS) for item in items[:SHOWN_ITEMS]]
    if len(items) > SHOWN_ITEMS:
        shown.append(f"… and {len(items) - SHOWN_ITEMS} more {what}")
    return shown


def _allowed(uid: str, warnings: list[str] | None = None) -> dict:
    response: dict[str, Any] = {"uid": uid, "allowed": True}
    if warnings:
        response["warnings"] = _listed(warnings, "warnings")
    return response


def _denied(uid: str, code: int, reason: str, message: str, warnings: list[str] | None = None,
            problems: list[Problem] = ()) -> dict:
    status: dict[str, Any] = {"code": code, "reason": reason, "message": clipped(message, MESSAGE_CHARS)}
    if problems:
        status["details"] = {"causes": [
            {"field": clipped(p.field, SHOWN_CHARS),
             "message": clipped(_short(p).removeprefix(f"{p.field}: "), SHOWN_CHARS),
             "reason": "FieldValueInvalid"} for p in problems[:SHOWN_ITEMS]]}
    response = {"uid": uid, "allowed": False, "status": status}
    if warnings:
        response["warnings"] = _listed(warnings, "warnings")
    return response


def _invalid_message(obj: dict, problems: list[Problem]) -> str:
    kind, group = obj.get("kind"), kinds.group_of(str(obj.get("apiVersion") or ""))
    what = f'{kind}.{group} "{o.name(obj)}"'
    text, shown = f"{what} is invalid: ", 0
    for problem in problems:  # whole problems while they fit, then how many more
        part = ("; " if shown else "") + _short(problem)
        if len(text) + len(part) > MESSAGE_CHARS - 40:
            break
        text, shown = text + part, shown + 1
    if shown < len(problems):
        text += f"{'; ' if shown else ''}… and {len(problems) - shown} more problem(s)"
    return text


def _short(problem: Problem) -> str:
    """A problem without the object in front (the API server names the object)."""
    return str(Problem(problem.field, problem.value, problem.message, problem.warning)).removeprefix("warning: ")
