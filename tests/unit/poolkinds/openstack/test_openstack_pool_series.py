"""The series an OpenStack floating-IP pool gives the alerts: whether its cloud answers
(``metal3_ipam_external_ipam_up``, the series of Metal3IPAMExternalIPAMUnreachable), as a NetBox pool gives it, and
its capacity and free addresses where ``spec.maxIPs`` bounds it (the usage and exhaustion alerts)."""

from __future__ import annotations

import asyncio

import pytest
from prometheus_client import REGISTRY

from metal3_ipam.controller import metrics
from metal3_ipam.core import objects as o
from metal3_ipam.core import poolkind
from metal3_ipam.memory import MemoryApi
from metal3_ipam.poolkinds.openstack import pool as p
from metal3_ipam.poolkinds.openstack.asks import OpenStackPools


def _pool() -> dict:
    return {"apiVersion": p.API_VERSION, "kind": p.KIND, "metadata": {"name": "fips", "namespace": "ns"},
            "spec": {"identityRef": {"name": "cloud"}}}


class _Cloud:
    """Neutron as the survey meets it: unreachable, or answering."""

    def __init__(self) -> None:
        self.survey_answer = p.Survey(reason=p.UNREACHABLE, message="ns/fips: cannot reach the cloud")
        self.failed: dict = {}  # pre-allocated addresses that could not be made, per pool: none

    def pool_changed(self, pool) -> None:
        pass

    async def survey(self, pool) -> p.Survey:
        return self.survey_answer


class _Writer:
    def __init__(self, api: MemoryApi) -> None:
        self.api = api

    async def execute(self, plan, pool=None):
        self.api.apply(plan)


@pytest.mark.parametrize("reason", [p.UNREACHABLE, p.TIMEOUT, p.SERVER_ERROR])
def test_an_openstack_pool_whose_cloud_does_not_answer_says_so_in_external_ipam_up(reason):
    """Metal3IPAMExternalIPAMUnreachable reads ``metal3_ipam_external_ipam_up == 0``: an OpenStack pool whose
    Neutron is unreachable, times out or fails must set it to 0 (and to 1 once it answers), or the alert
    never fires for the OpenStack kind."""
    api = MemoryApi()
    api.load(_pool())
    cloud = _Cloud()
    cloud.survey_answer = p.Survey(reason=reason, message=f"ns/fips: {reason}")
    pools = OpenStackPools(cloud, None, inventory=api.inventory, writer=_Writer(api), wake=lambda *_: None)
    key = o.PoolKey("ns", "fips", p.OPENSTACK_FLOATING_IP_POOL)
    labels = dict(zip(metrics.POOL_LABELS, metrics.pool_labels(key)))

    asyncio.run(pools._survey_once(key))
    assert o.condition(o.status(api.inventory.get(key.kind, "ns", "fips")), "Ready")["reason"] == reason
    assert REGISTRY.get_sample_value("metal3_ipam_external_ipam_up", labels) == 0

    cloud.survey_answer = p.Survey(network={"id": "n1", "name": "public"})
    asyncio.run(pools._survey_once(key))
    assert REGISTRY.get_sample_value("metal3_ipam_external_ipam_up", labels) == 1


def test_an_openstack_pool_with_max_ips_gives_its_capacity_and_free_to_the_usage_alerts():
    """The pool series come from ``poolkind.status_counts`` (the workers set capacity, allocated and free from
    it). A pool limited to ``maxIPs: 4`` that holds 4 floating IPs is full: capacity 4, free 0."""
    pool = {**_pool(), "spec": {"identityRef": {"name": "cloud"}, "maxIPs": 4},
            "status": {"claimed": 4, "available": 0, "claimedIPs": ["203.0.113.1", "203.0.113.2", "203.0.113.3",
                                                                    "203.0.113.4"]}}
    counts = poolkind.status_counts(poolkind.REGISTRY[p.OPENSTACK_FLOATING_IP_POOL], pool)
    assert counts["allocated"] == 4
    assert (counts.get("capacity"), counts.get("free")) == (4, 0)
