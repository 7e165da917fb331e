"""Full passes pause the garbage collector and freeze what is in memory: no cycle may be lost to it.

A full pass (a ledger built afresh: first pass, spec change, audit every few
minutes) turns automatic collection off, collects the young generations
between its slices, freezes everything right after the pool's snapshot is
taken and again at the end (``freezing.Freezer``). Frozen
objects are out of the collector's reach for good: a reference cycle frozen
as garbage is memory the controller never gets back, and audits come back
for as long as it runs. The event loop makes cycles all the time (an
exception kept with its frame, a finished request), so each case here makes
some in another task while passes run, as a watch or the writer would, and
asserts they are all collected once they are garbage.
"""

from __future__ import annotations

import asyncio
import gc
import weakref


from metal3_ipam.controller.workers import PoolWorkers
from metal3_ipam.core import objects as o
from ipam_objects import NS, ipclaim, ippool, loaded
from garbage import Litter
from pool_workers import MemoryWriter
from garbage import PA, QUIET, make_litter, two_pools

PB = o.PoolKey(NS, "pb")


def _never_collected(scenario) -> tuple[int, int, int]:
    """Run ``scenario`` (it fills the list it is given with weak references to cycles it dropped),
    then collect in full: how many are still alive, of how many, and how many objects were frozen."""
    made: list[weakref.ref] = []
    frozen_before = gc.get_freeze_count()
    try:
        asyncio.run(scenario(made))
        frozen = gc.get_freeze_count() - frozen_before
        gc.collect()
        return sum(ref() is not None for ref in made), len(made), frozen
    finally:
        gc.unfreeze()  # (leave the other tests a collector that sees everything)
        gc.collect()


def test_a_cycle_alive_across_a_slice_and_dropped_during_the_pass_of_a_small_pool_is_still_collected():
    """A cycle that lives a little while (a request in flight, a handler's exception) would survive the
    young collection at the end of a slice and move to the oldest generation, and a freeze would keep it
    for good: each audit would add more. Builds of fewer than FREEZE_EVERY claims and addresses in all since
    the last freeze leave the collector alone. (Past it such a cycle is the price of keeping the collector
    off what is kept: see freezing.py.)"""
    api = two_pools()

    async def scenario(made):
        workers = PoolWorkers(api.inventory, MemoryWriter(api), slice_seconds=0.0, audit_seconds=0.0, status_seconds=QUIET)
        done = []
        # Each cycle alive for a few turns of the loop: across a slice end.
        task = asyncio.get_running_loop().create_task(make_litter(made, lambda: not done, turns=3))
        for _ in range(5):  # every pass is an audit: a full pass
            await workers._pass(PA)
        done.append(True)
        await task

    alive, made, frozen = _never_collected(scenario)
    assert made and alive == 0, f"{alive} of {made} cycles never collected; {frozen} objects frozen"


def test_a_cycle_that_was_garbage_before_a_full_pass_began_is_still_collected(big_pools):
    """Garbage already in the oldest generation when a full pass begins (a cycle that lived through a
    young collection before it was dropped: the normal life of a request's objects) is frozen with the
    snapshot: ``collect(1)`` at the start does not reach it, and no full collection ever will."""
    api = two_pools(50)

    async def scenario(made):
        workers = PoolWorkers(api.inventory, MemoryWriter(api), slice_seconds=0.0, audit_seconds=0.0, status_seconds=QUIET)
        await workers._pass(PA)
        for _ in range(20):
            cycle = Litter()
            made.append(weakref.ref(cycle))
            gc.collect(1)  # it lived through a young collection (the automatic ones do this)
            del cycle      # and is garbage now, in the oldest generation
        await workers._pass(PA)  # an audit: a full pass

    alive, made, frozen = _never_collected(scenario)
    assert made and alive == 0, f"{alive} of {made} cycles never collected; {frozen} objects frozen"


def test_garbage_made_between_slices_is_not_frozen_with_a_second_pools_snapshot(big_pools):
    """Two pools' full passes overlap (an audit of each, two spec changes, a restart). The second
    snapshot is frozen at once: only the first pass's start collected the young generations, and the
    event loop made garbage between its slices since. That garbage is frozen with the snapshot."""
    api = two_pools()

    async def scenario(made):
        workers = PoolWorkers(api.inventory, MemoryWriter(api), slice_seconds=0.0, audit_seconds=0.0, status_seconds=QUIET)
        await workers._pass(PA)
        await workers._pass(PB)
        loop = asyncio.get_running_loop()
        for _ in range(5):
            first = loop.create_task(workers._pass(PA))  # pa's full pass under way ...
            done = []
            # ... garbage at once, as a watch event's handling leaves it ...
            litter = loop.create_task(make_litter(made, lambda: not done))
            await asyncio.sleep(0)
            await asyncio.sleep(0)
            assert workers.freezer.pauses == 1 and not first.done()
            await workers._pass(PB)  # ... when pb's full pass starts, its snapshot frozen at once
            await first
            done.append(True)
            await litter

    alive, made, frozen = _never_collected(scenario)
    assert made and alive == 0, f"{alive} of {made} cycles never collected; {frozen} objects frozen"


def test_the_collector_is_on_again_after_overlapping_passes_that_fail_or_are_cancelled(monkeypatch, big_pools):
    """However full passes of several pools end (one cancelled mid-way, one raising a bug while a
    third runs on), automatic collection is back on once none is under way."""
    from metal3_ipam.controller import workers as workers_module
    api = loaded(*[ippool(p, namePrefix=p, pools=[{"start": f"10.{n}.0.1", "end": f"10.{n}.3.250"}])
                   for n, p in enumerate(("pa", "pb", "pc"))],
                 *[ipclaim(f"{p}{i}", pool=p) for p in ("pa", "pb", "pc") for i in range(300)])
    pc = o.PoolKey(NS, "pc")
    real_plan_pass = workers_module.plan_pass

    def plan_pass(ledger, snap, *args, **kwargs):
        if snap.pool_name == "pb":
            yield
            raise RuntimeError("a bug in a pass")
        return (yield from real_plan_pass(ledger, snap, *args, **kwargs))

    async def scenario():
        workers = PoolWorkers(api.inventory, MemoryWriter(api), slice_seconds=0.0, audit_seconds=0.0, status_seconds=QUIET)
        for pool in (PA, PB, pc):
            await workers._pass(pool)
        monkeypatch.setattr(workers_module, "plan_pass", plan_pass)
        loop = asyncio.get_running_loop()
        a, b, c = (loop.create_task(workers._pass(pool)) for pool in (PA, PB, pc))
        for _ in range(3):
            await asyncio.sleep(0)
        assert workers.freezer.pauses == 3
        a.cancel()
        results = await asyncio.gather(a, b, return_exceptions=True)
        assert isinstance(results[0], asyncio.CancelledError) and isinstance(results[1], RuntimeError)
        assert workers.freezer.pauses == 1
        await c
        assert workers.freezer.pauses == 0 and gc.isenabled()

    assert gc.isenabled()
    try:
        asyncio.run(scenario())
        assert gc.isenabled()
    finally:
        gc.enable()
        gc.unfreeze()
        gc.collect()


def test_small_pools_built_again_and_again_are_frozen_now_and_then():
    """Ledgers of small pools left to the collector add up: what it walks outside freezes stays
    about FREEZE_EVERY claims and addresses built or filed, whatever the number of pools and audits."""
    from metal3_ipam.controller.freezing import Freezer
    api = two_pools(200)  # 200 claims in each, and no address yet: 200 objects or more per build
    frozen = []

    async def scenario():
        freezer = Freezer(lambda: api.inventory.filed, every=1000)
        workers = PoolWorkers(api.inventory, MemoryWriter(api), slice_seconds=0.0, audit_seconds=0.0, status_seconds=QUIET, freezer=freezer)
        real_freeze = gc.freeze

        def freeze():
            frozen.append(freezer._count() - freezer._mark)
            real_freeze()
        gc.freeze = freeze
        try:
            for _ in range(6):
                await workers._pass(PA)
                await workers._pass(PB)
        finally:
            gc.freeze = real_freeze
        return freezer._count()

    try:
        grown = asyncio.run(scenario())
    finally:
        gc.unfreeze()
        gc.collect()
    assert frozen, "twelve builds of 200 or more objects, and never a freeze"
    assert all(size >= 1000 for size in frozen) and len(frozen) <= grown // 1000
