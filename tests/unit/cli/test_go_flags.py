"""``metal3-ipam run`` and ``/manager`` read the Go managers' command lines as Go's flag packages do."""

from __future__ import annotations

import ssl

import pytest
import yaml

from metal3_ipam import cli, goflags
from paths import TESTS
from metal3_ipam.controller.certificates import CERT_FILE, DEFAULT_CERT_DIR, KEY_FILE


# The Go providers' released components, rendered from their config/default.
GO_COMPONENTS = TESTS / "fixtures" / "go-components"


def options(*argv: str, as_manager: bool = False):
    go, rest = goflags.read(argv)
    args = cli._parser().parse_args(["run", *rest])
    return cli.run_options(args, go, as_manager)


@pytest.mark.parametrize("argv", [
    ["--leader-elect"], ["-leader-elect"], ["--leader-elect=true"], ["--leader-elect=1"], ["-leader-elect=T"],
    ["--leader-elect=True"],
])
def test_a_bare_or_true_boolean_turns_leader_election_on(argv):
    assert options(*argv).leader_elect


@pytest.mark.parametrize("argv", [[], ["--leader-elect=false"], ["-leader-elect=0"], ["--leader-elect=F"],
                                  ["--leader-elect", "--no-leader-elect"]])
def test_leader_election_is_off_unless_asked_for_as_in_go(argv):
    assert not options(*argv).leader_elect
    assert not options(*argv, as_manager=True).leader_elect


def test_a_bare_boolean_never_takes_the_next_word(capsys):
    with pytest.raises(SystemExit) as exit_:
        cli.main(["run", "--leader-elect", "false"])
    assert exit_.value.code == 2
    assert "unrecognized arguments: false" in capsys.readouterr().err


@pytest.mark.parametrize("argv", [
    ["--webhook-port=9444"], ["--webhook-port", "9444"], ["-webhook-port=9444"], ["-webhook-port", "9444"],
    ["--webhook-port=0x24e4"], ["--webhook-port=022344"],
])
def test_a_valued_flag_in_each_go_spelling(argv):
    assert options(*argv).webhook_port == 9444


def test_the_last_use_of_a_go_flag_counts():
    assert options("--webhook-port=1", "--webhook-port=2").webhook_port == 2


@pytest.mark.parametrize("argv, words", [
    (["--webhook-port=nine"], "invalid argument 'nine' for --webhook-port"),
    (["--insecure-diagnostics=maybe"], "invalid argument 'maybe' for --insecure-diagnostics"),
    (["--sync-period=10"], "invalid argument '10' for --sync-period"),
    (["--webhook-port"], "flag needs an argument: --webhook-port"),
    (["--kube-api-qps=fast"], "invalid argument 'fast' for --kube-api-qps"),
])
def test_a_go_flag_given_wrongly_is_a_usage_error_naming_it(capsys, argv, words):
    assert cli.main(["run", *argv]) == 2
    err = capsys.readouterr().err
    assert words in err and "Traceback" not in err


@pytest.mark.parametrize("text, seconds", [("10m", 600.0), ("1h30m", 5400.0), ("1.5s", 1.5), ("300ms", 0.3),
                                           ("0", 0.0), ("2h0m0s", 7200.0), ("100us", 1e-4)])
def test_durations_as_go_reads_them(text, seconds):
    assert goflags.parse_duration(text) == pytest.approx(seconds)


def test_sync_period_is_the_full_resync():
    assert options("--sync-period=15m").resync_seconds == 900.0
    assert options().resync_seconds == cli.DEFAULT_RESYNC_SECONDS
    assert options(as_manager=True).resync_seconds == 600.0  # Metal3's default


def test_namespace_flag_once_or_repeated_and_empty_means_all():
    assert options("--namespace=a").namespaces == ["a"]
    assert options("-namespace", "a", "-n", "b").namespaces == ["b", "a"]
    assert options("--namespace=").namespaces == []


def test_probe_addresses_follow_either_go_flag():
    run = options("--health-addr=:9440")
    assert (run.health_host, run.health_port, run.more_health) == ("0.0.0.0", 9440, [])
    run = options("--health-probe-bind-address", "127.0.0.1:8082")
    assert (run.health_host, run.health_port) == ("127.0.0.1", 8082)


def test_run_as_manager_without_probe_flags_serves_both_go_probe_ports():
    run = options(as_manager=True)
    assert [(run.health_host, run.health_port), *run.more_health] == [("0.0.0.0", 9440), ("0.0.0.0", 8081)]
    assert options().health_port == 8081 and options().more_health == []


def test_go_defaults_as_manager_and_this_projects_otherwise():
    run = options(as_manager=True)
    assert run.webhook_port == 9443 and run.diagnostics == ("0.0.0.0", 8443) and not run.insecure_diagnostics
    assert (run.kube_api_qps, run.kube_api_burst) == (20.0, 30)
    assert (run.webhook_cert_dir, run.webhook_cert_name, run.webhook_key_name) == (DEFAULT_CERT_DIR, CERT_FILE,
                                                                                  KEY_FILE)
    run = options()
    assert run.webhook_port == 0 and run.diagnostics is None and run.kube_api_qps == 0


def test_webhook_certificate_names_and_rate_limit_flags():
    run = options("--webhook-cert-dir=/certs", "--webhook-cert-name=a.pem", "--webhook-key-name", "b.pem",
                  "--kube-api-qps=5.5", "--kube-api-burst=7")
    assert (run.webhook_cert_dir, run.webhook_cert_name, run.webhook_key_name) == ("/certs", "a.pem", "b.pem")
    assert (run.kube_api_qps, run.kube_api_burst) == (5.5, 7)


def test_diagnostics_flags():
    run = options("--diagnostics-address=127.0.0.1:8444", "--insecure-diagnostics")
    assert run.diagnostics == ("127.0.0.1", 8444) and run.insecure_diagnostics
    assert options("--diagnostics-address=0", as_manager=True).diagnostics is None


def test_tls_options_are_checked_and_applied():
    run = options("--tls-min-version=VersionTLS13", "--tls-cipher-suites=TLS_AES_128_GCM_SHA256")
    assert run.tls.min_version == ssl.TLSVersion.TLSv1_3
    run = options("--tls-cipher-suites", "TLS_ECDHE_RSA_WITH_AES_128_GCM_SHA256,TLS_ECDHE_ECDSA_WITH_AES_128_GCM_SHA256",
                  "--tls-cipher-suites=TLS_RSA_WITH_AES_128_GCM_SHA256")
    assert run.tls.ciphers == "ECDHE-RSA-AES128-GCM-SHA256:ECDHE-ECDSA-AES128-GCM-SHA256:AES128-GCM-SHA256"
    context = run.tls.apply(ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER))
    assert {c["name"] for c in context.get_ciphers() if c["protocol"] == "TLSv1.2"} == {
        "ECDHE-RSA-AES128-GCM-SHA256", "ECDHE-ECDSA-AES128-GCM-SHA256", "AES128-GCM-SHA256"}


@pytest.mark.parametrize("argv, words", [
    (["--tls-min-version=TLS12"], "--tls-min-version 'TLS12': expected one of VersionTLS10"),
    (["--tls-cipher-suites=TLS_NOPE"], "unknown cipher suite(s) TLS_NOPE"),
    (["--logging-format=xml"], "--logging-format 'xml': expected text or json"),
    (["--health-addr=9440"], "invalid argument '9440' for --health-addr: expected [HOST]:PORT"),
])
def test_bad_manager_options_are_usage_errors(capsys, argv, words):
    assert cli.main(["run", "--kubeconfig", "/nonexistent", *argv]) == 2
    assert words in capsys.readouterr().err


def test_verbosity_in_go_spellings_and_the_bare_verbose_flag():
    for argv in (["-v", "4"], ["-v=4"], ["--v=4"], ["--v", "4"]):
        go, rest = goflags.read(argv)
        assert go.get("v") == 4 and rest == []
    go, rest = goflags.read(["-v", "--leader-elect"])
    assert "v" not in go and rest == ["-v"] and go.get("leader-elect") is True


def test_flags_with_no_meaning_here_are_accepted_and_named_once():
    go, rest = goflags.read(["--ippool-concurrency=20", "--vmodule=x=2", "--ippool-concurrency", "3",
                             "--logging-format=json", "-logtostderr"])
    assert rest == []
    ignored = go.ignored()
    assert [line.split()[0] for line in ignored] == ["--ippool-concurrency", "--vmodule", "--logtostderr"]


def test_lease_name_follows_whose_command_line_it_is():
    assert options("--leader-elect").lease_name == cli.DEFAULT_LEASE
    assert options("--leader-elect", as_manager=True).lease_name == "7bb7acb4.ipam.cluster.x-k8s.io"
    assert options("--leader-elect", "--health-addr=:9440", as_manager=True).lease_name == \
        "controller-leader-election-ipam-capm3"
    assert options("--leader-elect", "--leader-elect-lease-name=mine", as_manager=True).lease_name == "mine"


@pytest.mark.parametrize("component", ["metal3-ipam-components.yaml", "in-cluster-components.yaml"])
def test_each_go_deployment_command_line_runs_as_manager(component):
    text = (GO_COMPONENTS / component).read_text()
    text = text.replace("${IPAM_DIAGNOSTICS_ADDRESS:=:8443}", ":8443").replace(
        "${IPAM_INSECURE_DIAGNOSTICS:=false}", "false")
    [deployment] = [d for d in yaml.safe_load_all(text) if d and d["kind"] == "Deployment"]
    [container] = deployment["spec"]["template"]["spec"]["containers"]
    assert container["command"] == ["/manager"]
    run = options(*container.get("args", []), as_manager=True)
    ports = {p["name"]: p["containerPort"] for p in container["ports"]}
    assert run.webhook_port == 9443 in ports.values()
    probe_port = container["readinessProbe"]["httpGet"]["port"]
    probe_port = ports.get(probe_port, probe_port)
    assert probe_port in [run.health_port, *(port for _, port in run.more_health)]
    assert run.diagnostics == ("0.0.0.0", 8443) and not run.insecure_diagnostics
    assert run.leader_elect == ("--leader-elect" in container.get("args", []))
    if run.leader_elect:
        assert run.lease_name == "7bb7acb4.ipam.cluster.x-k8s.io"


def test_watch_filter_reaches_the_inventory_the_passes_read():
    from metal3_ipam.controller.runtime import Runtime

    assert Runtime(options("--watch-filter=shard-a")).inventory.watch_filter == "shard-a"
    assert Runtime(options()).inventory.watch_filter is None


def test_manager_is_run_with_the_go_defaults(capsys, monkeypatch):
    seen = {}
    monkeypatch.setattr(cli, "_run", lambda args, go, as_manager: seen.update(go=go, as_manager=as_manager) or 0)
    assert cli.manager(["--leader-elect"]) == 0
    assert seen["as_manager"] and seen["go"].get("leader-elect") is True
    assert cli.manager(["--webhook-port=port"]) == 2
    assert "invalid argument 'port' for --webhook-port" in capsys.readouterr().err
