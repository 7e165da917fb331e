"""The sweep's judgement (poolkinds/netbox/sweep.py): which NetBox addresses of this owner to release, and which
never."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from metal3_ipam.poolkinds.netbox.sweep import (ABSENT, MAX_DESCRIPTION, PAUSED, PRESENT, Found, Home, Sweep, description,
                                    home_in, home_of, home_state, rehome)

UID = "0b3e1f7a-1111-4c2d-9e8f-000000000001"
OTHER = "0b3e1f7a-2222-4c2d-9e8f-000000000002"


def claim(name="c", ns="ns", cluster="c1"):
    labels = {"cluster.x-k8s.io/cluster-name": cluster} if cluster else {}
    return {"metadata": {"name": name, "namespace": ns, "labels": labels}, "spec": {}}


def found(i=1, key="k1", uid=UID, kind="Cluster"):
    return Found(i, f"192.0.2.{i}/24", key, description(Home(kind, uid), claim(f"c{i}")))


def test_a_claim_is_homed_at_its_cluster_else_at_its_pool():
    cluster = {"metadata": {"uid": UID}}
    pool = {"metadata": {"uid": OTHER}}
    assert home_of(claim(), cluster, pool) == Home("Cluster", UID)
    assert home_of(claim(cluster=None), None, pool) == Home("NetBoxIPPool", OTHER)
    assert home_of(claim(), None, pool) is None  # its Cluster not known yet: no home to write


def test_the_home_survives_a_long_claim_name_and_reads_back():
    text = description(Home("Cluster", UID), claim(name="x" * 253, ns="n" * 63))
    assert len(text) == MAX_DESCRIPTION
    assert home_in(text) == Home("Cluster", UID)
    assert home_in("allocated by metal3-ipam") is None and home_in(None) is None
    assert home_in(description(None, claim())) is None


def judge(sweep, items, *, carried=(), state=PRESENT, now=0.0):
    return sweep.judge(items, carried=lambda k: k in carried, home=lambda h: state, now=now)


def test_released_on_the_second_sighting_a_grace_apart():
    sweep = Sweep(grace=10)
    item = found()
    assert judge(sweep, [item], now=0) == []
    assert judge(sweep, [item], now=5) == []
    assert judge(sweep, [item], now=10) == [item]
    assert judge(sweep, [item], now=11) == []  # judged released: starts over should it still be listed


def test_a_sighting_interrupted_starts_over():
    sweep = Sweep(grace=10)
    item = found()
    judge(sweep, [item], now=0)
    judge(sweep, [item], carried={"k1"}, now=6)  # a claim carried it meanwhile
    assert judge(sweep, [item], now=12) == []
    assert judge(sweep, [item], now=22) == [item]
    changed = found(2)
    judge(sweep, [changed], now=30)
    rehomed = Found(changed.id, changed.address, changed.key, description(Home("Cluster", OTHER), claim()))
    assert judge(sweep, [rehomed], now=45) == []  # homed anew: another address as far as the sweep knows


@settings(max_examples=300, deadline=None)
@given(st.lists(st.tuples(st.integers(1, 6), st.sampled_from(["k1", "k2", "k3"]), st.sampled_from([UID, OTHER]),
                          st.booleans(), st.sampled_from([PRESENT, PAUSED, ABSENT]), st.booleans()),
                min_size=1, max_size=40),
       st.floats(1, 100))
def test_never_released_unless_unclaimed_and_homed_here_at_two_sightings_a_grace_apart(steps, grace):
    """Whatever the order of sightings: an address is released only when, at that sweep and at every sweep
    since one at least ``grace`` earlier, it was listed the same, carried by no claim, homed at an object
    present and not paused."""
    sweep = Sweep(grace=grace)
    history: dict[int, list[tuple[float, bool, Found | None]]] = {}
    now = 0.0
    for i, key, uid, carried, state, listed in steps:
        now += grace / 3
        item = Found(i, f"192.0.2.{i}/24", key, description(Home("Cluster", uid), claim()))
        released = sweep.judge([item] if listed else [], carried=lambda k: carried, home=lambda h: state, now=now)
        eligible = listed and not carried and state == PRESENT
        for other, seen in history.items():
            if other != i or not listed:
                seen.append((now, False, None))
        if listed:
            history.setdefault(i, []).append((now, eligible, item))
        for r in released:
            assert eligible and r == item
            run = []
            for at, ok, what in reversed(history[i]):
                if not ok or what != item:
                    break
                run.append(at)
            assert now - min(run) >= grace, (history[i], now)
            history[i] = []  # judged released: a sighting afterwards starts over


def test_home_state_reads_presence_and_pause():
    state = home_state([("Cluster", {"metadata": {"uid": UID}, "spec": {"paused": True}}),
                        ("Cluster", {"metadata": {"uid": OTHER}, "spec": {}}),
                        ("NetBoxIPPool", {"metadata": {"uid": "p1", "deletionTimestamp": "x"}})])
    assert state(Home("Cluster", UID)) == PAUSED
    assert state(Home("Cluster", OTHER)) == PRESENT
    assert state(Home("NetBoxIPPool", OTHER)) == ABSENT  # a uid is looked up with its kind
    assert state(Home("NetBoxIPPool", "p1")) == ABSENT  # being deleted


def test_an_address_of_a_claim_moved_in_is_homed_here_once_its_home_is_not_paused():
    moved_in = found(1, "k1", uid=OTHER)  # homed at the source's Cluster
    here = description(Home("Cluster", UID), claim("c1"))
    wanted = {"k1": here, "k2": description(None, claim("c2"))}.get
    items = [moved_in, found(2, "k2", uid=OTHER), found(3, "k3", uid=OTHER), found(4, "k1", uid=UID)]
    taken = here.replace(" claim ", f" from=Cluster:{OTHER} claim ", 1)  # so the source never takes it back
    assert rehome(items, wanted, lambda h: PRESENT) == [(moved_in, taken)]  # k2's home not known, k3 no claim's
    assert rehome(items, wanted, lambda h: PAUSED) == []  # a move under way
