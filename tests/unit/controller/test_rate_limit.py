"""--kube-api-qps / --kube-api-burst: a token bucket every API request of the controller waits for."""

from __future__ import annotations

import pytest

from metal3_ipam.controller.ratelimit import RateLimit, rate_limit


class Clock:
    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


def test_a_burst_goes_at_once_then_requests_wait_their_turn_at_the_rate():
    clock = Clock()
    limit = RateLimit(qps=20.0, burst=30, clock=clock)
    assert [limit.reserve() for _ in range(30)] == [0.0] * 30
    assert [limit.reserve() for _ in range(3)] == pytest.approx([0.05, 0.10, 0.15])
    clock.now = 10.0  # idle: the bucket fills again, to the burst and no further
    assert [limit.reserve() for _ in range(30)] == [0.0] * 30
    assert limit.reserve() == pytest.approx(0.05)


def test_no_limit_without_a_positive_rate():
    assert rate_limit(0.0, 0) is None and rate_limit(-1.0, 10) is None
    assert rate_limit(5.0, 10).burst == 10


def test_the_rest_clients_requests_wait_for_their_token():
    calls, waited = [], []

    class Rest:
        def request(self, *args, **kwargs):
            calls.append(args)
            return "answer"

    class Api:
        rest_client = Rest()

    limit = RateLimit(qps=1.0, burst=1)
    limit.wait_blocking = lambda: waited.append(len(calls))
    api = limit.limit(Api())
    assert api.rest_client.request("GET", "/x") == "answer"
    assert calls == [("GET", "/x")] and waited == [0]  # the token was taken before the request went
