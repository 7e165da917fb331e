"""status.indexes kept in order across binding changes equals the bindings sorted and cut afresh."""

from __future__ import annotations

import json

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from metal3_ipam.core import indexes
from metal3_ipam.core.indexes import StatusIndex
from metal3_ipam.core.objects import index_key
from metal3_ipam.core.reconcile import run_to_end

KEYS = st.tuples(st.sampled_from(["IPClaim", "IPAddressClaim"]),
                 st.text("abz-09", min_size=1, max_size=6))
IPS = st.sampled_from(["10.0.0.1", "10.0.0.22", "2001:db8::333", "192.168.100.200"])
# A binding set or dropped (with or without telling the index), or a status built.
OPS = st.lists(st.one_of(
    st.tuples(st.just("bind"), KEYS, IPS),
    st.tuples(st.just("unbind"), KEYS, st.none()),
    st.tuples(st.just("build"), st.none(), st.none())), max_size=60)


def sorted_and_cut(bound: dict) -> tuple[dict[str, str], int]:
    """The plain reading of the rule: every entry in key order, until the JSON would pass the budget."""
    entries = sorted((index_key(k), v) for k, v in bound.items())
    kept: dict[str, str] = {}
    for n, (key, ip) in enumerate(entries):
        candidate = {**kept, key: ip}
        if len(json.dumps(candidate, separators=(",", ":"))) + 1 > indexes.MAX_INDEXES_BYTES:
            return kept, len(entries) - n
        kept = candidate
    return kept, 0


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(ops=OPS, budget=st.sampled_from([2, 30, 80, 200, 10_000]))
def test_kept_order_equals_a_fresh_sort_after_any_changes(monkeypatch_budget, ops, budget):
    monkeypatch_budget(budget)
    index = StatusIndex()
    bound: dict = {}
    for op, key, ip in ops:
        if op == "bind" and bound.get(key) != ip:
            bound[key] = ip
            index.touch(key)
        elif op == "unbind" and bound.pop(key, None) is not None:
            index.touch(key)
        elif op == "build":
            assert run_to_end(index.build(bound)) == sorted_and_cut(bound)
    assert run_to_end(index.build(bound)) == run_to_end(StatusIndex().build(bound)) == sorted_and_cut(bound)


def test_the_cut_keeps_the_first_keys_that_fit_and_counts_the_rest(monkeypatch_budget):
    monkeypatch_budget(2 + 2 * len('"a":"10.0.0.1",'))
    bound = {("IPClaim", n): "10.0.0.1" for n in "dbca"}
    assert run_to_end(StatusIndex().build(bound)) == ({"a": "10.0.0.1", "b": "10.0.0.1"}, 2)
    index = StatusIndex()
    run_to_end(index.build(bound))
    del bound[("IPClaim", "a")]
    index.touch(("IPClaim", "a"))
    assert run_to_end(index.build(bound)) == ({"b": "10.0.0.1", "c": "10.0.0.1"}, 1)


def test_cluster_api_claims_are_kept_apart_from_ipclaims_of_the_same_name():
    bound = {("IPClaim", "m"): "10.0.0.1", ("IPAddressClaim", "m"): "10.0.0.2"}
    index = StatusIndex()
    assert run_to_end(index.build(bound)) == ({"IPAddressClaim/m": "10.0.0.2", "m": "10.0.0.1"}, 0)


def test_many_changes_at_once_sort_afresh_and_stay_equal():
    bound = {("IPClaim", f"c{i:05d}"): f"10.0.{i // 256}.{i % 256}" for i in range(0, 20_000, 2)}
    index = StatusIndex()
    run_to_end(index.build(bound))
    for i in range(1, 20_000, 2):
        bound[("IPClaim", f"c{i:05d}")] = f"10.1.{i // 256}.{i % 256}"
        index.touch(("IPClaim", f"c{i:05d}"))
    assert run_to_end(index.build(bound)) == run_to_end(StatusIndex().build(bound))


@pytest.fixture
def monkeypatch_budget(monkeypatch):
    return lambda budget: monkeypatch.setattr(indexes, "MAX_INDEXES_BYTES", budget)
