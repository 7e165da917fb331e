"""Claims of a pool whose addresses an outside IPAM hands out later (``pools.Outside``: NetBoxIPPool),
through the one claim lifecycle: the key written before anything is asked, a pending claim, answers that
come late, twice or never, release through the finalizer, a move forgotten and never released.

The outside IPAM here is an in-memory stand-in (``FakeIpam``: one address per key, lowest free first,
release by key, 404 counting as released) with the real asking state (``core.asking``) between it and
the lifecycle; the real NetBox is met end to end (``tests/e2e/poolkinds/netbox/test_netbox_claims.py``).
"""

from __future__ import annotations


from hypothesis import HealthCheck, example, given, settings, strategies as st

from metal3_ipam.core import kinds
from metal3_ipam.core import objects as o
from metal3_ipam.core.asking import Intent, Op, Refused
from metal3_ipam.core.ledger import Ledger
from metal3_ipam.poolkinds.netbox.pool import KEY_ANNOTATION
from metal3_ipam.poolkinds.netbox.kind import FINALIZERS, NETBOX_IP_POOL
from metal3_ipam.core.reconcile import needs_full, plan_pass, run_to_end
from ipam_objects import NS, capi_claim, get, loaded, set_meta, user_delete
from outside_world import POOL, SERVER, World, claim, netbox_pool, ready

CLAIM_FINALIZER = FINALIZERS.claim[kinds.CAPI_CLAIM]


def test_the_key_and_finalizer_are_written_before_anything_is_asked():
    world = World(claim("a"))
    world.pass_()
    a = world.claim("a")
    key = o.annotations(a).get(KEY_ANNOTATION)
    assert key and CLAIM_FINALIZER in o.finalizers(a)
    assert world.out == [] and world.ipam.asked == []  # asked only once the stored claim carries it
    world.pass_()
    assert [(ask.op, ask.key) for ask in world.out] == [(Op.ALLOCATE, key)]
    assert ready(world.claim("a"))["reason"] == "AllocationPending"
    assert world.api.inventory.of_kind(kinds.CAPI_ADDRESS) == [] or not list(world.api.inventory.of_kind(kinds.CAPI_ADDRESS))


def test_a_grant_becomes_the_lock_and_the_cluster_api_address_named_after_the_claim():
    world = World(claim("a"), claim("b"))
    world.settle()
    for name, ip in (("a", "10.0.0.2"), ("b", "10.0.0.3")):
        c = world.claim(name)
        address = get(world.api, kinds.CAPI_ADDRESS, name)
        assert address is not None and o.spec(address)["address"] == ip
        assert o.spec(address)["prefix"] == 28 and o.spec(address)["gateway"] == "10.0.0.1"
        assert o.status(c)["addressRef"] == {"name": name} and ready(c)["status"] == "True"
        assert world.ipam.held[o.annotations(c)[KEY_ANNOTATION]] == ip
    assert all(world.carried_when_asked)


def test_a_refusal_is_the_claims_reason_until_a_grant_comes():
    world = World(claim("a"))
    [ask] = world.first_asks()
    world.asking.file(Refused(ask.key, ask.attempt, "NetBoxUnreachable", "connection refused", server_down=True),
                      world.now)
    world.out = []
    world.pass_()
    assert (ready(world.claim("a"))["status"], ready(world.claim("a"))["reason"]) == ("False", "NetBoxUnreachable")
    assert world.out == []  # backed off: asked again at next_due, not at once
    world.now = world.asking.next_due()
    world.settle()
    assert ready(world.claim("a"))["status"] == "True"


def test_claims_pending_behind_a_server_that_is_down_show_its_refusal():
    world = World(claim("a"), claim("b"))
    first, *_ = world.first_asks()
    world.asking.file(Refused(first.key, first.attempt, "NetBoxUnreachable", "connection refused", server_down=True),
                      world.now)
    # The other's answer never comes: it has no refusal of its own.
    world.pass_()
    assert world.out == []  # the circuit holds every ask back
    world.pass_()
    assert {ready(world.claim(n))["reason"] for n in "ab"} == {"NetBoxUnreachable"}
    world.now = world.asking.next_due()
    world.settle()
    assert {ready(world.claim(n))["status"] for n in "ab"} == {"True"}


def test_claims_pending_are_not_rewritten_at_every_probe_of_a_server_still_down():
    """Claims wanting an address while their server is down are pending, showing the server's refusal; each
    probe is another key's, refused with its own message: the waiting claims keep the status they have (no write
    per probe), and still say why."""
    world = World(claim("z"))
    [first] = world.first_asks()
    world.asking.file(Refused(first.key, first.attempt, "NetBoxUnreachable", f"connection refused ({first.key})",
                              server_down=True), world.now)
    for n in "abcdef":
        world.api.load(claim(n))
    for _ in range(3):
        world.pass_()
    assert world.out == []  # put off: the circuit is open
    versions = {n: world.claim(n)["metadata"]["resourceVersion"] for n in "abcdef"}
    assert {ready(world.claim(n))["reason"] for n in "abcdef"} == {"NetBoxUnreachable"}
    probed = set()
    for _ in range(4):
        world.now = world.asking.next_due()
        world.pass_()
        probes, world.out = world.out, []
        for ask in probes:
            probed.add(ask.key)
            world.asking.file(Refused(ask.key, ask.attempt, "NetBoxUnreachable", f"connection refused ({ask.key})",
                                      server_down=True), world.now)
        world.pass_()
    assert len(probed) >= 2  # probes of different keys, each with its own message
    keys = {n: o.annotations(world.claim(n)).get(KEY_ANNOTATION) for n in "abcdef"}
    rewritten = {n for n in "abcdef" if world.claim(n)["metadata"]["resourceVersion"] != versions[n]}
    assert rewritten <= {n for n, k in keys.items() if k in probed}, (rewritten, probed)
    assert {ready(world.claim(n))["reason"] for n in "abcdef"} == {"NetBoxUnreachable"}


def test_an_answer_that_never_comes_is_asked_again_after_the_deadline_and_one_address_stands():
    world = World(claim("a"))
    [lost] = world.first_asks()
    world.ipam.run(lost)  # carried out, its answer lost
    world.now = world.asking.next_due()
    world.pass_()  # the deadline passes: timed out, backing off
    world.pass_()
    assert world.out == [] and ready(world.claim("a"))["reason"] == "NetBoxTimeout"
    world.now = world.asking.next_due()
    world.pass_()
    assert [a.key for a in world.out] == [lost.key]  # asked again
    world.settle()
    assert list(world.ipam.held) == [lost.key] and world.ipam.held[lost.key] == "10.0.0.2"
    assert o.spec(get(world.api, kinds.CAPI_ADDRESS, "a"))["address"] == "10.0.0.2"


def test_a_late_duplicate_answer_changes_nothing():
    world = World(claim("a"))
    [ask] = world.first_asks()
    world.answer(ask, twice=True)
    world.settle()
    world.asking.file(world.ipam.run(ask), world.now)  # once more, after it was bound
    world.settle()
    assert len(list(world.api.inventory.of_kind(kinds.CAPI_ADDRESS))) == 1
    assert len(list(world.api.inventory.of_kind(kinds.IPADDRESS))) == 1


def test_deletion_releases_outside_before_the_objects_and_the_finalizer_go():
    world = World(claim("a"))
    world.settle()
    key = o.annotations(world.claim("a"))[KEY_ANNOTATION]
    user_delete(world.api, kinds.CAPI_CLAIM, "a")
    world.pass_()
    assert world.claim("a") is not None and get(world.api, kinds.CAPI_ADDRESS, "a") is not None  # not released yet
    assert [(a.op, a.key) for a in world.out] == [(Op.RELEASE, key)]
    world.answer_all()
    world.settle()
    assert world.claim("a") is None and key not in world.ipam.held
    assert not list(world.api.inventory.of_kind(kinds.CAPI_ADDRESS)) and not list(world.api.inventory.of_kind(kinds.IPADDRESS))


def test_a_claim_deleted_while_its_allocation_is_out_releases_what_it_made():
    world = World(claim("a"))
    [ask] = world.first_asks()
    user_delete(world.api, kinds.CAPI_CLAIM, "a")
    world.pass_()
    world.answer(ask)  # the allocation lands after the claim went into deletion
    world.settle()
    assert world.claim("a") is None and world.ipam.held == {}


def test_a_claim_moved_away_is_forgotten_never_released():
    world = World(claim("a"))
    world.settle()
    key = o.annotations(world.claim("a"))[KEY_ANNOTATION]
    user_delete(world.api, kinds.CAPI_CLAIM, "a", annotations={kinds.DELETE_FOR_MOVE_ANNOTATION: ""})
    plan = world.pass_()
    assert plan.intents == {key: Intent.FORGET}
    world.answer_all()
    assert world.ipam.held == {key: "10.0.0.2"} and all(op is not Op.RELEASE for op, _ in world.ipam.asked)


def test_a_moved_in_claim_carrying_its_key_finds_its_address_again():
    world = World()
    world.ipam.held["k1"] = "10.0.0.9"  # made in the cluster the claim came from
    moved = claim("a")
    moved["metadata"]["annotations"] = {KEY_ANNOTATION: "k1"}
    world.api.load(moved)
    world.settle()
    assert o.spec(get(world.api, kinds.CAPI_ADDRESS, "a"))["address"] == "10.0.0.9"
    assert world.ipam.held == {"k1": "10.0.0.9"}


def test_a_bad_key_is_refused_naming_the_annotation():
    bad = claim("a")
    bad["metadata"]["annotations"] = {KEY_ANNOTATION: "Not A Key"}
    world = World(bad)
    world.settle()
    assert ready(world.claim("a"))["status"] == "False"
    assert KEY_ANNOTATION in ready(world.claim("a"))["message"] and world.ipam.asked == []


# -- property: answers late, twice, never; claims created and deleted meanwhile -------------------------

EVENTS = st.lists(st.one_of(
    st.tuples(st.just("create"), st.integers(0, 5)),
    st.tuples(st.just("delete"), st.integers(0, 5)),
    st.tuples(st.just("move"), st.integers(0, 5)),
    st.tuples(st.just("pass"), st.just(0)),
    st.tuples(st.just("answer"), st.integers(0, 3)),  # 0: now, 1: twice, 2: lost (carried out), 3: dropped
    st.tuples(st.just("tick"), st.integers(1, 90)),
    st.tuples(st.just("delete pool"), st.just(0)),
), max_size=40)


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(EVENTS, st.integers(0, 1000))
@example([("create", 0), ("pass", 0), ("pass", 0), ("delete pool", 0)], 0)  # the pool deleted, an allocation out
def test_one_outside_address_per_key_and_every_claim_bound_to_it(events, seed):
    """... and, the pool deleted at any point, no outside address for a claim holding none when it goes."""
    world = World(seed=seed)
    moved_keys: set[str] = set()
    pool_deleted = False
    for what, n in events:
        name = f"c{n}"
        if what == "delete pool" and not pool_deleted:
            pool_deleted = True
            user_delete(world.api, NETBOX_IP_POOL, "nb")
        elif what == "create" and world.claim(name) is None:
            world.api.load(claim(name))
        elif what in ("delete", "move") and world.claim(name) is not None:
            key = o.annotations(world.claim(name)).get(KEY_ANNOTATION)
            if what == "move":
                if key:
                    moved_keys.add(key)
                user_delete(world.api, kinds.CAPI_CLAIM, name, annotations={kinds.DELETE_FOR_MOVE_ANNOTATION: ""})
                if world.claim(name) is not None:  # clusterctl strips the finalizers and the copy's address goes with it
                    set_meta(world.api, kinds.CAPI_CLAIM, name, finalizers=[])
                    world.api.inventory.remove(world.claim(name))
                    for address in [*world.api.inventory.of_kind(kinds.CAPI_ADDRESS), *world.api.inventory.of_kind(kinds.IPADDRESS)]:
                        if o.name(address) == name or (o.claim_of_address(address) or (None, None))[1] == name:
                            world.api.inventory.remove(address)
            else:
                user_delete(world.api, kinds.CAPI_CLAIM, name)
        elif what == "pass":
            world.pass_()
        elif what == "answer" and world.out:
            ask = world.out.pop(0)
            if n == 0:
                world.answer(ask)
            elif n == 1:
                world.answer(ask, twice=True)
            elif n == 2:
                world.ipam.run(ask)
        elif what == "tick":
            world.now += n
        # A key is asked for only while a stored claim carries it.
        assert all(world.carried_when_asked)
    # Everything answered from here on, time moving as the asks say.
    for _ in range(12):
        world.settle(rounds=40)
        if not world.asking.wanted() - {o.annotations(c).get(KEY_ANNOTATION) for c in world.api.inventory.of_kind(kinds.CAPI_CLAIM)}:
            break
        world.now += 200
    world.now += 400  # past every linger: a release asked again finds what a lost allocation made
    world.settle(rounds=40)
    assert all(world.carried_when_asked)
    live = {o.name(c): c for c in world.api.inventory.of_kind(kinds.CAPI_CLAIM)}
    assert all(not o.is_deleting(c) for c in live.values()), "a deleted claim kept its finalizer"
    held = world.ipam.held
    bound = set()
    for name, c in live.items():
        key = o.annotations(c).get(KEY_ANNOTATION)
        mirrors = [a for a in world.api.inventory.of_kind(kinds.CAPI_ADDRESS) if o.spec(a)["claimRef"]["name"] == name]
        if pool_deleted and not mirrors:  # its pool went before it was bound: nothing held for it outside
            assert key not in held, (name, key, held)
            continue
        assert len(mirrors) == 1 and o.spec(mirrors[0])["address"] == held[key], (name, key, held)
        assert ready(c)["status"] == "True"
        bound.add(name)
    if pool_deleted:  # it goes once no claim holds an address of it
        assert (get(world.api, NETBOX_IP_POOL, "nb") is None) == (not bound), bound
    carried = {o.annotations(c).get(KEY_ANNOTATION) for c in live.values()}
    # No outside address for a claim that was deleted (only for live claims and claims moved away).
    assert set(held) <= carried | moved_keys, (held, carried, moved_keys)
    assert len(set(held.values())) == len(held)


def test_claims_of_an_invalid_netbox_pool_are_refused_naming_the_field_and_nothing_is_asked():
    world = World(claim("a"))
    bad = netbox_pool()
    bad["spec"]["source"] = {"ipRange": "10.0.0.9-10.0.0.1"}
    world.api.inventory.upsert({**bad, "metadata": {**bad["metadata"], "resourceVersion": "99"}})
    world.settle()
    condition = ready(world.claim("a"))
    assert (condition["status"], condition["reason"]) == ("False", "PoolNotReady")
    assert "spec.source.ipRange" in condition["message"] and "10.0.0.9-10.0.0.1" in condition["message"]
    assert world.ipam.asked == [] and KEY_ANNOTATION not in o.annotations(world.claim("a"))


# -- passes as the pool workers run them: a ledger kept from the changes ------------------------------------------


class KeptWorld(World):
    """The same world, its passes deciding only what changed (``plan_pass`` over a kept ``Ledger``), and each
    answer waking the pool as the adapter does (``NetBoxPools._answered``): the claims pending its key, or
    every claim pending an answer when it changed what they show of their server."""

    def __init__(self, *objs, seed=0):
        super().__init__(*objs, seed=seed)
        self.ledger = Ledger()
        self.decided: list[set[str]] = []  # per pass: the claims decided as still pending their release

    def pass_(self):
        reload, changes = self.api.inventory.drain(POOL)
        context = self.api.inventory.snapshot(POOL, self.api.now, self.rng, members=False)
        context.answers = self.asking
        if reload or needs_full(self.ledger, context):
            fresh = Ledger()
            fresh.take_wakes(self.ledger)
            self.ledger = fresh
            plan = run_to_end(plan_pass(self.ledger, self.snapshot(), full=True))
        else:
            plan = run_to_end(plan_pass(self.ledger, context, changes))
        self.decided.append({note.split(":")[0] for note in plan.notes if "let its address go" in note})
        self.api.apply(plan)
        self.ledger.settle()
        for key, intent in plan.intents.items():
            self.asking.intend(key, intent, (NS, "nb"), SERVER, self.now)
        self.asking.carried((NS, "nb"), self.keys_carried() | set(plan.intents), self.now)
        self.out.extend(self.asking.due(self.now))
        return plan

    def file(self, answer):
        standing = self.asking.server_standing(SERVER)
        self.asking.file(answer, self.now)
        if self.asking.server_standing(SERVER) != standing:
            self.ledger.wake()
        else:
            self.ledger.answered(answer.key)

    def answer(self, ask, twice=False):
        for _ in range(2 if twice else 1):
            self.file(self.ipam.run(ask))


def test_a_release_answered_decides_again_only_the_claims_carrying_its_key():
    """Deleted claims wait for their releases; each answer brings a pass for its own claim only (not one over
    every claim still waiting: a pool releasing N claims made N passes of N decisions each), and a freed IP
    wakes none of them (nothing of the pool stands in their way)."""
    names = [f"c{i}" for i in range(6)]
    world = KeptWorld(*(claim(n) for n in names))
    world.settle()
    assert all(ready(world.claim(n)).get("status") == "True" for n in names)
    for n in names:
        user_delete(world.api, kinds.CAPI_CLAIM, n)
    world.pass_()
    assert world.decided[-1] == set(names)
    asks, world.out = world.out, []
    assert sorted(a.op for a in asks) == [Op.RELEASE] * len(names)
    by_key = {o.annotations(world.claim(n))[KEY_ANNOTATION]: n for n in names}
    for n, ask in enumerate(asks, 1):
        world.answer(ask)
        world.pass_()  # the answered claim's objects and finalizer go
        world.pass_()  # what that deleted (an IP freed, the claim gone)
        assert world.decided[-2:] == [set(), set()]  # none of those still waiting was decided again
        gone = {name for name in names if world.claim(name) is None}
        assert by_key[ask.key] in gone and len(gone) == n
    assert world.ipam.held == {}
    assert not list(world.api.inventory.of_kind(kinds.IPADDRESS))


def test_a_server_going_down_or_coming_back_decides_again_every_claim_pending_on_it():
    """What the waiting claims show of their server changes with an answer of another key (the server refused
    as down, or answered again): all of them are decided again, and say so."""
    world = KeptWorld(*(claim(n) for n in "abc"))
    first, *rest = world.first_asks()
    assert not world.pass_() and not world.pass_()  # settled: nothing changes until an answer comes
    world.file(Refused(first.key, first.attempt, "NetBoxUnreachable", "connection refused", server_down=True))
    assert world.asking.server_standing(SERVER) == "NetBoxUnreachable"
    world.pass_()
    assert {ready(world.claim(n))["reason"] for n in "abc"} == {"NetBoxUnreachable"}
    for ask in rest:  # answered after all: the server is back
        world.answer(ask)
    assert world.asking.server_standing(SERVER) is None
    world.settle()
    assert {ready(world.claim(n))["status"] for n in "abc"} == {"True"}
    assert len(world.ipam.held) == 3


def test_a_claim_refused_for_a_key_carried_first_by_another_is_served_once_that_claim_is_gone():
    """Two claims carry one allocation key (a manifest copied with its annotation); the one created first has
    it, the other is refused naming it. That first claim is deleted before its address came: the key, and the
    address it is granted, are the remaining claim's, which a kept ledger must decide again then (nothing of
    the pool is freed, and the refused claim has no answer pending)."""
    a = claim("a")
    a["metadata"].update(annotations={KEY_ANNOTATION: "k1"}, creationTimestamp="2024-01-01T00:00:00Z")
    b = claim("b")
    b["metadata"].update(annotations={KEY_ANNOTATION: "k1"}, creationTimestamp="2024-01-01T00:00:01Z")
    world = KeptWorld(a, b)
    world.pass_()
    world.pass_()
    assert "carried by" in ready(world.claim("b"))["message"]
    user_delete(world.api, kinds.CAPI_CLAIM, "a")
    world.settle()
    assert world.claim("a") is None
    assert ready(world.claim("b")).get("status") == "True", ready(world.claim("b"))


def _a_key_copied_into_another_namespace():
    """Claim ``a`` carrying key k1 in the NetBox pool of POOL's namespace, and a copy of it (created a second
    later, the same key) in a second NetBoxIPPool of namespace ``other``: the API, both pools' keys, and a
    function that runs both pools' workers until quiet, twice."""
    from metal3_ipam.controller.workers import PoolWorkers
    from pool_workers import MemoryWriter, until_quiet

    other = "other"
    a = claim("a")
    a["metadata"].update(annotations={KEY_ANNOTATION: "k1"}, creationTimestamp="2024-01-01T00:00:00Z")
    copy = capi_claim("a", "nb", ns=other, api_group=NETBOX_IP_POOL[0], kind=NETBOX_IP_POOL[1],
                      annotations={KEY_ANNOTATION: "k1"})
    copy["metadata"]["creationTimestamp"] = "2024-01-01T00:00:01Z"
    second = netbox_pool()
    second["metadata"] = {**second["metadata"], "namespace": other}
    api = loaded(netbox_pool(), second, a, copy)
    pool_keys = (POOL, o.PoolKey(other, "nb", NETBOX_IP_POOL))
    workers = PoolWorkers(api.inventory, MemoryWriter(api), audit_seconds=3600)

    async def settle():
        for _ in range(2):
            for pool_key in pool_keys:
                await until_quiet(workers, pool_key)

    return api, other, settle


def test_a_copy_refused_in_another_namespace_is_decided_again_when_the_claim_carrying_the_key_goes():
    """The same, across pools (a manifest copied with its key into another namespace): the copy's pool is
    told by the workers when the claim carrying the key first goes, as nothing of its own pool changes."""
    import asyncio

    async def scenario():
        api, other, settle = _a_key_copied_into_another_namespace()
        await settle()
        assert "carried by" in ready(get(api, kinds.CAPI_CLAIM, "a", ns=other))["message"]
        user_delete(api, kinds.CAPI_CLAIM, "a")
        await settle()
        assert get(api, kinds.CAPI_CLAIM, "a") is None
        condition = ready(get(api, kinds.CAPI_CLAIM, "a", ns=other))
        assert condition["reason"] == "AllocationPending" and "k1" in condition["message"], condition

    asyncio.run(scenario())


def test_a_copy_in_another_namespace_is_decided_again_when_a_full_pass_sees_the_claim_carrying_the_key_go():
    """As above, with the pass of the carrier's pool that sees it gone a full one (its finalizer stripped, and
    its pool's spec edited in the same moment, which loads the ledger afresh): the copy's pool is told all
    the same, not left to its own audit."""
    import asyncio

    async def scenario():
        api, other, settle = _a_key_copied_into_another_namespace()
        await settle()
        assert "carried by" in ready(get(api, kinds.CAPI_CLAIM, "a", ns=other))["message"]
        set_meta(api, kinds.CAPI_CLAIM, "a", finalizers=[])  # gone at once: seen by the next pass only
        user_delete(api, kinds.CAPI_CLAIM, "a")
        edited = get(api, NETBOX_IP_POOL, "nb")
        edited = {**edited, "spec": {**edited["spec"], "dnsServers": ["10.0.0.53"]},
                  "metadata": {**edited["metadata"], "generation": 2, "resourceVersion": api._next_version()}}
        api.inventory.upsert(edited)
        await settle()
        assert get(api, kinds.CAPI_CLAIM, "a") is None
        condition = ready(get(api, kinds.CAPI_CLAIM, "a", ns=other))
        assert condition["reason"] == "AllocationPending" and "k1" in condition["message"], condition

    asyncio.run(scenario())
