#!/usr/bin/env python3
"""In-cluster pool throughput: N IPAddressClaims of one InClusterIPPool bound at once, then released at once.

Side by side, on one local control plane (etcd + kube-apiserver on loopback):

- controller: ``metal3-ipam run`` for one namespace with one InClusterIPPool
  (a /16); N Cluster API IPAddressClaims of it are created with P requests in
  flight, and the clock stops when the last one's ``status.addressRef`` is
  set (bind); then all N are deleted the same way, and the clock stops when
  the last one is gone (release: its IPAddress, the lock of its IP and its
  finalizer are gone before it). The API server's request counters give the
  controller's writes of each phase by verb and resource (the claims' own
  creation and deletion not counted);
- floor: a plain client, no controller, in another namespace with the same
  pool, creates (then deletes) the same N claims the same way and, as each
  request is answered, makes exactly the writes the controller made per claim
  in that phase, P in flight of their own as the controller's (bind: the
  pool's and the claim's finalizers, the Metal3 IPAddress ``<pool>-<ip>``
  that locks the IP, the Cluster API IPAddress named after the claim, the
  claim's and the pool's status; release: both IPAddresses deleted and their
  finalizers taken off, the claim's finalizer off, the pool's status).

Both clocks of a phase start at its first request. Printed: each phase's
times and ratio controller/floor (goal <= 1.3 both ways), the writes per claim
of each side by verb and resource, the controller's CPU per claim and that of
the control plane (kube-apiserver + etcd) per claim on each side, the total
seconds, and the load average of the machine at the start of each side's
phase (the benchmark shares the machine: the sides run one after the other).

    python -m bench.incluster_throughput [--claims 1000] [--rounds 1] [--parallel 16]

The machine may be shared: the sides run one after the other, so a load that
changes meanwhile moves the ratio; ``--rounds R`` repeats both sides R times
and judges the median ratios.

``BENCH_CLAIMS=N`` sets the number of claims when ``--claims`` is not given
(a quick run: ``BENCH_CLAIMS=50``).
"""

from __future__ import annotations

import statistics
import sys
import time
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path

import netaddr

from metal3_ipam import poolkinds  # noqa: F401  (registers the kinds of pool)
from metal3_ipam.core import kinds
from metal3_ipam.core.kept import BOUND_REASON, bound_message
from metal3_ipam.core.naming import lock_name
from metal3_ipam.testing import go_incluster as gi

from bench.harness import (CAPI_CLAIMS, MERGE_PATCH, ClaimWatch, Claims, Controller, Floor, Slot, WriteKey,
                           _ready, bounded, claims_argument, control_plane, create_incluster_pool, create_namespace,
                           incluster_pool_path, load_average, parser, print_writes, request, server_cpu_seconds,
                           totals_text, verdict, write_counts)


GOAL = 1.3
POOL, ADDRESSES, PREFIX, GATEWAY = "bench", ["10.10.0.0/16"], 16, "10.10.0.1"
METAL3, CAPI = f"{kinds.METAL3_GROUP}", gi.GROUP
CLAIMS_R, CAPI_ADDRESSES, LOCKS = f"ipaddressclaims.{CAPI}", f"ipaddresses.{CAPI}", f"ipaddresses.{METAL3}"
POOLS_R = f"{gi.PLURALS[gi.IN_CLUSTER_IP_POOL]}.{CAPI}"
CREATED: WriteKey = ("POST", CLAIMS_R, "")
DELETED: WriteKey = ("DELETE", CLAIMS_R, "")


def claim_name(i: int) -> str:
    return f"claim-{i:05d}"


def claims_of(ns: str, n: int) -> list[dict]:
    return [gi.claim(claim_name(i), ns, gi.IN_CLUSTER_IP_POOL, POOL) for i in range(n)]


def ip_of(i: int) -> str:
    """The IP the i-th claim gets, lowest first: .0 is reserved and .1 the gateway."""
    return f"10.10.{(i + 2) // 256}.{(i + 2) % 256}"


def claim_path(ns: str, name: str, sub: str | None = None) -> str:
    return CAPI_CLAIMS.path(ns, name) + (f"/{sub}" if sub else "")


def capi_address_path(ns: str, name: str | None = None) -> str:
    return f"/apis/{CAPI}/{gi.CAPI_VERSION}/namespaces/{ns}/ipaddresses" + (f"/{name}" if name else "")


def lock_path(ns: str, name: str | None = None) -> str:
    return f"/apis/{METAL3}/v1alpha1/namespaces/{ns}/ipaddresses" + (f"/{name}" if name else "")


def leftovers(api, ns: str) -> str:
    """What a finished release must not leave: IPAddresses of either API in the namespace."""
    capi = len(request(api, "GET", capi_address_path(ns))["items"])
    locks = len(request(api, "GET", lock_path(ns))["items"])
    return "" if not capi + locks else f"; LEFT BEHIND: {capi} Cluster API IPAddresses, {locks} locks"


# --------------------------------------------------------------------------- the floor


class BindFloor(Floor):
    """The controller's writes per bound in-cluster claim, by a plain client."""

    ORDER = (("PATCH", POOLS_R, ""), ("PATCH", CLAIMS_R, ""), ("POST", LOCKS, ""), ("POST", CAPI_ADDRESSES, ""),
             ("PATCH", CLAIMS_R, "status"), ("PATCH", POOLS_R, "status"), ("POST", "events", ""))

    def __init__(self, api, counts: Counter, claims: int):
        super().__init__(api, counts, claims)
        self.used = 0

    def writes(self, slot: Slot) -> dict:
        ns, name, pool = slot.claim["metadata"]["namespace"], slot.claim["metadata"]["name"], slot.pool
        lock = {
            "apiVersion": f"{METAL3}/v1alpha1", "kind": "IPAddress",
            "metadata": {"name": _lock(slot.ip), "namespace": ns,
                         "finalizers": [kinds.FINALIZERS[kinds.IPADDRESS]],
                         "ownerReferences": [_ref(pool), _ref(slot.claim)]},
            "spec": {"address": slot.ip, "prefix": slot.prefix, "gateway": GATEWAY,
                     "pool": {"name": POOL, "namespace": ns, "apiVersion": pool["apiVersion"], "kind": pool["kind"]},
                     "claim": {"apiVersion": slot.claim["apiVersion"], "kind": slot.claim["kind"], "name": name,
                               "namespace": ns}}}
        return {
            ("PATCH", POOLS_R, ""): lambda: request(
                self.api, "PATCH", incluster_pool_path(gi.IN_CLUSTER_IP_POOL, ns, POOL),
                {"metadata": {"finalizers": [gi.POOL_FINALIZER]}}, headers=MERGE_PATCH),
            ("PATCH", CLAIMS_R, ""): lambda: request(
                self.api, "PATCH", claim_path(ns, name), {"metadata": {"finalizers": [gi.CLAIM_FINALIZER]}},
                headers=MERGE_PATCH),
            ("POST", LOCKS, ""): lambda: request(self.api, "POST", lock_path(ns), lock),
            ("POST", CAPI_ADDRESSES, ""): lambda: request(
                self.api, "POST", capi_address_path(ns),
                gi.ipaddress_body(slot.claim, pool, gi.Grant(slot.ip, slot.prefix, GATEWAY))),
            ("PATCH", CLAIMS_R, "status"): lambda: request(
                self.api, "PATCH", claim_path(ns, name, "status"),
                {"status": {"addressRef": {"name": name},
                            "conditions": [_ready(BOUND_REASON, bound_message(slot.ip))]}}, headers=MERGE_PATCH),
            ("PATCH", POOLS_R, "status"): lambda: self._pool_status(ns, +1),
            ("POST", "events", ""): lambda: request(self.api, "POST", f"/api/v1/namespaces/{ns}/events", {
                "apiVersion": "v1", "kind": "Event", "metadata": {"generateName": f"{name}.", "namespace": ns},
                "involvedObject": {"apiVersion": slot.claim["apiVersion"], "kind": "IPAddressClaim", "name": name,
                                   "namespace": ns},
                "type": "Normal", "reason": BOUND_REASON, "message": bound_message(slot.ip),
                "source": {"component": "metal3-ipam-bench"}}),
        }

    def _pool_status(self, ns: str, change: int) -> None:
        # The pool's counts as the controller writes them: what is used so far.
        with self._lock:
            self.used += change
            used = self.used
        total = 2 ** 16 - 3  # the /16 less .0, .255.255 and the gateway
        request(self.api, "PATCH", incluster_pool_path(gi.IN_CLUSTER_IP_POOL, ns, POOL, "status"),
                {"status": {"ipAddresses": {"total": total, "used": used, "free": total - used, "outOfRange": 0},
                            "conditions": [_ready("PoolReady", "the pool can hand out addresses")]}},
                headers=MERGE_PATCH)


def _lock(ip: str) -> str:
    """The name of the lock the controller writes for ``ip`` of the pool (``naming.lock_name``)."""
    return lock_name(POOL, netaddr.IPAddress(ip), None, "ip")


class ReleaseFloor(BindFloor):
    """The controller's writes per released in-cluster claim, by a plain client."""

    ORDER = (("DELETE", CAPI_ADDRESSES, ""), ("PATCH", CAPI_ADDRESSES, ""), ("DELETE", LOCKS, ""),
             ("PATCH", LOCKS, ""), ("PATCH", CLAIMS_R, ""), ("PATCH", POOLS_R, "status"), ("POST", "events", ""))

    def __init__(self, api, counts: Counter, claims: int, used: int):
        super().__init__(api, counts, claims)
        self.used = used

    def writes(self, slot: Slot) -> dict:
        ns, name = slot.claim["metadata"]["namespace"], slot.claim["metadata"]["name"]
        lock = _lock(slot.ip)
        off = {"metadata": {"finalizers": None}}
        return {
            **super().writes(slot),
            ("DELETE", CAPI_ADDRESSES, ""): lambda: request(self.api, "DELETE", capi_address_path(ns, name)),
            ("PATCH", CAPI_ADDRESSES, ""): lambda: request(self.api, "PATCH", capi_address_path(ns, name), off,
                                                           headers=MERGE_PATCH),
            ("DELETE", LOCKS, ""): lambda: request(self.api, "DELETE", lock_path(ns, lock)),
            ("PATCH", LOCKS, ""): lambda: request(self.api, "PATCH", lock_path(ns, lock), off, headers=MERGE_PATCH),
            ("PATCH", CLAIMS_R, ""): lambda: request(self.api, "PATCH", claim_path(ns, name), off,
                                                     headers=MERGE_PATCH),
            ("PATCH", POOLS_R, "status"): lambda: self._pool_status(ns, -1),
        }


def _ref(obj: dict) -> dict:
    return {"apiVersion": obj["apiVersion"], "kind": obj["kind"], "name": obj["metadata"]["name"],
            "uid": obj["metadata"]["uid"]}


# --------------------------------------------------------------------------- the two sides


@dataclass
class Phase:
    """One phase's figures: seconds, the writes by kind (the claims' own creation or deletion left out),
    the controller's CPU seconds, or the kinds of write the floor did not copy."""
    seconds: float
    writes: Counter
    cpu: float = 0.0
    not_copied: dict = field(default_factory=dict)
    load: str = ""  # the machine's load average when the phase started
    server_cpu: float = 0.0  # CPU seconds of kube-apiserver and etcd in the phase


def run_controller(plane, api, tmp: Path, ns: str, n: int, parallel: int, timeout: int) -> tuple[Phase, Phase]:
    create_namespace(api, ns)
    create_incluster_pool(api, POOL, ns, ADDRESSES, PREFIX, GATEWAY)
    with Controller(plane, [ns], tmp / f"{ns}.log", parallel).running() as ctrl:
        ctrl.settle()
        watch = ClaimWatch(api, CAPI_CLAIMS)
        claims = Claims(CAPI_CLAIMS)
        before, cpu, load = write_counts(api, grouped=True), ctrl.cpu_seconds(), load_average()
        server = server_cpu_seconds(plane)
        started = time.monotonic()
        claims.create(api, claims_of(ns, n), parallel)
        bind_s = watch.wait_bound(claims.sent, timeout) - started
        server_after = server_cpu_seconds(plane)
        ctrl.settle()  # the pool status written after the last binding is part of the phase
        after, cpu_after = write_counts(api, grouped=True), ctrl.cpu_seconds()
        bind = Phase(bind_s, after - before - Counter({CREATED: n}), cpu_after - cpu, load=load,
                     server_cpu=server_after - server)
        ips = sorted(request(api, "GET", capi_address_path(ns))["items"], key=lambda a: a["spec"]["address"])
        distinct = len({a["spec"]["address"] for a in ips})
        if distinct != n:
            raise SystemExit(f"{n} claims bound to {distinct} distinct IPs")

        load, server, started = load_average(), server_cpu_seconds(plane), time.monotonic()
        claims.delete(api, parallel)
        release_s = watch.wait_gone(claims.sent, timeout) - started
        server_after = server_cpu_seconds(plane)
        watch.stop()
        ctrl.settle()
        release = Phase(release_s, write_counts(api, grouped=True) - after - Counter({DELETED: n}),
                        ctrl.cpu_seconds() - cpu_after, load=load, server_cpu=server_after - server)
        print(f"controller: {ctrl.metric('metal3_ipam_reconcile_seconds_count'):.0f} pool passes, "
              f"{ctrl.metric('metal3_ipam_reconcile_seconds_sum'):.2f} s in passes, "
              f"{ctrl.cpu_seconds():.2f} s CPU in all{leftovers(api, ns)}")
        return bind, release


def run_floor(plane, api, ns: str, n: int, parallel: int, bind_writes: Counter,
              release_writes: Counter) -> tuple[Phase, Phase]:
    create_namespace(api, ns)
    pool = create_incluster_pool(api, POOL, ns, ADDRESSES, PREFIX, GATEWAY)
    objs = claims_of(ns, n)
    slots: dict[int, Slot] = {}

    def create(i: int) -> Slot:
        slots[i] = Slot(request(api, "POST", CAPI_CLAIMS.path(ns), objs[i]), pool, ip_of(i), PREFIX)
        return slots[i]

    def delete(i: int) -> Slot:
        request(api, "DELETE", claim_path(ns, slots[i].claim["metadata"]["name"]))
        return slots[i]

    floor = BindFloor(api, bind_writes, n)
    before, load, server = write_counts(api, grouped=True), load_average(), server_cpu_seconds(plane)
    started = time.monotonic()
    floor.behind(create, n, parallel)
    bind = Phase(time.monotonic() - started, write_counts(api, grouped=True) - before - Counter({CREATED: n}),
                 not_copied=floor.not_copied, load=load, server_cpu=server_cpu_seconds(plane) - server)

    release_floor = ReleaseFloor(api, release_writes, n, floor.used)
    before, load, server = write_counts(api, grouped=True), load_average(), server_cpu_seconds(plane)
    started = time.monotonic()
    release_floor.behind(delete, n, parallel)
    release = Phase(time.monotonic() - started, write_counts(api, grouped=True) - before - Counter({DELETED: n}),
                    not_copied=release_floor.not_copied, load=load, server_cpu=server_cpu_seconds(plane) - server)
    left = leftovers(api, ns)
    if left:
        print(f"floor{left}")
    return bind, release


def main() -> int:
    p = parser(__doc__)
    claims_argument(p, 1000, 65_000, "it is a /16")
    p.add_argument("--rounds", type=bounded(1, 20), default=1,
                   help="controller then floor this many times, in fresh namespaces; the verdict on the median "
                        "ratios (default 1)")
    args = p.parse_args()
    n = args.claims
    began = time.monotonic()
    load_before = load_average()
    ratios: dict[str, list[float]] = {"bind": [], "release": []}
    with control_plane(args.parallel) as (plane, api, tmp):
        for r in range(args.rounds):
            ctrl_bind, ctrl_release = run_controller(plane, api, tmp, f"controller-{r}", n, args.parallel,
                                                     args.timeout)
            floor_bind, floor_release = run_floor(plane, api, f"floor-{r}", n, args.parallel, ctrl_bind.writes,
                                                  ctrl_release.writes)
            print(f"round {r + 1} of {args.rounds}: {n} IPAddressClaims of one InClusterIPPool (/16), "
                  f"{args.parallel} parallel requests per side")
            for name, ctrl, floor, own in (("bind", ctrl_bind, floor_bind, "creation"),
                                           ("release", ctrl_release, floor_release, "deletion")):
                ratio = ctrl.seconds / floor.seconds
                ratios[name].append(ratio)
                print(f"{name}: controller {ctrl.seconds:.2f} s ({ctrl.seconds / n * 1000:.2f} ms/claim, "
                      f"{ctrl.cpu / n * 1000:.2f} ms CPU/claim; load {ctrl.load}), floor {floor.seconds:.2f} s "
                      f"({floor.seconds / n * 1000:.2f} ms/claim; load {floor.load}); ratio controller/floor "
                      f"{ratio:.2f}")
                print(f"  CPU of kube-apiserver + etcd per claim: controller side "
                      f"{ctrl.server_cpu / n * 1000:.2f} ms, floor {floor.server_cpu / n * 1000:.2f} ms")
                print_writes(ctrl.writes, floor.writes, floor.not_copied, n, own)
            sys.stdout.flush()
    for name, values in ratios.items():
        median = statistics.median(values)
        print(f"{name} ratio controller/floor: {median:.2f} {verdict(median, GOAL)}"
              + (f" (median of {', '.join(f'{v:.2f}' for v in values)})" if len(values) > 1 else ""))
    print(totals_text(began, load_before))
    return 0


if __name__ == "__main__":
    sys.exit(main())
