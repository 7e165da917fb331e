"""An in-memory index of the objects that matter, grouped by the pool they concern.

The controller feeds it from watch events, ``metal3-ipam plan`` from files;
either way a pool's snapshot is assembled from it without listing anything,
and every change says which pools it concerns so only those are reconciled.
"""

from __future__ import annotations

import random
from dataclasses import dataclass, field
from typing import Iterable

from . import kinds
from . import objects as o
from .reconcile import Snapshot

ObjKey = tuple[tuple[str, str], str, str]  # (group, kind), namespace, name


@dataclass
class _PoolGroup:
    claims: dict[o.ClaimKey, dict] = field(default_factory=dict)
    addresses: dict[str, dict] = field(default_factory=dict)
    capi_addresses: dict[str, dict] = field(default_factory=dict)

    def __bool__(self) -> bool:
        return bool(self.claims or self.addresses or self.capi_addresses)


SERVED = (kinds.IPPOOL, kinds.IPCLAIM, kinds.IPADDRESS, kinds.CAPI_CLAIM, kinds.CAPI_ADDRESS, kinds.CLUSTER)


class Inventory:
    def __init__(self) -> None:
        self.objects: dict[ObjKey, dict] = {}
        self.groups: dict[o.PoolKey, _PoolGroup] = {}
        # Where each object was filed, so a change of spec moves it cleanly.
        self._filed: dict[ObjKey, o.PoolKey | None] = {}
        # Metal3 IPAddress names per namespace: the name locks.
        self._address_names: dict[str, set[str]] = {}

    @staticmethod
    def key(obj: dict) -> ObjKey | None:
        kind = kinds.kind_of(obj)
        if kind not in SERVED or not o.name(obj):
            return None
        return (kind, o.namespace(obj), o.name(obj))

    # -- feeding -----------------------------------------------------------

    def upsert(self, obj: dict) -> set[o.PoolKey]:
        """Store ``obj`` (new or changed); returns the pools it concerns."""
        key = self.key(obj)
        if key is None:
            return set()
        if key in self.objects and key[0] not in (kinds.IPPOOL, kinds.CLUSTER) \
                and self._filed.get(key) == o.pool_of(obj):
            # Same place: replace in place, so claims keep the order they came in.
            self.objects[key] = obj
            return self._file(key, obj)
        touched = self._unfile(key)
        self.objects[key] = obj
        touched |= self._file(key, obj)
        return touched

    def remove(self, obj: dict) -> set[o.PoolKey]:
        key = self.key(obj)
        if key is None or key not in self.objects:
            return set()
        touched = self._unfile(key)
        del self.objects[key]
        return touched

    def _file(self, key: ObjKey, obj: dict) -> set[o.PoolKey]:
        kind, ns, name = key
        if kind == kinds.IPPOOL:
            self._filed[key] = (ns, name)
            return {(ns, name)}
        if kind == kinds.CLUSTER:
            self._filed[key] = None
            return self.pools_of_cluster(ns, name)
        if kind == kinds.IPADDRESS:
            self._address_names.setdefault(ns, set()).add(name)
        pool = o.pool_of(obj)
        self._filed[key] = pool
        if pool is None:
            return set()
        group = self.groups.setdefault(pool, _PoolGroup())
        if kind in (kinds.IPCLAIM, kinds.CAPI_CLAIM):
            group.claims[o.claim_key(obj)] = obj
        elif kind == kinds.IPADDRESS:
            group.addresses[name] = obj
        else:
            group.capi_addresses[name] = obj
        return {pool}

    def _unfile(self, key: ObjKey) -> set[o.PoolKey]:
        kind, ns, name = key
        if key not in self.objects:
            return set()
        old = self.objects[key]
        pool = self._filed.pop(key, None)
        if kind == kinds.IPADDRESS:
            self._address_names.get(ns, set()).discard(name)
        if kind == kinds.CLUSTER:
            return self.pools_of_cluster(ns, name)
        if pool is None or kind == kinds.IPPOOL:
            return {pool} if pool else set()
        group = self.groups.get(pool)
        if group is not None:
            if kind in (kinds.IPCLAIM, kinds.CAPI_CLAIM):
                group.claims.pop(o.claim_key(old), None)
            elif kind == kinds.IPADDRESS:
                group.addresses.pop(name, None)
            else:
                group.capi_addresses.pop(name, None)
            if not group:
                del self.groups[pool]
        return {pool}

    # -- reading -------------------------------------------------------------

    def get(self, kind: tuple[str, str], namespace: str, name: str) -> dict | None:
        return self.objects.get((kind, namespace, name))

    def of_kind(self, kind: tuple[str, str]) -> Iterable[dict]:
        return [obj for (k, _, _), obj in self.objects.items() if k == kind]

    def pools_of_cluster(self, namespace: str, cluster: str) -> set[o.PoolKey]:
        return {(ns, name) for (k, ns, name), pool in self.objects.items()
                if k == kinds.IPPOOL and ns == namespace and o.spec(pool).get("clusterName") == cluster}

    def pool_keys(self) -> list[o.PoolKey]:
        """Every pool that exists or is referred to, in a stable order."""
        keys = {(ns, name) for (k, ns, name) in self.objects if k == kinds.IPPOOL}
        return sorted(keys | set(self.groups))

    def claims_of(self, pool_key: o.PoolKey) -> list[dict]:
        group = self.groups.get(pool_key)
        return list(group.claims.values()) if group else []

    def name_taken(self, namespace: str, name: str) -> bool:
        return name in self._address_names.get(namespace, ())

    def snapshot(self, pool_key: o.PoolKey, now: str, rng: random.Random | None = None) -> Snapshot:
        ns, name = pool_key
        pool = self.get(kinds.IPPOOL, ns, name)
        cluster = None
        if pool is not None and o.spec(pool).get("clusterName"):
            cluster = self.get(kinds.CLUSTER, ns, str(o.spec(pool)["clusterName"]))
        group = self.groups.get(pool_key, _PoolGroup())
        return Snapshot(
            namespace=ns, pool_name=name, pool=pool, cluster=cluster,
            claims=list(group.claims.values()),
            addresses=list(group.addresses.values()),
            capi_addresses=list(group.capi_addresses.values()),
            name_taken=lambda address_name: self.name_taken(ns, address_name),
            now=now, rng=rng)
