"""A NetBoxIPPool as the controller reads it: which NetBox, which token, where addresses come from.

Pure: no I/O. :func:`read_pool` turns a ``netbox.metal3-ipam.io/v1alpha1``
NetBoxIPPool object into a :class:`NetBoxPool`, or into problems naming the
field and its value (the CRD's schema refuses most of them before they are
stored; these are the rules it cannot state, and the same rules for input that
never met the API server). :func:`handed_out` says what a claim is given for
an address NetBox made.

The token is never in the spec: ``spec.server.tokenSecretRef`` names a
Secret in the pool's namespace and the key in it (``token`` by default).
A URL carrying a user or password is refused for the same reason.
"""

from __future__ import annotations

import base64
import binascii
import ipaddress
import re
from dataclasses import dataclass
from typing import Any, Mapping
from urllib.parse import urlsplit

from metal3_ipam.core.addresses import AddressError, parse_ip
from metal3_ipam.poolkinds.netbox.source import ParentSpec, Reason, parse_parent
from metal3_ipam.core.poolkind import annotated_key
from metal3_ipam.core.problems import ObjectId, Problem

GROUP = "netbox.metal3-ipam.io"
VERSION = "v1alpha1"
API_VERSION = f"{GROUP}/{VERSION}"
KIND = "NetBoxIPPool"
NETBOX_IP_POOL = (GROUP, KIND)
PLURAL = "netboxippools"
#: The finalizer the Secret of a pool's token carries while addresses its claims left for another cluster to answer
#: (or may leave: marked by one) are not judged (``controller.outside``).
SECRET_FINALIZER = f"{GROUP}/addresses-left"

#: On a claim: the key its NetBox address is found by. Written before NetBox is asked;
#: copied by ``clusterctl move`` with the claim (its uid is not), absent on a new claim
#: that reuses the name.
KEY_ANNOTATION = f"{GROUP}/allocation-key"


DEFAULT_TOKEN_KEY = "token"
MAX_URL_LEN = 2048
MAX_CA_BUNDLE_LEN = 65536
MAX_VRF_LEN = 100  # NetBox's VRF name and route distinguisher are at most 100 and 21 characters
MAX_SECRET_KEY_LEN = 253

DNS_SUBDOMAIN = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$")
SECRET_KEY = re.compile(r"^[-._a-zA-Z0-9]+$")
PEM_CERTIFICATE = re.compile(r"-----BEGIN CERTIFICATE-----(.*?)-----END CERTIFICATE-----", re.DOTALL)

IP = ipaddress.IPv4Address | ipaddress.IPv6Address


@dataclass(frozen=True)
class SecretKeyRef:
    """A key of a Secret in the pool's namespace."""

    name: str
    key: str = DEFAULT_TOKEN_KEY


@dataclass(frozen=True)
class Server:
    """A NetBox server as the controller speaks to it: requests are bounded per server."""

    url: str
    ca_bundle: str | None = None


@dataclass(frozen=True)
class NetBoxPool:
    namespace: str
    name: str
    generation: int
    server: Server
    token: SecretKeyRef
    parent: ParentSpec
    prefix: int | None = None
    gateway: IP | None = None
    dns_servers: tuple[IP, ...] = ()

    @property
    def id(self) -> ObjectId:
        return ObjectId(KIND, self.namespace, self.name)

    @property
    def family(self) -> int:
        return self.parent.start.version


@dataclass(frozen=True)
class HandedOut:
    """What a claim is given: the address, its prefix length, gateway and DNS servers."""

    address: IP
    prefix: int
    gateway: IP | None
    dns_servers: tuple[IP, ...]


def _ip(value: Any) -> IP | None:
    """An address as inet_pton reads it (``core.addresses``), not IPv4-mapped IPv6; else None."""
    try:
        ip = parse_ip(value)
    except AddressError:
        return None
    if ip.version == 6 and ip.is_ipv4_mapped():
        return None
    return ipaddress.IPv4Address(int(ip)) if ip.version == 4 else ipaddress.IPv6Address(int(ip))


def check_url(url: Any) -> str | None:
    """What is wrong with a NetBox URL, or None."""
    if not isinstance(url, str) or not url:
        return "must be the NetBox URL, http(s)://host[:port][/path]"
    if len(url) > MAX_URL_LEN:
        return f"must be at most {MAX_URL_LEN} characters"
    try:
        parts = urlsplit(url)
        parts.port  # noqa: B018 - raises on a bad port
    except ValueError as exc:
        return f"is not a URL ({exc})"
    if parts.scheme not in ("http", "https") or not parts.hostname:
        return "must be an http:// or https:// URL naming a host"
    if parts.username is not None or parts.password is not None:
        return "must not carry a user or password; the token belongs in the Secret of tokenSecretRef"
    if parts.query or parts.fragment:
        return "must not carry a query or fragment"
    return None


def check_ca_bundle(bundle: Any) -> str | None:
    """What is wrong with a PEM CA bundle, or None: at least one certificate, every one base64."""
    if not isinstance(bundle, str):
        return "must be PEM text"
    blocks = PEM_CERTIFICATE.findall(bundle)
    if not blocks:
        return "must hold at least one PEM certificate (-----BEGIN CERTIFICATE----- ...)"
    for block in blocks:
        try:
            base64.b64decode("".join(block.split()), validate=True)
        except (binascii.Error, ValueError):
            return "holds a certificate that is not base64"
    return None


def _text(spec: Mapping[str, Any], name: str, path: str, problems: list[Problem]) -> str | None:
    value = spec.get(name)
    if value is None:
        return None
    if not isinstance(value, str):
        problems.append(Problem(f"{path}.{name}", value, "must be a string"))
        return None
    return value


def _mapping(value: Any, path: str, problems: list[Problem]) -> Mapping[str, Any]:
    if value is None:
        return {}
    if not isinstance(value, Mapping):
        problems.append(Problem(path, value, "must be an object"))
        return {}
    return value


def read_pool(obj: Mapping[str, Any]) -> tuple[NetBoxPool | None, list[Problem]]:
    """The pool, or None and what is wrong (each problem naming the object, field and value)."""
    metadata = obj.get("metadata")
    metadata = metadata if isinstance(metadata, Mapping) else {}
    namespace, name = metadata.get("namespace"), metadata.get("name")
    oid = ObjectId(KIND, namespace if isinstance(namespace, str) else "", name if isinstance(name, str) else "")
    problems: list[Problem] = []
    spec = _mapping(obj.get("spec"), "spec", problems)
    server_spec = _mapping(spec.get("server"), "spec.server", problems)
    source = _mapping(spec.get("source"), "spec.source", problems)

    url = server_spec.get("url")
    wrong = check_url(url)
    if wrong:
        problems.append(Problem("spec.server.url", url, wrong))
    ca_bundle = _text(server_spec, "caBundle", "spec.server", problems)
    if ca_bundle is not None:
        wrong = check_ca_bundle(ca_bundle)
        if wrong:
            problems.append(Problem("spec.server.caBundle", ca_bundle[:80], wrong))
        elif isinstance(url, str) and url.startswith("http://"):
            problems.append(Problem("spec.server.caBundle", url, "is given but spec.server.url is not https://"))

    ref = _mapping(server_spec.get("tokenSecretRef"), "spec.server.tokenSecretRef", problems)
    secret = ref.get("name")
    if not isinstance(secret, str) or not secret or len(secret) > 253 or not DNS_SUBDOMAIN.match(secret):
        problems.append(Problem("spec.server.tokenSecretRef.name", secret,
                                "must name a Secret in the pool's namespace (a DNS-1123 subdomain)"))
    key = ref.get("key", DEFAULT_TOKEN_KEY)
    if not isinstance(key, str) or not key or len(key) > MAX_SECRET_KEY_LEN or not SECRET_KEY.match(key):
        problems.append(Problem("spec.server.tokenSecretRef.key", key,
                                "must be a key of the Secret ([-._a-zA-Z0-9], at most 253 characters)"))

    vrf = _text(source, "vrf", "spec.source", problems)
    if vrf is not None and (not vrf.strip() or vrf != vrf.strip() or len(vrf) > MAX_VRF_LEN):
        problems.append(Problem("spec.source.vrf", vrf, f"must be a VRF's name or route distinguisher "
                                                         f"(1 to {MAX_VRF_LEN} characters, no surrounding spaces)"))
        vrf = None
    prefix_text = _text(source, "prefix", "spec.source", problems)
    range_text = _text(source, "ipRange", "spec.source", problems)
    parent: ParentSpec | None = None
    if (prefix_text is None) == (range_text is None):
        problems.append(Problem("spec.source", dict(source), "must name exactly one of prefix (a CIDR) "
                                                             "or ipRange (first-last)"))
    elif prefix_text is not None:
        if "/" not in prefix_text:
            problems.append(Problem("spec.source.prefix", prefix_text, "must be a network CIDR (192.0.2.0/24); "
                                                                       "an IP range goes in ipRange"))
        else:
            parent = _parent(prefix_text, vrf, "spec.source.prefix", problems)
    else:
        assert range_text is not None
        if "-" not in range_text:
            problems.append(Problem("spec.source.ipRange", range_text,
                                    "must be first-last; a CIDR goes in prefix"))
        else:
            parent = _parent(range_text, vrf, "spec.source.ipRange", problems)
    if parent is not None and any(_ip(str(a)) is None for a in (parent.start, parent.end)):
        problems.append(Problem(f"spec.source.{'prefix' if parent.kind == 'prefix' else 'ipRange'}", parent.text,
                                "must not be IPv4-mapped IPv6"))
        parent = None

    prefix = spec.get("prefix")
    if prefix is not None:
        top = 32 if parent is not None and parent.start.version == 4 else 128
        if not isinstance(prefix, int) or isinstance(prefix, bool) or not 0 <= prefix <= top:
            problems.append(Problem("spec.prefix", prefix, f"must be a prefix length from 0 to {top}"))
            prefix = None
        elif parent is not None and parent.kind == "ip-range" and not _one_network(parent, prefix):
            problems.append(Problem("spec.prefix", prefix, f"a /{prefix} network does not hold the whole "
                                                           f"ipRange {parent.text}"))
    gateway_text = spec.get("gateway")
    gateway = None
    if gateway_text is not None:
        gateway = _ip(gateway_text)
        if gateway is None:
            problems.append(Problem("spec.gateway", gateway_text, "must be an IP address"))
        elif parent is not None and gateway.version != parent.start.version:
            problems.append(Problem("spec.gateway", gateway_text, f"is IPv{gateway.version} but the source "
                                                                  f"{parent.text} is IPv{parent.start.version}"))
            gateway = None
        elif parent is not None and parent.network is not None and gateway not in parent.network:
            problems.append(Problem("spec.gateway", gateway_text, f"is outside spec.source.prefix {parent.text}"))
    dns: list[IP] = []
    raw_dns = spec.get("dnsServers")
    if raw_dns is not None:
        if not isinstance(raw_dns, list):
            problems.append(Problem("spec.dnsServers", raw_dns, "must be a list of IP addresses"))
        else:
            for i, item in enumerate(raw_dns):
                found = _ip(item)
                if found is None:
                    problems.append(Problem(f"spec.dnsServers[{i}]", item, "must be an IP address"))
                else:
                    dns.append(found)
    problems = [Problem(p.field, p.value, p.message, p.warning, oid) for p in problems]
    if problems:
        return None, problems
    assert parent is not None and isinstance(url, str) and isinstance(secret, str)
    generation = metadata.get("generation")
    return NetBoxPool(
        namespace=oid.namespace, name=oid.name,
        generation=generation if isinstance(generation, int) and not isinstance(generation, bool) else 0,
        server=Server(url.rstrip("/"), ca_bundle), token=SecretKeyRef(secret, key),
        parent=parent, prefix=prefix, gateway=gateway, dns_servers=tuple(dns)), []


def claim_key(claim: Mapping[str, Any]) -> tuple[str | None, Problem | None]:
    """The allocation key a claim carries (None: none yet, give it one), or the problem with the one it carries."""
    return annotated_key(claim, KEY_ANNOTATION, "NetBox is asked, and finds the claim's NetBox address")


def _parent(text: str, vrf: str | None, path: str, problems: list[Problem]) -> ParentSpec | None:
    try:
        return parse_parent(text, vrf)
    except ValueError as exc:
        problems.append(Problem(path, text, str(exc).replace(repr(text) + ": ", "").replace(repr(text) + " ", "")))
        return None


def _one_network(parent: ParentSpec, prefix: int) -> bool:
    network = ipaddress.ip_network(f"{parent.start}/{prefix}", strict=False)
    return parent.end in network


def handed_out(pool: NetBoxPool, address: str) -> HandedOut:
    """What a claim of ``pool`` is given for the address NetBox holds (``192.0.2.7/24``).

    The prefix length is NetBox's (the mask it holds the address with), unless
    that says nothing (a host mask, /32 or /128) and the pool names one; the
    gateway and DNS servers are the pool's (NetBox keeps none with an address).
    """
    interface = ipaddress.ip_interface(address)
    length = interface.network.prefixlen
    if length == interface.max_prefixlen and pool.prefix is not None:
        length = pool.prefix
    return HandedOut(interface.ip, length, pool.gateway, pool.dns_servers)


# --------------------------------------------------------------------------- status

#: Reasons of a pool's (and a claim's) Ready condition, by the client's refusal reason.
SERVING = "Serving"
TOKEN_MISSING = "TokenMissing"
POOL_REASONS = {
    Reason.UNREACHABLE: "NetBoxUnreachable",
    Reason.TIMEOUT: "NetBoxTimeout",
    Reason.TOKEN_REFUSED: "TokenRefused",
    Reason.NOT_FOUND: "PrefixNotFound",
    Reason.FULL: "PoolExhausted",
    Reason.KEY_CONFLICT: "KeyConflict",
    Reason.MISCONFIGURED: "NetBoxMisconfigured",
    Reason.INVALID: "NetBoxRefusedRequest",
    Reason.SERVER_ERROR: "NetBoxServerError",
    Reason.HOMED_ELSEWHERE: "AddressHomedElsewhere",
}
#: Refusals of the server itself rather than of one request: they put off all of the server's asks.
SERVER_DOWN = frozenset({Reason.UNREACHABLE, Reason.TIMEOUT, Reason.SERVER_ERROR})


def condition_reason(reason: Reason | str, parent: ParentSpec | None = None) -> str:
    """The condition reason for a refusal: ``PrefixNotFound`` (``IPRangeNotFound`` for a range), ``TokenRefused``, …"""
    try:
        reason = Reason(reason)
    except ValueError:
        return str(reason)
    if reason is Reason.NOT_FOUND and parent is not None and parent.kind == "ip-range":
        return "IPRangeNotFound"
    return POOL_REASONS[reason]


@dataclass(frozen=True)
class Survey:
    """What NetBox said of a pool when last asked: its counts, or why it could not say."""

    size: int | None = None
    used: int | None = None
    reason: str | None = None  # a condition reason when NetBox did not serve the pool
    message: str = ""


def pool_status(pool: NetBoxPool, survey: Survey, *, now: str, previous: Mapping[str, Any] | None = None
                ) -> dict[str, Any]:
    """The pool's ``status``: Ready (with the reason when not), ``observedGeneration`` and NetBox's counts.

    ``now`` is an RFC 3339 time; ``previous`` the status as stored, whose Ready
    condition keeps its ``lastTransitionTime`` while its status is unchanged.
    """
    ready = survey.reason is None
    if ready:
        message = (f"NetBox at {pool.server.url} serves {pool.parent}: {survey.size} addresses, "
                   f"{survey.used} held")
    else:
        message = survey.message or survey.reason or ""
    condition = {"type": "Ready", "status": "True" if ready else "False",
                 "reason": SERVING if ready else survey.reason, "message": message[:32768],
                 "observedGeneration": pool.generation, "lastTransitionTime": now}
    for old in (previous or {}).get("conditions") or ():
        if isinstance(old, Mapping) and old.get("type") == "Ready" and old.get("status") == condition["status"]:
            condition["lastTransitionTime"] = old.get("lastTransitionTime") or now
    status: dict[str, Any] = {"conditions": [condition], "observedGeneration": pool.generation, "lastChecked": now}
    if survey.size is not None and survey.used is not None:
        status.update(size=str(survey.size), used=str(survey.used), free=str(max(survey.size - survey.used, 0)))
    else:
        for key in ("size", "used", "free"):
            if previous and key in previous:
                status[key] = previous[key]  # the last counts NetBox gave, while it cannot say
    return status
