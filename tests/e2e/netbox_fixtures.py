"""Helpers of the tests against the real NetBox (the session's ``netbox`` fixture): prefixes of their own, owners."""

from __future__ import annotations

import ipaddress
import itertools
import uuid

from metal3_ipam.poolkinds.netbox.source import KEY_FIELD

NETS = itertools.count(1)


def fresh(length: int = 29) -> ipaddress.IPv4Network:
    """A prefix no other test of this session uses (inside 10.0.0.0/8)."""
    n = next(NETS)
    return ipaddress.ip_network(f"10.{n // 256}.{n % 256}.0/{length}")


def seeded(netbox, length: int = 29, **fields) -> ipaddress.IPv4Network:
    """A fresh prefix, created in NetBox's global table."""
    net = fresh(length)
    netbox.create_prefix(str(net), **fields)
    return net


def owner() -> str:
    return f"t{uuid.uuid4().hex[:8]}"


def holding(netbox, value: str) -> list[dict]:
    """NetBox's addresses whose key field is exactly ``value`` (read as the administrator)."""
    found = netbox.api("GET", f"ipam/ip-addresses/?cf_{KEY_FIELD}={value}&limit=1000")["results"]
    return [a for a in found if a["custom_fields"].get(KEY_FIELD) == value]


def addresses_in(netbox, net) -> dict[str, dict]:
    found = netbox.api("GET", f"ipam/ip-addresses/?parent={net}&vrf_id=null&limit=1000")["results"]
    return {a["address"].split("/")[0]: a for a in found}


