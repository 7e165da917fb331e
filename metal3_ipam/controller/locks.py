"""The Lease store's upkeep (``core.lockstore``): Leases given to the locks seen as Metal3 IPAddresses alone,
and guards whose claim is gone collected.

Where Metal3 IPAddresses can be written, a lock of the Lease store is both: its Metal3 IPAddress (its twin,
written first, which an earlier version, still running, reads and refuses its own lock of the name with) and
its Lease (the lock the replicas that have no Metal3 IPAddresses refuse each other with). A lock seen as a
Metal3 IPAddress alone (one an earlier version wrote, or one whose Lease was not written after it) holds its IP
as it is; here it is given its Lease, and the IPAddress is kept as its twin. A Lease of that name for another
claim is another lock: the IPAddress holds as it is, and is said once in the log. The owners an earlier
version gives a twin (a pool added to a guard the namespace's pools share) are added to its Lease.

A guard stored as a Metal3 IPAddress in its namespace went with its owners (the garbage collector): its
claim, or the namespace's pools that share it. A Lease in the lock namespace cannot name an owner of another
namespace, so a guard none of whose owners lives is deleted here: each owner read from the API server first,
one a claim owns only once it is older than a lock is left to its maker (``Inventory.lock_settle_seconds``),
and the Lease deleted on condition that it is unchanged since read (a pool adding itself to the owners of a
shared guard does so on the same condition, so one of the two is refused). Its twin, whose owners are of its
namespace, is the garbage collector's; the owners it names count as the Lease's (an earlier version adds its pools
there, and the Lease is given them only at the next wake).

Both run while this replica may write (leading, caught up): the Leases given whenever the watches or a listing
file such an IPAddress, the look over the guards at start, at every resync, when the lead is taken and when a
pool goes.
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
from .api import MERGE_PATCH, ApiWriter, namespace_terminating
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
                    await self.give_twins()
                    await self.collect_guards()
            except asyncio.CancelledError:
                raise
            except Exception as err:  # the API server away, a refusal: the next wake (or resync) tries again
                log.warning("the Lease store's upkeep failed: %s", getattr(err, "reason", None) or err)

    async def move_over(self) -> None:
        """Each lock seen as a Metal3 IPAddress since last looked (``Controller.unsettled``): its Lease created
        when none is filed, its owners given to its Lease when it is."""
        controller = self.controller
        for key in list(controller.unsettled):
            if not self.may_act():
                return
            legacy = controller.legacy.get(key)
            filed = controller.inventory.get(kinds.IPADDRESS, *key)
            if legacy is None:
                pass
            elif not lockstore.stored_in_lease(filed):
                await self._leased(key, legacy)
            elif not lockstore.same_lock(filed, legacy):
                self._say_kept(key, legacy)
            elif not await self._owners_given(filed, legacy):
                continue  # its Lease changed since read: looked at again at the next wake
            controller.unsettled.discard(key)

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
            self._say_kept(key, legacy)
            return False
        if not await self._still_there(legacy):
            await self._take_back(created)
            return False
        view = lockstore.from_lease(created)
        if view is not None:
            self.controller.file(view)
        log.info("lock %s/%s of %s given the Lease %s/%s", key[0], key[1], o.spec(legacy).get("address"),
                 self.home, o.name(created))
        return True

    async def _still_there(self, legacy: dict) -> bool:
        """Whether the IPAddress a Lease was just made of is still stored, that incarnation: one deleted meanwhile
        (its claim released, by this version's reconcile writing to it where it was filed, or by an earlier
        version; and maybe its name taken again by an earlier version for another claim) is no lock any more."""
        resource = self.writer.resources.get(kinds.IPADDRESS)
        if resource is None:
            return True
        try:
            found = await self.writer._call("GET", resource.path(o.namespace(legacy), o.name(legacy)))
        except ApiException as err:
            if err.status == 404:
                return False
            raise
        uid = o.meta(legacy).get("uid")
        return isinstance(found, dict) and not o.is_deleting(found) and (not uid or o.meta(found).get("uid") == uid)

    async def _take_back(self, lease: dict) -> None:
        """A Lease made of an IPAddress that went meanwhile deleted, that incarnation, unchanged since made."""
        meta = o.meta(lease)
        preconditions = {k: meta[k] for k in ("uid", "resourceVersion") if meta.get(k)}
        try:
            await self.writer._call("DELETE", LEASES.path(self.home, o.name(lease)),
                                    body={"preconditions": preconditions}, content_type="application/json")
        except ApiException as err:
            if err.status not in (404, 409):  # gone, or written to since (its own news bring it)
                raise
        log.info("the Lease %s/%s deleted again: the IPAddress it was made of went meanwhile", self.home,
                 o.name(lease))

    def _say_kept(self, key: tuple[str, str], legacy: dict) -> None:
        if key not in self._said:
            self._said.add(key)
            log.warning("IPAddress %s/%s (a lock of %s) holds its IP as it is: the Lease %s/%s holds another lock",
                        key[0], key[1], o.spec(legacy).get("address"), self.home, lockstore.lease_name(*key))

    async def _owners_given(self, filed: dict, twin: dict) -> bool:
        """The owners the twin names that its Lease does not (an earlier version added a pool to a guard the
        namespace's pools share) added to the Lease, on condition that it is unchanged since read; False when it
        changed."""
        named = {str(r.get("uid")) for r in o.owner_references(filed)}
        more = [dict(r) for r in o.owner_references(twin) if str(r.get("uid")) not in named]
        if not more:
            return True
        owners = (*o.owner_references(filed), *more)
        body = {"metadata": {"resourceVersion": o.meta(filed).get("resourceVersion"),
                             "annotations": lockstore.owners_patch(filed, owners)}}
        try:
            answer = await self.writer._call("PATCH", LEASES.path(self.home, lockstore.stored_in_lease(filed)),
                                             body=body, content_type=MERGE_PATCH)
        except ApiException as err:
            if err.status in (404, 409):
                return err.status == 404
            raise
        view = lockstore.from_lease(answer) if isinstance(answer, dict) else None
        if view is not None:
            self.controller.file(view)
        return True

    async def give_twins(self) -> None:
        """Where locks have twins (``ApiWriter.twins``), each lock filed as its Lease whose twin was not seen (made
        where, or while, the Metal3 IPAddress kind was not served) given one, so that an earlier version's lock of
        its name is refused. Kept only while its Lease is, that incarnation: one released meanwhile lets it go."""
        if not self.writer.twins():
            return
        controller = self.controller
        for view in list(controller.inventory.of_kind(kinds.IPADDRESS)):
            key = (o.namespace(view), o.name(view))
            if not lockstore.stored_in_lease(view) or o.is_deleting(view) or key in controller.legacy:
                continue
            if not self.may_act():
                return
            twin = lockstore.moved_over(view)
            twin["metadata"]["annotations"] = {k: v for k, v in o.annotations(twin).items()
                                               if k != lockstore.STORED_IN}
            try:
                made = await self.writer._call("POST", self.writer._metal3_addresses().path(key[0]), body=twin,
                                               content_type="application/json")
            except ApiException as err:
                if namespace_terminating(err):
                    continue  # nothing is created there, by any version: the Lease alone holds
                if err.status in (403, 404):
                    return  # the kind no longer served (its CRD removed), or not this controller's to write
                if err.status != 409:
                    raise
                continue  # an IPAddress of its name: its news come (its twin, or another lock, said then)
            lease = await self._lease_stands(view)
            if lease is None:
                await self.writer.let_twin_go(made)
                continue
            # The owners the Lease was given since it was read (its twin asked first, when there was none yet).
            await self.writer._own_twin(lease, o.owner_references(lease))
            log.info("lock %s/%s of %s given its twin (a Metal3 IPAddress)", key[0], key[1],
                     o.spec(view).get("address"))

    async def _lease_stands(self, view: dict) -> dict | None:
        """The lock the Lease a lock of the reconcile's view is stored in stands for now, while it is still stored,
        that incarnation, not being deleted; else None."""
        try:
            found = await self.writer._call("GET", LEASES.path(self.home, lockstore.stored_in_lease(view)))
        except ApiException as err:
            if err.status == 404:
                return None
            raise
        uid = o.meta(view).get("uid")
        stands = isinstance(found, dict) and not o.is_deleting(found) and (not uid or o.meta(found).get("uid") == uid)
        return lockstore.from_lease(found) if stands else None

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
            else:
                asked: set[str] = set()
                if not await self._an_owner_lives(guard, asked):
                    await self._delete(guard, asked)
        if young:
            self.wake_later(settle.total_seconds())

    async def _delete(self, guard: dict, asked: set[str]) -> None:
        """The guard's Lease deleted, that incarnation unchanged since read; kept filed when it changed. Its twin,
        named by an owner not ``asked`` about (an earlier version added its pool while the Lease was being
        deleted), holds as it is: filed in its place."""
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
        twin = self._twin(guard)
        if twin is not None and any(str(r.get("uid")) not in asked for r in o.owner_references(twin)):
            self.controller.file(twin)

    def _twin(self, guard: dict) -> dict | None:
        """The guard's twin as last seen (``Controller.legacy``), when it is the same lock."""
        twin = self.controller.legacy.get((o.namespace(guard), o.name(guard)))
        return twin if lockstore.same_lock(twin, guard) else None

    async def _an_owner_lives(self, guard: dict, asked: set[str]) -> bool:
        """Whether an object a guard names as its owner exists, that incarnation, as the API server says: listed by
        name (the verb the controller has on every kind it serves). One of a kind not served here is taken to
        live: nothing here can tell it is gone. The owners are those of its Lease and of its twin (an earlier
        version adds its pools there), looked at again after each read: news of the twin may come meanwhile.
        The uids asked about are added to ``asked``."""
        while True:
            owner = next((r for r in (*o.owner_references(guard), *o.owner_references(self._twin(guard) or {}))
                          if str(r.get("uid")) not in asked), None)
            if owner is None:
                return False
            asked.add(str(owner.get("uid")))
            if await self._lives(guard, owner):
                return True

    async def _lives(self, guard: dict, owner: dict) -> bool:
        kind = (kinds.group_of(str(owner.get("apiVersion") or "")), str(owner.get("kind") or ""))
        resource = self.writer.resources.get(kind)
        if resource is None:
            return True
        pool_kind = poolkind.REGISTRY.get(kind)
        where = None if pool_kind is not None and pool_kind.cluster_scoped else o.namespace(guard)
        found = await self.writer._call(
            "GET", resource.path(where) + f"?fieldSelector=metadata.name%3D{owner.get('name')}")
        items = found.get("items") if isinstance(found, dict) else None
        return any(str(o.meta(x).get("uid")) == str(owner.get("uid")) for x in items or [] if isinstance(x, dict))

    def wake_later(self, seconds: float) -> None:
        """The guards looked over again in ``seconds`` (one was too young to collect)."""
        asyncio.get_running_loop().call_later(seconds, self.sweep)


def _time(text: Any) -> datetime.datetime:
    try:
        return datetime.datetime.fromisoformat(str(text).replace("Z", "+00:00"))
    except ValueError:
        return datetime.datetime.min.replace(tzinfo=datetime.timezone.utc)
