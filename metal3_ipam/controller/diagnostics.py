"""The diagnostics endpoint, as Cluster API providers serve it (``--diagnostics-address``).

``/metrics`` over HTTPS, for callers the API server vouches for: the bearer
token of a request is checked by a TokenReview (who is it?) and the user it
names by a SubjectAccessReview (may they ``get`` the non-resource URL
``/metrics``?), which the ``metrics-reader`` ClusterRole grants. No token or a
token the API server does not know: 401; a user without the right: 403. The
profiles and the log verbosity (:mod:`.debugging`: ``/debug/pprof/``,
``/debug/flags/v``) are served beside it, each reviewed for its own path and
verb. The
serving certificate is made at start (self-signed, in memory, as
controller-runtime makes one when it is given none); the TLS options are
``--tls-min-version`` and ``--tls-cipher-suites``. With
``--insecure-diagnostics`` the same paths are served over plain HTTP to
anyone.

Decisions are kept a short while per token, path and verb (a minute when allowed, ten
seconds when not), so a scrape every few seconds costs the API server two
reviews a minute, not two per scrape.
"""

from __future__ import annotations

import asyncio
import datetime
import hashlib
import logging
import ssl
import tempfile
import time
from pathlib import Path
from typing import Awaitable, Callable

from aiohttp import web
from prometheus_client import CONTENT_TYPE_LATEST, generate_latest

from . import debugging
from .certificates import Tls

log = logging.getLogger("metal3_ipam.diagnostics")

ALLOWED_SECONDS, DENIED_SECONDS = 60.0, 10.0
METRICS_PATH = "/metrics"

# (method, path, body) -> the API server's answer (a dict); raises on errors.
Call = Callable[[str, str, dict], dict]


class Reviews:
    """Who a bearer token is and whether they may use a path of the endpoint, asked of the API server and kept
    a while."""

    def __init__(self, call: Call, clock: Callable[[], float] = time.monotonic) -> None:
        self.call, self.clock = call, clock
        self._kept: dict[tuple[str, str, str], tuple[float, int, str]] = {}

    def decide(self, token: str, path: str = METRICS_PATH, verb: str = "get") -> tuple[int, str]:
        """(HTTP status, reason): 200 allowed, 401 not authenticated, 403 not authorised. Blocking."""
        key = (hashlib.sha256(token.encode()).hexdigest(), path, verb)
        now = self.clock()
        kept = self._kept.get(key)
        if kept is not None and kept[0] > now:
            return kept[1], kept[2]
        status, reason = self._ask(token, path, verb)
        self._kept[key] = (now + (ALLOWED_SECONDS if status == 200 else DENIED_SECONDS), status, reason)
        if len(self._kept) > 1000:
            self._kept = {k: v for k, v in self._kept.items() if v[0] > now}
        return status, reason

    def _ask(self, token: str, path: str, verb: str) -> tuple[int, str]:
        review = self.call("POST", "/apis/authentication.k8s.io/v1/tokenreviews",
                           {"apiVersion": "authentication.k8s.io/v1", "kind": "TokenReview", "spec": {"token": token}})
        status = review.get("status") or {}
        if not status.get("authenticated"):
            return 401, f"Unauthorized: {status.get('error') or 'token not authenticated'}"
        user = status.get("user") or {}
        access = self.call("POST", "/apis/authorization.k8s.io/v1/subjectaccessreviews", {
            "apiVersion": "authorization.k8s.io/v1", "kind": "SubjectAccessReview",
            "spec": {"user": user.get("username"), "uid": user.get("uid"), "groups": user.get("groups") or [],
                     "extra": user.get("extra") or {},
                     "nonResourceAttributes": {"path": path, "verb": verb}}})
        if (access.get("status") or {}).get("allowed"):
            return 200, "ok"
        return 403, (f'Forbidden: user "{user.get("username")}" may not {verb} path "{path}"'
                     + (f" ({access['status']['reason']})" if (access.get("status") or {}).get("reason") else ""))


def self_signed_context(tls: Tls, host: str = "localhost") -> ssl.SSLContext:
    """A server context with a certificate made now, for ``host`` (the endpoint's name is not known here)."""
    from cryptography import x509
    from cryptography.hazmat.primitives import hashes, serialization
    from cryptography.hazmat.primitives.asymmetric import ec
    from cryptography.x509.oid import NameOID

    key = ec.generate_private_key(ec.SECP256R1())
    name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, f"{host}@{int(time.time())}")])
    now = datetime.datetime.now(datetime.timezone.utc)
    cert = (x509.CertificateBuilder().subject_name(name).issuer_name(name).public_key(key.public_key())
            .serial_number(x509.random_serial_number()).not_valid_before(now - datetime.timedelta(hours=1))
            .not_valid_after(now + datetime.timedelta(days=365))
            .add_extension(x509.SubjectAlternativeName([x509.DNSName(host)]), critical=False)
            .sign(key, hashes.SHA256()))
    context = tls.apply(ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER))
    # load_cert_chain reads files: written to a private temporary directory, removed at once.
    with tempfile.TemporaryDirectory(prefix="metal3-ipam-diagnostics-") as folder:
        cert_path, key_path = Path(folder) / "tls.crt", Path(folder) / "tls.key"
        cert_path.write_bytes(cert.public_bytes(serialization.Encoding.PEM))
        key_path.write_bytes(key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
                                               serialization.NoEncryption()))
        context.load_cert_chain(cert_path, key_path)
    return context


async def _metrics(_: web.Request) -> web.Response:
    return web.Response(body=generate_latest(), headers={"Content-Type": CONTENT_TYPE_LATEST})


def _text(body: str, status: int = 200) -> web.Response:
    return web.Response(status=status, text=body)


async def _pprof(request: web.Request) -> web.Response:
    name = request.match_info.get("name", "")
    if name == "":
        return _text(debugging.index())
    if name == "goroutine":
        return _text(debugging.stacks())
    if name == "heap":
        return _text(await asyncio.to_thread(debugging.heap))
    if name == "profile":
        try:
            seconds = debugging.profile_seconds(request.query.get("seconds"))
        except ValueError as err:
            return _text(f"{err}\n", 400)
        return _text(await debugging.profile(seconds))
    return _text(f"no profile {name!r} here; see {debugging.PPROF}\n", 404)


async def _verbosity(request: web.Request) -> web.Response:
    if request.method == "PUT":
        try:
            level = debugging.parse_verbosity(await request.text())
        except ValueError as err:
            return _text(f"{err}\n", 400)
        debugging.set_verbosity(level)
        log.warning("log verbosity set to %d (%s)", level, debugging.VERBOSITY)
        return _text(f"verbosity set to {level}\n")
    return _text(f"{debugging.verbosity()}\n")


Handler = Callable[[web.Request], Awaitable[web.StreamResponse]]


def _guarded(reviews: Reviews, serve_it: Handler) -> Handler:
    async def handler(request: web.Request) -> web.StreamResponse:
        scheme, _, token = request.headers.get("Authorization", "").partition(" ")
        if scheme.lower() != "bearer" or not token.strip():
            return web.Response(status=401, text="Unauthorized: a bearer token is needed\n")
        path, verb = request.path, request.method.lower()
        try:
            status, reason = await asyncio.to_thread(reviews.decide, token.strip(), path, verb)
        except Exception as err:  # the API server could not be asked: nobody is let in
            log.warning("could not review a request for %s: %s", path, getattr(err, "reason", None) or err)
            return web.Response(status=503, text="the API server could not review the token; try again\n")
        if status != 200:
            return web.Response(status=status, text=reason + "\n")
        return await serve_it(request)

    return handler


async def serve(host: str, port: int, insecure: bool, tls: Tls, call: Call) -> web.AppRunner:
    """The endpoint, started; ``call`` asks the API server (for the reviews)."""
    app = web.Application()
    reviews = Reviews(call)

    def guard(serve_it: Handler) -> Handler:
        return serve_it if insecure else _guarded(reviews, serve_it)

    app.router.add_get(METRICS_PATH, guard(_metrics))
    app.router.add_get(debugging.PPROF + "{name:.*}", guard(_pprof))
    app.router.add_route("GET", debugging.VERBOSITY, guard(_verbosity))
    app.router.add_route("PUT", debugging.VERBOSITY, guard(_verbosity))
    runner = web.AppRunner(app, access_log=None)
    await runner.setup()
    context = None if insecure else self_signed_context(tls)
    await web.TCPSite(runner, host, port, ssl_context=context).start()
    log.info("diagnostics: %s, %s and %s on %s:%d%s", METRICS_PATH, debugging.PPROF, debugging.VERBOSITY, host, port,
             " over plain HTTP, for anyone (--insecure-diagnostics)" if insecure else
             " over HTTPS, for callers allowed to get it (TokenReview, SubjectAccessReview)")
    return runner
