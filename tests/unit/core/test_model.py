"""The controller against a model of the world it lives in: an API store apart from its cache.

The store (the API server) is authoritative: it refuses a second object of a
name, checks resourceVersion preconditions, gives every incarnation of a name
a new uid. The controller decides from its own cache (the Inventory), which is
fed, as in the controller, by the answers to its own writes at once and by
watch events that lag: one FIFO stream per kind (so kinds interleave in any
order), events delivered again, and LISTs taken at one moment and filed at a
later one. The store starts with pools of different and shared namePrefixes
whose ranges overlap, and with state the Go Metal3 IPAM left.

The user's hand is in it too: address objects of either API deleted with
their finalizers stripped (alone, a claim's together, in any order, seen
deleting first or gone at once), and a claim's status rewritten by hand.

After every step, on the store: no IP is bound to two live claims, across both
address APIs and all pools; no two live claims' statuses (as the controller
last wrote them) name one address or one IP; a claim that was bound never
changes IP while that IP is free (no address object of another claim holds
it). Once events are drained and the controller has nothing left to do:
every live claim has exactly one IP or a Ready=False condition, and nothing
is leaked.
"""

from __future__ import annotations


from hypothesis import HealthCheck, settings

import netaddr

from world_model import ControllerInTheWorld, bindings


ControllerInTheWorld.TestCase.settings = settings(
    max_examples=150, stateful_step_count=40, deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.filter_too_much])
test_controller_in_a_world_of_lagging_reordered_repeated_events = ControllerInTheWorld.TestCase


def test_a_status_rewritten_by_hand_with_another_claims_does_not_move_that_claim():
    world = ControllerInTheWorld()
    steps = [("start", dict(seed=4, shared_prefix=True, with_go=True)),
             ("user_creates_claim", dict(capi=True, paused_cluster=False, pool="pb")),
             ("user_deletes_address_objects", dict(a_claims=False, apis="capi", picks=[0], seen_deleting=False)),
             ("user_creates_claim", dict(capi=True, paused_cluster=False, pool="pa")),
             ("user_creates_claim", dict(capi=True, paused_cluster=False, pool="pa")),
             ("user_rewrites_a_claim_status", dict(j=3, k=0))]
    for rule, arguments in steps:
        getattr(world, rule)(**arguments)
        world.no_ip_bound_to_two_live_claims_and_bound_claims_keep_their_ip()
    world.teardown()


def test_a_claim_whose_status_names_the_ip_another_pools_claim_keeps_is_told_which_claim_keeps_it():
    """The same world, its pools' passes in the other order: c1's pool (sharing go-1's namePrefix) is worked on
    first, while neither claim holds an address object; go-1, which an IPAM served, gets 10.0.0.3 back all the
    same, and c1, whose status was written by hand and which no IPAM served, is told which claim keeps it."""
    world = ControllerInTheWorld()
    steps = [("start", dict(seed=4, shared_prefix=True, with_go=True)),
             ("user_creates_claim", dict(capi=True, paused_cluster=False, pool="pb")),
             ("user_deletes_address_objects", dict(a_claims=False, apis="capi", picks=[0], seen_deleting=False)),
             ("user_rewrites_a_claim_status", dict(j=1, k=0))]
    for rule, arguments in steps:
        getattr(world, rule)(**arguments)
    while world.pending_listings:
        world.a_list_is_filed()
    for stream in world.store.streams.values():
        while stream:
            world.file(*stream.popleft())
    for pool in ("pb", "gopool"):
        world.a_pool_pass(pool)
        world.no_ip_bound_to_two_live_claims_and_bound_claims_keep_their_ip()
    held = bindings(world.store)
    assert held[("IPAddressClaim", "go-1")] == {int(netaddr.IPAddress("10.0.0.3"))}
    told = [e.message for e in world.store.events if e.target.name == "c1" and e.type == "Warning"]
    assert any("10.0.0.3 is named by the status of IPAddressClaim go-1 of IPPool default/gopool too, which an "
               "IPAM served" in m for m in told), told
    world.teardown()
