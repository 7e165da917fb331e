"""Helpers of the tests against the real NetBox (the session's ``netbox`` fixture): prefixes of their own,
owners, NetBoxIPPools and their claims, the token Secret, what NetBox holds."""

from __future__ import annotations

import base64
import ipaddress
import itertools
import uuid

from kubernetes import client as k8s

from controller_fixtures import CAPI, Kube
from metal3_ipam.poolkinds.netbox.pool import KEY_ANNOTATION, read_pool
from metal3_ipam.poolkinds.netbox.source import KEY_FIELD, owned_key

NETBOX = ("netbox.metal3-ipam.io", "v1alpha1")

NETS = itertools.count(1)


def fresh(length: int = 29) -> ipaddress.IPv4Network:
    """A prefix no other test of this session uses (inside 10.0.0.0/8)."""
    n = next(NETS)
    return ipaddress.ip_network(f"10.{n // 256}.{n % 256}.0/{length}")


def seeded(netbox, length: int = 29, **fields) -> ipaddress.IPv4Network:
    """A fresh prefix, created in NetBox's global table."""
    net = fresh(length)
    netbox.create_prefix(str(net), **fields)
    return net


def owner() -> str:
    return f"t{uuid.uuid4().hex[:8]}"


def holding(netbox, value: str) -> list[dict]:
    """NetBox's addresses whose key field is exactly ``value`` (read as the administrator)."""
    found = netbox.api("GET", f"ipam/ip-addresses/?cf_{KEY_FIELD}={value}&limit=1000")["results"]
    return [a for a in found if a["custom_fields"].get(KEY_FIELD) == value]


def addresses_in(netbox, net) -> dict[str, dict]:
    found = netbox.api("GET", f"ipam/ip-addresses/?parent={net}&vrf_id=null&limit=1000")["results"]
    return {a["address"].split("/")[0]: a for a in found}


def put_secret(api_client, namespace: str, name: str, token: str, key: str = "token") -> None:
    """The Secret a NetBoxIPPool's ``tokenSecretRef`` names, created or replaced."""
    core = k8s.CoreV1Api(api_client)
    body = k8s.V1Secret(metadata=k8s.V1ObjectMeta(name=name),
                        data={key: base64.b64encode(token.encode()).decode()})
    try:
        core.create_namespaced_secret(namespace, body)
    except k8s.ApiException as exc:
        if exc.status != 409:
            raise
        core.replace_namespaced_secret(name, namespace, body)


def make_pool(namespace: str, name: str, url: str, source: dict, secret: str = "netbox", **spec):
    """A NetBoxIPPool as the core reads it (never written to an API server)."""
    body = {"apiVersion": "/".join(NETBOX), "kind": "NetBoxIPPool",
            "metadata": {"name": name, "namespace": namespace, "generation": 1},
            "spec": {"server": {"url": url, "tokenSecretRef": {"name": secret}, **spec.pop("server", {})},
                     "source": source, **spec}}
    pool, problems = read_pool(body)
    assert not problems, problems
    return pool


def netbox_pool(kube: Kube, name: str, url: str, net, **spec) -> dict:
    """A NetBoxIPPool of ``net`` created in the test's namespace, its token in the Secret ``netbox``."""
    body = {"apiVersion": "/".join(NETBOX), "kind": "NetBoxIPPool", "metadata": {"name": name},
            "spec": {"server": {"url": url, "tokenSecretRef": {"name": "netbox"}},
                     "source": {"prefix": str(net)}, **spec}}
    return kube.create(NETBOX, "netboxippools", body)


def netbox_claim(kube: Kube, name: str, pool: str) -> dict:
    return kube.capi_claim(name, pool, group=NETBOX[0], kind="NetBoxIPPool")


def key_of(kube: Kube, name: str) -> str:
    """The allocation key the controller gave the Cluster API claim ``name``."""
    return kube.capi_ipclaim(name)["metadata"]["annotations"][KEY_ANNOTATION]


def assert_one_netbox_address_each(kube: Kube, netbox, who: str, names, net) -> None:
    """Each claim: one Cluster API IPAddress named after it, one NetBox address with its key, the same IP."""
    ips = set()
    for name in names:
        address = kube.capi_ipaddress(name)
        assert address is not None, name
        held = holding(netbox, owned_key(who, key_of(kube, name)))
        assert len(held) == 1, (name, held)
        assert held[0]["address"] == f"{address['spec']['address']}/{net.prefixlen}", (name, held, address)
        assert address["spec"]["prefix"] == net.prefixlen and address["spec"]["gateway"] == str(net[1])
        mine = [a for a in kube.list(CAPI, "ipaddresses") if a["spec"]["claimRef"]["name"] == name]
        assert len(mine) == 1, (name, mine)
        ips.add(address["spec"]["address"])
    assert len(ips) == len(list(names))
