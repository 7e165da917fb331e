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
from hypothesis import HealthCheck, example, given, settings, strategies as st

from metal3_ipam.controller.runtime import OutsideParts
from metal3_ipam.controller.workers import PoolWorkers
from metal3_ipam.core import kinds
from metal3_ipam.core import objects as o
from metal3_ipam.core import poolkind
from metal3_ipam.core.actions import Create
from metal3_ipam.core.asking import Op
from metal3_ipam.core.ledger import Ledger
from metal3_ipam.core.reconcile import DECISIONS_PER_YIELD, load, plan_pass, reconcile, run_to_end
from metal3_ipam.memory import converge

import queued_ipam
from queued_ipam import FINALIZERS, KEY_ANNOTATION, QUEUED_IP_POOL, QueuedPools, QueuedSource, queued_claim, queued_pool
from ipam_objects import NS, cluster, get, loaded, set_meta, user_delete
from pool_workers import MemoryWriter

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

    def __init__(self, *objs, seed=0, pool=None):
        self.api = loaded(pool or queued_pool(), *objs)
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
    poolkind.unregister(QUEUED_IP_POOL)
    assert poolkind.kind_named(QUEUED_IP_POOL) is None
    assert not poolkind.serves_claims_of(QUEUED_IP_POOL[0], QUEUED_IP_POOL[1])
    poolkind.register(queued_ipam.QUEUED_IP_POOL_KIND)


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
    assert {(POOL, world.key(n)) for n in "ab"} <= set(world.woken)  # each answer woke the pool for its key
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


def test_an_answer_that_never_comes_times_out_in_the_kinds_own_words():
    world = World(queued_claim("a"))
    world.settle()
    world.source.lose()  # carried out; its answer never comes
    world.until_due()  # the ask's deadline
    world.settle()
    condition = ready(world.claim("a"))
    assert (condition["status"], condition["reason"]) == ("False", "QueuedIpamTimeout")
    world.until_due()  # asked again after its backoff: the source holds the key's address, and gives it again
    world.served()
    assert world.ip("a") == "10.0.0.2" and len(world.source.made) == 1


def test_claims_pending_behind_a_source_that_is_down_say_so_naming_no_other_kind():
    world = World(queued_claim("a"), queued_claim("b"))
    world.settle()
    world.source.refuse(reason="SourceDown", message="connection refused", server_down=True)
    world.settle()
    for name in "ab":
        condition = ready(world.claim(name))
        assert (condition["status"], condition["reason"]) == ("False", "SourceDown")
        assert "NetBox" not in condition["message"], condition["message"]
    world.until_due()
    world.served()
    assert {ready(world.claim(n))["status"] for n in "ab"} == {"True"}


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


def test_claims_of_an_unreadable_pool_are_refused_naming_the_field_and_nothing_is_asked():
    world = World(queued_claim("a"))
    bad = get(world.api, QUEUED_IP_POOL, "qp")
    world.api.inventory.upsert({**bad, "spec": {"prefix": "10.0.0.1/28"},
                                "metadata": {**bad["metadata"], "generation": 2,
                                             "resourceVersion": world.api._next_version()}})
    world.settle()
    condition = ready(world.claim("a"))
    assert (condition["status"], condition["reason"]) == ("False", "PoolNotReady")
    assert "spec.prefix" in condition["message"] and "10.0.0.1/28" in condition["message"]
    assert world.source.asked == [] and world.key("a") is None


def test_a_claim_carrying_no_key_of_the_source_is_refused_naming_the_annotation():
    bad = queued_claim("a")
    bad["metadata"]["annotations"] = {KEY_ANNOTATION: "not-a-key"}
    world = World(bad)
    world.settle()
    condition = ready(world.claim("a"))
    assert condition["status"] == "False" and KEY_ANNOTATION in condition["message"]
    assert "not-a-key" in condition["message"] and world.source.asked == []


# -- the pool workers running the kind's adapter half ------------------------------------------------------------


class Running:
    """The pool workers over the in-memory store, with the adapter half the runtime would build for the kind
    (``Outside.service`` from its parts): passes run as the workers run them, answers wake them."""

    def __init__(self, *objs):
        self.api = loaded(queued_pool(), *objs)
        writer = MemoryWriter(self.api)
        parts = OutsideParts(api=None, inventory=self.api.inventory, writer=writer,
                             wake=lambda pool, key: self.workers.answered(pool, key), may_act=lambda: True, flags={})
        self.pools = queued_ipam.QUEUED_IP_POOL_KIND.outside.service(parts)
        self.source = self.pools.source
        self.workers = PoolWorkers(self.api.inventory, writer, gather_seconds=0.0,
                                   outside={QUEUED_IP_POOL: self.pools})
        self.pools.start()

    async def quiet(self, seconds: float = 10.0) -> None:
        """Until no pass is under way or due, with a deadline."""
        loop = asyncio.get_running_loop()
        deadline = loop.time() + seconds
        await asyncio.sleep(0)
        while self.workers._tasks or self.workers._retry_handles:
            assert loop.time() < deadline, "passes still under way"
            await asyncio.sleep(0.01)

    async def changed(self) -> None:
        """A watch event for the pool (what a user did), then until quiet."""
        self.workers.kick([POOL])
        await self.quiet()

    async def stop(self) -> None:
        await self.workers.stop()
        await self.pools.close()

    def claim(self, name):
        return get(self.api, kinds.CAPI_CLAIM, name)


def test_the_pool_workers_run_the_kinds_adapter_half_from_the_ask_to_the_release():
    async def scenario():
        run = Running(queued_claim("a"))
        await run.changed()
        a = run.claim("a")
        key = o.annotations(a)[KEY_ANNOTATION]
        assert [(r.ask.op, r.ask.key) for r in run.source.waiting] == [(Op.ALLOCATE, key)]
        assert ready(a)["reason"] == "AllocationPending"
        run.source.answer(twice=True)  # the answer wakes the pool: no event needed
        await run.quiet()
        assert ready(run.claim("a"))["status"] == "True"
        assert o.spec(get(run.api, kinds.CAPI_ADDRESS, "a"))["address"] == "10.0.0.2"
        user_delete(run.api, kinds.CAPI_CLAIM, "a")
        await run.changed()
        assert [(r.ask.op, r.ask.key) for r in run.source.waiting] == [(Op.RELEASE, key)]
        run.source.refuse(reason="ReleaseLocked", message="locked by change ticket 42")
        await run.quiet()
        assert ready(run.claim("a"))["reason"] == "ReleaseLocked" and CLAIM_FINALIZER in o.finalizers(run.claim("a"))
        run.pools.tick(run.pools.answers.next_due() - run.pools.now)
        run.source.answer()
        await run.quiet()
        assert run.claim("a") is None and run.source.held == {}
        assert not list(run.api.inventory.of_kind(kinds.IPADDRESS))
        await run.stop()

    asyncio.run(scenario())


def test_the_pool_workers_forget_a_claim_moved_away():
    async def scenario():
        run = Running(queued_claim("a"))
        await run.changed()
        run.source.answer()
        await run.quiet()
        key = o.annotations(run.claim("a"))[KEY_ANNOTATION]
        user_delete(run.api, kinds.CAPI_CLAIM, "a", annotations={kinds.DELETE_FOR_MOVE_ANNOTATION: ""})
        await run.changed()
        set_meta(run.api, kinds.CAPI_CLAIM, "a", finalizers=[])  # clusterctl strips the finalizers
        run.api.inventory.remove(run.claim("a"))
        await run.changed()
        assert run.pools.answers.state(key) is None and run.source.waiting == []
        assert run.source.ips() == {key: "10.0.0.2"} and not run.source.freed
        await run.stop()

    asyncio.run(scenario())


# -- property: any order of answers and claim events ------------------------------------------------------------

PASS = st.tuples(st.just("pass"), st.just(0))
# Which request waiting, and how: 0 answered, 1 twice, 2 carried out and its answer lost, 3 refused.
ANSWER = st.tuples(st.just("answer"), st.tuples(st.integers(0, 3), st.integers(0, 3)))
EVENTS = st.lists(st.one_of(
    st.tuples(st.just("create"), st.integers(0, 3)),
    st.tuples(st.just("delete"), st.integers(0, 3)),
    st.tuples(st.just("move"), st.integers(0, 3)),
    PASS, PASS, PASS, ANSWER, ANSWER, ANSWER,
    st.tuples(st.just("tick"), st.integers(1, 90)),
), min_size=10, max_size=60)
CREATED = [("create", 0), ("pass", 0), ("pass", 0)]


def _one_ip_one_claim(world: World) -> None:
    holders: dict[str, set[str]] = {}
    for address in world.api.inventory.of_kind(kinds.CAPI_ADDRESS):
        holders.setdefault(o.spec(address)["address"], set()).add(o.spec(address)["claimRef"]["name"])
    assert all(len(names) == 1 for names in holders.values()), holders


def _move(world: World, name: str) -> None:
    """clusterctl move: deleted with the delete-for-move annotation, then its finalizers and objects gone."""
    user_delete(world.api, kinds.CAPI_CLAIM, name, annotations={kinds.DELETE_FOR_MOVE_ANNOTATION: ""})
    if world.claim(name) is None:
        return
    set_meta(world.api, kinds.CAPI_CLAIM, name, finalizers=[])
    world.api.inventory.remove(world.claim(name))
    for address in [*world.api.inventory.of_kind(kinds.CAPI_ADDRESS), *world.api.inventory.of_kind(kinds.IPADDRESS)]:
        if o.name(address) == name or (o.claim_of_address(address) or (None, None))[1] == name:
            world.api.inventory.remove(address)


def _finish(world: World) -> None:
    """Every request answered from here on, time moving as the asks say, until nothing is left to do."""
    for _ in range(40):
        world.served()
        if world.pools.answers.next_due() is None:
            return
        world.until_due()
    raise AssertionError("still asking")


@settings(max_examples=120, deadline=None,
          suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture])
@given(EVENTS, st.integers(0, 1000))
@example([*CREATED, ("answer", (0, 0)), ("pass", 0), ("delete", 0)], 0)  # released after its grant
@example([*CREATED, ("delete", 0), ("pass", 0), ("answer", (0, 0))], 0)  # granted after its deletion
@example([*CREATED, ("answer", (0, 2)), ("delete", 0), ("tick", 40)], 0)  # granted, answer lost, deleted
@example([*CREATED, ("answer", (0, 0)), ("pass", 0), ("delete", 0), ("pass", 0), ("answer", (0, 3))], 0)
@example([*CREATED, ("move", 0), ("answer", (0, 0))], 0)  # moved with its allocation out
@example([*CREATED, ("create", 1), ("pass", 0), ("pass", 0), ("answer", (1, 0)), ("delete", 0), ("pass", 0),
          ("answer", (1, 0)), ("answer", (0, 0)), ("pass", 0)], 0)  # the freed IP granted to another key
def test_one_ip_is_never_bound_to_two_live_claims_and_each_deleted_claims_address_is_released_once(events, seed):
    world = World(seed=seed)
    deleted, moved = set(), set()  # keys of the claims deleted, and moved away
    for what, arg in events:
        name = f"c{arg}" if isinstance(arg, int) else None
        if what == "create" and world.claim(name) is None:
            world.api.load(queued_claim(name))
        elif what in ("delete", "move") and world.claim(name) is not None and not o.is_deleting(world.claim(name)):
            key = world.key(name)
            (moved if what == "move" else deleted).add(key)
            if what == "move":
                _move(world, name)
            else:
                user_delete(world.api, kinds.CAPI_CLAIM, name)
        elif what == "pass":
            world.pass_()
        elif what == "answer" and world.source.waiting:
            which, how = arg
            request = world.source.waiting[which % len(world.source.waiting)]
            if how == 3:
                world.source.refuse(request, reason="Busy", message="try later")
            elif how == 2:
                world.source.lose(request)
            else:
                world.source.answer(request, twice=how == 1)
        elif what == "tick":
            world.pools.tick(arg)
        if what != "pass":
            world.pass_()  # what the event brings (a watch event, an answer waking the pool)
        _one_ip_one_claim(world)
    _finish(world)
    _one_ip_one_claim(world)
    deleted.discard(None)
    moved.discard(None)
    live = {world.key(o.name(c)): o.name(c) for c in world.api.inventory.of_kind(kinds.CAPI_CLAIM)}
    assert not any(o.is_deleting(c) for c in world.api.inventory.of_kind(kinds.CAPI_CLAIM)), "a finalizer stayed"
    for key, name in live.items():
        assert ready(world.claim(name))["status"] == "True" and world.ip(name) == world.source.ips()[key]
    assert all(count == 1 for count in world.source.freed.values()), world.source.freed
    for address_id, key in world.source.made.items():
        # Each address made for a deleted claim's key freed exactly once; a live or moved claim's never.
        assert world.source.freed[address_id] == (1 if key in deleted else 0), (key, world.source.freed)
    assert not set(world.source.held) & deleted


# -- a pass reads the answers as they were when it started ----------------------------------------------------

def test_an_answer_filed_while_a_pass_runs_reaches_the_next_pass():
    """A pass yields to the event loop between slices of decisions, and the outside IPAM's answers are filed
    meanwhile: the pass decides every claim from the answers as they were when it started (its input is a
    value), and an answer filed while it ran wakes its claim for the next pass."""
    names = [f"c{n:02}" for n in range(DECISIONS_PER_YIELD + 8)]
    world = World(*(queued_claim(name) for name in names), pool=queued_pool(prefix="10.0.0.0/24"))
    world.pools.answers.per_server = len(names)  # every claim asked for at once
    world.settle()  # every claim carries its key, and is asked for
    assert len(world.source.requests(Op.ALLOCATE)) == len(names)
    snap = world.api.inventory.snapshot(POOL, world.api.now, world.rng)
    snap.answers = world.pools.answers
    ledger = Ledger()
    run_to_end(load(ledger, snap))
    woken = []
    world.pools.wake = lambda pool, key: woken.append(key)
    decisions = plan_pass(ledger, snap, full=True, loaded=True)
    next(decisions)  # the first slice of claims is decided; the event loop has its turn
    world.source.answer_all()
    assert all(world.pools.answers.result(world.key(name)) is not None for name in names)
    plan = run_to_end(decisions)
    assert not [a for a in plan.writes if isinstance(a, Create)]  # every claim decided as still pending
    ledger.settle()
    for key in woken:
        ledger.answered(key)
    plan = run_to_end(plan_pass(ledger, snap))  # the next pass: only the woken claims
    made = {o.spec(a.obj)["claim"]["name"] for a in plan.writes if isinstance(a, Create)
            and a.obj["kind"] == "IPAddress" and a.obj["apiVersion"] == kinds.METAL3_API_VERSION}
    assert made == set(names)
