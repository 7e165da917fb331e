"""The sweep of NetBox addresses no claim carries any more, against the real API server and the real NetBox.

A controller sweeping every 2 s serves a NetBoxIPPool whose claims belong to three Clusters. Claims are
made to vanish without their release (their finalizers taken off by hand), as a claim does when it is
deleted by hand past its finalizer, and as clusterctl move takes it from the source cluster. The sweep
releases exactly the addresses homed at a Cluster of this cluster that is not paused; never one of a
Cluster gone (moved away), of a paused Cluster (a move under way), of a live claim, of another owner,
nor one without a key.
"""

from __future__ import annotations

import uuid

from controller_fixtures import CAPI, CLUSTER, Kube
from metal3_ipam.core import kinds
from metal3_ipam.poolkinds.netbox.source import KEY_FIELD, owned_key
from metal3_ipam.poolkinds.netbox.pool import KEY_ANNOTATION
from metal3_ipam.poolkinds.netbox.sweep import Home, home_in
from metal3_ipam.testing.waiting import eventually
from netbox_fixtures import NETBOX, addresses_in, holding, key_of, netbox_pool, owner, put_secret, seeded


def claim_of(kube: Kube, name: str, cluster: str, annotations: dict | None = None) -> dict:
    return kube.capi_claim(name, "nb", group=NETBOX[0], kind="NetBoxIPPool", annotations=annotations,
                           labels={kinds.CLUSTER_NAME_LABEL: cluster})


def vanish(kube: Kube, name: str) -> None:
    """The claim goes without its release: its finalizers taken off, then deleted."""
    kube.delete_past_finalizers(CAPI, "ipaddressclaims", name)


def test_the_sweep_releases_only_what_no_claim_of_this_cluster_will_ask_for(controller_factory, kube, netbox,
                                                                            api_client):
    net = seeded(netbox, 27)
    who = owner()
    put_secret(api_client, kube.ns, "netbox", netbox.token)
    clusters = {name: kube.cluster(name)["metadata"]["uid"] for name in ("home", "moved", "paused")}
    ctl = controller_factory(["-n", kube.ns, "--netbox-owner", who, "--netbox-sweep-seconds", "2",
                              "--netbox-release-grace-seconds", "0"])  # marked released, then released
    netbox_pool(kube, "nb", netbox.url, net, gateway=str(net[1]))
    names = {"kept": "home", "leaked": "home", "moved-away": "moved", "moving": "paused"}
    for name, cluster in names.items():
        claim_of(kube, name, cluster)
    for name in names:
        kube.capi_bound(name, timeout=90)
    keys = {name: key_of(kube, name) for name in names}
    address = {name: holding(netbox, owned_key(who, keys[name]))[0] for name in names}
    for name, cluster in names.items():  # each address says its claim and its home
        assert home_in(address[name]["description"]) == Home("Cluster", clusters[cluster]), address[name]
        assert f"claim {kube.ns}/{name}" in address[name]["description"]

    # Addresses the sweep must never touch: another owner's key, no key, each homed at this cluster's Cluster.
    home_text = address["leaked"]["description"]
    foreign = netbox.api("POST", "ipam/ip-addresses/", {
        "address": f"{net[20]}/{net.prefixlen}", "status": "active", "description": home_text,
        "custom_fields": {KEY_FIELD: owned_key(owner(), uuid.uuid4().hex)}})
    keyless = netbox.api("POST", "ipam/ip-addresses/", {
        "address": f"{net[21]}/{net.prefixlen}", "status": "active", "description": home_text})
    # One of this owner's keys that no claim ever carried (an allocation carried out after its claim went).
    late = netbox.api("POST", "ipam/ip-addresses/", {
        "address": f"{net[22]}/{net.prefixlen}", "status": "active", "description": home_text,
        "custom_fields": {KEY_FIELD: owned_key(who, uuid.uuid4().hex)}})

    # A Cluster paused for a move and one moved away: their claims vanish first, so they have been the
    # sweep's to judge longer than the leaked claim's address when that goes.
    kube.patch(CLUSTER, "clusters", "paused", {"spec": {"paused": True}})
    vanish(kube, "moving")
    vanish(kube, "moved-away")
    kube.delete(CLUSTER, "clusters", "moved")
    kube.gone(CLUSTER, "clusters", "moved", timeout=30)
    vanish(kube, "leaked")

    ids = lambda: {a["id"] for a in addresses_in(netbox, net).values()}  # noqa: E731
    eventually(lambda: address["leaked"]["id"] not in ids() and late["id"] not in ids(), timeout=60,
               what="the sweep to release the leaked claim's address and the late allocation's")
    left = ids()
    for name in ("kept", "moved-away", "moving"):
        assert address[name]["id"] in left, f"{name}'s address was released"
    assert foreign["id"] in left and keyless["id"] in left
    assert kube.capi_ipaddress("kept") is not None
    assert "released" in ctl.log_text() and "marked released" in ctl.log_text()

    # The move that paused its Cluster is given up: unpaused, its claim gone, its address is leaked here.
    kube.patch(CLUSTER, "clusters", "paused", {"spec": {"paused": False}})
    eventually(lambda: address["moving"]["id"] not in ids(), timeout=60,
               what="the sweep to release the address of the unpaused Cluster's vanished claim")
    left = ids()
    assert {address["kept"]["id"], address["moved-away"]["id"], foreign["id"], keyless["id"]} <= left


def test_a_claim_moved_in_finds_its_address_and_homes_it_here(controller_factory, kube, netbox, api_client):
    """The key's address was homed at another cluster's Cluster (the source of a move): the claim that
    arrives carrying that key is bound to that same address, which is homed here from then on."""
    net = seeded(netbox, 28)
    who = owner()
    put_secret(api_client, kube.ns, "netbox", netbox.token)
    uid = kube.cluster("c1")["metadata"]["uid"]
    key = uuid.uuid4().hex
    elsewhere = f"metal3-ipam home=Cluster:{uuid.uuid4()} claim source/m"
    made = netbox.api("POST", "ipam/ip-addresses/", {
        "address": f"{net[5]}/{net.prefixlen}", "status": "active", "description": elsewhere,
        "custom_fields": {KEY_FIELD: owned_key(who, key)}})
    controller_factory(["-n", kube.ns, "--netbox-owner", who, "--netbox-sweep-seconds", "2"])
    netbox_pool(kube, "nb", netbox.url, net)
    claim_of(kube, "m", "c1", annotations={KEY_ANNOTATION: key})
    bound = kube.capi_bound("m", timeout=90)
    assert bound["spec"]["address"] == str(net[5])
    (now,) = holding(netbox, owned_key(who, key))
    assert now["id"] == made["id"]
    assert home_in(now["description"]) == Home("Cluster", uid), now["description"]
