"""A TCP proxy on loopback that makes a client see the server late: a cache that lags.

Each connection accepted on ``127.0.0.1:<port>`` is joined to the upstream address; what the client
sends goes through at once, what the server sends back is held for a delay chosen at random per
connection (uniform in ``[0, max_delay]``) and then delivered in order. A controller whose watches and
requests go through it sees its watch events later than the answers its other connections get, by a
different amount per connection, as a controller does behind a slow or distant API server.

The bytes are never looked at: TLS passes through untouched, so a kubeconfig only needs the proxy's
address as its server (the control plane's serving certificate names 127.0.0.1).
"""

from __future__ import annotations

import heapq
import random
import socket
import threading
import time
from dataclasses import dataclass, field

_CHUNK = 65536


@dataclass
class ConnectionRecord:
    """What one connection went through: its delay, and the bytes held back on it."""

    delay: float
    to_server: int = 0
    to_client: int = 0


@dataclass
class LaggingProxy:
    """``with LaggingProxy(("127.0.0.1", 6443), max_delay=1.5) as proxy: ... proxy.address ...``"""

    upstream: tuple[str, int]
    max_delay: float = 1.5
    seed: int | None = None
    connections: list[ConnectionRecord] = field(default_factory=list)

    def __post_init__(self) -> None:
        self._random = random.Random(self.seed)
        self._listener: socket.socket | None = None
        self._stop = threading.Event()
        self._threads: list[threading.Thread] = []
        self._sockets: list[socket.socket] = []
        self._lock = threading.Lock()

    # -- lifecycle ----------------------------------------------------------------

    def start(self) -> "LaggingProxy":
        listener = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        listener.bind(("127.0.0.1", 0))
        listener.listen(64)
        listener.settimeout(0.2)
        self._listener = listener
        self._spawn(self._accept, "lagging proxy: accept")
        return self

    def stop(self) -> None:
        self._stop.set()
        with self._lock:
            sockets = list(self._sockets)
        for s in sockets:
            _close(s)
        if self._listener is not None:
            _close(self._listener)
        for t in list(self._threads):
            t.join(timeout=5)

    def __enter__(self) -> "LaggingProxy":
        return self.start()

    def __exit__(self, *exc) -> None:
        self.stop()

    @property
    def address(self) -> tuple[str, int]:
        assert self._listener is not None, "the proxy is not started"
        return self._listener.getsockname()

    @property
    def url(self) -> str:
        host, port = self.address
        return f"https://{host}:{port}"

    # -- the work -------------------------------------------------------------------

    def _spawn(self, target, name: str, *args) -> None:
        t = threading.Thread(target=target, args=args, name=name, daemon=True)
        with self._lock:
            self._threads.append(t)
        t.start()

    def _accept(self) -> None:
        while not self._stop.is_set():
            try:
                client, _ = self._listener.accept()
            except socket.timeout:
                continue
            except OSError:
                return
            try:
                server = socket.create_connection(self.upstream, timeout=10)
            except OSError:
                _close(client)
                continue
            server.settimeout(None)
            client.settimeout(None)
            for s in (client, server):
                s.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            record = ConnectionRecord(delay=self._random.uniform(0.0, self.max_delay))
            with self._lock:
                self.connections.append(record)
                self._sockets += [client, server]
            self._spawn(self._forward, "lagging proxy: to server", client, server, record)
            self._spawn(self._held_back, "lagging proxy: to client", server, client, record)

    def _forward(self, client: socket.socket, server: socket.socket, record: ConnectionRecord) -> None:
        """Client to server, at once."""
        try:
            while data := client.recv(_CHUNK):
                server.sendall(data)
                record.to_server += len(data)
        except OSError:
            pass
        _shut(server)

    def _held_back(self, server: socket.socket, client: socket.socket, record: ConnectionRecord) -> None:
        """Server to client, each piece delivered ``record.delay`` after it arrived, in order."""
        pending: list[tuple[float, int, bytes]] = []  # (due, sequence, bytes); empty bytes: the end
        ready = threading.Condition()
        sequence = 0

        def deliver() -> None:
            while True:
                with ready:
                    while not pending:
                        ready.wait()
                    due, _, data = pending[0]
                    now = time.monotonic()
                    if due > now:
                        ready.wait(due - now)  # the lag itself: each piece is held until it is due
                        continue
                    heapq.heappop(pending)
                if not data:
                    _shut(client)
                    return
                try:
                    client.sendall(data)
                except OSError:
                    _shut(server)
                    return
                record.to_client += len(data)

        self._spawn(deliver, "lagging proxy: deliver")
        while True:
            try:
                data = server.recv(_CHUNK)
            except OSError:
                data = b""
            with ready:
                sequence += 1
                heapq.heappush(pending, (time.monotonic() + record.delay, sequence, data))
                ready.notify()
            if not data:
                return


def _shut(s: socket.socket) -> None:
    try:
        s.shutdown(socket.SHUT_WR)
    except OSError:
        pass


def _close(s: socket.socket) -> None:
    try:
        s.shutdown(socket.SHUT_RDWR)
    except OSError:
        pass
    s.close()
