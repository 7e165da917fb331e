"""Running the asks of ``core.asking`` against Neutron, and surveying floating-IP pools.

The adapter half of OpenStackFloatingIPPools. :class:`OpenStackAsks` is given
the pools (:class:`~.pool.OpenStackPool`, by namespace and name) and runs each
:class:`~metal3_ipam.core.asking.Ask` (allocate or release by key) to an
answer, as data (:class:`Granted`, :class:`Refused`, :class:`Released`);
nothing raises:

* the ``clouds.yaml`` is read from the pool's Secret (:class:`SecretClouds`);
  a Secret or key that is missing is ``IdentityMissing``; one Keystone refuses,
  ``CredentialsRefused``, and the Secret is read again for the next ask;
* the Neutron calls are synchronous (``client.Neutron``): each ask runs them in
  a thread, so a slow or dead cloud never holds the event loop that serves the
  other pools; at most ``concurrency`` asks per cloud run at a time;
* allocations of one pool choose one at a time (``maxIPs``, the floating IPs
  the pool keeps, the pre-allocated ones are decided on what Neutron says then,
  the creates out counted); the creates themselves run side by side.

An allocation for key ``K`` is idempotent by ``K`` (see :func:`choose` and :func:`make`): the
floating IP made for it carries ``K`` in its description from the create call
on, so a retry, a restart between create and tag, or a claim moved in finds it
instead of making a second one.
"""

from __future__ import annotations

import asyncio
import base64
import dataclasses
import logging
import time
from collections.abc import Mapping
from typing import Any, Awaitable, Callable, Iterable

from kubernetes.client.rest import ApiException

from metal3_ipam.controller import metrics
from metal3_ipam.controller.api import request
from metal3_ipam.controller.outside import HELD_SECRETS_RECORD, OutsidePools, SecretNotHeld
from metal3_ipam.core import kinds
from metal3_ipam.core import objects as o
from metal3_ipam.core.asking import Answer, Ask, Granted, Op, Refused, Released
from metal3_ipam.poolkinds.openstack import capo, homes
from metal3_ipam.poolkinds.openstack import pool as p
from metal3_ipam.poolkinds.openstack.capo import CAPOPools
from metal3_ipam.poolkinds.openstack.client import FloatingIP, Neutron, OpenStackError, classify
from metal3_ipam.poolkinds.openstack.marks import homed_elsewhere_message, marked, tagged
from metal3_ipam.poolkinds.openstack.pool import OPENSTACK_FLOATING_IP_POOL, OpenStackPool, Survey
from metal3_ipam.poolkinds.openstack.sweep import Sweeper

log = logging.getLogger(__name__)

PoolRef = tuple[str, str]  # namespace, name



def secret_unread(where: str, exc: ApiException) -> OpenStackError:
    """What the API server's refusal to give the Secret of a pool's credentials says: that it does not exist (for
    good), or that it could not be read (``passing``: read again, it may be)."""
    if exc.status == 404:
        return OpenStackError(p.IDENTITY_MISSING, f"{where} does not exist")
    return OpenStackError(p.IDENTITY_MISSING, f"{where} could not be read ({exc.status} {exc.reason})", passing=True)

class SecretClouds:
    """The ``clouds.yaml`` (and ``cacert``) of Secrets, read with a Kubernetes ``ApiClient``, kept ``ttl`` seconds
    (or until forgotten)."""

    def __init__(self, api_client: Any, *, ttl: float = 60.0, clock: Callable[[], float] = time.monotonic):
        self._api = api_client
        self._ttl = ttl
        self._clock = clock
        self._cache: dict[tuple[str, str], tuple[float, bytes, bytes | None]] = {}

    async def read(self, namespace: str, name: str) -> tuple[bytes, bytes | None]:
        cached = self._cache.get((namespace, name))
        if cached is not None and self._clock() - cached[0] < self._ttl:
            return cached[1], cached[2]
        where = f"Secret {namespace}/{name} (spec.identityRef)"
        try:
            secret = await asyncio.to_thread(request, self._api, "GET",
                                             f"/api/v1/namespaces/{namespace}/secrets/{name}", timeout=10)
        except ApiException as exc:
            raise secret_unread(where, exc) from None
        except Exception as exc:
            raise OpenStackError(p.IDENTITY_MISSING, f"{where} could not be read ({exc})", passing=True) from None
        data = secret.get("data") or {}
        if not data.get(p.CLOUDS_YAML_KEY):
            raise OpenStackError(p.IDENTITY_MISSING, f"{where} has no key {p.CLOUDS_YAML_KEY!r}")
        try:
            clouds = base64.b64decode(data[p.CLOUDS_YAML_KEY])
            cacert = base64.b64decode(data[p.CACERT_KEY]) if data.get(p.CACERT_KEY) else None
        except ValueError:
            raise OpenStackError(p.IDENTITY_MISSING, f"{where}: its data is not base64") from None
        self._cache[(namespace, name)] = (self._clock(), clouds, cacert)
        return clouds, cacert

    def forget(self, namespace: str, name: str) -> None:
        self._cache.pop((namespace, name), None)


# --------------------------------------------------------------------------- Neutron, in a thread

def resolve_network(neutron: Neutron, pool: OpenStackPool) -> dict[str, Any]:
    """The pool's external network, resolved now (a network deleted and made again is found again)."""
    found = neutron.networks(pool.network.query())
    if len(found) != 1:
        what = "no network" if not found else f"{len(found)} networks ({', '.join(n['id'] for n in found[:5])})"
        hint = "" if found else "; it must be an external network (router:external) the project can see"
        if found and pool.network.id is None:
            hint = "; name one with spec.floatingIPNetwork"
        raise OpenStackError(p.NETWORK_NOT_FOUND, f"{what} found for {pool.network.text()}{hint}")
    net = found[0]
    return {"id": net["id"], "name": net.get("name") or "", "tags": sorted(net.get("tags") or [])}


def bind(neutron: Neutron, pool: OpenStackPool, owner: str, fip: FloatingIP, mine: homes.Home,
         home: Callable[[homes.Home], str]) -> FloatingIP:
    """The key's floating IP marked for the claim here it is given to, at home ``mine``: homed there when it is
    homed nowhere, held when it is homed at another cluster (its sweep takes it over, ``homes.mend``); refused
    (``AddressHomedElsewhere``) when that cluster took it over from this very home, or another cluster holds it:
    a claim there carries the key too and is bound to it."""
    change = homes.mend(owner, fip.tags, mine, home, take=False)
    if change.elsewhere is not None:
        raise OpenStackError(p.ADDRESS_HOMED_ELSEWHERE, homed_elsewhere_message(pool, fip, change.elsewhere))
    return marked(neutron, fip, change)


def _take(neutron: Neutron, fip: FloatingIP, text: str, tags: list[str]) -> FloatingIP | None:
    """A floating IP made the key's: its description first (what finds it by the key), then its tags. The
    description is written only if the floating IP is still as read (its revision): two pools, or two replicas,
    that found it free in one listing never both take it; the one too late gets None."""
    taken = neutron.describe(fip.id, text, fip.revision)
    return tagged(neutron, taken, tags) if taken is not None else None


def lookup(neutron: Neutron, pool: OpenStackPool, owner: str, key: str, held: str | None = None
           ) -> FloatingIP | None:
    """The floating IP whose description names the key (``pool.keys_own`` of them, should there be two; ``held``:
    the address the key's IPAddress holds), tagged."""
    tags = [owner, p.pool_tag(owner, pool.namespace, pool.name)]
    carrying = neutron.floating_ips(description=p.description(owner, key))
    return tagged(neutron, p.keys_own(carrying, tags[1], held), tags) if carrying else None


def choose(neutron: Neutron, pool: OpenStackPool, owner: str, key: str, making: int = 0,
           looked: bool = False, adoptable: frozenset[str] = frozenset(), failed: set[str] | None = None,
           held: Mapping[str, str] | None = None) -> FloatingIP | str:
    """The key's floating IP: the one whose description names the key, else one the pool keeps (released by
    ``Retain``), else a pre-allocated one, else one of the named CAPO pool's no port uses whose address is
    ``adoptable`` (``capo.adoptable``: CAPO's tag has no namespace); else the id of the
    network to make a new one on (``make``). ``making``: the creates of the pool out now, counted for ``maxIPs``.
    The allocations of one pool choose one at a time (the asks hold the pool's lock around this); a floating IP
    taken is given the key's description before its tags. ``looked``: ``lookup`` found none just before.
    ``failed``: the pre-allocated addresses that could not be made (held by another project, or refused by the
    policy) are added to it, and those made taken out (the pool's ``status.failedIPs``, as CAPO's pool lists the
    addresses it could not have). ``held``: address -> key, of the IPAddresses of this controller's claims (and of
    the keys whose floating IP was found gone): an address another key holds is never taken nor made for this one,
    whatever Neutron says of it (but one released here, described ``available``: the IPAddress of the key that
    released it is on its way out). Only floating IPs of the pool's network (as ``floatingIPNetwork`` names it now)
    are taken: one kept, or pre-allocated, on the network the pool named before is not."""
    text = p.description(owner, key)
    holders = dict(held or {})

    def others(address: str) -> bool:
        return holders.get(address) not in (None, key)
    tags = [owner, p.pool_tag(owner, pool.namespace, pool.name)]
    found = None if looked else lookup(neutron, pool, owner, key)
    if found is not None:
        return found
    network = resolve_network(neutron, pool)
    mine = neutron.floating_ips(tags=tags[1])
    if pool.max_ips is not None:
        claimed = [f for f in mine if p.key_in(owner, f.description) is not None]
        if len(claimed) + making >= pool.max_ips:
            raise OpenStackError(p.MAX_IPS_REACHED, f"{pool.text} holds {len(claimed) + making} floating IPs, "
                                                    f"spec.maxIPs {pool.max_ips}: none is made or handed out more")
    for fip in sorted(mine, key=lambda f: f.address):
        if fip.description == p.available_description(owner) and fip.port_id is None \
                and fip.network_id == network["id"]:
            if (taken := _take(neutron, fip, text, tags)) is not None:
                return taken
    for address in pool.preallocated:
        there = neutron.floating_ips(floating_ip_address=address)
        released = bool(there) and there[0].description == p.available_description(owner)
        if (others(address) and not released) or there and there[0].network_id != network["id"]:
            if failed is not None and not (there and p.key_in(owner, there[0].description)):
                failed.add(address)  # a claim holds it (its floating IP gone), or it is on another network
            continue
        if there:
            if (taken := _take_preallocated(neutron, there[0], owner, text, tags)) is not None:
                if failed is not None:
                    failed.discard(address)
                return taken
            continue
        try:
            made = _settled(neutron, neutron.create(network["id"], text, address), text, tags)
        except OpenStackError as exc:
            if failed is not None and exc.reason in (p.ADDRESS_TAKEN, p.POLICY_FORBIDDEN):
                failed.add(address)
            if exc.reason != p.ADDRESS_TAKEN:  # another project holds it: the next one
                raise
            continue
        if failed is not None:
            failed.discard(address)
        return made
    if pool.adopt_capo_pool and adoptable:
        for fip in neutron.floating_ips(tags=p.capo_tag(pool.adopt_capo_pool), not_tags=owner):
            if fip.port_id is None and p.key_in(owner, fip.description) is None and fip.address in adoptable \
                    and fip.network_id == network["id"] and not others(fip.address):
                if (taken := _take(neutron, fip, text, tags)) is not None:
                    return taken
    return str(network["id"])


def _take_preallocated(neutron: Neutron, fip: FloatingIP, owner: str, text: str, tags: list[str]
                       ) -> FloatingIP | None:
    """A pre-allocated floating IP the project holds, taken for the key if it is free (no key of this owner; no
    port, or the pool's already); None if it is not, or was taken meanwhile. It is tagged ``kept`` first (the
    admin's, before it is the key's: never deleted), then read again for the revision its description is
    written at."""
    def free(found: FloatingIP | None) -> bool:
        return found is not None and p.key_in(owner, found.description) is None and (
            found.port_id is None or tags[1] in found.tags)
    if not free(fip):
        return None
    if p.kept_tag(owner) not in fip.tags:
        tagged(neutron, fip, [p.kept_tag(owner)])
        fip = neutron.get(fip.id)
        if not free(fip):
            return None
    return _take(neutron, fip, text, [*tags, p.kept_tag(owner)])


def make(neutron: Neutron, pool: OpenStackPool, owner: str, key: str, network_id: str,
         held: Mapping[str, str] | None = None, pools: Mapping[str, PoolRef] | None = None) -> FloatingIP:
    """A new floating IP for the key on the network: its description (the key) in the create call itself, then
    its tags. ``held``: address -> key, of the IPAddresses of this controller's claims (``pools``: key -> its
    pool, where known). Neutron hands out only addresses no floating IP of the project has: one such address is
    a claim's whose floating IP is gone (deleted behind this controller, found by a sweep or not yet), and which
    keeps its address. It is given back to that key, tagged as that key's pool's (a claim's IP is no other's
    while its IPAddress stands), and another is made."""
    text = p.description(owner, key)
    tags = [owner, p.pool_tag(owner, pool.namespace, pool.name)]
    made, held = neutron.create(network_id, text), dict(held or {})
    while held.get(made.address) not in (None, key):
        other = held.pop(made.address)
        _give_back(neutron, made, owner, other, (pools or {}).get(other))
        log.warning("%s: floating IP %s made for key %s is the address key %s holds, whose floating IP was deleted "
                    "behind this controller: given back to it", pool.text, made.address, key, other)
        made = neutron.create(network_id, text)
    return _settled(neutron, made, text, tags)


def _give_back(neutron: Neutron, made: FloatingIP, owner: str, key: str, pool: PoolRef | None) -> None:
    """``made`` (just made, carrying another key) given the description of ``key``, whose IPAddress holds its
    address, and tagged with ``key``'s pool (untagged when not known: the sweep that finds it again tags it).
    Written at the revision read (a lookup of the key it was made for may tag it meanwhile: read again, tried
    again); if it cannot be, it is deleted: never left to the key it was made for."""
    tags = [owner, *([p.pool_tag(owner, *pool)] if pool is not None else [])]
    fip: FloatingIP | None = made
    for _ in range(3):
        if fip is None or fip.description != made.description:
            return  # deleted, or given back, meanwhile
        given = neutron.describe(fip.id, p.description(owner, key), fip.revision)
        if given is not None:
            tagged(neutron, given, tags)
            return
        fip = neutron.get(fip.id)
    neutron.delete(made.id)
    raise OpenStackError(p.ADDRESS_TAKEN, f"floating IP {made.address} made, but the IPAddress of key {key} holds "
                                          "that address and it could not be given back to it: deleted")


def _settled(neutron: Neutron, made: FloatingIP, text: str, tags: list[str]) -> FloatingIP:
    """After a create: when another floating IP carries the key too (a second replica, or a leader that lost its
    lease, made it between our look and our create), the key's own is ``pool.keys_own`` of them (one tagged
    first: its maker may have handed it out), as every look by the key answers; ours, made in vain, is deleted.
    Only ours is ever deleted here: a floating IP that wins is never another's to lose."""
    carrying = [f for f in neutron.floating_ips(description=text) if f.id != made.id]
    own = p.keys_own([made, *carrying], tags[1])
    if own.id != made.id:
        log.warning("floating IP %s (%s) made for key %s again: %s (%s) has it; deleting ours", made.address,
                    made.id, text, own.address, own.id)
        neutron.delete(made.id)
        return tagged(neutron, own, tags)
    return tagged(neutron, made, tags)


def release(neutron: Neutron, pool: OpenStackPool, owner: str, key: str,
            home: Callable[[homes.Home], str] = lambda h: homes.ABSENT, released: homes.Home | None = None,
            left: list[str] | None = None) -> list[FloatingIP]:
    """The key's floating IP let go: deleted (``Delete``), or kept for the pool's next claim (``Retain``,
    ``releaseWithoutDelete``, a pre-allocated one, listed or taken as one: ``pool.kept_tag``); but kept where
    its home or a hold names an object absent here (``home``; ``released``: the home of the claim releasing it):
    another cluster's claim may be bound to it (``homes.on_release``). Returns the floating IPs let go; the ids
    of those kept marked left by ``released`` (for the sweeps here to release, unanswered) go in ``left``."""
    return [fip for fip in neutron.floating_ips(description=p.description(owner, key))
            if let_go(neutron, pool, owner, fip, home, released, left)]


def let_go(neutron: Neutron, pool: OpenStackPool, owner: str, fip: FloatingIP | None,
           home: Callable[[homes.Home], str], released: homes.Home | None = None,
           left: list[str] | None = None) -> bool:
    """One floating IP of a key released here (see :func:`release`); whether it was let go. Written at the
    revision read (a mark another cluster adds meanwhile bumps it): read again and judged again if it changed."""
    text = fip.description if fip is not None else ""
    for _ in range(3):
        if fip is None or fip.description != text:
            return False  # gone, or another key's, meanwhile
        kept, change = homes.on_release(owner, fip.tags, home, released)
        if kept:
            marked(neutron, fip, change)
            if left is not None and released is not None and \
                    homes.tag(owner, homes.LEFT, released) in {*fip.tags, *change.add} - set(change.remove):
                left.append(fip.id)  # its claim here left it to another cluster, which may answer
            log.warning("floating IP %s (%s) not released: %s names a home or hold of another cluster, whose "
                        "claim may carry the key too; marks %s added, %s taken off", fip.address, fip.id, fip.tags,
                        list(change.add), list(change.remove))
            return False
        if p.deleted_on_release(pool, owner, fip.address, fip.tags):
            if neutron.delete(fip.id, fip.revision):
                return True
        elif (taken := neutron.describe(fip.id, p.available_description(owner), fip.revision)) is not None:
            marked(neutron, taken, homes.Change(add=(owner, p.pool_tag(owner, pool.namespace, pool.name)),
                                                remove=change.remove))
            return True
        fip = neutron.get(fip.id)
    raise OpenStackError(p.REFUSED_REQUEST, f"floating IP {fip.address if fip else ''} of {pool.text} changed "
                                            "three times while it was being released: tried again later")


def survey(neutron: Neutron, pool: OpenStackPool, owner: str) -> Survey:
    network = resolve_network(neutron, pool)
    mine = neutron.floating_ips(tags=p.pool_tag(owner, pool.namespace, pool.name))
    claimed = sorted(f.address for f in mine if p.key_in(owner, f.description) is not None)
    available = sorted(f.address for f in mine if f.description == p.available_description(owner))
    return Survey(network=network, claimed=tuple(claimed), available=tuple(available))


# --------------------------------------------------------------------------- the asks

async def _held(pool: OpenStackPool) -> bool:
    return True


class OpenStackAsks:
    """The asks of floating-IP pools, run against their clouds. See the module's docstring."""

    def __init__(self, secrets: SecretClouds, *, owner: str, timeout: float = 10.0, concurrency: int = 4,
                 clock: Callable[[], float] = time.monotonic):
        self.secrets = secrets
        self.owner = owner
        self.timeout = timeout
        self.concurrency = concurrency
        self.clock = clock
        self._pools: dict[PoolRef, OpenStackPool] = {}
        self._clients: dict[tuple, Neutron] = {}
        #: clients whose Secret changed since, kept while a floating IP remembered by the sweeps was found with them
        #: (``keeps``): a Secret of that name made again may be another project's
        self._kept: dict[tuple, Neutron] = {}
        self.keeps: Callable[[tuple], bool] = lambda client: False
        self._slots: dict[tuple, asyncio.Semaphore] = {}
        self._pool_locks: dict[PoolRef, asyncio.Lock] = {}
        self._making: dict[PoolRef, int] = {}  # creates out per pool, counted for maxIPs
        self.failed: dict[PoolRef, set[str]] = {}  # pre-allocated addresses that could not be made, per pool
        self._tasks: set[asyncio.Task] = set()
        self.bound_address: Callable[[str], str | None] = lambda key: None  # the address a key's IPAddress holds
        #: key -> (the home of the claim here carrying it, or None; the state of the objects homes name here)
        self.homes: Callable[[str], tuple[homes.Home | None, Callable[[homes.Home], str]]] = \
            lambda key: (None, lambda h: homes.ABSENT)
        self.released_home: Callable[[str], homes.Home | None] = lambda key: None  # of a claim here, deleted or not
        #: (pool, key, floating IP id, home here): a floating IP a release kept, its claim here marked left
        self.left_here: Callable[[OpenStackPool, str, str, homes.Home | None], None] = lambda *args: None
        #: the pool's Secret held for what a release left (``OutsidePools.hold_left``); False: not even recorded
        self.hold_secret: Callable[[OpenStackPool], Awaitable[bool]] = _held
        #: address -> (key, pool namespace, pool name), of the IPAddresses of the claims here and of the keys whose
        #: floating IP was found gone: no other key is given those addresses
        self.held_addresses: Callable[[], dict[str, tuple[str, str, str]]] = dict
        self.capo: CAPOPools | None = None  # CAPO's pools, read for adoptFromCAPOPool (None: nothing adopted)
        #: (namespace, CAPO pool name) -> the addresses Cluster API IPAddresses hold for such a pool (None: not
        #: known, some namespaces' out of sight)
        self.capo_held_elsewhere: Callable[[str, str], set[str] | None] = lambda namespace, name: set()

    def pool_changed(self, pool: OpenStackPool) -> None:
        self._pools[(pool.namespace, pool.name)] = pool

    def pool_gone(self, namespace: str, name: str) -> None:
        self._pools.pop((namespace, name), None)

    def pool(self, ref: PoolRef) -> OpenStackPool | None:
        return self._pools.get(ref)

    @staticmethod
    def cloud_of(pool: OpenStackPool) -> tuple:
        """What tells one cloud (and its credentials) from another: the asks are bounded per cloud."""
        return (pool.namespace, pool.identity)

    async def _neutron(self, pool: OpenStackPool) -> tuple[Neutron, asyncio.Semaphore]:
        clouds, cacert = await self.secrets.read(pool.namespace, pool.identity.secret)
        key = (*self.cloud_of(pool), clouds, cacert)
        neutron = self._clients.get(key)
        if neutron is None:
            for old in [k for k in self._clients if k[:2] == key[:2]]:  # the Secret changed: the old client goes
                retired = self._clients.pop(old)
                if self.keeps(old):
                    self._kept[old] = retired
                else:
                    retired.close()
            neutron = await asyncio.to_thread(Neutron, clouds, pool.identity.cloud, pool.identity.region,
                                              cacert=cacert, timeout=self.timeout)
            self._clients[key] = neutron
        slots = self._slots.setdefault(self.cloud_of(pool), asyncio.Semaphore(self.concurrency))
        return neutron, slots

    async def run(self, pool: OpenStackPool, work: Callable[..., Any], *args: Any) -> Any:
        """``work(neutron, pool, owner, *args)`` in a thread, within the cloud's bound; a refusal raises
        :class:`OpenStackError` (the Secret is read again after ``CredentialsRefused``)."""
        try:
            neutron, slots = await self._neutron(pool)
            async with slots:
                return await asyncio.to_thread(work, neutron, pool, self.owner, *args)
        except OpenStackError as exc:
            if exc.reason == p.CREDENTIALS_REFUSED:
                self.secrets.forget(pool.namespace, pool.identity.secret)
            raise
        except (asyncio.CancelledError, KeyboardInterrupt):
            raise
        except Exception as exc:
            raise classify(exc, pool.text) from None

    def client_of(self, pool: OpenStackPool) -> tuple | None:
        """Which client ``pool``'s cloud was last asked with (its Secret's content then), or None."""
        return next((k for k in reversed(self._clients) if k[:2] == self.cloud_of(pool)), None)

    def has_client(self, client: tuple) -> bool:
        return client in self._clients or client in self._kept

    def forget_client(self, client: tuple) -> None:
        """A client kept for the sweeps (``keeps``) no longer needed."""
        if client in self._kept and not self.keeps(client):
            self._kept.pop(client).close()

    async def run_lingering(self, pool: OpenStackPool, work: Callable[..., Any], *args: Any,
                            client: tuple | None = None) -> Any:
        """:meth:`run`, but where the pool's Secret is gone (deleted with its namespace), with the client its
        cloud was last asked with: what the pool's claims left in Neutron is still let go. With ``client`` (one
        :meth:`client_of` gave) held still, with that one, whatever Secret has the name now (the namespace made
        again with one for another project)."""
        last = (self._clients.get(client) or self._kept.get(client)) if client is not None else None
        if last is None:
            try:
                return await self.run(pool, work, *args)
            except OpenStackError as exc:
                last = next((c for k, c in self._clients.items() if k[:2] == self.cloud_of(pool)), None)
                if exc.reason != p.IDENTITY_MISSING or last is None:
                    raise
            log.info("%s: its Secret cannot be read; asked with the client its cloud was last asked with", pool.text)
        try:
            async with self._slots.setdefault(self.cloud_of(pool), asyncio.Semaphore(self.concurrency)):
                return await asyncio.to_thread(work, last, pool, self.owner, *args)
        except (OpenStackError, asyncio.CancelledError, KeyboardInterrupt):
            raise
        except Exception as exc:
            raise classify(exc, pool.text) from None

    async def ask(self, ask: Ask) -> Answer:
        """Run one ask to its answer (never raises)."""
        pool = self._pools.get(ask.pool)  # type: ignore[arg-type]
        if pool is None:
            return Refused(ask.key, ask.attempt, "PoolNotFound", f"{p.KIND} {'/'.join(ask.pool)} is not known")
        what = f"{ask.op.value} for key {ask.key!r} of {pool.text}"
        try:
            if ask.op is Op.RELEASE:
                released, left = self.released_home(ask.key), []
                gone = await self.run_lingering(pool, release, ask.key, self.homes(ask.key)[1], released, left)
                for fip_id in left:
                    self.left_here(pool, ask.key, fip_id, released)
                if left and released is not None and not await self.hold_secret(pool):
                    return Refused(ask.key, ask.attempt, SecretNotHeld.reason,
                                   f"{what}: Secret {pool.namespace}/{pool.identity.secret}: finalizer "
                                   f"{p.SECRET_FINALIZER} neither put on nor recorded in Lease {HELD_SECRETS_RECORD} "
                                   f"for floating IPs {', '.join(left)} its claim left; asked again")
                for fip in gone:
                    log.info("%s: floating IP %s (%s) %s", pool.text, fip.address, fip.id,
                             "deleted" if p.deleted_on_release(pool, self.owner, fip.address, fip.tags) else "kept")
                return Released(ask.key, ask.attempt)
            fip = await self._allocate(pool, ask.key)
            return Granted(ask.key, ask.attempt, fip.address, fip.id)  # type: ignore[arg-type]
        except OpenStackError as exc:
            return Refused(ask.key, ask.attempt, exc.reason, f"{what}: {exc}", server_down=exc.server_down)
        except asyncio.CancelledError:
            raise
        except Exception as exc:  # a bug of ours must not end the loop that files answers
            log.exception("%s failed", what)
            return Refused(ask.key, ask.attempt, "InternalError", f"{what}: {type(exc).__name__}: {exc}")

    async def _allocate(self, pool: OpenStackPool, key: str) -> FloatingIP:
        """The key's floating IP (:meth:`_find`), marked for the claim carrying the key (:func:`bind`)."""
        mine, home = self.homes(key)
        fip = await self._find(pool, key)
        return await self.run(pool, bind, fip, mine, home) if mine is not None else fip

    async def _find(self, pool: OpenStackPool, key: str) -> FloatingIP:
        """The pool's allocations choose one at a time (``choose``: maxIPs, the floating IPs kept and pre-allocated
        are decided on what Neutron says then, with the creates out counted); the creates run side by side."""
        ref = (pool.namespace, pool.name)
        found = await self.run(pool, lookup, key, self.bound_address(key))  # side by side with other keys' lookups
        if found is not None:
            return found
        adoptable = await self._adoptable(pool)
        holders = self.held_addresses()
        held = {address: other for address, (other, _, _) in holders.items()}
        async with self._pool_locks.setdefault(ref, asyncio.Lock()):
            chosen = await self.run(pool, choose, key, self._making.get(ref, 0), True, adoptable,
                                    self.failed.setdefault(ref, set()), held)
            if isinstance(chosen, FloatingIP):
                return chosen
            self._making[ref] = self._making.get(ref, 0) + 1
        try:
            return await self.run(pool, make, key, chosen, held,
                                  {other: (ns, name) for other, ns, name in holders.values() if name})
        finally:
            self._making[ref] -= 1

    async def _adoptable(self, pool: OpenStackPool) -> frozenset[str]:
        if not pool.adopt_capo_pool or self.capo is None:
            return frozenset()
        held = self.capo_held_elsewhere(pool.namespace, pool.adopt_capo_pool)
        if held is None:  # some namespaces' IPAddresses are out of the inventory's sight: listed of the API server
            held = await self.capo.held(pool.adopt_capo_pool)
        if held is None:
            return frozenset()
        return capo.adoptable(await self.capo.read(pool.namespace, pool.adopt_capo_pool), held)

    def send(self, asks: Iterable[Ask], deliver: Callable[[Answer], Awaitable[None] | None]) -> list[asyncio.Task]:
        started = []
        for ask in asks:
            task = asyncio.create_task(self._run(ask, deliver), name=f"openstack-{ask.op.value}-{ask.key}")
            self._tasks.add(task)
            task.add_done_callback(self._tasks.discard)
            started.append(task)
        return started

    async def _run(self, ask: Ask, deliver: Callable[[Answer], Awaitable[None] | None]) -> None:
        result = deliver(await self.ask(ask))
        if asyncio.iscoroutine(result):
            await result

    async def survey(self, pool: OpenStackPool) -> Survey:
        self.pool_changed(pool)
        try:
            return await self.run(pool, survey)
        except OpenStackError as exc:
            return Survey(reason=exc.reason, message=f"{pool.text}: {exc}")

    async def close(self) -> None:
        for task in list(self._tasks):
            task.cancel()
        await asyncio.gather(*self._tasks, return_exceptions=True)
        for neutron in [*self._clients.values(), *self._kept.values()]:
            neutron.close()
        self._clients.clear()
        self._kept.clear()


# --------------------------------------------------------------------------- serving claims

class OpenStackPools(OutsidePools):
    """Floating-IP pools in the claim lifecycle (``controller.outside``): the asks the passes want, run, and their
    answers bringing passes. What is Neutron's: a pool's asks go to its cloud (:meth:`OpenStackAsks.cloud_of`); an
    answer that is not a refusal brings a survey ``survey_after_answers`` seconds later; the sweep
    (``sweep.Sweeper``) releases what no claim carries.
    """

    pool_kind = OPENSTACK_FLOATING_IP_POOL
    label = "openstack"
    secret_finalizer = p.SECRET_FINALIZER
    addresses_called = "floating IPs"

    def __init__(self, asks: OpenStackAsks, asking: Any, *, inventory: Any, writer: Any,
                 wake: Callable[[Any, str | None], None], may_act: Callable[[], bool] = lambda: True,
                 survey_seconds: float = 60.0, sweep_seconds: float = 300.0,
                 clock: Callable[[], float] = time.monotonic, secret_holds: Any = None):
        super().__init__(asks, asking, inventory=inventory, writer=writer, wake=wake, may_act=may_act,
                         survey_seconds=survey_seconds, sweep_seconds=sweep_seconds, clock=clock,
                         secret_holds=secret_holds)
        self.sweeper = Sweeper(self)
        asks.bound_address = lambda key: self.bound().get(key)
        asks.homes = self.key_homes
        asks.released_home = lambda key: self.carrier_home(key, live=False)
        asks.left_here = self.sweeper.remember_left
        asks.hold_secret = lambda pool: self.hold_left((pool.namespace, pool.name), pool.identity.secret)
        asks.keeps = self.sweeper.keeps
        asks.held_addresses = self.holders
        asks.capo_held_elsewhere = self.capo_held

    def read_model(self, pool_obj: Mapping[str, Any]) -> OpenStackPool | None:
        return p.read_pool(pool_obj)[0]

    def secret_of(self, model: OpenStackPool) -> str | None:
        return model.identity.secret

    def server_of(self, model: OpenStackPool) -> Any:
        return self.asks.cloud_of(model)

    def key_of(self, obj: Mapping[str, Any]) -> str | None:
        return p.claim_key(obj)[0]

    def status_of(self, model: OpenStackPool, survey: Survey, *, now: str, previous: Mapping[str, Any] | None
                  ) -> dict:
        """The pool's status from the survey, with ``failedIPs``: the pre-allocated addresses that could not be
        made, and the addresses of claims whose floating IP is gone (``sweep.Sweeper.lost_of``)."""
        failed = self.asks.failed.get((model.namespace, model.name), set())
        survey = dataclasses.replace(survey, failed=tuple(sorted(
            {*failed.intersection(model.preallocated), *self.sweeper.lost_of(model)})))
        return p.pool_status(model, survey, now=now, previous=previous)

    def answered(self, pool_key: Any, answer: Answer) -> None:
        if not isinstance(answer, Refused):
            self.survey_later(pool_key)

    def surveyed(self, pool_key: Any, survey: Survey) -> None:
        # Metal3IPAMExternalIPAMUnreachable's series: whether Neutron answered this survey.
        metrics.EXTERNAL_IPAM_UP.labels(*metrics.pool_labels(pool_key)).set(0 if survey.reason in p.SERVER_DOWN else 1)

    async def sweep(self) -> list[FloatingIP]:
        return await self.sweeper.sweep()

    def remembers_left(self, ref: Any, uid: Any) -> bool:
        return any(marked.pool.uid == uid for marked in self.sweeper.marked.values())

    def holders(self) -> dict[str, tuple[str, str, str]]:
        """address -> (key, pool namespace, pool name): the address each lock holds for its key, and each found
        lost (its claim keeps it)."""
        found = {address: (key, ns, name) for key, (ns, name, address) in self.sweeper.lost.items()}
        for lock in self.inventory.of_kind(kinds.IPADDRESS):
            key, spec = p.claim_key(lock)[0], lock.get("spec") or {}
            pool = spec.get("pool") if isinstance(spec.get("pool"), Mapping) else {}
            if key is not None and isinstance(spec.get("address"), str):
                found[spec["address"]] = (key, str(pool.get("namespace") or o.namespace(lock)),
                                          str(pool.get("name") or ""))
        return found

    def capo_held(self, namespace: str, name: str) -> set[str] | None:
        """The addresses Cluster API IPAddresses hold for CAPO's pools named ``name`` (``capo.held_elsewhere``);
        None when some namespaces' are out of sight (``-n``: the inventory keeps only the served namespaces'):
        not known here (the asks list them of the API server, ``CAPOPools.held``)."""
        if self.inventory.namespaces is not None:
            return None
        return capo.held_elsewhere(self.inventory.of_kind(kinds.CAPI_ADDRESS), namespace, name)

    def home_state(self) -> Callable[[homes.Home], str]:
        """Whether the object a mark names (``homes``) is held here, ``PRESENT``, ``PAUSED`` or ``ABSENT``: a
        Cluster by its uid, paused as Cluster API says; a pool by its uid, paused by its own annotation or while a
        Cluster of its namespace is (``clusterctl move`` pauses the Clusters, deletes the claims, then the pools).
        One being deleted is still here (a Cluster's claims are released while it is deleted). Computed now, for
        use in a thread."""
        found: dict[homes.Home, str] = {}
        paused = {o.namespace(c) for c in self.inventory.of_kind(kinds.CLUSTER) if o.cluster_paused(c)}
        for kind, of in ((homes.CLUSTER, kinds.CLUSTER), (homes.POOL, OPENSTACK_FLOATING_IP_POOL)):
            for obj in self.inventory.of_kind(of):
                uid = o.meta(obj).get("uid")
                if not uid:
                    continue
                stopped = o.cluster_paused(obj) if kind == homes.CLUSTER else (
                    o.is_paused(obj) or o.namespace(obj) in paused)
                found[homes.Home(kind, str(uid))] = homes.PAUSED if stopped else homes.PRESENT
        return lambda home: found.get(home, homes.ABSENT)

    def home_of(self, claim: Mapping[str, Any]) -> homes.Home | None:
        """A claim's home: its Cluster's uid, else (it names no Cluster) its pool's; None while not known here."""
        if (cluster := o.cluster_name_of(claim)) is not None:
            obj, kind = self.inventory.get(kinds.CLUSTER, o.namespace(claim), cluster), homes.CLUSTER
        else:
            ref = o.pool_of(claim)
            obj = self.inventory.get(OPENSTACK_FLOATING_IP_POOL, o.namespace(claim), ref.name) if ref else None
            kind = homes.POOL
        uid = o.meta(obj).get("uid") if obj is not None else None
        return homes.Home(kind, str(uid)) if uid else None

    def carrier_home(self, key: str, live: bool = True) -> homes.Home | None:
        """The home of the live claim here carrying ``key`` (of a pool of this kind; ``live`` False: or a deleted
        one), or None."""
        for claim in self.inventory.claims_carrying(key):
            ref = o.pool_of(claim)
            if not (live and o.is_deleting(claim)) and ref is not None and ref.kind == OPENSTACK_FLOATING_IP_POOL:
                if (home := self.home_of(claim)) is not None:
                    return home
        return None

    def key_homes(self, key: str) -> tuple[homes.Home | None, Callable[[homes.Home], str]]:
        """For the asks: the home of the claim carrying ``key``, and the state of the objects marks name."""
        return self.carrier_home(key), self.home_state()

    def bound(self) -> dict[str, str]:
        """The address each key's lock holds (the claim's floating IP)."""
        found = {}
        for lock in self.inventory.of_kind(kinds.IPADDRESS):
            key, spec = p.claim_key(lock)[0], lock.get("spec") or {}
            if key is not None and isinstance(spec.get("address"), str):
                found[key] = spec["address"]
        return found
