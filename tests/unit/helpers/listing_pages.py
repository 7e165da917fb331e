"""A LIST as the controller files it, page by page, and the addresses in it."""

from __future__ import annotations

from metal3_ipam.core import kinds


def address(name: str, version: int, uid: str | None = None, ip: str = "10.0.0.1") -> dict:
    return {"apiVersion": kinds.METAL3_API_VERSION, "kind": "IPAddress",
            "metadata": {"name": name, "namespace": "ns", "uid": uid or f"uid-{name}",
                         "resourceVersion": str(version)},
            "spec": {"address": ip, "pool": {"name": "p", "namespace": "ns"}, "claim": {"name": name}}}


def listing(n: int, version: int) -> list[dict]:
    return [address(f"a{i}", version - 1 - (i % 7), ip=f"10.0.{i // 250}.{i % 250 + 1}") for i in range(n)]
