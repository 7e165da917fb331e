"""What the diagnostics endpoint offers besides ``/metrics``, as Cluster API providers' managers offer it.

A Go manager serves ``/debug/pprof/`` (Go's profiles) and ``/debug/flags/v``
(the log verbosity, changed with a PUT) next to its metrics. This process is
Python, so the same paths give what Python has in their place:

- ``/debug/pprof/`` — the index of what follows;
- ``/debug/pprof/goroutine`` — every asyncio task of the controller and every
  thread, each with its stack (the ``goroutine?debug=2`` of a Python process);
- ``/debug/pprof/profile?seconds=N`` — where the event loop spends its time for
  N seconds (default 30, at most 300): ``cProfile`` statistics as text, sorted by
  cumulative time;
- ``/debug/pprof/heap`` — the live objects by type, most numerous first, and the
  sizes ``tracemalloc`` has seen when Python was started with it on;
- ``/debug/flags/v`` — GET: the verbosity; PUT with a number as the body: set it
  (0: warnings and the controller's own lines; 1 or more: every planned write;
  4 or more: debugging lines too).

They are for an operator investigating a live controller: behind the same
TokenReview and SubjectAccessReview as ``/metrics``, each for its own path
and verb, which the ``metrics-reader`` role does not grant.
"""

from __future__ import annotations

import asyncio
import cProfile
import gc
import io
import logging
import pstats
import sys
import threading
import traceback
import tracemalloc
from collections import Counter

PPROF = "/debug/pprof/"
VERBOSITY = "/debug/flags/v"
PROFILE_SECONDS, PROFILE_MAX_SECONDS = 30, 300
DEBUG_VERBOSITY = 4

# The loggers the verbosity sets (see cli._run: a planned write is logged by metal3_ipam.pools).
_PLANNED_WRITES = "metal3_ipam.pools"
_verbosity = 0


def verbosity() -> int:
    return _verbosity


def set_verbosity(level: int) -> None:
    """What ``-v N`` sets at start, changed while running."""
    global _verbosity
    _verbosity = level
    logging.getLogger().setLevel(logging.INFO if level >= 1 else logging.WARNING)
    logging.getLogger("metal3_ipam").setLevel(logging.DEBUG if level >= DEBUG_VERBOSITY else logging.INFO)
    logging.getLogger(_PLANNED_WRITES).setLevel(logging.NOTSET if level >= 1 else logging.WARNING)


def index() -> str:
    return ("profiles of this Python process (paths as Go's net/http/pprof; what each holds is Python's):\n"
            f"  {PPROF}goroutine   every asyncio task and thread, with its stack\n"
            f"  {PPROF}profile     ?seconds=N (default {PROFILE_SECONDS}): the event loop's time, cProfile "
            "statistics by cumulative time\n"
            f"  {PPROF}heap        live objects by type; tracemalloc's top sizes when tracing\n"
            f"  {VERBOSITY}       GET the log verbosity; PUT a number to set it\n")


def stacks() -> str:
    """Every task of the running loop and every thread, each with its stack."""
    out = io.StringIO()
    tasks = sorted(asyncio.all_tasks(), key=lambda t: t.get_name())
    out.write(f"{len(tasks)} asyncio tasks\n\n")
    for task in tasks:
        out.write(f"task {task.get_name()} ({'done' if task.done() else 'pending'})\n")
        for frame in task.get_stack():
            out.write("".join(traceback.format_stack(frame, limit=1)))
        out.write("\n")
    frames = sys._current_frames()
    out.write(f"{len(frames)} threads\n\n")
    names = {t.ident: t.name for t in threading.enumerate()}
    for ident, frame in frames.items():
        out.write(f"thread {names.get(ident, ident)}\n{''.join(traceback.format_stack(frame))}\n")
    return out.getvalue()


def profile_seconds(asked: str | None) -> int:
    """The seconds a profile runs, from the ``seconds`` query parameter; ValueError naming what is wrong."""
    if asked is None or asked == "":
        return PROFILE_SECONDS
    try:
        seconds = int(asked)
    except ValueError:
        raise ValueError(f"seconds={asked!r} is not a whole number") from None
    if not 1 <= seconds <= PROFILE_MAX_SECONDS:
        raise ValueError(f"seconds={seconds} is outside 1..{PROFILE_MAX_SECONDS}")
    return seconds


async def profile(seconds: float, lines: int = 60) -> str:
    """The event loop's thread profiled for ``seconds`` (this coroutine runs on it, so everything the loop
    runs meanwhile is measured)."""
    profiler = cProfile.Profile()
    profiler.enable()
    try:
        await asyncio.sleep(seconds)
    finally:
        profiler.disable()
    out = io.StringIO()
    stats = pstats.Stats(profiler, stream=out)
    stats.sort_stats(pstats.SortKey.CUMULATIVE).print_stats(lines)
    return f"cProfile of the event loop for {seconds:g} s\n{out.getvalue()}"


def heap(top: int = 40) -> str:
    """Live objects the collector tracks, by type; tracemalloc's largest allocation sites when it traces."""
    counts = Counter(type(obj).__qualname__ for obj in gc.get_objects())
    out = io.StringIO()
    out.write(f"{sum(counts.values())} objects tracked by the garbage collector; by type:\n")
    for name, count in counts.most_common(top):
        out.write(f"{count:>10}  {name}\n")
    if tracemalloc.is_tracing():
        out.write("\ntracemalloc, by line:\n")
        for stat in tracemalloc.take_snapshot().statistics("lineno")[:top]:
            out.write(f"{stat}\n")
    else:
        out.write("\n(start Python with -X tracemalloc, or PYTHONTRACEMALLOC=1, for allocation sizes by line)\n")
    return out.getvalue()


def parse_verbosity(body: str) -> int:
    """A PUT's body: a whole number from 0; ValueError naming the value."""
    text = body.strip()
    try:
        level = int(text)
    except ValueError:
        raise ValueError(f"the verbosity must be a whole number, not {text!r}") from None
    if level < 0:
        raise ValueError(f"the verbosity must be 0 or more, not {level}")
    return level
