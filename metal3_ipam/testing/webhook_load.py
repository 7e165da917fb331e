"""Clients of the admission webhook server on loopback, well-behaved and hostile, for tests.

Every loop here is bounded in count and time and stops by itself; every
connection goes to 127.0.0.1. :class:`HostileLoad` runs the kinds of abuse
the server must withstand (idle connections, headers never finished, bodies
far over the cap, the largest review the rules' caps allow, refused, back to
back) on threads until stopped. ``python -m metal3_ipam.testing.webhook_load
serve PORT CERT_DIR`` runs a webhook server alone in a process, so a test can
read that process's memory from /proc.
"""

from __future__ import annotations

import asyncio
import http.client
import json
import socket
import ssl
import sys
import threading
import time
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path

HOST = "127.0.0.1"


def review(request: dict) -> bytes:
    return json.dumps({"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview", "request": request}).encode()


def pool_request(pool: dict, operation: str = "CREATE", uid: str = "u-1") -> dict:
    meta = pool["metadata"]
    return {"uid": uid, "operation": operation, "namespace": meta.get("namespace", "default"), "name": meta["name"],
            "kind": {"group": "ipam.metal3.io", "version": "v1alpha1", "kind": "IPPool"}, "object": pool,
            "oldObject": None, "userInfo": {"username": "someone"}}


def largest_refused_pool(name: str = "largest") -> dict:
    """An IPPool at every cap of the CRD schema, every value of it wrong: the most the rules can find fault with."""
    pad = "x" * 200
    return {"apiVersion": "ipam.metal3.io/v1alpha1", "kind": "IPPool",
            "metadata": {"name": name, "namespace": "default"},
            "spec": {"namePrefix": name,
                     "pools": [{"start": f"10.0.{i}.1", "end": f"10.0.{i}.0", "gateway": "2001:db8::1",
                                "dnsServers": ["bad" + pad] * 32} for i in range(256)],
                     "excludedAddresses": [f"bad{i}{pad}" for i in range(1024)],
                     "preAllocations": {f"c{i}{pad}": "bad" + pad for i in range(4096)}}}


def costly_small_pool(name: str = "costly") -> dict:
    """A pool review just under the small reviews' size (64 KiB) that takes the rules a long while:
    256 entries of 28 DNS servers each, every one of them wrong."""
    return {"apiVersion": "ipam.metal3.io/v1alpha1", "kind": "IPPool",
            "metadata": {"name": name, "namespace": "default"},
            "spec": {"namePrefix": name,
                     "pools": [{"start": f"10.0.{i}.1", "end": f"10.0.{i}.0", "gateway": "2001:db8::1",
                                "dnsServers": ["b"] * 28} for i in range(256)]}}


def claim_request(name: str = "c1", uid: str = "u-good") -> dict:
    claim = {"apiVersion": "ipam.metal3.io/v1alpha1", "kind": "IPClaim",
             "metadata": {"name": name, "namespace": "default"}, "spec": {"pool": {"name": "pool1"}}}
    return {"uid": uid, "operation": "CREATE", "namespace": "default", "name": name,
            "kind": {"group": "ipam.metal3.io", "version": "v1alpha1", "kind": "IPClaim"}, "object": claim,
            "userInfo": {"username": "someone"}}


def client_context(ca_pem: bytes) -> ssl.SSLContext:
    return ssl.create_default_context(cadata=ca_pem.decode())


def tls_socket(port: int, context: ssl.SSLContext, timeout: float = 5.0) -> ssl.SSLSocket:
    raw = socket.create_connection((HOST, port), timeout=timeout)
    try:
        return context.wrap_socket(raw, server_hostname=HOST)
    except BaseException:
        raw.close()
        raise


def post(port: int, context: ssl.SSLContext, path: str, body: bytes, timeout: float = 10.0,
         headers: dict | None = None) -> tuple[int, bytes]:
    """One POST on a connection of its own: the status and the body of the answer."""
    conn = http.client.HTTPSConnection(HOST, port, context=context, timeout=timeout)
    try:
        conn.request("POST", path, body=body, headers={"Content-Type": "application/json", **(headers or {})})
        answer = conn.getresponse()
        return answer.status, answer.read()
    finally:
        conn.close()


class KeptAlive:
    """A client that keeps its connection open between requests, as the API server does with a webhook's,
    and sends a request again on a new connection when the server had closed the kept one before answering
    (as Go's HTTP client does)."""

    def __init__(self, port: int, context: ssl.SSLContext, timeout: float = 10.0) -> None:
        self.port, self.context, self.timeout = port, context, timeout
        self.conn: http.client.HTTPSConnection | None = None

    def post(self, path: str, body: bytes) -> tuple[int, bytes]:
        for attempt in (1, 2):
            reused = self.conn is not None
            if self.conn is None:
                self.conn = http.client.HTTPSConnection(HOST, self.port, context=self.context, timeout=self.timeout)
            try:
                self.conn.request("POST", path, body=body, headers={"Content-Type": "application/json"})
                answer = self.conn.getresponse()
                return answer.status, answer.read()
            except (ConnectionError, http.client.RemoteDisconnected, ssl.SSLError):
                self.close()
                if not reused or attempt == 2:
                    raise
        raise AssertionError("unreachable")

    def close(self) -> None:
        if self.conn is not None:
            self.conn.close()
            self.conn = None


def closed_by_server(sock: ssl.SSLSocket, timeout: float) -> bool:
    """Whether the server closes ``sock`` within ``timeout`` seconds (it sends nothing meanwhile)."""
    sock.settimeout(timeout)
    try:
        return sock.recv(1) == b""
    except socket.timeout:
        return False
    except (ConnectionError, ssl.SSLError, OSError):
        return True


def status_line(sock: ssl.SSLSocket, timeout: float) -> str:
    """The first line the server answers on ``sock``, or "" when it closes without one."""
    sock.settimeout(timeout)
    data = b""
    try:
        while b"\r\n" not in data:
            chunk = sock.recv(4096)
            if not chunk:
                break
            data += chunk
    except (ConnectionError, ssl.SSLError, OSError):
        pass
    return data.split(b"\r\n", 1)[0].decode(errors="replace")


@dataclass
class HostileLoad:
    """Abuse of a webhook server on threads, each kind of it in a loop until :meth:`stop` or ``seconds``.

    ``idle``: connections that send nothing; ``half_headers``: connections that
    send half a request's headers; ``big_bodies``: clients that announce and
    send a body of ``big_body_bytes`` (8 MiB less one byte, over the cap);
    ``largest_reviews``: clients that post :func:`largest_refused_pool`
    back to back; ``costly_reviews``: clients that post :func:`costly_small_pool`
    back to back. Each reconnects when the server closes it. ``answers`` counts
    what came back (HTTP status, or the kind of failure); ``largest_seconds`` and
    ``costly_seconds`` hold each such review's round trip, when it was judged (200):
    the time the server takes for one on this machine now, a yardstick measured
    beside what a test or a benchmark times.
    """

    port: int
    ca_pem: bytes
    path: str
    idle: int = 0
    half_headers: int = 0
    big_bodies: int = 0
    largest_reviews: int = 0
    costly_reviews: int = 0
    big_body_bytes: int = 8 * 1024 * 1024 - 1
    seconds: float = 30.0
    answers: Counter = field(default_factory=Counter)
    largest_seconds: list[float] = field(default_factory=list)
    costly_seconds: list[float] = field(default_factory=list)
    _stop: threading.Event = field(default_factory=threading.Event)
    _threads: list[threading.Thread] = field(default_factory=list)
    _lock: threading.Lock = field(default_factory=threading.Lock)
    _bodies: dict[str, bytes] = field(default_factory=dict)  # a review per kind, made once

    def start(self) -> "HostileLoad":
        self._deadline = time.monotonic() + self.seconds
        self._context = client_context(self.ca_pem)
        kinds = [(self._hold, False)] * self.idle + [(self._hold, True)] * self.half_headers + \
                [(self._big_body, None)] * self.big_bodies + [(self._judged, "largest")] * self.largest_reviews + \
                [(self._judged, "costly")] * self.costly_reviews
        for target, arg in kinds:
            thread = threading.Thread(target=self._loop, args=(target, arg), daemon=True)
            thread.start()
            self._threads.append(thread)
        return self

    def stop(self) -> None:
        self._stop.set()
        for thread in self._threads:
            thread.join(15)

    def __enter__(self) -> "HostileLoad":
        return self.start()

    def __exit__(self, *_: object) -> None:
        self.stop()

    def _going(self) -> bool:
        return not self._stop.is_set() and time.monotonic() < self._deadline

    def _count(self, what: object) -> None:
        with self._lock:
            self.answers[what] += 1

    def _loop(self, target, arg) -> None:
        while self._going():
            try:
                target(arg)
            except (OSError, ssl.SSLError, http.client.HTTPException) as err:
                self._count(type(err).__name__)
                self._stop.wait(0.05)

    def _hold(self, half: bool) -> None:
        with tls_socket(self.port, self._context) as sock:
            if half:
                sock.sendall(f"POST {self.path} HTTP/1.1\r\nHost: {HOST}\r\nContent-Type: appl".encode())
            while self._going():
                if closed_by_server(sock, 0.2):
                    self._count("half headers closed" if half else "idle closed")
                    return

    def _big_body(self, _: object) -> None:
        with tls_socket(self.port, self._context) as sock:
            sock.sendall(f"POST {self.path} HTTP/1.1\r\nHost: {HOST}\r\nContent-Type: application/json\r\n"
                         f"Content-Length: {self.big_body_bytes}\r\n\r\n".encode())
            chunk, sent = b"[" + b"0," * 32767, 0
            sock.settimeout(2.0)
            try:
                while sent < self.big_body_bytes and self._going():
                    sock.sendall(chunk[:self.big_body_bytes - sent])
                    sent += len(chunk)
            except (OSError, ssl.SSLError):
                pass
            self._count(status_line(sock, 2.0).partition(" ")[2][:3] or "closed")

    def _judged(self, kind: str) -> None:
        """One review of ``kind`` (largest, costly) posted and answered, its round trip kept when judged."""
        if kind not in self._bodies:
            pool = largest_refused_pool() if kind == "largest" else costly_small_pool()
            self._bodies[kind] = review(pool_request(pool))
        started = time.monotonic()
        status, _ = post(self.port, self._context, self.path, self._bodies[kind], timeout=120)
        if status == 200:
            with self._lock:
                getattr(self, f"{kind}_seconds").append(time.monotonic() - started)
        self._count(status)


def rss_bytes(pid: int, field_name: str = "VmRSS") -> int:
    """A process's resident memory (VmRSS), or its peak so far (VmHWM), from /proc."""
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith(field_name + ":"):
            return int(line.split()[1]) * 1024
    raise LookupError(f"{field_name} not in /proc/{pid}/status")


def serve(port: int, cert_dir: str, judge_seconds: float | None = None) -> None:
    """A webhook server alone in this process, with an empty inventory, until stdin closes; with the default
    :class:`~metal3_ipam.controller.webhook_server.Limits`, but for ``judge_seconds`` when given."""
    from metal3_ipam import poolkinds  # noqa: F401  (registers the kinds of pool, as the controller's entry point does)
    from metal3_ipam.controller.admission import Admission
    from metal3_ipam.controller.webhook_server import Limits, WebhookServer
    from metal3_ipam.core.inventory import Inventory

    limits = Limits() if judge_seconds is None else Limits(judge_seconds=judge_seconds)

    async def main() -> None:
        server = await WebhookServer(Admission(Inventory()), HOST, port, cert_dir, limits=limits).start()
        print("serving", flush=True)
        await asyncio.to_thread(sys.stdin.read)
        await server.close()

    asyncio.run(main())


def hostile(port: int, ca_file: str, path: str, kinds: str) -> None:
    """A :class:`HostileLoad` (``kinds``: its counts as JSON) in this process, so that it does not share a
    test's interpreter with the clients the test times; says "loaded" once 30 answers came, and what came
    back when stdin closes."""
    load = HostileLoad(port, Path(ca_file).read_bytes(), path, **json.loads(kinds)).start()
    while sum(load.answers.values()) < 30 and load._going():
        time.sleep(0.05)
    print("loaded", flush=True)
    sys.stdin.read()
    load.stop()
    print(json.dumps({"answers": {str(k): v for k, v in load.answers.items()},
                      "largest_seconds": load.largest_seconds, "costly_seconds": load.costly_seconds}), flush=True)


USAGE = ("usage: python -m metal3_ipam.testing.webhook_load serve PORT CERT_DIR [JUDGE_SECONDS]\n"
         "       python -m metal3_ipam.testing.webhook_load hostile PORT CA_FILE PATH KINDS_JSON")

if __name__ == "__main__":
    if sys.argv[1:2] == ["serve"] and len(sys.argv) in (4, 5):
        serve(int(sys.argv[2]), sys.argv[3], *map(float, sys.argv[4:]))
    elif sys.argv[1:2] == ["hostile"] and len(sys.argv) == 6:
        hostile(int(sys.argv[2]), sys.argv[3], sys.argv[4], sys.argv[5])
    else:
        sys.exit(USAGE)


class ServerProcess:
    """:func:`serve` in a process, with a certificate of its own in ``directory``: started with ``with``, answering
    once :meth:`__enter__` returns (``port``, ``context`` for its clients, ``pid``), stopped when the ``with`` ends."""

    def __init__(self, directory: Path, judge_seconds: float | None = None) -> None:
        from metal3_ipam.testing.certs import Authority

        self.directory = Path(directory)
        self.judge_seconds = judge_seconds
        self.authority = Authority.create()
        self.authority.issue(self.directory)
        with socket.socket() as s:
            s.bind((HOST, 0))
            self.port = s.getsockname()[1]
        self.context = client_context(self.authority.pem)

    def __enter__(self) -> "ServerProcess":
        import subprocess

        judging = [] if self.judge_seconds is None else [str(self.judge_seconds)]
        self.process = subprocess.Popen([sys.executable, "-m", "metal3_ipam.testing.webhook_load", "serve",
                                         str(self.port), str(self.directory), *judging], stdin=subprocess.PIPE,
                                        stdout=subprocess.PIPE, stderr=(self.directory / "server.log").open("w"),
                                        text=True)
        self.pid = self.process.pid
        line = self.process.stdout.readline().strip()
        if line != "serving":
            self.process.kill()
            raise RuntimeError(f"the webhook server did not start: {line!r}")
        return self

    def __exit__(self, *_: object) -> None:
        self.process.stdin.close()
        self.process.wait(300)  # once the reviews under way are judged, as late as a loaded machine does


class HostileProcess:
    """:func:`hostile` in a process: started with ``with``, loaded once :meth:`__enter__` returns, and
    ``answers`` (status or failure -> count), ``largest_seconds`` and ``costly_seconds`` known once the
    ``with`` ends."""

    def __init__(self, port: int, ca_pem: bytes, path: str, directory: Path, seconds: float = 30.0,
                 **kinds: int) -> None:
        self.ca_file = Path(directory) / "hostile-ca.pem"
        self.ca_file.write_bytes(ca_pem)
        self.args = [sys.executable, "-m", "metal3_ipam.testing.webhook_load", "hostile", str(port),
                     str(self.ca_file), path, json.dumps({"seconds": seconds, **kinds})]
        self.answers: dict[str, int] = {}
        self.largest_seconds: list[float] = []
        self.costly_seconds: list[float] = []

    def __enter__(self) -> "HostileProcess":
        import subprocess

        self.process = subprocess.Popen(self.args, stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
        line = self.process.stdout.readline().strip()
        if line != "loaded":
            self.process.kill()
            raise RuntimeError(f"the hostile clients did not start: {line!r}")
        return self

    def __exit__(self, *_: object) -> None:
        # Its clients end with the answers they wait for: as late as a loaded machine judges them.
        out, _ = self.process.communicate("", timeout=600)
        told = json.loads(out.strip().splitlines()[-1]) if out.strip() else {}
        self.answers = told.get("answers", {})
        self.largest_seconds, self.costly_seconds = told.get("largest_seconds", []), told.get("costly_seconds", [])
