"""Clusters that resume after ``clusterctl move``, held until their namespace's addresses are listed again.

``clusterctl move`` creates a Cluster paused, then everything of it, its
addresses included, and unpauses it last. The watch of addresses may lag
behind the watch (or the listing) of Clusters: a claim served before its
moved address is known would get another IP. So a Cluster seen unpaused
while it is paused here is not filed at once: it is held, its namespace's
addresses are listed again (a LIST begun after the unpause, so it holds
every moved address), and only then is the Cluster filed.

So is a Cluster seen unpaused that is not filed at all: its pause may never
have been seen (kopf folds the events of a short while into one, and lists
again after its stream was cut). Until it is filed, its claims wait for it
(``reconcile``). Only the start-up listing of Clusters files them at once:
every listing of addresses comes after it, and no pool is looked at before.

Each resumption is its own: a listing releases only the Cluster it was
begun for. A Cluster paused again, deleted, made anew, or whose spec changed
while it is held (a pause and an unpause seen only as their sum, by a
listing) ends that resumption, and its next unpause waits for a listing of
its own.
A listing that fails is tried again, with a growing pause, for as long as
it fails: filing the Cluster without it would risk the very IP it guards.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable
from typing import Any

from ..core import kinds
from ..core import objects as o
from ..core.inventory import Inventory, older

log = logging.getLogger("metal3_ipam.resuming")

# The pauses between tries of a namespace's addresses listing: the first, and the longest.
FIRST_PAUSE = 0.5
LONGEST_PAUSE = 30.0

ClusterKey = tuple[str, str]  # namespace, name


class Resumptions:
    def __init__(self, inventory: Inventory, relist: Callable[[str], Awaitable[None]],
                 file: Callable[[dict], None], pause: float = FIRST_PAUSE) -> None:
        self.inventory = inventory
        self.relist = relist  # lists a namespace's addresses again, into the inventory
        self.file = file  # files a Cluster at last
        self.pause = pause
        self._held: dict[ClusterKey, tuple[Any, dict]] = {}  # Cluster -> (its resumption, its newest object)
        self.tasks: set[asyncio.Task] = set()  # the listings under way

    def hold(self, obj: dict) -> bool:
        """Whether ``obj`` (a Cluster, from a watch event or a listing) is held rather than filed now."""
        if kinds.kind_of(obj) != kinds.CLUSTER:
            return False
        key = (o.namespace(obj), o.name(obj))
        stored = self.inventory.get(kinds.CLUSTER, *key)
        if stored is not None and older(obj, stored):
            return False  # older news (a listing taken before an event): the inventory drops it
        held = self._held.get(key)
        if held is not None:
            resumption, newest = held
            if older(obj, newest):
                return True  # older than what is held: nothing new
            if not o.cluster_paused(obj) and _same_spec(obj, newest):
                self._held[key] = (resumption, obj)  # still resuming: the listing under way was begun after
                return True
            # Paused again, or another Cluster, or its spec changed (a pause and an unpause missed in
            # between, as a listing would show them): this resumption is over.
            del self._held[key]
        if o.cluster_paused(obj) or (stored is not None and not o.cluster_paused(stored)):
            return False
        resumption = object()
        self._held[key] = (resumption, obj)
        task = asyncio.get_running_loop().create_task(self._resume(key, resumption))
        self.tasks.add(task)
        task.add_done_callback(self.tasks.discard)
        return True

    def forget(self, cluster: dict) -> None:
        """The Cluster is gone: what is held of it goes too (not what is held of another one of its name)."""
        key = (o.namespace(cluster), o.name(cluster))
        held = self._held.get(key)
        uid = o.meta(cluster).get("uid")
        if held is not None and (uid is None or uid == o.meta(held[1]).get("uid")):
            del self._held[key]

    async def _resume(self, key: ClusterKey, resumption: Any) -> None:
        try:
            await asyncio.sleep(0)  # the event that started this is recorded first
            pause = self.pause
            while self._held.get(key, (None,))[0] is resumption:
                try:
                    await self.relist(key[0])
                    break
                except Exception as err:
                    log.warning("listing the addresses of %s before Cluster %s/%s is filed failed: %s; again in "
                                "%.1f s", key[0], key[0], key[1], getattr(err, "reason", None) or err, pause)
                    await asyncio.sleep(pause)
                    pause = min(pause * 2, LONGEST_PAUSE)
            held = self._held.get(key)
            if held is not None and held[0] is resumption:
                del self._held[key]
                self.file(held[1])
        finally:
            # Cancelled (the controller stops): a later event of the Cluster starts a resumption anew.
            if self._held.get(key, (None,))[0] is resumption:
                del self._held[key]


def _same_spec(obj: dict, than: dict) -> bool:
    """One Cluster, its spec unchanged (``spec.paused`` bumps the generation; status churn does not)."""
    return all(o.meta(obj).get(field) == o.meta(than).get(field) for field in ("uid", "generation"))
