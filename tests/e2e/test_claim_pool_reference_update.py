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
"""

from __future__ import annotations

import copy
import json

import pytest

from kubernetes.client.rest import ApiException

from controller_fixtures import METAL3
from metal3_ipam.core.validation import validate_ipclaim_update

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
