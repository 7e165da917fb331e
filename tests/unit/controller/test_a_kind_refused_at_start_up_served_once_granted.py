"""A kind this controller may not list at start-up (its RBAC applied after the Deployment) is asked again, and
served once it may be listed, without a restart (no server).

The runtime's order of steps, with a stand-in elector, pool workers, LIST and rights: the kind is asked again
with one listing of one item at a growing pause; once granted it is listed and filed, then watched, and only
then handed to the writer and /readyz, and every pool is looked at. A gain of leadership while it is being
listed lists the locks afresh once it is served. Against a real API server: tests/e2e/controller/
test_startup_readiness.py.
"""

from __future__ import annotations

import asyncio
import threading

import pytest

from metal3_ipam.controller import runtime as runtime_module
from metal3_ipam.controller.api import Resource
from metal3_ipam.controller.freezing import Freezer
from metal3_ipam.controller.operator import Controller, Listing, Page, listable_again
from metal3_ipam.controller.runtime import Options, Runtime
from metal3_ipam.core import kinds
from metal3_ipam.testing.waiting import eventually_async

NS = "ns"
IPADDRESSES = Resource(kinds.METAL3_GROUP, kinds.METAL3_VERSION, "ipaddresses")
NOT_LISTABLE = "not served (not listable by this controller): IPAddress.ipam.metal3.io"


def _lock() -> dict:
    return {"apiVersion": kinds.METAL3_API_VERSION, "kind": "IPAddress",
            "metadata": {"name": "p-10-0-0-1", "namespace": NS, "resourceVersion": "7", "uid": "u-lock"},
            "spec": {"address": "10.0.0.1", "prefix": 24, "claim": {"name": "c0", "namespace": NS},
                     "pool": {"name": "p", "namespace": NS}}}


class Elector:
    def __init__(self) -> None:
        self.leading = False

    def may_act(self) -> bool:
        return self.leading


class Workers:
    def __init__(self, runtime: Runtime, steps: list[str]) -> None:
        self.runtime = runtime
        self.steps = steps
        self.freezer = Freezer()

    async def passes_ended(self) -> None:
        pass

    def kick(self, pools) -> None:
        pass

    def kick_all(self) -> None:
        self.steps.append(f"every pool kicked, writes {'allowed' if self.runtime.may_write() else 'refused'}")


class Server:
    """The rights (``granted``), the listing of one item that asks for them, and the LIST of the IPAddresses;
    ``hold`` keeps a LIST waiting until set."""

    def __init__(self, runtime: Runtime, steps: list[str]) -> None:
        self.runtime = runtime
        self.steps = steps
        self.granted = False
        self.asked = 0
        self.lists = 0
        self.hold = threading.Event()
        self.hold.set()

    def listable(self, api):
        def may_list(group, version, plural, namespace) -> bool:
            assert (group, version, plural, namespace) == (IPADDRESSES.group, IPADDRESSES.version, "ipaddresses", NS)
            self.asked += 1
            return self.granted
        return may_list

    def listings(self, api, resources, namespaces, lock_namespace=None) -> list[Listing]:
        return [Listing(kind, NS, self.fetch) for kind in resources]

    def fetch(self, token: str | None) -> Page:
        self.lists += 1
        self.hold.wait(10)
        served = kinds.IPADDRESS in self.runtime.resources
        self.steps.append(f"locks listed, {'served' if served else 'not served yet'}")
        return Page([_lock()], "7", None)


@pytest.fixture
def parts(monkeypatch):
    steps: list[str] = []
    runtime = Runtime(Options(namespaces=[NS], lock_namespace=NS))
    runtime.resources = {}
    runtime.refused = {kinds.IPADDRESS: IPADDRESSES}
    runtime._say_unserved()
    runtime.elector = Elector()
    runtime.workers = Workers(runtime, steps)
    runtime.controller = Controller(runtime.inventory, runtime.workers, writer=None)
    server = Server(runtime, steps)
    monkeypatch.setattr(runtime_module, "listable", server.listable)
    monkeypatch.setattr(runtime_module, "listings", server.listings)
    monkeypatch.setattr(runtime_module, "ASK_AGAIN_FIRST", 0.01)
    monkeypatch.setattr(runtime_module, "ASK_AGAIN_MOST", 0.04)
    runtime._watch = lambda listing, version, resource: steps.append(
        f"{listing.kind[1]} watched from {version} as {resource.plural}")
    return runtime, server, steps


def _filed(runtime: Runtime) -> bool:
    return runtime.inventory.get(kinds.IPADDRESS, NS, "p-10-0-0-1") is not None


@pytest.mark.parametrize("leading", [True, False])
def test_a_kind_granted_after_start_up_is_listed_then_watched_then_written_and_readyz_stops_naming_it(parts, leading):
    runtime, server, steps = parts
    runtime.elector.leading = leading
    assert NOT_LISTABLE in runtime.kinds_unserved

    async def scenario() -> None:
        runtime.loaded = True
        runtime._load_done.set()
        task = asyncio.create_task(runtime._serve_granted())
        await eventually_async(lambda: server.asked >= 3, timeout=10, what="the right asked again")
        assert server.lists == 0 and kinds.IPADDRESS not in runtime.resources
        assert NOT_LISTABLE in runtime.kinds_unserved
        server.granted = True
        await eventually_async(lambda: kinds.IPADDRESS in runtime.resources, timeout=10, what="the kind served")
        await asyncio.wait_for(task, 10)  # nothing left to ask
        assert _filed(runtime) and runtime.refused == {}
        assert not any("not listable" in line for line in runtime.kinds_unserved)
        # A standby lists and watches it too, and leaves the pools to the leader.
        assert steps == ["locks listed, not served yet", "IPAddress watched from 7 as ipaddresses",
                         *(["every pool kicked, writes allowed"] if leading else [])]
        asked = server.asked
        await asyncio.sleep(0.1)
        assert server.asked == asked

    asyncio.run(scenario())


def test_the_asking_again_waits_for_the_initial_load(parts):
    runtime, server, steps = parts
    server.granted = True

    async def scenario() -> None:
        task = asyncio.create_task(runtime._serve_granted())
        await asyncio.sleep(0.1)
        assert server.asked == 0 and server.lists == 0
        runtime._load_done.set()
        await asyncio.wait_for(task, 10)
        assert kinds.IPADDRESS in runtime.resources and _filed(runtime)

    asyncio.run(scenario())


def test_leadership_gained_while_a_granted_kind_is_listed_lists_the_locks_again_once_it_is_served(parts):
    runtime, server, steps = parts
    server.granted = True

    async def scenario() -> None:
        runtime.loaded = True
        runtime._load_done.set()
        catch_up = asyncio.create_task(runtime._catch_up())
        server.hold.clear()
        task = asyncio.create_task(runtime._serve_granted())
        await eventually_async(lambda: server.lists == 1, timeout=10, what="the kind's LIST under way")
        runtime.elector.leading = True
        runtime._on_leadership(True)
        for _ in range(20):
            await asyncio.sleep(0)
        assert not runtime.may_write()
        server.hold.set()
        await asyncio.wait_for(task, 10)
        await eventually_async(runtime.may_write, timeout=10, what="writes allowed")
        assert server.lists == 2
        assert steps[0] == "locks listed, not served yet" and "locks listed, served" in steps
        assert steps.index("locks listed, served") < steps.index("every pool kicked, writes allowed")
        catch_up.cancel()

    asyncio.run(scenario())


def test_listable_again_asks_one_listing_per_kind_refused():
    asked = []

    def may_list(group, version, plural, namespace) -> bool:
        asked.append((plural, namespace))
        return plural == "ipaddresses"

    refused = {kinds.IPADDRESS: IPADDRESSES,
               kinds.IPCLAIM: Resource(kinds.METAL3_GROUP, kinds.METAL3_VERSION, "ipclaims")}
    assert listable_again(may_list, refused, NS) == [kinds.IPADDRESS]
    assert asked == [("ipaddresses", NS), ("ipclaims", NS)]
