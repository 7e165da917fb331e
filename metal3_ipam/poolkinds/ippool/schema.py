"""The CRD of Metal3's IPPool (``ipam.metal3.io/v1alpha1``), built from the blocks of ``metal3_ipam.schema``.

Counts in ``IPPool.status`` are decimal strings: an IPv6 pool holds up to 2^128 addresses,
more than an int64 (or a JSON number read as a double) can represent exactly.
"""

from __future__ import annotations

from typing import Any

from metal3_ipam.schema import (
    COUNT_PATTERN, MAX_COUNT_DIGITS, MAX_IP_LEN, MAX_IP_RANGE_LEN, MAX_LABEL_VALUE_LEN, MAX_TIMESTAMP_LEN,
    MOVE_HIERARCHY_LABEL, age_column, cidr, conditions, crd, dns_servers, immutable, ip, prefix, quoted, quoted_self,
    root_schema, string,
)

# 213 + len("-") + 39 (longest canonical IPv6 text) = 253, the longest object name.
MAX_NAME_PREFIX_LEN = 213
MAX_POOL_ENTRIES = 256
MAX_PREALLOCATIONS = 4096
MAX_EXCLUDED_ADDRESSES = 1024

# A namePrefix P is valid when P + "-" + <IP text> is a DNS-1123 subdomain, where the IP text
# (dots and colons turned into '-', trailing '-' removed) is made of [0-9a-f-], has no dot and
# ends with an alphanumeric character. So: dot-separated labels of lowercase alphanumerics and
# '-', every label starting with an alphanumeric, every label but the last also ending with
# one (the last one is continued by "-<ip>").
NAME_PREFIX_PATTERN = r"^([a-z0-9]([-a-z0-9]*[a-z0-9])?\.)*[a-z0-9][-a-z0-9]*$"

# Messages of the rules (tests and clients may match on them); each immutability rule's
# messageExpression starts with the same text and adds the old and new values.
MSG_NAME_PREFIX_IMMUTABLE = "namePrefix is immutable"
MSG_ALLOCATION_STRATEGY_IMMUTABLE = "allocationStrategy is immutable"
MSG_POOL_ENTRY_BOUNDS = "each pool entry needs at least one of start, end or subnet"

ALLOCATION_STRATEGIES = ("sequential", "random")
DEFAULT_ALLOCATION_STRATEGY = "sequential"


def pool_entry_schema() -> dict[str, Any]:
    return {
        "type": "object",
        "description": (
            "A range of addresses: start-end, a subnet, or start/end bounded by a subnet. "
            "prefix, gateway and dnsServers, when set, override the pool defaults for addresses "
            "taken from this entry."
        ),
        "properties": {
            "start": ip("First address of the range.", "start"),
            "end": ip("Last address of the range.", "end"),
            "subnet": cidr(
                "Subnet of the range. Without start, the range begins at the first host of the "
                "subnet; without end, it stops at the last one.",
                "subnet",
            ),
            "prefix": prefix("Prefix length of the addresses of this entry (0-128)."),
            "gateway": ip("Gateway of the addresses of this entry.", "gateway"),
            "dnsServers": dns_servers(),
        },
        "x-kubernetes-validations": [
            {
                "rule": "has(self.start) || has(self.end) || has(self.subnet)",
                "message": MSG_POOL_ENTRY_BOUNDS,
            },
            {
                "rule": (
                    "!has(self.start) || !has(self.end) || !isIP(self.start) || !isIP(self.end)"
                    " || ip(self.start).family() == ip(self.end).family()"
                ),
                "message": "start and end must be of the same IP family",
                "messageExpression": (
                    "'start ' + self.start + ' and end ' + self.end + ' must be of the same IP family'"
                ),
                "fieldPath": ".end",
            },
            {
                "rule": (
                    "!has(self.start) || !has(self.subnet) || !isIP(self.start) || !isCIDR(self.subnet)"
                    " || cidr(self.subnet).containsIP(self.start)"
                ),
                "message": "start must be inside subnet",
                "messageExpression": "'start ' + self.start + ' is not inside subnet ' + self.subnet",
                "fieldPath": ".start",
            },
            {
                "rule": (
                    "!has(self.end) || !has(self.subnet) || !isIP(self.end) || !isCIDR(self.subnet)"
                    " || cidr(self.subnet).containsIP(self.end)"
                ),
                "message": "end must be inside subnet",
                "messageExpression": "'end ' + self.end + ' is not inside subnet ' + self.subnet",
                "fieldPath": ".end",
            },
        ],
    }


EXCLUDED_RULE = (
    "isIP(self) || isCIDR(self) || ("
    "self.split('-').size() == 2"
    " && isIP(self.split('-')[0]) && isIP(self.split('-')[1])"
    " && ip(self.split('-')[0]).family() == ip(self.split('-')[1]).family())"
)


def _schema() -> dict[str, Any]:
    spec = {
        "type": "object",
        "description": "IPPoolSpec is the desired state of an IPPool.",
        "required": ["namePrefix"],
        "properties": {
            "clusterName": string(
                "Name of the Cluster (cluster.x-k8s.io) the pool belongs to; used for pausing, "
                "the cluster-name label and the owner reference.",
                MAX_LABEL_VALUE_LEN,
            ),
            "namePrefix": string(
                "Prefix of the names of the IPAddress objects of this pool "
                "(<namePrefix>-<address with '.' and ':' replaced by '-'>). Immutable.",
                MAX_NAME_PREFIX_LEN,
                minLength=1,
                pattern=NAME_PREFIX_PATTERN,
                **{
                    "x-kubernetes-validations": [
                        {"rule": "self == oldSelf", "message": MSG_NAME_PREFIX_IMMUTABLE, "messageExpression": immutable(
                            MSG_NAME_PREFIX_IMMUTABLE, quoted("oldSelf"), quoted("self"))}
                    ]
                },
            ),
            "pools": {
                "type": "array",
                "description": "Address ranges of the pool, used in declaration order.",
                "maxItems": MAX_POOL_ENTRIES,
                "items": pool_entry_schema(),
            },
            "prefix": prefix("Default prefix length of the addresses (0-128)."),
            "gateway": ip("Default gateway of the addresses.", "gateway"),
            "dnsServers": dns_servers(),
            "preAllocations": {
                "type": "object",
                "description": (
                    "Claim name to IP address. That claim always gets that address, and the "
                    "address stays reserved for it while no such claim exists."
                ),
                "maxProperties": MAX_PREALLOCATIONS,
                "additionalProperties": ip(
                    "Address preallocated to the claim.", "preAllocations values", plural=True
                ),
            },
            "allocationStrategy": string(
                "How an address is picked within an entry: sequential (the lowest free one) or "
                "random. Entries are always used in declaration order. Immutable.",
                max(len(s) for s in ALLOCATION_STRATEGIES),
                enum=list(ALLOCATION_STRATEGIES),
                default=DEFAULT_ALLOCATION_STRATEGY,
            ),
            "excludedAddresses": {
                "type": "array",
                "description": (
                    "Addresses never handed out: single IPs, ranges 'first-last' or CIDRs."
                ),
                "maxItems": MAX_EXCLUDED_ADDRESSES,
                "items": string(
                    "An IP address, a range 'first-last' of two addresses of one family, or a CIDR.",
                    MAX_IP_RANGE_LEN,
                    **{
                        "x-kubernetes-validations": [
                            {
                                "rule": EXCLUDED_RULE,
                                "message": (
                                    "excludedAddresses entries must be an IP address, a CIDR or a "
                                    "range 'first-last' of two IP addresses of the same family"
                                ),
                                "messageExpression": (
                                    "'excludedAddresses entries must be an IP address, a CIDR or a "
                                    "range first-last of two IP addresses of the same family, got ' + "
                                    + quoted_self()
                                ),
                            }
                        ]
                    },
                ),
            },
        },
        "x-kubernetes-validations": [
            {
                # Transition rule on spec (always present on both sides), so that setting the
                # field where it was absent is judged by its effective value: an absent field
                # means the default.
                "rule": (
                    "(has(self.allocationStrategy) ? self.allocationStrategy : 'sequential') == "
                    "(has(oldSelf.allocationStrategy) ? oldSelf.allocationStrategy : 'sequential')"
                ),
                "message": MSG_ALLOCATION_STRATEGY_IMMUTABLE,
                "messageExpression": immutable(
                    MSG_ALLOCATION_STRATEGY_IMMUTABLE,
                    quoted("(has(oldSelf.allocationStrategy) ? oldSelf.allocationStrategy : 'sequential')"),
                    quoted("(has(self.allocationStrategy) ? self.allocationStrategy : 'sequential')")),
                "fieldPath": ".allocationStrategy",
            }
        ],
    }
    count = lambda what: string(  # noqa: E731
        f"{what} (a decimal integer; strings keep IPv6 sizes exact).",
        MAX_COUNT_DIGITS,
        pattern=COUNT_PATTERN,
    )
    status = {
        "type": "object",
        "description": "IPPoolStatus is the observed state of an IPPool, rebuilt from the IPAddress objects.",
        "properties": {
            "indexes": {
                "type": "object",
                "description": "Claim name to the IP address allocated to it (Cluster API claims as "
                               "IPAddressClaim/<name>); at most 10000 entries, the IPAddress objects are the record.",
                "additionalProperties": string("Address allocated to the claim.", MAX_IP_LEN),
            },
            "indexesOmitted": {
                "type": "integer",
                "format": "int64",
                "minimum": 0,
                "description": "How many allocations indexes leaves out, so that the pool stays far below "
                               "the API server's object size limit.",
            },
            "lastUpdated": string(
                "When the status was last changed.", MAX_TIMESTAMP_LEN, format="date-time"
            ),
            "capacity": count("Number of addresses the pool can hand out"),
            "allocated": count("Number of addresses handed out"),
            "free": count("Number of addresses still available"),
            "conditions": conditions("Observations of the pool's state (Ready)."),
            "observedGeneration": {
                "type": "integer",
                "format": "int64",
                "minimum": 0,
                "description": "The .metadata.generation the status was computed for.",
            },
        },
    }
    return root_schema("IPPool is a set of IP addresses that claims are served from.", spec, status)


def ippool_crd() -> dict[str, Any]:
    return crd(
        kind="IPPool",
        plural="ippools",
        short_names=["ipp", "ippool"],
        schema=_schema(),
        status_subresource=True,
        # clusterctl moves what hangs off a Cluster by owner references. A pool
        # without clusterName has no such owner; this label makes every pool a
        # root of its own, moved with what it owns (its addresses of both APIs).
        # Claims need no label: they come with their consumer (CAPM3's Metal3Data),
        # and an address goes once its pool and its claim have both gone.
        extra_labels={MOVE_HIERARCHY_LABEL: ""},
        columns=[
            {
                "name": "Cluster",
                "type": "string",
                "jsonPath": ".spec.clusterName",
                "description": "Cluster the pool belongs to",
            },
            {
                "name": "Capacity",
                "type": "string",
                "jsonPath": ".status.capacity",
                "description": "Number of addresses the pool can hand out",
            },
            {
                "name": "Allocated",
                "type": "string",
                "jsonPath": ".status.allocated",
                "description": "Number of addresses handed out",
            },
            {
                "name": "Free",
                "type": "string",
                "jsonPath": ".status.free",
                "description": "Number of addresses still available",
            },
            age_column("IPPool"),
        ],
    )

