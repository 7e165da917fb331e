"""The client-side rate limit of the API requests (``--kube-api-qps``, ``--kube-api-burst``), as client-go's.

A token bucket: ``burst`` requests may go at once, then ``qps`` a second.
Every request of the controller's own clients takes a token first, waiting
for one when there is none: the REST client's (listings, reads, reviews),
the writer's and the watches'.
"""

from __future__ import annotations

import asyncio
import threading
import time
from types import SimpleNamespace
from typing import Any, Callable

import aiohttp


class RateLimit:
    """A token bucket shared by threads and the event loop."""

    def __init__(self, qps: float, burst: int, clock: Callable[[], float] = time.monotonic) -> None:
        if not qps > 0:
            raise ValueError(f"qps {qps}: expected a positive rate")
        self.qps, self.burst, self.clock = qps, max(1, burst), clock
        self._tokens, self._at = float(self.burst), clock()
        self._lock = threading.Lock()

    def reserve(self) -> float:
        """Take a token; the seconds to wait before the request it stands for may go."""
        with self._lock:
            now = self.clock()
            self._tokens = min(float(self.burst), self._tokens + (now - self._at) * self.qps)
            self._at = now
            self._tokens -= 1.0
            return 0.0 if self._tokens >= 0 else -self._tokens / self.qps

    def wait_blocking(self) -> None:
        delay = self.reserve()
        if delay:
            time.sleep(delay)

    async def wait(self) -> None:
        delay = self.reserve()
        if delay:
            await asyncio.sleep(delay)

    def trace(self) -> aiohttp.TraceConfig:
        """For an aiohttp session: each request waits for its token before it is sent."""
        config = aiohttp.TraceConfig()

        async def on_request_start(_session: Any, _context: SimpleNamespace, _params: Any) -> None:
            await self.wait()

        config.on_request_start.append(on_request_start)
        return config

    def limit(self, api: Any) -> Any:
        """The kubernetes ``ApiClient`` ``api``, its REST client's requests limited; returns it."""
        rest = api.rest_client
        unlimited = rest.request

        def request(*args: Any, **kwargs: Any) -> Any:
            self.wait_blocking()
            return unlimited(*args, **kwargs)

        rest.request = request
        return api


def rate_limit(qps: float, burst: int) -> RateLimit | None:
    """The limit for ``--kube-api-qps``/``--kube-api-burst``; None (no limit) when qps is not positive."""
    return RateLimit(qps, burst) if qps > 0 else None
