"""The API server's deadline a leader's write carries is the time left of its tenure when the write is sent.

Getting the credential can take seconds (an exec plugin run when the token is due, and again after a 401):
a deadline measured before that would let the server store the write after the tenure ended, once a
standby may have taken over."""

from __future__ import annotations

import asyncio

from aiohttp import web

from metal3_ipam.controller.api import ApiWriter
from metal3_ipam.controller.credentials import Credentials, _Credential, _TokenSource
from metal3_ipam.core.inventory import Inventory

TENURE_END = 10.0
PLUGIN_SECONDS = 3.0


class _Clock:
    def __init__(self) -> None:
        self.now = 0.0


class _SlowPlugin(_TokenSource):
    """An exec plugin due at every request: each run takes PLUGIN_SECONDS on the clock and gives a new token."""

    what = "a slow exec plugin"

    def __init__(self, clock: _Clock) -> None:
        self.clock = clock
        self.runs = 0

    def needs_refresh(self) -> bool:
        return True

    def current(self) -> _Credential:
        self.runs += 1
        self.clock.now += PLUGIN_SECONDS
        return _Credential(f"Bearer token-{self.runs}")


def _seconds(timeout: str) -> float:
    assert timeout.endswith("us"), timeout
    return int(timeout[:-2]) / 1_000_000


def test_a_write_sent_after_a_slow_credential_and_a_401_is_given_no_more_than_the_tenure_left_when_sent():
    clock = _Clock()
    seen: list[tuple[float, float]] = []  # (deadline the request carries, tenure left when it reached the server)

    async def handler(request: web.Request) -> web.Response:
        seen.append((_seconds(request.query["timeout"]), TENURE_END - clock.now))
        if len(seen) == 1:
            return web.json_response({"kind": "Status", "code": 401}, status=401)
        return web.json_response({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "x"}}, status=201)

    async def scenario() -> None:
        app = web.Application()
        app.router.add_route("*", "/{tail:.*}", handler)
        runner = web.AppRunner(app)
        await runner.setup()
        site = web.TCPSite(runner, "127.0.0.1", 0)
        await site.start()
        port = site._server.sockets[0].getsockname()[1]
        credentials = Credentials(server=f"http://127.0.0.1:{port}", source=_SlowPlugin(clock))
        writer = ApiWriter(credentials, Inventory(), {}, write_deadline=lambda: max(0.0, TENURE_END - clock.now))
        try:
            await writer._call("POST", "/api/v1/namespaces/default/configmaps", body={"kind": "ConfigMap"})
        finally:
            await writer.close()
            await runner.cleanup()

    asyncio.run(scenario())
    assert len(seen) == 2, seen
    for deadline, left in seen:
        assert deadline <= left + 1e-6, f"a write carried {deadline}s with {left}s of the tenure left: {seen}"
