"""The real Keystone and Neutron the OpenStack tests run against (metal3_ipam.testing.openstack).

These pin the behaviour of the servers that the floating-IP pool is built on, as
they answer on loopback: tokens from the clouds.yaml a Secret would hold, the
two calls of create-then-tag, the three meanings of 409 told apart by
``NeutronError.type``, the policy that keeps a member from choosing an address.
"""

from __future__ import annotations

import socket
import urllib.error
import uuid

import pytest
import yaml


@pytest.fixture(autouse=True)
def clean(openstack):
    yield
    openstack.reset()


def _auth_body(cloud: dict) -> dict:
    """Keystone's ``POST /v3/auth/tokens`` body for a clouds.yaml entry (password or application credential)."""
    auth = cloud["auth"]
    if cloud["auth_type"] == "v3applicationcredential":
        return {"auth": {"identity": {"methods": ["application_credential"], "application_credential": {
            "id": auth["application_credential_id"], "secret": auth["application_credential_secret"]}}}}
    assert cloud["auth_type"] == "password"
    return {"auth": {
        "identity": {"methods": ["password"], "password": {"user": {
            "name": auth["username"], "password": auth["password"], "domain": {"name": auth["user_domain_name"]}}}},
        "scope": {"project": {"name": auth["project_name"], "domain": {"name": auth["project_domain_name"]}}}}}


def _token(openstack, clouds_yaml: bytes, expect=(201,)) -> tuple[int, str | None, dict]:
    cloud = yaml.safe_load(clouds_yaml)["clouds"]["openstack"]
    status, body, headers = openstack.request("POST", cloud["auth"]["auth_url"] + "/auth/tokens",
                                              _auth_body(cloud), expect=expect)
    return status, headers.get("X-Subject-Token"), body


def _network_endpoint(token_body: dict, region: str) -> str:
    for service in token_body["token"]["catalog"]:
        if service["type"] == "network":
            for endpoint in service["endpoints"]:
                if endpoint["interface"] == "public" and endpoint["region_id"] == region:
                    return endpoint["url"]
    raise AssertionError(f"no public network endpoint in {region} in the catalog")


def _create_fip(openstack, token: str, body: dict | None = None, expect=(201,)):
    fip = {"floating_network_id": openstack.network["id"], **(body or {})}
    return openstack.request("POST", f"{openstack.neutron_url}/v2.0/floatingips", {"floatingip": fip},
                             token=token, expect=expect)


def test_a_password_clouds_yaml_gets_a_project_token_whose_catalog_names_neutron(openstack):
    status, token, body = _token(openstack, openstack.clouds_yaml("member"))
    assert status == 201 and token
    assert body["token"]["project"]["id"] == openstack.project_id
    assert {r["name"] for r in body["token"]["roles"]} >= {"member"}
    assert _network_endpoint(body, openstack.region) == openstack.neutron_url
    _, listed, _ = openstack.request("GET", f"{openstack.neutron_url}/v2.0/networks?router:external=true",
                                     token=token)
    assert [n["id"] for n in listed["networks"]] == [openstack.network["id"]]


def test_an_application_credential_clouds_yaml_gets_a_token_refused_once_the_credential_is_deleted(openstack):
    credential = openstack.application_credential("member")
    status, token, body = _token(openstack, openstack.clouds_yaml("member", app_credential=credential))
    assert status == 201 and token
    assert body["token"]["project"]["id"] == openstack.project_id
    openstack.request("GET", f"{openstack.neutron_url}/v2.0/floatingips", token=token)

    openstack.delete_application_credential(credential)
    # No token cache in Neutron's keystone_authtoken: the revocation holds at once.
    status, refused, _ = openstack.request("GET", f"{openstack.neutron_url}/v2.0/floatingips", token=token,
                                           expect=(401,))
    assert status == 401
    status, token, refused = _token(openstack, openstack.clouds_yaml("member", app_credential=credential),
                                    expect=(404,))
    assert status == 404 and token is None, refused


def test_an_application_credential_with_a_wrong_secret_is_refused_401(openstack):
    credential = {**openstack.application_credential("member"), "secret": "not-the-secret"}
    status, token, refused = _token(openstack, openstack.clouds_yaml("member", app_credential=credential),
                                    expect=(401,))
    assert status == 401 and token is None, refused


def test_a_floating_ip_is_tagged_in_a_second_call_and_listed_by_its_tag(openstack):
    token = openstack.token("member")
    tag = f"metal3-ipam-{uuid.uuid4().hex[:8]}"

    status, refused, _ = _create_fip(openstack, token, {"tags": [tag]}, expect=(400,))
    assert status == 400, refused
    assert openstack.floating_ips() == []

    _, created, _ = _create_fip(openstack, token, {"description": "made by the harness test"})
    fip = created["floatingip"]
    assert fip["project_id"] == openstack.project_id and fip["tags"] == []
    assert fip["floating_ip_address"].startswith("203.0.113.")
    assert openstack.floating_ips(tags=tag) == []

    openstack.request("PUT", f"{openstack.neutron_url}/v2.0/floatingips/{fip['id']}/tags/{tag}", token=token)

    assert [f["id"] for f in openstack.floating_ips(tags=tag)] == [fip["id"]]
    assert openstack.floating_ips(not_tags=tag) == []
    assert [f["id"] for f in openstack.floating_ips(description="made by the harness test")] == [fip["id"]]
    _, mine, _ = openstack.request("GET", f"{openstack.neutron_url}/v2.0/floatingips?tags={tag}", token=token)
    assert [(f["id"], f["tags"]) for f in mine["floatingips"]] == [(fip["id"], [tag])]


def test_a_floating_ip_past_the_quota_is_refused_409_over_quota(openstack):
    token = openstack.token("member")
    openstack.set_quota(floatingip=1)
    _create_fip(openstack, token)

    status, refused, _ = _create_fip(openstack, token, expect=(409,))

    assert status == 409
    assert refused["NeutronError"]["type"] == "OverQuota", refused
    assert len(openstack.floating_ips(project_id=openstack.project_id)) == 1


def test_a_full_network_is_refused_409_ip_address_generation_failure(openstack):
    tiny = openstack.create_external_network("tiny", "198.51.100.0/29", ("198.51.100.2", "198.51.100.2"))
    token = openstack.token("member")
    body = {"floating_network_id": tiny["network"]["id"]}
    _create_fip(openstack, token, body)

    status, refused, _ = _create_fip(openstack, token, body, expect=(409,))

    assert refused["NeutronError"]["type"] == "IpAddressGenerationFailure", refused


def test_a_member_may_not_ask_for_a_specific_address_but_the_admin_may(openstack):
    status, refused, _ = _create_fip(openstack, openstack.token("member"),
                                     {"floating_ip_address": "203.0.113.20"}, expect=(403,))
    assert status == 403, refused

    _, made, _ = _create_fip(openstack, openstack.token("admin"), {"floating_ip_address": "203.0.113.20"})
    assert made["floatingip"]["floating_ip_address"] == "203.0.113.20"
    status, taken, _ = _create_fip(openstack, openstack.token("admin"), {"floating_ip_address": "203.0.113.20"},
                                   expect=(409,))
    assert taken["NeutronError"]["type"] == "IpAddressAlreadyAllocated", taken


def test_neutron_stopped_refuses_connections_and_starts_again_on_the_same_url(openstack):
    url = openstack.neutron_url
    openstack.stop_neutron()
    try:
        with pytest.raises(urllib.error.URLError) as refused:
            openstack.neutron("GET", "networks")
        assert isinstance(refused.value.reason, ConnectionRefusedError), refused.value
    finally:
        openstack.start_neutron()
    assert openstack.neutron_url == url
    assert [n["id"] for n in openstack.neutron("GET", "networks?router:external=true")["networks"]] == [
        openstack.network["id"]]


def test_neutron_paused_accepts_connections_and_answers_nothing(openstack):
    token = openstack.token("member")
    with openstack.paused():
        with pytest.raises((TimeoutError, socket.timeout, urllib.error.URLError)):
            openstack.request("GET", f"{openstack.neutron_url}/v2.0/networks", token=token, timeout=2)
    openstack.request("GET", f"{openstack.neutron_url}/v2.0/networks", token=token)


def test_a_policy_override_is_honoured_at_neutrons_next_request(openstack):
    token = openstack.token("member")
    _, made, _ = _create_fip(openstack, token)
    fip = made["floatingip"]
    openstack.set_neutron_policy({"delete_floatingip": "role:admin"})

    status, refused, _ = openstack.request("DELETE", f"{openstack.neutron_url}/v2.0/floatingips/{fip['id']}",
                                           token=token, expect=(403,))
    assert refused["NeutronError"]["type"] == "PolicyNotAuthorized", refused

    openstack.set_neutron_policy({})
    openstack.request("DELETE", f"{openstack.neutron_url}/v2.0/floatingips/{fip['id']}", token=token)
    assert openstack.floating_ips(id=fip["id"]) == []


def test_an_update_with_a_stale_revision_number_is_refused_412_and_a_tag_change_bumps_it(openstack):
    token = openstack.token("member")
    _, created, _ = _create_fip(openstack, token, {"description": ""})
    fip = created["floatingip"]
    url = f"{openstack.neutron_url}/v2.0/floatingips/{fip['id']}"
    revision = fip["revision_number"]

    _, taken, _ = openstack.request("PUT", url, {"floatingip": {"description": "first"}}, token=token,
                                    headers={"If-Match": f"revision_number={revision}"})
    assert taken["floatingip"]["revision_number"] > revision
    status, _, _ = openstack.request("PUT", url, {"floatingip": {"description": "second"}}, token=token,
                                     headers={"If-Match": f"revision_number={revision}"}, expect=(412,))
    assert status == 412
    assert openstack.floating_ips(id=fip["id"])[0]["description"] == "first"

    before = openstack.floating_ips(id=fip["id"])[0]["revision_number"]
    openstack.request("PUT", f"{url}/tags", {"tags": ["a-tag"]}, token=token)
    assert openstack.floating_ips(id=fip["id"])[0]["revision_number"] > before
