"""NetBox holds and allocation keys copied onto other claims across a ``clusterctl move`` (SPEC §10.1, §10.3,
§10.4): a copy of the key never lifts the hold of the moved claim's paused copy, never takes the address of a
claim that left for a move (nor releases it), and the claim coming back takes its address again."""

from __future__ import annotations

import asyncio

from metal3_ipam.poolkinds.netbox.asks import NetBoxPools
from metal3_ipam.core import kinds
from metal3_ipam.core import objects as o
from metal3_ipam.core.asking import Asking
from metal3_ipam.core.inventory import Inventory
from metal3_ipam.poolkinds.netbox.pool import KEY_ANNOTATION
from metal3_ipam.poolkinds.netbox.pool import NETBOX_IP_POOL
from metal3_ipam.poolkinds.netbox.sweep import Found, Home, description, held_in

from ipam_objects import capi_claim, set_meta, user_delete
from test_break_netbox_lifecycle import NS2 as OTHER, TwoNamespaces
from test_outside_allocation import World, claim, ready

C1 = "0b3e1f7a-1111-4c2d-9e8f-000000000001"  # the source's Cluster
T1 = "0b3e1f7a-1111-4c2d-9e8f-000000000003"  # the target's copy of it
SP, TP = "5a6b7c8d-2222-4c2d-9e8f-000000000003", "5a6b7c8d-2222-4c2d-9e8f-000000000004"


# --------------------------------------------------------------------------- the adapter's sweep, two clusters

def _cluster(uid: str, paused: bool, ns: str) -> dict:
    return {"apiVersion": "cluster.x-k8s.io/v1beta2", "kind": "Cluster",
            "metadata": {"name": "c1", "namespace": ns, "uid": uid, "resourceVersion": "1"},
            "spec": {"paused": paused}}


def _pool(uid: str, ns: str) -> dict:
    return {"apiVersion": "netbox.metal3-ipam.io/v1alpha1", "kind": "NetBoxIPPool",
            "metadata": {"name": "nb", "namespace": ns, "uid": uid, "resourceVersion": "1", "generation": 1},
            "spec": {"server": {"url": "http://netbox.example", "tokenSecretRef": {"name": "token"}},
                     "source": {"prefix": "10.0.0.0/24"}}}


def _claim(name: str, key: str, ns: str, cluster: str | None = "c1") -> dict:
    labels = {kinds.CLUSTER_NAME_LABEL: cluster} if cluster else {}
    return {"apiVersion": "ipam.cluster.x-k8s.io/v1beta2", "kind": "IPAddressClaim",
            "metadata": {"name": name, "namespace": ns, "uid": f"uid-{ns}-{name}", "resourceVersion": "1",
                         "labels": labels, "annotations": {KEY_ANNOTATION: key}},
            "spec": {"poolRef": {"apiGroup": NETBOX_IP_POOL[0], "kind": NETBOX_IP_POOL[1], "name": "nb"}}}


class _NetBox:
    """One NetBox both clusters' controllers sweep (the owner is shared by every cluster a claim may move to)."""

    def __init__(self, *items: Found):
        self.items = {item.id: item for item in items}
        self.released: list[Found] = []


class _Asks:
    """NetBoxAsks.sweep as it behaves: list, choose, re-read by id, then release (if ``still``) or describe."""

    owner = "o"

    def __init__(self, netbox: _NetBox):
        self.netbox = netbox

    def pool_changed(self, model) -> None:
        pass

    async def sweep(self, model, choose, still=lambda item: True):
        listed = list(self.netbox.items.values())
        release, describe = choose(listed)
        released, described = [], []
        for item, text in [(i, None) for i in release] + describe:
            if self.netbox.items.get(item.id) != item:
                continue
            if text is None:
                if still(item):
                    del self.netbox.items[item.id]
                    self.netbox.released.append(item)
                    released.append(item)
            else:
                self.netbox.items[item.id] = Found(item.id, item.address, item.key, text)
                described.append((item, text))
        return len(listed), released, described


class _Side:
    """One cluster's controller: its watch-fed inventory and its NetBoxPools (the real adapter)."""

    def __init__(self, netbox: _NetBox, *objs: dict):
        self.now = 0.0
        self.inventory = Inventory()
        for obj in objs:
            self.inventory.upsert(obj)
        self.pools = NetBoxPools(_Asks(netbox), Asking(deadline=30), inventory=self.inventory, writer=None,
                                 wake=lambda *a: None, sweep_seconds=300, clock=lambda: self.now)

    def sweep(self) -> list[Found]:
        self.now += 300
        return asyncio.run(self.pools.sweep())


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
    netbox = _NetBox(Found(3, "10.0.0.3/24", "k", description(Home("Cluster", C1), _claim("m", "k", "ns"))))
    target = _Side(netbox, _cluster(T1, True, "t"), _pool(TP, "t"), _claim("m", "k", "t"))
    source = _Side(netbox, _cluster(C1, False, "ns"), _pool(SP, "ns"))
    target.sweep()
    assert held_in(netbox.items[3].description) == Home("Cluster", T1)

    target.inventory.upsert(_claim("copy", "k", "t2", cluster=None))  # a copy of m's manifest, key and all
    target.sweep()
    for _ in range(3):
        source.sweep()
    assert target.inventory.get(kinds.CAPI_CLAIM, "t", "m") is not None  # t/m lives, paused, holding the IP
    assert netbox.released == [], "the source released the address a live claim of the target holds"
    assert held_in(netbox.items[3].description) is not None


# --------------------------------------------------------------------------- the claim lifecycle, the source side

def _moved_away(world: World, name: str) -> None:
    """clusterctl move: delete-for-move, then the finalizers stripped; the claim and its addresses go here."""
    user_delete(world.api, kinds.CAPI_CLAIM, name, annotations={kinds.DELETE_FOR_MOVE_ANNOTATION: ""})
    if world.claim(name) is not None:
        set_meta(world.api, kinds.CAPI_CLAIM, name, finalizers=[])
        world.api.inventory.remove(world.claim(name))
    for address in [*world.api.inventory.of_kind(kinds.CAPI_ADDRESS), *world.api.inventory.of_kind(kinds.IPADDRESS)]:
        if o.name(address) == name or (o.claim_of_address(address) or (None, None))[1] == name:
            world.api.inventory.remove(address)


def test_a_copy_refused_for_a_key_whose_claim_left_for_a_move_does_not_take_the_moved_address():
    """Order of events (all in the source cluster S, whose controller runs):

    1. Claim ``default/m`` carries key ``k1`` and is bound to 10.0.0.2 (NetBox holds it for ``k1``).
    2. A copy of its manifest, key annotation and all, is applied as ``other/copy``: refused, naming ``m``.
    3. ``clusterctl move`` of namespace ``default`` to T: ``m`` deleted with delete-for-move (its key is
       remembered in ``Inventory.moved_away``: the address is the copy's in T now, where ``m`` keeps 10.0.0.2).
    4. ``other/copy`` is woken (``_wake_carriers`` / the ledger's ``awaiting``, or an audit) and, the only
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

    _moved_away(world, "m")
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

