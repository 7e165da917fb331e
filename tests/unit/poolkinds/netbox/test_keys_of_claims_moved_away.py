"""Breaking the memory of claims that left for ``clusterctl move`` (``Inventory.moved_away``), ``first_carrier``
and the sweep's holds (SPEC §10.1, §10.3, §10.4; docs/pools/netbox.md: "A key is one claim's", "The sweep")."""

from __future__ import annotations

from metal3_ipam.core import kinds
from metal3_ipam.core import objects as o
from metal3_ipam.poolkinds.netbox.pool import KEY_ANNOTATION
from metal3_ipam.poolkinds.netbox.pool import NETBOX_IP_POOL
from metal3_ipam.poolkinds.netbox.sweep import Found, Home, description, held_in, home_in

from ipam_objects import capi_claim, user_delete
from outside_world import claim, ready
from two_namespaces import NS2 as OTHER, TwoNamespaces
from sweep_sides import (C1, SP, T1, TP, ClusterSide, SharedNetBox, cluster_c1, keyed_claim, move_away,
                         shared_netbox_pool)


def _bound(world, ns):
    return sorted(o.spec(a)["address"] for a in world.api.inventory.of_kind(kinds.CAPI_ADDRESS)
                  if o.namespace(a) == ns)


def test_a_claim_moved_back_takes_its_address_again_when_its_copy_was_created_before_it_came_back():
    """Order of events (source cluster S, its controller running throughout; real creation times):

    1. t0: ``default/m`` (key k1) bound to 10.0.0.2.
    2. t1: a copy of m's manifest, key and all, applied as ``other/copy``: refused, naming m.
    3. ``clusterctl move`` S -> T: m deleted for move; ``moved_away[k1] = (default, m)``; copy refused.
    4. t2: move back T -> S: m created again here (new uid, creationTimestamp t2 > t1), key k1. ``upsert``
       drops the moved_away entry.
    5. Now m and copy both carry k1 and neither holds an address: ``first_carrier`` picks the one created
       first, the copy. The copy is served and bound to 10.0.0.2; m is refused ("carried by copy too").
    SPEC §10.4: after the move back m must keep its exact address; docs/pools/netbox.md promises "that claim
    coming back with its name and key (a move back) takes its address again".
    (The existing test passes only because it loads every object at one creationTimestamp, so that the
    tie is broken by namespace, "default" < "other".)"""
    m = claim("m")
    m["metadata"]["annotations"] = {KEY_ANNOTATION: "k1"}
    world = TwoNamespaces()
    world.api.now = "2030-01-01T00:00:00Z"
    world.api.load(m)
    world.settle()
    assert world.ipam.held == {"k1": "10.0.0.2"}
    world.api.now = "2030-01-01T00:01:00Z"
    world.api.load(capi_claim("copy", "nb", ns=OTHER, api_group=NETBOX_IP_POOL[0], kind=NETBOX_IP_POOL[1],
                              annotations={KEY_ANNOTATION: "k1"}))
    world.settle()
    move_away(world, "m")
    world.settle()
    copy = lambda: world.api.inventory.get(kinds.CAPI_CLAIM, OTHER, "copy")  # noqa: E731
    assert "clusterctl move" in ready(copy())["message"]

    world.api.now = "2030-01-02T00:00:00Z"  # the move back, a day later
    back = claim("m")
    back["metadata"].update(annotations={KEY_ANNOTATION: "k1"})
    world.api.load(back)
    world.settle()
    assert _bound(world, OTHER) == [], f"the copy was bound to {_bound(world, OTHER)}, m's address"
    assert ready(world.claim("m"))["status"] == "True", ready(world.claim("m"))
    assert _bound(world, "default") == ["10.0.0.2"]
    assert "carried by IPAddressClaim m" in ready(copy())["message"], ready(copy())

    # m deleted by hand now: released in NetBox as any claim; its copy may take the key over (a new address).
    user_delete(world.api, kinds.CAPI_CLAIM, "m")
    world.settle()
    assert world.claim("m") is None and list(world.api.inventory.moved_away) == []
    assert ready(copy())["status"] == "True" and list(world.ipam.held) == ["k1"], ready(copy())


def _left_for_move(side: ClusterSide, claim_obj: dict) -> None:
    """The source's watch sees ``claim_obj`` deleted for ``clusterctl move`` (annotated, then gone)."""
    gone = {**claim_obj, "metadata": {**claim_obj["metadata"], "resourceVersion": "2",
                                      "deletionTimestamp": "2030-01-01T00:00:00Z",
                                      "annotations": {**claim_obj["metadata"]["annotations"],
                                                      kinds.DELETE_FOR_MOVE_ANNOTATION: ""}}}
    side.inventory.upsert(gone)
    side.inventory.remove(gone)


def test_the_source_does_not_home_a_moved_claims_address_at_a_copy_it_refuses():
    """Order of events:

    1. ``clusterctl move`` of ``ns`` from S to T, finished: T's Cluster T1 unpaused, ``ns/m`` (key k) live
       there, bound; T homed the address at T1. S's controller ran through the move and saw ``ns/m`` leave
       (``moved_away[k] = (ns, m)``).
    2. A copy of m's manifest, key and all, is applied in S (``ns/copy``, same Cluster c1 of S, unpaused):
       the reconcile refuses it ("clusterctl move took it to another cluster").
    3. S's sweep: ``_describe(k)`` knows nothing of moved_away: the copy is the only carrier here, so
       ``rehome`` writes the address home at S's Cluster C1 (the refused copy's home).
    4. T's sweep homes it back at T1; S's next sweep at C1; ... one NetBox write per sweep on each side
       for as long as the copy lives (endless writes), although only one claim anywhere is served.
    Also: while homed at C1, S's sweep never ``disown``s it (a claim carries it), so nothing outside S's
    memory records that it moved away: after a restart of S, the address homed at a present, unpaused
    Cluster of S is released as soon as the copy goes, unless T rewrote it in between."""
    netbox = SharedNetBox(Found(3, "10.0.0.3/24", "k", description(Home("Cluster", T1), keyed_claim("m", "k", "ns"))))
    m_target = keyed_claim("m", "k", "ns")
    m_target["status"] = {"addressRef": {"name": "m"}}
    target = ClusterSide(netbox, cluster_c1(T1, False, "ns"), shared_netbox_pool(TP, "ns"), m_target)
    m_source = keyed_claim("m", "k", "ns")
    source = ClusterSide(netbox, cluster_c1(C1, False, "ns"), shared_netbox_pool(SP, "ns"), m_source)
    _left_for_move(source, m_source)
    assert source.inventory.moved_away.get("k") == ("ns", "m")
    source.inventory.upsert(keyed_claim("copy", "k", "ns"))  # refused by the reconcile: the key is m's

    homes = []
    for _ in range(3):
        source.sweep()
        homes.append(home_in(netbox.items[3].description))
        target.sweep()
        homes.append(home_in(netbox.items[3].description))
    assert netbox.released == []
    assert set(homes) == {Home("Cluster", T1)}, \
        f"the address was written back and forth between the two clusters at every sweep: {homes}"


def test_a_copy_created_before_the_moved_claim_in_the_target_does_not_lift_its_hold():
    """The change's own scenario (test_copied_keys_never_lift_a_hold), with the copy created *before* the moved claim's
    copy in the target (or in the same second, its namespace sorting first). ``first_carrier`` ranks by
    ``status.addressRef`` then creationTimestamp; the moved claim in T is paused, so T's controller has
    written no status on it yet (clusterctl creates it afresh), and the older copy is "the key's claim".

    1. T's Cluster T1 paused (a move S -> T stopped half-way), ``t/m`` (key k) its moved copy, created at t2.
       ``a/copy``, a copy of m's manifest, key and all, was applied in T at t1 < t2 (namespace ``a`` has no
       NetBoxIPPool ``nb``: it is refused, "pool not found"). S's controller was down while the move deleted
       ``ns/m``: the address is homed at S's Cluster C1.
    2. T's sweep: ``_describe(k)`` describes ``a/copy`` (no home: its pool is not there) -> ``held_by`` finds
       no paused claim's home -> no ``held=`` is written (or T's own is taken off).
    3. S's Cluster is unpaused for the retry; no claim of S carries k: S's sweep, two sightings a grace
       apart, releases the address ``t/m`` holds (SPEC §10.1/§10.4; docs/pools/netbox.md: a sweep never releases an
       address a live claim anywhere still uses)."""
    netbox = SharedNetBox(Found(3, "10.0.0.3/24", "k", description(Home("Cluster", C1), keyed_claim("m", "k", "ns"))))
    m = keyed_claim("m", "k", "t")
    m["metadata"]["creationTimestamp"] = "2030-01-01T00:00:02Z"
    target = ClusterSide(netbox, cluster_c1(T1, True, "t"), shared_netbox_pool(TP, "t"), m)
    source = ClusterSide(netbox, cluster_c1(C1, False, "ns"), shared_netbox_pool(SP, "ns"))
    target.sweep()
    assert held_in(netbox.items[3].description) == Home("Cluster", T1)  # as designed, with m alone

    copy = keyed_claim("copy", "k", "a", cluster=None)
    copy["metadata"]["creationTimestamp"] = "2030-01-01T00:00:01Z"  # applied before the move created t/m
    target.inventory.upsert(copy)
    target.sweep()
    for _ in range(3):
        source.sweep()
    assert netbox.released == [], "the source released the address the paused moved claim t/m holds in T"
    assert held_in(netbox.items[3].description) == Home("Cluster", T1)


def test_a_claim_moved_back_with_its_addresses_and_paused_cluster_is_not_doubled_by_its_older_copy():
    """F2 as ``clusterctl move`` really brings m back: its Cluster first (paused), then the claim, then its
    IPAddress objects (owners first), the Cluster unpaused last; the copy ``other/copy`` (created at t1,
    before m came back) is not paused.

    While m's Cluster is paused, the copy is decided: m holds no ``status.addressRef`` (clusterctl creates
    it afresh) and was created later, so the copy is "the key's claim"; the moved_away entry was dropped when
    m came back, so the copy asks NetBox for k1 and is bound to 10.0.0.2 (its lock lives in namespace
    ``other``: no name clash with m's). m, unpaused, keeps its moved-back lock and IPAddress at 10.0.0.2:
    two live claims show one IP (SPEC §10.1)."""
    c1 = {"apiVersion": "cluster.x-k8s.io/v1beta2", "kind": "Cluster",
          "metadata": {"name": "c1", "namespace": "default"}, "spec": {"paused": False}}
    m = claim("m")
    m["metadata"]["annotations"] = {KEY_ANNOTATION: "k1"}
    m["metadata"]["labels"] = {kinds.CLUSTER_NAME_LABEL: "c1"}
    world = TwoNamespaces()
    world.api.now = "2030-01-01T00:00:00Z"
    world.api.load(c1)
    world.api.load(m)
    world.settle()
    assert world.ipam.held == {"k1": "10.0.0.2"}
    moved = [dict(a) for a in [*world.api.inventory.of_kind(kinds.IPADDRESS),
                               *world.api.inventory.of_kind(kinds.CAPI_ADDRESS)] if o.namespace(a) == "default"]
    world.api.now = "2030-01-01T00:01:00Z"
    world.api.load(capi_claim("copy", "nb", ns=OTHER, api_group=NETBOX_IP_POOL[0], kind=NETBOX_IP_POOL[1],
                              annotations={KEY_ANNOTATION: "k1"}))
    world.settle()
    # The move S -> T: Cluster paused, claim and its addresses deleted for move, the Cluster deleted.
    cluster = world.api.inventory.get(kinds.CLUSTER, "default", "c1")
    world.api.inventory.upsert({**cluster, "metadata": {**cluster["metadata"], "resourceVersion": world.api._next_version()},
                                "spec": {"paused": True}})
    move_away(world, "m")
    world.api.inventory.remove(world.api.inventory.get(kinds.CLUSTER, "default", "c1"))
    world.settle()
    assert "clusterctl move" in ready(world.api.inventory.get(kinds.CAPI_CLAIM, OTHER, "copy"))["message"]

    # The move back T -> S, a day later: the Cluster (paused), the claim, its addresses; then unpaused.
    world.api.now = "2030-01-02T00:00:00Z"
    world.api.load({**c1, "spec": {"paused": True}})
    back = claim("m")
    back["metadata"].update(annotations={KEY_ANNOTATION: "k1"}, labels={kinds.CLUSTER_NAME_LABEL: "c1"})
    world.api.load(back)
    world.settle()
    for address in moved:
        meta = {k: v for k, v in address["metadata"].items() if k not in ("uid", "resourceVersion",
                                                                           "creationTimestamp")}
        world.api.load({**address, "metadata": meta})
    world.settle()
    cluster = world.api.inventory.get(kinds.CLUSTER, "default", "c1")
    world.api.inventory.upsert({**cluster, "metadata": {**cluster["metadata"], "resourceVersion": world.api._next_version()},
                                "spec": {"paused": False}})
    world.settle()
    shown = [(o.namespace(a), o.spec(a)["address"]) for a in world.api.inventory.of_kind(kinds.CAPI_ADDRESS)]
    assert sorted(shown) == [("default", "10.0.0.2")], f"one IP shown by two live claims: {shown}"
