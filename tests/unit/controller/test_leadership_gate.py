"""Leadership gained opens the writers' gate only after the locks were listed afresh and filed (no server).

The runtime's order of steps, with a stand-in elector, pool workers and LIST: a pass of an earlier tenure
ends first, then the Metal3 IPAddresses are listed (one LIST per gain, or none when the start-up listing was
taken while leading), then writes are allowed and every pool is looked at. Against a real API server, with a
lock written just before a handover: tests/e2e/poolkinds/incluster/test_leadership_catch_up.py.
"""

from __future__ import annotations

import asyncio
import threading

import pytest

from metal3_ipam.controller import runtime as runtime_module
from metal3_ipam.controller.api import Resource
from metal3_ipam.controller.freezing import Freezer
from metal3_ipam.controller.operator import Controller, Listing, Page
from metal3_ipam.controller.runtime import Options, Runtime
from metal3_ipam.core import kinds
from metal3_ipam.testing.waiting import eventually_async

NS = "ns"
LOCK = "pool-a-10-0-0-1"  # as an earlier version named it


def _lock() -> dict:
    return {"apiVersion": kinds.METAL3_API_VERSION, "kind": "IPAddress",
            "metadata": {"name": LOCK, "namespace": NS, "resourceVersion": "7", "uid": "u-lock"},
            "spec": {"address": "10.0.0.1", "prefix": 24, "claim": {"name": "c0", "namespace": NS},
                     "pool": {"apiVersion": "ipam.cluster.x-k8s.io/v1alpha2", "kind": "InClusterIPPool",
                              "name": "pool-a", "namespace": NS}}}


class Elector:
    def __init__(self) -> None:
        self.leading = False

    def may_act(self) -> bool:
        return self.leading


class Workers:
    """What the runtime asks of the pool workers; records it in ``steps``, beside the LISTs and the gate."""

    def __init__(self, runtime: Runtime, steps: list[str]) -> None:
        self.runtime = runtime
        self.steps = steps
        self.freezer = Freezer()
        self.under_way = asyncio.Event()  # set: no pass is under way
        self.under_way.set()

    async def passes_ended(self) -> None:
        await self.under_way.wait()
        self.steps.append("passes ended")

    def kick(self, pools) -> None:
        pass

    def kick_all(self) -> None:
        self.steps.append(f"every pool kicked, writes {'allowed' if self.runtime.may_write() else 'refused'}")


class Server:
    """The LIST of IPAddresses: the lock; ``hold`` keeps a LIST waiting until set."""

    def __init__(self, steps: list[str]) -> None:
        self.steps = steps
        self.hold = threading.Event()
        self.hold.set()
        self.lists = 0

    def listings(self, api, resources, namespaces, lock_namespace=None) -> list[Listing]:
        assert list(resources) == [kinds.IPADDRESS] and namespaces == [NS]
        return [Listing(kinds.IPADDRESS, NS, self.fetch)]

    def fetch(self, token: str | None) -> Page:
        self.lists += 1
        self.hold.wait(10)
        self.steps.append("locks listed")
        return Page([_lock()], "7", None)


@pytest.fixture
def parts(monkeypatch):
    steps: list[str] = []
    runtime = Runtime(Options(namespaces=[NS], lock_namespace=NS))
    runtime.resources = {kinds.IPADDRESS: Resource(kinds.METAL3_GROUP, kinds.METAL3_VERSION, "ipaddresses")}
    runtime.elector = Elector()
    runtime.workers = Workers(runtime, steps)
    runtime.controller = Controller(runtime.inventory, runtime.workers, writer=None)
    server = Server(steps)
    monkeypatch.setattr(runtime_module, "listings", server.listings)
    return runtime, server, steps


def _gain(runtime: Runtime) -> None:
    runtime.elector.leading = True
    runtime._on_leadership(True)


def _lose(runtime: Runtime) -> None:
    runtime.elector.leading = False
    runtime._on_leadership(False)


def _filed(runtime: Runtime) -> bool:
    return runtime.inventory.get(kinds.IPADDRESS, NS, LOCK) is not None


def test_writes_wait_for_the_passes_under_way_and_for_the_locks_listed_after_leadership_is_gained(parts):
    runtime, server, steps = parts

    async def scenario() -> None:
        runtime.loaded = True
        runtime._load_done.set()
        catch_up = asyncio.create_task(runtime._catch_up())
        runtime.workers.under_way.clear()  # a pass of an earlier tenure is still running
        _gain(runtime)
        for _ in range(20):
            await asyncio.sleep(0)
        assert not runtime.may_write() and server.lists == 0, "listed or allowed before the pass under way ended"
        runtime.workers.under_way.set()
        await eventually_async(runtime.may_write, timeout=10, what="writes allowed")
        assert _filed(runtime)
        assert steps == ["passes ended", "locks listed", "every pool kicked, writes allowed"]
        catch_up.cancel()

    asyncio.run(scenario())


def test_a_listing_begun_before_leadership_was_lost_and_gained_again_does_not_count(parts):
    runtime, server, steps = parts

    async def scenario() -> None:
        runtime.loaded = True
        runtime._load_done.set()
        catch_up = asyncio.create_task(runtime._catch_up())
        server.hold.clear()
        _gain(runtime)
        await eventually_async(lambda: server.lists == 1, timeout=10, what="the first LIST")
        _lose(runtime)
        _gain(runtime)
        server.hold.set()
        await eventually_async(runtime.may_write, timeout=10, what="writes allowed")
        assert server.lists == 2 and _filed(runtime)
        assert steps[-1] == "every pool kicked, writes allowed" and steps.count("every pool kicked, writes allowed") == 1
        catch_up.cancel()

    asyncio.run(scenario())


@pytest.mark.parametrize("leading_at_load", [True, False])
def test_the_start_up_listing_of_the_locks_counts_only_when_it_was_taken_while_leading(parts, leading_at_load):
    runtime, server, steps = parts

    async def scenario() -> None:
        catch_up = asyncio.create_task(runtime._catch_up())
        if leading_at_load:
            _gain(runtime)
        await runtime._load()
        if not leading_at_load:
            _gain(runtime)
        await eventually_async(runtime.may_write, timeout=10, what="writes allowed")
        assert _filed(runtime)
        assert server.lists == (1 if leading_at_load else 2)
        catch_up.cancel()

    asyncio.run(scenario())


def test_without_leader_election_writes_need_no_listing(parts):
    runtime, server, _ = parts
    runtime.elector = None
    assert runtime.may_write() and server.lists == 0


def test_a_catch_up_that_ends_by_itself_fails_liveness_and_says_why():
    """A leader whose catch-up died would hold the Lease and never write: /healthz says so, and the
    kubelet restarts it. Stopping is not such an end."""
    async def scenario() -> None:
        stopping = asyncio.Event()

        async def dies() -> None:
            raise RuntimeError("listing filed into a closed inventory")

        task = asyncio.create_task(dies())
        await asyncio.gather(task, return_exceptions=True)
        alive = runtime_module.liveness(stopping, None, lambda: task)
        assert alive() == ["the catch-up on leadership ended: RuntimeError('listing filed into a closed inventory')"]
        assert runtime_module.liveness(stopping, None, lambda: None)() == []
        stopping.set()
        assert alive() == ["stopping"]

    asyncio.run(scenario())
