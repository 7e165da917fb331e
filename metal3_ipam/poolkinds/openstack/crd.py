"""The CustomResourceDefinition of OpenStackFloatingIPPool (``openstack.metal3-ipam.io/v1alpha1``), as a dict.

``metal3_ipam.crds`` lists it with the others and writes ``config/crd/bases``
from it. The spec's fields are CAPO's pool's where the meaning is the same (a
user switches by changing the ``apiGroup`` of ``floatingIPPoolRef``); the
schema refuses what it can state (one of ``id`` or ``filter``, an IPv4 list, a
policy of ``Delete`` or ``Retain``), ``pool.read_pool`` the rest at admission.
"""

from __future__ import annotations

from typing import Any

from metal3_ipam.core import kinds
from metal3_ipam.poolkinds.openstack import pool as p

CONTRACT_LABELS = {"cluster.x-k8s.io/v1beta1": p.VERSION, "cluster.x-k8s.io/v1beta2": p.VERSION}
CONDITION_TYPE_PATTERN = (
    r"^([a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*/)?"
    r"(([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9])$"
)
CONDITION_REASON_PATTERN = r"^[A-Za-z]([A-Za-z0-9_,:]*[A-Za-z0-9_])?$"
UUID_PATTERN = r"^[0-9a-fA-F]{8}-?[0-9a-fA-F]{4}-?[0-9a-fA-F]{4}-?[0-9a-fA-F]{4}-?[0-9a-fA-F]{12}$"
IPV4_RULE = "isIP(self) && ip(self).family() == 4"


def _string(description: str, max_length: int, **extra: Any) -> dict[str, Any]:
    return {"type": "string", "description": description, "maxLength": max_length, **extra}


def _tags(description: str) -> dict[str, Any]:
    return {"type": "array", "description": description, "maxItems": p.MAX_TAGS, "x-kubernetes-list-type": "set",
            "items": _string("A Neutron tag.", p.MAX_TAG_LEN, minLength=1, pattern="^[^,]+$")}


def _conditions() -> dict[str, Any]:
    return {
        "type": "array", "maxItems": 32, "x-kubernetes-list-type": "map", "x-kubernetes-list-map-keys": ["type"],
        "description": "Ready: Neutron answers, Keystone accepts the credentials and the network is found (reasons "
                       "IdentityMissing, CredentialsRefused, OpenStackUnreachable, NetworkNotFound, ...).",
        "items": {
            "type": "object", "description": "One aspect of the current state of the object.",
            "required": ["type", "status", "lastTransitionTime", "reason", "message"],
            "properties": {
                "type": _string("Type of the condition (Ready).", 316, pattern=CONDITION_TYPE_PATTERN),
                "status": _string("True, False or Unknown.", 7, enum=["True", "False", "Unknown"]),
                "observedGeneration": {"type": "integer", "format": "int64", "minimum": 0,
                                       "description": "The .metadata.generation the condition was set for."},
                "lastTransitionTime": _string("Last time the status changed.", 64, format="date-time"),
                "reason": _string("Why, in CamelCase.", 1024, minLength=1, pattern=CONDITION_REASON_PATTERN),
                "message": _string("Human readable message.", 32768),
            },
        },
    }


def _spec() -> dict[str, Any]:
    network_filter = {
        "type": "object", "minProperties": 1,
        "description": "Selects the network by Neutron's filters (router:external is always required).",
        "properties": {
            "name": _string("The network's name.", p.MAX_FILTER_LEN, minLength=1),
            "description": _string("The network's description.", p.MAX_FILTER_LEN, minLength=1),
            "projectID": _string("The network's project.", p.MAX_FILTER_LEN, minLength=1),
            "tags": _tags("The network has all of these tags."),
            "tagsAny": _tags("The network has at least one of these tags."),
            "notTags": _tags("The network does not have all of these tags."),
            "notTagsAny": _tags("The network has none of these tags."),
        },
    }
    return {
        "type": "object",
        "description": "OpenStackFloatingIPPoolSpec: the cloud, the external network, and what a release does.",
        "required": ["identityRef"],
        "properties": {
            "identityRef": {
                "type": "object", "required": ["name"],
                "description": "The Secret, in the pool's namespace, holding the clouds.yaml (key clouds.yaml, and "
                               "optionally cacert), and the cloud and region in it.",
                "properties": {
                    "type": _string("Secret (the only type served).", 16, enum=[p.SECRET], default=p.SECRET),
                    "name": _string("The Secret's name.", p.MAX_NAME_LEN, minLength=1,
                                    pattern=p.DNS_SUBDOMAIN.pattern),
                    "cloudName": _string("The cloud's name in clouds.yaml (default openstack).", p.MAX_NAME_LEN,
                                         minLength=1),
                    "region": _string("The region; overrides the clouds.yaml's region_name.", p.MAX_REGION_LEN,
                                      minLength=1),
                },
            },
            "floatingIPNetwork": {
                "type": "object", "minProperties": 1, "maxProperties": 1,
                "description": "The external network of the floating IPs: by id or filter; when omitted, the only "
                               "external network the project sees.",
                "properties": {
                    "id": _string("The network's UUID.", 36, pattern=UUID_PATTERN),
                    "filter": network_filter,
                },
            },
            "preAllocatedFloatingIPs": {
                "type": "array", "maxItems": p.MAX_PREALLOCATED, "x-kubernetes-list-type": "set",
                "description": "Floating IPs handed out before new ones are made: taken when the project holds them "
                               "unused, else made with that address (which Neutron's default policy allows only "
                               "to admins). Never deleted by a release.",
                "items": _string("An IPv4 address.", 15, **{"x-kubernetes-validations": [
                    {"rule": IPV4_RULE, "message": "must be an IPv4 address (floating IPs are IPv4 only)"}]}),
            },
            "maxIPs": {"type": "integer", "minimum": 0, "maximum": p.MAX_IPS,
                       "description": "The most floating IPs the pool's claims hold at once; no limit when omitted."},
            "reclaimPolicy": _string("What a claim's release does to its floating IP: Delete (deleted in Neutron) "
                                     "or Retain (kept, for the pool's next claim; also when the pool is deleted).",
                                     8, enum=[p.DELETE, p.RETAIN], default=p.DELETE),
            "releaseWithoutDelete": {
                "type": "boolean", "default": False,
                "description": "Keep a released floating IP (for the pool's next claim) instead of deleting it, "
                               "whatever the reclaimPolicy: for clouds whose policy forbids users to delete "
                               "floating IPs."},
            "adoptFromCAPOPool": _string(
                "The name of a Cluster API Provider OpenStack pool (OpenStackFloatingIPPool of "
                "infrastructure.cluster.x-k8s.io) whose floating IPs no port uses are taken for this pool's claims "
                "(its tag cluster-api-provider-openstack-fip-pool-<name>). Set it only once that pool hands out "
                "no more.", p.MAX_NAME_LEN, pattern=p.DNS_SUBDOMAIN.pattern),
        },
    }


def _status() -> dict[str, Any]:
    ips = lambda what: {"type": "array", "maxItems": p.MAX_IPS, "description": what,  # noqa: E731
                        "items": _string("An IPv4 address.", 15)}
    return {
        "type": "object",
        "description": "OpenStackFloatingIPPoolStatus: whether Neutron serves the pool, its network and floating IPs.",
        "properties": {
            "conditions": _conditions(),
            "observedGeneration": {"type": "integer", "format": "int64", "minimum": 0,
                                   "description": "The .metadata.generation the status was computed for."},
            "claimedIPs": ips("Floating IPs of the pool held for claims."),
            "availableIPs": ips("Floating IPs the pool keeps for its next claims (released by Retain)."),
            "failedIPs": ips("Floating IPs that could not be handed out."),
            "claimed": {"type": "integer", "minimum": 0, "description": "How many claimedIPs."},
            "available": {"type": "integer", "minimum": 0, "description": "How many availableIPs."},
            "floatingIPNetwork": {
                "type": "object", "description": "The external network, as resolved when last surveyed.",
                "properties": {"id": _string("Its id.", 64), "name": _string("Its name.", 255),
                               "tags": {"type": "array", "maxItems": 64, "items": _string("A tag.", 255)}},
            },
            "lastChecked": _string("When Neutron was last asked.", 64, format="date-time"),
        },
    }


def crd() -> dict[str, Any]:
    labels = {kinds.PROVIDER_LABEL: kinds.PROVIDER_NAME, "clusterctl.cluster.x-k8s.io": "",
              "clusterctl.cluster.x-k8s.io/move-hierarchy": "", **CONTRACT_LABELS}
    ready = '.status.conditions[?(@.type=="Ready")]'
    schema = {
        "type": "object", "required": ["spec"],
        "description": "OpenStackFloatingIPPool hands out floating IPs of an OpenStack project to Cluster API "
                       "IPAddressClaims.",
        "properties": {
            "apiVersion": {"type": "string", "description": "APIVersion defines the versioned schema of this "
                                                            "representation of an object."},
            "kind": {"type": "string", "description": "Kind is a string value representing the REST resource this "
                                                      "object represents."},
            "metadata": {"type": "object"},
            "spec": _spec(),
            "status": _status(),
        },
    }
    columns = [
        {"name": "Network", "type": "string", "jsonPath": ".status.floatingIPNetwork.name",
         "description": "The external network of the floating IPs"},
        {"name": "Policy", "type": "string", "jsonPath": ".spec.reclaimPolicy",
         "description": "What a release does"},
        {"name": "Ready", "type": "string", "jsonPath": f"{ready}.status", "description": "Whether Neutron serves"},
        {"name": "Reason", "type": "string", "jsonPath": f"{ready}.reason", "description": "Why not"},
        {"name": "Claimed", "type": "integer", "jsonPath": ".status.claimed", "description": "Floating IPs held"},
        {"name": "Available", "type": "integer", "jsonPath": ".status.available",
         "description": "Floating IPs kept for the next claims"},
        {"name": "Age", "type": "date", "jsonPath": ".metadata.creationTimestamp",
         "description": f"Time since the creation of the {p.KIND}"},
    ]
    return {
        "apiVersion": "apiextensions.k8s.io/v1",
        "kind": "CustomResourceDefinition",
        "metadata": {"name": f"{p.PLURAL}.{p.GROUP}", "labels": dict(sorted(labels.items()))},
        "spec": {
            "group": p.GROUP,
            "names": {"kind": p.KIND, "listKind": f"{p.KIND}List", "plural": p.PLURAL, "singular": p.KIND.lower(),
                      "shortNames": ["osfipp"], "categories": ["cluster-api"]},
            "scope": "Namespaced",
            "versions": [{"name": p.VERSION, "served": True, "storage": True,
                          "schema": {"openAPIV3Schema": schema}, "subresources": {"status": {}},
                          "additionalPrinterColumns": columns}],
        },
    }
