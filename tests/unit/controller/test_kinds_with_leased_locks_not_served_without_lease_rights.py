"""The locks of the in-cluster kinds are Leases of the lock namespace (``core.lockstore``). A controller that may not
list those (a role without Leases beside the in-cluster CRDs) serves none of those kinds and says so once, in the log
and on /readyz, as it does for a kind it may not list, instead of a listing of the Leases refused forever."""

from __future__ import annotations

import logging

import pytest

from metal3_ipam.controller import operator
from metal3_ipam.core import kinds
from metal3_ipam.core import poolkind as pools

HOME = "ipam-system"
SERVED = {"/apis/ipam.metal3.io": ["v1alpha1"], "/apis/ipam.cluster.x-k8s.io": ["v1beta2", "v1alpha2"],
          "/apis/netbox.metal3-ipam.io": [], "/apis/openstack.metal3-ipam.io": [],
          "/apis/cluster.x-k8s.io": ["v1beta2"]}
LEASED = sorted(k for k, kind in pools.REGISTRY.items() if kind.locks_in_leases)


@pytest.fixture
def served(monkeypatch):
    monkeypatch.setattr(operator, "request",
                        lambda api, verb, path: {"versions": [{"version": v} for v in SERVED[path]]})


def _no_leases(group, version, plural, namespace):
    return plural != "leases"


def test_kinds_whose_locks_are_leases_are_not_served_where_leases_are_not_listable(served, caplog):
    caplog.set_level(logging.WARNING)
    resources = operator.discover(None, _no_leases)
    leaseless: set = set()
    operator.without_leases(resources, _no_leases, HOME, leaseless)
    assert LEASED and not any(k in resources for k in LEASED) and leaseless == set(LEASED)
    assert kinds.IPPOOL in resources and kinds.CAPI_CLAIM in resources  # the rest is served
    assert not operator.lease_store(resources)
    [said] = [r.message for r in caplog.records if "leases" in r.message]
    assert said.startswith(f"this controller may not list leases.coordination.k8s.io in {HOME} (RBAC)")
    assert all(k[1] in said for k in LEASED) and said.endswith("not served")
    assert operator.unserved_kinds(resources, set(), leaseless, HOME)[-1] == \
        f"not served (leases.coordination.k8s.io in {HOME} not listable by this controller): " + \
        ", ".join(f"{k[1]}.{k[0]}" for k in pools.REGISTRY if k in leaseless)


def test_kinds_whose_locks_are_leases_are_served_where_leases_are_listable(served):
    resources = operator.discover(None, lambda *_: True)
    leaseless: set = set()
    operator.without_leases(resources, lambda *_: True, HOME, leaseless)
    assert all(k in resources for k in LEASED) and not leaseless


def test_a_controller_with_no_kind_of_pool_left_without_leases_does_not_start(monkeypatch):
    served = {**SERVED, "/apis/ipam.metal3.io": []}
    monkeypatch.setattr(operator, "request",
                        lambda api, verb, path: {"versions": [{"version": v} for v in served[path]]})
    resources = operator.discover(None, _no_leases)
    with pytest.raises(operator.NotInstalled, match=f"may not list leases.coordination.k8s.io in {HOME}"):
        operator.without_leases(resources, _no_leases, HOME, set())
