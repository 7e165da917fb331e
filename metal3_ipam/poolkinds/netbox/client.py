"""Addresses from NetBox: an asynchronous client of its REST API (aiohttp).

One :class:`NetBoxClient` per NetBox server and token. Every address it
creates carries a key in a unique NetBox custom field (``metal3_ipam_key`` by
default) whose value is ``<owner>/<key>``: the owner marks the addresses this
controller made, the key finds one again.

* :meth:`NetBoxClient.allocate` looks the key up first and asks
  ``available-ips`` only when NetBox holds no address for it; a second
  allocation with the same key (a retry, another replica, a claim moved by
  ``clusterctl move`` that kept its key) is refused by NetBox's unique check
  and answered with the address that holds the key. One key, one NetBox address.
* :meth:`NetBoxClient.release` deletes the address holding a key (none, or a
  404, counts as released).
* :meth:`NetBoxClient.owned` lists the addresses carrying this owner's marker,
  for a sweep; addresses without it (made by anyone else) are never listed and
  never touched.

Requests are bounded: at most ``concurrency`` at a time per server URL (across
clients of one event loop), each answered within ``timeout`` seconds once sent.
A failure raises :class:`NetBoxError` carrying a :class:`~metal3_ipam.poolkinds.netbox.source.Refusal`
(unreachable, timeout, token refused, not found, full, key conflict, …); retrying
with backoff (``metal3_ipam.core.asking.backoff``) is the caller's.

The token's least NetBox permissions (object permissions; constraints may
narrow them to the prefixes and ranges in use):

* ``ipam.view_prefix`` / ``ipam.view_iprange`` (find the parent; available-ips needs it),
* ``ipam.view_vrf`` (only for a parent named in a VRF),
* ``ipam.view_ipaddress``, ``ipam.add_ipaddress``, ``ipam.delete_ipaddress``,
* ``ipam.change_ipaddress`` (only to reserve an address the caller must
  not hand out, see :meth:`NetBoxClient.allocate`'s ``avoid``),
* ``extras.view_customfield`` (only for :meth:`NetBoxClient.check`).
"""

from __future__ import annotations

import asyncio
import dataclasses
import inspect
import ipaddress
import json
import logging
import ssl
import weakref
from dataclasses import dataclass
from typing import Any, Awaitable, Callable, Iterable, Mapping

import aiohttp

from metal3_ipam.poolkinds.netbox.source import (
    KEY_FIELD,
    ParentSpec,
    Reason,
    Refusal,
    check_key_field,
    check_owner,
    classify,
    is_key_conflict,
    key_of,
    owned_key,
    parse_parent,
    usable_size,
)
from metal3_ipam.poolkinds.netbox.sweep import ABSENT, PRESENT, home_in, taken_over

__all__ = ["Allocation", "NetBoxClient", "NetBoxError", "Parent", "Usage"]

log = logging.getLogger(__name__)

_ADDRESS_FIELDS = "id,address,vrf,status,description,custom_fields"
PAGE = 500


class NetBoxError(Exception):
    """NetBox did not give what was asked; ``refusal`` says why."""

    def __init__(self, refusal: Refusal):
        super().__init__(refusal.message)
        self.refusal = refusal

    @property
    def reason(self) -> Reason:
        return self.refusal.reason


@dataclass(frozen=True)
class Allocation:
    """A NetBox IP address carrying one of this owner's keys."""

    id: int
    address: str  # as NetBox holds it, with its mask: "192.0.2.2/24"
    key: str
    vrf: int | None = None
    description: str = ""

    @property
    def ip(self) -> ipaddress.IPv4Address | ipaddress.IPv6Address:
        return ipaddress.ip_interface(self.address).ip

    @property
    def prefix_length(self) -> int:
        return ipaddress.ip_interface(self.address).network.prefixlen


@dataclass(frozen=True)
class Parent:
    """A prefix or IP range as NetBox knows it."""

    spec: ParentSpec
    id: int
    vrf: int | None
    size: int  # addresses available-ips may hand out when none is held

    @property
    def path(self) -> str:
        return f"ipam/{'prefixes' if self.spec.kind == 'prefix' else 'ip-ranges'}/{self.id}/"


@dataclass(frozen=True)
class Usage:
    """How much of a parent NetBox holds: ``used`` IP address objects of ``size``."""

    size: int
    used: int

    @property
    def available(self) -> int:
        return max(self.size - self.used, 0)


# Per event loop and server URL: the slots requests wait for.
_LIMITS: "weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, dict[str, asyncio.Semaphore]]" = (
    weakref.WeakKeyDictionary())


def _server_limit(url: str, size: int) -> asyncio.Semaphore:
    per_loop = _LIMITS.setdefault(asyncio.get_running_loop(), {})
    if url not in per_loop:
        per_loop[url] = asyncio.Semaphore(size)
    return per_loop[url]


def _ssl_context(ca_bundle: str | bytes | None) -> ssl.SSLContext | bool:
    if ca_bundle is None:
        return True
    if isinstance(ca_bundle, bytes):
        ca_bundle = ca_bundle.decode()
    if "-----BEGIN" in ca_bundle:
        return ssl.create_default_context(cadata=ca_bundle)
    return ssl.create_default_context(cafile=ca_bundle)


class NetBoxClient:
    """The NetBox at ``url``, spoken to with ``token`` (``nbt_<key>.<secret>``, or a v1 token).

    ``owner`` marks the addresses this controller makes (no ``/``); ``key_field``
    names the unique custom field; ``ca_bundle`` is a PEM text or a file path
    for https; ``timeout`` bounds each request once sent; ``concurrency`` the
    requests in flight to this server URL.
    """

    def __init__(self, url: str, token: str, *, owner: str, key_field: str = KEY_FIELD,
                 ca_bundle: str | bytes | None = None, timeout: float = 10.0, concurrency: int = 4,
                 description: str = "allocated by metal3-ipam"):
        if not url.startswith(("http://", "https://")):
            raise ValueError(f"NetBox URL {url!r} must start with http:// or https://")
        self.url = url.rstrip("/")
        self.owner = check_owner(owner)
        self.key_field = key_field
        self.timeout = timeout
        self.concurrency = concurrency
        self.description = description
        self._token = token
        self._ssl = _ssl_context(ca_bundle)
        self._session: aiohttp.ClientSession | None = None
        self._parents: dict[ParentSpec, Parent] = {}
        self._vrfs: dict[str, int] = {}

    async def __aenter__(self) -> "NetBoxClient":
        return self

    async def __aexit__(self, *exc) -> None:
        await self.close()

    async def close(self) -> None:
        if self._session is not None:
            await self._session.close()
            self._session = None

    # -- requests ----------------------------------------------------------------------

    def _authorization(self) -> str:
        return f"Bearer {self._token}" if self._token.startswith("nbt_") else f"Token {self._token}"

    def session(self) -> aiohttp.ClientSession:
        if self._session is None or self._session.closed:
            self._session = aiohttp.ClientSession(
                base_url=self.url + "/",
                connector=aiohttp.TCPConnector(limit=self.concurrency, ssl=self._ssl),
                headers={"Authorization": self._authorization(), "Accept": "application/json"},
                trust_env=False)
        return self._session

    async def _request(self, method: str, path: str, what: str, *, params: Mapping[str, Any] | None = None,
                       body: object = None) -> tuple[int, Any]:
        """One request: (status, decoded body). Unreachable and timeout raise NetBoxError."""
        async with _server_limit(self.url, self.concurrency):
            try:
                async with asyncio.timeout(self.timeout):
                    async with self.session().request(method, "api/" + path, params=params, json=body) as resp:
                        raw = await resp.read()
                        status = resp.status
            except TimeoutError:
                raise NetBoxError(Refusal(Reason.TIMEOUT, f"{what}: NetBox at {self.url} did not answer within "
                                                          f"{self.timeout:g}s")) from None
            except aiohttp.ClientConnectorCertificateError as exc:
                raise NetBoxError(Refusal(Reason.UNREACHABLE, f"{what}: NetBox at {self.url}: its certificate "
                                                              f"was refused ({exc.certificate_error})")) from None
            except (aiohttp.ClientError, OSError) as exc:
                raise NetBoxError(Refusal(Reason.UNREACHABLE,
                                          f"{what}: NetBox at {self.url} is unreachable ({exc or type(exc).__name__})")
                                  ) from None
        try:
            decoded = json.loads(raw) if raw else None
        except ValueError:
            decoded = raw[:300].decode(errors="replace")
        return status, decoded

    async def _get(self, path: str, what: str, params: Mapping[str, Any] | None = None) -> Any:
        status, body = await self._request("GET", path, what, params=params)
        if status != 200:
            raise NetBoxError(classify(status, body, what, field=self.key_field))
        return body

    async def _list(self, path: str, what: str, params: Mapping[str, Any]) -> list[dict]:
        """Every page of a list."""
        results: list[dict] = []
        offset = 0
        while True:
            page = await self._get(path, what, {**params, "limit": PAGE, "offset": offset})
            batch = page.get("results") or []
            results.extend(batch)
            offset += len(batch)
            if not page.get("next") or not batch:
                return results

    # -- reading -----------------------------------------------------------------------

    def _allocation(self, item: Mapping[str, Any]) -> Allocation | None:
        key = key_of(self.owner, (item.get("custom_fields") or {}).get(self.key_field))
        if key is None:
            return None
        vrf = item.get("vrf")
        return Allocation(int(item["id"]), str(item["address"]), key,
                          int(vrf["id"]) if isinstance(vrf, Mapping) else None, str(item.get("description") or ""))

    async def check(self) -> None:
        """The token is accepted and the key field is usable (exists, text, on IP addresses, unique)."""
        what = f"reading custom field {self.key_field!r}"
        found = (await self._get("extras/custom-fields/", what, {"name": self.key_field}))["results"]
        problems = check_key_field(found[0] if found else None, self.key_field)
        if problems:
            raise NetBoxError(Refusal(Reason.MISCONFIGURED, f"NetBox at {self.url}: " + "; ".join(problems)))

    async def find(self, key: str) -> Allocation | None:
        """The address holding ``key`` (this owner's), or None."""
        value = owned_key(self.owner, key)
        items = await self._list("ipam/ip-addresses/", f"looking up key {key!r}",
                                 {f"cf_{self.key_field}__ie": value, "fields": _ADDRESS_FIELDS})
        # The filter is case-insensitive (and ignored by NetBox if the field is gone): compare exactly.
        exact = [i for i in items if (i.get("custom_fields") or {}).get(self.key_field) == value]
        if not exact:
            return None
        return self._allocation(min(exact, key=lambda i: int(i["id"])))

    async def owned(self) -> list[Allocation]:
        """Every address carrying this owner's marker, in id order (for a sweep)."""
        prefix = owned_key(self.owner, "x")[:-1]
        items = await self._list("ipam/ip-addresses/", f"listing addresses of owner {self.owner!r}",
                                 {f"cf_{self.key_field}__isw": prefix, "fields": _ADDRESS_FIELDS})
        found = (self._allocation(i) for i in items)
        return sorted((a for a in found if a is not None), key=lambda a: a.id)

    async def _vrf_id(self, vrf: str) -> int:
        if vrf in self._vrfs:
            return self._vrfs[vrf]
        what = f"looking up VRF {vrf!r}"
        for field in ("rd", "name"):
            results = (await self._get("ipam/vrfs/", what, {field: vrf, "fields": "id,name,rd"}))["results"]
            exact = [r for r in results if r.get(field) == vrf]
            if len(exact) == 1:
                self._vrfs[vrf] = int(exact[0]["id"])
                return self._vrfs[vrf]
            if len(exact) > 1:
                raise NetBoxError(Refusal(Reason.MISCONFIGURED, f"{what}: {len(exact)} VRFs have {field} {vrf!r}; "
                                                                "name it by its route distinguisher"))
        raise NetBoxError(Refusal(Reason.NOT_FOUND, f"{what}: NetBox at {self.url} has no VRF with that route "
                                                    "distinguisher or name"))

    async def resolve(self, parent: str | ParentSpec, vrf: str | None = None) -> Parent:
        """The NetBox prefix (``192.0.2.0/24``) or IP range (``192.0.2.10-192.0.2.20``), in ``vrf`` if named."""
        spec = parent if isinstance(parent, ParentSpec) else parse_parent(parent, vrf)
        if spec in self._parents:
            return self._parents[spec]
        vrf_id = await self._vrf_id(spec.vrf) if spec.vrf else None
        what = f"looking up {spec.kind} {spec}"
        params: dict[str, Any] = {"vrf_id": vrf_id if vrf_id is not None else "null"}
        if spec.kind == "prefix":
            params.update(prefix=spec.text, fields="id,prefix,vrf,is_pool")
            found = (await self._get("ipam/prefixes/", what, params))["results"]
            found = [f for f in found if ipaddress.ip_network(f["prefix"]) == spec.network]
        else:
            params.update(start_address=str(spec.start), end_address=str(spec.end),
                          fields="id,start_address,end_address,vrf,size")
            found = (await self._get("ipam/ip-ranges/", what, params))["results"]
            found = [f for f in found if ipaddress.ip_interface(f["start_address"]).ip == spec.start
                     and ipaddress.ip_interface(f["end_address"]).ip == spec.end]
        if not found:
            raise NetBoxError(Refusal(Reason.NOT_FOUND, f"{what}: NetBox at {self.url} has none"))
        if len(found) > 1:
            raise NetBoxError(Refusal(Reason.MISCONFIGURED, f"{what}: NetBox holds {len(found)} of them "
                                                            f"(ids {', '.join(str(f['id']) for f in found)})"))
        item = found[0]
        if spec.kind == "prefix":
            assert spec.network is not None
            size = usable_size(spec.network, is_pool=bool(item.get("is_pool")))
        else:
            size = int(item["size"])
        resolved = Parent(spec, int(item["id"]), vrf_id, size)
        self._parents[spec] = resolved
        return resolved

    async def usage(self, parent: str | ParentSpec, vrf: str | None = None) -> Usage:
        """How many IP address objects NetBox holds in the parent, of how many it could hand out."""
        resolved = await self.resolve(parent, vrf)
        spec = resolved.spec
        if spec.kind == "prefix":
            within = [spec.text]
        else:
            within = [str(n) for n in ipaddress.summarize_address_range(spec.start, spec.end)]
        params = {"parent": within, "vrf_id": resolved.vrf if resolved.vrf is not None else "null",
                  "limit": 1, "fields": "id"}
        page = await self._get("ipam/ip-addresses/", f"counting addresses in {spec}", params)
        return Usage(resolved.size, int(page["count"]))

    # -- writing -----------------------------------------------------------------------

    async def allocate(self, key: str, parent: str | ParentSpec, vrf: str | None = None, *,
                       avoid: Iterable[ipaddress.IPv4Address | ipaddress.IPv6Address | str] = (),
                       description: str | None = None) -> Allocation:
        """The address for ``key``: the one NetBox holds for it, else the lowest free one of the parent.

        ``description``: what the address's description says (its claim and home, ``sweep``); one
        found for the key homed elsewhere (a claim moved here from another cluster) is given it.

        ``avoid``: addresses that must never be handed out (a gateway NetBox
        does not hold). Should NetBox hand one out, it is reserved there as a
        ``reserved`` address without a key (so never listed as this owner's),
        and the next is asked for; so is one found holding the key (another
        allocation of the key, a replica's, got it and has not reserved it yet).
        """
        avoided = {ipaddress.ip_address(a) for a in avoid}
        what = f"allocating for key {key!r} from {parent if isinstance(parent, ParentSpec) else parent}"
        resolved: Parent | None = None
        conflict: Refusal | None = None
        # Each turn returns, or reserves one address to avoid, or lost a race for the key to another
        # allocation (which a turn later is found): bounded.
        for _ in range(2 * len(avoided) + 3):
            found = await self.find(key)
            if found is not None:
                if found.ip not in avoided:
                    return await self._rehome(found, description, what)
                # Another allocation for this key (a replica, a retry) got an address to avoid and has
                # not reserved it yet: reserve it here (the same PATCH), and ask again.
                await self._reserve(found, what)
                continue
            if resolved is None:
                resolved = await self.resolve(parent, vrf)
                what = f"allocating for key {key!r} from {resolved.spec}"
            body = {"status": "active", "description": description or self.description,
                    "custom_fields": {self.key_field: owned_key(self.owner, key)}}
            status, answer = await self._request("POST", resolved.path + "available-ips/", what, body=body)
            if status == 201:
                item = answer[0] if isinstance(answer, list) else answer
                allocation = self._allocation(item)
                if allocation is None:
                    raise NetBoxError(Refusal(Reason.MISCONFIGURED, f"{what}: NetBox dropped the key from the "
                                                                    f"address it made ({item.get('address')})"))
                if allocation.ip not in avoided:
                    return allocation
                await self._reserve(allocation, what)
                continue
            if status == 400 and is_key_conflict(answer, self.key_field):
                conflict = classify(status, answer, what, field=self.key_field)
                continue  # another allocation holds the key now: found on the next turn
            if status == 404:
                self._parents.pop(resolved.spec, None)
            raise NetBoxError(classify(status, answer, what, field=self.key_field))
        raise NetBoxError(conflict or Refusal(Reason.FULL, f"{what}: only addresses to avoid were left"))

    async def _rehome(self, found: Allocation, description: str | None, what: str) -> Allocation:
        """``found`` with ``description`` when that names a home ``found`` may be taken to (``sweep.taken_over``:
        homed nowhere, marked released, or not taken over before; only the claim's own home is known here)."""
        wanted, there = home_in(description), home_in(found.description)
        text = taken_over(found.description, description, lambda h: PRESENT if h == wanted else ABSENT)
        if text is None and wanted is not None and there is not None and there != wanted:
            raise NetBoxError(Refusal(Reason.HOMED_ELSEWHERE, (
                f"{what}: NetBox address {found.address} of this key is homed at {there.kind}:{there.uid}, an "
                f"object of another cluster, whose claim took it over first ({found.description!r}): a claim "
                "there carries this key; not bound here (delete one of the two claims, or take the home off the "
                "address in NetBox once that cluster's claim is gone)")))
        if text is None:
            return found
        try:
            return await self.describe(found, text, what)
        except NetBoxError:  # the address is the key's all the same; the sweep homes it later
            return found

    async def describe(self, allocation: Allocation, description: str, what: str | None = None) -> Allocation:
        """Give the address a new description (its claim and home)."""
        what = f"{what or 'sweeping'}: describing {allocation.address} (key {allocation.key!r}) anew"
        status, answer = await self._request("PATCH", f"ipam/ip-addresses/{allocation.id}/", what,
                                             body={"description": description})
        if status != 200:
            raise NetBoxError(classify(status, answer, what, field=self.key_field))
        return dataclasses.replace(allocation, description=description)

    async def read(self, allocation: Allocation) -> Allocation | None:
        """The address of ``allocation``'s id as NetBox holds it now, if it still carries one of this owner's
        keys (None: gone, or no longer this owner's)."""
        what = f"reading {allocation.address} (key {allocation.key!r})"
        status, answer = await self._request("GET", f"ipam/ip-addresses/{allocation.id}/", what,
                                             params={"fields": _ADDRESS_FIELDS})
        if status == 404:
            return None
        if status != 200:
            raise NetBoxError(classify(status, answer, what, field=self.key_field))
        return self._allocation(answer)

    async def _reserve(self, allocation: Allocation, what: str) -> None:
        body = {"status": "reserved", "custom_fields": {self.key_field: None},
                "description": f"reserved by metal3-ipam ({self.owner}): not to be handed out"}
        status, answer = await self._request("PATCH", f"ipam/ip-addresses/{allocation.id}/",
                                             f"{what}: reserving {allocation.address}", body=body)
        if status != 200:
            raise NetBoxError(classify(status, answer, f"{what}: reserving {allocation.address}",
                                       field=self.key_field))

    async def release(self, key: str,
                      leave: Callable[[str, str, str], str | None | Awaitable[str | None]]
                      = lambda key, description, address: None) -> Allocation | None:
        """Delete the address holding ``key``; the one deleted, or None when there was none or it was left. An
        address ``leave(key, description, address)`` leaves (``sweep.left_on_release``: a claim of another cluster may
        carry the key too) is not deleted, but given the description it says (awaited first where ``leave``
        answers with an awaitable: what must be done before the address is so marked)."""
        found = await self.find(key)
        if found is None:
            return None
        left = leave(key, found.description, found.address)
        if inspect.isawaitable(left):
            left = await left
        if left is not None:
            log.warning("NetBox at %s: %s (key %s) not released: a claim of another cluster may carry the key "
                        "(%s)%s", self.url, found.address, key, found.description,
                        "" if left == found.description else f"; described {left!r}")
            if left != found.description:
                await self.describe(found, left, f"releasing key {key!r}")
            return None
        await self.release_allocation(found)
        return found

    async def release_allocation(self, allocation: Allocation) -> None:
        """Delete an address found by :meth:`find` or :meth:`owned` (NetBox never reuses an id); 404 is released."""
        what = f"releasing {allocation.address} (key {allocation.key!r})"
        status, answer = await self._request("DELETE", f"ipam/ip-addresses/{allocation.id}/", what)
        if status not in (204, 404):
            raise NetBoxError(classify(status, answer, what, field=self.key_field))
