"""Two controller replicas against a model of the API server, serving the in-cluster provider's pools.

A ``GlobalInClusterIPPool`` whose claims live in three namespaces, beside a namespaced ``InClusterIPPool``
of the same addresses, with a reuse grace period or none; the store may start with the state the Go
in-cluster provider leaves (its addresses without locks, a claim held in its grace period). Each replica
decides from its own cache, fed at once by the answers to its own writes and late, in any order, by
watch events (see ``test_model``); the clock moves on by steps. The API server alone keeps them apart:
a second object of a name (a lock in the one lock namespace) is refused.

After every step (SPEC §10): no IP is held by two addresses of one pool for two live claims (for the global
pool: across every namespace); a claim served and then deleted keeps its address until its grace period
ends. Once events are drained and the clock is past every deadline: every live claim has exactly one
address or a Ready=False condition, and no lock or address is left without its claim.
"""

from __future__ import annotations

import copy
import datetime
import ipaddress
import random
from collections import deque

import pytest
from hypothesis import HealthCheck, settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, initialize, invariant, precondition, rule

from metal3_ipam.core import kinds
from metal3_ipam.core import objects as o
from metal3_ipam.core.actions import Create, SetStatus, StepVersions
from metal3_ipam.core.inventory import Inventory, served, of_every_namespace
from metal3_ipam.core.reconcile import reconcile
from metal3_ipam.memory import MemoryApi, Refused
from metal3_ipam.testing import go_incluster as gi
from ipam_objects import CONFLICT

NAMESPACES = ("ns-a", "ns-b", "ns-c")
GLOBAL = o.PoolKey("", "g", (gi.GROUP, gi.GLOBAL_IN_CLUSTER_IP_POOL))
LOCAL = o.PoolKey("ns-a", "g", (gi.GROUP, gi.IN_CLUSTER_IP_POOL))
START = datetime.datetime(2024, 1, 1, tzinfo=datetime.timezone.utc)
REPLICAS = 2


def _time(seconds: int) -> str:
    return (START + datetime.timedelta(seconds=seconds)).strftime("%Y-%m-%dT%H:%M:%SZ")


def _seconds(text: str) -> int:
    return int((datetime.datetime.fromisoformat(text.replace("Z", "+00:00")) - START).total_seconds())


LOCK_NAMESPACE = "default"


def watched(namespaces: tuple[str, ...] | None, obj: dict) -> bool:
    """Whether a replica watching ``namespaces`` (None: all) sees ``obj``: objects of cluster scope, the
    locks in the lock namespace and the Cluster API IPAddresses of pools of cluster scope are watched
    whatever the namespaces (``operator.listings``, ``Inventory.keeps``)."""
    ns = o.namespace(obj)
    return namespaces is None or not ns or ns in namespaces \
        or (kinds.kind_of(obj) == kinds.IPADDRESS and ns == LOCK_NAMESPACE) or of_every_namespace(obj)


class Store(MemoryApi):
    """The API server: every stored change becomes a watch event on each replica's stream of its kind."""

    def __init__(self, scopes: list[tuple[str, ...] | None]) -> None:
        super().__init__(now=_time(0))
        self.scopes = scopes
        self.streams = [{kind: deque() for kind in served()} for _ in range(REPLICAS)]

    def _emit(self, kind_of_event: str, obj: dict) -> None:
        for scope, streams in zip(self.scopes, self.streams):
            if watched(scope, obj):
                streams[kinds.kind_of(obj)].append((kind_of_event, copy.deepcopy(obj)))

    def load(self, obj: dict) -> None:
        super().load(obj)
        self._emit("ADDED", self.inventory.get(kinds.kind_of(obj), o.namespace(obj) or (
            "" if kinds.kind_of(obj) == GLOBAL.kind else "default"), o.name(obj)))

    def _store(self, obj: dict) -> None:
        super()._store(obj)
        meta = obj["metadata"]
        self._emit("DELETED" if meta.get("deletionTimestamp") and not meta.get("finalizers") else "MODIFIED", obj)


def _pool_of_address(address: dict) -> o.PoolKey | None:
    return o.pool_of(address)


def _pool_of_claim(claim: dict) -> tuple:
    key = o.pool_of(claim)
    return key.kind, key.namespace, key.name


def written_by_hand(name: str, ns: str, pool_kind: str, ip: str) -> dict:
    """A Cluster API IPAddress of pool "g" as a user writes it before its claim: no owner reference, no finalizer."""
    return {"apiVersion": gi.CAPI_API_VERSION, "kind": "IPAddress", "metadata": {"name": name, "namespace": ns},
            "spec": {"claimRef": {"name": name}, "poolRef": {"apiGroup": gi.GROUP, "kind": pool_kind, "name": "g"},
                     "address": ip, "prefix": 24}}


def _written_first(address: dict) -> bool:
    """Written by hand before its claim and not taken up: no owner reference to a claim, no finalizer."""
    return not o.finalizers(address) and not any(r.get("kind") == "IPAddressClaim" for r in o.owner_references(address))


class TwoReplicasServeGlobalPools(RuleBasedStateMachine):
    @initialize(seed=st.integers(0, 10_000), grace=st.sampled_from([0, 10]), with_go=st.booleans(),
                split=st.booleans(), local_later=st.booleans())
    def start(self, seed, grace, with_go, split, local_later=False):
        """``split``: the replicas watch namespaces apart (``-n``), one ns-a, the other ns-b and ns-c; both
        serve the global pool, and only the lock namespace, which both watch, keeps its IPs apart.
        ``local_later``: the namespaced pool of ns-a is created later (``user_creates_the_namespaced_pool``),
        maybe while a replica that has not seen it yet hands out the global pool's IPs there."""
        self.rng = random.Random(seed)
        self.grace = grace
        self.scopes = [("ns-a",), ("ns-b", "ns-c")] if split else [None] * REPLICAS
        self.store = Store(self.scopes)
        self.caches = [Inventory() for _ in range(REPLICAS)]
        self.counter = 0
        self.deadlines: dict[tuple[str, str, str], int] = {}  # a deleted claim served -> when it may go
        self.written: dict[tuple[str, str], str] = {}  # an address written by hand before its claim -> its uid
        spec = dict(prefix=24, addresses=["10.0.0.1-10.0.0.5"], grace_seconds=grace or None)
        objs = [gi.ip_pool("g", **spec), gi.ip_pool("g", namespace="ns-a", **spec)]
        if with_go:
            state = gi.GoInCluster()
            for obj in objs:
                state.add(obj)
            for ns in NAMESPACES[:2]:
                state.add(gi.claim("go", ns, gi.GLOBAL_IN_CLUSTER_IP_POOL, "g"))
                state.serve(ns, "go")
            state.delete_claim("ns-b", "go", _time(0))
            objs = state.objects()
        if local_later:
            self.later = [obj for obj in objs if kinds.kind_of(obj) == LOCAL.kind]
            objs = [obj for obj in objs if kinds.kind_of(obj) != LOCAL.kind]
        else:
            self.later = []
        for obj in objs:
            self.store.load(obj)
        # Each replica starts from a LIST of every kind; the events of what it listed come after.
        self.pending = [[] for _ in range(REPLICAS)]
        for scope, cache in zip(self.scopes, self.caches):
            cache.namespaces = frozenset(scope) if scope is not None else None
            for kind in served():
                items, version = self.listing(kind)
                cache.settle_listing(kind, None, [x for x in items if watched(scope, x)], version)
        self.note_deadlines()

    def listing(self, kind):
        return [copy.deepcopy(x) for x in self.store.inventory.of_kind(kind)], str(self.store._version)

    # -- the world --------------------------------------------------------------------------

    @rule(ns=st.sampled_from(NAMESPACES), local=st.booleans())
    def user_creates_claim(self, ns, local):
        self.counter += 1
        kind = gi.IN_CLUSTER_IP_POOL if local else gi.GLOBAL_IN_CLUSTER_IP_POOL
        self.store.load(gi.claim(f"c{self.counter % 5}-{self.counter}", "ns-a" if local else ns, kind, "g"))

    @rule()
    def user_creates_the_namespaced_pool(self):
        """The namespaced pool of ns-a, over the global pool's addresses, where the global pool has claims."""
        while getattr(self, "later", None):
            self.store.load(self.later.pop(0))

    @rule(ns=st.sampled_from(NAMESPACES), local=st.booleans(), where=st.sampled_from(["held", "any", "outside"]),
          k=st.integers(0, 50))
    def user_writes_an_address_then_its_claim(self, ns, local, where, k):
        """An IPAddress written by hand before its claim (a restore, a static IP): at an IP a live claim's
        address holds, any IP of the pool, or one outside it."""
        self.counter += 1
        ns, kind = ("ns-a", gi.IN_CLUSTER_IP_POOL) if local else (ns, gi.GLOBAL_IN_CLUSTER_IP_POOL)
        pool = LOCAL if local else GLOBAL
        held = sorted(o.spec(a)["address"] for a in self.store.inventory.of_kind(kinds.CAPI_ADDRESS)
                      if o.pool_of(a) == pool and not o.is_deleting(a))
        ip = (held[k % len(held)] if where == "held" and held else "10.0.9.9" if where == "outside"
              else f"10.0.0.{1 + k % 6}")
        name = f"w{self.counter % 5}-{self.counter}"
        self.store.load(written_by_hand(name, ns, kind, ip))
        self.written[(ns, name)] = o.meta(self.store.inventory.get(kinds.CAPI_ADDRESS, ns, name))["uid"]
        self.store.load(gi.claim(name, ns, kind, "g"))

    @rule(k=st.integers(0, 50))
    def user_deletes_claim(self, k):
        claims = sorted((c for c in self.store.inventory.of_kind(kinds.CAPI_CLAIM) if not o.is_deleting(c)),
                        key=lambda c: (o.namespace(c), o.name(c)))
        if not claims:
            return
        claim = copy.deepcopy(claims[k % len(claims)])
        claim["metadata"]["deletionTimestamp"] = self.store.now
        if claim["metadata"].get("finalizers"):
            self.store._store(claim)
        else:
            self.store.inventory.remove(claim)
            self.store._emit("DELETED", claim)
            self.store._collect(claim)  # the guards it owns go with it
        self.note_deadlines()

    @rule(seconds=st.integers(1, 8))
    def time_passes(self, seconds):
        self.store.now = _time(_seconds(self.store.now) + seconds)

    # -- the watches ----------------------------------------------------------------------------

    @rule(replica=st.integers(0, REPLICAS - 1), k=st.integers(0, 10))
    def an_event_arrives(self, replica, k):
        streams = [s for s in self.store.streams[replica].values() if s]
        if streams:
            self.file(replica, *streams[k % len(streams)].popleft())

    @rule(replica=st.integers(0, REPLICAS - 1))
    def a_list_is_filed(self, replica):
        if self.pending[replica]:
            kind, items, version = self.pending[replica].pop(0)
            self.caches[replica].settle_listing(kind, None, items, version)

    def file(self, replica, kind, obj):
        if kind == "DELETED":
            self.caches[replica].remove(copy.deepcopy(obj))
        else:
            self.caches[replica].upsert(copy.deepcopy(obj))

    # -- the replicas ------------------------------------------------------------------------

    @precondition(lambda self: any(not p for p in self.pending))
    @rule(replica=st.integers(0, REPLICAS - 1), local=st.booleans())
    def a_pool_pass(self, replica, local):
        if not self.pending[replica]:
            self.run_pass(replica, LOCAL if local else GLOBAL)

    def run_pass(self, replica, pool_key) -> bool:
        cache = self.caches[replica]
        plan = reconcile(cache.snapshot(pool_key, self.store.now, self.rng))
        for step in plan.steps:
            versions = StepVersions()  # as the controller runs a step: a second write expects what the first wrote
            for action in step.actions:
                try:
                    action = versions.current(action)
                    self.store.do(action)
                except Refused:
                    if isinstance(action, Create):  # the writer reads the name that is taken
                        obj = action.obj
                        taken = self.store.inventory.get(kinds.kind_of(obj), o.namespace(obj), o.name(obj))
                        if taken is not None:
                            cache.upsert(copy.deepcopy(taken))
                    break
                target = o.ref(action.obj) if isinstance(action, Create) else getattr(action, "target", None)
                if target is None:
                    continue
                stored = self.store.inventory.get(target.group_kind, target.namespace, target.name)
                if not isinstance(action, Create):
                    versions.wrote(action, stored and stored["metadata"].get("resourceVersion"))
                if stored is not None and watched(self.scopes[replica], stored):
                    cache.upsert(copy.deepcopy(stored))
                elif stored is not None:
                    continue
                else:
                    cache.forget(target.group_kind, target.namespace, target.name)
        self.note_deadlines()
        return any(not isinstance(a, SetStatus) or a.target.group_kind == kinds.CAPI_CLAIM for a in plan.writes)

    # -- what must hold ------------------------------------------------------------------------

    def note_deadlines(self):
        """Each deleted claim that holds an address: until when it must keep it."""
        for claim in self.store.inventory.of_kind(kinds.CAPI_CLAIM):
            key = (o.namespace(claim), o.name(claim), o.meta(claim)["uid"])
            if o.is_deleting(claim) and key not in self.deadlines \
                    and self.store.inventory.get(kinds.CAPI_ADDRESS, o.namespace(claim), o.name(claim)) is not None:
                self.deadlines[key] = _seconds(o.meta(claim)["deletionTimestamp"]) + self.grace

    @invariant()
    def no_ip_twice_in_a_pool_and_held_addresses_outlive_their_claims(self):
        if not hasattr(self, "store"):
            return
        live = {(o.namespace(c), o.name(c)) for c in self.store.inventory.of_kind(kinds.CAPI_CLAIM)
                if not o.is_deleting(c)}
        seen: dict[tuple, tuple[str, str]] = {}
        for address in self.store.inventory.of_kind(kinds.CAPI_ADDRESS):
            who = (o.namespace(address), o.name(address))
            if o.is_deleting(address) or who not in live or _written_first(address):
                continue  # an address written by hand before its claim holds nothing until taken up
            key = (_pool_of_address(address), o.spec(address)["address"])
            assert key not in seen, f"{key[1]} of {key[0]} held by {seen[key]} and {who}"
            seen[key] = who
            # Nor twice in a namespace, whichever of the two pools (neither is a separate network) holds it.
            here = (who[0], o.spec(address)["address"])
            assert here not in seen, f"{here[1]} held in {here[0]} by {seen[here]} and {who}"
            seen[here] = who
        for claim in self.store.inventory.of_kind(kinds.CAPI_CLAIM):
            ready = o.condition(o.status(claim), "Ready") or {}
            if ready.get("status") == "True" and not o.is_deleting(claim):
                address = self.store.inventory.get(kinds.CAPI_ADDRESS, o.namespace(claim), o.name(claim))
                assert address is not None and not _written_first(address), \
                    f"IPAddressClaim {o.namespace(claim)}/{o.name(claim)} bound to an address not taken up"
                pool = gi.ip_pool_set(o.spec(self.store.inventory.get(*_pool_of_claim(claim))))
                assert int(ipaddress.ip_address(o.spec(address)["address"])) in pool, \
                    f"IPAddressClaim {o.namespace(claim)}/{o.name(claim)} bound outside its pool"
        pools = {o.pool_of(c) for c in self.store.inventory.of_kind(kinds.CAPI_CLAIM)}
        now = _seconds(self.store.now)
        for (ns, name, uid), deadline in self.deadlines.items():
            claim = self.store.inventory.get(kinds.CAPI_CLAIM, ns, name)
            still = claim is not None and o.meta(claim)["uid"] == uid
            pool_live = self.store.inventory.get(GLOBAL.kind, "", "g") is not None or GLOBAL not in pools
            assert still or now >= deadline or not pool_live, \
                f"IPAddressClaim {ns}/{name} released at {now} s, before its deadline {deadline} s"

    def teardown(self):
        if not hasattr(self, "store"):
            return
        self.store.now = _time(_seconds(self.store.now) + self.grace + 1)
        for replica in range(REPLICAS):
            while self.pending[replica]:
                self.a_list_is_filed(replica)
        for _ in range(200):
            for replica in range(REPLICAS):
                for stream in self.store.streams[replica].values():
                    while stream:
                        self.file(replica, *stream.popleft())
            busy = False
            for replica in range(REPLICAS):
                for pool_key in (GLOBAL, LOCAL):
                    busy |= self.run_pass(replica, pool_key)
            if not busy and not any(s for streams in self.store.streams for s in streams.values()):
                break
        else:
            raise AssertionError("no fixed point")
        self.no_ip_twice_in_a_pool_and_held_addresses_outlive_their_claims()
        claims = {(o.namespace(c), o.name(c)): c for c in self.store.inventory.of_kind(kinds.CAPI_CLAIM)}
        assert not any(o.is_deleting(c) for c in claims.values()), "a deleted claim kept past its deadline"
        for (ns, name), claim in claims.items():
            address = self.store.inventory.get(kinds.CAPI_ADDRESS, ns, name)
            ready = o.condition(o.status(claim), "Ready")
            assert address is not None or (ready and ready["status"] == "False"), (ns, name, o.status(claim))
        for (ns, name), uid in self.written.items():
            # Whichever a replica saw first, the address or its claim: the claim takes it up, or is not served
            # (refused it, its pool missing) and it is left as written; it is never replaced by one at another IP.
            address = self.store.inventory.get(kinds.CAPI_ADDRESS, ns, name)
            if (ns, name) not in claims:
                continue
            assert address is not None and o.meta(address)["uid"] == uid, \
                f"the address written before IPAddressClaim {ns}/{name} was replaced: {address}"
            ready = o.condition(o.status(claims[(ns, name)]), "Ready") or {}
            assert ready.get("status") == "True" or _written_first(address), \
                (ns, name, ready, o.meta(address))
        for address in self.store.inventory.of_kind(kinds.CAPI_ADDRESS):
            assert (o.namespace(address), o.name(address)) in claims or _written_first(address), \
                f"leaked {o.namespace(address)}/{o.name(address)}"
        for lock in self.store.inventory.of_kind(kinds.IPADDRESS):
            claim = o.spec(lock)["claim"]
            assert (claim["namespace"], claim["name"]) in claims, f"leaked lock {o.name(lock)}"
            if o.pool_of(lock) == GLOBAL:
                assert o.namespace(lock) == LOCK_NAMESPACE, f"a global pool's lock in {o.namespace(lock)}"


TwoReplicasServeGlobalPools.TestCase.settings = settings(
    max_examples=150, stateful_step_count=50, deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.filter_too_much])
test_two_replicas_serve_global_pools_across_namespaces_with_grace_periods = TwoReplicasServeGlobalPools.TestCase


def test_a_global_pools_claim_deleted_after_one_pass_beside_the_go_providers_objects_settles():
    machine = TwoReplicasServeGlobalPools()
    machine.start(seed=0, grace=0, with_go=True, split=False, local_later=False)
    machine.a_pool_pass(local=False, replica=0)
    machine.user_deletes_claim(k=0)
    machine.teardown()


def test_controllers_serving_namespaces_apart_agree_on_a_global_pools_counts():
    machine = TwoReplicasServeGlobalPools()
    machine.start(seed=0, grace=0, with_go=False, split=True)
    machine.store.load(written_by_hand("w", "ns-a", gi.GLOBAL_IN_CLUSTER_IP_POOL, "10.0.0.3"))
    machine.teardown()


def test_controllers_serving_namespaces_apart_agree_on_a_global_pools_counts_while_its_claim_there_waits():
    """An address of another pool written by hand in ns-a keeps the global pool's last free IP from its claim
    there: only the controller serving ns-a serves that claim, and both count the IP free."""
    machine = TwoReplicasServeGlobalPools()
    machine.start(seed=0, grace=0, with_go=False, split=True, local_later=True)
    machine.store.load(written_by_hand("w", "ns-a", gi.IN_CLUSTER_IP_POOL, "10.0.0.5"))
    for n in range(4):
        machine.store.load(gi.claim(f"b{n}", "ns-b", gi.GLOBAL_IN_CLUSTER_IP_POOL, "g"))
    machine.teardown()
    machine.store.load(gi.claim("a", "ns-a", gi.GLOBAL_IN_CLUSTER_IP_POOL, "g"))
    machine.teardown()
    assert o.status(machine.store.inventory.get(GLOBAL.kind, "", "g"))["ipAddresses"]["free"] == 1


def test_a_controller_serving_other_namespaces_never_hands_out_an_ip_of_go_state_not_locked_yet():
    machine = TwoReplicasServeGlobalPools()
    machine.start(seed=0, grace=0, with_go=True, split=True)
    machine.user_creates_claim(local=False, ns="ns-b")
    for _ in range(3):
        machine.an_event_arrives(k=0, replica=1)
    machine.a_pool_pass(local=False, replica=1)
    machine.teardown()


def test_a_lock_made_for_a_claim_deleted_at_once_goes_while_an_address_written_before_it_stays():
    """A replica that sees a new claim but not the address written before it locks a free IP for it; the claim is
    deleted at once. The lock goes (the address, written before its claim, stays while no claim has it)."""
    machine = TwoReplicasServeGlobalPools()
    machine.start(seed=0, grace=0, with_go=False, split=False)
    machine.user_writes_an_address_then_its_claim(k=0, local=False, ns="ns-a", where="held")
    machine.user_deletes_claim(k=0)
    machine.an_event_arrives(k=2, replica=0)  # the claim's ADDED, not the address's
    machine.a_pool_pass(local=False, replica=0)
    machine.teardown()


@pytest.mark.parametrize("split", [False, True])
@pytest.mark.parametrize("written_in", [("ns-a",), ("ns-b", "ns-a")])
def test_an_address_written_by_hand_never_takes_the_ip_of_a_go_claim_bound_to_it(split, written_in):
    """The Go in-cluster provider's state: claim ns-a/go bound to 10.0.0.1 of the global pool, not locked yet.
    IPAddresses are written by hand at 10.0.0.1 before their claims. With ``split``, the replicas serve ns-a and
    ns-b, ns-c apart (``-n``): the one serving ns-b sees the Go claim's address but not its claim. The Go claim
    keeps its IP; each written address is refused."""
    machine = TwoReplicasServeGlobalPools()
    machine.start(seed=0, grace=0, with_go=True, split=split)
    for ns in written_in:
        machine.user_writes_an_address_then_its_claim(k=0, local=False, ns=ns, where="held")
    machine.teardown()  # no IP bound to two live claims, every claim settled
    claims = {(o.namespace(c), o.name(c)): o.condition(o.status(c), "Ready")
              for c in machine.store.inventory.of_kind(kinds.CAPI_CLAIM)}
    assert claims.pop(("ns-a", "go"))["message"] == "bound to 10.0.0.1"
    assert sorted(ns for ns, _ in claims) == sorted(written_in)
    assert all(ready["reason"] == CONFLICT for ready in claims.values()), claims


def test_an_address_written_before_its_claim_beside_a_global_pools_claim_settles():
    machine = TwoReplicasServeGlobalPools()
    machine.start(seed=759, with_go=False, local_later=True, split=True, grace=0)
    machine.a_pool_pass(local=False, replica=0)
    machine.time_passes(seconds=5)
    machine.user_writes_an_address_then_its_claim(k=38, local=True, ns='ns-a', where='held')
    machine.time_passes(seconds=8)
    machine.user_creates_claim(local=False, ns='ns-a')
    machine.time_passes(seconds=1)
    machine.time_passes(seconds=5)
    machine.time_passes(seconds=1)
    machine.time_passes(seconds=1)
    machine.time_passes(seconds=1)
    machine.time_passes(seconds=2)
    machine.time_passes(seconds=2)
    machine.time_passes(seconds=1)
    machine.user_creates_claim(local=True, ns='ns-a')
    machine.user_writes_an_address_then_its_claim(k=0, local=False, ns='ns-a', where='outside')
    machine.user_writes_an_address_then_its_claim(k=36, local=True, ns='ns-a', where='any')
    machine.time_passes(seconds=1)
    machine.a_pool_pass(local=False, replica=0)
    machine.time_passes(seconds=1)
    machine.time_passes(seconds=1)
    machine.a_pool_pass(local=False, replica=0)
    machine.user_writes_an_address_then_its_claim(k=1, local=True, ns='ns-b', where='any')
    machine.user_creates_claim(local=True, ns='ns-b')
    machine.user_writes_an_address_then_its_claim(k=7, local=False, ns='ns-c', where='held')
    machine.user_creates_claim(local=True, ns='ns-c')
    machine.time_passes(seconds=6)
    machine.user_writes_an_address_then_its_claim(k=25, local=False, ns='ns-a', where='held')
    machine.a_pool_pass(local=True, replica=1)
    machine.user_creates_claim(local=False, ns='ns-b')
    machine.user_creates_claim(local=True, ns='ns-c')
    machine.time_passes(seconds=5)
    machine.user_writes_an_address_then_its_claim(k=16, local=True, ns='ns-a', where='held')
    machine.time_passes(seconds=5)
    machine.user_creates_claim(local=False, ns='ns-a')
    machine.user_writes_an_address_then_its_claim(k=10, local=True, ns='ns-c', where='outside')
    machine.a_pool_pass(local=True, replica=0)
    machine.user_creates_claim(local=False, ns='ns-a')
    machine.a_pool_pass(local=True, replica=0)
    machine.user_creates_claim(local=True, ns='ns-a')
    machine.user_writes_an_address_then_its_claim(k=21, local=False, ns='ns-c', where='any')
    machine.user_creates_claim(local=False, ns='ns-b')
    machine.user_creates_claim(local=True, ns='ns-b')
    machine.user_writes_an_address_then_its_claim(k=34, local=True, ns='ns-c', where='any')
    machine.user_writes_an_address_then_its_claim(k=5, local=True, ns='ns-a', where='any')
    machine.user_writes_an_address_then_its_claim(k=14, local=False, ns='ns-c', where='any')
    machine.teardown()
