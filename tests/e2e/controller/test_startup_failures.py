"""``metal3-ipam run`` when a port it needs is taken: exit status 1 and one line saying which, no traceback.

The runtime connects to the API server, assembles its parts and starts the
probes and the webhooks; one that cannot be had ends the run through the same
stop as a normal end, which closes what had started already.
"""

from __future__ import annotations

import socket
import subprocess
import sys
from collections.abc import Iterator
from contextlib import contextmanager

from metal3_ipam.testing.certs import Authority


@contextmanager
def port_in_use() -> Iterator[int]:
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        yield taken.getsockname()[1]


def run(control_plane, *args: str) -> subprocess.CompletedProcess:
    argv = [sys.executable, "-m", "metal3_ipam.cli", "run", "--kubeconfig", str(control_plane.kubeconfig), *args]
    return subprocess.run(argv, stdin=subprocess.DEVNULL, capture_output=True, text=True, timeout=120)


def ended_saying(result: subprocess.CompletedProcess, words: str) -> None:
    output = result.stdout + result.stderr
    assert result.returncode == 1, f"exit status {result.returncode}:\n{output}"
    assert words in output, output
    assert "Traceback" not in output and "Unclosed" not in output, output


def test_a_health_port_in_use(control_plane):
    with port_in_use() as port:
        result = run(control_plane, "--health-address", f"127.0.0.1:{port}", "--no-leader-elect")
    ended_saying(result, f"cannot serve health and metrics on 127.0.0.1:{port}: ")


def test_a_webhook_port_in_use(control_plane, tmp_path):
    """With leader election on: the elector is made before the servers start, and stopped unstarted."""
    Authority.create().issue(tmp_path)
    with port_in_use() as health:
        pass  # a free port, for the probes
    with port_in_use() as port:
        result = run(control_plane, "--health-address", f"127.0.0.1:{health}", "--webhook-port", str(port),
                     "--webhook-cert-dir", str(tmp_path))
    ended_saying(result, f"cannot serve admission webhooks on port {port} with the certificate in {tmp_path}: ")

