"""A claim's finalizer only while it holds something: what the step that serves it leaves half done.

A claim that waited (pool exhausted, missing, a Cluster awaited) carries no
finalizer of ours; the step that finally serves it adds it (with the naming of
what it is handed, where its pool names it first; else last, after the
address and the claim's status). The writer can stop between those writes
(leadership lost, the process stopped: a step stopped so is not retried, the
next leader decides from what was written), and the claim can be deleted
meanwhile. Wherever it stopped:

- an address whose claim went is released (SPEC §10.3; Metal3 #694);
- a deleting claim that another party's finalizer still holds keeps the
  address its status names (docs/claims.md "Release": whoever holds the claim may
  still use it), whether or not our finalizer made it onto the claim.
"""

from __future__ import annotations

import pytest

from metal3_ipam.core import kinds
from metal3_ipam.core import objects as o
from metal3_ipam.core.actions import Create
from metal3_ipam.memory import converge
from ipam_objects import (address_of, capi_addresses, capi_claim, converged, get, ipclaim, ippool,
                          metal3_addresses, pool_plan, set_meta, user_delete)

OTHER = "consumer.example.com/in-use"
ONE_IP = [{"start": "192.168.0.10", "end": "192.168.0.10"}]


def _make(kind):
    return ipclaim if kind == kinds.IPCLAIM else capi_claim


def _is_claim(ref, kind, name) -> bool:
    return ref is not None and ref.group_kind == kind and ref.name == name


def serve_until_stopped(api, kind, name, stop_before) -> None:
    """Run passes until one serves claim ``name``; that claim's step stops before the first action
    ``stop_before(action)`` picks (the writer stopped there); every other step runs whole."""
    for _ in range(20):
        plan = pool_plan(api)
        if not plan:
            break
        serving = [s for s in plan.steps
                   if _is_claim(s.about, kind, name) and any(isinstance(a, Create) for a in s.actions)]
        for step in serving:
            cut = next((i for i, a in enumerate(step.actions) if stop_before(a)), len(step.actions))
            step.actions = step.actions[:cut]
        assert api.apply(plan) == []
        if serving:
            return
    raise AssertionError(f"no pass served {name}")


def held_for(api, kind, name) -> list[str]:
    """The IPs addresses of either API hold for the claim."""
    capi = sorted(str(o.spec(a)["address"]) for a in capi_addresses(api)
                  if o.claim_of_capi_address(a) == (kind[1], name))
    return address_of(api, kind[1], name) + capi


def waited_then_freed(kind):
    """A one-IP pool held by "first"; "late", held by another party's finalizer too, waits for it
    (no finalizer of ours, as the Go Metal3 IPAM leaves a claim in error); then "first" goes."""
    make = _make(kind)
    late = make("late")
    late["metadata"]["finalizers"] = [OTHER]
    api = converged(ippool(pools=ONE_IP), make("first"), late)
    assert o.finalizers(get(api, kind, "late")) == [OTHER]
    user_delete(api, kind, "first")
    return api


def after(kind_of_action):
    """Picks the action after the first of that kind: the writer stopped right after it."""
    seen = []

    def stop(action):
        if seen:
            return True
        if type(action).__name__ == kind_of_action:
            seen.append(action)
        return False
    return stop


@pytest.mark.parametrize("kind", [kinds.IPCLAIM, kinds.CAPI_CLAIM])
def test_a_deleting_claim_held_by_another_finalizer_keeps_the_address_its_status_names(kind):
    """Served after waiting, the writer stopped right after the claim's status; then deleted while another
    party's finalizer holds it: that party may use the address, so it stays bound."""
    api = waited_then_freed(kind)
    serve_until_stopped(api, kind, "late", after("SetStatus"))
    claim = get(api, kind, "late")
    assert o.status(claim).get("address") or o.status(claim).get("addressRef"), "the claim's status names its address"
    assert OTHER in o.finalizers(claim)
    bound = held_for(api, kind, "late")
    assert bound == ["192.168.0.10"] * (1 if kind == kinds.IPCLAIM else 2)

    user_delete(api, kind, "late")  # the other party's finalizer holds it
    converge(api)
    assert held_for(api, kind, "late") == bound, (
        "released while another finalizer still holds the deleting claim (docs/claims.md: Release)")

    # That party lets go: the claim goes, and so does its address.
    set_meta(api, kind, "late", finalizers=[f for f in o.finalizers(get(api, kind, "late")) if f != OTHER])
    converge(api)
    assert get(api, kind, "late") is None
    assert metal3_addresses(api) == [] and capi_addresses(api) == []


@pytest.mark.parametrize("kind", [kinds.IPCLAIM, kinds.CAPI_CLAIM])
@pytest.mark.parametrize("stop", ["Create", "SetStatus"])
def test_a_claim_deleted_after_its_address_was_created_leaves_no_address(kind, stop):
    """Metal3 #694: a claim deleted between the address's creation and the end of the step that serves it
    (at once where our finalizer was not on it yet): the address left behind is released."""
    make = _make(kind)
    api = converged(ippool(pools=ONE_IP), make("first"), make("late"))
    assert o.finalizers(get(api, kind, "late")) == []
    user_delete(api, kind, "first")
    serve_until_stopped(api, kind, "late", after(stop))
    assert held_for(api, kind, "late"), "the address was created"
    user_delete(api, kind, "late")
    converge(api)
    assert get(api, kind, "late") is None
    assert metal3_addresses(api) == [] and capi_addresses(api) == []
