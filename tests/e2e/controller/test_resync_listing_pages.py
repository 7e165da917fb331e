"""A LIST filed page by page against the real API server, with the watch telling news between its pages.

The resync lists every kind while the watches run: the pages of one LIST come
from the snapshot of its first page (continue tokens), and the watch files
what changed since, in between. What is kept must be what the API server
holds: nothing deleted since is revived, a name created anew keeps its new uid,
a newer version is not overwritten by the listed one.
"""

from __future__ import annotations

import asyncio
import threading
import time
from types import SimpleNamespace

from kubernetes import client

from controller_fixtures import METAL3
from metal3_ipam.controller import credentials as creds_mod
from metal3_ipam.controller import operator
from metal3_ipam.controller.freezing import Freezer
from metal3_ipam.controller.operator import Controller, Listing, listings
from metal3_ipam.controller.watch import KindWatch, Streams
from metal3_ipam.core import kinds
from metal3_ipam.core.inventory import Inventory

DEADLINE = 60.0


def test_news_the_watch_tells_between_the_pages_of_a_resync_list_is_kept(control_plane, resources, kube,
                                                                          monkeypatch):
    """Claims c0..c7, listed two a page (four pages, one snapshot). Once the first page is in: c0 (on
    the page filed) and c5 (on a page to come) deleted, c6 deleted and created anew (a new uid), c7
    changed, c9 created; the watch files all of it before the other pages come. The later pages still
    hold c5, the old c6 and the old c7: filed after the news, the inventory must end as the API
    server is, and the listing's version is its first page's."""
    monkeypatch.setattr(operator, "PAGE", 2)
    for i in range(8):
        kube.claim(f"c{i}", "p")
    old_c6 = kube.get(METAL3, "ipclaims", "c6")["metadata"]["uid"]
    credentials = creds_mod.from_kubeconfig([str(control_plane.kubeconfig)])
    resource = resources[kinds.IPCLAIM]
    inventory = Inventory()
    workers = SimpleNamespace(kick=lambda pools: None, freezer=Freezer(lambda: inventory.filed))
    controller = Controller(inventory, workers, writer=None)
    told = threading.Event()  # the watch filed the news: the other pages may come
    pages: list[tuple[str | None, list[tuple[str, str, str]]]] = []

    def stored(name: str) -> dict | None:
        return inventory.get(kinds.IPCLAIM, kube.ns, name)

    def news_filed() -> bool:
        c6, c7 = stored("c6"), stored("c7")
        return stored("c0") is None and stored("c5") is None and stored("c9") is not None \
            and c6 is not None and c6["metadata"]["uid"] != old_c6 \
            and c7 is not None and c7["metadata"].get("labels") == {"changed": "yes"}

    async def relist(kind, namespace):
        raise AssertionError("the watch's version was gone")

    with client.ApiClient(control_plane.configuration()) as api:
        [loaded] = listings(api, {kinds.IPCLAIM: resource}, [kube.ns])
        [resync] = listings(api, {kinds.IPCLAIM: resource}, [kube.ns])

        def fetch(token):
            if token is not None and not told.wait(DEADLINE):
                raise TimeoutError("the watch did not tell the news")
            page = resync.fetch(token)
            pages.append((page.resource_version, [(o["metadata"]["name"], o["metadata"]["uid"],
                                                   o["metadata"]["resourceVersion"]) for o in page.items]))
            if token is None:  # the first page taken: the API server moves on
                kube.delete(METAL3, "ipclaims", "c0")
                kube.delete(METAL3, "ipclaims", "c5")
                kube.delete(METAL3, "ipclaims", "c6")
                kube.claim("c6", "p")
                kube.patch(METAL3, "ipclaims", "c7", {"metadata": {"labels": {"changed": "yes"}}})
                kube.claim("c9", "p")
            return page

        async def scenario() -> str | None:
            version = await controller.settle(loaded)  # as at start-up
            streams = Streams(credentials)
            watch = KindWatch(streams, resource, kinds.IPCLAIM, kube.ns, controller.on_event, relist)
            watching = asyncio.create_task(watch.run(version))
            try:
                settling = asyncio.create_task(controller.settle(Listing(kinds.IPCLAIM, kube.ns, fetch)))
                deadline = time.monotonic() + DEADLINE
                while not news_filed():
                    assert time.monotonic() < deadline, "the watch did not tell the news"
                    assert not settling.done() or settling.exception() is None, settling.exception()
                    await asyncio.sleep(0.05)
                told.set()
                return await settling
            finally:
                told.set()
                watching.cancel()
                await asyncio.gather(watching, return_exceptions=True)
                await streams.close()

        listed_version = asyncio.run(scenario())

    assert len(pages) == 4 and {v for v, _ in pages} == {listed_version}, \
        f"the pages' versions {[v for v, _ in pages]}, the listing's {listed_version}"
    later = {name: uid for _, items in pages[1:] for name, uid, _ in items}
    assert "c5" in later and later.get("c6") == old_c6, f"the later pages are not the first's snapshot: {later}"
    actual = {o["metadata"]["name"]: (o["metadata"]["uid"], o["metadata"]["resourceVersion"])
              for o in kube.list(METAL3, "ipclaims")}
    kept = {key[2]: (obj["metadata"]["uid"], obj["metadata"]["resourceVersion"])
            for key, obj in inventory.objects.items() if key[0] == kinds.IPCLAIM and key[1] == kube.ns}
    assert kept == actual
