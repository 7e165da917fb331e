"""Reading addresses, ranges and networks from user text, strictly.

netaddr is lenient by default (``"10"`` is an address, ``"010.0.0.1"`` octal);
a pool definition is not the place for surprises, so only the forms that
inet_pton accepts are taken.
"""

from __future__ import annotations

import netaddr

FAMILY_BITS = {4: 32, 6: 128}


class AddressError(ValueError):
    """Text that is not the address, range or network it should be."""


def parse_ip(text: object) -> netaddr.IPAddress:
    if not isinstance(text, str) or not text or text != text.strip():
        raise AddressError("is not an IP address")
    try:
        return netaddr.IPAddress(text, flags=netaddr.INET_PTON)
    except (netaddr.AddrFormatError, ValueError, TypeError):
        raise AddressError("is not an IP address") from None


def parse_cidr(text: object) -> netaddr.IPNetwork:
    """A network in ``address/length`` form; host bits may be set (the network is meant)."""
    if not isinstance(text, str) or text.count("/") != 1:
        raise AddressError("is not a CIDR (address/prefix-length)")
    address, _, length = text.partition("/")
    ip = parse_ip(address)
    if not length.isdigit() or len(length) > 3 or int(length) > FAMILY_BITS[ip.version]:
        raise AddressError(f"has no valid prefix length for IPv{ip.version}")
    return netaddr.IPNetwork(f"{ip}/{int(length)}").cidr


def parse_span(text: object) -> tuple[int, int, int]:
    """An address, ``a-b`` range or CIDR as (version, first, last) integers."""
    if isinstance(text, str) and "/" in text:
        net = parse_cidr(text)
        return net.version, net.first, net.last
    if isinstance(text, str) and "-" in text:
        left, _, right = text.partition("-")
        a, b = parse_ip(left), parse_ip(right)
        if a.version != b.version:
            raise AddressError("mixes IPv4 and IPv6")
        if a > b:
            raise AddressError("starts after it ends")
        return a.version, int(a), int(b)
    try:
        ip = parse_ip(text)
    except AddressError:
        raise AddressError("is not an IP address, an 'a-b' range or a CIDR") from None
    return ip.version, int(ip), int(ip)


def network_of(value: int, version: int, prefix: int) -> tuple[int, int]:
    """First and last address of the network of ``prefix`` bits holding ``value``."""
    host_bits = FAMILY_BITS[version] - prefix
    first = (value >> host_bits) << host_bits
    return first, first + (1 << host_bits) - 1


def host_range(first: int, last: int, version: int, prefix: int) -> tuple[int, int]:
    """The usable host addresses of a network.

    The network address itself is skipped; for IPv4 up to /30 so is the
    broadcast address. Point-to-point networks (IPv4 /31 and /32, RFC 3021;
    IPv6 /127 and /128, RFC 6164) use every address they hold.
    """
    if prefix >= FAMILY_BITS[version] - 1:
        return first, last
    if version == 4:
        return first + 1, last - 1
    return first + 1, last


def ip_from_int(value: int, version: int) -> netaddr.IPAddress:
    return netaddr.IPAddress(value, version)
