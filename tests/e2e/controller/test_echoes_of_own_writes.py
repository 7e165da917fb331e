"""The echo of the writer's own writes, against the real API server: not filed, and nothing lost.

The writer files the API server's answer to each write (``ApiWriter``); the
watch brings the same version again a moment later. The lean watch decodes
such an event no further than its metadata (``Inventory.holds``): here the
writes are made first and the watch started after them from an earlier
version, so every echo comes with its answer filed already. The echoes must
not be filed, a change by someone else must be, and the inventory must end
holding what the API server holds (text beyond ASCII included: the bodies are
encoded by ``wire.encode``).
"""

from __future__ import annotations

import asyncio

from kubernetes import client

from controller_fixtures import METAL3
from metal3_ipam.controller import credentials as creds_mod
from metal3_ipam.controller.api import ApiWriter
from metal3_ipam.controller.operator import discover, listings
from metal3_ipam.controller.watch import KindWatch, Streams
from metal3_ipam.core import kinds
from metal3_ipam.testing.waiting import eventually_async
from metal3_ipam.core import objects as o
from metal3_ipam.testing.listing import read
from metal3_ipam.core.actions import Create, SetStatus
from metal3_ipam.core.inventory import Inventory
from metal3_ipam.core.slim import slim


def test_the_echoes_of_answered_writes_are_not_filed_and_the_inventory_ends_as_the_server(control_plane, kube):
    with client.ApiClient(control_plane.configuration()) as api:
        resources = discover(api)
        [listing] = listings(api, {kinds.IPCLAIM: resources[kinds.IPCLAIM]}, [kube.ns])
        items, listed_at = read(listing)
    inventory = Inventory()
    inventory.settle_listing(kinds.IPCLAIM, kube.ns, items, listed_at)
    credentials = creds_mod.from_kubeconfig([str(control_plane.kubeconfig)])
    filed: list[tuple[str, str, str]] = []
    message = "naïve \U0001F600 \u2028 «pool» 'p' \"quoted\""

    def on_event(event_type: str, obj: dict) -> None:
        filed.append((event_type, obj["metadata"]["name"], obj["metadata"]["resourceVersion"]))
        (inventory.remove if event_type == "DELETED" else inventory.upsert)(slim(obj))

    async def scenario() -> tuple[str, str, str]:
        writer = ApiWriter(credentials, inventory, resources)
        streams = Streams(credentials)
        try:
            created = await writer._do(Create({"apiVersion": "/".join(METAL3), "kind": "IPClaim",
                                               "metadata": {"name": "echoed", "namespace": kube.ns},
                                               "spec": {"pool": {"name": "p"}}}))
            written = await writer._do(SetStatus(o.ref(created), {"errorMessage": message},
                                                 o.meta(created)["resourceVersion"]))
            assert inventory.get(kinds.IPCLAIM, kube.ns, "echoed") is not None
            other = await asyncio.to_thread(kube.patch, METAL3, "ipclaims", "echoed",
                                            {"metadata": {"labels": {"changed-by": "someone-else"}}})
            watch = KindWatch(streams, resources[kinds.IPCLAIM], kinds.IPCLAIM, kube.ns, on_event,
                              relist=None, known=inventory.holds)
            task = asyncio.create_task(watch.run(listed_at))
            try:
                version = other["metadata"]["resourceVersion"]
                await eventually_async(lambda: watch.version == version, what="the watch at the other client's change")
            finally:
                task.cancel()
                await asyncio.gather(task, return_exceptions=True)
            return (o.meta(created)["resourceVersion"], o.meta(written)["resourceVersion"],
                    other["metadata"]["resourceVersion"])
        finally:
            await writer.close()
            await streams.close()

    created_at, written_at, other_at = asyncio.run(scenario())
    assert filed == [("MODIFIED", "echoed", other_at)], \
        f"filed {filed}; the answered versions were {created_at} (create) and {written_at} (status)"
    server = kube.get(METAL3, "ipclaims", "echoed")
    assert server["status"]["errorMessage"] == message
    assert inventory.get(kinds.IPCLAIM, kube.ns, "echoed") == slim(server)
