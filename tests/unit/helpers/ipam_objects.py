"""Builders for the objects the unit tests feed to the reconcile and the in-memory store."""

from __future__ import annotations

import random
from typing import Any

import netaddr

from metal3_ipam.core import kinds
from metal3_ipam.core import objects as o
from metal3_ipam.core.actions import Create
from metal3_ipam.core.inventory import Inventory
from metal3_ipam.core.reconcile import Snapshot, reconcile
from metal3_ipam.memory import MemoryApi, converge
from metal3_ipam.testing import go_incluster as gi

NS = "default"
METAL3 = kinds.METAL3_API_VERSION
CAPI = f"{kinds.CAPI_IPAM_GROUP}/v1beta2"
CAPI_V1BETA1 = f"{kinds.CAPI_IPAM_GROUP}/v1beta1"
# The kinds of object, by the short names the tests use.
POOL = kinds.IPPOOL
IPCLAIM = kinds.IPCLAIM
CAPI_CLAIM = kinds.CAPI_CLAIM
ADDRESS = kinds.IPADDRESS
CAPI_ADDRESS = kinds.CAPI_ADDRESS


def meta(name: str, ns: str = NS, annotations: dict | None = None, labels: dict | None = None,
         **extra: Any) -> dict:
    m: dict[str, Any] = {"name": name, "namespace": ns}
    if annotations:
        m["annotations"] = dict(annotations)
    if labels:
        m["labels"] = dict(labels)
    m.update(extra)
    return m


def ippool(name: str = "pool1", ns: str = NS, annotations: dict | None = None, **spec: Any) -> dict:
    spec.setdefault("namePrefix", name)
    spec.setdefault("pools", [{"start": "192.168.0.10", "end": "192.168.0.20"}])
    return {"apiVersion": METAL3, "kind": "IPPool", "metadata": meta(name, ns, annotations), "spec": spec}


def ipclaim(name: str, pool: str = "pool1", ns: str = NS, ip: str | None = None,
            annotations: dict | None = None, labels: dict | None = None) -> dict:
    annotations = dict(annotations or {})
    if ip is not None:
        annotations[kinds.IP_ADDRESS_ANNOTATION] = ip
    return {"apiVersion": METAL3, "kind": "IPClaim", "metadata": meta(name, ns, annotations, labels),
            "spec": {"pool": {"name": pool, "namespace": ns}}}


def capi_claim(name: str, pool: str = "pool1", ns: str = NS, ip: str | None = None,
               api_group: str = kinds.METAL3_GROUP, kind: str = "IPPool", api_version: str = CAPI,
               annotations: dict | None = None, labels: dict | None = None) -> dict:
    annotations = dict(annotations or {})
    if ip is not None:
        annotations[kinds.IP_ADDRESS_ANNOTATION] = ip
    return {"apiVersion": api_version, "kind": "IPAddressClaim",
            "metadata": meta(name, ns, annotations, labels),
            "spec": {"poolRef": {"apiGroup": api_group, "kind": kind, "name": pool}}}


def cluster(name: str = "cluster1", ns: str = NS, paused: bool = False) -> dict:
    return {"apiVersion": "cluster.x-k8s.io/v1beta2", "kind": "Cluster", "metadata": meta(name, ns),
            "spec": {"paused": paused}}


# -- the in-memory store -------------------------------------------------------

class RecordingApi(MemoryApi):
    """The in-memory store, remembering every object created through a plan."""

    def __init__(self, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.created: list[dict] = []

    def do(self, action) -> None:
        super().do(action)
        if isinstance(action, Create):
            self.created.append(action.obj)


def loaded(*objs: dict, now: str = "2024-01-01T00:00:00Z") -> RecordingApi:
    api = RecordingApi(now=now)
    for obj in objs:
        api.load(obj)
    return api


def converged(*objs: dict, seed: int = 0, now: str = "2024-01-01T00:00:00Z") -> RecordingApi:
    api = loaded(*objs, now=now)
    converge(api, random.Random(seed))
    return api


def converged_with_lock_namespace(*objs: dict, lock_namespace: str = "ipam-system") -> RecordingApi:
    """The objects reconciled to a fixed point, the global pools' locks in a namespace of their own (as the
    controller's namespace is), apart from the claims' and pools' namespaces."""
    api = loaded(*objs)
    api.inventory.lock_namespace = lock_namespace
    converge(api, random.Random(0))
    return api


def dated_ip_pool(name: str, addresses: list[str], created: str, namespace: str | None = None,
                  annotations: dict | None = None) -> dict:
    """An in-cluster IP pool (global without ``namespace``) of prefix 24, created at ``created``."""
    pool = gi.ip_pool(name, namespace=namespace, addresses=addresses, prefix=24, annotations=annotations)
    pool["metadata"]["creationTimestamp"] = created
    return pool


def get(api: MemoryApi, kind: tuple[str, str], name: str, ns: str = NS) -> dict | None:
    return api.inventory.get(kind, ns, name)


def metal3_addresses(api: MemoryApi) -> list[dict]:
    return list(api.inventory.of_kind(kinds.IPADDRESS))


def capi_addresses(api: MemoryApi) -> list[dict]:
    return list(api.inventory.of_kind(kinds.CAPI_ADDRESS))


def address_of(api: MemoryApi, claim_kind: str, claim_name: str) -> list[str]:
    """The IPs of the Metal3 IPAddresses held for a claim (live or going)."""
    return sorted(str(o.spec(a)["address"]) for a in metal3_addresses(api)
                  if o.claim_of_address(a) == (claim_kind, claim_name))


def ip_of(api: MemoryApi, claim_name: str, kind: str = "IPClaim") -> str:
    ips = address_of(api, kind, claim_name)
    assert len(ips) == 1, f"{kind} {claim_name} holds {ips}"
    return ips[0]


def set_meta(api: MemoryApi, kind: tuple[str, str], name: str, ns: str = NS, **fields: Any) -> None:
    """Change metadata of a stored object as a user would (a new resource version)."""
    obj = get(api, kind, name, ns)
    assert obj is not None
    obj = {**obj, "metadata": {**obj["metadata"], **fields}}
    obj["metadata"]["resourceVersion"] = api._next_version()
    api.inventory.upsert(obj)


def user_delete(api: MemoryApi, kind: tuple[str, str], name: str, ns: str = NS,
                annotations: dict | None = None) -> None:
    """A user's delete: marks the object, or removes it when no finalizer holds it."""
    obj = get(api, kind, name, ns)
    assert obj is not None
    m = dict(obj["metadata"])
    if annotations:
        m["annotations"] = {**(m.get("annotations") or {}), **annotations}
    m["deletionTimestamp"] = api.now
    obj = {**obj, "metadata": m}
    obj["metadata"]["resourceVersion"] = api._next_version()
    if obj["metadata"].get("finalizers"):
        api.inventory.upsert(obj)
    else:
        api.inventory.remove(obj)
        api._collect(obj)  # the guards it owns go with it


def pool_plan(api: MemoryApi, pool: str = "pool1", ns: str = NS, seed: int = 0):
    return reconcile(api.inventory.snapshot((ns, pool), api.now, random.Random(seed)))


def all_plans(api: MemoryApi) -> list:
    return [reconcile(api.inventory.snapshot(key, api.now, random.Random(0)))
            for key in api.inventory.pool_keys()]


def snapshot(pool: dict | None, claims: list[dict] = (), addresses: list[dict] = (),
             capi_addresses: list[dict] = (), cluster: dict | None = None, pool_name: str = "pool1",
             **kwargs: Any) -> Snapshot:
    return Snapshot(namespace=NS, pool_name=pool_name, pool=pool, cluster=cluster, claims=list(claims),
                    addresses=list(addresses), capi_addresses=list(capi_addresses), **kwargs)


# -- what the tests of addresses written before their claims, and of kept IPs, look at ------------------------

# The Ready reason of a claim whose address object is not taken up.
CONFLICT = "AddressConflict"


def live_bindings(api: MemoryApi) -> dict[str, set]:
    """IP -> the live claims whose status binds them to an address object at that IP."""
    held: dict[str, set] = {}
    for kind in (kinds.IPCLAIM, kinds.CAPI_CLAIM):
        for claim in api.inventory.of_kind(kind):
            if o.is_deleting(claim):
                continue
            ready_now = o.condition(o.status(claim), "Ready")
            if not ready_now or ready_now.get("status") != "True":
                continue
            ref = o.status(claim).get("address" if kind == kinds.IPCLAIM else "addressRef") or {}
            address = get(api, kinds.IPADDRESS if kind == kinds.IPCLAIM else kinds.CAPI_ADDRESS, ref.get("name"),
                          o.namespace(claim))
            if address is not None:
                held.setdefault(o.spec(address)["address"], set()).add((o.namespace(claim), o.name(claim)))
    return held


def assert_no_ip_twice(api: MemoryApi) -> None:
    twice = {ip: who for ip, who in live_bindings(api).items() if len(who) > 1}
    assert not twice, f"IPs bound to two live claims: {twice}"


def ready(api: MemoryApi, kind: tuple[str, str], name: str, ns: str = NS) -> dict:
    """The claim's Ready condition, or {}."""
    return o.condition(o.status(get(api, kind, name, ns)), "Ready") or {}


def capi_address(name: str, claim: str, pool_kind: tuple[str, str], pool: str, ip: str, prefix: int = 24,
                 **metadata: Any) -> dict:
    """A Cluster API IPAddress as a user writes it before its claim: no owner references, no finalizer."""
    return {"apiVersion": f"{kinds.CAPI_IPAM_GROUP}/v1beta2", "kind": "IPAddress",
            "metadata": {"name": name, "namespace": NS, **metadata},
            "spec": {"claimRef": {"name": claim}, "poolRef": {"apiGroup": pool_kind[0], "kind": pool_kind[1],
                                                              "name": pool},
                     "address": ip, "prefix": prefix}}


def strip_and_delete(api: MemoryApi, kind: tuple[str, str], name: str) -> None:
    """A user's delete of an object whose finalizers were stripped: it is gone at once."""
    obj = get(api, kind, name)
    assert obj is not None, name
    api.inventory.remove(obj)


# -- admission reviews -----------------------------------------------------------------------------------------

def inventory_of(*objs: dict) -> Inventory:
    """An inventory holding ``objs``, as the webhook reads it."""
    inv = Inventory()
    for obj in objs:
        inv.upsert(obj)
    return inv


def admission_request(operation: str, obj: dict | None, old: dict | None = None, uid: str = "u-1") -> dict:
    """The ``request`` of an AdmissionReview as the API server sends it."""
    subject = obj if obj is not None else old
    group, _, version = subject["apiVersion"].rpartition("/")
    return {"uid": uid, "operation": operation, "namespace": subject["metadata"].get("namespace"),
            "name": subject["metadata"]["name"], "kind": {"group": group, "version": version, "kind": subject["kind"]},
            "object": obj, "oldObject": old, "userInfo": {"username": "someone"}}


def held_spans(api, lengths: dict[str, int] | None = None) -> dict[tuple[str, str], set[str]]:
    """(namespace, IP) -> the live claims whose Cluster API IPAddress holds it; an address of a pool kind named in
    ``lengths`` holds the sub-prefix of that length (each of its IPs), any other its address as written. An address
    holds for its claim once the claim has it (its status names it, or it is owned by that incarnation of the claim,
    as an allocation on its way or an address taken up is): one a user wrote that the claim never took up (refused,
    left as written) holds nothing."""
    held: dict = {}
    for a in api.inventory.of_kind(kinds.CAPI_ADDRESS):
        claim = get(api, kinds.CAPI_CLAIM, o.spec(a)["claimRef"]["name"], o.namespace(a))
        if o.is_deleting(a) or claim is None or o.is_deleting(claim) or not _has(claim, a):
            continue
        length = (lengths or {}).get(o.spec(a)["poolRef"]["kind"])
        ips = [o.spec(a)["address"]] if length is None else netaddr.IPNetwork(f"{o.spec(a)['address']}/{length}")
        for ip in ips:
            held.setdefault((o.namespace(a), str(ip)), set()).add(o.name(claim))
    return held


def _has(claim: dict, address: dict) -> bool:
    """Whether a claim has a Cluster API IPAddress: its status names it, or the address is owned by the claim."""
    uid = o.meta(claim).get("uid")
    owned = uid is not None and any(r.get("uid") == uid for r in o.owner_references(address))
    return owned or (o.status(claim).get("addressRef") or {}).get("name") == o.name(address)
