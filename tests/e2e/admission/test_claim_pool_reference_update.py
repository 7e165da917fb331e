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
from metal3_ipam.core.kinds import GUARD_LABEL
from metal3_ipam.testing.locks import lease_locks
from metal3_ipam.core.validation import validate_ipclaim_update
from metal3_ipam.testing.waiting import eventually


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
MOVES = {"InClusterIPPool": ("ipam.cluster.x-k8s.io", "InfobloxIPPool"),  # another provider's kind of the group
         "GlobalInClusterIPPool": ("ipam.cluster.x-k8s.io", "InfobloxIPPool"),
         "IPPool": ("ipam.example.com", "IPPool")}  # another API group


def _pool_of_one_address(kube, kind: str) -> tuple[str, str]:
    """A pool of ``kind`` handing out 10.41.0.2 alone: (its name, its group)."""
    if kind == "IPPool":
        kube.pool("p", pools=[{"start": "10.41.0.2", "end": "10.41.0.2"}], prefix=24)
        return "p", "ipam.metal3.io"
    body = {"apiVersion": "/".join(IN_CLUSTER), "kind": kind, "spec": {"addresses": ["10.41.0.2"], "prefix": 24}}
    if kind == "InClusterIPPool":
        kube.create(IN_CLUSTER, "inclusterippools", {**body, "metadata": {"name": "p"}})
        return "p", IN_CLUSTER[0]
    name = f"g-{kube.ns}"  # of cluster scope: one per test namespace
    kube.custom.create_cluster_custom_object(*IN_CLUSTER, "globalinclusterippools", {**body, "metadata": {"name": name}})
    return name, IN_CLUSTER[0]


def _locks_of(kube, claim: str) -> dict[tuple[str, str], str]:
    """The locks held for the claim, in any namespace, Metal3 IPAddresses or Leases of the lock namespace (the
    shared controller's, default): (namespace, name) -> uid."""
    items = [*kube.custom.list_cluster_custom_object(*METAL3, "ipaddresses")["items"],
             *lease_locks(kube.api_client, "default")]
    return {(a["metadata"]["namespace"], a["metadata"]["name"]): a["metadata"]["uid"] for a in items
            if a["spec"]["claim"]["name"] == claim and GUARD_LABEL not in (a["metadata"].get("labels") or {})
            and (a["spec"]["claim"].get("namespace") or a["metadata"]["namespace"]) == kube.ns}


@pytest.mark.parametrize("kind", list(MOVES))
def test_a_claim_moved_away_from_its_pool_without_the_webhook_keeps_its_ip_until_it_is_deleted(controller, kube, kind):
    """One address in the pool: after the edit the next claim finds the pool exhausted, not the IP free."""
    pool, group = _pool_of_one_address(kube, kind)
    moved_to = MOVES[kind]
    try:
        kube.capi_claim("a", pool, group=group, kind=kind)
        assert kube.capi_bound("a")["spec"]["address"] == "10.41.0.2"
        locks = _locks_of(kube, "a")
        assert len(locks) == 1, locks

        kube.patch(CAPI, "ipaddressclaims", "a", {"spec": {"poolRef": {"apiGroup": moved_to[0], "kind": moved_to[1]}}})
        event = kube.warning_event("a", "PoolReferenceChanged")
        where = "" if kind.startswith("Global") else f"{kube.ns}/"
        assert f"{moved_to[1]}.{moved_to[0]} {pool}" in event.message and f"{kind} {where}{pool}" in event.message, \
            event.message
        kube.capi_claim("b", pool, group=group, kind=kind)

        def b_refused():
            ready = condition(kube.capi_ipclaim("b"), "Ready")
            return ready if ready is not None and ready["status"] == "False" else None

        assert eventually(b_refused, timeout=30, what="IPAddressClaim b refused")["reason"] == "PoolExhausted"
        claim = kube.capi_ipclaim("a")
        assert condition(claim, "Ready")["message"] == "bound to 10.41.0.2"
        assert condition(claim, "PoolReferenceChanged")["status"] == "True"
        assert claim["metadata"]["finalizers"] and kube.capi_ipaddress("a") is not None
        assert _locks_of(kube, "a") == locks

        kube.delete(CAPI, "ipaddressclaims", "a")
        kube.gone(CAPI, "ipaddressclaims", "a")
        kube.gone(CAPI, "ipaddresses", "a")
        eventually(lambda: not _locks_of(kube, "a"), timeout=30, what="the lock of a to be gone")
        assert kube.capi_bound("b")["spec"]["address"] == "10.41.0.2"
    finally:
        if kind.startswith("Global"):
            kube.delete(CAPI, "ipaddressclaims", "b")
            kube.gone(CAPI, "ipaddressclaims", "b")
            kube.custom.delete_cluster_custom_object(*IN_CLUSTER, "globalinclusterippools", pool)
