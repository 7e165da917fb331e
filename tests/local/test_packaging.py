"""config/ and the clusterctl release: generated parts current, the rendered tree consistent and hardened."""

from __future__ import annotations

import dataclasses
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from metal3_ipam import crds, goflags, packaging
from metal3_ipam.cli import _parser, run_options
from metal3_ipam.controller import certificates, permissions, webhook
from metal3_ipam.core import kinds, poolkind
from metal3_ipam.poolkinds.netbox import pool as netbox_pool
from metal3_ipam.poolkinds.openstack import capo
from metal3_ipam.poolkinds.openstack import pool as openstack_pool
from metal3_ipam.testing import controlplane

ROOT = Path(__file__).resolve().parents[2]
NAMESPACE = "metal3-ipam-system"
VERBS = {"get", "list", "watch", "create", "update", "patch", "delete", "deletecollection"}


@pytest.fixture(scope="module", autouse=True)
def kustomize() -> Path:
    """config/ is rendered by kustomize, built by hack/build-binaries.sh when missing (never skipped)."""
    try:
        return controlplane.ensure_binaries(("kustomize",), root=ROOT)["kustomize"]
    except controlplane.BinariesUnavailable as exc:
        reason = str(exc)
    pytest.fail(f"kustomize unavailable:\n{reason}", pytrace=False)


@pytest.fixture(scope="module")
def rendered() -> list[dict]:
    return packaging.render(ROOT / "config" / "default")


def one(objects: list[dict], kind: str, name_ends: str = "") -> dict:
    found = [o for o in objects if o["kind"] == kind and o["metadata"]["name"].endswith(name_ends)]
    assert len(found) == 1, [o["metadata"]["name"] for o in found]
    return found[0]


def named(objects: list[dict], kind: str, name: str) -> dict:
    found = [o for o in objects if o["kind"] == kind and o["metadata"]["name"] == name]
    assert found, f"no {kind} {name}"
    return found[0]


# -- generated files ---------------------------------------------------------------------

def test_generated_files_are_current():
    assert packaging.stale_files(ROOT) == [], "run `python -m metal3_ipam.packaging`"
    assert crds.stale_files(ROOT) == []


def test_the_command_line_check_finds_the_generated_files_current():
    """``python -m metal3_ipam.packaging --check`` in a process of its own renders the webhooks and roles of every
    kind of pool, as the committed files have them."""
    run = subprocess.run([sys.executable, "-m", "metal3_ipam.packaging", "--check"], cwd=ROOT, capture_output=True,
                         text=True, env={**os.environ, "PYTHONPATH": str(ROOT)})
    assert run.returncode == 0, run.stdout[-2000:] + run.stderr[-2000:]


def test_check_reports_a_stale_file(tmp_path, capsys):
    packaging.write_files(tmp_path)
    assert packaging.main(["--check", "--root", str(tmp_path)]) == 0
    (tmp_path / "config/rbac/role.yaml").write_text("edited\n")
    assert packaging.main(["--check", "--root", str(tmp_path)]) == 1
    assert "config/rbac/role.yaml" in capsys.readouterr().err


def test_check_reports_a_stale_chart_template(tmp_path, capsys):
    """The chart's CRDs, roles and webhooks are generated with config/'s: an edit of one is found."""
    packaging.write_files(tmp_path)
    edited = tmp_path / packaging.CHART_DIR / "templates" / "crds" / "ipam.metal3.io_ippools.yaml"
    edited.write_text(edited.read_text().replace("maxItems", "maxitems"))
    assert packaging.main(["--check", "--root", str(tmp_path)]) == 1
    assert "charts/metal3-ipam/templates/crds/ipam.metal3.io_ippools.yaml" in capsys.readouterr().err


def test_the_charts_crds_are_config_crd_with_the_releases_names():
    """Each CRD template is config/crd's CRD: its spec but for the conversion webhook's client configuration."""
    for crd in crds.crd_definitions():
        text = (ROOT / packaging.CHART_DIR / "templates" / "crds" /
                f"{crd['spec']['group']}_{crd['spec']['names']['plural']}.yaml").read_text()
        body = "\n".join(line for line in text.splitlines() if "{{" not in line)
        (chart_crd,) = [d for d in yaml.safe_load_all(body) if d]
        conversion = crd["spec"].pop("conversion", None)
        converted = chart_crd["spec"].pop("conversion", None)
        assert chart_crd["spec"] == crd["spec"]
        assert (conversion is None) == (converted is None)
        assert chart_crd["metadata"]["labels"] == crd["metadata"]["labels"]


def test_the_rules_file_of_config_prometheus_is_copied_into_the_chart(tmp_path):
    """The generated plain rules file of config/prometheus is the chart's, as written in the same run; a second
    plain rules file there is refused (which of the two the chart should carry cannot be told)."""
    packaging.write_files(tmp_path)
    folder = tmp_path / packaging.PROMETHEUS_DIR
    generated = yaml.safe_load((folder / "metal3-ipam.rules.yaml").read_text())
    assert generated["groups"] and yaml.safe_load((tmp_path / packaging.CHART_RULES_FILE).read_text()) == generated
    assert packaging.stale_files(tmp_path) == []
    # Rules generated in the same run are copied as they will be written, not as the disk has them yet.
    written = {packaging.PROMETHEUS_DIR / "metal3-ipam.rules.yaml": "groups:\n- name: fresh\n  rules: []\n"}
    assert yaml.safe_load(packaging.chart_files(tmp_path, written)[packaging.CHART_RULES_FILE]) == \
        {"groups": [{"name": "fresh", "rules": []}]}
    (folder / "more.yaml").write_text("groups: []\n")
    with pytest.raises(packaging.PackagingError, match="more than one rules file"):
        packaging.stale_files(tmp_path)


# -- least privilege ----------------------------------------------------------------------

def test_roles_hold_no_wildcard_and_only_known_verbs():
    for role in (permissions.cluster_role(), permissions.leader_election_role()):
        for rule in role["rules"]:
            for key in ("apiGroups", "resources", "verbs"):
                assert "*" not in rule[key] and all("*" not in v for v in rule[key]), rule
            assert set(rule["verbs"]) <= VERBS, rule
            assert "resourceNames" not in rule and "nonResourceURLs" not in rule


def test_the_cluster_role_is_the_table():
    granted = {(group, resource, verb) for rule in permissions.cluster_role()["rules"]
               for group in rule["apiGroups"] for resource in rule["resources"] for verb in rule["verbs"]}
    assert granted == permissions.granted(permissions.cluster_rules())
    # Nothing outside the kinds the controller serves, Events, the Secrets of NetBox tokens and clouds.yaml,
    # and reading the CAPO pool an OpenStackFloatingIPPool adopts from.
    groups = {g for g, _, _ in granted}
    assert groups == {kinds.METAL3_GROUP, kinds.CAPI_IPAM_GROUP, kinds.CLUSTER_GROUP, netbox_pool.GROUP,
                      openstack_pool.GROUP, capo.GROUP, ""}
    assert {(g, r, v) for g, r, v in granted if g == capo.GROUP} == {(capo.GROUP, capo.PLURAL, "get")}
    # Patching Secrets: the finalizer of the Secret of an OpenStackFloatingIPPool whose claims left floating IPs.
    assert {(g, r, v) for g, r, v in granted if g == ""} == {("", "events", "create"), ("", "secrets", "get"),
                                                             ("", "secrets", "patch")}
    assert not any(v == "delete" and r in ("ippools", "ipclaims", "ipaddressclaims") for _, r, v in granted)
    for rule in permissions.cluster_rules() + permissions.LEADER_ELECTION_RULES:
        assert rule.why, rule


def test_the_role_grants_what_each_kinds_outside_ipam_needs_once(monkeypatch):
    """A kind's ``Outside.role_rules`` join the role; a rule two kinds need is one rule."""
    netbox = poolkind.REGISTRY[netbox_pool.NETBOX_IP_POOL]
    extra = poolkind.Rule("", "configmaps", ("get",), "a test kind's settings")
    twin = dataclasses.replace(netbox, kind=("ipam.example.com", "TwinPool"), plural="twinpools",
                               outside=dataclasses.replace(netbox.outside,
                                                           role_rules=(*netbox.outside.role_rules, extra)))
    monkeypatch.setitem(poolkind.REGISTRY, twin.kind, twin)
    rules = permissions.cluster_rules()
    assert extra in rules
    assert [(r.group, r.resource, r.verbs) for r in rules].count(("", "secrets", ("get",))) == 1
    assert {"apiGroups": [""], "resources": ["configmaps", "secrets"], "verbs": ["get"]} in \
        permissions.cluster_role()["rules"]


def test_rbac_objects_bind_the_roles_to_the_service_account(rendered):
    account = one(rendered, "ServiceAccount")
    assert account["metadata"]["namespace"] == NAMESPACE
    binding = one(rendered, "ClusterRoleBinding", "manager-rolebinding")
    assert binding["roleRef"]["name"] == one(rendered, "ClusterRole", "manager-role")["metadata"]["name"]
    diagnostics = one(rendered, "ClusterRoleBinding", "diagnostics-rolebinding")
    assert diagnostics["roleRef"]["name"] == one(rendered, "ClusterRole", "diagnostics-role")["metadata"]["name"]
    assert one(rendered, "ClusterRole", "metrics-reader")["rules"] == [{"nonResourceURLs": ["/metrics"],
                                                                        "verbs": ["get"]}]
    role_binding = one(rendered, "RoleBinding")
    assert role_binding["roleRef"] == {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role",
                                       "name": one(rendered, "Role")["metadata"]["name"]}
    for b in (binding, diagnostics, role_binding):
        assert b["subjects"] == [{"kind": "ServiceAccount", "name": account["metadata"]["name"],
                                  "namespace": NAMESPACE}]
    assert one(rendered, "Role")["metadata"]["namespace"] == NAMESPACE


# -- the rendered tree ----------------------------------------------------------------------

def test_every_object_is_labelled_and_namespaced_objects_live_in_the_namespace(rendered):
    assert {o["kind"] for o in rendered} >= {"Namespace", "CustomResourceDefinition", "ServiceAccount",
                                             "ClusterRole", "ClusterRoleBinding", "Role", "RoleBinding",
                                             "Deployment", "Service", "Issuer", "Certificate",
                                             "ValidatingWebhookConfiguration", "MutatingWebhookConfiguration"}
    assert one(rendered, "Namespace")["metadata"]["name"] == NAMESPACE
    for obj in rendered:
        assert obj["metadata"]["labels"]["cluster.x-k8s.io/provider"] == "ipam-metal3", obj["metadata"]["name"]
        if obj["kind"] not in packaging.CLUSTER_SCOPED:
            assert obj["metadata"]["namespace"] == NAMESPACE, obj["metadata"]["name"]
        if obj["kind"] not in ("Namespace", "CustomResourceDefinition"):
            assert obj["metadata"]["name"].startswith("metal3-ipam-"), obj["metadata"]["name"]


def test_the_crds_are_the_generated_ones(rendered):
    mine = {o["metadata"]["name"]: o for o in rendered if o["kind"] == "CustomResourceDefinition"}
    service, certificate = one(rendered, "Service", "webhook-service"), one(rendered, "Certificate")
    converted = 0
    for crd in crds.crd_definitions():
        spec = crd["spec"]
        if "conversion" in spec:
            # The conversion webhook calls the rendered Service, with the serving certificate's CA.
            spec["conversion"]["webhook"]["clientConfig"]["service"].update(
                name=service["metadata"]["name"], namespace=NAMESPACE)
            assert mine[crd["metadata"]["name"]]["metadata"]["annotations"]["cert-manager.io/inject-ca-from"] == \
                f"{NAMESPACE}/{certificate['metadata']['name']}"
            converted += 1
        assert mine[crd["metadata"]["name"]]["spec"] == spec
    assert converted == 2


def test_the_webhooks_reach_the_service_and_carry_the_injected_ca(rendered):
    service = one(rendered, "Service", "webhook-service")
    certificate = one(rendered, "Certificate")
    deployment = one(rendered, "Deployment")
    issuer = one(rendered, "Issuer")
    assert certificate["spec"]["issuerRef"]["name"] == issuer["metadata"]["name"]
    host = f"{service['metadata']['name']}.{NAMESPACE}.svc"
    assert certificate["spec"]["dnsNames"] == [host, f"{host}.cluster.local"]
    volumes = {v["name"]: v for v in deployment["spec"]["template"]["spec"]["volumes"]}
    assert volumes["cert"]["secret"]["secretName"] == certificate["spec"]["secretName"]
    paths = {h.name: h.path for h in webhook.hooks()}
    for kind in ("ValidatingWebhookConfiguration", "MutatingWebhookConfiguration"):
        configuration = one(rendered, kind)
        assert configuration["metadata"]["annotations"]["cert-manager.io/inject-ca-from"] == \
            f"{NAMESPACE}/{certificate['metadata']['name']}"
        for hook in configuration["webhooks"]:
            assert hook["clientConfig"] == {"service": {"name": service["metadata"]["name"],
                                                        "namespace": NAMESPACE, "path": paths[hook["name"]]}}
    # The Service's selector picks the Deployment's pods, and its target port is the webhook's.
    pod_labels = deployment["spec"]["template"]["metadata"]["labels"]
    assert service["spec"]["selector"].items() <= pod_labels.items()
    assert deployment["spec"]["selector"]["matchLabels"].items() <= pod_labels.items()
    (container,) = deployment["spec"]["template"]["spec"]["containers"]
    ports = {p["name"]: p["containerPort"] for p in container["ports"]}
    assert service["spec"]["ports"][0]["targetPort"] == "webhook-server" and "webhook-server" in ports
    assert service["spec"]["ports"][0]["port"] == 443


def test_the_deployment_is_hardened_and_its_arguments_start_the_controller(rendered):
    deployment = one(rendered, "Deployment")
    pod = deployment["spec"]["template"]["spec"]
    assert pod["serviceAccountName"] == one(rendered, "ServiceAccount")["metadata"]["name"]
    assert pod["securityContext"]["runAsNonRoot"] is True
    assert pod["securityContext"]["seccompProfile"] == {"type": "RuntimeDefault"}
    (container,) = pod["containers"]
    assert container["name"] == "manager"
    security = container["securityContext"]
    assert security["readOnlyRootFilesystem"] is True and security["allowPrivilegeEscalation"] is False
    assert security["capabilities"] == {"drop": ["ALL"]} and security["runAsNonRoot"] is True
    assert security["runAsUser"] != 0
    for kind in ("requests", "limits"):
        assert set(container["resources"][kind]) == {"cpu", "memory"}
    ports = {p["name"]: p["containerPort"] for p in container["ports"]}
    assert container["livenessProbe"]["httpGet"] == {"path": "/healthz", "port": "healthz"}
    assert container["readinessProbe"]["httpGet"] == {"path": "/readyz", "port": "healthz"}

    assert container["command"] == ["metal3-ipam"] and container["args"][0] == "run"
    go, rest = goflags.read(container["args"][1:])
    args = _parser().parse_args(["run", *rest])
    options = run_options(args, go)
    assert options.health_port == ports["healthz"]
    assert options.webhook_port == ports["webhook-server"]
    assert options.diagnostics == ("0.0.0.0", ports["metrics"]) and not options.insecure_diagnostics
    mounts = {m["name"]: m["mountPath"] for m in container["volumeMounts"]}
    assert options.webhook_cert_dir == mounts["cert"] == certificates.DEFAULT_CERT_DIR
    assert options.leader_elect and args.all_namespaces and options.lease_name == "metal3-ipam-controller"
    env = {e["name"]: e for e in container["env"]}
    assert env["POD_NAMESPACE"]["valueFrom"]["fieldRef"]["fieldPath"] == "metadata.namespace"
    assert container["image"] == "localhost/metal3-ipam:v0.1.0"


def test_render_says_what_kustomize_refused(tmp_path):
    (tmp_path / "kustomization.yaml").write_text("resources:\n- missing.yaml\n")
    with pytest.raises(packaging.PackagingError, match=r"kustomize build .* failed: .*missing\.yaml"):
        packaging.render(tmp_path)


def test_without_kustomize_the_release_says_where_it_looked_and_how_to_get_one(tmp_path, monkeypatch, capsys):
    from metal3_ipam.cli import main

    monkeypatch.delenv("KUBEBUILDER_ASSETS", raising=False)
    monkeypatch.setenv("METAL3_IPAM_BIN_DIR", str(tmp_path / "bin"))
    monkeypatch.setenv("PATH", str(tmp_path / "empty"))
    assert main(["release", "--version", "v0.1.0", "-o", str(tmp_path / "out")]) == 1
    (line,) = capsys.readouterr().err.splitlines()
    assert line.startswith("metal3-ipam release: kustomize not found") and str(tmp_path / "bin") in line
    assert "on PATH" in line and "hack/build-binaries.sh" in line


# -- the clusterctl release -----------------------------------------------------------------

def test_components_carry_the_clusterctl_labels_and_variables():
    objects = packaging.components(ROOT, image="registry.example.com/ipam/metal3-ipam:v9.9.9")
    for obj in objects:
        labels = obj["metadata"]["labels"]
        assert labels[packaging.CLUSTERCTL_LABEL] == "" and labels["cluster.x-k8s.io/provider"] == "ipam-metal3"
    (container,) = one(objects, "Deployment")["spec"]["template"]["spec"]["containers"]
    assert container["image"] == "registry.example.com/ipam/metal3-ipam:v9.9.9"
    assert "--parallel-writes=${IPAM_METAL3_PARALLEL_WRITES:=16}" in container["args"]
    # The Go Metal3 IPAM's variables, with its defaults.
    assert "--diagnostics-address=${IPAM_DIAGNOSTICS_ADDRESS:=:8443}" in container["args"]
    assert "--insecure-diagnostics=${IPAM_INSECURE_DIAGNOSTICS:=false}" in container["args"]
    assert "--resync-seconds=${IPAM_METAL3_RESYNC_SECONDS:=300}" in container["args"]
    text = packaging.components_yaml(objects)
    assert set(re.findall(r"\$\{(\w+)", text)) == set(packaging.VARIABLES.values())


def test_release_lays_out_a_local_provider_repository(tmp_path, capsys):
    from metal3_ipam.cli import main

    assert main(["release", "--version", "v0.1.0", "-o", str(tmp_path)]) == 0
    folder = tmp_path / "ipam-metal3" / "v0.1.0"
    docs = [d for d in yaml.safe_load_all((folder / "ipam-components.yaml").read_text()) if d]
    assert len(docs) == len(packaging.render(ROOT / "config" / "default"))
    metadata = yaml.safe_load((folder / "metadata.yaml").read_text())
    assert metadata["kind"] == "Metadata" and {"major": 0, "minor": 1, "contract": "v1beta2"} in \
        metadata["releaseSeries"]
    out = capsys.readouterr().out
    assert "type: IPAMProvider" in out and str(folder / "ipam-components.yaml") in out


@pytest.mark.parametrize("version, words", [("0.1.0", "semantic version"), ("v7.3.0", "no releaseSeries for 7.3")])
def test_release_refuses_a_version_it_cannot_describe(tmp_path, capsys, version, words):
    from metal3_ipam.cli import main

    assert main(["release", "--version", version, "-o", str(tmp_path)]) == 1
    assert words in capsys.readouterr().err


def test_the_image_is_built_from_pinned_wheels_as_a_non_root_user():
    dockerfile = (ROOT / "Dockerfile").read_text()
    assert "--only-binary=:all:" in dockerfile and "-r /tmp/requirements.lock" in dockerfile
    stages = dockerfile.split("\nFROM ")
    final = stages[-1]
    assert "USER 65532" in final and "pip" not in final and "apt-get" not in dockerfile
    # The runtime environment is made without pip; the build's own pip and backend come from a lock too.
    assert "python3 -m venv --without-pip /opt/metal3-ipam" in dockerfile
    assert "--no-build-isolation" in dockerfile and "-r /tmp/requirements-build.lock" in dockerfile
    steps = [line for line in dockerfile.splitlines() if line.startswith(("RUN", " "))]
    assert not [line for line in steps if re.search(r"(^|[\s/])python(\s|$)", line)], "python3 in build steps"
    for lock in ("requirements.lock", "requirements-build.lock"):
        pins = [line for line in (ROOT / lock).read_text().splitlines() if line and not line.startswith("#")]
        assert pins and all(re.fullmatch(r"[A-Za-z0-9_.-]+==[0-9][0-9A-Za-z.]*", p) for p in pins), pins
        assert f"!{lock}" in (ROOT / ".dockerignore").read_text()
    pins = [line for line in (ROOT / "requirements.lock").read_text().splitlines()
            if line and not line.startswith("#")]
    import configparser

    setup = configparser.ConfigParser()
    setup.read(ROOT / "setup.cfg")
    required = {re.split(r"[<>=!~ ]", line.strip())[0].lower().replace("_", "-")
                for line in setup["options"]["install_requires"].splitlines() if line.strip()}
    pinned = {p.split("==")[0].lower().replace("_", "-") for p in pins}
    assert required <= pinned
