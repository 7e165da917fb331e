#!/usr/bin/env python3
"""Memory per bound claim in the controller: whole objects against slim ones, and the pool's ledger over them.

N bound claims with their addresses are made as the API server returns them
(managedFields of the client that created them and of the controller that
wrote their status and finalizers, each object parsed from its own JSON text
as a watch event is) and filed into an ``Inventory``: once as they come, once
through ``slim``; and once as the controller keeps them: slim in the
inventory, with the pool's ledger loaded over them and a full pass planned
(as ``controller/workers.py`` does at start-up), the pool's status as that
pass wrote it filed back. Each form runs in a fresh process, so the RSS growth
is its own; tracemalloc counts the bytes what was built holds. Printed side by
side: bytes per claim (with its Metal3 IPAddress; for Cluster API claims also
the Cluster API IPAddress), the ratio whole/slim, and what the ledger adds.
The goal (<= 5 KiB per claim) is for the whole controller: the ``ledger`` form.

    python -m bench.memory_per_claim [--claims 40000] [--api metal3|capi|both] [--forms whole,slim,ledger]
"""

from __future__ import annotations

import argparse
import gc
import json
import subprocess
import sys
import tracemalloc
import uuid
from pathlib import Path

from metal3_ipam import poolkinds  # noqa: F401  (registers the kinds of pool)
from metal3_ipam.controller.workers import MAX_STEPS_PER_PASS
from metal3_ipam.core import kinds
from metal3_ipam.core import objects as o
from metal3_ipam.core.actions import SetStatus
from metal3_ipam.core.inventory import Inventory
from metal3_ipam.core.ledger import Ledger
from metal3_ipam.core.reconcile import load, plan_pass, run_to_end
from metal3_ipam.core.naming import address_name
from metal3_ipam.core.slim import slim


ROOT = Path(__file__).resolve().parent.parent


GOAL = 5 * 1024
NS = "bench"
POOL = "pool-a"
PREFIX = "bench"  # the pool's namePrefix: its Metal3 addresses are named PREFIX-<ip>
FORMS = ("whole", "slim", "ledger")
CAPI_VERSION = f"{kinds.CAPI_IPAM_GROUP}/{kinds.CAPI_IPAM_VERSIONS[0]}"


def _field(manager: str, operation: str, api_version: str, fields: dict, subresource: str | None = None) -> dict:
    entry = {"manager": manager, "operation": operation, "apiVersion": api_version,
             "time": "2026-11-22T01:02:03Z", "fieldsType": "FieldsV1", "fieldsV1": fields}
    if subresource:
        entry["subresource"] = subresource
    return entry


def _meta(name: str, uid: str, version: int, finalizer: str, owners: list[dict] | None = None,
          labels: dict | None = None) -> dict:
    meta = {"name": name, "namespace": NS, "uid": uid, "resourceVersion": str(version), "generation": 1,
            "creationTimestamp": f"2026-11-22T01:{version // 6000 % 60:02d}:{version // 100 % 60:02d}Z",
            "finalizers": [finalizer]}
    if owners:
        meta["ownerReferences"] = owners
    if labels:
        meta["labels"] = labels
    return meta


def _owner(api_version: str, kind: str, name: str, uid: str, controller: bool) -> dict:
    ref = {"apiVersion": api_version, "kind": kind, "name": name, "uid": uid, "blockOwnerDeletion": True}
    if controller:
        ref["controller"] = True
    return ref


def bound_claim(i: int, api: str, pool_uid: str) -> list[str]:
    """The JSON texts of one bound claim and its address(es), as the API server answers a GET."""
    claim_uid, address_uid, mirror_uid = (str(uuid.UUID(int=i * 4 + k)) for k in (1, 2, 3))
    ip = _ip(i)
    lock = address_name(PREFIX, ip)
    name = f"machine-{i:06d}-eth0"
    labels = {kinds.CLUSTER_NAME_LABEL: "cluster-a"}
    condition = {"type": "Ready", "status": "True", "reason": "AddressAllocated", "message": f"bound to {ip}",
                 "lastTransitionTime": "2026-11-22T01:02:03Z"}
    controller_fields = {"f:metadata": {"f:finalizers": {".": {}, f'v:"{kinds.FINALIZERS[kinds.IPCLAIM]}"': {}}}}
    status_fields = {"f:status": {".": {}, "f:address": {".": {}, "f:name": {}, "f:namespace": {}},
                                  "f:conditions": {".": {}, 'k:{"type":"Ready"}': {
                                      ".": {}, "f:lastTransitionTime": {}, "f:message": {}, "f:reason": {},
                                      "f:status": {}, "f:type": {}}}}}
    texts = []
    if api == "metal3":
        claim = {"apiVersion": kinds.METAL3_API_VERSION, "kind": "IPClaim",
                 "metadata": _meta(name, claim_uid, 3 * i + 10, kinds.FINALIZERS[kinds.IPCLAIM], labels=labels),
                 "spec": {"pool": {"name": POOL}},
                 "status": {"address": {"name": lock, "namespace": NS}, "conditions": [condition]}}
        claim_ref = {"name": name, "namespace": NS}
        claim_owner = _owner(kinds.METAL3_API_VERSION, "IPClaim", name, claim_uid, True)
    else:
        claim = {"apiVersion": CAPI_VERSION, "kind": "IPAddressClaim",
                 "metadata": _meta(name, claim_uid, 3 * i + 10, kinds.FINALIZERS[kinds.CAPI_CLAIM], labels=labels),
                 "spec": {"poolRef": {"apiGroup": kinds.METAL3_GROUP, "kind": "IPPool", "name": POOL}},
                 "status": {"addressRef": {"name": name}, "conditions": [condition]}}
        claim_ref = {"apiVersion": CAPI_VERSION, "kind": "IPAddressClaim", "name": name, "namespace": NS}
        claim_owner = _owner(CAPI_VERSION, "IPAddressClaim", name, claim_uid, True)
    claim["metadata"]["managedFields"] = [
        _field("kubectl-create", "Update", claim["apiVersion"],
               {"f:metadata": {"f:labels": {".": {}, "f:cluster.x-k8s.io/cluster-name": {}}},
                "f:spec": {".": {}, "f:pool": {".": {}, "f:name": {}}}}),
        _field("metal3-ipam", "Update", claim["apiVersion"], controller_fields),
        _field("metal3-ipam", "Update", claim["apiVersion"], status_fields, "status")]
    texts.append(json.dumps(claim))
    pool_owner = _owner(kinds.METAL3_API_VERSION, "IPPool", POOL, pool_uid, False)
    address = {"apiVersion": kinds.METAL3_API_VERSION, "kind": "IPAddress",
               "metadata": _meta(lock, address_uid, 3 * i + 11, kinds.FINALIZERS[kinds.IPADDRESS],
                                 owners=[pool_owner, claim_owner], labels=labels),
               "spec": {"address": ip, "prefix": 16, "gateway": "10.0.0.1", "pool": {"name": POOL, "namespace": NS},
                        "claim": claim_ref}}
    address["metadata"]["managedFields"] = [_field("metal3-ipam", "Update", kinds.METAL3_API_VERSION, {
        "f:metadata": {"f:finalizers": {".": {}, f'v:"{kinds.FINALIZERS[kinds.IPADDRESS]}"': {}},
                       "f:labels": {".": {}, "f:cluster.x-k8s.io/cluster-name": {}},
                       "f:ownerReferences": {".": {}, f'k:{{"uid":"{pool_uid}"}}': {}, f'k:{{"uid":"{claim_uid}"}}': {}}},
        "f:spec": {".": {}, "f:address": {}, "f:claim": {".": {}, "f:name": {}, "f:namespace": {}}, "f:gateway": {},
                   "f:pool": {".": {}, "f:name": {}, "f:namespace": {}}, "f:prefix": {}}})]
    texts.append(json.dumps(address))
    if api == "capi":
        mirror = {"apiVersion": CAPI_VERSION, "kind": "IPAddress",
                  "metadata": _meta(name, mirror_uid, 3 * i + 12, kinds.FINALIZERS[kinds.CAPI_ADDRESS],
                                    owners=[claim_owner, pool_owner], labels=labels),
                  "spec": {"claimRef": {"name": name},
                           "poolRef": {"apiGroup": kinds.METAL3_GROUP, "kind": "IPPool", "name": POOL},
                           "address": ip, "prefix": 16, "gateway": "10.0.0.1"}}
        mirror["metadata"]["managedFields"] = [_field("metal3-ipam", "Update", CAPI_VERSION, {
            "f:metadata": {"f:finalizers": {".": {}}, "f:ownerReferences": {".": {}}},
            "f:spec": {".": {}, "f:address": {}, "f:claimRef": {".": {}, "f:name": {}}, "f:gateway": {},
                       "f:poolRef": {".": {}, "f:apiGroup": {}, "f:kind": {}, "f:name": {}}, "f:prefix": {}}})]
        texts.append(json.dumps(mirror))
    return texts


def _ip(i: int) -> str:
    """The i-th claim's IP: from 10.0.0.2 on (10.0.0.0 is the network, 10.0.0.1 the gateway)."""
    n = i + 2
    return f"10.{(n >> 16) & 255}.{(n >> 8) & 255}.{n & 255}"


def pool_text(pool_uid: str) -> str:
    """The pool, a /16 serving every claim, as the API server answers a GET."""
    pool = {"apiVersion": kinds.METAL3_API_VERSION, "kind": "IPPool",
            "metadata": _meta(POOL, pool_uid, 1, kinds.FINALIZERS[kinds.IPPOOL]),
            "spec": {"namePrefix": PREFIX, "prefix": 16, "gateway": "10.0.0.1",
                     "pools": [{"start": "10.0.0.2", "end": "10.0.255.254"}]}}
    return json.dumps(pool)


def keep_ledger(inventory: Inventory) -> Ledger:
    """What a full pass of the controller keeps of the pool: its ledger loaded from the inventory and
    decided over (``PoolWorkers._pass``); the pool status it writes is filed back, as the writer's answer is."""
    pool = o.PoolKey(NS, POOL, kinds.IPPOOL)
    inventory.drain(pool)  # the pass takes the change log: what the ledger now knows
    snapshot = inventory.snapshot(pool, "2026-11-22T02:00:00Z")
    ledger = Ledger()
    run_to_end(load(ledger, snapshot))
    plan = run_to_end(plan_pass(ledger, snapshot, full=True, loaded=True, max_steps=MAX_STEPS_PER_PASS))
    ledger.settle()
    del snapshot
    for action in plan.writes:
        if isinstance(action, SetStatus) and action.target.group_kind == kinds.IPPOOL:
            written = json.loads(json.dumps({**inventory.get(kinds.IPPOOL, NS, POOL), "status": action.status}))
            written["metadata"]["resourceVersion"] = str(int(written["metadata"]["resourceVersion"]) + 1)
            inventory.upsert(slim(written))
        elif not isinstance(action, SetStatus):
            raise AssertionError(f"a pass over bound claims planned a write: {action}")
    assert len(ledger.claims) == len(ledger.bound) and not ledger.pending_steps, "every claim bound, nothing left"
    return ledger


def rss_bytes() -> int:
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) * 1024
    return 0


def measure(n: int, api: str, form: str, tool: str) -> float:
    """In this process: file n bound claims (and their addresses) as ``form`` ('whole' or 'slim'; or 'ledger':
    slim, with the pool's ledger kept over them); bytes per claim by ``tool``: 'rss' (growth of the resident set) or 'traced' (tracemalloc, whose
    own bookkeeping per block would inflate the RSS: the two are measured in separate processes)."""
    pool_uid = str(uuid.UUID(int=0))
    texts = [bound_claim(i, api, pool_uid) for i in range(n)]  # made before measuring: not counted
    keep = (lambda obj: obj) if form == "whole" else slim
    inventory = Inventory()
    inventory.upsert(keep(json.loads(pool_text(pool_uid))))
    gc.collect()
    rss_before = rss_bytes()
    if tool == "traced":
        tracemalloc.start()
    for group in texts:
        for text in group:
            inventory.upsert(keep(json.loads(text)))  # each parsed alone, as a watch event is
    ledger = keep_ledger(inventory) if form == "ledger" else None
    gc.collect()
    assert len(inventory.objects) == n * len(texts[0]) + 1
    assert ledger is None or len(ledger.bound) == n
    if tool == "traced":
        return tracemalloc.get_traced_memory()[0] / n
    return (rss_bytes() - rss_before) / n


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--claims", type=int, default=40_000)
    parser.add_argument("--api", choices=("metal3", "capi", "both"), default="both")
    parser.add_argument("--forms", default=",".join(FORMS), help="of " + ", ".join(FORMS))
    parser.add_argument("--one", nargs=3, metavar=("API", "FORM", "TOOL"), help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.one:
        print(json.dumps(measure(args.claims, *args.one)))
        return 0
    forms = [f for f in FORMS if f in args.forms.split(",")]
    apis = ("metal3", "capi") if args.api == "both" else (args.api,)
    print(f"{args.claims} bound claims; bytes per claim with its address(es)")
    print("  whole: inventory of whole objects; slim: inventory of slim objects;"
          " ledger: slim inventory + the pool's ledger after a full pass (the controller's data)")
    print(f"{'claims':<32}{'form':<8}{'tracemalloc':>13}{'RSS growth':>13}")
    failed = False
    for api in apis:
        figures = {}
        label = "IPClaim + IPAddress" if api == "metal3" else "IPAddressClaim + 2 addresses"
        for form in forms:
            figures[form] = {tool: json.loads(subprocess.run(
                [sys.executable, "-m", __spec__.name, "--claims", str(args.claims), "--one", api, form, tool],
                check=True, capture_output=True, text=True, cwd=ROOT).stdout) for tool in ("traced", "rss")}
            print(f"{label:<32}{form:<8}{figures[form]['traced']:>11.0f} B{figures[form]['rss']:>11.0f} B")
        if "whole" in figures and "slim" in figures:
            whole, lean = figures["whole"], figures["slim"]
            print(f"{'':<32}{'w/slim':<8}{whole['traced'] / lean['traced']:>12.1f}x{whole['rss'] / lean['rss']:>12.1f}x")
        if "ledger" in figures and "slim" in figures:
            added = {t: figures["ledger"][t] - figures["slim"][t] for t in ("traced", "rss")}
            print(f"{'':<32}{'+ledger':<8}{added['traced']:>11.0f} B{added['rss']:>11.0f} B")
        judged = "ledger" if "ledger" in figures else "slim" if "slim" in figures else None
        if judged is not None:
            rss = figures[judged]["rss"]
            ok = rss <= GOAL
            failed |= not ok
            print(f"{'':<32}{judged} RSS per claim {rss / 1024:.2f} KiB (goal <= 5 KiB) {'PASS' if ok else 'FAIL'}"
                  + ("" if judged == "ledger" else "  (inventory only: not the whole controller)"))
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
