"""Pools of three kinds named alike (an IPPool and an InClusterIPPool of one namespace, one of another,
and a GlobalInClusterIPPool), overlapping, with claims of one name in two namespaces, deleted, their names
reused by new objects, and their Cluster paused by annotation, unpaused, deleted and back: after every
step the real reconcile is run to its fixed point, and SPEC §10 holds (no IP bound to two live claims of
a namespace whatever their pools, nor twice by the global pool; every claim one address or an error;
nothing leaked)."""

from __future__ import annotations

import copy
import itertools
import random

from hypothesis import HealthCheck, settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, initialize, invariant, rule

from metal3_ipam.poolkinds.incluster import spec as ic
from metal3_ipam.core import kinds
from metal3_ipam.core import objects as o
from metal3_ipam.memory import converge
from ipam_objects import all_plans, capi_claim, cluster, ipclaim, ippool, loaded, user_delete

NAMESPACES = ("ns-a", "ns-b")
NAMES = ("c0", "c1", "c2")
LABEL = kinds.CLUSTER_NAME_LABEL
# (pool kind, namespace of the pool or None for the global one): the claims each may have.
POOLS = {"ippool": (kinds.IPPOOL, "ns-a"), "incluster-a": (ic.IN_CLUSTER_IP_POOL, "ns-a"),
         "incluster-b": (ic.IN_CLUSTER_IP_POOL, "ns-b"), "global": (ic.GLOBAL_IN_CLUSTER_IP_POOL, None)}


def in_cluster(kind, ns, addresses):
    meta = {"name": "p", "uid": f"uid-{kind[1]}-{ns}"}
    if ns:
        meta["namespace"] = ns
    return {"apiVersion": ic.API_VERSION, "kind": kind[1], "metadata": meta,
            "spec": {"addresses": addresses, "prefix": 24}}


class PoolKindsInOneWorld(RuleBasedStateMachine):
    uids = itertools.count()

    @initialize(seed=st.integers(0, 2**16))
    def start(self, seed):
        self.rng = random.Random(seed)
        self.api = loaded(
            ippool("p", ns="ns-a", namePrefix="m", pools=[{"start": "10.9.0.2", "end": "10.9.0.5"}], prefix=24),
            in_cluster(ic.IN_CLUSTER_IP_POOL, "ns-a", ["10.9.0.3-10.9.0.6"]),
            in_cluster(ic.IN_CLUSTER_IP_POOL, "ns-b", ["10.9.0.1-10.9.0.3"]),
            in_cluster(ic.GLOBAL_IN_CLUSTER_IP_POOL, None, ["10.9.0.2-10.9.0.7"]),
            cluster("cl", ns="ns-a"), cluster("cl", ns="ns-b"))
        self.settle()

    def settle(self):
        converge(self.api, self.rng)

    def claim_kinds(self):
        return (kinds.IPCLAIM, kinds.CAPI_CLAIM)

    @rule(name=st.sampled_from(NAMES), ns=st.sampled_from(NAMESPACES), pool=st.sampled_from(sorted(POOLS)),
          metal3=st.booleans(), labelled=st.booleans())
    def user_creates_claim(self, name, ns, pool, metal3, labelled):
        kind, pool_ns = POOLS[pool]
        if pool_ns is not None and pool_ns != ns:
            return
        labels = {LABEL: "cl"} if labelled else None
        if kind == kinds.IPPOOL and metal3:
            claim, claim_kind = ipclaim(name, pool="p", ns=ns, labels=labels), kinds.IPCLAIM
        else:
            claim, claim_kind = capi_claim(name, pool="p", ns=ns, api_group=kind[0], kind=kind[1], labels=labels), \
                kinds.CAPI_CLAIM
        if self.api.inventory.get(claim_kind, ns, name) is not None:
            return
        claim["metadata"]["uid"] = f"claim-{next(self.uids)}"
        self.api.load(claim)
        self.settle()

    @rule(name=st.sampled_from(NAMES), ns=st.sampled_from(NAMESPACES), metal3=st.booleans())
    def user_deletes_claim(self, name, ns, metal3):
        kind = kinds.IPCLAIM if metal3 else kinds.CAPI_CLAIM
        claim = self.api.inventory.get(kind, ns, name)
        if claim is None or o.is_deleting(claim):
            return
        user_delete(self.api, kind, name, ns)
        self.settle()

    @rule(ns=st.sampled_from(NAMESPACES), how=st.sampled_from(["annotation", "spec", "resume", "delete", "back"]))
    def the_cluster_changes(self, ns, how):
        current = self.api.inventory.get(kinds.CLUSTER, ns, "cl")
        if how == "back":
            if current is not None:
                return
            new = cluster("cl", ns=ns)
            new["metadata"]["uid"] = f"cluster-{next(self.uids)}"
            self.api.load(new)
        elif current is None:
            return
        elif how == "delete":
            self.api.inventory.remove(current)
        else:
            new = copy.deepcopy(current)
            new["metadata"]["resourceVersion"] = self.api._next_version()
            if how == "annotation":
                new["metadata"]["annotations"] = {kinds.PAUSED_ANNOTATION: ""}
            elif how == "spec":
                new["spec"]["paused"] = True
            else:
                new["metadata"].pop("annotations", None)
                new["spec"]["paused"] = False
            self.api.inventory.upsert(new)
        self.settle()

    # -- what must hold -------------------------------------------------------------------

    def paused(self, ns):
        return o.cluster_paused(self.api.inventory.get(kinds.CLUSTER, ns, "cl"))

    @invariant()
    def no_ip_bound_to_two_live_claims(self):
        inv = self.api.inventory
        holders: dict[tuple[str, str], set] = {}  # (namespace, ip) -> claims
        global_ips: dict[str, set] = {}
        for address in inv.of_kind(kinds.IPADDRESS):
            key = o.claim_of_address(address)
            ns = (o.spec(address).get("claim") or {}).get("namespace") or o.namespace(address)
            claim = inv.get((kinds.METAL3_GROUP if key[0] == "IPClaim" else kinds.CAPI_IPAM_GROUP, key[0]), ns, key[1])
            if claim is None or o.is_deleting(claim):
                continue
            who = (ns, key[0], key[1])
            holders.setdefault((ns, o.spec(address)["address"]), set()).add(who)
        for address in inv.of_kind(kinds.CAPI_ADDRESS):
            claim = inv.get(kinds.CAPI_CLAIM, o.namespace(address), o.spec(address)["claimRef"]["name"])
            if claim is None or o.is_deleting(claim):
                continue
            who = (o.namespace(address), "IPAddressClaim", o.name(claim))
            holders.setdefault((o.namespace(address), o.spec(address)["address"]), set()).add(who)
            if o.spec(address)["poolRef"]["kind"] == ic.GLOBAL_IN_CLUSTER_IP_POOL[1]:
                global_ips.setdefault(o.spec(address)["address"], set()).add(who)
        assert all(len(who) == 1 for who in holders.values()), {k: v for k, v in holders.items() if len(v) > 1}
        assert all(len(who) == 1 for who in global_ips.values()), global_ips

    @invariant()
    def every_claim_one_address_or_an_error_and_nothing_leaked(self):
        inv = self.api.inventory
        claims = {(o.namespace(c), kinds.kind_of(c)[1], o.name(c)): c
                  for kind in (kinds.IPCLAIM, kinds.CAPI_CLAIM) for c in inv.of_kind(kind)}
        mine: dict[tuple, list] = {}
        for address in inv.of_kind(kinds.IPADDRESS):
            key = o.claim_of_address(address)
            # A global pool's locks live in the lock namespace; their spec.claim names the claim's own.
            ns = (o.spec(address).get("claim") or {}).get("namespace") or o.namespace(address)
            if o.is_guard(address):
                # The guard of its IP in its namespace: no address of the claim, and gone with it.
                assert (ns, key[0], key[1]) in claims, f"guard {ns}/{o.name(address)} outlives its claim"
                continue
            mine.setdefault((ns, key[0], key[1]), []).append(address)
        for address in inv.of_kind(kinds.CAPI_ADDRESS):
            assert (o.namespace(address), "IPAddressClaim", o.spec(address)["claimRef"]["name"]) in claims, \
                f"Cluster API IPAddress {o.namespace(address)}/{o.name(address)} outlives its claim"
        for key, addresses in mine.items():
            claim = claims.get(key)
            if claim is None:
                assert self.paused(key[0]), f"{key} is gone but its addresses stay: {[o.name(a) for a in addresses]}"
                continue
            live = [a for a in addresses if not o.is_deleting(a)]
            assert len(live) <= 1, f"{key} holds {[o.name(a) for a in live]}"
        for key, claim in claims.items():
            if self.paused(key[0]) or o.is_paused(claim) or o.is_deleting(claim):
                continue
            ready = o.condition(o.status(claim), "Ready")
            assert ready is not None, f"{key}: no Ready condition: {o.status(claim)}"
            assert (ready["status"] == "True") == bool(mine.get(key)), (key, ready, mine.get(key))

    @invariant()
    def a_fixed_point(self):
        for plan in all_plans(self.api):
            assert not plan, plan.describe()


PoolKindsInOneWorld.TestCase.settings = settings(max_examples=400, stateful_step_count=25, deadline=None,
                                                 suppress_health_check=[HealthCheck.too_slow])
test_pool_kinds_in_one_world = PoolKindsInOneWorld.TestCase
