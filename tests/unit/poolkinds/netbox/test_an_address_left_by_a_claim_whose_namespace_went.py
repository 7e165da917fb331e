"""An address a claim here left marked released to another cluster (``sweep.left_on_release``: homed at an object
of another cluster that nobody took over), whose namespace is deleted right after the claim (its Cluster, pool and
Secret with it): the sweeps here release it once the release grace is over, and nothing leaks (SPEC §10.3); a
release asks with the token last read once the Secret went."""

from __future__ import annotations

import asyncio

import pytest

from metal3_ipam.poolkinds.netbox.asks import NetBoxAsks, TokenUnavailable
from metal3_ipam.poolkinds.netbox.pool import read_pool
from metal3_ipam.poolkinds.netbox.sweep import Found, Home, description, home_in, swept_at

from sweep_sides import (C1, SP, T1, TP, ClusterSide, SharedNetBox, SharedNetBoxClient, SweepingAsks, cluster_c1,
                         keyed_claim, shared_netbox_pool)

EPOCH = 1_790_000_000.0  # the wall clock at the first sweep
GRACE = 3600.0  # --netbox-release-grace-seconds


class _Side(ClusterSide):
    """The target's controller, sweeping every 300 s of an injected clock (and of the wall clock it writes)."""

    def __init__(self, netbox: SharedNetBox, *objs: dict):
        super().__init__(netbox, *objs, release_grace_seconds=GRACE, wall=lambda: EPOCH + self.now)

    def swept(self) -> list:
        """One sweep as the controller runs it: what it judged of the pools settled after it."""
        self.now += 300
        return asyncio.run(self.pools.swept())

    def gone(self, obj: dict) -> None:
        obj = {**obj, "metadata": {**obj["metadata"], "resourceVersion": "9",
                                   "deletionTimestamp": "2026-11-29T07:00:00Z"}}
        self.inventory.upsert(obj)
        self.inventory.remove(obj)


def test_an_address_a_claim_left_marked_released_is_released_when_its_namespace_goes_right_after_it():
    netbox = SharedNetBox(Found(3, "10.0.0.3/24", "k", description(Home("Cluster", C1), keyed_claim("m", "k", "ns"))))
    claim = keyed_claim("m", "k", "t")
    claim = {**claim, "metadata": {**claim["metadata"], "deletionTimestamp": "2026-11-29T07:00:00Z",
                                   "finalizers": ["ipam.metal3.io"]}}
    cluster, pool = cluster_c1(T1, False, "t"), shared_netbox_pool(TP, "t")
    target = _Side(netbox, cluster, pool, claim)  # a finished move's target; the source's Cluster gone
    asyncio.run(SharedNetBoxClient(netbox).release("k", target.pools._left_on_release))
    assert netbox.released == [] and swept_at(netbox.items[3].description) == EPOCH
    target.inventory.remove(claim)  # the namespace deleted: the claim, then its Cluster and pool
    target.gone(cluster)
    target.gone(pool)
    while target.now < 2 * GRACE:
        target.sweep()
    assert [item.id for item in netbox.released] == [3], f"no claim carries its key, yet NetBox keeps {netbox.items}"


def test_an_address_a_claim_left_marked_released_stays_with_the_live_claim_there_when_its_namespace_goes():
    """The copy's claim released before a sweep of its cluster homed the address (a move restored from a
    directory while the source runs), then its namespace deleted: the source's live claim takes the address back,
    and the sweeps of the copy's controller, swept on, never release it (SPEC §10.1)."""
    netbox = SharedNetBox(Found(3, "10.0.0.3/24", "k", description(Home("Cluster", C1), keyed_claim("m", "k", "ns"))))
    claim = keyed_claim("m", "k", "t")
    claim = {**claim, "metadata": {**claim["metadata"], "deletionTimestamp": "2026-11-29T07:00:00Z",
                                   "finalizers": ["ipam.metal3.io"]}}
    cluster, pool = cluster_c1(T1, False, "t"), shared_netbox_pool(TP, "t")
    target = _Side(netbox, cluster, pool, claim)
    source = _Side(netbox, cluster_c1(C1, False, "ns"), shared_netbox_pool(SP, "ns"), keyed_claim("m", "k", "ns"))
    asyncio.run(SharedNetBoxClient(netbox).release("k", target.pools._left_on_release))
    target.inventory.remove(claim)
    target.gone(cluster)
    target.gone(pool)
    while target.now < 2 * GRACE:
        target.sweep()
        source.now = target.now
        source.sweep()
    assert netbox.released == [], "released the address the source's live claim ns/m is bound to"
    assert home_in(netbox.items[3].description) == Home("Cluster", C1), netbox.items[3].description


class _Tokens:
    """A Secret's token, until the Secret is deleted (``gone``)."""

    gone = False

    async def token(self, namespace, ref):
        if self.gone:
            raise TokenUnavailable("TokenMissing", f"Secret {namespace}/{ref.name} does not exist")
        return "0123456789abcdef0123456789abcdef01234567"

    def forget(self, namespace, ref):
        pass


def test_a_release_asks_with_the_token_last_read_once_its_secret_went_with_its_namespace():
    tokens = _Tokens()
    asks = NetBoxAsks(tokens, owner="o")
    model = read_pool(shared_netbox_pool(TP, "t"))[0]
    asks.pool_changed(model)
    first = asyncio.run(asks._client(model))
    tokens.gone = True  # the namespace deleted: its Secret goes at once
    with pytest.raises(TokenUnavailable):
        asyncio.run(asks._client(model))  # an allocation, or a survey, says the Secret is missing
    assert asyncio.run(asks._client(model, lingering=True)) is first


def test_an_address_homed_here_first_come_from_no_home_is_freed_when_its_namespace_goes_and_the_controller_restarts():
    netbox = SharedNetBox(Found(3, "10.0.0.3/24", "k", "metal3-ipam claim ns/m"))  # no home: an earlier version's
    claim, cluster, pool = keyed_claim("m", "k", "ns"), cluster_c1(C1, False, "ns"), shared_netbox_pool(SP, "ns")
    side = _Side(netbox, cluster, pool, claim)
    side.sweep()  # homed here, first come from no home
    assert home_in(netbox.items[3].description) == Home("Cluster", C1)
    deleted = {**claim, "metadata": {**claim["metadata"], "resourceVersion": "2",
                                     "deletionTimestamp": "2026-11-29T07:00:00Z", "finalizers": ["ipam.metal3.io"]}}
    side.inventory.upsert(deleted)
    asyncio.run(SharedNetBoxClient(netbox).release("k", side.pools._left_on_release))  # its finalizer's release
    side.inventory.remove(deleted)  # the namespace deleted: the claim, then its Cluster; its pool waits on its
    side.gone(cluster)  # finalizer for the address its claim left
    terminating = {**pool, "metadata": {**pool["metadata"], "resourceVersion": "9",
                                        "deletionTimestamp": "2026-11-29T07:00:00Z"}}
    # The controller restarted within the grace; it still sweeps that NetBox for a pool of another namespace.
    restarted = _Side(netbox, shared_netbox_pool(TP, "other"), terminating)
    restarted.now = side.now
    ref, uid = ("ns", terminating["metadata"]["name"]), terminating["metadata"].get("uid")
    assert restarted.pools.answers.held(ref, uid) is not None, "the pool let go before any sweep judged it"
    restarted.swept()
    assert 3 in netbox.items and "1 addresses" in (restarted.pools.answers.held(ref, uid) or "")
    while restarted.now < 4 * GRACE:
        restarted.swept()
    assert 3 not in netbox.items, f"no claim carries key k any more, yet NetBox keeps {netbox.items.get(3)}"
    assert restarted.pools.answers.held(ref, uid) is None, "the pool is held once nothing its claims left waits"


def _terminating(pool: dict) -> dict:
    return {**pool, "metadata": {**pool["metadata"], "resourceVersion": "9",
                                 "deletionTimestamp": "2026-11-29T07:00:00Z", "finalizers": ["netbox.metal3-ipam.io"]}}


def test_a_pool_being_deleted_whose_token_cannot_be_read_is_not_held_for_good():
    """Its namespace deleted: the Secret (not held: nothing was left) goes at once, the pool waits on its finalizer;
    the controller restarted meanwhile (or the pool named a Secret that never existed), so no token was ever read."""
    tokens = _Tokens()
    tokens.gone = True
    pool = _terminating(shared_netbox_pool(TP, "t"))
    side = _Side(SharedNetBox(), pool)
    side.pools = type(side.pools)(NetBoxAsks(tokens, owner="o"), side.pools.answers, inventory=side.inventory,
                                  writer=side.writer, wake=lambda *a: None, sweep_seconds=300,
                                  clock=lambda: side.now, release_grace_seconds=GRACE)
    ref, uid = ("t", "nb"), TP
    while side.now < 4 * GRACE:
        side.swept()
    assert side.pools.answers.held(ref, uid) is None, side.pools.answers.held(ref, uid)


class _OneTokenMissing(SweepingAsks):
    """A NetBox both pools share; the Secret of the pool of namespace ``missing`` cannot be read."""

    def __init__(self, netbox: SharedNetBox, missing: str):
        super().__init__(netbox)
        self.missing = missing

    async def sweep(self, model, choose, still=lambda item: True, lingering=False):
        if model.namespace == self.missing:
            raise TokenUnavailable("TokenMissing", f"Secret {model.namespace}/token does not exist")
        return await super().sweep(model, choose, still, lingering)


def test_a_pool_being_deleted_is_judged_while_another_namespaces_pool_of_its_server_has_no_token():
    pool = _terminating(shared_netbox_pool(TP, "a"))
    broken = shared_netbox_pool(SP, "b")  # live, its tokenSecretRef naming a Secret that does not exist
    netbox = SharedNetBox()
    side = _Side(netbox, pool, broken)
    side.pools.asks = _OneTokenMissing(netbox, "b")
    ref, uid = ("a", "nb"), TP
    while side.now < 4 * GRACE:
        side.swept()
    assert side.pools.answers.held(ref, uid) is None, side.pools.answers.held(ref, uid)


class _NeverAnswers(SweepingAsks):
    """A NetBox that never answers (a server URL mistyped, or a NetBox decommissioned before the cluster)."""

    async def sweep(self, model, choose, still=lambda item: True, lingering=False):
        raise TimeoutError()


def test_a_pool_being_deleted_whose_netbox_never_answered_and_whose_claims_never_left_anything_goes():
    netbox = SharedNetBox()
    side = _Side(netbox, _terminating(shared_netbox_pool(TP, "t")))
    side.pools.asks = _NeverAnswers(netbox)
    ref, uid = ("t", "nb"), TP
    while side.now < 4 * GRACE:
        side.swept()
    assert side.pools.answers.held(ref, uid) is None, side.pools.answers.held(ref, uid)
