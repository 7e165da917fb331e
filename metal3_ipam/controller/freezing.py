"""What the garbage collector walks, and when it is kept away.

The controller keeps tens of thousands of objects for as long as they live:
the inventory (plain dicts and lists from JSON) and each pool's ledger
(indexes of them). None of it forms a reference cycle, so the cyclic
collector has nothing to find there, yet a full collection walks all of it:
a few hundred milliseconds at 50,000 claims, with the event loop blocked. So
what is kept is moved out of the collector's reach now and then
(``gc.freeze``): it is still freed by reference counting.

Two rules keep that from costing memory:

- every freeze follows a full collection, with nothing run in between, so no
  garbage is frozen. A cycle alive at a freeze that becomes garbage later is
  never collected (the event loop's requests in flight), so freezes come
  only once FREEZE_EVERY objects were filed or built into ledgers since the
  last one (or, while paused, once the collector's young generations grew by
  FREEZE_YOUNG objects), and when a big pass or a listing ends: what a full
  collection walks stays about that size, and a quiet controller freezes nothing;
- a big pool's ledger is built, and a listing fetched and filed, with
  automatic collection paused (``paused``): a ledger grows a dozen
  containers of 50,000 entries, which the collector would otherwise find
  young at full size and walk at once, tens of milliseconds each time; and
  a full collection during a listing would walk everything listed so far.
  Between slices the young generations are collected (``between_slices``),
  while what they contain is small, or everything is frozen when that is due;
  so at the end of the last pause.
"""

from __future__ import annotations

import contextlib
import gc
from collections.abc import Callable, Iterator
from typing import TypeVar

# Objects filed or built between two freezes.
FREEZE_EVERY = 5000
# While paused: objects the young generations may grow by between two freezes (a listed or
# built object is a few; a full collection walks them at about a microsecond each).
FREEZE_YOUNG = 25_000

T = TypeVar("T")


class Freezer:
    def __init__(self, filed: Callable[[], int] = lambda: 0, every: int = FREEZE_EVERY,
                 young: int = FREEZE_YOUNG) -> None:
        self._filed = filed  # a running count of the objects filed (the inventory's)
        self.built = 0  # a running count of the claims and addresses built into ledgers
        self.every = every
        self.young = young
        self._grown = 0  # what the young generations grew by since the last freeze, while paused
        self.pauses = 0  # pauses under way
        self._resume = False  # automatic collection was on when the first of them began
        self._mark = self._count()

    def _count(self) -> int:
        return self._filed() + self.built

    def due(self) -> bool:
        return self._count() - self._mark >= self.every

    def freeze(self) -> None:
        """Collect in full (nothing dead is frozen), then freeze what is alive."""
        self.freeze_with(lambda: None)

    def freeze_with(self, make: Callable[[], T]) -> T:
        """``make()``, frozen with the rest right away: collected first, then made, then frozen,
        nothing else running in between (``make`` must not leave garbage)."""
        gc.collect()
        made = make()
        gc.freeze()
        self._mark = self._count()
        self._grown = 0
        return made

    def maybe_freeze(self) -> None:
        """Freeze when it is due (also while paused: watch events filed while a listing waits for
        its next page are walked by nothing else)."""
        if self.due():
            self.freeze()

    @contextlib.contextmanager
    def paused(self) -> Iterator[None]:
        """Automatic collection off until the last pause ends, then back as it was; what the pauses
        made is collected young or frozen, as between slices."""
        self.pauses += 1
        if self.pauses == 1:
            self._resume = gc.isenabled()
            gc.disable()
        failed = False
        try:
            yield
        except BaseException:
            # Not frozen on the way out: the frames the failure goes through are alive now, and
            # garbage once it is handled (with what they refer to: a listing's worth of keys).
            failed = True
            raise
        finally:
            self.pauses -= 1
            if self.pauses == 0:
                try:
                    if not failed:
                        self._collect_or_freeze()
                finally:
                    if self._resume:
                        gc.enable()

    def between_slices(self) -> None:
        """While paused: the young generations collected (what a slice made is walked once, while
        small), or everything frozen when that is due (what a full collection walks stays bounded,
        however long the pause and whatever runs in it: several big builds, a listing)."""
        if self.pauses:
            self._collect_or_freeze()

    def _collect_or_freeze(self) -> None:
        self._grown += gc.get_count()[0]
        if self.due() or self._grown >= self.young:
            self.freeze()
        else:
            gc.collect(1)
