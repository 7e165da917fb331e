"""Clusters that resume after ``clusterctl move``, pending until their namespace's addresses are listed again.

``clusterctl move`` creates a Cluster paused, then everything of it, its
addresses included, and unpauses it last. The watch of addresses may lag
behind the watch (or the listing) of Clusters: a claim served before its
moved address is known would get another IP. So a Cluster seen unpaused
while it is paused here is not filed at once: it is pending, its namespace's
addresses are listed again (a LIST begun after the unpause, so it shows
every moved address), and only then is the Cluster filed.

So is a Cluster seen unpaused that is not filed at all, or filed under
another uid (made anew, its deletion never told: that one is taken out):
its pause may never have been seen (kopf folds the events of a short while
into one, and lists again after its stream was cut). Until it is filed, its
claims wait for it (``reconcile``). Only the start-up listing of Clusters
files them at once: every listing of addresses comes after it, and no pool
is looked at before.

One listing per namespace at a time serves every Cluster pending before it
began (Clusters created together cost one), and releases only those.
Each resumption is its own: a Cluster paused again, deleted (told, or
proved by a LIST of Clusters), made anew, or moved by two spec writes or
more while it is pending (a pause and an unpause seen only as their sum, by
folded events or a listing; one write cannot do both) ends that resumption,
and its next unpause waits for a listing of its own. A Cluster filed
running and seen running again two writes or more later waits the same way.
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
from ..core.inventory import Inventory, older, version_number, version_of

log = logging.getLogger("metal3_ipam.resuming")

# The pauses between tries of a namespace's addresses listing: the first, and the longest.
FIRST_PAUSE = 0.5
LONGEST_PAUSE = 30.0
# How long a namespace's listing waits for more Clusters to become pending before it begins: Clusters created
# together (a fleet applied at once, kopf's first listing) are released by one listing, not one each.
GATHER = 0.05

ClusterKey = tuple[str, str]  # namespace, name


class Resumptions:
    def __init__(self, inventory: Inventory, relist: Callable[[str], Awaitable[None]],
                 file: Callable[[dict], None], drop: Callable[[dict], None],
                 pause: float = FIRST_PAUSE, gather: float = GATHER) -> None:
        self.inventory = inventory
        self.relist = relist  # lists a namespace's addresses again, into the inventory
        self.file = file  # files a Cluster at last
        self.drop = drop  # takes a Cluster out of the inventory, its name buried at the object's version
        self.pause = pause
        self.gather = gather
        self._pending: dict[ClusterKey, tuple[Any, dict]] = {}  # Cluster -> (its resumption, its newest object)
        # Per namespace, the resumptions that wait for its next listing (one not begun yet), and its lister.
        self._waiting: dict[str, list[tuple[ClusterKey, Any]]] = {}
        self._listers: dict[str, asyncio.Task] = {}
        self._batches: dict[asyncio.Task, list[tuple[ClusterKey, Any]]] = {}  # what each lister's LIST serves
        self._filed_lately: dict[ClusterKey, None] = {}  # filed by listers since the last LIST of Clusters
        self.tasks: set[asyncio.Task] = set()  # the listings under way

    def pending(self, obj: dict) -> bool:
        """Whether ``obj`` (a Cluster, from a watch event or a listing) is pending rather than filed now."""
        if kinds.kind_of(obj) != kinds.CLUSTER:
            return False
        key = (o.namespace(obj), o.name(obj))
        stored = self.inventory.get(kinds.CLUSTER, *key)
        if stored is not None and older(obj, stored):
            return False  # older news (a listing taken before an event): the inventory drops it
        pending = self._pending.get(key)
        if pending is not None:
            resumption, newest = pending
            if older(obj, newest):
                return True  # older than what is pending: nothing new
            if not o.cluster_paused(obj) and not _may_have_paused(newest, obj):
                self._pending[key] = (resumption, obj)  # still resuming: the listing under way was begun after
                return True
            # Paused again, or another Cluster, or paused and unpaused in between (seen only as their
            # sum, as kopf's folded events or a listing show them): this resumption is over.
            del self._pending[key]
        if o.cluster_paused(obj):
            return False
        if stored is not None and not o.cluster_paused(stored):
            if not _may_have_paused(stored, obj):
                return False
            # Made anew (restored, moved back) while the one before it is still filed running (its
            # deletion never told: kopf tells none it missed while its stream was cut), or paused and
            # unpaused since it was filed: its claims must not pass for claims of a running Cluster
            # until its addresses are listed again.
            self.drop(stored)
        resumption = object()
        self._pending[key] = (resumption, obj)
        self._waiting.setdefault(key[0], []).append((key, resumption))
        lister = self._listers.get(key[0])
        if lister is None or lister.done() or lister.cancelling():  # one ending serves nothing more
            task = asyncio.get_running_loop().create_task(self._list_for(key[0]))
            self._listers[key[0]] = task
            self.tasks.add(task)
            task.add_done_callback(lambda done, namespace=key[0]: self._lister_ended(namespace, done))
        return True

    def listed(self, namespace: str | None, seen: set, version: str | None) -> None:
        """A LIST of Clusters (of ``namespace``, or of all) taken at ``version`` is in: a Cluster pending,
        not in it, and older than it, is gone; its lister must not file it."""
        at = version_number(version)
        if at is None:
            return

        def gone(key: ClusterKey, obj: dict) -> bool:
            since = version_of(obj)
            return (namespace is None or key[0] == namespace) and (kinds.CLUSTER, *key) not in seen \
                and since is not None and since <= at

        for key, (_, newest) in list(self._pending.items()):
            if gone(key, newest):
                del self._pending[key]
                # Buried at the listing's version: a late copy of it (kopf's lagging stream) is dropped.
                self.drop({**newest, "metadata": {**o.meta(newest), "resourceVersion": str(at)}})
        # Filed by a lister while the listing was being closed: its look over the inventory may have
        # passed them by. (A watch event filed so is followed by its DELETED; a pending copy, kopf's, may not.)
        filed, self._filed_lately = self._filed_lately, {}
        for key in filed:
            stored = self.inventory.get(kinds.CLUSTER, *key)
            if stored is not None and gone(key, stored):
                self.drop({**stored, "metadata": {**o.meta(stored), "resourceVersion": str(at)}})

    def forget(self, cluster: dict) -> None:
        """The Cluster is gone: what is pending of it goes too (not what is pending of another one of its name)."""
        key = (o.namespace(cluster), o.name(cluster))
        pending = self._pending.get(key)
        uid = o.meta(cluster).get("uid")
        if pending is not None and (uid is None or uid == o.meta(pending[1]).get("uid")):
            del self._pending[key]

    def _current(self, key: ClusterKey, resumption: Any) -> bool:
        return self._pending.get(key, (None,))[0] is resumption

    async def _list_for(self, namespace: str) -> None:
        """List the namespace's addresses again for as long as Clusters wait for it; each listing
        releases the Clusters pending before it began."""
        while True:
            await asyncio.sleep(self.gather)  # the event that started this is recorded first, and others join
            batch = [(k, r) for k, r in self._waiting.pop(namespace, []) if self._current(k, r)]
            if not batch:
                return
            me = asyncio.current_task()
            self._batches[me] = batch
            await self._relist_until_done(namespace, batch)
            for key, resumption in batch:
                if self._current(key, resumption):
                    self.file(self._pending.pop(key)[1])
                    self._filed_lately[key] = None
            del self._batches[me]

    def _lister_ended(self, namespace: str, task: asyncio.Task) -> None:
        """A lister ended: returned, or cancelled (the controller stops; also before it ever ran, when
        no ``finally`` of its own would run). What it was to serve goes, so that a later event of one
        of those Clusters (or the resync's listing) starts a resumption anew."""
        self.tasks.discard(task)
        dropped = self._batches.pop(task, [])
        if self._listers.get(namespace) is task:  # else another lister serves what waits
            del self._listers[namespace]
            dropped += self._waiting.pop(namespace, [])
        for key, resumption in dropped:
            if self._current(key, resumption):
                del self._pending[key]

    async def _relist_until_done(self, namespace: str, batch: list[tuple[ClusterKey, Any]]) -> None:
        pause = self.pause
        while any(self._current(k, r) for k, r in batch):
            try:
                await self.relist(namespace)
                return
            except Exception as err:
                names = ", ".join(f"{k[0]}/{k[1]}" for k, r in batch if self._current(k, r)) or "none left"
                log.warning("listing the addresses of %s before Cluster(s) %s are filed failed: %s; again in "
                            "%.1f s", namespace, names, getattr(err, "reason", None) or err, pause)
                await asyncio.sleep(pause)
                pause = min(pause * 2, LONGEST_PAUSE)


def _may_have_paused(before: dict, after: dict) -> bool:
    """Whether a Cluster seen running in ``before`` and in ``after`` may have been paused in between:
    another Cluster (uid), or two spec writes or more (``spec.paused`` moves the generation, status
    churn does not; one write cannot both pause and unpause)."""
    if o.meta(before).get("uid") != o.meta(after).get("uid"):
        return True
    first, last = o.meta(before).get("generation"), o.meta(after).get("generation")
    return isinstance(first, int) and isinstance(last, int) and last - first >= 2
