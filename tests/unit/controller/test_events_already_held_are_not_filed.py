"""A watch event the inventory holds already (``Inventory.holds``) is not filed: the inventory ends the same.

The lean watch decodes an ADDED or MODIFIED event no further than its metadata
when its name is stored at that version or a newer one. The inventory is fed
from more than the watch: the writer files the API server's answers (a
creation, a patch, a deletion still waiting on finalizers, a deletion done),
forgets a name the server says does not exist, and listings are filed and
prove names gone. Here a server's history of two kinds in two namespaces is
played to two inventories, the watch events in any order, interleaved with
answers, forgettings and listings taken at any point of the history; one
inventory skips what it holds, the other files every event. They must end
alike.
"""

from __future__ import annotations

import json

from hypothesis import given, settings, strategies as st

from metal3_ipam.controller.api import Resource
from metal3_ipam.controller.watch import KindWatch
from metal3_ipam.controller.wire import decode_event
from metal3_ipam.core import kinds
from metal3_ipam.core.inventory import Inventory
from metal3_ipam.core.slim import slim

KINDS = {kinds.IPCLAIM: "ipclaims", kinds.IPADDRESS: "ipaddresses"}
NAMESPACES = ("ns1", "ns2")
NAMES = ("a", "b")


def history(steps: list[tuple[int, int, int, str]]) -> list[tuple[str, dict]]:
    """The server's history: one write per version, each a (type, object); a name created anew gets a new uid."""
    live: dict[tuple, dict] = {}
    incarnations: dict[tuple, int] = {}
    out = []
    version = 100
    for kind_index, ns_index, name_index, what in steps:
        kind = list(KINDS)[kind_index]
        key = (kind, NAMESPACES[ns_index], NAMES[name_index])
        version += 1
        current = live.get(key)
        if current is None:
            incarnations[key] = incarnations.get(key, 0) + 1
            obj = _object(key, version, incarnations[key], what)
            live[key] = obj
            out.append(("ADDED", obj))
        elif what == "delete":
            gone = {**current, "metadata": {**current["metadata"], "resourceVersion": str(version)}}
            del live[key]
            out.append(("DELETED", gone))
        else:
            obj = _object(key, version, incarnations[key], what)
            live[key] = obj
            out.append(("MODIFIED", obj))
    return out


def _object(key: tuple, version: int, incarnation: int, what: str) -> dict:
    kind, ns, name = key
    meta = {"name": name, "namespace": ns, "uid": f"{ns}-{name}-{kind[1]}-{incarnation}",
            "resourceVersion": str(version)}
    if what == "finalize":
        meta["finalizers"] = ["ipam.metal3.io"]
        meta["deletionTimestamp"] = "2024-01-01T00:00:00Z"
    if kind == kinds.IPCLAIM:
        spec = {"pool": {"name": f"p{version % 2}"}}
    else:
        spec = {"address": f"10.0.0.{version % 5 + 1}", "pool": {"name": f"p{version % 2}"},
                "claim": {"name": name}}
    return {"apiVersion": kinds.METAL3_API_VERSION, "kind": kind[1], "metadata": meta, "spec": spec,
            "status": {"seen": what}}


def live_at(events: list[tuple[str, dict]], upto: int) -> dict[tuple, dict]:
    live: dict[tuple, dict] = {}
    for event_type, obj in events[:upto]:
        key = (kinds.kind_of(obj), obj["metadata"]["namespace"], obj["metadata"]["name"])
        if event_type == "DELETED":
            live.pop(key, None)
        else:
            live[key] = obj
    return live


class Fed:
    """An inventory fed as the controller feeds it: lean watches (skipping what it holds, or not),
    the writer's answers, and listings."""

    def __init__(self, skip: bool) -> None:
        self.inventory = Inventory()
        self.watches = {}
        for kind, plural in KINDS.items():
            def on_event(event_type, obj):
                obj = slim(obj)
                (self.inventory.remove if event_type == "DELETED" else self.inventory.upsert)(obj)

            async def relist(kind, namespace):
                raise AssertionError("not listed here")
            self.watches[kind] = KindWatch(None, Resource(kinds.METAL3_GROUP, kinds.METAL3_VERSION, plural), kind,
                                           None, on_event, relist,
                                           known=self.inventory.holds if skip else None)

    def event(self, event_type: str, obj: dict) -> None:
        watch = self.watches[kinds.kind_of(obj)]
        line = json.dumps({"type": event_type, "object": obj}).encode()
        watch._event(*decode_event(line, watch.known))

    def answer(self, event_type: str, obj: dict) -> None:
        obj = slim(json.loads(json.dumps(obj)))
        if event_type == "DELETED":
            self.inventory.remove(obj)
        else:
            self.inventory.upsert(obj)

    def forget(self, key: tuple) -> None:
        self.inventory.forget(*key)

    def listing(self, kind: tuple, namespace: str | None, items: list[dict], version: int) -> None:
        items = [slim(json.loads(json.dumps(item))) for item in items]
        self.inventory.settle_listing(kind, namespace, items, str(version))


STEPS = st.lists(st.tuples(st.integers(0, 1), st.integers(0, 1), st.integers(0, 1),
                           st.sampled_from(["write", "write", "finalize", "delete"])), min_size=1, max_size=25)
INPUTS = st.lists(st.tuples(st.sampled_from(["event", "event", "event", "answer", "listing", "forget"]),
                            st.integers(0, 10**6), st.integers(0, 3)), max_size=60)


@settings(max_examples=400, deadline=None)
@given(steps=STEPS, inputs=INPUTS)
def test_skipping_held_events_among_answers_listings_and_forgettings_files_what_filing_everything_files(steps, inputs):
    events = history(steps)
    fed = [Fed(skip=False), Fed(skip=True)]
    for what, pick, extra in inputs:
        index = pick % len(events)
        event_type, obj = events[index]
        for one in fed:
            if what == "event":
                one.event(event_type, obj)
            elif what == "answer":
                one.answer(event_type, obj)
            elif what == "listing":
                # A LIST taken after write ``index``: of one kind, in one namespace or everywhere.
                kind = list(KINDS)[extra % 2]
                namespace = NAMESPACES[extra // 2 % 2] if extra < 2 else None
                live = live_at(events, index + 1)
                items = [o for (k, ns, _), o in sorted(live.items()) if k == kind and namespace in (None, ns)]
                one.listing(kind, namespace, items, int(obj["metadata"]["resourceVersion"]))
            else:
                # The server says the name does not exist (a 404 after its deletion).
                if event_type == "DELETED":
                    one.forget((kinds.kind_of(obj), obj["metadata"]["namespace"], obj["metadata"]["name"]))
    plain, skipping = fed
    assert skipping.inventory.objects == plain.inventory.objects
    assert skipping.inventory._tombstones == plain.inventory._tombstones
    assert skipping.inventory.groups == plain.inventory.groups
