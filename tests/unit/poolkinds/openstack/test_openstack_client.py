"""How the OpenStack client names what went wrong: each refusal of Keystone or Neutron one condition reason."""

from __future__ import annotations

import pytest
from keystoneauth1 import exceptions as ks_exc
from openstack import exceptions as sdk_exc

from metal3_ipam.poolkinds.openstack import client
from metal3_ipam.poolkinds.openstack import pool as p


@pytest.mark.parametrize("status, kind, reason", [
    (409, "IpAddressGenerationFailure", p.NETWORK_FULL),
    (409, "OverQuota", p.OVER_QUOTA),
    (409, "IpAddressAlreadyAllocated", p.ADDRESS_TAKEN),
    (403, "PolicyNotAuthorized", p.POLICY_FORBIDDEN),
    (401, "", p.CREDENTIALS_REFUSED),
    (503, "", p.SERVER_ERROR),
    (400, "HTTPBadRequest", p.REFUSED_REQUEST),
])
def test_neutrons_answer_is_told_apart_by_its_status_and_error_type(status, kind, reason):
    assert client._reason(status, kind) == reason


@pytest.mark.parametrize("exc, reason", [
    (ks_exc.ConnectFailure("refused"), p.UNREACHABLE),
    (ks_exc.ConnectTimeout("slow"), p.TIMEOUT),
    (ks_exc.Unauthorized("wrong secret"), p.CREDENTIALS_REFUSED),
    (ks_exc.NotFound("application credential deleted"), p.CREDENTIALS_REFUSED),
    (ks_exc.EndpointNotFound("no network"), p.REFUSED_REQUEST),
    (ks_exc.MissingRequiredOptions([]), p.IDENTITY_MISSING),
    (sdk_exc.ConfigException("no auth_url"), p.IDENTITY_MISSING),
    (sdk_exc.SDKException("bare"), p.REFUSED_REQUEST),
])
def test_both_families_of_exceptions_become_one_error_with_a_reason(exc, reason):
    error = client.classify(exc, "Keystone")
    assert error.reason == reason and str(error).startswith("Keystone: ")
    assert error.server_down is (reason in p.SERVER_DOWN)


def test_a_bug_is_not_taken_for_a_refusal():
    with pytest.raises(KeyError):
        client.classify(KeyError("ours"), "Neutron")


@pytest.mark.parametrize("data, says", [
    (b"clouds: [", "not YAML"),
    (b"clouds:\n  other: {}\n", "no cloud 'openstack'"),
    (b"- a list\n", "no cloud 'openstack'"),
])
def test_a_clouds_yaml_without_the_cloud_named_is_identity_missing(data, says):
    with pytest.raises(client.OpenStackError) as refused:
        client.read_clouds_yaml(data, "openstack")
    assert refused.value.reason == p.IDENTITY_MISSING and says in str(refused.value)
