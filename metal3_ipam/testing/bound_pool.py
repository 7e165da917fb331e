"""A pool of many claims already bound, built fast, for tests and benchmarks of big pools.

One IPClaim is bound through the in-memory store by the reconcile itself; its
claim and address are then copied with other names, IPs and uids. The copies
are what the reconcile would have written, so a pass over them has nothing
to do but look.
"""

from __future__ import annotations

import ipaddress
import json
import random

from ..core import kinds
from ..core import objects as o
from ..core.reconcile import reconcile
from ..memory import MemoryApi

NOW = "2024-01-01T00:00:00Z"


def claim(name: str, pool: str, namespace: str) -> dict:
    return {"apiVersion": kinds.METAL3_API_VERSION, "kind": "IPClaim",
            "metadata": {"name": name, "namespace": namespace},
            "spec": {"pool": {"name": pool, "namespace": namespace}}}


def bound_pool(n: int, pool: str = "pool1", namespace: str = "default", subnet: str = "10.0.0.0/8") -> MemoryApi:
    """An in-memory store with an IPPool on ``subnet`` and ``n`` IPClaims bound to its first addresses."""
    api = MemoryApi(now=NOW)
    api.load({"apiVersion": kinds.METAL3_API_VERSION, "kind": "IPPool",
              "metadata": {"name": pool, "namespace": namespace},
              "spec": {"namePrefix": pool, "pools": [{"subnet": subnet}]}})
    api.load(claim("claimzero", pool, namespace))
    api.apply(reconcile(api.inventory.snapshot((namespace, pool), api.now, random.Random(0))))
    template_claim = api.inventory.get(kinds.IPCLAIM, namespace, "claimzero")
    (template_address,) = api.inventory.of_kind(kinds.IPADDRESS)
    first = ipaddress.ip_address(o.spec(template_address)["address"])
    texts = [json.dumps(template_claim), json.dumps(template_address)]
    uids = [o.meta(template_claim)["uid"], o.meta(template_address)["uid"]]
    dashed = str(first).replace(".", "-")
    for i in range(1, n):
        ip = str(first + i)
        for text in texts:
            for uid in uids:
                text = text.replace(uid, f"{uid}-{i}")
            api.inventory.upsert(json.loads(text.replace("claimzero", f"claim{i}").replace(str(first), ip)
                                            .replace(dashed, ip.replace(".", "-"))))
    return api
