"""Fixtures of the core's tests."""

from __future__ import annotations

import dataclasses

import pytest

from metal3_ipam.core import kinds
from metal3_ipam.core import objects as o
from metal3_ipam.core import poolkind as pools
from metal3_ipam.core.pool import read_pool
from metal3_ipam.poolkinds.ippool import IPPOOL_KIND

from other_kind import OTHER, OTHER_FINALIZER


@pytest.fixture
def other_kind(monkeypatch):
    """A kind of pool read from ``spec.addresses`` (a list of ranges), as the in-cluster provider's."""
    def read(pool):
        spec = pool.get("spec") or {}
        entries = [{"start": a.split("-")[0], "end": a.split("-")[-1]} for a in spec.get("addresses") or []]
        return read_pool({"namePrefix": o.name(pool), "pools": entries, "prefix": spec.get("prefix")})
    finalizers = dataclasses.replace(IPPOOL_KIND.finalizers, pool=OTHER_FINALIZER,
                                     claim={kinds.CAPI_CLAIM: IPPOOL_KIND.finalizers.claim[kinds.CAPI_CLAIM]})
    monkeypatch.setitem(pools.REGISTRY, OTHER, dataclasses.replace(
        IPPOOL_KIND, kind=OTHER, plural="otherpools", versions=("v1alpha2",), claim_kinds=(kinds.CAPI_CLAIM,),
        finalizers=finalizers, read=read))
