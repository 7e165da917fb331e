"""Map entries that are almost always one value: the value itself, or ``Several`` of them.

Who holds an IP is one address, but for a moment or in a broken state
several; a set or a list per entry would cost more than the value it holds.
The inventory's and the ledger's holder maps keep the value itself, and a
``Several`` (a tuple of its own type, never changed in place) when there are
more. A plain tuple (an object key, a planned allocation) is one value.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any


class Several(tuple):
    __slots__ = ()


def each(entry: Any) -> tuple:
    """The values of an entry (none for None)."""
    if entry is None:
        return ()
    return entry if type(entry) is Several else (entry,)


def entry_of(values: Iterable[Any]) -> Any:
    """The entry for ``values``: None when there are none, the value when one, else Several."""
    values = tuple(values)
    if not values:
        return None
    return values[0] if len(values) == 1 else Several(values)
