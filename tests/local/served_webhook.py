"""The admission webhook served on loopback for the tests (``Served``), the paths of its hooks, and a pool and
address to review."""

from __future__ import annotations

import json
import socket
import time

from metal3_ipam.controller.admission import Admission
from metal3_ipam.controller.webhook import hooks
from metal3_ipam.controller.webhook_server import Limits
from metal3_ipam.controller.webhook_server import WebhookServer
from metal3_ipam.core import kinds
from metal3_ipam.testing import webhook_load as load
from metal3_ipam.testing.certs import Authority

from ipam_objects import METAL3, ippool
from ipam_objects import inventory_of as inventory


def address(name: str, ip: str, pool: str = "pool1", ns: str = "default") -> dict:
    return {"apiVersion": METAL3, "kind": "IPAddress", "metadata": {"name": name, "namespace": ns},
            "spec": {"address": ip, "pool": {"name": pool}, "claim": {"name": f"claim-{name}"}, "prefix": 24}}


POOL = ippool("pool1", prefix=24, pools=[{"start": "192.168.0.10", "end": "192.168.0.20"}])


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


POOL_PATH = next(h.path for h in hooks() if h.kind == kinds.IPPOOL and not h.mutating)


CLAIM_PATH = next(h.path for h in hooks() if h.kind == kinds.IPCLAIM)


class Served:
    """A webhook server on loopback, on a loop of the test's own, with short limits."""

    def __init__(self, tmp_path, limits: Limits, admission: Admission | None = None) -> None:
        self.authority = Authority.create()
        self.authority.issue(tmp_path)
        self.port = free_port()
        self.context = load.client_context(self.authority.pem)
        self.limits, self.tmp_path = limits, tmp_path
        self.admission = admission or Admission(inventory())

    async def __aenter__(self) -> "Served":
        self.server = await WebhookServer(self.admission, "127.0.0.1", self.port, self.tmp_path,
                                          limits=self.limits).start()
        return self

    async def __aexit__(self, *_) -> None:
        await self.server.close()

    def post(self, body: bytes, path: str = POOL_PATH) -> tuple[int, bytes]:
        return load.post(self.port, self.context, path, body)

    def timed_good_review(self) -> float:
        started = time.monotonic()
        status, answer = load.post(self.port, self.context, CLAIM_PATH, load.review(load.claim_request()), timeout=120)
        assert status == 200 and json.loads(answer)["response"]["allowed"], answer
        return time.monotonic() - started
