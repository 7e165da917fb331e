"""The controller's incremental passes over the in-memory store, without the workers: each pool's ledger kept
across passes, and a pool passed only when the inventory said a change concerns it (what ``upsert`` and ``remove``
return, as the controller kicks those pools) or its ledger left steps for later. A pass loads its ledger afresh
only where the controller would (never loaded, the pool to be reloaded, its spec or what it withholds changed,
writes refused): never the periodic audit, so what no event marks dirty is not decided again."""

from __future__ import annotations

import random

from metal3_ipam.core import objects as o
from metal3_ipam.core.ledger import Ledger
from metal3_ipam.core.reconcile import needs_full, plan_pass, run_to_end
from metal3_ipam.memory import MemoryApi


class KeptPasses:
    def __init__(self, api: MemoryApi, rng: random.Random | None = None) -> None:
        self.api = api
        self.rng = rng or random.Random(0)
        self.ledgers: dict[o.PoolKey, Ledger] = {}
        self.kicked: set[o.PoolKey] = set(api.inventory.pool_keys())
        self.passed: list[o.PoolKey] = []  # the pools passed, in order
        self.full_passes: list[o.PoolKey] = []  # the pools whose ledger a pass loaded afresh, in order
        inventory = api.inventory
        for name in ("upsert", "remove"):
            setattr(inventory, name, self._kicking(getattr(inventory, name)))

    def _kicking(self, method):
        def feed(obj: dict) -> set[o.PoolKey]:
            touched = method(obj)
            self.kicked |= touched
            return touched
        return feed

    def settle(self, rounds: int = 50) -> None:
        """Passes over the pools kicked (and those with steps left) until none is."""
        for _ in range(rounds):
            due = sorted(self.kicked | {key for key, ledger in self.ledgers.items() if ledger.pending_steps})
            self.kicked = set()
            if not due:
                return
            for pool_key in due:
                self.run_pass(pool_key)
        raise AssertionError(f"passes still due after {rounds} rounds")

    def run_pass(self, pool_key: o.PoolKey) -> None:
        inventory = self.api.inventory
        self.passed.append(pool_key)
        ledger = self.ledgers.setdefault(pool_key, Ledger())
        reload, changes = inventory.drain(pool_key)
        context = inventory.snapshot(pool_key, self.api.now, self.rng, members=False)
        if reload or needs_full(ledger, context):
            self.full_passes.append(pool_key)
            ledger = self.ledgers[pool_key] = Ledger()
            plan = run_to_end(plan_pass(ledger, inventory.snapshot(pool_key, self.api.now, self.rng), full=True))
        else:
            plan = run_to_end(plan_pass(ledger, context, changes))
        refused = self.api.apply(plan)
        ledger.settle()
        if refused:
            ledger.needs_full = True
            self.kicked.add(pool_key)
