"""What ``metal3-ipam demo`` creates: a NetBox pool whose NetBox does not answer is left out with what is
only its own (its claims, its token Secret), and says why."""

from __future__ import annotations

from metal3_ipam.demo import without_unservable
from metal3_ipam.poolkinds.netbox import service


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


def unservable(pool_kind, pool: dict) -> str | None:
    """The NetBox kind's own judgement, with ``answers`` for the servers' replies."""
    return service.unservable(pool, answers) if pool_kind.outside else None


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
