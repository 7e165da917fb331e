"""Objects shaped exactly as the Go Metal3 IPAM (v1.10 and later) writes them.

From its ``ipam/ippool_manager.go`` and from objects it wrote on a real API
server (``shared/fixtures/go-metal3-ipam-state.yaml``):

- an IPClaim is served with a Metal3 IPAddress ``<namePrefix>-<ip>``;
- an IPAddressClaim is served with ONLY a Cluster API IPAddress, also named
  ``<namePrefix>-<ip>`` (not after the claim), and no Metal3 IPAddress;
- owner references (pool, claim) carry no controller flag and no
  blockOwnerDeletion; addresses of both APIs carry every label of the claim;
- a pool with ``clusterName`` is labelled with it and ``cluster.x-k8s.io/provider:
  ipam-metal3``;
- claims carry the Go finalizers, IPClaims ``status.address``, IPAddressClaims
  ``status.addressRef.name`` and a Ready condition with empty reason/message;
- the pool's ``status.indexes`` is keyed by plain claim name, for both kinds.
"""

from __future__ import annotations

import uuid
from typing import Any

from metal3_ipam.core import kinds
from metal3_ipam.core.naming import address_name

METAL3 = kinds.METAL3_API_VERSION
CAPI = f"{kinds.CAPI_IPAM_GROUP}/v1beta2"
WHEN = "2026-11-21T23:48:33Z"


def _uid() -> str:
    return str(uuid.uuid4())


def go_pool(name: str, ns: str, spec: dict, cluster: dict | None = None, indexes: dict | None = None) -> dict:
    meta: dict[str, Any] = {"name": name, "namespace": ns, "uid": _uid(), "creationTimestamp": WHEN,
                            "finalizers": [kinds.FINALIZERS[kinds.IPPOOL]], "generation": 1}
    if cluster is not None:
        meta["labels"] = {kinds.CLUSTER_NAME_LABEL: cluster["metadata"]["name"], kinds.PROVIDER_LABEL: kinds.PROVIDER_NAME}
        meta["ownerReferences"] = [{"apiVersion": cluster["apiVersion"], "kind": "Cluster", "controller": False,
                                    "name": cluster["metadata"]["name"], "uid": cluster["metadata"]["uid"]}]
    return {"apiVersion": METAL3, "kind": "IPPool", "metadata": meta, "spec": dict(spec),
            "status": {"indexes": dict(indexes or {}), "lastUpdated": WHEN}}


def _owner_refs(pool: dict, claim: dict) -> list[dict]:
    return [{"apiVersion": pool["apiVersion"], "kind": pool["kind"], "name": pool["metadata"]["name"],
             "uid": pool["metadata"]["uid"]},
            {"apiVersion": claim["apiVersion"], "kind": claim["kind"], "name": claim["metadata"]["name"],
             "uid": claim["metadata"]["uid"]}]


def go_served_ipclaim(name: str, pool: dict, ip: str, labels: dict | None = None, prefix: int | None = 24,
                      gateway: str | None = None, annotations: dict | None = None) -> list[dict]:
    """An IPClaim and the Metal3 IPAddress the Go IPAM made for it."""
    ns = pool["metadata"]["namespace"]
    address = address_name(pool["spec"]["namePrefix"], ip)
    claim_meta: dict[str, Any] = {"name": name, "namespace": ns, "uid": _uid(), "creationTimestamp": WHEN,
                                  "finalizers": [kinds.FINALIZERS[kinds.IPCLAIM]], "labels": dict(labels or {})}
    if annotations:
        claim_meta["annotations"] = dict(annotations)
    claim = {"apiVersion": METAL3, "kind": "IPClaim", "metadata": claim_meta,
             "spec": {"pool": {"name": pool["metadata"]["name"]}},
             "status": {"address": {"name": address, "namespace": ns}}}
    spec: dict[str, Any] = {"address": ip, "claim": {"name": name, "namespace": ns},
                            "pool": {"name": pool["metadata"]["name"], "namespace": ns}}
    if prefix is not None:
        spec["prefix"] = prefix
    if gateway:
        spec["gateway"] = gateway
    ipaddress = {"apiVersion": METAL3, "kind": "IPAddress",
                 "metadata": {"name": address, "namespace": ns, "uid": _uid(), "creationTimestamp": WHEN,
                              "finalizers": [kinds.FINALIZERS[kinds.IPADDRESS]], "labels": dict(labels or {}),
                              "ownerReferences": _owner_refs(pool, claim)},
                 "spec": spec}
    return [claim, ipaddress]


def go_served_capi_claim(name: str, pool: dict, ip: str, labels: dict | None = None, prefix: int = 24,
                         gateway: str = "") -> list[dict]:
    """An IPAddressClaim and the one Cluster API IPAddress (``<namePrefix>-<ip>``) the Go IPAM made for it."""
    ns = pool["metadata"]["namespace"]
    address = address_name(pool["spec"]["namePrefix"], ip)
    claim = {"apiVersion": CAPI, "kind": "IPAddressClaim",
             "metadata": {"name": name, "namespace": ns, "uid": _uid(), "creationTimestamp": WHEN,
                          "finalizers": [kinds.FINALIZERS[kinds.CAPI_CLAIM]], "labels": dict(labels or {})},
             "spec": {"poolRef": {"apiGroup": kinds.METAL3_GROUP, "kind": "IPPool", "name": pool["metadata"]["name"]}},
             "status": {"addressRef": {"name": address},
                        "conditions": [{"type": "Ready", "status": "True", "reason": "", "message": "",
                                        "lastTransitionTime": WHEN}]}}
    ipaddress = {"apiVersion": CAPI, "kind": "IPAddress",
                 "metadata": {"name": address, "namespace": ns, "uid": _uid(), "creationTimestamp": WHEN,
                              "finalizers": [kinds.FINALIZERS[kinds.CAPI_ADDRESS]], "labels": dict(labels or {}),
                              "ownerReferences": _owner_refs(pool, claim)},
                 "spec": {"address": ip, "claimRef": {"name": name}, "gateway": gateway, "prefix": prefix,
                          "poolRef": {"apiGroup": kinds.METAL3_GROUP, "kind": "IPPool",
                                      "name": pool["metadata"]["name"]}}}
    return [claim, ipaddress]
