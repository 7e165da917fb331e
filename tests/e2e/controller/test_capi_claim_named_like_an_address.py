"""A claim whose address objects were deleted keeps the IP it held, on a real API server.

A Cluster API claim's address is named after the claim; a claim that happens
to be named ``<namePrefix>-<ip>`` must not be taken to hold the IP its name
spells, which would keep that IP from every other claim and hand it to the
claim once its address objects are deleted.
"""

from __future__ import annotations

from controller_fixtures import CAPI, METAL3, assert_invariants, own_ip, strip_and_delete
from metal3_ipam.testing.waiting import eventually


def test_a_cluster_api_claim_named_like_an_address_keeps_the_ip_it_holds(controller, kube):
    kube.pool("p", namePrefix="keep", pools=[{"start": "10.7.0.1", "end": "10.7.0.3"}], prefix=24)
    kube.capi_claim("keep-10-7-0-3", "p")
    assert kube.capi_bound("keep-10-7-0-3")["spec"]["address"] == "10.7.0.1"
    kube.claim("b", "p")
    assert kube.bound("b")["spec"]["address"] == "10.7.0.2"
    kube.claim("c", "p")  # .3 is free: nothing holds it, whatever a claim's name spells
    assert kube.bound("c")["spec"]["address"] == "10.7.0.3"
    strip_and_delete(kube, CAPI, "ipaddresses", "keep-10-7-0-3")
    strip_and_delete(kube, METAL3, "ipaddresses", "keep-10-7-0-1")
    eventually(lambda: own_ip(kube, "IPAddressClaim", "keep-10-7-0-3") == "10.7.0.1", timeout=30,
               what="the claim named keep-10-7-0-3 bound to 10.7.0.1 again")
    assert not [e for e in kube.events() if e.reason == "AddressChanged"]
    assert_invariants(kube)
