"""Admission webhooks, served over TLS by the controller process.

The API server asks before an IPPool, IPClaim, IPAddress, or a Cluster API
IPAddressClaim on one of our pools is created, changed or (for pools)
deleted. The answer comes from the same rules as ``metal3-ipam validate``
(:mod:`metal3_ipam.core.validation`); the rules that need the live state (a
pool overlapping another of its namespace, a pool update dropping an address
in use, a pool deleted while addresses are handed out from it) read the
controller's inventory, which the watches keep current; the pools a new or
changed pool is checked against for overlap are read from the API server
(see ``Admission.current_pools``).

The same server answers the conversion webhook of the CRDs served at several versions
(``PoolKind.convert``) at ``/convert`` (:data:`CONVERSION_PATH`, which the CRDs name) with
:mod:`metal3_ipam.core.conversion`, object by object, under the same bounds
but for the body's size (a review holds a whole LIST: :data:`MAX_CONVERSION_BYTES`).

:data:`HOOKS` is the one description of the webhooks: the server routes by
it, and ``config/webhook/manifests.yaml`` is generated from it
(:mod:`metal3_ipam.packaging`), so paths, rules and policies cannot drift.

Why the policies are what they are:

- Create and spec changes: ``failurePolicy: Fail``. The CRD schema cannot say
  everything (two pools of a namespace sharing addresses under different
  namePrefixes would hand an IP out twice), so nothing unchecked gets in while
  the controller is down. This cannot wedge ``clusterctl move``: it creates
  the objects in the target, whose controller ``clusterctl init`` installed,
  before it deletes anything in the source, and retries a refused create.
- Updates that leave ``spec`` alone (labels, annotations, finalizers, owner
  references — all ``clusterctl move`` and the garbage collector ever change)
  never reach the webhook (``matchConditions``), so an outage cannot block them;
  but a global pool's ``ipam.metal3.io/separate-network`` annotation, which
  changes what it shares and withholds, is judged and warned of as its spec is.
- Pool deletion: ``failurePolicy: Ignore`` with a short timeout, and
  ``matchConditions`` that skip deletions marked
  ``clusterctl.cluster.x-k8s.io/delete-for-move`` and deletions by the
  namespace controller: a controller outage never blocks ``clusterctl move``
  or a namespace deletion. The pool's finalizer still keeps it until its
  addresses are gone.
- Defaulting: ``failurePolicy: Ignore``; the CRD schema sets the same default.
- IPAddressClaims on other providers' pools never reach us (``matchConditions``
  on ``spec.poolRef.apiGroup``): our outage is not theirs. An update whose old
  object names one of our pools does (its ``oldObject``): a claim moved away
  from our pools is refused, as Cluster API refuses any ``poolRef`` change.
- Cluster API IPAddresses reach us only on create, naming one of our pools and
  without an owner reference to a claim (written by hand, restored): what an
  IPAM or ``clusterctl move`` writes never waits on us.
"""

from __future__ import annotations

import array
import asyncio
import base64
import concurrent.futures
import contextlib
import functools
import itertools
import json
import logging
import math
import os
import queue
import re
import socket
import ssl
import sys
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Iterable, Iterator

from aiohttp import web
from prometheus_client import Counter, Histogram

from ..core import kinds
from ..core import conversion
from ..core.conversion import CONVERSION_PATH
from ..core import poolkind
from ..core import objects as o
from ..core.inventory import Inventory
from ..core.naming import is_dns1123_subdomain
from ..core.overlap import separate_network
from ..core.problems import Problem
from ..core.validation import (addresses_in_use, capi_address_problems, overlap_problems, preallocated_kept_problems,
                               shared_address_problems, unmarked_network_problems, validate, validate_delete,
                               validate_update, written_before_its_claim)

log = logging.getLogger("metal3_ipam.webhook")

DECISIONS = Counter("metal3_ipam_admission_total", "Admission reviews answered",
                    ["webhook", "operation", "allowed"])
REVIEW_SECONDS = Histogram("metal3_ipam_admission_seconds", "Time to answer one admission review",
                           buckets=(0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 1))

CERT_FILE, KEY_FILE = "tls.crt", "tls.key"
DEFAULT_CERT_DIR = "/tmp/k8s-webhook-server/serving-certs"
DEFAULT_PORT = 9443

# -- what the API server is told to send ----------------------------------------------

_ANNOTATIONS = "has({o}.metadata.annotations) && '{key}' in {o}.metadata.annotations ? " \
               "{o}.metadata.annotations['{key}'] : ''"


def _spec_changed() -> dict:
    return {"name": "spec-changed",
            "expression": "request.operation != 'UPDATE' || !has(object.spec) || !has(oldObject.spec)"
                          " || object.spec != oldObject.spec"}


def _spec_or_requested_ip_changed() -> dict:
    annotation = lambda obj: _ANNOTATIONS.format(o=obj, key=kinds.IP_ADDRESS_ANNOTATION)  # noqa: E731
    return {"name": "spec-or-requested-ip-changed",
            "expression": "request.operation != 'UPDATE' || !has(object.spec) || !has(oldObject.spec)"
                          f" || object.spec != oldObject.spec || ({annotation('object')}) != ({annotation('oldObject')})"}


def _spec_or_separate_network_changed() -> dict:
    """A global pool's spec, or whether it is a separate network (what it shares and withholds), changed."""
    annotation = lambda obj: _ANNOTATIONS.format(o=obj, key=kinds.SEPARATE_NETWORK_ANNOTATION)  # noqa: E731
    return {"name": "spec-or-separate-network-changed",
            "expression": "request.operation != 'UPDATE' || !has(object.spec) || !has(oldObject.spec)"
                          f" || object.spec != oldObject.spec || ({annotation('object')}) != ({annotation('oldObject')})"}


NOT_FOR_MOVE = {"name": "not-delete-for-move",
                "expression": "!has(oldObject.metadata.annotations) || "
                              f"!('{kinds.DELETE_FOR_MOVE_ANNOTATION}' in oldObject.metadata.annotations)"}
# The namespace controller, under its own service account or (without
# --use-service-account-credentials) as kube-controller-manager itself.
NAMESPACE_CONTROLLER_USERS = ("system:serviceaccount:kube-system:namespace-controller",
                              "system:kube-controller-manager")
NOT_NAMESPACE_TEARDOWN = {"name": "not-namespace-teardown",
                          "expression": "!(request.userInfo.username in ["
                                        + ", ".join(f"'{u}'" for u in NAMESPACE_CONTROLLER_USERS) + "])"}


def _our_pool_expression() -> str:
    """CEL: a claim's poolRef names a kind of pool this controller serves (by group, or in a group shared
    with other providers by group and kind: their claims never wait on these webhooks), now or, on an
    update, before it: an update moving a claim away from our pools is ours to refuse (``oldObject`` is
    null on a create)."""
    def names_ours(obj: str) -> str:
        terms = []
        for group, served in sorted(poolkind.claim_pool_groups().items()):
            term = f"{obj}.spec.poolRef.apiGroup == '{group}'"
            if served is not None:
                term += f" && has({obj}.spec.poolRef.kind) && {obj}.spec.poolRef.kind in {sorted(served)!r}"
            terms.append(f"({term})")
        return f"has({obj}.spec) && has({obj}.spec.poolRef) && has({obj}.spec.poolRef.apiGroup) && (" \
            + " || ".join(terms) + ")"
    return f"({names_ours('object')}) || (request.operation == 'UPDATE' && oldObject != null && " \
        f"({names_ours('oldObject')}))"


OUR_POOL = {"name": "metal3-pool", "expression": _our_pool_expression()}
# A Cluster API IPAddress with no owner reference to a claim (written by hand or restored): what an IPAM makes
# for its claim, or clusterctl move copies with it, never waits on this controller's webhook.
WRITTEN_BEFORE_CLAIM = {"name": "written-before-its-claim",
                        "expression": "!has(object.metadata.ownerReferences) || "
                                      f"!object.metadata.ownerReferences.exists(r, r.kind == '{kinds.CAPI_CLAIM[1]}')"}


@dataclass(frozen=True)
class Hook:
    """One webhook of the Validating/MutatingWebhookConfiguration."""

    name: str
    path: str
    kind: tuple[str, str]
    versions: tuple[str, ...]
    resource: str
    operations: tuple[str, ...]
    failure_policy: str
    timeout_seconds: int
    mutating: bool = False
    match_conditions: tuple[dict, ...] = field(default_factory=tuple)
    scope: str = poolkind.NAMESPACED

    def configuration(self, client_config: dict) -> dict:
        """The webhook's entry in a webhook configuration; ``client_config`` must reach :attr:`path`."""
        entry = {
            "name": self.name,
            "admissionReviewVersions": ["v1"],
            "clientConfig": client_config,
            "failurePolicy": self.failure_policy,
            "matchPolicy": "Equivalent",
            "rules": [{"apiGroups": [self.kind[0]], "apiVersions": list(self.versions),
                       "operations": list(self.operations), "resources": [self.resource], "scope": self.scope}],
            "sideEffects": "None",
            "timeoutSeconds": self.timeout_seconds,
        }
        if self.match_conditions:
            entry["matchConditions"] = [dict(c) for c in self.match_conditions]
        if self.mutating:
            entry["reinvocationPolicy"] = "Never"
        return entry


def pool_hooks(kind: poolkind.PoolKind) -> tuple[Hook, ...]:
    """A kind of pool's webhooks: defaulting (when it defaults), validation, and deletion (a pool in use stays)."""
    group, name = kind.kind
    lower = name.lower()
    path = f"{group.replace('.', '-')}-{kind.versions[0]}-{lower}"
    common = dict(kind=kind.kind, versions=kind.versions, resource=kind.plural, scope=kind.scope)
    default = (Hook(f"default.{lower}.{group}", f"/mutate-{path}", operations=("CREATE", "UPDATE"),
                    failure_policy="Ignore", timeout_seconds=5, mutating=True, **common),) if kind.default else ()
    return (*default,
            Hook(f"validation.{lower}.{group}", f"/validate-{path}", operations=("CREATE", "UPDATE"),
                 failure_policy="Fail", timeout_seconds=10,
                 match_conditions=(_spec_or_separate_network_changed() if kind.cluster_scoped else _spec_changed(),),
                 **common),
            Hook(f"deletion.{lower}.{group}", f"/validate-{path}", operations=("DELETE",), failure_policy="Ignore",
                 timeout_seconds=5, match_conditions=(NOT_FOR_MOVE, NOT_NAMESPACE_TEARDOWN), **common))


METAL3_VERSIONS = (kinds.METAL3_VERSION,)
HOOKS: tuple[Hook, ...] = (
    *(hook for kind in poolkind.REGISTRY.values() for hook in pool_hooks(kind)),
    Hook("validation.ipclaim.ipam.metal3.io", "/validate-ipam-metal3-io-v1alpha1-ipclaim", kinds.IPCLAIM,
         METAL3_VERSIONS, "ipclaims", ("CREATE", "UPDATE"), "Fail", 10,
         match_conditions=(_spec_or_requested_ip_changed(),)),
    Hook("validation.ipaddress.ipam.metal3.io", "/validate-ipam-metal3-io-v1alpha1-ipaddress", kinds.IPADDRESS,
         METAL3_VERSIONS, "ipaddresses", ("CREATE", "UPDATE"), "Fail", 10, match_conditions=(_spec_changed(),)),
    Hook("validation.ipaddressclaim.ipam.metal3.io", "/validate-ipam-cluster-x-k8s-io-ipaddressclaim",
         kinds.CAPI_CLAIM, kinds.CAPI_IPAM_VERSIONS, "ipaddressclaims", ("CREATE", "UPDATE"), "Fail", 10,
         match_conditions=(OUR_POOL, _spec_or_requested_ip_changed())),
    # Its spec is immutable (Cluster API's own webhook): judged once, when written before its claim.
    Hook("validation.clusterapi-ipaddress.ipam.metal3.io", "/validate-ipam-cluster-x-k8s-io-ipaddress",
         kinds.CAPI_ADDRESS, kinds.CAPI_IPAM_VERSIONS, "ipaddresses", ("CREATE",), "Fail", 10,
         match_conditions=(OUR_POOL, WRITTEN_BEFORE_CLAIM)),
)


def configurations(client_config: Callable[[Hook], dict], name: str | None = "metal3-ipam") -> list[dict]:
    """The Mutating- and ValidatingWebhookConfiguration for :data:`HOOKS`.

    ``client_config(hook)`` gives each webhook's ``clientConfig`` (a Service
    reference in a cluster, a URL and CA bundle in tests); ``name`` prefixes
    the configurations' names.
    """
    out = []
    for kind, mutating in (("MutatingWebhookConfiguration", True), ("ValidatingWebhookConfiguration", False)):
        base = f"{'mutating' if mutating else 'validating'}-webhook-configuration"
        out.append({"apiVersion": "admissionregistration.k8s.io/v1", "kind": kind,
                    "metadata": {"name": f"{name}-{base}" if name else base},
                    "webhooks": [h.configuration(client_config(h)) for h in HOOKS if h.mutating == mutating]})
    return out


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
LOGGED_CHARS = 512         # the part of a message a log line repeats


def clipped(text: str, limit: int) -> str:
    """``text`` cut to at most ``limit`` characters, ending in "…" when cut."""
    return text if len(text) <= limit else text[:limit - 1] + "…"


def printable(text: str) -> str:
    """``text`` in one line: line breaks and other unprintable characters escaped (a review sent straight
    to the port may carry them in any name or value)."""
    if text.isprintable():
        return text
    return "".join(c if c.isprintable() else c.encode("unicode_escape").decode("ascii") for c in text)


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


# -- serving ----------------------------------------------------------------------------

class CertificateFiles:
    """The serving certificate in a directory, loaded again whenever its files change.

    cert-manager renews certificates in place (a Secret volume swaps its
    files), so the TLS context is reloaded without a restart; connections
    already open keep the certificate they started with.
    """

    def __init__(self, directory: str | os.PathLike) -> None:
        self.directory = Path(directory)
        self.context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        self.context.minimum_version = ssl.TLSVersion.TLSv1_2
        self._stamp: tuple | None = None
        self.loads = 0
        self.load()

    @property
    def cert(self) -> Path:
        return self.directory / CERT_FILE

    @property
    def key(self) -> Path:
        return self.directory / KEY_FILE

    def _current_stamp(self) -> tuple:
        stamps = []
        for path in (self.cert, self.key):
            st = path.stat()  # follows the symlinks a Secret volume is made of
            stamps.append((st.st_ino, st.st_mtime_ns, st.st_size))
        return tuple(stamps)

    def load(self) -> None:
        stamp = self._current_stamp()
        self.context.load_cert_chain(self.cert, self.key)
        self._stamp = stamp
        self.loads += 1

    def reload_if_changed(self) -> bool:
        try:
            if self._current_stamp() == self._stamp:
                return False
            self.load()
        except (OSError, ssl.SSLError) as err:
            # Half-written files during a swap: keep serving the old certificate, look again soon.
            log.warning("serving certificate in %s not reloaded: %s", self.directory, err)
            return False
        log.info("serving certificate reloaded from %s", self.directory)
        return True


# -- reading a review -------------------------------------------------------------------

# The largest body read. The API server sends an AdmissionReview of the object as it came in a
# request (kube-apiserver's MaxRequestBodyBytes: 3 MiB; the mutating hook sees it before the CRD
# schema's caps do) and, on an update or a delete, the object as stored (bounded by etcd's request
# limit, 1.5 MiB by default; some clusters raise it towards the 3 MiB the API server accepts),
# re-encoded as JSON, plus an envelope of a few KiB (uid, kinds, userInfo with its groups). Two
# objects of 3 MiB and 256 KiB of envelope cover everything it can send; a larger body is not
# from it and is refused with 413 before it is read.
MAX_REVIEW_BYTES = 2 * 3 * 1024 * 1024 + 256 * 1024
# Objects and lists a body may hold (its "{" and "[" outside strings: an object's annotations may
# hold 256 KiB of brackets). The largest review the CRD schemas let through has a few thousand (256 pool
# entries, 4096 preAllocations in one map, managedFields); this bound keeps a body's parsed form
# under ~15 times its size (a body of empty lists would be ~25 times).
MAX_REVIEW_CONTAINERS = 100_000
REVIEW_VERSION = "admission.k8s.io/v1"
OPERATIONS = ("CREATE", "UPDATE", "DELETE", "CONNECT")
MAX_UID_CHARS = 128  # echoed in the answer; the API server's are 36
# The request's fields that are read, or that the API server always sends in this shape.
_REQUEST_FIELDS: dict[str, tuple[type, ...]] = {
    "uid": (str,), "operation": (str,), "kind": (dict,), "resource": (dict,), "subResource": (str,),
    "requestKind": (dict,), "requestResource": (dict,), "requestSubResource": (str,), "name": (str,),
    "namespace": (str,), "object": (dict, type(None)), "oldObject": (dict, type(None)), "userInfo": (dict,),
    "dryRun": (bool,), "options": (dict, type(None)),
}


class Malformed(ValueError):
    """A body that is not an AdmissionReview the API server would send: answered 400, or 413."""

    def __init__(self, reason: str, status: int = 400) -> None:
        super().__init__(clipped(reason, 200))
        self.status = status


def _no_constant(name: str) -> Any:
    raise Malformed(f"{name} is not a JSON value")


def _finite(text: str) -> float:
    value = float(text)
    if not math.isfinite(value):
        raise Malformed(f"the number {clipped(text, 40)} is out of range")
    return value


_JSON_STRING = re.compile(rb'"[^"\\]*(?:\\.[^"\\]*)*"', re.S)


def _containers(body: bytes | bytearray) -> int:
    """The objects and lists a JSON body holds, brackets inside its strings not counted (an annotation may hold
    256 KiB of them): exact for as much of the body as parses."""
    bare = _JSON_STRING.sub(b'""', body)
    return bare.count(b"{") + bare.count(b"[")


def _json_object(body: bytes | bytearray) -> dict:
    """A review's body parsed, within the bounds on its size and its objects and lists; else :class:`Malformed`."""
    if len(body) > MAX_REVIEW_BYTES:
        raise Malformed(f"the body has {len(body)} bytes; at most {MAX_REVIEW_BYTES} are read", 413)
    if body.count(b"{") + body.count(b"[") > MAX_REVIEW_CONTAINERS \
            and _containers(body) > MAX_REVIEW_CONTAINERS:
        raise Malformed(f"the body holds more than {MAX_REVIEW_CONTAINERS} objects and lists", 413)
    try:
        review = json.loads(body, parse_constant=_no_constant, parse_float=_finite)
    except RecursionError:
        raise Malformed("the body is nested too deeply") from None
    except Malformed:
        raise
    except ValueError as err:  # UnicodeDecodeError too; and integers of over 4300 digits
        raise Malformed(f"the body is not JSON: {err}") from None
    if not isinstance(review, dict):
        raise Malformed("the body is not a JSON object")
    return review


def _enveloped(body: bytes | bytearray, api_version: str, kind: str) -> tuple[dict, dict]:
    """A review of ``api_version`` and ``kind`` and its ``request`` object, or :class:`Malformed`."""
    review = _json_object(body)
    if review.get("apiVersion") != api_version or review.get("kind") != kind:
        raise Malformed(f"not a{'n' if kind[0] in 'AEIOU' else ''} {kind} of {api_version} (apiVersion "
                        f"{_shown(review.get('apiVersion'))}, kind {_shown(review.get('kind'))})")
    request = review.get("request")
    if not isinstance(request, dict):
        raise Malformed(f"request is {_shown(request)}, not an object")
    return review, request


def read_review(body: bytes | bytearray) -> tuple[str, dict]:
    """The apiVersion and ``request`` of an AdmissionReview body, or :class:`Malformed` saying what is wrong."""
    _, request = _enveloped(body, REVIEW_VERSION, "AdmissionReview")
    for name, types in _REQUEST_FIELDS.items():
        if name in request and not isinstance(request[name], types):
            raise Malformed(f"request.{name} is {_shown(request[name])}, not "
                            + " or ".join("null" if t is type(None) else _JSON_TYPES[t] for t in types))
    uid, operation, kind = request.get("uid"), request.get("operation"), request.get("kind")
    if not uid or len(uid) > MAX_UID_CHARS:
        raise Malformed(f"request.uid {_shown(uid)} is missing or longer than {MAX_UID_CHARS} characters")
    if operation not in OPERATIONS:
        raise Malformed(f"request.operation {_shown(operation)} is not one of {', '.join(OPERATIONS)}")
    if not isinstance(kind, dict) or not all(isinstance(kind.get(k, ""), str) for k in ("group", "version", "kind")):
        raise Malformed(f"request.kind {_shown(kind)} is not a group, version and kind")
    return REVIEW_VERSION, request


_JSON_TYPES = {str: "a string", dict: "an object", bool: "a boolean"}

CONVERSION_REVIEW_VERSION = "apiextensions.k8s.io/v1"


# The largest body ``/convert`` reads. kube-apiserver converts a custom resource as the storage of the version
# asked decodes it, one object per ConversionReview (measured with 1.35: a LIST of 40 pools at v1alpha1 comes
# as reviews of one object each); but its converter takes lists too (apiextensions-apiserver's webhook
# converter sends every object of a list that is not at the desired version in one review), and its request
# limit (3 MiB) bounds each object, not a list. 32 MiB holds tens of thousands of the pools converted as the API
# server stores them (about 600 bytes each with one writer's managedFields), or ten objects at that limit; a
# larger body is refused (413). A review is read object by object (:func:`read_conversion_body`) and its
# answer written so: one costs its body, its answer and the parse of one object, never the parse of the
# whole list; the bodies of ConversionReviews held at once are bounded apart from the AdmissionReviews'
# (``Limits``), so a conversion under way never has a pool's create refused.
MAX_CONVERSION_BYTES = 32 * 1024 * 1024
# The bytes of a conversion body per object of it, at least: the API server's objects carry apiVersion, kind
# and metadata, so a body of many tiny objects (each costing the reader more than its bytes) is not one.
MIN_CONVERTED_OBJECT_BYTES = 64
_WHITESPACE = re.compile(rb"[ \t\n\r]*")
_FIRST_READ = 4096  # bytes a value is first looked for in; four times more each time it is longer


@dataclass(frozen=True)
class ConversionBody:
    """A ConversionReview's body as :func:`read_conversion_body` found it: its envelope (the review with
    ``request.objects`` empty) and where each object lies in the body (parsed again, one at a time, to be
    converted)."""

    review: dict
    body: bytes | bytearray
    starts: array.array
    ends: array.array

    def objects(self) -> Iterator[dict]:
        for start, end in zip(self.starts, self.ends):
            yield _json_object(self.body[start:end])


def read_conversion_body(body: bytes | bytearray) -> ConversionBody:
    """A ConversionReview body as the API server sends it to a CRD's conversion webhook (its ``request`` has a
    uid, the desired apiVersion and a list of objects; whether each can be converted is ``core.conversion``'s
    to say, in the answer), read without
    ever parsing more than one value of it at a time: each object of ``request.objects`` and each other
    value at most :data:`MAX_REVIEW_BYTES` long and within :data:`MAX_REVIEW_CONTAINERS` objects and lists,
    as a whole AdmissionReview is; the review but its objects within the same bounds; the objects at least
    :data:`MIN_CONVERTED_OBJECT_BYTES` each on average. Else :class:`Malformed` (413 past a bound)."""
    if len(body) > MAX_CONVERSION_BYTES:
        raise Malformed(f"the body has {len(body)} bytes; at most {MAX_CONVERSION_BYTES} are read", 413)
    reader = _ConversionReader(body)
    review = reader.envelope()
    if review.get("apiVersion") != CONVERSION_REVIEW_VERSION or review.get("kind") != "ConversionReview":
        raise Malformed(f"not a ConversionReview of {CONVERSION_REVIEW_VERSION} (apiVersion "
                        f"{_shown(review.get('apiVersion'))}, kind {_shown(review.get('kind'))})")
    request = review.get("request")
    if not isinstance(request, dict):
        raise Malformed(f"request is {_shown(request)}, not an object")
    if reader.objects_seen != 1:
        raise Malformed("request.objects is missing" if not reader.objects_seen else "request.objects is given twice")
    uid, desired = request.get("uid"), request.get("desiredAPIVersion")
    if not isinstance(uid, str) or not uid or len(uid) > MAX_UID_CHARS:
        raise Malformed(f"request.uid {_shown(uid)} is missing or longer than {MAX_UID_CHARS} characters")
    if not isinstance(desired, str) or not desired:
        raise Malformed(f"request.desiredAPIVersion {_shown(desired)} is not an apiVersion")
    return ConversionBody(review, body, reader.starts, reader.ends)


class _ConversionReader:
    """Walks a ConversionReview body: the top-level object and its ``request`` key by key, the objects of
    ``request.objects`` one at a time, every other value parsed whole (within the bounds)."""

    def __init__(self, body: bytes | bytearray) -> None:
        self.body = body
        self.envelope_bytes = 0  # of the values parsed that are not objects of request.objects
        self.objects_seen = 0
        self.starts, self.ends = array.array("Q"), array.array("Q")

    def envelope(self) -> dict:
        at = self._skip(0)
        if self.body[at:at + 1] != b"{":
            raise Malformed("the body is not a JSON object")
        review, at = self._object(at, self._top_field)
        if self._skip(at) != len(self.body):
            raise Malformed("the body is not JSON: extra data after the review")
        return review

    def _top_field(self, key: str, at: int) -> tuple[Any, int]:
        if key == "request" and self.body[at:at + 1] == b"{":
            return self._object(at, self._request_field)
        return self._value(at)

    def _request_field(self, key: str, at: int) -> tuple[Any, int]:
        if key != "objects":
            return self._value(at)
        self.objects_seen += 1
        if self.body[at:at + 1] != b"[":
            value, end = self._value(at)
            raise Malformed(f"request.objects is {_shown(value)}, not a list of objects")
        at = self._skip(at + 1)
        if self.body[at:at + 1] == b"]":
            return [], at + 1
        while True:
            if self.body[at:at + 1] != b"{":
                value, _ = self._value(at)
                raise Malformed(f"request.objects holds {_shown(value)}, not only objects")
            _, end = _value_at(self.body, at)
            self.starts.append(at)
            self.ends.append(end)
            if len(self.starts) * MIN_CONVERTED_OBJECT_BYTES > len(self.body):
                raise Malformed(f"request.objects holds more than one object per {MIN_CONVERTED_OBJECT_BYTES} "
                                "bytes of the body", 413)
            at = self._skip(end)
            if self.body[at:at + 1] == b"]":
                return [], at + 1
            if self.body[at:at + 1] != b",":
                raise Malformed("the body is not JSON: request.objects is not a list")
            at = self._skip(at + 1)

    def _object(self, at: int, field: Callable[[str, int], tuple[Any, int]]) -> tuple[dict, int]:
        """The object at ``at`` (a ``{``), each value read by ``field(key, start)``; and the byte after it."""
        out: dict[str, Any] = {}
        at = self._skip(at + 1)
        if self.body[at:at + 1] == b"}":
            return out, at + 1
        while True:
            key, at = self._value(at)
            at = self._skip(at)
            if not isinstance(key, str) or self.body[at:at + 1] != b":":
                raise Malformed("the body is not JSON: an object's key is not a string followed by ':'")
            out[key], at = field(key, self._skip(at + 1))
            at = self._skip(at)
            if self.body[at:at + 1] == b"}":
                return out, at + 1
            if self.body[at:at + 1] != b",":
                raise Malformed("the body is not JSON: expected ',' or '}' in an object")
            at = self._skip(at + 1)

    def _value(self, at: int) -> tuple[Any, int]:
        value, end = _value_at(self.body, at)
        self.envelope_bytes += end - at
        if self.envelope_bytes > MAX_REVIEW_BYTES:
            raise Malformed(f"the review holds more than {MAX_REVIEW_BYTES} bytes besides its objects", 413)
        return value, end

    def _skip(self, at: int) -> int:
        return _WHITESPACE.match(self.body, at).end()  # type: ignore[union-attr]


def _value_at(body: bytes | bytearray, at: int) -> tuple[Any, int]:
    """The JSON value that starts at byte ``at`` of ``body``, and the byte after it: parsed from a slice that
    grows until it holds the value, at most :data:`MAX_REVIEW_BYTES` long (longer: 413), within the bounds
    of :func:`_json_object`."""
    size = _FIRST_READ
    while True:
        piece = body[at:at + size]
        whole = at + size >= len(body)
        try:
            text = piece.decode()
        except UnicodeDecodeError as err:
            if whole or err.start < len(piece) - 3:
                raise Malformed(f"the body is not JSON: {err}") from None
            text = piece[:err.start].decode()  # a character cut at the slice's end
        if piece.count(b"{") + piece.count(b"[") > MAX_REVIEW_CONTAINERS and _containers(piece) > MAX_REVIEW_CONTAINERS:
            raise Malformed(f"a value holds more than {MAX_REVIEW_CONTAINERS} objects and lists", 413)
        try:
            value, end = _DECODER.raw_decode(text)
        except RecursionError:
            raise Malformed("the body is nested too deeply") from None
        except json.JSONDecodeError as err:
            cut = err.pos >= len(text) - 8 or err.msg.startswith("Unterminated string")
            if whole or not cut:
                raise Malformed(f"the body is not JSON: {err}") from None
            if size >= MAX_REVIEW_BYTES:
                raise Malformed(f"a value of the body is longer than {MAX_REVIEW_BYTES} bytes", 413)
            size = min(MAX_REVIEW_BYTES, size * 4)
            continue
        except ValueError as err:  # integers of over 4300 digits
            raise Malformed(f"the body is not JSON: {err}") from None
        if end >= len(text) and not whole and type(value) in (int, float):  # it may go on past the slice
            if size >= MAX_REVIEW_BYTES:
                raise Malformed(f"a value of the body is longer than {MAX_REVIEW_BYTES} bytes", 413)
            size = min(MAX_REVIEW_BYTES, size * 4)
            continue
        return value, at + len(text[:end].encode())


_DECODER = json.JSONDecoder(parse_constant=_no_constant, parse_float=_finite)


def _shown(value: Any) -> str:
    """A value of a malformed request, short enough for a log line."""
    if value is None:
        return "null"
    if isinstance(value, (dict, list)):
        return f"a{'n object' if isinstance(value, dict) else ' list'} of {len(value)}"
    return clipped(repr(value), 60)


# -- serving ----------------------------------------------------------------------------

@dataclass(frozen=True)
class Limits:
    """What a client of the webhook server may take of it (README, "Admission webhooks")."""

    review_bytes: int = MAX_REVIEW_BYTES   # a larger body: 413, before it is read
    small_review_bytes: int = 64 * 1024    # always read; beyond this, bodies share ``large_reviews_bytes``
    large_reviews_bytes: int = 2 * MAX_REVIEW_BYTES  # bytes of large bodies held at once; past it: 503
    conversion_bytes: int = MAX_CONVERSION_BYTES  # a larger ConversionReview body (``/convert``): 413
    large_conversions_bytes: int = MAX_CONVERSION_BYTES  # the same, of large ConversionReview bodies
    connections: int = 64                  # open at once, TLS handshakes included
    handshake_seconds: float = 5.0         # for the TLS handshake
    read_seconds: float = 5.0              # for a request's body, from its headers on
    idle_seconds: float = 15.0             # with no request under way, or with its headers unfinished
    judge_seconds: float = 4.0             # for the answer, from the body read (queueing included)
    queued_reviews: int = 8                # large ones waiting for a judge or being judged: past it, 503
    header_line_bytes: int = 8190          # the request line, and any one header
    headers: int = 64


class _OneLine(logging.LoggerAdapter):
    """aiohttp's reports of requests it could not read (a header too long, too many): one line, the reason
    in it, no traceback."""

    def exception(self, msg: str, *args: Any, exc_info: Any = True, **kwargs: Any) -> None:
        self._one_line(logging.WARNING, msg, args, exc_info)

    def debug(self, msg: str, *args: Any, exc_info: Any = None, **kwargs: Any) -> None:
        # A bad method as a connection's first request (not HTTP at all) comes here, with its exception.
        self._one_line(logging.DEBUG, msg, args, exc_info)

    def _one_line(self, level: int, msg: str, args: tuple, exc_info: Any) -> None:
        if not exc_info:
            self.log(level, msg, *args)
            return
        reason = exc_info if isinstance(exc_info, BaseException) else \
            exc_info[1] if isinstance(exc_info, tuple) else sys.exc_info()[1]
        self.log(level, f"{msg}: %s", *args, clipped(" ".join(str(reason).split()), 200))


class _Refused(Exception):
    """A request answered with an HTTP error (no AdmissionReview comes back)."""

    def __init__(self, status: int, reason: str) -> None:
        super().__init__(reason)
        self.status = status


class _Lane:
    """Reviews judged one at a time on a thread of their own, smallest body first; at most ``bound``
    queued or under way.

    Judging never runs on an event loop: not the controller's (whose reconcile
    passes and watches it would hold up), nor the server's (which reads the
    other requests meanwhile). Its time is bounded by the rules' caps (a pool
    of 256 entries of 32 DNS servers each, 1024 excluded addresses, 4096
    preAllocations: about 1 s when every one of them is wrong, 0.3 s within
    64 KiB); taking the smallest first, an ordinary review of a few KiB waits
    for at most the one under way, however many large ones are queued.
    """

    def __init__(self, name: str, bound: int) -> None:
        self.bound = bound
        self.taken = 0  # changed on the server's loop only
        self._waiting: dict[concurrent.futures.Future, int] = {}  # queued or under way -> body size (ditto)
        self._uncounted: set[concurrent.futures.Future] = set()   # made way: taken already given back
        self._queue: queue.PriorityQueue = queue.PriorityQueue()
        self._order = itertools.count()
        self._thread = threading.Thread(target=self._work, name=name, daemon=True)
        self._thread.start()

    def _work(self) -> None:
        while True:
            _, _, work, future = self._queue.get()
            if work is None:
                return
            if not future.set_running_or_notify_cancel():
                continue
            try:
                future.set_result(work())
            except BaseException as err:  # noqa: BLE001 - handed to the waiting request
                future.set_exception(err)

    async def run(self, work: Callable[[], Any], size: int, deadline: float) -> Any:
        """``work()`` judged by this lane's thread, or _Refused when the queue is full or ``deadline``
        (the loop's clock) passes first."""
        if self.taken >= self.bound and not self._make_way(size):
            raise _Refused(503, f"{self.taken} reviews are waiting to be judged; try again")
        loop = asyncio.get_running_loop()
        self.taken += 1
        future: concurrent.futures.Future = concurrent.futures.Future()
        self._waiting[future] = size
        future.add_done_callback(lambda _: self._freed(loop, future))
        self._queue.put((size, next(self._order), work, future))
        done, _ = await asyncio.wait({asyncio.wrap_future(future)}, timeout=max(0.0, deadline - loop.time()))
        if not done:  # not begun: dropped; under way: it holds its place until it ends, its answer dropped
            future.cancel()
            raise _Refused(503, "not judged in time; try again")
        if future.cancelled():
            raise _Refused(503, "a smaller review took its place in the queue; try again")
        return done.pop().result()

    def _make_way(self, size: int) -> bool:
        """Full: the largest review not begun, if larger than ``size``, is dropped (answered 503) for it. The
        smallest are judged first anyway; a queue full of larger ones must not refuse them."""
        for other, other_size in sorted(self._waiting.items(), key=lambda item: -item[1]):
            if other_size <= size:
                return False
            if other.cancel():  # False: begun meanwhile
                del self._waiting[other]  # (cancel() says True again of a cancelled future)
                self._uncounted.add(other)
                self.taken -= 1
                return True
        return False

    def _freed(self, loop: asyncio.AbstractEventLoop, future: concurrent.futures.Future) -> None:
        with contextlib.suppress(RuntimeError):  # the server has stopped: nothing to count any more
            loop.call_soon_threadsafe(self._free, future)

    def _free(self, future: concurrent.futures.Future) -> None:
        self._waiting.pop(future, None)
        if future in self._uncounted:
            self._uncounted.discard(future)
        else:
            self.taken -= 1

    def close(self) -> None:
        self._queue.put((-1, -1, None, None))


class _Connection(asyncio.Protocol):
    """A client connection: aiohttp's protocol inside, and what the connection cap needs to know."""

    def __init__(self, inner: asyncio.Protocol, closed: asyncio.Future, entry: "_Open") -> None:
        self.inner, self.closed, self.entry = inner, closed, entry

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.inner.connection_made(transport)

    def connection_lost(self, exc: Exception | None) -> None:
        try:
            self.inner.connection_lost(exc)
        finally:
            if not self.closed.done():
                self.closed.set_result(None)

    def data_received(self, data: bytes) -> None:
        entry = self.entry
        if not entry.requesting:  # a request begins: it has its grace from here, not from the last answer
            entry.requesting, entry.since = True, asyncio.get_running_loop().time()
        self.inner.data_received(data)

    def eof_received(self) -> bool | None:
        return self.inner.eof_received()

    def pause_writing(self) -> None:
        self.inner.pause_writing()

    def resume_writing(self) -> None:
        self.inner.resume_writing()


# Seconds a connection may keep us waiting before it can be closed to make room: one that has sent no
# request since its handshake or its last answer, and one still in its TLS handshake (which a server
# busy with many takes longer to finish). Those past their handshake go first.
EVICTION_GRACE, HANDSHAKE_GRACE = 0.5, 1.0


@dataclass(eq=False)
class _Open:
    """An accepted connection: when it last had our attention, and whether a request of it is being answered."""

    since: float
    busy: bool = False
    requesting: bool = False  # a request's bytes have come since the last answer
    transport: asyncio.BaseTransport | None = None
    task: asyncio.Task | None = None

    @property
    def grace(self) -> float:
        return EVICTION_GRACE if self.transport is not None else HANDSHAKE_GRACE

    def drop(self) -> None:
        if self.transport is not None:
            self.transport.abort()
        elif self.task is not None:
            self.task.cancel()  # still in its TLS handshake


ACCEPT_RETRY = 0.25  # seconds before accepting again after accept() failed
REFUSED_LINGER = 0.05  # seconds a refused request's answer has to go out before its connection is cut
SWITCH_INTERVAL = 0.001  # seconds a thread holds the interpreter while another waits (see WebhookServer.start)


class WebhookServer:
    """The HTTPS server answering admission reviews, on a thread and event loop of its own.

    The API server waits for every answer, and a create our controller makes
    waits for it too: answers must not queue behind a reconcile pass on the
    controller's event loop (measured: 0.7 ms per review when idle, 40 ms
    behind a burst of 500 claims), and a review must not hold that loop up
    either. So this loop only accepts, reads and answers; reviews are judged
    on two judge threads (:class:`_Lane`: small bodies on one, large ones on
    the other, so a stream of large hostile reviews never delays the API
    server's ordinary ones); what a pool review reads of the inventory is
    copied on the controller's loop, which owns it (:meth:`Admission.live`).

    Whatever clients do, what the server holds is bounded (:class:`Limits`):
    connections are capped (when full, the one that has kept us waiting
    longest is closed), and timed out in their handshake, while idle, and
    while sending a body; bodies are read in chunks, up to a cap, with large
    ones sharing a budget; judges have a queue bound and a deadline.
    """

    def __init__(self, admission: Admission, host: str, port: int, cert_dir: str | os.PathLike,
                 reload_seconds: float = 2.0, limits: Limits = Limits()) -> None:
        self.admission = admission
        self.host, self.port = host, port
        self.certificates = CertificateFiles(cert_dir)  # fails early on missing or broken files
        self.reload_seconds = reload_seconds
        self.limits = limits
        self._main: asyncio.AbstractEventLoop | None = None
        self._loop: asyncio.AbstractEventLoop | None = None
        self._switch_interval: float | None = None  # the process's, while this server has it at 1 ms
        self._thread: threading.Thread | None = None
        # Small reviews are what the API server sends, as many at once as it has creates under way: their
        # lane holds one per connection (a connection has one request at a time in hand), so none is refused
        # for the queue; they are bounded by the connection cap, 64 KiB each, and the deadline.
        self._lanes = {"small": _Lane("judge small reviews", max(limits.queued_reviews, limits.connections)),
                       "large": _Lane("judge large reviews", limits.queued_reviews)}
        self._open: set[_Open] = set()  # every accepted connection, handshakes included
        self._by_transport: dict[asyncio.BaseTransport, _Open] = {}  # those past their handshake
        self._room: asyncio.Event | None = None
        self._large_held = [0, 0]  # bytes of large bodies held now: AdmissionReviews', ConversionReviews'
        self._fetching = asyncio.Semaphore(limits.queued_reviews)  # used on the server's loop only
        self._listers = concurrent.futures.ThreadPoolExecutor(2, thread_name_prefix="admission facts")

    async def start(self) -> "WebhookServer":
        # The judges are busy with the interpreter for up to a second per review, while this server's
        # loop and the controller's wait on sockets: every time one of those wakes it waits for the
        # interpreter, up to the switch interval. At 5 ms (the default) a burst of large hostile
        # reviews made a claim's binding ten times slower (0.04 s to 0.4 s); at 1 ms, four times.
        self._main = asyncio.get_running_loop()
        started: concurrent.futures.Future = concurrent.futures.Future()
        self._thread = threading.Thread(target=self._serve, args=(started,), name="admission webhooks",
                                        daemon=True)
        self._thread.start()
        await asyncio.wrap_future(started)  # an address in use or a bad certificate comes back here
        self._switch_interval = sys.getswitchinterval()
        sys.setswitchinterval(min(self._switch_interval, SWITCH_INTERVAL))
        return self

    def _serve(self, started: concurrent.futures.Future) -> None:
        loop = self._loop = asyncio.new_event_loop()
        asyncio.set_event_loop(loop)
        try:
            runner, listener = loop.run_until_complete(self._open_listener())
        except BaseException as err:  # noqa: BLE001 - handed to start()
            started.set_exception(err)
            loop.close()
            return
        tasks = [loop.create_task(self._reload()), loop.create_task(self._accept(listener, runner.server))]
        started.set_result(None)
        try:
            loop.run_forever()
        finally:
            for task in tasks:
                task.cancel()
            listener.close()
            for entry in list(self._open):
                entry.drop()
            loop.run_until_complete(asyncio.gather(*tasks, return_exceptions=True))
            loop.run_until_complete(runner.cleanup())
            for lane in self._lanes.values():
                lane.close()
            self._listers.shutdown(wait=False, cancel_futures=True)
            loop.close()

    async def _open_listener(self) -> tuple[web.AppRunner, socket.socket]:
        app = web.Application(client_max_size=self.limits.review_bytes)
        mutating_paths = {h.path for h in HOOKS if h.mutating}
        for path in sorted({h.path for h in HOOKS}):
            app.router.add_post(path, self._handler(mutating=path in mutating_paths, path=path))
        # The CRDs' conversion (``PoolKind.convert``): the same server, the same bounds on bodies, time, connections.
        app.router.add_post(CONVERSION_PATH, self._handler(mutating=False, path=CONVERSION_PATH))
        limits = self.limits
        runner = web.AppRunner(app, access_log=None, keepalive_timeout=limits.idle_seconds,
                               max_line_size=limits.header_line_bytes, max_field_size=limits.header_line_bytes,
                               max_headers=limits.headers, lingering_time=0, auto_decompress=False,
                               logger=_OneLine(log, {}))
        await runner.setup()
        try:
            family, *_, address = socket.getaddrinfo(self.host, self.port, type=socket.SOCK_STREAM)[0]
            # Connections past the cap wait in the kernel's queue (its memory, not ours) rather than
            # being refused by it, so that a client is answered as soon as there is room.
            listener = socket.create_server(address[:2], family=family, backlog=1024)
            listener.setblocking(False)
        except BaseException:
            await runner.cleanup()
            raise
        self._room = asyncio.Event()
        return runner, listener

    async def _accept(self, listener: socket.socket, protocols: Callable[[], asyncio.Protocol]) -> None:
        loop = asyncio.get_running_loop()
        while True:
            if len(self._open) >= self.limits.connections:
                # Full: the connection that has kept us waiting longest goes, once it has had its grace
                # (a request on its way takes milliseconds; an attacker's keeps us waiting).
                self._room.clear()
                now = loop.time()
                waiting = [e for e in self._open if not e.busy and now - e.since >= e.grace]
                if waiting:
                    oldest = min(waiting, key=lambda e: (e.transport is None, e.since))
                    log.debug("closing a webhook connection that kept us waiting %.2f s: %d are open", now - oldest.since,
                              len(self._open))
                    oldest.drop()
                with contextlib.suppress(TimeoutError):
                    async with asyncio.timeout(EVICTION_GRACE / 5):
                        await self._room.wait()
                continue
            try:
                sock, _ = await loop.sock_accept(listener)
            except OSError as err:
                # Out of descriptors or buffers (EMFILE, ENFILE, ENOBUFS), or a connection aborted in the queue:
                # the listener is sound; try again shortly rather than stop accepting for good.
                log.warning("accepting a webhook connection failed (%s); trying again in %g s",
                            err.strerror or err, ACCEPT_RETRY)
                await asyncio.sleep(ACCEPT_RETRY)
                continue
            entry = _Open(since=loop.time())
            self._open.add(entry)
            entry.task = loop.create_task(self._connection(sock, entry, protocols))

    async def _connection(self, sock: socket.socket, entry: _Open, protocols: Callable[[], asyncio.Protocol]) -> None:
        loop = asyncio.get_running_loop()
        closed = loop.create_future()
        try:
            transport, _ = await loop.connect_accepted_socket(
                lambda: _Connection(protocols(), closed, entry), sock, ssl=self.certificates.context,
                ssl_handshake_timeout=self.limits.handshake_seconds, ssl_shutdown_timeout=0.25)
            entry.transport, entry.since = transport, loop.time()  # its request's grace begins now
            self._by_transport[transport] = entry
            await closed
        except (OSError, ssl.SSLError, asyncio.TimeoutError) as err:
            log.debug("a webhook client's TLS handshake failed: %s", clipped(str(err), 200))
            sock.close()
        except asyncio.CancelledError:
            sock.close()
        finally:
            self._open.discard(entry)
            self._by_transport.pop(entry.transport, None)
            self._room.set()

    async def _reload(self) -> None:
        while True:
            await asyncio.sleep(self.reload_seconds)
            self.certificates.reload_if_changed()

    async def close(self) -> None:
        if self._switch_interval is not None:
            sys.setswitchinterval(self._switch_interval)
            self._switch_interval = None
        if self._thread is None or not self._thread.is_alive() or self._loop is None:
            return
        self._loop.call_soon_threadsafe(self._loop.stop)
        await asyncio.to_thread(self._thread.join, 10)
        self._thread = None

    # -- one request ------------------------------------------------------------

    def _handler(self, mutating: bool, path: str):
        async def handle(request: web.Request) -> web.StreamResponse:
            entry = self._by_transport.get(request.transport)
            held = [0, 0]
            try:
                return await self._respond(request, mutating, path, held, entry)
            finally:
                self._large_held[0] -= held[0]
                self._large_held[1] -= held[1]
                if entry is not None:
                    entry.busy, entry.requesting, entry.since = False, False, asyncio.get_running_loop().time()
        return handle

    async def _respond(self, request: web.Request, mutating: bool, path: str, held: list[int],
                       entry: _Open | None) -> web.StreamResponse:
        started = time.perf_counter()
        peer = request.remote or "?"
        try:
            body = await self._read(request, held, conversion=path == CONVERSION_PATH)
            if entry is not None:  # from here on we keep it waiting, not the other way round
                entry.busy = True
            size, deadline = len(body), asyncio.get_running_loop().time() + self.limits.judge_seconds
            lane = self._lanes["small" if size <= self.limits.small_review_bytes else "large"]
            if path == CONVERSION_PATH:
                # A list of objects: given the time of as many largest AdmissionReviews as it is long.
                deadline += self.limits.judge_seconds * max(0.0, size / self.limits.review_bytes - 1)
                read = await lane.run(functools.partial(read_conversion_body, body), size, deadline)
                del body
                status, answer, line = await lane.run(functools.partial(self._convert, read), size, deadline)
            else:
                api_version, review = await lane.run(functools.partial(read_review, body), size, deadline)
                del body
                pools, live = await self._facts(review, mutating, deadline)
                status, answer, line = await lane.run(
                    functools.partial(self._judge, api_version, review, mutating, path, pools, live), size, deadline)
        except Malformed as err:
            log.warning("refused a malformed review from %s to %s: %s", peer, path, err)
            what = "a ConversionReview" if path == CONVERSION_PATH else "an AdmissionReview"
            response = web.json_response({"error": f"not {what}: {err}"}, status=err.status)
            response.force_close()
            return response
        except _Refused as refused:
            log.warning("refused an admission request from %s to %s: %s", peer, path, refused)
            response = web.json_response({"error": str(refused)}, status=refused.status)
            response.force_close()
            transport = request.transport
            if transport is not None and not request.content.is_eof():
                # The rest of its body is not wanted: not read (nor decrypted) while the answer goes out,
                # and the connection cut a moment later rather than closed in turn with the client.
                transport.pause_reading()
                asyncio.get_running_loop().call_later(REFUSED_LINGER, transport.abort)
            return response
        except ConnectionError as err:
            log.info("an admission request from %s to %s was abandoned: %s", peer, path, clipped(str(err), 100))
            return web.Response(status=400)  # nobody reads it
        if line:
            log.log(logging.WARNING if status >= 400 else logging.INFO, "%s (from %s)", printable(line), peer)
        REVIEW_SECONDS.observe(time.perf_counter() - started)
        return web.Response(status=status, body=answer, content_type="application/json")

    async def _read(self, request: web.Request, held: list[int], conversion: bool = False) -> bytearray:
        """The body, read in chunks as it comes: refused (413) past the cap, 408 when too slow,
        503 when large bodies already fill their budget. ``conversion``: a ConversionReview's, under
        ``/convert``'s cap and budget (``held[1]``; an AdmissionReview's: ``held[0]``)."""
        limits = self.limits
        cap = limits.conversion_bytes if conversion else limits.review_bytes
        budget = limits.large_conversions_bytes if conversion else limits.large_reviews_bytes
        slot = 1 if conversion else 0
        length = request.content_length
        if length is not None and length > cap:
            raise _Refused(413, f"the body has {length} bytes; at most {cap} are read")
        body = bytearray()
        try:
            async with asyncio.timeout(limits.read_seconds):
                while chunk := await request.content.readany():
                    size = len(body) + len(chunk)
                    if size > cap:
                        raise _Refused(413, f"the body has more than {cap} bytes")
                    more = max(0, size - limits.small_review_bytes) - held[slot]
                    if more > 0:
                        if self._large_held[slot] + more > budget:
                            raise _Refused(503, "too many large reviews are being read; try again")
                        self._large_held[slot] += more
                        held[slot] += more
                    body += chunk
        except TimeoutError:
            raise _Refused(408, f"the body did not arrive within {limits.read_seconds:g} s "
                                f"({len(body)} bytes came)") from None
        except web.RequestPayloadError as err:
            raise _Refused(400, f"the body is not well framed: {clipped(str(err), 100)}") from None
        return body

    async def _facts(self, request: dict, mutating: bool, deadline: float) -> tuple[list[dict] | None, Any]:
        """For a pool review, the namespace's pools as the API server has them now and what it reads of
        the inventory (copied on the controller's loop, which keeps it), each waited for until ``deadline``;
        the judges meanwhile judge others."""
        if not self.admission.reads_inventory(request, mutating):
            return None, None
        loop = asyncio.get_running_loop()
        try:
            async with asyncio.timeout_at(deadline):
                async with self._fetching:  # parsed reviews waiting for facts: bounded, like the queues
                    pools = await loop.run_in_executor(self._listers, self.admission.current_pools, request)
                    owner = self._main
                    if owner is None or owner.is_closed():
                        return pools, await loop.run_in_executor(self._listers, self.admission.live, request)
                    copied = asyncio.run_coroutine_threadsafe(_call(self.admission.live, request, mutating), owner)
                    try:
                        return pools, await asyncio.wrap_future(copied)
                    except asyncio.CancelledError:
                        copied.cancel()
                        raise
        except TimeoutError:
            return None, BUSY

    def _judge(self, api_version: str, request: dict, mutating: bool, path: str, pools: list[dict] | None,
               live: Any) -> tuple[int, bytes, str | None]:
        """On a judge's thread: the status, the answer and the log line (None: nothing to log)."""
        operation = request["operation"]
        what = f"{operation} {clipped(request['kind'].get('kind') or '?', 63)} " \
               f"{clipped(request.get('namespace') or '', 63)}/{clipped(request.get('name') or '', 253)}"
        response, fault = _in_one_line(
            lambda: self.admission.review(request, mutating=mutating, pools=pools, live=live), "an AdmissionReview",
            f"{what} at {path}")
        if fault is not None:
            return fault
        DECISIONS.labels(path, operation, str(response["allowed"]).lower()).inc()
        answer = json.dumps({"apiVersion": api_version, "kind": "AdmissionReview", "response": response},
                            allow_nan=False).encode()
        line = None
        if not response["allowed"]:
            line = f"refused {what}: {clipped(response['status']['message'], LOGGED_CHARS)}"
        return 200, answer, line

    @staticmethod
    def _convert(read: ConversionBody) -> tuple[int, bytes, str | None]:
        """On a judge's thread: a ConversionReview answered by ``core.conversion`` (each object by its kind) (an object it cannot convert
        is a Failure naming it, which the API server shows to the client); the status, answer and log line."""
        what = f"{len(read.starts)} object(s) to {clipped(read.review['request']['desiredAPIVersion'], 63)}"
        answered, fault = _in_one_line(lambda: _conversion_answer(read), "a ConversionReview",
                                       f"{what} at {CONVERSION_PATH}")
        if fault is not None:
            return fault
        converted, body = answered
        result = converted["response"]["result"]
        succeeded = result["status"] == "Success"
        DECISIONS.labels(CONVERSION_PATH, "CONVERT", str(succeeded).lower()).inc()
        line = None if succeeded else f"could not convert {what}: {clipped(result['message'], LOGGED_CHARS)}"
        return 200, body, line


def _conversion_answer(read: ConversionBody) -> tuple[dict, bytes]:
    """The answer to a ConversionReview (and its envelope, ``convertedObjects`` left empty), written out object
    by object as each is converted: never every object parsed at once."""
    desired = read.review["request"]["desiredAPIVersion"]
    envelope = conversion.review_response(read.review, [])
    head, tail = json.dumps(envelope, allow_nan=False).encode().split(b'"convertedObjects": []', 1)
    answer = bytearray(head + b'"convertedObjects": [')
    try:
        for n, obj in enumerate(read.objects()):
            answer += (b", " if n else b"") + json.dumps(conversion.convert(obj, desired), allow_nan=False).encode()
    except conversion.ConversionError as err:
        envelope = conversion.review_response(read.review, [], err)
        return envelope, json.dumps(envelope, allow_nan=False).encode()
    answer += b"]" + tail
    return envelope, bytes(answer)


def _in_one_line(work: Callable[[], Any], review: str, what: str) -> tuple[Any, tuple[int, bytes, str] | None]:
    """``work()``, or the answer and log line of its failure: an object nested past the interpreter's depth is
    malformed (400), anything else a fault of ours (500); said in one line, never with a traceback."""
    try:
        return work(), None
    except RecursionError:
        return None, (400, _error(f"not {review}: the object is nested too deeply"),
                      f"refused a malformed review ({what}): the object is nested too deeply")
    except Exception as err:  # noqa: BLE001 - a fault of ours: said in one line, answered 500
        return None, (500, _error("the review could not be answered"),
                      f"could not answer {what}: {type(err).__name__}: {clipped(str(err), 200)}")


async def _call(function: Callable, *args: Any) -> Any:
    return function(*args)


def _error(message: str) -> bytes:
    return json.dumps({"error": message}).encode()
