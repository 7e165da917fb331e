"""The CRDs of the Cluster API in-cluster provider's four pool kinds, built from the blocks of ``metal3_ipam.schema``.

InClusterIPPool, GlobalInClusterIPPool, InClusterPrefixPool and GlobalInClusterPrefixPool of
``ipam.cluster.x-k8s.io``, in the shapes of the Go in-cluster provider (its names, versions,
fields, printer columns, categories; ``clusterctl.cluster.x-k8s.io/move-hierarchy`` on all four),
so its users' manifests and tools keep working. The IP pools also serve the deprecated v1alpha1,
converted by the controller's ``/convert`` webhook (``poolkinds/incluster/conversion.py``). Two departures: the
v1alpha1 columns First and Last show ``spec.start``/``spec.end`` (the Go CRD points them at
fields that do not exist, so they are always empty), and the contract labels name v1alpha2.
"""

from __future__ import annotations

from typing import Any

from metal3_ipam.core.conversion import CONVERSION_PATH
from metal3_ipam.poolkinds.incluster import spec as incluster
from metal3_ipam.schema import (
    CLUSTERCTL_LABEL, CONTRACT_LABELS, MOVE_HIERARCHY_LABEL, PROVIDER_LABEL, PROVIDER_NAME, WEBHOOK_SERVICE, conditions,
    prefix, root_schema,
)

GROUP = incluster.GROUP
VERSION = incluster.VERSION
OLD_VERSION = "v1alpha1"
KINDS = ("InClusterIPPool", "GlobalInClusterIPPool", "InClusterPrefixPool", "GlobalInClusterPrefixPool")


def _strings(description: str) -> dict[str, Any]:
    return {"type": "array", "description": description, "items": {"type": "string"}}


def _ip_addresses_status() -> dict[str, Any]:
    def count(what: str) -> dict[str, Any]:
        return {"type": "integer", "description": f"{what} Counts beyond 2^63-1 are reported as 2^63-1."}
    return {
        "type": "object",
        "description": "Status of the pool.",
        "properties": {
            "ipAddresses": {
                "type": "object",
                "description": "Counts of the pool's addresses (prefix pools: sub-prefixes).",
                "required": ["free", "outOfRange", "total", "used"],
                "properties": {
                    "total": count("How many the pool can hand out."),
                    "used": count("How many IPAddresses name the pool (those out of range and held ones too)."),
                    "free": count("How many are left to hand out: total less the in-range ones in use."),
                    "outOfRange": count("How many in use the pool's spec no longer holds."),
                },
            },
            # Not in the in-cluster provider's pools: its users get a Ready condition on top.
            "conditions": conditions("Observations of the pool's state (Ready)."),
        },
    }


def _ip_pool_spec() -> dict[str, Any]:
    return {
        "type": "object",
        "description": "The addresses of an in-cluster IP pool.",
        "required": ["addresses", "prefix"],
        "properties": {
            "addresses": _strings("Addresses to hand out: IPs, a-b ranges and CIDRs (host bits ignored), "
                                  "of one family."),
            "prefix": prefix("Prefix length of the network the addresses are in; handed out with each address."),
            "gateway": {"type": "string", "description": "Gateway handed out with each address; never handed out "
                                                          "itself."},
            "excludedAddresses": _strings("Addresses never handed out: IPs, a-b ranges and CIDRs."),
            "allocateReservedIPAddresses": {
                "type": "boolean",
                "description": "Also hand out the first address of the prefix's network and, for IPv4, its last "
                               "(reserved by default; a /31 or /32, /127 or /128 reserves nothing).",
            },
            "addressReuseGracePeriodSeconds": {
                # The API server does not bound an int32 by its format: a larger value would break the
                # decoding of the pool by every Go client.
                "type": "integer", "format": "int32", "minimum": 0, "maximum": 2**31 - 1,
                "description": "How long an address stays held after its claim is deleted (0: none).",
            },
        },
    }


def _ip_pool_v1alpha1_spec() -> dict[str, Any]:
    return {
        "type": "object",
        "description": "The addresses of an in-cluster IP pool (deprecated version).",
        "properties": {
            "addresses": _strings("Addresses to hand out: IPs, a-b ranges and CIDRs."),
            "subnet": {"type": "string", "description": "Subnet to hand out addresses from."},
            "start": {"type": "string", "description": "First address to hand out (default: the subnet's first "
                                                        "host)."},
            "end": {"type": "string", "description": "Last address to hand out (default: the subnet's last host)."},
            "prefix": {"type": "integer", "maximum": 128, "description": "Prefix length (default: the subnet's)."},
            "gateway": {"type": "string", "description": "Gateway handed out with each address."},
        },
    }


def _prefix_pool_spec() -> dict[str, Any]:
    return {
        "type": "object",
        "description": "The IPv6 prefixes of a prefix pool, handed out as aligned sub-prefixes.",
        "required": ["prefixes"],
        "properties": {
            "prefixes": _strings("IPv6 CIDRs, network-aligned, no longer than allocationPrefixLength."),
            "allocationPrefixLength": {
                "type": "integer", "default": 64, "minimum": 1, "maximum": 128,
                "description": "Length of the sub-prefixes handed out. Immutable.",
            },
            "gateway": {"type": "string", "description": "Gateway written on every IPAddress; informational only "
                                                          "(never kept from claims)."},
            "excludedPrefixes": _strings("IPv6 IPs, a-b ranges and CIDRs no sub-prefix handed out may overlap."),
        },
    }


def _counts_columns() -> list[dict[str, Any]]:
    return [{"name": name, "type": "integer", "jsonPath": f".status.ipAddresses.{name.lower()}",
             "description": f"{name} addresses"} for name in ("Total", "Free", "Used")]


def pool_crd(kind: str) -> dict[str, Any]:
    plural = kind.lower() + "s"
    is_ip_pool = "IPPool" in kind
    description = {
        "InClusterIPPool": "InClusterIPPool is a set of IP addresses claims of its namespace are served from.",
        "GlobalInClusterIPPool": "GlobalInClusterIPPool is a set of IP addresses claims of any namespace are "
                                 "served from.",
        "InClusterPrefixPool": "InClusterPrefixPool hands out IPv6 sub-prefixes to claims of its namespace.",
        "GlobalInClusterPrefixPool": "GlobalInClusterPrefixPool hands out IPv6 sub-prefixes to claims of any "
                                     "namespace.",
    }[kind]
    spec = _ip_pool_spec() if is_ip_pool else _prefix_pool_spec()
    first_column = ({"name": "Addresses", "type": "string", "jsonPath": ".spec.addresses",
                     "description": "Addresses of the pool"} if is_ip_pool else
                    {"name": "Prefixes", "type": "string", "jsonPath": ".spec.prefixes",
                     "description": "Prefixes of the pool"})
    versions = [{
        "name": VERSION,
        "served": True,
        "storage": True,
        "schema": {"openAPIV3Schema": root_schema(description, spec, _ip_addresses_status())},
        "subresources": {"status": {}},
        "additionalPrinterColumns": [first_column] + _counts_columns(),
    }]
    crd_spec: dict[str, Any] = {
        "group": GROUP,
        "names": {"kind": kind, "listKind": f"{kind}List", "plural": plural, "singular": kind.lower(),
                  "categories": ["cluster-api"]},
        "scope": "Cluster" if kind.startswith("Global") else "Namespaced",
        "versions": versions,
    }
    if is_ip_pool:
        old_columns = [
            {"name": "Subnet", "type": "string", "jsonPath": ".spec.subnet", "description": "Subnet of the pool"},
            {"name": "First", "type": "string", "jsonPath": ".spec.start", "description": "First address"},
            {"name": "Last", "type": "string", "jsonPath": ".spec.end", "description": "Last address"},
        ] + ([first_column] if not kind.startswith("Global") else []) + _counts_columns()
        versions.insert(0, {
            "name": OLD_VERSION,
            "served": True,
            "storage": False,
            "deprecated": True,
            "schema": {"openAPIV3Schema": root_schema(description, _ip_pool_v1alpha1_spec(),
                                                       _ip_addresses_status())},
            "subresources": {"status": {}},
            "additionalPrinterColumns": old_columns,
        })
        crd_spec["conversion"] = {
            "strategy": "Webhook",
            "webhook": {
                "conversionReviewVersions": ["v1"],
                "clientConfig": {"service": {**WEBHOOK_SERVICE, "path": CONVERSION_PATH}},
            },
        }
    for version in versions:  # an object without spec is the webhook's to refuse, as in the Go provider
        version["schema"]["openAPIV3Schema"].pop("required")
    labels = {PROVIDER_LABEL: PROVIDER_NAME, CLUSTERCTL_LABEL: "", MOVE_HIERARCHY_LABEL: "",
              **{contract: VERSION for contract in CONTRACT_LABELS}}
    return {
        "apiVersion": "apiextensions.k8s.io/v1",
        "kind": "CustomResourceDefinition",
        "metadata": {"name": f"{plural}.{GROUP}", "labels": dict(sorted(labels.items()))},
        "spec": crd_spec,
    }

