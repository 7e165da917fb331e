"""Pool counts of the in-cluster provider's kinds, on the real API server with the controller running.

``status.ipAddresses {total, used, free, outOfRange}`` as the provider's pool tests state them, for a
namespaced and a global pool: gateway inside and outside the range, network and broadcast addresses
listed but not counted, an IPv6 pool whose one address is the last of its subnet (IPv6 has no
broadcast: it is handed out). Better than the provider: ``free`` stays right once addresses fall out
of range (the provider reads ``total - used``: negative after a pool shrinks), and every pool carries
``Ready``. Prefix pools: aligned sub-prefixes, lowest first, from standalone and aggregated prefixes.
"""

from __future__ import annotations

import time

import pytest

from incluster_fixtures import BIND, assert_go_shape
from metal3_ipam.core import kinds
from metal3_ipam.testing import go_incluster as gi
from metal3_ipam.testing.waiting import Timeout

# (prefix, addresses, gateway, claims, total, free), the provider's table.
COUNTS = [
    (24, ["10.0.0.10-10.0.0.20"], None, 1, 11, 10),
    (24, ["10.0.0.10-10.0.0.20"], None, 2, 11, 9),
    (24, ["10.0.0.10-10.0.0.20"], "10.0.0.10", 1, 10, 9),
    (24, ["10.0.0.10-10.0.0.20"], "10.0.0.10", 2, 10, 8),
    (24, ["10.0.0.10-10.0.0.20"], "10.0.0.1", 1, 11, 10),
    (24, ["10.0.0.0-10.0.0.1"], "10.0.0.2", 1, 1, 0),       # the network address is not counted
    (24, ["10.0.0.254-10.0.0.255"], "10.0.0.1", 1, 1, 0),   # nor the broadcast address
    # IPv6: the last address of the subnet is handed out. (The provider's own row has the gateway fe80::a,
    # outside fe80::ff00/120: a pool this project refuses, so the gateway here is inside the prefix.)
    (120, ["fe80::ffff"], "fe80::ff0a", 1, 1, 0),
]


def _make_pool(incluster, kind: str, name: str, **spec) -> tuple[str, str]:
    """A pool of ``kind``; returns its name (made unique for a global pool) and the namespace of its claims.

    The rows overlap, as in the provider's tables: each namespaced pool is given a namespace of its own (the
    namespaced pools of one namespace never share an IP, so there the later ones would withhold the overlap),
    and each global pool is marked a separate network (overlapping global pools withhold otherwise)."""
    if kind == gi.GLOBAL_IN_CLUSTER_IP_POOL:
        name = incluster.global_name(name)
        incluster.global_ip_pool(name, annotations={kinds.SEPARATE_NETWORK_ANNOTATION: "true"}, **spec)
        return name, incluster.ns
    namespace = incluster.namespace()
    incluster.ip_pool(name, namespace=namespace, **spec)
    return name, namespace


def _wait_all(checks) -> None:
    """Run every check (``check(timeout)``) within one deadline; fail with all the failures at once."""
    deadline = time.monotonic() + BIND
    failures = []
    for label, check in checks:
        try:
            check(max(0.5, deadline - time.monotonic()))
        except (AssertionError, Timeout) as err:
            failures.append(f"{label}: {err}")
    assert not failures, "\n".join(failures)


@pytest.mark.parametrize("kind", gi.IP_POOL_KINDS)
def test_counts_as_the_provider_counts_them(controller, incluster, kind):
    """Every row of the table in one pool each, claims served, then counts checked: a row failing names itself."""
    rows = []
    for i, (prefix, addresses, gateway, claims, total, free) in enumerate(COUNTS):
        name, ns = _make_pool(incluster, kind, f"row{i}", prefix=prefix, addresses=addresses, gateway=gateway)
        # Before any claim: free == total, nothing used.
        rows.append((i, name, ns, claims, {"total": total, "used": claims, "free": free, "outOfRange": 0}))
    _wait_all([(f"row {i} before claims", lambda t, n=name, ns=ns, c=counts: incluster.wait_counts(
        n, {**c, "used": 0, "free": c["total"]}, kind, namespace=ns, timeout=t)) for i, name, ns, _, counts in rows])
    for i, name, ns, claims, _ in rows:
        for j in range(claims):
            incluster.claim(f"r{i}-{j}", name, kind, namespace=ns)
    _wait_all([(f"row {i}", lambda t, n=name, ns=ns, c=counts: incluster.wait_counts(n, c, kind, namespace=ns,
                                                                                      timeout=t))
               for i, name, ns, _, counts in rows])
    last = incluster.served("r7-0", namespace=rows[7][2])
    assert last["spec"]["address"] == "fe80::ffff" and last["spec"]["prefix"] == 120, last["spec"]


# (addresses, addresses after, claims, total after, outOfRange after, free after); reserved addresses
# allowed at first, not after. The provider's free would read total - claims (3, 249, 248, -1, -5).
OUT_OF_RANGE = [
    (["10.0.0.10-10.0.0.20"], ["10.0.0.13-10.0.0.20"], 5, 8, 3, 6),
    (["10.0.0.0-10.0.0.255"], ["10.0.0.1-10.0.0.255"], 4, 253, 1, 250),   # 10.0.0.0 given while allowed
    (["10.0.0.0-10.0.0.255"], ["10.0.0.0", "10.0.0.2-10.0.0.255"], 5, 253, 1, 249),
    (["10.0.0.251-10.0.0.255"], ["10.0.0.251-10.0.0.254"], 5, 4, 1, 0),  # the provider: free -1
    (["10.0.0.10-10.0.0.20"], ["10.0.0.10-10.0.0.11"], 7, 2, 5, 0),      # the provider: free -5
]


@pytest.mark.parametrize("kind", gi.IP_POOL_KINDS)
def test_free_stays_right_when_addresses_fall_out_of_range(controller, incluster, kind):
    rows = []
    for i, (addresses, after, claims, total, out, free) in enumerate(OUT_OF_RANGE):
        name, ns = _make_pool(incluster, kind, f"oor{i}", prefix=24, gateway="10.0.0.1", addresses=addresses,
                              allocate_reserved=True)
        for j in range(claims):
            incluster.claim(f"o{i}-{j}", name, kind, namespace=ns)
        rows.append((i, name, ns, after, claims, {"total": total, "used": claims, "free": free, "outOfRange": out}))
    for i, name, ns, _, claims, _ in rows:
        for j in range(claims):
            incluster.served(f"o{i}-{j}", namespace=ns)
    for i, name, ns, after, _, _ in rows:
        incluster.writer.patch(incluster.pool(name, kind, namespace=ns),
                               {"spec": {"addresses": after, "allocateReservedIPAddresses": False}})
    _wait_all([(f"row {i}", lambda t, n=name, ns=ns, c=counts: incluster.wait_counts(n, c, kind, namespace=ns,
                                                                                      timeout=t))
               for i, name, ns, _, _, counts in rows])
    # Nothing is taken away from a claim because its address fell out of range.
    for i, name, ns, _, claims, _ in rows:
        for j in range(claims):
            assert incluster.served(f"o{i}-{j}", namespace=ns, timeout=1)["metadata"]["name"] == f"o{i}-{j}"


@pytest.mark.parametrize("kind", gi.PREFIX_POOL_KINDS)
def test_prefix_pools_hand_out_aligned_sub_prefixes_lowest_first(controller, incluster, kind):
    """Standalone and aggregated prefixes, a custom length, an exclusion; the gateway copied, never blocking."""
    other = incluster.namespace()
    name = incluster.global_name("pp")
    body = gi.prefix_pool(name, namespace=None if kind in gi.GLOBAL_POOL_KINDS else incluster.ns,
                          prefixes=["fd10::/55", "fd00:0:0:100::/56"], allocation_prefix_length=56,
                          excluded=["fd10:0:0:100::/56"], gateway="fd10::1")
    if kind in gi.GLOBAL_POOL_KINDS:
        incluster.global_pools.append((kind, name))
    pool = incluster.writer.create(body)
    namespaces = [incluster.ns, other] if kind in gi.GLOBAL_POOL_KINDS else [incluster.ns]
    want = ["fd00:0:0:100::", "fd10::"]
    for i, _ in enumerate(want):
        incluster.claim(f"p{i}", name, kind, namespace=namespaces[i % len(namespaces)])
        address = incluster.served(f"p{i}", namespace=namespaces[i % len(namespaces)])
        assert (address["spec"]["address"], address["spec"]["prefix"], address["spec"]["gateway"]) == \
            (want[i], 56, "fd10::1"), address["spec"]
        assert_go_shape(address, incluster.get_claim(f"p{i}", namespace=namespaces[i % len(namespaces)]),
                        incluster.pool(name, kind))
    incluster.claim("p2", name, kind)
    incluster.not_ready("p2", "PoolExhausted")
    incluster.wait_counts(name, {"total": 2, "used": 2, "free": 0, "outOfRange": 0}, kind)
    assert pool["spec"]["allocationPrefixLength"] == 56
