"""Orders of events that a pool's kept ledger must survive as a full recompute would.

Each case drives the pool workers over the in-memory store (as test_pool_passes
does) or the ledger directly, and asserts what SPEC §10 and the scale issue
promise: a claim is not left pending while an address it may have is free, and
the kept state ends where a recompute from the inventory would.
"""

from __future__ import annotations

import asyncio
import gc
import weakref

from metal3_ipam.controller.workers import PoolWorkers
from metal3_ipam.core import kinds
from metal3_ipam.core import objects as o
from metal3_ipam.core.actions import Create, Delete, SetFinalizers
from metal3_ipam.core.ledger import Ledger
from metal3_ipam.core.reconcile import plan_pass, run_to_end
from ipam_objects import NS, capi_claim, ipclaim, ippool, loaded
from pool_workers import MemoryWriter
from garbage import Litter

PA = o.PoolKey(NS, "pa")
PB = o.PoolKey(NS, "pb")


async def quiet(workers: PoolWorkers, *pools: o.PoolKey, passes: int = 30) -> None:
    """Passes over ``pools`` until none has a change or a pending step left (as kicks from watch events would run)."""
    for _ in range(passes):
        for pool in pools:
            await workers._pass(pool)
        if not any(workers.inventory._changes.get(p) or workers._ledgers[p].pending_steps for p in pools):
            return
    raise AssertionError(f"{pools} still busy after {passes} passes")


def ready(api, kind, name) -> dict:
    claim = api.inventory.get(kind, NS, name)
    return next((c for c in o.status(claim).get("conditions") or [] if c.get("type") == "Ready"), {})


def full_plan_allocates(api, pool: o.PoolKey) -> list[str]:
    """The claims a full recompute of ``pool`` would give an address now."""
    plan = run_to_end(plan_pass(Ledger(), api.inventory.snapshot(pool, api.now), full=True))
    return sorted(o.spec(a.obj)["claim"]["name"] for a in plan.writes
                  if isinstance(a, Create) and kinds.kind_of(a.obj) == kinds.IPADDRESS)


def delete(api, kind, name) -> None:
    api.do(Delete(o.ref(api.inventory.get(kind, NS, name))))


def test_a_claim_left_pending_is_served_once_another_pool_of_the_namespace_frees_the_ip():
    """Two pools sharing a namePrefix over one range: pa's claim waits (PoolExhausted) while pb's
    claims hold every IP. pb's claims go; their IPs are free; pa's next pass must serve it."""
    rng = [{"start": "10.0.0.1", "end": "10.0.0.2"}]
    api = loaded(ippool("pb", namePrefix="p", pools=rng), ippool("pa", namePrefix="p", pools=rng),
                 ipclaim("b1", pool="pb"), ipclaim("b2", pool="pb"))

    async def scenario():
        workers = PoolWorkers(api.inventory, MemoryWriter(api))
        await quiet(workers, PB)
        api.load(ipclaim("a1", pool="pa"))
        await quiet(workers, PA)
        assert ready(api, kinds.IPCLAIM, "a1").get("reason") == "PoolExhausted"
        delete(api, kinds.IPCLAIM, "b1")
        delete(api, kinds.IPCLAIM, "b2")
        await quiet(workers, PB, PA)
        assert not [a for a in api.inventory.of_kind(kinds.IPADDRESS) if o.pool_of(a) == PB]
        # Any later pass of pa (its status write's own watch event, a new claim) must see the free IPs.
        api.load(ipclaim("a2", pool="pa"))
        await quiet(workers, PA)
        assert ready(api, kinds.IPCLAIM, "a1").get("status") == "True", (
            ready(api, kinds.IPCLAIM, "a1"), full_plan_allocates(api, PA))

    asyncio.run(scenario())


def test_a_capi_claim_waiting_for_its_address_name_gets_it_once_another_pool_lets_the_name_go():
    """A Cluster API claim of pa is named as an IPAddress of pb's (a claim of that name for pb, being released):
    pa locks an IP for it and says the name is taken. When pb's address goes, pa must create it."""
    api = loaded(ippool("pb", namePrefix="pb", pools=[{"start": "10.0.1.1", "end": "10.0.1.5"}]),
                 ippool("pa", namePrefix="pa", pools=[{"start": "10.0.0.1", "end": "10.0.0.5"}]),
                 capi_claim("k", pool="pb"))

    async def scenario():
        workers = PoolWorkers(api.inventory, MemoryWriter(api))
        await quiet(workers, PB)
        assert o.pool_of(api.inventory.get(kinds.CAPI_ADDRESS, NS, "k")) == PB
        # Someone else holds pb's address k a while longer (a finalizer of theirs).
        held = api.inventory.get(kinds.CAPI_ADDRESS, NS, "k")
        api.do(SetFinalizers(o.ref(held), (*o.finalizers(held), "example.com/hold"), None))
        delete(api, kinds.CAPI_CLAIM, "k")
        await quiet(workers, PB)
        assert api.inventory.get(kinds.CAPI_CLAIM, NS, "k") is None
        # The name is free for a claim again: k comes back, for pa, while pb's address k lingers.
        api.load(capi_claim("k", pool="pa"))
        await quiet(workers, PA)
        assert ready(api, kinds.CAPI_CLAIM, "k").get("status") == "False"
        held = api.inventory.get(kinds.CAPI_ADDRESS, NS, "k")
        api.do(SetFinalizers(o.ref(held), (), None))
        assert api.inventory.get(kinds.CAPI_ADDRESS, NS, "k") is None
        await quiet(workers, PB)
        # pa's next pass (any event of pa) must see the name is free now.
        api.load(ipclaim("other", pool="pa"))
        await quiet(workers, PA)
        mirror = api.inventory.get(kinds.CAPI_ADDRESS, NS, "k")
        assert mirror is not None and o.pool_of(mirror) == PA, ready(api, kinds.CAPI_CLAIM, "k")
        assert ready(api, kinds.CAPI_CLAIM, "k").get("status") == "True"

    asyncio.run(scenario())


async def settled(workers: PoolWorkers, seconds: float = 10.0) -> None:
    """Until no pass is under way or due (timers of put-off status writes included), with a deadline."""
    loop = asyncio.get_running_loop()
    deadline = loop.time() + seconds
    while workers._tasks or workers._status_handles or workers._retry_handles:
        assert loop.time() < deadline, "passes still under way"
        await asyncio.sleep(0.01)


def test_a_release_shows_in_the_pool_status_without_another_event():
    """The controller's own writes are filed from its writer's answers; their watch events, arriving
    later, are older news and kick nothing. So the pass after a release must come by itself: else
    the ledger keeps the released IP taken and status.allocated / free stay wrong until some other
    event (or none) for the pool."""
    api = loaded(ippool("pa", namePrefix="pa", pools=[{"start": "10.0.0.1", "end": "10.0.0.5"}]),
                 ipclaim("a1", pool="pa"), ipclaim("a2", pool="pa"))

    async def scenario():
        # Status written whenever it changes: a release long after the last status write.
        workers = PoolWorkers(api.inventory, MemoryWriter(api), gather_seconds=0.0, status_seconds=0.0)
        workers.kick([PA])
        await settled(workers)
        assert o.status(api.inventory.get(kinds.IPPOOL, NS, "pa"))["allocated"] == "2"
        delete(api, kinds.IPCLAIM, "a1")
        workers.kick([PA])  # the watch event of the user's delete
        await settled(workers)
        assert api.inventory.get(kinds.IPCLAIM, NS, "a1") is None
        addresses = [a for a in api.inventory.of_kind(kinds.IPADDRESS) if o.pool_of(a) == PA]
        status = o.status(api.inventory.get(kinds.IPPOOL, NS, "pa"))
        assert (status["allocated"], status["free"]) == (str(len(addresses)), str(5 - len(addresses))), status
        assert workers._ledgers[PA].allocated == len(addresses)
        await workers.stop()

    asyncio.run(scenario())


def test_cyclic_garbage_made_while_full_passes_run_is_still_collected():
    """Full passes pause the collector and then ``gc.freeze()`` everything in memory. Cycles that
    became garbage meanwhile (the event loop serves watches during a pass) are then out of the
    collector's reach for good: a long-running controller would grow with every audit."""
    api = loaded(ippool("pa", namePrefix="pa", pools=[{"start": "10.0.0.1", "end": "10.0.3.250"}]),
                 *[ipclaim(f"a{i}", pool="pa") for i in range(300)])
    made: list[weakref.ref] = []

    async def scenario():
        workers = PoolWorkers(api.inventory, MemoryWriter(api), slice_seconds=0.0, audit_seconds=0.0)
        done = False

        async def event_loop_work():
            while not done:
                litter = Litter()
                made.append(weakref.ref(litter))
                del litter
                await asyncio.sleep(0)

        task = asyncio.get_running_loop().create_task(event_loop_work())
        for _ in range(20):  # every pass is an audit: a full pass
            await workers._pass(PA)
        done = True
        await task

    frozen_before = gc.get_freeze_count()
    try:
        asyncio.run(scenario())
        gc.collect()
        alive = sum(ref() is not None for ref in made)
        assert made and alive == 0, (f"{alive} of {len(made)} cycles never collected; "
                                     f"{gc.get_freeze_count() - frozen_before} objects frozen")
    finally:
        gc.unfreeze()  # (leave the other tests a collector that sees everything)
