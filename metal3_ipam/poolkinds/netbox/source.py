"""NetBox as a source of addresses: what is asked of it, and what its answers mean.

Pure: no I/O. The asynchronous client (``client``) sends
the requests; this module names the parent an address comes from, the key an
address is found again by, and turns NetBox's answers into the reasons a claim
shows.

Facts about NetBox 4.7 this rests on (measured against a real NetBox in
``tests/e2e/poolkinds/netbox/test_netbox_client.py``):

* ``POST /api/ipam/prefixes/{id}/available-ips/`` (and ``ip-ranges``) creates
  the lowest address that no IPAddress object of the same VRF holds, under a
  server-wide PostgreSQL advisory lock. A prefix's network and broadcast
  addresses (IPv4, shorter than /31, unless the prefix is a pool) and the
  subnet-router anycast address (IPv6) are never handed out; addresses inside
  an IP range marked populated are not either. NetBox has no notion of a
  gateway: an address is reserved only when an IPAddress object holds it
  (any status, ``reserved`` included).
* A custom field created with ``unique: true`` is checked by the model's
  validation (a query, not a database constraint); the check runs inside the
  advisory lock of ``available-ips``, so two allocations carrying one key
  never both succeed: the second is answered 400.
* A custom field's filter (``cf_<name>=``) matches loosely (``icontains``)
  unless the field's ``filter_logic`` is ``exact``; lookups here ask
  ``__ie`` (case-insensitive equality) and compare exactly afterwards.
"""

from __future__ import annotations

import enum
import ipaddress
from dataclasses import dataclass
from typing import Any, Mapping

#: The NetBox custom field (on ipam.ipaddress, text, unique) that carries an address's key.
KEY_FIELD = "metal3_ipam_key"

#: Separates the owner marker from the key in the custom field's value.
OWNER_SEPARATOR = "/"


class Reason(str, enum.Enum):
    """Why NetBox did not give what was asked; a claim's condition reason."""

    UNREACHABLE = "NetBoxUnreachable"
    TIMEOUT = "NetBoxTimeout"
    TOKEN_REFUSED = "NetBoxTokenRefused"
    NOT_FOUND = "NetBoxNotFound"
    FULL = "NetBoxFull"
    KEY_CONFLICT = "NetBoxKeyConflict"
    MISCONFIGURED = "NetBoxMisconfigured"
    INVALID = "NetBoxInvalidRequest"
    SERVER_ERROR = "NetBoxServerError"
    HOMED_ELSEWHERE = "NetBoxAddressHomedElsewhere"  # the key's address is a claim's of another cluster


@dataclass(frozen=True)
class Refusal:
    """A classified NetBox answer: the reason, a message naming what was asked, the HTTP status if any."""

    reason: Reason
    message: str
    status: int | None = None


# --------------------------------------------------------------------------- parents


@dataclass(frozen=True)
class ParentSpec:
    """Where addresses come from: a prefix (``192.0.2.0/24``) or an IP range (``192.0.2.10-192.0.2.20``), in a VRF."""

    kind: str  # "prefix" or "ip-range"
    start: ipaddress.IPv4Address | ipaddress.IPv6Address
    end: ipaddress.IPv4Address | ipaddress.IPv6Address
    network: ipaddress.IPv4Network | ipaddress.IPv6Network | None = None
    vrf: str | None = None

    @property
    def text(self) -> str:
        return str(self.network) if self.kind == "prefix" else f"{self.start}-{self.end}"

    def __str__(self) -> str:
        return self.text + (f" in VRF {self.vrf}" if self.vrf else "")


def parse_parent(spec: str, vrf: str | None = None) -> ParentSpec:
    """``a.b.c.d/n`` is a prefix, ``first-last`` an IP range; anything else is a ValueError naming the value."""
    text = spec.strip() if isinstance(spec, str) else spec
    if not isinstance(text, str) or not text:
        raise ValueError(f"{spec!r} is neither a prefix (192.0.2.0/24) nor an IP range (192.0.2.10-192.0.2.20)")
    if vrf is not None and (not isinstance(vrf, str) or not vrf.strip()):
        raise ValueError(f"VRF {vrf!r} must be a non-empty name or route distinguisher")
    if "-" in text:
        first, _, last = text.partition("-")
        try:
            start, end = ipaddress.ip_address(first.strip()), ipaddress.ip_address(last.strip())
        except ValueError:
            raise ValueError(f"{spec!r}: an IP range is two addresses, first-last") from None
        if start.version != end.version:
            raise ValueError(f"{spec!r}: the two ends of an IP range are of different families")
        if end < start:
            raise ValueError(f"{spec!r}: the range ends before it starts")
        return ParentSpec("ip-range", start, end, None, vrf)
    try:
        network = ipaddress.ip_network(text, strict=True)
    except ValueError as exc:
        raise ValueError(f"{spec!r} is not a prefix: {exc}") from None
    return ParentSpec("prefix", network.network_address, network.broadcast_address, network, vrf)


def usable_size(network: ipaddress.IPv4Network | ipaddress.IPv6Network, *, is_pool: bool = False) -> int:
    """How many addresses of a NetBox prefix ``available-ips`` can hand out (before any is held).

    NetBox reserves an IPv4 prefix's network and broadcast addresses and an
    IPv6 prefix's subnet-router anycast address, unless the prefix is a pool or
    a /31, /32, /127, /128.
    """
    size = network.num_addresses
    if is_pool or network.prefixlen >= network.max_prefixlen - 1:
        return size
    return size - 2 if network.version == 4 else size - 1


# --------------------------------------------------------------------------- keys


def check_owner(owner: str) -> str:
    if not isinstance(owner, str) or not owner or OWNER_SEPARATOR in owner or owner != owner.strip():
        raise ValueError(f"owner {owner!r} must be a non-empty string without {OWNER_SEPARATOR!r} or surrounding spaces")
    return owner


def owned_key(owner: str, key: str) -> str:
    """The custom field's value for ``key`` allocated by ``owner``: ``<owner>/<key>``."""
    check_owner(owner)
    if not isinstance(key, str) or not key or key != key.strip():
        raise ValueError(f"key {key!r} must be a non-empty string without surrounding spaces")
    return f"{owner}{OWNER_SEPARATOR}{key}"


def key_of(owner: str, value: object) -> str | None:
    """The key in a custom field's value when ``owner`` wrote it, else None (someone else's, or none)."""
    prefix = check_owner(owner) + OWNER_SEPARATOR
    if isinstance(value, str) and value.startswith(prefix) and len(value) > len(prefix):
        return value[len(prefix):]
    return None


def check_key_field(definition: Mapping[str, Any] | None, name: str = KEY_FIELD) -> list[str]:
    """What is wrong with the custom field ``name`` as NetBox describes it (empty: usable).

    It must exist, be text, apply to ipam.ipaddress and be unique; without
    uniqueness a retry or a second replica could make a second address for one key.
    """
    if not definition:
        return [f"custom field {name!r} does not exist; create it on ipam.ipaddress, type text, unique"]
    problems = []
    kind = definition.get("type")
    if isinstance(kind, Mapping):
        kind = kind.get("value")
    if kind != "text":
        problems.append(f"custom field {name!r} is of type {kind!r}, not 'text'")
    if "ipam.ipaddress" not in (definition.get("object_types") or ()):
        problems.append(f"custom field {name!r} does not apply to ipam.ipaddress "
                        f"(object_types {definition.get('object_types')!r})")
    if not definition.get("unique"):
        problems.append(f"custom field {name!r} is not unique; set unique: true")
    logic = definition.get("filter_logic")
    if isinstance(logic, Mapping):
        logic = logic.get("value")
    if logic == "disabled":
        problems.append(f"custom field {name!r} cannot be filtered on (filter_logic 'disabled'); set it to 'exact'")
    return problems


# --------------------------------------------------------------------------- answers


def _text(body: object) -> str:
    if isinstance(body, Mapping):
        detail = body.get("detail")
        if isinstance(detail, str):
            return detail
    if isinstance(body, list) and len(body) == 1:
        return _text(body[0])
    text = str(body)
    return text if len(text) <= 300 else text[:297] + "..."


def _strings(body: object):
    if isinstance(body, str):
        yield body
    elif isinstance(body, Mapping):
        for value in body.values():
            yield from _strings(value)
    elif isinstance(body, (list, tuple)):
        for value in body:
            yield from _strings(value)


def is_key_conflict(body: object, field: str = KEY_FIELD) -> bool:
    """A 400 answer saying the unique custom field ``field`` already has this value elsewhere."""
    needle = f"custom field '{field}' must have a unique value"
    return any(needle in s.lower() for s in _strings(body))


def classify(status: int, body: object, what: str, *, field: str = KEY_FIELD) -> Refusal:
    """The reason for an HTTP answer of NetBox that is not a success, ``what`` naming the request."""
    detail = _text(body)
    if status in (401, 403):
        return Refusal(Reason.TOKEN_REFUSED, f"{what}: the token was refused ({status}: {detail})", status)
    if status == 404:
        return Refusal(Reason.NOT_FOUND, f"{what}: not found", status)
    if status == 409:
        return Refusal(Reason.FULL, f"{what}: no free address ({detail})", status)
    if status == 400 and is_key_conflict(body, field):
        return Refusal(Reason.KEY_CONFLICT, f"{what}: another address carries this key ({detail})", status)
    if status == 429 or status >= 500:
        return Refusal(Reason.SERVER_ERROR, f"{what}: NetBox answered {status} ({detail})", status)
    return Refusal(Reason.INVALID, f"{what}: NetBox refused the request ({status}: {detail})", status)
