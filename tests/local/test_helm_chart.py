"""charts/metal3-ipam: lint-clean, the objects of config/default for the same settings, every flag a value.

``helm template`` with the chart's defaults is compared with ``kustomize build config/default`` object by
object. The differences allowed are the documented ones (docs/install.md, "Installing with Helm"):

- the labels Helm's conventions add (``app.kubernetes.io/*``, ``helm.sh/chart``);
- no Namespace object (``helm install --create-namespace``);
- ``helm.sh/resource-policy: keep`` on the CRDs (``crds.keep``);
- the webhooks' certificate: by default a Secret the chart makes, whose CA is every webhook's and converted
  CRD's ``caBundle``, where config/default has cert-manager's Issuer, Certificate and CA injection (the same
  as config/default with ``certManager.enabled``);
- the container's arguments are compared as the options ``metal3-ipam run`` takes from them (the chart
  spells out the leader election's durations).
"""

from __future__ import annotations

import base64
import copy
import datetime
import json
import ssl
from pathlib import Path

import pytest
import yaml
from cryptography import x509

from metal3_ipam import goflags, observability, packaging
from metal3_ipam.cli import _kind_flags, _parser, run_options
from metal3_ipam.controller import certificates
from metal3_ipam.testing import controlplane
from metal3_ipam.testing.helm import NAMESPACE, Helm, HelmError, chart_dir

ROOT = Path(__file__).resolve().parents[2]
CHART = chart_dir(ROOT)
HELM_LABELS = ("helm.sh/chart", "app.kubernetes.io/name", "app.kubernetes.io/instance", "app.kubernetes.io/version",
               "app.kubernetes.io/managed-by")
KEEP = "helm.sh/resource-policy"
INJECT = "cert-manager.io/inject-ca-from"
EVERYTHING = {"serviceMonitor": {"enabled": True}, "prometheusRule": {"enabled": True},
              "networkPolicy": {"enabled": True},
              "metrics": {"reader": {"enabled": True,
                                     "subjects": [{"kind": "ServiceAccount", "name": "prometheus",
                                                   "namespace": "monitoring"}]}}}


@pytest.fixture(scope="module")
def helm(tmp_path_factory) -> Helm:
    """helm, built by hack/build-binaries.sh when missing (never skipped)."""
    try:
        binary = controlplane.ensure_binaries(("helm",), root=ROOT)["helm"]
    except controlplane.BinariesUnavailable as exc:
        pytest.fail(f"helm unavailable:\n{exc}", pytrace=False)
    return Helm(binary, tmp_path_factory.mktemp("helm"))


@pytest.fixture(scope="module")
def kustomized() -> list[dict]:
    return packaging.render(ROOT / "config" / "default", controlplane.ensure_binaries(("kustomize",), root=ROOT)
                            ["kustomize"])


def key(obj: dict) -> tuple[str, str]:
    return obj["kind"], obj["metadata"]["name"]


def by_key(objects: list[dict]) -> dict[tuple[str, str], dict]:
    out = {key(o): o for o in objects}
    assert len(out) == len(objects), "two objects of one kind and name"
    return out


def one(objects: list[dict], kind: str) -> dict:
    (found,) = [o for o in objects if o["kind"] == kind]
    return found


def settings(container: dict):
    """The controller's options from the container's arguments, as ``metal3-ipam run`` takes them."""
    assert container["args"][0] == "run"
    go, rest = goflags.read(container["args"][1:])
    return run_options(_parser().parse_args(["run", *rest]), go)


def comparable(options) -> dict:
    """Options as a mapping that compares by value (their TLS settings too)."""
    return {**vars(options), "tls": vars(options.tls)}


def webhook_service(objects: list[dict]) -> dict:
    (found,) = [o for o in objects if o["kind"] == "Service" and o["metadata"]["name"].endswith("-webhook-service")]
    return found


def without_helm_additions(obj: dict) -> dict:
    """The object less what the chart adds by Helm's conventions, and with empty annotations dropped."""
    obj = copy.deepcopy(obj)
    meta = obj["metadata"]
    for label in HELM_LABELS:
        del meta["labels"][label]
    annotations = {k: v for k, v in (meta.pop("annotations", None) or {}).items() if k != KEEP}
    if annotations:
        meta["annotations"] = annotations
    return obj


def ca_bundles(objects: list[dict]) -> list[str]:
    """Every caBundle of the webhooks and the conversion webhooks, removed from ``objects``."""
    found = []
    for obj in objects:
        configs = [h["clientConfig"] for h in obj.get("webhooks") or []]
        conversion = ((obj.get("spec") or {}).get("conversion") or {}).get("webhook")
        if obj["kind"] == "CustomResourceDefinition" and conversion:
            configs.append(conversion["clientConfig"])
        for config in configs:
            found.append(config.pop("caBundle"))
    return found


def compared(chart: list[dict], kustomize: list[dict], cert_manager: bool) -> None:
    chart = [without_helm_additions(o) for o in chart]
    kustomize = [copy.deepcopy(o) for o in kustomize if o["kind"] != "Namespace"]
    if not cert_manager:
        secret = by_key(chart).pop(("Secret", "webhook-server-cert"))
        chart.remove(secret)
        assert set(ca_bundles(chart)) == {secret["data"]["ca.crt"]}
        issued = [o for o in kustomize if o["kind"] in ("Issuer", "Certificate")]
        assert [o["spec"]["secretName"] for o in issued if o["kind"] == "Certificate"] == [secret["metadata"]["name"]]
        kustomize = [o for o in kustomize if o not in issued]
        for obj in kustomize:
            annotations = obj["metadata"].get("annotations") or {}
            annotations.pop(INJECT, None)
            if not annotations:
                obj["metadata"].pop("annotations", None)
    mine, theirs = by_key(chart), by_key(kustomize)
    assert sorted(mine) == sorted(theirs)
    for name, obj in theirs.items():
        if obj["kind"] == "Deployment":
            (ours,), (their,) = (o["spec"]["template"]["spec"]["containers"] for o in (mine[name], obj))
            assert comparable(settings(ours)) == comparable(settings(their))
            ours["args"] = their["args"]
        assert mine[name] == obj, name


def test_the_chart_lints_clean_with_its_defaults_and_with_everything_on(helm):
    for values in (None, EVERYTHING, {"certManager": {"enabled": True}}):
        done = helm.run("lint", "--strict", str(CHART), values=values)
        assert "0 chart(s) failed" in done.stdout, done.stdout


def test_the_default_chart_gives_the_objects_of_config_default(helm, kustomized):
    compared(helm.template(CHART), kustomized, cert_manager=False)


def test_with_cert_manager_the_chart_gives_the_objects_of_config_default(helm, kustomized):
    compared(helm.template(CHART, {"certManager": {"enabled": True}}), kustomized, cert_manager=True)


def test_the_chart_makes_a_ca_and_a_serving_certificate_for_the_webhook_service(helm):
    objects = helm.template(CHART)
    secret = one(objects, "Secret")
    assert secret["type"] == "kubernetes.io/tls"
    assert set(secret["data"]) == {"ca.crt", "tls.crt", "tls.key"}
    ca = x509.load_pem_x509_certificate(base64.b64decode(secret["data"]["ca.crt"]))
    cert = x509.load_pem_x509_certificate(base64.b64decode(secret["data"]["tls.crt"]))
    cert.verify_directly_issued_by(ca)
    service = webhook_service(objects)["metadata"]["name"]
    host = f"{service}.{NAMESPACE}.svc"
    names = cert.extensions.get_extension_for_class(x509.SubjectAlternativeName).value
    assert names.get_values_for_type(x509.DNSName) == [host, f"{host}.cluster.local"]
    assert cert.not_valid_after_utc - datetime.datetime.now(datetime.timezone.utc) > datetime.timedelta(days=3000)
    # One CA in every client configuration (webhooks and conversion), also across separate template files.
    assert set(ca_bundles(objects)) == {secret["data"]["ca.crt"]}
    (deployment,) = [o for o in objects if o["kind"] == "Deployment"]
    volumes = {v["name"]: v for v in deployment["spec"]["template"]["spec"]["volumes"]}
    assert volumes["cert"]["secret"]["secretName"] == secret["metadata"]["name"]


def test_the_crds_are_kept_by_helm_uninstall_unless_told_otherwise(helm):
    for values, kept in ((None, True), ({"crds": {"keep": False}}, False)):
        for crd in (o for o in helm.template(CHART, values) if o["kind"] == "CustomResourceDefinition"):
            assert ((crd["metadata"].get("annotations") or {}).get(KEEP) == "keep") is kept
    assert not [o for o in helm.template(CHART, {"crds": {"enabled": False}}) if o["kind"] == "CustomResourceDefinition"]


def test_a_release_of_another_name_and_namespace_names_its_objects_after_itself(helm):
    objects = helm.template(CHART, None, "ipam", "infra")
    service = webhook_service(objects)
    assert service["metadata"] == {**service["metadata"], "name": "ipam-metal3-ipam-webhook-service",
                                   "namespace": "infra"}
    for obj in objects:
        for config in [h["clientConfig"] for h in obj.get("webhooks") or []] + \
                [((obj.get("spec") or {}).get("conversion") or {}).get("webhook", {}).get("clientConfig")]:
            if config:
                assert config["service"]["name"] == service["metadata"]["name"]
                assert config["service"]["namespace"] == "infra"
    for binding in (o for o in objects if o["kind"] in ("RoleBinding", "ClusterRoleBinding")):
        assert binding["subjects"] == [{"kind": "ServiceAccount", "name": "ipam-metal3-ipam-controller-manager",
                                        "namespace": "infra"}]


@pytest.mark.parametrize("values, words", [
    ({"replica": 3}, "additional properties 'replica' not allowed"),
    ({"replicas": "three"}, "/replicas': got string, want integer"),
    ({"leaderElection": {"leaseDuration": "15 seconds"}}, "/leaderElection/leaseDuration"),
    ({"webhook": {"port": 70000}}, "/webhook/port"),
    ({"kindFlags": {"netbox-ownr": "x"}}, "additional properties 'netbox-ownr' not allowed"),
    ({"diagnostics": {"port": 0}}, "/diagnostics/port"),
    ({"tls": {"minVersion": "TLS1.3"}}, "/tls/minVersion"),
    ({"logging": {"format": "xml"}}, "/logging/format"),
])
def test_a_wrong_value_is_refused_naming_it(helm, values, words):
    done = helm.run("template", "metal3-ipam", str(CHART), values=values, check=False)
    assert done.returncode != 0 and words in done.stderr, done.stderr


# -- every flag of `metal3-ipam run` is a value --------------------------------------------------------------

# A flag of `metal3-ipam run` (the dest of its parser, or a Go flag it reads) -> (values, the option of the
# controller they set, its value).
FLAG_VALUES = {
    "namespace": ({"namespaces": ["a", "b"]}, "namespaces", ["a", "b"]),
    "all_namespaces": ({"namespaces": []}, "namespaces", []),
    "watch-filter": ({"watchFilter": "cluster-a"}, "watch_filter", "cluster-a"),
    "kubeconfig": ({"kubeconfigSecret": "remote"}, "kubeconfig", "/etc/metal3-ipam/kubeconfig/kubeconfig"),
    "health_address": ({"healthPort": 9090}, "health_port", 9090),
    "leader-elect": ({"leaderElection": {"enabled": False}}, "leader_elect", False),
    "leader_elect_lease_name": ({"leaderElection": {"leaseName": "other"}}, "lease_name", "other"),
    "leader_election_namespace": ({"leaderElection": {"namespace": "elsewhere"}}, "lease_namespace", "elsewhere"),
    "lock_namespace": ({"lockNamespace": "locks"}, "lock_namespace", "locks"),
    "leader_elect_lease_duration": ({"leaderElection": {"leaseDuration": "30s"}}, "lease_timing.lease_duration",
                                    30.0),
    "leader_elect_renew_deadline": ({"leaderElection": {"renewDeadline": "12s"}}, "lease_timing.renew_deadline",
                                    12.0),
    "leader_elect_retry_period": ({"leaderElection": {"retryPeriod": "4s"}}, "lease_timing.retry_period", 4.0),
    "resync_seconds": ({"resyncSeconds": 60}, "resync_seconds", 60.0),
    "parallel_writes": ({"parallelWrites": 4}, "parallel_writes", 4),
    "kube-api-qps": ({"kubeApi": {"qps": 20}}, "kube_api_qps", 20.0),
    "kube-api-burst": ({"kubeApi": {"burst": 30}}, "kube_api_burst", 30),
    "webhook-port": ({"webhook": {"port": 8444}}, "webhook_port", 8444),
    "webhook-cert-dir": ({}, "webhook_cert_dir", certificates.DEFAULT_CERT_DIR),
    "webhook-cert-name": ({}, "webhook_cert_name", "tls.crt"),
    "webhook-key-name": ({}, "webhook_key_name", "tls.key"),
    "diagnostics-address": ({"diagnostics": {"port": 9443}}, "diagnostics", ("0.0.0.0", 9443)),
    "insecure-diagnostics": ({"diagnostics": {"insecure": True}}, "insecure_diagnostics", True),
    "tls-min-version": ({"tls": {"minVersion": "VersionTLS13"}}, "tls.min_version", ssl.TLSVersion.TLSv1_3),
    "tls-cipher-suites": ({"tls": {"cipherSuites": ["TLS_ECDHE_RSA_WITH_AES_128_GCM_SHA256"]}}, "tls.ciphers",
                          "ECDHE-RSA-AES128-GCM-SHA256"),
    "logging-format": ({"logging": {"format": "json"}}, None, "--logging-format=json"),
    "verbose": ({"verbose": True}, None, "--verbose"),
}
# Other names of the flags above, which the chart does not spell out: `run`'s own name -> the Go one, or the
# other way round.
SAME_AS = {"no_leader_elect": "leader-elect", "health-addr": "health_address",
           "health-probe-bind-address": "health_address", "sync-period": "resync_seconds", "v": "verbose"}


def run_flags() -> set[str]:
    """The dests of `metal3-ipam run`'s parser and the Go flags it reads that have a meaning here."""
    (run,) = [p for name, p in _parser()._subparsers._group_actions[0].choices.items() if name == "run"]
    return {a.dest for a in run._actions if a.dest != "help"} | \
        {name for name, flag in goflags.FLAGS.items() if not flag.note}


def option(options, path: str):
    for name in path.split("."):
        options = getattr(options, name)
    return options


def deployment_of(helm: Helm, values: dict) -> tuple[dict, dict]:
    pod = one(helm.template(CHART, values), "Deployment")["spec"]["template"]["spec"]
    (container,) = pod["containers"]
    return pod, container


def test_every_flag_of_run_is_a_value(helm):
    kind_flags = {f.name.replace("-", "_"): f for f in _kind_flags()}
    assert set(SAME_AS.values()) <= set(FLAG_VALUES)
    assert run_flags() == set(FLAG_VALUES) | set(SAME_AS) | set(kind_flags), \
        "a flag of `metal3-ipam run` the chart does not set"
    for flag, (values, path, expected) in FLAG_VALUES.items():
        pod, container = deployment_of(helm, values)
        options = settings(container)
        if path is None:  # how the controller logs: the flag is given
            assert expected in container["args"], (flag, container["args"])
        else:
            assert option(options, path) == expected, (flag, container["args"])
        ports = {p["name"]: p["containerPort"] for p in container["ports"]}
        if flag == "health_address":
            assert ports["healthz"] == 9090
        if flag == "webhook-port":
            assert ports["webhook-server"] == 8444
        if flag == "diagnostics-address":
            assert ports["metrics"] == 9443
        if flag == "kubeconfig":
            mounts = {m["name"]: m["mountPath"] for m in container["volumeMounts"]}
            volumes = {v["name"]: v for v in pod["volumes"]}
            assert mounts["kubeconfig"] == "/etc/metal3-ipam/kubeconfig"
            assert volumes["kubeconfig"]["secret"]["secretName"] == "remote"
    given = {f.name: 7 if isinstance(f.default, (int, float)) else f"v-{f.name}" for f in kind_flags.values()}
    _, container = deployment_of(helm, {"kindFlags": given})
    for dest, flag in kind_flags.items():
        assert settings(container).kind_flags[flag.dest] == flag.parse(str(given[flag.name]))


def test_the_values_list_every_flag_of_the_kinds_of_pool_at_the_controllers_default():
    values = yaml.safe_load((CHART / "values.yaml").read_text())
    assert set(values["kindFlags"]) == {f.name for f in _kind_flags()}
    schema = json.loads((CHART / "values.schema.json").read_text())
    assert set(schema["properties"]["kindFlags"]["properties"]) == {f.name for f in _kind_flags()}
    assert set(values["kindFlags"].values()) == {None}
    text = (CHART / "values.yaml").read_text()
    for flag in _kind_flags():
        (line,) = [line for line in text.splitlines() if line.strip().startswith(f"{flag.name}:")]
        assert line.split("#")[1].strip() == f"{flag.default:g}" if isinstance(flag.default, float) else \
            line.split("#")[1].strip() == str(flag.default), line


def test_replicas_resources_and_extra_arguments_are_values(helm):
    deployment = one(helm.template(CHART, {"replicas": 3, "resources": {"limits": {"memory": "1Gi"}},
                                           "extraArgs": ["--namespace=x y"]}), "Deployment")
    (container,) = deployment["spec"]["template"]["spec"]["containers"]
    # Values merge into the defaults: the other quantities stay.
    assert deployment["spec"]["replicas"] == 3
    assert container["resources"] == {"limits": {"cpu": "1", "memory": "1Gi"},
                                      "requests": {"cpu": "100m", "memory": "128Mi"}}
    assert container["args"][-1] == "--namespace=x y"


# -- the optional objects -----------------------------------------------------------------------------------

def test_the_service_monitor_scrapes_the_metrics_port_of_the_controller(helm):
    objects = helm.template(CHART, EVERYTHING)
    monitor = one(objects, "ServiceMonitor")
    (metrics,) = [o for o in objects if o["kind"] == "Service" and o["metadata"]["name"].endswith("-metrics-service")]
    assert monitor["spec"]["selector"]["matchLabels"].items() <= metrics["metadata"]["labels"].items()
    (webhook_service,) = [o for o in objects if o["kind"] == "Service" and o is not metrics]
    assert not monitor["spec"]["selector"]["matchLabels"].items() <= webhook_service["metadata"]["labels"].items()
    (endpoint,) = monitor["spec"]["endpoints"]
    assert endpoint["port"] == metrics["spec"]["ports"][0]["name"] and endpoint["path"] == "/metrics"
    (theirs,) = yaml.safe_load((ROOT / "config" / "prometheus" / "monitor.yaml").read_text())["spec"]["endpoints"]
    assert theirs.items() <= endpoint.items()
    histograms = ("scrapeClassicHistograms", "convertClassicHistogramsToNHCB")
    config_monitor = yaml.safe_load((ROOT / "config" / "prometheus" / "monitor.yaml").read_text())["spec"]
    assert {k: monitor["spec"][k] for k in histograms} == {k: config_monitor[k] for k in histograms} == dict.fromkeys(
        histograms, True)
    pod = one(objects, "Deployment")["spec"]["template"]
    assert metrics["spec"]["selector"].items() <= pod["metadata"]["labels"].items()
    assert metrics["spec"]["ports"][0]["targetPort"] in {p["name"] for p in pod["spec"]["containers"][0]["ports"]}


def test_the_prometheus_rule_holds_the_groups_of_the_charts_rules_file(helm):
    rule = one(helm.template(CHART, EVERYTHING), "PrometheusRule")
    assert rule["spec"]["groups"] == yaml.safe_load((CHART / "files" / "prometheus-rules.yaml").read_text())["groups"]


def test_the_prometheus_rules_thresholds_opt_out_and_durations_are_values(helm):
    """The chart's alert rules with other thresholds, an opt-out selector and a for: are the rules
    ``observability.RuleSettings`` renders with the same parameters."""
    selector = 'namespace!="lab",pool!~"scratch-.*$"'
    values = {"prometheusRule": {"enabled": True, "usageWarning": 0.7, "usageCritical": 0.9,
                                 "poolSelector": selector, "for": {"Metal3IPAMPoolUsageHigh": "1h"}}}
    rule = one(helm.template(CHART, values), "PrometheusRule")
    durations = {**observability.DEFAULT_FOR, "Metal3IPAMPoolUsageHigh": "1h"}
    settings = observability.RuleSettings(usage_warning=0.7, usage_critical=0.9, pool_selector=selector,
                                          durations=durations)
    assert rule["spec"]["groups"] == observability.rule_groups(settings)


@pytest.mark.parametrize("values, words", [
    ({"usageWarning": 0.95, "usageCritical": 0.9}, "expected warning < critical"),
    ({"for": {"Metal3IPAMPoolUsageHigh": "15 minutes"}}, "Metal3IPAMPoolUsageHigh"),
    ({"for": {"Metal3IPAMPoolUsgeHigh": "1h"}}, "Metal3IPAMPoolUsgeHigh"),
])
def test_the_chart_refuses_alert_parameters_prometheus_could_not_use(helm, values, words):
    with pytest.raises(HelmError, match=words):
        helm.template(CHART, {"prometheusRule": {"enabled": True, **values}})


def test_the_network_policy_opens_the_webhook_and_metrics_ports_of_the_controllers_pods(helm):
    objects = helm.template(CHART, {"networkPolicy": {"enabled": True, "metricsFrom": [
        {"namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": "monitoring"}}}]}})
    policy, pod = one(objects, "NetworkPolicy"), one(objects, "Deployment")["spec"]["template"]
    assert policy["spec"]["podSelector"]["matchLabels"].items() <= pod["metadata"]["labels"].items()
    webhook_rule, metrics_rule = policy["spec"]["ingress"]
    assert [p["port"] for p in webhook_rule["ports"]] == ["webhook-server"] and "from" not in webhook_rule
    assert [p["port"] for p in metrics_rule["ports"]] == ["metrics"]
    assert metrics_rule["from"][0]["namespaceSelector"]["matchLabels"] == {"kubernetes.io/metadata.name": "monitoring"}
    assert policy["spec"]["policyTypes"] == ["Ingress"]


def test_the_metrics_readers_may_get_metrics_and_read_every_kind_the_controller_serves(helm):
    objects = helm.template(CHART, EVERYTHING)
    subjects = EVERYTHING["metrics"]["reader"]["subjects"]
    bound = {o["roleRef"]["name"] for o in objects if o["kind"] == "ClusterRoleBinding" and o["subjects"] == subjects}
    roles = [o for o in objects if o["kind"] == "ClusterRole" and o["metadata"]["name"] in bound]
    assert len(roles) == len(bound) == 2
    urls = {u for role in roles for rule in role["rules"] for u in rule.get("nonResourceURLs") or []}
    assert urls == {"/metrics"}
    readable = {(g, r) for role in roles for rule in role["rules"] for g in rule.get("apiGroups") or []
                for r in rule.get("resources") or []}
    for crd in (o for o in objects if o["kind"] == "CustomResourceDefinition"):
        assert (crd["spec"]["group"], crd["spec"]["names"]["plural"]) in readable, crd["metadata"]["name"]
    for rule in (rule for role in roles for rule in role["rules"]):
        assert set(rule["verbs"]) <= {"get", "list", "watch"}


def test_the_diagnostics_endpoint_may_review_the_scrapers_tokens(helm):
    objects = helm.template(CHART)
    account = one(objects, "ServiceAccount")["metadata"]["name"]
    bound = {o["roleRef"]["name"] for o in objects if o["kind"] == "ClusterRoleBinding"
             and {"kind": "ServiceAccount", "name": account, "namespace": NAMESPACE} in o["subjects"]}
    granted = {(g, r, v) for o in objects if o["kind"] == "ClusterRole" and o["metadata"]["name"] in bound
               for rule in o["rules"] for g in rule.get("apiGroups") or [] for r in rule.get("resources") or []
               for v in rule["verbs"]}
    assert {("authentication.k8s.io", "tokenreviews", "create"),
            ("authorization.k8s.io", "subjectaccessreviews", "create")} <= granted


def test_the_service_monitor_keeps_the_namespace_label_of_the_pool_series(helm):
    monitor = one(helm.template(CHART, EVERYTHING), "ServiceMonitor")
    assert [e.get("honorLabels") for e in monitor["spec"]["endpoints"]] == [True]


def test_a_lease_in_another_namespace_may_be_taken_by_the_controller(helm):
    objects = helm.template(CHART, {"leaderElection": {"namespace": "elsewhere"}})
    (container,) = one(objects, "Deployment")["spec"]["template"]["spec"]["containers"]
    assert settings(container).lease_namespace == "elsewhere"
    account = one(objects, "ServiceAccount")["metadata"]["name"]
    subject = {"kind": "ServiceAccount", "name": account, "namespace": NAMESPACE}
    roles = {(o["kind"], o["metadata"].get("namespace"), o["metadata"]["name"]): o for o in objects
             if o["kind"] in ("Role", "ClusterRole")}
    granted = set()
    for binding in (o for o in objects if o["kind"] in ("RoleBinding", "ClusterRoleBinding")
                    and subject in o["subjects"]):
        scope = binding["metadata"].get("namespace")  # None: every namespace
        ref = binding["roleRef"]
        role = roles.get((ref["kind"], scope if ref["kind"] == "Role" else None, ref["name"]))
        for rule in (role or {}).get("rules", []):
            if "coordination.k8s.io" in rule.get("apiGroups", []) and "leases" in rule.get("resources", []):
                granted |= {(scope, verb) for verb in rule["verbs"]}
    for verb in ("get", "create", "update"):
        assert ("elsewhere", verb) in granted or (None, verb) in granted, verb


def test_the_install_page_names_every_kind_flag_the_chart_takes():
    row = next(line for line in (ROOT / "docs" / "install.md").read_text().splitlines()
               if line.startswith("| `kindFlags`"))
    assert [f.name for f in _kind_flags() if f"`{f.name}`" not in row] == []
