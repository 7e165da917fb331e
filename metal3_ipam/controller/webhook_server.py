"""The HTTPS server of the admission webhooks, on a thread and event loop of its own.

It routes by :func:`metal3_ipam.controller.webhook.hooks`, reads each body within bounds
(:mod:`metal3_ipam.controller.review_body`), has it judged by
:class:`metal3_ipam.controller.admission.Admission` on judge threads, and reloads its certificate
(:mod:`metal3_ipam.controller.certificates`). What a client may take of it is bounded (:class:`Limits`).

The same server answers the conversion webhook of the CRDs served at several versions
(``PoolKind.convert``) at ``/convert`` (:data:`CONVERSION_PATH`, which the CRDs name) with
:mod:`metal3_ipam.core.conversion`, object by object, under the same bounds
but for the body's size (a review holds a whole LIST: :data:`MAX_CONVERSION_BYTES`).
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextlib
import functools
import itertools
import json
import logging
import os
import queue
import socket
import ssl
import sys
import threading
import time
from dataclasses import dataclass
from typing import Any, Callable

from aiohttp import web
from prometheus_client import Counter, Histogram

from ..core import conversion
from ..core.conversion import CONVERSION_PATH
from . import metrics
from .admission import BUSY, Admission
from .certificates import CERT_FILE, KEY_FILE, CertificateFiles, Tls
from .review_body import (MAX_CONVERSION_BYTES, MAX_REVIEW_BYTES, ConversionBody, Malformed, clipped,
                          read_conversion_body, read_review)
from .webhook import defaulting_paths, hooks

log = logging.getLogger("metal3_ipam.webhook")

DECISIONS = Counter("metal3_ipam_admission_total", "Admission reviews answered",
                    ["webhook", "operation", "allowed"])
REVIEW_SECONDS = Histogram("metal3_ipam_admission_seconds", "Time to answer one admission review",
                           buckets=(0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 1))

DEFAULT_PORT = 9443
LOGGED_CHARS = 512         # the part of a message a log line repeats


def printable(text: str) -> str:
    """``text`` in one line: line breaks and other unprintable characters escaped (a review sent straight
    to the port may carry them in any name or value)."""
    if text.isprintable():
        return text
    return "".join(c if c.isprintable() else c.encode("unicode_escape").decode("ascii") for c in text)


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
                 reload_seconds: float = 2.0, limits: Limits = Limits(), cert_name: str = CERT_FILE,
                 key_name: str = KEY_FILE, tls: Tls | None = None) -> None:
        self.admission = admission
        self.host, self.port = host, port
        # Fails early on missing or broken files.
        self.certificates = CertificateFiles(cert_dir, cert_name, key_name, tls)
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
        every = hooks()
        mutating_paths = {h.path for h in every if h.mutating}
        for path in sorted({h.path for h in every}):
            app.router.add_post(path, self._handler(mutating=path in mutating_paths, path=path))
        for path in defaulting_paths():  # registered by the Go providers' configurations
            app.router.add_post(path, self._handler(mutating=True, path=path))
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
        for code in ("200", "500"):  # the likeliest answers at 0 from the start, as controller-runtime has them
            metrics.WEBHOOK_REQUESTS.labels(path, code)
        metrics.WEBHOOK_IN_FLIGHT.labels(path)

        async def handle(request: web.Request) -> web.StreamResponse:
            entry = self._by_transport.get(request.transport)
            held = [0, 0]
            started, code = time.perf_counter(), 500
            metrics.WEBHOOK_IN_FLIGHT.labels(path).inc()
            try:
                response = await self._respond(request, mutating, path, held, entry)
                code = response.status
                return response
            finally:
                metrics.WEBHOOK_IN_FLIGHT.labels(path).dec()
                metrics.WEBHOOK_REQUESTS.labels(path, str(code)).inc()
                metrics.WEBHOOK_LATENCY.labels(path).observe(time.perf_counter() - started)
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
