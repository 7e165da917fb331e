"""The NetBoxIPPool CRD as the real API server serves it: bad input refused on create, naming field and value.

The same manifests go through :func:`metal3_ipam.poolkinds.netbox.pool.read_pool`:
what the API server refuses, the core refuses too (for input that never met
the API server, e.g. ``metal3-ipam validate``), and what it accepts reads.
"""

from __future__ import annotations

import copy

import pytest
from kubernetes import client
from kubernetes.client.rest import ApiException

from metal3_ipam.controller.api import request
from metal3_ipam.poolkinds.netbox import pool as netbox_pool
from metal3_ipam.demo import TABLE

GROUP, VERSION, PLURAL = netbox_pool.GROUP, netbox_pool.VERSION, netbox_pool.PLURAL

CA = ("-----BEGIN CERTIFICATE-----\nMIIBszCCAVmgAwIBAgIUQ2VydGlmaWNhdGUgZm9yIHRlc3Rz\n"
      "-----END CERTIFICATE-----\n")


def pool(name: str, **spec) -> dict:
    body = {
        "apiVersion": f"{GROUP}/{VERSION}",
        "kind": netbox_pool.KIND,
        "metadata": {"name": name},
        "spec": {
            "server": {"url": "https://netbox.example.org", "tokenSecretRef": {"name": "netbox-token"}},
            "source": {"prefix": "192.0.2.0/24"},
        },
    }
    for key, value in spec.items():
        body["spec"][key] = value
    return body


def with_server(**server) -> dict:
    return {"url": "https://netbox.example.org", "tokenSecretRef": {"name": "netbox-token"}, **server}


REFUSED = [
    ("url-ftp", {"server": with_server(url="ftp://netbox.example.org")}, ["spec.server.url", "ftp://netbox.example.org"]),
    ("url-no-host", {"server": with_server(url="https://")}, ["spec.server.url"]),
    ("url-user", {"server": with_server(url="https://admin:secret@netbox.example.org")},
     ["spec.server.url", "user or password"]),
    ("url-query", {"server": with_server(url="https://netbox.example.org/?token=x")},
     ["spec.server.url", "?token=x"]),
    ("ca-not-pem", {"server": with_server(caBundle="not a certificate")}, ["spec.server.caBundle", "PEM"]),
    ("no-secret", {"server": {"url": "https://netbox.example.org"}}, ["spec.server.tokenSecretRef"]),
    ("secret-bad-name", {"server": with_server(tokenSecretRef={"name": "Bad_Name"})},
     ["spec.server.tokenSecretRef.name", "Bad_Name"]),
    ("secret-bad-key", {"server": with_server(tokenSecretRef={"name": "s", "key": "a/b"})},
     ["spec.server.tokenSecretRef.key", "a/b"]),
    ("both", {"source": {"prefix": "192.0.2.0/24", "ipRange": "192.0.2.1-192.0.2.9"}},
     ["spec.source", "exactly one", "192.0.2.0/24", "192.0.2.1-192.0.2.9"]),
    ("neither", {"source": {"vrf": "blue"}}, ["spec.source", "exactly one", "neither"]),
    ("host-bits", {"source": {"prefix": "192.0.2.7/24"}}, ["spec.source.prefix", "192.0.2.7/24"]),
    ("not-cidr", {"source": {"prefix": "192.0.2.0"}}, ["spec.source.prefix", "192.0.2.0"]),
    ("range-one", {"source": {"ipRange": "192.0.2.1"}}, ["spec.source.ipRange", "192.0.2.1"]),
    ("range-families", {"source": {"ipRange": "192.0.2.1-2001:db8::1"}},
     ["spec.source.ipRange", "192.0.2.1-2001:db8::1"]),
    ("empty-vrf", {"source": {"prefix": "192.0.2.0/24", "vrf": ""}}, ["spec.source.vrf"]),
    ("gateway-outside", {"gateway": "198.51.100.1"}, ["spec.gateway", "198.51.100.1", "192.0.2.0/24"]),
    ("gateway-family", {"gateway": "2001:db8::1"}, ["spec.gateway", "2001:db8::1"]),
    ("gateway-not-ip", {"gateway": "gw"}, ["spec.gateway", "gw"]),
    ("dns-not-ip", {"dnsServers": ["192.0.2.53", "dns"]}, ["spec.dnsServers[1]", "dns"]),
    ("prefix-long", {"prefix": 129}, ["spec.prefix", "129"]),
]


@pytest.mark.parametrize("name,spec,needles", REFUSED, ids=[r[0] for r in REFUSED])
def test_bad_pools_are_refused_naming_field_and_value(api_client, namespace, name, spec, needles):
    api = client.CustomObjectsApi(api_client)
    body = pool(name, **spec)
    with pytest.raises(ApiException) as info:
        api.create_namespaced_custom_object(GROUP, VERSION, namespace, PLURAL, body)
    assert info.value.status == 422, info.value.body
    for needle in needles:
        assert needle in info.value.body, (needle, info.value.body)
    read, problems = netbox_pool.read_pool({**body, "metadata": {"name": name, "namespace": namespace}})
    assert read is None and problems, body


def test_good_pools_are_stored_with_defaults_and_read(api_client, namespace):
    api = client.CustomObjectsApi(api_client)
    bodies = [
        pool("by-prefix", gateway="192.0.2.1", dnsServers=["192.0.2.53"], prefix=24),
        pool("by-range", source={"ipRange": "192.0.2.10-192.0.2.20", "vrf": "blue"}, prefix=24,
             server=with_server(url="http://netbox.example.org:8000/netbox/")),
        pool("ipv6", source={"prefix": "2001:db8::/64"}, gateway="2001:db8::1",
             server=with_server(caBundle=CA, tokenSecretRef={"name": "nb", "key": "api-token"})),
    ]
    for body in bodies:
        api.create_namespaced_custom_object(GROUP, VERSION, namespace, PLURAL, copy.deepcopy(body))
    stored = {o["metadata"]["name"]: o for o in
              api.list_namespaced_custom_object(GROUP, VERSION, namespace, PLURAL)["items"]}
    assert stored["by-prefix"]["spec"]["server"]["tokenSecretRef"] == {"name": "netbox-token", "key": "token"}
    read = {name: netbox_pool.read_pool(obj) for name, obj in stored.items()}
    assert all(problems == [] for _, problems in read.values()), read
    by_range = read["by-range"][0]
    assert by_range.parent.kind == "ip-range" and by_range.parent.vrf == "blue"
    assert by_range.server.url == "http://netbox.example.org:8000/netbox"
    assert read["ipv6"][0].token == netbox_pool.SecretKeyRef("nb", "api-token")
    assert read["ipv6"][0].server.ca_bundle == CA

    # status is a subresource, printed by kubectl's columns
    obj = stored["by-prefix"]
    obj["status"] = {"observedGeneration": 1, "size": "254", "used": "3", "free": "251",
                     "conditions": [{"type": "Ready", "status": "False", "reason": "TokenRefused",
                                     "message": "NetBox refused the token", "observedGeneration": 1,
                                     "lastTransitionTime": "2026-01-01T00:00:00Z"}]}
    api.replace_namespaced_custom_object_status(GROUP, VERSION, namespace, PLURAL, "by-prefix", obj)
    table = request(api_client, "GET", f"/apis/{GROUP}/{VERSION}/namespaces/{namespace}/{PLURAL}/by-prefix",
                    headers={"Accept": TABLE})
    columns = [c["name"] for c in table["columnDefinitions"]]
    row = dict(zip(columns, table["rows"][0]["cells"]))
    assert (row["Prefix"], row["Ready"], row["Reason"], row["Free"]) == ("192.0.2.0/24", "False", "TokenRefused", "251")
