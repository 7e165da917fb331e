"""Inputs and orders of events that break a SPEC §10 invariant or leave the reconcile without a fixed point.

Each test is the smallest case found of a problem the core once had.
"""

from __future__ import annotations

import copy
import random

import netaddr

from metal3_ipam.core import kinds
from metal3_ipam.core import objects as o
from metal3_ipam.core.actions import Create
from metal3_ipam.core.inventory import Inventory
from metal3_ipam.core.reconcile import reconcile
from metal3_ipam.memory import MemoryApi, Refused, converge
from go_ipam_objects import go_pool, go_served_capi_claim, go_served_ipclaim
from ipam_objects import NS, all_plans, get, ipclaim, ippool, loaded

POOL, IPCLAIM, CAPI_CLAIM = kinds.IPPOOL, kinds.IPCLAIM, kinds.CAPI_CLAIM
ADDRESS, CAPI_ADDRESS = kinds.IPADDRESS, kinds.CAPI_ADDRESS


def live_bindings(api: MemoryApi) -> dict[int, set[tuple[str, str]]]:
    """IPv4-or-IPv6 IP (IPv4-mapped IPv6 folded to IPv4) -> live claims that a live address of either API holds it for."""
    claims = {(c["kind"], o.name(c)) for kind in (IPCLAIM, CAPI_CLAIM) for c in api.inventory.of_kind(kind)
              if not o.is_deleting(c)}
    held: dict[int, set] = {}
    for kind, claim_of in ((ADDRESS, o.claim_of_address), (CAPI_ADDRESS, o.claim_of_capi_address)):
        for a in api.inventory.of_kind(kind):
            key = claim_of(a)
            if key in claims and not o.is_deleting(a):
                ip = netaddr.IPAddress(o.spec(a)["address"])
                if ip.is_ipv4_mapped():
                    ip = ip.ipv4()
                held.setdefault((ip.version, int(ip)), set()).add(key)
    return held


def twice(api: MemoryApi) -> dict:
    return {ip: who for ip, who in live_bindings(api).items() if len(who) > 1}


def ready_false(api: MemoryApi, kind, name) -> bool:
    conds = [c for c in o.status(get(api, kind, name)).get("conditions") or [] if c.get("type") == "Ready"]
    return bool(conds) and conds[0]["status"] == "False"


# -- 1. an adopted lock that can never be created blocks the pool for ever -------------------------

def test_go_state_where_the_adopted_lock_name_is_taken_neither_loops_nor_blocks_the_pool():
    """Two pools sharing namePrefix "gp" and a range, as the Go IPAM allowed: it gave 10.0.0.5 to an
    IPClaim from one (Metal3 IPAddress gp-10-0-0-5) and to an IPAddressClaim from the other (Cluster
    API IPAddress gp-10-0-0-5; the name lock never met across kinds). The lock that adoption wants
    for the IPAddressClaim is taken, so ``adopt`` plans the same refused Create on every pass, and
    while it does ``adopting > 0`` keeps every new claim of that pool pending."""
    spec = {"namePrefix": "gp", "pools": [{"start": "10.0.0.1", "end": "10.0.0.8"}]}
    p1, p2 = go_pool("p1", NS, spec), go_pool("p2", NS, spec)
    api = loaded(p1, p2, *go_served_ipclaim("a", p1, "10.0.0.5"), *go_served_capi_claim("b", p2, "10.0.0.5"),
                 ipclaim("new", pool="p2"))
    converge(api, random.Random(0), max_rounds=20)  # raises: no fixed point
    # The new claim of p2 is served (or told why not).
    new_ips = [ip for ip, who in live_bindings(api).items() if ("IPClaim", "new") in who]
    assert len(new_ips) == 1 or ready_false(api, IPCLAIM, "new")


# -- 2. an orphan without an owner uid whose claim name now lives in another pool --------------------

def test_an_orphan_address_without_owner_uid_whose_claim_name_lives_in_another_pool_reaches_a_fixed_point():
    """An IPAddress of pool pa for IPClaim "c", with no owner references (left by another tool, as in
    test_trust), while an IPClaim "c" exists for pool pb. Pool pa sees no claim "c" and lets the
    address go with ``unless_exists`` = IPClaim c without uid; the claim of pool pb exists, so the
    Delete is refused, on every pass."""
    leftover = {"apiVersion": kinds.METAL3_API_VERSION, "kind": "IPAddress",
                "metadata": {"name": "pa-10-0-0-1", "namespace": NS,
                             "finalizers": [kinds.FINALIZERS[ADDRESS]]},
                "spec": {"address": "10.0.0.1", "pool": {"name": "pa", "namespace": NS},
                         "claim": {"name": "c", "namespace": NS}}}
    api = loaded(ippool("pa", pools=[{"start": "10.0.0.1", "end": "10.0.0.3"}]),
                 ippool("pb", pools=[{"start": "10.0.1.1", "end": "10.0.1.3"}]),
                 leftover, ipclaim("c", pool="pb"))
    converge(api, random.Random(0), max_rounds=20)  # raises: no fixed point
    assert not any(all_plans(api))


# -- 3. an IPv4-mapped text form adopted as an IPv6 address in an IPv4 pool -------------------------

def test_an_adopted_address_written_as_ipv4_mapped_ipv6_still_holds_its_ipv4_address():
    """A Cluster API IPAddress (shaped as the Go IPAM writes them) whose spec.address another tool wrote
    as ``::ffff:10.0.0.5``, in an IPv4 pool. ``account`` skips it (IPv6 in an IPv4 pool), adoption
    makes the lock ``gp---ffff-a00-5`` at ``::ffff:a00:5`` instead of ``gp-10-0-0-5``, and the next
    claim is given 10.0.0.5: the same IPv4 address bound to two live claims."""
    pool = go_pool("gp", NS, {"namePrefix": "gp", "pools": [{"start": "10.0.0.5", "end": "10.0.0.6"}]})
    claim, address = go_served_capi_claim("k", pool, "10.0.0.5")
    address["spec"]["address"] = "::ffff:10.0.0.5"
    api = loaded(pool, claim, address, ipclaim("n", pool="gp"))
    converge(api, random.Random(0))
    assert not twice(api), twice(api)


# -- 4. two active replicas and a pool that grows into another pool with another namePrefix --------

class Replica:
    """A controller's cache over a shared store: its own writes are filed at once, the rest when delivered."""

    def __init__(self, store: MemoryApi) -> None:
        self.store = store
        self.cache = Inventory()
        for kind in (POOL, IPCLAIM, CAPI_CLAIM, ADDRESS, CAPI_ADDRESS):
            for obj in store.inventory.of_kind(kind):
                self.cache.upsert(copy.deepcopy(obj))

    def deliver(self, kind, name) -> None:
        self.cache.upsert(copy.deepcopy(self.store.inventory.get(kind, NS, name)))

    def pass_(self, pool: str) -> None:
        plan = reconcile(self.cache.snapshot((NS, pool), self.store.now, random.Random(0)))
        for step in plan.steps:
            for action in step.actions:
                try:
                    self.store.do(action)
                except Refused:
                    break
                target = o.ref(action.obj) if isinstance(action, Create) else getattr(action, "target", None)
                if target is not None:
                    stored = self.store.inventory.get(target.group_kind, target.namespace, target.name)
                    if stored is not None:
                        self.cache.upsert(copy.deepcopy(stored))


# -- 5. a late DELETED of an earlier incarnation brings a later, deleted one back ------------------

def _address(uid: str, version: int) -> dict:
    return {"apiVersion": kinds.METAL3_API_VERSION, "kind": "IPAddress",
            "metadata": {"name": "a", "namespace": NS, "uid": uid, "resourceVersion": str(version)},
            "spec": {"address": "10.0.0.1", "pool": {"name": "p", "namespace": NS},
                     "claim": {"name": "c", "namespace": NS}}}


def test_a_late_deletion_of_an_earlier_incarnation_does_not_reopen_the_name_to_older_news():
    """The watch stream of one kind, in order: ADDED u1@10, DELETED u1@12, ADDED u2@20, DELETED u2@25;
    the cache got ahead through the answers to its own writes (u2 created and deleted). Then the
    stream is delivered. ``remove`` of u1@12 finds nothing stored and buries the name at 12,
    overwriting the tombstone at 25; ADDED u2@20 is then newer than the tombstone and is filed:
    a deleted object is back in the cache (a ghost claim gets an address; a ghost pool serves)."""
    inv = Inventory()
    inv.upsert(_address("u2", 20))          # our create's answer
    inv.remove(_address("u2", 25))          # our delete's answer
    inv.upsert(_address("u1", 10))          # the stream, late
    inv.remove(_address("u1", 12))
    inv.upsert(_address("u2", 20))
    assert inv.get(ADDRESS, NS, "a") is None
    assert not inv.name_taken(NS, "a")
