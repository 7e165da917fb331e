"""What the diagnostics endpoint serves beside /metrics: the verbosity, the profiles' parameters, the stacks."""

from __future__ import annotations

import asyncio
import logging

import pytest

from metal3_ipam.controller import debugging


@pytest.fixture
def restored_levels():
    names = ("", "metal3_ipam", "metal3_ipam.pools")
    before = {name: logging.getLogger(name).level for name in names}
    level = debugging.verbosity()
    yield
    debugging.set_verbosity(level)
    for name, was in before.items():
        logging.getLogger(name).setLevel(was)


@pytest.mark.parametrize("level, planned_writes, debug", [(0, False, False), (1, True, False), (4, True, True)])
def test_the_verbosity_decides_which_lines_are_logged(restored_levels, level, planned_writes, debug):
    debugging.set_verbosity(level)
    assert debugging.verbosity() == level
    assert logging.getLogger("metal3_ipam.pools").isEnabledFor(logging.INFO) is planned_writes
    assert logging.getLogger("metal3_ipam.pools.writer").isEnabledFor(logging.INFO) is planned_writes
    assert logging.getLogger("metal3_ipam").isEnabledFor(logging.INFO)  # the controller's own lines, always
    assert logging.getLogger("metal3_ipam.leader").isEnabledFor(logging.DEBUG) is debug


@pytest.mark.parametrize("body, message", [("loud", "not 'loud'"), ("-1", "0 or more, not -1"), ("", "not ''")])
def test_a_verbosity_that_is_not_a_number_from_zero_is_refused_naming_it(body, message):
    with pytest.raises(ValueError, match=message):
        debugging.parse_verbosity(body)


def test_a_verbosity_is_read_with_the_whitespace_of_a_request_body():
    assert debugging.parse_verbosity(" 3\n") == 3


@pytest.mark.parametrize("asked, seconds", [(None, 30), ("", 30), ("1", 1), ("300", 300)])
def test_a_profile_runs_the_seconds_asked(asked, seconds):
    assert debugging.profile_seconds(asked) == seconds


@pytest.mark.parametrize("asked, message", [("soon", "'soon' is not a whole number"), ("0", "outside 1..300"),
                                            ("301", "outside 1..300"), ("1.5", "not a whole number")])
def test_a_profile_of_no_sensible_length_is_refused_naming_it(asked, message):
    with pytest.raises(ValueError, match=message):
        debugging.profile_seconds(asked)


def test_the_stacks_name_every_task_of_the_loop():
    async def main() -> str:
        parked = asyncio.create_task(asyncio.Event().wait(), name="a parked task")
        await asyncio.sleep(0)
        try:
            return debugging.stacks()
        finally:
            parked.cancel()

    text = asyncio.run(main())
    assert "task a parked task (pending)" in text
    assert "threads" in text and "MainThread" in text


def test_a_profile_measures_what_the_loop_runs_meanwhile():
    def busy_work() -> int:
        return sum(i * i for i in range(20_000))

    async def main() -> str:
        async def worker():
            for _ in range(5):
                busy_work()
                await asyncio.sleep(0)

        task = asyncio.create_task(worker())
        text = await debugging.profile(0.05)
        await task
        return text

    assert "busy_work" in asyncio.run(main())
