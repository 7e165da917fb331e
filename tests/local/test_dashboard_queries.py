"""The dashboard's pool queries evaluated by promtool (built by hack/build-binaries.sh) over written series: what
their legends read for a pool of a namespace and for a pool of cluster scope."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
import yaml

from metal3_ipam import observability
from metal3_ipam.testing.prometheus import PrometheusUnavailable, promtool

LEADER = 'metal3_ipam_leader{instance="leader:8081", job="metal3-ipam"}'


def _at_all(expr: str) -> str:
    """A panel's query with every template variable at "All", as Grafana sends it."""
    return re.sub(r"\$\{?(job|namespace|kind|pool)\}?", ".*", expr.replace("$__rate_interval", "5m"))


def _series(metric: str, namespace: str, pool: str, kind: str, value: str) -> dict:
    labels = f'instance="leader:8081", job="metal3-ipam", kind="{kind}", namespace="{namespace}", pool="{pool}"'
    return {"series": f"{metric}{{{labels}}}", "values": value}


def test_a_pools_legend_names_it_with_its_namespace_and_a_global_pool_by_its_name_alone(tmp_path: Path):
    (title, query), = [(t, q) for t, q in observability.dashboard_queries() if t == "Free addresses per pool"]
    panel = next(p for p in observability.dashboard()["panels"] if p.get("title") == title)
    assert panel["targets"][0]["legendFormat"] == "{{pool_path}} ({{kind}})"
    series = [{"series": LEADER, "values": "1x10"},
              _series("metal3_ipam_pool_free", "site-a", "provisioning", "IPPool", "3x10"),
              _series("metal3_ipam_pool_free", "", "shared", "GlobalInClusterIPPool", "5x10")]
    expected = [{"labels": '{kind="IPPool", namespace="site-a", pool="provisioning", pool_path="site-a/provisioning"}',
                 "value": 3},
                {"labels": '{kind="GlobalInClusterIPPool", pool="shared", pool_path="shared"}', "value": 5}]
    rules = tmp_path / "none.yaml"
    rules.write_text("groups: []\n")
    tests = tmp_path / "tests.yaml"
    tests.write_text(yaml.safe_dump({"rule_files": [str(rules)], "evaluation_interval": "1m", "tests": [
        {"interval": "1m", "input_series": series,
         "promql_expr_test": [{"expr": _at_all(query), "eval_time": "5m", "exp_samples": expected}]}]}))
    try:
        done = promtool("test", "rules", str(tests))
    except PrometheusUnavailable as err:
        pytest.fail(str(err), pytrace=False)
    assert done.returncode == 0, done.stdout + done.stderr
