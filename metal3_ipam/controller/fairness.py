"""Write slots shared fairly across pools.

The writer sends at most N steps at once for all pools together. With one
first-come queue, a pool that planned 5,000 steps (a burst of claims, a
restart that repairs everything) puts a single claim of another pool behind
all of them. Here each pool waits in its own line and a freed slot goes to
the next pool in turn: a claim of a quiet pool waits for at most one step of
each busy pool, whatever their backlogs.
"""

from __future__ import annotations

import asyncio
from collections import OrderedDict, deque
from typing import Generic, Hashable, TypeVar

T = TypeVar("T")


class RoundRobin(Generic[T]):
    """Items in one line per lane; ``pop`` takes the oldest of the next lane in turn."""

    def __init__(self) -> None:
        self._lanes: OrderedDict[Hashable, deque[T]] = OrderedDict()
        self._count = 0

    def __len__(self) -> int:
        return self._count

    def push(self, lane: Hashable, item: T) -> None:
        line = self._lanes.get(lane)
        if line is None:
            line = self._lanes[lane] = deque()  # a new lane takes its turn after those already waiting
        line.append(item)
        self._count += 1

    def pop(self) -> T:
        lane, line = next(iter(self._lanes.items()))
        item = line.popleft()
        self._count -= 1
        if line:
            self._lanes.move_to_end(lane)  # its next item waits until every other lane had a turn
        else:
            del self._lanes[lane]
        return item

    def discard(self, lane: Hashable, item: T) -> None:
        line = self._lanes.get(lane)
        if line is None:
            return
        try:
            line.remove(item)
        except ValueError:
            return
        self._count -= 1
        if not line:
            del self._lanes[lane]


class FairSlots:
    """At most ``limit`` holders at once; a freed slot is handed to the next pool in turn."""

    def __init__(self, limit: int) -> None:
        self.limit = limit
        self.busy = 0
        self._waiting: RoundRobin[asyncio.Future] = RoundRobin()

    def waiting(self) -> int:
        return len(self._waiting)

    async def acquire(self, lane: Hashable) -> None:
        if self.busy < self.limit and not self._waiting:
            self.busy += 1
            return
        turn = asyncio.get_running_loop().create_future()
        self._waiting.push(lane, turn)
        try:
            await turn
        except asyncio.CancelledError:
            if turn.done() and not turn.cancelled():
                self.release()  # the slot was handed over as we were cancelled: pass it on
            else:
                self._waiting.discard(lane, turn)
            raise

    def release(self) -> None:
        while self._waiting:
            turn = self._waiting.pop()
            if not turn.done():
                turn.set_result(None)  # the slot goes straight to it: busy stays as it is
                return
        self.busy -= 1

    def slot(self, lane: Hashable) -> "_Slot":
        return _Slot(self, lane)


class _Slot:
    def __init__(self, slots: FairSlots, lane: Hashable) -> None:
        self.slots, self.lane = slots, lane

    async def __aenter__(self) -> None:
        await self.slots.acquire(self.lane)

    async def __aexit__(self, *_: object) -> None:
        self.slots.release()
