"""Pools followed by the controller's own watch streams (not kopf's), on a real API server.

A pool's events now come through ``watch.KindWatch`` and are decoded against
what the controller reads of them (``wire``). What kopf did for pools must
still happen: a pool being deleted keeps its finalizer while its addresses
live, and a pool deleted and created again under the same name (a new uid, a
new range) is a new pool: nothing of the old one's state is served from it.
"""

from __future__ import annotations

from controller_fixtures import METAL3, assert_invariants, condition
from metal3_ipam.testing.waiting import eventually


def test_a_pool_recreated_under_its_name_serves_from_its_new_range_and_says_so(controller, kube):
    old = kube.pool("p", pools=[{"start": "10.91.0.1", "end": "10.91.0.9"}], prefix=24)
    kube.claim("a", "p")
    assert kube.bound("a")["spec"]["address"] == "10.91.0.1"
    kube.delete(METAL3, "ipclaims", "a")
    kube.gone(METAL3, "ipclaims", "a")
    kube.delete(METAL3, "ippools", "p")
    kube.gone(METAL3, "ippools", "p")
    kube.claim("late", "p")
    assert "not found" in kube.claim_error("late")

    new = kube.pool("p", pools=[{"start": "10.92.0.1", "end": "10.92.0.9"}], prefix=24)
    assert new["metadata"]["uid"] != old["metadata"]["uid"]
    assert kube.bound("late")["spec"]["address"] == "10.92.0.1"
    kube.claim("b", "p")
    assert kube.bound("b")["spec"]["address"] == "10.92.0.2"

    def status_current():
        status = (kube.ippool("p") or {}).get("status") or {}
        return status if status.get("indexes") == {"late": "10.92.0.1", "b": "10.92.0.2"} else None
    status = eventually(status_current, timeout=20, what="the new pool's status to show its two claims")
    assert (status["allocated"], status["free"], status.get("indexesOmitted")) == ("2", "7", None)
    assert (condition(kube.ippool("p"), "Ready") or {}).get("status") == "True"
    assert_invariants(kube, allow_errors=False)
