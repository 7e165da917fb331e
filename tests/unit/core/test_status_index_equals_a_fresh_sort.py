"""status.indexes kept across passes must equal a fresh sort and cut, whatever happened to a build.

``StatusIndex.build`` is a generator run in slices by the pool's pass: the
event loop gets its turn between them, and a pass may be cancelled there
(the workers stop, the task is cancelled) while the ledger, and its index,
are kept. Whatever a build that was not run to its end did, the next build
must still answer what sorting and cutting the bindings afresh does. And what
is written stays within the byte budget the cut promises.
"""

from __future__ import annotations

import json
import random
from unittest import mock

from hypothesis import given, settings
from hypothesis import strategies as st

from metal3_ipam.core import indexes, kinds
from metal3_ipam.core import objects as o
from metal3_ipam.core.indexes import PLACE_PIECE, StatusIndex
from metal3_ipam.core.reconcile import run_to_end
from metal3_ipam.memory import converge
from go_ipam_objects import go_pool, go_served_capi_claim
from ipam_objects import NS, loaded


def _ip(i: int, net: int = 0) -> str:
    return f"10.{net}.{i // 256}.{i % 256}"


def _started(build, steps: int) -> None:
    """Run a build for ``steps`` slices, then drop it as a cancelled pass does."""
    for _ in range(steps):
        next(build)
    build.close()


def test_a_build_dropped_while_it_places_the_changed_claims_loses_none_of_them():
    """A build takes every noted change out of the index at once, then places them a few hundred per
    slice. Dropped after the first slice, the changes it had not placed yet are noted nowhere: the
    next status shows the old addresses of claims that were given new ones, and none of the new claims."""
    bound = {("IPClaim", f"c{i:05d}"): _ip(i) for i in range(4 * 4 * PLACE_PIECE)}
    index = StatusIndex()
    run_to_end(index.build(bound))
    changed = 3 * PLACE_PIECE  # fewer than a quarter of the pool: placed one by one, not sorted afresh
    for i in range(changed):
        key = ("IPClaim", f"c{i:05d}")
        bound[key] = _ip(i, net=1)  # rebound to another address
        index.touch(key)
    _started(index.build(bound), 1)
    assert run_to_end(index.build(bound)) == run_to_end(StatusIndex().build(bound))


@settings(max_examples=300, deadline=None)
@given(changes=st.lists(st.tuples(st.integers(0, 199), st.sampled_from([None, 0, 1, 2])), max_size=60),
       steps=st.integers(0, 12), budget=st.sampled_from([200, 1000, 100_000]))
def test_after_any_build_cut_short_the_next_equals_a_fresh_sort(changes, steps, budget):
    """Any changes (bind, rebind, unbind), a build run for a few slices and dropped, then a full one.
    The slices are made small (a few entries each) so that a build can be cut short anywhere."""
    with mock.patch.multiple(indexes, PLACE_PIECE=3, FIT_PIECE=3, INDEX_PIECE=7, MAX_INDEXES_BYTES=budget):
        bound = {_key(i): _ip(i) for i in range(0, 200, 2)}
        index = StatusIndex()
        run_to_end(index.build(bound))
        for i, net in changes:
            if net is None:
                if bound.pop(_key(i), None) is not None:
                    index.touch(_key(i))
            elif bound.get(_key(i)) != _ip(i, net):
                bound[_key(i)] = _ip(i, net)
                index.touch(_key(i))
        build = index.build(bound)
        try:
            for _ in range(steps):
                next(build)
        except StopIteration:
            pass
        build.close()
        assert run_to_end(index.build(bound)) == run_to_end(StatusIndex().build(bound))


def _key(i: int) -> tuple[str, str]:
    return ("IPAddressClaim" if i % 3 else "IPClaim", f"n{i}")


def test_the_indexes_written_stay_within_the_byte_budget_whatever_the_address_text(monkeypatch):
    """The budget is one of serialised bytes: a key is counted by its UTF-8 bytes, but an address's
    text by its characters. A text that is not an IP (a Cluster API IPAddress of a paused claim whose
    spec.address is any string: the Cluster API CRD does not require an IP) is written as it is, and
    its bytes may be several times its length: the status written passes the budget."""
    monkeypatch.setattr(indexes, "MAX_INDEXES_BYTES", 400)
    pool = go_pool("gp", NS, {"namePrefix": "gp", "pools": [{"start": "10.0.0.1", "end": "10.0.0.9"}]})
    claim, address = go_served_capi_claim("c", pool, "10.0.0.5")
    claim["metadata"]["annotations"] = {kinds.PAUSED_ANNOTATION: ""}  # left as it is: remembered, not served
    address["spec"]["address"] = "\u00e9" * 300  # 300 characters, 600 bytes of UTF-8 (1800 as \\u escapes)
    api = loaded(pool, claim, address)
    converge(api, random.Random(0))
    written = o.status(api.inventory.get(kinds.IPPOOL, NS, "gp")).get("indexes") or {}
    size = len(json.dumps(written, ensure_ascii=False, separators=(",", ":")).encode())
    assert size <= indexes.MAX_INDEXES_BYTES, f"status.indexes of {size} bytes written: {list(written)}"
