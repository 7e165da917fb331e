"""The sweep's judgement (poolkinds/netbox/sweep.py) across the orders of events of a ``clusterctl move`` that
stops half-way.

clusterctl (``cmd/clusterctl/client/cluster/mover.go``) pauses every Cluster of the namespace it moves,
creates the copies in the target, then deletes the source's objects group by group, the deepest first:
claims (with their addresses) before pools and Clusters. A group that fails ends the move there, without a
rollback. A NetBoxIPPool belongs to no Cluster: nothing pauses it.
"""

from __future__ import annotations

from hypothesis import example, given, note, settings
from hypothesis import strategies as st

from metal3_ipam.core import kinds
from metal3_ipam.core.inventory import Inventory
from metal3_ipam.poolkinds.netbox.pool import KEY_ANNOTATION
from metal3_ipam.poolkinds.netbox.sweep import (ABSENT, MAX_DESCRIPTION, PAUSED, PRESENT, Found, Home, Sweep, describe_anew,
                                    description, disown, given_mid_move, held_in, hold, hold_in, home_in, home_of,
                                    home_state, left_on_release, rehome, settle, swept_at, unclaimed_here, with_held)

NS = "ns"
C1, C2, T1 = (f"0b3e1f7a-1111-4c2d-9e8f-00000000000{i}" for i in (1, 2, 3))
NB, NB2, SOURCE_POOL, TARGET_POOL = (f"5a6b7c8d-2222-4c2d-9e8f-00000000000{i}" for i in (1, 2, 3, 4))


def cluster(name: str, uid: str, paused: bool = False, ns: str = NS) -> dict:
    return {"metadata": {"name": name, "namespace": ns, "uid": uid}, "spec": {"paused": paused}}


def pool(name: str, uid: str, ns: str = NS, annotations: dict | None = None) -> dict:
    return {"metadata": {"name": name, "namespace": ns, "uid": uid, "annotations": annotations or {}}, "spec": {}}


def claim(name: str, cluster_name: str | None = None, ns: str = NS) -> dict:
    labels = {"cluster.x-k8s.io/cluster-name": cluster_name} if cluster_name else {}
    return {"metadata": {"name": name, "namespace": ns, "labels": labels}, "spec": {}}


def test_a_pool_is_paused_for_the_sweep_while_a_cluster_of_its_namespace_is():
    objects = [("Cluster", cluster("c1", C1, paused=True)), ("NetBoxIPPool", pool("nb", NB)),
               ("Cluster", cluster("c2", C2, ns="other")), ("NetBoxIPPool", pool("nb", NB2, ns="other"))]
    state = home_state(objects)
    assert state(Home("NetBoxIPPool", NB)) == PAUSED  # a move of its namespace may be under way
    assert state(Home("NetBoxIPPool", NB2)) == PRESENT  # no Cluster of its namespace is paused
    assert state(Home("Cluster", C2)) == PRESENT
    paused_by_hand = home_state([("NetBoxIPPool", pool("nb", NB, annotations={"cluster.x-k8s.io/paused": ""}))])
    assert paused_by_hand(Home("NetBoxIPPool", NB)) == PAUSED


def test_the_source_of_a_move_stopped_after_deleting_the_claims_releases_nothing():
    """A claim of no Cluster, homed at its pool; the move pauses the namespace's Cluster, deletes the claim
    and stops before the pool. However long the source sweeps, the moved claim's address stays."""
    nb, c1 = pool("nb", NB), cluster("c1", C1)
    moved = claim("free")
    home = home_of(moved, None, nb)
    assert home == Home("NetBoxIPPool", NB)
    item = Found(7, "192.0.2.7/24", "k-free", description(home, moved))
    assert home_in(item.description) == home
    sweep = Sweep(grace=9)
    paused = home_state([("Cluster", {**c1, "spec": {"paused": True}}), ("NetBoxIPPool", nb)])
    for now in range(0, 1000, 10):  # the claim gone: carried by nothing here
        assert sweep.judge([item], carried=lambda key: False, home=paused, now=now) == [], now


def test_the_target_homes_a_claim_of_no_cluster_at_its_pool_only_once_the_move_is_over():
    """In the target, the copies of the pool and claim arrive while the namespace's Cluster is paused: the
    address is homed there once clusterctl unpauses it (a move given up leaves the source's home as it was)."""
    source_home = Home("NetBoxIPPool", SOURCE_POOL)
    copy = claim("free")
    item = Found(7, "192.0.2.7/24", "k-free", description(source_home, copy))
    target_pool = pool("nb", TARGET_POOL)
    wanted = {"k-free": description(home_of(copy, None, target_pool), copy)}.get
    during = home_state([("Cluster", cluster("c1", T1, paused=True)), ("NetBoxIPPool", target_pool)])
    after = home_state([("Cluster", cluster("c1", T1)), ("NetBoxIPPool", target_pool)])
    assert rehome([item], wanted, during) == []
    taken = wanted("k-free").replace(" claim ", f" from=NetBoxIPPool:{SOURCE_POOL} claim ", 1)
    assert rehome([item], wanted, after) == [(item, taken)]
    assert during(source_home) == ABSENT


def netbox_claim(name: str, key: str, resource_version: str, annotations: dict | None = None) -> dict:
    return {"apiVersion": "ipam.cluster.x-k8s.io/v1beta2", "kind": "IPAddressClaim",
            "metadata": {"name": name, "namespace": NS, "uid": f"uid-{name}", "resourceVersion": resource_version,
                         "annotations": {KEY_ANNOTATION: key, **(annotations or {})}},
            "spec": {"poolRef": {"apiGroup": "netbox.metal3-ipam.io", "kind": "NetBoxIPPool", "name": "nb"}}}


def test_the_keys_of_claims_deleted_for_a_move_are_remembered_and_no_others():
    """The source of a move sees each claim go with clusterctl's delete-for-move annotation; its key's
    address is the target's from then on (the sweep counts it carried). A claim deleted by hand is not."""
    inventory = Inventory()
    moving = netbox_claim("moving", "k-moving", "1")
    by_hand = netbox_claim("by-hand", "k-by-hand", "2")
    inventory.upsert(moving)
    inventory.upsert(by_hand)
    assert inventory.claims_carrying("k-moving") == [moving]
    inventory.remove(netbox_claim("moving", "k-moving", "3", {kinds.DELETE_FOR_MOVE_ANNOTATION: ""}))
    inventory.remove(netbox_claim("by-hand", "k-by-hand", "4"))
    assert inventory.claims_carrying("k-moving") == []
    assert list(inventory.moved_away) == ["k-moving"]


def test_the_source_takes_the_home_off_the_address_of_a_claim_it_saw_leave_for_a_move():
    """Its claim seen deleted for a move while the Cluster is paused here (a move stopped half-way), the
    address is homed nowhere: unpaused for the retry, restarted, the source never releases it; the target
    homes it at its own Cluster when it gets the claim."""
    moved = claim("m", "c1")
    item = Found(3, "192.0.2.3/24", "k-m", description(Home("Cluster", C1), moved))
    paused = home_state([("Cluster", cluster("c1", C1, paused=True))])
    running = home_state([("Cluster", cluster("c1", C1))])
    nobody = {}.get
    assert disown([item], {"k-m"}.__contains__, nobody, running) == disown([item], {"k-m"}.__contains__, nobody,
                                                                          paused)
    [(_, text)] = disown([item], {"k-m"}.__contains__, nobody, paused)
    assert home_in(text) is None and "claim ns/m" in text
    homeless = Found(item.id, item.address, item.key, text)
    sweep = Sweep(grace=1)
    for now in range(0, 100, 10):  # the source restarted: it knows of no move, and the Cluster runs
        assert sweep.judge([homeless], carried=lambda key: False, home=running, now=now) == []
    target = description(Home("Cluster", T1), claim("m", "c1"))
    taken = target.replace(" claim ", f" moved-from=Cluster:{C1} claim ", 1)  # given by its source: moved-from=
    assert rehome([homeless], {"k-m": target}.get, lambda h: PRESENT) == [(homeless, taken)]
    # Not when it is homed elsewhere already, when a claim here carries it, nor for a claim deleted by hand.
    assert disown([homeless], {"k-m"}.__contains__, nobody, running) == []
    assert disown([item], {"k-m"}.__contains__, {"k-m": description(Home("Cluster", C1), moved)}.get, running) == []
    assert disown([item], set().__contains__, nobody, running) == []
    assert disown([item], {"k-m"}.__contains__, nobody, home_state([])) == []  # its Cluster gone: moved whole


def test_an_address_whose_key_two_live_clusters_carry_is_not_homed_back_and_forth():
    copy = claim("m", "c1")
    here, there = description(Home("Cluster", C1), copy), description(Home("Cluster", T1), copy)
    item = Found(3, "192.0.2.3/24", "k-m", here)
    writes = 0
    for wanted in [{"k-m": there}.get, {"k-m": here}.get] * 3:  # the target's sweep, the source's, ...
        for found, text in rehome([item], wanted, lambda h: PRESENT):
            item = Found(found.id, found.address, found.key, text)
            writes += 1
    assert writes <= 1


def test_a_target_whose_copy_is_paused_holds_the_address_and_the_source_unpaused_leaves_it():
    """The source was down while the move deleted the claim, and never took the home off; the move stopped
    half-way, the target's Cluster stays paused. The target's sweep marks the address held by its paused
    Cluster (leaving the home as it is); the source, its Cluster unpaused for the retry and no claim
    carrying the key, never releases it."""
    moved = claim("m", "c1")
    item = Found(3, "192.0.2.3/24", "k-m", description(Home("Cluster", C1), moved))
    target = home_state([("Cluster", cluster("c1", T1, paused=True, ns="target"))])
    wanted = {"k-m": description(Home("Cluster", T1), claim("m", "c1", ns="target"))}.get
    [(_, text)] = describe_anew([item], wanted, set().__contains__, target)
    assert home_in(text) == Home("Cluster", C1) and held_in(text) == Home("Cluster", T1)
    assert text.startswith(f"metal3-ipam home=Cluster:{C1} held=Cluster:{T1} claim ns/m"), text
    held = Found(item.id, item.address, item.key, text)
    assert describe_anew([held], wanted, set().__contains__, target) == []  # written once
    source = home_state([("Cluster", cluster("c1", C1))])
    assert unclaimed_here(item, lambda key: False, source)  # what the source released before
    sweep = Sweep(grace=9)
    for now in range(0, 1000, 10):
        assert sweep.judge([held], carried=lambda key: False, home=source, now=now) == [], now
        assert describe_anew([held], {}.get, set().__contains__, source) == []  # not its hold: left as it is
    # The target unpaused (the move finished): it homes the address there, and the hold goes with the rest.
    after = home_state([("Cluster", cluster("c1", T1, ns="target"))])
    [(_, homed)] = describe_anew([held], wanted, set().__contains__, after)
    assert home_in(homed) == Home("Cluster", T1) and held_in(homed) is None


def test_a_hold_whose_paused_claim_is_gone_is_taken_off_by_its_own_controller_only():
    """The move given up and the target's copies deleted (its Cluster stays): the target's next sweep takes
    its hold off, and the source's sweep may release the address again, two sightings a grace apart later."""
    text = f"metal3-ipam home=Cluster:{C1} held=Cluster:{T1} claim ns/m"
    item = Found(3, "192.0.2.3/24", "k-m", text)
    target = home_state([("Cluster", cluster("c1", T1, paused=True, ns="target"))])
    [(_, bare)] = hold([item], {}.get, target)
    assert bare == f"metal3-ipam home=Cluster:{C1} claim ns/m"
    assert hold([item], {}.get, home_state([])) == []  # an object not held here: its hold stays
    source = home_state([("Cluster", cluster("c1", C1))])
    freed = Found(item.id, item.address, item.key, bare)
    sweep = Sweep(grace=9)
    assert sweep.judge([item], carried=lambda key: False, home=source, now=0) == []
    assert sweep.judge([freed], carried=lambda key: False, home=source, now=10) == []  # it changed: anew
    assert sweep.judge([freed], carried=lambda key: False, home=source, now=20) == [freed]


def test_a_hold_keeps_the_home_whole_and_the_description_within_netboxs_limit():
    long = claim("m" * 253, "c1", ns="n" * 63)
    text = description(Home("NetBoxIPPool", NB), long)
    assert len(text) == MAX_DESCRIPTION
    item = Found(3, "192.0.2.3/24", "k-m", text)
    target = home_state([("NetBoxIPPool", pool("nb", TARGET_POOL, ns="target")),
                         ("Cluster", cluster("c1", T1, paused=True, ns="target"))])
    wanted = {"k-m": description(Home("NetBoxIPPool", TARGET_POOL), long)}.get
    [(_, held)] = hold([item], wanted, target)
    assert len(held) == MAX_DESCRIPTION
    assert home_in(held) == Home("NetBoxIPPool", NB) and held_in(held) == Home("NetBoxIPPool", TARGET_POOL)
    assert held.startswith(f"metal3-ipam home=NetBoxIPPool:{NB} held=NetBoxIPPool:{TARGET_POOL} claim ")


SIDES = {"S": (C1, "source"), "T": (T1, "target")}
EPOCH, KEEP = 1_790_000_000, 30  # wall-clock seconds of the first sweep; how long a mark of release stands
INTERVAL = 9  # the sweep interval: how old a give made mid-move is when a release reads it confirmed
STEPS = st.lists(st.one_of(st.tuples(st.just("pause"), st.sampled_from("ST"), st.booleans()),
                           st.tuples(st.just("carry"), st.sampled_from("ST"), st.booleans()),
                           st.tuples(st.just("moved"), st.sampled_from("ST"), st.booleans()),
                           st.tuples(st.just("sweep"), st.sampled_from("ST"), st.integers(0, 20))),
                 max_size=60)


@settings(max_examples=400, deadline=None)
@given(paused=st.fixed_dictionaries({"S": st.booleans(), "T": st.booleans()}),
       carries=st.fixed_dictionaries({"S": st.booleans(), "T": st.booleans()}),
       moved=st.fixed_dictionaries({"S": st.booleans(), "T": st.booleans()}),
       homed=st.sampled_from(["S", "T", "elsewhere", "nowhere"]), steps=STEPS)
# The target holds the address, then the source, which saw the claim leave, takes the home off (and the hold).
@example(paused={"S": False, "T": True}, carries={"S": False, "T": True}, moved={"S": True, "T": False},
         homed="S", steps=[("sweep", "T", 0), ("sweep", "S", 0), ("sweep", "T", 0)])
# The target holds it; the source, its claim live and unpaused, homes it there and keeps the target's hold.
@example(paused={"S": False, "T": True}, carries={"S": True, "T": True}, moved={"S": False, "T": False},
         homed="elsewhere", steps=[("sweep", "T", 0), ("sweep", "S", 0), ("sweep", "T", 0)])
# The target takes over an address homed at a third cluster's object; the source's live claim, refused, holds it
# live (``live-held=``) once, and its next sweep takes nothing over (as it would after a paused claim's hold).
@example(paused={"S": False, "T": False}, carries={"S": False, "T": True}, moved={"S": False, "T": False},
         homed="elsewhere", steps=[("carry", "S", True), ("sweep", "T", 0), ("sweep", "S", 0), ("sweep", "S", 0)])
# The target takes over an address homed at a third cluster's object, the source's live claim holds it live: the
# target's copy deleted, its release leaves the address the source's claim is bound to.
@example(paused={"S": False, "T": False}, carries={"S": True, "T": True}, moved={"S": False, "T": False},
         homed="elsewhere", steps=[("sweep", "T", 0), ("sweep", "S", 0), ("carry", "T", False), ("sweep", "T", 20),
                                   ("sweep", "S", 20), ("sweep", "T", 20)])
# The target takes the address over, the source's live claim holds it live: the source's claim deleted, its
# release takes its own hold off, and the target's sweeps keep the address its live claim is bound to.
@example(paused={"S": False, "T": False}, carries={"S": True, "T": True}, moved={"S": False, "T": False},
         homed="S", steps=[("sweep", "T", 0), ("sweep", "S", 0), ("carry", "S", False), ("sweep", "S", 20),
                           ("sweep", "T", 20), ("sweep", "T", 40), ("sweep", "T", 40)])
# Both claims live and unpaused, the address homed at the target's: the source's copy deleted before its sweep
# homed the address leaves it taken over marked released, and the target's sweep takes it back.
@example(paused={"S": False, "T": False}, carries={"S": True, "T": True}, moved={"S": False, "T": False},
         homed="T", steps=[("sweep", "T", 0), ("carry", "S", False), ("sweep", "T", 0), ("sweep", "S", 40),
                           ("sweep", "T", 0)])
def test_two_clusters_sweeps_under_any_pauses_never_write_back_and_forth_nor_free_a_held_address(
        paused, carries, moved, homed, steps):
    """Two clusters (a move's source and target) with one Cluster each, each maybe carrying the key in a
    claim of it or having seen its claim leave for a move, paused and unpaused in any order, sweeping in any
    order at any times.

    * Between two changes of pause or carrying, each side writes the address at most once, also when both
      sides' claims are live and unpaused.
    * A sweep that finds the address carried by nothing first marks it released (``swept=``), and releases
      it only a while later; no sweep releases it while the other side carries its key and swept after its
      last change (it had its chance to take it back or hold it), nor while the sweeping side carries it.
    * A side whose claim is deleted while it is unpaused (no longer carrying the key) releases the key: that
      release never deletes an address that names a home while the other side carries its key and swept
      after its last change (one that names none, made before homes were written or edited by hand, no
      sweep holds: it is homed at the first sweep or allocation of a cluster whose claim carries its key);
      an address it does not delete it leaves as it is but for its own hold (taken off: its claim is gone),
      or takes over (or, homed there, leaves) marked released.
    * A side that sweeps while carrying no key leaves no hold of its own on the address.
    * The home token stays first and whole, the description within NetBox's limit.
    """
    homes = {"S": Home("Cluster", C1), "T": Home("Cluster", T1), "elsewhere": Home("Cluster", NB2)}
    text = description(homes.get(homed), claim("m", "c1"))
    sweeps = {side: Sweep(grace=INTERVAL) for side in SIDES}
    saw = {side: False for side in SIDES}  # swept while carrying since the address last changed
    writes = {side: 0 for side in SIDES}
    now = 0
    for step in steps:
        note(f"{step}: {text}")
        if step[0] in ("pause", "carry", "moved"):
            _, side, value = step
            states = {"pause": paused, "carry": carries, "moved": moved}[step[0]]
            if step[0] == "carry" and carries[side] and not value and not paused[side] and not moved[side] \
                    and text is not None:  # the claim deleted: its finalizer's release of the key
                uid, ns = SIDES[side]
                home = home_state([("Cluster", cluster("c1", uid, ns=ns))])
                left = left_on_release(text, description(Home("Cluster", uid), claim("m", "c1", ns=ns)), home,
                                       EPOCH + now)
                if left is None:
                    other = "T" if side == "S" else "S"
                    assert not (carries[other] and saw[other] and home_in(text) is not None), \
                        f"{side}'s release deleted what {other} carries"  # one naming no home is held by no one
                elif left != with_held(text, None if held_in(text) == Home("Cluster", uid) else hold_in(text)):
                    assert swept_at(left) is not None and home_in(left) == Home("Cluster", uid), left
                    saw = {s: False for s in SIDES}
                assert left is None or held_in(left) != Home("Cluster", uid), left
                text = left
            if states[side] != value:
                states[side] = value
                writes = {s: 0 for s in SIDES}
                saw[side] = False
            continue
        _, side, elapsed = step
        if text is None:
            break
        now += elapsed
        uid, ns = SIDES[side]
        home = home_state([("Cluster", cluster("c1", uid, paused=paused[side], ns=ns))])
        wanted = {"k": description(Home("Cluster", uid), claim("m", "c1", ns=ns))}.get if carries[side] else {}.get
        found = [Found(3, "192.0.2.3/24", "k", text)]
        judged = sweeps[side].judge(found, carried=lambda key: carries[side] or moved[side], home=home, now=now)
        released, marked = settle(judged, wall=EPOCH + now, keep=KEEP)
        changed = marked or describe_anew(found, wanted, lambda key: moved[side], home,
                                                confirmed_at=EPOCH + now + INTERVAL)
        if released:
            other = "T" if side == "S" else "S"
            assert not carries[side] and swept_at(text) is not None
            assert not (carries[other] and saw[other]), f"{side} released what {other} carries and had marked"
            text = None
            break
        if changed:
            [(_, text)] = changed
            writes[side] += 1
            saw = {s: False for s in SIDES}
            assert writes[side] <= 1, f"{side} wrote the address twice with nothing changed"
        saw[side] = carries[side]
        if not carries[side]:
            assert held_in(text) != Home("Cluster", uid)
        assert len(text) <= MAX_DESCRIPTION
        if home_in(text) is not None:
            assert text.startswith(f"metal3-ipam home={home_in(text).kind}:{home_in(text).uid}")


def _two_sides(monkeypatch, **example):
    """One example of the property above, run as a plain test (its notes dropped)."""
    monkeypatch.setitem(globals(), "note", lambda text: None)
    test_two_clusters_sweeps_under_any_pauses_never_write_back_and_forth_nor_free_a_held_address.hypothesis.inner_test(
        **example)


def test_an_address_of_an_earlier_version_two_live_clusters_carry_is_written_once_by_each(monkeypatch):
    _two_sides(monkeypatch, paused={"S": False, "T": False}, carries={"S": True, "T": True},
               moved={"S": False, "T": False}, homed="nowhere",
               steps=[("sweep", "S", 0), ("sweep", "T", 0), ("sweep", "S", 0)])


def test_a_claim_that_left_the_source_again_has_the_address_written_once_by_the_target(monkeypatch):
    _two_sides(monkeypatch, paused={"S": False, "T": False}, carries={"S": True, "T": False},
               moved={"S": True, "T": False}, homed="T",
               steps=[("carry", "T", True), ("sweep", "S", 0), ("carry", "S", False), ("sweep", "T", 0),
                      ("sweep", "S", 0), ("sweep", "T", 0)])


def test_an_address_of_an_earlier_version_two_live_clusters_carry_is_written_once_by_each_the_target_first(
        monkeypatch):
    _two_sides(monkeypatch, paused={"S": False, "T": False}, carries={"S": True, "T": True},
               moved={"S": False, "T": False}, homed="nowhere",
               steps=[("sweep", "T", 0), ("sweep", "S", 0), ("sweep", "T", 0)])


def test_a_live_claim_leaves_an_address_a_paused_claim_of_another_cluster_holds_to_that_cluster(monkeypatch):
    """Homed at a third cluster's object, held by the source's paused claim: the target's live claim does not take
    it over (it would be taken twice: by the target, then by the source unpaused, and the target would write it
    again to hold it); the source, unpaused, takes it, and the target holds it live, one write each."""
    _two_sides(monkeypatch, paused={"S": True, "T": False}, carries={"S": True, "T": True},
               moved={"S": False, "T": False}, homed="elsewhere",
               steps=[("sweep", "S", 0), ("pause", "S", False), ("sweep", "T", 0), ("sweep", "S", 0),
                      ("sweep", "T", 0)])


def test_a_claim_back_at_the_source_keeps_its_address_from_the_live_copy_where_it_went_writing_it_once(monkeypatch):
    """Its claim seen leave for a move, the source took the home off; the claim back (moved back, or restored),
    the source homes it first come (``from=`` its own home), and the live copy in the target, refused, holds it
    live: one write each, not a take over and a hold written after it."""
    _two_sides(monkeypatch, paused={"S": False, "T": False}, carries={"S": False, "T": True},
               moved={"S": True, "T": False}, homed="S",
               steps=[("sweep", "S", 0), ("carry", "S", True), ("sweep", "S", 0), ("sweep", "T", 0),
                      ("sweep", "S", 0)])


def test_a_take_its_source_then_gives_while_its_cluster_is_here_is_written_once_by_the_taker(monkeypatch):
    """The source's live claim takes over the address homed at the target's Cluster (``from=``); the target, which saw
    its own claim leave for a move and cannot tell that take from the move's, gives it (``moved-from=``, marked
    ``mid-move``: its Cluster is still here). The source's next sweep leaves it as it is: the mark's age is read at
    its release, not written off by a sweep."""
    _two_sides(monkeypatch, paused={"S": False, "T": False}, carries={"S": True, "T": False},
               moved={"S": False, "T": True}, homed="T",
               steps=[("sweep", "S", 0), ("sweep", "T", 0), ("sweep", "S", 0), ("sweep", "S", 20)])


def test_the_source_takes_the_home_off_a_long_description_within_netboxs_limit():
    """``moved-from=`` is longer than ``home=``: the description, at NetBox's limit already, is cut at its end (the
    claim's name), and a ``mid-move`` mark stays readable."""
    long = claim("m" * 253, "c1", ns="n" * 63)
    item = Found(3, "192.0.2.3/24", "k-m", description(Home("Cluster", C1), long))
    assert len(item.description) == MAX_DESCRIPTION
    for state, mid_move in ((home_state([("Cluster", cluster("c1", C1, paused=True, ns="n" * 63))]), True),
                            (home_state([]), False)):
        [(_, text)] = disown([item], {"k-m"}.__contains__, {}.get, state, left_from=lambda key: [C1],
                             confirmed_at=EPOCH)
        assert len(text) <= MAX_DESCRIPTION and home_in(text) is None and given_mid_move(text) == mid_move, text
        assert text.startswith(f"metal3-ipam moved-from=Cluster:{C1} "), text
