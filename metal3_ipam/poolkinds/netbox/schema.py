"""The CRD of NetBoxIPPool (``netbox.metal3-ipam.io/v1alpha1``), built from the blocks of ``metal3_ipam.schema``."""

from __future__ import annotations

from typing import Any

from metal3_ipam.poolkinds.netbox import pool as netbox_pool
from metal3_ipam.schema import (
    COUNT_PATTERN, MAX_CIDR_LEN, MAX_COUNT_DIGITS, MAX_IP_RANGE_LEN, MAX_NAME_LEN, MAX_TIMESTAMP_LEN,
    MOVE_HIERARCHY_LABEL, age_column, conditions, crd, dns_servers, ip, prefix, root_schema, rule, string,
)

# The rules of a NetBoxIPPool, named so that tests mirror them and messages are matched on.
NETBOX_URL_RULE = (
    "isURL(self) && (url(self).getScheme() == 'http' || url(self).getScheme() == 'https')"
    " && url(self).getHostname() != '' && !self.contains('?') && !self.contains('#')"
)
NETBOX_URL_USERINFO_RULE = "!self.matches('^[A-Za-z][-A-Za-z0-9+.]*://[^/]*@')"
NETBOX_CA_BUNDLE_RULE = (
    "self.contains('-----BEGIN CERTIFICATE-----') && self.contains('-----END CERTIFICATE-----')"
)
NETBOX_PREFIX_RULE = "isCIDR(self) && cidr(self).masked() == cidr(self)"
NETBOX_RANGE_RULE = (
    "self.split('-').size() == 2 && isIP(self.split('-')[0]) && isIP(self.split('-')[1])"
    " && ip(self.split('-')[0]).family() == ip(self.split('-')[1]).family()"
)
NETBOX_SOURCE_RULE = "has(self.prefix) != has(self.ipRange)"
NETBOX_GATEWAY_RULE = (
    "!has(self.gateway) || !has(self.source.prefix) || !isIP(self.gateway) || !isCIDR(self.source.prefix)"
    " || (ip(self.gateway).family() == cidr(self.source.prefix).ip().family()"
    " && cidr(self.source.prefix).containsIP(self.gateway))"
)
MSG_NETBOX_SOURCE = "source must name exactly one of prefix (a CIDR) or ipRange (first-last)"


def _schema() -> dict[str, Any]:
    server = {
        "type": "object",
        "description": "The NetBox server: its URL, the CA that signs its certificate, and where its API token is.",
        "required": ["url", "tokenSecretRef"],
        "properties": {
            "url": string(
                "Base URL of NetBox (http:// or https://host[:port][/path]), without /api; no user or password.",
                netbox_pool.MAX_URL_LEN,
                minLength=1,
                **{"x-kubernetes-validations": [
                    rule(NETBOX_URL_RULE, "server.url must be an http:// or https:// URL naming a host, "
                                           "without query or fragment", "self"),
                    {"rule": NETBOX_URL_USERINFO_RULE,
                     "message": "server.url must not carry a user or password; the token belongs in the Secret "
                                "of server.tokenSecretRef"},
                ]},
            ),
            "caBundle": string(
                "PEM certificates to trust for an https:// URL (default: the system's trust store).",
                netbox_pool.MAX_CA_BUNDLE_LEN,
                **{"x-kubernetes-validations": [
                    rule(NETBOX_CA_BUNDLE_RULE, "server.caBundle must hold PEM certificates "
                                                 "(-----BEGIN CERTIFICATE----- ... -----END CERTIFICATE-----)"),
                ]},
            ),
            "tokenSecretRef": {
                "type": "object",
                "description": "The Secret, in the pool's namespace, holding the NetBox API token.",
                "required": ["name"],
                "properties": {
                    "name": string("Name of the Secret.", MAX_NAME_LEN, minLength=1,
                                    pattern=netbox_pool.DNS_SUBDOMAIN.pattern),
                    "key": string("Key of the token in the Secret's data.", netbox_pool.MAX_SECRET_KEY_LEN,
                                   minLength=1, pattern=netbox_pool.SECRET_KEY.pattern,
                                   default=netbox_pool.DEFAULT_TOKEN_KEY),
                },
            },
        },
    }
    source = {
        "type": "object",
        "description": "Where addresses come from: exactly one existing NetBox prefix or IP range, in a VRF "
                       "if named (else NetBox's global table).",
        "properties": {
            "prefix": string(
                "A NetBox prefix, as a network CIDR (192.0.2.0/24).", MAX_CIDR_LEN,
                **{"x-kubernetes-validations": [
                    rule(NETBOX_PREFIX_RULE, "source.prefix must be a network CIDR without host bits "
                                              "(192.0.2.0/24)", "self")]},
            ),
            "ipRange": string(
                "A NetBox IP range, as first-last (192.0.2.10-192.0.2.20).", MAX_IP_RANGE_LEN,
                **{"x-kubernetes-validations": [
                    rule(NETBOX_RANGE_RULE, "source.ipRange must be two addresses of one family, first-last "
                                             "(192.0.2.10-192.0.2.20)", "self")]},
            ),
            "vrf": string("Name or route distinguisher of the NetBox VRF of the prefix or range.",
                           netbox_pool.MAX_VRF_LEN, minLength=1),
        },
        "x-kubernetes-validations": [
            {"rule": NETBOX_SOURCE_RULE, "message": MSG_NETBOX_SOURCE,
             "messageExpression": f"'{MSG_NETBOX_SOURCE}, got ' + "
                                  "(has(self.prefix) ? 'prefix ' + self.prefix + ' and ipRange ' + self.ipRange"
                                  " : 'neither')"},
        ],
    }
    spec = {
        "type": "object",
        "description": "NetBoxIPPoolSpec: the NetBox server and the prefix or range addresses are taken from.",
        "required": ["server", "source"],
        "properties": {
            "server": server,
            "source": source,
            "prefix": prefix("Prefix length handed out when NetBox holds the address with a host mask (/32, /128)."),
            "gateway": ip("Gateway handed out with every address (NetBox keeps none).", "gateway"),
            "dnsServers": dns_servers(),
        },
        "x-kubernetes-validations": [
            {"rule": NETBOX_GATEWAY_RULE, "message": "gateway must be inside source.prefix",
             "messageExpression": "'gateway ' + self.gateway + ' must be inside source.prefix ' + self.source.prefix",
             "fieldPath": ".gateway"},
        ],
    }
    count = lambda what: string(  # noqa: E731
        f"{what}, as NetBox counts (a decimal integer).", MAX_COUNT_DIGITS, pattern=COUNT_PATTERN)
    status = {
        "type": "object",
        "description": "NetBoxIPPoolStatus: whether NetBox serves the pool, and NetBox's counts.",
        "properties": {
            "conditions": conditions("Ready: NetBox answers, accepts the token and holds the prefix or range "
                                      "(reasons NetBoxUnreachable, TokenRefused, PrefixNotFound, ...)."),
            "observedGeneration": {"type": "integer", "format": "int64", "minimum": 0,
                                   "description": "The .metadata.generation the status was computed for."},
            "size": count("Addresses NetBox can hand out from the prefix or range"),
            "used": count("IP address objects NetBox holds in the prefix or range (anyone's)"),
            "free": count("Addresses still available"),
            "lastChecked": string("When NetBox was last asked for the counts.", MAX_TIMESTAMP_LEN,
                                   format="date-time"),
        },
    }
    return root_schema("NetBoxIPPool hands out addresses that a NetBox server allocates from one of its "
                        "prefixes or IP ranges.", spec, status)


def netbox_pool_crd() -> dict[str, Any]:
    ready = '.status.conditions[?(@.type=="Ready")]'
    return crd(
        kind=netbox_pool.KIND,
        plural=netbox_pool.PLURAL,
        short_names=["nbipp"],
        schema=_schema(),
        status_subresource=True,
        extra_labels={MOVE_HIERARCHY_LABEL: ""},
        group=netbox_pool.GROUP,
        columns=[
            {"name": "Prefix", "type": "string", "jsonPath": ".spec.source.prefix",
             "description": "NetBox prefix the addresses come from"},
            {"name": "Range", "type": "string", "jsonPath": ".spec.source.ipRange",
             "description": "NetBox IP range the addresses come from"},
            {"name": "Ready", "type": "string", "jsonPath": f"{ready}.status",
             "description": "Whether NetBox serves the pool"},
            {"name": "Reason", "type": "string", "jsonPath": f"{ready}.reason",
             "description": "Why NetBox does not serve the pool"},
            {"name": "Free", "type": "string", "jsonPath": ".status.free",
             "description": "Addresses NetBox still has free in the prefix or range"},
            age_column(netbox_pool.KIND),
        ],
    )

