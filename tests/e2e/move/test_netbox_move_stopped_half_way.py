"""The sweep across a ``clusterctl move`` that stops half-way, against the real API server and the real NetBox.

clusterctl moves a namespace in this order (``cmd/clusterctl/client/cluster/mover.go``): it pauses every
Cluster of it, creates the copies in the target, then deletes the source's objects group by group, the
deepest first (addresses and claims before pools and Clusters), each annotated
``clusterctl.cluster.x-k8s.io/delete-for-move``, deleted and stripped of its finalizers; the target's
Clusters are unpaused last. A group that fails to delete ends the move there, with no rollback: the source
keeps its Clusters (paused) and pools, and has lost its claims, whose copies live in the target. Here the
source is this cluster's namespace; the target is another namespace of the same API server with a Cluster of
its own (paused: the move stopped before unpausing it), a copy of the pool and of the claim with its key,
served by a second controller scoped to it (``-n``) with the same NetBox owner, or down. The same two
namespaces stand for a move restored from a directory while the source runs (both claims live).
"""

from __future__ import annotations

import pytest

from controller_fixtures import CAPI, CLUSTER, CLUSTER_NAME_LABEL, METAL3, Kube
from metal3_ipam.core import kinds
from metal3_ipam.poolkinds.netbox.source import KEY_FIELD, owned_key
from metal3_ipam.poolkinds.netbox.pool import KEY_ANNOTATION
from metal3_ipam.poolkinds.netbox.sweep import Home, held_in, home_in, swept_at
from metal3_ipam.testing.waiting import eventually
from netbox_fixtures import NETBOX, holding, key_of, netbox_pool, owner, put_secret, seeded

SWEEP = "2"  # seconds between sweeps; the grace is 0.9 of it


def delete_for_move(kube: Kube, gv: tuple[str, str], plural: str, name: str) -> None:
    """What clusterctl does to a source object once its copy is in the target: annotate, delete, strip."""
    kube.patch(gv, plural, name, {"metadata": {"annotations": {kinds.DELETE_FOR_MOVE_ANNOTATION: ""}}})
    kube.delete(gv, plural, name)
    if kube.get(gv, plural, name) is not None:
        kube.patch(gv, plural, name, {"metadata": {"finalizers": None}})
    kube.gone(gv, plural, name, timeout=30)


def moved_away(kube: Kube, claim: str) -> None:
    """The claim and what it owns deleted for the move, the deepest first (its addresses, then itself)."""
    key = key_of(kube, claim)
    for lock in kube.addresses():
        if (lock["metadata"].get("annotations") or {}).get(KEY_ANNOTATION) == key:
            delete_for_move(kube, METAL3, "ipaddresses", lock["metadata"]["name"])
    if kube.capi_ipaddress(claim) is not None:
        delete_for_move(kube, CAPI, "ipaddresses", claim)
    delete_for_move(kube, CAPI, "ipaddressclaims", claim)


def sweeps_after(ctl, offset: int, count: int) -> None:
    eventually(lambda: ctl.log_since(offset).count("swept NetBox at") >= count, timeout=60,
               what=f"{count} sweeps")


def test_a_move_stopped_half_way_leaves_the_addresses_of_claims_of_no_cluster(controller_factory, kube, netbox,
                                                                             api_client):
    """A claim of no Cluster is homed at its NetBoxIPPool, which no Cluster pauses. The move stops after
    deleting the claims and before the pools: the pool is still here, not paused, no claim carries the key.
    The address is the moved claim's, in the target; the sweep must leave it."""
    net = seeded(netbox, 28)
    who = owner()
    put_secret(api_client, kube.ns, "netbox", netbox.token)
    kube.cluster("c1")
    ctl = controller_factory(["-n", kube.ns, "--netbox-owner", who, "--netbox-sweep-seconds", SWEEP])
    pool = netbox_pool(kube, "nb", netbox.url, net)
    kube.capi_claim("free", "nb", group=NETBOX[0], kind="NetBoxIPPool")
    kube.capi_bound("free", timeout=90)
    value = owned_key(who, key_of(kube, "free"))
    (address,) = holding(netbox, value)
    assert home_in(address["description"]) == Home("NetBoxIPPool", pool["metadata"]["uid"])

    kube.patch(CLUSTER, "clusters", "c1", {"spec": {"paused": True}})  # the move begins
    moved_away(kube, "free")  # ... and stops before deleting the pool and the Cluster
    offset = ctl.log_size()
    sweeps_after(ctl, offset, 5)
    assert [a["id"] for a in holding(netbox, value)] == [address["id"]], \
        "the sweep released the address of a claim moved to another cluster"


def bound(controller_factory, kube, netbox, api_client, *options: str):
    """A claim of Cluster c1 bound by a controller sweeping every 2 s (with ``options``), its address homed at
    c1. Returns the controller, the key's value in NetBox and the address."""
    net = seeded(netbox, 28)
    who = owner()
    put_secret(api_client, kube.ns, "netbox", netbox.token)
    uid = kube.cluster("c1")["metadata"]["uid"]
    ctl = controller_factory(["-n", kube.ns, "--netbox-owner", who, "--netbox-sweep-seconds", SWEEP, *options])
    netbox_pool(kube, "nb", netbox.url, net)
    kube.capi_claim("m", "nb", group=NETBOX[0], kind="NetBoxIPPool", labels={kinds.CLUSTER_NAME_LABEL: "c1"})
    kube.capi_bound("m", timeout=90)
    value = owned_key(who, key_of(kube, "m"))
    (address,) = holding(netbox, value)
    assert home_in(address["description"]) == Home("Cluster", uid)
    return ctl, value, address


def half_way(controller_factory, kube, netbox, api_client):
    """:func:`bound`, then a move of the namespace that stops after deleting the claim, and three sweeps."""
    ctl, value, address = bound(controller_factory, kube, netbox, api_client)
    kube.patch(CLUSTER, "clusters", "c1", {"spec": {"paused": True}})  # the move begins
    moved_away(kube, "m")  # ... and stops before deleting the pool and the Cluster
    offset = ctl.log_size()
    sweeps_after(ctl, offset, 3)
    assert [a["id"] for a in holding(netbox, value)] == [address["id"]]  # paused: left alone
    return ctl, value, address


def test_a_move_retried_after_stopping_half_way_keeps_the_moved_claims_addresses(controller_factory, kube,
                                                                                  netbox, api_client):
    """clusterctl refuses to move a paused Cluster (checkClustersNotPaused), so a retry begins by unpausing
    the source's. Its claim gone, the address is homed at a Cluster here, present and not paused: the sweep
    must still leave it, its claim lives in the target (whose Cluster stays paused: nothing homes it there)."""
    ctl, value, address = half_way(controller_factory, kube, netbox, api_client)
    kube.patch(CLUSTER, "clusters", "c1", {"spec": {"paused": False}})  # to run clusterctl move again
    offset = ctl.log_size()
    sweeps_after(ctl, offset, 5)
    assert [a["id"] for a in holding(netbox, value)] == [address["id"]], \
        "the sweep released the address of a claim moved to another cluster"


def started_for_the_retry(ctl, kube: Kube) -> None:
    """The Cluster unpaused (clusterctl moves no paused Cluster) while the controller is stopped, the
    controller started again, five of its sweeps."""
    kube.patch(CLUSTER, "clusters", "c1", {"spec": {"paused": False}})
    ctl.start()
    sweeps_after(ctl, ctl.log_size(), 5)


def test_a_source_restarted_before_the_retry_of_a_move_keeps_the_moved_claims_addresses(controller_factory, kube,
                                                                                         netbox, api_client):
    """The source saw the claim leave for the move and took the home off its address (NetBox keeps that):
    restarted, it knows of no move, finds the Cluster unpaused and no claim, and still leaves the address."""
    ctl, value, address = half_way(controller_factory, kube, netbox, api_client)
    (now,) = holding(netbox, value)
    assert home_in(now["description"]) is None and f"claim {kube.ns}/m" in now["description"], now["description"]
    ctl.stop()
    started_for_the_retry(ctl, kube)
    assert [a["id"] for a in holding(netbox, value)] == [address["id"]], \
        "the sweep released the address of a claim moved to another cluster"


@pytest.fixture
def target(kube, api_client):
    """The namespace standing for the target cluster of a move (deleted afterwards, not waited for)."""
    other = Kube(api_client, f"{kube.ns}-target")
    other.core.create_namespace({"metadata": {"name": other.ns}})
    yield other
    other.core.delete_namespace(other.ns)


def copied(kube: Kube, target: Kube, netbox, api_client, key: str) -> str:
    """What clusterctl creates in the target before it deletes anything in the source: the Cluster (paused,
    as in the source), the pool and the claim with its key (a Secret of the target's own holds the token).
    Returns the target Cluster's uid."""
    put_secret(api_client, target.ns, "netbox", netbox.token)
    uid = target.cluster("c1", paused=True)["metadata"]["uid"]
    pool = kube.get(NETBOX, "netboxippools", "nb")
    target.create(NETBOX, "netboxippools", {"apiVersion": "/".join(NETBOX), "kind": "NetBoxIPPool",
                                            "metadata": {"name": "nb"}, "spec": pool["spec"]})
    target.capi_claim("m", "nb", group=NETBOX[0], kind="NetBoxIPPool", annotations={KEY_ANNOTATION: key},
                      labels={CLUSTER_NAME_LABEL: "c1"})
    return uid


def held_while_the_source_was_down(controller_factory, kube, target, netbox, api_client, *options: str):
    """:func:`bound`; the source controller stopped; the move pauses the Cluster, copies the pool and claim to
    the target (whose controller runs, sweeping every 2 s, a lease of its own), deletes the claim and stops;
    the target's sweep marks the address held by its paused Cluster; the source started again for the retry
    (its Cluster unpaused), five of its sweeps. Returns the source and target controllers, the key's value,
    the address as bound and as held, and the target Cluster's uid. ``options``: the source controller's."""
    ctl, value, address = bound(controller_factory, kube, netbox, api_client, *options)
    source_uid = kube.get(CLUSTER, "clusters", "c1")["metadata"]["uid"]
    who, key = value.split("/", 1)
    ctl.stop()
    kube.patch(CLUSTER, "clusters", "c1", {"spec": {"paused": True}})  # the move begins
    target_uid = copied(kube, target, netbox, api_client, key)
    target_ctl = controller_factory(["-n", target.ns, "--netbox-owner", who, "--netbox-sweep-seconds", SWEEP,
                                     "--leader-election-namespace", target.ns], name="target")
    moved_away(kube, "m")  # ... and stops before deleting the pool and the Cluster, and unpausing the target's
    eventually(lambda: [held_in(a["description"]) for a in holding(netbox, value)] == [Home("Cluster", target_uid)],
               timeout=60, what="the target's sweep to mark the address held by its paused claim")
    (held,) = holding(netbox, value)
    assert home_in(held["description"]) == Home("Cluster", source_uid), held["description"]
    # How an operator finds held addresses (docs/pools/netbox.md): this owner's, whose description names a hold.
    mine = f"ipam/ip-addresses/?cf_{KEY_FIELD}__isw={who}/"
    assert [a["id"] for a in netbox.api("GET", mine + "&description__ic=held%3D")["results"]] == [held["id"]]
    assert netbox.api("GET", mine + "&description__ic=held%3DNetBoxIPPool")["results"] == []  # NetBox filters
    started_for_the_retry(ctl, kube)
    assert [a["id"] for a in holding(netbox, value)] == [address["id"]], \
        "the sweep released the address of a claim moved to another cluster"
    assert holding(netbox, value)[0]["description"] == held["description"]  # written once, by the target
    return ctl, target_ctl, value, address, held, target_uid


def test_a_source_down_during_a_move_stopped_half_way_keeps_the_moved_claims_addresses(controller_factory, kube,
                                                                                      target, netbox, api_client):
    """The source controller is down while the move deletes the claim: it never sees it leave, and the
    address keeps its home, the source's Cluster. The target's controller runs: its copy of the claim carries
    the key of an address homed elsewhere while its own Cluster is paused, so its sweep marks the address held
    there (``held=Cluster:<uid>``, the home left as it is). The source, started again once its Cluster is
    unpaused for the retry, finds no claim carrying the key and leaves the address all the same; when the
    retry finishes (the target's Cluster unpaused), the target homes it at its own Cluster."""
    ctl, target_ctl, value, address, _, target_uid = held_while_the_source_was_down(
        controller_factory, kube, target, netbox, api_client)
    target.patch(CLUSTER, "clusters", "c1", {"spec": {"paused": False}})  # the move's retry finishes there
    target.capi_bound("m", timeout=90)
    eventually(lambda: [(home_in(a["description"]), held_in(a["description"])) for a in holding(netbox, value)]
               == [(Home("Cluster", target_uid), None)], timeout=60, what="the target to home the address")
    sweeps_after(ctl, ctl.log_size(), 2)
    assert [a["id"] for a in holding(netbox, value)] == [address["id"]]
    assert "no claim carries its key" not in ctl.log_text() + target_ctl.log_text()


def test_a_hold_whose_copies_were_deleted_is_taken_off_and_the_address_swept(controller_factory, kube, target,
                                                                             netbox, api_client):
    """The move given up instead: the target's copy of the claim deleted past its finalizers (its Cluster
    stays). The target's next sweep takes its hold off; the address is then the source's leak (homed at its
    Cluster, unpaused, no claim carrying its key anywhere) and its sweep marks it released, then (the release
    grace 0 here) releases it."""
    ctl, target_ctl, value, _, held, _ = held_while_the_source_was_down(
        controller_factory, kube, target, netbox, api_client, "--netbox-release-grace-seconds", "0")
    target.delete_past_finalizers(CAPI, "ipaddressclaims", "m")
    eventually(lambda: holding(netbox, value) == [], timeout=60, what="the source's sweep to release the address")
    assert "no longer held by a paused claim here" in target_ctl.log_text()
    assert "no claim carries its key" in ctl.log_text()
    assert "marked released" in ctl.log_text()


def test_both_controllers_down_during_a_move_stopped_half_way_keeps_the_moved_claims_addresses(
        controller_factory, kube, target, netbox, api_client):
    ctl, value, address = bound(controller_factory, kube, netbox, api_client)
    ctl.stop()
    kube.patch(CLUSTER, "clusters", "c1", {"spec": {"paused": True}})  # the move begins
    """Both controllers are down while the move deletes the claim: the source never sees it leave, the target
    never holds the address. The source, started first once its Cluster is unpaused for the retry, finds the
    address homed at that Cluster with no claim carrying its key: its sweep only marks it released
    (``swept=<time>``, the IP still taken in NetBox) and deletes it only after the release grace (a day by
    default). The target's controller, started within it, takes the address back for its paused copy (held
    there, the mark gone, a Warning Event on the claim), and the source leaves it from then on."""
    who, key = value.split("/", 1)
    target_uid = copied(kube, target, netbox, api_client, key)  # the target's controller is down
    moved_away(kube, "m")  # ... and stops before deleting the pool and the Cluster
    started_for_the_retry(ctl, kube)
    assert [a["id"] for a in holding(netbox, value)] == [address["id"]], \
        "the sweep released the address of a claim moved to another cluster"
    (marked,) = holding(netbox, value)
    assert swept_at(marked["description"]) is not None, marked["description"]
    assert "marked released" in ctl.log_text()

    controller_factory(["-n", target.ns, "--netbox-owner", who, "--netbox-sweep-seconds", SWEEP,
                        "--leader-election-namespace", target.ns], name="target")
    eventually(lambda: [(held_in(a["description"]), swept_at(a["description"])) for a in holding(netbox, value)]
               == [(Home("Cluster", target_uid), None)], timeout=60,
               what="the target's sweep to take the marked address back for its paused claim")
    eventually(lambda: any(e.reason == "NetBoxAddressTakenBack" and e.involved_object.name == "m"
                           for e in target.events()), timeout=30, what="a Warning Event on the target's claim")
    (held,) = holding(netbox, value)
    sweeps_after(ctl, ctl.log_size(), 3)
    assert holding(netbox, value) == [held], "the source changed or released the address the target holds"


def test_an_address_two_clusters_live_claims_carry_is_released_only_once_neither_claim_lives(
        controller_factory, kube, target, netbox, api_client):
    """A move restored from a directory while the source runs: the source's claim stays, bound; its copy in the
    target, its Cluster unpaused, takes the address over (first come, ``from=`` the source's Cluster), and the
    source's sweep holds it for its live claim (``live-held=``). The target's copy deleted: its release leaves the
    address, which the source's claim is bound to. The source's claim deleted too: its hold goes, and the
    target's sweep releases the address (its release grace 0 here)."""
    ctl, value, address = bound(controller_factory, kube, netbox, api_client)
    source_uid = kube.get(CLUSTER, "clusters", "c1")["metadata"]["uid"]
    who, key = value.split("/", 1)
    target_uid = copied(kube, target, netbox, api_client, key)
    target.patch(CLUSTER, "clusters", "c1", {"spec": {"paused": False}})
    target_ctl = controller_factory(["-n", target.ns, "--netbox-owner", who, "--netbox-sweep-seconds", SWEEP,
                                     "--netbox-release-grace-seconds", "0", "--leader-election-namespace",
                                     target.ns], name="target")
    target.capi_bound("m", timeout=90)
    eventually(lambda: [(home_in(a["description"]), held_in(a["description"])) for a in holding(netbox, value)]
               == [(Home("Cluster", target_uid), Home("Cluster", source_uid))], timeout=60,
               what="the target to take the address over and the source's sweep to hold it for its live claim")

    target.delete(CAPI, "ipaddressclaims", "m")
    target.gone(CAPI, "ipaddressclaims", "m", timeout=60)
    sweeps_after(target_ctl, target_ctl.log_size(), 3)
    assert [a["id"] for a in holding(netbox, value)] == [address["id"]], \
        "the target's release deleted the address the source's live claim is bound to"
    assert kube.capi_ipaddress("m") is not None

    kube.delete(CAPI, "ipaddressclaims", "m")
    kube.gone(CAPI, "ipaddressclaims", "m", timeout=60)
    eventually(lambda: holding(netbox, value) == [], timeout=60,
               what="the target's sweep to release the address once no claim carries its key")
    assert "marked released" in target_ctl.log_text()
