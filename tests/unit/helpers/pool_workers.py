"""The pool workers driven over the in-memory store: a writer that carries plans out there, and passes run until
nothing is left to do."""

from __future__ import annotations

from metal3_ipam.controller.api import Outcome
from metal3_ipam.controller.workers import PoolWorkers
from metal3_ipam.core import objects as o
from metal3_ipam.core.actions import Create
from metal3_ipam.memory import MemoryApi

from ipam_objects import NS


POOL = o.PoolKey(NS, "pool1")


class MemoryWriter:
    """Carries a plan out in the in-memory store, whose inventory the workers read, as the REST writer files its answers."""

    def __init__(self, api: MemoryApi) -> None:
        self.api = api
        self.steps: list[tuple[str, int]] = []  # (pool name, steps) of every plan handed over

    async def execute(self, plan, pool=None) -> Outcome:
        pools = {o.pool_of(a.obj) for s in plan.steps for a in s.actions if isinstance(a, Create)}
        self.steps.append((",".join(sorted(p[1] for p in pools if p)), len(plan.steps)))
        refused = self.api.apply(plan)
        created = [a.obj for s in plan.steps for a in s.actions if isinstance(a, Create)]
        return Outcome(done=len(plan.writes), again=bool(refused), failures=refused, created=created)


async def until_quiet(workers: PoolWorkers, pool=POOL, passes: int = 50) -> None:
    for _ in range(passes):
        await workers._pass(pool)
        if not workers.inventory._changes.get(pool) and not workers._ledgers[pool].pending_steps:
            return
    raise AssertionError(f"{pool} still busy after {passes} passes")
