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
  never reach the webhook (``matchConditions``), so an outage cannot block them.
- Pool deletion: ``failurePolicy: Ignore`` with a short timeout, and
  ``matchConditions`` that skip deletions marked
  ``clusterctl.cluster.x-k8s.io/delete-for-move`` and deletions by the
  namespace controller: a controller outage never blocks ``clusterctl move``
  or a namespace deletion. The pool's finalizer still keeps it until its
  addresses are gone.
- Defaulting: ``failurePolicy: Ignore``; the CRD schema sets the same default.
- IPAddressClaims on other providers' pools never reach us (``matchConditions``
  on ``spec.poolRef.apiGroup``): our outage is not theirs.
"""

from __future__ import annotations

import asyncio
import base64
import concurrent.futures
import json
import logging
import os
import ssl
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Iterable

from aiohttp import web
from prometheus_client import Counter, Histogram

from ..core import kinds
from ..core import objects as o
from ..core.inventory import Inventory
from ..core.problems import Problem
from ..core.validation import (addresses_in_use, overlap_problems, validate, validate_delete, validate_update)

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
OUR_POOL = {"name": "metal3-pool",
            "expression": "has(object.spec) && has(object.spec.poolRef) && has(object.spec.poolRef.apiGroup)"
                          f" && object.spec.poolRef.apiGroup == '{kinds.METAL3_GROUP}'"}


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

    def configuration(self, client_config: dict) -> dict:
        """The webhook's entry in a webhook configuration; ``client_config`` must reach :attr:`path`."""
        entry = {
            "name": self.name,
            "admissionReviewVersions": ["v1"],
            "clientConfig": client_config,
            "failurePolicy": self.failure_policy,
            "matchPolicy": "Equivalent",
            "rules": [{"apiGroups": [self.kind[0]], "apiVersions": list(self.versions),
                       "operations": list(self.operations), "resources": [self.resource], "scope": "Namespaced"}],
            "sideEffects": "None",
            "timeoutSeconds": self.timeout_seconds,
        }
        if self.match_conditions:
            entry["matchConditions"] = [dict(c) for c in self.match_conditions]
        if self.mutating:
            entry["reinvocationPolicy"] = "Never"
        return entry


METAL3_VERSIONS = (kinds.METAL3_VERSION,)
HOOKS: tuple[Hook, ...] = (
    Hook("default.ippool.ipam.metal3.io", "/mutate-ipam-metal3-io-v1alpha1-ippool", kinds.IPPOOL,
         METAL3_VERSIONS, "ippools", ("CREATE", "UPDATE"), "Ignore", 5, mutating=True),
    Hook("validation.ippool.ipam.metal3.io", "/validate-ipam-metal3-io-v1alpha1-ippool", kinds.IPPOOL,
         METAL3_VERSIONS, "ippools", ("CREATE", "UPDATE"), "Fail", 10, match_conditions=(_spec_changed(),)),
    Hook("deletion.ippool.ipam.metal3.io", "/validate-ipam-metal3-io-v1alpha1-ippool", kinds.IPPOOL,
         METAL3_VERSIONS, "ippools", ("DELETE",), "Ignore", 5,
         match_conditions=(NOT_FOR_MOVE, NOT_NAMESPACE_TEARDOWN)),
    Hook("validation.ipclaim.ipam.metal3.io", "/validate-ipam-metal3-io-v1alpha1-ipclaim", kinds.IPCLAIM,
         METAL3_VERSIONS, "ipclaims", ("CREATE", "UPDATE"), "Fail", 10,
         match_conditions=(_spec_or_requested_ip_changed(),)),
    Hook("validation.ipaddress.ipam.metal3.io", "/validate-ipam-metal3-io-v1alpha1-ipaddress", kinds.IPADDRESS,
         METAL3_VERSIONS, "ipaddresses", ("CREATE", "UPDATE"), "Fail", 10, match_conditions=(_spec_changed(),)),
    Hook("validation.ipaddressclaim.ipam.metal3.io", "/validate-ipam-cluster-x-k8s-io-ipaddressclaim",
         kinds.CAPI_CLAIM, kinds.CAPI_IPAM_VERSIONS, "ipaddressclaims", ("CREATE", "UPDATE"), "Fail", 10,
         match_conditions=(OUR_POOL, _spec_or_requested_ip_changed())),
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
        if not self._knows(namespace):
            return None
        try:
            return self.list_pools(namespace)
        except Exception as err:  # noqa: BLE001 - any failure: judged from the inventory instead
            log.warning("listing the IPPools of %s for an admission review failed (%s); judged from the "
                        "controller's inventory", namespace, getattr(err, "reason", None) or err)
            return None

    def review(self, request: dict, mutating: bool = False, pools: list[dict] | None = None) -> dict:
        """The ``response`` of an AdmissionReview for its ``request``; ``pools`` from :meth:`current_pools`."""
        uid = request.get("uid", "")
        operation = request.get("operation")
        obj = request.get("object") if operation != "DELETE" else request.get("oldObject")
        if not isinstance(obj, dict):
            return _allowed(uid)
        obj = _with_namespace(obj, request.get("namespace"))
        if mutating:
            return self._default(uid, obj)
        old = _with_namespace(request.get("oldObject"), request.get("namespace"))
        try:
            problems = self._judge(operation, obj, old, pools)
        except _NotReady as not_ready:
            return _denied(uid, 503, "ServiceUnavailable", str(not_ready))
        errors = [p for p in problems if not p.warning]
        warnings = [_short(p) for p in problems if p.warning]
        if errors:
            return _denied(uid, 422, "Invalid", _invalid_message(obj, errors), warnings, errors)
        return _allowed(uid, warnings)

    @staticmethod
    def reads_inventory(request: dict, mutating: bool = False) -> bool:
        """Whether answering ``request`` reads the inventory: validating a pool (see :meth:`_judge`)."""
        obj = request.get("object") if request.get("operation") != "DELETE" else request.get("oldObject")
        return not mutating and kinds.kind_of(obj) == kinds.IPPOOL

    def _judge(self, operation: str | None, obj: dict, old: dict | None,
               pools: list[dict] | None = None) -> list[Problem]:
        kind = kinds.kind_of(obj)
        live = kind == kinds.IPPOOL and self._knows(o.namespace(obj))
        if operation == "DELETE":
            if not live or not self.loaded():
                # Never hold a deletion on what is not known: the pool's finalizer keeps it anyway.
                return []
            return validate_delete(obj, self._in_use(obj))
        if live and not self.loaded():
            raise _NotReady("the IPAM controller is still reading the cluster; try again in a few seconds")
        if operation == "UPDATE" and isinstance(old, dict):
            problems = validate_update(old, obj, self._in_use(obj) if live else None)
        else:
            problems = validate(obj)
        if live and not [p for p in problems if not p.warning]:
            others = [p for p in pools if not o.is_deleting(p)] if pools is not None else None
            problems += overlap_problems(obj, others if others is not None else self._pools_of(o.namespace(obj)))
        return problems

    def _knows(self, namespace: str) -> bool:
        return not self.namespaces or namespace in self.namespaces

    def _in_use(self, pool: dict) -> dict[str, str]:
        addresses = [*self.inventory.of_kind(kinds.IPADDRESS), *self.inventory.of_kind(kinds.CAPI_ADDRESS)]
        return addresses_in_use(addresses, o.namespace(pool), o.name(pool))

    def _pools_of(self, namespace: str) -> list[dict]:
        return [p for p in self.inventory.of_kind(kinds.IPPOOL)
                if o.namespace(p) == namespace and not o.is_deleting(p)]

    @staticmethod
    def _default(uid: str, obj: dict) -> dict:
        """Where Metal3 defaults: an IPPool's allocationStrategy is sequential."""
        patch = []
        if kinds.kind_of(obj) == kinds.IPPOOL and isinstance(obj.get("spec"), dict) \
                and not obj["spec"].get("allocationStrategy"):
            op = "replace" if "allocationStrategy" in obj["spec"] else "add"
            patch.append({"op": op, "path": "/spec/allocationStrategy", "value": "sequential"})
        response = _allowed(uid)
        if patch:
            response["patchType"] = "JSONPatch"
            response["patch"] = base64.b64encode(json.dumps(patch).encode()).decode()
        return response


class _NotReady(Exception):
    pass


def _with_namespace(obj: Any, namespace: Any) -> Any:
    """The object as stored: in the request's namespace (a create may leave metadata.namespace out)."""
    if not isinstance(obj, dict) or not isinstance(namespace, str) or not namespace:
        return obj
    meta = obj.get("metadata") if isinstance(obj.get("metadata"), dict) else {}
    if meta.get("namespace") == namespace:
        return obj
    return dict(obj, metadata=dict(meta, namespace=namespace))


def _allowed(uid: str, warnings: list[str] | None = None) -> dict:
    response: dict[str, Any] = {"uid": uid, "allowed": True}
    if warnings:
        response["warnings"] = warnings
    return response


def _denied(uid: str, code: int, reason: str, message: str, warnings: list[str] | None = None,
            problems: list[Problem] = ()) -> dict:
    status: dict[str, Any] = {"code": code, "reason": reason, "message": message}
    if problems:
        status["details"] = {"causes": [{"field": p.field, "message": _short(p).removeprefix(f"{p.field}: "),
                                         "reason": "FieldValueInvalid"} for p in problems]}
    response = {"uid": uid, "allowed": False, "status": status}
    if warnings:
        response["warnings"] = warnings
    return response


def _invalid_message(obj: dict, problems: list[Problem]) -> str:
    kind, group = obj.get("kind"), kinds.group_of(str(obj.get("apiVersion") or ""))
    what = f'{kind}.{group} "{o.name(obj)}"'
    return f"{what} is invalid: " + "; ".join(_short(p) for p in problems)


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


class WebhookServer:
    """The HTTPS server answering admission reviews, on a thread and event loop of its own.

    The API server waits for every answer, and a create our controller makes
    waits for it too: answers must not queue behind a reconcile pass on the
    controller's event loop (measured: 0.7 ms per review when idle, 40 ms
    behind a burst of 500 claims). Reviews that read the inventory (pools)
    are answered on the controller's loop, which owns the inventory; all
    others right here. The certificate watch runs here as well.
    """

    def __init__(self, admission: Admission, host: str, port: int, cert_dir: str | os.PathLike,
                 reload_seconds: float = 2.0) -> None:
        self.admission = admission
        self.host, self.port = host, port
        self.certificates = CertificateFiles(cert_dir)  # fails early on missing or broken files
        self.reload_seconds = reload_seconds
        self._main: asyncio.AbstractEventLoop | None = None
        self._loop: asyncio.AbstractEventLoop | None = None
        self._thread: threading.Thread | None = None

    async def start(self) -> "WebhookServer":
        self._main = asyncio.get_running_loop()
        started: concurrent.futures.Future = concurrent.futures.Future()
        self._thread = threading.Thread(target=self._serve, args=(started,), name="admission webhooks",
                                        daemon=True)
        self._thread.start()
        await asyncio.wrap_future(started)  # an address in use or a bad certificate comes back here
        return self

    def _serve(self, started: concurrent.futures.Future) -> None:
        loop = self._loop = asyncio.new_event_loop()
        asyncio.set_event_loop(loop)
        runner = None
        try:
            runner = loop.run_until_complete(self._open())
        except BaseException as err:  # noqa: BLE001 - handed to start()
            started.set_exception(err)
            loop.close()
            return
        watch = loop.create_task(self._reload())
        started.set_result(None)
        try:
            loop.run_forever()
        finally:
            watch.cancel()
            loop.run_until_complete(asyncio.gather(watch, return_exceptions=True))
            loop.run_until_complete(runner.cleanup())
            loop.close()

    async def _open(self) -> web.AppRunner:
        app = web.Application(client_max_size=8 * 1024 * 1024)
        mutating_paths = {h.path for h in HOOKS if h.mutating}
        for path in sorted({h.path for h in HOOKS}):
            app.router.add_post(path, _handler(self.admission, mutating=path in mutating_paths, path=path,
                                               owner=self._main))
        runner = web.AppRunner(app, access_log=None)
        await runner.setup()
        try:
            await web.TCPSite(runner, self.host, self.port, ssl_context=self.certificates.context).start()
        except BaseException:
            await runner.cleanup()
            raise
        return runner

    async def _reload(self) -> None:
        while True:
            await asyncio.sleep(self.reload_seconds)
            self.certificates.reload_if_changed()

    async def close(self) -> None:
        if self._thread is None or not self._thread.is_alive() or self._loop is None:
            return
        self._loop.call_soon_threadsafe(self._loop.stop)
        await asyncio.to_thread(self._thread.join, 10)
        self._thread = None


async def _answer(admission: Admission, body: dict, mutating: bool, pools: list[dict] | None) -> dict:
    return admission.review(body, mutating=mutating, pools=pools)


def _handler(admission: Admission, mutating: bool, path: str, owner: asyncio.AbstractEventLoop | None = None):
    """A request handler; reviews that read the inventory run on ``owner``, the loop that feeds it."""
    async def handle(request: web.Request) -> web.Response:
        started = time.perf_counter()
        try:
            review = await request.json()
            body = review["request"]
            if not isinstance(body, dict):
                raise TypeError("request is not an object")
        except (ValueError, KeyError, TypeError) as err:
            return web.json_response({"error": f"not an AdmissionReview: {err}"}, status=400)
        pools = None if mutating else await asyncio.to_thread(admission.current_pools, body)
        if owner is not None and owner is not asyncio.get_running_loop() and admission.reads_inventory(body, mutating):
            response = await asyncio.wrap_future(
                asyncio.run_coroutine_threadsafe(_answer(admission, body, mutating, pools), owner))
        else:
            response = admission.review(body, mutating=mutating, pools=pools)
        operation = str(body.get("operation"))
        DECISIONS.labels(path, operation, str(response["allowed"]).lower()).inc()
        REVIEW_SECONDS.observe(time.perf_counter() - started)
        if not response["allowed"]:
            log.info("refused %s %s %s/%s: %s", operation, body.get("kind", {}).get("kind"),
                     body.get("namespace"), body.get("name"), response["status"]["message"])
        return web.json_response({"apiVersion": review.get("apiVersion", "admission.k8s.io/v1"),
                                  "kind": "AdmissionReview", "response": response})
    return handle
