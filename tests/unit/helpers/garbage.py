"""Reference cycles left for the garbage collector, pools large enough for a full pass to take slices, and how much
the collector tracks per listed object."""

from __future__ import annotations

import asyncio
import gc
import weakref


from metal3_ipam.controller.freezing import FREEZE_EVERY
from metal3_ipam.core import objects as o

from ipam_objects import NS, ipclaim, ippool, loaded


class Litter:
    """Cyclic garbage, as the event loop makes it all the time (a caught exception kept with its frame)."""

    def __init__(self) -> None:
        self.me = self
        self.payload = bytearray(1024)


PA = o.PoolKey(NS, "pa")


# The workers' status interval in these cases: no pass of their own, kicked by a status timer, runs
# (and pauses the collector) while a case looks at the pauses of the passes it ran.
QUIET = 3600.0


async def make_litter(made: list[weakref.ref], running, turns: int = 0) -> None:
    """The event loop's work meanwhile: a cycle made every turn, kept ``turns`` turns, then dropped."""
    while running():
        cycle = Litter()
        made.append(weakref.ref(cycle))
        for _ in range(turns):
            await asyncio.sleep(0)
        del cycle
        await asyncio.sleep(0)


def two_pools(claims: int = 300):
    return loaded(ippool("pa", namePrefix="pa", pools=[{"start": "10.0.0.1", "end": "10.0.3.250"}]),
                  ippool("pb", namePrefix="pb", pools=[{"start": "10.1.0.1", "end": "10.1.3.250"}]),
                  *[ipclaim(f"a{i}", pool="pa") for i in range(claims)],
                  *[ipclaim(f"b{i}", pool="pb") for i in range(claims)])


def tracked_per_object(items: list[dict]) -> float:
    """Containers the collector tracks per listed object (leaf dicts of strings are not tracked)."""
    def tracked(value) -> int:
        if isinstance(value, dict):
            return gc.is_tracked(value) + sum(tracked(v) for v in value.values())
        if isinstance(value, list):
            return gc.is_tracked(value) + sum(tracked(v) for v in value)
        return 0
    return sum(tracked(item) for item in items) / len(items)


def within_two_freezes(walked: list[int], per_object: float, what: str) -> None:
    """No full collection walked much more than FREEZE_EVERY objects' worth (twice, for slack)."""
    bound = 2 * FREEZE_EVERY * per_object
    assert walked, f"no full collection after {what}"
    assert max(walked) <= bound, f"a full collection walked {max(walked)} objects ({what}, {per_object:.0f} " \
                                 f"tracked each), against about {bound:.0f} for 2 x FREEZE_EVERY objects"
