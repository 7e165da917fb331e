"""The lagging TCP proxy of the chaos tests, on loopback: bytes pass unchanged and in order, the server's
only after the connection's delay, the client's at once."""

from __future__ import annotations

import socket
import threading
import time

from metal3_ipam.testing.lagging_proxy import LaggingProxy


def _server(received: list[tuple[float, bytes]]) -> tuple[socket.socket, threading.Thread]:
    """An echo server that notes when each piece arrived."""
    listener = socket.create_server(("127.0.0.1", 0))

    def serve():
        conn, _ = listener.accept()
        with conn:
            while data := conn.recv(4096):
                received.append((time.monotonic(), data))
                conn.sendall(data)

    t = threading.Thread(target=serve, daemon=True)
    t.start()
    return listener, t


def _read(sock: socket.socket, n: int) -> bytes:
    out = b""
    while len(out) < n:
        chunk = sock.recv(n - len(out))
        assert chunk, "closed early"
        out += chunk
    return out


def test_answers_come_late_and_in_order_requests_at_once():
    received: list[tuple[float, bytes]] = []
    listener, thread = _server(received)
    # A delay of nearly 3 s (the seed's first draw): held back by it, the client's bytes would reach the server
    # no sooner than that; passed at once, they come in a loaded machine's moment.
    with LaggingProxy(listener.getsockname(), max_delay=12.0, seed=3) as proxy:
        with socket.create_connection(proxy.address, timeout=10) as client:
            sent = time.monotonic()
            pieces = [f"piece {i};".encode() for i in range(20)]
            for piece in pieces:
                client.sendall(piece)
            echoed = _read(client, sum(map(len, pieces)))
            came = time.monotonic()
        (record,) = proxy.connections
    listener.close()
    thread.join(timeout=5)
    assert echoed == b"".join(pieces)
    assert b"".join(data for _, data in received) == echoed
    assert record.delay > 2.5  # the seed's first delay: a lag worth measuring
    assert received[0][0] - sent < record.delay, "the client's bytes were held back"
    assert came - sent >= record.delay, (came - sent, record.delay)
    assert record.to_server == record.to_client == len(echoed)


def test_each_connection_draws_its_own_delay_and_an_end_passes_through():
    received: list[tuple[float, bytes]] = []
    listener, thread = _server(received)
    with LaggingProxy(listener.getsockname(), max_delay=0.3, seed=1) as proxy:
        with socket.create_connection(proxy.address, timeout=10) as client:
            client.sendall(b"bye")
            client.shutdown(socket.SHUT_WR)
            assert _read(client, 3) == b"bye"
            assert client.recv(10) == b"", "the server's end did not reach the client"
        assert len(proxy.connections) == 1 and 0 <= proxy.connections[0].delay <= 0.3
    listener.close()
    thread.join(timeout=5)
