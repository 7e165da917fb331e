"""What the garbage collector walks, and when it is kept away.

The controller keeps tens of thousands of objects for as long as they live:
the inventory (plain dicts and lists from JSON) and each pool's ledger
(indexes of them). None of it holds a reference cycle, so the cyclic
collector has nothing to find there, yet a full collection walks all of it:
a few hundred milliseconds at 50,000 claims, with the event loop held. So
what is kept is moved out of the collector's reach now and then
(``gc.freeze``): it is still freed by reference counting.

Two rules keep that from costing memory:

- every freeze follows a full collection, with nothing run in between, so no
  garbage is frozen (but the freeze a listing begins with: a full collection
  would walk everything listed; one was made before the LIST, ``before_listing``).
  A cycle alive at a freeze that becomes garbage later is never collected
  (the event loop's requests in flight), so freezes come only once
  FREEZE_EVERY objects were filed or built into ledgers since the last one,
  and when a big pass or a listing begins and ends: what the collector
  walks stays about that size, and a quiet controller freezes nothing;
- a big pool's ledger is built, and a listing filed, with automatic
  collection paused (``paused``): a ledger grows a dozen containers of
  50,000 entries, which the collector would otherwise find young at full
  size and walk at once, tens of milliseconds each time. The builder
  collects the young generations between its slices (``between_slices``),
  while what they hold is small; the end of the last pause freezes.
"""

from __future__ import annotations

import contextlib
import gc
from collections.abc import Callable, Iterator
from typing import TypeVar

# Objects filed or built between two freezes.
FREEZE_EVERY = 5000

T = TypeVar("T")


class Freezer:
    def __init__(self, filed: Callable[[], int] = lambda: 0, every: int = FREEZE_EVERY) -> None:
        self._filed = filed  # a running count of the objects filed (the inventory's)
        self.built = 0  # a running count of the claims and addresses built into ledgers
        self.every = every
        self.pauses = 0  # pauses under way
        self._resume = False  # automatic collection was on when the first of them began
        self._mark = self._count()

    def _count(self) -> int:
        return self._filed() + self.built

    def due(self) -> bool:
        return self._count() - self._mark >= self.every

    def freeze(self, full: bool = True) -> None:
        """Collect (in full: nothing dead is frozen; or the young generations only), then freeze what is alive."""
        gc.collect(2 if full else 1)
        gc.freeze()
        self._mark = self._count()

    def freeze_with(self, make: Callable[[], T]) -> T:
        """``make()``, frozen with the rest right away: collected first, then made, then frozen,
        nothing else running in between (``make`` must not leave garbage)."""
        gc.collect()
        made = make()
        gc.freeze()
        self._mark = self._count()
        return made

    def maybe_freeze(self) -> None:
        """Freeze when it is due, unless a pause is under way (its end freezes)."""
        if not self.pauses and self.due():
            self.freeze()

    @contextlib.contextmanager
    def paused(self, listing: bool = False) -> Iterator[None]:
        """Automatic collection off until the last pause ends; then a freeze (after a full collection),
        and collection back as it was.

        A ``listing`` is frozen as the pause begins, after a young collection
        only: a full one would walk every object listed (at start-up 50,000,
        hundreds of milliseconds). Garbage of the oldest generation was found
        by the full collection made before the listing was (``before_listing``);
        the full collection at the end walks what came since the listing's freeze.
        """
        self.pauses += 1
        if self.pauses == 1:
            self._resume = gc.isenabled()
            gc.disable()
        try:
            if listing:
                self.freeze(full=False)
            yield
        finally:
            self.pauses -= 1
            if self.pauses == 0:
                try:
                    self.freeze()
                finally:
                    if self._resume:
                        gc.enable()

    def before_listing(self) -> None:
        """A full collection before objects are listed: the garbage of the oldest generation, found
        now (what the collector walks is small: what came since the last freeze), is not frozen with them."""
        gc.collect()

    def between_slices(self) -> None:
        """While paused: the young generations collected (what a slice made is walked once, while small)."""
        if self.pauses:
            gc.collect(1)
