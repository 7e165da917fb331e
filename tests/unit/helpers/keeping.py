"""A store that files watch events in name order, as a restarted controller sees them, and the pool a claim keeps
its IP in."""

from __future__ import annotations

import random

from metal3_ipam.core import objects as o
from metal3_ipam.memory import converge

from ipam_objects import (RecordingApi, ippool)
from ipam_objects import CAPI_CLAIM, IPCLAIM
from world_model import named_by_status


def pool(end: str = "10.7.0.2", **spec) -> dict:
    return ippool("pool1", namePrefix="pool1", pools=[{"start": "10.7.0.1", "end": end}], **spec)


class WatchedApi(RecordingApi):
    """The in-memory store, checking after every write that no two live claims' statuses name one IP or address."""

    def do(self, action) -> None:
        super().do(action)
        statuses_name_distinct_ips(self)


def statuses_name_distinct_ips(api) -> None:
    seen: dict[tuple[str, str], tuple[str, str]] = {}
    for kind in (IPCLAIM, CAPI_CLAIM):
        for claim in api.inventory.of_kind(kind):
            if o.is_deleting(claim):
                continue
            for what in named_by_status(claim):
                other = seen.setdefault(what, o.claim_key(claim))
                assert other == o.claim_key(claim), f"{what} named by the statuses of {other} and {o.claim_key(claim)}"


def refile_in_name_order(api) -> None:
    """Claims filed again in name order, as a listing after a restart files them: the order claims are served in."""
    for kind in (IPCLAIM, CAPI_CLAIM):
        claims = sorted(api.inventory.of_kind(kind), key=o.name)
        for claim in claims:
            api.inventory.remove(claim)
        for claim in claims:
            api.inventory.upsert({**claim, "metadata": {**claim["metadata"], "resourceVersion": api._next_version()}})


def watched(*objs) -> WatchedApi:
    api = WatchedApi(now="2024-01-01T00:00:00Z")
    for obj in objs:
        api.load(obj)
    converge(api, random.Random(0))
    return api
