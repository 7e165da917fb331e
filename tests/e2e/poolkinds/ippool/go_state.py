"""State as the Go Metal3 IP Address Manager (v1.10 and later) leaves it, written through the API.

The shapes follow what metal3-io/ip-address-manager writes (ipam/ippool_manager.go,
controllers/ippool_controller.go) and the objects captured from a real Go controller
in tests/fixtures/go-metal3-ipam-state.yaml:

- an IPClaim is served with a Metal3 IPAddress ``<namePrefix>-<ip>``: finalizer
  ``ipaddress.ipam.metal3.io``, owner references to the pool and the claim with no
  controller or blockOwnerDeletion flag, the claim's labels, spec address / pool /
  claim (name and namespace, no kind) / prefix / gateway / dnsServers. The claim gets
  ``ipclaim.ipam.metal3.io`` and ``status.address`` {name, namespace}, no conditions;
- a Cluster API IPAddressClaim is served with ONLY an ``ipam.cluster.x-k8s.io``
  IPAddress, also named ``<namePrefix>-<ip>`` (not after the claim): finalizer
  ``ipam.metal3.io/ipaddress``, owner references as above, the claim's labels, spec
  claimRef {name} / poolRef / address / prefix / gateway. No Metal3 IPAddress. The
  claim gets ``ipam.metal3.io/ipaddressclaim``, ``status.addressRef.name`` = that
  address name and one Ready=True condition with empty reason and message;
- the pool gets ``ippool.ipam.metal3.io``, the ``cluster.x-k8s.io/cluster-name`` and
  ``cluster.x-k8s.io/provider: ipam-metal3`` labels and a Cluster owner reference with
  ``controller: false`` (when it names a Cluster), and ``status.indexes`` keyed by the
  plain claim name for both claim kinds, plus ``lastUpdated``.

Allocation follows the Go code too: entries in order, addresses enumerated from
``start`` (or network+1 of a subnet-only entry) — the gateway included, which the Go
controller hands out —, preallocations and the ``ipAddress`` annotation honoured,
``random`` picking a random index and scanning forward. Every address object of the
pool and every preallocated IP counts as held, as the Go controller's getIndexes has it.

The body builders are pure (``*_body``); :class:`GoIpam` writes them in the order the
Go controller does: the address, then the claim's finalizer, then the claim's status,
and the pool's metadata and status. :func:`adoption_problems` says how a later state
differs from what the Go controller left.
"""

from __future__ import annotations

import datetime
import ipaddress
import random
from dataclasses import dataclass
from typing import Any, Iterable

from kubernetes.client.rest import ApiException

from controller_fixtures import CAPI, CAPI_IPAM_GROUP, CLUSTER_NAME_LABEL, FIN_CAPI_ADDRESS, METAL3, Kube

GO_POOL_FINALIZER = "ippool.ipam.metal3.io"
GO_CLAIM_FINALIZER = "ipclaim.ipam.metal3.io"
GO_ADDRESS_FINALIZER = "ipaddress.ipam.metal3.io"
GO_CAPI_CLAIM_FINALIZER = "ipam.metal3.io/ipaddressclaim"
GO_CAPI_ADDRESS_FINALIZER = "ipam.metal3.io/ipaddress"
PROVIDER_LABEL = "cluster.x-k8s.io/provider"
IP_ADDRESS_ANNOTATION = "ipAddress"


def now() -> str:
    return datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")


def go_address_name(name_prefix: str, ip: str) -> str:
    """The Go controller's formatAddressName: ``.`` and ``:`` become ``-``, trailing ``-`` dropped."""
    return (name_prefix + "-" + ip.replace(":", "-").replace(".", "-")).rstrip("-")


# --------------------------------------------------------------------------- allocation, as Go does it


def _entry_addresses(entry: dict) -> Iterable[ipaddress._BaseAddress]:
    """GetIPAddress(entry, 0), (entry, 1), ...: from start (bounded by end and subnet), or network+1."""
    subnet = ipaddress.ip_network(entry["subnet"], strict=False) if entry.get("subnet") else None
    if entry.get("start"):
        ip = ipaddress.ip_address(entry["start"])
        last = ipaddress.ip_address(entry["end"]) if entry.get("end") else None
    else:
        ip = subnet.network_address + 1
        last = None
    while True:
        if last is not None and ip > last:
            return
        if subnet is not None and ip not in subnet:
            return
        yield ip
        try:
            ip = ip + 1
        except ipaddress.AddressValueError:
            return


@dataclass
class Grant:
    ip: str
    prefix: int
    gateway: str | None
    dns_servers: list[str]


class GoAllocationError(Exception):
    pass


def go_allocate(pool_spec: dict, claim_name: str, annotations: dict | None, taken: set[str],
                rng: random.Random | None = None) -> Grant:
    """The Go controller's allocateAddress for one claim; ``taken`` holds canonical IP strings."""
    pre = (pool_spec.get("preAllocations") or {}).get(claim_name)
    requested = (annotations or {}).get(IP_ADDRESS_ANNOTATION)
    prefix = pool_spec.get("prefix") or 0
    gateway = pool_spec.get("gateway")
    dns = list(pool_spec.get("dnsServers") or [])
    if requested and pre and ipaddress.ip_address(requested) != ipaddress.ip_address(pre):
        raise GoAllocationError("PreAllocation and requested ip address are conflicting")
    requested_seen = False
    for entry in pool_spec.get("pools") or []:
        chosen = None
        if pre or requested:
            want = ipaddress.ip_address(pre or requested)
            for ip in _entry_addresses(entry):
                if ip != want:
                    continue
                requested_seen = True
                if pre or str(ip) not in taken:
                    chosen = ip
                break
        elif pool_spec.get("allocationStrategy") == "random":
            candidates = list(_entry_addresses(entry))
            start = (rng or random).randrange(len(candidates))
            for i in range(len(candidates)):
                ip = candidates[(start + i) % len(candidates)]
                if str(ip) not in taken:
                    chosen = ip
                    break
        else:
            chosen = next((ip for ip in _entry_addresses(entry) if str(ip) not in taken), None)
        if chosen is not None:
            return Grant(str(chosen), entry.get("prefix") or prefix, entry.get("gateway") or gateway,
                         list(entry.get("dnsServers") or dns))
    if requested and requested_seen and not pre:
        raise GoAllocationError("Requested IP not available")
    if pre:
        raise GoAllocationError("Pre-allocated IP out of bounds")
    raise GoAllocationError("Exhausted IP Pools")


# --------------------------------------------------------------------------- bodies


def _meta(obj: dict) -> dict:
    return obj["metadata"]


def _owner(obj: dict) -> dict:
    # The Go controller's owner references carry no controller and no blockOwnerDeletion flag.
    return {"apiVersion": obj["apiVersion"], "kind": obj["kind"], "name": _meta(obj)["name"],
            "uid": _meta(obj)["uid"]}


def ipaddress_body(pool: dict, claim: dict, grant: Grant) -> dict:
    """The Metal3 IPAddress the Go controller creates for an IPClaim."""
    ns = _meta(pool)["namespace"]
    metadata: dict[str, Any] = {
        "name": go_address_name(pool["spec"]["namePrefix"], grant.ip),
        "namespace": ns,
        "finalizers": [GO_ADDRESS_FINALIZER],
        "ownerReferences": [_owner(pool), _owner(claim)],
    }
    if _meta(claim).get("labels"):
        metadata["labels"] = dict(_meta(claim)["labels"])
    spec: dict[str, Any] = {
        "address": grant.ip,
        "claim": {"name": _meta(claim)["name"], "namespace": ns},
        "pool": {"name": _meta(pool)["name"], "namespace": ns},
    }
    if grant.prefix:
        spec["prefix"] = grant.prefix
    if grant.gateway:
        spec["gateway"] = grant.gateway
    if grant.dns_servers:
        spec["dnsServers"] = list(grant.dns_servers)
    return {"apiVersion": "/".join(METAL3), "kind": "IPAddress", "metadata": metadata, "spec": spec}


def capi_ipaddress_body(pool: dict, claim: dict, grant: Grant) -> dict:
    """The ipam.cluster.x-k8s.io IPAddress the Go controller creates for an IPAddressClaim (its only address)."""
    metadata: dict[str, Any] = {
        "name": go_address_name(pool["spec"]["namePrefix"], grant.ip),
        "namespace": _meta(pool)["namespace"],
        "finalizers": [GO_CAPI_ADDRESS_FINALIZER],
        "ownerReferences": [_owner(pool), _owner(claim)],
    }
    if _meta(claim).get("labels"):
        metadata["labels"] = dict(_meta(claim)["labels"])
    spec: dict[str, Any] = {
        "address": grant.ip,
        "claimRef": {"name": _meta(claim)["name"]},
        "poolRef": {"apiGroup": METAL3[0], "kind": "IPPool", "name": _meta(pool)["name"]},
        "prefix": grant.prefix,
    }
    if grant.gateway:
        spec["gateway"] = grant.gateway
    return {"apiVersion": claim["apiVersion"], "kind": "IPAddress", "metadata": metadata, "spec": spec}


def ipclaim_status(address: dict) -> dict:
    return {"address": {"name": _meta(address)["name"], "namespace": _meta(address)["namespace"]}}


def capi_claim_status(address: dict, at: str) -> dict:
    return {"addressRef": {"name": _meta(address)["name"]},
            "conditions": [{"type": "Ready", "status": "True", "lastTransitionTime": at, "reason": "",
                            "message": ""}]}


def pool_metadata_patch(pool: dict, cluster: dict | None) -> dict:
    """Finalizer, labels and the Cluster owner reference (controller: false), as the Go reconcile sets them."""
    meta = _meta(pool)
    finalizers = list(meta.get("finalizers") or [])
    if GO_POOL_FINALIZER not in finalizers:
        finalizers.append(GO_POOL_FINALIZER)
    patch: dict[str, Any] = {"finalizers": finalizers}
    cluster_name = pool["spec"].get("clusterName")
    if cluster_name:
        patch["labels"] = {CLUSTER_NAME_LABEL: cluster_name, PROVIDER_LABEL: "ipam-metal3"}
        if cluster is not None:
            patch["ownerReferences"] = list(meta.get("ownerReferences") or []) + [
                {**_owner(cluster), "controller": False}]
    return {"metadata": patch}


# --------------------------------------------------------------------------- writing it


@dataclass
class Served:
    """One claim the Go controller served: what the test checks after the upgrade."""

    kind: str          # "IPClaim" | "IPAddressClaim"
    claim: str
    pool: str
    name_prefix: str
    ip: str
    address_name: str  # the Metal3 IPAddress (IPClaim) or Cluster API IPAddress (IPAddressClaim)
    address_uid: str
    claim_uid: str


class GoIpam:
    """Writes, through the API, what the Go controller writes, in its order."""

    def __init__(self, kube: Kube, rng: random.Random | None = None) -> None:
        self.kube = kube
        self.rng = rng or random.Random(1437)
        self.served: list[Served] = []

    # -- reading what Go's getIndexes sees ----------------------------------

    def taken(self, pool: dict) -> set[str]:
        name = _meta(pool)["name"]
        taken = {str(ipaddress.ip_address(ip)) for ip in (pool["spec"].get("preAllocations") or {}).values()}
        for a in self.kube.list(METAL3, "ipaddresses"):
            if (a["spec"].get("pool") or {}).get("name") == name:
                taken.add(str(ipaddress.ip_address(a["spec"]["address"])))
        for a in self.kube.list(CAPI, "ipaddresses"):
            if (a["spec"].get("poolRef") or {}).get("name") == name:
                taken.add(str(ipaddress.ip_address(a["spec"]["address"])))
        return taken

    def indexes(self, pool: dict) -> dict[str, str]:
        """status.indexes as Go rebuilds it: claim name -> IP, for addresses of both APIs."""
        name = _meta(pool)["name"]
        out = {}
        for a in self.kube.list(METAL3, "ipaddresses"):
            if (a["spec"].get("pool") or {}).get("name") == name:
                out[a["spec"]["claim"]["name"]] = a["spec"]["address"]
        for a in self.kube.list(CAPI, "ipaddresses"):
            if (a["spec"].get("poolRef") or {}).get("name") == name:
                out[a["spec"]["claimRef"]["name"]] = a["spec"]["address"]
        return out

    # -- writes -------------------------------------------------------------

    def write_pool_metadata(self, pool_name: str) -> dict:
        pool = self.kube.ippool(pool_name)
        cluster = None
        if pool["spec"].get("clusterName"):
            cluster = self.kube.get(("cluster.x-k8s.io", "v1beta2"), "clusters", pool["spec"]["clusterName"])
        return self.kube.patch(METAL3, "ippools", pool_name, pool_metadata_patch(pool, cluster))

    def write_pool_status(self, pool_name: str) -> dict:
        pool = self.kube.ippool(pool_name)
        return self.kube.custom.patch_namespaced_custom_object_status(
            *METAL3, self.kube.ns, "ippools", pool_name,
            {"status": {"indexes": self.indexes(pool), "lastUpdated": now()}})

    def serve(self, kind: str, claim_name: str, grant: Grant | None = None, *, stop_after_address: bool = False) \
            -> Served:
        """Serve one existing claim, as the Go controller does: its address, then its finalizer, then its
        status. ``stop_after_address``: the Go controller stopped between the address and the claim's patch."""
        claim, pool = self._read(kind, claim_name)
        if grant is None:
            grant = go_allocate(pool["spec"], claim_name, _meta(claim).get("annotations"), self.taken(pool),
                                self.rng)
        address = self._create_address(kind, claim, pool, grant)
        if stop_after_address:
            return self._record(kind, claim, pool, address, grant)
        return self._write(kind, claim, pool, address, grant)

    def serve_racing(self, kind: str, claim_name: str, attempts: int = 10) -> Served | None:
        """Serve a claim from one read of it taken at once, whatever happens to it meanwhile (another
        controller serving it too): on a taken name the allocation is made again from a fresh listing,
        as the Go controller's requeue does, and the claim's status is written over whatever it holds.
        None when no address is left for it (its preallocated or requested one was taken meanwhile)."""
        claim, pool = self._read(kind, claim_name)
        for _ in range(attempts):
            try:
                grant = go_allocate(pool["spec"], claim_name, _meta(claim).get("annotations"), self.taken(pool),
                                    self.rng)
            except GoAllocationError:
                return None
            try:
                address = self._create_address(kind, claim, pool, grant)
            except ApiException as err:
                if err.status != 409:
                    raise
                # The name is taken. Taken for this claim (the other controller served it first): the
                # Go controller's requeue would find it served and leave it. Else allocate again.
                holder = self.kube.ipaddress(go_address_name(pool["spec"]["namePrefix"], grant.ip))
                if holder is not None and holder["spec"]["claim"]["name"] == claim_name:
                    return None
                continue
            return self._write(kind, claim, pool, address, grant)
        raise AssertionError(f"{kind} {claim_name}: every address name the Go allocation chose was taken")

    def _read(self, kind: str, claim_name: str) -> tuple[dict, dict]:
        if kind == "IPClaim":
            claim = self.kube.ipclaim(claim_name)
            return claim, self.kube.ippool(claim["spec"]["pool"]["name"])
        claim = self.kube.capi_ipclaim(claim_name)
        return claim, self.kube.ippool(claim["spec"]["poolRef"]["name"])

    def _create_address(self, kind: str, claim: dict, pool: dict, grant: Grant) -> dict:
        if kind == "IPClaim":
            return self.kube.create(METAL3, "ipaddresses", ipaddress_body(pool, claim, grant))
        gv = (CAPI_IPAM_GROUP, claim["apiVersion"].split("/")[1])
        return self.kube.custom.create_namespaced_custom_object(*gv, self.kube.ns, "ipaddresses",
                                                                capi_ipaddress_body(pool, claim, grant))

    def _write(self, kind: str, claim: dict, pool: dict, address: dict, grant: Grant) -> Served:
        claim_name = _meta(claim)["name"]
        if kind == "IPClaim":
            finalizer, gv, plural = GO_CLAIM_FINALIZER, METAL3, "ipclaims"
            status = ipclaim_status(address)
        else:
            finalizer, plural = GO_CAPI_CLAIM_FINALIZER, "ipaddressclaims"
            gv = (CAPI_IPAM_GROUP, claim["apiVersion"].split("/")[1])
            status = capi_claim_status(address, now())
        # The Go patch helper's diff of its own read: the finalizer list as it read it, plus its own.
        finalizers = list(_meta(claim).get("finalizers") or [])
        if finalizer not in finalizers:
            self.kube.custom.patch_namespaced_custom_object(*gv, self.kube.ns, plural, claim_name,
                                                            {"metadata": {"finalizers": finalizers + [finalizer]}})
        self.kube.custom.patch_namespaced_custom_object_status(*gv, self.kube.ns, plural, claim_name,
                                                               {"status": status})
        return self._record(kind, claim, pool, address, grant)

    def _record(self, kind: str, claim: dict, pool: dict, address: dict, grant: Grant) -> Served:
        served = Served(kind, _meta(claim)["name"], _meta(pool)["name"], pool["spec"]["namePrefix"], grant.ip,
                        _meta(address)["name"], _meta(address)["uid"], _meta(claim)["uid"])
        self.served.append(served)
        return served


# --------------------------------------------------------------------------- after the upgrade


def adoption_problems(state, served: list[Served]) -> list[str]:
    """Every Go allocation as it was: same IP, same address objects (names and uids), a Metal3
    lock <namePrefix>-<ip> for each Cluster API claim, no second address of either API."""
    problems = []
    m3 = state.objects["addresses"]
    capi = state.objects["capi_addresses"]
    held = state.holdings()
    for s in served:
        key = (s.kind, s.claim)
        ips = held.get(key, {})
        if set(ips) != {ipaddress.ip_address(s.ip)}:
            problems.append(f"{s.kind} {s.claim} held {s.ip} under the Go controller, now {sorted(map(str, ips))}")
            continue
        names = ips[ipaddress.ip_address(s.ip)]
        lock_name = go_address_name(s.name_prefix, s.ip)
        if s.kind == "IPClaim":
            a = m3.get(s.address_name)
            if a is None or a["metadata"]["uid"] != s.address_uid:
                problems.append(f"IPClaim {s.claim}: its IPAddress {s.address_name} was replaced or removed")
            if names != [("addresses", s.address_name)]:
                problems.append(f"IPClaim {s.claim}: addresses {names}, expected only {s.address_name}")
        else:
            a = capi.get(s.address_name)
            if a is None or a["metadata"]["uid"] != s.address_uid:
                problems.append(f"IPAddressClaim {s.claim}: its Cluster API IPAddress {s.address_name} "
                                f"was replaced or removed")
            elif FIN_CAPI_ADDRESS not in (a["metadata"].get("finalizers") or []):
                problems.append(f"IPAddressClaim {s.claim}: {s.address_name} lost {FIN_CAPI_ADDRESS}")
            if sorted(names) != [("addresses", lock_name), ("capi_addresses", s.address_name)]:
                problems.append(f"IPAddressClaim {s.claim}: addresses {names}, expected the Go one "
                                f"{s.address_name} and a lock {lock_name}")
            lock = m3.get(lock_name)
            if lock is not None:
                claim_ref = lock["spec"]["claim"]
                if (claim_ref.get("kind"), claim_ref.get("name"), lock["spec"]["address"], lock["spec"]["pool"]["name"]) \
                        != ("IPAddressClaim", s.claim, s.ip, s.pool):
                    problems.append(f"IPAddressClaim {s.claim}: the lock {lock_name} says {lock['spec']}")
            claim = state.objects["IPAddressClaim"].get(s.claim)
            if claim and (claim.get("status") or {}).get("addressRef", {}).get("name") != s.address_name:
                problems.append(f"IPAddressClaim {s.claim}: status.addressRef {claim['status'].get('addressRef')} "
                                f"no longer names {s.address_name}")
        claim = state.objects[s.kind].get(s.claim)
        if claim is None or claim["metadata"]["uid"] != s.claim_uid:
            problems.append(f"{s.kind} {s.claim} was replaced or removed")
    return problems
