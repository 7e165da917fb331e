"""NetBox holds and allocation keys copied onto other claims across a ``clusterctl move`` (SPEC §10.1, §10.3,
§10.4): a copy of the key never lifts the hold of the moved claim's paused copy, never takes the address of a
claim that left for a move (nor releases it), and the claim coming back takes its address again."""

from __future__ import annotations


from metal3_ipam.core import kinds
from metal3_ipam.core import objects as o
from metal3_ipam.poolkinds.netbox.pool import KEY_ANNOTATION
from metal3_ipam.poolkinds.netbox.pool import NETBOX_IP_POOL
from metal3_ipam.poolkinds.netbox.sweep import Found, Home, description, held_in

from ipam_objects import capi_claim, user_delete
from two_namespaces import NS2 as OTHER, TwoNamespaces
from outside_world import claim, ready
from sweep_sides import (C1, SP, T1, TP, ClusterSide, SharedNetBox, cluster_c1, keyed_claim, move_away,
                         shared_netbox_pool)


# --------------------------------------------------------------------------- the adapter's sweep, two clusters


def test_a_copy_of_the_key_in_the_target_does_not_lift_the_hold_of_its_paused_moved_claim():
    """Order of events:

    1. A move S -> T: T's Cluster paused, T holds the copy ``t/m`` of claim ``m`` (key ``k``). S's controller
       was down while the move deleted ``ns/m``, so the address is still homed at S's Cluster C1.
    2. T's sweep marks it ``held=Cluster:T1`` (as designed).
    3. A manifest of ``m`` copied with its key annotation is applied in another namespace of T (refused there
       as a copy of ``m``'s key: ``m`` is still live and paused).
    4. T's next sweep: ``NetBoxPools._describe(k)`` sees two carriers and answers None, so ``held_by`` finds
       "no paused claim carries the key" and takes T's own hold off.
    5. S's Cluster is unpaused for the retry of the move (no claim of S carries ``k``): S's sweep, two
       sightings a grace apart, releases the address that the live paused claim ``t/m`` holds in T.
    """
    netbox = SharedNetBox(Found(3, "10.0.0.3/24", "k", description(Home("Cluster", C1), keyed_claim("m", "k", "ns"))))
    target = ClusterSide(netbox, cluster_c1(T1, True, "t"), shared_netbox_pool(TP, "t"), keyed_claim("m", "k", "t"))
    source = ClusterSide(netbox, cluster_c1(C1, False, "ns"), shared_netbox_pool(SP, "ns"))
    target.sweep()
    assert held_in(netbox.items[3].description) == Home("Cluster", T1)

    target.inventory.upsert(keyed_claim("copy", "k", "t2", cluster=None))  # a copy of m's manifest, key and all
    target.sweep()
    for _ in range(3):
        source.sweep()
    assert target.inventory.get(kinds.CAPI_CLAIM, "t", "m") is not None  # t/m lives, paused, holding the IP
    assert netbox.released == [], "the source released the address a live claim of the target holds"
    assert held_in(netbox.items[3].description) is not None


# --------------------------------------------------------------------------- the claim lifecycle, the source side


def test_a_copy_refused_for_a_key_whose_claim_left_for_a_move_does_not_take_the_moved_address():
    """Order of events (all in the source cluster S, whose controller runs):

    1. Claim ``default/m`` carries key ``k1`` and is bound to 10.0.0.2 (NetBox holds it for ``k1``).
    2. A copy of its manifest, key annotation and all, is applied as ``other/copy``: refused, naming ``m``.
    3. ``clusterctl move`` of namespace ``default`` to T: ``m`` deleted with delete-for-move (its key is
       remembered in ``Inventory.moved_away``: the address is the copy's in T now, where ``m`` keeps 10.0.0.2).
    4. ``other/copy`` is woken (``_wake_carriers`` / the ledger's ``pending_answers``, or an audit) and, the only
       carrier of ``k1`` left here, asks NetBox for ``k1``: NetBox hands back m's address, and ``other/copy``
       is bound to 10.0.0.2 in S while ``m`` holds 10.0.0.2 in T (two live claims, one IP: §10.1, §10.4).
    5. ``other/copy`` is deleted: its finalizer releases ``k1`` in NetBox, the address m still uses in T (§10.3).
    """
    m = claim("m")
    m["metadata"]["annotations"] = {KEY_ANNOTATION: "k1"}
    world = TwoNamespaces(m)
    world.settle()
    assert world.ipam.held == {"k1": "10.0.0.2"}
    world.api.load(capi_claim("copy", "nb", ns=OTHER, api_group=NETBOX_IP_POOL[0], kind=NETBOX_IP_POOL[1],
                              annotations={KEY_ANNOTATION: "k1"}))
    world.settle()
    copy = lambda: world.api.inventory.get(kinds.CAPI_CLAIM, OTHER, "copy")  # noqa: E731
    assert ready(copy())["status"] == "False"

    move_away(world, "m")
    assert list(world.api.inventory.moved_away) == ["k1"]
    world.settle()
    bound = [o.spec(a)["address"] for a in world.api.inventory.of_kind(kinds.CAPI_ADDRESS)
             if o.namespace(a) == OTHER]
    assert bound == [] and not (o.status(copy()) or {}).get("addressRef"), \
        f"other/copy was bound to {bound}: the address of m, which keeps it in the move's target"
    assert ready(copy())["status"] == "False"  # and says why

    user_delete(world.api, kinds.CAPI_CLAIM, "copy", ns=OTHER)
    world.settle()
    assert world.ipam.held == {"k1": "10.0.0.2"}, "released the NetBox address the moved claim m uses in T"

