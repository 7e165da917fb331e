"""A lean watch for the kinds that come by the thousand, or big: pools, claims and addresses.

kopf hands every watch event to a task of its own per object, with a
logging context, a body wrapper, per-object memories and handler
bookkeeping: several milliseconds of CPU per event, for a handler that only
files the object. These kinds are watched here instead, one stream per kind
(and namespace), each event decoded (``wire``: without what is never read)
and filed at once; kopf keeps watching Clusters, and keeps the operator's
lifecycle.

A stream starts at the resourceVersion of the listing the inventory was
loaded from, so nothing between the two is missed; it asks for bookmarks so
that a quiet kind still moves its version forward. When the API server no
longer has that version (410 Gone, after a long disconnection or an etcd
compaction), the kind is listed again and filed like any listing
(``Inventory.settle_listing`` drops what the listing proves gone) and the
stream resumes from the new listing. Other failures are retried after a
growing pause; the periodic resync lists everything anyway.

Requests carry what ``Credentials`` gives, as every client of the
controller does; a 401 with a credential that has since been renewed is
retried at once with the new one.
"""

from __future__ import annotations

import asyncio
import json
import logging
from collections.abc import Awaitable, Callable
from typing import Any

import aiohttp

from . import metrics
from .api import Resource
from .credentials import Credentials, CredentialsError
from .wire import decode_event

log = logging.getLogger("metal3_ipam.watch")

# What the API server is asked to keep one stream open for (it ends it then; we start another).
SERVER_TIMEOUT = 300


class Gone(Exception):
    """The version to watch from is older than the API server keeps: list again."""


class WatchFailed(Exception):
    pass


class Streams:
    """The HTTP session for watch streams: long-lived connections of their own, apart from the writer's."""

    def __init__(self, credentials: Credentials, rate_limit: Any = None) -> None:
        self.credentials = credentials
        self.rate_limit = rate_limit  # a ratelimit.RateLimit each watch request waits for, or None
        self._session: aiohttp.ClientSession | None = None
        self._tls: Any = None

    def session(self) -> aiohttp.ClientSession:
        tls = self.credentials.tls_generation()
        if self._session is not None and tls != self._tls:
            # A renewed client certificate or CA: new streams go out with it; the old ones end by themselves.
            old, self._session = self._session, None
            asyncio.get_running_loop().call_later(SERVER_TIMEOUT + 60, lambda: asyncio.ensure_future(old.close()))
        if self._session is None:
            context = self.credentials.ssl_context()
            self._session = aiohttp.ClientSession(
                base_url=self.credentials.server.rstrip("/") + "/",
                connector=aiohttp.TCPConnector(limit=0, ssl=context if context is not None else True),
                timeout=aiohttp.ClientTimeout(total=None, sock_connect=30, sock_read=SERVER_TIMEOUT + 30),
                trace_configs=[metrics.rest_trace(), *([self.rate_limit.trace()] if self.rate_limit is not None else [])])
            self._tls = tls
        return self._session

    async def close(self) -> None:
        if self._session is not None:
            await self._session.close()
            self._session = None


class KindWatch:
    """Follows one kind (in one namespace, or everywhere) into ``on_event(type, object)``."""

    def __init__(self, streams: Streams, resource: Resource, kind: tuple[str, str], namespace: str | None,
                 on_event: Callable[[str, dict], None],
                 relist: Callable[[tuple[str, str], str | None], Awaitable[str | None]],
                 max_pause: float = 30.0, known: Callable[[tuple[str, str], dict], bool] | None = None,
                 selector: str | None = None) -> None:
        self.streams = streams
        self.resource = resource
        self.kind = kind
        self.namespace = namespace
        self.on_event = on_event
        self.relist = relist
        self.max_pause = max_pause
        # Whether an object's metadata (its name at its version) is no news: it is then not decoded further.
        self.known = (lambda meta: known(kind, meta)) if known is not None else None
        self.api_version = f"{resource.group}/{resource.version}" if resource.group else resource.version
        self.events = 0
        self.version: str | None = None  # the last version seen: where a new stream starts
        self.selector = selector  # a label selector (the Leases that are locks), or None

    def path(self) -> str:
        return self.resource.path(self.namespace)

    def __str__(self) -> str:
        where = f" in {self.namespace}" if self.namespace else ""
        return f"{self.resource.plural}.{self.resource.group}{where}"

    async def run(self, version: str | None) -> None:
        """Follow the kind from ``version`` (None: list it first) until cancelled."""
        self.version = version
        pause = 0.5
        while True:
            try:
                if self.version is None:
                    self.version = await self.relist(self.kind, self.namespace)
                await self._follow(self.version)
                pause = 0.5  # ended by the server's timeout, as asked: go on from where it was
            except Gone:
                log.info("watch of %s: version %s is gone; listing again", self, self.version)
                self.version = None
            except asyncio.CancelledError:
                raise
            except Exception as err:  # a broken connection, a refusal, a listing that failed: retry, slower
                # From the last version seen: what was filed already is not asked for again.
                log.warning("watch of %s failed: %s; again in %.1f s", self, err, pause)
                await asyncio.sleep(pause)
                pause = min(pause * 2, self.max_pause)

    async def _follow(self, version: str) -> None:
        """One stream, from ``version``, until the server ends it; ``self.version`` follows the events."""
        query = (f"watch=1&allowWatchBookmarks=true&timeoutSeconds={SERVER_TIMEOUT}"
                 f"&resourceVersion={version}" + (f"&labelSelector={self.selector}" if self.selector else ""))
        for attempt in (1, 2):
            headers = {"Accept": "application/json"}
            try:
                authorization = await self.streams.credentials.authorization_async()
            except CredentialsError as err:
                raise WatchFailed(f"no credentials: {err}") from None
            if authorization:
                headers["Authorization"] = authorization
            async with self.streams.session().get(f"{self.path().lstrip('/')}?{query}", headers=headers,
                                                  proxy=self.streams.credentials.proxy) as response:
                if response.status == 401 and attempt == 1 and \
                        await asyncio.to_thread(self.streams.credentials.refused, authorization):
                    continue
                if response.status == 410:
                    raise Gone()
                if response.status != 200:
                    text = await response.text()
                    raise WatchFailed(f"{response.status} {_message(text) or response.reason}")
                await self._read(response)
                return
        raise WatchFailed("401 Unauthorized")

    async def _read(self, response: aiohttp.ClientResponse) -> None:
        # One JSON document per line; lines are cut here rather than by the stream reader, which
        # refuses lines longer than its buffer (an object may be as large as etcd allows).
        pending = b""
        async for chunk in response.content.iter_any():
            pending += chunk
            if b"\n" not in chunk:
                continue
            *lines, pending = pending.split(b"\n")
            for line in lines:
                if line.strip():
                    self._event(*decode_event(line, self.known))
        if pending.strip():
            self._event(*decode_event(pending, self.known))

    def _event(self, kind: Any, obj: Any, stale: bool = False) -> None:
        if not isinstance(obj, dict):
            return
        if kind == "ERROR":
            if obj.get("code") == 410:
                raise Gone()
            raise WatchFailed(f"{obj.get('code')} {obj.get('message')}")
        new_version = (obj.get("metadata") or {}).get("resourceVersion")
        if kind != "BOOKMARK" and not stale:
            obj.setdefault("apiVersion", self.api_version)
            obj.setdefault("kind", self.kind[1])
            self.events += 1
            try:
                self.on_event(kind, obj)
            except Exception:  # a bug filing one object must not stop the stream for every other
                log.exception("watch of %s: filing %s %s failed", self, kind,
                              (obj.get("metadata") or {}).get("name"))
        if new_version:
            self.version = new_version


def _message(text: str) -> str | None:
    try:
        return json.loads(text).get("message")
    except (ValueError, AttributeError):
        return None
