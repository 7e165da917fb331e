"""The lean watch of claims and addresses, against the real API server.

It files what the API server tells, from the version a listing was taken at,
and when that version is gone it lists again and goes on from there.
"""

from __future__ import annotations

import asyncio

from kubernetes import client

from controller_fixtures import METAL3
from metal3_ipam.controller import credentials as creds_mod
from metal3_ipam.controller.operator import listings
from metal3_ipam.testing.listing import read
from metal3_ipam.controller.watch import KindWatch, Streams
from metal3_ipam.core import kinds
from metal3_ipam.testing.waiting import eventually_async


def test_the_watch_files_creations_changes_and_deletions_from_the_listed_version(control_plane, resources, kube):
    kube.claim("before", "p")
    with client.ApiClient(control_plane.configuration()) as api:
        [listing] = listings(api, {kinds.IPCLAIM: resources[kinds.IPCLAIM]}, [kube.ns])
        _, version = read(listing)
    kube.claim("between", "p")  # after the listing, before the watch starts
    seen: list[tuple[str, str, str]] = []
    relisted = []
    credentials = creds_mod.from_kubeconfig([str(control_plane.kubeconfig)])

    async def relist(kind, namespace):
        relisted.append((kind, namespace))
        return None

    async def scenario():
        streams = Streams(credentials)
        watch = KindWatch(streams, resources[kinds.IPCLAIM], kinds.IPCLAIM, kube.ns,
                          lambda kind, obj: seen.append((kind, obj["kind"], obj["metadata"]["name"])), relist)
        task = asyncio.create_task(watch.run(version))
        try:
            await eventually_async(lambda: ("ADDED", "IPClaim", "between") in seen, what="the claim created in between")
            await asyncio.to_thread(kube.claim, "after", "p")
            await asyncio.to_thread(kube.patch, METAL3, "ipclaims", "after", {"metadata": {"labels": {"a": "b"}}})
            await asyncio.to_thread(kube.delete, METAL3, "ipclaims", "before")
            await eventually_async(lambda: ("DELETED", "IPClaim", "before") in seen, what="the deletion")
        finally:
            task.cancel()
            await asyncio.gather(task, return_exceptions=True)
            await streams.close()

    asyncio.run(scenario())
    assert [s for s in seen if s[2] != "before"] == [("ADDED", "IPClaim", "between"), ("ADDED", "IPClaim", "after"),
                                                     ("MODIFIED", "IPClaim", "after")]
    assert ("ADDED", "IPClaim", "before") not in seen  # it was in the listing
    assert relisted == []


def test_a_version_the_server_no_longer_has_is_listed_again_and_watched_from_there(control_plane, resources, kube):
    credentials = creds_mod.from_kubeconfig([str(control_plane.kubeconfig)])
    seen: list[str] = []
    relisted: list[str] = []

    async def relist(kind, namespace):
        with client.ApiClient(control_plane.configuration()) as api:
            [listing] = listings(api, {kind: resources[kind]}, [namespace])
            _, version = await asyncio.to_thread(read, listing)
        relisted.append(version)
        return version

    async def scenario():
        streams = Streams(credentials)
        watch = KindWatch(streams, resources[kinds.IPCLAIM], kinds.IPCLAIM, kube.ns,
                          lambda kind, obj: seen.append(obj["metadata"]["name"]), relist)
        task = asyncio.create_task(watch.run("1"))  # long compacted away, or older than the watch cache
        try:
            await eventually_async(lambda: relisted, what="a listing after 410 Gone")
            await asyncio.to_thread(kube.claim, "after-relist", "p")
            await eventually_async(lambda: "after-relist" in seen, what="the claim created after the listing")
        finally:
            task.cancel()
            await asyncio.gather(task, return_exceptions=True)
            await streams.close()

    asyncio.run(scenario())
    assert len(relisted) == 1
