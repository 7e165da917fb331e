"""A kind of pool whose addresses an outside source hands out later, and can refuse, plugs in as one package
(``queued_ipam``, in this folder) and one line in a list of kinds, and runs through the whole claim lifecycle:
the key written before anything is asked, pending, granted, refused, released before its objects and
finalizer go (or kept, the release refused), moved away and forgotten, answers late or twice.

Nothing of ``metal3_ipam`` names the kind: the in-memory model (``memory.py``) and the core's reconcile serve
it by the registry, and the pool workers (``controller.workers.PoolWorkers``) run its adapter half.
"""

from __future__ import annotations

import asyncio
import random

import pytest
from hypothesis import HealthCheck, given, settings, strategies as st

from metal3_ipam.controller.runtime import OutsideParts
from metal3_ipam.controller.workers import PoolWorkers
from metal3_ipam.core import kinds
from metal3_ipam.core import objects as o
from metal3_ipam.core import poolkind
from metal3_ipam.core.asking import Intent, Op
from metal3_ipam.core.reconcile import reconcile
from metal3_ipam.memory import converge

import queued_ipam
from queued_ipam import FINALIZERS, KEY_ANNOTATION, QUEUED_IP_POOL, QueuedPools, QueuedSource, queued_claim, queued_pool
from ipam_objects import NS, cluster, get, loaded, set_meta, user_delete
from test_pool_passes import MemoryWriter

KINDS = (*queued_ipam.KINDS,)  # the one line that plugs the kind in
POOL = o.PoolKey(NS, "qp", QUEUED_IP_POOL)
CLAIM_FINALIZER = FINALIZERS.claim[kinds.CAPI_CLAIM]


@pytest.fixture(autouse=True)
def registered():
    """The test kinds registered for each test, and the registry as it was afterwards."""
    before = dict(poolkind.REGISTRY)
    for kind in KINDS:
        poolkind.register(kind)
    yield
    for kind in KINDS:
        poolkind.unregister(kind.kind)
    assert poolkind.REGISTRY == before


class World:
    """The in-memory store and the kind's adapter half with its queued source: each pass's plan applied, its
    intents handed to the adapter, as the pool workers do (the answers are the test's to give)."""

    def __init__(self, *objs, seed=0):
        self.api = loaded(queued_pool(), *objs)
        self.rng = random.Random(seed)
        self.woken: list[tuple[o.PoolKey, str | None]] = []
        self.pools = QueuedPools(QueuedSource(), wake=lambda pool, key: self.woken.append((pool, key)))
        self.source = self.pools.source

    def pass_(self):
        snap = self.api.inventory.snapshot(POOL, self.api.now, self.rng)
        snap.answers = self.pools.answers
        plan = reconcile(snap)
        self.api.apply(plan)
        claims = [c for c in self.api.inventory.of_kind(kinds.CAPI_CLAIM) if o.pool_of(c) == POOL]
        self.pools.passed(POOL, get(self.api, QUEUED_IP_POOL, "qp"), plan.intents, claims)
        return plan

    def settle(self, rounds=30):
        """Passes until nothing changes; no answer given."""
        for _ in range(rounds):
            if not self.pass_():
                return
        raise AssertionError("no fixed point")

    def until_due(self):
        """Time passes until the adapter has something to ask again."""
        self.pools.tick(self.pools.answers.next_due() - self.pools.now)

    def claim(self, name):
        return get(self.api, kinds.CAPI_CLAIM, name)

    def key(self, name):
        return o.annotations(self.claim(name)).get(KEY_ANNOTATION)

    def ip(self, name):
        address = get(self.api, kinds.CAPI_ADDRESS, name)
        return o.spec(address)["address"] if address is not None else None

    def served(self, rounds=20):
        """Passes, every request answered, until nothing is left to do."""
        for _ in range(rounds):
            self.settle()
            if not self.source.waiting:
                return
            self.source.answer_all()
        raise AssertionError("still asking")


def ready(obj):
    return o.condition(o.status(obj), "Ready") or {}


def test_the_kind_is_served_only_while_registered():
    assert poolkind.kind_named(QUEUED_IP_POOL) is queued_ipam.QUEUED_IP_POOL_KIND
    assert poolkind.serves_claims_of(QUEUED_IP_POOL[0], QUEUED_IP_POOL[1])


def test_the_key_and_finalizer_are_written_before_anything_is_asked():
    api = loaded(queued_pool(), queued_claim("a"))
    converge(api, random.Random(0))  # the in-memory model alone: no adapter, nothing asked
    a = get(api, kinds.CAPI_CLAIM, "a")
    assert o.annotations(a).get(KEY_ANNOTATION, "").startswith("q-") and CLAIM_FINALIZER in o.finalizers(a)
    assert (ready(a)["status"], ready(a)["reason"]) == ("False", "AllocationPending")
    assert not list(api.inventory.of_kind(kinds.CAPI_ADDRESS)) and not list(api.inventory.of_kind(kinds.IPADDRESS))

    world = World(queued_claim("a"))
    world.pass_()
    assert world.key("a") and world.source.asked == []  # written, not asked: the stored claim does not carry it yet
    world.pass_()
    assert world.source.asked == [(Op.ALLOCATE, world.key("a"))]


def test_a_claim_is_pending_while_no_answer_comes():
    world = World(queued_claim("a"))
    world.settle()
    assert [r.ask.op for r in world.source.waiting] == [Op.ALLOCATE]
    condition = ready(world.claim("a"))
    assert (condition["status"], condition["reason"]) == ("False", "AllocationPending")
    assert world.key("a") in condition["message"]
    assert world.ip("a") is None and not list(world.api.inventory.of_kind(kinds.IPADDRESS))


def test_a_grant_becomes_the_lock_the_cluster_api_address_and_ready():
    world = World(queued_claim("a"), queued_claim("b"))
    world.served()
    for name, ip in (("a", "10.0.0.2"), ("b", "10.0.0.3")):
        address = get(world.api, kinds.CAPI_ADDRESS, name)
        assert o.spec(address)["address"] == ip and o.spec(address)["prefix"] == 28
        assert o.spec(address)["gateway"] == "10.0.0.1"
        assert o.status(world.claim(name))["addressRef"] == {"name": name}
        assert ready(world.claim(name))["status"] == "True"
        assert world.source.ips()[world.key(name)] == ip
        lock = get(world.api, kinds.IPADDRESS, f"qp.{ip.replace('.', '-')}.qp")
        assert lock is not None and o.annotations(lock)[KEY_ANNOTATION] == world.key(name)


def test_a_refusal_is_the_claims_reason_and_message_until_a_grant_comes():
    world = World(queued_claim("a"))
    world.settle()
    world.source.refuse(reason="QuotaExceeded", message="tenant t1 holds its 0 addresses")
    world.settle()
    condition = ready(world.claim("a"))
    assert (condition["status"], condition["reason"]) == ("False", "QuotaExceeded")
    assert condition["message"] == "tenant t1 holds its 0 addresses"
    assert world.source.waiting == []  # backed off: asked again when the backoff ends, not at once
    world.until_due()
    world.served()
    assert ready(world.claim("a"))["status"] == "True" and world.ip("a") == "10.0.0.2"


def test_a_deleted_claim_is_released_at_the_source_before_its_objects_and_finalizer_go():
    world = World(queued_claim("a"))
    world.served()
    key = world.key("a")
    user_delete(world.api, kinds.CAPI_CLAIM, "a")
    world.settle()
    assert [(r.ask.op, r.ask.key) for r in world.source.waiting] == [(Op.RELEASE, key)]
    assert world.claim("a") is not None and CLAIM_FINALIZER in o.finalizers(world.claim("a"))
    assert world.ip("a") == "10.0.0.2" and len(list(world.api.inventory.of_kind(kinds.IPADDRESS))) == 1
    world.source.answer()
    world.settle()
    assert world.claim("a") is None and key not in world.source.held
    assert not list(world.api.inventory.of_kind(kinds.CAPI_ADDRESS))
    assert not list(world.api.inventory.of_kind(kinds.IPADDRESS))
    assert list(world.source.freed.values()) == [1]


def test_a_refused_release_keeps_the_finalizer_and_says_so():
    world = World(queued_claim("a"))
    world.served()
    user_delete(world.api, kinds.CAPI_CLAIM, "a")
    world.settle()
    world.source.refuse(reason="ReleaseLocked", message="address 10.0.0.2 is locked by change ticket 42")
    world.settle()
    a = world.claim("a")
    assert a is not None and CLAIM_FINALIZER in o.finalizers(a) and world.ip("a") == "10.0.0.2"
    condition = ready(a)
    assert (condition["status"], condition["reason"]) == ("False", "ReleaseLocked")
    assert "change ticket 42" in condition["message"]
    world.until_due()  # asked again after its backoff
    world.served()
    assert world.claim("a") is None and world.source.held == {}


def test_a_claim_moved_away_is_forgotten_never_released():
    world = World(cluster("c1"), queued_claim("a", cluster="c1"))
    world.served()
    key = world.key("a")
    # clusterctl move: the Cluster paused, its objects deleted with the delete-for-move annotation, finalizers
    # stripped.
    paused = get(world.api, kinds.CLUSTER, "c1")
    world.api.inventory.upsert({**paused, "spec": {"paused": True},
                                "metadata": {**paused["metadata"], "resourceVersion": world.api._next_version()}})
    world.settle()
    user_delete(world.api, kinds.CAPI_CLAIM, "a", annotations={kinds.DELETE_FOR_MOVE_ANNOTATION: ""})
    world.settle()
    assert world.source.waiting == [] and world.claim("a") is not None  # nothing asked of the source
    set_meta(world.api, kinds.CAPI_CLAIM, "a", finalizers=[])
    world.api.inventory.remove(world.claim("a"))
    world.settle()
    assert world.pools.answers.state(key) is None  # forgotten
    world.source.answer_all()
    world.settle()
    assert world.source.ips() == {key: "10.0.0.2"} and (Op.RELEASE, key) not in world.source.asked
    assert not world.source.freed


def test_an_answer_twice_or_late_changes_nothing():
    world = World(queued_claim("a"))
    world.settle()
    [request] = world.source.waiting
    world.source.answer(twice=True)
    world.served()
    request.deliver(world.source.carry_out(request))  # once more, after the claim was bound
    world.served()
    assert world.ip("a") == "10.0.0.2" and len(list(world.api.inventory.of_kind(kinds.IPADDRESS))) == 1
    assert list(world.source.made.values()) == [world.key("a")]


def test_an_allocation_answered_after_its_claim_was_deleted_is_released():
    world = World(queued_claim("a"))
    world.settle()
    key = world.key("a")
    user_delete(world.api, kinds.CAPI_CLAIM, "a")
    world.settle()
    world.source.answer(world.source.requests(Op.ALLOCATE)[0])  # the grant lands after the deletion
    world.served()
    # Released; and as an allocation of a claim holding nothing may still land (one a process before this one
    # left out), the release looks once more when that can no longer be.
    assert world.claim("a") is not None and world.source.held == {}
    world.until_due()
    world.served()
    assert world.claim("a") is None and world.source.held == {}
    assert [world.source.made[i] for i in world.source.freed] == [key]
