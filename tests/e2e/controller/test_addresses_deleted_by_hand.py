"""A bound claim keeps its IP when a user deletes its address objects, on a real API server.

claim ``zeta`` holds 10.7.0.1 and ``alpha`` 10.7.0.2 in a full pool where a
third claim waits; a user deletes both claims' address objects (for an
IPAddressClaim its Metal3 lock and its Cluster API IPAddress) and strips
their finalizers, in reverse name order or in name order, while a new claim
comes. Each claim ends with its own IP, and no two live claims' statuses ever
name one IP or one address, sampled while it settles.
"""

from __future__ import annotations

import time

import pytest

from controller_fixtures import CAPI, METAL3, Kube, assert_invariants, condition, own_ip, strip_and_delete
from metal3_ipam.testing.waiting import eventually


def named_by_statuses(kube: Kube) -> dict[tuple[str, str], list[str]]:
    """What the live claims' statuses name (an address, an IP) -> the claims naming it."""
    named: dict[tuple[str, str], list[str]] = {}
    for plural_of, items in (("IPClaim", kube.list(METAL3, "ipclaims")), ("IPAddressClaim", kube.list(CAPI, "ipaddressclaims"))):
        for claim in items:
            if claim["metadata"].get("deletionTimestamp"):
                continue
            who = f"{plural_of} {claim['metadata']['name']}"
            status = claim.get("status") or {}
            if (status.get("address") or {}).get("name"):
                named.setdefault(("address", status["address"]["name"]), []).append(who)
            ready = condition(claim, "Ready")
            if ready and ready["status"] == "True" and ready.get("message", "").startswith("bound to "):
                named.setdefault(("ip", ready["message"][len("bound to "):]), []).append(who)
    return named


@pytest.mark.parametrize("kind", ["IPClaim", "IPAddressClaim"])
@pytest.mark.parametrize("order", ["reverse name order", "name order"])
def test_claims_whose_address_objects_were_deleted_get_their_own_ip_back(controller, kube, kind, order):
    kube.pool("p", namePrefix="keep", pools=[{"start": "10.7.0.1", "end": "10.7.0.2"}], prefix=24)
    make = kube.claim if kind == "IPClaim" else kube.capi_claim
    bound = kube.bound if kind == "IPClaim" else kube.capi_bound
    make("zeta", "p")
    assert bound("zeta")["spec"]["address"] == "10.7.0.1"
    make("alpha", "p")
    assert bound("alpha")["spec"]["address"] == "10.7.0.2"
    make("waiting", "p")

    def exhausted(name: str) -> bool:
        claim = kube.ipclaim(name) if kind == "IPClaim" else kube.capi_ipclaim(name)
        ready = condition(claim, "Ready") if claim else None
        return bool(ready and ready["status"] == "False" and ready["reason"] == "PoolExhausted")

    eventually(lambda: exhausted("waiting"), timeout=30, what="the third claim refused for an exhausted pool")

    for name in (["zeta", "alpha"] if order == "reverse name order" else ["alpha", "zeta"]):
        ip = "10.7.0.1" if name == "zeta" else "10.7.0.2"
        strip_and_delete(kube, METAL3, "ipaddresses", f"keep-{ip.replace('.', '-')}")
        if kind == "IPAddressClaim":
            strip_and_delete(kube, CAPI, "ipaddresses", name)
    make("aaa-new", "p")  # in the same instant: first by name, and the pool has no room for it

    deadline = time.monotonic() + 60
    samples = 0
    while True:
        samples += 1
        shared = {what: who for what, who in named_by_statuses(kube).items() if len(who) > 1}
        assert not shared, f"statuses name one IP or address: {shared}"
        if own_ip(kube, kind, "zeta") == "10.7.0.1" and own_ip(kube, kind, "alpha") == "10.7.0.2" \
                and exhausted("aaa-new"):
            break
        assert time.monotonic() < deadline, (f"zeta {own_ip(kube, kind, 'zeta')}, alpha {own_ip(kube, kind, 'alpha')}, "
                                             f"aaa-new exhausted: {exhausted('aaa-new')}")
        time.sleep(0.05)  # the pace of sampling, not a wait for something
    assert exhausted("waiting")
    assert not [e for e in kube.events() if e.reason == "AddressChanged"]
    assert_invariants(kube, allow_errors=True)
