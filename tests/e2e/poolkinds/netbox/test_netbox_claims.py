"""Claims of NetBoxIPPools served by the controller, against the real API server and the real NetBox.

The controller runs as ``metal3-ipam run``; NetBox is the session's (``netbox`` fixture). After each
scenario: every live claim of a NetBox pool has exactly one Cluster API IPAddress and exactly one NetBox
address carrying its key, at the same IP; a deleted claim's NetBox address is gone; the Metal3 pool's
claims are served beside them, also while NetBox is down; a NetBoxIPPool deleted while a claim waits goes
only once NetBox released that claim's key.
"""

from __future__ import annotations

import time

from controller_fixtures import CAPI, Kube, condition, controller_as_user, rules_with_ipaddress_verbs
from metal3_ipam.poolkinds.netbox.source import KEY_FIELD, owned_key
from metal3_ipam.poolkinds.netbox.pool import KEY_ANNOTATION
from metal3_ipam.testing.waiting import eventually
from netbox_fixtures import (NETBOX, addresses_in, assert_one_netbox_address_each, holding, key_of, netbox_claim,
                             netbox_pool, owner, put_secret, seeded)


def ready_reason(kube: Kube, name: str) -> tuple[str, str] | None:
    ready = condition(kube.capi_ipclaim(name), "Ready")
    return (ready["status"], ready["reason"]) if ready else None


def two_pools(controller_factory, kube: Kube, netbox, api_client, length: int, metal3_net: str):
    """A controller with an owner of its own, a NetBoxIPPool ``nb`` on a fresh NetBox prefix (its gateway
    the prefix's first address, which NetBox does not hold) and a Metal3 IPPool ``m``: (prefix, owner)."""
    net = seeded(netbox, length)
    who = owner()
    put_secret(api_client, kube.ns, "netbox", netbox.token)
    controller_factory(["-n", kube.ns, "--netbox-owner", who])
    netbox_pool(kube, "nb", netbox.url, net, gateway=str(net[1]))
    kube.pool("m", pools=[{"start": f"{metal3_net}.10", "end": f"{metal3_net}.60", "prefix": 24}])
    return net, who


def test_claims_of_a_netbox_pool_and_of_a_metal3_pool_at_once(controller_factory, kube, netbox, api_client,
                                                               namespace):
    net, who = two_pools(controller_factory, kube, netbox, api_client, 28, "192.168.7")
    nb_names = [f"nb-{i}" for i in range(6)]
    m_names = [f"m-{i}" for i in range(6)]
    for nb_name, m_name in zip(nb_names, m_names):
        netbox_claim(kube, nb_name, "nb")
        kube.capi_claim(m_name, "m")
    for name in nb_names + m_names:
        kube.capi_bound(name, timeout=90)
    assert_one_netbox_address_each(kube, netbox, who, nb_names, net)
    assert sorted(kube.capi_ipaddress(n)["spec"]["address"] for n in nb_names) == [str(net[i]) for i in range(2, 8)]

    def pool_ready():
        status = kube.get(NETBOX, "netboxippools", "nb").get("status") or {}
        ready = condition({"status": status}, "Ready")
        return status if ready and ready["reason"] == "Serving" and status.get("used") else None
    status = eventually(pool_ready, timeout=60, what="NetBoxIPPool nb Ready with NetBox's counts")
    assert status["size"] == "14" and condition({"status": status}, "Ready")["status"] == "True"

    gone = nb_names[:3]
    keys = {name: key_of(kube, name) for name in gone}
    for name in gone:
        kube.custom.delete_namespaced_custom_object(*CAPI, namespace, "ipaddressclaims", name)
    for name in gone:
        kube.gone(CAPI, "ipaddressclaims", name, timeout=60)
        assert holding(netbox, owned_key(who, keys[name])) == [], name
        assert kube.capi_ipaddress(name) is None
    assert_one_netbox_address_each(kube, netbox, who, nb_names[3:], net)
    for name in m_names:
        assert kube.capi_ipaddress(name) is not None


def test_netbox_stopped_mid_burst_and_started_again(controller_factory, kube, netbox, api_client, namespace):
    net, who = two_pools(controller_factory, kube, netbox, api_client, 27, "192.168.8")
    first = [f"nb-{i}" for i in range(4)]
    later = [f"nb-{i}" for i in range(4, 10)]
    for name in first:
        netbox_claim(kube, name, "nb")
    netbox.stop_server()
    try:
        stopped = time.monotonic()
        for name in later:
            netbox_claim(kube, name, "nb")
        m_names = [f"m-{i}" for i in range(6)]
        for name in m_names:
            kube.capi_claim(name, "m")
        for name in m_names:  # served while NetBox is down
            kube.capi_bound(name, timeout=30)
        metal3_served = time.monotonic() - stopped

        def some_say_why():
            reasons = {ready_reason(kube, name) for name in later}
            return reasons if ("False", "NetBoxUnreachable") in reasons else None
        reasons = eventually(some_say_why, timeout=60, what="a claim Ready=False NetBoxUnreachable")
        assert all(r is None or r[0] == "False" for r in reasons), reasons
        for name in later:
            assert kube.capi_ipaddress(name) is None
    finally:
        netbox.start_server()
    restarted = time.monotonic()
    for name in first + later:
        kube.capi_bound(name, timeout=180)
    print(f"Metal3 claims served {metal3_served:.1f}s after NetBox stopped; NetBox claims all bound "
          f"{time.monotonic() - restarted:.1f}s after it started again")
    assert_one_netbox_address_each(kube, netbox, who, first + later, net)


def test_killed_between_netboxs_answer_and_the_address_write_heals_by_lookup(controller_factory, control_plane, kube,
                                                                              netbox, api_client, namespace, tmp_path):
    """A controller that may not create IPAddresses gets NetBox's answer and cannot write it; SIGKILLed, a
    controller started afterwards finds the address by the claim's key: the same IP, one NetBox address."""
    net = seeded(netbox, 29)
    who = owner()
    put_secret(api_client, namespace, "netbox", netbox.token)
    netbox_pool(kube, "nb", netbox.url, net)  # no gateway to reserve: NetBox's first answer is the address
    netbox_claim(kube, "a", "nb")
    rules = rules_with_ipaddress_verbs(["get", "list", "watch", "patch", "delete"]) + [
        {"apiGroups": [NETBOX[0]], "resources": ["*"], "verbs": ["*"]},
        {"apiGroups": [""], "resources": ["secrets"], "verbs": ["get"]}]
    with controller_as_user(control_plane, api_client, namespace, tmp_path, "no-ipaddress-writer", rules) as proc:
        proc.args += ["--netbox-owner", who]
        proc.start()

        def asked():
            claim = kube.capi_ipclaim("a")
            key = (claim["metadata"].get("annotations") or {}).get(KEY_ANNOTATION)
            return holding(netbox, owned_key(who, key)) if key else None
        [made] = eventually(asked, timeout=60, what="NetBox's address for claim a's key")
        proc.kill()
    assert kube.capi_ipaddress("a") is None and kube.list(("ipam.metal3.io", "v1alpha1"), "ipaddresses") == []
    controller_factory(["-n", kube.ns, "--netbox-owner", who])
    address = kube.capi_bound("a", timeout=90)
    assert f"{address['spec']['address']}/{net.prefixlen}" == made["address"]
    assert [a["id"] for a in holding(netbox, owned_key(who, key_of(kube, "a")))] == [made["id"]]


def test_two_replicas_serving_the_same_claims_make_one_netbox_address_per_claim(controller_factory, kube, netbox,
                                                                                 api_client, namespace):
    """Two replicas without leader election: each writes keys on condition of the claim's version and asks
    NetBox for what the stored claims carry; NetBox's lookup by key and its unique key field do the rest."""
    net = seeded(netbox, 28)
    who = owner()
    put_secret(api_client, namespace, "netbox", netbox.token)
    for _ in range(2):
        controller_factory(["-n", kube.ns, "--no-leader-elect", "--netbox-owner", who])
    netbox_pool(kube, "nb", netbox.url, net, gateway=str(net[1]))
    names = [f"nb-{i}" for i in range(8)]
    for name in names:
        netbox_claim(kube, name, "nb")
    for name in names:
        kube.capi_bound(name, timeout=90)
    assert_one_netbox_address_each(kube, netbox, who, names, net)
    ours = [a for a in addresses_in(netbox, net).values()
            if str(a["custom_fields"].get(KEY_FIELD) or "").startswith(f"{who}/")]
    assert len(ours) == len(names), ours


def test_a_pool_deleted_while_its_claim_waits_goes_once_the_claims_key_is_released(controller_factory, kube, netbox,
                                                                                    api_client, namespace):
    """NetBox down, a claim waits with its key; the NetBoxIPPool deleted meanwhile keeps its finalizer until
    NetBox released that key (gone, no pool would name the server to ask), then goes; NetBox holds nothing for
    the claim, which stays, its pool not found."""
    net, who = two_pools(controller_factory, kube, netbox, api_client, 28, "192.168.9")
    netbox.stop_server()
    try:
        netbox_claim(kube, "w", "nb")
        eventually(lambda: ready_reason(kube, "w") == ("False", "NetBoxUnreachable"), timeout=60,
                   what="the claim waiting for NetBox")
        key = key_of(kube, "w")
        kube.custom.delete_namespaced_custom_object(*NETBOX, namespace, "netboxippools", "nb")

        def deletion_seen() -> bool:  # a pass over the deleted pool told the claim, or the pool went
            ready = condition(kube.capi_ipclaim("w"), "Ready") or {}
            return kube.get(NETBOX, "netboxippools", "nb") is None or "being deleted" in ready.get("message", "")
        eventually(deletion_seen, timeout=60, what="the pool's deletion seen by the controller")
        assert kube.get(NETBOX, "netboxippools", "nb") is not None, "the pool went with the claim's key unreleased"
    finally:
        netbox.start_server()
    kube.gone(NETBOX, "netboxippools", "nb", timeout=180)
    eventually(lambda: ready_reason(kube, "w") == ("False", "PoolNotReady"), timeout=60,
               what="the claim saying its pool is gone")
    assert holding(netbox, owned_key(who, key)) == [], addresses_in(netbox, net)
