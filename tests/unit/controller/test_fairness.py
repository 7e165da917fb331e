"""The writer's slots are handed out in turn across pools: one pool's backlog never queues another's claim."""

from __future__ import annotations

import asyncio

from hypothesis import given, settings, strategies as st

from metal3_ipam.controller.fairness import FairSlots, RoundRobin


def test_lanes_take_turns_and_a_new_lane_does_not_wait_for_a_backlog():
    line = RoundRobin()
    for i in range(5000):
        line.push("big", ("big", i))
    line.push("small", ("small", 0))
    taken = [line.pop() for _ in range(4)]
    assert taken == [("big", 0), ("small", 0), ("big", 1), ("big", 2)]
    assert len(line) == 4997


@given(st.lists(st.tuples(st.sampled_from("abcd"), st.booleans()), max_size=200))
@settings(max_examples=200, deadline=None)
def test_round_robin_keeps_each_lanes_order_and_loses_nothing(ops):
    line = RoundRobin()
    pushed: dict[str, list[int]] = {}
    for i, (lane, pop) in enumerate(ops):
        if pop and len(line):
            line.pop()
        line.push(lane, (lane, i))
        pushed.setdefault(lane, []).append(i)
    popped = [line.pop() for _ in range(len(line))]
    for lane in pushed:
        mine = [i for (l, i) in popped if l == lane]
        assert mine == sorted(mine)
    # While several lanes wait, no lane gets two turns in a row.
    lanes = [lane for lane, _ in popped]
    for k in range(1, len(lanes)):
        if lanes[k] == lanes[k - 1]:
            assert all(l == lanes[k] for l in lanes[k:])  # only when it is the last lane left


def run(coro):
    return asyncio.run(coro)


def test_a_claim_of_a_quiet_pool_waits_for_one_step_per_busy_pool_not_for_their_backlog():
    async def scenario():
        slots = FairSlots(2)
        order: list[str] = []
        gate = asyncio.Event()

        async def step(pool: str, i: int):
            async with slots.slot(pool):
                order.append(f"{pool}{i}")
                await gate.wait()

        busy = [asyncio.create_task(step("big", i)) for i in range(5000)]
        await asyncio.sleep(0)
        quiet = asyncio.create_task(step("quiet", 0))
        await asyncio.sleep(0)
        assert slots.busy == 2 and slots.waiting() == 4999
        gate.set()  # every holder finishes as soon as it runs
        await asyncio.gather(*busy, quiet)
        assert slots.busy == 0 and slots.waiting() == 0
        return order

    order = run(scenario())
    assert order.index("quiet0") <= 3  # behind the two holding a slot and at most one more
    assert len(order) == 5001


def test_a_waiter_cancelled_gives_back_nothing_it_did_not_get_and_passes_on_what_it_got():
    async def scenario():
        slots = FairSlots(1)
        await slots.acquire("a")
        waiting = asyncio.create_task(slots.acquire("b"))
        later = asyncio.create_task(slots.acquire("c"))
        await asyncio.sleep(0)
        waiting.cancel()  # cancelled while waiting: its turn is dropped
        await asyncio.gather(waiting, return_exceptions=True)
        assert slots.waiting() == 1 and slots.busy == 1
        slots.release()  # handed to "c"
        await later
        assert slots.busy == 1
        handed = asyncio.create_task(slots.acquire("d"))
        await asyncio.sleep(0)
        slots.release()  # handed to "d" ...
        handed.cancel()  # ... which is cancelled before it runs: the slot goes back
        await asyncio.gather(handed, return_exceptions=True)
        assert slots.busy == 0 and slots.waiting() == 0
        await slots.acquire("e")  # free again at once
        assert slots.busy == 1

    run(scenario())
