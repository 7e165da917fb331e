"""The CustomResourceDefinition of OpenStackFloatingIPPool (``openstack.metal3-ipam.io/v1alpha1``), as a dict.

``metal3_ipam.crds`` lists it with the others and writes ``config/crd/bases``
from it. The spec's fields are CAPO's pool's where the meaning is the same (a
user switches by changing the ``apiGroup`` of ``floatingIPPoolRef``); the
schema refuses what it can state (one of ``id`` or ``filter``, an IPv4 list, a
policy of ``Delete`` or ``Retain``), ``pool.read_pool`` the rest at admission.
Built from the blocks of ``metal3_ipam.schema``, as every kind's CRD.
"""

from __future__ import annotations

from typing import Any

from metal3_ipam.poolkinds.openstack import pool as p
from metal3_ipam.schema import MOVE_HIERARCHY_LABEL, age_column, conditions, root_schema, string
from metal3_ipam.schema import crd as custom_resource

IPV4_RULE = "isIP(self) && ip(self).family() == 4"


def _tags(description: str) -> dict[str, Any]:
    return {"type": "array", "description": description, "maxItems": p.MAX_TAGS, "x-kubernetes-list-type": "set",
            "items": string("A Neutron tag.", p.MAX_TAG_LEN, minLength=1, pattern="^[^,]+$")}


def _spec() -> dict[str, Any]:
    network_filter = {
        "type": "object", "minProperties": 1,
        "description": "Selects the network by Neutron's filters (router:external is always required).",
        "properties": {
            "name": string("The network's name.", p.MAX_FILTER_LEN, minLength=1),
            "description": string("The network's description.", p.MAX_FILTER_LEN, minLength=1),
            "projectID": string("The network's project.", p.MAX_FILTER_LEN, minLength=1),
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
                    "type": string("Secret (the only type served).", 16, enum=[p.SECRET], default=p.SECRET),
                    "name": string("The Secret's name.", p.MAX_NAME_LEN, minLength=1,
                                    pattern=p.DNS_SUBDOMAIN.pattern),
                    "cloudName": string("The cloud's name in clouds.yaml (default openstack).", p.MAX_NAME_LEN,
                                         minLength=1),
                    "region": string("The region; overrides the clouds.yaml's region_name.", p.MAX_REGION_LEN,
                                      minLength=1),
                },
            },
            "floatingIPNetwork": {
                "type": "object", "minProperties": 1, "maxProperties": 1,
                "description": "The external network of the floating IPs: by id or filter; when omitted, the only "
                               "external network the project sees.",
                "properties": {
                    "id": string("The network's UUID.", 36, pattern=p.UUID.pattern),
                    "filter": network_filter,
                },
            },
            "preAllocatedFloatingIPs": {
                "type": "array", "maxItems": p.MAX_PREALLOCATED, "x-kubernetes-list-type": "set",
                "description": "Floating IPs handed out before new ones are made: taken when the project holds them "
                               "unused, else made with that address (which Neutron's default policy allows only "
                               "to admins). Never deleted by a release.",
                "items": string("An IPv4 address.", 15, **{"x-kubernetes-validations": [
                    {"rule": IPV4_RULE, "message": "must be an IPv4 address (floating IPs are IPv4 only)"}]}),
            },
            "maxIPs": {"type": "integer", "minimum": 0, "maximum": p.MAX_IPS,
                       "description": "The most floating IPs the pool's claims hold at once; no limit when omitted."},
            "reclaimPolicy": string("What a claim's release does to its floating IP: Delete (deleted in Neutron) "
                                     "or Retain (kept, for the pool's next claim; also when the pool is deleted).",
                                     8, enum=[p.DELETE, p.RETAIN], default=p.DELETE),
            "releaseWithoutDelete": {
                "type": "boolean", "default": False,
                "description": "Keep a released floating IP (for the pool's next claim) instead of deleting it, "
                               "whatever the reclaimPolicy: for clouds whose policy forbids users to delete "
                               "floating IPs."},
            "adoptFromCAPOPool": string(
                "The name of a Cluster API Provider OpenStack pool (OpenStackFloatingIPPool of "
                "infrastructure.cluster.x-k8s.io), in this namespace, whose floating IPs are taken for this pool's "
                "claims: those of its tag cluster-api-provider-openstack-fip-pool-<name> that no port uses and that "
                "pool lists in status.availableIPs. Set it only once that pool hands out no more.", p.MAX_NAME_LEN,
                pattern=p.DNS_SUBDOMAIN.pattern),
        },
    }


def _status() -> dict[str, Any]:
    ips = lambda what: {"type": "array", "maxItems": p.MAX_IPS, "description": what,  # noqa: E731
                        "items": string("An IPv4 address.", 15)}
    return {
        "type": "object",
        "description": "OpenStackFloatingIPPoolStatus: whether Neutron serves the pool, its network and floating IPs.",
        "properties": {
            "conditions": conditions(
                "Ready: Neutron answers, Keystone accepts the credentials and the network is found (reasons "
                "IdentityMissing, CredentialsRefused, OpenStackUnreachable, NetworkNotFound, ...)."),
            "observedGeneration": {"type": "integer", "format": "int64", "minimum": 0,
                                   "description": "The .metadata.generation the status was computed for."},
            "claimedIPs": ips("Floating IPs of the pool held for claims."),
            "availableIPs": ips("Floating IPs the pool keeps for its next claims (released by Retain)."),
            "failedIPs": ips("Floating IPs that could not be handed out."),
            "claimed": {"type": "integer", "minimum": 0, "description": "How many claimedIPs."},
            "available": {"type": "integer", "minimum": 0, "description": "How many availableIPs."},
            "floatingIPNetwork": {
                "type": "object", "description": "The external network, as resolved when last surveyed.",
                "properties": {"id": string("Its id.", 64), "name": string("Its name.", 255),
                               "tags": {"type": "array", "maxItems": 64, "items": string("A tag.", 255)}},
            },
            "lastChecked": string("When Neutron was last asked.", 64, format="date-time"),
        },
    }


def crd() -> dict[str, Any]:
    ready = '.status.conditions[?(@.type=="Ready")]'
    schema = root_schema("OpenStackFloatingIPPool hands out floating IPs of an OpenStack project to Cluster API "
                         "IPAddressClaims.", _spec(), _status())
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
        age_column(p.KIND),
    ]
    return custom_resource(kind=p.KIND, plural=p.PLURAL, short_names=["osfipp"], schema=schema, columns=columns,
                           status_subresource=True, extra_labels={MOVE_HIERARCHY_LABEL: ""}, group=p.GROUP)
