"""An IPAddress written by hand before its claim, at an IP another claim holds, on the real API server.

Claim ``x`` of InClusterIPPool ``b`` holds an IP; a Cluster API IPAddress is written for claim ``y`` of pool
``a`` of the same namespace at that IP, then claim ``y``. The two pools' locks have different names, so no
lock stops it: the controller must. ``y`` is told (Ready=False ``AddressConflict`` naming the address, the IP
and ``x``, one Warning Event), the address is left as written, ``x`` keeps its IP, the pool lists the
conflict; once the address is deleted, ``y`` is served from its own pool.
"""

from __future__ import annotations

from controller_fixtures import condition, holds_for
from metal3_ipam.testing import go_incluster as gi
from metal3_ipam.testing.waiting import eventually


def test_an_address_written_for_a_claim_at_an_ip_another_pools_claim_holds_is_refused(controller, incluster):
    ns = incluster.ns
    incluster.ip_pool("a", prefix=16, addresses=["10.8.0.1-10.8.0.14"])
    incluster.ip_pool("b", prefix=16, addresses=["10.8.1.0-10.8.1.14"])
    incluster.claim("x", "b")
    x_before = incluster.served("x")
    held = x_before["spec"]["address"]
    written = incluster.writer.create({
        "apiVersion": gi.CAPI_API_VERSION, "kind": "IPAddress", "metadata": {"name": "y", "namespace": ns},
        "spec": {"claimRef": {"name": "y"}, "poolRef": {"apiGroup": gi.GROUP, "kind": gi.IN_CLUSTER_IP_POOL,
                                                        "name": "a"},
                 "address": held, "prefix": 16}})
    incluster.claim("y", "a")

    ready = incluster.not_ready("y", "AddressConflict")
    for word in (f"IPAddress.{gi.GROUP} {ns}/y", held, f"IPAddressClaim {ns}/x"):
        assert word in ready["message"], (word, ready["message"])
    incluster.kube.warning_event("y", "AddressConflict")

    def unchanged() -> bool:
        y, address = incluster.get_claim("y"), incluster.get_address("y")
        return (condition(y, "Ready")["status"] == "False" and not (y["metadata"].get("finalizers"))
                and address["metadata"].get("finalizers") is None
                and address["metadata"].get("ownerReferences") is None
                and address["metadata"]["uid"] == written["metadata"]["uid"]
                and incluster.get_address("x")["metadata"]["uid"] == x_before["metadata"]["uid"]
                and condition(incluster.get_claim("x"), "Ready")["status"] == "True")

    holds_for(unchanged, 3.0, "y refused, its address as written, x bound to its IP")
    conflict = eventually(lambda: condition(incluster.pool("a"), "AddressesConflicting"), timeout=20.0,
                          what="pool a's AddressesConflicting condition")
    assert f"{ns}/y" in conflict["message"] and held in conflict["message"], conflict
    events = [e for e in incluster.kube.events()
              if e.involved_object.name == "y" and e.reason == "AddressConflict"]
    assert len(events) == 1 and (events[0].count or 1) == 1, [(e.message, e.count) for e in events]

    incluster.writer.delete(written)
    address = incluster.served("y")
    assert address["spec"]["address"].startswith("10.8.0.") and address["metadata"]["uid"] != written["metadata"]["uid"]
    eventually(lambda: condition(incluster.pool("a"), "AddressesConflicting") is None, timeout=20.0,
               what="pool a's AddressesConflicting condition to go")
