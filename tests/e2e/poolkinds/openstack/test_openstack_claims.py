"""Claims of OpenStackFloatingIPPools served by the controller, against the real API server, Keystone and Neutron.

The controller runs as ``metal3-ipam run`` with an owner of its own per test; OpenStack is the session's
(``openstack`` fixture; each test leaves it as it found it). After each scenario: every live claim of a
floating-IP pool has exactly one Cluster API IPAddress (prefix 32, no gateway) and exactly one floating IP whose
description carries its key, at the same address, tagged with the owner and the pool with its namespace; a
deleted claim's floating IP is gone (``Delete``) or kept for the pool (``Retain``); nothing else in Neutron is
touched.
"""

from __future__ import annotations

import ipaddress
import uuid

import pytest
from kubernetes import client as k8s

from controller_fixtures import (Kube, condition, controller_as_user,
                                 rules_with_ipaddress_verbs)
from metal3_ipam.poolkinds.netbox.source import owned_key
from metal3_ipam.poolkinds.openstack import pool as p
from metal3_ipam.testing.waiting import eventually
from netbox_fixtures import KEY_FIELD, addresses_in, netbox_claim, netbox_pool, put_secret, seeded
from netbox_fixtures import key_of as netbox_key_of
from openstack_fixtures import (CAPI, FIPS, PLURAL, assert_one_floating_ip_each, capo_pool, fip_claim, fip_pool,
                                held, key_of, owner, put_clouds, ready_reason, waits_with)



@pytest.fixture(autouse=True)
def clean(openstack):
    yield
    openstack.reset()


def serve(controller_factory, api_client, kube: Kube, openstack, user: str = "member") -> str:
    who = owner()
    put_clouds(api_client, kube.ns, openstack.clouds_yaml(user))
    controller_factory(["-n", kube.ns, "--openstack-owner", who])
    return who


def test_claims_of_a_floating_ip_pool_a_netbox_pool_and_a_metal3_pool_at_once(controller_factory, kube, openstack,
                                                                                api_client, netbox):
    """One controller serves the three kinds' claims created together; each kind's IPs come from its own place
    (Neutron, NetBox, the pool's ranges); releases go back there, and only for the claims deleted."""
    who = owner()
    put_clouds(api_client, kube.ns, openstack.clouds_yaml("member"))
    put_secret(api_client, kube.ns, "netbox", netbox.token)
    controller_factory(["-n", kube.ns, "--openstack-owner", who, "--netbox-owner", who])
    net = seeded(netbox, 28)
    fip_pool(kube, "fips")
    netbox_pool(kube, "nb", netbox.url, net)
    kube.pool("m", pools=[{"start": "192.168.30.10", "end": "192.168.30.60", "prefix": 24}])
    names, nb_names, m_names = ([f"{tag}-{i}" for i in range(5)] for tag in ("f", "nb", "m"))
    for name, nb_name, m_name in zip(names, nb_names, m_names):
        fip_claim(kube, name, "fips")
        netbox_claim(kube, nb_name, "nb")
        kube.capi_claim(m_name, "m")
    for name in names + nb_names + m_names:
        kube.capi_bound(name, timeout=90)
    assert_one_floating_ip_each(kube, openstack, who, names)
    nb_ips = {name: kube.capi_ipaddress(name)["spec"]["address"] for name in nb_names}
    assert len(set(nb_ips.values())) == 5 and all(ipaddress.ip_address(ip) in net for ip in nb_ips.values())
    in_netbox = addresses_in(netbox, net)
    assert {ip: in_netbox[ip]["custom_fields"].get(KEY_FIELD) for ip in nb_ips.values()} == \
        {nb_ips[name]: owned_key(who, netbox_key_of(kube, name)) for name in nb_names}
    m_ips = [kube.capi_ipaddress(name)["spec"]["address"] for name in m_names]
    assert len(set(m_ips)) == 5 and all(ip.startswith("192.168.30.") for ip in m_ips)

    def pool_ready():
        status = kube.get(FIPS, PLURAL, "fips").get("status") or {}
        ready = condition({"status": status}, "Ready")
        return status if ready and ready["reason"] == "Serving" and status.get("claimed") == 5 else None
    status = eventually(pool_ready, timeout=60, what="the pool Ready with 5 floating IPs claimed")
    assert status["floatingIPNetwork"]["id"] == openstack.network["id"]
    assert sorted(status["claimedIPs"]) == sorted(kube.capi_ipaddress(n)["spec"]["address"] for n in names)

    gone, nb_gone = names[:2], nb_names[:2]
    keys = {name: key_of(kube, name) for name in gone}
    for name in gone + nb_gone + m_names[:2]:
        kube.custom.delete_namespaced_custom_object(*CAPI, kube.ns, "ipaddressclaims", name)
    for name in gone + nb_gone + m_names[:2]:
        kube.gone(CAPI, "ipaddressclaims", name, timeout=60)
    for name in gone:
        assert held(openstack, who, keys[name]) == [], name
    assert_one_floating_ip_each(kube, openstack, who, names[2:])
    assert len(openstack.floating_ips(tags=who)) == 3
    in_netbox = addresses_in(netbox, net)
    assert sorted(in_netbox) == sorted(nb_ips[name] for name in nb_names[2:]), in_netbox


def test_killed_between_create_and_tag_makes_no_second_floating_ip(controller_factory, kube, openstack, api_client):
    """Neutron refuses the tag call (policy): the floating IP is made, with the key in its description, and the
    claim says why it waits; SIGKILLed there, a controller started afterwards finds it by the key and tags it."""
    who = owner()
    put_clouds(api_client, kube.ns, openstack.clouds_yaml("member"))
    openstack.set_neutron_policy({"update_floatingip:tags": "role:admin", "create_floatingip:tags": "role:admin"})
    proc = controller_factory(["-n", kube.ns, "--openstack-owner", who])
    fip_pool(kube, "fips")
    fip_claim(kube, "a", "fips")
    waits_with(kube, "a", p.POLICY_FORBIDDEN)
    [made] = held(openstack, who, key_of(kube, "a"))
    assert made["tags"] == []
    proc.kill()
    openstack.set_neutron_policy({})
    controller_factory(["-n", kube.ns, "--openstack-owner", who], name="after-kill")
    kube.capi_bound("a", timeout=90)
    assert_one_floating_ip_each(kube, openstack, who, ["a"])
    assert [f["id"] for f in openstack.floating_ips()] == [made["id"]]


def test_killed_between_the_tag_and_the_address_write_heals_by_the_key(controller_factory, control_plane, kube,
                                                                       openstack, api_client, tmp_path):
    """A controller that may not create IPAddresses gets its floating IP made and tagged and cannot write it;
    SIGKILLed, a controller started afterwards finds it by the claim's key: the same address, one floating IP."""
    who = owner()
    put_clouds(api_client, kube.ns, openstack.clouds_yaml("member"))
    fip_pool(kube, "fips")
    fip_claim(kube, "a", "fips")
    rules = rules_with_ipaddress_verbs(["get", "list", "watch", "patch", "delete"]) + [
        {"apiGroups": [p.GROUP], "resources": ["*"], "verbs": ["*"]},
        {"apiGroups": [""], "resources": ["secrets"], "verbs": ["get"]}]
    user = f"no-ipaddress-writer-{uuid.uuid4().hex[:6]}"
    with controller_as_user(control_plane, api_client, kube.ns, tmp_path, user, rules) as proc:
        proc.args += ["--openstack-owner", who]
        proc.start()

        def tagged():
            key = (kube.capi_ipclaim("a")["metadata"].get("annotations") or {}).get(p.KEY_ANNOTATION)
            found = held(openstack, who, key) if key else []
            return found if found and who in found[0]["tags"] else None
        [made] = eventually(tagged, timeout=60, what="claim a's floating IP made and tagged")
        proc.kill()
    assert kube.capi_ipaddress("a") is None and kube.list(("ipam.metal3.io", "v1alpha1"), "ipaddresses") == []
    controller_factory(["-n", kube.ns, "--openstack-owner", who])
    assert kube.capi_bound("a", timeout=90)["spec"]["address"] == made["floating_ip_address"]
    assert_one_floating_ip_each(kube, openstack, who, ["a"])
    assert [f["id"] for f in openstack.floating_ips()] == [made["id"]]


def test_a_full_network_and_the_quota_are_each_their_own_reason(controller_factory, kube, openstack, api_client):
    who = serve(controller_factory, api_client, kube, openstack)
    openstack.create_external_network("tiny", "198.51.100.0/29", ("198.51.100.2", "198.51.100.2"))
    fip_pool(kube, "tiny", floatingIPNetwork={"filter": {"name": "tiny"}})
    fip_claim(kube, "t-0", "tiny")
    kube.capi_bound("t-0", timeout=90)
    fip_claim(kube, "t-1", "tiny")
    waits_with(kube, "t-1", p.NETWORK_FULL)

    openstack.set_quota(floatingip=2)
    fip_pool(kube, "fips", floatingIPNetwork={"filter": {"name": "public"}})
    fip_claim(kube, "q-0", "fips")
    kube.capi_bound("q-0", timeout=90)
    fip_claim(kube, "q-1", "fips")
    waits_with(kube, "q-1", p.OVER_QUOTA)
    assert "OverQuota" in condition(kube.capi_ipclaim("q-1"), "Ready")["message"]
    assert kube.capi_ipaddress("q-1") is None and kube.capi_ipaddress("t-1") is None

    openstack.set_quota(floatingip=None)
    kube.capi_bound("q-1", timeout=120)
    assert_one_floating_ip_each(kube, openstack, who, ["q-0", "q-1"])
    assert_one_floating_ip_each(kube, openstack, who, ["t-0"], pool="tiny")
    # Retried while the quota was reached, t-1 said so; its network is full all the same.
    assert ready_reason(kube, "t-1") in {("False", p.NETWORK_FULL), ("False", p.OVER_QUOTA)}
    assert kube.capi_ipaddress("t-1") is None and len(openstack.floating_ips()) == 3


def test_a_member_may_not_ask_for_a_preallocated_address_but_takes_one_the_project_holds(
        controller_factory, kube, openstack, api_client):
    who = serve(controller_factory, api_client, kube, openstack)
    fip_pool(kube, "fips", preAllocatedFloatingIPs=["203.0.113.20"])
    fip_claim(kube, "a", "fips")
    waits_with(kube, "a", p.POLICY_FORBIDDEN)
    assert openstack.floating_ips(floating_ip_address="203.0.113.20") == []

    # The project's administrator makes it (a member may not choose the address): the claim takes it.
    made = openstack.neutron("POST", "floatingips", {"floatingip": {
        "floating_network_id": openstack.network["id"], "floating_ip_address": "203.0.113.20"}})["floatingip"]
    address = kube.capi_bound("a", timeout=120)
    assert address["spec"]["address"] == "203.0.113.20"
    [fip] = held(openstack, who, key_of(kube, "a"))
    assert fip["id"] == made["id"]

    # A pre-allocated floating IP is never deleted by a release: kept for the pool's next claim.
    kube.custom.delete_namespaced_custom_object(*CAPI, kube.ns, "ipaddressclaims", "a")
    kube.gone(CAPI, "ipaddressclaims", "a", timeout=60)
    [kept] = openstack.floating_ips(id=made["id"])
    assert kept["description"] == p.available_description(who)


def test_max_ips_holds_a_claim_until_another_lets_its_floating_ip_go(controller_factory, kube, openstack,
                                                                     api_client):
    who = serve(controller_factory, api_client, kube, openstack)
    fip_pool(kube, "fips", maxIPs=2)
    for name in ("a", "b"):
        fip_claim(kube, name, "fips")
        kube.capi_bound(name, timeout=90)
    fip_claim(kube, "c", "fips")
    waits_with(kube, "c", p.MAX_IPS_REACHED)
    assert len(openstack.floating_ips(tags=who)) == 2
    kube.custom.delete_namespaced_custom_object(*CAPI, kube.ns, "ipaddressclaims", "a")
    kube.capi_bound("c", timeout=400)  # the refused ask is retried after its backoff
    assert_one_floating_ip_each(kube, openstack, who, ["b", "c"])
    assert len(openstack.floating_ips(tags=who)) == 2


def test_retain_keeps_floating_ips_across_the_pools_deletion(controller_factory, kube, openstack, api_client):
    who = serve(controller_factory, api_client, kube, openstack)
    fip_pool(kube, "fips", reclaimPolicy="Retain")
    names = ["a", "b"]
    for name in names:
        fip_claim(kube, name, "fips")
    ips = sorted(kube.capi_bound(name, timeout=90)["spec"]["address"] for name in names)
    for name in names:
        kube.custom.delete_namespaced_custom_object(*CAPI, kube.ns, "ipaddressclaims", name)
    for name in names:
        kube.gone(CAPI, "ipaddressclaims", name, timeout=60)
    kube.delete(FIPS, PLURAL, "fips")
    kube.gone(FIPS, PLURAL, "fips", timeout=60)
    kept = openstack.floating_ips(tags=p.pool_tag(who, kube.ns, "fips"))
    assert sorted(f["floating_ip_address"] for f in kept) == ips
    assert {f["description"] for f in kept} == {p.available_description(who)}

    fip_pool(kube, "fips", reclaimPolicy="Retain")
    fip_claim(kube, "c", "fips")
    assert kube.capi_bound("c", timeout=90)["spec"]["address"] in ips
    assert len(openstack.floating_ips(tags=who)) == 2


def test_a_release_the_policy_refuses_is_shown_and_release_without_delete_lets_the_claim_go(
        controller_factory, kube, openstack, api_client):
    who = serve(controller_factory, api_client, kube, openstack)
    fip_pool(kube, "fips")
    fip_claim(kube, "a", "fips")
    ip = kube.capi_bound("a", timeout=90)["spec"]["address"]
    openstack.set_neutron_policy({"delete_floatingip": "role:admin"})
    kube.custom.delete_namespaced_custom_object(*CAPI, kube.ns, "ipaddressclaims", "a")
    waits_with(kube, "a", p.POLICY_FORBIDDEN)
    assert kube.capi_ipaddress("a") is not None
    kube.patch(FIPS, PLURAL, "fips", {"spec": {"releaseWithoutDelete": True}})
    kube.gone(CAPI, "ipaddressclaims", "a", timeout=400)
    [kept] = openstack.floating_ips(tags=who)
    assert kept["floating_ip_address"] == ip and kept["description"] == p.available_description(who)


def test_two_pools_of_one_name_in_two_namespaces_on_one_project_stay_apart(controller_factory, kube, openstack,
                                                                          api_client):
    core = k8s.CoreV1Api(api_client)
    other_ns = f"t-{uuid.uuid4().hex[:10]}"
    core.create_namespace(k8s.V1Namespace(metadata=k8s.V1ObjectMeta(name=other_ns)))
    try:
        other = Kube(api_client, other_ns)
        who = owner()
        for k in (kube, other):
            put_clouds(api_client, k.ns, openstack.clouds_yaml("member"))
            fip_pool(k, "fips")
        controller_factory(["-n", kube.ns, "-n", other_ns, "--openstack-owner", who])
        for k in (kube, other):
            for name in ("a", "b"):
                fip_claim(k, name, "fips")
        for k in (kube, other):
            for name in ("a", "b"):
                k.capi_bound(name, timeout=90)
            assert_one_floating_ip_each(k, openstack, who, ["a", "b"])
            assert len(openstack.floating_ips(tags=p.pool_tag(who, k.ns, "fips"))) == 2
        for name in ("a", "b"):
            kube.custom.delete_namespaced_custom_object(*CAPI, kube.ns, "ipaddressclaims", name)
        for name in ("a", "b"):
            kube.gone(CAPI, "ipaddressclaims", name, timeout=60)
        assert openstack.floating_ips(tags=p.pool_tag(who, kube.ns, "fips")) == []
        assert_one_floating_ip_each(other, openstack, who, ["a", "b"])
    finally:
        core.delete_namespace(other_ns)


def test_neutron_stopped_mid_burst_and_started_again(controller_factory, kube, openstack, api_client):
    who = serve(controller_factory, api_client, kube, openstack)
    fip_pool(kube, "fips")
    kube.pool("m", pools=[{"start": "192.168.31.10", "end": "192.168.31.60", "prefix": 24}])
    first, later = ["f-0", "f-1"], ["f-2", "f-3", "f-4"]
    for name in first:
        fip_claim(kube, name, "fips")
    for name in first:
        kube.capi_bound(name, timeout=90)
    openstack.stop_neutron()
    try:
        for name in later:
            fip_claim(kube, name, "fips")
        m_names = [f"m-{i}" for i in range(4)]
        for name in m_names:
            kube.capi_claim(name, "m")
        for name in m_names:  # served while Neutron is down
            kube.capi_bound(name, timeout=30)

        def some_say_why():
            reasons = {ready_reason(kube, name) for name in later}
            return reasons if ("False", p.UNREACHABLE) in reasons else None
        reasons = eventually(some_say_why, timeout=60, what=f"a claim Ready=False {p.UNREACHABLE}")
        assert all(r is None or r[0] == "False" for r in reasons), reasons
    finally:
        openstack.start_neutron()
    for name in first + later:
        kube.capi_bound(name, timeout=400)
    assert_one_floating_ip_each(kube, openstack, who, first + later)


def test_the_sweep_releases_only_floating_ips_of_its_keys_no_claim_carries(controller_factory, kube, openstack,
                                                                           api_client):
    who = owner()
    put_clouds(api_client, kube.ns, openstack.clouds_yaml("member"))
    ctl = controller_factory(["-n", kube.ns, "--openstack-owner", who, "--openstack-sweep-seconds", "2"])
    fip_pool(kube, "fips")
    for name in ("kept", "leaked"):
        fip_claim(kube, name, "fips")
    for name in ("kept", "leaked"):
        kube.capi_bound(name, timeout=90)
    leaked = held(openstack, who, key_of(kube, "leaked"))[0]
    tag = p.pool_tag(who, kube.ns, "fips")

    def made(description: str, tags: list[str]) -> dict:
        fip = openstack.neutron("POST", "floatingips", {"floatingip": {
            "floating_network_id": openstack.network["id"], "description": description}}, user="member")["floatingip"]
        openstack.neutron("PUT", f"floatingips/{fip['id']}/tags", {"tags": tags}, user="member")
        return fip
    # Never touched: no key of ours (a user's, tagged like ours), another owner's key, a pool not held here.
    foreign = made("a user's own", [who, tag])
    other_owner = made(p.description(owner(), uuid.uuid4().hex), [who, tag])
    elsewhere = made(p.description(who, uuid.uuid4().hex), [who, p.pool_tag(who, "another-namespace", "fips")])
    # Released: one of this owner's keys that no claim carries, tagged with the pool held here.
    late = made(p.description(who, uuid.uuid4().hex), [who, tag])

    kube.delete_past_finalizers(CAPI, "ipaddressclaims", "leaked")  # gone without its release
    ids = lambda: {f["id"] for f in openstack.floating_ips()}  # noqa: E731
    eventually(lambda: leaked["id"] not in ids() and late["id"] not in ids(), timeout=90,
               what="the sweep to release the leaked claim's floating IP and the late one")
    assert {foreign["id"], other_owner["id"], elsewhere["id"]} <= ids()
    assert_one_floating_ip_each(kube, openstack, who, ["kept"])
    assert "released: no claim carries its key" in ctl.log_text()


def test_floating_ips_capos_pool_of_its_namespace_keeps_free_are_adopted(controller_factory, kube, openstack,
                                                                           api_client):
    """Switching from CAPO's pool: floating IPs of its tag are there, one its pool in this namespace lists
    available, one it does not (CAPO's tag has no namespace: a pool of that name elsewhere may hold it); the
    first is handed to the first claim, the other never."""
    def capo_fip() -> dict:
        fip = openstack.neutron("POST", "floatingips", {"floatingip": {
            "floating_network_id": openstack.network["id"]}}, user="member")["floatingip"]
        openstack.neutron("PUT", f"floatingips/{fip['id']}/tags/{p.capo_tag('capo')}", user="member")
        return fip
    free, elsewhere = capo_fip(), capo_fip()
    capo_pool(kube, "capo", available=[free["floating_ip_address"]])
    who = serve(controller_factory, api_client, kube, openstack)
    fip_pool(kube, "fips", adoptFromCAPOPool="capo")
    fip_claim(kube, "a", "fips")
    assert kube.capi_bound("a", timeout=90)["spec"]["address"] == free["floating_ip_address"]
    [fip] = held(openstack, who, key_of(kube, "a"))
    assert fip["id"] == free["id"] and p.capo_tag("capo") in fip["tags"]
    fip_claim(kube, "b", "fips")
    assert kube.capi_bound("b", timeout=90)["spec"]["address"] not in (free["floating_ip_address"],
                                                                      elsewhere["floating_ip_address"])
    assert_one_floating_ip_each(kube, openstack, who, ["a", "b"])
    assert openstack.floating_ips(id=elsewhere["id"])[0]["description"] == ""


def test_a_floating_ip_deleted_in_neutron_is_shown_on_its_claim_which_keeps_its_address(
        controller_factory, kube, openstack, api_client):
    """Someone deletes a claim's floating IP in Neutron: the claim says so (AddressLost, a Warning Event), the
    pool lists the address in failedIPs; the claim keeps its IPAddress and no floating IP is made anew for it,
    and the next claim is not given its address. An admin gives it back: the condition goes."""
    who = owner()
    put_clouds(api_client, kube.ns, openstack.clouds_yaml("member"))
    controller_factory(["-n", kube.ns, "--openstack-owner", who, "--openstack-sweep-seconds", "2"])
    fip_pool(kube, "fips")
    fip_claim(kube, "a", "fips")
    address = kube.capi_bound("a", timeout=90)["spec"]["address"]
    key = key_of(kube, "a")
    [fip] = held(openstack, who, key)
    openstack.neutron("DELETE", f"floatingips/{fip['id']}", expect=(204,))

    def lost() -> dict | None:
        found = condition(kube.capi_ipclaim("a"), "AddressLost")
        return found if found and found["status"] == "True" else None
    eventually(lost, timeout=60, what="the claim's AddressLost condition")
    assert address in lost()["message"] and key in lost()["message"]
    eventually(lambda: any(e.reason == "AddressLost" and e.type == "Warning" and e.involved_object.name == "a"
                           for e in kube.events()), timeout=30, what="the claim's Warning Event")
    eventually(lambda: address in ((kube.get(FIPS, PLURAL, "fips") or {}).get("status") or {}).get("failedIPs", []),
               timeout=60, what="the pool's failedIPs naming the address")
    assert kube.capi_bound("a")["spec"]["address"] == address
    assert held(openstack, who, key) == [], "a floating IP was made anew for the claim"
    fip_claim(kube, "b", "fips")
    assert kube.capi_bound("b", timeout=90)["spec"]["address"] != address

    openstack.neutron("POST", "floatingips", {"floatingip": {
        "floating_network_id": openstack.network["id"], "floating_ip_address": address,
        "description": p.description(who, key)}})
    eventually(lambda: condition(kube.capi_ipclaim("a"), "AddressLost") is None, timeout=60,
               what="the AddressLost condition gone once the floating IP is back")
    eventually(lambda: ((kube.get(FIPS, PLURAL, "fips") or {}).get("status") or {}).get("failedIPs") == [],
               timeout=60, what="failedIPs empty again")
    assert_one_floating_ip_each(kube, openstack, who, ["a", "b"])


def test_the_crd_refuses_a_network_by_id_and_filter_and_a_bad_policy(kube):
    for spec, field in (({"floatingIPNetwork": {"id": str(uuid.uuid4()), "filter": {"name": "public"}}},
                         "floatingIPNetwork"),
                        ({"reclaimPolicy": "Keep"}, "reclaimPolicy"),
                        ({"preAllocatedFloatingIPs": ["2001:db8::1"]}, "preAllocatedFloatingIPs"),
                        ({"identityRef": {}}, "identityRef.name")):
        with pytest.raises(k8s.ApiException) as refused:
            fip_pool(kube, f"bad-{uuid.uuid4().hex[:6]}", **spec)
        assert refused.value.status == 422 and field in refused.value.body, refused.value.body


@pytest.mark.parametrize("leader_elect", [True, False], ids=["leader-elected", "no-leader-election"])
def test_two_replicas_make_one_floating_ip_per_claim(controller_factory, kube, openstack, api_client, leader_elect):
    who = owner()
    put_clouds(api_client, kube.ns, openstack.clouds_yaml("member"))
    for i in range(2):
        controller_factory(["-n", kube.ns, "--openstack-owner", who, "--openstack-sweep-seconds", "2"]
                           + ([] if leader_elect else ["--no-leader-elect"]),
                           name=f"replica-{i}", ready=leader_elect is False or i == 0)
    fip_pool(kube, "fips")
    names = [f"f-{i}" for i in range(8)]
    for name in names:
        fip_claim(kube, name, "fips")
    for name in names:
        kube.capi_bound(name, timeout=120)
    # Without leader election both replicas may make a floating IP for one key, and each give the claim its
    # own: the claim holds one, and the sweep releases the other.
    keys = [key_of(kube, name) for name in names]
    eventually(lambda: [len(held(openstack, who, key)) for key in keys] == [1] * len(names)
               and len(openstack.floating_ips()) == len(names), timeout=60,
               what="one floating IP per claim, none made in vain left")
    assert_one_floating_ip_each(kube, openstack, who, names)


def test_keystones_refusal_and_a_missing_secret_are_each_their_own_reason(controller_factory, kube, openstack,
                                                                          api_client):
    """A deleted application credential: the claim says CredentialsRefused (Keystone's 404), and the pool too;
    a Secret put right is read again without a restart. A pool whose Secret does not exist: IdentityMissing."""
    who = owner()
    credential = openstack.application_credential("member")
    put_clouds(api_client, kube.ns, openstack.clouds_yaml("member", app_credential=credential))
    controller_factory(["-n", kube.ns, "--openstack-owner", who])
    fip_pool(kube, "fips")
    fip_claim(kube, "a", "fips")
    kube.capi_bound("a", timeout=90)
    openstack.delete_application_credential(credential)
    fip_claim(kube, "b", "fips")
    waits_with(kube, "b", p.CREDENTIALS_REFUSED)
    assert kube.capi_ipaddress("b") is None

    put_clouds(api_client, kube.ns, openstack.clouds_yaml("member", app_credential=True))
    kube.capi_bound("b", timeout=400)
    assert_one_floating_ip_each(kube, openstack, who, ["a", "b"])

    body = {"apiVersion": "/".join(FIPS), "kind": p.KIND, "metadata": {"name": "nosecret"},
            "spec": {"identityRef": {"name": "absent"}}}
    kube.create(FIPS, PLURAL, body)
    fip_claim(kube, "c", "nosecret")
    waits_with(kube, "c", p.IDENTITY_MISSING)
    assert "absent" in condition(kube.capi_ipclaim("c"), "Ready")["message"]


def test_a_floating_ip_taken_over_is_released_when_its_namespace_is_deleted_right_after_its_claim(
        controller_factory, openstack, api_client):
    """The target of a finished move (the floating IP homed at the source's pool, gone), its sweeps took the floating
    IP over; then the namespace is deleted whole: its Secret at once, the claim (its release keeps the floating IP,
    held and marked left for the source to answer), then the pool. Nobody answers: the sweeps release it, with the
    client the cloud was last asked with, though nothing of the namespace is left (SPEC §10.3)."""
    core = k8s.CoreV1Api(api_client)
    ns = f"t-{uuid.uuid4().hex[:10]}"
    core.create_namespace(k8s.V1Namespace(metadata=k8s.V1ObjectMeta(name=ns)))
    kube, who = Kube(api_client, ns), owner()
    try:
        put_clouds(api_client, ns, openstack.clouds_yaml("member"))
        ctl = controller_factory(["-n", ns, "--openstack-owner", who, "--openstack-sweep-seconds", "2"])
        pool_uid = fip_pool(kube, "fips")["metadata"]["uid"]
        fip_claim(kube, "a", "fips")
        kube.capi_bound("a", timeout=90)
        key = key_of(kube, "a")
        [fip] = held(openstack, who, key)
        here, source = f"{who}-home:OpenStackFloatingIPPool:{pool_uid}", f"{who}-home:OpenStackFloatingIPPool:{'a' * 8}"
        eventually(lambda: here in openstack.neutron("GET", f"floatingips/{fip['id']}")["floatingip"]["tags"],
                   timeout=30, what="the floating IP homed at the pool")
        # as the source of a move left it: homed at the source's pool, which went with the move
        openstack.neutron("PUT", f"floatingips/{fip['id']}/tags/{source}", user="member")
        openstack.neutron("DELETE", f"floatingips/{fip['id']}/tags/{here}", user="member")
        taken = f"{who}-from:OpenStackFloatingIPPool:{'a' * 8}"
        eventually(lambda: taken in openstack.neutron("GET", f"floatingips/{fip['id']}")["floatingip"]["tags"],
                   timeout=30, what="the floating IP taken over from the source's home")
    finally:
        core.delete_namespace(ns)
    # The namespace deletion takes the claim's IPAddresses first: its key, released holding no address within two
    # minutes of the controller's start, is released once more when they are over (an allocation a process before
    # may have left out), with the Secret long gone.
    eventually(lambda: ns not in {n.metadata.name for n in core.list_namespace().items}, timeout=300,
               what=f"namespace {ns} gone")
    eventually(lambda: held(openstack, who, key) == [], timeout=60,
               what="the floating IP the deleted namespace's claim left released by the sweeps")
    eventually(lambda: "released: its claim here left it homed at another cluster" in ctl.log_text(), timeout=30,
               what="the controller to say why it released the floating IP")


@pytest.mark.parametrize("stopped", [False, True], ids=["running", "while-no-controller-runs"])
def test_a_pools_secret_is_let_go_when_the_pool_is_deleted_past_its_finalizers(controller_factory, openstack,
                                                                               api_client, stopped):
    """A floating IP taken over from another cluster keeps the pool's Secret held (our finalizer on it); the pool
    is then deleted as ``clusterctl move`` deletes its source objects, finalizers stripped first, then its claim:
    the finalizer comes off the Secret with no pool naming it, and the namespace's deletion
    completes; so too when the pool went while no controller ran (the one started then finds the Secret in the
    record of those held)."""
    core = k8s.CoreV1Api(api_client)
    ns = f"t-{uuid.uuid4().hex[:10]}"
    core.create_namespace(k8s.V1Namespace(metadata=k8s.V1ObjectMeta(name=ns)))
    kube, who = Kube(api_client, ns), owner()
    finalizers = lambda: core.read_namespaced_secret("cloud", ns).metadata.finalizers or []  # noqa: E731
    try:
        put_clouds(api_client, ns, openstack.clouds_yaml("member"))
        args = ["-n", ns, "--openstack-owner", who, "--openstack-sweep-seconds", "2"]
        ctl = controller_factory(args)
        pool_uid = fip_pool(kube, "fips")["metadata"]["uid"]
        fip_claim(kube, "a", "fips")
        kube.capi_bound("a", timeout=90)
        [fip] = held(openstack, who, key_of(kube, "a"))
        here, source = f"{who}-home:OpenStackFloatingIPPool:{pool_uid}", f"{who}-home:OpenStackFloatingIPPool:{'a' * 8}"
        eventually(lambda: here in openstack.neutron("GET", f"floatingips/{fip['id']}")["floatingip"]["tags"],
                   timeout=30, what="the floating IP homed at the pool")
        openstack.neutron("PUT", f"floatingips/{fip['id']}/tags/{source}", user="member")
        openstack.neutron("DELETE", f"floatingips/{fip['id']}/tags/{here}", user="member")
        eventually(lambda: p.SECRET_FINALIZER in finalizers(), timeout=60,
                   what="the Secret held while another cluster marks the floating IP of a live claim")
        if stopped:
            ctl.stop()
        kube.delete_past_finalizers(FIPS, PLURAL, "fips")
        if stopped:
            assert p.SECRET_FINALIZER in finalizers()
            controller_factory(args)
        eventually(lambda: p.SECRET_FINALIZER not in finalizers(), timeout=60,
                   what="the Secret let go once the pool naming it went")
        kube.delete_past_finalizers(CAPI, "ipaddressclaims", "a")
    finally:
        core.delete_namespace(ns)
    eventually(lambda: ns not in {n.metadata.name for n in core.list_namespace().items}, timeout=120,
               what=f"namespace {ns} gone")
