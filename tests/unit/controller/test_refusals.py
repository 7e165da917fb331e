"""What a write refused for good leaves on its claim or pool, when it is tried again, and when the
controller counts as unable to write at all (the writer's side is tested on a real API server in
tests/e2e/controller/test_writer.py)."""

from __future__ import annotations

import pytest

from metal3_ipam.controller.refusals import Backoff, Refused, WriteAccess, is_permanent, status_patch
from metal3_ipam.core import objects as o

NOW = "2030-01-01T00:00:00Z"
LATER = "2030-01-01T00:05:00Z"


def claim(kind="IPClaim", api="ipam.metal3.io/v1alpha1", status=None) -> dict:
    return {"apiVersion": api, "kind": kind, "metadata": {"name": "c", "namespace": "ns", "uid": "u1"},
            "status": status or {}}


def refused(status=403, message="ipaddresses is forbidden") -> Refused:
    return Refused("create", o.Ref("ipam.metal3.io/v1alpha1", "IPAddress", "ns", "pool-10-0-0-1"), status, message)


@pytest.mark.parametrize("status, permanent", [(0, False), (400, True), (401, True), (403, True), (404, False),
                                               (409, False), (413, True), (422, True), (429, False),
                                               (500, False), (503, False), (504, False)])
def test_which_refusals_are_for_good(status, permanent):
    assert is_permanent(status) is permanent


def test_ipclaim_gets_error_message_and_ready_false():
    r = refused()
    patch = status_patch(claim(status={"conditions": [{"type": "Other", "status": "True"}]}), r, NOW)
    assert patch["errorMessage"] == "create IPAddress ns/pool-10-0-0-1 refused: 403 ipaddresses is forbidden"
    assert patch["conditions"] == [
        {"type": "Ready", "status": "False", "reason": "AllocationFailed", "message": patch["errorMessage"],
         "lastTransitionTime": NOW},
        {"type": "Other", "status": "True"}]


def test_said_once_only():
    r = refused()
    obj = claim()
    obj["status"] = status_patch(obj, r, NOW)
    assert status_patch(obj, r, LATER) is None
    other = status_patch(obj, refused(422, "spec.address: Invalid value"), LATER)
    assert other["errorMessage"].endswith("422 spec.address: Invalid value")
    assert other["conditions"][0]["lastTransitionTime"] == NOW, "still False: the transition time stays"


def test_ready_true_turns_false():
    obj = claim(status={"conditions": [{"type": "Ready", "status": "True", "reason": "AddressAllocated",
                                        "message": "bound", "lastTransitionTime": NOW}]})
    patch = status_patch(obj, refused(), LATER)
    assert patch["conditions"][0]["status"] == "False"
    assert patch["conditions"][0]["lastTransitionTime"] == LATER


def test_cluster_api_claims_get_the_condition_only():
    v1beta2 = status_patch(claim("IPAddressClaim", "ipam.cluster.x-k8s.io/v1beta2"), refused(), NOW)
    assert set(v1beta2) == {"conditions"}
    assert "severity" not in v1beta2["conditions"][0]
    v1beta1 = status_patch(claim("IPAddressClaim", "ipam.cluster.x-k8s.io/v1beta1"), refused(), NOW)
    assert v1beta1["conditions"][0]["severity"] == "Error"
    assert v1beta1["conditions"][0]["reason"] == "AllocationFailed"


def test_pool_gets_a_condition():
    pool = {"apiVersion": "ipam.metal3.io/v1alpha1", "kind": "IPPool",
            "metadata": {"name": "p", "namespace": "ns"}, "status": {"indexes": {"a": "10.0.0.1"}}}
    patch = status_patch(pool, refused(413, "Request entity too large: limit is 3145728"), NOW)
    assert patch == {"conditions": [{"type": "Ready", "status": "False", "reason": "WriteRefused",
                                     "message": "create IPAddress ns/pool-10-0-0-1 refused: 413 Request entity too"
                                                " large: limit is 3145728", "lastTransitionTime": NOW}]}


def test_long_messages_are_cut():
    assert len(refused(message="x" * 5000).describe()) == 1024


def test_backoff_doubles_to_a_cap_and_forgets_on_success():
    b = Backoff(first=1.0, cap=4.0)
    key = ("IPClaim ns/c", "create", "IPAddress.ipam.metal3.io")
    assert b.wait(key, 0.0) == 0.0
    assert [b.refused(key, t) for t in (0.0, 10.0, 20.0, 30.0, 40.0)] == [1.0, 2.0, 4.0, 4.0, 4.0]
    assert b.wait(key, 41.0) == 3.0
    assert b.wait(key, 44.0) == 0.0
    b.accepted(key)
    assert b.refused(key, 50.0) == 1.0


def test_backoff_forgets_entries_long_gone():
    b = Backoff(first=1.0, cap=2.0)
    for i in range(1100):
        b.refused((f"IPClaim ns/c{i}", "create", "IPAddress"), 0.0)
    b.refused(("IPClaim ns/last", "create", "IPAddress"), 100.0)
    assert len(b) == 1


def test_write_access_blocked_only_when_every_write_is_refused_as_not_allowed():
    access = WriteAccess()
    assert access.blocked() is None
    started = access.refused(Refused("create", o.Ref("ipam.metal3.io/v1alpha1", "IPAddress", "ns", "a"), 403, "no"))
    assert started and "create IPAddress.ipam.metal3.io: 403 no" in access.blocked()
    assert not access.refused(Refused("patch-status", o.Ref("ipam.metal3.io/v1alpha1", "IPClaim", "ns", "c"),
                                      403, "no"))
    assert access.blocked().startswith("every write is refused")
    assert access.accepted("patch-status", "IPClaim.ipam.metal3.io") is True
    assert access.blocked() is None
    # Allowed but invalid: the server let us in.
    access = WriteAccess()
    access.refused(Refused("create", o.Ref("ipam.metal3.io/v1alpha1", "IPAddress", "ns", "a"), 422, "invalid"))
    assert access.blocked() is None
