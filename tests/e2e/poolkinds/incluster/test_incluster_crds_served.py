"""The in-cluster provider's pool CRDs on the real API server (config/crd/bases, installed for the session).

- the four are established, in the versions and scopes the Go provider's are;
- the objects the Go provider wrote (tests/fixtures/go-incluster-state.yaml) are
  accepted as they are, status included, and ``kubectl get`` shows the Go
  provider's columns;
- the schema refuses what it should (prefix, grace, allocation length) and
  defaults ``allocationPrefixLength`` to 64;
- v1alpha1, served through the controller's ``/convert``, is proven where a
  controller runs: tests/e2e/admission/test_incluster_admission.py.
"""

from __future__ import annotations

import copy
import json
import uuid

import pytest
import yaml
from kubernetes import client
from kubernetes.client.rest import ApiException

from controller_fixtures import REPO
from metal3_ipam.poolkinds.incluster import schema as incluster_schema

GROUP = "ipam.cluster.x-k8s.io"
FIXTURE = REPO / "tests" / "fixtures" / "go-incluster-state.yaml"
PLURALS = {kind: kind.lower() + "s" for kind in incluster_schema.KINDS}


def fixture_pools() -> dict[str, dict]:
    return {d["metadata"]["name"]: d for d in yaml.safe_load_all(FIXTURE.read_text())
            if d and d["kind"].endswith("Pool")}


def fresh(obj: dict, namespace: str | None) -> tuple[dict, dict]:
    """The object without what the server assigns, to create anew; and its status."""
    body = copy.deepcopy(obj)
    status = body.pop("status", None)
    meta = body["metadata"]
    body["metadata"] = {"name": f"{meta['name']}-{uuid.uuid4().hex[:6]}", **({"namespace": namespace}
                                                                            if "namespace" in meta else {})}
    return body, status


def create(api: client.CustomObjectsApi, body: dict) -> dict:
    version = body["apiVersion"].split("/")[1]
    plural = PLURALS[body["kind"]]
    if "namespace" in body["metadata"]:
        return api.create_namespaced_custom_object(GROUP, version, body["metadata"]["namespace"], plural, body)
    return api.create_cluster_custom_object(GROUP, version, plural, body)


def path(kind: str, version: str, name: str, namespace: str | None = None) -> str:
    where = f"namespaces/{namespace}/" if namespace else ""
    return f"/apis/{GROUP}/{version}/{where}{PLURALS[kind]}/{name}"


def rest(api_client, method: str, url: str, body=None, accept: str = "application/json",
         content_type: str = "application/json"):
    """One call; (status, decoded body)."""
    method, full, headers, body, _ = api_client.param_serialize(
        method, url, header_params={"Accept": accept, "Content-Type": content_type}, body=body,
        auth_settings=["BearerToken"])
    try:
        response = api_client.call_api(method, full, header_params=headers, body=body)
    except ApiException as err:
        return err.status, err.body
    response.read()
    return response.status, json.loads(response.data)


def test_the_four_crds_are_established_in_their_versions(api_client):
    ext = client.ApiextensionsV1Api(api_client)
    for kind in incluster_schema.KINDS:
        crd = ext.read_custom_resource_definition(f"{PLURALS[kind]}.{GROUP}")
        conditions = {c.type: c.status for c in crd.status.conditions}
        assert conditions.get("Established") == "True" and conditions.get("NamesAccepted") == "True", conditions
        assert crd.spec.scope == ("Cluster" if kind.startswith("Global") else "Namespaced")
        assert crd.status.stored_versions == ["v1alpha2"]
        served = [v.name for v in crd.spec.versions if v.served]
        assert served == (["v1alpha1", "v1alpha2"] if "IPPool" in kind else ["v1alpha2"])
    # The group's preferred version is still Cluster API's: claims and addresses are read as before.
    group = next(g for g in client.ApisApi(api_client).get_api_versions().groups if g.name == GROUP)
    assert group.preferred_version.version == "v1beta2"


def test_the_go_providers_pools_are_accepted_as_they_are(api_client, namespace):
    api = client.CustomObjectsApi(api_client)
    created = []
    try:
        for name, pool in fixture_pools().items():
            body, status = fresh(pool, namespace)
            made = create(api, body)
            created.append(made)
            assert made["spec"] == pool["spec"], name
            meta = made["metadata"]
            url = path(pool["kind"], "v1alpha2", meta["name"], meta.get("namespace"))
            code, answer = rest(api_client, "PATCH", url + "/status", {"status": status},
                                content_type="application/merge-patch+json")
            assert code == 200 and answer["status"] == status, answer
            # kubectl get: the Go provider's columns, the counts as integers.
            code, table = rest(api_client, "GET", url, accept="application/json;as=Table;v=v1;g=meta.k8s.io")
            assert code == 200, table
            columns = [c["name"] for c in table["columnDefinitions"]]
            assert columns == ["Name", "Addresses", "Total", "Free", "Used"]  # no Age, as in the Go CRD
            cells = dict(zip(columns, table["rows"][0]["cells"]))
            counts = status["ipAddresses"]
            assert (cells["Total"], cells["Free"], cells["Used"]) == (counts["total"], counts["free"], counts["used"])
    finally:
        for made in created:
            if "namespace" not in made["metadata"]:
                api.delete_cluster_custom_object(GROUP, "v1alpha2", PLURALS[made["kind"]], made["metadata"]["name"])


@pytest.mark.parametrize("kind, spec, field", [
    ("InClusterIPPool", {"addresses": ["10.0.0.1"], "prefix": 129}, "spec.prefix"),
    ("InClusterIPPool", {"addresses": ["10.0.0.1"], "prefix": -1}, "spec.prefix"),
    ("InClusterIPPool", {"prefix": 24}, "spec.addresses"),
    ("InClusterIPPool", {"addresses": ["10.0.0.1"]}, "spec.prefix"),
    ("InClusterIPPool", {"addresses": ["10.0.0.1"], "prefix": 24, "addressReuseGracePeriodSeconds": -1},
     "spec.addressReuseGracePeriodSeconds"),
    ("InClusterIPPool", {"addresses": ["10.0.0.1"], "prefix": 24, "addressReuseGracePeriodSeconds": 2**31},
     "spec.addressReuseGracePeriodSeconds"),
    ("InClusterPrefixPool", {"prefixes": ["2001:db8::/48"], "allocationPrefixLength": 0}, "spec.allocationPrefixLength"),
    ("InClusterPrefixPool", {"prefixes": ["2001:db8::/48"], "allocationPrefixLength": 129},
     "spec.allocationPrefixLength"),
    ("InClusterPrefixPool", {"allocationPrefixLength": 64}, "spec.prefixes"),
])
def test_the_schema_refuses(api_client, namespace, kind, spec, field):
    body = {"apiVersion": f"{GROUP}/v1alpha2", "kind": kind, "metadata": {"name": "bad", "namespace": namespace},
            "spec": spec}
    with pytest.raises(ApiException) as err:
        create(client.CustomObjectsApi(api_client), body)
    assert err.value.status == 422 and field in err.value.body, err.value.body


def test_the_allocation_prefix_length_defaults_to_64(api_client):
    name = f"pp-{uuid.uuid4().hex[:6]}"
    api = client.CustomObjectsApi(api_client)
    made = create(api, {"apiVersion": f"{GROUP}/v1alpha2", "kind": "GlobalInClusterPrefixPool",
                        "metadata": {"name": name}, "spec": {"prefixes": ["2001:db8::/48"]}})
    try:
        assert made["spec"]["allocationPrefixLength"] == 64
        assert "namespace" not in made["metadata"]
    finally:
        api.delete_cluster_custom_object(GROUP, "v1alpha2", PLURALS["GlobalInClusterPrefixPool"], name)
