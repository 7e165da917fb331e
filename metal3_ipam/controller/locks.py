"""The Lease store's upkeep (``core.lockstore``): locks an earlier version wrote as Metal3 IPAddresses moved
over, and guards whose claim is gone collected.

A lock seen as a Metal3 IPAddress that belongs in the Lease store (``Controller.legacy``) holds its IP as it
is. Here its Lease is created first, and only once the Lease exists (this one, or one that holds the same IP
for the same claim) is the IPAddress let go: its finalizers removed and it deleted, that incarnation only. A
Lease of that name for another claim is another lock: the IPAddress is kept, and said once in the log.

A guard stored as a Metal3 IPAddress in its namespace went with its owners (the garbage collector): its
claim, or the namespace's pools that share it. A Lease in the lock namespace cannot name an owner of another
namespace, so a guard none of whose owners lives is deleted here: each owner read from the API server first,
one a claim owns only once it is older than a lock is left to its maker (``Inventory.lock_settle_seconds``),
and the Lease deleted on condition that it is unchanged since read (a pool adding itself to the owners of a
shared guard does so on the same condition, so one of the two is refused).

Both run while this replica may write (leading, caught up): the move whenever the watches or a listing file
such an IPAddress, the look over the guards at start, at every resync, when the lead is taken and when a pool goes.
"""

from __future__ import annotations

import asyncio
import datetime
import logging
from collections.abc import Callable
from typing import Any

from kubernetes.client.rest import ApiException

from ..core import kinds, lockstore, poolkind
from ..core import objects as o
from ..core.reconcile.guards import held_by_pools
from .api import MERGE_PATCH, ApiWriter
from .operator import LEASES, Controller

log = logging.getLogger("metal3_ipam.locks")


class LockUpkeep:
    def __init__(self, controller: Controller, writer: ApiWriter, home: str,
                 may_act: Callable[[], bool]) -> None:
        self.controller = controller
        self.writer = writer
        self.home = home
        self.may_act = may_act
        self.wake = asyncio.Event()
        self.sweep_due = False  # the guards looked over at the next wake (at start, resync, leadership)
        self._said: set[tuple[str, str]] = set()
        controller.on_locks = self.wake.set
        controller.on_pool_gone = self.sweep

    def sweep(self) -> None:
        """Look the guards over too at the next wake: a look walks every lock, so it is not done for each claim
        gone (a guard of a claim gone holds nothing, ``Guards.guard_holds``, and is deleted by the next
        allocation of its IP if that comes first), but it is for each pool gone (a guard the namespace's pools
        share keeps its sub-prefix from the global pool until it is deleted)."""
        self.sweep_due = True
        self.wake.set()

    async def run(self) -> None:
        while True:
            await self.wake.wait()
            self.wake.clear()
            if not self.may_act():
                continue
            try:
                await self.move_over()
                if self.sweep_due:
                    self.sweep_due = False
                    await self.collect_guards()
            except asyncio.CancelledError:
                raise
            except Exception as err:  # the API server away, a refusal: the next wake (or resync) tries again
                log.warning("the Lease store's upkeep failed: %s", getattr(err, "reason", None) or err)

    async def move_over(self) -> None:
        # Every lock seen as a Metal3 IPAddress that belongs in the Lease store went through ``Controller.hidden``.
        for key, legacy in list(self.controller.legacy.items()):
            if not self.may_act():
                return
            if await self._leased(key, legacy):
                await self._let_go(key, legacy)

    async def _leased(self, key: tuple[str, str], legacy: dict) -> bool:
        """The lock's Lease exists (created now, or found holding the same IP for the same claim)."""
        resource = LEASES
        lease = lockstore.to_lease(lockstore.moved_over(legacy), self.home)
        try:
            created = await self.writer._call("POST", resource.path(self.home), body=lease,
                                              content_type="application/json")
        except ApiException as err:
            if err.status != 409:
                raise
            found = await self.writer._refresh(o.ref(legacy))
            if found is not None and lockstore.stored_in_lease(found) and lockstore.same_lock(found, legacy):
                return True
            if key not in self._said:
                self._said.add(key)
                log.warning("IPAddress %s/%s (an earlier version's lock of %s) is kept: the Lease %s/%s holds "
                            "another lock", key[0], key[1], o.spec(legacy).get("address"), self.home,
                            lockstore.lease_name(*key))
            return False
        view = lockstore.from_lease(created)
        if view is not None:
            self.controller.file(view)
        log.info("lock %s/%s of %s moved to the Lease %s/%s", key[0], key[1], o.spec(legacy).get("address"),
                 self.home, o.name(created))
        return True

    async def _let_go(self, key: tuple[str, str], legacy: dict) -> None:
        """The IPAddress an earlier version wrote: its finalizers removed, then deleted (that incarnation)."""
        resource = self.writer.resources.get(kinds.IPADDRESS)
        self.controller.legacy.pop(key, None)
        if resource is None:
            return
        path = resource.path(*key)
        uid = o.meta(legacy).get("uid")
        try:
            if o.finalizers(legacy):
                await self.writer._call("PATCH", path, body={"metadata": {"finalizers": None,
                                                                          **({"uid": uid} if uid else {})}},
                                        content_type=MERGE_PATCH)
            await self.writer._call("DELETE", path, body={"preconditions": {"uid": uid}} if uid else {},
                                    content_type="application/json")
        except ApiException as err:
            if err.status not in (404, 409, 422):  # gone, or another incarnation: its own news bring it again
                raise
        if lockstore.stored_in_lease(self.controller.inventory.get(kinds.IPADDRESS, *key)) is None:
            self.controller.inventory.remove(legacy)

    async def collect_guards(self) -> None:
        """The guards stored as Leases none of whose owners lives deleted, as the garbage collector deletes a
        guard stored in its namespace: one its claim owns once the claim is gone, one the namespace's pools share
        once the last of them is. Each owner is read from the API server before (a replica's inventory may not
        show a claim or a pool made a moment ago), and the Lease is deleted on condition that it is unchanged
        since read: a pool that added itself to its owners meanwhile keeps it. A claim's guard younger than a
        lock is left to its maker is looked over again once it is not."""
        inventory = self.controller.inventory
        live = {str(o.meta(x).get("uid")) for kind in (kinds.IPCLAIM, kinds.CAPI_CLAIM, *poolkind.REGISTRY)
                for x in inventory.of_kind(kind)}  # stored, being deleted or not: as the garbage collector
        served = inventory.namespaces
        settle = datetime.timedelta(seconds=max(inventory.lock_settle_seconds, 0))
        now = datetime.datetime.now(datetime.timezone.utc)
        young = False
        for guard in lockstore.orphan_guards(list(inventory.of_kind(kinds.IPADDRESS)), live,
                                             lambda ns: served is None or ns in served):
            if not self.may_act():
                break
            if not held_by_pools(guard) and now - _time(o.meta(guard).get("creationTimestamp")) < settle:
                young = True
            elif not await self._an_owner_lives(guard):
                await self._delete(guard)
        if young:
            self.wake_later(settle.total_seconds())

    async def _delete(self, guard: dict) -> None:
        """The guard's Lease deleted, that incarnation unchanged since read; kept filed when it changed."""
        meta = o.meta(guard)
        preconditions = {k: meta[k] for k in ("uid", "resourceVersion") if meta.get(k)}
        try:
            await self.writer._call("DELETE", LEASES.path(self.home, lockstore.stored_in_lease(guard)),
                                    body={"preconditions": preconditions}, content_type="application/json")
        except ApiException as err:
            if err.status == 409:
                return  # changed since read (an owner added): its news bring it again
            if err.status != 404:
                raise
        self.controller.forget(guard)  # and the pools it kept a span from passed again

    async def _an_owner_lives(self, guard: dict) -> bool:
        """Whether an object a guard names as its owner exists, that incarnation, as the API server says: listed by
        name (the verb the controller has on every kind it serves). One of a kind not served here is taken to
        live: nothing here can tell it is gone."""
        for owner in o.owner_references(guard):
            kind = (kinds.group_of(str(owner.get("apiVersion") or "")), str(owner.get("kind") or ""))
            resource = self.writer.resources.get(kind)
            if resource is None:
                return True
            found = await self.writer._call(
                "GET", resource.path(o.namespace(guard)) + f"?fieldSelector=metadata.name%3D{owner.get('name')}")
            items = found.get("items") if isinstance(found, dict) else None
            if any(str(o.meta(x).get("uid")) == str(owner.get("uid")) for x in items or [] if isinstance(x, dict)):
                return True
        return False

    def wake_later(self, seconds: float) -> None:
        """The guards looked over again in ``seconds`` (one was too young to collect)."""
        asyncio.get_running_loop().call_later(seconds, self.sweep)


def _time(text: Any) -> datetime.datetime:
    try:
        return datetime.datetime.fromisoformat(str(text).replace("Z", "+00:00"))
    except ValueError:
        return datetime.datetime.min.replace(tzinfo=datetime.timezone.utc)
