"""What operators watch: the alert rules, the Grafana dashboard of pool use, kube-state-metrics' configuration.

One source for each, rendered into ``config/prometheus/`` and ``config/grafana/`` by
``python -m metal3_ipam.packaging`` (checked current by ``--check``):

- the alert rules (:func:`rule_groups`), as a prometheus-operator ``PrometheusRule``
  (``config/prometheus/prometheusrule.yaml``) and as a plain Prometheus rules file
  (``config/prometheus/metal3-ipam.rules.yaml``), both with the defaults of :class:`RuleSettings`;
- the dashboard (:func:`dashboard`, ``config/grafana/metal3-ipam-pools.json``);
- the kube-state-metrics ``CustomResourceStateMetrics`` for the kinds of pool
  (:func:`kube_state_metrics_config`, ``config/prometheus/kube-state-metrics.yaml``).

The rules with other thresholds, an opt-out selector or other ``for:`` durations::

    python -m metal3_ipam.observability rules --usage-warning 0.7 --usage-critical 0.9 \\
        --pool-selector 'namespace!="lab",pool!~"scratch-.*"' --for Metal3IPAMPoolUsageHigh=1h \\
        [--format prometheusrule] > rules.yaml

The per-pool alerts read the series of the replica that leads (``metal3_ipam_leader == 1``): a standby's
last values are not news. Each keeps the pool's ``namespace``, ``pool`` and ``kind`` labels.
"""

from __future__ import annotations

import argparse
import json
import re
import sys
from dataclasses import dataclass, field
from typing import Any, Sequence

import yaml

from . import poolkinds  # noqa: F401  (registers the kinds of pool)
from .core.poolkind import REGISTRY

# -- alert rules -----------------------------------------------------------------------------------

POOL = "namespace, pool, kind"
DEFAULT_FOR = {
    "Metal3IPAMPoolUsageHigh": "15m",
    "Metal3IPAMPoolUsageCritical": "5m",
    "Metal3IPAMPoolExhausted": "2m",
    "Metal3IPAMClaimsNotReady": "1m",
    "Metal3IPAMExternalIPAMUnreachable": "5m",
    "Metal3IPAMNoLeader": "5m",
    "Metal3IPAMControllerDown": "5m",
    "Metal3IPAMControllerNotReady": "10m",
    "Metal3IPAMWebhookFailing": "5m",
    "Metal3IPAMWritesRefused": "5m",
}


# A duration as Prometheus reads one (``for:``, a range): units from years to milliseconds, largest first.
_DURATION = re.compile(r"(\d+y)?(\d+w)?(\d+d)?(\d+h)?(\d+m)?(\d+s)?(\d+ms)?")


def _check_duration(what: str, value: str) -> None:
    if not value or not _DURATION.fullmatch(value):
        raise ValueError(f"{what} {value!r}: not a duration Prometheus reads (e.g. 30s, 5m, 1h30m)")


@dataclass(frozen=True)
class RuleSettings:
    """The parameters of the alert rules.

    ``pool_selector``: PromQL label matchers that every per-pool series must meet (the opt-out:
    ``pool!~"scratch-.*"``); ``controller_selector``: the same for the controller's own series
    (``job="metal3-ipam"`` where several installations share a Prometheus). Usage is the share of the
    pool's addresses a new claim can no longer get: ``1 - free / capacity``.
    """

    usage_warning: float = 0.80
    usage_critical: float = 0.95
    pool_selector: str = ""
    controller_selector: str = ""
    claims_not_ready_seconds: float = 900.0
    rate_window: str = "5m"
    # How long a per-pool alert keeps firing once its expression no longer holds (``keep_firing_for``): through a
    # rollout of the controller the pool series are gone while the new pod stands by (no replica leads yet), and
    # without it a firing alert would resolve and be sent again after its ``for:``. "0s": none.
    keep_firing_for: str = "5m"
    # Where the operations guide is published (its page docs/operations.md): each alert's ``runbook_url`` is
    # <runbook_base>#<alert name in lower case>; none when empty.
    runbook_base: str = ""
    durations: dict[str, str] = field(default_factory=lambda: dict(DEFAULT_FOR))

    def __post_init__(self) -> None:
        if not 0 < self.usage_warning < self.usage_critical <= 1:
            raise ValueError(f"usage thresholds {self.usage_warning}, {self.usage_critical}: expected "
                             "0 < warning < critical <= 1")
        unknown = set(self.durations) - set(DEFAULT_FOR)
        if unknown:
            raise ValueError(f"no alert named {', '.join(sorted(unknown))}; the alerts: {', '.join(DEFAULT_FOR)}")
        _check_duration("rate window", self.rate_window)
        _check_duration("keep_firing_for", self.keep_firing_for)
        for name, duration in self.durations.items():
            _check_duration(f"for: of {name}", duration)


def _nonzero(duration: str) -> bool:
    return any(c in "123456789" for c in duration)


def _sel(*matchers: str) -> str:
    """Label matchers in braces; nothing when there are none."""
    found = [m for m in matchers if m]
    return "{" + ", ".join(found) + "}" if found else ""


def _pool_name() -> str:
    return "{{ if $labels.namespace }}{{ $labels.namespace }}/{{ end }}{{ $labels.pool }} ({{ $labels.kind }})"


def rule_groups(settings: RuleSettings = RuleSettings()) -> list[dict[str, Any]]:
    """The rule groups, as a Prometheus rules file (and a PrometheusRule's spec) holds them."""
    s = settings
    pool, ctl = s.pool_selector, s.controller_selector
    leading = f"on (instance) (metal3_ipam_leader{_sel(ctl)} == 1)"
    ours = f"on (instance) metal3_ipam_leader{_sel(ctl)}"  # the controller's, not another's of the same name
    failed = 'code=~"5.."'

    def led(metric: str, *matchers: str, by: str = POOL) -> str:
        """A per-pool series as the leading replica exports it, one per pool."""
        return f"max by ({by}) ({metric}{_sel(pool, *matchers)} and {leading})"

    usage = f"(1 - {led('metal3_ipam_pool_free')} / ({led('metal3_ipam_pool_capacity')} > 0))"

    def alert(name: str, expr: str, severity: str, summary: str, description: str, anchor: str,
              per_pool: bool = True) -> dict[str, Any]:
        rule: dict[str, Any] = {"alert": name, "expr": expr}
        if _nonzero(s.durations.get(name, "0s")):
            rule["for"] = s.durations[name]
        if per_pool and _nonzero(s.keep_firing_for):
            rule["keep_firing_for"] = s.keep_firing_for
        rule["labels"] = {"severity": severity}
        rule["annotations"] = {"summary": summary, "description": description}
        if s.runbook_base:
            rule["annotations"]["runbook_url"] = f"{s.runbook_base}#{anchor}"
        return rule

    pools = [
        alert("Metal3IPAMPoolUsageHigh", f"{usage} >= {s.usage_warning:g} < {s.usage_critical:g}", "warning",
              f"IP pool {_pool_name()} is {{{{ $value | humanizePercentage }}}} used",
              "New claims of this pool will soon find no free address. Grow the pool (more ranges or a "
              "larger prefix) or move machines to another pool.", "metal3ipampoolusagehigh"),
        alert("Metal3IPAMPoolUsageCritical", f"{usage} >= {s.usage_critical:g}", "critical",
              f"IP pool {_pool_name()} is {{{{ $value | humanizePercentage }}}} used",
              "The pool is nearly exhausted: the next machines may get no address. Grow the pool now.",
              "metal3ipampoolusagecritical"),
        alert("Metal3IPAMPoolExhausted",
              f"sum by ({POOL}) ({led('metal3_ipam_claims_not_ready', by=POOL + ', reason')}) > 0 "
              f"and on ({POOL}) {led('metal3_ipam_pool_free')} == 0", "critical",
              f"IP pool {_pool_name()} has no free address and {{{{ $value }}}} claims are waiting",
              "Machines using this pool cannot be provisioned until an address is freed or the pool grows. "
              "Grow the pool, or delete claims (machines) that no longer need their address.",
              "metal3ipampoolexhausted"),
        alert("Metal3IPAMClaimsNotReady",
              f"{led('metal3_ipam_claims_not_ready_oldest_seconds', by=POOL + ', reason')} "
              f"> {s.claims_not_ready_seconds:g}", "warning",
              f"Claims of IP pool {_pool_name()} have not been Ready for {{{{ $value | humanizeDuration }}}} "
              "({{ $labels.reason }})",
              "A claim of this pool has waited for an address longer than expected; its Ready condition says "
              "why (reason {{ $labels.reason }}). `kubectl get ipclaims,ipaddressclaims -A` and the claim's "
              "events show which ones.", "metal3ipamclaimsnotready"),
        alert("Metal3IPAMExternalIPAMUnreachable", f"{led('metal3_ipam_external_ipam_up')} == 0", "critical",
              f"The IPAM server of pool {_pool_name()} does not answer",
              "The controller cannot reach the outside IPAM this pool's addresses come from (the pool's kind says which), or it "
              "answers with server errors: new claims of the pool wait, releases are put off. Check the "
              "server, its URL in the pool's spec and the network between them.",
              "metal3ipamexternalipamunreachable"),
    ]
    controller = [
        alert("Metal3IPAMNoLeader", f"sum by (job) (metal3_ipam_leader{_sel(ctl)}) < 1", "critical",
              "No replica of the metal3-ipam controller ({{ $labels.job }}) leads",
              "Nothing hands out or releases addresses: no replica holds the leader Lease. Look at the "
              "controller's logs and /healthz, and at the Lease in its namespace.", "metal3ipamnoleader",
              per_pool=False),
        alert("Metal3IPAMControllerDown", f"absent(metal3_ipam_leader{_sel(ctl)})", "critical",
              "The metal3-ipam controller is not scraped",
              "No replica of the controller exports metrics: it is not running, or Prometheus cannot reach "
              "it. Claims get no addresses while it is down.", "metal3ipamcontrollerdown",
              per_pool=False),
        alert("Metal3IPAMControllerNotReady", f"metal3_ipam_ready{_sel(ctl)} == 0", "warning",
              "metal3-ipam controller {{ $labels.instance }} is not ready",
              "The replica's /readyz fails: its watches have not started, its inventory is not loaded, or the "
              "API server refuses its writes (RBAC). Its /readyz answer says which.",
              "metal3ipamcontrollernotready", per_pool=False),
        alert("Metal3IPAMWebhookFailing",
              f"sum by (job, instance, webhook) (rate(controller_runtime_webhook_requests_total"
              f"{_sel(ctl, failed)}[{s.rate_window}]) and {ours}) > 0", "warning",
              "The metal3-ipam webhook {{ $labels.webhook }} fails to answer reviews",
              "The webhook answers admission or conversion reviews with errors (busy, not judged in time): "
              "with failurePolicy Fail the API server refuses the pools and claims sent meanwhile. Look at the "
              "controller's CPU and logs.", "metal3ipamwebhookfailing", per_pool=False),
        alert("Metal3IPAMWritesRefused",
              f"sum by (job, instance, verb, kind, code) (increase(metal3_ipam_write_refusals_total"
              f"{_sel(ctl)}[{s.rate_window}])) > 0", "warning",
              "The API server refuses the controller's {{ $labels.verb }} of {{ $labels.kind }} "
              "({{ $labels.code }})",
              "Writes the controller needs are refused for good (RBAC, admission, size): the claims or pools "
              "concerned say so in their Ready condition. Fix the RBAC or the refusing admission policy.",
              "metal3ipamwritesrefused", per_pool=False),
    ]
    return [{"name": "metal3-ipam.pools", "rules": pools}, {"name": "metal3-ipam.controller", "rules": controller}]


def rules_file(settings: RuleSettings = RuleSettings()) -> dict[str, Any]:
    """A Prometheus rules file (``rule_files:``)."""
    return {"groups": rule_groups(settings)}


def prometheus_rule(settings: RuleSettings = RuleSettings(), *, name: str = "alerts",
                    namespace: str = "system") -> dict[str, Any]:
    """The rules as a prometheus-operator ``PrometheusRule``."""
    return {"apiVersion": "monitoring.coreos.com/v1", "kind": "PrometheusRule",
            "metadata": {"name": name, "namespace": namespace,
                         "labels": {"app.kubernetes.io/name": "metal3-ipam", "app.kubernetes.io/component": "alerts"}},
            "spec": {"groups": rule_groups(settings)}}


# -- the dashboard ---------------------------------------------------------------------------------

POOL_FILTER = 'namespace=~"$namespace", pool=~"$pool", kind=~"$kind"'
JOB_FILTER = 'job=~"$job"'
LEADING = 'on (instance) (metal3_ipam_leader{job=~"$job"} == 1)'


def _pool_series(metric: str, by: str = POOL) -> str:
    return f"max by ({by}) ({metric}{{{POOL_FILTER}}} and {LEADING})"


def _named(query: str) -> str:
    """``query`` with a label ``pool_path`` for its legend: ``namespace/pool``, or ``pool`` alone for a pool of
    cluster scope (its ``namespace`` is empty)."""
    joined = f'label_join({query}, "pool_path", "/", "namespace", "pool")'
    return f'label_replace({joined}, "pool_path", "$1", "pool_path", "/(.*)")'


_USAGE = _named(f"(1 - {_pool_series('metal3_ipam_pool_free')} / ({_pool_series('metal3_ipam_pool_capacity')} > 0))")
POOL_LEGEND = "{{pool_path}} ({{kind}})"
# The series every pool served has from its first pass on, whatever its kind says of its counts: the
# dashboard's namespace, kind and pool are picked among its labels.
EVERY_POOL = "metal3_ipam_allocations_total"

# (title, kind of panel, unit, [(query, legend)], width)
_ROWS: list[tuple[str, list[tuple[str, str, str, list[tuple[str, str]], int]]]] = [
    ("Pools", [
        ("Usage per pool", "timeseries", "percentunit", [(_USAGE, POOL_LEGEND)], 12),
        ("Pools nearest full", "bargauge", "percentunit", [(f"topk(10, {_USAGE})", POOL_LEGEND)], 12),
        ("Free addresses per pool", "timeseries", "short",
         [(_named(_pool_series("metal3_ipam_pool_free")), POOL_LEGEND)], 12),
        ("Allocations and releases per second", "timeseries", "ops", [
            (_named(f"sum by ({POOL}) (rate(metal3_ipam_allocations_total{{{POOL_FILTER}, {JOB_FILTER}}}"
                    "[$__rate_interval]))"), "allocated " + POOL_LEGEND),
            (_named(f"sum by ({POOL}) (rate(metal3_ipam_releases_total{{{POOL_FILTER}, {JOB_FILTER}}}"
                    "[$__rate_interval]))"),
             "released " + POOL_LEGEND)], 12),
    ]),
    ("Claims", [
        ("Claims waiting, by reason", "timeseries", "short", [
            # Each pool's claims once, however many replicas export them (every one does without leader election).
            (f"sum by (reason) ({_pool_series('metal3_ipam_claims_not_ready', POOL + ', reason')})", "{{reason}}")],
         8),
        ("Longest wait, by pool and reason", "timeseries", "s", [
            (_named(_pool_series("metal3_ipam_claims_not_ready_oldest_seconds", POOL + ", reason")),
             POOL_LEGEND + " {{reason}}")], 8),
        ("Allocation latency", "timeseries", "s", [
            (f"histogram_quantile({q}, sum by (le) (rate(metal3_ipam_allocation_seconds_bucket{{{JOB_FILTER}}}"
             f"[$__rate_interval])))", f"p{round(q * 100)}") for q in (0.5, 0.9, 0.99)], 8),
        ("Claims refused, by reason", "timeseries", "ops", [
            (f"sum by (reason) (rate(metal3_ipam_errors_total{{{JOB_FILTER}}}[$__rate_interval]))", "{{reason}}")],
         12),
        ("External IPAM reachable (1) or not (0)", "timeseries", "short", [
            (_named(_pool_series("metal3_ipam_external_ipam_up")), POOL_LEGEND)], 12),
    ]),
    ("Controller", [
        ("Leader and ready, per replica", "timeseries", "short", [
            (f"metal3_ipam_leader{{{JOB_FILTER}}}", "leader {{instance}}"),
            (f"metal3_ipam_ready{{{JOB_FILTER}}}", "ready {{instance}}")], 8),
        ("Passes per second, by kind and result", "timeseries", "ops", [
            (f"sum by (controller, result) (rate(controller_runtime_reconcile_total{{{JOB_FILTER}}}"
             f"[$__rate_interval]))", "{{controller}} {{result}}")], 8),
        ("Pass duration (p90)", "timeseries", "s", [
            (f"histogram_quantile(0.9, sum by (controller, le) (rate(controller_runtime_reconcile_time_seconds_bucket"
             f"{{{JOB_FILTER}}}[$__rate_interval])))", "{{controller}}")], 8),
        ("Pools waiting for a pass", "timeseries", "short", [
            (f"sum by (name) (workqueue_depth{{{JOB_FILTER}}})", "{{name}}")], 8),
        ("API requests per second, by method and code", "timeseries", "ops", [
            (f"sum by (method, code) (rate(rest_client_requests_total{{{JOB_FILTER}}}[$__rate_interval]))",
             "{{method}} {{code}}")], 8),
        ("Webhook answers per second, by path and code", "timeseries", "ops", [
            (f"sum by (webhook, code) (rate(controller_runtime_webhook_requests_total{{{JOB_FILTER}}}"
             f"[$__rate_interval]))", "{{webhook}} {{code}}")], 8),
        ("Process memory and CPU", "timeseries", "short", [
            (f"process_resident_memory_bytes{{{JOB_FILTER}}}", "resident bytes {{instance}}"),
            (f"rate(process_cpu_seconds_total{{{JOB_FILTER}}}[$__rate_interval])", "CPU seconds/s {{instance}}")],
         12),
        ("Open file descriptors", "timeseries", "short", [
            (f"process_open_fds{{{JOB_FILTER}}}", "{{instance}}")], 12),
    ]),
]

_DATASOURCE = {"type": "prometheus", "uid": "${datasource}"}


def _variable(name: str, query: str, label: str) -> dict[str, Any]:
    return {"name": name, "label": label, "type": "query", "datasource": _DATASOURCE,
            "definition": query, "query": {"query": query, "refId": f"{name}-variable"},
            "includeAll": True, "allValue": ".*", "multi": True, "refresh": 2, "sort": 1,
            "current": {"text": "All", "value": "$__all"}}


def dashboard() -> dict[str, Any]:
    """The Grafana dashboard (JSON model) of pool use and the controller's own work."""
    panels: list[dict[str, Any]] = []
    y = 0
    for row_title, row in _ROWS:
        panels.append({"type": "row", "title": row_title, "collapsed": False, "id": len(panels) + 1,
                       "gridPos": {"h": 1, "w": 24, "x": 0, "y": y}, "panels": []})
        y += 1
        x = 0
        for title, kind, unit, queries, width in row:
            if x + width > 24:
                x, y = 0, y + 8
            panel: dict[str, Any] = {
                "id": len(panels) + 1, "type": kind, "title": title, "datasource": _DATASOURCE,
                "gridPos": {"h": 8, "w": width, "x": x, "y": y},
                "fieldConfig": {"defaults": {"unit": unit}, "overrides": []},
                "targets": [{"datasource": _DATASOURCE, "expr": expr, "legendFormat": legend,
                             "refId": chr(ord("A") + n), **({"instant": True, "range": False}
                                                           if kind == "bargauge" else {})}
                            for n, (expr, legend) in enumerate(queries)]}
            if kind == "bargauge":
                panel["options"] = {"orientation": "horizontal", "displayMode": "gradient",
                                    "reduceOptions": {"calcs": ["lastNotNull"], "values": False}}
                panel["fieldConfig"]["defaults"].update({"min": 0, "max": 1, "thresholds": {"mode": "absolute", "steps": [
                    {"color": "green", "value": None}, {"color": "orange", "value": 0.8},
                    {"color": "red", "value": 0.95}]}})
            panels.append(panel)
            x += width
        y += 8
    return {
        "title": "Metal3 IPAM: pools", "uid": "metal3-ipam-pools", "tags": ["metal3-ipam", "ipam", "cluster-api"],
        "description": "Use of the IP pools metal3-ipam serves, the claims waiting for them, and the controller's "
                       "own work. Generated by metal3_ipam/observability.py.",
        "editable": True, "schemaVersion": 39, "version": 1, "refresh": "30s", "timezone": "",
        "time": {"from": "now-6h", "to": "now"},
        "templating": {"list": [
            {"name": "datasource", "label": "Data source", "type": "datasource", "query": "prometheus",
             "current": {}, "hide": 0},
            _variable("job", "label_values(metal3_ipam_leader, job)", "Job"),
            _variable("namespace", f'label_values({EVERY_POOL}{{{JOB_FILTER}}}, namespace)', "Namespace"),
            _variable("kind", f'label_values({EVERY_POOL}{{{JOB_FILTER}, namespace=~"$namespace"}}, kind)', "Kind"),
            _variable("pool", f'label_values({EVERY_POOL}{{{JOB_FILTER}, namespace=~"$namespace", kind=~"$kind"}}, '
                              'pool)', "Pool"),
        ]},
        "annotations": {"list": []},
        "panels": panels,
    }


def dashboard_queries(board: dict[str, Any] | None = None) -> list[tuple[str, str]]:
    """(panel title, query) of every target of the dashboard."""
    board = board if board is not None else dashboard()
    found = []
    for panel in board["panels"]:
        for inner in [panel, *panel.get("panels", [])]:
            found += [(inner.get("title", ""), t["expr"]) for t in inner.get("targets", []) if t.get("expr")]
    return found


# -- kube-state-metrics ----------------------------------------------------------------------------

def kube_state_metrics_config(versions: dict[tuple[str, str], str]) -> dict[str, Any]:
    """kube-state-metrics' ``CustomResourceStateMetrics`` for every kind of pool (at the version ``versions``
    names, its CRD's storage version): ``metal3_ipam_<kind>_info``, ``_created``, the address counts
    (``_capacity``, ``_allocated``, ``_free``) and ``_status_condition{type,status}`` (``Ready`` among them)."""
    resources = []
    for group_kind in sorted(REGISTRY):
        group, kind = group_kind
        scoped = {"name": ["metadata", "name"]}
        if not REGISTRY[group_kind].cluster_scoped:
            scoped["namespace"] = ["metadata", "namespace"]
        metrics: list[dict[str, Any]] = [
            {"name": "info", "help": f"A {kind}", "each": {"type": "Info", "info": {"labelsFromPath": {
                "uid": ["metadata", "uid"]}}}},
            {"name": "created", "help": f"When the {kind} was made (Unix time)",
             "each": {"type": "Gauge", "gauge": {"path": ["metadata", "creationTimestamp"]}}},
        ]
        for name, path in REGISTRY[group_kind].status_counts.items():
            path = list(path)
            said = f"{'.'.join(path[1:])} as its status says" if path[0] == "status" else ".".join(path)
            metrics.append({"name": name, "help": f"The {kind}'s {said}",
                            "each": {"type": "Gauge", "gauge": {"path": path}}})
        metrics.append({"name": "status_condition", "help": f"The {kind}'s conditions (Ready among them)",
                        "each": {"type": "StateSet", "stateSet": {
                            "labelName": "status", "labelsFromPath": {"type": ["type"], "reason": ["reason"]},
                            "list": ["True", "False", "Unknown"], "path": ["status", "conditions"],
                            "valueFrom": ["status"]}}})
        resources.append({"groupVersionKind": {"group": group, "kind": kind, "version": versions[group_kind]},
                          "metricNamePrefix": f"metal3_ipam_{kind.lower()}", "labelsFromPath": scoped,
                          "metrics": metrics})
    return {"kind": "CustomResourceStateMetrics", "spec": {"resources": resources}}


def ksm_paths(config: dict[str, Any]) -> list[tuple[tuple[str, str, str], list[str]]]:
    """Every path the configuration reads, from the object's root: ((group, version, kind), path)."""
    found = []
    for resource in config["spec"]["resources"]:
        gvk = resource["groupVersionKind"]
        key = (gvk["group"], gvk["version"], gvk["kind"])
        found += [(key, path) for path in resource.get("labelsFromPath", {}).values()]
        for metric in resource["metrics"]:
            each = metric["each"]
            body = each[{"Gauge": "gauge", "Info": "info", "StateSet": "stateSet"}[each["type"]]]
            base = body.get("path", [])
            if base:
                found.append((key, base))
            # Within a list (conditions), the paths are of its items.
            item = [*base, "[]"] if each["type"] == "StateSet" else base
            found += [(key, [*item, *path]) for path in body.get("labelsFromPath", {}).values()]
            if "valueFrom" in body:
                found.append((key, [*item, *body["valueFrom"]]))
    return found


# -- the command -----------------------------------------------------------------------------------

def _settings(args: argparse.Namespace) -> RuleSettings:
    durations = dict(DEFAULT_FOR)
    for item in args.for_:
        name, _, duration = item.partition("=")
        if not duration:
            raise ValueError(f"--for {item}: expected ALERT=DURATION (ALERT may be '*' for every alert)")
        durations.update(dict.fromkeys(DEFAULT_FOR, duration) if name == "*" else {name: duration})
    return RuleSettings(usage_warning=args.usage_warning, usage_critical=args.usage_critical,
                        pool_selector=args.pool_selector, controller_selector=args.controller_selector,
                        claims_not_ready_seconds=args.claims_not_ready_seconds, rate_window=args.rate_window,
                        keep_firing_for=args.keep_firing_for,
                        runbook_base=args.runbook_base, durations=durations)


def main(argv: Sequence[str] | None = None) -> int:
    defaults = RuleSettings()
    parser = argparse.ArgumentParser(prog="python -m metal3_ipam.observability",
                                     description="Render the alert rules with other parameters.")
    commands = parser.add_subparsers(dest="command", required=True)
    rules = commands.add_parser("rules", help="the alert rules, as a rules file or a PrometheusRule")
    rules.add_argument("--format", choices=("rules", "prometheusrule"), default="rules")
    rules.add_argument("--usage-warning", type=float, default=defaults.usage_warning, metavar="SHARE",
                       help=f"warn when this share of a pool is used (default {defaults.usage_warning:g})")
    rules.add_argument("--usage-critical", type=float, default=defaults.usage_critical, metavar="SHARE",
                       help=f"page when this share of a pool is used (default {defaults.usage_critical:g})")
    rules.add_argument("--pool-selector", default="", metavar="MATCHERS",
                       help="PromQL label matchers the pools alerted on must meet, e.g. 'pool!~\"scratch-.*\"'")
    rules.add_argument("--controller-selector", default="", metavar="MATCHERS",
                       help="PromQL label matchers of the controller's own series, e.g. 'job=\"metal3-ipam\"'")
    rules.add_argument("--claims-not-ready-seconds", type=float, default=defaults.claims_not_ready_seconds,
                       metavar="SECONDS", help="alert on claims not Ready for longer (default "
                                               f"{defaults.claims_not_ready_seconds:g})")
    rules.add_argument("--rate-window", default=defaults.rate_window, metavar="DURATION")
    rules.add_argument("--keep-firing-for", default=defaults.keep_firing_for, metavar="DURATION",
                       help="how long a pool alert keeps firing after its condition ends, e.g. through a rollout "
                            f"of the controller (default {defaults.keep_firing_for}; 0s: none)")
    rules.add_argument("--runbook-base", default="", metavar="URL",
                       help="where docs/operations.md is published: each alert links to its section there")
    rules.add_argument("--for", dest="for_", action="append", default=[], metavar="ALERT=DURATION",
                       help="an alert's 'for:' ('*=DURATION' for all); repeatable")
    rules.add_argument("--namespace", default="metal3-ipam-system", help="the PrometheusRule's namespace")
    args = parser.parse_args(argv)
    try:
        settings = _settings(args)
    except ValueError as err:
        print(f"error: {err}", file=sys.stderr)
        return 2
    if args.format == "rules":
        doc = rules_file(settings)
    else:
        doc = prometheus_rule(settings, name="metal3-ipam-alerts", namespace=args.namespace)
    sys.stdout.write(yaml.safe_dump(doc, sort_keys=False, width=120))
    return 0


def dump_json(doc: Any) -> str:
    return json.dumps(doc, indent=2) + "\n"


if __name__ == "__main__":
    sys.exit(main())
