"""Names of IPAddress objects, and the DNS-1123 rules they must obey.

The name ``<namePrefix>-<ip>`` is what makes an address unique: the API server
refuses a second object of the same name in a namespace, so the name is the
lock that keeps one IP from being handed out twice.
"""

from __future__ import annotations

import hashlib
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


# -- the names of the locks of kinds whose pools have no namePrefix -----------------------------------------
#
# A lock is a Metal3 IPAddress ``<pool>.<address>.<tag>`` (a sub-prefix's ``<pool>.<base>.<length>.<tag>``):
# ``pool-a.10-0-0-5.ip``, ``pp.fd00-0-0-100-0-0-0-0.56.pp``. Why two different (kind, pool, address) never
# give one name, read from the right:
# - the last label is the tag, one per kind of pool (``PoolKind.lock_tag``: ``poolkind.register`` refuses one
#   another kind's tag, hashed or not, would meet), with ``h`` added when the pool part is hashed; it says how
#   many labels the address takes (two for a sub-prefix: base, then length);
# - the address label has no dot, and is one-to-one: IPv4 is its four decimal groups, IPv6 all eight of
#   its hexadecimal groups without leading zeros (no ``::``, so it never starts or ends with a dash), so
#   four groups or eight also tell the family; the length is its decimal number;
# - what is left before them is the pool part, dots and all: the pool's name itself, which is the pool
#   (one of a kind and name per namespace, or in the cluster for a global kind, whose tag is its own);
# - a name too long for that is cut and followed by 16 hexadecimal digits of the SHA-256 of the kind and
#   the full name: the tag says so, so a hashed pool part never meets an unhashed one (a pool could be
#   named like a hashed part), and two hashed ones meet only when a 64-bit hash of two different kinds
#   and names agrees and the first characters too (a SHA-256 collision, never seen).
# Every name of the scheme ends in a tag letter (``p``, ``x`` or ``h``); Metal3's ``<namePrefix>-<ip>``
# and the names an earlier version gave these locks (``<pool>-<ip>``, ``gip-<pool>-<ip>``,
# ``<pool>-<base>.<length>``) end in a digit of the address or the length: a lock left by that version,
# adopted as it is, never holds a name this scheme wants for another address (save those of the IPv6
# ``::``, which are the bare prefix: ``pfx`` + ``::`` is ``pfx``).
HASHED = "h"
_HASH_DIGITS = 16


def address_label(ip: netaddr.IPAddress) -> str:
    """An address as one DNS label: ``10-0-0-5``, ``fd00-0-0-100-0-0-0-0`` (every IPv6 group written)."""
    if ip.version == 4:
        return str(ip).replace(".", "-")
    value = int(ip)
    return "-".join(format((value >> (112 - 16 * i)) & 0xFFFF, "x") for i in range(8))


# The guard of an IP in a namespace (``<address>.nsip``, e.g. ``10-0-0-5.nsip``): a Metal3 IPAddress that a global
# pool's allocation to a claim of the namespace and a namespaced pool's allocation of an IP some global pool holds
# both create before their lock, so that the API server refuses the second of two allocations of one IP there,
# which no pass saw the other make (their locks have different names, in different namespaces). Two labels, the
# last ``nsip``: never a name of the lock scheme above (three labels at least, the last a tag) nor one an earlier
# version gave (ending in a digit of the address or the length), and IPv4 and IPv6 never meet (four groups or eight).
GUARD_TAG = "nsip"


def guard_name(ip: netaddr.IPAddress, length: int | None = None) -> str:
    """The name of the guard of ``ip`` in a namespace: ``10-0-0-5.nsip``; of a sub-prefix of ``length`` at
    ``ip``, ``fd00-0-0-0-0-0-0-0.64.nsip`` (three labels, the middle one digits: never an IP's)."""
    return f"{address_label(ip)}.{GUARD_TAG}" if length is None else f"{address_label(ip)}.{length}.{GUARD_TAG}"


def lock_suffix_room(tag: str, length: bool) -> int:
    """The most characters a lock name of ``tag`` has after its pool part (a hashed one's tag included)."""
    return 1 + LONGEST_IP_TEXT + (len(".128") if length else 0) + 1 + len(tag) + len(HASHED)


def lock_pool_part(kind: tuple[str, str], name: str, tag: str, length: bool) -> tuple[str, str]:
    """(pool part, tag) of a pool's lock names: its name, or when that leaves no room for the longest
    address (with a sub-prefix's ``length``), its head and a hash of kind and name, and the tag of that."""
    room = MAX_NAME_LENGTH - lock_suffix_room(tag, length)
    if len(name) <= room:
        return name, tag
    digest = hashlib.sha256(f"{kind[0]}/{kind[1]}/{name}".encode()).hexdigest()[:_HASH_DIGITS]
    return f"{name[:room - 1 - _HASH_DIGITS].rstrip('.-')}-{digest}", tag + HASHED


def lock_name(pool_part: str, ip: netaddr.IPAddress, length: int | None, tag: str) -> str:
    """``<pool>.<address>.<tag>``, or for a sub-prefix ``<pool>.<base>.<length>.<tag>`` (see above)."""
    middle = address_label(ip) if length is None else f"{address_label(ip)}.{length}"
    return f"{pool_part}.{middle}.{tag}"


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
