"""Hypothesis strategies of small in-cluster prefix pools."""

from __future__ import annotations

import ipaddress

from hypothesis import strategies as st




BASE = int(ipaddress.ip_address("2001:db8::"))


def net(text: str) -> ipaddress.IPv6Network:
    return ipaddress.ip_network(text, strict=False)


@st.composite
def small_prefix_pools(draw):
    """Prefixes inside 2001:db8::/120 cut into sub-prefixes of 121..128 bits; the model is every aligned candidate."""
    length = draw(st.integers(121, 128))
    entries = []
    for _ in range(draw(st.integers(1, 3))):
        bits = draw(st.integers(120, length))
        size = 1 << (128 - bits)
        entries.append(f"{ipaddress.ip_address(BASE + draw(st.integers(0, 256 // size - 1)) * size)}/{bits}")
    excluded = []
    for _ in range(draw(st.integers(0, 3))):
        a, b = sorted(draw(st.lists(st.integers(0, 300), min_size=2, max_size=2)))
        excluded.append(draw(st.sampled_from([
            str(ipaddress.ip_address(BASE + a)),
            f"{ipaddress.ip_address(BASE + a)}-{ipaddress.ip_address(BASE + b)}",
            f"{ipaddress.ip_address(BASE + a)}/{draw(st.integers(122, 128))}",
        ])))
    spec = {"prefixes": entries, "allocationPrefixLength": length}
    if excluded:
        spec["excludedPrefixes"] = excluded
    if draw(st.booleans()):
        spec["gateway"] = str(ipaddress.ip_address(BASE + draw(st.integers(0, 255))))

    def span(t):
        if "/" in t:
            n = net(t)
            return int(n[0]), int(n[-1])
        a, _, b = t.partition("-")
        return int(ipaddress.ip_address(a)), int(ipaddress.ip_address(b or a))

    size = 1 << (128 - length)
    model = []
    for start in range(BASE, BASE + 512, size):
        inside = any(span(e)[0] <= start and start + size - 1 <= span(e)[1] for e in entries)
        touched = any(not (hi < start or start + size - 1 < lo) for lo, hi in map(span, excluded))
        if inside and not touched:
            model.append(start)
    return spec, model, length
