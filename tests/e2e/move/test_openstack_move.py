"""``clusterctl move`` of a Cluster whose claims are floating-IP backed, there and back, a controller on each
side sharing one owner (the real clusterctl, two live control planes, the session's real Keystone and Neutron).

The claims go with their allocation keys: the side moved from forgets them and releases nothing in Neutron, the
side moved to binds each to the same floating IP without making a second one, and a claim deleted afterwards is
released where it lives. Both controllers sweep Neutron every 2 s all along: neither releases the floating IPs of
claims that left it for a move (their pool is no longer its own).
"""

from __future__ import annotations

import pytest

from controller_fixtures import CAPI, CLUSTER_NAME_LABEL, Kube
from metal3_ipam.poolkinds.openstack import pool as p
from metal3_ipam.testing.clusterctl import mark_clusters_provisioned, prepare_management_cluster
from metal3_ipam.testing.waiting import eventually
from move_fixtures import owner_ref
from openstack_fixtures import (FIPS, PLURAL, assert_one_floating_ip_each, fip_pool, held, key_of, owner,
                                put_clouds)

NAMES = [f"alpha-fip-{i}" for i in range(5)]


def released_nothing_in_two_sweeps(ctl, keys: dict[str, str], ids: dict[str, list[str]], openstack, who: str) -> None:
    """The side claims left for a move sweeps Neutron twice more and still holds every key's floating IP."""
    sweeps = ctl.log_text().count("swept the cloud of")
    eventually(lambda: ctl.log_text().count("swept the cloud of") >= sweeps + 2, timeout=30,
               what=f"two more sweeps by {ctl.name}")
    assert {name: [f["id"] for f in held(openstack, who, key)] for name, key in keys.items()} == \
        {name: ids[name] for name in keys}
    assert "no claim carries its key" not in ctl.log_text()


@pytest.fixture(autouse=True)
def clean(openstack):
    yield
    openstack.reset()


def test_move_of_floating_ip_claims_there_and_back_keeps_their_floating_ips(control_plane, control_plane_factory, namespace,
                                                             controllers, clusterctl, openstack):
    who = owner()
    prepare_management_cluster(control_plane)
    source = Kube(control_plane.api_client(), namespace)
    sweeping = ("--openstack-sweep-seconds", "2")
    # A pool of another namespace on the same cloud keeps the source sweeping it after the move.
    staying = f"{namespace}-stays"
    source.core.create_namespace({"metadata": {"name": staying}})
    stays = Kube(source.api_client, staying)
    put_clouds(source.api_client, staying, openstack.clouds_yaml("member"))
    fip_pool(stays, "stays")
    source_ctl = controllers(control_plane, "A", ("-n", namespace, "-n", staying, "--openstack-owner", who,
                                                  *sweeping))
    put_clouds(source.api_client, namespace, openstack.clouds_yaml("member"))
    cluster = source.cluster("alpha")
    fip_pool(source, "fips")
    for name in NAMES:
        source.create(CAPI, "ipaddressclaims", {
            "apiVersion": "/".join(CAPI), "kind": "IPAddressClaim",
            "metadata": {"name": name, "labels": {CLUSTER_NAME_LABEL: "alpha"},
                         "ownerReferences": [owner_ref(cluster, controller=False)]},
            "spec": {"clusterName": "alpha", "poolRef": {"apiGroup": p.GROUP, "kind": p.KIND, "name": "fips"}}})
    before = {name: source.capi_bound(name, timeout=90)["spec"]["address"] for name in NAMES}
    keys = {name: key_of(source, name) for name in NAMES}
    ids = {name: [f["id"] for f in held(openstack, who, keys[name])] for name in NAMES}
    assert all(len(found) == 1 for found in ids.values()), ids

    target_cp = control_plane_factory()
    prepare_management_cluster(target_cp)
    target = Kube(target_cp.api_client(), namespace)
    target.core.create_namespace({"metadata": {"name": namespace}})
    put_clouds(target.api_client, namespace, openstack.clouds_yaml("member"))  # a Secret of its own: not moved
    # Likewise a pool of another namespace keeps the target sweeping after the move back.
    target.core.create_namespace({"metadata": {"name": staying}})
    stays_in_target = Kube(target.api_client, staying)
    put_clouds(target.api_client, staying, openstack.clouds_yaml("member"))
    fip_pool(stays_in_target, "stays")
    target_ctl = controllers(target_cp, "B", ("-n", namespace, "-n", staying, "--openstack-owner", who, *sweeping))
    mark_clusters_provisioned(source.api_client, namespace)
    clusterctl.move(control_plane, target_cp, namespace, timeout=300, stop_on_retry=True).check()

    after = {name: target.capi_bound(name, timeout=90)["spec"]["address"] for name in NAMES}
    assert after == before
    assert {name: key_of(target, name) for name in NAMES} == keys
    eventually(lambda: source.list(CAPI, "ipaddressclaims") == [], timeout=30, what="the source emptied")
    # Nothing released by the source, nothing new made by the target: the same floating IP per key.
    assert {name: [f["id"] for f in held(openstack, who, keys[name])] for name in NAMES} == ids
    assert_one_floating_ip_each(target, openstack, who, NAMES)
    released_nothing_in_two_sweeps(source_ctl, {name: keys[name] for name in NAMES}, ids, openstack, who)

    gone = NAMES[0]
    target.custom.delete_namespaced_custom_object(*CAPI, namespace, "ipaddressclaims", gone)
    target.gone(CAPI, "ipaddressclaims", gone, timeout=60)
    # Released at once when the target's sweep took the floating IP over from the source's home already, else
    # marked left and released by a later sweep of the target (the source answers for no claim of it).
    eventually(lambda: held(openstack, who, keys[gone]) == [], timeout=60,
               what=f"the floating IP of {gone} released by the target")
    assert_one_floating_ip_each(target, openstack, who, NAMES[1:])

    # And back, both controllers still running: the same floating IPs, nothing released, nothing new.
    left = NAMES[1:]
    put_clouds(source.api_client, namespace, openstack.clouds_yaml("member"))
    mark_clusters_provisioned(target.api_client, namespace)
    clusterctl.move(target_cp, control_plane, namespace, timeout=300, stop_on_retry=True).check()
    back = {name: source.capi_bound(name, timeout=90)["spec"]["address"] for name in left}
    assert back == {name: before[name] for name in left}
    assert {name: key_of(source, name) for name in left} == {name: keys[name] for name in left}
    eventually(lambda: target.list(CAPI, "ipaddressclaims") == [], timeout=30, what="the target emptied")
    released_nothing_in_two_sweeps(target_ctl, {name: keys[name] for name in left}, ids, openstack, who)
    assert_one_floating_ip_each(source, openstack, who, left)
    again = left[0]
    source.custom.delete_namespaced_custom_object(*CAPI, namespace, "ipaddressclaims", again)
    source.gone(CAPI, "ipaddressclaims", again, timeout=60)
    eventually(lambda: held(openstack, who, keys[again]) == [], timeout=60,
               what=f"the floating IP of {again} released by the source")
    assert_one_floating_ip_each(source, openstack, who, left[1:])
    for kube in (stays, stays_in_target):
        kube.delete(FIPS, PLURAL, "stays")
        kube.gone(FIPS, PLURAL, "stays", timeout=60)
        kube.core.delete_namespace(staying)
