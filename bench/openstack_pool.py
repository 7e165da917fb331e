#!/usr/bin/env python3
"""OpenStack floating-IP pools: claims against the floor of their Keystone and Neutron calls; Metal3 claims while
Neutron is down.

One local control plane (etcd + kube-apiserver on loopback) and one real Keystone
and Neutron on loopback (``metal3_ipam.testing.openstack``), with an external
network of about a thousand addresses and no floating-IP quota to speak of:

1. Throughput. ``metal3-ipam run`` serves one namespace with one
   OpenStackFloatingIPPool. N Cluster API IPAddressClaims of it are created with
   P requests in flight; the clock stops when the last one's
   ``status.addressRef`` is set (bind). Then all N are deleted the same way, and
   the clock stops when the last one is gone (release: its floating IP deleted,
   its IPAddress and finalizer gone). The floor: a plain client on the same
   libraries (a keystoneauth1 session from the same clouds.yaml) making the
   Neutron calls the controller makes per claim, with the controller's
   concurrency per cloud: bind, the lookup of the key's description, the
   network, the pool's floating IPs, the create, the lookup again and the tags;
   release, the lookup and the delete. Printed: both times and the ratio
   controller/floor each way (goal <= 1.3), median of ``--rounds`` rounds whose
   first side alternates.
2. Metal3 claims while Neutron is down. One controller serves a namespace with a
   floating-IP pool and a Metal3 IPPool; in each phase K floating-IP claims are
   created at once and M Metal3 IPClaims one after the other at a fixed rate,
   and each Metal3 claim's latency (its creation sent until the watch sees it
   bound) is measured. Phases: Neutron up (the baseline), paused (SIGSTOP:
   connections accepted, nothing answered), stopped (connections refused).
   Printed: each phase's latencies and the ratio of its median to the
   baseline's (goal <= 1.5); then Neutron is back and the time until every
   floating-IP claim of the phases is bound, with one floating IP each.

    python -m bench.openstack_pool [--claims 200] [--rounds 3] [--latency-claims 60] [--rate 5] [--burst 20]

``BENCH_CLAIMS=N`` sets ``--claims`` when not given (a quick run: ``BENCH_CLAIMS=20 python -m
bench.openstack_pool --rounds 1 --latency-claims 10 --burst 5``).
"""

from __future__ import annotations

import base64
import contextlib
import inspect
import statistics
import sys
import threading
import time
import uuid
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Callable, ContextManager, Iterator

from metal3_ipam import poolkinds  # noqa: F401  (registers the kinds of pool)
from metal3_ipam.poolkinds.openstack import pool as model
from metal3_ipam.poolkinds.openstack.asks import OpenStackAsks
from metal3_ipam.poolkinds.openstack.client import Neutron
from metal3_ipam.testing import go_incluster as gi
from metal3_ipam.testing.openstack import OpenStack

from bench.harness import (CAPI_CLAIMS, IPCLAIMS, ClaimWatch, Claims, Controller, bounded, claim_obj,
                           claims_argument, control_plane, create_namespace, latencies_text, load_average, parser, path,
                           pool_obj, positive, request, totals_text, verdict)


THROUGHPUT_GOAL, LATENCY_GOAL = 1.3, 1.5
#: The controller's Neutron calls in flight per cloud; the floor keeps as many.
CONCURRENCY: int = inspect.signature(OpenStackAsks).parameters["concurrency"].default
OWNER = model.DEFAULT_OWNER
NETWORK = "bench"


def put_clouds(api, ns: str, clouds_yaml: bytes) -> None:
    request(api, "POST", f"/api/v1/namespaces/{ns}/secrets", {
        "apiVersion": "v1", "kind": "Secret", "metadata": {"name": "cloud", "namespace": ns},
        "data": {model.CLOUDS_YAML_KEY: base64.b64encode(clouds_yaml).decode()}})


def pool_path(ns: str, name: str | None = None) -> str:
    return f"/apis/{model.GROUP}/{model.VERSION}/namespaces/{ns}/{model.PLURAL}" + (f"/{name}" if name else "")


def create_pool(api, ns: str, name: str) -> None:
    request(api, "POST", pool_path(ns), {
        "apiVersion": model.API_VERSION, "kind": model.KIND, "metadata": {"name": name, "namespace": ns},
        "spec": {"identityRef": {"name": "cloud"}, "floatingIPNetwork": {"filter": {"name": NETWORK}}}})


def wait_serving(api, ns: str, name: str, timeout: float = 120) -> None:
    deadline = time.monotonic() + timeout
    status: dict = {}
    while time.monotonic() < deadline:
        status = request(api, "GET", pool_path(ns, name)).get("status") or {}
        ready = next((c for c in status.get("conditions") or [] if c.get("type") == "Ready"), None)
        if ready and ready.get("status") == "True":
            return
        time.sleep(0.2)
    raise SystemExit(f"{model.KIND} {ns}/{name} not Ready within {timeout:.0f} s: {status!r}")


def fip_claims(ns: str, names: list[str], pool: str) -> list[dict]:
    claims = [gi.claim(name, ns, model.KIND, pool) for name in names]
    for claim in claims:
        claim["spec"]["poolRef"]["apiGroup"] = model.GROUP
    return claims


def owned(cloud: OpenStack, owner: str) -> list[dict]:
    return cloud.floating_ips(tags=owner)


# --------------------------------------------------------------------------- 1. throughput


class Floor:
    """The Neutron calls the controller makes per claim, by a plain client with its concurrency."""

    def __init__(self, cloud: OpenStack, owner: str):
        self.neutron = Neutron(cloud.clouds_yaml("member"), "openstack")
        self.owner = owner
        self.tag = model.pool_tag(owner, "floor", "bench")

    def bind(self, key: str) -> None:
        text = model.description(self.owner, key)
        n = self.neutron
        n.floating_ips(description=text)
        [network] = n.networks({"router:external": "true", "name": NETWORK})
        n.floating_ips(tags=self.tag)
        made = n.create(network["id"], text)
        n.floating_ips(description=text)
        n.set_tags(made.id, [self.owner, self.tag])

    def release(self, key: str) -> None:
        for fip in self.neutron.floating_ips(description=model.description(self.owner, key)):
            self.neutron.delete(fip.id)

    def run(self, keys: list[str], release: bool) -> float:
        started = time.monotonic()
        with ThreadPoolExecutor(CONCURRENCY) as pool:
            list(pool.map(self.release if release else self.bind, keys))
        return time.monotonic() - started


def controller_side(plane, api, tmp: Path, cloud: OpenStack, n: int, parallel: int, timeout: int,
                    ns: str) -> tuple[float, float]:
    pool = "bench"
    create_namespace(api, ns)
    put_clouds(api, ns, cloud.clouds_yaml("member"))
    create_pool(api, ns, pool)
    names = [f"claim-{i:05d}" for i in range(n)]
    with Controller(plane, [ns], tmp / f"{ns}.log", parallel).running() as ctrl:
        wait_serving(api, ns, pool)
        ctrl.settle()
        watch, claims = ClaimWatch(api, CAPI_CLAIMS), Claims(CAPI_CLAIMS)
        started = time.monotonic()
        claims.create(api, fip_claims(ns, names, pool), parallel)
        bind = watch.wait_bound(claims.sent, timeout) - started
        held = owned(cloud, OWNER)
        if len(held) != n:
            raise SystemExit(f"{n} claims bound with {len(held)} floating IPs")
        started = time.monotonic()
        claims.delete(api, parallel)
        release = watch.wait_gone(claims.sent, timeout) - started
        watch.stop()
    if owned(cloud, OWNER):
        raise SystemExit("floating IPs left after every claim was released")
    return bind, release


def throughput(plane, api, tmp: Path, cloud: OpenStack, n: int, parallel: int, timeout: int, rounds: int) -> None:
    print(f"1. {n} IPAddressClaims of one OpenStackFloatingIPPool, {parallel} parallel requests of the user, "
          f"{CONCURRENCY} Neutron calls in flight per cloud on both sides")
    ratios: dict[str, list[float]] = {"bind": [], "release": []}
    for r in range(rounds):
        sides: dict[str, tuple[float, float]] = {}
        for side in (("controller", "floor") if r % 2 == 0 else ("floor", "controller")):
            if side == "controller":
                sides[side] = controller_side(plane, api, tmp, cloud, n, parallel, timeout, f"throughput-{r}")
            else:
                floor, keys = Floor(cloud, f"floor{r}"), [uuid.uuid4().hex for _ in range(n)]
                sides[side] = (floor.run(keys, release=False), floor.run(keys, release=True))
                floor.neutron.close()
        print(f"round {r + 1} of {rounds} ({'controller' if r % 2 == 0 else 'floor'} first):")
        for i, phase in enumerate(("bind", "release")):
            ctrl, flo = sides["controller"][i], sides["floor"][i]
            ratios[phase].append(ctrl / flo)
            print(f"  {phase}: controller {ctrl:.2f} s ({ctrl / n * 1000:.1f} ms/claim), floor {flo:.2f} s "
                  f"({flo / n * 1000:.1f} ms/claim); ratio {ctrl / flo:.2f}")
        sys.stdout.flush()
    for phase, values in ratios.items():
        median = statistics.median(values)
        print(f"{phase} ratio controller/floor: {median:.2f} {verdict(median, THROUGHPUT_GOAL)}"
              + (f" (median of {', '.join(f'{v:.2f}' for v in values)})" if len(values) > 1 else ""))


# --------------------------------------------------------------------------- 2. latency while Neutron is down


def paced(api, objs: list[dict], rate: float, claims: Claims) -> None:
    interval, began = 1.0 / rate, time.monotonic()
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
def stopped(cloud: OpenStack) -> Iterator[None]:
    cloud.stop_neutron()
    try:
        yield
    finally:
        cloud.start_neutron()


def latency(plane, api, tmp: Path, cloud: OpenStack, m: int, k: int, rate: float, parallel: int,
            timeout: int) -> None:
    ns, fip_pool, m3_pool = "latency", "fips", "m"
    create_namespace(api, ns)
    put_clouds(api, ns, cloud.clouds_yaml("member"))
    create_pool(api, ns, fip_pool)
    request(api, "POST", path(ns, "ippools"), pool_obj(ns, m3_pool, "10.30.0.0/16", 16, "10.30.0.1"))
    phases: list[tuple[str, Callable[[], ContextManager]]] = [
        ("Neutron up (baseline)", contextlib.nullcontext),
        ("Neutron paused (SIGSTOP)", cloud.paused),
        ("Neutron stopped", lambda: stopped(cloud)),
    ]
    results: dict[str, list[float]] = {}
    all_fips: list = []
    with Controller(plane, [ns], tmp / "latency.log", parallel).running() as ctrl:
        wait_serving(api, ns, fip_pool)
        ctrl.settle()
        m3_watch, fip_watch = ClaimWatch(api, IPCLAIMS), ClaimWatch(api, CAPI_CLAIMS)
        for p, (label, condition) in enumerate(phases):
            m3, fips = Claims(IPCLAIMS), Claims(CAPI_CLAIMS)
            names = [f"fip-{p}-{i:03d}" for i in range(k)]
            load = load_average()
            with condition():
                burst = threading.Thread(target=fips.create, args=(api, fip_claims(ns, names, fip_pool), parallel))
                burst.start()
                paced(api, [claim_obj(ns, f"m-{p}-{i:03d}", m3_pool) for i in range(m)], rate, m3)
                m3_watch.wait_bound(m3.sent, timeout)
                burst.join()
                if p == 0:
                    fip_watch.wait_bound(fips.sent, timeout)
            all_fips += fips.sent
            lat = sorted(m3_watch.bound[key] - sent for key, sent in m3.sent.items())
            results[label] = lat
            print(f"2. {label}: {m} Metal3 IPClaims at {rate:g}/s beside {k} floating-IP claims; Metal3 latency "
                  f"{latencies_text(lat)}; load {load}")
            sys.stdout.flush()
        back = time.monotonic()
        fip_watch.wait_bound(all_fips, timeout)
        recovered = time.monotonic() - back
        fip_watch.stop()
        m3_watch.stop()
    held = owned(cloud, OWNER)
    if len(held) != len(all_fips):
        raise SystemExit(f"{len(all_fips)} floating-IP claims bound with {len(held)} floating IPs")
    print(f"Neutron back: every floating-IP claim of the phases ({len(all_fips)}) bound {recovered:.1f} s after the "
          "last phase, one floating IP each")
    base = statistics.median(results[phases[0][0]])
    for label, _ in phases[1:]:
        ratio = statistics.median(results[label]) / base
        print(f"Metal3 claim latency, {label} / baseline (medians): {ratio:.2f} {verdict(ratio, LATENCY_GOAL)}")


def main() -> int:
    p = parser(__doc__)
    claims_argument(p, 200, 900, "the bench network holds about a thousand addresses")
    p.add_argument("--latency-claims", type=bounded(1, 1000), default=60,
                   help="Metal3 IPClaims created per phase of the latency part (default 60)")
    p.add_argument("--burst", type=bounded(1, 200), default=20,
                   help="floating-IP claims created at once at the start of each latency phase (default 20)")
    p.add_argument("--rate", type=positive, default=5, help="Metal3 IPClaims created a second (default 5)")
    p.add_argument("--rounds", type=bounded(1, 9), default=3,
                   help="the throughput part this many times, controller and floor in turn first (default 3)")
    p.add_argument("--skip", choices=("throughput", "latency"), help="leave one part out")
    args = p.parse_args()
    began, load_before = time.monotonic(), load_average()
    with control_plane(args.parallel) as (plane, api, tmp), OpenStack() as cloud:
        cloud.create_external_network(NETWORK, "198.18.0.0/22", ("198.18.0.10", "198.18.3.250"))
        cloud.set_quota(floatingip=-1)
        print(f"Keystone and Neutron on {cloud.auth_url} and {cloud.neutron_url}")
        if args.skip != "throughput":
            throughput(plane, api, tmp, cloud, args.claims, args.parallel, args.timeout, args.rounds)
        if args.skip != "latency":
            latency(plane, api, tmp, cloud, args.latency_claims, args.burst, args.rate, args.parallel, args.timeout)
    print(totals_text(began, load_before))
    return 0


if __name__ == "__main__":
    sys.exit(main())
