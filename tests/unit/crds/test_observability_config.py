"""The kube-state-metrics configuration and the Grafana dashboard in config/: every path the configuration
reads exists in the generated CRD schemas, every kind of pool is covered with its counts and conditions, and
the dashboard is a Grafana JSON model whose panels all have queries."""

from __future__ import annotations

import json

import pytest
import yaml

from paths import REPO
from metal3_ipam import observability, packaging
from metal3_ipam.core.poolkind import REGISTRY
from metal3_ipam.crds import crd_definitions

ROOT = REPO
KSM = ROOT / "config" / "prometheus" / "kube-state-metrics.yaml"
DASHBOARD = ROOT / "config" / "grafana" / "metal3-ipam-pools.json"
# Every object has these (ObjectMeta); a CRD's schema leaves metadata to the API server.
OBJECT_META = {"name", "namespace", "uid", "creationTimestamp", "labels", "annotations", "generation"}


def _schemas() -> dict[tuple[str, str, str], dict]:
    return {(crd["spec"]["group"], version["name"], crd["spec"]["names"]["kind"]): version["schema"]["openAPIV3Schema"]
            for crd in crd_definitions() for version in crd["spec"]["versions"]}


def _exists(schema: dict, path: list[str]) -> bool:
    if path[0] == "metadata":
        return len(path) == 2 and path[1] in OBJECT_META
    for part in path:
        if part == "[]":
            if schema.get("type") != "array":
                return False
            schema = schema["items"]
        else:
            schema = (schema.get("properties") or {}).get(part)
            if schema is None:
                return False
    return True


def _config() -> dict:
    return next(d for d in yaml.safe_load_all(KSM.read_text()) if d)


def test_every_path_of_the_kube_state_metrics_configuration_exists_in_the_crds():
    schemas = _schemas()
    paths = observability.ksm_paths(_config())
    assert len(paths) > 30
    missing = [(gvk, path) for gvk, path in paths if gvk not in schemas or not _exists(schemas[gvk], path)]
    assert missing == []


def test_the_path_check_finds_a_path_that_is_not_there():
    schema = _schemas()[("ipam.metal3.io", "v1alpha1", "IPPool")]
    assert _exists(schema, ["status", "capacity"]) and _exists(schema, ["status", "conditions", "[]", "reason"])
    assert not _exists(schema, ["status", "size"]) and not _exists(schema, ["status", "conditions", "reason"])


def test_every_kind_of_pool_has_its_counts_and_ready_at_its_storage_version():
    resources = {(r["groupVersionKind"]["group"], r["groupVersionKind"]["kind"]): r for r in _config()["spec"]["resources"]}
    assert set(resources) == set(REGISTRY)
    versions = packaging.storage_versions()
    for kind, resource in resources.items():
        assert resource["groupVersionKind"]["version"] == versions[kind]
        names = {m["name"] for m in resource["metrics"]}
        # Every count the kind's status has (an OpenStack pool's status has no capacity: Neutron's network says it).
        assert {"info", "allocated", "status_condition", *REGISTRY[kind].status_counts} <= names, kind
        conditions = next(m for m in resource["metrics"] if m["name"] == "status_condition")["each"]["stateSet"]
        assert conditions["path"] == ["status", "conditions"] and conditions["labelsFromPath"]["type"] == ["type"]
        assert ("namespace" in resource["labelsFromPath"]) == (not REGISTRY[kind].cluster_scoped)


def test_the_dashboard_is_a_grafana_model_with_a_query_in_every_panel():
    board = json.loads(DASHBOARD.read_text())
    assert board["uid"] == "metal3-ipam-pools" and board["schemaVersion"] >= 36
    panels = [p for p in board["panels"] if p["type"] != "row"]
    assert len({p["id"] for p in board["panels"]}) == len(board["panels"])
    assert all(p["targets"] and all(t["expr"] and t["refId"] for t in p["targets"]) for p in panels)
    variables = {v["name"] for v in board["templating"]["list"]}
    assert {"datasource", "job", "namespace", "kind", "pool"} <= variables
    titles = " ".join(p["title"] for p in panels)
    for subject in ("Usage per pool", "nearest full", "Claims waiting, by reason", "Allocation latency",
                    "External IPAM"):
        assert subject in titles


@pytest.mark.parametrize("query", [q for _, q in observability.dashboard_queries()])
def test_every_pool_query_of_the_dashboard_reads_the_leaders_series_or_the_controllers(query):
    assert 'job=~"$job"' in query or 'namespace=~"$namespace"' in query


def test_the_service_monitor_keeps_the_namespace_label_of_the_pool_series():
    """docs/operations.md (Metrics, Scraping): the per-pool series carry a ``namespace`` label of their own; a
    ServiceMonitor must scrape with ``honorLabels: true`` or the alerts and the dashboard see the controller's
    namespace instead."""
    monitor = next(d for d in yaml.safe_load_all((ROOT / "config" / "prometheus" / "monitor.yaml").read_text()) if d)
    assert monitor["kind"] == "ServiceMonitor"
    assert [e.get("honorLabels") for e in monitor["spec"]["endpoints"]] == [True] * len(monitor["spec"]["endpoints"])


def test_the_service_monitor_keeps_the_classic_histograms_and_adds_native_ones():
    """docs/operations.md (Metrics): the controller serves classic histograms; the Cluster API dashboard's
    histogram panels select native ones, which Prometheus makes from them at the scrape when asked."""
    monitor = next(d for d in yaml.safe_load_all((ROOT / "config" / "prometheus" / "monitor.yaml").read_text()) if d)
    assert monitor["spec"]["scrapeClassicHistograms"] is True
    assert monitor["spec"]["convertClassicHistogramsToNHCB"] is True



@pytest.mark.parametrize("title, query", [
    pytest.param(title, query, id=f"{title}:{n}")
    for n, (title, query) in enumerate(observability.dashboard_queries())])
def test_every_query_of_the_dashboard_keeps_to_the_job_picked(title, query):
    """The ``job`` variable picks an installation; every panel shows that installation's series only (through
    ``job=~"$job"``, or a join on its replicas' ``metal3_ipam_leader{job=~"$job"}``)."""
    assert 'job=~"$job"' in query, title
