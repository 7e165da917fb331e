"""Two kinds of pool with one name whose ranges overlap: the later withholds what the earlier owns, by key.

The IPPool created first owns the overlap; the pool of the other kind, named
alike and created later, must withhold it and say which pool owns it, by kind
and name (the name alone would name itself).
"""

from __future__ import annotations

import random

from metal3_ipam.core import kinds
from metal3_ipam.core import objects as o
from metal3_ipam.memory import converge
from ipam_objects import NS, capi_claim, ippool, loaded
from other_kind import OTHER, other_pool


def test_an_ippool_created_first_owns_the_overlap_and_the_later_pool_of_another_kind_names_it(other_kind):
    first = ippool("p", namePrefix="ip", pools=[{"start": "10.0.0.1", "end": "10.0.0.4"}])
    first["metadata"]["creationTimestamp"] = "2024-01-01T00:00:00Z"
    later = other_pool("p", ["10.0.0.3-10.0.0.6"])
    later["metadata"]["creationTimestamp"] = "2024-01-02T00:00:00Z"
    api = loaded(first, later,
                 *[capi_claim(f"ip{i}", pool="p") for i in range(4)],
                 *[capi_claim(f"other{i}", pool="p", api_group=OTHER[0], kind=OTHER[1]) for i in range(4)])
    converge(api, random.Random(0))
    held = sorted(o.spec(a)["address"] for a in api.inventory.of_kind(kinds.CAPI_ADDRESS))
    assert len(held) == len(set(held)), f"one IP handed out twice: {held}"
    by_pool = {}
    for a in api.inventory.of_kind(kinds.CAPI_ADDRESS):
        by_pool.setdefault(o.spec(a)["poolRef"]["kind"], set()).add(o.spec(a)["address"])
    assert by_pool["IPPool"] == {"10.0.0.1", "10.0.0.2", "10.0.0.3", "10.0.0.4"}
    assert by_pool[OTHER[1]] == {"10.0.0.5", "10.0.0.6"}
    overlap = next(c for c in o.status(api.inventory.get(OTHER, NS, "p"))["conditions"] if c["type"] == "Overlapping")
    assert "(IPPool p, namePrefix ip)" in overlap["message"], overlap["message"]
    assert not any(c["type"] == "Overlapping" for c in o.status(api.inventory.get(kinds.IPPOOL, NS, "p"))["conditions"])
