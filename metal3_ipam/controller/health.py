"""``/healthz``, ``/readyz`` and ``/metrics`` on one small HTTP server."""

from __future__ import annotations

from typing import Callable

from aiohttp import web
from prometheus_client import CONTENT_TYPE_LATEST, generate_latest


async def serve(host: str, port: int, alive: Callable[[], bool],
                readiness: Callable[[], str | None]) -> web.AppRunner:
    """``readiness()`` is None when ready, else why not (the body of the 503)."""
    async def healthz(_: web.Request) -> web.Response:
        return web.Response(text="ok\n") if alive() else web.Response(status=503, text="not alive\n")

    async def readyz(_: web.Request) -> web.Response:
        why = readiness()
        return web.Response(text="ok\n") if why is None else web.Response(status=503, text=f"not ready: {why}\n")

    async def metrics(_: web.Request) -> web.Response:
        return web.Response(body=generate_latest(), headers={"Content-Type": CONTENT_TYPE_LATEST})

    app = web.Application()
    app.router.add_get("/healthz", healthz)
    app.router.add_get("/readyz", readyz)
    app.router.add_get("/metrics", metrics)
    runner = web.AppRunner(app, access_log=None)
    await runner.setup()
    await web.TCPSite(runner, host, port).start()
    return runner
