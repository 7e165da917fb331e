"""--watch-filter: only pools and claims labelled cluster.x-k8s.io/watch-filter=<value> are served, as the Go
Metal3 IPAM filters its pools and the Go in-cluster provider its claims; the others are left alone, as if paused
(what they hold stays held, nothing new is given, nothing is released)."""

from __future__ import annotations

import random

from metal3_ipam.core import kinds
from metal3_ipam.memory import converge

from ipam_objects import NS, address_of, capi_claim, ipclaim, ippool, loaded, metal3_addresses, set_meta, user_delete

LABEL = {kinds.WATCH_FILTER_LABEL: "shard-a"}


def labelled(obj: dict, labels: dict = LABEL) -> dict:
    obj["metadata"]["labels"] = {**(obj["metadata"].get("labels") or {}), **labels}
    return obj


def filtered(*objs: dict, value: str = "shard-a"):
    api = loaded(*objs)
    api.inventory.watch_filter = value
    converge(api, random.Random(0))
    return api


def test_only_labelled_claims_of_labelled_pools_are_served():
    api = filtered(labelled(ippool("pool1")), ippool("pool2", pools=[{"start": "10.0.0.10", "end": "10.0.0.20"}]),
                   labelled(ipclaim("mine")), ipclaim("other"),
                   labelled(capi_claim("mine-capi")), capi_claim("other-capi"),
                   labelled(ipclaim("in-other-pool", pool="pool2")))
    assert address_of(api, "IPClaim", "mine") and address_of(api, "IPAddressClaim", "mine-capi")
    assert address_of(api, "IPClaim", "other") == [] and address_of(api, "IPAddressClaim", "other-capi") == []
    assert address_of(api, "IPClaim", "in-other-pool") == []
    # The pool left alone gets no finalizer and no status from this controller.
    pool2 = api.inventory.get(kinds.IPPOOL, NS, "pool2")
    assert not pool2["metadata"].get("finalizers") and not pool2.get("status")


def test_without_a_filter_every_pool_and_claim_is_served():
    api = loaded(labelled(ippool("pool1")), ipclaim("other"), labelled(ipclaim("mine")))
    converge(api, random.Random(0))
    assert address_of(api, "IPClaim", "other") and address_of(api, "IPAddressClaim", "mine") == [] \
        and address_of(api, "IPClaim", "mine")


def test_a_claim_losing_the_label_keeps_its_address_and_is_not_released_here():
    api = filtered(labelled(ippool("pool1")), labelled(ipclaim("mine")))
    [ip] = address_of(api, "IPClaim", "mine")
    set_meta(api, kinds.IPCLAIM, "mine", labels={})
    user_delete(api, kinds.IPCLAIM, "mine")
    converge(api, random.Random(0))
    assert address_of(api, "IPClaim", "mine") == [ip]  # another controller's to release now
    assert len(metal3_addresses(api)) == 1
