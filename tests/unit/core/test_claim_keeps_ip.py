"""A bound claim keeps its IP when its address objects are deleted behind its back (SPEC §10).

A user deletes a claim's IPAddress objects and strips their finalizers (a
mistaken cleanup, a botched restore): the claim lives on, and its status
still says which IP it holds. It gets that IP back whenever the IP is free
in its pool, before any other claim of the pool is served, and no two live
claims' statuses ever name one IP or one address, also while it settles.
"""

from __future__ import annotations

import random

import pytest

from metal3_ipam.core import kinds
from metal3_ipam.core import objects as o
from metal3_ipam.memory import converge
from go_ipam_objects import go_pool, go_served_ipclaim
from ipam_objects import (NS, address_of, capi_claim, converged, get, ip_of, ipclaim, ippool, loaded, metal3_addresses,
                          set_meta, strip_and_delete)
from ipam_objects import ADDRESS, CAPI_ADDRESS, CAPI_CLAIM, IPCLAIM, POOL
from keeping import pool, refile_in_name_order, statuses_name_distinct_ips, watched

KIND = {"IPClaim": IPCLAIM, "IPAddressClaim": CAPI_CLAIM}


def claim_of(kind: str, name: str, **kwargs) -> dict:
    return (ipclaim if kind == "IPClaim" else capi_claim)(name, **kwargs)


def address_objects_of(api, kind: str, name: str) -> list[tuple[tuple[str, str], str]]:
    """The claim's address objects, Metal3 lock first."""
    found = [(ADDRESS, o.name(a)) for a in metal3_addresses(api) if o.claim_of_address(a) == (kind, name)]
    if kind == "IPAddressClaim":
        found += [(CAPI_ADDRESS, o.name(a)) for a in api.inventory.of_kind(CAPI_ADDRESS)
                  if o.claim_of_capi_address(a) == (kind, name)]
    return found


@pytest.mark.parametrize("kind", ["IPClaim", "IPAddressClaim"])
@pytest.mark.parametrize("order", ["reverse name order", "name order"])
@pytest.mark.parametrize("passes_between", [False, True])
def test_claims_whose_addresses_were_deleted_get_their_own_ips_back(kind, order, passes_between):
    """zeta holds .1, alpha .2, a third claim waits in the exhausted pool; both address objects go."""
    api = watched(pool(), claim_of(kind, "zeta"), claim_of(kind, "alpha"), claim_of(kind, "waiting"))
    assert ip_of(api, "zeta", kind) == "10.7.0.1" and ip_of(api, "alpha", kind) == "10.7.0.2"
    assert o.condition(o.status(get(api, KIND[kind], "waiting")), "Ready")["reason"] == "PoolExhausted"
    refile_in_name_order(api)
    names = ["zeta", "alpha"] if order == "reverse name order" else ["alpha", "zeta"]
    for name in names:
        for object_kind, object_name in address_objects_of(api, kind, name):
            strip_and_delete(api, object_kind, object_name)
            if passes_between:
                converge(api, random.Random(0))
    converge(api, random.Random(0))
    assert ip_of(api, "zeta", kind) == "10.7.0.1"
    assert ip_of(api, "alpha", kind) == "10.7.0.2"
    waiting = o.status(get(api, KIND[kind], "waiting"))
    assert o.condition(waiting, "Ready")["reason"] == "PoolExhausted"
    if kind == "IPAddressClaim":
        assert get(api, CAPI_ADDRESS, "zeta")["spec"]["address"] == "10.7.0.1"
        assert get(api, CAPI_ADDRESS, "alpha")["spec"]["address"] == "10.7.0.2"
    assert not [e for e in api.events if e.reason == "AddressChanged"]


@pytest.mark.parametrize("kind", ["IPClaim", "IPAddressClaim"])
def test_new_claims_created_in_the_same_instant_do_not_take_a_kept_ip(kind):
    api = watched(pool(end="10.7.0.3"), claim_of(kind, "zeta"), claim_of(kind, "alpha"))
    for name in ("zeta", "alpha"):
        for object_kind, object_name in address_objects_of(api, kind, name):
            strip_and_delete(api, object_kind, object_name)
    refile_in_name_order(api)
    api.load(claim_of(kind, "aaa-new"))  # served first by name, were it not for the kept IPs
    api.load(claim_of("IPClaim", "requests-it", ip="10.7.0.1"))
    converge(api, random.Random(0))
    assert ip_of(api, "zeta", kind) == "10.7.0.1"
    assert ip_of(api, "alpha", kind) == "10.7.0.2"
    assert ip_of(api, "aaa-new", kind) == "10.7.0.3"
    refused = o.condition(o.status(get(api, IPCLAIM, "requests-it")), "Ready")
    assert refused["status"] == "False" and "10.7.0.1" in refused["message"]


def test_a_claim_whose_ip_left_the_pool_gets_a_new_one_and_a_warning_naming_the_old():
    api = watched(pool(end="10.7.0.3"), ipclaim("zeta"), ipclaim("alpha"))
    strip_and_delete(api, ADDRESS, "pool1-10-7-0-1")
    changed = get(api, POOL, "pool1")
    changed = {**changed, "spec": {**changed["spec"], "pools": [{"start": "10.7.0.2", "end": "10.7.0.3"}]},
               "metadata": {**changed["metadata"], "generation": 2}}
    api.inventory.upsert(changed)
    converge(api, random.Random(0))
    assert ip_of(api, "zeta") == "10.7.0.3"
    (event,) = [e for e in api.events if e.reason == "AddressChanged"]
    assert event.type == "Warning" and event.target.name == "zeta"
    assert "10.7.0.1" in event.message and "10.7.0.3" in event.message and "not inside" in event.message


@pytest.mark.parametrize("kind", ["IPClaim", "IPAddressClaim"])
def test_a_status_rewritten_by_hand_never_takes_another_live_claims_ip(kind):
    api = converged(pool(end="10.7.0.3"), claim_of(kind, "zeta"), claim_of(kind, "alpha"))
    zeta = o.status(get(api, KIND[kind], "zeta"))
    for object_kind, object_name in address_objects_of(api, kind, "alpha"):
        strip_and_delete(api, object_kind, object_name)
    # alpha's status now says what zeta's says (zeta still holds .1).
    alpha = get(api, KIND[kind], "alpha")
    api.inventory.upsert({**alpha, "status": zeta,
                          "metadata": {**alpha["metadata"], "resourceVersion": api._next_version()}})
    converge(api, random.Random(0))
    assert ip_of(api, "zeta", kind) == "10.7.0.1"
    assert ip_of(api, "alpha", kind) != "10.7.0.1"
    statuses_name_distinct_ips(api)


def test_two_claims_whose_statuses_name_one_ip_never_both_get_it():
    api = converged(pool(end="10.7.0.3"), ipclaim("zeta"), ipclaim("alpha"))
    zeta = o.status(get(api, IPCLAIM, "zeta"))
    for name in ("pool1-10-7-0-1", "pool1-10-7-0-2"):
        strip_and_delete(api, ADDRESS, name)
    alpha = get(api, IPCLAIM, "alpha")
    api.inventory.upsert({**alpha, "status": zeta,
                          "metadata": {**alpha["metadata"], "resourceVersion": api._next_version()}})
    converge(api, random.Random(0))
    ips = {ip_of(api, "zeta"), ip_of(api, "alpha")}
    assert len(ips) == 2 and "10.7.0.1" in ips
    statuses_name_distinct_ips(api)


def test_of_two_statuses_naming_one_ip_the_claim_an_ipam_served_gets_it_before_one_never_served():
    """The order the model found: a Go-served claim's address deleted, and a paused claim created before it,
    never served (it carries no claim finalizer), given by hand a status naming that address. Nothing runs on that
    IP for the claim never served: the Go-served one gets its IP back, and the other, once unpaused, a new IP
    with an Event saying why."""
    gopool = go_pool("pool1", NS, {"namePrefix": "pool1", "pools": [{"start": "10.7.0.1", "end": "10.7.0.3"}]})
    api = loaded(gopool, *go_served_ipclaim("go", gopool, "10.7.0.2"))  # created 2026-11-21T23:48:33Z
    api.load(ipclaim("early", annotations={kinds.PAUSED_ANNOTATION: ""}))  # created 2024-01-01T00:00:00Z
    converge(api, random.Random(0))
    assert ip_of(api, "go") == "10.7.0.2" and address_of(api, "IPClaim", "early") == []
    strip_and_delete(api, ADDRESS, "pool1-10-7-0-2")
    early = get(api, IPCLAIM, "early")
    assert not o.finalizers(early)
    api.inventory.upsert({**early, "status": o.status(get(api, IPCLAIM, "go")),
                          "metadata": {**early["metadata"], "resourceVersion": api._next_version()}})
    api.load(ipclaim("new"))
    converge(api, random.Random(0))
    assert ip_of(api, "go") == "10.7.0.2" and ip_of(api, "new") == "10.7.0.1"
    assert not [e for e in api.events if e.reason == "AddressChanged"]
    set_meta(api, IPCLAIM, "early", annotations={})
    converge(api, random.Random(0))
    assert ip_of(api, "early") == "10.7.0.3" and ip_of(api, "go") == "10.7.0.2"
    (event,) = [e for e in api.events if e.reason == "AddressChanged"]
    assert event.target.name == "early" and "10.7.0.2" in event.message and "10.7.0.3" in event.message
    statuses_name_distinct_ips(api)


def test_of_two_statuses_naming_one_ip_of_claims_both_served_the_claim_created_first_gets_it_even_while_paused():
    """Both claims served (a Go-served one, and one this controller bound, created before it), both address
    objects deleted, and the earlier one's status rewritten by hand with the other's: the statuses cannot be told
    apart, so the earlier claim gets the IP (kept for it while paused), and the Go-served one a new IP with an
    Event saying why."""
    gopool = go_pool("pool1", NS, {"namePrefix": "pool1", "pools": [{"start": "10.7.0.1", "end": "10.7.0.4"}]})
    api = loaded(gopool, *go_served_ipclaim("go", gopool, "10.7.0.2"))  # created 2026-11-21T23:48:33Z
    api.load(ipclaim("early"))  # created 2024-01-01T00:00:00Z
    converge(api, random.Random(0))
    assert ip_of(api, "go") == "10.7.0.2" and ip_of(api, "early") == "10.7.0.1"
    set_meta(api, IPCLAIM, "early", annotations={kinds.PAUSED_ANNOTATION: ""})
    for name in ("pool1-10-7-0-2", "pool1-10-7-0-1"):
        strip_and_delete(api, ADDRESS, name)
    early = get(api, IPCLAIM, "early")
    assert o.finalizers(early)
    api.inventory.upsert({**early, "status": o.status(get(api, IPCLAIM, "go")),
                          "metadata": {**early["metadata"], "resourceVersion": api._next_version()}})
    api.load(ipclaim("new"))
    converge(api, random.Random(0))
    assert ip_of(api, "go") == "10.7.0.1" and ip_of(api, "new") == "10.7.0.3"
    (event,) = [e for e in api.events if e.reason == "AddressChanged"]
    assert "10.7.0.2" in event.message and "IPClaim early" in event.message and "created first" in event.message
    set_meta(api, IPCLAIM, "early", annotations={})
    converge(api, random.Random(0))
    assert ip_of(api, "early") == "10.7.0.2"
    statuses_name_distinct_ips(api)


def test_a_claim_waits_while_its_own_deleted_address_is_still_held_by_another_finalizer():
    """Deleted, our finalizer stripped, another one left: the name is still taken, by the claim's own old address."""
    api = watched(pool(end="10.7.0.3"), ipclaim("zeta"), ipclaim("alpha"))
    set_meta(api, ADDRESS, "pool1-10-7-0-1", finalizers=["backup.example.com/hold"],
             deletionTimestamp=api.now)
    converge(api, random.Random(0))
    assert [o.name(a) for a in metal3_addresses(api)] == ["pool1-10-7-0-1", "pool1-10-7-0-2"]
    assert o.status(get(api, IPCLAIM, "zeta"))["address"]["name"] == "pool1-10-7-0-1"
    api.load(ipclaim("new"))
    converge(api, random.Random(0))
    assert ip_of(api, "new") == "10.7.0.3"
    set_meta(api, ADDRESS, "pool1-10-7-0-1", finalizers=[])
    strip_and_delete(api, ADDRESS, "pool1-10-7-0-1")
    converge(api, random.Random(0))
    assert ip_of(api, "zeta") == "10.7.0.1"
    assert not [e for e in api.events if e.reason == "AddressChanged"]


def test_a_go_ipam_claim_gets_its_ip_back_from_its_status_name():
    """The Go Metal3 IPAM names a Cluster API claim's address <namePrefix>-<ip> in status.addressRef."""
    api = loaded(pool(end="10.7.0.3"))
    claim = capi_claim("go")
    claim["status"] = {"addressRef": {"name": "pool1-10-7-0-2"}, "conditions": [
        {"type": "Ready", "status": "True", "reason": "", "message": "", "lastTransitionTime": api.now}]}
    api.load(claim)
    api.load(ipclaim("new"))
    converge(api, random.Random(0))
    assert ip_of(api, "go", "IPAddressClaim") == "10.7.0.2"
    assert ip_of(api, "new") == "10.7.0.1"


def test_a_kept_ip_is_neither_allocated_nor_free_in_the_pool_counts():
    """zeta is paused when its address goes: it is given nothing back yet, and nobody else gets its IP."""
    api = converged(pool(end="10.7.0.3"), ipclaim("zeta"), ipclaim("alpha"))
    set_meta(api, IPCLAIM, "zeta", annotations={kinds.PAUSED_ANNOTATION: ""})
    strip_and_delete(api, ADDRESS, "pool1-10-7-0-1")
    api.load(ipclaim("new"))
    converge(api, random.Random(0))
    assert ip_of(api, "new") == "10.7.0.3"
    status = o.status(get(api, POOL, "pool1"))
    assert (status["capacity"], status["allocated"], status["free"]) == ("3", "2", "0")
    set_meta(api, IPCLAIM, "zeta", annotations={})
    converge(api, random.Random(0))
    assert ip_of(api, "zeta") == "10.7.0.1"


def test_a_claim_holding_another_address_never_keeps_an_ip_its_rewritten_status_names():
    """alpha (first by name, as creation times tie) holds .2 and its status is made to name .1, zeta's, just
    as zeta's address goes: zeta still gets .1 back, and alpha keeps .2."""
    api = watched(pool(end="10.7.0.3"), ipclaim("zeta"), ipclaim("alpha"))
    strip_and_delete(api, ADDRESS, "pool1-10-7-0-1")
    alpha = get(api, IPCLAIM, "alpha")
    api.inventory.upsert({**alpha, "status": o.status(get(api, IPCLAIM, "zeta")),
                          "metadata": {**alpha["metadata"], "resourceVersion": api._next_version()}})
    converge(api, random.Random(0))
    assert ip_of(api, "zeta") == "10.7.0.1" and ip_of(api, "alpha") == "10.7.0.2"
    assert o.status(get(api, IPCLAIM, "alpha"))["address"]["name"] == "pool1-10-7-0-2"


# -- every order of events that could give a kept IP away ------------------------------------------------------

def test_another_pool_sharing_the_name_prefix_never_hands_out_a_kept_ip():
    """Two IPPools of one namePrefix over one range: the lock name guards them both, but only the keeper's pool
    knows the IP is kept once its address objects are gone. The other pool's pass comes first here."""
    keeper = ippool("zz", namePrefix="m", pools=[{"start": "10.7.0.1", "end": "10.7.0.3"}])
    other = ippool("aa", namePrefix="m", pools=[{"start": "10.7.0.1", "end": "10.7.0.3"}])
    api = watched(keeper, other, ipclaim("zeta", pool="zz"))
    assert ip_of(api, "zeta") == "10.7.0.1"
    strip_and_delete(api, ADDRESS, "m-10-7-0-1")
    api.load(ipclaim("new", pool="aa"))
    converge(api, random.Random(0))
    assert ip_of(api, "zeta") == "10.7.0.1" and ip_of(api, "new") == "10.7.0.2"
    assert not [e for e in api.events if e.reason == "AddressChanged"]


def _preallocated(api, claim: str, ip: str) -> None:
    changed = get(api, POOL, "pool1")
    api.inventory.upsert({**changed, "spec": {**changed["spec"], "preAllocations": {claim: ip}},
                          "metadata": {**changed["metadata"], "generation": 2,
                                       "resourceVersion": api._next_version()}})


@pytest.mark.parametrize("paused", [True, False])
def test_a_preallocation_of_a_kept_ip_never_gives_it_away(paused):
    """The pool edited past the webhook: its preAllocations give zeta's kept IP to another claim. zeta keeps it
    (paused or not); the other claim is told whose it is (or, once zeta holds it again, that it is in use)."""
    api = watched(pool(end="10.7.0.3"), ipclaim("zeta"))
    if paused:
        set_meta(api, IPCLAIM, "zeta", annotations={kinds.PAUSED_ANNOTATION: ""})
    strip_and_delete(api, ADDRESS, "pool1-10-7-0-1")
    _preallocated(api, "other", "10.7.0.1")
    api.load(ipclaim("other"))
    converge(api, random.Random(0))
    assert address_of(api, "IPClaim", "other") == []
    refused = o.condition(o.status(get(api, IPCLAIM, "other")), "Ready")
    assert refused["status"] == "False" and "10.7.0.1" in refused["message"]
    assert ("kept for IPClaim zeta" if paused else "already in use") in refused["message"]
    set_meta(api, IPCLAIM, "zeta", annotations={})
    converge(api, random.Random(0))
    assert ip_of(api, "zeta") == "10.7.0.1" and address_of(api, "IPClaim", "other") == []
    assert not [e for e in api.events if e.reason == "AddressChanged"]


def test_the_webhook_refuses_a_preallocation_of_an_ip_a_claim_keeps():
    from metal3_ipam.controller.admission import Admission
    from ipam_objects import admission_request as request
    api = watched(pool(end="10.7.0.3"), ipclaim("zeta"))
    strip_and_delete(api, ADDRESS, "pool1-10-7-0-1")
    old = get(api, POOL, "pool1")
    new = {**old, "spec": {**old["spec"], "preAllocations": {"other": "10.7.0.1"}}}
    response = Admission(api.inventory).review(request("UPDATE", new, old))
    assert not response["allowed"]
    message = response["status"]["message"]
    assert "spec.preAllocations[other]" in message and "10.7.0.1" in message and "IPClaim zeta" in message
    # Preallocating it to its keeper is fine.
    mine = {**old, "spec": {**old["spec"], "preAllocations": {"zeta": "10.7.0.1"}}}
    assert Admission(api.inventory).review(request("UPDATE", mine, old))["allowed"]


def test_a_keeper_whose_ip_is_lost_in_an_exhausted_pool_gets_one_warning():
    """zeta's IP left the pool while its address objects were gone, and nothing is free: one Warning Event
    says both, and the passes after it write nothing more."""
    api = watched(pool(end="10.7.0.2"), ipclaim("zeta"), ipclaim("alpha"))
    strip_and_delete(api, ADDRESS, "pool1-10-7-0-1")
    changed = get(api, POOL, "pool1")
    api.inventory.upsert({**changed, "spec": {**changed["spec"], "pools": [{"start": "10.7.0.2", "end": "10.7.0.2"}]},
                          "metadata": {**changed["metadata"], "generation": 2,
                                       "resourceVersion": api._next_version()}})
    for _ in range(3):
        converge(api, random.Random(0))
    warnings = [e for e in api.events if e.target.name == "zeta" and e.type == "Warning"]
    assert len(warnings) == 1, [(e.reason, e.message) for e in warnings]
    assert warnings[0].reason == "PoolExhausted" and "10.7.0.1" in warnings[0].message
