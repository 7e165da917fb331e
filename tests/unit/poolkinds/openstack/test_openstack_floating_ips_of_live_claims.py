"""Floating IPs of live claims, held in Neutron (SPEC §10.1, §10.4): the sweep across a ``clusterctl move``
stopped half-way, and the floating IPs ``choose`` takes that it did not make (pre-allocated, CAPO's)."""

from __future__ import annotations

import asyncio
import dataclasses
import itertools

import pytest
from hypothesis import example, given, settings
from hypothesis import strategies as st
from kubernetes.client.rest import ApiException

from metal3_ipam.controller.outside import NO_POOL
from metal3_ipam.core import objects as o
from metal3_ipam.core.asking import Asking
from metal3_ipam.core.inventory import Inventory
from metal3_ipam.poolkinds.openstack import asks as a
from metal3_ipam.poolkinds.openstack import capo
from metal3_ipam.poolkinds.openstack import pool as p
from metal3_ipam.poolkinds.openstack import sweep
from metal3_ipam.poolkinds.openstack.client import FloatingIP

from secret_holds import RecordedHolds, UnrecordableHolds

OWNER = "metal3-ipam"
NETWORK = "6f0c8a64-1b1e-4f4e-9d0a-8cb1d7a7e2a1"


class FakeNeutron:
    """One project's floating IPs: listed with Neutron's exact filters (description, tags, not-tags, address);
    every change bumps a floating IP's revision, and an update naming an older one is refused, as Neutron's
    ``If-Match: revision_number=`` is (``test_openstack_harness``)."""

    def __init__(self, *fips: FloatingIP):
        self.fips = {fip.id: fip for fip in fips}
        self.deleted: list[FloatingIP] = []
        self.ids = itertools.count(100)
        self.before_describe = None  # called once, before the first description is written

    def networks(self, query):
        return [{"id": NETWORK, "name": "public", "tags": []}]

    def handing_out(self, *addresses: str) -> "FakeNeutron":
        """Creates from now on give ``addresses`` in this order (Neutron's random choice), or the one asked for."""
        free = iter(addresses)

        def create(network_id, description, address=None):
            fip = FloatingIP(f"fip-{next(self.ids)}", address or next(free), description, (), None, network_id)
            return self.fips.setdefault(fip.id, fip)
        self.create = create
        return self

    def floating_ips(self, **query):
        found = []
        for fip in self.fips.values():
            if "description" in query and fip.description != query["description"]:
                continue
            if "tags" in query and not set(query["tags"].split(",")) <= set(fip.tags):
                continue
            if "not_tags" in query and set(query["not_tags"].split(",")) <= set(fip.tags):
                continue
            if "floating_ip_address" in query and fip.address != query["floating_ip_address"]:
                continue
            found.append(fip)
        return found

    def get(self, fip_id):
        return self.fips.get(fip_id)

    def create(self, network_id, description, address=None):
        fip = FloatingIP(f"fip-{next(self.ids)}", address or f"203.0.113.{next(self.ids) % 250}", description, (),
                         None, network_id)
        self.fips[fip.id] = fip
        return fip

    def describe(self, fip_id, description, revision=None):
        hook, self.before_describe = self.before_describe, None
        if hook is not None:
            hook()
        fip = self.fips[fip_id]
        if revision is not None and revision != fip.revision:
            return None  # 412: changed since it was read
        self.fips[fip_id] = dataclasses.replace(fip, description=description, revision=fip.revision + 1)
        return self.fips[fip_id]

    def set_tags(self, fip_id, tags):
        fip = self.fips[fip_id]
        self.fips[fip_id] = dataclasses.replace(fip, tags=tuple(sorted(set(tags))), revision=fip.revision + 1)

    def add_tag(self, fip_id, tag):
        self.set_tags(fip_id, {*self.fips[fip_id].tags, tag})

    def remove_tag(self, fip_id, tag):
        if fip_id in self.fips and tag in self.fips[fip_id].tags:
            self.set_tags(fip_id, set(self.fips[fip_id].tags) - {tag})

    def delete(self, fip_id, revision=None):
        if revision is not None and fip_id in self.fips and self.fips[fip_id].revision != revision:
            return False  # 412: changed since it was read
        if fip_id in self.fips:
            self.deleted.append(self.fips.pop(fip_id))
        return True


def pool_obj(ns="ns", name="fips", uid="pool-uid", **spec):
    return {"apiVersion": p.API_VERSION, "kind": p.KIND,
            "metadata": {"name": name, "namespace": ns, "uid": uid, "resourceVersion": "1", "generation": 1},
            "spec": {"identityRef": {"name": "cloud"}, **spec}}


def model(**kw):
    found, problems = p.read_pool(pool_obj(**kw))
    assert problems == []
    return found


class NeutronAsks(a.OpenStackAsks):
    """The asks, run on the fake Neutron in the calling thread (no Secret, no Keystone)."""

    def __init__(self, neutron):
        super().__init__(secrets=None, owner=OWNER)
        self.neutron = neutron

    async def run(self, pool, work, *args):
        return work(self.neutron, pool, self.owner, *args)


# --------------------------------------------------------------------------- the sweep across a move


def test_the_source_of_a_move_stopped_after_deleting_the_claims_releases_no_floating_ip():
    key = "0123456789abcdef0123456789abcdef"
    held = FloatingIP("fip-1", "203.0.113.7", p.description(OWNER, key),
                      (OWNER, p.pool_tag(OWNER, "ns", "fips")), "port-of-the-moved-machine", NETWORK)
    neutron = FakeNeutron(held)
    side = paused_side(neutron)  # clusterctl paused the Cluster, deleted the claim, then stopped before the pool;
    for _ in range(3):  # this controller was down meanwhile (or restarted since)
        side.sweep()
    assert neutron.deleted == [], "the sweep deleted the floating IP the moved claim keeps in the target"


def test_the_target_of_a_move_stopped_before_the_claims_came_releases_no_floating_ip_of_the_sources_claims():
    key = "fedcba9876543210fedcba9876543210"
    held = FloatingIP("fip-1", "203.0.113.8", p.description(OWNER, key),
                      (OWNER, p.pool_tag(OWNER, "ns", "fips")), "port-of-a-source-machine", NETWORK)
    neutron = FakeNeutron(held)
    side = paused_side(neutron)  # the copies of the Cluster (paused) and of the pool; no claim came
    for _ in range(3):
        side.sweep()
    assert neutron.deleted == [], "the sweep deleted the floating IP a live claim of the source holds"


class Side:
    """One cluster's controller: its watch-fed inventory and its OpenStackPools (the real adapter)."""

    def __init__(self, neutron, *objs):
        self.inventory = Inventory()
        for obj in objs:
            self.inventory.upsert(obj)
        self.pools = a.OpenStackPools(NeutronAsks(neutron), Asking(deadline=30), inventory=self.inventory,
                                      writer=None, wake=lambda *args: None)

    def sweep(self):
        return asyncio.run(self.pools.sweeper.sweep())

    def swept(self):
        """One sweep as the controller runs it: what it judged of the pools settled after it."""
        return asyncio.run(self.pools.swept())


def paused_side(neutron):
    """A cluster holding the pool ns/fips and a paused Cluster of its namespace, and no claim."""
    return Side(neutron, {"apiVersion": "cluster.x-k8s.io/v1beta2", "kind": "Cluster",
                          "metadata": {"name": "c1", "namespace": "ns", "uid": "c1-uid", "resourceVersion": "1"},
                          "spec": {"paused": True}}, pool_obj())


# --------------------------------------------------------------------------- floating IPs taken, not made


def test_two_pools_listing_one_preallocated_address_at_once_never_both_take_it():
    free = FloatingIP("fip-1", "203.0.113.5", "", (), None, NETWORK)
    neutron = FakeNeutron(free)
    first, second = model(ns="a", preAllocatedFloatingIPs=["203.0.113.5"]), model(
        ns="b", preAllocatedFloatingIPs=["203.0.113.5"])
    got = {}
    # the second pool's choice runs between the first's listing and its description (as two threads may)
    neutron.before_describe = lambda: got.setdefault("b", a.choose(neutron, second, OWNER, "kb", 0, True))
    got["a"] = a.choose(neutron, first, OWNER, "ka", 0, True)
    addresses = [fip.address if isinstance(fip, FloatingIP) else None for fip in (got["a"], got["b"])]
    assert addresses.count("203.0.113.5") <= 1, f"both keys were given {addresses}"


def test_adopting_capos_pool_never_takes_a_floating_ip_of_capos_pool_of_that_name_in_another_namespace():
    capos = FloatingIP("fip-1", "203.0.113.9", "Created by cluster-api-provider-openstack",
                       (p.capo_tag("fips"),), None, NETWORK)  # CAPO's pool b/fips holds it for a claim of b
    neutron = FakeNeutron(capos)
    chosen = a.choose(neutron, model(ns="a", adoptFromCAPOPool="fips"), OWNER, "ka", 0, True)
    assert not isinstance(chosen, FloatingIP), f"took {chosen.address}, held by a claim of CAPO's pool b/fips"


def test_two_replicas_listing_one_kept_floating_ip_at_once_never_both_take_it():
    kept = FloatingIP("fip-1", "203.0.113.6", p.available_description(OWNER),
                      (OWNER, p.pool_tag(OWNER, "ns", "fips")), None, NETWORK)
    neutron = FakeNeutron(kept)
    pool = model(reclaimPolicy="Retain")
    got = {}
    # each replica holds its own lock of the pool: the second chooses between the first's listing and its write
    neutron.before_describe = lambda: got.setdefault("b", a.choose(neutron, pool, OWNER, "kb", 0, True))
    got["a"] = a.choose(neutron, pool, OWNER, "ka", 0, True)
    addresses = [fip.address if isinstance(fip, FloatingIP) else None for fip in (got["a"], got["b"])]
    assert addresses.count("203.0.113.6") == 1, f"both keys were given {addresses}"
    assert neutron.fips["fip-1"].description in (p.description(OWNER, "ka"), p.description(OWNER, "kb"))


def capo_pool(ns, name, available=(), claimed=()):
    return {"apiVersion": f"{capo.GROUP}/{capo.VERSION}", "kind": capo.KIND,
            "metadata": {"name": name, "namespace": ns},
            "status": {"availableIPs": list(available), "claimedIPs": list(claimed)}}


def capi_address(ns, name, address, pool):
    return {"apiVersion": "ipam.cluster.x-k8s.io/v1beta1", "kind": "IPAddress",
            "metadata": {"name": name, "namespace": ns},
            "spec": {"address": address, "prefix": 32,
                     "poolRef": {"apiGroup": capo.GROUP, "kind": capo.KIND, "name": pool}}}


def test_adopting_capos_pool_takes_only_what_capos_pool_of_its_namespace_keeps_free():
    free = FloatingIP("fip-1", "203.0.113.9", "", (p.capo_tag("fips"),), None, NETWORK)
    elsewhere = FloatingIP("fip-2", "203.0.113.10", "", (p.capo_tag("fips"),), None, NETWORK)
    neutron = FakeNeutron(free, elsewhere)
    # CAPO's pool a/fips recovered b/fips's claimed floating IP by its tag, and lists it available too
    adoptable = capo.adoptable(capo_pool("a", "fips", available=["203.0.113.9", "203.0.113.10"]),
                               capo.held_elsewhere([capi_address("b", "m1", "203.0.113.10", "fips"),
                                                    capi_address("a", "m0", "203.0.113.9", "other")], "a", "fips"))
    assert adoptable == {"203.0.113.9"}
    pool = model(ns="a", adoptFromCAPOPool="fips")
    chosen = a.choose(neutron, pool, OWNER, "ka", 0, True, adoptable)
    assert isinstance(chosen, FloatingIP) and chosen.id == "fip-1"
    again = a.choose(neutron, pool, OWNER, "kb", 0, True, adoptable)
    assert again == NETWORK, "took a floating IP CAPO's pool of another namespace holds"


def test_nothing_is_adopted_of_a_capo_pool_that_lists_it_claimed_or_is_not_there():
    assert capo.adoptable(None) == frozenset()
    assert capo.adoptable(capo_pool("a", "fips", available=["203.0.113.9"], claimed=["203.0.113.9"])) == frozenset()


def test_a_preallocated_floating_ip_dropped_from_the_spec_while_held_is_not_deleted_on_release():
    admins = FloatingIP("fip-1", "203.0.113.5", "", (), None, NETWORK)
    neutron = FakeNeutron(admins)
    taken = a.choose(neutron, model(preAllocatedFloatingIPs=["203.0.113.5"]), OWNER, "k1", 0, True)
    assert isinstance(taken, FloatingIP) and taken.id == "fip-1"
    a.release(neutron, model(), OWNER, "k1")  # the pool's spec no longer lists it; its claim deleted
    assert neutron.deleted == [], "deleted the admin's pre-allocated floating IP"


# --------------------------------------------------------------------------- a key carried by two floating IPs


def carrying(fip_id, address, key, created_at, tags=()):
    return FloatingIP(fip_id, address, p.description(OWNER, key), tuple(tags), None, NETWORK, created_at=created_at)


def test_a_key_carried_by_two_floating_ips_is_the_first_mades_not_the_lowest_ids():
    key = "0123456789abcdef0123456789abcdef"
    first = carrying("f0000000-0000-0000-0000-000000000000", "203.0.113.20", key, "2026-11-29T03:00:01Z")
    second = carrying("00000000-0000-0000-0000-000000000000", "203.0.113.21", key, "2026-11-29T03:00:02Z")
    neutron = FakeNeutron(first, second)
    assert a.lookup(neutron, model(), OWNER, key).id == first.id


def test_a_key_carried_by_two_floating_ips_is_the_one_its_ipaddress_holds():
    key = "0123456789abcdef0123456789abcdef"
    first = carrying("f0000000-0000-0000-0000-000000000000", "203.0.113.20", key, "2026-11-29T03:00:01Z")
    second = carrying("00000000-0000-0000-0000-000000000000", "203.0.113.21", key, "2026-11-29T03:00:02Z")
    neutron = FakeNeutron(first, second)
    assert a.lookup(neutron, model(), OWNER, key, held="203.0.113.21").id == second.id


def test_a_create_for_a_key_another_replica_made_and_tagged_in_the_same_second_deletes_only_its_own():
    key = "0123456789abcdef0123456789abcdef"
    # the other replica's: made, settled and tagged (so possibly handed out already), with an id that sorts last
    theirs = carrying("ffffffff-0000-0000-0000-000000000000", "203.0.113.30", key, "2026-11-29T03:00:01Z",
                      (OWNER, p.pool_tag(OWNER, "ns", "fips")))
    neutron = FakeNeutron(theirs)
    neutron.create = lambda network_id, description, address=None: neutron.fips.setdefault(
        "00000000-0000-0000-0000-000000000000", carrying("00000000-0000-0000-0000-000000000000", "203.0.113.31",
                                                         key, "2026-11-29T03:00:01Z"))
    got = a.make(neutron, model(), OWNER, key, NETWORK)
    assert got.id == theirs.id and theirs.id in neutron.fips
    assert [fip.id for fip in neutron.deleted] == ["00000000-0000-0000-0000-000000000000"]


# --------------------------------------------------------------------------- a floating IP deleted in Neutron

LOST_KEY = "abcdefabcdefabcdefabcdefabcdef01"


def bound_objects(key=LOST_KEY, address="203.0.113.40"):
    """A claim of ns/fips carrying ``key`` and the lock that holds its floating IP's address."""
    claim = {"apiVersion": "ipam.cluster.x-k8s.io/v1beta2", "kind": "IPAddressClaim",
             "metadata": {"name": "m1", "namespace": "ns", "uid": "m1-uid", "resourceVersion": "5",
                          "annotations": {p.KEY_ANNOTATION: key}},
             "spec": {"poolRef": {"apiGroup": p.GROUP, "kind": p.KIND, "name": "fips"}}}
    lock = {"apiVersion": "ipam.metal3.io/v1alpha1", "kind": "IPAddress",
            "metadata": {"name": f"fips.{address}.openstack", "namespace": "ns", "uid": "l-uid",
                         "resourceVersion": "6", "annotations": {p.KEY_ANNOTATION: key}},
            "spec": {"address": address, "prefix": 32, "pool": {"name": "fips"}, "claim": {"name": "m1"}}}
    return claim, lock


class Writer:
    def __init__(self):
        self.plans = []

    async def execute(self, plan, pool_key):
        self.plans.append(plan)


def test_a_claims_floating_ip_deleted_in_neutron_is_shown_on_the_claim_and_not_made_anew():
    neutron = FakeNeutron()  # the claim's floating IP was deleted in Neutron by someone else
    side = Side(neutron, pool_obj(), *bound_objects())
    side.pools.writer, woken = Writer(), []
    side.pools.wake = lambda pool_key, key: woken.append(pool_key)
    side.pools.survey_soon = lambda pool_key: None
    side.sweep()
    assert "203.0.113.40" in side.inventory.address_lost[LOST_KEY]
    assert side.pools.sweeper.lost_of(model()) == ("203.0.113.40",)
    events = [a for plan in side.pools.writer.plans for step in plan.steps for a in step.actions]
    assert [(e.type, e.reason, e.target.name) for e in events] == [("Warning", "AddressLost", "m1")]
    assert woken and neutron.fips == {}, "made a floating IP anew, or woke no pass"
    side.sweep()
    assert len(side.pools.writer.plans) == 1, "told twice"
    # an admin gives it back: a floating IP with that address and the key's description
    neutron.fips["fip-back"] = FloatingIP("fip-back", "203.0.113.40", p.description(OWNER, LOST_KEY), (), None,
                                          NETWORK)
    side.sweep()
    assert LOST_KEY not in side.inventory.address_lost and side.pools.sweeper.lost_of(model()) == ()
    assert p.pool_tag(OWNER, "ns", "fips") in neutron.fips["fip-back"].tags


def test_an_address_neutron_hands_out_again_while_a_claim_keeps_it_is_given_back_to_that_claims_key():
    neutron = FakeNeutron()
    neutron.handing_out("203.0.113.40", "203.0.113.41")  # Neutron's random choice: the lost address first
    made = a.make(neutron, model(), OWNER, "knew", NETWORK, {"203.0.113.40": LOST_KEY})
    assert made.address == "203.0.113.41"
    back = [fip for fip in neutron.fips.values() if fip.address == "203.0.113.40"]
    assert [fip.description for fip in back] == [p.description(OWNER, LOST_KEY)]


def test_a_preallocated_address_another_project_holds_is_a_failed_ip_until_it_is_made():
    neutron = FakeNeutron()

    def refused(network_id, description, address=None):
        raise a.OpenStackError(p.ADDRESS_TAKEN, "409 IpAddressAlreadyAllocated")
    neutron.create, failed = refused, set()
    with pytest.raises(a.OpenStackError):
        a.make(neutron, model(), OWNER, "k1", a.choose(neutron, model(preAllocatedFloatingIPs=["198.51.100.7"]),
                                                        OWNER, "k1", 0, True, frozenset(), failed))
    assert failed == {"198.51.100.7"}
    del neutron.create
    taken = a.choose(neutron, model(preAllocatedFloatingIPs=["198.51.100.7"]), OWNER, "k1", 0, True, frozenset(),
                     failed)
    assert taken.address == "198.51.100.7" and failed == set()
    status = p.pool_status(model(), p.Survey(network={"id": NETWORK}, failed=("198.51.100.7",)), now="t")
    assert status["failedIPs"] == ["198.51.100.7"]


def test_an_address_neutron_hands_out_again_before_a_sweep_saw_it_lost_is_not_given_to_a_second_claim():
    from metal3_ipam.core.asking import Ask, Granted, Op
    neutron = FakeNeutron()  # ns/m1's floating IP 203.0.113.40 was deleted in Neutron; no sweep has run since
    neutron.handing_out("203.0.113.40", "203.0.113.41")  # Neutron's random choice: that address first
    side = Side(neutron, pool_obj(), pool_obj(ns="other", uid="other-uid"), *bound_objects())
    side.pools.asks.pool_changed(model(ns="other"))  # a pool of the same project in another namespace
    answer = asyncio.run(side.pools.asks.ask(Ask(Op.ALLOCATE, "k" * 32, ("other", "fips"), None, 1, 0.0)))
    assert isinstance(answer, Granted)
    assert answer.address != "203.0.113.40", "the address ns/m1's IPAddress holds was given to a claim of other/fips"


def test_adopting_capos_pool_never_takes_a_floating_ip_an_ipaddress_of_capos_pool_in_its_namespace_holds():
    fip = FloatingIP("fip-1", "203.0.113.9", "", (p.capo_tag("fips"),), None, NETWORK)
    neutron = FakeNeutron(fip)
    # CAPO's pool a/fips handed 203.0.113.9 to claim m0: its IPAddress is written, its status lags behind
    addresses = [capi_address("a", "m0", "203.0.113.9", "fips")]
    adoptable = capo.adoptable(capo_pool("a", "fips", available=["203.0.113.9"]),
                               capo.held_elsewhere(addresses, "a", "fips"))
    chosen = a.choose(neutron, model(ns="a", adoptFromCAPOPool="fips"), OWNER, "ka", 0, True, adoptable)
    assert not isinstance(chosen, FloatingIP), "took the floating IP CAPO's claim a/m0 holds"


def test_a_floating_ip_kept_on_the_network_the_pool_named_before_is_not_handed_out_after_the_network_changed():
    new_network = "0b4e9d3a-5c6f-4a1b-8e2d-7f9a0c1b2d3e"
    kept = FloatingIP("fip-1", "203.0.113.6", p.available_description(OWNER),
                      (OWNER, p.pool_tag(OWNER, "ns", "fips")), None, NETWORK)  # kept by Retain on the old network
    neutron = FakeNeutron(kept)
    neutron.networks = lambda query: [{"id": new_network, "name": "public-2", "tags": []}]
    chosen = a.choose(neutron, model(reclaimPolicy="Retain", floatingIPNetwork={"id": new_network}), OWNER, "k1", 0,
                      True)
    assert chosen == new_network or chosen.network_id == new_network, f"gave {chosen.address} of {chosen.network_id}"


def test_an_address_given_back_to_a_lost_key_of_another_pool_is_not_tagged_as_the_asking_pools():
    neutron = FakeNeutron()
    neutron.handing_out("203.0.113.40", "203.0.113.41")
    a.make(neutron, model(ns="other"), OWNER, "knew", NETWORK, {"203.0.113.40": LOST_KEY})  # LOST_KEY: ns/fips's
    (back,) = [fip for fip in neutron.fips.values() if fip.address == "203.0.113.40"]
    assert p.pool_tag(OWNER, "other", "fips") not in back.tags, back.tags


def test_a_preallocated_address_a_claim_keeps_after_its_floating_ip_was_deleted_is_not_made_for_another_key():
    from metal3_ipam.core.asking import Ask, Granted, Op
    neutron = FakeNeutron()  # ns/m1's floating IP 203.0.113.40 was deleted in Neutron
    side = Side(neutron, pool_obj(), pool_obj(ns="other", uid="other-uid",
                                              preAllocatedFloatingIPs=["203.0.113.40"]), *bound_objects())
    side.pools.writer, side.pools.wake, side.pools.survey_soon = Writer(), lambda *args: None, lambda pool_key: None
    side.sweep()
    assert side.pools.sweeper.lost_of(model()) == ("203.0.113.40",)  # found lost, told on the claim
    side.pools.asks.pool_changed(model(ns="other", preAllocatedFloatingIPs=["203.0.113.40"]))
    answer = asyncio.run(side.pools.asks.ask(Ask(Op.ALLOCATE, "k" * 32, ("other", "fips"), None, 1, 0.0)))
    assert isinstance(answer, Granted)
    assert answer.address != "203.0.113.40", "the address ns/m1's IPAddress keeps was made for a claim of other/fips"


def test_a_controller_serving_some_namespaces_never_adopts_a_floating_ip_capos_pool_of_another_namespace_holds():
    inventory = Inventory()
    inventory.namespaces = frozenset({"a"})  # -n a
    inventory.upsert({**capi_address("b", "m1", "203.0.113.10", "fips"),
                      "metadata": {"name": "m1", "namespace": "b", "uid": "m1-uid", "resourceVersion": "3"}})
    pools = a.OpenStackPools(NeutronAsks(FakeNeutron()), Asking(deadline=30), inventory=inventory, writer=None,
                             wake=lambda *args: None)
    # CAPO's pool a/fips recovered b/fips's claimed floating IP by its tag, and lists it available
    adoptable = capo.adoptable(capo_pool("a", "fips", available=["203.0.113.10"]),
                               pools.asks.capo_held_elsewhere("a", "fips"))
    assert "203.0.113.10" not in adoptable, "b/m1's floating IP is adoptable for a pool of namespace a"


NEW_NETWORK = "0b4e9d3a-5c6f-4a1b-8e2d-7f9a0c1b2d3e"


def test_a_preallocated_floating_ip_on_another_network_than_the_pools_is_not_taken_and_is_a_failed_ip():
    admins = FloatingIP("fip-1", "198.51.100.7", "", (), None, NETWORK)  # on the network the pool named before
    neutron = FakeNeutron(admins)
    neutron.networks = lambda query: [{"id": NEW_NETWORK, "name": "public-2", "tags": []}]
    failed = set()
    chosen = a.choose(neutron, model(preAllocatedFloatingIPs=["198.51.100.7"], floatingIPNetwork={"id": NEW_NETWORK}),
                      OWNER, "k1", 0, True, frozenset(), failed)
    assert chosen == NEW_NETWORK and failed == {"198.51.100.7"}
    assert neutron.fips["fip-1"].description == "", "took the admin's floating IP of another network"


def test_adopting_capos_pool_takes_no_floating_ip_of_another_network_than_the_pools():
    capos = FloatingIP("fip-1", "203.0.113.9", "", (p.capo_tag("fips"),), None, NETWORK)
    neutron = FakeNeutron(capos)
    neutron.networks = lambda query: [{"id": NEW_NETWORK, "name": "public-2", "tags": []}]
    chosen = a.choose(neutron, model(ns="a", adoptFromCAPOPool="fips", floatingIPNetwork={"id": NEW_NETWORK}),
                      OWNER, "ka", 0, True, frozenset({"203.0.113.9"}))
    assert chosen == NEW_NETWORK


def test_an_address_given_back_to_a_key_whose_pool_is_known_is_tagged_with_that_pool():
    neutron = FakeNeutron()
    neutron.handing_out("203.0.113.40", "203.0.113.41")
    made = a.make(neutron, model(ns="other"), OWNER, "knew", NETWORK, {"203.0.113.40": LOST_KEY},
                  {LOST_KEY: ("ns", "fips")})
    (back,) = [fip for fip in neutron.fips.values() if fip.address == "203.0.113.40"]
    assert made.address == "203.0.113.41" and back.description == p.description(OWNER, LOST_KEY)
    assert p.pool_tag(OWNER, "ns", "fips") in back.tags and p.pool_tag(OWNER, "other", "fips") not in back.tags


def test_a_preallocated_address_a_claims_ipaddress_holds_is_not_taken_for_another_key():
    free = FloatingIP("fip-1", "203.0.113.5", "", (), None, NETWORK)  # given back by hand without the key
    neutron = FakeNeutron(free)
    failed = set()
    chosen = a.choose(neutron, model(ns="other", preAllocatedFloatingIPs=["203.0.113.5"]), OWNER, "k1", 0, True,
                      frozenset(), failed, {"203.0.113.5": LOST_KEY})
    assert chosen == NETWORK and neutron.fips["fip-1"].description == "" and failed == {"203.0.113.5"}


def test_a_preallocated_floating_ip_released_here_is_taken_while_the_releasing_claims_ipaddress_is_going():
    kept = FloatingIP("fip-1", "203.0.113.5", p.available_description(OWNER),
                      (OWNER, p.pool_tag(OWNER, "ns", "fips"), p.kept_tag(OWNER)), None, NETWORK)
    neutron = FakeNeutron(kept)
    # a claim of ns/fips, key "old", released it (kept: pre-allocated); its IPAddress is still being deleted
    chosen = a.choose(neutron, model(ns="other", preAllocatedFloatingIPs=["203.0.113.5"]), OWNER, "k1", 0, True,
                      frozenset(), set(), {"203.0.113.5": "old"})
    assert isinstance(chosen, FloatingIP) and chosen.id == "fip-1"


class CAPOReads:
    """CAPO's pool a/fips as read, and the Cluster API IPAddresses of every namespace as listed (None: refused)."""

    def __init__(self, pool, held):
        self.pool, self._held = pool, held

    async def read(self, namespace, name):
        return self.pool

    async def held(self, name):
        return self._held


def test_a_controller_serving_some_namespaces_adopts_what_the_ipaddresses_of_every_namespace_leave_free():
    inventory = Inventory()
    inventory.namespaces = frozenset({"a"})  # -n a: b's IPAddresses are not in the inventory
    pools = a.OpenStackPools(NeutronAsks(FakeNeutron()), Asking(deadline=30), inventory=inventory, writer=None,
                             wake=lambda *args: None)
    pool = model(ns="a", adoptFromCAPOPool="fips")
    pools.asks.capo = CAPOReads(capo_pool("a", "fips", available=["203.0.113.9", "203.0.113.10"]),
                                {"203.0.113.10"})  # listed of the API server: b/m1 holds it
    assert asyncio.run(pools.asks._adoptable(pool)) == {"203.0.113.9"}
    pools.asks.capo = CAPOReads(capo_pool("a", "fips", available=["203.0.113.9"]), None)  # the list refused
    assert asyncio.run(pools.asks._adoptable(pool)) == frozenset()


# --------------------------------------------------------------------------- one key, live claims in two clusters


def lost_key_fip(*tags: str) -> FloatingIP:
    """fip-1, of key LOST_KEY, tagged with ns/fips's pool tag and ``tags``, on the machine's port."""
    return FloatingIP("fip-1", "203.0.113.40", p.description(OWNER, LOST_KEY),
                      (OWNER, p.pool_tag(OWNER, "ns", "fips"), *tags), "port-of-the-machine", NETWORK)


def test_a_floating_ip_two_clusters_live_claims_carry_is_released_by_neither_claims_deletion():
    """A move restored from a directory while the source runs: the claim ns/m1 and its copy in the target, both
    live and bound to one floating IP by their key. The copy deleted: its release leaves the floating IP that
    the source's live claim is bound to (SPEC §10.1, §10.3)."""
    from metal3_ipam.core.asking import Ask, Op, Released
    fip = lost_key_fip()
    neutron = FakeNeutron(fip)

    def cluster(uid):
        return {"apiVersion": "cluster.x-k8s.io/v1beta2", "kind": "Cluster",
                "metadata": {"name": "c1", "namespace": "ns", "uid": uid, "resourceVersion": "1"},
                "spec": {"paused": False}}
    source = Side(neutron, cluster("c1-uid"), pool_obj(), *bound_objects())
    target = Side(neutron, cluster("t1-uid"), pool_obj(uid="target-pool-uid"), *bound_objects())
    for side in (source, target, source, target):
        side.sweep()
    target.pools.asks.pool_changed(model())
    answer = asyncio.run(target.pools.asks.ask(Ask(Op.RELEASE, LOST_KEY, ("ns", "fips"), None, 1, 0.0)))
    assert isinstance(answer, Released)
    assert neutron.deleted == [] and neutron.fips["fip-1"].description == p.description(OWNER, LOST_KEY), \
        "released the floating IP the source's live claim ns/m1 is bound to"


def cluster_obj(uid, paused=False):
    return {"apiVersion": "cluster.x-k8s.io/v1beta2", "kind": "Cluster",
            "metadata": {"name": "c1", "namespace": "ns", "uid": uid, "resourceVersion": "1"},
            "spec": {"paused": paused}}


def two_sides(*tags):
    """ns/m1 live and bound to fip-1 by LOST_KEY in two clusters (a copy restored from a directory while the source
    runs), with a Writer each; fip-1 carries ``tags`` besides the owner's and the pool's."""
    fip = lost_key_fip(*tags)
    neutron = FakeNeutron(fip)
    source = Side(neutron, cluster_obj("c1-uid"), pool_obj(), *bound_objects())
    target = Side(neutron, cluster_obj("t1-uid"), pool_obj(uid="target-pool-uid"), *bound_objects())
    for side in (source, target):
        side.pools.writer = Writer()
        side.pools.asks.pool_changed(model())
    return neutron, source, target


def released_by(side):
    """ns/m1 deleted in ``side``: its key released, then its claim and lock gone."""
    from metal3_ipam.core.asking import Ask, Op, Released
    answer = asyncio.run(side.pools.asks.ask(Ask(Op.RELEASE, LOST_KEY, ("ns", "fips"), None, 1, 0.0)))
    assert isinstance(answer, Released), answer
    for obj in bound_objects():
        side.inventory.remove(obj)


def events(side):
    return [(e.reason, e.target.name) for plan in side.pools.writer.plans for step in plan.steps for e in step.actions]


def test_the_copy_bound_to_a_floating_ip_its_home_answers_for_is_told_once_and_never_takes_it_over():
    from metal3_ipam.poolkinds.openstack import homes
    neutron, source, target = two_sides()
    for side in (source, target, source, target, target, source):
        side.sweep()
    assert events(target) == [("OpenStackAddressHomedElsewhere", "m1")] and events(source) == []
    assert "203.0.113.40" in target.inventory.homed_elsewhere[LOST_KEY]
    assert LOST_KEY not in source.inventory.homed_elsewhere
    marks = homes.marks_in(OWNER, neutron.fips["fip-1"].tags)
    assert marks.homes == {homes.Home(homes.POOL, "pool-uid")}
    assert marks.holds == {homes.Home(homes.POOL, "pool-uid"), homes.Home(homes.POOL, "target-pool-uid")}


def test_the_sources_release_keeps_the_floating_ip_the_copy_in_the_target_holds():
    neutron, source, target = two_sides()
    for side in (source, target, source, target):
        side.sweep()
    released_by(source)
    assert neutron.deleted == [] and neutron.fips["fip-1"].description == p.description(OWNER, LOST_KEY)


def test_after_the_copys_release_the_source_homes_the_floating_ip_and_its_own_release_deletes_it():
    neutron, source, target = two_sides()
    for side in (source, target, source, target):
        side.sweep()
    released_by(target)
    source.sweep()
    assert LOST_KEY not in source.inventory.homed_elsewhere
    released_by(source)
    assert [fip.id for fip in neutron.deleted] == ["fip-1"], "the floating IP no claim carries any more was left"


def test_the_target_of_a_finished_move_takes_the_floating_ip_over_and_its_sweeps_delete_it_after_its_release():
    source_home = "metal3-ipam-home:OpenStackFloatingIPPool:" + "a" * 8  # the source's pool, gone with the move
    fip = lost_key_fip(source_home)
    neutron = FakeNeutron(fip)
    target = Side(neutron, cluster_obj("t1-uid"), pool_obj(uid="target-pool-uid"), *bound_objects())
    target.pools.writer = Writer()
    target.sweep()  # held: the source may answer for a live claim of its own
    assert source_home in neutron.fips["fip-1"].tags
    target.sweep()  # nobody answered: taken over
    assert source_home not in neutron.fips["fip-1"].tags and events(target) == []
    target.pools.asks.pool_changed(model())
    released_by(target)  # marked left: a claim of the home it was taken from may live, its sweep not come yet
    assert neutron.deleted == []
    target.sweep()
    target.sweep()  # nobody answered for a claim there: released
    assert [fip.id for fip in neutron.deleted] == ["fip-1"]


def test_a_floating_ip_of_an_earlier_version_is_homed_by_the_sweep_and_its_claims_release_deletes_it():
    neutron, source, _ = two_sides()
    source.sweep()
    assert "metal3-ipam-home:OpenStackFloatingIPPool:pool-uid" in neutron.fips["fip-1"].tags
    released_by(source)
    assert [fip.id for fip in neutron.deleted] == ["fip-1"]


def test_a_key_whose_floating_ip_is_homed_at_a_live_claim_of_another_cluster_is_refused_with_its_reason():
    from metal3_ipam.core.asking import Ask, Op, Refused
    neutron, source, target = two_sides()
    for side in (source, target, source):
        side.sweep()
    answer = asyncio.run(target.pools.asks.ask(Ask(Op.ALLOCATE, LOST_KEY, ("ns", "fips"), None, 1, 0.0)))
    assert isinstance(answer, Refused) and answer.reason == p.ADDRESS_HOMED_ELSEWHERE, answer
    assert "OpenStackFloatingIPPool:pool-uid" in answer.message


def test_two_clusters_marking_one_floating_ip_at_once_keep_each_others_mark():
    from metal3_ipam.poolkinds.openstack import homes
    neutron, source, target = two_sides()
    # the source's sweep listed fip-1 before the target's sweep wrote its marks: both write from what they listed
    listed, real = [neutron.fips["fip-1"]], neutron.floating_ips
    target.sweep()
    neutron.floating_ips = lambda **query: listed if not query else real(**query)
    source.sweep()
    neutron.floating_ips = real
    marks = homes.marks_in(OWNER, neutron.fips["fip-1"].tags)
    assert homes.Home(homes.POOL, "target-pool-uid") in marks.homes | marks.holds
    assert homes.Home(homes.POOL, "pool-uid") in marks.homes | marks.holds


@settings(max_examples=200, deadline=None)
@given(st.lists(st.sampled_from(["sweep", "release source", "release target"]), max_size=14),
       st.sampled_from([(), ("metal3-ipam-home:OpenStackFloatingIPPool:pool-uid",)]),
       st.sampled_from([("source", "target"), ("target", "source")]))
def test_one_key_live_in_two_clusters_loses_its_floating_ip_to_no_order_of_sweeps_and_releases(steps, tags, order):
    """Both controllers up and sweeping at one interval (each sweep of one falls between two of the other's, in
    ``order``), once each swept since its claim came (the source's binding by this version homed the floating
    IP already, or an earlier version's left no mark), the deletions of the two claims at any point (SPEC §10.1,
    §10.3): the floating IP stays while either claim lives, is let go once both are gone, and sweeps settle (no
    mark written back and forth). A controller that misses a sweep: the tests below."""
    neutron, source, target = two_sides(*tags)
    sides, live, turn = {"source": source, "target": target}, {"source", "target"}, itertools.cycle(order)
    for step in ["sweep", "sweep"] + steps:
        step = f"sweep {next(turn)}" if step == "sweep" else step
        verb, name = step.split()
        if verb == "sweep":
            sides[name].sweep()
        elif name in live:
            released_by(sides[name])
            live.discard(name)
        if live:
            assert neutron.deleted == [] and neutron.fips["fip-1"].description == p.description(OWNER, LOST_KEY), \
                f"released under the live claim of {live}"
    if live:
        for _ in range(2):
            for side in sides.values():
                side.sweep()
        settled = neutron.fips["fip-1"].revision
        for side in sides.values():
            side.sweep()
        assert neutron.fips["fip-1"].revision == settled, "the sweeps write the marks back and forth"
    else:
        for _ in range(2):  # a claim's release may leave it to the other cluster, which its sweeps release
            for side in sides.values():
                side.sweep()
        assert [fip.id for fip in neutron.deleted] == ["fip-1"], neutron.fips


def test_a_floating_ip_taken_over_is_not_released_by_the_takers_claim_before_the_other_cluster_swept_again():
    neutron, source, target = two_sides()  # an earlier version's floating IP: no mark
    target.sweep()  # homed at the target's
    source.sweep()  # held by the source, waiting for an answer
    source.sweep()  # the target's controller missed its sweep: taken over by the source
    released_by(source)
    assert neutron.deleted == [], "released under the target's live claim ns/m1"


def test_a_claims_release_while_its_cluster_is_deleted_deletes_its_floating_ip():
    claim, lock = bound_objects()
    claim = {**claim, "metadata": {**claim["metadata"], "labels": {"cluster.x-k8s.io/cluster-name": "c1"}}}
    deleting = cluster_obj("c1-uid")
    deleting["metadata"]["deletionTimestamp"] = "2026-11-29T07:00:00Z"
    fip = lost_key_fip()
    neutron = FakeNeutron(fip)
    side = Side(neutron, cluster_obj("c1-uid"), pool_obj(), claim, lock)
    side.pools.writer = Writer()
    side.pools.asks.pool_changed(model())
    side.sweep()
    assert "metal3-ipam-home:Cluster:c1-uid" in neutron.fips["fip-1"].tags
    side.inventory.upsert(deleting)  # the Cluster torn down: its machines' claims go while it is deleted
    released_by(side)
    assert [f.id for f in neutron.deleted] == ["fip-1"], "the floating IP of a Cluster torn down was left"


def test_a_claim_deleted_before_its_cluster_took_over_a_moved_floating_ip_releases_it_at_the_next_sweeps():
    source_home = "metal3-ipam-home:OpenStackFloatingIPPool:" + "a" * 8  # the source's pool, gone with the move
    fip = lost_key_fip(source_home)
    neutron = FakeNeutron(fip)
    target = Side(neutron, cluster_obj("t1-uid"), pool_obj(uid="target-pool-uid"), *bound_objects())
    target.pools.writer = Writer()
    target.pools.asks.pool_changed(model())
    released_by(target)  # deleted at once after the move: the floating IP is still homed at the source's pool
    assert neutron.deleted == [] and "metal3-ipam-left:OpenStackFloatingIPPool:target-pool-uid" in \
        neutron.fips["fip-1"].tags, "released before the source could say its claim lives"
    target.sweep()
    assert neutron.deleted == []
    target.sweep()  # nobody answered for a claim there: released
    assert [f.id for f in neutron.deleted] == ["fip-1"], "the floating IP of the claim deleted after its move was left"


def test_a_floating_ip_a_copys_claim_left_stays_with_the_live_claim_of_its_home():
    neutron, source, target = two_sides()
    for side in (source, target):
        side.sweep()  # homed at the source, held by the copy's pool
    released_by(target)  # the copy deleted before the source answered its hold
    for side in (source, target, source, target, target):
        side.sweep()
    assert neutron.deleted == [] and neutron.fips["fip-1"].description == p.description(OWNER, LOST_KEY)
    from metal3_ipam.poolkinds.openstack import homes
    assert homes.marks_in(OWNER, neutron.fips["fip-1"].tags) == homes.Marks(
        homes=frozenset({homes.Home(homes.POOL, "pool-uid")})), "the copy's marks outlived it"


def test_a_move_stopped_half_way_and_retried_loses_no_floating_ip_and_ends_homed_in_the_target():
    """The copy in the target, paused, holds the floating IP; the source, restarted (no memory of its claims
    leaving) with its Cluster unpaused for the retry, releases nothing; the target, unpaused once the move ends,
    takes the floating IP over and its claim's deletion releases it."""
    neutron, source, target = two_sides()
    source.sweep()  # homed at the source
    target.inventory.upsert(cluster_obj("t1-uid", paused=True))  # the move under way: the copies paused
    source.inventory.upsert(cluster_obj("c1-uid", paused=True))
    for side in (target, source):
        side.sweep()
    claim, lock = bound_objects()
    restarted = Side(neutron, cluster_obj("c1-uid"), pool_obj())  # claims deleted for the move, then a restart
    for _ in range(3):
        restarted.sweep()
    assert neutron.deleted == [], "the source released the floating IP the paused target's claim is bound to"
    target.inventory.upsert(cluster_obj("t1-uid"))  # the retry ended: the target's Cluster unpaused
    for _ in range(2):
        target.sweep()
        restarted.sweep()
    from metal3_ipam.poolkinds.openstack import homes
    assert homes.marks_in(OWNER, neutron.fips["fip-1"].tags).homes == {homes.Home(homes.POOL, "target-pool-uid")}
    released_by(target)  # taken over from the source's home: marked left, released once nobody answered
    for _ in range(2):
        restarted.sweep()
        target.sweep()
    assert [f.id for f in neutron.deleted] == ["fip-1"]


def test_a_floating_ip_homed_at_a_paused_cluster_is_not_released_by_the_live_copys_claim():
    neutron, source, target = two_sides()
    source.sweep()  # homed at the source's
    source.inventory.upsert(cluster_obj("c1-uid", paused=True))  # the source's Cluster paused, its claim bound
    target.sweep()  # held by the copy, waiting for an answer
    source.sweep()  # paused: no answer
    target.sweep()  # taken over
    released_by(target)  # the copy deleted
    assert neutron.deleted == [], "released under the source's paused, bound claim ns/m1"


def test_a_floating_ip_a_copy_left_is_not_released_while_the_clusters_are_paused():
    neutron, source, target = two_sides()
    source.sweep()  # homed at the source's
    target.sweep()  # held by the copy, waiting for an answer
    released_by(target)  # the copy deleted before the source answered: held and marked left
    for side, uid in ((source, "c1-uid"), (target, "t1-uid")):  # a move of the namespace begins: both paused
        side.inventory.upsert(cluster_obj(uid, paused=True))
    for side in (source, target, source, target):
        side.sweep()
    assert neutron.deleted == [], "released under the source's paused, bound claim ns/m1"


def applied_again(side, uid="m1-uid-2", resource_version=1000):
    """ns/m1 applied again in ``side`` with its key (a new uid), and given its floating IP by an allocation."""
    from metal3_ipam.core.asking import Ask, Granted, Op
    claim, lock = bound_objects()
    claim["metadata"].update(uid=uid, resourceVersion=str(resource_version))
    lock["metadata"].update(uid=f"l-{uid}", resourceVersion=str(resource_version + 1))
    side.inventory.upsert(claim)
    answer = asyncio.run(side.pools.asks.ask(Ask(Op.ALLOCATE, LOST_KEY, ("ns", "fips"), None, 1, 0.0)))
    assert isinstance(answer, Granted) and answer.address == "203.0.113.40", answer
    side.inventory.upsert(lock)


def test_a_claim_applied_again_with_its_key_keeps_its_floating_ip_from_the_copys_take_over():
    neutron, source, target = two_sides("metal3-ipam-home:OpenStackFloatingIPPool:pool-uid")
    target.sweep()  # held by the copy, waiting for an answer
    source.sweep()  # answered: the source's claim lives
    released_by(source)  # the source's claim deleted: its marks come off, the copy's hold stays
    applied_again(source)  # ... and applied again with its key: homed at the source again
    target.sweep()  # the source had a sweep to answer before: taken over
    released_by(target)  # the copy deleted
    assert neutron.deleted == [], "released under the source's claim ns/m1, applied again and bound"


def test_a_floating_ip_is_not_taken_over_when_the_homes_sweep_listed_it_just_before_the_hold_was_written():
    neutron, source, target = two_sides()  # an earlier version's floating IP: no mark
    target.sweep()  # homed at the target's
    listed, real = [neutron.fips["fip-1"]], neutron.floating_ips
    source.sweep()  # held by the source, waiting for an answer
    neutron.floating_ips = lambda **query: listed if not query else real(**query)
    target.sweep()  # the target's sweep, at the same moment: it listed the floating IP before the hold came
    neutron.floating_ips = real
    source.sweep()  # one interval later, just before the target's: no answer, taken over
    released_by(source)
    assert neutron.deleted == [], "released under the target's live claim ns/m1"


def test_a_floating_ip_taken_over_is_released_when_the_takers_namespace_is_deleted_right_after_its_claim():
    source_home = "metal3-ipam-home:OpenStackFloatingIPPool:" + "a" * 8  # the source's pool, gone with the move
    fip = lost_key_fip(source_home)
    neutron = FakeNeutron(fip)
    target = Side(neutron, cluster_obj("t1-uid"), pool_obj(uid="target-pool-uid"), *bound_objects())
    target.pools.writer = Writer()
    target.sweep()
    target.sweep()  # nobody answered: taken over
    assert source_home not in neutron.fips["fip-1"].tags
    target.pools.asks.pool_changed(model())
    released_by(target)  # the namespace deleted: the claim first, then its pool (its finalizer: no claim left)
    gone = pool_obj(uid="target-pool-uid")
    gone["metadata"].update(resourceVersion="7", deletionTimestamp="2026-11-29T07:00:00Z")
    target.inventory.upsert(gone)
    target.inventory.remove(gone)
    for _ in range(4):
        target.sweep()
    assert [f.id for f in neutron.deleted] == ["fip-1"], f"no claim carries its key, yet Neutron keeps {neutron.fips}"


SOURCE_HOME = "metal3-ipam-home:OpenStackFloatingIPPool:" + "a" * 8  # the source's pool, gone with the move


def taken_over_by_the_target(cluster=False, asks=None):
    """The target of a finished move: ns/m1 bound to fip-1 (homed at the source's pool, gone), taken over by the
    target's two sweeps. ``cluster``: the claim is of Cluster c1 (homed at it, not at its pool)."""
    fip = lost_key_fip(SOURCE_HOME)
    neutron = FakeNeutron(fip)
    claim, lock = bound_objects()
    if cluster:
        claim["metadata"]["labels"] = {"cluster.x-k8s.io/cluster-name": "c1"}
    target = Side(neutron, cluster_obj("t1-uid"), pool_obj(uid="target-pool-uid"), claim, lock)
    if asks is not None:
        target.pools = a.OpenStackPools(asks(neutron), Asking(deadline=30), inventory=target.inventory,
                                        writer=None, wake=lambda *args: None)
    target.pools.writer = Writer()
    target.pools.asks.pool_changed(model(uid="target-pool-uid"))
    target.sweep()
    target.sweep()  # nobody answered: taken over
    assert SOURCE_HOME not in neutron.fips["fip-1"].tags
    return neutron, target


def deleting(side, obj, version="7"):
    """``obj`` deleted in ``side``, its finalizers holding it: seen deleting."""
    obj = {**obj, "metadata": {**obj["metadata"], "resourceVersion": version,
                               "deletionTimestamp": "2026-11-29T07:00:00Z"}}
    side.inventory.upsert(obj)
    return obj


def gone_from(side, obj, version="7"):
    """``obj`` deleted in ``side`` (its finalizers let go): seen deleting, then gone."""
    obj = {**obj, "metadata": {**obj["metadata"], "resourceVersion": version,
                               "deletionTimestamp": "2026-11-29T07:00:00Z"}}
    side.inventory.upsert(obj)
    side.inventory.remove(obj)


def test_a_floating_ip_taken_over_is_released_when_the_takers_cluster_and_pool_go_right_after_its_claim():
    neutron, target = taken_over_by_the_target(cluster=True)
    assert "metal3-ipam-home:Cluster:t1-uid" in neutron.fips["fip-1"].tags
    released_by(target)  # the namespace deleted: the claim, then its Cluster and pool
    gone_from(target, cluster_obj("t1-uid"))
    gone_from(target, pool_obj(uid="target-pool-uid"))
    for _ in range(4):
        target.sweep()
    assert [f.id for f in neutron.deleted] == ["fip-1"], f"no claim carries its key, yet Neutron keeps {neutron.fips}"


def test_a_floating_ip_taken_over_is_released_when_its_claim_goes_while_its_pool_is_being_deleted():
    neutron, target = taken_over_by_the_target()
    deleting = pool_obj(uid="target-pool-uid")
    deleting["metadata"].update(resourceVersion="7", deletionTimestamp="2026-11-29T07:00:00Z")
    target.inventory.upsert(deleting)  # the pool deleted first: it waits for its claims
    released_by(target)
    assert neutron.deleted == []
    for _ in range(3):
        target.sweep()
    assert [f.id for f in neutron.deleted] == ["fip-1"], f"no claim carries its key, yet Neutron keeps {neutron.fips}"


class SecretAsks(a.OpenStackAsks):
    """The asks as the controller runs them (its Secret read, its client kept per cloud), on the fake Neutron,
    whose Secret can be deleted (``gone``)."""

    def __init__(self, neutron):
        super().__init__(secrets=self, owner=OWNER)
        self.gone = False
        self._clients[("ns", model().identity, b"clouds.yaml", None)] = neutron  # the client of the Secret's clouds

    async def read(self, namespace, name):
        if self.gone:
            raise a.OpenStackError(p.IDENTITY_MISSING, f"Secret {namespace}/{name} (spec.identityRef) does not exist")
        return b"clouds.yaml", None

    def forget(self, namespace, name):
        pass


def test_a_floating_ip_taken_over_is_released_when_the_takers_namespace_goes_with_its_secret_first():
    neutron, target = taken_over_by_the_target(asks=SecretAsks)
    target.pools.asks.gone = True  # the namespace deleted: its Secret goes at once, its claim waits for its release
    released_by(target)
    assert neutron.deleted == [] and "metal3-ipam-left:OpenStackFloatingIPPool:target-pool-uid" in \
        neutron.fips["fip-1"].tags
    gone_from(target, pool_obj(uid="target-pool-uid"))
    for _ in range(3):
        target.sweep()
    assert [f.id for f in neutron.deleted] == ["fip-1"], f"no claim carries its key, yet Neutron keeps {neutron.fips}"


def test_a_claim_whose_secret_went_with_its_namespace_still_has_its_floating_ip_released():
    fip = lost_key_fip()
    neutron = FakeNeutron(fip)
    target = Side(neutron, pool_obj(), *bound_objects())
    target.pools = a.OpenStackPools(SecretAsks(neutron), Asking(deadline=30), inventory=target.inventory,
                                    writer=Writer(), wake=lambda *args: None)
    target.pools.asks.pool_changed(model())
    target.sweep()  # homed at its pool
    target.pools.asks.gone = True  # the namespace deleted: its Secret goes at once, its claim waits for its release
    released_by(target)
    assert [f.id for f in neutron.deleted] == ["fip-1"], "the claim's release was refused: its namespace never goes"


def test_the_other_clusters_live_claim_keeps_the_floating_ip_the_takers_claim_left_when_the_takers_namespace_went():
    neutron, source, target = two_sides()  # an earlier version's floating IP: no mark
    target.sweep()  # homed at the target's
    source.sweep()  # held by the source, waiting for an answer
    source.sweep()  # the target's controller missed its sweep: taken over by the source
    released_by(source)  # the source's namespace deleted: its claim, then its pool
    gone_from(source, pool_obj())
    gone_from(source, cluster_obj("c1-uid"))
    for side in (source, target, source, target, source, source, target):
        side.sweep()
    assert neutron.deleted == [] and neutron.fips["fip-1"].description == p.description(OWNER, LOST_KEY), \
        "released under the target's live claim ns/m1"
    from metal3_ipam.poolkinds.openstack import homes
    assert homes.marks_in(OWNER, neutron.fips["fip-1"].tags) == homes.Marks(
        homes=frozenset({homes.Home(homes.POOL, "target-pool-uid")})), "the source's marks outlived its namespace"
    assert source.pools.sweeper.marked == {}
    released_by(target)
    assert [f.id for f in neutron.deleted] == ["fip-1"]


def restarted_side(neutron, target, **pools_args) -> "Side":
    """``target``'s controller restarted: its memory gone, its cluster (the inventory) as it was."""
    restarted = Side(neutron)
    restarted.inventory = target.inventory
    restarted.pools = a.OpenStackPools(NeutronAsks(neutron), Asking(deadline=30), inventory=target.inventory,
                                       writer=Writer(), wake=lambda *args: None, **pools_args)
    return restarted


def test_a_floating_ip_taken_over_is_released_when_the_taker_restarted_after_its_claim_and_swept_before_its_pool_went():
    neutron, target = taken_over_by_the_target()
    released_by(target)
    restarted = restarted_side(neutron, target)
    restarted.pools.asks.pool_changed(model())
    restarted.sweep()  # found left by its claim here, unanswered
    gone_from(restarted, pool_obj(uid="target-pool-uid"))
    for _ in range(3):
        restarted.sweep()
    assert [f.id for f in neutron.deleted] == ["fip-1"], f"no claim carries its key, yet Neutron keeps {neutron.fips}"


class Holds(RecordedHolds):
    """The Secret holds written (``controller.outside.SecretHolds``): (namespace, name, held) in order."""

    finalizer = p.SECRET_FINALIZER


def test_a_floating_ip_taken_over_is_released_when_the_taker_restarted_after_its_claim_and_its_pool_went_at_once():
    """The namespace deleted right after the claim's release marked its floating IP left: the pool stays
    Terminating on its finalizer (and its Secret on ours), so a controller restarted before any sweep finds the
    floating IP again in Neutron through the pool as it is now, releases it once unanswered, and only then lets
    the pool go."""
    neutron, target = taken_over_by_the_target()
    released_by(target)
    deleting(target, pool_obj(uid="target-pool-uid"))  # the namespace deleted: the pool waits on its finalizer
    holds = Holds()
    restarted = restarted_side(neutron, target, secret_holds=holds)
    ref = ("ns", "fips")
    assert restarted.pools.answers.held(ref, "target-pool-uid") is not None, "let go before any sweep judged it"
    restarted.swept()
    assert neutron.deleted == [] and "1 floating IPs" in restarted.pools.answers.held(ref, "target-pool-uid")
    assert holds.calls == [("ns", "cloud", True)]
    for _ in range(3):
        restarted.swept()
    assert [f.id for f in neutron.deleted] == ["fip-1"], f"no claim carries its key, yet Neutron keeps {neutron.fips}"
    assert restarted.pools.answers.held(ref, "target-pool-uid") is None, "the pool is held once nothing is left"
    assert holds.calls == [("ns", "cloud", True), ("ns", "cloud", False)], "the user's Secret is held still"


@settings(max_examples=200, deadline=None)
@given(st.lists(st.sampled_from(["sweep", "release source", "release target", "namespace source",
                                 "namespace target", "move source"]), max_size=14),
       st.sampled_from([(), ("metal3-ipam-home:OpenStackFloatingIPPool:pool-uid",)]),
       st.sampled_from([("source", "target"), ("target", "source")]))
@example(["move source", "sweep", "sweep", "sweep", "release target", "namespace target"],
         ("metal3-ipam-home:OpenStackFloatingIPPool:pool-uid",), ("source", "target"))
def test_one_key_live_in_two_clusters_loses_its_floating_ip_to_no_order_of_releases_and_namespaces_deleted(
        steps, tags, order):
    """As above, with either cluster's namespace deleted whole at any point (its claim released, then its Cluster
    and pool gone; its controller still sweeping), or the source's left by a move whose target is the target's
    (its claim deleted for the move, released nowhere, its Cluster and pool gone with it, then its controller's
    next sweep): the floating IP stays while either claim lives, and is let go once both are gone, by whichever
    controller's sweeps (SPEC §10.1, §10.3)."""
    neutron, source, target = two_sides(*tags)
    sides, live, turn = {"source": source, "target": target}, {"source", "target"}, itertools.cycle(order)
    objects = {"source": (cluster_obj("c1-uid"), pool_obj()),
               "target": (cluster_obj("t1-uid"), pool_obj(uid="target-pool-uid"))}
    for step in ["sweep", "sweep"] + steps:
        step = f"sweep {next(turn)}" if step == "sweep" else step
        verb, name = step.split()
        if verb == "sweep":
            sides[name].sweep()
        elif verb == "move":
            if live != {"source", "target"}:
                continue  # the target's claim is the moved one: a move of a claim gone there is not this one
            deleted_for_move(sides[name])
            live.discard(name)
        elif name in live:
            released_by(sides[name])
            live.discard(name)
        if verb in ("namespace", "move") and objects.get(name):
            for obj in objects.pop(name):
                gone_from(sides[name], obj)
            if verb == "move":
                sides[name].sweep()  # its next sweep before the target's claim goes; after it, the floating
                # IP is kept (test_a_floating_ip_the_moved_claims_cluster_let_go_before_the_moves_source_saw_it_...)
        if live:
            assert neutron.deleted == [] and neutron.fips["fip-1"].description == p.description(OWNER, LOST_KEY), \
                f"released under the live claim of {live}"
    if not live:
        for _ in range(3):
            for side in sides.values():
                side.sweep()
        assert [fip.id for fip in neutron.deleted] == ["fip-1"], neutron.fips


def deleted_for_move(side):
    """ns/m1 and its lock deleted from ``side`` as ``clusterctl move`` deletes them: annotated for the move (same
    uid), then gone; released nowhere, and the claim seen leave for the move."""
    from metal3_ipam.core import kinds
    for obj in bound_objects():
        obj["metadata"]["annotations"][kinds.DELETE_FOR_MOVE_ANNOTATION] = "true"
        gone_from(side, obj)
    assert side.inventory.moved_away.get(LOST_KEY) == ("ns", "m1")


def moved_away_from(side, cluster_uid, pool_uid="pool-uid"):
    """ns/m1 left ``side`` for a finished ``clusterctl move``: its claim deleted for the move (released nowhere),
    then its pool and Cluster."""
    deleted_for_move(side)
    gone_from(side, pool_obj(uid=pool_uid))
    gone_from(side, cluster_obj(cluster_uid))


def test_the_source_of_a_finished_move_takes_its_marks_off_a_floating_ip_once_its_pool_went():
    """The source answered the hold of the target's paused copy, then the move deleted its claim and pool before
    its sweep took its hold off: its next sweep takes its marks off (by id), so the target takes the floating IP
    over and its release lets it go, not keeping it for a claim of a cluster that is gone."""
    neutron, source, target = two_sides()
    source.sweep()  # homed at the source
    target.sweep()  # held by the target's copy
    source.sweep()  # answered: the source's claim lives
    moved_away_from(source, "c1-uid")
    source.sweep()
    from metal3_ipam.poolkinds.openstack import homes
    marks = homes.marks_in(OWNER, neutron.fips["fip-1"].tags)
    assert homes.Home(homes.POOL, "pool-uid") not in marks.homes | marks.holds, "the gone source's marks stayed"
    assert neutron.deleted == [], "released the floating IP the moved claim is bound to in the target"
    for _ in range(2):
        target.sweep()
        source.sweep()
    assert homes.marks_in(OWNER, neutron.fips["fip-1"].tags).homes == {homes.Home(homes.POOL, "target-pool-uid")}
    released_by(target)
    for _ in range(3):
        target.sweep()
        source.sweep()
    assert [f.id for f in neutron.deleted] == ["fip-1"], f"no claim carries its key, yet Neutron keeps {neutron.fips}"


def test_a_floating_ip_is_released_when_the_targets_namespace_goes_after_the_moves_source_saw_the_moved_claims_mark():
    """The source answered the hold of the target's copy, then its claim moved there (deleted for the move); its
    next sweep finds the target's mark (the moved claim's cluster) and takes its own marks off: the floating IP is
    the target's, and the target's namespace deleted then lets it go."""
    neutron, source, target = two_sides()
    source.sweep()  # homed at the source
    target.sweep()  # held by the target's copy
    source.sweep()  # answered: the source's claim lives
    moved_away_from(source, "c1-uid")
    source.sweep()  # the moved claim's cluster marks it: the source's marks come off, that cluster decides
    assert neutron.deleted == [] and source.pools.sweeper.marked == {}
    released_by(target)  # the target's namespace deleted after the move
    gone_from(target, pool_obj(uid="target-pool-uid"))
    gone_from(target, cluster_obj("t1-uid"))
    for _ in range(4):
        source.sweep()
        target.sweep()
    assert [f.id for f in neutron.deleted] == ["fip-1"], f"no claim carries its key, yet Neutron keeps {neutron.fips}"


def test_a_floating_ip_the_moved_claims_cluster_let_go_before_the_moves_source_saw_it_there_is_kept():
    """Known limit (a leak, never a release under a live claim): the target's namespace deleted right after the move,
    before any sweep of the source since. The target's release kept the floating IP (the source had answered its
    hold) and took its marks off; the source finds only its own marks, as when the moved claim's cluster has not
    swept yet (``test_the_source_of_a_move_releases_nothing_while_the_moved_claims_cluster_has_not_swept_yet``), and
    cannot tell the two apart: it keeps the floating IP, marks and all."""
    from metal3_ipam.poolkinds.openstack import homes
    neutron, source, target = two_sides()
    source.sweep()  # homed at the source
    target.sweep()  # held by the target's copy
    source.sweep()  # answered: the source's claim lives
    moved_away_from(source, "c1-uid")
    released_by(target)  # the target's namespace deleted right after the move
    gone_from(target, pool_obj(uid="target-pool-uid"))
    gone_from(target, cluster_obj("t1-uid"))
    for _ in range(4):
        source.sweep()
        target.sweep()
    assert neutron.deleted == [] and neutron.fips["fip-1"].description == p.description(OWNER, LOST_KEY)
    marks = homes.marks_in(OWNER, neutron.fips["fip-1"].tags)
    assert marks == homes.Marks(homes=frozenset({homes.Home(homes.POOL, "pool-uid")}),
                                holds=frozenset({homes.Home(homes.POOL, "pool-uid")})), marks
    assert set(source.pools.sweeper.marked) == {"fip-1"}, "the source forgot the floating IP it keeps"


def test_the_source_of_a_move_whose_copy_in_a_third_cluster_answers_keeps_no_mark_and_releases_nothing():
    """The source answered the hold of a copy in another cluster, whose claim was deleted; the move of the source's
    namespace then went to a third cluster, whose claim is bound to the floating IP: the source keeps its marks until
    the third cluster's hold shows the moved claim, then takes them off, and the third cluster homes the floating
    IP."""
    from metal3_ipam.poolkinds.openstack import homes
    neutron, source, target = two_sides()
    for side in (source, target, source):
        side.sweep()  # homed at the source, held by the copy, answered
    released_by(target)  # the copy deleted: its hold comes off, the source's answer stays
    moved_away_from(source, "c1-uid")
    source.sweep()  # no mark of the moved claim's cluster yet: the source's marks stay
    third = Side(neutron, cluster_obj("u1-uid"), pool_obj(uid="third-pool-uid"), *bound_objects())
    third.pools.writer = Writer()
    for side in (third, source, third, source, third, source):
        side.sweep()
    assert neutron.deleted == [] and neutron.fips["fip-1"].description == p.description(OWNER, LOST_KEY), \
        "released under the third cluster's live claim ns/m1"
    assert homes.marks_in(OWNER, neutron.fips["fip-1"].tags) == homes.Marks(
        homes=frozenset({homes.Home(homes.POOL, "third-pool-uid")})), neutron.fips["fip-1"].tags


class CloudsAsks(NeutronAsks):
    """The asks on one fake Neutron per cloud (the project the pool's Secret names)."""

    def __init__(self, neutron):
        super().__init__(neutron)
        self.clouds = {"cloud": neutron}

    async def run(self, pool, work, *args):
        return work(self.clouds.setdefault(pool.identity.secret, FakeNeutron()), pool, self.owner, *args)


def test_a_floating_ip_taken_over_is_released_when_the_takers_namespace_is_made_again_with_a_pool_of_that_name():
    neutron, target = taken_over_by_the_target(asks=CloudsAsks)
    released_by(target)  # marked left: a claim of the home it was taken from may live
    gone_from(target, pool_obj(uid="target-pool-uid"))  # the namespace deleted: its claim, then its pool
    again = pool_obj(uid="target-pool-uid-2", identityRef={"name": "cloud-2"})  # made again, in another project
    again["metadata"]["resourceVersion"] = "8"
    target.inventory.upsert(again)
    target.pools.asks.pool_changed(p.read_pool(again)[0])
    for _ in range(4):
        target.sweep()
    assert [f.id for f in neutron.deleted] == ["fip-1"], f"no claim carries its key, yet Neutron keeps {neutron.fips}"


class RenamedCloudAsks(SecretAsks):
    """``SecretAsks`` whose Secret can be made again with other clouds (``made_again``): a client of its own."""

    clouds = b"clouds.yaml"

    def made_again(self, neutron):
        self.gone, self.clouds = False, b"clouds-2.yaml"
        self._clients[("ns", model().identity, self.clouds, None)] = neutron

    async def read(self, namespace, name):
        await super().read(namespace, name)
        return self.clouds, None


def test_a_floating_ip_taken_over_is_released_when_the_takers_namespace_is_made_again_with_a_secret_of_that_name():
    neutron, target = taken_over_by_the_target(asks=RenamedCloudAsks)
    target.pools.asks.gone = True  # the namespace deleted: its Secret goes at once, its claim waits for its release
    released_by(target)
    gone_from(target, pool_obj(uid="target-pool-uid"))
    target.pools.asks.made_again(FakeNeutron())  # the namespace made again, its Secret for another project
    for _ in range(4):
        target.sweep()
    assert [f.id for f in neutron.deleted] == ["fip-1"], f"no claim carries its key, yet Neutron keeps {neutron.fips}"


def test_a_floating_ip_taken_over_is_released_with_its_old_client_when_a_pool_and_secret_of_those_names_come_again(
        monkeypatch):
    """The namespace made again with a pool and a Secret of the same names for another project: the new pool's
    sweep makes its client anew (the Secret changed), and the client the floating IP was found with is kept for
    it (not closed) until it is released, then closed."""
    monkeypatch.setattr(FakeNeutron, "close", lambda self: setattr(self, "closed", True), raising=False)
    other = FakeNeutron()
    monkeypatch.setattr(a, "Neutron", lambda *args, **kw: other)
    neutron, target = taken_over_by_the_target(asks=RenamedCloudAsks)
    target.pools.asks.gone = True  # the namespace deleted: its Secret goes at once, its claim waits for its release
    released_by(target)
    gone_from(target, pool_obj(uid="target-pool-uid"))
    target.pools.asks.gone, target.pools.asks.clouds = False, b"clouds-2.yaml"  # made again, for another project
    again = pool_obj(uid="target-pool-uid-2")
    again["metadata"]["resourceVersion"] = "8"
    target.inventory.upsert(again)
    target.pools.asks.pool_changed(p.read_pool(again)[0])
    for _ in range(4):
        target.sweep()
    assert [f.id for f in neutron.deleted] == ["fip-1"], f"no claim carries its key, yet Neutron keeps {neutron.fips}"
    assert getattr(neutron, "closed", False) and not getattr(other, "closed", False)


class _ProjectClient:
    """A client of one project's Neutron (``neutron``), whose credentials Keystone refuses once ``revoked``."""

    def __init__(self, neutron):
        self.neutron, self.revoked = neutron, False

    def __getattr__(self, name):
        if self.revoked:
            raise a.OpenStackError(p.CREDENTIALS_REFUSED, "The request you have made requires authentication (401)")
        return getattr(self.neutron, name)

    def close(self):
        pass


class RotatedCloudAsks(SecretAsks):
    """``SecretAsks`` whose Secret is given new credentials of the same project (``rotated``); the old ones revoked."""

    clouds = b"clouds.yaml"

    def __init__(self, neutron):
        super().__init__(neutron)
        self.first = _ProjectClient(neutron)
        self._clients[("ns", model().identity, b"clouds.yaml", None)] = self.first

    async def read(self, namespace, name):
        await super().read(namespace, name)
        return self.clouds, None


def test_a_floating_ip_taken_over_is_released_when_its_pools_secret_is_rotated_after_the_pool_went(monkeypatch):
    """The pool deleted after its claim left a floating IP for another cluster to answer (the namespace and its
    Secret stay), then the Secret given new credentials of the same project and the old ones revoked: the pool
    stays Terminating, and its sweeps read the floating IP with the Secret as it is now (never the client it was
    found with), release it once unanswered, and then let the pool and the Secret go."""
    neutron = None
    monkeypatch.setattr(a, "Neutron", lambda *args, **kw: _ProjectClient(neutron))  # the new credentials' client
    neutron, target = taken_over_by_the_target(asks=RotatedCloudAsks)
    holds = target.pools.secret_holds = Holds()
    released_by(target)  # marked left: a claim of the home it was taken from may live
    assert neutron.deleted == []
    deleting(target, pool_obj(uid="target-pool-uid"))  # the pool deleted; its namespace and Secret stay
    asks = target.pools.asks
    asks.clouds, asks.first.revoked = b"clouds-rotated.yaml", True  # new credentials, same project; old revoked
    for _ in range(4):
        target.swept()
    assert [f.id for f in neutron.deleted] == ["fip-1"], f"no claim carries its key, yet Neutron keeps {neutron.fips}"
    assert target.pools.answers.held(("ns", "fips"), "target-pool-uid") is None
    assert holds.calls[-1] == ("ns", "cloud", False)


def test_a_release_that_leaves_a_floating_ip_holds_its_pool_being_deleted_until_a_sweep_judged_it():
    """The pool deleted first, judged by a sweep while its claim lived (and its Secret held: the floating IP was
    taken over from another cluster); the claim's release then marks the floating IP left: the pool is held again
    until a sweep judged it, which releases it once unanswered, and only then are the pool and the Secret let go."""
    neutron, target = taken_over_by_the_target()
    holds = target.pools.secret_holds = Holds()
    deleting(target, pool_obj(uid="target-pool-uid"))  # the pool deleted first: it waits for its claim
    target.swept()
    ref = ("ns", "fips")
    assert target.pools.answers.held(ref, "target-pool-uid") is None  # only its claim holds it
    assert holds.calls == [("ns", "cloud", True)], "a floating IP taken over, and its credentials' Secret not held"
    released_by(target)
    assert neutron.deleted == []
    assert target.pools.answers.held(ref, "target-pool-uid") is not None, "let go with a floating IP left unjudged"
    for _ in range(3):
        target.swept()
    assert [f.id for f in neutron.deleted] == ["fip-1"], f"no claim carries its key, yet Neutron keeps {neutron.fips}"
    assert target.pools.answers.held(ref, "target-pool-uid") is None
    changes = [call for i, call in enumerate(holds.calls) if i == 0 or holds.calls[i - 1] != call]
    assert changes == [("ns", "cloud", True), ("ns", "cloud", False)], holds.calls  # held (again by the release)


def test_the_source_of_a_move_releases_nothing_while_the_moved_claims_cluster_has_not_swept_yet():
    """The source answered the hold of a copy in another cluster, whose claim was deleted; the move of the source's
    namespace then went to a third cluster, which holds ns/m1 bound to fip-1 but whose controller does not sweep
    while the source sweeps three times (down, or started late): the source never saw the moved claim's mark, and
    keeps the floating IP, marks and all (SPEC §10 invariant 4: a claim keeps its address across a move). Once
    the third cluster marks it, the source's marks come off and the floating IP is homed there."""
    from metal3_ipam.poolkinds.openstack import homes
    neutron, source, target = two_sides()
    for side in (source, target, source):
        side.sweep()  # homed at the source, held by the copy, answered
    released_by(target)  # the copy deleted: its hold comes off, the source's answer stays
    moved_away_from(source, "c1-uid")
    third = Side(neutron, cluster_obj("u1-uid"), pool_obj(uid="third-pool-uid"), *bound_objects())
    third.pools.writer = Writer()
    for _ in range(3):
        source.sweep()  # the third cluster's controller is down
    assert neutron.deleted == [], "released under the third cluster's live claim ns/m1 (its controller not yet up)"
    assert neutron.fips["fip-1"].description == p.description(OWNER, LOST_KEY)
    for side in (third, source, third):
        side.sweep()  # held by the moved claim; the source's marks come off; homed at the third cluster
    assert neutron.deleted == [] and source.pools.sweeper.marked == {}
    assert homes.marks_in(OWNER, neutron.fips["fip-1"].tags) == homes.Marks(
        homes=frozenset({homes.Home(homes.POOL, "third-pool-uid")})), neutron.fips["fip-1"].tags


def test_a_pool_being_deleted_after_its_claim_moved_away_is_not_held_for_the_floating_ip_the_move_keeps():
    """A move stopped after deleting the claim, its Cluster then unpaused and the pool deleted: the floating IP the
    moved claim keeps is released by no sweep here, so the pool is not held waiting for it (it would wait for good
    while the moved claim's cluster does not sweep, saying a release is due)."""
    neutron, source, target = two_sides()
    for side in (source, target, source):
        side.sweep()  # homed at the source, held by the copy, answered
    released_by(target)  # the copy deleted: its hold comes off, the source's answer stays
    deleted_for_move(source)
    deleting(source, pool_obj())
    for _ in range(3):
        source.swept()
    assert neutron.deleted == [] and neutron.fips["fip-1"].description == p.description(OWNER, LOST_KEY)
    assert source.pools.answers.held(("ns", "fips"), "pool-uid") is None, "held for a floating IP it never releases"


def pool_went(side, obj):
    """The pool removed (its finalizers stripped, as ``clusterctl move`` or a forced deletion does) and forgotten as
    the controller forgets a pool gone; the Secrets it named settled."""
    gone_from(side, obj)

    async def forgotten():
        side.pools.pool_gone(o.PoolKey("ns", "fips", side.pools.pool_kind))
        await side.pools.settling

    asyncio.run(forgotten())


def test_a_pools_secret_is_let_go_when_the_pool_goes_without_its_finalizer():
    """The Secret held while a live claim's floating IP is marked by another cluster too; the pool then removed
    with its finalizers stripped: the Secret is let go at once, no pool naming it any more."""
    neutron, target = taken_over_by_the_target()
    holds = target.pools.secret_holds = Holds()
    target.swept()
    assert holds.calls == [("ns", "cloud", True)]
    pool_went(target, pool_obj(uid="target-pool-uid"))
    assert holds.calls == [("ns", "cloud", True), ("ns", "cloud", False)], "a Secret held for a pool that went"


def test_a_pools_secret_is_kept_when_its_pool_goes_while_another_pool_naming_it_needs_it():
    """Two pools of a namespace name one Secret; one goes without its finalizer while the other, not judged yet,
    still names it: the Secret stays held."""
    neutron, target = taken_over_by_the_target()
    holds = target.pools.secret_holds = Holds()
    target.swept()
    target.inventory.upsert(pool_obj(name="other-fips", uid="other-pool-uid"))
    pool_went(target, pool_obj(uid="target-pool-uid"))
    assert holds.calls == [("ns", "cloud", True)], "a Secret let go that another pool names"


def test_a_secret_recorded_held_is_let_go_by_a_controller_started_after_its_pool_went():
    """The record lists a Secret our finalizer held for a pool that went while no controller ran: the first sweep
    of a controller started then lets it go."""
    neutron, target = taken_over_by_the_target()
    gone_from(target, pool_obj(uid="target-pool-uid"))
    holds = Holds(recorded=[("ns", "cloud")])
    restarted = restarted_side(neutron, target, secret_holds=holds)
    restarted.swept()
    assert holds.calls == [("ns", "cloud", False)] and holds.record == set(), "a Secret held for no pool"


def test_a_pools_secret_is_let_go_by_the_next_sweep_when_the_pool_went_before_its_live_claim():
    """The pool removed with its finalizers stripped while its claim lives (the claim keeps what is filed under the
    pool): the next sweep judges no pool naming the Secret, and lets it go."""
    neutron, target = taken_over_by_the_target()
    holds = target.pools.secret_holds = Holds()
    target.swept()
    gone_from(target, pool_obj(uid="target-pool-uid"))
    target.swept()
    assert holds.calls == [("ns", "cloud", True), ("ns", "cloud", False)], "a Secret held for a pool that went"


def test_a_secret_recorded_held_in_a_namespace_not_served_is_left_to_the_controller_serving_it():
    """The record, shared by the controllers of a cluster, lists a Secret of a namespace this one does not serve:
    it is not this controller's to let go."""
    neutron, target = taken_over_by_the_target()
    target.inventory.namespaces = frozenset({"ns"})
    holds = target.pools.secret_holds = Holds(recorded=[("elsewhere", "cloud")])
    target.swept()
    assert ("elsewhere", "cloud", False) not in holds.calls and holds.record >= {("elsewhere", "cloud")}


class RestartedSecretAsks(SecretAsks):
    """:class:`SecretAsks` of a controller just started: no client made yet (one is made at the first read of the
    Secret), and the Secret not read at first (``fails`` reads refused: the API server answering 500, or timing
    out, once)."""

    def __init__(self, neutron, fails=1):
        super().__init__(neutron)
        self.neutron, self.fails = neutron, fails
        self._clients.clear()

    async def read(self, namespace, name):
        if self.fails:
            self.fails -= 1
            raise a.secret_unread(f"Secret {namespace}/{name} (spec.identityRef)",
                                  ApiException(status=500, reason="Internal Server Error"))
        self._clients.setdefault(("ns", model().identity, b"clouds.yaml", None), self.neutron)
        return b"clouds.yaml", None


def test_a_pool_being_deleted_is_not_let_go_on_one_failed_read_of_its_secret_after_a_restart():
    """As above (the namespace deleted right after the claim's release marked its floating IP left, the controller
    restarted before any sweep), but the first read of the Secret the restarted controller makes fails: the pool is
    let go only once a sweep listed its cloud, else the floating IP leaks."""
    neutron, target = taken_over_by_the_target()
    released_by(target)
    assert "metal3-ipam-left:OpenStackFloatingIPPool:target-pool-uid" in neutron.fips["fip-1"].tags
    deleting(target, pool_obj(uid="target-pool-uid"))  # the namespace deleted: the pool waits on its finalizer
    holds = Holds(recorded=[("ns", "cloud")])  # held since the sweeps that took the floating IP over
    restarted = restarted_side(neutron, target)
    restarted.pools = a.OpenStackPools(RestartedSecretAsks(neutron), Asking(deadline=30), inventory=target.inventory,
                                       writer=Writer(), wake=lambda *args: None, secret_holds=holds)
    restarted.pools.asks.pool_changed(model(uid="target-pool-uid"))
    ref = ("ns", "fips")
    restarted.swept()  # its Secret's read fails once
    if restarted.pools.answers.held(ref, "target-pool-uid") is None:
        gone_from(restarted, pool_obj(uid="target-pool-uid"), version="8")  # its finalizer comes off: it goes
    for _ in range(4):
        restarted.swept()
    assert [f.id for f in neutron.deleted] == ["fip-1"], f"no claim carries its key, yet Neutron keeps {neutron.fips}"


class UnreachableAsks(NeutronAsks):
    """:class:`NeutronAsks` of a cloud that never answers (Keystone and Neutron gone, or a mistyped URL)."""

    async def run(self, pool, work, *args):
        raise a.OpenStackError(p.UNREACHABLE, f"{pool.text}: cannot reach the cloud (connection refused)")


def _never_answering(neutron, target, holds):
    restarted = restarted_side(neutron, target, secret_holds=holds)
    restarted.pools = a.OpenStackPools(UnreachableAsks(neutron), Asking(deadline=30), inventory=target.inventory,
                                       writer=Writer(), wake=lambda *args: None, secret_holds=holds)
    return restarted


def test_a_pool_being_deleted_whose_cloud_never_answers_and_whose_secret_is_not_held_goes():
    """A pool deleted whose cloud never answered this controller (decommissioned, a mistyped URL), its Secret not
    held by our finalizer nor recorded held (nothing its claims left waits): judged from what this controller
    found (nothing), it goes, rather than holding its namespace's deletion for good."""
    neutron = FakeNeutron()
    target = Side(neutron, cluster_obj("t1-uid"), pool_obj(uid="target-pool-uid"))
    deleting(target, pool_obj(uid="target-pool-uid"))
    holds = Holds()
    restarted = _never_answering(neutron, target, holds)
    ref = ("ns", "fips")
    for _ in range(2):
        restarted.swept()
    assert restarted.pools.answers.held(ref, "target-pool-uid") is None, "held for good by a cloud that never answers"


def test_a_pool_being_deleted_whose_cloud_does_not_answer_is_held_while_its_secret_is_recorded_held():
    """As above, but the record lists its Secret held (an earlier sweep found a floating IP its claims left for
    another cluster): the pool is held while its cloud does not answer, and swept once it does."""
    neutron, target = taken_over_by_the_target()
    released_by(target)
    deleting(target, pool_obj(uid="target-pool-uid"))
    holds = Holds(recorded=[("ns", "cloud")])
    down = _never_answering(neutron, target, holds)
    ref = ("ns", "fips")
    for _ in range(3):
        down.swept()
    assert down.pools.answers.held(ref, "target-pool-uid") is not None, "let go with a floating IP left unjudged"
    assert neutron.deleted == [] and holds.record == {("ns", "cloud")}
    up = restarted_side(neutron, target, secret_holds=holds)
    for _ in range(4):
        up.swept()
    assert [f.id for f in neutron.deleted] == ["fip-1"], f"no claim carries its key, yet Neutron keeps {neutron.fips}"
    assert up.pools.answers.held(ref, "target-pool-uid") is None


class GoneSecretAsks(RestartedSecretAsks):
    """:class:`RestartedSecretAsks` whose Secret may be deleted (``gone``: not there)."""

    def __init__(self, neutron):
        super().__init__(neutron, fails=0)

    async def read(self, namespace, name):
        if self.gone:
            raise a.secret_unread(f"Secret {namespace}/{name} (spec.identityRef)",
                                  ApiException(status=404, reason="Not Found"))
        return await super().read(namespace, name)


def test_a_floating_ip_a_release_left_is_released_when_its_namespace_goes_with_its_secret_across_a_restart():
    source_home = "metal3-ipam-home:OpenStackFloatingIPPool:" + "a" * 8  # the source's pool, gone with the move
    fip = lost_key_fip(source_home)
    neutron = FakeNeutron(fip)
    holds = Holds()
    target = Side(neutron, cluster_obj("t1-uid"), pool_obj(uid="target-pool-uid"), *bound_objects())
    target.pools = a.OpenStackPools(SecretAsks(neutron), Asking(deadline=30), inventory=target.inventory,
                                    writer=Writer(), wake=lambda *args: None, secret_holds=holds)
    target.pools.asks.pool_changed(model(uid="target-pool-uid"))
    released_by(target)  # deleted at once after the move: the floating IP is still homed at the source's pool
    assert neutron.deleted == [] and "metal3-ipam-left:OpenStackFloatingIPPool:target-pool-uid" in \
        neutron.fips["fip-1"].tags
    deleting(target, pool_obj(uid="target-pool-uid"))  # the namespace deleted: the pool waits on its finalizer,
    gone_from(target, cluster_obj("t1-uid"))  # its Cluster goes, and its Secret unless our finalizer holds it
    restarted = restarted_side(neutron, target)
    restarted.pools = a.OpenStackPools(GoneSecretAsks(neutron), Asking(deadline=30),
                                       inventory=target.inventory, writer=Writer(), wake=lambda *args: None,
                                       secret_holds=holds)
    restarted.pools.asks.gone = ("ns", "cloud") not in holds.record
    restarted.pools.asks.pool_changed(model(uid="target-pool-uid"))
    ref = ("ns", "fips")
    assert restarted.pools.answers.held(ref, "target-pool-uid") is not None, "let go before any sweep judged it"
    restarted.swept()
    if restarted.pools.answers.held(ref, "target-pool-uid") is None:
        gone_from(restarted, pool_obj(uid="target-pool-uid"), version="8")  # its finalizer comes off: it goes
    for _ in range(4):
        restarted.swept()
    assert [f.id for f in neutron.deleted] == ["fip-1"], f"no claim carries its key, yet Neutron keeps {neutron.fips}"


class ReleasedWhileListing(NeutronAsks):
    """Neutron answers the sweep's listing, and the claim's release runs before the sweep reads it (two requests in
    flight at once: the listing read before the release marked the floating IP left)."""

    def __init__(self, neutron):
        super().__init__(neutron)
        self.release = None

    async def run(self, pool, work, *args):
        found = await super().run(pool, work, *args)
        if work is sweep.owned and self.release is not None:
            release, self.release = self.release, None
            await release()
        return found


def test_a_floating_ip_a_release_left_while_a_sweep_listed_neutron_is_released_when_its_namespace_goes():
    """The sweep listed the floating IP as it was before the release marked it left: the sweep does not forget what
    the release remembered, so the pool, its namespace deleted, waits for it, and it is released once unanswered."""
    from metal3_ipam.core.asking import Ask, Op
    fip = lost_key_fip(SOURCE_HOME)
    neutron = FakeNeutron(fip)
    claim, lock = bound_objects()
    target = Side(neutron, cluster_obj("t1-uid"), pool_obj(uid="target-pool-uid"), claim, lock)
    target.pools = a.OpenStackPools(ReleasedWhileListing(neutron), Asking(deadline=30), inventory=target.inventory,
                                    writer=Writer(), wake=lambda *args: None, secret_holds=Holds())
    target.pools.asks.pool_changed(model(uid="target-pool-uid"))
    release = Ask(Op.RELEASE, LOST_KEY, ("ns", "fips"), None, 1, 0.0)
    target.pools.asks.release = lambda: target.pools.asks.ask(release)
    claim = deleting(target, claim)
    target.swept()  # the claim's release runs while the sweep lists Neutron
    assert "metal3-ipam-left:OpenStackFloatingIPPool:target-pool-uid" in neutron.fips["fip-1"].tags
    for obj in (claim, lock):  # released: the claim and its lock go
        target.inventory.remove(obj)
    ref = ("ns", "fips")
    terminating = deleting(target, pool_obj(uid="target-pool-uid"), version="8")  # then the namespace deleted
    gone_from(target, cluster_obj("t1-uid"))
    if target.pools.answers.held(ref, "target-pool-uid") is None:
        gone_from(target, terminating, version="9")  # judged by the sweep, nothing waiting: its finalizer comes off
    for _ in range(4):
        target.swept()
    assert [f.id for f in neutron.deleted] == ["fip-1"], f"no claim carries its key, yet Neutron keeps {neutron.fips}"


class Unrecordable(UnrecordableHolds):
    """The API server refuses the record (the Lease) and the finalizer: nothing can be held."""

    finalizer = p.SECRET_FINALIZER


def test_a_release_that_leaves_a_floating_ip_is_refused_while_its_pools_secret_can_be_neither_held_nor_recorded():
    """Marked left with its Secret neither held nor recorded, the floating IP would be forgotten by a restart or a
    namespace deleted right after: the release is refused (the claim keeps its finalizer) and asked again, which
    holds the Secret once the API server answers."""
    from metal3_ipam.core.asking import Ask, Op, Refused, Released
    fip = lost_key_fip(SOURCE_HOME)
    neutron = FakeNeutron(fip)
    target = Side(neutron, cluster_obj("t1-uid"), pool_obj(uid="target-pool-uid"), *bound_objects())
    target.pools.secret_holds = Unrecordable()
    target.pools.asks.pool_changed(model(uid="target-pool-uid"))
    release = Ask(Op.RELEASE, LOST_KEY, ("ns", "fips"), None, 1, 0.0)
    answer = asyncio.run(target.pools.asks.ask(release))
    assert isinstance(answer, Refused) and answer.reason == "SecretNotHeld", answer
    assert neutron.deleted == []
    target.pools.secret_holds = holds = Holds()  # the API server answers again
    assert isinstance(asyncio.run(target.pools.asks.ask(release)), Released)
    assert holds.record == {("ns", "cloud")} and neutron.deleted == []


def test_a_pool_being_deleted_whose_spec_cannot_be_read_is_not_held_for_good():
    unreadable = pool_obj(preAllocatedFloatingIPs=["203.0.113.5", "203.0.113.5"])
    assert p.read_pool(unreadable)[0] is None
    side = Side(FakeNeutron(), pool_obj(ns="other", uid="other-pool-uid"))
    deleting(side, unreadable)
    for _ in range(4):
        side.swept()
    assert side.pools.answers.held(("ns", "fips"), "pool-uid") is None, side.pools.answers.held(("ns", "fips"),
                                                                                                 "pool-uid")


def test_a_floating_ip_a_release_left_is_released_when_its_cluster_goes_and_the_controller_restarts():
    source_home = "metal3-ipam-home:OpenStackFloatingIPPool:" + "a" * 8  # the source's pool, gone with the move
    fip = lost_key_fip(source_home)
    neutron = FakeNeutron(fip)
    claim, lock = bound_objects()
    claim["metadata"]["labels"] = {"cluster.x-k8s.io/cluster-name": "c1"}
    target = Side(neutron, cluster_obj("t1-uid"), pool_obj(uid="target-pool-uid"), claim, lock)
    target.pools.writer = Writer()
    target.pools.asks.pool_changed(model(uid="target-pool-uid"))
    released_by(target)  # deleted at once after the move: the floating IP is still homed at the source's pool
    assert neutron.deleted == [] and "metal3-ipam-left:Cluster:t1-uid" in neutron.fips["fip-1"].tags, \
        neutron.fips["fip-1"].tags
    gone_from(target, cluster_obj("t1-uid"))  # the workload cluster torn down; the pool of its namespace stays
    restarted = restarted_side(neutron, target)
    restarted.pools.asks.pool_changed(model(uid="target-pool-uid"))
    for _ in range(4):
        restarted.swept()
    assert [f.id for f in neutron.deleted] == ["fip-1"], f"no claim carries its key, yet Neutron keeps {neutron.fips}"


class OneCloudUnreachable(NeutronAsks):
    """:class:`NeutronAsks` where the cloud of pool ``name`` never answers (decommissioned before its pool)."""

    def __init__(self, neutron, name):
        super().__init__(neutron)
        self.name = name

    async def run(self, pool, work, *args):
        if pool.name == self.name:
            raise a.OpenStackError(p.UNREACHABLE, f"{pool.text}: cannot reach the cloud (connection refused)")
        return await super().run(pool, work, *args)


def _two_pools_naming_one_secret_one_cloud_unreachable():
    """ns/fips (its claim ns/m1 bound to fip-1, homed at the source's pool) and ns/fips-b, of a cloud that never
    answers, name one clouds.yaml Secret: Neutron, the Secret holds, the side and ns/fips-b."""
    fip = lost_key_fip(SOURCE_HOME)
    neutron = FakeNeutron(fip)
    holds = Holds()
    other = pool_obj(name="fips-b", uid="b-pool-uid", identityRef={"name": "cloud", "cloudName": "decommissioned"})
    target = Side(neutron, cluster_obj("t1-uid"), pool_obj(uid="target-pool-uid"), other, *bound_objects())
    target.pools = a.OpenStackPools(OneCloudUnreachable(neutron, "fips-b"), Asking(deadline=30),
                                    inventory=target.inventory, writer=Writer(), wake=lambda *args: None,
                                    secret_holds=holds)
    target.pools.asks.pool_changed(model(uid="target-pool-uid"))
    return neutron, holds, target, other


def test_a_pool_being_deleted_whose_cloud_never_answers_goes_once_the_floating_ip_a_sibling_pool_left_is_released():
    """Two pools of one namespace name one clouds.yaml Secret (two clouds in it): ns/fips, whose claim's release
    left a floating IP homed at another cluster (the Secret held for it), and ns/fips-b of a cloud decommissioned
    since, deleted, whose claims never left anything. Once the floating IP ns/fips's claim left is released (no
    claim there answered), nothing needs the Secret: it is let go, and ns/fips-b goes."""
    neutron, holds, target, other = _two_pools_naming_one_secret_one_cloud_unreachable()
    released_by(target)  # deleted at once after the move: the floating IP is still homed at the source's pool
    assert "metal3-ipam-left:OpenStackFloatingIPPool:target-pool-uid" in neutron.fips["fip-1"].tags
    assert holds.record == {("ns", "cloud")}
    deleting(target, other)  # then ns/fips-b deleted
    for _ in range(6):
        target.swept()
    assert [f.id for f in neutron.deleted] == ["fip-1"], f"no claim carries its key, yet Neutron keeps {neutron.fips}"
    assert target.pools.answers.held(("ns", "fips-b"), "b-pool-uid") is None, \
        target.pools.answers.held(("ns", "fips-b"), "b-pool-uid")
    assert holds.record == set(), "the Secret stays held though no pool's claims left anything any more"


def test_a_pool_deleted_whose_cloud_never_answers_goes_after_a_sibling_pools_left_floating_ip_was_released_before():
    """As above, but ns/fips-b is deleted only once the floating IP ns/fips's claim left was released: meanwhile
    ns/fips-b, alive and unswept (its cloud never answers), kept the Secret held while ns/fips was struck off it."""
    neutron, holds, target, other = _two_pools_naming_one_secret_one_cloud_unreachable()
    released_by(target)
    assert holds.pools - {("ns", "cloud", NO_POOL)} == {("ns", "cloud", "target-pool-uid")}
    for _ in range(6):
        target.swept()
    assert [f.id for f in neutron.deleted] == ["fip-1"], f"no claim carries its key, yet Neutron keeps {neutron.fips}"
    assert holds.record == {("ns", "cloud")} and holds.pools - {("ns", "cloud", NO_POOL)} == set()  # kept by
    # ns/fips-b, not judged; no pool named
    deleting(target, other)  # then ns/fips-b deleted
    for _ in range(6):
        target.swept()
    assert target.pools.answers.held(("ns", "fips-b"), "b-pool-uid") is None, \
        target.pools.answers.held(("ns", "fips-b"), "b-pool-uid")
    assert holds.record == set(), "the Secret stays held though no pool's claims left anything any more"