"""Two GlobalInClusterIPPools, a GlobalInClusterPrefixPool and an InClusterIPPool named like one of them,
overlapping, created in any order, the global ones edited to and fro, deleted and created anew, and an
InClusterPrefixPool overlapping the global pools created at any moment and edited to and fro,
against a model of the world (test_model's): the API store apart from the controller's cache, fed by
lagging per-kind watch streams, events delivered again and LISTs filed late, and passes whose writes land
after others' (a replica behind, or slow). Claims of one name in two
namespaces, deleted and created anew under their names (new uids), their Clusters paused by annotation and
unpaused.

After every step, on the store: no IP held by live address objects for two live claims of the global pools
(whatever their namespaces), nor of one namespace (whatever their pools; a sub-prefix holds each of its IPs).
Once drained, at the fixed point:
every live claim has exactly one IP or a Ready=False condition, and nothing is leaked."""

from __future__ import annotations

import copy
import datetime
import random

import netaddr
import pytest

from hypothesis import HealthCheck, settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, initialize, invariant, precondition, rule

from metal3_ipam.poolkinds.incluster import spec as ic
from metal3_ipam.poolkinds.incluster.prefix_spec import GLOBAL_IN_CLUSTER_PREFIX_POOL, IN_CLUSTER_PREFIX_POOL
from metal3_ipam.core import kinds
from metal3_ipam.core import objects as o
from metal3_ipam.core.actions import Create, Delete, Plan, SetMetadata, Step, StepVersions
from metal3_ipam.core.inventory import Inventory, served
from metal3_ipam.core.reconcile import reconcile
from metal3_ipam.memory import Refused, converge
from metal3_ipam.testing import go_incluster as gi
from ipam_objects import (NS, assert_no_ip_twice, capi_claim, cluster, converged_with_lock_namespace, get, held_spans,
                          ippool, ipclaim)
from ipam_objects import live_bindings as live_bindings_of
from world_model import LaggingWatch, Store

GLOBAL, NAMESPACED = ic.GLOBAL_IN_CLUSTER_IP_POOL, ic.IN_CLUSTER_IP_POOL
PREFIX, GLOBAL_PREFIX = IN_CLUSTER_PREFIX_POOL, GLOBAL_IN_CLUSTER_PREFIX_POOL
NAMESPACES = ("ns-a", "ns-b")
LABEL = kinds.CLUSTER_NAME_LABEL


class GlobalStore(Store):
    def load(self, obj: dict) -> None:
        super(Store, self).load(obj)
        ns = "" if kinds.kind_of(obj) in (GLOBAL, GLOBAL_PREFIX) else o.namespace(obj) or "default"
        self.streams[kinds.kind_of(obj)].append(("ADDED", copy.deepcopy(self.inventory.get(kinds.kind_of(obj), ns,
                                                                                            o.name(obj)))))


# The prefix pool of ns-b (where no other namespaced pool is): created by the user at any moment, then edited
# between these two address sets (sub-prefixes of two IPs), each overlapping the global pools.
PREFIX_SETS = (["fd00::/126", "fd00::8/127"], ["fd00::2/127", "fd00::4/127", "fd00::a/127"])
PREFIX_LENGTH = 127
# The length of each prefix pool kind's addresses (the global prefix pool's, below, hands out /126).
LENGTHS = {PREFIX[1]: PREFIX_LENGTH, GLOBAL_PREFIX[1]: 126}


# (kind, namespace, name) of each pool, and its addresses: every two overlap.
POOLS = {"g": (GLOBAL, None, "g", ["fd00::1-fd00::3"]), "h": (GLOBAL, None, "h", ["fd00::2-fd00::4"]),
         "q": (GLOBAL_PREFIX, None, "q", ["fd00::/124"]),
         "n": (NAMESPACED, "ns-a", "g", ["fd00::1-fd00::5", "fd00::9"])}
# The address sets each global pool is edited between: its own (above), and one shifted from it.
GLOBAL_EDITS = {"g": (["fd00::1-fd00::3"], ["fd00::9"]), "h": (["fd00::2-fd00::4"], ["fd00::1"])}
# The pools claims may name: those above, and the prefix pool, once it is there.
CLAIMED = {**POOLS, "p": (PREFIX, "ns-b", "p", PREFIX_SETS[0])}


def prefix_pool(prefixes):
    return {"apiVersion": ic.API_VERSION, "kind": PREFIX[1], "metadata": {"name": "p", "namespace": "ns-b"},
            "spec": {"prefixes": prefixes, "allocationPrefixLength": PREFIX_LENGTH}}


def pool(kind, ns, addresses, name="g", created=None):
    meta = {"name": name, **({"namespace": ns} if ns else {}),
            **({"creationTimestamp": created} if created else {})}
    return {"apiVersion": ic.API_VERSION, "kind": kind[1], "metadata": meta,
            "spec": ({"prefixes": addresses, "allocationPrefixLength": LENGTHS[kind[1]]} if kind == GLOBAL_PREFIX
                     else {"addresses": addresses, "prefix": 64})}


def live_holdings(store) -> dict[tuple, set]:
    """(namespace, kind, name) of each live claim -> (pool kind, IP) its live address objects hold."""
    live = {(o.namespace(c), o.name(c)) for c in store.inventory.of_kind(kinds.CAPI_CLAIM) if not o.is_deleting(c)}
    held: dict[tuple, set] = {}
    for address in store.inventory.of_kind(kinds.IPADDRESS):
        if o.is_guard(address):
            continue
        key = o.claim_of_address(address)
        if (o.namespace(address), key[1]) in live and not o.is_deleting(address):
            held.setdefault((o.namespace(address), key[1]), set()).add((o.spec(address)["pool"]["kind"],
                                                                        o.spec(address)["address"]))
    for address in store.inventory.of_kind(kinds.CAPI_ADDRESS):
        name = o.spec(address)["claimRef"]["name"]
        if (o.namespace(address), name) in live and not o.is_deleting(address):
            held.setdefault((o.namespace(address), name), set()).add((o.spec(address)["poolRef"]["kind"],
                                                                      o.spec(address)["address"]))
    return held


def _span(kind: str, ip: str) -> list[str]:
    """The IPs an address of a pool of ``kind`` holds: its IP, or every IP of its sub-prefix."""
    return [str(a) for a in netaddr.IPNetwork(f"{ip}/{LENGTHS[kind]}")] if kind in LENGTHS else [ip]


class GlobalPoolInTheWorld(LaggingWatch, RuleBasedStateMachine):
    # How long the controller leaves a lock or a naming to its maker (0: for good).
    SETTLE_SECONDS = 0

    @initialize(seed=st.integers(0, 10_000), order=st.permutations(sorted(POOLS)))
    def start(self, seed, order):
        self.rng = random.Random(seed)
        self.store = GlobalStore()
        self.cache = Inventory()
        self.cache.lock_settle_seconds = self.SETTLE_SECONDS
        self.delivered: list[tuple[str, dict]] = []
        self.by_hand: set = set()
        self.on_its_way: list = []
        created = {key: f"2024-01-01T00:0{i}:00Z" for i, key in enumerate(order)}
        pools = [pool(kind, ns, addresses, name, created[key]) for key, (kind, ns, name, addresses) in POOLS.items()]
        for obj in (*pools, cluster("cl", ns="ns-a"), cluster("cl", ns="ns-b")):
            self.store.load(obj)
        self.pending_listings = [(kind, *self.store.listing(kind)) for kind in served()]
        self.started = False

    # -- the world ----------------------------------------------------------------------

    @rule(name=st.sampled_from(["c0", "c1", "c2"]), ns=st.sampled_from(NAMESPACES),
          which=st.sampled_from(sorted(CLAIMED)), labelled=st.booleans())
    def user_creates_claim(self, name, ns, which, labelled):
        kind, pool_ns, pool_name, _ = CLAIMED[which]
        if pool_ns not in (None, ns) or self.store.inventory.get(kinds.CAPI_CLAIM, ns, name) is not None:
            return
        self.store.load(capi_claim(name, pool=pool_name, ns=ns, api_group=kind[0], kind=kind[1],
                                   labels={LABEL: "cl"} if labelled else None))

    @rule(k=st.integers(0, 50))
    def user_deletes_claim(self, k):
        claims = sorted((c for c in self.store.inventory.of_kind(kinds.CAPI_CLAIM) if not o.is_deleting(c)),
                        key=lambda c: (o.namespace(c), o.name(c)))
        if claims:
            claim = copy.deepcopy(claims[k % len(claims)])
            claim["metadata"]["deletionTimestamp"] = self.store.now
            self.store._store(claim)

    @rule(which=st.sampled_from(range(len(PREFIX_SETS))))
    def user_creates_or_edits_the_prefix_pool(self, which):
        stored = self.store.inventory.get(PREFIX, "ns-b", "p")
        if stored is None:
            self.store.load(prefix_pool(PREFIX_SETS[which]))
        elif o.spec(stored)["prefixes"] != PREFIX_SETS[which]:
            edited = copy.deepcopy(stored)
            edited["spec"]["prefixes"] = PREFIX_SETS[which]
            self.store._store(edited)

    @rule(which=st.sampled_from(sorted(GLOBAL_EDITS)), edit=st.sampled_from(range(2)))
    def user_edits_a_global_pool(self, which, edit):
        """A global pool's addresses edited to and fro: passes made before land after it."""
        kind, _, name, _ = POOLS[which]
        stored = self.store.inventory.get(kind, "", name)
        field = "prefixes" if kind == GLOBAL_PREFIX else "addresses"
        if stored is not None and not o.is_deleting(stored) and o.spec(stored)[field] != GLOBAL_EDITS[which][edit]:
            edited = copy.deepcopy(stored)
            edited["spec"][field] = GLOBAL_EDITS[which][edit]
            self.store._store(edited)

    @rule(which=st.sampled_from(["g", "h", "q"]))
    def user_deletes_or_recreates_a_global_pool(self, which):
        """A global pool deleted (its finalizer holds it while its claims have addresses), or created anew once
        gone: passes made before land after it."""
        kind, _, name, addresses = POOLS[which]
        stored = self.store.inventory.get(kind, "", name)
        if stored is None:
            self.store.load(pool(kind, None, addresses, name, self.store.now))
        elif not o.is_deleting(stored):
            deleted = copy.deepcopy(stored)
            deleted["metadata"]["deletionTimestamp"] = self.store.now
            self.store._store(deleted)

    @rule(ns=st.sampled_from(NAMESPACES), paused=st.booleans())
    def user_pauses_cluster_by_annotation(self, ns, paused):
        c = copy.deepcopy(self.store.inventory.get(kinds.CLUSTER, ns, "cl"))
        c["metadata"]["annotations"] = {kinds.PAUSED_ANNOTATION: ""} if paused else {}
        self.store._store(c)

    # -- the controller -------------------------------------------------------------------

    @precondition(lambda self: self.started)
    @rule(which=st.sampled_from(sorted(CLAIMED)))
    def a_pool_pass(self, which):
        kind, ns, name, _ = CLAIMED[which]
        if self.cache.get(kind, ns or "", name) is not None:
            self.run_pass(o.PoolKey(ns or "", name, kind))

    @precondition(lambda self: self.started)
    @rule(which=st.sampled_from(sorted(CLAIMED)))
    def a_pool_pass_is_planned(self, which):
        """A pass whose writes land later: other passes, and the user, act in between (a replica behind)."""
        kind, ns, name, _ = CLAIMED[which]
        if self.cache.get(kind, ns or "", name) is None:
            return
        self.on_its_way.append(reconcile(self.cache.snapshot(o.PoolKey(ns or "", name, kind), self.store.now,
                                                             self.rng)))

    @rule(k=st.integers(0, 10))
    def a_planned_pass_lands(self, k):
        if self.on_its_way:
            self.carry_out(self.on_its_way.pop(k % len(self.on_its_way)))

    # -- what must hold ---------------------------------------------------------------------

    @invariant()
    def no_ip_held_for_two_live_claims_of_the_global_pool_or_of_a_namespace(self):
        if not hasattr(self, "store"):
            return
        # Unlike the Go provider's independent pools: an IP is unique among the claims of the global pools of
        # every namespace, and among the claims of a namespace whatever their pools (overlaps are withheld by
        # the later pool).
        by_global_ip: dict[str, set] = {}
        by_ns_ip: dict[tuple[str, str], set] = {}
        for claim, held in live_holdings(self.store).items():
            for kind, ip in held:
                for each_ip in _span(kind, ip):
                    if kind in (GLOBAL[1], GLOBAL_PREFIX[1]):
                        by_global_ip.setdefault(each_ip, set()).add(claim)
                    by_ns_ip.setdefault((claim[0], each_ip), set()).add(claim)
        assert all(len(c) == 1 for c in by_global_ip.values()), by_global_ip
        assert all(len(c) == 1 for c in by_ns_ip.values()), by_ns_ip

    def teardown(self):
        if not hasattr(self, "store"):
            return
        while self.on_its_way:
            self.a_planned_pass_lands(0)
        self.drain()
        self.no_ip_held_for_two_live_claims_of_the_global_pool_or_of_a_namespace()
        held = live_holdings(self.store)
        claims = {(o.namespace(c), o.name(c)): c for c in self.store.inventory.of_kind(kinds.CAPI_CLAIM)}
        for key, claim in claims.items():
            paused = o.cluster_paused(self.store.inventory.get(kinds.CLUSTER, key[0], "cl"))
            if o.is_deleting(claim) or (paused and o.cluster_name_of(claim) == "cl"):
                continue
            ips = {ip for _, ip in held.get(key, ())}
            ready = o.condition(o.status(claim), "Ready")
            assert len(ips) <= 1, (key, ips)
            assert ready is not None and (ready["status"] == "True") == bool(ips), (key, ready, ips)
        for kind in (kinds.IPADDRESS, kinds.CAPI_ADDRESS):
            for address in self.store.inventory.of_kind(kind):
                name = (o.claim_of_address(address) or ("", ""))[1] if kind == kinds.IPADDRESS \
                    else o.spec(address)["claimRef"]["name"]
                # A global pool's locks live in the lock namespace; their spec.claim names the claim's own.
                ns = (o.spec(address).get("claim") or {}).get("namespace") or o.namespace(address) \
                    if kind == kinds.IPADDRESS else o.namespace(address)
                claim = claims.get((ns, name))
                paused = o.cluster_paused(self.store.inventory.get(kinds.CLUSTER, ns, "cl"))
                assert claim is not None or paused, f"{kind[1]} {o.namespace(address)}/{o.name(address)} leaked"


GlobalPoolInTheWorld.TestCase.settings = settings(max_examples=80, stateful_step_count=40, deadline=None,
                                                  suppress_health_check=[HealthCheck.too_slow])
test_a_global_pool_in_the_world = GlobalPoolInTheWorld.TestCase


def live_bindings(store) -> dict[tuple, set]:
    """(namespace, name) of each live claim -> (pool kind, IP) of the live Cluster API IPAddress its status names."""
    bound: dict[tuple, set] = {}
    for claim in store.inventory.of_kind(kinds.CAPI_CLAIM):
        ref = o.status(claim).get("addressRef") or {}
        address = store.inventory.get(kinds.CAPI_ADDRESS, o.namespace(claim), str(ref.get("name") or ""))
        if o.is_deleting(claim) or address is None or o.is_deleting(address) \
                or o.spec(address)["claimRef"]["name"] != o.name(claim):
            continue
        bound[(o.namespace(claim), o.name(claim))] = {(o.spec(address)["poolRef"]["kind"], o.spec(address)["address"])}
    return bound


class GlobalPoolInTheWorldWithPassesLandingInPart(GlobalPoolInTheWorld):
    """The world above with the time a lock or a naming is left to its maker, the clock moving on by steps, passes
    planned by a replica whose clock is behind, and each step of a pass on its way landing in part (its first
    writes now, the rest later: a slow replica, a lagging connection). The rest of a pass may land after the
    claim was written by another pool's allocation that took what it names: its objects may then stand, never
    bound, until the claim's next pass lets them go. So after every step no IP is bound (a claim's status naming
    its address) to two live claims of the global pools or of a namespace; at the fixed point no address object
    holds one for two (``teardown``)."""

    SETTLE_SECONDS = 10

    def no_ip_held_for_two_live_claims_of_the_global_pool_or_of_a_namespace(self):
        """Checked at the fixed point only (``teardown``): the objects of a refused pass may stand until then."""
        self.no_ip_twice(live_holdings(self.store))

    @invariant()
    def no_ip_bound_to_two_live_claims_of_the_global_pool_or_of_a_namespace(self):
        if hasattr(self, "store"):
            self.no_ip_twice(live_bindings(self.store))

    def no_ip_twice(self, held):
        by_global_ip: dict[str, set] = {}
        by_ns_ip: dict[tuple[str, str], set] = {}
        for claim, spans in held.items():
            for kind, ip in spans:
                for each_ip in _span(kind, ip):
                    if kind in (GLOBAL[1], GLOBAL_PREFIX[1]):
                        by_global_ip.setdefault(each_ip, set()).add(claim)
                    by_ns_ip.setdefault((claim[0], each_ip), set()).add(claim)
        assert all(len(c) == 1 for c in by_global_ip.values()), by_global_ip
        assert all(len(c) == 1 for c in by_ns_ip.values()), by_ns_ip

    @rule(how=st.sampled_from(["deleted", "edited", "back"]))
    def user_deletes_edits_or_restores_the_namespaced_pool(self, how):
        """The namespaced pool deleted (gone once no address holds it), edited off its addresses, or back as it was:
        a pass of it made before may land after a global pool handed its IPs to a claim of its namespace."""
        kind, ns, name, addresses = POOLS["n"]
        stored = self.store.inventory.get(kind, ns, name)
        if stored is None:
            if how == "back":
                self.store.load(pool(kind, ns, addresses, name, self.store.now))
            return
        changed = copy.deepcopy(stored)
        if how == "deleted" and not o.is_deleting(stored):
            changed["metadata"]["deletionTimestamp"] = self.store.now
        elif how != "deleted":
            changed["spec"]["addresses"] = addresses if how == "back" else ["fd00::100"]
        self.store._store(changed)

    @rule(seconds=st.integers(1, 40))
    def time_passes(self, seconds):
        self.store.now = o.format_time(o.parse_time(self.store.now) + datetime.timedelta(seconds=seconds))

    @precondition(lambda self: self.started)
    @rule(which=st.sampled_from(sorted(CLAIMED)), behind=st.sampled_from([30, 60]))
    def a_pool_pass_is_planned_by_a_replica_whose_clock_is_behind(self, which, behind):
        kind, ns, name, _ = CLAIMED[which]
        if self.cache.get(kind, ns or "", name) is None:
            return
        now = o.format_time(o.parse_time(self.store.now) - datetime.timedelta(seconds=behind))
        self.on_its_way.append(reconcile(self.cache.snapshot(o.PoolKey(ns or "", name, kind), now, self.rng)))

    @rule(k=st.integers(0, 10), cut=st.integers(1, 3))
    def a_planned_pass_lands_in_part(self, k, cut):
        """The first ``cut`` writes of each step of a pass on its way land; the rest of each stays on its way."""
        if not self.on_its_way:
            return
        plan, rest = self.on_its_way.pop(k % len(self.on_its_way)), Plan()
        for step in plan.steps:
            versions = self.step_versions().pop(id(step), None) or StepVersions()
            if self.land(step.actions[:cut], versions) and len(step.actions) > cut:
                left = Step(step.subject, step.actions[cut:], step.about)
                self.step_versions()[id(left)] = versions
                rest.steps.append(left)
        if rest.steps:
            self.on_its_way.append(rest)


GlobalPoolInTheWorldWithPassesLandingInPart.TestCase.settings = settings(
    max_examples=80, stateful_step_count=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
test_a_global_pool_in_the_world_with_passes_landing_in_part = GlobalPoolInTheWorldWithPassesLandingInPart.TestCase


def test_a_namespaced_pass_whose_lock_lands_after_a_global_pool_took_its_settled_guard_leaves_its_ip_to_one_claim():
    """One order of the world above: claim c0's pass of the namespaced pool lands its naming and guard of fd00::1
    only; the pool is edited off fd00::1; past the settle time a global pool's allocation lets the guard and the
    naming go (writing c0) and hands fd00::1 to c1 of the same namespace; the rest of c0's pass (its lock and
    address) lands. c0 takes up none of it: at the fixed point fd00::1 is c1's alone and c0 has its pool's IP."""
    world = GlobalPoolInTheWorldWithPassesLandingInPart()
    world.start(seed=0, order=sorted(POOLS))
    while world.pending_listings:
        world.a_list_is_filed()

    def delivered():
        for stream in world.store.streams.values():
            while stream:
                world.file(*stream.popleft())

    world.user_creates_claim(name="c0", ns="ns-a", which="n", labelled=False)
    delivered()
    world.a_pool_pass_is_planned(which="n")
    world.a_planned_pass_lands_in_part(k=0, cut=2)  # the pool's first writes, and c0's naming and guard
    delivered()
    world.user_deletes_edits_or_restores_the_namespaced_pool(how="edited")
    world.time_passes(seconds=31)
    world.user_creates_claim(name="c1", ns="ns-a", which="g", labelled=False)
    delivered()
    for _ in range(3):  # its finalizer and status first, then c1 (the claims of the namespace written first)
        world.a_pool_pass(which="g")
        delivered()
    assert live_bindings(world.store)[("ns-a", "c1")] == {(GLOBAL[1], "fd00::1")}
    while world.on_its_way:
        world.a_planned_pass_lands_in_part(k=0, cut=9)
    assert (NAMESPACED[1], "fd00::1") in live_holdings(world.store)[("ns-a", "c0")]  # the rest of c0's pass landed
    world.no_ip_bound_to_two_live_claims_of_the_global_pool_or_of_a_namespace()
    world.teardown()
    assert live_bindings(world.store)[("ns-a", "c0")] == {(NAMESPACED[1], "fd00::100")}


def _lands(api, actions: list, versions: StepVersions) -> None:
    """``actions`` of one step land in order until one is refused, each expecting the version the step's writes
    before it wrote (``StepVersions``, as the controller runs a step), however late they land."""
    for action in actions:
        action = versions.current(action)
        try:
            api.do(action)
        except Refused:
            return
        target = getattr(action, "target", None)
        if target is not None:
            obj = api.inventory.get(target.group_kind, target.namespace, target.name)
            versions.wrote(action, obj and obj["metadata"].get("resourceVersion"))


@pytest.mark.parametrize("local", [NAMESPACED, kinds.IPPOOL])
def test_a_global_pools_pass_landing_after_its_guard_settled_never_binds_what_a_namespaced_pool_handed_out(local):
    """A global pool's pass on its way past the settle time of its guard: the namespaced pool's allocation that
    takes the IP must refuse it (as a global pool's write of a namespaced claim refuses that claim's pass)."""
    if local == kinds.IPPOOL:
        namespaced = {"apiVersion": kinds.METAL3_API_VERSION, "kind": "IPPool",
                      "metadata": {"name": "n", "namespace": NS},
                      "spec": {"namePrefix": "n", "pools": [{"start": "fd00::5", "end": "fd00::5"}], "prefix": 64}}
        claim_z = {"apiVersion": gi.CAPI_API_VERSION, "kind": "IPAddressClaim", "metadata": {"name": "z",
                   "namespace": NS}, "spec": {"poolRef": {"apiGroup": kinds.METAL3_GROUP, "kind": "IPPool",
                                                          "name": "n"}}}
    else:
        namespaced = gi.ip_pool("n", namespace=NS, addresses=["fd00::5"], prefix=64)
        claim_z = gi.claim("z", NS, NAMESPACED[1], "n")
    api = converged_with_lock_namespace(namespaced, gi.ip_pool("g", addresses=["fd00::1-fd00::3"], prefix=64))
    api.inventory.lock_settle_seconds = 30
    api.load(gi.claim("d", NS, GLOBAL[1], "g"))
    for _ in range(3):  # its finalizer and status first
        plan = reconcile(api.inventory.snapshot(o.PoolKey("", "g", GLOBAL), api.now))
        (step,) = [s for s in plan.steps if s.subject.endswith(f"{NS}/d")]
        if any(isinstance(a, Create) for a in step.actions):
            break
        api.apply(plan)
    versions = StepVersions()
    _lands(api, step.actions[:2], versions)  # d's naming and guard of fd00::1; the rest is delayed
    assert o.annotations(get(api, kinds.CAPI_CLAIM, "d"))[kinds.ALLOCATING_ANNOTATION] == "fd00::1"
    changed = copy.deepcopy(get(api, local, "n"))
    if local == kinds.IPPOOL:
        changed["spec"]["pools"] = [{"start": "fd00::1", "end": "fd00::1"}]
    else:
        changed["spec"]["addresses"] = ["fd00::1"]
    api._store(changed)
    api.now = "2024-01-01T00:00:31Z"  # past the guard's settle time
    api.load(claim_z)
    for _ in range(3):
        api.apply(reconcile(api.inventory.snapshot(o.PoolKey(NS, "n", local), api.now)))
    _lands(api, step.actions[2:], versions)  # the rest of d's pass lands
    converge(api, random.Random(0))
    spans = held_spans(api)
    assert all(len(claims) == 1 for claims in spans.values()), spans


def test_a_global_pools_pass_made_before_its_pool_was_edited_off_the_ip_leaves_its_claim_served():
    """A pass made from a view that has not seen its pool edited off the IP lands whole (its status write expects
    the version its naming wrote): the claim is bound to what it was given, as a pool edit leaves bound claims."""
    world = GlobalPoolInTheWorld()
    world.start(seed=0, order=["g", "h", "n", "q"])
    for _ in range(12):
        world.a_list_is_filed()
    world.an_event_arrives(k=0)
    world.user_edits_a_global_pool(edit=1, which="g")
    world.user_creates_claim(labelled=False, name="c0", ns="ns-b", which="g")
    world.an_event_arrives(k=2)
    world.a_pool_pass(which="g")
    world.teardown()


def _z_bound_to_fd00_1_through_an_edit_of_n(api) -> None:
    """IPPool n edited to fd00::1 (the global pool's address), IPClaim z of n bound to it, n edited back: z keeps
    what it is bound to."""
    changed = copy.deepcopy(get(api, kinds.IPPOOL, "n"))
    changed["spec"]["pools"] = [{"start": "fd00::1", "end": "fd00::1"}]
    api._store(changed)
    api.load(ipclaim("z", pool="n"))
    for _ in range(3):
        api.apply(reconcile(api.inventory.snapshot(o.PoolKey(NS, "n", kinds.IPPOOL), api.now)))
    assert live_bindings_of(api) == {"fd00::1": {(NS, "z")}}
    back = copy.deepcopy(get(api, kinds.IPPOOL, "n"))
    back["spec"]["pools"] = [{"start": "fd00::5", "end": "fd00::5"}]
    api._store(back)


def _a_guard_let_go_and_its_ip_bound_to_z():
    """Global pool g's pass for claim d lands its naming and guard of fd00::1 only; past the guard's settle time
    IPPool n, edited onto fd00::1, lets that guard go and binds fd00::1 to IPClaim z, then is edited back. Returns
    the API and a replica's view of IPClaims and addresses behind since d's pass (its pools and IPAddressClaims
    current)."""
    n = ippool("n", pools=[{"start": "fd00::5", "end": "fd00::5"}], prefix=64)
    api = converged_with_lock_namespace(n, gi.ip_pool("g", addresses=["fd00::1"], prefix=64))
    api.inventory.lock_settle_seconds = 30
    api.load(gi.claim("d", NS, GLOBAL[1], "g"))
    for _ in range(3):  # its finalizer and status first
        plan = reconcile(api.inventory.snapshot(o.PoolKey("", "g", GLOBAL), api.now))
        (step,) = [s for s in plan.steps if s.subject.endswith(f"{NS}/d")]
        if any(isinstance(a, Create) for a in step.actions):
            break
        api.apply(plan)
    _lands(api, step.actions[:2], StepVersions())  # d's naming and guard of fd00::1; the rest never lands
    lagging = copy.deepcopy(api.inventory)  # a replica's view of IPClaims and addresses, from here on behind
    api.now = "2024-01-01T00:00:31Z"  # past the guard's settle time
    _z_bound_to_fd00_1_through_an_edit_of_n(api)
    for kind, name in ((kinds.IPPOOL, "n"), (kinds.CAPI_CLAIM, "d")):  # its pools' and IPAddressClaims' watches
        lagging.upsert(copy.deepcopy(get(api, kind, name)))  # are up to date
    return api, lagging


def test_a_global_pass_from_a_view_still_holding_its_guard_let_go_never_takes_back_what_a_namespaced_pool_handed_out():
    api, lagging = _a_guard_let_go_and_its_ip_bound_to_z()
    assert kinds.LET_GO_ANNOTATION in o.annotations(get(api, kinds.CAPI_CLAIM, "d"))
    plan = reconcile(lagging.snapshot(o.PoolKey("", "g", GLOBAL), api.now))
    for step in plan.steps:
        _lands(api, step.actions, StepVersions())
    assert_no_ip_twice(api)


def test_a_global_pass_taking_back_its_let_go_span_that_lands_only_its_naming_leaves_a_view_behind_refused():
    """The order above, the taking-back pass stopped after its first write (a lost leadership, a dropped
    connection): the let-go annotation is gone from d, and the view still behind must not take the stale guard
    for d's own."""
    api, lagging = _a_guard_let_go_and_its_ip_bound_to_z()
    plan = reconcile(lagging.snapshot(o.PoolKey("", "g", GLOBAL), api.now))
    (step,) = [s for s in plan.steps if s.subject.endswith(f"{NS}/d")]
    assert isinstance(step.actions[0], SetMetadata)  # d's naming of fd00::1, its let-go annotation removed
    _lands(api, step.actions[:1], StepVersions())  # that write only: the pass stops there
    assert kinds.LET_GO_ANNOTATION not in o.annotations(get(api, kinds.CAPI_CLAIM, "d"))
    lagging.upsert(copy.deepcopy(get(api, kinds.CAPI_CLAIM, "d")))  # the API server's answer, filed at once
    for _ in range(2):  # the view still behind on IPClaims and IPAddresses
        plan = reconcile(lagging.snapshot(o.PoolKey("", "g", GLOBAL), api.now))
        for step in plan.steps:
            _lands(api, step.actions, StepVersions())
        for step in plan.steps:
            if step.about is not None and step.about.group_kind == kinds.CAPI_CLAIM:
                lagging.upsert(copy.deepcopy(get(api, kinds.CAPI_CLAIM, step.about.name)))
    assert_no_ip_twice(api)


def test_a_global_pass_refused_at_its_guard_made_anew_never_deletes_the_guard_it_read_again_from_a_view_behind():
    api, lagging = _a_guard_let_go_and_its_ip_bound_to_z()

    def carried_out(action) -> bool:
        """One write, its answer filed into the view at once; a refused one read again (as the controller does)."""
        target = getattr(action, "target", None) or o.ref(action.obj)
        try:
            api.do(action)
        except Refused:
            found = api.inventory.get(target.group_kind, target.namespace, target.name)
            if found is not None:
                lagging.upsert(copy.deepcopy(found))
            return False
        found = api.inventory.get(target.group_kind, target.namespace, target.name)
        if found is not None:
            lagging.upsert(copy.deepcopy(found))
        else:
            lagging.forget(target.group_kind, target.namespace, target.name)
        return True

    refused = []
    for _ in range(3):  # the view still behind on IPClaims and IPAddresses
        for step in reconcile(lagging.snapshot(o.PoolKey("", "g", GLOBAL), api.now)).steps:
            versions = StepVersions()
            for action in step.actions:
                action = versions.current(action)
                if not carried_out(action):
                    refused.append(action)
                    break
                target = getattr(action, "target", None)
                if target is not None:
                    stored = api.inventory.get(target.group_kind, target.namespace, target.name)
                    versions.wrote(action, stored and stored["metadata"].get("resourceVersion"))
    assert any(isinstance(action, Delete) for action in refused)  # the old incarnation was replaced: refused
    assert_no_ip_twice(api)


@pytest.mark.parametrize("seen", ["nothing", "an-older-incarnation"])
def test_a_view_holding_a_guard_but_neither_its_claim_nor_its_lock_never_deletes_it(seen):
    """Whatever brought a guard into a view before its claim and that claim's lock (a watch of IPClaims and
    IPAddresses behind, the guard read again after a refused write), the view must not take it for one left over:
    IPPool n's IPClaim z holds fd00::1 under its guard; a replica whose view holds that guard but not IPClaim z
    (or only an older incarnation of z, another uid) nor z's lock makes global pool g's passes for claim d."""
    n = ippool("n", pools=[{"start": "fd00::5", "end": "fd00::5"}], prefix=64)
    api = converged_with_lock_namespace(n, gi.ip_pool("g", addresses=["fd00::1"], prefix=64))
    _z_bound_to_fd00_1_through_an_edit_of_n(api)
    (guard,) = [a for a in api.inventory.of_kind(kinds.IPADDRESS) if o.is_guard(a)]
    api.load(gi.claim("d", NS, GLOBAL[1], "g"))
    lagging = copy.deepcopy(api.inventory)
    for address in list(lagging.of_kind(kinds.IPADDRESS)):  # z's lock not seen yet
        if not o.is_guard(address):
            lagging.forget(kinds.IPADDRESS, o.namespace(address), o.name(address))
    lagging.forget(kinds.IPCLAIM, NS, "z")
    if seen == "an-older-incarnation":
        older = ipclaim("z", pool="n")
        older["metadata"]["uid"] = "an-older-incarnation-of-z"
        lagging.upsert(older)
    for _ in range(4):
        for step in reconcile(lagging.snapshot(o.PoolKey("", "g", GLOBAL), api.now)).steps:
            _lands(api, step.actions, StepVersions())
        lagging.upsert(copy.deepcopy(get(api, kinds.CAPI_CLAIM, "d")))  # d's writes, filed at once
    assert o.meta(get(api, kinds.IPADDRESS, o.name(guard))).get("uid") == o.meta(guard).get("uid")
    assert not o.is_deleting(get(api, kinds.IPADDRESS, o.name(guard)))
    assert_no_ip_twice(api)


def _caught_up_but_on_claims(view, api, claim: str, unseen: str | None = None) -> None:
    """``view`` caught up on pools g and n, on IPAddressClaim ``claim`` and on the guards and locks (but the lock
    named ``unseen``); behind on every other claim and on Cluster API IPAddresses."""
    for kind, ns, name in ((GLOBAL, "", "g"), (NAMESPACED, NS, "n"), (kinds.CAPI_CLAIM, NS, claim)):
        view.upsert(copy.deepcopy(get(api, kind, name, ns)))
    for address in list(view.of_kind(kinds.IPADDRESS)):
        if api.inventory.get(kinds.IPADDRESS, o.namespace(address), o.name(address)) is None:
            view.forget(kinds.IPADDRESS, o.namespace(address), o.name(address))
    for address in api.inventory.of_kind(kinds.IPADDRESS):
        if o.name(address) != unseen:
            view.upsert(copy.deepcopy(address))


def test_a_view_behind_on_a_global_pools_claim_given_another_ip_never_deletes_that_claims_guard_of_it():
    """Global pool g's claim c is bound to fd00::1; the user drops fd00::1 from g and deletes c's address objects by
    hand (its lock and its Cluster API IPAddress, finalizers stripped: a botched cleanup or restore), and c is given
    fd00::2 (``kept``: its IP is not in its pool any more). A replica whose watches of IPAddressClaims and Cluster API
    IPAddresses are behind since c was bound to fd00::1 (its pools', guards' and locks' current) then serves
    InClusterIPPool n, edited onto fd00::2, and n's new claim z."""
    api = converged_with_lock_namespace(gi.ip_pool("n", namespace=NS, addresses=["fd00::9"], prefix=64),
                                        gi.ip_pool("g", addresses=["fd00::1-fd00::2"], prefix=64),
                                        gi.claim("c", NS, GLOBAL[1], "g"))
    view = copy.deepcopy(api.inventory)  # its IPAddressClaims and Cluster API IPAddresses stay as they are here
    edited = copy.deepcopy(get(api, GLOBAL, "g", ""))
    edited["spec"]["addresses"] = ["fd00::2"]
    api._store(edited)
    for address in [*api.inventory.of_kind(kinds.IPADDRESS), *api.inventory.of_kind(kinds.CAPI_ADDRESS)]:
        if not o.is_guard(address):
            api.inventory.remove(address)  # deleted by hand, finalizers stripped
    converge(api, random.Random(0))
    assert live_bindings_of(api) == {"fd00::2": {(NS, "c")}}
    edited = copy.deepcopy(get(api, NAMESPACED, "n"))
    edited["spec"]["addresses"] = ["fd00::2"]
    api._store(edited)
    api.load(gi.claim("z", NS, NAMESPACED[1], "n"))

    def caught_up():  # the pools, z, and the guards and locks as they are
        _caught_up_but_on_claims(view, api, "z")

    for _ in range(3):
        caught_up()
        for step in reconcile(view.snapshot(o.PoolKey(NS, "n", NAMESPACED), api.now)).steps:
            _lands(api, step.actions, StepVersions())
    assert_no_ip_twice(api)


def test_a_view_behind_on_a_namespaced_pools_claim_given_another_ip_never_deletes_that_claims_guard_of_it():
    """InClusterIPPool n's claim z is bound to fd00::1; the user drops fd00::1 from n and deletes z's address objects
    by hand (its lock and its Cluster API IPAddress), z is given fd00::2, and n is edited off it (z keeps it). A
    replica whose watches of IPAddressClaims and Cluster API IPAddresses are behind since z was bound to fd00::1, and
    whose watch of locks has shown z's guard of fd00::2 but not yet the lock made right after it, serves global pool
    g (fd00::2 and fd00::9) and its new claim d in z's namespace."""
    api = converged_with_lock_namespace(gi.ip_pool("n", namespace=NS, addresses=["fd00::1-fd00::2"], prefix=64),
                                        gi.ip_pool("g", addresses=["fd00::2", "fd00::9"], prefix=64),
                                        gi.claim("z", NS, NAMESPACED[1], "n"), gi.claim("c", NS, GLOBAL[1], "g"))
    view = copy.deepcopy(api.inventory)  # its IPAddressClaims and Cluster API IPAddresses stay as they are here
    for addresses in (["fd00::2"], ["fd00::7"]):  # z given fd00::2, then n edited off it
        edited = copy.deepcopy(get(api, NAMESPACED, "n"))
        edited["spec"]["addresses"] = addresses
        api._store(edited)
        for address in [*api.inventory.of_kind(kinds.IPADDRESS), *api.inventory.of_kind(kinds.CAPI_ADDRESS)]:
            if addresses == ["fd00::2"] and not o.is_guard(address) \
                    and "z" in (o.name(address), (o.spec(address).get("claim") or {}).get("name")):
                api.inventory.remove(address)  # deleted by hand, finalizers stripped
        converge(api, random.Random(0))
    assert live_bindings_of(api) == {"fd00::2": {(NS, "z")}, "fd00::9": {(NS, "c")}}
    lock = o.name(next(a for a in api.inventory.of_kind(kinds.IPADDRESS)
                       if not o.is_guard(a) and o.spec(a).get("address") == "fd00::2"))
    api.load(gi.claim("d", NS, GLOBAL[1], "g"))

    def caught_up():  # the pools, d, and the guards and locks as they are, but z's lock of fd00::2
        _caught_up_but_on_claims(view, api, "d", unseen=lock)

    for _ in range(3):
        caught_up()
        for step in reconcile(view.snapshot(o.PoolKey("", "g", GLOBAL), api.now)).steps:
            _lands(api, step.actions, StepVersions())
    assert_no_ip_twice(api)
