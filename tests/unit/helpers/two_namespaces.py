"""NetBoxIPPools and claims in two namespaces of one controller."""

from __future__ import annotations

from metal3_ipam.core import kinds
from metal3_ipam.core import objects as o
from metal3_ipam.core.reconcile import reconcile
from metal3_ipam.poolkinds.netbox.pool import KEY_ANNOTATION

from ipam_objects import NS
from outside_world import POOL, SERVER, World


NS2 = "other"


class TwoNamespaces(World):
    """One controller (one asking state, one NetBox) serving a NetBoxIPPool "nb" in two namespaces."""

    def __init__(self, *objs):
        from outside_world import netbox_pool
        super().__init__(*objs)
        second = netbox_pool(gateway="10.0.0.1")
        second["metadata"] = {**second["metadata"], "namespace": NS2}
        self.api.load(second)

    def pass_(self):
        plans = []
        for ns in (NS, NS2):
            pool = o.PoolKey(ns, "nb", POOL.kind)
            snap = self.api.inventory.snapshot(pool, self.api.now, self.rng)
            snap.answers = self.asking
            plan = reconcile(snap)
            self.api.apply(plan)
            for key, intent in plan.intents.items():
                self.asking.intend(key, intent, (ns, "nb"), SERVER, self.now)
            carried = {o.annotations(c).get(KEY_ANNOTATION) for c in self.api.inventory.of_kind(kinds.CAPI_CLAIM)
                       if o.namespace(c) == ns} - {None}
            self.asking.carried((ns, "nb"), carried | set(plan.intents), self.now)
            plans.append(plan)
        self.out.extend(self.asking.due(self.now))
        return [p for p in plans if p]
