"""A listing filed a few objects at a time, with watch events filed in between, ends as if filed at once."""

from __future__ import annotations

from hypothesis import given, settings, strategies as st

from metal3_ipam.core import kinds
from metal3_ipam.core.inventory import Inventory


def address(name: str, version: int, uid: str | None = None, ip: str = "10.0.0.1") -> dict:
    return {"apiVersion": kinds.METAL3_API_VERSION, "kind": "IPAddress",
            "metadata": {"name": name, "namespace": "ns", "uid": uid or f"uid-{name}",
                         "resourceVersion": str(version)},
            "spec": {"address": ip, "pool": {"name": "p", "namespace": "ns"}, "claim": {"name": name}}}


def listing(n: int, version: int) -> list[dict]:
    return [address(f"a{i}", version - 1 - (i % 7), ip=f"10.0.{i // 250}.{i % 250 + 1}") for i in range(n)]


def test_a_big_listing_is_filed_in_steps_to_the_same_result():
    items = listing(1000, 5000)
    at_once, stepwise = Inventory(), Inventory()
    for inv in (at_once, stepwise):
        inv.upsert(address("stale", 10, ip="10.9.9.9"))  # deleted while no watch told
    touched = at_once.settle_listing(kinds.IPADDRESS, None, items, "5000")
    steps = list(stepwise.settle_listing_in_steps(kinds.IPADDRESS, None, items, "5000", step=100))
    assert len(steps) >= 10
    assert set().union(*steps) == touched == {("ns", "p")}
    assert stepwise.objects == at_once.objects
    assert stepwise.get(kinds.IPADDRESS, "ns", "stale") is None


@given(st.lists(st.tuples(st.integers(0, 59), st.sampled_from(["delete", "newer", "new"])), max_size=30),
       st.integers(1, 20))
@settings(max_examples=100, deadline=None)
def test_events_filed_between_steps_are_kept_as_news_newer_than_the_listing(events, step):
    """A deletion or a newer version told by a watch while the listing (older) is being filed wins."""
    items = listing(60, 1000)
    inv = Inventory()
    news: dict[str, dict | None] = {}
    version = 2000
    it = iter(events)
    for _ in inv.settle_listing_in_steps(kinds.IPADDRESS, None, items, "1000", step=step):
        i, what = next(it, (None, None))  # one watch event between two steps
        if i is None:
            continue
        version += 1
        if what == "new":
            name, obj = f"n{i}", address(f"n{i}", version, ip=f"10.1.0.{i + 1}")
        else:
            name, obj = f"a{i}", address(f"a{i}", version)
        if what == "delete":
            inv.remove(obj)
            news[name] = None
        else:
            inv.upsert(obj)
            news[name] = obj
    for name, obj in news.items():
        assert inv.get(kinds.IPADDRESS, "ns", name) == obj
    listed = {f"a{i}" for i in range(60)}
    for name in listed - set(news):
        assert inv.get(kinds.IPADDRESS, "ns", name) is not None
