"""What ``metal3-ipam demo`` creates: a pool whose outside IPAM does not answer (NetBox, or the Keystone of an
OpenStack pool's clouds.yaml) is left out with what is only its own (its claims, its Secret), and says why."""

from __future__ import annotations

import base64

import pytest

from metal3_ipam.demo import without_unservable
from metal3_ipam.poolkinds.netbox import service
from metal3_ipam.poolkinds.openstack import service as openstack_service


def netbox_pool(name: str, url: str, secret: str = "netbox-token") -> dict:
    return {"apiVersion": "netbox.metal3-ipam.io/v1alpha1", "kind": "NetBoxIPPool",
            "metadata": {"name": name, "namespace": "default"},
            "spec": {"server": {"url": url, "tokenSecretRef": {"name": secret}}, "source": {"prefix": "192.0.2.0/24"}}}


def claim(name: str, kind: str, pool: str, group: str = "netbox.metal3-ipam.io") -> dict:
    return {"apiVersion": "ipam.cluster.x-k8s.io/v1beta2", "kind": "IPAddressClaim",
            "metadata": {"name": name, "namespace": "default"},
            "spec": {"poolRef": {"apiGroup": group, "kind": kind, "name": pool}}}


def secret(name: str) -> dict:
    return {"apiVersion": "v1", "kind": "Secret", "metadata": {"name": name, "namespace": "default"},
            "stringData": {"token": "x"}}


def names(objs: list[dict]) -> set[tuple[str, str]]:
    return {(o["kind"], o["metadata"]["name"]) for o in objs}


UP, DOWN = "http://up.example", "http://down.example"


def answers(url: str) -> str | None:
    return None if url == UP else "Connection refused"


def unservable(pool_kind, pool: dict, secrets: dict) -> str | None:
    """The NetBox kind's own judgement, with ``answers`` for the servers' replies."""
    return service.unservable(pool, secrets, answers) if pool_kind.outside else None


def test_a_netbox_pool_whose_netbox_does_not_answer_is_left_out_with_its_claims_and_secret():
    objs = [secret("down-token"), netbox_pool("down", DOWN, "down-token"), claim("a", "NetBoxIPPool", "down"),
            claim("b", "InClusterIPPool", "down", group="ipam.cluster.x-k8s.io")]
    kept, notes = without_unservable(objs, unservable)
    assert names(kept) == {("IPAddressClaim", "b")}
    assert notes == ["NetBoxIPPool default/down left out: NetBox at http://down.example does not answer "
                     "(Connection refused); set spec.server.url and the token Secret to a NetBox of yours"]


def test_a_netbox_pool_whose_netbox_answers_is_kept_and_so_is_a_secret_it_shares():
    objs = [secret("netbox-token"), netbox_pool("up", UP), netbox_pool("down", DOWN), claim("a", "NetBoxIPPool", "up"),
            claim("b", "NetBoxIPPool", "down")]
    kept, notes = without_unservable(objs, unservable)
    assert names(kept) == {("Secret", "netbox-token"), ("NetBoxIPPool", "up"), ("IPAddressClaim", "a")}
    assert len(notes) == 1 and "default/down" in notes[0]


def openstack_pool(name: str, secret: str = "cloud", cloud: str | None = None) -> dict:
    ref = {"name": secret, **({"cloudName": cloud} if cloud else {})}
    return {"apiVersion": "openstack.metal3-ipam.io/v1alpha1", "kind": "OpenStackFloatingIPPool",
            "metadata": {"name": name, "namespace": "default"}, "spec": {"identityRef": ref}}


def clouds_secret(name: str, auth_url: str, *, encoded: bool = False) -> dict:
    text = (f"clouds:\n  openstack:\n    auth_type: password\n    auth:\n      auth_url: {auth_url}\n"
            "      username: u\n      password: p\n")
    body = {"data": {"clouds.yaml": base64.b64encode(text.encode()).decode()}} if encoded else \
        {"stringData": {"clouds.yaml": text}}
    return {"apiVersion": "v1", "kind": "Secret", "metadata": {"name": name, "namespace": "default"}, **body}


def openstack_judge(pool_kind, pool: dict, given: dict) -> str | None:
    """The kinds' own judgements, with ``answers`` for the servers' replies."""
    if not pool_kind.outside:
        return None
    if pool["kind"] == "OpenStackFloatingIPPool":
        return openstack_service.unservable(pool, given, answers)
    return service.unservable(pool, given, answers)


@pytest.mark.parametrize("encoded", [False, True], ids=["stringData", "data"])
def test_an_openstack_pool_whose_keystone_answers_is_kept_with_its_secret(encoded):
    objs = [clouds_secret("cloud", UP, encoded=encoded), openstack_pool("fips"),
            claim("a", "OpenStackFloatingIPPool", "fips", group="openstack.metal3-ipam.io")]
    kept, notes = without_unservable(objs, openstack_judge)
    assert names(kept) == names(objs) and notes == []


@pytest.mark.parametrize("objs, why", [
    ([clouds_secret("cloud", DOWN), openstack_pool("fips")],
     "Keystone at http://down.example does not answer (Connection refused)"),
    ([openstack_pool("fips")], "it needs an OpenStack cloud"),
    ([clouds_secret("cloud", UP), openstack_pool("fips", cloud="other")],
     "clouds.yaml has no cloud 'other' (spec.identityRef.cloudName; it has: openstack)"),
], ids=["keystone-down", "no-secret", "no-such-cloud"])
def test_an_openstack_pool_that_cannot_be_served_here_is_left_out_saying_why(objs, why):
    objs = objs + [claim("a", "OpenStackFloatingIPPool", "fips", group="openstack.metal3-ipam.io")]
    kept, notes = without_unservable(objs, openstack_judge)
    assert names(kept) == set()
    assert len(notes) == 1 and notes[0].startswith("OpenStackFloatingIPPool default/fips left out: ")
    assert why in notes[0] and "the Secret its spec.identityRef names (cloud)" in notes[0], notes[0]
