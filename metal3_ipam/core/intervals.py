"""A set of integers kept as disjoint closed intervals, in a treap.

Free address space is stored this way so that every operation a pool needs
(take the lowest, take the k-th for uniform random choice, take or give back
one given address, count) costs O(log k) for k intervals, whatever the size of
the addresses: a /64 of IPv6 with 2**64 members is a single interval.

Each node holds one interval ``[lo, hi]``, ordered by ``lo``, and the number of
members in its subtree, which is what makes order statistics logarithmic.
Priorities come from a private RNG so that the shape, and so the timing, is
repeatable.
"""

from __future__ import annotations

import random
from typing import Iterable, Iterator

_priorities = random.Random(0x1B2C3D)


class _Node:
    __slots__ = ("lo", "hi", "prio", "left", "right", "total")

    def __init__(self, lo: int, hi: int) -> None:
        self.lo = lo
        self.hi = hi
        self.prio = _priorities.random()
        self.left: _Node | None = None
        self.right: _Node | None = None
        self.total = hi - lo + 1


def _total(node: _Node | None) -> int:
    return node.total if node is not None else 0


def _pull(node: _Node) -> None:
    node.total = node.hi - node.lo + 1 + _total(node.left) + _total(node.right)


def _split(node: _Node | None, key: int) -> tuple[_Node | None, _Node | None]:
    """Split into (intervals with lo < key, intervals with lo >= key)."""
    if node is None:
        return None, None
    if node.lo < key:
        below, above = _split(node.right, key)
        node.right = below
        _pull(node)
        return node, above
    below, above = _split(node.left, key)
    node.left = above
    _pull(node)
    return below, node


def _merge(a: _Node | None, b: _Node | None) -> _Node | None:
    """Join two treaps where every interval of ``a`` lies before those of ``b``."""
    if a is None:
        return b
    if b is None:
        return a
    if a.prio > b.prio:
        a.right = _merge(a.right, b)
        _pull(a)
        return a
    b.left = _merge(a, b.left)
    _pull(b)
    return b


def _build(intervals: list[tuple[int, int]], lo: int, hi: int) -> _Node | None:
    """A balanced tree from sorted intervals, with heap-ordered priorities."""
    if lo >= hi:
        return None
    mid = (lo + hi) // 2
    node = _Node(*intervals[mid])
    node.left = _build(intervals, lo, mid)
    node.right = _build(intervals, mid + 1, hi)
    # Keep the heap property: the parent's priority is the largest in its subtree.
    for child in (node.left, node.right):
        if child is not None and child.prio > node.prio:
            node.prio, child.prio = child.prio, node.prio
            _sift_down(child)
    _pull(node)
    return node


def _sift_down(node: _Node) -> None:
    while True:
        top = node
        for child in (node.left, node.right):
            if child is not None and child.prio > top.prio:
                top = child
        if top is node:
            return
        node.prio, top.prio = top.prio, node.prio
        node = top


class IntervalSet:
    """A mutable set of integers stored as disjoint, non-adjacent intervals."""

    __slots__ = ("_root", "_count")

    def __init__(self, intervals: Iterable[tuple[int, int]] = ()) -> None:
        merged = normalise(intervals)
        self._root = _build(merged, 0, len(merged))
        self._count = len(merged)

    # -- queries -----------------------------------------------------------

    def __len__(self) -> int:
        """Number of members (may far exceed sys.maxsize; see ``size``)."""
        return self.size

    @property
    def size(self) -> int:
        return _total(self._root)

    def __bool__(self) -> bool:
        return self._root is not None

    @property
    def interval_count(self) -> int:
        return self._count

    def __contains__(self, value: int) -> bool:
        return self._find(value) is not None

    def first(self) -> int:
        """The smallest member; IndexError when empty."""
        node = self._root
        if node is None:
            raise IndexError("empty interval set")
        while node.left is not None:
            node = node.left
        return node.lo

    def nth(self, index: int) -> int:
        """The member at ``index`` in ascending order (0-based)."""
        if not 0 <= index < self.size:
            raise IndexError(index)
        node = self._root
        while True:
            left = _total(node.left)
            if index < left:
                node = node.left
                continue
            index -= left
            width = node.hi - node.lo + 1
            if index < width:
                return node.lo + index
            index -= width
            node = node.right

    def next_from(self, value: int) -> int | None:
        """The smallest member not below ``value``, or None."""
        below = self._floor(value)
        if below is not None and below.hi >= value:
            return value
        above = self._ceiling(value)
        return above.lo if above is not None else None

    def intervals(self) -> Iterator[tuple[int, int]]:
        """The intervals in ascending order."""
        stack: list[_Node] = []
        node = self._root
        while stack or node is not None:
            while node is not None:
                stack.append(node)
                node = node.left
            node = stack.pop()
            yield node.lo, node.hi
            node = node.right

    def __iter__(self) -> Iterator[int]:
        for lo, hi in self.intervals():
            yield from range(lo, hi + 1)

    def __repr__(self) -> str:
        shown = list(self.intervals())[:4]
        more = "..." if self._count > 4 else ""
        return f"IntervalSet({shown}{more})"

    # -- updates -----------------------------------------------------------

    def discard(self, value: int) -> bool:
        """Remove ``value``; True when it was a member."""
        path = self._path_to(value)
        if path is None:
            return False
        node = path[-1]
        if node.lo == node.hi:
            self._remove_node(node.lo)
            return True
        if value == node.lo:
            node.lo += 1
        elif value == node.hi:
            node.hi -= 1
        else:
            upper = (value + 1, node.hi)
            node.hi = value - 1
            for ancestor in path:
                ancestor.total -= upper[1] - upper[0] + 2
            self._insert_node(*upper)
            return True
        for ancestor in path:
            ancestor.total -= 1
        return True

    def add(self, value: int) -> bool:
        """Add ``value``; True when it was not a member before."""
        if value in self:
            return False
        before = self._floor(value)
        after = self._ceiling(value)
        joins_before = before is not None and before.hi == value - 1
        joins_after = after is not None and after.lo == value + 1
        if joins_before and joins_after:
            hi = after.hi
            self._remove_node(after.lo)
            self._grow(before.lo, new_hi=hi)
        elif joins_before:
            self._grow(before.lo, new_hi=value)
        elif joins_after:
            # Lowering lo keeps the order: no member lies between before and value.
            self._grow(after.lo, new_lo=value)
        else:
            self._insert_node(value, value)
        return True

    def copy(self) -> "IntervalSet":
        return IntervalSet(self.intervals())

    # -- internals -------------------------------------------------------

    def _path_to(self, value: int) -> list[_Node] | None:
        node = self._root
        path: list[_Node] = []
        while node is not None:
            path.append(node)
            if value < node.lo:
                node = node.left
            elif value > node.hi:
                node = node.right
            else:
                return path
        return None

    def _find(self, value: int) -> _Node | None:
        path = self._path_to(value)
        return path[-1] if path else None

    def _floor(self, value: int) -> _Node | None:
        node, best = self._root, None
        while node is not None:
            if node.lo <= value:
                best, node = node, node.right
            else:
                node = node.left
        return best

    def _ceiling(self, value: int) -> _Node | None:
        node, best = self._root, None
        while node is not None:
            if node.lo >= value:
                best, node = node, node.left
            else:
                node = node.right
        return best

    def _grow(self, key: int, new_lo: int | None = None, new_hi: int | None = None) -> None:
        node = self._root
        path = []
        while node.lo != key:
            path.append(node)
            node = node.left if key < node.lo else node.right
        path.append(node)
        before = node.hi - node.lo
        if new_lo is not None:
            node.lo = new_lo
        if new_hi is not None:
            node.hi = new_hi
        delta = node.hi - node.lo - before
        for ancestor in path:
            ancestor.total += delta

    def _insert_node(self, lo: int, hi: int) -> None:
        """Insert ``[lo, hi]`` (disjoint from every member).

        Descend while the nodes outrank the new one, then split only the
        subtree found there: that subtree is small on average, so an insert
        touches one root-to-leaf path instead of splitting the whole tree.
        """
        new = _Node(lo, hi)
        size = hi - lo + 1
        parent, on_left = None, False
        node = self._root
        while node is not None and node.prio > new.prio:
            node.total += size
            parent, on_left = node, lo < node.lo
            node = node.left if on_left else node.right
        new.left, new.right = _split(node, lo)
        _pull(new)
        self._attach(parent, on_left, new)
        self._count += 1

    def _remove_node(self, key: int) -> None:
        """Remove the interval starting at ``key``: its children take its place."""
        parent, on_left = None, False
        node = self._root
        path = []
        while node.lo != key:
            path.append(node)
            parent, on_left = node, key < node.lo
            node = node.left if on_left else node.right
        size = node.hi - node.lo + 1
        for ancestor in path:
            ancestor.total -= size
        self._attach(parent, on_left, _merge(node.left, node.right))
        self._count -= 1

    def _attach(self, parent: _Node | None, on_left: bool, child: _Node | None) -> None:
        if parent is None:
            self._root = child
        elif on_left:
            parent.left = child
        else:
            parent.right = child


def normalise(intervals: Iterable[tuple[int, int]]) -> list[tuple[int, int]]:
    """Sort, drop empty and merge overlapping or adjacent intervals."""
    merged: list[tuple[int, int]] = []
    for lo, hi in sorted(i for i in intervals if i[0] <= i[1]):
        if merged and lo <= merged[-1][1] + 1:
            if hi > merged[-1][1]:
                merged[-1] = (merged[-1][0], hi)
        else:
            merged.append((lo, hi))
    return merged


def subtract(intervals: list[tuple[int, int]], holes: list[tuple[int, int]]) -> list[tuple[int, int]]:
    """``intervals`` minus ``holes``; both normalised, and so is the result."""
    result: list[tuple[int, int]] = []
    j = 0
    for lo, hi in intervals:
        while j < len(holes) and holes[j][1] < lo:
            j += 1
        k = j
        while lo <= hi and k < len(holes) and holes[k][0] <= hi:
            if holes[k][0] > lo:
                result.append((lo, holes[k][0] - 1))
            lo = max(lo, holes[k][1] + 1)
            k += 1
        if lo <= hi:
            result.append((lo, hi))
    return result
