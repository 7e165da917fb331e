"""The building blocks of the CRD schemas, and the CRDs that are no pool kind's: Metal3's IPClaim and IPAddress.

Each kind of pool's package builds its own CRD from these blocks (``PoolKind.crds``);
``metal3_ipam.crds`` gathers them and writes ``config/crd/``. This module names no kind of pool.

The field names are Metal3's (a drop-in replacement must read the same manifests). Validation
is structural OpenAPI v3 plus CEL rules (``x-kubernetes-validations``):

* every string has a ``maxLength``, every list a ``maxItems`` and every map that a rule looks
  into a ``maxProperties``, so the API server's CEL cost estimation accepts the rules;
* IP addresses use ``isIP()``, CIDRs ``isCIDR()`` (Kubernetes >= 1.31);
* immutable fields use transition rules (``oldSelf``).

Counts in a status are decimal strings where a pool may hold more addresses than an int64
(or a JSON number read as a double) can represent exactly: an IPv6 pool holds up to 2^128.
"""

from __future__ import annotations

from typing import Any

from metal3_ipam.core import kinds

GROUP = "ipam.metal3.io"
VERSION = "v1alpha1"
API_VERSION = f"{GROUP}/{VERSION}"

# Labels on the CRD objects themselves. ``cluster.x-k8s.io/provider`` and
# ``clusterctl.cluster.x-k8s.io`` make clusterctl treat the CRDs as part of this provider
# (``clusterctl move`` copies their objects); the contract labels map the Cluster API
# contract versions to the API version served here.
PROVIDER_LABEL = kinds.PROVIDER_LABEL
PROVIDER_NAME = kinds.PROVIDER_NAME
CLUSTERCTL_LABEL = "clusterctl.cluster.x-k8s.io"
MOVE_HIERARCHY_LABEL = "clusterctl.cluster.x-k8s.io/move-hierarchy"
CONTRACT_LABELS = {
    "cluster.x-k8s.io/v1beta1": VERSION,
    "cluster.x-k8s.io/v1beta2": VERSION,
}

# --- bounds -------------------------------------------------------------------------------
# Longest textual IP address accepted: an IPv6 address with an embedded IPv4 tail
# ("ffff:ffff:ffff:ffff:ffff:ffff:255.255.255.255"). Canonical forms, which object names are
# built from, are at most 39 characters.
MAX_IP_LEN = 45
MAX_CIDR_LEN = MAX_IP_LEN + len("/128")
MAX_IP_RANGE_LEN = 2 * MAX_IP_LEN + 1  # "first-last"
MAX_NAME_LEN = 253  # DNS-1123 subdomain (object names)
MAX_NAMESPACE_LEN = 63  # DNS-1123 label
MAX_LABEL_VALUE_LEN = 63
MAX_KIND_LEN = 63
MAX_API_VERSION_LEN = 317  # group (253) + "/" + version (63)
MAX_UID_LEN = 128
MAX_RESOURCE_VERSION_LEN = 128
MAX_FIELD_PATH_LEN = 512
MAX_TIMESTAMP_LEN = 64
MAX_COUNT_DIGITS = 40  # 2**128 has 39 decimal digits
MAX_ERROR_MESSAGE_LEN = 32768
MAX_DNS_SERVERS = 32
MAX_CONDITIONS = 32

COUNT_PATTERN = r"^[0-9]+$"
# metav1.Condition patterns, as in the Kubernetes API.
CONDITION_TYPE_PATTERN = (
    r"^([a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*/)?"
    r"(([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9])$"
)
CONDITION_REASON_PATTERN = r"^[A-Za-z]([A-Za-z0-9_,:]*[A-Za-z0-9_])?$"

# Messages of the immutability rules (tests and clients may match on them); each rule's
# messageExpression starts with the same text and adds the old and new values.
MSG_POOL_IMMUTABLE = "pool is immutable"
MSG_SPEC_IMMUTABLE = "spec is immutable"

# The webhook Service as config/webhook/service.yaml names it; kustomize (config/default) renames
# it and sets its namespace, cert-manager injects the CA (replacements there).
WEBHOOK_SERVICE = {"name": "webhook-service", "namespace": "system"}


# --- schema building blocks ---------------------------------------------------------------

def string(description: str, max_length: int, **extra: Any) -> dict[str, Any]:
    schema: dict[str, Any] = {"type": "string", "description": description, "maxLength": max_length}
    schema.update(extra)
    return schema


def quoted_self() -> str:
    return "'\"' + self + '\"'"


def quoted(expr: str) -> str:
    """CEL: the string ``expr`` between double quotes, for a message."""
    return f"'\"' + {expr} + '\"'"


def immutable(message: str, old: str, new: str) -> str:
    """CEL message of an immutability rule: the field's old and new value (SPEC §9: field and value)."""
    return f"'{message} (was ' + {old} + '), got ' + {new}"


def ref_text(ref: str) -> str:
    """CEL: an object reference as ``[kind ][namespace/]name`` (``namespace`` is a CEL keyword, escaped)."""
    ns = f"{ref}.__namespace__"
    return (f"(has({ref}.kind) && {ref}.kind != '' ? {ref}.kind + ' ' : '') + "
            f"(has({ns}) && {ns} != '' ? {ns} + '/' : '') + {ref}.name")


def same_referent(a: str, b: str) -> str:
    """CEL: two object references name one object: name, namespace and kind alike, an empty
    namespace or kind being the same as none (what the Go Metal3 IPAM's webhook compares; a
    reference that gains its uid still names the same pool)."""
    def field(ref: str, name: str) -> str:
        return f"(has({ref}.{name}) ? {ref}.{name} : '')"
    return " && ".join([f"{a}.name == {b}.name"]
                       + [f"{field(a, f)} == {field(b, f)}" for f in ("__namespace__", "kind")])


def _ipaddress_spec_changes() -> str:
    """CEL: which fields of an IPAddress spec changed, each as ``field old -> new``.

    Kept to plain comparisons and concatenations of bounded strings: the API server
    refuses a CRD whose estimated message cost is over its budget (lists, filters and
    joins over ``dnsServers`` are).
    """
    def change(field: str, old: str, new: str, cond: str | None = None) -> str:
        return f"({cond or f'{old} != {new}'} ? ' {field} ' + {old} + ' -> ' + {new} + ';' : '')"

    # string(int) has no bounded length for the cost estimator; a lookup of the 129 prefix lengths has.
    lengths = "[" + ", ".join(f"'{n}'" for n in range(129)) + "]"

    def optional(field: str, number: bool = False) -> str:
        def text(x: str) -> str:
            value = f"{lengths}[{x}.{field}]" if number else f"{x}.{field}"
            return f"(has({x}.{field}) ? {value} : 'none')"
        return change(field, text("oldSelf"), text("self"))

    parts = [
        change("address", "oldSelf.address", "self.address"),
        change("pool", "oldSelf.pool.name", "self.pool.name"),
        change("claim", "oldSelf.claim.name", "self.claim.name"),
        optional("prefix", number=True),
        optional("gateway"),
        "(has(oldSelf.dnsServers) != has(self.dnsServers) || (has(self.dnsServers) && "
        "oldSelf.dnsServers != self.dnsServers) ? ' dnsServers;' : '')",
    ]
    return f"'{MSG_SPEC_IMMUTABLE} (IPAddress of ' + oldSelf.address + '), changed:' + " + " + ".join(parts)


def paren(expr: str) -> str:
    return f"({expr})"


def ip(description: str, what: str, *, plural: bool = False) -> dict[str, Any]:
    """An IP address string; ``what`` names the field in the error message."""
    message = f"{what} must be {'valid IP addresses' if plural else 'a valid IP address'}"
    return string(
        description,
        MAX_IP_LEN,
        **{
            "x-kubernetes-validations": [
                {
                    "rule": "isIP(self)",
                    "message": message,
                    "messageExpression": f"'{message}, got ' + {quoted_self()}",
                }
            ]
        },
    )


def cidr(description: str, what: str) -> dict[str, Any]:
    return string(
        description,
        MAX_CIDR_LEN,
        **{
            "x-kubernetes-validations": [
                {
                    "rule": "isCIDR(self)",
                    "message": f"{what} must be a valid CIDR (address/prefix length)",
                    "messageExpression": (
                        f"'{what} must be a valid CIDR (address/prefix length), got ' + {quoted_self()}"
                    ),
                }
            ]
        },
    )


def prefix(description: str) -> dict[str, Any]:
    return {"type": "integer", "description": description, "minimum": 0, "maximum": 128}


def dns_servers() -> dict[str, Any]:
    return {
        "type": "array",
        "description": "DNS servers handed out with the address.",
        "maxItems": MAX_DNS_SERVERS,
        "items": ip("IP address of a DNS server.", "dnsServers entries", plural=True),
    }


def object_reference(description: str, *, name_required: bool) -> dict[str, Any]:
    """corev1.ObjectReference, atomic like in Metal3's API."""
    schema: dict[str, Any] = {
        "type": "object",
        "description": description,
        "properties": {
            "apiVersion": string("API version of the referent.", MAX_API_VERSION_LEN),
            "fieldPath": string(
                "If referring to a piece of an object instead of an entire object, the field path.",
                MAX_FIELD_PATH_LEN,
            ),
            "kind": string("Kind of the referent.", MAX_KIND_LEN),
            "name": string("Name of the referent.", MAX_NAME_LEN),
            "namespace": string(
                "Namespace of the referent; empty means the namespace of the referring object.",
                MAX_NAMESPACE_LEN,
            ),
            "resourceVersion": string(
                "Specific resourceVersion to which this reference is made, if any.",
                MAX_RESOURCE_VERSION_LEN,
            ),
            "uid": string("UID of the referent.", MAX_UID_LEN),
        },
        "x-kubernetes-map-type": "atomic",
    }
    if name_required:
        schema["properties"]["name"]["minLength"] = 1
        schema["required"] = ["name"]
    return schema


def conditions(description: str) -> dict[str, Any]:
    """A list of metav1.Condition, keyed by type."""
    return {
        "type": "array",
        "description": description,
        "maxItems": MAX_CONDITIONS,
        "x-kubernetes-list-type": "map",
        "x-kubernetes-list-map-keys": ["type"],
        "items": {
            "type": "object",
            "description": "One aspect of the current state of the object.",
            "required": ["type", "status", "lastTransitionTime", "reason", "message"],
            "properties": {
                "type": string(
                    "Type of the condition, in CamelCase (Ready).",
                    316,
                    pattern=CONDITION_TYPE_PATTERN,
                ),
                "status": string(
                    "Status of the condition: True, False or Unknown.",
                    7,
                    enum=["True", "False", "Unknown"],
                ),
                "observedGeneration": {
                    "type": "integer",
                    "format": "int64",
                    "minimum": 0,
                    "description": "The .metadata.generation the condition was set for.",
                },
                "lastTransitionTime": string(
                    "Last time the condition changed from one status to another.",
                    MAX_TIMESTAMP_LEN,
                    format="date-time",
                ),
                "reason": string(
                    "Programmatic identifier of the reason for the last transition, in CamelCase.",
                    1024,
                    minLength=1,
                    pattern=CONDITION_REASON_PATTERN,
                ),
                "message": string(
                    "Human readable message about the transition.",
                    32768,
                ),
            },
        },
    }


def age_column(kind: str) -> dict[str, Any]:
    return {
        "name": "Age",
        "type": "date",
        "jsonPath": ".metadata.creationTimestamp",
        "description": f"Time since the creation of the {kind}",
    }


def root_schema(description: str, spec: dict[str, Any], status: dict[str, Any] | None) -> dict[str, Any]:
    properties: dict[str, Any] = {
        "apiVersion": {
            "type": "string",
            "description": "APIVersion defines the versioned schema of this representation of an object.",
        },
        "kind": {
            "type": "string",
            "description": "Kind is a string value representing the REST resource this object represents.",
        },
        "metadata": {"type": "object"},
        "spec": spec,
    }
    if status is not None:
        properties["status"] = status
    return {
        "type": "object",
        "description": description,
        "required": ["spec"],
        "properties": properties,
    }


def crd(
    *,
    kind: str,
    plural: str,
    short_names: list[str],
    schema: dict[str, Any],
    columns: list[dict[str, Any]],
    status_subresource: bool,
    extra_labels: dict[str, str] | None = None,
    group: str = GROUP,
) -> dict[str, Any]:
    labels = {
        PROVIDER_LABEL: PROVIDER_NAME,
        CLUSTERCTL_LABEL: "",
        **CONTRACT_LABELS,
        **(extra_labels or {}),
    }
    version: dict[str, Any] = {
        "name": VERSION,
        "served": True,
        "storage": True,
        "schema": {"openAPIV3Schema": schema},
        "subresources": {"status": {}} if status_subresource else {},
        "additionalPrinterColumns": columns,
    }
    return {
        "apiVersion": "apiextensions.k8s.io/v1",
        "kind": "CustomResourceDefinition",
        "metadata": {
            "name": f"{plural}.{group}",
            "labels": dict(sorted(labels.items())),
        },
        "spec": {
            "group": group,
            "names": {
                "kind": kind,
                "listKind": f"{kind}List",
                "plural": plural,
                "singular": kind.lower(),
                "shortNames": short_names,
                "categories": ["cluster-api"],
            },
            "scope": "Namespaced",
            "versions": [version],
        },
    }


def rule(expr: str, message: str, value_expr: str | None = None, field_path: str | None = None) -> dict[str, Any]:
    """A CEL rule whose refusal names the field (``message``) and, when ``value_expr`` is given, the value."""
    out: dict[str, Any] = {"rule": expr, "message": message}
    if value_expr is not None:
        out["messageExpression"] = f"'{message}, got ' + {quoted(value_expr)}"
    if field_path is not None:
        out["fieldPath"] = field_path
    return out


# --- IPClaim --------------------------------------------------------------------------------

def _ipclaim_schema() -> dict[str, Any]:
    pool = object_reference(
        "The IPPool to take the address from; an empty namespace means the claim's. Immutable.",
        name_required=True,
    )
    pool["x-kubernetes-validations"] = [{"rule": same_referent("self", "oldSelf"), "message": MSG_POOL_IMMUTABLE, "messageExpression": immutable(
        MSG_POOL_IMMUTABLE, quoted(paren(ref_text("oldSelf"))), quoted(paren(ref_text("self"))))}]
    spec = {
        "type": "object",
        "description": "IPClaimSpec is the desired state of an IPClaim.",
        "required": ["pool"],
        "properties": {"pool": pool},
    }
    status = {
        "type": "object",
        "description": "IPClaimStatus is the observed state of an IPClaim.",
        "properties": {
            "address": object_reference(
                "The IPAddress allocated for this claim.", name_required=False
            ),
            "errorMessage": string(
                "Why no address could be allocated, if so.", MAX_ERROR_MESSAGE_LEN
            ),
            "conditions": conditions("Observations of the claim's state (Ready)."),
        },
    }
    return root_schema(
        "IPClaim requests an IP address from an IPPool. The annotation ipAddress: <ip> asks for "
        "a specific address.",
        spec,
        status,
    )


def ipclaim_crd() -> dict[str, Any]:
    return crd(
        kind="IPClaim",
        plural="ipclaims",
        short_names=["ipc", "ipclaim"],
        schema=_ipclaim_schema(),
        status_subresource=True,
        columns=[
            {
                "name": "Pool",
                "type": "string",
                "jsonPath": ".spec.pool.name",
                "description": "IPPool the address is claimed from",
            },
            {
                "name": "Address",
                "type": "string",
                "jsonPath": ".status.address.name",
                "description": "IPAddress allocated for the claim",
            },
            {
                "name": "Error",
                "type": "string",
                "jsonPath": ".status.errorMessage",
                "description": "Why no address could be allocated",
            },
            age_column("IPClaim"),
        ],
    )


# --- IPAddress ------------------------------------------------------------------------------

def _ipaddress_schema() -> dict[str, Any]:
    spec = {
        "type": "object",
        "description": "IPAddressSpec is one allocated address. Immutable.",
        "required": ["claim", "pool", "address"],
        "properties": {
            "claim": object_reference("The claim the address is allocated to.", name_required=True),
            "pool": object_reference("The IPPool the address was taken from.", name_required=True),
            "address": ip("The IP address.", "address"),
            "prefix": prefix("Prefix length of the address (0-128)."),
            "gateway": ip("Gateway for the address.", "gateway"),
            "dnsServers": dns_servers(),
        },
        "x-kubernetes-validations": [{"rule": "self == oldSelf", "message": MSG_SPEC_IMMUTABLE,
                                      "messageExpression": _ipaddress_spec_changes()}],
    }
    return root_schema("IPAddress is an IP address allocated from an IPPool to a claim.", spec, None)


def ipaddress_crd() -> dict[str, Any]:
    return crd(
        kind="IPAddress",
        plural="ipaddresses",
        # On Kubernetes >= 1.33 kubectl resolves "ipaddress"/"ipaddresses" to the built-in
        # networking.k8s.io IPAddress first; "ipa" or "ipaddresses.ipam.metal3.io" reach this one.
        # The short name is kept for Metal3 compatibility.
        short_names=["ipa", "ipaddress"],
        schema=_ipaddress_schema(),
        status_subresource=False,
        columns=[
            {"name": "Address", "type": "string", "jsonPath": ".spec.address", "description": "IP address"},
            {"name": "Prefix", "type": "integer", "jsonPath": ".spec.prefix", "description": "Prefix length"},
            {"name": "Gateway", "type": "string", "jsonPath": ".spec.gateway", "description": "Gateway"},
            {
                "name": "Pool",
                "type": "string",
                "jsonPath": ".spec.pool.name",
                "description": "IPPool the address was taken from",
            },
            {
                "name": "Claim",
                "type": "string",
                "jsonPath": ".spec.claim.name",
                "description": "Claim the address is allocated to",
            },
            age_column("IPAddress"),
        ],
    )

