"""``clusterctl move`` between live control planes: the pieces every move scenario uses.

What the controllers did meanwhile, read from their logs (each planned write is logged with ``-v``)
and their metrics; owner references as clusterctl follows them. The fixtures (``clusterctl``,
``controllers``) are in this folder's conftest.py.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterable

from controller_fixtures import ControllerProcess

INFRA = ("infrastructure.cluster.x-k8s.io", "v1beta1")
# A move of a few hundred claims takes well under a minute here; a move the target disturbs
# retries each object for minutes. The deadline only bounds a failing run.
MOVE_TIMEOUT = 600.0


def report(line: str) -> None:
    print(f"[move] {line}", flush=True)


def owner_ref(obj: dict, *, controller: bool) -> dict:
    return {"apiVersion": obj["apiVersion"], "kind": obj["kind"], "name": obj["metadata"]["name"],
            "uid": obj["metadata"]["uid"], "controller": controller, "blockOwnerDeletion": True}


def diff(name: str, before: dict, after: dict, limit: int = 15) -> list[str]:
    """One line per key whose value differs (or is absent on one side), at most ``limit`` of them."""
    lines = [f"{name} {key}: {before.get(key, '<absent>')} -> {after.get(key, '<absent>')}"
             for key in sorted(set(before) | set(after), key=str)
             if before.get(key, "<absent>") != after.get(key, "<absent>")]
    return lines[:limit] + ([f"... {len(lines) - limit} more"] if len(lines) > limit else [])


def dangling_owner_references(objects: list[dict], others: Iterable[dict] = ()) -> list[str]:
    """Owner references of ``objects`` that name none of them, nor of ``others``, by uid (a move changes uids)."""
    uids = {o["metadata"]["uid"]: (o["kind"], o["metadata"]["name"]) for o in [*objects, *others]}
    return [f"{o['kind']} {o['metadata']['name']} -> {ref['kind']} {ref['name']} uid {ref['uid']}"
            for o in objects for ref in o["metadata"].get("ownerReferences") or []
            if uids.get(ref["uid"]) != (ref["kind"], ref["name"])]


# A planned write as the controller logs it: "pool <namespace>/<name>: <subject>: <action> ..." (a pool of
# cluster scope has no namespace: "pool /<name>").
_WRITE = re.compile(r"pool (?P<pool>[^/\s]*/[^:\s]+): (?P<subject>.+?): "
                    r"(?P<action>create|Delete|SetFinalizers|SetMetadata|SetStatus|event)\b(?P<rest>.*)")


def planned_writes(controller: ControllerProcess, offset: int, namespace: str | None = None,
                   pools: Callable[[str], bool] | None = None) -> list[str]:
    """The writes the controller planned since ``offset`` ("<subject>: <action> <object>"), for the pools of
    ``namespace`` or those ``pools`` admits (given "<namespace>/<name>")."""
    admit = pools or (lambda pool: pool.startswith(f"{namespace}/"))
    out = []
    for line in controller.log_since(offset).splitlines():
        m = _WRITE.search(line)
        if m and admit(m.group("pool")):
            out.append(f"{m.group('subject')}: {m.group('action')}{m.group('rest')}")
    return out


def address_counters(controller: ControllerProcess, namespace: str) -> tuple[float, float]:
    """(allocations, releases) the controller counted for the namespace."""
    samples = controller.metrics()

    def total(name: str) -> float:
        return sum(v for k, v in samples.items() if k.startswith(name + "{") and f'namespace="{namespace}"' in k)

    return total("metal3_ipam_allocations_total"), total("metal3_ipam_releases_total")
