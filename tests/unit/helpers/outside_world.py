"""The world of a pool whose addresses an outside IPAM hands out later (a NetBoxIPPool): a fake IPAM answering
late, twice or never, and the claims, pools and readiness the tests check."""

from __future__ import annotations

import ipaddress
import random

from metal3_ipam.core import kinds
from metal3_ipam.core import objects as o
from metal3_ipam.core.asking import Asking, Granted, Op, Released
from metal3_ipam.core.reconcile import reconcile
from metal3_ipam.poolkinds.netbox.kind import NETBOX_IP_POOL
from metal3_ipam.poolkinds.netbox.pool import KEY_ANNOTATION
from metal3_ipam.poolkinds.netbox.source import Reason

from ipam_objects import NS, capi_claim, get, loaded


POOL = o.PoolKey(NS, "nb", NETBOX_IP_POOL)


SERVER = "netbox"


def netbox_pool(prefix="10.0.0.0/28", **spec):
    return {"apiVersion": "netbox.metal3-ipam.io/v1alpha1", "kind": "NetBoxIPPool",
            "metadata": {"name": "nb", "namespace": NS, "generation": 1},
            "spec": {"server": {"url": "http://netbox.example", "tokenSecretRef": {"name": "token"}},
                     "source": {"prefix": prefix}, **spec}}


def claim(name):
    return capi_claim(name, "nb", api_group=NETBOX_IP_POOL[0], kind=NETBOX_IP_POOL[1])


class FakeIpam:
    """An outside IPAM: one address per key (found again by key), the lowest free one, released by key."""

    def __init__(self, prefix="10.0.0.0/28", reserved=("10.0.0.1",)):
        net = ipaddress.ip_network(prefix)
        self.length = net.prefixlen
        self.free = [str(ip) for ip in net.hosts() if str(ip) not in reserved]
        self.held: dict[str, str] = {}
        self.asked: list[tuple[Op, str]] = []

    def run(self, ask):
        self.asked.append((ask.op, ask.key))
        if ask.op is Op.RELEASE:
            ip = self.held.pop(ask.key, None)
            if ip is not None:
                self.free.append(ip)
                self.free.sort(key=lambda t: ipaddress.ip_address(t))
            return Released(ask.key, ask.attempt)
        if ask.key not in self.held:
            self.held[ask.key] = self.free.pop(0)
        return Granted(ask.key, ask.attempt, f"{self.held[ask.key]}/{self.length}", 1000 + len(self.held))


class World:
    """The in-memory store, the asking state, the outside IPAM, and a clock; answers delivered as told."""

    def __init__(self, *objs, seed=0):
        self.api = loaded(netbox_pool(gateway="10.0.0.1"), *objs)
        self.asking = Asking(deadline=30, timeout_reason=Reason.TIMEOUT.value)  # as the NetBox kind's service
        self.ipam = FakeIpam()
        self.now = 0.0
        self.rng = random.Random(seed)
        self.out: list = []  # asks sent, not answered yet
        self.carried_when_asked: list[bool] = []

    def keys_carried(self):
        return {o.annotations(c).get(KEY_ANNOTATION) for c in self.api.inventory.of_kind(kinds.CAPI_CLAIM)} - {None}

    def pass_(self):
        plan = reconcile(self.snapshot())
        self.api.apply(plan)
        for key, intent in plan.intents.items():
            self.asking.intend(key, intent, (NS, "nb"), SERVER, self.now)
        self.asking.carried((NS, "nb"), self.keys_carried() | set(plan.intents), self.now)  # as the adapter does
        for ask in self.asking.due(self.now):
            self.carried_when_asked.append(ask.key in self.keys_carried())
            self.out.append(ask)
        return plan

    def first_asks(self):
        """Two passes (the key written, then asked for): the asks they sent, taken out unanswered."""
        self.pass_()
        self.pass_()
        out, self.out = self.out, []
        return out

    def snapshot(self):
        snap = self.api.inventory.snapshot(POOL, self.api.now, self.rng)
        snap.answers = self.asking
        return snap

    def answer(self, ask, twice=False):
        answer = self.ipam.run(ask)
        self.asking.file(answer, self.now)
        if twice:
            self.asking.file(answer, self.now)

    def answer_all(self, twice=False):
        out, self.out = self.out, []
        for ask in out:
            self.answer(ask, twice)

    def settle(self, rounds=30, answer=True):
        for _ in range(rounds):
            plan = self.pass_()
            answered = bool(self.out) and answer
            if answer:
                self.answer_all()
            if not plan and not answered and not self.out:
                nxt = self.asking.next_due()
                if nxt is None or not answer:
                    return
                self.now = max(self.now, nxt)
        raise AssertionError("no fixed point")

    def claim(self, name):
        return get(self.api, kinds.CAPI_CLAIM, name)


def ready(obj):
    return o.condition(o.status(obj), "Ready") or {}
