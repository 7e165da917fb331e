"""The alert rules, checked and unit-tested by promtool (built by hack/build-binaries.sh) over series written
for each alert: it fires when it should, carries the pool's labels and a readable summary, and resolves.

The rules are the generated files of config/prometheus/ (defaults of ``observability.RuleSettings``), and
rules rendered with other parameters (thresholds, the opt-out selector)."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from paths import REPO
from metal3_ipam import observability
from metal3_ipam.testing.prometheus import Prometheus, PrometheusUnavailable, promtool

ROOT = REPO
RULES = ROOT / "config" / "prometheus" / "metal3-ipam.rules.yaml"
PROMETHEUS_RULE = ROOT / "config" / "prometheus" / "prometheusrule.yaml"

LEADER = 'metal3_ipam_leader{instance="leader:8081", job="metal3-ipam"}'
STANDBY = 'metal3_ipam_leader{instance="standby:8081", job="metal3-ipam"}'
POOL = {"namespace": "site-a", "pool": "provisioning", "kind": "IPPool"}


def _labels(**labels: str) -> str:
    return "{" + ", ".join(f'{k}="{v}"' for k, v in labels.items()) + "}"


def _pool_series(metric: str, instance: str = "leader:8081", **extra: str) -> str:
    return metric + _labels(**POOL, **extra, instance=instance, job="metal3-ipam")


def _run(tmp_path: Path, rule_file: Path, tests: list[dict]) -> None:
    path = tmp_path / "tests.yaml"
    path.write_text(yaml.safe_dump({"rule_files": [str(rule_file)], "evaluation_interval": "1m",
                                    "tests": tests}, sort_keys=False))
    try:
        done = promtool("test", "rules", str(path))
    except PrometheusUnavailable as err:
        pytest.fail(str(err), pytrace=False)
    assert done.returncode == 0, done.stdout + done.stderr


def _pool_alert(name: str, severity: str, summary: str, **extra: str) -> dict:
    return {"exp_labels": {**POOL, **extra, "severity": severity}, "exp_annotations": {
        "summary": summary, "description": _description(name)}}


_DESCRIPTIONS = {rule["alert"]: rule["annotations"]["description"]
                 for group in observability.rule_groups() for rule in group["rules"]}


def _description(name: str) -> str:
    return _DESCRIPTIONS[name]


def _alerts(name: str, at: str, *expected: dict) -> dict:
    return {"eval_time": at, "alertname": name, "exp_alerts": list(expected)}


def _descriptions_rendered(alert: dict, **values: str) -> dict:
    text = alert["exp_annotations"]["description"]
    for key, value in values.items():
        text = text.replace("{{ $labels.%s }}" % key, value)
    alert["exp_annotations"]["description"] = text
    return alert


def test_the_rule_files_pass_promtool_check(tmp_path):
    spec = yaml.safe_load_all(PROMETHEUS_RULE.read_text())
    operator = tmp_path / "from-prometheusrule.yaml"
    operator.write_text(yaml.safe_dump({"groups": next(d for d in spec if d)["spec"]["groups"]}))
    for path in (RULES, operator):
        try:
            done = promtool("check", "rules", str(path))
        except PrometheusUnavailable as err:
            pytest.fail(str(err), pytrace=False)
        assert done.returncode == 0, done.stdout + done.stderr
        assert "SUCCESS: 10 rules found" in done.stdout


def test_the_prometheusrule_holds_the_rules_file():
    operator = next(d for d in yaml.safe_load_all(PROMETHEUS_RULE.read_text()) if d)
    plain = next(d for d in yaml.safe_load_all(RULES.read_text()) if d)
    assert operator["kind"] == "PrometheusRule" and operator["spec"]["groups"] == plain["groups"]


def test_every_alert_is_tested_here():
    tested = {case["alertname"] for test in _default_tests() for case in test["alert_rule_test"]}
    assert tested == set(observability.DEFAULT_FOR)


def test_pool_usage_warns_then_pages_then_resolves(tmp_path):
    _run(tmp_path, RULES, [_test_usage()])


def test_pool_exhausted_while_claims_wait_fires_and_resolves(tmp_path):
    _run(tmp_path, RULES, [_test_exhausted()])


def test_claims_not_ready_fire_by_reason_and_resolve(tmp_path):
    _run(tmp_path, RULES, [_test_claims_not_ready()])


def test_external_ipam_unreachable_fires_and_resolves(tmp_path):
    _run(tmp_path, RULES, [_test_external()])


def test_controller_without_leader_down_or_not_ready_fires_and_resolves(tmp_path):
    _run(tmp_path, RULES, [_test_leader(), _test_down(), _test_not_ready()])


def test_webhook_failures_and_refused_writes_fire_and_resolve(tmp_path):
    _run(tmp_path, RULES, [_test_webhook(), _test_writes()])


def test_thresholds_and_opt_out_selector_are_parameters(tmp_path):
    settings = observability.RuleSettings(usage_warning=0.5, usage_critical=0.9,
                                          pool_selector='pool!~"scratch-.*"')
    path = tmp_path / "rules.yaml"
    path.write_text(yaml.safe_dump(observability.rules_file(settings)))
    scratch = dict(POOL, pool="scratch-1")
    series = [{"series": LEADER, "values": "1x60"}]
    for labels in (POOL, scratch):
        tail = _labels(**labels, instance="leader:8081", job="metal3-ipam")
        series += [{"series": "metal3_ipam_pool_capacity" + tail, "values": "100x60"},
                   {"series": "metal3_ipam_pool_free" + tail, "values": "40x60"}]
    summary = "IP pool site-a/provisioning (IPPool) is 60% used"
    expected = {"exp_labels": {**POOL, "severity": "warning"},
                "exp_annotations": {"summary": summary, "description": _description("Metal3IPAMPoolUsageHigh")}}
    _run(tmp_path, path, [{"interval": "1m", "input_series": series, "alert_rule_test": [
        _alerts("Metal3IPAMPoolUsageHigh", "30m", expected)]}])


def test_the_command_renders_rules_with_other_parameters(capsys):
    assert observability.main(["rules", "--usage-warning", "0.7", "--for", "*=30s", "--format", "prometheusrule",
                               "--pool-selector", 'namespace!="lab"']) == 0
    rendered = yaml.safe_load(capsys.readouterr().out)
    rules = {r["alert"]: r for g in rendered["spec"]["groups"] for r in g["rules"]}
    assert rules["Metal3IPAMPoolUsageHigh"]["for"] == "30s"
    assert ">= 0.7 < 0.95" in rules["Metal3IPAMPoolUsageHigh"]["expr"]
    assert 'metal3_ipam_pool_free{namespace!="lab"}' in rules["Metal3IPAMPoolUsageHigh"]["expr"]


def test_the_command_refuses_thresholds_out_of_order(capsys):
    assert observability.main(["rules", "--usage-warning", "0.9", "--usage-critical", "0.8"]) == 2
    assert "0 < warning < critical <= 1" in capsys.readouterr().err


# -- the series of each alert -----------------------------------------------------------------------

def _default_tests() -> list[dict]:
    return [_test_usage(), _test_exhausted(), _test_claims_not_ready(), _test_external(), _test_leader(),
            _test_down(), _test_not_ready(), _test_webhook(), _test_writes()]


def _test_usage() -> dict:
    # free of 100: 50 until 10m, 15 until 41m, 3 until 72m, then 50 again. A standby's stale series says 0 free.
    series = [{"series": LEADER, "values": "1x110"}, {"series": STANDBY, "values": "0x110"},
              {"series": _pool_series("metal3_ipam_pool_capacity"), "values": "100x110"},
              {"series": _pool_series("metal3_ipam_pool_free"), "values": "50x10 15x30 3x30 50x30"},
              {"series": _pool_series("metal3_ipam_pool_capacity", "standby:8081"), "values": "100x110"},
              {"series": _pool_series("metal3_ipam_pool_free", "standby:8081"), "values": "0x110"}]
    high = _pool_alert("Metal3IPAMPoolUsageHigh", "warning", "IP pool site-a/provisioning (IPPool) is 85% used")
    critical = _pool_alert("Metal3IPAMPoolUsageCritical", "critical", "IP pool site-a/provisioning (IPPool) is 97% used")
    return {"interval": "1m", "input_series": series, "alert_rule_test": [
        _alerts("Metal3IPAMPoolUsageHigh", "9m"), _alerts("Metal3IPAMPoolUsageCritical", "9m"),
        _alerts("Metal3IPAMPoolUsageHigh", "35m", high), _alerts("Metal3IPAMPoolUsageCritical", "35m"),
        _alerts("Metal3IPAMPoolUsageHigh", "60m"), _alerts("Metal3IPAMPoolUsageCritical", "60m", critical),
        _alerts("Metal3IPAMPoolUsageHigh", "95m"), _alerts("Metal3IPAMPoolUsageCritical", "95m")]}


def _test_exhausted() -> dict:
    waiting = _pool_series("metal3_ipam_claims_not_ready", reason="PoolExhausted")
    series = [{"series": LEADER, "values": "1x60"}, {"series": STANDBY, "values": "0x60"},
              {"series": _pool_series("metal3_ipam_pool_capacity"), "values": "4x60"},
              {"series": _pool_series("metal3_ipam_pool_free"), "values": "2x5 0x20 1x30"},
              {"series": waiting, "values": "_x5 2x20 stale"},
              # the standby's stale view: empty and claims waiting all along
              {"series": _pool_series("metal3_ipam_pool_free", "standby:8081"), "values": "0x60"},
              {"series": _pool_series("metal3_ipam_claims_not_ready", "standby:8081", reason="PoolExhausted"),
               "values": "5x60"}]
    fired = _pool_alert("Metal3IPAMPoolExhausted", "critical", "IP pool site-a/provisioning (IPPool) has no free address and 2 claims are waiting")
    return {"interval": "1m", "input_series": series, "alert_rule_test": [
        _alerts("Metal3IPAMPoolExhausted", "4m"), _alerts("Metal3IPAMPoolExhausted", "15m", fired),
        _alerts("Metal3IPAMPoolExhausted", "40m")]}


def _test_claims_not_ready() -> dict:
    oldest = _pool_series("metal3_ipam_claims_not_ready_oldest_seconds", reason="WaitingForCluster")
    series = [{"series": LEADER, "values": "1x40"}, {"series": oldest, "values": "0+60x20 stale"}]
    fired = _descriptions_rendered(_pool_alert(
        "Metal3IPAMClaimsNotReady", "warning", "Claims of IP pool site-a/provisioning (IPPool) have not been Ready for 18m 0s (WaitingForCluster)",
        reason="WaitingForCluster"), reason="WaitingForCluster")
    return {"interval": "1m", "input_series": series, "alert_rule_test": [
        _alerts("Metal3IPAMClaimsNotReady", "14m"), _alerts("Metal3IPAMClaimsNotReady", "18m", fired),
        _alerts("Metal3IPAMClaimsNotReady", "30m")]}


def _test_external() -> dict:
    netbox = {"namespace": "site-a", "pool": "from-netbox", "kind": "NetBoxIPPool"}
    up = "metal3_ipam_external_ipam_up" + _labels(**netbox, instance="leader:8081", job="metal3-ipam")
    series = [{"series": LEADER, "values": "1x30"}, {"series": up, "values": "1x5 0x10 1x15"}]
    summary = "The IPAM server of pool site-a/from-netbox (NetBoxIPPool) does not answer"
    fired = {"exp_labels": {**netbox, "severity": "critical"},
             "exp_annotations": {"summary": summary, "description": _description("Metal3IPAMExternalIPAMUnreachable")}}
    return {"interval": "1m", "input_series": series, "alert_rule_test": [
        _alerts("Metal3IPAMExternalIPAMUnreachable", "8m"),
        _alerts("Metal3IPAMExternalIPAMUnreachable", "14m", fired),
        _alerts("Metal3IPAMExternalIPAMUnreachable", "22m")]}


def _controller_alert(name: str, severity: str, summary: str, **labels: str) -> dict:
    return {"exp_labels": {**labels, "severity": severity},
            "exp_annotations": {"summary": summary, "description": _description(name)}}


def _test_leader() -> dict:
    series = [{"series": LEADER, "values": "1x5 0x10 1x15"}, {"series": STANDBY, "values": "0x30"}]
    fired = _controller_alert("Metal3IPAMNoLeader", "critical", "No replica of the metal3-ipam controller (metal3-ipam) leads",
                              job="metal3-ipam")
    return {"interval": "1m", "input_series": series, "alert_rule_test": [
        _alerts("Metal3IPAMNoLeader", "4m"), _alerts("Metal3IPAMNoLeader", "14m", fired),
        _alerts("Metal3IPAMNoLeader", "22m")]}


def _test_down() -> dict:
    series = [{"series": LEADER, "values": "1x5 stale _x15 1x15"}]
    fired = _controller_alert("Metal3IPAMControllerDown", "critical", "The metal3-ipam controller is not scraped")
    return {"interval": "1m", "input_series": series, "alert_rule_test": [
        _alerts("Metal3IPAMControllerDown", "4m"), _alerts("Metal3IPAMControllerDown", "15m", fired),
        _alerts("Metal3IPAMControllerDown", "30m")]}


def _test_not_ready() -> dict:
    ready = 'metal3_ipam_ready{instance="leader:8081", job="metal3-ipam"}'
    series = [{"series": LEADER, "values": "1x40"}, {"series": ready, "values": "1x5 0x15 1x20"}]
    fired = _controller_alert("Metal3IPAMControllerNotReady", "warning", "metal3-ipam controller leader:8081 is not ready",
                              instance="leader:8081", job="metal3-ipam")
    return {"interval": "1m", "input_series": series, "alert_rule_test": [
        _alerts("Metal3IPAMControllerNotReady", "12m"), _alerts("Metal3IPAMControllerNotReady", "18m", fired),
        _alerts("Metal3IPAMControllerNotReady", "28m")]}


def _test_webhook() -> dict:
    hook = "/validate-ipam-metal3-io-v1alpha1-ipclaim"
    ours = f'controller_runtime_webhook_requests_total{{code="503", instance="leader:8081", job="metal3-ipam", webhook="{hook}"}}'
    # Another controller-runtime manager scraped by the same Prometheus, failing too: not ours to alert on.
    theirs = ('controller_runtime_webhook_requests_total{code="503", instance="capi:8443", job="capi", '
              'webhook="/validate-cluster"}')
    series = [{"series": LEADER, "values": "1x40"}, {"series": ours, "values": "0x5 0+10x10 100x25"},
              {"series": theirs, "values": "0+10x40"}]
    fired = _controller_alert("Metal3IPAMWebhookFailing", "warning", f"The metal3-ipam webhook {hook} fails to answer reviews",
                              instance="leader:8081", job="metal3-ipam", webhook=hook)
    return {"interval": "1m", "input_series": series, "alert_rule_test": [
        _alerts("Metal3IPAMWebhookFailing", "4m"), _alerts("Metal3IPAMWebhookFailing", "14m", fired),
        _alerts("Metal3IPAMWebhookFailing", "35m")]}


def _test_writes() -> dict:
    refused = ('metal3_ipam_write_refusals_total{code="403", instance="leader:8081", job="metal3-ipam", '
               'kind="IPAddress", verb="create"}')
    series = [{"series": LEADER, "values": "1x40"}, {"series": refused, "values": "0x5 0+1x10 10x25"}]
    fired = _controller_alert("Metal3IPAMWritesRefused", "warning", "The API server refuses the controller's create of IPAddress (403)",
                              code="403", instance="leader:8081", job="metal3-ipam", kind="IPAddress", verb="create")
    return {"interval": "1m", "input_series": series, "alert_rule_test": [
        _alerts("Metal3IPAMWritesRefused", "4m"), _alerts("Metal3IPAMWritesRefused", "14m", fired),
        _alerts("Metal3IPAMWritesRefused", "35m")]}


def test_without_prometheus_built_nor_buildable_the_harness_fails_saying_how_to_build_it(monkeypatch, tmp_path):
    monkeypatch.setenv("METAL3_IPAM_BIN_DIR", str(tmp_path))
    monkeypatch.delenv("KUBEBUILDER_ASSETS", raising=False)
    monkeypatch.setenv("PATH", "/nonexistent")  # no bash, no go: nothing can be built
    with pytest.raises(PrometheusUnavailable, match=r"promtool is unavailable: build it with `bash hack/build-binaries.sh`"):
        promtool("--version")
    with pytest.raises(PrometheusUnavailable, match="prometheus is unavailable: build it with"):
        Prometheus([]).start()


# -- orders of events the rules meet in the field ------------------------------------------------------------

REPLICA = 'metal3_ipam_leader{instance="replica:8081", job="metal3-ipam"}'


def test_pool_exhausted_counts_each_waiting_claim_once_when_every_replica_writes(tmp_path):
    """Without leader election every replica says it may write (``metal3_ipam_leader`` 1) and exports the same
    per-pool series from the same objects. The alert's value is how many claims wait: 2, not 2 per replica."""
    series = [{"series": LEADER, "values": "1x20"}, {"series": REPLICA, "values": "1x20"}]
    for instance in ("leader:8081", "replica:8081"):
        series += [{"series": _pool_series("metal3_ipam_pool_capacity", instance), "values": "4x20"},
                   {"series": _pool_series("metal3_ipam_pool_free", instance), "values": "0x20"},
                   {"series": _pool_series("metal3_ipam_claims_not_ready", instance, reason="PoolExhausted"),
                    "values": "2x20"}]
    fired = _pool_alert("Metal3IPAMPoolExhausted", "critical",
                        "IP pool site-a/provisioning (IPPool) has no free address and 2 claims are waiting")
    _run(tmp_path, RULES, [{"interval": "1m", "input_series": series,
                            "alert_rule_test": [_alerts("Metal3IPAMPoolExhausted", "10m", fired)]}])


def test_a_full_pool_stays_alerted_across_a_rollout_of_the_controller(tmp_path):
    """The leader's pod is replaced (a rolling update, one replica): its series end at 30m; the new pod is first
    scraped at 31m standing by (leader 0), takes the Lease and exports the pool's series from 32m. The pool was
    98% used all along: the page that fired before the rollout is still firing at 34m."""
    new = 'metal3_ipam_leader{instance="new:8081", job="metal3-ipam"}'
    series = [{"series": LEADER, "values": "1x30 stale"}, {"series": new, "values": "_x31 0 1x20"},
              {"series": _pool_series("metal3_ipam_pool_capacity"), "values": "100x30 stale"},
              {"series": _pool_series("metal3_ipam_pool_free"), "values": "2x30 stale"},
              {"series": _pool_series("metal3_ipam_pool_capacity", "new:8081"), "values": "_x32 100x20"},
              {"series": _pool_series("metal3_ipam_pool_free", "new:8081"), "values": "_x32 2x20"}]
    critical = _pool_alert("Metal3IPAMPoolUsageCritical", "critical",
                           "IP pool site-a/provisioning (IPPool) is 98% used")
    _run(tmp_path, RULES, [{"interval": "1m", "input_series": series, "alert_rule_test": [
        _alerts("Metal3IPAMPoolUsageCritical", "20m", critical),
        _alerts("Metal3IPAMPoolUsageCritical", "34m", critical)]}])


@pytest.mark.parametrize("argv, words", [
    (["--for", "Metal3IPAMPoolUsageHigh=15 minutes"], "15 minutes"),
    (["--rate-window", "5min"], "5min"),
])
def test_the_command_refuses_a_duration_prometheus_cannot_read(capsys, argv, words):
    assert observability.main(["rules", *argv]) == 2
    assert words in capsys.readouterr().err
