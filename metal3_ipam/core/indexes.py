"""``status.indexes`` of a pool: claim -> IP, in key order, cut at a byte budget.

The map is written into the pool's status about once a second while claims
come and go. Sorting every binding for each write made one new claim in a
pool of 50,000 cost more than the claim itself. ``StatusIndex`` keeps the
bound claims in key order across passes: the claims whose binding changed
since the last build are put in place or taken out (a binary search each),
and a build walks the order only up to the cut.

The order holds the claim keys themselves (a pointer each), not copies of
their index keys: a pool of 50,000 claims pays 8 bytes a claim for it.
"""

from __future__ import annotations

import bisect
import json
import heapq
import itertools
from collections.abc import Generator, Mapping

from . import objects as o

# status.indexes stays far below etcd's object size limit (about 1.5 MiB, with
# managedFields on top) whatever the number and length of claim names: it is a
# convenience, the IPAddress objects are the record. Bounded by serialised bytes.
MAX_INDEXES_BYTES = 256 * 1024
# Entries handled between two yields while the order is built or the prefix grown, and
# claims put in place or taken out of the order (a list insert moves up to 400 KB at 50,000).
INDEX_PIECE = 4096
FIT_PIECE = 1024
PLACE_PIECE = 256


class StatusIndex:
    """The bound claims of one pool in ``status.indexes`` order, and the entries that fit, kept as bindings change.

    ``touch(key)`` after every change of the binding of ``key``; ``build(bound)``
    then answers what a fresh sort and cut of ``bound`` would. More touched
    claims than a quarter of the pool: sorted and cut afresh instead.

    The entries that fit are always a prefix of the order (``_kept``, with
    ``_size`` their JSON bytes): a touched claim leaves the prefix, and comes
    back into it if it sorts inside; then the prefix is shortened while it is
    too big and grown while the next entry fits.
    """

    __slots__ = ("_order", "_touched", "_kept", "_size")

    def __init__(self) -> None:
        self._order: list[o.ClaimKey] | None = None  # None: never built (nothing to keep in step)
        self._touched: dict[o.ClaimKey, None] = {}
        self._kept: dict[str, str] = {}
        self._size = 2  # {}

    def touch(self, key: o.ClaimKey) -> None:
        if self._order is not None:
            self._touched[key] = None

    def build(self, bound: Mapping[o.ClaimKey, str]) -> Generator[None, None, tuple[dict[str, str], int]]:
        """``status.indexes`` (a new dict: the kept one goes on changing) and how many entries did not fit."""
        if self._order is None or len(self._touched) > len(bound) // 4:
            self._order = None  # while it is sorted afresh, nothing is noted
            self._touched = {}
            order = yield from _sorted_keys(bound)
            self._kept, self._size = {}, 2
            self._order = order
        else:
            # Each placed claim is struck off only once placed: a build given up half-way
            # (a pass cancelled) leaves the rest for the next.
            for n, key in enumerate(list(self._touched), 1):
                self._replace(key, bound.get(key))
                del self._touched[key]
                if n % PLACE_PIECE == 0:
                    yield
        yield from self._fit(bound)
        return dict(self._kept), len(self._order) - len(self._kept)

    def _replace(self, key: o.ClaimKey, text: str | None) -> None:
        order, kept = self._order, self._kept
        index_key = o.index_key(key)
        at = bisect.bisect_left(order, index_key, key=o.index_key)
        if at < len(order) and order[at] == key:
            del order[at]
            old = kept.pop(index_key, None)
            if old is not None:
                self._size -= _entry_size(index_key, old)
        if text is not None:
            order.insert(at, key)
            if at < len(kept):  # inside the prefix (just past it, it is the growing's to take)
                kept[index_key] = text
                self._size += _entry_size(index_key, text)

    def _fit(self, bound: Mapping[o.ClaimKey, str]) -> Generator[None, None, None]:
        order, kept = self._order, self._kept
        while self._size > MAX_INDEXES_BYTES and kept:
            index_key = o.index_key(order[len(kept) - 1])
            self._size -= _entry_size(index_key, kept.pop(index_key))
        while len(kept) < len(order):
            key = order[len(kept)]
            index_key, text = o.index_key(key), bound.get(key, "")
            size = _entry_size(index_key, text)
            if self._size + size > MAX_INDEXES_BYTES:
                break
            kept[index_key] = text
            self._size += size
            if len(kept) % FIT_PIECE == 0:
                yield


def _entry_size(index_key: str, text: str) -> int:
    return _json_size(index_key) + _json_size(text) + 2  # "key":"ip",


def _json_size(text: str) -> int:
    """Bytes of ``text`` as a JSON string, quotes included (claim names and IPs are plain ASCII;
    an address text that is not an IP may be anything)."""
    if text.isascii() and text.isprintable() and '"' not in text and "\\" not in text:
        return len(text) + 2
    return len(json.dumps(text, ensure_ascii=False).encode())


def _sorted_keys(bound: Mapping[o.ClaimKey, str]) -> Generator[None, None, list[o.ClaimKey]]:
    # Sorted runs of a few thousand, merged lazily: no one sort of 50,000 holds the event loop.
    # Read from the map itself, not a copy of its keys (a new list of 50,000 the collector
    # would walk); nothing else changes the map while its pool's pass runs.
    keys = iter(bound)
    runs = []
    while piece := list(itertools.islice(keys, INDEX_PIECE)):
        runs.append(sorted((o.index_key(k), k) for k in piece))
        yield
    order: list[o.ClaimKey] = []
    merged = heapq.merge(*runs)
    while piece := list(itertools.islice(merged, INDEX_PIECE)):
        order.extend(key for _, key in piece)
        yield
    return order
