"""The election's timing decisions, on a clock the test moves by hand (no sleeping, no server).

The elector itself is exercised against a real API server in tests/e2e/controller/test_leader_elector.py.
"""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from metal3_ipam.controller.leader import ExpiryWatch, LeaseRecord, LeaseTiming, Move, Tenure, decide


class Clock:
    def __init__(self, now: float = 1000.0) -> None:
        self.now = now

    def __call__(self) -> float:
        return self.now

    def advance(self, seconds: float) -> None:
        self.now += seconds


def lease(holder: str = "other", version: str = "1", renew_time: str | None = "2001-01-01T00:00:00.000000Z",
          duration: int | None = 15, transitions: int = 0) -> dict:
    return {"metadata": {"name": "l", "resourceVersion": version},
            "spec": {"holderIdentity": holder, "leaseDurationSeconds": duration, "renewTime": renew_time,
                     "leaseTransitions": transitions}}


def record(**kwargs) -> LeaseRecord:
    return LeaseRecord.of(lease(**kwargs))


# -- what a candidate concludes --------------------------------------------------------


def test_a_renew_time_far_in_the_past_is_not_expiry_when_freshly_observed():
    """The holder's renewTime is from another clock: a year-old stamp on a record seen a moment
    ago says nothing. Judged the old way (renewTime against our wall clock) it was stolen at once."""
    clock = Clock()
    watch = ExpiryWatch(clock)
    old = record(renew_time="2001-01-01T00:00:00.000000Z")
    watch.observe(old)
    assert decide(old, "me", watch, 15) is Move.WAIT
    clock.advance(14.9)
    watch.observe(old)
    assert decide(old, "me", watch, 15) is Move.WAIT


def test_a_record_that_keeps_changing_is_never_taken_whatever_its_timestamps():
    clock = Clock()
    watch = ExpiryWatch(clock)
    for i in range(100):  # the holder renews every 2 s with a clock stuck in 2001
        current = record(version=str(i), renew_time="2001-01-01T00:00:00.000000Z")
        watch.observe(current)
        assert decide(current, "me", watch, 15) is Move.WAIT, f"taken after {i * 2}s"
        clock.advance(2.0)


def test_an_unchanged_record_observed_for_a_whole_lease_is_taken_even_with_a_future_renew_time():
    """The other skew: a holder whose clock runs ahead, then dies. Its record is taken after
    the lease duration as we observed it, not when our wall clock catches up with its stamp."""
    clock = Clock()
    watch = ExpiryWatch(clock)
    dead = record(renew_time="2999-01-01T00:00:00.000000Z", duration=15)
    watch.observe(dead)
    clock.advance(14.99)
    watch.observe(dead)
    assert decide(dead, "me", watch, 15) is Move.WAIT
    clock.advance(0.01)
    watch.observe(dead)
    assert decide(dead, "me", watch, 15) is Move.TAKE


def test_any_change_restarts_the_observation():
    clock = Clock()
    watch = ExpiryWatch(clock)
    watch.observe(record(version="1"))
    clock.advance(14)
    for changed in (record(version="2"), record(version="2", holder="third"),
                    record(version="2", holder="third", renew_time="x"),
                    record(version="2", holder="third", renew_time="x", duration=20)):
        watch.observe(changed)
        assert watch.unchanged_for() == 0.0, changed
        clock.advance(14)
        watch.observe(changed)
        assert decide(changed, "me", watch, 15) is Move.WAIT


def test_the_holders_own_duration_counts_not_ours():
    clock = Clock()
    watch = ExpiryWatch(clock)
    long = record(duration=60)
    watch.observe(long)
    clock.advance(30)
    assert decide(long, "me", watch, 15) is Move.WAIT
    clock.advance(30)
    assert decide(long, "me", watch, 15) is Move.TAKE
    unset = record(duration=None, version="2")
    watch.observe(unset)
    clock.advance(15)
    assert decide(unset, "me", watch, 15) is Move.TAKE


def test_no_lease_a_released_lease_and_our_own():
    watch = ExpiryWatch(Clock())
    assert decide(None, "me", watch, 15) is Move.CREATE
    released = record(holder="")
    watch.observe(released)
    assert decide(released, "me", watch, 15) is Move.TAKE  # given up on shutdown: at once
    mine = record(holder="me")
    watch.observe(mine)
    assert decide(mine, "me", watch, 15) is Move.RENEW


def test_nothing_observed_is_never_expired():
    watch = ExpiryWatch(Clock())
    assert not watch.expired(0.0)


@given(st.lists(st.tuples(st.floats(0, 30), st.booleans()), max_size=40), st.floats(1, 60))
def test_take_only_after_a_full_duration_without_change(steps, duration):
    """Over any sequence of reads (changed or not, at any spacing), TAKE comes exactly when the
    record has been the same for ``duration`` seconds of our clock since we first saw it so."""
    clock = Clock()
    watch = ExpiryWatch(clock)
    version = 0
    first_seen = clock.now
    current = record(version="0", duration=None)
    watch.observe(current)
    for gap, changed in steps:
        clock.advance(gap)
        if changed:
            version += 1
            current = record(version=str(version), duration=None)
            first_seen = clock.now
        watch.observe(current)
        expected = Move.TAKE if clock.now - first_seen >= duration else Move.WAIT
        assert decide(current, "me", watch, duration) is expected


# -- what the holder concludes ---------------------------------------------------------


def test_the_holder_stops_at_the_deadline_from_the_start_of_its_last_successful_renew():
    clock = Clock()
    tenure = Tenure(10.0, clock)
    assert not tenure.in_force()
    started = clock.now
    clock.advance(3.0)  # the renew took 3 s to come back: the deadline still counts from its start
    tenure.renewed(started)
    assert tenure.in_force() and tenure.left() == pytest.approx(7.0)
    clock.advance(6.99)
    assert tenure.in_force()
    clock.advance(0.01)
    assert not tenure.in_force(), "no answer came since: the holder must have stopped"


def test_a_renew_that_never_answers_extends_nothing():
    clock = Clock()
    tenure = Tenure(10.0, clock)
    tenure.renewed(clock.now)
    for _ in range(5):  # attempts go out every 2 s and hang; nothing is renewed
        clock.advance(2.0)
    assert not tenure.in_force()


def test_a_late_answer_to_an_older_attempt_does_not_shorten_the_tenure():
    clock = Clock()
    tenure = Tenure(10.0, clock)
    tenure.renewed(clock.now + 4)
    tenure.renewed(clock.now)
    assert tenure.left() == pytest.approx(14.0)


def test_stepping_down_ends_the_tenure_at_once():
    clock = Clock()
    tenure = Tenure(10.0, clock)
    tenure.renewed(clock.now)
    tenure.end()
    assert not tenure.in_force()


@given(st.floats(0.01, 5), st.floats(0.01, 10), st.floats(0, 30), st.floats(0, 5))
def test_the_holder_has_stopped_before_a_candidate_may_take_over(retry, margin, write_delay, observe_delay):
    """Whatever the delays: the holder's last renew starts at s, lands at s + write_delay, the
    candidate first sees it at s + write_delay + observe_delay. The holder stops acting before
    the candidate may take the unchanged record."""
    renew = retry + margin
    timing = LeaseTiming(lease_duration=renew + 0.5, renew_deadline=renew, retry_period=retry)
    holder_clock, candidate_clock = Clock(0.0), Clock(0.0)
    tenure = Tenure(timing.renew_deadline, holder_clock)
    tenure.renewed(0.0)
    watch = ExpiryWatch(candidate_clock)
    candidate_clock.advance(write_delay + observe_delay)
    seen = record(version="7", duration=timing.lease_duration)
    watch.observe(seen)
    # (Just past) the first instant the candidate may take over, and the holder at that instant.
    candidate_clock.advance(timing.lease_duration + 1e-6)
    assert decide(seen, "me", watch, timing.lease_duration) is Move.TAKE
    holder_clock.now = candidate_clock.now
    assert not tenure.in_force()


# -- the options --------------------------------------------------------------------------


def test_defaults_are_controller_runtimes():
    timing = LeaseTiming()
    assert (timing.lease_duration, timing.renew_deadline, timing.retry_period) == (15.0, 10.0, 2.0)
    assert timing.attempt_timeout == 5.0


@pytest.mark.parametrize("values, words", [
    ((15, 15, 2), "renew deadline 15s must be shorter than the lease duration 15s"),
    ((15, 20, 2), "renew deadline 20s must be shorter than the lease duration 15s"),
    ((15, 10, 10), "retry period 10s must be shorter than the renew deadline 10s"),
    ((15, 10, 0), "retry period 0: must be a positive number of seconds"),
    ((float("nan"), 10, 2), "lease duration nan"),
])
def test_inconsistent_timing_is_refused_with_the_values(values, words):
    with pytest.raises(ValueError, match=words):
        LeaseTiming(*values)


def test_a_stop_ends_the_election_also_when_one_cancellation_is_swallowed():
    """Before Python 3.12, asyncio.wait_for can swallow a cancellation that arrives as its inner call
    completes; the election loop must still end, or a controller's shutdown hangs for good."""
    import asyncio

    from metal3_ipam.controller.leader import LeaderElector

    class Swallowing(LeaderElector):
        swallowed = 0
        attempts = 0

        async def attempt(self) -> None:
            self.attempts += 1
            try:
                await asyncio.sleep(3600)
            except asyncio.CancelledError:
                if self.swallowed:
                    raise
                self.swallowed += 1  # as wait_for may: the cancellation is lost

        def _pause(self) -> float:
            return 0.0

    async def scenario() -> Swallowing:
        elector = Swallowing(None, "ns", timing=LeaseTiming(lease_duration=15, renew_deadline=10, retry_period=2))
        elector.start()
        while not elector.attempts:
            await asyncio.sleep(0)
        await asyncio.wait_for(elector.stop(), timeout=30)
        elector.close()
        return elector

    elector = asyncio.run(scenario())
    assert elector.swallowed == 1 and elector._task.done() and elector.failure is None
