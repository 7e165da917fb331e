"""What the OpenStack floating-IP tests share: the kind's group, the clouds.yaml Secret, pools and claims, and
the checks of what Neutron holds."""

from __future__ import annotations

import base64
import uuid

from kubernetes import client as k8s

from controller_fixtures import CAPI_IPAM_GROUP, Kube, condition
from metal3_ipam.poolkinds.openstack import pool as p
from metal3_ipam.testing.waiting import eventually

FIPS = (p.GROUP, p.VERSION)
PLURAL = p.PLURAL
CAPI = (CAPI_IPAM_GROUP, "v1beta2")


def owner() -> str:
    return f"t{uuid.uuid4().hex[:8]}"


def put_clouds(api_client, namespace: str, clouds_yaml: bytes, name: str = "cloud") -> None:
    core = k8s.CoreV1Api(api_client)
    body = k8s.V1Secret(metadata=k8s.V1ObjectMeta(name=name),
                        data={p.CLOUDS_YAML_KEY: base64.b64encode(clouds_yaml).decode()})
    try:
        core.create_namespaced_secret(namespace, body)
    except k8s.ApiException as exc:
        if exc.status != 409:
            raise
        core.replace_namespaced_secret(name, namespace, body)


def fip_pool(kube: Kube, name: str, **spec) -> dict:
    body = {"apiVersion": "/".join(FIPS), "kind": p.KIND, "metadata": {"name": name},
            "spec": {"identityRef": {"name": "cloud", "cloudName": "openstack"}, **spec}}
    return kube.create(FIPS, PLURAL, body)


def fip_claim(kube: Kube, name: str, pool: str) -> dict:
    return kube.capi_claim(name, pool, group=p.GROUP, kind=p.KIND)


def key_of(kube: Kube, name: str) -> str:
    return kube.capi_ipclaim(name)["metadata"]["annotations"][p.KEY_ANNOTATION]


def held(openstack, who: str, key: str) -> list[dict]:
    return openstack.floating_ips(description=p.description(who, key))


def ready_reason(kube: Kube, name: str) -> tuple[str, str] | None:
    ready = condition(kube.capi_ipclaim(name), "Ready")
    return (ready["status"], ready["reason"]) if ready else None


def waits_with(kube: Kube, name: str, reason: str, timeout: float = 60) -> None:
    eventually(lambda: ready_reason(kube, name) == ("False", reason), timeout=timeout,
               what=f"claim {name} Ready=False {reason}")


def assert_one_floating_ip_each(kube: Kube, openstack, who: str, names, pool: str = "fips") -> None:
    """Each claim: one IPAddress named after it (/32, no gateway), one floating IP with its key, the same IP."""
    ips = set()
    for name in names:
        address = kube.capi_ipaddress(name)
        assert address is not None, name
        [fip] = held(openstack, who, key_of(kube, name))
        assert fip["floating_ip_address"] == address["spec"]["address"], (name, fip, address)
        assert set(fip["tags"]) >= {who, p.pool_tag(who, kube.ns, pool)}, fip
        assert address["spec"]["prefix"] == 32 and not address["spec"].get("gateway"), address
        mine = [a for a in kube.list(CAPI, "ipaddresses") if a["spec"]["claimRef"]["name"] == name]
        assert len(mine) == 1, (name, mine)
        ips.add(address["spec"]["address"])
    assert len(ips) == len(list(names))
