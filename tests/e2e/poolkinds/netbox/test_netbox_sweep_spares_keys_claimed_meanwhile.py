"""A sweep's release against the real NetBox when a claim carrying the key comes while the sweep runs.

The sweep judges what to release once, on the listing, then reads each address again and deletes it, one
request after another: with many to release, seconds pass between the judgement and a delete. A claim that
comes meanwhile with the key (restored from a backup with its annotation) asks NetBox for its key's address
and is given the one being swept; deleted after that, its IP is free in NetBox while the claim holds it.
"""

from __future__ import annotations

import asyncio
import uuid

from metal3_ipam.poolkinds.netbox.asks import NetBoxAsks, SecretTokens
from metal3_ipam.poolkinds.netbox.source import KEY_FIELD, owned_key
from metal3_ipam.poolkinds.netbox.sweep import Found, Home, description
from netbox_fixtures import holding, make_pool, owner, put_secret, seeded


def test_an_address_whose_key_a_claim_carries_by_the_time_of_the_delete_is_not_released(netbox, api_client,
                                                                                          namespace):
    net = seeded(netbox, 29)
    who = owner()
    put_secret(api_client, namespace, "netbox", netbox.token)
    pool = make_pool(namespace, "nb", netbox.url, {"prefix": str(net)})
    home = description(Home("Cluster", str(uuid.uuid4())), {"metadata": {"namespace": namespace, "name": "c"}})
    keys = [uuid.uuid4().hex for _ in range(3)]
    for n, key in enumerate(keys, 1):
        netbox.api("POST", "ipam/ip-addresses/", {"address": f"{net[n]}/{net.prefixlen}", "status": "active",
                                                  "description": home,
                                                  "custom_fields": {KEY_FIELD: owned_key(who, key)}})
    carried: set[str] = set()

    def choose(found: list[Found]):
        ours = [f for f in found if f.key in keys]
        assert len(ours) == 3
        carried.add(keys[2])  # the last one's claim comes while the first two are read and deleted
        return ours, []

    async def run():
        asks = NetBoxAsks(SecretTokens(api_client), owner=who)
        asks.pool_changed(pool)
        try:
            return await asks.sweep(pool, choose, lambda item: item.key not in carried)
        finally:
            await asks.close()

    _, released, _ = asyncio.run(run())
    assert sorted(f.key for f in released) == sorted(keys[:2])
    assert [holding(netbox, owned_key(who, key)) == [] for key in keys] == [True, True, False]
