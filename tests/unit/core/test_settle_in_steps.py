"""A listing filed a few objects at a time, with watch events filed in between, ends as if filed at once."""

from __future__ import annotations

from hypothesis import given, settings, strategies as st

from metal3_ipam.core import kinds
from metal3_ipam.core.inventory import Inventory
from listing_pages import address, listing


def test_a_big_listing_is_filed_in_steps_to_the_same_result():
    items = listing(1000, 5000)
    at_once, stepwise = Inventory(), Inventory()
    for inv in (at_once, stepwise):
        inv.upsert(address("stale", 10, ip="10.9.9.9"))  # deleted while no watch told
    touched = at_once.settle_listing(kinds.IPADDRESS, None, items, "5000")
    steps = list(stepwise.settle_listing_in_steps(kinds.IPADDRESS, None, items, "5000", step=100))
    assert len(steps) >= 10
    assert set().union(*steps) == touched == {("ns", "p")}
    assert stepwise.objects == at_once.objects
    assert stepwise.get(kinds.IPADDRESS, "ns", "stale") is None


@given(st.lists(st.tuples(st.integers(0, 59), st.sampled_from(["delete", "newer", "new"])), max_size=30),
       st.integers(1, 20))
@settings(max_examples=100, deadline=None)
def test_events_filed_between_steps_are_kept_as_news_newer_than_the_listing(events, step):
    """A deletion or a newer version told by a watch while the listing (older) is being filed wins."""
    items = listing(60, 1000)
    inv = Inventory()
    news: dict[str, dict | None] = {}
    version = 2000
    it = iter(events)
    for _ in inv.settle_listing_in_steps(kinds.IPADDRESS, None, items, "1000", step=step):
        i, what = next(it, (None, None))  # one watch event between two steps
        if i is None:
            continue
        version += 1
        if what == "new":
            name, obj = f"n{i}", address(f"n{i}", version, ip=f"10.1.0.{i + 1}")
        else:
            name, obj = f"a{i}", address(f"a{i}", version)
        if what == "delete":
            inv.remove(obj)
            news[name] = None
        else:
            inv.upsert(obj)
            news[name] = obj
    for name, obj in news.items():
        assert inv.get(kinds.IPADDRESS, "ns", name) == obj
    listed = {f"a{i}" for i in range(60)}
    for name in listed - set(news):
        assert inv.get(kinds.IPADDRESS, "ns", name) is not None


def test_a_listing_keeps_at_most_the_cycles_alive_at_its_freezes():
    """Frozen objects are out of the collector's reach for good: a cycle of the event loop's alive at
    a freeze and dropped later is never collected. The periodic resync lists everything again every
    few minutes; freezing at each of its steps kept some of those cycles each time. A listing freezes
    when it begins and when it ends, whatever its size: the event loop's cycles of the start-up
    listing and of the resync after it, dropped since, are all collected but those two."""
    import asyncio
    import gc
    import weakref

    from metal3_ipam.controller.freezing import FREEZE_EVERY as FREEZE_GROWTH, Freezer
    from metal3_ipam.controller.operator import file_in_steps

    class Cycle:
        def __init__(self) -> None:
            self.me = self

    inventory = Inventory()
    items = listing(3 * FREEZE_GROWTH, 10 * FREEZE_GROWTH)
    kept: list = []
    made: list[weakref.ref] = []

    async def file(version: str) -> None:
        steps = inventory.settle_listing_in_steps(kinds.IPADDRESS, None, items, version)
        done = []

        async def litter() -> None:  # the event loop's work between steps: each cycle alive across a step
            while not done:
                kept.append(Cycle())
                made.append(weakref.ref(kept[-1]))
                if len(kept) > 1:
                    kept.pop(0)
                await asyncio.sleep(0)
        task = asyncio.get_running_loop().create_task(litter())
        await file_in_steps(steps, lambda pools: None, Freezer(lambda: inventory.filed))
        done.append(True)
        await task

    frozen_before = gc.get_freeze_count()
    try:
        asyncio.run(file(str(10 * FREEZE_GROWTH)))
        assert gc.get_freeze_count() > frozen_before, "the start-up listing is frozen as it is filed"
        asyncio.run(file(str(10 * FREEZE_GROWTH + 1)))  # the resync: nothing new
        kept.clear()
        gc.collect()
        assert made and sum(ref() is not None for ref in made) <= 4, "more than the cycles alive at four freezes"
    finally:
        gc.unfreeze()
        gc.collect()
