"""``/healthz``, ``/readyz`` (and ``/metrics`` without a diagnostics endpoint) on one small HTTP server.

A check returns the problems it sees (empty when all is well); a failing
probe answers 503 with one line per problem, so whoever looks at a restarted
pod's events learns why.
"""

from __future__ import annotations

from typing import Callable, Iterable

from aiohttp import web
from prometheus_client import CONTENT_TYPE_LATEST, generate_latest

from . import metrics

Check = Callable[[], Iterable[str]]


def _probe(check: Check, failing: str, notes: Check = lambda: ()) -> Callable[[web.Request], "web.Response"]:
    async def handler(_: web.Request) -> web.Response:
        problems = list(check())
        said = "".join(f"\n- {n}" for n in notes())
        if problems:
            return web.Response(status=503, text=failing + "".join(f"\n- {p}" for p in problems) + said + "\n")
        return web.Response(text="ok" + said + "\n")

    return handler


async def serve(host: str, port: int, alive: Check, ready: Check, with_metrics: bool = True,
                more: list[tuple[str, int]] = (), notes: Check = lambda: ()) -> web.AppRunner:
    """The probes on ``host:port`` and each of ``more``; /metrics too unless ``with_metrics`` is false (it is
    then served by the diagnostics endpoint). ``notes``: what /readyz says beside its answer (kinds not served)."""
    # Read at each collection, whichever endpoint serves the metrics.
    metrics.READY.set_function(lambda: 0.0 if any(True for _ in ready()) else 1.0)

    async def exposition(_: web.Request) -> web.Response:
        return web.Response(body=generate_latest(), headers={"Content-Type": CONTENT_TYPE_LATEST})

    app = web.Application()
    app.router.add_get("/healthz", _probe(alive, "not alive"))
    app.router.add_get("/readyz", _probe(ready, "not ready", notes))
    if with_metrics:
        app.router.add_get("/metrics", exposition)
    runner = web.AppRunner(app, access_log=None)
    await runner.setup()
    for where in ((host, port), *more):
        await web.TCPSite(runner, *where).start()
    return runner
