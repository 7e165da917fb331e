"""Polling with a deadline, for tests that wait on a real API server."""

from __future__ import annotations

import asyncio
import time
from typing import Callable, TypeVar

T = TypeVar("T")


class Timeout(AssertionError):
    """The awaited condition did not hold before the deadline."""


def eventually(
    check: Callable[[], T],
    *,
    timeout: float = 60.0,
    interval: float = 0.2,
    what: str = "condition",
    retry_on: tuple[type[BaseException], ...] = (AssertionError,),
) -> T:
    """Call ``check()`` until it returns a truthy value and return that value.

    Exceptions listed in ``retry_on`` count as "not yet". At the deadline raises
    :class:`Timeout` (an AssertionError) carrying the last value or exception.
    """
    deadline = time.monotonic() + timeout
    last: object = None
    while True:
        try:
            result = check()
            if result:
                return result
            last = result
        except retry_on as exc:
            last = exc
        if time.monotonic() >= deadline:
            raise Timeout(f"timed out after {timeout:g}s waiting for {what}; last: {last!r}")
        time.sleep(interval)


async def eventually_async(check: Callable[[], T], *, timeout: float = 60.0, interval: float = 0.05,
                           what: str = "condition") -> T:
    """``eventually`` on an event loop: the loop runs between the checks."""
    deadline = time.monotonic() + timeout
    while True:
        result = check()
        if result:
            return result
        if time.monotonic() >= deadline:
            raise Timeout(f"timed out after {timeout:g}s waiting for {what}; last: {result!r}")
        await asyncio.sleep(interval)
