"""IntervalSet, normalise and subtract (metal3_ipam/core/intervals.py)."""

from __future__ import annotations

import pytest

from metal3_ipam.core.intervals import IntervalSet, normalise, subtract


def test_empty_set():
    s = IntervalSet()
    assert not s
    assert s.size == 0 and len(s) == 0 and s.interval_count == 0
    assert 5 not in s
    with pytest.raises(IndexError):
        s.first()
    with pytest.raises(IndexError):
        s.nth(0)
    assert list(s) == []


def test_construction_normalises_overlapping_adjacent_and_empty_intervals():
    s = IntervalSet([(10, 12), (1, 3), (4, 5), (11, 20), (30, 29)])
    assert list(s.intervals()) == [(1, 5), (10, 20)]
    assert s.size == 16
    assert s.interval_count == 2


def test_first_and_nth_are_in_ascending_order():
    s = IntervalSet([(100, 102), (5, 6), (50, 50)])
    assert s.first() == 5
    assert [s.nth(i) for i in range(s.size)] == [5, 6, 50, 100, 101, 102]
    assert list(s) == [5, 6, 50, 100, 101, 102]
    with pytest.raises(IndexError):
        s.nth(6)
    with pytest.raises(IndexError):
        s.nth(-1)


def test_discard_at_either_end_and_in_the_middle():
    s = IntervalSet([(1, 10)])
    assert s.discard(1) is True
    assert s.discard(10) is True
    assert s.discard(5) is True
    assert list(s.intervals()) == [(2, 4), (6, 9)]
    assert s.size == 7
    assert s.discard(5) is False
    assert s.discard(100) is False
    assert s.size == 7


def test_discard_the_only_member_of_an_interval_removes_it():
    s = IntervalSet([(1, 1), (3, 3)])
    assert s.discard(1)
    assert list(s.intervals()) == [(3, 3)]
    assert s.interval_count == 1
    assert s.discard(3)
    assert not s


def test_add_joins_neighbours():
    s = IntervalSet([(1, 3), (5, 7)])
    assert s.add(4) is True
    assert list(s.intervals()) == [(1, 7)]
    assert s.interval_count == 1
    assert s.add(4) is False
    assert s.add(8) and s.add(0)
    assert list(s.intervals()) == [(0, 8)]
    assert s.add(20)
    assert list(s.intervals()) == [(0, 8), (20, 20)]
    assert s.add(19)
    assert list(s.intervals()) == [(0, 8), (19, 20)]
    assert s.size == 11


@pytest.mark.parametrize("value, expected", [(0, 3), (3, 3), (4, 4), (6, 10), (12, 12), (13, None),
                                             (2**127, None)])
def test_next_from_is_the_smallest_member_not_below(value, expected):
    assert IntervalSet([(3, 4), (10, 12)]).next_from(value) == expected
    assert IntervalSet().next_from(value) is None


def test_sizes_beyond_64_bits_are_exact():
    s = IntervalSet([(0, 2**128 - 1)])
    assert s.size == 2**128
    s.discard(2**64)
    assert s.size == 2**128 - 1
    assert s.nth(2**64) == 2**64 + 1
    assert s.nth(2**64 - 1) == 2**64 - 1
    assert s.interval_count == 2


def test_huge_set_stays_a_few_intervals():
    base = 0x20010DB8 << 96
    s = IntervalSet([(base, base + 2**64 - 1)])
    for i in range(1000):
        s.discard(s.first())
    assert s.interval_count == 1
    assert s.first() == base + 1000


def test_copy_is_independent():
    s = IntervalSet([(1, 5)])
    c = s.copy()
    c.discard(3)
    assert 3 in s and 3 not in c


def test_normalise():
    assert normalise([]) == []
    assert normalise([(5, 4)]) == []
    assert normalise([(3, 4), (1, 2)]) == [(1, 4)]
    assert normalise([(1, 10), (2, 3)]) == [(1, 10)]
    assert normalise([(1, 2), (4, 5)]) == [(1, 2), (4, 5)]


@pytest.mark.parametrize("intervals, holes, expected", [
    ([(1, 10)], [], [(1, 10)]),
    ([(1, 10)], [(1, 10)], []),
    ([(1, 10)], [(0, 100)], []),
    ([(1, 10)], [(5, 5)], [(1, 4), (6, 10)]),
    ([(1, 10)], [(1, 1), (10, 10)], [(2, 9)]),
    ([(1, 10), (20, 30)], [(8, 22)], [(1, 7), (23, 30)]),
    ([(1, 10), (20, 30)], [(11, 19)], [(1, 10), (20, 30)]),
    ([(5, 6)], [(1, 2), (3, 4), (7, 9)], [(5, 6)]),
    ([(1, 3), (5, 7), (9, 11)], [(2, 10)], [(1, 1), (11, 11)]),
])
def test_subtract(intervals, holes, expected):
    assert subtract(intervals, holes) == expected
