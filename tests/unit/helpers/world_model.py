"""The controller against a model of the world it lives in: an API store apart from its cache, fed by lagging per-
kind watch streams, and controllers acting in it."""

from __future__ import annotations

from collections import deque
import copy
import random

from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, initialize, invariant, precondition, rule

from metal3_ipam.core import kinds
from metal3_ipam.core import objects as o
from metal3_ipam.core.actions import Create, Delete, SetStatus, StepVersions
from metal3_ipam.core.inventory import Inventory, served
from metal3_ipam.core.kept import own_ip
from metal3_ipam.core.naming import ip_text
from metal3_ipam.core.reconcile import reconcile
from metal3_ipam.memory import MemoryApi, Refused

from go_ipam_objects import go_pool, go_served_capi_claim, go_served_ipclaim
from ipam_objects import NS, capi_claim, cluster, ipclaim, ippool
import netaddr


CLAIM_KINDS = (kinds.IPCLAIM, kinds.CAPI_CLAIM)


class Store(MemoryApi):
    """The API server: every stored change becomes a watch event on its kind's stream."""

    def __init__(self) -> None:
        super().__init__(now="2024-01-01T00:00:00Z")
        self.streams: dict[tuple[str, str], deque] = {kind: deque() for kind in served()}

    def load(self, obj: dict) -> None:
        super().load(obj)
        stored = self.inventory.get(kinds.kind_of(obj), o.namespace(obj) or "default", o.name(obj))
        self.streams[kinds.kind_of(obj)].append(("ADDED", copy.deepcopy(stored)))

    def _store(self, obj: dict) -> None:
        super()._store(obj)
        meta = obj["metadata"]
        gone = meta.get("deletionTimestamp") and not meta.get("finalizers")
        self.streams[kinds.kind_of(obj)].append(("DELETED" if gone else "MODIFIED", copy.deepcopy(obj)))

    def listing(self, kind) -> tuple[list[dict], str]:
        return [copy.deepcopy(x) for x in self.inventory.of_kind(kind)], str(self._version)


def bindings(store: Store) -> dict[tuple[str, str], set[int]]:
    """Live claim (kind, name) -> the IPs that live addresses of either API hold for it."""
    live = {(c["kind"], o.name(c)) for kind in CLAIM_KINDS for c in store.inventory.of_kind(kind)
            if not o.is_deleting(c)}
    held: dict[tuple[str, str], set[int]] = {}
    for kind, claim_of in ((kinds.IPADDRESS, o.claim_of_address), (kinds.CAPI_ADDRESS, o.claim_of_capi_address)):
        for address in store.inventory.of_kind(kind):
            key = claim_of(address)
            if key in live and not o.is_deleting(address):
                held.setdefault(key, set()).add(int(netaddr.IPAddress(o.spec(address)["address"])))
    return held


def named_by_status(claim: dict) -> set[tuple[str, str]]:
    """What a claim's status says it holds: the address it names, and the IP its Ready condition names."""
    status = o.status(claim)
    named = set()
    for field in ("address", "addressRef"):
        ref = status.get(field)
        if isinstance(ref, dict) and ref.get("name"):
            named.add((field, str(ref["name"])))
    ready = o.condition(status, "Ready")
    message = str(ready.get("message", "")) if ready else ""
    if ready and ready.get("status") == "True" and message.startswith("bound to "):
        named.add(("ip", ip_text(netaddr.IPAddress(message[len("bound to "):]))))
    return named


def ident(claim: dict) -> tuple[str, str, str]:
    return (claim["kind"], o.name(claim), o.meta(claim)["uid"])


def go_state(rng: random.Random) -> list[dict]:
    """A pool served by the Go IPAM: IPClaims with Metal3 addresses, IPAddressClaims with Cluster API ones only."""
    pool = go_pool("gopool", NS, {"namePrefix": "gp", "pools": [{"start": "10.0.0.1", "end": "10.0.0.8"}]})
    objs = [pool]
    for i, ip in enumerate(rng.sample(range(1, 9), 3)):
        served = go_served_capi_claim if i % 2 else go_served_ipclaim
        objs += served(f"go-{i}", pool, f"10.0.0.{ip}")
    return objs


class LaggingWatch:
    """The controller's cache (``cache``) fed from a ``Store`` (``store``) as watches and LISTs feed it: one
    FIFO stream per kind, events delivered again, LISTs taken at one moment and filed at a later one
    (``started`` once the start-up ones are: ``pending_listings``). ``delivered`` keeps what came; ``by_hand``
    the claims whose status the user wrote last."""

    @rule(k=st.integers(0, 10))
    def an_event_arrives(self, k):
        streams = [s for s in self.store.streams.values() if s]
        if not streams:
            return
        kind, obj = streams[k % len(streams)].popleft()
        self.file(kind, obj)
        self.delivered.append((kind, obj))

    @rule(k=st.integers(0, 1000))
    def an_old_event_arrives_again(self, k):
        if self.delivered:
            self.file(*self.delivered[k % len(self.delivered)])

    @rule(kind=st.sampled_from(served()))
    def a_list_is_taken(self, kind):
        self.pending_listings.append((kind, *self.store.listing(kind)))

    @rule()
    def a_list_is_filed(self):
        if self.pending_listings:
            kind, items, version = self.pending_listings.pop(0)
            self.cache.settle_listing(kind, None, items, version)
            if not self.pending_listings:
                self.started = True

    def file(self, kind, obj):
        if kind == "DELETED":
            self.cache.remove(copy.deepcopy(obj))
        else:
            self.cache.upsert(copy.deepcopy(obj))

    # -- the controller: a pass's writes done on the store, their answers filed at once ----------

    def run_pass(self, pool_key) -> bool:
        plan = reconcile(self.cache.snapshot(pool_key, self.store.now, self.rng))
        self.carry_out(plan)
        return bool(plan)

    def carry_out(self, plan) -> None:
        """A pass's writes, done on the store in order; a refused one ends its step. A step the rest of which was
        left on its way (``step_versions``) goes on from the versions its writes so far left."""
        for step in plan.steps:
            self.land(step.actions, self.step_versions().pop(id(step), None) or StepVersions())

    def step_versions(self) -> dict[int, StepVersions]:
        """The versions written so far by each step (by ``id``) whose rest is still on its way."""
        return self.__dict__.setdefault("_step_versions", {})

    def land(self, actions, versions: StepVersions) -> bool:
        """Writes of one step, done on the store in order until one is refused (then False). Each expects the
        version the step's writes before it to that object left (``versions``), as the controller runs a step."""
        for action in actions:
            action = versions.current(action)
            try:
                self.store.do(action)
            except Refused:
                if isinstance(action, Create):
                    # The writer reads the name that is taken into its cache.
                    obj = action.obj
                    taken = self.store.inventory.get(kinds.kind_of(obj), o.namespace(obj), o.name(obj))
                    if taken is not None:
                        self.cache.upsert(copy.deepcopy(taken))
                return False
            self.answer(action)
            target = getattr(action, "target", None)
            if target is not None:
                stored = self.store.inventory.get(target.group_kind, target.namespace, target.name)
                versions.wrote(action, stored and stored["metadata"].get("resourceVersion"))
        return True

    def answer(self, action):
        """The API server's answer goes into the cache at once, as the REST writer does."""
        target = o.ref(action.obj) if isinstance(action, Create) else getattr(action, "target", None)
        if target is None:
            return
        stored = self.store.inventory.get(target.group_kind, target.namespace, target.name)
        if stored is not None and isinstance(action, SetStatus) and kinds.kind_of(stored) in CLAIM_KINDS:
            self.by_hand.discard(ident(stored))
        if stored is not None:
            self.cache.upsert(copy.deepcopy(stored))
        elif isinstance(action, Delete) or True:
            self.cache.forget(target.group_kind, target.namespace, target.name)

    def drain(self) -> None:
        """Every event delivered, every listing filed, then the controller to a fixed point."""
        while self.pending_listings:
            self.a_list_is_filed()
        for _ in range(200):
            for stream in self.store.streams.values():
                while stream:
                    self.file(*stream.popleft())
            busy = False
            for pool_key in self.cache.pool_keys():
                busy |= self.run_pass(pool_key)
            if not busy and not any(self.store.streams.values()):
                break
        else:
            raise AssertionError("no fixed point")


class ControllerInTheWorld(LaggingWatch, RuleBasedStateMachine):
    @initialize(seed=st.integers(0, 10_000), shared_prefix=st.booleans(), with_go=st.booleans())
    def start(self, seed, shared_prefix, with_go):
        self.rng = random.Random(seed)
        self.store = Store()
        self.cache = Inventory()
        self.delivered: list[tuple[str, dict]] = []
        self.pending_listings: list[tuple[tuple[str, str], list[dict], str]] = []
        self.bound_ip: dict[tuple[str, str, str], int] = {}  # (kind, name, uid) -> IP once bound
        self.by_hand: set[tuple[str, str, str]] = set()  # claims whose status the user wrote last
        self.counter = 0
        objs = [cluster("c1")]
        # Pools overlapping on 10.0.0.5-10.0.0.8: one with its own prefix, one sharing "gp" or not.
        objs.append(ippool("pa", namePrefix="pa", pools=[{"start": "10.0.0.5", "end": "10.0.0.12"}]))
        objs.append(ippool("pb", namePrefix="gp" if shared_prefix else "pb",
                           pools=[{"start": "10.0.0.3", "end": "10.0.0.6"}], clusterName="c1"))
        if with_go:
            objs += go_state(self.rng)
        for obj in objs:
            self.store.load(obj)
        # The controller starts: a LIST of every kind, filed after some watch events.
        self.pending_listings = [(kind, *self.store.listing(kind)) for kind in served()]
        self.started = False

    # -- the world ----------------------------------------------------------------------

    @rule(pool=st.sampled_from(["pa", "pb", "gopool"]), capi=st.booleans(), paused_cluster=st.booleans())
    def user_creates_claim(self, pool, capi, paused_cluster):
        self.counter += 1
        labels = {kinds.CLUSTER_NAME_LABEL: "c1"} if paused_cluster else None
        make = capi_claim if capi else ipclaim
        self.store.load(make(f"c{self.counter % 7}", pool=pool, labels=labels)
                        if self.store.inventory.get(kinds.CAPI_CLAIM if capi else kinds.IPCLAIM, NS,
                                                    f"c{self.counter % 7}") is None
                        else make(f"n{self.counter}", pool=pool, labels=labels))

    @rule(k=st.integers(0, 50))
    def user_deletes_claim(self, k):
        claims = sorted((c for kind in CLAIM_KINDS for c in self.store.inventory.of_kind(kind)
                         if not o.is_deleting(c)), key=lambda c: (c["kind"], o.name(c)))
        if not claims:
            return
        claim = copy.deepcopy(claims[k % len(claims)])
        claim["metadata"]["deletionTimestamp"] = self.store.now
        self.store._store(claim)

    @rule(paused=st.booleans())
    def user_pauses_cluster(self, paused):
        c = copy.deepcopy(self.store.inventory.get(kinds.CLUSTER, NS, "c1"))
        c["spec"]["paused"] = paused
        self.store._store(c)

    @rule(picks=st.lists(st.integers(0, 50), min_size=1, max_size=4), apis=st.sampled_from(["metal3", "capi", "both"]),
          a_claims=st.booleans(), seen_deleting=st.booleans())
    def user_deletes_address_objects(self, picks, apis, a_claims, seen_deleting):
        """Address objects deleted and their finalizers stripped, one after the other in the order picked:
        any of them, or the objects of one claim (its Metal3 lock and its Cluster API address)."""
        group_kinds = {"metal3": (kinds.IPADDRESS,), "capi": (kinds.CAPI_ADDRESS,),
                       "both": (kinds.IPADDRESS, kinds.CAPI_ADDRESS)}[apis]
        addresses = sorted((a for kind in group_kinds for a in self.store.inventory.of_kind(kind)),
                           key=lambda a: (a["apiVersion"], o.name(a)))
        if not addresses:
            return
        if a_claims:
            address = addresses[picks[0] % len(addresses)]
            claim_of = o.claim_of_address if kinds.kind_of(address) == kinds.IPADDRESS else o.claim_of_capi_address
            key = claim_of(address)
            addresses = [a for a in addresses
                         if (o.claim_of_address if kinds.kind_of(a) == kinds.IPADDRESS else o.claim_of_capi_address)(a) == key]
            chosen = [addresses[k % len(addresses)] for k in picks]
        else:
            chosen = [addresses[k % len(addresses)] for k in picks]
        for address in chosen:
            stored = self.store.inventory.get(kinds.kind_of(address), NS, o.name(address))
            if stored is None:
                continue
            gone = copy.deepcopy(stored)
            gone["metadata"].setdefault("deletionTimestamp", self.store.now)
            if seen_deleting and gone["metadata"].get("finalizers"):
                self.store._store(copy.deepcopy(gone))  # deleted first: the finalizers hold it a moment
            gone["metadata"]["finalizers"] = []
            self.store._store(gone)

    @rule(k=st.integers(0, 50), j=st.integers(0, 50))
    def user_rewrites_a_claim_status(self, k, j):
        """A claim's status replaced by hand with another claim's (or its own, unchanged)."""
        claims = sorted((c for kind in CLAIM_KINDS for c in self.store.inventory.of_kind(kind)
                         if not o.is_deleting(c)), key=lambda c: (c["kind"], o.name(c)))
        if not claims:
            return
        target, source = claims[k % len(claims)], claims[j % len(claims)]
        rewritten = copy.deepcopy(target)
        rewritten["status"] = copy.deepcopy(o.status(source))
        self.store._store(rewritten)
        self.by_hand.add(ident(target))
        self.bound_ip.pop(ident(target), None)  # what it holds now is what the user said

    # -- the controller -------------------------------------------------------------------

    @precondition(lambda self: self.started)
    @rule(pool=st.sampled_from(["pa", "pb", "gopool"]))
    def a_pool_pass(self, pool):
        self.run_pass((NS, pool))

    # -- what must hold ---------------------------------------------------------------------

    @invariant()
    def no_ip_bound_to_two_live_claims_and_bound_claims_keep_their_ip(self):
        if not hasattr(self, "store"):
            return
        held = bindings(self.store)
        owners: dict[int, list] = {}
        for key, ips in held.items():
            for ip in ips:
                owners.setdefault(ip, []).append(key)
        twice = {ip_text(netaddr.IPAddress(ip, 4)): who for ip, who in owners.items() if len(who) > 1}
        assert not twice, f"bound to two live claims: {twice}"
        named: dict[tuple[str, str], tuple] = {}
        for kind in CLAIM_KINDS:
            for claim in self.store.inventory.of_kind(kind):
                key = (claim["kind"], o.name(claim))
                if o.is_deleting(claim) or ident(claim) in self.by_hand:
                    continue
                for what in named_by_status(claim):
                    other = named.setdefault(what, key)
                    assert other == key, f"{what} is named by the statuses of {other} and {key}"
                status = o.status(claim)
                if not (status.get("address") or status.get("addressRef")) or len(held.get(key, ())) != 1:
                    continue
                (ip,) = held[key]
                before = self.bound_ip.setdefault(ident(claim), ip)
                if before != ip:
                    # A bound claim keeps its IP whenever that IP is free for it: no address object of
                    # another claim holds it, its pool may hand it to this claim, and no other claim wants
                    # it first. Which IP is its own is what it was last seen bound to (a status the user
                    # rewrote makes it whatever that status names: `bound_ip` forgets it then).
                    # A claim of another pool holding it never excuses the move: a kept IP is taken for every pool
                    # of the namespace (two pools sharing a namePrefix take one lock name for it).
                    holders = {h for h in self.holders_of(before) - {key} if self.pool_of_claim(h) == o.pool_of(claim)}
                    first = self.wanted_first_by(claim, before)
                    assert holders or first or not self.usable_for(claim, before), \
                        f"{key} moved from {ip_text(netaddr.IPAddress(before, 4))} to " \
                        f"{ip_text(netaddr.IPAddress(ip, 4))} while its IP was free"
                    self.bound_ip[ident(claim)] = ip

    def pool_of_claim(self, key: tuple[str, str]):
        """The pool of the claim ``key`` (kind, name), live or gone (None)."""
        kind = kinds.IPCLAIM if key[0] == kinds.IPCLAIM[1] else kinds.CAPI_CLAIM
        claim = self.store.inventory.get(kind, NS, key[1])
        return o.pool_of(claim) if claim is not None else None

    def usable_for(self, claim: dict, ip: int) -> bool:
        """Whether the claim's pool may hand ``ip`` to it: in a range, not a gateway or excluded, not
        preallocated to another claim, not withheld for an earlier overlapping pool."""
        pool_key = o.pool_of(claim)
        pool = self.store.inventory.get(kinds.IPPOOL, NS, pool_key.name) if pool_key else None
        model = self.store.inventory.pool_model(pool)[0] if pool is not None else None
        if model is None or model.entry_of(ip) is None or model.is_reserved(ip) \
                or model.holder_of(ip) not in (None, o.name(claim)):
            return False
        return not any(w.first <= ip <= w.last for w in self.store.inventory.withheld(pool_key))

    def wanted_first_by(self, claim: dict, ip: int) -> tuple[str, str] | None:
        """Another claim that ``ip`` goes to before ``claim``: two statuses naming one IP (one rewritten
        by hand) cannot be told apart, so of the claims of the pool whose status names it (read in the
        order of trust of ``kept.own_ip``: the address name ``<namePrefix>-<ip>``, else Ready's "bound
        to <ip>") and that hold no address object of either API, the one created first gets it; at one
        creationTimestamp (it has one-second steps), the first by kind, then name. A claim holding the
        IP through an address object always keeps it (``holders_of``), so such a claim is never one."""
        pool_key = o.pool_of(claim)
        pool = self.store.inventory.get(kinds.IPPOOL, NS, pool_key.name) if pool_key else None
        model = self.store.inventory.pool_model(pool)[0] if pool is not None else None
        if model is None:
            return None
        holding = self.holders_of_any()
        order = lambda c: (str(o.meta(c).get("creationTimestamp") or ""), c["kind"], o.name(c))  # noqa: E731
        for kind in CLAIM_KINDS:
            for other in self.store.inventory.of_kind(kind):
                key = (other["kind"], o.name(other))
                if key != (claim["kind"], o.name(claim)) and o.pool_of(other) == pool_key \
                        and key not in holding and own_ip(other, model) == ip and order(other) < order(claim):
                    return key
        return None

    def holders_of_any(self) -> set[tuple[str, str]]:
        """The claims that an address object of either API names, being deleted or not."""
        return {claim_of(address)
                for kind, claim_of in ((kinds.IPADDRESS, o.claim_of_address), (kinds.CAPI_ADDRESS, o.claim_of_capi_address))
                for address in self.store.inventory.of_kind(kind)}

    def holders_of(self, ip: int) -> set[tuple[str, str]]:
        """The claims (live or not) that address objects of either API at ``ip`` name."""
        found = set()
        for kind, claim_of in ((kinds.IPADDRESS, o.claim_of_address), (kinds.CAPI_ADDRESS, o.claim_of_capi_address)):
            for address in self.store.inventory.of_kind(kind):
                if int(netaddr.IPAddress(o.spec(address)["address"])) == ip:
                    found.add(claim_of(address))
        return found

    def teardown(self):
        if not hasattr(self, "store"):
            return
        self.drain()
        self.no_ip_bound_to_two_live_claims_and_bound_claims_keep_their_ip()
        held = bindings(self.store)
        paused = o.cluster_paused(self.store.inventory.get(kinds.CLUSTER, NS, "c1"))
        for kind in CLAIM_KINDS:
            for claim in self.store.inventory.of_kind(kind):
                key = (claim["kind"], o.name(claim))
                if o.cluster_name_of(claim) == "c1" and paused or o.is_deleting(claim):
                    continue
                if o.pool_of(claim) == (NS, "pb") and paused:
                    continue
                ready = [c for c in o.status(claim).get("conditions") or [] if c.get("type") == "Ready"]
                assert len(held.get(key, ())) == 1 or (ready and ready[0]["status"] == "False"), (
                    f"{key}: {held.get(key)} {o.status(claim)}")
        # Nothing leaked: every address of ours belongs to a claim that exists (or waits on a paused one).
        claims = {(c["kind"], o.name(c)) for kind in CLAIM_KINDS for c in self.store.inventory.of_kind(kind)}
        for address in self.store.inventory.of_kind(kinds.IPADDRESS):
            assert o.claim_of_address(address) in claims or paused, o.name(address)
