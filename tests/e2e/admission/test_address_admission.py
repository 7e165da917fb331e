"""A Cluster API IPAddress written before its claim, judged at admission by a real API server calling the
controller over TLS: one its claim could not take up (outside its pool, at its gateway or an excluded address,
at an IP another claim's address holds) is refused naming the field, the value and why; a free one, and what an
IPAM or ``clusterctl move`` writes (an owner reference to its claim), are let through.
"""

from __future__ import annotations

from metal3_ipam.testing import go_incluster as gi
from metal3_ipam.testing.waiting import eventually
from webhook_fixtures import apply, call, get, new_namespace, path_of


def address(name: str, pool: str, ip: str, owners: list[dict] | None = None) -> dict:
    meta = {"name": name, **({"ownerReferences": owners} if owners else {})}
    return {"apiVersion": gi.CAPI_API_VERSION, "kind": "IPAddress", "metadata": meta,
            "spec": {"claimRef": {"name": name}, "poolRef": {"apiGroup": gi.GROUP, "kind": gi.IN_CLUSTER_IP_POOL,
                                                             "name": pool},
                     "address": ip, "prefix": 16}}


def test_an_address_its_claim_could_not_take_up_is_refused_at_admission(webhook_controller, webhook_api):
    ns = new_namespace(webhook_api)
    for obj in (gi.ip_pool("a", namespace=ns, prefix=16, addresses=["10.8.0.1-10.8.0.14"]),
                gi.ip_pool("b", namespace=ns, prefix=16, addresses=["10.8.1.0-10.8.1.14"], gateway="10.8.1.1",
                           excluded=["10.8.1.9"]),
                gi.claim("x", ns, gi.IN_CLUSTER_IP_POOL, "b")):
        answer = apply(webhook_api, obj, ns)
        assert answer.status == 201, answer.message
    x = eventually(lambda: get(webhook_api, address("x", "b", ""), ns), timeout=20,
                   what="claim x's IPAddress")
    held = x["spec"]["address"]

    def refused(obj: dict, *words: str) -> str:
        def check():
            answer = apply(webhook_api, obj, ns)
            if answer.status < 300:  # judged before the controller saw what holds it: gone again, and again
                call(webhook_api, "DELETE", path_of(obj, ns, obj["metadata"]["name"]))
                return None
            return answer.message
        message = eventually(check, timeout=20, what=f"IPAddress {obj['metadata']['name']} refused")
        for word in ("admission webhook", "spec.address", *words):
            assert word in message, (word, message)
        return message

    refused(address("y", "a", held), held, f"IPAddressClaim {ns}/x")
    refused(address("y", "b", held), held, f"IPAddressClaim {ns}/x")
    refused(address("y", "b", "10.8.1.1"), "10.8.1.1", "gateway", f"InClusterIPPool {ns}/b")
    refused(address("y", "b", "10.8.1.9"), "10.8.1.9", "excluded")
    refused(address("y", "a", "192.168.9.9"), "192.168.9.9", "not inside")

    free = apply(webhook_api, address("z", "a", "10.8.0.7"), ns)
    assert free.status == 201, free.message
    # What an IPAM writes for its claim, or clusterctl move copies with it, never waits on this webhook.
    claim_x = get(webhook_api, gi.claim("x", ns, gi.IN_CLUSTER_IP_POOL, "b"), ns)
    owner = {"apiVersion": gi.CAPI_API_VERSION, "kind": "IPAddressClaim", "name": "x",
             "uid": claim_x["metadata"]["uid"]}
    copied = apply(webhook_api, address("w", "b", held, owners=[owner]), ns)
    assert copied.status == 201, copied.message
