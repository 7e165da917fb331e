"""``clusterctl move`` of a Cluster whose claims are NetBox-backed, a controller on each side sharing one
NetBox owner (the real clusterctl, two live control planes, the session's real NetBox).

The claims go with their allocation keys and their addresses: the source forgets them and releases
nothing in NetBox, the target binds each to the same IP without a second NetBox address, and a claim
deleted in the target afterwards is released there. Both controllers sweep NetBox every 2 s all along:
the source never releases the moved claims' addresses (their home, the source's Cluster, is paused, then
gone), and the target homes them at its own Cluster.
"""

from __future__ import annotations

from controller_fixtures import CAPI, CLUSTER, CLUSTER_NAME_LABEL, Kube
from metal3_ipam.poolkinds.netbox.source import owned_key
from metal3_ipam.poolkinds.netbox.sweep import Home, home_in
from metal3_ipam.testing.clusterctl import mark_clusters_provisioned, prepare_management_cluster
from metal3_ipam.testing.waiting import eventually
from netbox_fixtures import NETBOX, assert_one_netbox_address_each, holding, key_of, netbox_pool, owner, put_secret, seeded
from move_fixtures import owner_ref

NAMES = [f"alpha-nb-{i}" for i in range(6)]


def test_move_of_netbox_backed_claims_keeps_their_netbox_addresses(control_plane, control_plane_factory, namespace,
                                                                   controllers, clusterctl, netbox):
    net = seeded(netbox, 28)
    who = owner()
    prepare_management_cluster(control_plane)
    source = Kube(control_plane.api_client(), namespace)
    sweeping = ("--netbox-sweep-seconds", "2")
    # A pool of another namespace on the same NetBox keeps the source sweeping that server after the move.
    staying = f"{namespace}-stays"
    source.core.create_namespace({"metadata": {"name": staying}})
    put_secret(source.api_client, staying, "netbox", netbox.token)
    netbox_pool(Kube(source.api_client, staying), "stays", netbox.url, seeded(netbox, 29))
    source_ctl = controllers(control_plane, "A", ("-n", namespace, "-n", staying, "--netbox-owner", who, *sweeping))
    put_secret(source.api_client, namespace, "netbox", netbox.token)
    cluster = source.cluster("alpha")
    netbox_pool(source, "nb", netbox.url, net, gateway=str(net[1]))
    for name in NAMES:
        source.create(CAPI, "ipaddressclaims", {
            "apiVersion": "/".join(CAPI), "kind": "IPAddressClaim",
            "metadata": {"name": name, "labels": {CLUSTER_NAME_LABEL: "alpha"},
                         "ownerReferences": [owner_ref(cluster, controller=False)]},
            "spec": {"clusterName": "alpha",
                     "poolRef": {"apiGroup": "netbox.metal3-ipam.io", "kind": "NetBoxIPPool", "name": "nb"}}})
    before = {name: source.capi_bound(name, timeout=90)["spec"]["address"] for name in NAMES}
    keys = {name: key_of(source, name) for name in NAMES}
    ids = {name: [a["id"] for a in holding(netbox, owned_key(who, keys[name]))] for name in NAMES}
    assert all(len(found) == 1 for found in ids.values()), ids

    target_cp = control_plane_factory()
    prepare_management_cluster(target_cp)
    target = Kube(target_cp.api_client(), namespace)
    target.core.create_namespace({"metadata": {"name": namespace}})
    put_secret(target.api_client, namespace, "netbox", netbox.token)  # a Secret of its own: not moved
    controllers(target_cp, "B", ("-n", namespace, "--netbox-owner", who, *sweeping))
    mark_clusters_provisioned(source.api_client, namespace)
    clusterctl.move(control_plane, target_cp, namespace, timeout=300, stop_on_retry=True).check()

    after = {name: target.capi_bound(name, timeout=90)["spec"]["address"] for name in NAMES}
    assert after == before
    assert {name: key_of(target, name) for name in NAMES} == keys
    eventually(lambda: source.list(CAPI, "ipaddressclaims") == [], timeout=30, what="the source emptied")
    # Nothing released by the source, nothing new made by the target: the same NetBox address per key.
    assert {name: [a["id"] for a in holding(netbox, owned_key(who, keys[name]))] for name in NAMES} == ids
    assert_one_netbox_address_each(target, netbox, who, NAMES, net)
    # The target homes each address at its own Cluster; the source sweeps on meanwhile, and releases nothing.
    target_uid = target.get(CLUSTER, "clusters", "alpha")["metadata"]["uid"]
    eventually(lambda: all(home_in(a["description"]) == Home("Cluster", target_uid)
                           for name in NAMES for a in holding(netbox, owned_key(who, keys[name]))),
               timeout=60, what="the target to home the moved claims' addresses")
    sweeps = source_ctl.log_text().count("swept NetBox")
    eventually(lambda: source_ctl.log_text().count("swept NetBox") >= sweeps + 2, timeout=30,
               what="two more sweeps by the source")
    assert {name: [a["id"] for a in holding(netbox, owned_key(who, keys[name]))] for name in NAMES} == ids
    assert "no claim carries its key" not in source_ctl.log_text()

    gone = NAMES[0]
    target.custom.delete_namespaced_custom_object(*CAPI, namespace, "ipaddressclaims", gone)
    target.gone(CAPI, "ipaddressclaims", gone, timeout=60)
    assert holding(netbox, owned_key(who, keys[gone])) == []
    assert_one_netbox_address_each(target, netbox, who, NAMES[1:], net)
    # The other namespace's pool goes while its controller runs (its finalizer taken off), then the namespace.
    stays = Kube(source.api_client, staying)
    stays.delete(NETBOX, "netboxippools", "stays")
    stays.gone(NETBOX, "netboxippools", "stays", timeout=60)
    source.core.delete_namespace(staying)
