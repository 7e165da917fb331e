"""What the OpenStack floating-IP tests share: the kind's group, the clouds.yaml Secret, pools and claims, and
the checks of what Neutron holds."""

from __future__ import annotations

import base64
import uuid

from kubernetes import client as k8s

from controller_fixtures import CAPI_IPAM_GROUP, Kube, condition
from metal3_ipam.poolkinds.openstack import capo
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


def capo_pool(kube: Kube, name: str, available: list[str], claimed: list[str] = ()) -> dict:
    """Cluster API Provider OpenStack's own pool ``name`` as its controller leaves it: ``status.availableIPs`` and
    ``claimedIPs`` (its CRD installed first, with no schema beyond that: CAPO's controller does not run here)."""
    crds = k8s.ApiextensionsV1Api(kube.api_client)
    plural = capo.PLURAL
    try:
        crds.create_custom_resource_definition({
            "apiVersion": "apiextensions.k8s.io/v1", "kind": "CustomResourceDefinition",
            "metadata": {"name": f"{plural}.{capo.GROUP}"},
            "spec": {"group": capo.GROUP, "scope": "Namespaced",
                     "names": {"kind": capo.KIND, "plural": plural, "singular": capo.KIND.lower(),
                               "listKind": f"{capo.KIND}List"},
                     "versions": [{"name": capo.VERSION, "served": True, "storage": True,
                                   "subresources": {"status": {}},
                                   "schema": {"openAPIV3Schema": {"type": "object",
                                                                  "x-kubernetes-preserve-unknown-fields": True}}}]}})
    except k8s.ApiException as exc:
        if exc.status != 409:
            raise
    gv = (capo.GROUP, capo.VERSION)
    body = {"apiVersion": "/".join(gv), "kind": capo.KIND, "metadata": {"name": name}, "spec": {}}
    eventually(lambda: _created(kube, gv, plural, body), timeout=30, what=f"CAPO's CRD serving {plural}")
    return kube.custom.patch_namespaced_custom_object_status(
        *gv, kube.ns, plural, name, {"status": {"availableIPs": list(available), "claimedIPs": list(claimed)}})


def _created(kube: Kube, gv: tuple[str, str], plural: str, body: dict) -> bool:
    try:
        kube.create(gv, plural, body)
    except k8s.ApiException as exc:
        if exc.status == 404:
            return False  # the CRD is not served yet
        if exc.status != 409:
            raise
    return True


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
