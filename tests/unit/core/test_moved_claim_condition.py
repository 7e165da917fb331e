"""The ``PoolReferenceChanged`` condition of a claim whose pool reference was changed away names the pool that
served it whatever the reference now says: a controller started afresh, with the claim's address objects
gone, reads that pool back from it (``reconcile.moved_from``) and keeps the claim's IP from other claims."""

from __future__ import annotations

import random

import pytest

from metal3_ipam.core import kinds
from metal3_ipam.core import objects as o
from metal3_ipam.core.reconcile import moved_from
from metal3_ipam.memory import converge
from metal3_ipam.testing import go_incluster as gi
from ipam_objects import NS, converged, get
from pool_reference import IN_CLUSTER, claim_of_kind, edit_pool_ref, ips_of, pool_of_kind, restarted_store

# A reference no schema bounds (the IPAddressClaim CRDs give poolRef's fields no maxLength): the message that
# names both references is cut at its bound.
LONG_GROUP = "ipam." + "x" * 1000 + ".example.com"
# A reference whose text holds the words the condition puts around the pool that served the claim.
DECOY = "elsewhere, away from InClusterIPPool default/q, which gave the claim its address"


@pytest.mark.parametrize("group, name", [(LONG_GROUP, "elsewhere"), ("ipam.example.com", DECOY)],
                         ids=["long-reference", "reference-quoting-the-message"])
def test_a_moved_claim_whose_address_objects_went_while_no_controller_ran_keeps_its_ip_whatever_its_reference_reads(
        group, name):
    api = converged(pool_of_kind(IN_CLUSTER), gi.ip_pool("q", namespace=NS, prefix=24, addresses=["10.0.1.2-10.0.1.3"]),
                    claim_of_kind(IN_CLUSTER, "a"))
    edit_pool_ref(api, "a", group, "IPPool", pool=name)
    converge(api, random.Random(0))
    assert moved_from(get(api, kinds.CAPI_CLAIM, "a")) == o.PoolKey(NS, "p", IN_CLUSTER)
    for address_kind in (kinds.CAPI_ADDRESS, kinds.IPADDRESS):
        for obj in list(api.inventory.of_kind(address_kind)):
            api.inventory.remove(obj)
    api = restarted_store(api, addresses_first=False)
    api.load(claim_of_kind(IN_CLUSTER, "b"))
    converge(api, random.Random(0))
    assert ips_of(api, "a") == ["10.0.0.2", "10.0.0.2"] and ips_of(api, "b") == ["10.0.0.3", "10.0.0.3"]
