"""Claims whose pool reference is changed away from the pool that served them, and a controller restarted with
their address objects gone."""

from __future__ import annotations

from metal3_ipam.core import kinds
from metal3_ipam.core import objects as o
from metal3_ipam.testing import go_incluster as gi

from ipam_objects import NS, capi_claim, get, ippool


IN_CLUSTER = (gi.GROUP, gi.IN_CLUSTER_IP_POOL)


IPPOOL = kinds.IPPOOL


def pool_of_kind(kind: tuple[str, str]) -> dict:
    """A pool of ``kind`` named p with two addresses, 10.0.0.2 and 10.0.0.3."""
    if kind == IPPOOL:
        return ippool("p", namePrefix="p", pools=[{"start": "10.0.0.2", "end": "10.0.0.3"}], prefix=24)
    return gi.ip_pool("p", namespace=NS if kind == IN_CLUSTER else None, prefix=24, addresses=["10.0.0.2-10.0.0.3"])


def claim_of_kind(kind: tuple[str, str], name: str) -> dict:
    return capi_claim(name, pool="p", api_group=kind[0], kind=kind[1])


def ips_of(api, name: str) -> list[str]:
    """The IPs the claim's address objects (of both APIs, live or going) hold."""
    found = []
    for obj in [*api.inventory.of_kind(kinds.IPADDRESS), *api.inventory.of_kind(kinds.CAPI_ADDRESS)]:
        named = o.claim_of_address(obj) if kinds.kind_of(obj) == kinds.IPADDRESS else o.claim_of_capi_address(obj)
        if named is not None and named[:2] == ("IPAddressClaim", name) and not o.is_guard(obj):
            found.append(str(o.spec(obj)["address"]))
    return sorted(found)


def edit_pool_ref(api, name: str, api_group: str, kind: str, pool: str = "p") -> None:
    """A user's edit of the claim's spec.poolRef that no webhook stopped."""
    claim = get(api, kinds.CAPI_CLAIM, name)
    claim = {**claim, "spec": {**claim["spec"], "poolRef": {"apiGroup": api_group, "kind": kind, "name": pool}},
             "metadata": {**claim["metadata"], "resourceVersion": api._next_version(),
                          "generation": int(claim["metadata"].get("generation") or 1) + 1}}
    api.inventory.upsert(claim)


def restarted_store(api, addresses_first: bool):
    """The store as a controller started afresh files it from its listings (in either order of kinds)."""
    from ipam_objects import RecordingApi
    fresh = RecordingApi(now=api.now)
    fresh._version = api._version
    # The garbage collector is the server's: what it takes when an owner goes is the same after the restart.
    fresh._guards = {uid: set(guards) for uid, guards in api._guards.items()}
    objs = list(api.inventory.objects.values())
    address_kinds = (kinds.IPADDRESS, kinds.CAPI_ADDRESS)
    objs.sort(key=lambda obj: (kinds.kind_of(obj) in address_kinds) != addresses_first)
    for obj in objs:
        fresh.inventory.upsert(obj)
    fresh.events = list(api.events)
    return fresh
