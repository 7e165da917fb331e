"""What the controller may do in the API, and why: the source of config/rbac.

Every rule names the calls that need it. The ClusterRole and the leader
election Role in ``config/rbac`` are generated from these tables
(``python -m metal3_ipam.packaging``), and an end-to-end test runs the
controller under exactly that role for a whole scenario with the API
server's audit log on, then checks that every call was allowed and that
every verb granted was used — so a call added to the code without a rule, or
a rule that no call needs any more, fails the tests.

No wildcards: every group, resource and verb is spelled out.
"""

from __future__ import annotations

from metal3_ipam.core import kinds
from metal3_ipam.core import poolkind
from metal3_ipam.core.poolkind import Rule

WATCH = ("list", "watch")

# What the lifecycle calls whatever the kinds of pool.
LIFECYCLE_RULES: tuple[Rule, ...] = (
    Rule(kinds.METAL3_GROUP, "ipclaims", ("get", "list", "watch", "patch"),
         "watched; finalizer patched; read again before an address is let go (Delete.unless_exists)"),
    Rule(kinds.METAL3_GROUP, "ipclaims/status", ("patch",), "status.address, errorMessage and Ready written"),
    Rule(kinds.METAL3_GROUP, "ipaddresses", ("get", "list", "watch", "create", "patch", "delete"),
         "the name lock: created for an allocation, read when the name is taken (409), finalizer patched, "
         "deleted on release"),
    Rule(kinds.CAPI_IPAM_GROUP, "ipaddressclaims", ("get", "list", "watch", "patch"),
         "watched (under -n too in every namespace where a kind of pool of cluster scope is served: the IPs "
         "its claims there keep, operator.listings); finalizer patched; read again before its address is let go"),
    Rule(kinds.CAPI_IPAM_GROUP, "ipaddressclaims/status", ("patch",), "status.addressRef and Ready written"),
    Rule(kinds.CAPI_IPAM_GROUP, "ipaddresses", ("get", "list", "watch", "create", "patch", "delete"),
         "the contract's IPAddress: created, read when its name is taken, finalizer patched, deleted on release"),
    Rule(kinds.CLUSTER_GROUP, "clusters", WATCH, "watched for spec.paused"),
    Rule("", "events", ("create",), "Warning and Normal Events on pools and claims (api.ApiWriter._post_event)"),
)


def _pool_rules(kind: poolkind.PoolKind) -> tuple[Rule, ...]:
    """What the lifecycle calls on a kind's pools, and what its outside IPAM's adapter calls besides."""
    return (
        Rule(kind.group, kind.plural, ("list", "watch", "patch"),
             "watched into the inventory (operator.listings, kopf); finalizer, cluster-name label and "
             "owner reference patched (api.ApiWriter._patch)"),
        Rule(kind.group, f"{kind.plural}/status", ("patch",), "counts and Ready written (SetStatus)"),
        *(kind.outside.role_rules if kind.outside else ()),
    )


def cluster_rules() -> tuple[Rule, ...]:
    """The rules of the ClusterRole, for the kinds of pool registered (``poolkind.REGISTRY``): each kind's
    first, then the lifecycle's; a rule two kinds need is granted once."""
    rules = [rule for kind in poolkind.REGISTRY.values() for rule in _pool_rules(kind)] + list(LIFECYCLE_RULES)
    granted: set[tuple[str, str, tuple[str, ...]]] = set()
    unique = []
    for rule in rules:
        if (rule.group, rule.resource, rule.verbs) not in granted:
            granted.add((rule.group, rule.resource, rule.verbs))
            unique.append(rule)
    return tuple(unique)


# Clusters that run the OwnerReferencesPermissionEnforcement admission plugin
# (OpenShift does) check more than the calls themselves: setting
# blockOwnerDeletion on an address's owners needs update on
# ippools/finalizers and ipaddressclaims/finalizers, and changing the pool's
# owner reference to its Cluster needs delete on ippools. The controller makes
# no such calls, so they are not granted here; README says how to add them.

# A Role in the namespace of the Lease (the controller's own), which is the lock namespace too.
LEADER_ELECTION_RULES: tuple[Rule, ...] = (
    Rule("coordination.k8s.io", "leases", ("get", "list", "watch", "create", "update", "patch", "delete"),
         "leader election: read, created once, renewed with a compare-and-swap replace (leader.LeaderElector); "
         "the locks of the kinds whose locks are Leases and the guards of IPs (core.lockstore): listed and "
         "watched, created for an allocation, read when the name is taken, finalizer patched, deleted on release"),
)


# The diagnostics endpoint (diagnostics.py) asks the API server who a scrape's token is and whether they may read
# /metrics: a ClusterRole of its own (Cluster API providers' "proxy-role"), and metrics-reader for the scrapers.
DIAGNOSTICS_RULES: tuple[Rule, ...] = (
    Rule("authentication.k8s.io", "tokenreviews", ("create",), "who a scrape's bearer token is (diagnostics.Reviews)"),
    Rule("authorization.k8s.io", "subjectaccessreviews", ("create",),
         "whether that user may get /metrics (diagnostics.Reviews)"),
)


def _policy_rules(rules: tuple[Rule, ...]) -> list[dict]:
    """Rules grouped as a ClusterRole lists them: one entry per (group, verbs), resources sorted."""
    grouped: dict[tuple[str, tuple[str, ...]], list[str]] = {}
    for rule in rules:
        grouped.setdefault((rule.group, tuple(sorted(rule.verbs))), []).append(rule.resource)
    return [{"apiGroups": [group], "resources": sorted(resources), "verbs": list(verbs)}
            for (group, verbs), resources in sorted(grouped.items())]


def cluster_role(name: str = "manager-role") -> dict:
    return {"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRole", "metadata": {"name": name},
            "rules": _policy_rules(cluster_rules())}


def leader_election_role(name: str = "leader-election-role") -> dict:
    return {"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "Role", "metadata": {"name": name},
            "rules": _policy_rules(LEADER_ELECTION_RULES)}


def diagnostics_roles() -> list[dict]:
    """The controller's role for reviewing scrapes, and the role a scraper (Prometheus) is bound to."""
    return [{"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRole",
             "metadata": {"name": "diagnostics-role"}, "rules": _policy_rules(DIAGNOSTICS_RULES)},
            {"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRole",
             "metadata": {"name": "metrics-reader"},
             "rules": [{"nonResourceURLs": ["/metrics"], "verbs": ["get"]}]}]


def granted(rules: tuple[Rule, ...]) -> set[tuple[str, str, str]]:
    """(group, resource, verb) for every verb the rules grant."""
    return {(r.group, r.resource, verb) for r in rules for verb in r.verbs}
