#!/usr/bin/env python3
"""NetBox pools: claims of a NetBoxIPPool against the floor of its NetBox calls; Metal3 claims while NetBox is down.

One local control plane (etcd + kube-apiserver on loopback) and one real NetBox
on loopback (``metal3_ipam.testing.netbox``: PostgreSQL, Redis, gunicorn with one
worker and four threads, from the cached install and dump), in one run:

1. Throughput. ``metal3-ipam run`` serves one namespace with one NetBoxIPPool
   (a fresh NetBox /22 whose gateway NetBox already holds). N Cluster API
   IPAddressClaims of it are created with P requests in flight; the clock stops
   when the last one's ``status.addressRef`` is set (bind). Then all N are
   deleted the same way, and the clock stops when the last one is gone
   (release: its NetBox address deleted, its IPAddress and finalizer gone).
   The floor, on a fresh prefix of the same size in the same NetBox: a plain
   asynchronous client (aiohttp) making the NetBox calls the controller makes
   per claim, with the controller's concurrency per NetBox server: bind, the
   lookup of the key (``GET ip-addresses/?cf_<field>__ie=<owner>/<key>``) then
   ``POST prefixes/<id>/available-ips/`` with the key in the unique custom
   field; release, the lookup then ``DELETE ip-addresses/<id>/``. Printed: both
   times, the ratio controller/floor (goal <= 1.3) each way, and the NetBox
   requests of each side by kind with NetBox's own milliseconds for them (from
   gunicorn's access log), which shows where the time goes. The sides run one
   after the other on a shared machine, so a load that changes meanwhile moves
   a ratio: ``--rounds R`` (default 3) runs both R times, the controller first
   in the odd rounds and the floor first in the even ones, each round on fresh
   prefixes, and judges the median ratios.
2. Metal3 claims while NetBox is slow or down. One controller serves a
   namespace with a NetBoxIPPool and a Metal3 IPPool. In each phase a burst of
   K NetBox claims is created and, meanwhile, M Metal3 IPClaims one after the
   other at a fixed rate; each Metal3 claim's latency (its creation sent until
   the watch sees it bound) is measured. Phases: NetBox up (the baseline), slow
   (every NetBox request held ``--slow`` seconds before NetBox handles it),
   paused (gunicorn SIGSTOPped: connections accepted, nothing answered) and
   stopped (gunicorn stopped: connections refused). Printed: each phase's
   median, 99th percentile and worst latency and its ratio to the baseline's
   median (goal <= 1.5); then NetBox is back and the time until every NetBox
   claim of the phases is bound, with one NetBox address each.

    python -m bench.netbox_pool [--claims 500] [--rounds 3] [--latency-claims 100] [--rate 5] [--netbox-burst 40]

``BENCH_CLAIMS=N`` sets ``--claims`` when not given (a quick run: ``BENCH_CLAIMS=20
python -m bench.netbox_pool --rounds 2 --latency-claims 10 --netbox-burst 5``).
"""

from __future__ import annotations

import asyncio
import base64
import contextlib
import inspect
import ipaddress
import os
import resource
import statistics
import sys
import threading
import time
import uuid
from collections import Counter, defaultdict
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, ContextManager, Iterable, Iterator

import aiohttp

from metal3_ipam import poolkinds  # noqa: F401  (registers the kinds of pool)
from metal3_ipam.poolkinds.netbox.asks import NetBoxAsks
from metal3_ipam.poolkinds.netbox.source import KEY_FIELD, owned_key
from metal3_ipam.poolkinds.netbox import pool as model
from metal3_ipam.testing import go_incluster as gi
from metal3_ipam.testing.netbox import NetBox

from bench.harness import (CAPI_CLAIMS, IPCLAIMS, ClaimWatch, Claims, Controller, bounded, claim_obj,
                           claims_argument, control_plane, create_namespace, latencies_text, load_average, parser, path,
                           pool_obj, positive, request, server_cpu_seconds, totals_text, verdict, write_counts)


THROUGHPUT_GOAL, LATENCY_GOAL = 1.3, 1.5
#: The controller's requests in flight per NetBox server; the floor keeps as many.
CONCURRENCY: int = inspect.signature(NetBoxAsks).parameters["concurrency"].default
OWNER = "metal3-ipam"  # the controller's default --netbox-owner
FLOOR_OWNER = "bench-floor"
ADDRESS_FIELDS, PAGE = "id,address,vrf,status,custom_fields", 500  # the controller's lookup asks for these


# --------------------------------------------------------------------------- NetBox's side


def netbox_prefix(nb: NetBox, net: ipaddress.IPv4Network) -> int:
    """A NetBox prefix holding its gateway (the first address): its id. ``available-ips`` skips the gateway."""
    prefix = nb.create_prefix(str(net))
    nb.create_ip_address(f"{net[1]}/{net.prefixlen}", status="reserved", description="gateway")
    return int(prefix["id"])


def owned_in(nb: NetBox, net: ipaddress.IPv4Network, owner: str) -> list[str]:
    """The values of the key field of ``owner``'s addresses NetBox holds in ``net``."""
    values, offset = [], 0
    while True:
        page = nb.api("GET", f"ipam/ip-addresses/?parent={net}&vrf_id=null&limit=1000&offset={offset}")
        for item in page["results"]:
            value = (item.get("custom_fields") or {}).get(KEY_FIELD) or ""
            if value.startswith(owner + "/"):
                values.append(value)
        offset += len(page["results"])
        if not page.get("next") or not page["results"]:
            return values


def session_cpu(leaders: Iterable[int]) -> float:
    """CPU seconds so far of every process in the sessions of ``leaders``, with their children that have
    exited (PostgreSQL's backends, one per NetBox request, end up in the postmaster's)."""
    leaders, total = set(leaders), 0
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            fields = stat.read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue  # gone meanwhile
        if int(fields[3]) in leaders:  # the session id
            total += sum(int(f) for f in fields[11:15])  # utime, stime, cutime, cstime
    return total / os.sysconf("SC_CLK_TCK")


@dataclass
class Costs:
    """CPU seconds so far of NetBox (gunicorn, PostgreSQL, Redis), kube-apiserver + etcd, and this process
    (the floor's client); ``-`` gives a phase's."""
    netbox: float
    server: float
    client: float

    @classmethod
    def now(cls, nb: NetBox, plane) -> "Costs":
        usage = resource.getrusage(resource.RUSAGE_SELF)
        return cls(session_cpu(nb.pids().values()), server_cpu_seconds(plane), usage.ru_utime + usage.ru_stime)

    def __sub__(self, other: "Costs") -> "Costs":
        return Costs(self.netbox - other.netbox, self.server - other.server, self.client - other.client)

    def per_claim(self, n: int, controller: float | None = None) -> str:
        who = (f"controller {controller / n * 1000:.1f} ms" if controller is not None
               else f"the plain client {self.client / n * 1000:.1f} ms")
        return (f"CPU per claim: NetBox (gunicorn + PostgreSQL + Redis) {self.netbox / n * 1000:.1f} ms, "
                f"kube-apiserver + etcd {self.server / n * 1000:.1f} ms, {who}")


class AccessLog:
    """gunicorn's access log of the NetBox (``NetBox(access_log=True)``), read from a mark on."""

    def __init__(self, nb: NetBox):
        self.path = nb.access_log_path

    def mark(self, quiet: float = 0.3, timeout: float = 10.0) -> int:
        """Where the log ends once no line has come for ``quiet`` seconds: gunicorn writes a request's line
        after its answer is sent, so the last answers of a phase are logged a moment after they arrive."""
        deadline = time.monotonic() + timeout
        size, since = -1, time.monotonic()
        while time.monotonic() < deadline:
            now = self.path.stat().st_size if self.path.exists() else 0
            if now != size:
                size, since = now, time.monotonic()
            elif time.monotonic() - since >= quiet:
                break
            time.sleep(0.05)
        return size

    def since(self, mark: int) -> list[tuple[str, str, str, int, int]]:
        """(method, path, query, status, milliseconds) of every request logged since ``mark`` (to a mark)."""
        end = self.mark()
        with open(self.path, "rb") as f:
            f.seek(mark)
            lines = f.read(end - mark).decode(errors="replace").splitlines()
        out = []
        for line in lines:
            parts = line.split("|")
            if len(parts) == 5 and parts[3].isdigit() and parts[4].isdigit():
                out.append((parts[0], parts[1], parts[2], int(parts[3]), int(parts[4])))
        return out


def kind_of(method: str, url: str, query: str) -> str:
    """A NetBox request by what it is for."""
    if method == "GET" and url == "/api/ipam/ip-addresses/":
        if f"cf_{KEY_FIELD}__ie" in query:
            return "lookup by key"
        return "count or list of addresses"
    if method == "POST" and url.endswith("/available-ips/"):
        return "POST available-ips"
    if method == "DELETE" and url.startswith("/api/ipam/ip-addresses/"):
        return "DELETE address"
    if method == "PATCH" and url.startswith("/api/ipam/ip-addresses/"):
        return "PATCH address (reserve)"
    return f"{method} {url}"


def describe_requests(entries: list[tuple[str, str, str, int, int]], n: int) -> str:
    """``lookup by key 1.00 (median 45 ms, 22.1 s in all), ...`` per claim."""
    by_kind: dict[str, list[int]] = defaultdict(list)
    statuses: Counter = Counter()
    for method, url, query, status, ms in entries:
        by_kind[kind_of(method, url, query)].append(ms)
        statuses[status] += 1
    parts = [f"{kind} {len(ms) / n:.2f} (median {statistics.median(ms):.0f} ms, {sum(ms) / 1000:.1f} s in all)"
             for kind, ms in sorted(by_kind.items(), key=lambda kv: -len(kv[1]))]
    total = sum(len(ms) for ms in by_kind.values())
    busy = sum(sum(ms) for ms in by_kind.values()) / 1000
    return (f"{total / n:.2f} requests per claim, NetBox busy {busy:.1f} s summed over requests; "
            + "; ".join(parts) + f"; statuses {dict(sorted(statuses.items()))}")


# --------------------------------------------------------------------------- the floor


class PlainClient:
    """The controller's NetBox calls per claim, made with aiohttp and ``CONCURRENCY`` requests in flight."""

    def __init__(self, nb: NetBox, prefix_id: int):
        self.url, self.token, self.prefix_id = nb.url, nb.token, prefix_id

    async def _call(self, session: aiohttp.ClientSession, limit: asyncio.Semaphore, method: str, url: str,
                    expect: tuple[int, ...], **kwargs) -> object:
        async with limit:
            async with session.request(method, url, **kwargs) as resp:
                body = await resp.json() if resp.status != 204 else None
                if resp.status not in expect:
                    raise SystemExit(f"floor: {method} {url} answered {resp.status}: {body!r}")
                return body

    async def _lookup(self, session, limit, key: str) -> list[dict]:
        page = await self._call(session, limit, "GET", "api/ipam/ip-addresses/", (200,), params={
            f"cf_{KEY_FIELD}__ie": owned_key(FLOOR_OWNER, key), "fields": ADDRESS_FIELDS, "limit": PAGE,
            "offset": 0})
        return page["results"]  # type: ignore[index]

    async def _bind(self, session, limit, key: str) -> int:
        if await self._lookup(session, limit, key):
            raise SystemExit(f"floor: key {key} held before it was asked for")
        made = await self._call(session, limit, "POST", f"api/ipam/prefixes/{self.prefix_id}/available-ips/",
                                (201,), json={"status": "active", "description": "allocated by metal3-ipam",
                                              "custom_fields": {KEY_FIELD: owned_key(FLOOR_OWNER, key)}})
        return int((made[0] if isinstance(made, list) else made)["id"])  # type: ignore[index]

    async def _release(self, session, limit, key: str) -> None:
        for item in await self._lookup(session, limit, key):
            await self._call(session, limit, "DELETE", f"api/ipam/ip-addresses/{item['id']}/", (204, 404))

    def run(self, keys: list[str], release: bool) -> float:
        """Bind (or release) every key at once, ``CONCURRENCY`` requests in flight: the seconds it took."""
        async def main() -> float:
            headers = {"Authorization": f"Bearer {self.token}", "Accept": "application/json"}
            async with aiohttp.ClientSession(base_url=self.url + "/", headers=headers, trust_env=False,
                                             connector=aiohttp.TCPConnector(limit=CONCURRENCY)) as session:
                limit = asyncio.Semaphore(CONCURRENCY)
                work = self._release if release else self._bind
                started = time.monotonic()
                await asyncio.gather(*(work(session, limit, key) for key in keys))
                return time.monotonic() - started
        return asyncio.run(main())


# --------------------------------------------------------------------------- the controller's side


def put_token(api, ns: str, token: str) -> None:
    request(api, "POST", f"/api/v1/namespaces/{ns}/secrets", {
        "apiVersion": "v1", "kind": "Secret", "metadata": {"name": "netbox", "namespace": ns},
        "data": {"token": base64.b64encode(token.encode()).decode()}})


def netbox_pool_path(ns: str, name: str | None = None) -> str:
    return f"/apis/{model.GROUP}/{model.VERSION}/namespaces/{ns}/{model.PLURAL}" + (f"/{name}" if name else "")


def create_netbox_pool(api, ns: str, name: str, url: str, net: ipaddress.IPv4Network) -> None:
    request(api, "POST", netbox_pool_path(ns), {
        "apiVersion": f"{model.GROUP}/{model.VERSION}", "kind": model.KIND,
        "metadata": {"name": name, "namespace": ns},
        "spec": {"server": {"url": url, "tokenSecretRef": {"name": "netbox"}}, "source": {"prefix": str(net)},
                 "gateway": str(net[1])}})


def wait_serving(api, ns: str, name: str, timeout: float = 120) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        status = request(api, "GET", netbox_pool_path(ns, name)).get("status") or {}
        ready = next((c for c in status.get("conditions") or [] if c.get("type") == "Ready"), None)
        if ready and ready.get("status") == "True":
            return
        time.sleep(0.2)
    raise SystemExit(f"NetBoxIPPool {ns}/{name} not Ready within {timeout:.0f} s: {status!r}")


def netbox_claims(ns: str, names: list[str], pool: str) -> list[dict]:
    claims = [gi.claim(name, ns, model.KIND, pool) for name in names]
    for claim in claims:
        claim["spec"]["poolRef"]["apiGroup"] = model.GROUP
    return claims


def capi_addresses(api, ns: str) -> list[dict]:
    return request(api, "GET", f"/apis/{gi.GROUP}/{gi.CAPI_VERSION}/namespaces/{ns}/ipaddresses")["items"]


# --------------------------------------------------------------------------- 1. throughput


@dataclass
class Phase:
    """One side's bind or release of the N claims: seconds, the NetBox requests logged, the load average at
    its start, the CPU spent by NetBox, the control plane and the client; ``controller_cpu`` on that side."""
    seconds: float
    requests: list[tuple[str, str, str, int, int]]
    load: str
    costs: Costs
    controller_cpu: float | None = None


def controller_side(plane, api, tmp: Path, nb: NetBox, log: AccessLog, n: int, parallel: int, timeout: int,
                    net: ipaddress.IPv4Network, ns: str) -> tuple[Phase, Phase]:
    """The controller binds, then releases, N claims of a NetBoxIPPool on ``net``: (bind, release)."""
    pool = "bench"
    create_namespace(api, ns)
    put_token(api, ns, nb.token)
    netbox_prefix(nb, net)
    create_netbox_pool(api, ns, pool, nb.url, net)
    names = [f"claim-{i:05d}" for i in range(n)]
    with Controller(plane, [ns], tmp / f"{ns}.log", parallel).running() as ctrl:
        wait_serving(api, ns, pool)
        ctrl.settle()
        watch = ClaimWatch(api, CAPI_CLAIMS)
        claims = Claims(CAPI_CLAIMS)
        load, cpu, mark, costs = load_average(), ctrl.cpu_seconds(), log.mark(), Costs.now(nb, plane)
        started = time.monotonic()
        claims.create(api, netbox_claims(ns, names, pool), parallel)
        seconds = watch.wait_bound(claims.sent, timeout) - started
        bind = Phase(seconds, log.since(mark), load, Costs.now(nb, plane) - costs, ctrl.cpu_seconds() - cpu)
        ips = {a["spec"]["address"] for a in capi_addresses(api, ns)}
        held = owned_in(nb, net, OWNER)
        if len(ips) != n or len(held) != n or len(set(held)) != n:
            raise SystemExit(f"{n} claims bound: {len(ips)} distinct IPs, {len(held)} NetBox addresses "
                             f"({len(set(held))} keys)")
        load, cpu, mark, costs = load_average(), ctrl.cpu_seconds(), log.mark(), Costs.now(nb, plane)
        started = time.monotonic()
        claims.delete(api, parallel)
        seconds = watch.wait_gone(claims.sent, timeout) - started
        release = Phase(seconds, log.since(mark), load, Costs.now(nb, plane) - costs, ctrl.cpu_seconds() - cpu)
        watch.stop()
    left = owned_in(nb, net, OWNER)
    if left:
        raise SystemExit(f"{len(left)} NetBox addresses left after every claim was released")
    return bind, release


def floor_side(plane, nb: NetBox, log: AccessLog, n: int, net: ipaddress.IPv4Network) -> tuple[Phase, Phase]:
    """The plain client makes the same NetBox calls for N keys on ``net``: (bind, release)."""
    floor = PlainClient(nb, netbox_prefix(nb, net))
    keys = [uuid.uuid4().hex for _ in range(n)]
    phases = []
    for release in (False, True):
        load, mark, costs = load_average(), log.mark(), Costs.now(nb, plane)
        seconds = floor.run(keys, release=release)
        phases.append(Phase(seconds, log.since(mark), load, Costs.now(nb, plane) - costs))
        if not release and len(owned_in(nb, net, FLOOR_OWNER)) != n:
            raise SystemExit("floor: not every key got its NetBox address")
    held = owned_in(nb, net, FLOOR_OWNER)
    if held:
        raise SystemExit(f"floor: {len(held)} addresses left after the release")
    return phases[0], phases[1]


def throughput(plane, api, tmp: Path, nb: NetBox, log: AccessLog, n: int, parallel: int, timeout: int,
               nets: Iterator[ipaddress.IPv4Network], rounds: int) -> dict[str, list[float]]:
    """Bind and release N claims by the controller and by the floor, ``rounds`` times, the side that goes
    first alternating (so a load that changes during the run weighs on both); prints; the ratios per phase."""
    print(f"1. {n} IPAddressClaims of one NetBoxIPPool (a /22), {parallel} parallel requests of the user, "
          f"{CONCURRENCY} NetBox requests in flight on both sides")
    ratios: dict[str, list[float]] = {"bind": [], "release": []}
    for r in range(rounds):
        sides = {}
        for side in (("controller", "floor") if r % 2 == 0 else ("floor", "controller")):
            if side == "controller":
                sides[side] = controller_side(plane, api, tmp, nb, log, n, parallel, timeout, next(nets),
                                              f"throughput-{r}")
            else:
                sides[side] = floor_side(plane, nb, log, n, next(nets))
        first = "controller" if r % 2 == 0 else "floor"
        print(f"round {r + 1} of {rounds} ({first} first):")
        for i, phase in enumerate(("bind", "release")):
            ctrl, floor = sides["controller"][i], sides["floor"][i]
            ratio = ctrl.seconds / floor.seconds
            ratios[phase].append(ratio)
            print(f"{phase}: controller {ctrl.seconds:.2f} s ({ctrl.seconds / n * 1000:.1f} ms/claim, "
                  f"{ctrl.controller_cpu / n * 1000:.1f} ms CPU/claim; load {ctrl.load}), floor {floor.seconds:.2f} s "
                  f"({floor.seconds / n * 1000:.1f} ms/claim; load {floor.load}); ratio controller/floor {ratio:.2f}")
            print(f"  NetBox requests, controller: {describe_requests(ctrl.requests, n)}")
            print(f"  NetBox requests, floor:      {describe_requests(floor.requests, n)}")
            print(f"  controller side {ctrl.costs.per_claim(n, ctrl.controller_cpu)}")
            print(f"  floor           {floor.costs.per_claim(n)}")
        sys.stdout.flush()
    for phase, values in ratios.items():
        median = statistics.median(values)
        print(f"{phase} ratio controller/floor: {median:.2f} {verdict(median, THROUGHPUT_GOAL)}"
              + (f" (median of {', '.join(f'{v:.2f}' for v in values)})" if len(values) > 1 else ""))
    sys.stdout.flush()
    return ratios


# --------------------------------------------------------------------------- 2. latency while NetBox is down


def writes_text(writes: Counter) -> str:
    """``12 PATCH ipclaims/status, 3 POST events, ...``, most first."""
    return ", ".join(f"{n} {verb} {res}{'/' + sub if sub else ''}" for (verb, res, sub), n in writes.most_common()
                     if n) or "none"


def paced(api, objs: list[dict], rate: float, claims: Claims) -> None:
    """Create ``objs`` one after the other, ``rate`` a second (each on its own thread, so a slow answer does
    not hold the next one back), noting when each was sent."""
    interval = 1.0 / rate
    began = time.monotonic()
    with ThreadPoolExecutor(8) as pool:
        futures = []
        for i, obj in enumerate(objs):
            delay = began + i * interval - time.monotonic()
            if delay > 0:
                time.sleep(delay)
            futures.append(pool.submit(claims.create, api, [obj], 1))
        for future in futures:
            future.result()


@contextlib.contextmanager
def stopped(nb: NetBox) -> Iterator[None]:
    nb.stop_server()
    try:
        yield
    finally:
        nb.start_server()


def latency(plane, api, tmp: Path, nb: NetBox, m: int, k: int, rate: float, slow: float, parallel: int,
            timeout: int, nets: Iterator[ipaddress.IPv4Network]) -> dict[str, float]:
    """Metal3 claim latency per NetBox condition; prints; the ratios of the medians to the baseline's."""
    ns, nb_pool, m3_pool = "latency", "nb", "m"
    net = next(nets)
    create_namespace(api, ns)
    put_token(api, ns, nb.token)
    netbox_prefix(nb, net)
    create_netbox_pool(api, ns, nb_pool, nb.url, net)
    request(api, "POST", path(ns, "ippools"), pool_obj(ns, m3_pool, "10.30.0.0/16", 16, "10.30.0.1"))
    phases: list[tuple[str, Callable[[], ContextManager]]] = [
        ("NetBox up (baseline)", contextlib.nullcontext),
        (f"NetBox slow ({slow:g} s per request)", lambda: nb.slowed(slow)),
        ("NetBox paused (SIGSTOP)", nb.paused),
        ("NetBox stopped", lambda: stopped(nb)),
    ]
    results: dict[str, list[float]] = {}
    all_nb: list[tuple[str, str]] = []
    with Controller(plane, [ns], tmp / "latency.log", parallel).running() as ctrl:
        wait_serving(api, ns, nb_pool)
        ctrl.settle()
        m3_watch, nb_watch = ClaimWatch(api, IPCLAIMS), ClaimWatch(api, CAPI_CLAIMS)
        for p, (label, condition) in enumerate(phases):
            m3 = Claims(IPCLAIMS)
            nb_claims = Claims(CAPI_CLAIMS)
            nb_names = [f"nb-{p}-{i:03d}" for i in range(k)]
            load = load_average()
            with condition():
                writes, cpu, costs = write_counts(api), ctrl.cpu_seconds(), Costs.now(nb, plane)
                began = time.monotonic()
                burst = threading.Thread(target=nb_claims.create,
                                         args=(api, netbox_claims(ns, nb_names, nb_pool), parallel))
                burst.start()
                paced(api, [claim_obj(ns, f"m-{p}-{i:03d}", m3_pool) for i in range(m)], rate, m3)
                m3_watch.wait_bound(m3.sent, timeout)
                burst.join()
                if p == 0:
                    nb_watch.wait_bound(nb_claims.sent, timeout)  # the baseline: NetBox's claims served too
                pending = sum(key not in nb_watch.bound for key in nb_claims.sent)
                seconds, spent = time.monotonic() - began, Costs.now(nb, plane) - costs
                writes, cpu = write_counts(api) - writes, ctrl.cpu_seconds() - cpu
            all_nb += nb_claims.sent
            lat = sorted(m3_watch.bound[key] - sent for key, sent in m3.sent.items())
            results[label] = lat
            print(f"2. {label}: {m} Metal3 IPClaims at {rate:g}/s beside {k} NetBox claims "
                  f"({pending} of them unbound when the phase ended); Metal3 latency {latencies_text(lat)}; "
                  f"load {load}")
            print(f"  in its {seconds:.1f} s: CPU of the controller {cpu:.1f} s, kube-apiserver + etcd "
                  f"{spent.server:.1f} s, NetBox {spent.netbox:.1f} s; API writes "
                  f"{sum(writes.values())} ({writes_text(writes)})")
            sys.stdout.flush()
        back = time.monotonic()
        nb_watch.wait_bound(all_nb, timeout)
        recovered = time.monotonic() - back
        held = owned_in(nb, net, OWNER)
        nb_watch.stop()
        m3_watch.stop()
    if len(held) != len(all_nb) or len(set(held)) != len(all_nb):
        raise SystemExit(f"{len(all_nb)} NetBox claims bound with {len(held)} NetBox addresses")
    print(f"NetBox back: every NetBox claim of the phases ({len(all_nb)}) bound {recovered:.1f} s after the last "
          f"phase, one NetBox address each")
    base = statistics.median(results[phases[0][0]])
    ratios = {}
    for label, _ in phases[1:]:
        ratios[label] = statistics.median(results[label]) / base
        print(f"Metal3 claim latency, {label} / baseline (medians): {ratios[label]:.2f} "
              f"{verdict(ratios[label], LATENCY_GOAL)}")
    return ratios


# --------------------------------------------------------------------------- main


def main() -> int:
    p = parser(__doc__)
    claims_argument(p, 500, 1000, "the throughput part's /22")
    p.add_argument("--latency-claims", type=bounded(1, 1000), default=100,
                   help="Metal3 IPClaims created per phase of the latency part (default 100: at --rate 5, a phase "
                        "of 20 s, longer than the controller's 10 s timeout of a NetBox request)")
    p.add_argument("--netbox-burst", type=bounded(1, 200), default=40,
                   help="NetBox claims created at once at the start of each latency phase (default 40)")
    p.add_argument("--rate", type=positive, default=5, help="Metal3 IPClaims created a second (default 5)")
    p.add_argument("--slow", type=float, default=2.0,
                   help="seconds each NetBox request is held in the slow phase (default 2)")
    p.add_argument("--rounds", type=bounded(1, 9), default=3,
                   help="the throughput part this many times, controller and floor in turn first, in fresh "
                        "namespaces and prefixes; the verdict on the median ratios (default 3)")
    p.add_argument("--skip", choices=("throughput", "latency"), help="leave one part out")
    args = p.parse_args()
    began, load_before = time.monotonic(), load_average()
    nets = (ipaddress.ip_network(f"10.20.{4 * i}.0/22") for i in range(64))
    with control_plane(args.parallel) as (plane, api, tmp), NetBox(access_log=True) as nb:
        nb.ensure_key_field()
        log = AccessLog(nb)
        print(f"NetBox {nb.version} on {nb.url}, started in {nb.startup_seconds.get('total', 0):.1f} s")
        if args.skip != "throughput":
            throughput(plane, api, tmp, nb, log, args.claims, args.parallel, args.timeout, nets, args.rounds)
        if args.skip != "latency":
            latency(plane, api, tmp, nb, args.latency_claims, args.netbox_burst, args.rate, args.slow,
                    args.parallel, args.timeout, nets)
    print(totals_text(began, load_before))
    return 0


if __name__ == "__main__":
    sys.exit(main())
