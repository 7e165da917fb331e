"""Reading credentials the way kubectl does, into one source every client of the controller uses.

What the server makes of them is tested against a real API server in
tests/e2e/controller/test_kubeconfigs.py; here: what is read, what is refused (with a
message naming the field), and when a token is read or a plugin run again.
"""

from __future__ import annotations

import base64
import datetime
import json
import os
import ssl
import stat
import sys
import time
from pathlib import Path

import pytest
import yaml

from metal3_ipam.controller import credentials as c
from metal3_ipam.controller.credentials import CredentialsError


# --------------------------------------------------------------------------- material


@pytest.fixture(scope="module")
def pki(tmp_path_factory):
    """A CA and a client certificate signed by it, as PEM files."""
    from cryptography import x509
    from cryptography.hazmat.primitives import hashes, serialization
    from cryptography.hazmat.primitives.asymmetric import ec
    from cryptography.x509.oid import NameOID

    d = tmp_path_factory.mktemp("pki")
    now = datetime.datetime.now(datetime.timezone.utc)

    def pem_key(key) -> bytes:
        return key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
                                 serialization.NoEncryption())

    ca_key = ec.generate_private_key(ec.SECP256R1())
    ca_name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "test-ca")])
    ca = (x509.CertificateBuilder().subject_name(ca_name).issuer_name(ca_name).public_key(ca_key.public_key())
          .serial_number(1).not_valid_before(now - datetime.timedelta(hours=1))
          .not_valid_after(now + datetime.timedelta(days=1))
          .add_extension(x509.BasicConstraints(ca=True, path_length=0), critical=True)
          .sign(ca_key, hashes.SHA256()))
    key = ec.generate_private_key(ec.SECP256R1())
    cert = (x509.CertificateBuilder()
            .subject_name(x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "someone")]))
            .issuer_name(ca_name).public_key(key.public_key()).serial_number(2)
            .not_valid_before(now - datetime.timedelta(hours=1)).not_valid_after(now + datetime.timedelta(days=1))
            .sign(ca_key, hashes.SHA256()))
    files = {"ca.crt": ca.public_bytes(serialization.Encoding.PEM),
             "client.crt": cert.public_bytes(serialization.Encoding.PEM), "client.key": pem_key(key)}
    for name, data in files.items():
        (d / name).write_bytes(data)
    return {name: d / name for name in files} | {"dir": d}


def b64(path: Path) -> str:
    return base64.b64encode(path.read_bytes()).decode()


def kubeconfig(path: Path, user: dict, cluster: dict | None = None, *, server: str = "https://127.0.0.1:6443",
               context: str = "ctx", extra: dict | None = None) -> Path:
    config = {
        "apiVersion": "v1", "kind": "Config",
        "clusters": [{"name": "c", "cluster": {"server": server, **(cluster or {})}}],
        "users": [{"name": "u", "user": user}],
        "contexts": [{"name": "ctx", "context": {"cluster": "c", "user": "u"}}],
        "current-context": context,
        **(extra or {}),
    }
    path.write_text(yaml.safe_dump(config))
    return path


def exec_plugin(path: Path, body: str) -> Path:
    """A plugin script: ``body`` is Python run with ``n`` = how many times it ran before (counted in a file)."""
    path.write_text(f"""#!{sys.executable}
import json, os, sys, datetime
count_file = {str(path) + '.count'!r}
n = int(open(count_file).read()) if os.path.exists(count_file) else 0
open(count_file, 'w').write(str(n + 1))
info = json.loads(os.environ.get('KUBERNETES_EXEC_INFO', 'null'))
open({str(path) + '.info'!r}, 'w').write(json.dumps(info))
{body}
""")
    path.chmod(path.stat().st_mode | stat.S_IXUSR)
    return path


def runs(plugin: Path) -> int:
    count = Path(str(plugin) + ".count")
    return int(count.read_text()) if count.exists() else 0


def credential(token: str, expires_in: float | None = None, api: str = "client.authentication.k8s.io/v1") -> str:
    status = {"token": token}
    if expires_in is not None:
        stamp = datetime.datetime.now(datetime.timezone.utc) + datetime.timedelta(seconds=expires_in)
        status["expirationTimestamp"] = stamp.strftime("%Y-%m-%dT%H:%M:%SZ")
    return f"print(json.dumps({json.dumps({'apiVersion': api, 'kind': 'ExecCredential', 'status': status})}))"


# --------------------------------------------------------------------------- client certificates


@pytest.mark.parametrize("inline", [False, True])
@pytest.mark.parametrize("insecure", [False, True])
def test_client_certificate_is_kept_with_or_without_verification(tmp_path, pki, inline, insecure):
    """The writer once dropped the client certificate when verification was off, and went out anonymously."""
    user = ({"client-certificate-data": b64(pki["client.crt"]), "client-key-data": b64(pki["client.key"])}
            if inline else {"client-certificate": str(pki["client.crt"]), "client-key": str(pki["client.key"])})
    cluster = {"insecure-skip-tls-verify": True} if insecure else {"certificate-authority": str(pki["ca.crt"])}
    creds = c.from_kubeconfig([str(kubeconfig(tmp_path / "kc", user, cluster))])

    assert Path(creds.cert_file).read_bytes() == pki["client.crt"].read_bytes()
    assert Path(creds.key_file).read_bytes() == pki["client.key"].read_bytes()
    assert creds.insecure is insecure
    assert creds.authorization() is None
    context = creds.ssl_context()
    assert context.verify_mode == (ssl.CERT_NONE if insecure else ssl.CERT_REQUIRED)
    assert context.check_hostname is not insecure

    conf = creds.configuration()
    assert (conf.cert_file, conf.key_file, conf.verify_ssl) == (creds.cert_file, creds.key_file, not insecure)
    info = creds.connection_info()
    assert (info.certificate_path, info.private_key_path, info.insecure) == (creds.cert_file, creds.key_file,
                                                                            insecure)
    assert info.as_http_headers() == {}
    if inline:
        assert os.stat(creds.key_file).st_mode & 0o077 == 0, "a private key written for the clients is private"


def test_relative_paths_are_relative_to_the_kubeconfig(tmp_path, pki, monkeypatch):
    monkeypatch.chdir("/")
    path = kubeconfig(pki["dir"] / "kc", {"client-certificate": "client.crt", "client-key": "client.key"},
                      {"certificate-authority": "ca.crt"})
    creds = c.from_kubeconfig([str(path)])
    assert creds.cert_file == str(pki["client.crt"]) and creds.ca_file == str(pki["ca.crt"])


def test_inline_data_wins_over_a_file(tmp_path, pki):
    path = kubeconfig(tmp_path / "kc", {}, {"certificate-authority-data": b64(pki["ca.crt"]),
                                             "certificate-authority": str(tmp_path / "missing.crt")})
    creds = c.from_kubeconfig([str(path)])
    assert Path(creds.ca_file).read_bytes() == pki["ca.crt"].read_bytes()


# --------------------------------------------------------------------------- tokens


def test_bearer_token_goes_to_every_client(tmp_path):
    creds = c.from_kubeconfig([str(kubeconfig(tmp_path / "kc", {"token": "abc"}))])
    assert creds.authorization() == "Bearer abc"
    conf = creds.configuration()
    assert conf.auth_settings()["BearerToken"]["value"] == "Bearer abc"
    assert creds.connection_info().as_http_headers() == {"Authorization": "Bearer abc"}


def test_token_file_is_read_again_when_it_changes(tmp_path):
    token = tmp_path / "token"
    token.write_text("first\n")
    creds = c.from_kubeconfig([str(kubeconfig(tmp_path / "kc", {"tokenFile": "token"}))])
    conf = creds.configuration()
    assert creds.authorization() == "Bearer first"
    replacement = tmp_path / "token.new"
    replacement.write_text("second")
    os.replace(replacement, token)  # the way the kubelet swaps it: a new inode
    assert creds.authorization() == "Bearer second"
    assert conf.auth_settings()["BearerToken"]["value"] == "Bearer second"
    assert creds.connection_info().token == "second"


def test_token_file_rewritten_in_place_is_seen(tmp_path):
    token = tmp_path / "token"
    token.write_text("first")
    creds = c.from_kubeconfig([str(kubeconfig(tmp_path / "kc", {"tokenFile": str(token)}))])
    assert creds.authorization() == "Bearer first"
    token.write_text("second-and-longer")
    assert creds.authorization() == "Bearer second-and-longer"


def test_token_file_preferred_to_token_while_readable(tmp_path):
    token = tmp_path / "token"
    token.write_text("from-file")
    creds = c.from_kubeconfig([str(kubeconfig(tmp_path / "kc", {"tokenFile": "token", "token": "inline"}))])
    assert creds.authorization() == "Bearer from-file"
    token.unlink()
    assert creds.authorization() == "Bearer inline"


def test_token_file_that_goes_away_keeps_the_last_token(tmp_path):
    token = tmp_path / "token"
    token.write_text("kept")
    creds = c.from_kubeconfig([str(kubeconfig(tmp_path / "kc", {"tokenFile": "token"}))])
    token.unlink()
    assert creds.authorization() == "Bearer kept"


def test_a_missing_token_file_is_a_clear_error(tmp_path):
    with pytest.raises(CredentialsError, match=r"users\[u\]\.user\.tokenFile: token file .*/nope cannot be read"):
        c.from_kubeconfig([str(kubeconfig(tmp_path / "kc", {"tokenFile": "nope"}))])


def test_basic_auth(tmp_path):
    creds = c.from_kubeconfig([str(kubeconfig(tmp_path / "kc", {"username": "a", "password": "b"}))])
    assert creds.authorization() == "Basic " + base64.b64encode(b"a:b").decode()
    assert creds.connection_info().as_http_headers() == {"Authorization": creds.authorization()}


# --------------------------------------------------------------------------- exec plugins


def test_exec_plugin_runs_once_until_its_credential_is_due(tmp_path):
    plugin = exec_plugin(tmp_path / "plugin", f"""
if n == 0:
    {credential("one", expires_in=3600)}
else:
    {credential("two", expires_in=3600)}
""")
    creds = c.from_kubeconfig([str(kubeconfig(tmp_path / "kc", {"exec": {
        "apiVersion": "client.authentication.k8s.io/v1", "command": "./plugin", "interactiveMode": "Never"}}))])
    conf = creds.configuration()
    for _ in range(5):
        assert creds.authorization() == "Bearer one"
        assert conf.auth_settings()["BearerToken"]["value"] == "Bearer one"
    assert runs(plugin) == 1
    info = creds.connection_info()
    assert info.token == "one"
    assert info.expiration is not None and info.expiration > datetime.datetime.now(datetime.timezone.utc)
    exec_info = json.loads(Path(str(plugin) + ".info").read_text())
    assert exec_info == {"apiVersion": "client.authentication.k8s.io/v1", "kind": "ExecCredential",
                         "spec": {"interactive": False}}


def test_exec_credential_about_to_expire_is_renewed(tmp_path):
    plugin = exec_plugin(tmp_path / "plugin", f"""
if n == 0:
    {credential("short", expires_in=2, api="client.authentication.k8s.io/v1beta1")}
else:
    {credential("long", expires_in=3600, api="client.authentication.k8s.io/v1beta1")}
""")
    creds = c.from_kubeconfig([str(kubeconfig(tmp_path / "kc", {"exec": {
        "apiVersion": "client.authentication.k8s.io/v1beta1", "command": str(plugin)}}))])
    first = creds.authorization()
    # Renewed ahead of expiry (a tenth of its life at most): within 2 s it is due. The deadline is a
    # generous bound on the poll (running the plugin again takes a while on a loaded machine), not on it.
    deadline = time.monotonic() + 60
    while creds.authorization() == first:
        assert time.monotonic() < deadline, "the short-lived credential was never renewed"
        time.sleep(0.05)
    assert creds.authorization() == "Bearer long"
    assert runs(plugin) == 2


def test_exec_credential_refused_by_the_server_is_renewed(tmp_path):
    plugin = exec_plugin(tmp_path / "plugin", """
print(json.dumps({'apiVersion': 'client.authentication.k8s.io/v1', 'kind': 'ExecCredential',
                  'status': {'token': 'token-%d' % n}}))
""")
    creds = c.from_kubeconfig([str(kubeconfig(tmp_path / "kc", {"exec": {
        "apiVersion": "client.authentication.k8s.io/v1", "command": str(plugin)}}))])
    assert creds.authorization() == "Bearer token-0"
    assert creds.refused("Bearer token-0") is True
    assert creds.authorization() == "Bearer token-1"
    assert creds.refused("Bearer token-0") is True, "renewed meanwhile: worth a retry, no new run"
    assert runs(plugin) == 2


def test_static_token_refused_is_not_retried(tmp_path):
    creds = c.from_kubeconfig([str(kubeconfig(tmp_path / "kc", {"token": "abc"}))])
    assert creds.refused("Bearer abc") is False


def test_exec_plugin_sees_the_cluster_when_asked(tmp_path, pki):
    plugin = exec_plugin(tmp_path / "plugin", credential("t"))
    c.from_kubeconfig([str(kubeconfig(tmp_path / "kc", {"exec": {
        "apiVersion": "client.authentication.k8s.io/v1", "command": str(plugin), "provideClusterInfo": True,
        "env": [{"name": "FOO", "value": "bar"}]}}, {"certificate-authority-data": b64(pki["ca.crt"])}))])
    info = json.loads(Path(str(plugin) + ".info").read_text())
    assert info["spec"]["cluster"] == {"server": "https://127.0.0.1:6443",
                                       "certificate-authority-data": b64(pki["ca.crt"])}


def test_exec_plugin_client_certificate(tmp_path, pki):
    status = {"clientCertificateData": pki["client.crt"].read_text(), "clientKeyData": pki["client.key"].read_text()}
    answer = json.dumps({"apiVersion": "client.authentication.k8s.io/v1", "kind": "ExecCredential", "status": status})
    plugin = exec_plugin(tmp_path / "plugin", f"print(json.dumps({answer}))")
    creds = c.from_kubeconfig([str(kubeconfig(tmp_path / "kc", {"exec": {
        "apiVersion": "client.authentication.k8s.io/v1", "command": str(plugin)}},
        {"certificate-authority": str(pki["ca.crt"])}))])
    assert creds.authorization() is None
    assert creds.cert_file and creds.cert_file == creds.key_file
    ssl.create_default_context().load_cert_chain(creds.cert_file, creds.key_file)
    assert creds.configuration().cert_file == creds.cert_file
    info = creds.connection_info()  # by content: kopf compares logins to tell a renewed certificate
    assert (info.certificate_data, info.private_key_data) == (status["clientCertificateData"].encode(),
                                                              status["clientKeyData"].encode())
    info.as_ssl_context()


def test_exec_plugin_is_not_run_when_a_token_is_given(tmp_path):
    plugin = exec_plugin(tmp_path / "plugin", credential("from-plugin"))
    creds = c.from_kubeconfig([str(kubeconfig(tmp_path / "kc", {"token": "given", "exec": {
        "apiVersion": "client.authentication.k8s.io/v1", "command": str(plugin)}}))])
    assert creds.authorization() == "Bearer given"
    assert runs(plugin) == 0


@pytest.mark.parametrize("body, message", [
    ("sys.stderr.write('no session\\n'); sys.exit(3)", r"exited with status 3: no session"),
    ("print('hello')", r"printed no ExecCredential JSON"),
    (credential("t", api="client.authentication.k8s.io/v1beta1"),
     r"answered apiVersion 'client.authentication.k8s.io/v1beta1', client.authentication.k8s.io/v1 was asked for"),
    ("print(json.dumps({'apiVersion': 'client.authentication.k8s.io/v1', 'kind': 'ExecCredential', 'status': {}}))",
     r"has neither status.token"),
])
def test_exec_plugin_failures_are_clear(tmp_path, body, message):
    plugin = exec_plugin(tmp_path / "plugin", body)
    with pytest.raises(CredentialsError, match=r"users\[u\]\.user\.exec: .*" + message):
        c.from_kubeconfig([str(kubeconfig(tmp_path / "kc", {"exec": {
            "apiVersion": "client.authentication.k8s.io/v1", "command": str(plugin)}}))])


def test_exec_plugin_not_installed_shows_the_hint(tmp_path):
    with pytest.raises(CredentialsError, match=r"exec\.command: /nonexistent/kubelogin not found \(brew install x\)"):
        c.from_kubeconfig([str(kubeconfig(tmp_path / "kc", {"exec": {
            "apiVersion": "client.authentication.k8s.io/v1", "command": "/nonexistent/kubelogin",
            "installHint": "brew install x"}}))])


def test_exec_renewal_that_fails_keeps_the_last_credential(tmp_path):
    plugin = exec_plugin(tmp_path / "plugin", f"""
if n == 0:
    {credential("first", expires_in=1)}
else:
    sys.exit(1)
""")
    creds = c.from_kubeconfig([str(kubeconfig(tmp_path / "kc", {"exec": {
        "apiVersion": "client.authentication.k8s.io/v1", "command": str(plugin)}}))])
    time.sleep(1.1)  # past its expiry: the point of the test, not a synchronisation
    assert creds.authorization() == "Bearer first"
    assert runs(plugin) == 2


# --------------------------------------------------------------------------- which kubeconfig, which context


def test_kubeconfig_list_merges_first_wins(tmp_path, monkeypatch):
    first = kubeconfig(tmp_path / "a", {"token": "from-a"}, context="ctx")
    second = tmp_path / "b"
    second.write_text(yaml.safe_dump({
        "clusters": [{"name": "other", "cluster": {"server": "https://10.0.0.1"}}],
        "users": [{"name": "u", "user": {"token": "from-b"}}, {"name": "v", "user": {"token": "from-b-v"}}],
        "contexts": [{"name": "second", "context": {"cluster": "other", "user": "v"}}],
        "current-context": "second"}))
    creds = c.load(None, {"KUBECONFIG": f"{second}:{tmp_path / 'missing'}:{first}"})
    assert (creds.server, creds.authorization()) == ("https://10.0.0.1", "Bearer from-b-v")
    creds = c.load(None, {"KUBECONFIG": f"{first}:{second}"})
    assert (creds.server, creds.authorization()) == ("https://127.0.0.1:6443", "Bearer from-a")


def test_explicit_kubeconfig_wins_over_the_environment(tmp_path):
    path = kubeconfig(tmp_path / "kc", {"token": "x"})
    creds = c.load(str(path), {"KUBECONFIG": "/nonexistent", "KUBERNETES_SERVICE_HOST": "10.0.0.1"})
    assert creds.authorization() == "Bearer x"


@pytest.mark.parametrize("user, cluster, extra, message", [
    ({"token": "x"}, {}, {"current-context": ""}, r"current-context is not set"),
    ({"token": "x"}, {}, {"current-context": "nope"}, r"current-context 'nope' names no context"),
    ({"as": "admin", "token": "x"}, {}, {}, r"users\[u\]\.user\.as: impersonation is not supported"),
    ({"auth-provider": {"name": "oidc"}}, {}, {}, r"users\[u\]\.user\.auth-provider: auth-provider plugins"),
    ({"token": "x"}, {"tls-server-name": "kubernetes"}, {}, r"clusters\[c\]\.cluster\.tls-server-name: not supported"),
    ({"client-certificate-data": "***"}, {}, {}, r"users\[u\]\.user\.client-certificate-data: not base64"),
    ({"client-certificate-data": base64.b64encode(b"x").decode()}, {}, {},
     r"users\[u\]\.user\.client-key: a client certificate needs both"),
    ({"token": "x", "username": "a", "password": "b"}, {}, {}, r"username/password and a bearer token are both set"),
    ({"exec": {"command": "x"}}, {}, {}, r"exec\.apiVersion: one of client\.authentication\.k8s\.io/v1"),
    ({"exec": {"apiVersion": "client.authentication.k8s.io/v1", "command": "x", "interactiveMode": "Always"}},
     {}, {}, r"exec\.interactiveMode: 'Always' needs a terminal"),
    ({"token": "x"}, {"server": "127.0.0.1:6443"}, {}, r"clusters\[c\]\.cluster\.server: an http\(s\) URL"),
])
def test_bad_kubeconfigs_name_the_field(tmp_path, user, cluster, extra, message):
    path = kubeconfig(tmp_path / "kc", user, cluster, extra=extra)
    if "server" in cluster:
        config = yaml.safe_load(path.read_text())
        config["clusters"][0]["cluster"]["server"] = cluster["server"]
        path.write_text(yaml.safe_dump(config))
    with pytest.raises(CredentialsError, match=message) as err:
        c.from_kubeconfig([str(path)])
    assert str(path) in str(err.value)


def test_unreadable_kubeconfig(tmp_path):
    with pytest.raises(CredentialsError, match=r"kubeconfig .*/none cannot be read: No such file"):
        c.load(str(tmp_path / "none"), {})
    (tmp_path / "bad").write_text("- just\n- a list\n")
    with pytest.raises(CredentialsError, match=r"a mapping is required at the top"):
        c.load(str(tmp_path / "bad"), {})


def test_a_context_without_user_is_anonymous(tmp_path):
    path = tmp_path / "kc"
    path.write_text(yaml.safe_dump({
        "clusters": [{"name": "c", "cluster": {"server": "https://h:1", "insecure-skip-tls-verify": True}}],
        "contexts": [{"name": "x", "context": {"cluster": "c"}}], "current-context": "x"}))
    creds = c.from_kubeconfig([str(path)])
    assert creds.authorization() is None and creds.cert_file is None
    assert "anonymous" in creds.describe()


# --------------------------------------------------------------------------- in a pod


def test_in_cluster_token_rotation(tmp_path, pki):
    (tmp_path / "ca.crt").write_bytes(pki["ca.crt"].read_bytes())
    # The kubelet's layout: token -> ..data/token, ..data -> a timestamped folder swapped by rename.
    first = tmp_path / "..2024_01"
    first.mkdir()
    (first / "token").write_text("first")
    os.symlink(first.name, tmp_path / "..data")
    os.symlink("..data/token", tmp_path / "token")
    creds = c.in_cluster({"KUBERNETES_SERVICE_HOST": "fd00::1", "KUBERNETES_SERVICE_PORT": "443"}, str(tmp_path))
    assert creds.server == "https://[fd00::1]:443"
    assert creds.ca_file == str(tmp_path / "ca.crt")
    conf = creds.configuration()
    assert conf.auth_settings()["BearerToken"]["value"] == "Bearer first"

    second = tmp_path / "..2024_02"
    second.mkdir()
    (second / "token").write_text("second")
    os.symlink(second.name, tmp_path / "..data_tmp")
    os.replace(tmp_path / "..data_tmp", tmp_path / "..data")
    assert creds.authorization() == "Bearer second"
    assert conf.auth_settings()["BearerToken"]["value"] == "Bearer second"
    assert creds.connection_info().token == "second"


def test_in_cluster_needs_the_service_environment(tmp_path):
    with pytest.raises(CredentialsError, match=r"KUBERNETES_SERVICE_HOST and KUBERNETES_SERVICE_PORT"):
        c.in_cluster({"KUBERNETES_SERVICE_HOST": "10.0.0.1"}, str(tmp_path))
    with pytest.raises(CredentialsError, match=r"service-account CA .*ca.crt does not exist"):
        c.in_cluster({"KUBERNETES_SERVICE_HOST": "10.0.0.1", "KUBERNETES_SERVICE_PORT": "443"}, str(tmp_path))


def test_in_cluster_when_nothing_else_is_said(tmp_path, monkeypatch, pki):
    monkeypatch.setattr(c, "SERVICE_ACCOUNT_DIR", str(tmp_path))
    (tmp_path / "ca.crt").write_bytes(pki["ca.crt"].read_bytes())
    (tmp_path / "token").write_text("pod")
    creds = c.in_cluster({"KUBERNETES_SERVICE_HOST": "10.0.0.1", "KUBERNETES_SERVICE_PORT": "443"}, str(tmp_path))
    assert creds.authorization() == "Bearer pod"


def test_rotated_certificate_files_are_noticed(tmp_path, pki, monkeypatch):
    monkeypatch.setattr(c, "TLS_FILES_RECHECK_SECONDS", 0.0)
    cert, key = tmp_path / "c.crt", tmp_path / "c.key"
    cert.write_bytes(pki["client.crt"].read_bytes())
    key.write_bytes(pki["client.key"].read_bytes())
    creds = c.from_kubeconfig([str(kubeconfig(tmp_path / "kc", {"client-certificate": str(cert),
                                                                "client-key": str(key)}))])
    before = creds.tls_generation()
    assert creds.tls_generation() == before
    replacement = tmp_path / "c.crt.new"
    replacement.write_bytes(pki["client.crt"].read_bytes())
    os.replace(replacement, cert)
    assert creds.tls_generation() != before


# --------------------------------------------------------------------------- kopf's login


def test_kopf_logs_in_with_the_same_credentials_and_a_second_login_renews(tmp_path):
    from metal3_ipam.controller.operator import login_from

    plugin = exec_plugin(tmp_path / "plugin", """
at = (datetime.datetime.now(datetime.timezone.utc) + datetime.timedelta(hours=1)).strftime('%Y-%m-%dT%H:%M:%SZ')
print(json.dumps({'apiVersion': 'client.authentication.k8s.io/v1', 'kind': 'ExecCredential',
                  'status': {'token': 'token-%d' % n, 'expirationTimestamp': at}}))
""")
    creds = c.from_kubeconfig([str(kubeconfig(tmp_path / "kc", {"exec": {
        "apiVersion": "client.authentication.k8s.io/v1", "command": str(plugin)}}))])
    login = login_from(creds)
    first = login()
    assert (first.server, first.scheme, first.token) == (creds.server, "Bearer", "token-0")
    in_an_hour = datetime.datetime.now(datetime.timezone.utc) + datetime.timedelta(hours=1)
    # Renewed a little ahead of the expiry, with every other client.
    assert in_an_hour - datetime.timedelta(seconds=60) < first.expiration < in_an_hour
    # kopf logs in again only when what it had failed (401) or expired: that one is not handed back.
    second = login()
    assert second.token == "token-1" and creds.authorization() == "Bearer token-1"
    assert runs(plugin) == 2
