"""A claim that carries the claim finalizer of another of this controller's pool kinds than the pool serving it
is released when deleted and goes (SPEC §10.3): no pool of that other kind serves the claim, so none would ever
take that finalizer off, and waiting for it (as for another controller's finalizer) would hold the claim and
its address forever.

Such a claim comes from a manifest copied with its finalizers (an IPPool's claim turned into one of an
InClusterIPPool), or from a claim the Go Metal3 IPAM or the Go in-cluster provider served whose pool reference
was changed to another of these kinds and whose address objects were deleted before this controller first saw
it (its status names no IP: nothing is left to tell which pool served it)."""

from __future__ import annotations

import random

import pytest

from metal3_ipam.core import kinds
from metal3_ipam.core import objects as o
from metal3_ipam.core import poolkind as pools
from metal3_ipam.memory import converge
from metal3_ipam.testing import go_incluster as gi
from go_ipam_objects import go_served_capi_claim
from ipam_objects import NS, capi_claim, converged, get, ippool, loaded, user_delete

IPPOOL = kinds.IPPOOL
IN_CLUSTER = (gi.GROUP, gi.IN_CLUSTER_IP_POOL)


def _pools() -> list[dict]:
    return [ippool("p", namePrefix="p", pools=[{"start": "10.0.0.2", "end": "10.0.0.4"}], prefix=24),
            gi.ip_pool("p", namespace=NS, prefix=24, addresses=["10.0.1.2-10.0.1.4"])]


def _finalizer(kind: tuple[str, str]) -> str:
    return pools.REGISTRY[kind].finalizers.claim[kinds.CAPI_CLAIM]


def _addresses(api) -> list[str]:
    return sorted(f"{kinds.kind_of(a)[1]} {o.name(a)}" for kind in (kinds.IPADDRESS, kinds.CAPI_ADDRESS)
                  for a in api.inventory.of_kind(kind)
                  if kind != kinds.IPADDRESS or (o.spec(a).get("claim") and not o.is_guard(a)))


@pytest.mark.parametrize("kind, other", [(IN_CLUSTER, IPPOOL), (IPPOOL, IN_CLUSTER)], ids=["to-incluster", "to-ippool"])
def test_a_claim_created_with_another_of_our_kinds_claim_finalizer_is_released_when_deleted(kind, other):
    claim = capi_claim("x", pool="p", api_group=kind[0], kind=kind[1])
    claim["metadata"]["finalizers"] = [_finalizer(other)]  # a manifest copied with its finalizers
    api = converged(*_pools(), claim)
    lock = "p-10-0-0-2" if kind == IPPOOL else "p.10-0-1-2.ip"
    assert _addresses(api) == sorted(["IPAddress x", f"IPAddress {lock}"])
    user_delete(api, kinds.CAPI_CLAIM, "x")
    converge(api, random.Random(0))
    assert get(api, kinds.CAPI_CLAIM, "x") is None and _addresses(api) == []


def test_a_go_served_claim_moved_to_another_kind_and_stripped_before_the_upgrade_goes_when_deleted():
    api = loaded(*_pools())
    claim, address = go_served_capi_claim("c", get(api, IPPOOL, "p"), "10.0.0.2")
    claim["spec"]["poolRef"] = {"apiGroup": gi.GROUP, "kind": gi.IN_CLUSTER_IP_POOL, "name": "p"}
    api.load(claim)  # its IPAddress p-10-0-0-2 was deleted: only the claim is left
    converge(api, random.Random(0))
    user_delete(api, kinds.CAPI_CLAIM, "c")
    converge(api, random.Random(0))
    assert get(api, kinds.CAPI_CLAIM, "c") is None and _addresses(api) == []
