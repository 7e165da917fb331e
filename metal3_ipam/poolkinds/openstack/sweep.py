"""The sweep of floating IPs no claim carries, by the rules every outside IPAM's sweep follows here, for Neutron.

A floating IP is this controller's only when its description names an
allocation key of this owner (``pool.description``): one made by it, or one
it took for a claim (kept by ``Retain``, pre-allocated, CAPO's adopted). No
other is ever touched. One is released (as its pool's ``reclaimPolicy`` says)
when:

* its key is carried by no claim, lock or ask here, and its claim was not seen
  leave for a ``clusterctl move`` (``Inventory.moved_away``);
* its pool tag names a pool held here and live (not being deleted), or, not
  tagged yet, a claim here of such a pool carries its key: the floating IPs of a
  pool moved to another cluster, or of another cluster's pool of the same
  project, are that cluster's;
* that pool is not paused: neither by its own paused annotation nor by a
  paused Cluster of its namespace (``clusterctl move`` pauses the Clusters of
  the namespace it moves, deletes the claims, and only then the pools; a move
  stopped in between leaves the pool here, its claims live in the target, and a
  controller restarted since has no ``moved_away`` to tell; in the target, the
  pool's copy may come before the claims'), the rule every outside IPAM's
  sweep follows here for a pool no Cluster pauses itself;
* two sweeps ``sweep_seconds`` apart found it so, with the same description,
  and it is read again by id just before (a claim carrying the key may have
  come meanwhile).

Such a floating IP is left by a claim deleted without its finalizer (forced),
whose release was never asked.

The marks of this cluster on a floating IP (``homes``) are taken off by the
sweeps of its pool; once that pool is no longer held (its namespace deleted,
the source of a finished move), by id: each floating IP a sweep found marked
here, or a release here kept marked left, is remembered with its pool (that
one, by its uid: a pool of that name made again is another), key and the
client it was found with (kept for it when its Secret changes), and judged at
each sweep while no claim here carries its key (a floating IP left to another
cluster released once that cluster answered no hold for a whole sweep; this
cluster's marks taken off any other), with that client: a Secret of that name
made again may be another project's, and a read with other credentials that
finds nothing leaves it remembered. That memory is this controller's only.
One whose claim here was seen leave for a ``clusterctl move``
(``Inventory.moved_away``) is kept, with this cluster's marks, until another
cluster's home or live hold shows the moved claim there; this cluster's marks
then come off, and that cluster decides (one it let go before this cluster saw
its mark is kept: a leak, never a release under the moved claim). Any other
found there still homed and answered here, with no other cluster's mark (the
claim there let it go on that answer, and the claim here went unreleased:
deleted without its finalizer, or moved before a restart here) is marked left
as a release here marks it (``homes.left_unreleased``), and released once
unanswered.

The other way round, a floating IP deleted in Neutron behind the controller
(by a user, or with its network) while a claim holds it: each sweep finds the
keys of the locks of its live claims that no floating IP carries (looked up by
the key again to be sure) and records them (``Inventory.address_lost``): the
claim says so (condition ``AddressLost``) with a Warning Event, and the pool
lists the address in ``failedIPs``. Nothing is made anew for it: the machine's
address would change under it. The claim keeps its IPAddress, so its IP is no
other claim's while that stands: a create that Neutron answers with that
address gives it back to the key, found lost yet or not (``asks.make`` looks
at every lock's address), and no pre-allocated one is made at it for another. A floating IP carrying the
key again (an admin made one with that address and the key's description)
ends it at the next sweep, as does the claim's deletion.

A key may also carry two floating IPs: two replicas (or a leader that lost its
lease with a create out) both found none for it and both made one, and each
gave the claim its own; or a create whose answer was lost (a timeout) was
carried out after the claim was given another. The claim holds one (its lock names the address); the
other, made in vain, is released by the same rules (two sightings, read again
just before, the lock still naming the other address).
"""

from __future__ import annotations

import dataclasses
import logging
from typing import Any, Callable

from metal3_ipam.controller.outside import Left
from metal3_ipam.core import kinds
from metal3_ipam.core import objects as o
from metal3_ipam.core.actions import Event, Plan
from metal3_ipam.core.reconcile import ADDRESS_LOST
from metal3_ipam.poolkinds.openstack import homes
from metal3_ipam.poolkinds.openstack import pool as p
from metal3_ipam.poolkinds.openstack.client import FloatingIP, Neutron, OpenStackError
from metal3_ipam.poolkinds.openstack.marks import homed_elsewhere_message, marked
from metal3_ipam.poolkinds.openstack.pool import OPENSTACK_FLOATING_IP_POOL, OpenStackPool

log = logging.getLogger(__name__)

#: The Warning Event on a claim bound to a floating IP homed at another cluster (``homes``).
HOMED_ELSEWHERE_EVENT = "OpenStackAddressHomedElsewhere"


def owned(neutron: Neutron, pool: OpenStackPool, owner: str) -> list[FloatingIP]:
    """The floating IPs of the project whose description names a key of this owner, tagged or not (a create
    whose tag call never came is found too; Neutron filters descriptions only exactly)."""
    return [fip for fip in neutron.floating_ips() if p.key_in(owner, fip.description) is not None]


def carrying(neutron: Neutron, pool: OpenStackPool, owner: str, key: str) -> list[FloatingIP]:
    """The floating IPs whose description names ``key``, as Neutron lists them now."""
    return neutron.floating_ips(description=p.description(owner, key))


def tag_found(neutron: Neutron, pool: OpenStackPool, owner: str, key: str, address: str) -> None:
    """The floating IP carrying ``key`` at ``address`` (given back by hand) tagged as the pool's own are."""
    tags = {owner, p.pool_tag(owner, pool.namespace, pool.name)}
    for fip in carrying(neutron, pool, owner, key):
        if fip.address == address and not tags <= set(fip.tags):
            marked(neutron, fip, homes.Change(add=tuple(sorted(tags))))


def mark(neutron: Neutron, pool: OpenStackPool, owner: str, fip: FloatingIP, change: homes.Change) -> None:
    marked(neutron, fip, change)


def lost_message(pool: OpenStackPool, owner: str, key: str, address: str) -> str:
    return (f"floating IP {address} of allocation key {key} is gone from Neutron: deleted in the project of "
            f"{pool.text}'s cloud, not by this controller. The claim keeps its IPAddress, and {address} is handed "
            "to no other claim while it stands; no floating IP is made anew for it (the machine's address would "
            "change). Delete the claim to have a new one made, or give it back: make a floating IP with address "
            f"{address} and description {p.description(owner, key)!r} in the project")


def read(neutron: Neutron, pool: OpenStackPool, owner: str, fip_id: str) -> FloatingIP | None:
    return neutron.get(fip_id)


def release_one(neutron: Neutron, pool: OpenStackPool, owner: str, fip: FloatingIP, still: Any) -> bool:
    """``fip`` released as ``pool`` says, if it still is as listed and ``still(fip as read again)`` holds, at the
    revision read again (a mark another cluster adds meanwhile keeps it); whether it was."""
    now = neutron.get(fip.id)
    if now is None or now.description != fip.description or not still(now):
        return False
    if p.deleted_on_release(pool, owner, now.address, now.tags):
        return neutron.delete(now.id, now.revision)  # False: changed since it was read again, judged anew later
    taken = neutron.describe(now.id, p.available_description(owner), now.revision)
    if taken is None:
        return False
    marks = homes.on_release(owner, now.tags, lambda h: homes.PRESENT)[1].remove  # a kept one bears no claim's mark
    marked(neutron, taken, homes.Change(add=(owner, p.pool_tag(owner, pool.namespace, pool.name)), remove=marks))
    return True


@dataclasses.dataclass(frozen=True)
class Marked:
    """A floating IP carrying marks of objects here (``homes``): the pool it was last judged with (that very
    pool, by its uid: one of that name made again is another), its key, and the client its cloud was asked with
    then (``OpenStackAsks.client_of``; None: the asks keep none)."""

    pool: OpenStackPool
    key: str
    client: tuple | None = None
    address: str = ""


class Sweeper:
    """The sweeps of one controller, over the clouds of the pools it holds (``pools``: the service), and of the
    floating IPs marked here whose pool is no longer held (``marked``)."""

    def __init__(self, pools: Any):
        self.pools = pools
        self._sighted: dict[str, str] = {}  # floating IP id -> description, found carried by nothing last sweep
        #: key -> (pool namespace, pool name, address): a claim's floating IP found gone from Neutron
        self.lost: dict[str, tuple[str, str, str]] = {}
        self._told: set[tuple[str, homes.Home]] = set()  # (key, other home) a claim here was warned of
        #: (floating IP id, home here) held last sweep, waiting for the home it is at to answer (``homes.mend``)
        self._waiting: set[tuple[str, homes.Home]] = set()
        #: (floating IP id, home here) a claim here left homed at another cluster, found unanswered last sweep
        self._left: set[tuple[str, homes.Home]] = set()
        #: floating IP id -> its pool and key, of each carrying marks of objects here, found by a sweep of its pool
        #: or kept marked left by a release here: judged by id at each sweep that its pool is no longer held (its
        #: namespace deleted, its Cluster, pool and Secret with it), until this cluster's marks are off it
        self.marked: dict[str, Marked] = {}
        #: the objects here marks were found naming: still this cluster's once gone (never another cluster's)
        self._ours: set[homes.Home] = set()
        #: floating IP id -> the count of releases here that kept floating IPs marked left when that one was: a
        #: sweep that began before (``_listing``) does not forget it for the tags it listed
        self._released_at: dict[str, int] = {}
        self._releases = 0
        self._listing = 0

    def remember_left(self, pool: OpenStackPool, key: str, fip_id: str, home: homes.Home | None) -> None:
        """A release here kept floating IP ``fip_id`` of ``key``, marked left by the claim at ``home``."""
        if home is not None:
            self._keep(fip_id, Marked(pool, key, self.pools.asks.client_of(pool)))
            self._ours.add(home)
            self._releases += 1
            self._released_at[fip_id] = self._releases
            self.pools.unjudge((pool.namespace, pool.name))

    def keeps(self, client: tuple) -> bool:
        """Whether a floating IP remembered here was found with ``client`` (kept for it when its Secret changes)."""
        return any(marked.client == client for marked in self.marked.values())

    def _keep(self, fip_id: str, marked: Marked) -> None:
        """``fip_id`` remembered as ``marked`` (the client kept for it before, if another and no longer needed,
        closed)."""
        before = self.marked.get(fip_id)
        self.marked[fip_id] = marked
        if before is not None and before.client not in (None, marked.client):
            self.pools.asks.forget_client(before.client)

    def _forget(self, fip_id: str) -> None:
        """``fip_id`` no longer remembered (nor the client kept for it alone)."""
        self._released_at.pop(fip_id, None)
        marked = self.marked.pop(fip_id, None)
        if marked is not None and marked.client is not None:
            self.pools.asks.forget_client(marked.client)

    def _remember(self, fip: FloatingIP, pool: OpenStackPool, key: str, home: Any) -> None:
        """``fip`` (as it is now, of ``pool``) remembered while it carries marks of objects here."""
        named = homes.marks_in(self.pools.asks.owner, fip.tags)
        ours = {h for h in named.homes | named.froms | named.holds | named.lefts if home(h) != homes.ABSENT}
        if ours:
            self._ours.update(ours)
            self._keep(fip.id, Marked(pool, key, self.pools.asks.client_of(pool), fip.address))
        elif self._released_at.get(fip.id, 0) <= self._listing:  # not kept by a release since it was listed
            self._forget(fip.id)

    def lost_of(self, pool: OpenStackPool) -> tuple[str, ...]:
        """The addresses of ``pool``'s claims whose floating IPs are gone from Neutron."""
        return tuple(sorted(address for ns, name, address in self.lost.values()
                            if (ns, name) == (pool.namespace, pool.name)))

    def _held(self) -> dict[str, OpenStackPool]:
        """The live pools held here, by their pool tag (a paused one too: its floating IPs are no other's)."""
        owner = self.pools.asks.owner
        found = {}
        for pool_key in self.pools.inventory.pool_keys():
            if pool_key.kind == OPENSTACK_FLOATING_IP_POOL and (model := self.pools.live_pool(pool_key)) is not None:
                found[p.pool_tag(owner, model.namespace, model.name)] = model
        return found

    def _terminating(self) -> dict[str, OpenStackPool]:
        """The pools held here being deleted (not paused: a move under way), by their pool tag: held by their
        finalizer while what their claims left for another cluster to answer is not judged."""
        owner, inventory, found = self.pools.asks.owner, self.pools.inventory, {}
        for pool_key in inventory.pool_keys():
            pool_obj = inventory.get(OPENSTACK_FLOATING_IP_POOL, pool_key.namespace, pool_key.name) \
                if pool_key.kind == OPENSTACK_FLOATING_IP_POOL else None
            if pool_obj is None or not o.is_deleting(pool_obj):
                continue
            model = self.pools.read_model(pool_obj)
            if model is not None and not self._paused(model):
                found[p.pool_tag(owner, model.namespace, model.name)] = model
        return found

    async def _sweep_terminating(self, terminating: dict[str, OpenStackPool], shared: dict[str, int]) -> set[str]:
        """The floating IPs of the pools being deleted that carry marks of objects here, found again in Neutron
        (listed with their Secret as it is now) and remembered for ``_sweep_marked`` to judge: what a claim here
        left is found again after a restart. The pool tags of those whose cloud was listed; how many of each one's
        floating IPs another cluster marks too, in ``shared``."""
        owner, asks = self.pools.asks.owner, self.pools.asks
        listed_tags: set[str] = set()
        held: Callable[[str, str], bool] | None = None
        for tag, model in terminating.items():
            try:
                listed = await asks.run_lingering(model, owned)
            except OpenStackError as exc:
                log.warning("sweep of the cloud of %s, being deleted: %s", model.text, exc)
                # Not listed: judged from what this process found where nothing says its claims left more: no
                # credentials to list with (its Secret missing or unusable, which our finalizer keeps while a pool
                # needs it), or its Secret neither held nor recorded held for it (``OutsidePools.secrets_held``).
                # Else it waits for a sweep that lists its cloud.
                if held is None:
                    held = await self.pools.secrets_held()
                if (exc.reason == p.IDENTITY_MISSING and not exc.passing) or \
                        not held(model.namespace, model.identity.secret, model.uid):
                    listed_tags.add(tag)
                continue
            listed_tags.add(tag)
            home = self._home_state()
            for fip in listed:
                key = p.key_in(owner, fip.description)
                if key is not None and tag in fip.tags and self._shared(fip, home):
                    shared[tag] = shared.get(tag, 0) + 1
                if key is not None and tag in fip.tags and fip.id not in self.marked:
                    self._remember(fip, model, key, home)
        return listed_tags

    def _judge(self, models: dict[str, OpenStackPool], shared: dict[str, int]) -> None:
        """What the claims of each pool judged this sweep left (``OutsidePools.judge``): the floating IPs
        remembered for it whose key no claim here carries (but those of claims seen leave for a move: kept, never
        released here), and those of its live claims another cluster marks."""
        inventory = self.pools.inventory
        for tag, model in models.items():
            waiting = tuple(sorted(kept.address or fip_id for fip_id, kept in self.marked.items()
                                   if kept.pool.uid == model.uid and kept.key not in inventory.moved_away
                                   and all(o.is_deleting(claim) for claim in inventory.claims_carrying(kept.key))))
            self.pools.judge((model.namespace, model.name), Left(model.uid, waiting, shared.get(tag, 0),
                                                                 model.identity.secret))

    def _paused(self, pool: OpenStackPool) -> bool:
        """Whether ``pool`` is paused for the sweep: by its own paused annotation, or while a Cluster of its
        namespace is paused (a ``clusterctl move`` under way or stopped half-way)."""
        inventory = self.pools.inventory
        if o.is_paused(inventory.get(OPENSTACK_FLOATING_IP_POOL, pool.namespace, pool.name)):
            return True
        return any(o.cluster_paused(cluster) and o.meta(cluster).get("namespace") == pool.namespace
                   for cluster in inventory.of_kind(kinds.CLUSTER))

    def _pool_of(self, key: str | None, held: dict[str, OpenStackPool]) -> OpenStackPool | None:
        """The pool held here of a claim carrying ``key`` (for a floating IP not tagged yet), or None."""
        for claim in self.pools.inventory.claims_carrying(key) if key is not None else ():
            ref = o.pool_of(claim)
            if ref is not None and ref.kind == OPENSTACK_FLOATING_IP_POOL:
                found = held.get(p.pool_tag(self.pools.asks.owner, o.namespace(claim), ref.name))
                if found is not None:
                    return found
        return None

    def _loose(self, key: str, fip: FloatingIP) -> bool:
        """Whether ``fip`` is still no claim's: its key carried by nothing, or held by another address."""
        held = self.pools.bound().get(key)
        return held not in (None, fip.address) or not self.pools.carried()(key)

    async def sweep(self) -> list[FloatingIP]:
        """Each cloud of the pools held swept once; the floating IPs released."""
        asks, owner = self.pools.asks, self.pools.asks.owner
        self._listing = self._releases  # the releases here that kept floating IPs before any cloud is listed
        held = self._held()
        clouds: dict[Any, OpenStackPool] = {}
        for model in held.values():
            clouds.setdefault(asks.cloud_of(model), model)
        sighted: dict[str, str] = {}
        released: list[FloatingIP] = []
        contests: dict[str, tuple[FloatingIP, homes.Home, OpenStackPool]] = {}
        swept: set[str] = set()
        waiting: set[tuple[str, homes.Home]] = set()
        left: set[tuple[str, homes.Home]] = set()
        handled: set[str] = set()
        judged: dict[str, OpenStackPool] = {}
        shared: dict[str, int] = {}
        for model in clouds.values():
            try:
                listed = await asks.run(model, owned)
            except OpenStackError as exc:
                log.warning("sweep of the cloud of %s: %s", model.text, exc)
                continue
            judged.update((t, m) for t, m in held.items() if asks.cloud_of(m) == asks.cloud_of(model))
            carried, bound, home = self.pools.carried(), self.pools.bound(), self.pools.home_state()
            listed = await self._mark(listed, held, model, home, contests, waiting, left, released, handled)
            for fip in listed:
                if (tag := next((t for t in fip.tags if t in held), None)) is not None and self._shared(fip, home):
                    shared[tag] = shared.get(tag, 0) + 1
            addresses: dict[str, set[str]] = {}
            for fip in listed:
                addresses.setdefault(p.key_in(owner, fip.description) or "", set()).add(fip.address)
            for fip in listed:
                key = p.key_in(owner, fip.description)
                pool = next((held[t] for t in fip.tags if t in held), None) or self._pool_of(key, held)
                if key is None or pool is None or asks.cloud_of(pool) != asks.cloud_of(model) or self._paused(pool):
                    continue
                extra = bound.get(key) not in (None, fip.address) and bound.get(key) in addresses[key]
                if carried(key) and not extra:
                    continue
                if not homes.sweepable(owner, fip.tags, home):
                    continue  # homed or held at another cluster (its claim is bound to it), or paused here
                if self._sighted.get(fip.id) != fip.description:
                    sighted[fip.id] = fip.description
                    continue
                try:
                    done = await asks.run(pool, release_one, fip, lambda now, key=key, fip=fip, pool=pool:
                                          self._loose(key, fip) and not self._paused(pool)
                                          and homes.sweepable(owner, now.tags, self.pools.home_state()))
                except OpenStackError as exc:
                    log.warning("sweep: %s of %s (key %s) not released: %s", fip.address, pool.text, key, exc)
                    sighted[fip.id] = fip.description
                    continue
                if done:
                    log.info("sweep: floating IP %s (%s) of %s released: %s", fip.address, fip.id, pool.text,
                             f"its key {key} is held by {bound[key]}, made for it too" if extra else
                             f"no claim carries its key {key}")
                    released.append(fip)
            log.info("swept the cloud of %s: %d floating IPs of owner %s, %d released", model.text, len(listed),
                     owner, sum(1 for fip in released if fip in listed))
            await self._find_lost(model, listed, held)
            swept.update(k for fip in listed if (k := p.key_in(owner, fip.description)) is not None)
        terminating = self._terminating()
        listed_tags = await self._sweep_terminating(terminating, shared)
        await self._sweep_marked(held, handled, left, released, terminating)
        judged.update((t, m) for t, m in terminating.items() if t in listed_tags)
        self._judge(judged, shared)
        self._sighted, self._waiting, self._left = sighted, waiting, left
        await self._homed_elsewhere(contests, swept)
        return released

    async def _mark(self, listed: list[FloatingIP], held: dict[str, OpenStackPool], model: OpenStackPool,
                    home: Any, contests: dict[str, tuple[FloatingIP, homes.Home, OpenStackPool]],
                    waiting: set[tuple[str, homes.Home]], left: set[tuple[str, homes.Home]],
                    released: list[FloatingIP], handled: set[str]) -> list[FloatingIP]:
        """The marks of the listed floating IPs mended (``homes.mend``): each bound to a claim here carrying its key
        (its lock holds that address) homed, taken over, or held by that claim's home; this cluster's holds taken
        off those whose key nothing here carries any more. The claims left bound to a floating IP homed at another
        cluster go in ``contests``; those held waiting for the cluster they are homed at to answer, in ``waiting``
        (taken over at the next sweep if it did not). A floating IP a claim here left homed at another cluster
        (``homes.on_release``) is left to that cluster if it answered, else released at the next sweep (found so
        in ``left`` now; those released, in ``released``). The ids of those of a pool held here go in ``handled``
        (judged here, not by ``marked``). The floating IPs as they are now."""
        asks, owner, bound, carried = self.pools.asks, self.pools.asks.owner, self.pools.bound(), self.pools.carried()
        out = []
        for fip in listed:
            key = p.key_in(owner, fip.description)
            pool = next((held[t] for t in fip.tags if t in held), None) or self._pool_of(key, held)
            mine = self.pools.carrier_home(key) if key is not None else None
            if key is None or pool is None or asks.cloud_of(pool) != asks.cloud_of(model):
                out.append(fip)
                continue
            handled.add(fip.id)
            if mine is not None and bound.get(key) == fip.address:
                change = homes.mend(owner, fip.tags, mine, home, take=(fip.id, mine) in self._waiting)
                if change.waiting:
                    waiting.add((fip.id, mine))
            elif not carried(key) and (gone := homes.left_here(owner, fip.tags, left_home := self._left_home(fip))) \
                    is not None:
                if homes.answered(owner, fip.tags, left_home):  # a claim there lives: its own
                    change = homes.Change(remove=tuple(homes.tag(owner, m, gone) for m in (homes.HELD, homes.LEFT)))
                else:
                    change = homes.Change()
                    if self._paused(pool):
                        pass  # a move under way: nothing released, and the wait for an answer starts once unpaused
                    elif (fip.id, gone) not in self._left or not await self._release_left(
                            pool, key, fip, gone, released, home_of=self._left_home):
                        left.add((fip.id, gone))
                    else:
                        continue  # released, forgotten: not remembered again (its pool judged waiting for it)
            elif not carried(key):
                change = homes.Change(remove=homes.stale(owner, fip.tags, home))
            else:
                change = homes.Change()
            if change.elsewhere is not None:
                contests[key] = (fip, change.elsewhere, pool)
            if change.add or change.remove:
                try:
                    await asks.run(pool, mark, fip, change)
                except OpenStackError as exc:
                    log.warning("sweep: the marks of floating IP %s (key %s) of %s not written: %s", fip.address,
                                key, pool.text, exc)
                    waiting.discard((fip.id, mine))  # its hold may not be there for the other cluster to answer
                    self._remember(fip, pool, key, home)
                    out.append(fip)
                    continue
                log.info("sweep: floating IP %s (key %s) of %s: marks %s added, %s taken off", fip.address, key,
                         pool.text, list(change.add), list(change.remove))
                fip = dataclasses.replace(fip, tags=tuple(t for t in (*fip.tags, *change.add)
                                                          if t not in change.remove))
            self._remember(fip, pool, key, home)
            out.append(fip)
        return out

    async def _release_left(self, pool: OpenStackPool, key: str, fip: FloatingIP, gone: homes.Home,
                            released: list[FloatingIP], client: tuple | None = None,
                            home_of: Callable[[FloatingIP], Any] | None = None) -> bool:
        """A floating IP a claim here left homed at another cluster that answered no hold for a whole sweep (the
        source of a finished move is gone): released as its pool says, if still so when read again (and its pool
        still not paused). ``home_of(fip)``: the state of the objects its marks name (``_home_state()``)."""
        owner = self.pools.asks.owner

        def still(now: FloatingIP) -> bool:  # a claim here seen leave for a move meanwhile: the moved claim's
            home = home_of(now) if home_of is not None else self._home_state()
            return not self.pools.carried()(key) and homes.left_here(owner, now.tags, home) == gone \
                and not homes.answered(owner, now.tags, home) and not self._paused(pool)
        try:
            done = await self.pools.asks.run_lingering(pool, release_one, fip, still, client=client)
        except OpenStackError as exc:
            log.warning("sweep: %s of %s (key %s) not released: %s", fip.address, pool.text, key, exc)
            return False
        if done:
            log.info("sweep: floating IP %s (%s) of %s released: its claim here left it homed at another cluster, "
                     "which answered for no claim of its own there", fip.address, fip.id, pool.text)
            released.append(fip)
            self._forget(fip.id)
        return done

    def _home_state(self) -> Any:
        """``home_state`` of the service, where the objects here that marks were found naming are here still, gone
        or not: their marks are this cluster's, never another's."""
        here, ours = self.pools.home_state(), frozenset(self._ours)
        return lambda h: homes.PRESENT if h in ours and here(h) == homes.ABSENT else here(h)

    def _left_home(self, fip: FloatingIP) -> Any:
        """``_home_state()`` for the left mark of ``fip``, a floating IP of a pool held here whose key nothing here
        carries: the objects absent here whose claim left it (a hold marked left) count as here too. A claim of this
        cluster left it so, its Cluster deleted since (the pool staying); after a restart nothing but that mark
        remembers it. (Were it another cluster's claim that left it, that cluster's sweep would release it the
        same: unanswered for a whole sweep.)"""
        home = self._home_state()
        named = homes.marks_in(self.pools.asks.owner, fip.tags)
        ours = frozenset(h for h in named.lefts & named.holds if home(h) == homes.ABSENT)
        return (lambda h: homes.PRESENT if h in ours else home(h)) if ours else home

    def _shared(self, fip: FloatingIP, home: Any) -> bool:
        """Whether a floating IP a live claim here carries the key of carries a mark of another cluster's object (a
        home, hold, ``from`` or ``left``): its release may leave it for that cluster to answer."""
        key = p.key_in(self.pools.asks.owner, fip.description)
        if key is None or all(o.is_deleting(claim) for claim in self.pools.inventory.claims_carrying(key)):
            return False  # no live claim here carries its key: left (judged as such), or none of this cluster's
        named = homes.marks_in(self.pools.asks.owner, fip.tags)
        return any(home(h) == homes.ABSENT for h in named.homes | named.holds | named.froms | named.lefts)

    async def _sweep_marked(self, held: dict[str, OpenStackPool], handled: set[str],
                            left: set[tuple[str, homes.Home]], released: list[FloatingIP],
                            terminating: dict[str, OpenStackPool] | None = None) -> None:
        """The floating IPs carrying marks of objects here that no pool held here judged this sweep (their pool
        deleted, or being deleted, since: the namespace gone with it), read by id, with the client they were found
        with (else their pool's Secret as it is now, and not found so they stay remembered). While a claim here
        carries the key (or an ask of it is out) it waits, as while that very pool (its uid) is held. One a claim
        here left to another cluster (``homes.on_release``) is judged as ``_mark`` does: this cluster's marks taken
        off once that cluster answered (a claim there lives: it is its own), released once unanswered for a whole
        sweep, as its pool said. One whose claim here was seen leave for a move is kept, marks and all, until another
        cluster's home or live hold shows the moved claim. Off any other come this cluster's marks (its claim deleted
        for a move, or without its finalizer, before its sweep took them off): no claim here is bound to it, and a
        mark of a cluster whose pool is gone would keep it from every other cluster's sweep for good."""
        owner, asks = self.pools.asks.owner, self.pools.asks
        for fip_id, kept in list(self.marked.items()):
            if fip_id in handled:
                continue
            pool, key = kept.pool, kept.key
            if self.pools.inventory.claims_carrying(key) or self.pools.answers.state(key) is not None:
                continue
            now = held.get(p.pool_tag(owner, pool.namespace, pool.name))
            if now is not None and now.uid == pool.uid:  # that very pool, held: its Secret may change meanwhile
                self._keep(fip_id, dataclasses.replace(kept, client=asks.client_of(now) or kept.client))
                continue
            client = kept.client if kept.client is not None and asks.has_client(kept.client) else None
            deleting = (terminating or {}).get(p.pool_tag(owner, pool.namespace, pool.name))
            if deleting is not None and deleting.uid == pool.uid:  # held by its finalizer: its Secret as it is now
                pool, client = deleting, None
            try:
                fip = await asks.run_lingering(pool, read, fip_id, client=client)
            except OpenStackError as exc:
                log.warning("sweep: floating IP %s (key %s) marked by a claim of %s not read: %s", fip_id, key,
                            pool.text, exc)
                continue
            if fip is None and client is None and kept.client is not None and deleting is None:
                log.warning("sweep: floating IP %s (key %s) marked by a claim of %s not found with the credentials "
                            "its Secret holds now (another project's?); remembered still", fip_id, key, pool.text)
                continue
            home = self._home_state()
            named = homes.marks_in(owner, fip.tags) if fip is not None else homes.Marks()
            ours = [homes.tag(owner, mark, h) for mark, found in ((homes.HOME, named.homes), (homes.FROM, named.froms),
                                                                  (homes.HELD, named.holds), (homes.LEFT, named.lefts))
                    for h in found if h in self._ours]
            if fip is None or p.key_in(owner, fip.description) != key or not ours:
                self._forget(fip_id)  # gone, another key's, or no mark of this cluster's on it
                continue
            if key in self.pools.inventory.moved_away and not named.live(home):
                continue  # its claim left for a move: kept, marks and all, until the moved claim's cluster marks it
            gone = homes.left_here(owner, fip.tags, home)
            if gone is not None and not homes.answered(owner, fip.tags, home):
                if self._paused(pool):
                    continue  # a move under way: nothing released, and the wait for an answer starts once unpaused
                if (fip_id, gone) not in self._left or \
                        not await self._release_left(pool, key, fip, gone, released, client):
                    left.add((fip_id, gone))
                continue
            handed = homes.left_unreleased(owner, fip.tags, home)
            if handed is not None:  # the claim there let it go on this cluster's answer: held, marked left
                if self._paused(pool):
                    continue  # a move under way
                try:
                    await asks.run_lingering(pool, mark, fip, handed, client=client)
                except OpenStackError as exc:
                    log.warning("sweep: floating IP %s (key %s) of %s not marked left: %s", fip.address, key,
                                pool.text, exc)
                    continue
                log.info("sweep: floating IP %s (key %s) of %s, whose claim here went unreleased after another "
                         "cluster's claim let it go: marks %s added, %s taken off", fip.address, key, pool.text,
                         list(handed.add), list(handed.remove))
                if (gone := homes.left_here(owner, [*fip.tags, *handed.add], home)) is not None:
                    left.add((fip_id, gone))
                continue
            try:  # another cluster answered for a claim of its own there, or none here left it: its marks go
                await asks.run_lingering(pool, mark, fip, homes.Change(remove=tuple(ours)), client=client)
            except OpenStackError as exc:
                log.warning("sweep: the marks of floating IP %s (key %s) of %s not taken off: %s", fip.address, key,
                            pool.text, exc)
                continue
            log.info("sweep: floating IP %s (key %s) of %s, a pool no longer held here: marks %s taken off",
                     fip.address, key, pool.text, ours)
            self._forget(fip_id)

    async def _homed_elsewhere(self, contests: dict[str, tuple[FloatingIP, homes.Home, OpenStackPool]],
                               swept: set[str]) -> None:
        """What the claims bound to a floating IP homed at another cluster say (condition ``AddressHomedElsewhere``,
        ``core.reconcile``), and a Warning Event on each once; the pools of those whose saying changed are passed
        over again."""
        inventory = self.pools.inventory
        now = {key: homed_elsewhere_message(pool, fip, there) for key, (fip, there, pool) in contests.items()}
        gone = {key for key in inventory.homed_elsewhere if not inventory.claims_carrying(key)}
        for key in {k for k in swept | gone if inventory.homed_elsewhere.get(k) != now.get(k)}:
            if key in now:
                inventory.homed_elsewhere[key] = now[key]
            else:
                inventory.homed_elsewhere.pop(key, None)
            self.pools.wake_carriers(key, None)
        for key, (fip, there, pool) in contests.items():
            claims = [c for c in inventory.claims_carrying(key) if not o.is_deleting(c)]
            if not claims or (key, there) in self._told:
                continue
            self._told.add((key, there))
            claim = claims[0]
            log.warning("%s %s/%s: %s", HOMED_ELSEWHERE_EVENT, o.namespace(claim), o.name(claim), now[key])
            plan = Plan()
            plan.step(f"claim {o.namespace(claim)}/{o.name(claim)}", about=o.ref(claim)).add(
                Event(o.ref(claim), "Warning", HOMED_ELSEWHERE_EVENT, now[key][:1000]))
            try:
                await self.pools.writer.execute(plan, o.PoolKey(pool.namespace, pool.name, OPENSTACK_FLOATING_IP_POOL))
            except Exception:  # an Event lost is no reason to end the sweeps
                log.exception("claim %s/%s: Event %s not written", o.namespace(claim), o.name(claim),
                              HOMED_ELSEWHERE_EVENT)

    def _bound_claims(self, held: dict[str, OpenStackPool]) -> list[tuple[str, str, dict, OpenStackPool]]:
        """(key, address, claim, pool) of each live claim of a live, unpaused pool held here whose lock holds an
        address."""
        found = []
        for key, address in self.pools.bound().items():
            for claim in self.pools.inventory.claims_carrying(key):
                pool = self._pool_of(key, held)
                if pool is not None and not o.is_deleting(claim) and not self._paused(pool):
                    found.append((key, address, claim, pool))
                    break
        return found

    async def _find_lost(self, model: OpenStackPool, listed: list[FloatingIP], held: dict[str, OpenStackPool]
                         ) -> None:
        """The keys of this cloud's claims whose floating IP is gone (see the module's docstring), recorded, told
        once, and their pools passed over again; those found again (or no longer a claim's) forgotten."""
        asks, owner = self.pools.asks, self.pools.asks.owner
        listed_keys = {p.key_in(owner, fip.description) for fip in listed}
        cloud = asks.cloud_of(model)
        now: dict[str, tuple[dict, OpenStackPool, str]] = {}
        for key, address, claim, pool in self._bound_claims(held):
            if asks.cloud_of(pool) != cloud or key in listed_keys:
                continue
            try:
                if await asks.run(pool, carrying, key):
                    continue  # made or given back since the listing
            except OpenStackError as exc:
                log.warning("sweep: the floating IP of key %s of %s not looked up: %s", key, pool.text, exc)
                continue
            now[key] = (claim, pool, address)
        inventory = self.pools.inventory
        for key, (ns, name, address) in list(self.lost.items()):
            pool = held.get(p.pool_tag(owner, ns, name))
            if key in now or (pool is not None and asks.cloud_of(pool) != cloud):
                continue  # still lost, or of another cloud (swept on its own)
            if pool is not None:
                try:
                    await asks.run(pool, tag_found, key, address)
                except OpenStackError as exc:
                    log.warning("sweep: the floating IP of key %s of %s not tagged: %s", key, pool.text, exc)
                    continue
            del self.lost[key]
            inventory.address_lost.pop(key, None)
            log.info("sweep: the floating IP of key %s of %s %s/%s is no longer lost", key, p.KIND, ns, name)
            self.pools.wake(o.PoolKey(ns, name, OPENSTACK_FLOATING_IP_POOL), key)
            self.pools.survey_soon(o.PoolKey(ns, name, OPENSTACK_FLOATING_IP_POOL))
        for key, (claim, pool, address) in now.items():
            if key in self.lost:
                continue
            message = lost_message(pool, owner, key, address)
            self.lost[key] = (pool.namespace, pool.name, address)
            inventory.address_lost[key] = message
            log.warning("%s %s/%s: %s", ADDRESS_LOST, o.namespace(claim), o.name(claim), message)
            pool_key = o.PoolKey(pool.namespace, pool.name, OPENSTACK_FLOATING_IP_POOL)
            plan = Plan()
            plan.step(f"claim {o.namespace(claim)}/{o.name(claim)}", about=o.ref(claim)).add(
                Event(o.ref(claim), "Warning", ADDRESS_LOST, message[:1000]))
            try:
                await self.pools.writer.execute(plan, pool_key)
            except Exception:  # an Event lost is no reason to end the sweeps
                log.exception("claim %s/%s: Event %s not written", o.namespace(claim), o.name(claim), ADDRESS_LOST)
            self.pools.wake(pool_key, key)
            self.pools.survey_soon(pool_key)
