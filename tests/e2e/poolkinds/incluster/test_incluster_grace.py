"""``addressReuseGracePeriodSeconds``: a released address outlives its deleted claim for that long.

As the in-cluster provider does it: the claim's deletion is held by its finalizer and its IPAddress kept
(and counted) until ``deletionTimestamp + addressReuseGracePeriodSeconds``; its IP is not handed out
meanwhile; then both go. The deadline is derived from what is stored, so it holds across a controller
restart, and a controller that was down at the deadline releases at once when it comes back. A pool
deleted first (a Cluster's teardown) skips the grace period.
"""

from __future__ import annotations

import datetime
import time

from controller_fixtures import condition, holds_for
from metal3_ipam.testing.waiting import eventually

ARGS = ["-A", "--no-leader-elect"]
# How long after its deadline a release may take: generous (a loaded machine is slow), and still far from the
# resync (300 s), the next chance a controller that missed the deadline would have.
LATE = 60.0


def _stamp(stamp: str) -> float:
    """An API server's timestamp (whole seconds) on this host's clock (the API server runs on the same host)."""
    return datetime.datetime.strptime(stamp, "%Y-%m-%dT%H:%M:%SZ").replace(tzinfo=datetime.timezone.utc).timestamp()


def _deadline(incluster, claim: str, grace: int) -> float:
    """The release deadline on this host's clock."""
    return _stamp(incluster.get_claim(claim)["metadata"]["deletionTimestamp"]) + grace


def _exhausted(incluster, claim: str) -> bool:
    ready = condition(incluster.get_claim(claim), "Ready")
    return bool(ready and ready["status"] == "False" and ready.get("reason") == "PoolExhausted"
                and ready.get("message"))


def _kept_until(incluster, claim: str, deadline: float, what: str, meanwhile=lambda: True) -> None:
    """Claim (deleting) and address both still there until ``deadline``, and ``meanwhile()`` true as long as
    they are. A look that ends before the deadline saw the state before it; one that ends after it may see
    the release, however long a loaded machine drew the look out, so it decides nothing."""
    def still_there():
        c = incluster.get_claim(claim)
        return c is not None and c["metadata"].get("deletionTimestamp") and incluster.get_address(claim) is not None \
            and meanwhile()

    while True:
        there = still_there()
        if time.time() >= deadline:
            return
        assert there, f"{what} stopped holding before the deadline"
        time.sleep(0.2)


def test_the_address_outlives_its_deleted_claim_for_the_grace_period(controller_factory, incluster):
    grace = 6
    controller_factory(ARGS)
    incluster.ip_pool("p", prefix=24, gateway="10.0.0.1", addresses=["10.0.0.10"], grace_seconds=grace)
    incluster.claim("old", "p")
    address = incluster.served("old")
    assert address["spec"]["address"] == "10.0.0.10"
    incluster.delete_claim("old")
    deadline = _deadline(incluster, "old", grace)
    incluster.claim("new", "p")
    # The held IP is not handed out: the claim says why as long as a look can end before the deadline.
    eventually(lambda: time.time() >= deadline or _exhausted(incluster, "new"), timeout=LATE,
               what="IPAddressClaim new Ready=False PoolExhausted while the held address is kept")
    incluster.wait_counts("p", {"total": 1, "used": 1, "free": 0, "outOfRange": 0})
    _kept_until(incluster, "old", deadline, "the deleted claim and its address kept for the grace period, and no "
                "address for the new claim", meanwhile=lambda: incluster.get_address("new") is None)

    incluster.claim_gone("old", timeout=LATE + 1)
    given = incluster.served("new")
    assert given["spec"]["address"] == "10.0.0.10"
    assert _stamp(given["metadata"]["creationTimestamp"]) >= deadline, given["metadata"]  # made after the deadline


def test_the_grace_period_holds_across_a_controller_restart(controller_factory, incluster):
    grace = 10
    first = controller_factory(ARGS, name="first")
    incluster.ip_pool("p", prefix=24, addresses=["10.0.0.10-10.0.0.11"], grace_seconds=grace)
    incluster.claim("old", "p")
    assert incluster.ip("old") == "10.0.0.10"
    incluster.delete_claim("old")
    deadline = _deadline(incluster, "old", grace)
    assert first.stop() == 0
    second = controller_factory(ARGS, name="second")
    incluster.claim("new", "p")
    served = incluster.served("new")  # the new controller serves, and not with the held IP before its deadline
    assert served["spec"]["address"] == "10.0.0.11" or _stamp(served["metadata"]["creationTimestamp"]) >= deadline, \
        served["metadata"]
    _kept_until(incluster, "old", deadline, "the held address kept by the restarted controller until the deadline")
    incluster.claim_gone("old", timeout=LATE + 1)
    assert time.time() >= deadline - 0.5
    assert second.alive()


def test_a_deadline_passed_while_no_controller_ran_releases_at_once(controller_factory, incluster):
    # Long enough for the first controller to be stopped before the deadline (deletionTimestamp is in whole
    # seconds, so up to a second of it may be gone already): a controller still running releases at it.
    grace = 8
    first = controller_factory(ARGS, name="first")
    incluster.ip_pool("p", prefix=24, addresses=["10.0.0.10"], grace_seconds=grace)
    incluster.claim("old", "p")
    incluster.served("old")
    incluster.delete_claim("old")
    deadline = _deadline(incluster, "old", grace)
    assert first.stop() == 0
    # Nobody releases it while no controller runs, past the deadline.
    holds_for(lambda: incluster.get_address("old") is not None, max(0.0, deadline + 1 - time.time()),
              "the held address while no controller runs")
    controller_factory(ARGS, name="second")
    incluster.claim_gone("old", timeout=LATE)


def test_a_pool_deleted_first_skips_the_grace_period(controller_factory, incluster):
    """A Cluster's teardown: the pool deleted, then the claim; no 300 s wait, and the pool goes last."""
    controller_factory(ARGS)
    incluster.ip_pool("p", prefix=24, gateway="10.0.0.1", addresses=["10.0.0.50"], grace_seconds=300)
    incluster.claim("m", "p")
    assert incluster.ip("m") == "10.0.0.50"
    incluster.writer.delete(incluster.pool("p"))
    assert incluster.pool("p") is not None  # held by its finalizer while its address exists
    incluster.delete_claim("m")
    incluster.claim_gone("m", timeout=LATE)
    eventually(lambda: incluster.pool("p") is None, timeout=LATE, what="the deleted pool to be gone")
