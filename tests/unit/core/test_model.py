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

from world_model import ControllerInTheWorld


ControllerInTheWorld.TestCase.settings = settings(
    max_examples=150, stateful_step_count=40, deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.filter_too_much])
test_controller_in_a_world_of_lagging_reordered_repeated_events = ControllerInTheWorld.TestCase
