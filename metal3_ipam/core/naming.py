"""Names of IPAddress objects, and the DNS-1123 rules they must obey.

The name ``<namePrefix>-<ip>`` is what makes an address unique: the API server
refuses a second object of the same name in a namespace, so the name is the
lock that keeps one IP from being handed out twice.
"""

from __future__ import annotations

import re

import netaddr

MAX_NAME_LENGTH = 253
# The longest text form of an address in a name: a full IPv6 address.
LONGEST_IP_TEXT = 39
MAX_PREFIX_LENGTH = MAX_NAME_LENGTH - 1 - LONGEST_IP_TEXT

_LABEL = r"[a-z0-9]([-a-z0-9]*[a-z0-9])?"
_SUBDOMAIN = re.compile(rf"^{_LABEL}(\.{_LABEL})*$")


def ip_text(ip: netaddr.IPAddress) -> str:
    """The canonical text of an address: dotted quad for IPv4, RFC 5952 for IPv6.

    IPv6 is always written in hexadecimal groups. netaddr (like some other
    libraries) prints addresses of the old IPv4-compatible range in the
    deprecated ``::1.2.3.4`` form, which would give ``::102:304`` and
    ``::1:2:3:4`` the same IPAddress name.
    """
    if ip.version == 4:
        return str(ip)
    value = int(ip)
    groups = [(value >> (112 - 16 * i)) & 0xFFFF for i in range(8)]
    # The longest run of two or more zero groups becomes "::" (the first such run on a tie).
    best_start, best_len, start = -1, 1, None
    for i, group in enumerate(groups + [1]):
        if group == 0 and start is None:
            start = i
        elif group != 0 and start is not None:
            if i - start > best_len:
                best_start, best_len = start, i - start
            start = None
    hexes = [format(g, "x") for g in groups]
    if best_start < 0:
        return ":".join(hexes)
    return ":".join(hexes[:best_start]) + "::" + ":".join(hexes[best_start + best_len:])


def address_name(name_prefix: str, ip: netaddr.IPAddress | str) -> str:
    """``pool1`` and 192.168.0.13 give ``pool1-192-168-0-13``."""
    text = ip_text(netaddr.IPAddress(ip)) if isinstance(ip, str) else ip_text(ip)
    suffix = text.replace(".", "-").replace(":", "-")
    return f"{name_prefix}-{suffix}".rstrip("-")


def ip_of_name(name_prefix: str, name: str, version: int) -> netaddr.IPAddress | None:
    """The IP an IPAddress name ``<namePrefix>-<ip>`` stands for, or None when it is not such a name.

    The inverse of ``address_name``: only a name that ``address_name`` gives back
    exactly, for an IP of ``version``, is read.
    """
    if not isinstance(name, str) or not name.startswith(name_prefix + "-"):
        return None
    suffix = name[len(name_prefix) + 1:]
    if version == 4:
        candidates = [suffix.replace("-", ".")]
    else:
        text = suffix.replace("-", ":")
        candidates = [text, text + "::"]  # a trailing "::" lost its dashes to the name's rstrip
    for candidate in candidates:
        try:
            ip = netaddr.IPAddress(candidate, version)
        except (netaddr.AddrFormatError, ValueError, TypeError):
            continue
        if address_name(name_prefix, ip) == name:
            return ip
    return None


def is_dns1123_subdomain(name: str) -> bool:
    return len(name) <= MAX_NAME_LENGTH and bool(_SUBDOMAIN.fullmatch(name))  # "$" alone lets a final "\n" by


def name_prefix_problem(name_prefix: object) -> str | None:
    """Why ``name_prefix`` cannot start IPAddress names, or None when it can."""
    if not isinstance(name_prefix, str) or not name_prefix:
        return "must be a non-empty string"
    if len(name_prefix) > MAX_PREFIX_LENGTH:
        return (f"must be at most {MAX_PREFIX_LENGTH} characters so that "
                f"'<namePrefix>-<ip>' fits in {MAX_NAME_LENGTH}")
    if not is_dns1123_subdomain(name_prefix + "-0"):
        return ("must consist of lower case alphanumeric characters, '-' or '.', "
                "with each '.'-separated part starting and ending with an alphanumeric character")
    return None
