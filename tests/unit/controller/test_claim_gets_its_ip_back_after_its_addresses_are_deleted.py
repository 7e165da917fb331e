"""Orders of events and inputs under which a claim whose address objects were deleted loses its IP.

The promise: a claim whose address objects were deleted gets its own IP back
whenever that IP is free in its pool, before any other claim is served; where
it cannot, a new IP or a clear error and an Event naming the old IP; and at no
moment do two live claims' statuses name one IP or one address.
"""

from __future__ import annotations

import asyncio
import random

import pytest

from metal3_ipam.controller.workers import PoolWorkers
from metal3_ipam.core import kinds
from metal3_ipam.core import objects as o
from metal3_ipam.memory import converge
from ipam_objects import address_of, capi_claim, cluster, get, ip_of, ipclaim, loaded, set_meta, user_delete
from pool_workers import MemoryWriter, until_quiet
from ipam_objects import strip_and_delete
from keeping import pool, refile_in_name_order, watched
from ipam_objects import ADDRESS, IPCLAIM, POOL


def test_a_cluster_api_claim_named_like_an_address_keeps_the_ip_it_holds_not_the_one_its_name_spells():
    """A Cluster API claim's address is named after the claim: a claim named ``pool1-10-7-0-3`` holds .1,
    and .3 is free. Its status.addressRef says nothing of its IP; reading it as ``<namePrefix>-<ip>`` kept
    .3 from every other claim (the pool said it was exhausted with .3 unused) and would give the claim
    .3, not .1, once its address objects are deleted."""
    api = watched(pool(end="10.7.0.3"), capi_claim("pool1-10-7-0-3"), ipclaim("b"))
    assert ip_of(api, "pool1-10-7-0-3", "IPAddressClaim") == "10.7.0.1"
    assert ip_of(api, "b") == "10.7.0.2"
    api.load(ipclaim("c"))
    converge(api, random.Random(0))
    assert ip_of(api, "c") == "10.7.0.3"
    status = o.status(get(api, POOL, "pool1"))
    assert (status["capacity"], status["allocated"], status["free"]) == ("3", "3", "0")


def test_a_cluster_api_claim_named_like_an_address_gets_its_own_ip_back():
    api = watched(pool(end="10.7.0.3"), capi_claim("pool1-10-7-0-3"))
    assert ip_of(api, "pool1-10-7-0-3", "IPAddressClaim") == "10.7.0.1"
    strip_and_delete(api, ADDRESS, "pool1-10-7-0-1")
    strip_and_delete(api, kinds.CAPI_ADDRESS, "pool1-10-7-0-3")
    converge(api, random.Random(0))
    assert ip_of(api, "pool1-10-7-0-3", "IPAddressClaim") == "10.7.0.1"


def test_a_claim_asking_for_its_ip_by_annotation_gets_it_back_before_a_new_claim_is_served():
    """zeta asked for .1 (ipAddress) and holds it; its address is deleted as aaa arrives, served first by
    name. aaa took .1 while zeta's status still named it, and zeta was left with 'already in use'."""
    api = watched(pool(end="10.7.0.3"), ipclaim("zeta", ip="10.7.0.1"), ipclaim("alpha"))
    assert ip_of(api, "zeta") == "10.7.0.1"
    strip_and_delete(api, ADDRESS, "pool1-10-7-0-1")
    api.load(ipclaim("aaa"))
    refile_in_name_order(api)
    converge(api, random.Random(0))
    assert ip_of(api, "zeta") == "10.7.0.1"
    assert ip_of(api, "aaa") == "10.7.0.3"


@pytest.mark.parametrize("whose", ["the claim's", "the pool's"])
def test_a_claim_waiting_for_its_cluster_keeps_its_ip(whose):
    """zeta's address objects are deleted while its Cluster (by its label, or the pool's clusterName)
    is not known: made anew by a restore, or pending until the namespace's addresses are listed again.
    It waits, as it should; but a wait status written over its own dropped status.address, so its IP
    was kept no more: aaa, created meanwhile and first by name, took it once the Cluster was back, and
    zeta got .3 without an AddressChanged Event."""
    claim_cluster = {"labels": {kinds.CLUSTER_NAME_LABEL: "c1"}} if whose == "the claim's" else {}
    pool_cluster = {"clusterName": "c1"} if whose == "the pool's" else {}
    api = watched(cluster("c1"), pool(end="10.7.0.3", **pool_cluster), ipclaim("zeta", **claim_cluster),
                  ipclaim("alpha"))
    assert ip_of(api, "zeta") == "10.7.0.1"
    strip_and_delete(api, ADDRESS, "pool1-10-7-0-1")
    api.inventory.remove(get(api, kinds.CLUSTER, "c1"))
    converge(api, random.Random(0))
    assert not address_of(api, "IPClaim", "zeta")  # given nothing while its Cluster is not known
    api.load(ipclaim("aaa"))
    converge(api, random.Random(0))
    api.load(cluster("c1"))
    refile_in_name_order(api)
    converge(api, random.Random(0))
    assert ip_of(api, "zeta") == "10.7.0.1"
    assert ip_of(api, "aaa") == "10.7.0.3"


def test_a_claim_in_error_is_served_when_a_kept_ip_is_let_go():
    """Passes over what changed (the controller's): zeta, paused, lost its address, so .1 is kept for it
    and 'waiting' is told the pool is exhausted. zeta is deleted: .1 is kept no more and is free, but
    nothing told the claims given an error, and 'waiting' stayed in error until the next full pass."""
    api = loaded(pool(end="10.7.0.2"), ipclaim("zeta"), ipclaim("alpha"))

    async def scenario():
        workers = PoolWorkers(api.inventory, MemoryWriter(api), audit_seconds=3600)
        await until_quiet(workers)
        assert ip_of(api, "zeta") == "10.7.0.1"
        set_meta(api, IPCLAIM, "zeta", annotations={kinds.PAUSED_ANNOTATION: ""})
        strip_and_delete(api, ADDRESS, "pool1-10-7-0-1")
        api.load(ipclaim("waiting"))
        await until_quiet(workers)
        assert o.condition(o.status(get(api, IPCLAIM, "waiting")), "Ready")["reason"] == "PoolExhausted"
        user_delete(api, IPCLAIM, "zeta")
        await until_quiet(workers)
        assert ip_of(api, "waiting") == "10.7.0.1"

    asyncio.run(scenario())
