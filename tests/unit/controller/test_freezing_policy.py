"""Orders of events that break the single freezing policy (``controller/freezing.py``).

Two promises are checked here, as ``main`` and ``Controller`` use the policy:

- no reference cycle that is garbage at a freeze is frozen (what is lost is
  only what is alive at the very instant of a freeze);
- what a full collection walks stays about FREEZE_EVERY objects filed or
  built, so none holds the event loop for long.

A listing is fetched page by page (seconds at 50,000 objects) and filed as
its pages come, over hundreds of turns of the event loop, with automatic
collection paused throughout: the collector must neither walk what is listed
(the loop is held meanwhile) nor let a cycle of the event loop's that dies
during the listing be frozen.

The API server's LIST answers are served here from their JSON text, each page
decoded when it is fetched, in a thread, as ``operator.listings`` does
(``testing.listing``).
"""

from __future__ import annotations

import asyncio
import gc
import json
import weakref
from types import SimpleNamespace

import pytest
from hypothesis import given, settings, strategies as st

from metal3_ipam.controller import workers as workers_module
from metal3_ipam.controller.freezing import FREEZE_EVERY, Freezer
from metal3_ipam.controller.operator import Controller, Listing, file_in_steps
from metal3_ipam.controller.workers import PoolWorkers
from metal3_ipam.core import kinds
from metal3_ipam.core import inventory as inventory_module
from metal3_ipam.core.inventory import Inventory
from metal3_ipam.testing.listing import answers as _answers, served
from garbage import PA, QUIET, make_litter, two_pools
from garbage import Litter
from pool_workers import MemoryWriter
from listing_pages import address, listing
from garbage import tracked_per_object, within_two_freezes


@pytest.fixture
def frozen_count(monkeypatch):
    """How many freezes happened (``gc.freeze`` counted, still done)."""
    freezes: list[bool] = []
    real_freeze = gc.freeze
    monkeypatch.setattr(gc, "freeze", lambda: (freezes.append(True), real_freeze()))
    return freezes


def _leaked(made: list[weakref.ref]) -> int:
    gc.collect()
    return sum(ref() is not None for ref in made)


def _served(pages: list[bytes]) -> Listing:
    """A LIST of addresses as the API server serves it: each page decoded as it is fetched."""
    return served(kinds.IPADDRESS, kinds.METAL3_API_VERSION, pages)


async def _settle(listing: Listing, inventory: Inventory, freezer: Freezer) -> str | None:
    """Filed as the controller files a listing (``Controller.settle``)."""
    return await Controller(inventory, SimpleNamespace(kick=lambda pools: None, freezer=freezer),
                            writer=None).settle(listing)


# --- (a) no garbage frozen --------------------------------------------------------------------


def test_a_cycle_that_dies_while_a_listing_is_filed_is_not_frozen_at_its_end(collector, frozen_count):
    """A listing of new objects (start-up, a relist after a watch expired, a Cluster resuming) is filed
    over hundreds of turns of the event loop, each step ending in a young collection. A cycle of the
    event loop's alive at one of those (a request in flight) is moved to the oldest generation; answered
    a few turns later, it is garbage there. Only the cycles alive at the freezes may be kept."""
    inventory = Inventory()
    freezer = Freezer(lambda: inventory.filed)
    made: list[weakref.ref] = []
    items = listing(FREEZE_EVERY + 400, 10**6)

    async def scenario():
        done: list[bool] = []
        task = asyncio.get_running_loop().create_task(make_litter(made, lambda: not done, turns=2))
        await file_in_steps(inventory.settle_listing_in_steps(kinds.IPADDRESS, None, items, "1000000"),
                            lambda pools: None, freezer)
        done.append(True)
        await task

    asyncio.run(scenario())
    assert frozen_count, "a listing of FREEZE_EVERY new objects froze nothing"
    alive = _leaked(made)
    assert alive <= len(frozen_count), \
        f"{alive} of {len(made)} cycles never collected: more than the {len(frozen_count)} alive at the freezes"


def test_a_cycle_that_dies_while_the_list_is_fetched_is_not_frozen_with_the_listing(collector, frozen_count):
    """A LIST of 50,000 takes seconds to fetch and decode, while the event loop goes on. Were automatic
    collections to run meanwhile (the decoding makes containers by the hundred thousand), they would
    move the loop's live cycles to the oldest generation: one alive when the LIST began and garbage
    before its pages are filed (a request answered meanwhile) must not be frozen with the listing."""
    inventory = Inventory()
    freezer = Freezer(lambda: inventory.filed)
    answers = _answers(listing(3 * FREEZE_EVERY, 10**6), "1000000")
    made: list[weakref.ref] = []
    served = _served(answers)
    fetch = served.fetch

    def fetched(token):
        page = fetch(token)
        if token is None:
            fetched.first = page
        return page

    async def scenario():
        in_flight = Litter()  # a request of the event loop's, on its way while the LIST is fetched
        made.append(weakref.ref(in_flight))
        settling = asyncio.get_running_loop().create_task(_settle(Listing(served.kind, None, fetched),
                                                                  inventory, freezer))
        while not hasattr(fetched, "first"):
            await asyncio.sleep(0)
        gc.collect(1)  # as automatic young collections would, while pages are decoded
        del in_flight  # answered: garbage, in the oldest generation
        await settling

    asyncio.run(scenario())
    assert frozen_count, "a listing of 3 x FREEZE_EVERY new objects froze nothing"
    assert _leaked(made) == 0, "a cycle dead before the listing was filed was frozen with it"


def _listed_answers(count: int):
    """Objects tracked per listed object, and the LIST answers of ``count`` addresses (what is listed
    is made only as a case decodes it)."""
    items = listing(count, 10**6)
    return tracked_per_object(items), _answers(items, "1000000")


def test_a_listing_filed_while_a_big_pool_is_built_is_not_walked_in_full_when_the_pauses_end(
        monkeypatch, collector, walked):
    """A relist (a watch expired, a Cluster resumed after a clusterctl move) brings new objects while a
    big pool's ledger is built: both pause the collector, and the end of the last pause is a full
    collection. It must not walk every object the listing filed (at 50,000, hundreds of milliseconds
    with the event loop held): what it walks must stay about FREEZE_EVERY objects."""
    monkeypatch.setattr(workers_module, "PAUSE_AT", 0)
    api = two_pools()
    per_object, answers = _listed_answers(5 * FREEZE_EVERY)

    async def scenario():
        workers = PoolWorkers(api.inventory, MemoryWriter(api), slice_seconds=0.0, audit_seconds=0.0, status_seconds=QUIET)
        await workers._pass(PA)
        build = asyncio.get_running_loop().create_task(workers._pass(PA))  # pa's audit under way
        while not workers.freezer.pauses:
            await asyncio.sleep(0)
        gc.collect()
        gc.freeze()  # (what came before is not this case's)
        walked.clear()
        await _settle(_served(answers), api.inventory, workers.freezer)  # new objects
        await build
        assert workers.freezer.pauses == 0

    asyncio.run(scenario())
    within_two_freezes(walked, per_object, f"the {5 * FREEZE_EVERY} listed while a big pool was built")


def test_a_listing_being_fetched_is_not_walked_by_full_collections(collector, walked):
    """The resync lists everything every few minutes, 50,000 objects at goal size. Were its pages
    decoded with automatic collection on, the objects decoded would be in the collector's reach as
    they pile up, and full collections (every time the oldest generation grew by a quarter) would walk
    all of them so far, with the interpreter lock held. Measured with the whole LIST decoded in a
    thread before it was filed: 25,000 bound claims and their addresses, 7 full collections during the
    resync's LIST, the longest 114 ms; at start-up 250 ms. Every full collection must walk no more
    than about FREEZE_EVERY listed objects."""
    items = listing(10 * FREEZE_EVERY, 10**6)
    per_object = tracked_per_object(items)
    answers = _answers(items, "1000000")
    del items
    inventory = Inventory()
    freezer = Freezer(lambda: inventory.filed)

    async def scenario():
        walked.clear()
        await _settle(_served(answers), inventory, freezer)
        assert len(inventory.objects) == 10 * FREEZE_EVERY

    asyncio.run(scenario())
    within_two_freezes(walked, per_object, f"a listing of {10 * FREEZE_EVERY} fetched and filed")


def test_garbage_made_in_the_last_turn_of_a_listing_is_collected_before_it_is_frozen(collector, frozen_count):
    """The listing's freeze collects the young generations first. test_young_garbage_is_collected_
    before_a_listing_freezes passes without that collection: its garbage is made before each step
    ends, and the young collection at the step end (``between_slices``) finds it anyway. Garbage the
    event loop makes in the listing's last turn (after its last step) is only found by the freeze's."""
    inventory = Inventory()
    freezer = Freezer(lambda: inventory.filed)
    made: list[weakref.ref] = []
    items = listing(FREEZE_EVERY, 10**6)

    async def scenario():
        done: list[bool] = []
        task = asyncio.get_running_loop().create_task(make_litter(made, lambda: not done, turns=0))
        await file_in_steps(inventory.settle_listing_in_steps(kinds.IPADDRESS, None, items, "1000000",
                                                              step=FREEZE_EVERY), lambda pools: None, freezer)
        done.append(True)
        await task

    asyncio.run(scenario())
    assert frozen_count
    assert made and _leaked(made) == 0, "young garbage made in the listing's last turn was frozen"


def test_a_pause_that_finds_the_collector_off_leaves_it_off(monkeypatch, collector):
    """Automatic collection is restored to what it was: whoever turned it off (an embedding program,
    a library) finds it off after a big build and after a listing, also when pauses nest and it is
    turned on and off again meanwhile. (No case fails when the end of a pause always turns it on.)"""
    monkeypatch.setattr(workers_module, "PAUSE_AT", 0)
    api = two_pools(50)

    async def scenario():
        workers = PoolWorkers(api.inventory, MemoryWriter(api), slice_seconds=0.0, audit_seconds=0.0, status_seconds=QUIET)
        await workers._pass(PA)
        gc.disable()
        await workers._pass(PA)  # an audit
        assert not gc.isenabled(), "a big build turned automatic collection on"
        inventory = Inventory()
        await file_in_steps(inventory.settle_listing_in_steps(kinds.IPADDRESS, None, listing(500, 10**6),
                                                              "1000000"), lambda pools: None, workers.freezer)
        assert not gc.isenabled(), "a listing turned automatic collection on"
        # Nested: on when the first pause begins, toggled while both run: on again after the last.
        gc.enable()
        build = asyncio.get_running_loop().create_task(workers._pass(PA))
        while not workers.freezer.pauses:
            await asyncio.sleep(0)
        gc.enable()
        gc.disable()
        await file_in_steps(inventory.settle_listing_in_steps(kinds.IPADDRESS, None, listing(500, 10**7),
                                                              "10000000"), lambda pools: None, workers.freezer)
        await build
        assert workers.freezer.pauses == 0 and gc.isenabled()

    try:
        asyncio.run(scenario())
    finally:
        gc.enable()


def test_a_listing_after_a_big_build_ended_does_not_walk_what_it_listed_at_its_end(monkeypatch, collector, walked):
    """A listing filed after a big build's pause ended: the full collection at its end must not walk
    every object it listed (they were frozen as they came)."""
    monkeypatch.setattr(workers_module, "PAUSE_AT", 0)
    api = two_pools(50)
    per_object, answers = _listed_answers(3 * FREEZE_EVERY)

    async def scenario():
        workers = PoolWorkers(api.inventory, MemoryWriter(api), slice_seconds=0.0, audit_seconds=0.0, status_seconds=QUIET)
        await workers._pass(PA)
        await workers._pass(PA)  # an audit: a pause of its own, over
        walked.clear()
        await _settle(_served(answers), api.inventory, workers.freezer)

    asyncio.run(scenario())
    bound = 2 * FREEZE_EVERY * per_object  # (a page decoded meanwhile, the loop's own objects)
    assert not walked or max(walked) <= bound, f"the listing's end walked {max(walked)} objects in full"


# --- (d) the inventory keeps the copy it has of a version filed again --------------------------


def _claim(name: str, version: int, pool: str) -> dict:
    return {"apiVersion": kinds.METAL3_API_VERSION, "kind": "IPClaim",
            "metadata": {"name": name, "namespace": "ns", "uid": f"uid-{name}-{version // 100}",
                         "resourceVersion": str(version)},
            "spec": {"pool": {"name": pool, "namespace": "ns"}}}


_EVENTS = st.lists(st.tuples(st.sampled_from(["claim", "address"]), st.integers(0, 3),
                             st.sampled_from(["new", "again", "older", "delete", "recreate", "drain"]),
                             st.sampled_from(["p", "q"])), max_size=40)


@given(_EVENTS)
@settings(max_examples=150, deadline=None)
def test_an_equal_version_filed_again_loses_no_change_a_pool_needs(events):
    """A pool's ledger takes the inventory in by its change log (``drain``) and is kicked by what
    ``upsert`` returns. Whatever the order of new versions, the same version filed again (the echo
    of an answer filed, a listing again), older news, deletions and names recreated (a new uid): once
    every pool drains, what each ledger knows equals what the inventory holds, as when a version
    filed again was re-filed; and a pool with anything pending was kicked since its last drain."""
    def run(keep_same: bool) -> tuple[dict, dict]:
        inventory = Inventory()
        seen: dict[tuple, dict] = {}  # every object handed in so far, by (kind, name, version)
        ledgers: dict = {}  # per pool: key -> object, as drained
        kicked: set = set()
        version = 1000
        for kind, i, what, pool in events:
            version += 1
            name = f"{kind}{i}"
            make = (lambda v: _claim(name, v, pool)) if kind == "claim" else \
                (lambda v: {**address(name, v, uid=f"uid-{name}-{v // 100}", ip=f"10.0.0.{i + 1}"),
                            "spec": {**address(name, v)["spec"], "pool": {"name": pool, "namespace": "ns"},
                                     "address": f"10.0.0.{i + 1}"}})
            mine = [v for (k, n, v) in seen if (k, n) == (kind, name)]
            if what == "drain":
                for key in {*inventory.pool_keys(), *ledgers}:
                    reload, changes = inventory.drain(key)
                    kicked.discard(key)
                    ledger = ledgers.setdefault(key, {})
                    if reload:
                        ledger.clear()
                        group = inventory.groups.get(key)
                        for obj in ([*group.claims.values(), *group.addresses.values()] if group else []):
                            ledger[Inventory.key(obj)] = obj
                    for objkey, obj in changes:
                        if obj is None:
                            ledger.pop(objkey, None)
                        else:
                            ledger[objkey] = obj
                continue
            if what == "new" or not mine:
                obj = make(version + (100 if what == "recreate" else 0))
            elif what == "again":
                obj = json.loads(json.dumps(seen[(kind, name, max(mine))]))  # the same version, a fresh copy
            elif what == "older":
                obj = json.loads(json.dumps(seen[(kind, name, min(mine))]))
            elif what == "recreate":
                obj = make(version + 100)
            else:
                kicked |= inventory.remove(json.loads(json.dumps(seen[(kind, name, max(mine))])))
                continue
            seen[(kind, name, int(obj["metadata"]["resourceVersion"]))] = obj
            kicked |= inventory.upsert(json.loads(json.dumps(obj)))
        for key in inventory.pool_keys():
            assert not inventory.pending(key) or key in kicked, f"{key} has changes pending and was not kicked"
        for key in {*inventory.pool_keys(), *ledgers}:  # every pool drains: its ledger now
            reload, changes = inventory.drain(key)
            ledger = ledgers.setdefault(key, {})
            if reload:
                ledger.clear()
            for objkey, obj in changes:
                if obj is None:
                    ledger.pop(objkey, None)
                else:
                    ledger[objkey] = obj
        held = {}
        for key, group in inventory.groups.items():
            for obj in [*group.claims.values(), *group.addresses.values()]:
                held.setdefault(key, {})[Inventory.key(obj)] = obj
        known = {key: ledger for key, ledger in ledgers.items() if ledger}
        assert known == held, "a ledger does not know what the inventory holds"
        return inventory.objects, held

    kept = run(True)
    real_same_version = inventory_module._same_version
    try:
        inventory_module._same_version = lambda incoming, stored: False  # as before: re-filed
        refiled = run(False)
    finally:
        inventory_module._same_version = real_same_version
    assert kept == refiled
