"""Immutability refusals on the real API server, against the rules ``metal3-ipam validate`` runs offline.

SPEC §9: the webhook and the offline check run the same rules, and a refusal
names field and value. An IPClaim's ``spec.pool`` is an object reference; its
CRD rule compares the whole reference and its message shows only
``[namespace/]name``. An update that changes another field of the reference
(its ``uid``, as clients that fill a full ObjectReference write; the Go
Metal3 IPAM accepts it, comparing name, namespace and kind), or an empty
``namespace`` written where there was none (the same pool), is accepted
offline and by the webhook, and refused by the CRD with a message whose old
and new value are the same text.

An IPAddressClaim's ``spec.poolRef`` is immutable too (the claim webhook
refuses a change, also one away from our pools: tests/data/invalid). Without
the webhook the edit gets through; the pool that served the claim keeps it:
its IP goes to no other claim, and deleting it releases the IP and completes.
"""

from __future__ import annotations

import copy
import json

import pytest

from kubernetes.client.rest import ApiException

from controller_fixtures import CAPI, METAL3, condition
from metal3_ipam.core.validation import validate_ipclaim_update
from metal3_ipam.testing.waiting import eventually

pytest_plugins = ("controller_fixtures",)


@pytest.mark.parametrize("field,value", [("uid", "6b1c9a8e-0000-4000-8000-000000000001"),
                                         ("namespace", ""),  # empty: the claim's own, as when absent
                                         ("kind", "OtherPool")])  # another referent: refused by both
def test_an_ipclaim_pool_reference_update_is_judged_alike_offline_and_by_the_server(kube, field, value):
    kube.claim("c", "p")
    old = kube.ipclaim("c")
    new = copy.deepcopy(old)
    new["spec"]["pool"][field] = value
    offline = [p for p in validate_ipclaim_update(old, new) if not p.warning]
    refused = None
    try:
        kube.patch(METAL3, "ipclaims", "c", {"spec": {"pool": {field: value}}})
    except ApiException as err:
        refused = json.loads(err.body)["message"]
    if refused is not None:
        assert '(was "p"), got "p"' not in refused, f"a refusal naming the same old and new value: {refused}"
    assert bool(offline) == (refused is not None), (
        f"offline: {[p.message for p in offline] or 'accepted'}; server: {refused or 'accepted'}")


IN_CLUSTER = ("ipam.cluster.x-k8s.io", "v1alpha2")


@pytest.mark.parametrize("kind,moved_to", [("InClusterIPPool", ("ipam.cluster.x-k8s.io", "InfobloxIPPool")),
                                           ("IPPool", ("ipam.example.com", "IPPool"))], ids=["kind", "apiGroup"])
def test_a_claim_moved_away_from_its_pool_without_the_webhook_keeps_its_ip_until_it_is_deleted(
        controller, kube, kind, moved_to):
    """One address in the pool: after the edit the next claim finds the pool exhausted, not the IP free."""
    if kind == "IPPool":
        kube.pool("p", pools=[{"start": "10.41.0.2", "end": "10.41.0.2"}], prefix=24)
        group = "ipam.metal3.io"
    else:
        kube.create(IN_CLUSTER, "inclusterippools", {
            "apiVersion": "/".join(IN_CLUSTER), "kind": kind, "metadata": {"name": "p"},
            "spec": {"addresses": ["10.41.0.2"], "prefix": 24}})
        group = IN_CLUSTER[0]
    kube.capi_claim("a", "p", group=group, kind=kind)
    assert kube.capi_bound("a")["spec"]["address"] == "10.41.0.2"
    locks = {a["metadata"]["name"]: a["metadata"]["uid"] for a in kube.addresses() if a["spec"]["claim"]["name"] == "a"}

    kube.patch(CAPI, "ipaddressclaims", "a", {"spec": {"poolRef": {"apiGroup": moved_to[0], "kind": moved_to[1]}}})
    event = kube.warning_event("a", "PoolReferenceChanged")
    assert f"{moved_to[1]}.{moved_to[0]} p" in event.message and f"{kind} {kube.ns}/p" in event.message, event.message
    kube.capi_claim("b", "p", group=group, kind=kind)

    def b_refused():
        ready = condition(kube.capi_ipclaim("b"), "Ready")
        return ready if ready is not None and ready["status"] == "False" else None

    assert eventually(b_refused, timeout=30, what="IPAddressClaim b refused")["reason"] == "PoolExhausted"
    claim = kube.capi_ipclaim("a")
    assert condition(claim, "Ready")["message"] == "bound to 10.41.0.2"
    assert condition(claim, "PoolReferenceChanged")["status"] == "True"
    assert claim["metadata"]["finalizers"] and kube.capi_ipaddress("a") is not None
    assert {a["metadata"]["name"]: a["metadata"]["uid"] for a in kube.addresses()
            if a["spec"]["claim"]["name"] == "a"} == locks

    kube.delete(CAPI, "ipaddressclaims", "a")
    kube.gone(CAPI, "ipaddressclaims", "a")
    kube.gone(CAPI, "ipaddresses", "a")
    for lock, uid in locks.items():
        kube.gone(METAL3, "ipaddresses", lock, uid=uid)  # the name is taken anew, by b's lock
    assert kube.capi_bound("b")["spec"]["address"] == "10.41.0.2"
