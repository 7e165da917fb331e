"""The admission webhook served on loopback for the tests (``Served``), the paths of its hooks, and a pool and
address to review."""

from __future__ import annotations

import json
import socket
import threading

from metal3_ipam.controller.admission import HERE, Admission
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

    def good_review(self) -> None:
        """An ordinary claim review, as the API server sends one: answered, and allowed."""
        status, answer = load.post(self.port, self.context, CLAIM_PATH, load.review(load.claim_request()), timeout=120)
        assert status == 200 and json.loads(answer)["response"]["allowed"], answer


class Gate:
    """Where a judge's thread waits until the test lets the review it judges through: one at a time
    (:meth:`let_through`) or all (:meth:`open`). A judgement then lasts as long as the test wants, however fast
    or loaded the machine, so that what goes on meanwhile is a matter of order, not of time. Counts the reviews
    that ``arrived`` and ``passed``, and names the threads they were judged on."""

    PATIENCE = 300.0  # a review held longer goes through all the same: a test that holds it fails, not hangs

    def __init__(self) -> None:
        self._changed = threading.Condition()
        self.permits, self.opened, self.arrived, self.passed = 0, False, 0, 0
        self.threads: set[str] = set()

    def wait(self) -> None:
        with self._changed:
            self.arrived += 1
            self.threads.add(threading.current_thread().name)
            self._changed.notify_all()
            self._changed.wait_for(lambda: self.opened or self.permits > 0, timeout=self.PATIENCE)
            if self.permits > 0 and not self.opened:
                self.permits -= 1
            self.passed += 1
            self._changed.notify_all()

    def let_through(self, count: int = 1) -> None:
        with self._changed:
            self.permits += count
            self._changed.notify_all()

    def open(self) -> None:
        with self._changed:
            self.opened = True
            self._changed.notify_all()


class GatedAdmission(Admission):
    """An :class:`Admission` whose pool reviews wait at :attr:`gate` before they are judged."""

    def __init__(self, *args, **kwargs) -> None:
        super().__init__(*args, **kwargs)
        self.gate = Gate()

    def review(self, request: dict, mutating: bool = False, pools: list[dict] | None = None, live=HERE) -> dict:
        kind = request.get("kind") or {}
        if (kind.get("group"), kind.get("kind")) == kinds.IPPOOL and not mutating:
            self.gate.wait()
        return super().review(request, mutating=mutating, pools=pools, live=live)
