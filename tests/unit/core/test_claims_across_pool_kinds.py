"""Claims of both APIs among pools of every IP kind sharing a namespace and their names, whatever comes in what
order (SPEC §10.1–10.3): claims made, their pool references changed across kinds (to a pool of the same name
and another kind, to another provider's kind, to no pool), deleted, their address objects deleted by hand,
claims removed past their finalizers and their addresses collected, the controller started afresh, locks
renamed as an earlier version named them, pools deleted, recreated and edited, from a fresh start or from what
the Go Metal3 IPAM and the Go in-cluster provider left.

After every pass: no IP is held for, nor told to, two live claims of one namespace (a global pool's: of that
pool); a claim's Ready "bound to" names the IP of the address its status names; a live claim holds at most one
address object of each API; a claim filed with a pool that exists is never left without a Ready condition. Once
every claim is deleted, every claim goes and no address object is left."""

from __future__ import annotations

import copy
import os
import random

from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from metal3_ipam.core import kinds
from metal3_ipam.core import objects as o
from metal3_ipam.core.kept import bound_ip
from metal3_ipam.core.naming import address_name
from metal3_ipam.poolkinds.incluster.ip_pools import lock_prefix
from metal3_ipam.memory import converge
from metal3_ipam.testing import go_incluster as gi
from go_ipam_objects import go_served_capi_claim, go_served_ipclaim
from ipam_objects import NS, capi_claim, converged, get, ippool, ipclaim, loaded, user_delete
from pool_reference import restarted_store

LONG = ("a-1." * 64)[:230] + "z"  # a pool name its lock names hash
IPPOOL, IN_CLUSTER, GLOBAL = kinds.IPPOOL, (gi.GROUP, gi.IN_CLUSTER_IP_POOL), (gi.GROUP, gi.GLOBAL_IN_CLUSTER_IP_POOL)
# (group, kind, name) a claim names: pools of one name and several kinds, overlapping, and none of ours.
REFERENCES = [(*IPPOOL, "p"), (*IN_CLUSTER, "p"), (*IN_CLUSTER, "q"), (*GLOBAL, "p"), (gi.GROUP, "InfobloxIPPool", "p"),
              (*IPPOOL, "q"), (*IN_CLUSTER, "none"), (*IN_CLUSTER, LONG)]
CLAIMS = [(kinds.CAPI_CLAIM, "c0"), (kinds.CAPI_CLAIM, "c1"), (kinds.CAPI_CLAIM, "c2"), (kinds.IPCLAIM, "i0"),
          (kinds.IPCLAIM, "i1")]
REQUESTED = {"c1": "10.0.0.5", "i0": "10.0.0.3"}  # the ipAddress annotation, when asked for


def _pools() -> list[dict]:
    return [ippool("p", namePrefix="p", pools=[{"start": "10.0.0.2", "end": "10.0.0.4"}], prefix=24,
                   preAllocations={"c0": "10.0.0.4"}),
            gi.ip_pool("p", namespace=NS, prefix=24, addresses=["10.0.0.3-10.0.0.5"]),
            gi.ip_pool("q", namespace=NS, prefix=24, addresses=["10.0.0.4-10.0.0.6"]),
            gi.ip_pool("p", prefix=24, addresses=["10.0.1.2-10.0.1.4"]),
            gi.ip_pool(LONG, namespace=NS, prefix=24, addresses=["10.0.0.5-10.0.0.7"]),
            ippool("q", namePrefix="q", pools=[{"start": "10.0.0.3", "end": "10.0.0.6"}], prefix=24)]


def _left_by_go():
    """c2 and i1 served by the Go Metal3 IPAM from IPPool p, c1 by the Go in-cluster provider from InClusterIPPool p."""
    api = loaded(*_pools())
    for obj in go_served_capi_claim("c2", get(api, IPPOOL, "p"), "10.0.0.2") \
            + go_served_ipclaim("i1", get(api, IPPOOL, "p"), "10.0.0.3"):
        api.load(obj)
    api.load(gi.claim("c1", NS, gi.IN_CLUSTER_IP_POOL, "p"))
    claim = get(api, kinds.CAPI_CLAIM, "c1")
    address = gi.ipaddress_body(claim, get(api, IN_CLUSTER, "p"), gi.Grant("10.0.0.5", 24, None))
    api.load(address)
    api.inventory.upsert({**claim, "status": gi.claim_status(address),
                          "metadata": {**claim["metadata"], "finalizers": [gi.CLAIM_FINALIZER],
                                       "resourceVersion": api._next_version()}})
    return api


def _renamed_as_before(api) -> None:
    """The in-cluster kinds' locks renamed as an earlier version named them (``<pool>-<ip>``, ``gip-…``)."""
    for lock in list(api.inventory.of_kind(kinds.IPADDRESS)):
        ref = o.spec(lock)["pool"]
        if ref.get("kind") in (None, IPPOOL[1]):
            continue
        kind = (kinds.group_of(ref["apiVersion"]), ref["kind"])
        old = address_name(lock_prefix(kind, ref["name"], "gip" if kind == GLOBAL else None), o.spec(lock)["address"])
        if api.inventory.get(kinds.IPADDRESS, o.namespace(lock), old) is None:
            renamed = copy.deepcopy(lock)
            renamed["metadata"]["name"] = old
            api.inventory.remove(lock)
            api.load(renamed)


def _edit(api, kind, name, **fields) -> None:
    obj = get(api, kind, name, "" if kind == GLOBAL else NS)
    api.inventory.upsert({**obj, **fields, "metadata": {**obj["metadata"], "resourceVersion": api._next_version(),
                                                        "generation": int(obj["metadata"].get("generation") or 1) + 1}})


def _claimant(address: dict) -> tuple[str, str]:
    if kinds.kind_of(address) == kinds.IPADDRESS:
        ref = o.spec(address).get("claim") or {}
        return ref.get("kind") or kinds.IPCLAIM[1], ref.get("name")
    return kinds.CAPI_CLAIM[1], (o.spec(address).get("claimRef") or {}).get("name")


def _domain(pool_kind: str | None) -> str:
    return "global" if pool_kind == GLOBAL[1] else NS


def _problems(api) -> list:
    found = []
    live = {(kinds.kind_of(c)[1], o.name(c)): c for kind in (kinds.CAPI_CLAIM, kinds.IPCLAIM)
            for c in api.inventory.of_kind(kind) if not o.is_deleting(c)}
    held: dict[tuple, set] = {}
    count: dict[tuple, list] = {}
    for kind in (kinds.IPADDRESS, kinds.CAPI_ADDRESS):
        for address in api.inventory.of_kind(kind):
            who = _claimant(address)
            if o.is_deleting(address) or who not in live or o.is_guard(address):
                continue  # (a guard of the claim's IP in its namespace is not one of its addresses)
            pool = (o.spec(address).get("pool") or o.spec(address).get("poolRef") or {}).get("kind")
            held.setdefault((_domain(pool), o.spec(address)["address"]), set()).add(who)
            if any(r.get("uid") == o.meta(live[who])["uid"] for r in o.meta(address).get("ownerReferences") or []):
                count.setdefault((kind, who), []).append(o.name(address))
    told: dict[tuple, set] = {}
    for who, claim in live.items():
        capi = who[0] == kinds.CAPI_CLAIM[1]
        ref = o.status(claim).get("addressRef" if capi else "address") or {}
        address = api.inventory.get(kinds.CAPI_ADDRESS if capi else kinds.IPADDRESS, ref.get("namespace") or NS,
                                    ref.get("name") or "")
        if address is not None:
            ip = o.spec(address)["address"]
            pool = (o.spec(address).get("poolRef") or o.spec(address).get("pool") or {}).get("kind")
            told.setdefault((_domain(pool), ip), set()).add(who)
            if capi and bound_ip(claim) is not None and str(bound_ip(claim)) != ip:
                found.append(("bound to another IP than its address's", who, str(bound_ip(claim)), ip))
        filed = api.inventory.filed_with(kinds.CAPI_CLAIM if capi else kinds.IPCLAIM, NS, who[1])
        pool = filed and api.inventory.get(filed.kind, filed.namespace, filed.name)
        if capi and pool is not None and not o.is_deleting(pool) and o.condition(o.status(claim), "Ready") is None:
            found.append(("no Ready condition", who))
    found += [("held for two", k, v) for k, v in held.items() if len(v) > 1]
    found += [("told to two", k, v) for k, v in told.items() if len(v) > 1]
    found += [("two addresses", k, v) for k, v in count.items() if len(v) > 1]
    return found


POOL_AT = {0: (IPPOOL, 0), 1: (IN_CLUSTER, 1), 2: (IN_CLUSTER, 2), 3: (GLOBAL, 3), 5: (IPPOOL, 5), 7: (IN_CLUSTER, 4)}
OPS = ["claim", "edit", "delete", "strip", "strip-capi", "restart", "force", "collect", "rename", "pool-delete",
       "pool-force", "pool-new", "pool-edit"]
steps = st.lists(st.tuples(st.sampled_from(OPS), st.sampled_from(CLAIMS), st.integers(0, len(REFERENCES) - 1),
                           st.booleans()), max_size=20)


def _step(api, op, kind, name, ref, settle):
    claim = get(api, kind, name)
    if kind == kinds.IPCLAIM:  # an IPClaim names an IPPool
        ref = (*IPPOOL, ref[2])
    if op == "claim" and claim is None:
        ip = REQUESTED.get(name) if settle else None
        api.load(ipclaim(name, pool=ref[2], ip=ip) if kind == kinds.IPCLAIM
                 else capi_claim(name, pool=ref[2], api_group=ref[0], kind=ref[1], ip=ip))
    elif op == "edit" and claim is not None:
        field = {"pool": {"name": ref[2], "namespace": NS}} if kind == kinds.IPCLAIM \
            else {"poolRef": {"apiGroup": ref[0], "kind": ref[1], "name": ref[2]}}
        _edit(api, kind, name, spec={**claim["spec"], **field})
    elif op == "delete" and claim is not None and not o.is_deleting(claim):
        user_delete(api, kind, name)
    elif op in ("strip", "strip-capi") and claim is not None:
        for obj in [*api.inventory.of_kind(kinds.CAPI_ADDRESS), *api.inventory.of_kind(kinds.IPADDRESS)]:
            if _claimant(obj) == (kind[1], name) and (op == "strip" or kinds.kind_of(obj) == kinds.CAPI_ADDRESS):
                api.inventory.remove(obj)
    elif op == "force" and claim is not None:  # its finalizers stripped: gone at once
        api.inventory.remove({**claim, "metadata": {**claim["metadata"], "resourceVersion": api._next_version()}})
        api._collect(claim)  # the garbage collector takes the guards it owned, as it would once it is gone
    elif op == "collect":  # the garbage collector: addresses whose owning claim is gone
        uids = {o.meta(c)["uid"] for k in (kinds.CAPI_CLAIM, kinds.IPCLAIM) for c in api.inventory.of_kind(k)}
        for obj in [*api.inventory.of_kind(kinds.CAPI_ADDRESS), *api.inventory.of_kind(kinds.IPADDRESS)]:
            owners = [r for r in o.meta(obj).get("ownerReferences") or []
                      if r.get("kind") in ("IPClaim", "IPAddressClaim")]
            if owners and not any(r.get("uid") in uids for r in owners):
                api.inventory.remove({**obj, "metadata": {**obj["metadata"], "resourceVersion": api._next_version()}})
    elif op == "rename":
        _renamed_as_before(api)
    elif op.startswith("pool-"):
        pool_kind, at = POOL_AT.get(REFERENCES.index(ref) if ref in REFERENCES else 0, (IPPOOL, 0))
        spec = _pools()[at]
        pool = get(api, pool_kind, o.name(spec), "" if pool_kind == GLOBAL else NS)
        if op == "pool-new" and pool is None:
            api.load(spec)
        elif pool is None:
            return
        elif op == "pool-delete" and not o.is_deleting(pool):
            meta = {**pool["metadata"], "deletionTimestamp": api.now, "resourceVersion": api._next_version()}
            (api.inventory.upsert if meta.get("finalizers") else api.inventory.remove)({**pool, "metadata": meta})
        elif op == "pool-force":
            api.inventory.remove({**pool, "metadata": {**pool["metadata"], "resourceVersion": api._next_version()}})
        elif op == "pool-edit":
            spec = copy.deepcopy(pool["spec"])
            if pool_kind == IPPOOL:
                spec["pools"] = [{"start": "10.0.0.3", "end": "10.0.0.6"}]
            else:
                spec["addresses"] = ["10.0.1.3-10.0.1.6"] if pool_kind == GLOBAL else ["10.0.0.2-10.0.0.6"]
            _edit(api, pool_kind, o.name(pool), spec=spec)


@settings(deadline=None, max_examples=int(os.environ.get("CLAIMS_ACROSS_KINDS_EXAMPLES", "80")),
          suppress_health_check=[HealthCheck.too_slow, HealthCheck.filter_too_much])
@given(steps, st.booleans())
# A guard written before a restart goes with its claim after it, its pool gone without its finalizer.
@example([("strip", CLAIMS[1], 0, True), ("restart", CLAIMS[0], 0, False), ("pool-force", CLAIMS[0], 1, False)], True)
def test_no_ip_is_held_for_two_live_claims_and_every_deleted_claim_goes_across_pool_kinds(ops, left_by_go):
    api = _left_by_go() if left_by_go else converged(*_pools())
    for at, (op, (kind, name), ref, settle) in enumerate(ops):
        api.now = f"2024-01-01T00:{at // 60:02d}:{at % 60:02d}Z"  # pools created later come later
        if op == "restart":
            api = restarted_store(api, addresses_first=settle)
        else:
            _step(api, op, kind, name, REFERENCES[ref], settle)
        if settle:
            converge(api, random.Random(0))
            assert not _problems(api)
    converge(api, random.Random(0))
    assert not _problems(api)
    for kind in (kinds.CAPI_CLAIM, kinds.IPCLAIM):
        for claim in list(api.inventory.of_kind(kind)):
            if not o.is_deleting(claim):
                user_delete(api, kind, o.name(claim))
    converge(api, random.Random(0))
    left = [(o.name(c), o.finalizers(c)) for k in (kinds.CAPI_CLAIM, kinds.IPCLAIM) for c in api.inventory.of_kind(k)]
    assert not left, f"claims held: {left}"
    addresses = [o.name(a) for k in (kinds.IPADDRESS, kinds.CAPI_ADDRESS) for a in api.inventory.of_kind(k)]
    assert not addresses, f"addresses left: {addresses}"
