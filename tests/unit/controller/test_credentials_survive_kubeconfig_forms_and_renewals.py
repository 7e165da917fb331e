"""Kubeconfig forms and orders of events the one credentials source must survive.

kopf keeps the logins it saw refused (401) and drops a new login equal to one
of them (``Vault._update_converted``): a login that brings a renewed client
certificate must therefore differ from the one before, or the watches end
while the writer, which reads the renewed files, carries on.
"""

from __future__ import annotations

import base64
import datetime
import errno
import json
import os
import stat
import sys
import tempfile
from pathlib import Path

import pytest
import yaml

from metal3_ipam.controller import credentials as c
from metal3_ipam.controller.operator import login_from


def _certificate(common_name: str, hours: float) -> tuple[bytes, bytes]:
    """A self-signed client certificate and its key, as PEM, valid for ``hours`` from now."""
    from cryptography import x509
    from cryptography.hazmat.primitives import hashes, serialization
    from cryptography.hazmat.primitives.asymmetric import ec
    from cryptography.x509.oid import NameOID

    now = datetime.datetime.now(datetime.timezone.utc)
    key = ec.generate_private_key(ec.SECP256R1())
    name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, common_name)])
    cert = (x509.CertificateBuilder().subject_name(name).issuer_name(name).public_key(key.public_key())
            .serial_number(x509.random_serial_number()).not_valid_before(now - datetime.timedelta(minutes=5))
            .not_valid_after(now + datetime.timedelta(hours=hours)).sign(key, hashes.SHA256()))
    return (cert.public_bytes(serialization.Encoding.PEM),
            key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
                              serialization.NoEncryption()))


def _kubeconfig(path: Path, user: dict) -> Path:
    path.write_text(yaml.safe_dump({
        "apiVersion": "v1", "kind": "Config",
        "clusters": [{"name": "c", "cluster": {"server": "https://127.0.0.1:6443", "insecure-skip-tls-verify": True}}],
        "users": [{"name": "u", "user": user}],
        "contexts": [{"name": "ctx", "context": {"cluster": "c", "user": "u"}}],
        "current-context": "ctx"}))
    return path


def _replace(path: Path, data: bytes) -> None:
    staged = path.with_suffix(".new")
    staged.write_bytes(data)
    os.replace(staged, path)


def test_kopf_login_after_the_client_certificate_files_were_renewed_is_a_new_login(tmp_path):
    """cert-manager renews the files a kubeconfig names. The writer's next connections use the new ones; kopf
    learns of them only by logging in again (after a 401 once the old certificate has expired). That login must
    not equal the refused one, or kopf discards it and its watches stop for good."""
    cert, key = tmp_path / "tls.crt", tmp_path / "tls.key"
    old_cert, old_key = _certificate("someone", hours=1)
    cert.write_bytes(old_cert)
    key.write_bytes(old_key)
    creds = c.from_kubeconfig([str(_kubeconfig(tmp_path / "kc", {"client-certificate": str(cert),
                                                                  "client-key": str(key)}))])
    login = login_from(creds)
    first = login()

    new_cert, new_key = _certificate("someone", hours=24)
    _replace(cert, new_cert)
    _replace(key, new_key)
    second = login()  # kopf, after the old certificate was refused
    assert second != first, "kopf drops a login equal to one it saw refused: the renewed certificate never reaches it"


def test_kopf_logs_in_again_before_its_client_certificate_expires(tmp_path):
    """Until kopf logs in again it keeps the certificate it loaded; it must do so before that one expires (as it
    does for an expiring exec token), not wait for the server to refuse it."""
    cert, key = tmp_path / "tls.crt", tmp_path / "tls.key"
    pem, private = _certificate("someone", hours=1)
    cert.write_bytes(pem)
    key.write_bytes(private)
    creds = c.from_kubeconfig([str(_kubeconfig(tmp_path / "kc", {"client-certificate": str(cert),
                                                                  "client-key": str(key)}))])
    info = login_from(creds)()
    in_an_hour = datetime.datetime.now(datetime.timezone.utc) + datetime.timedelta(hours=1)
    assert info.expiration is not None and info.expiration <= in_an_hour, info.expiration


def _exec_plugin(path: Path, certificates: list[tuple[bytes, bytes]]) -> Path:
    """A plugin answering with the n-th client certificate (no expirationTimestamp) on its n-th run."""
    answers = [{"apiVersion": "client.authentication.k8s.io/v1", "kind": "ExecCredential",
                "status": {"clientCertificateData": cert.decode(), "clientKeyData": key.decode()}}
               for cert, key in certificates]
    path.write_text(f"""#!{sys.executable}
import json, os
count = {str(path) + '.count'!r}
n = int(open(count).read()) if os.path.exists(count) else 0
open(count, 'w').write(str(n + 1))
print(json.dumps({json.dumps(answers)}[min(n, {len(answers) - 1})]))
""")
    path.chmod(path.stat().st_mode | stat.S_IXUSR)
    return path


def test_an_exec_client_certificate_refused_with_401_is_renewed_and_worth_a_retry(tmp_path):
    """An exec plugin that answers with a client certificate: after a 401 the plugin is run again and gives a new
    certificate. The writer sends once more only when ``refused`` says the credential changed; kopf takes the new
    login only when it differs from the refused one."""
    plugin = _exec_plugin(tmp_path / "plugin", [_certificate("revoked", 1), _certificate("someone", 1)])
    creds = c.from_kubeconfig([str(_kubeconfig(tmp_path / "kc", {"exec": {
        "apiVersion": "client.authentication.k8s.io/v1", "command": str(plugin), "interactiveMode": "Never"}}))])
    login = login_from(creds)
    first = login()
    first_pem = Path(creds.cert_file).read_bytes()
    assert creds.authorization() is None
    assert creds.refused(None) is True, "a new client certificate was issued: the request is worth one more try"
    assert Path(creds.cert_file).read_bytes() != first_pem
    assert int(Path(str(plugin) + ".count").read_text()) == 2
    second = login()
    assert second != first, "kopf drops a login equal to one it saw refused"


def test_inline_certificates_with_no_writable_temporary_folder_are_a_clear_error(tmp_path, monkeypatch):
    """The shipped Deployment has a read-only root file system and no writable /tmp. kubectl keeps inline
    certificate data in memory; Python's ssl loads it only from files. Run there with such a kubeconfig, the
    controller must say which field needs a writable folder, not die with a traceback."""
    pem, key = _certificate("someone", hours=1)
    config = _kubeconfig(tmp_path / "kc", {"client-certificate-data": base64.b64encode(pem).decode(),
                                           "client-key-data": base64.b64encode(key).decode()})
    not_a_folder = tmp_path / "read-only"
    not_a_folder.write_text("")  # a file where a folder should be: every mkdtemp fails with an OSError
    monkeypatch.setattr(tempfile, "tempdir", str(not_a_folder))
    monkeypatch.setattr(c, "_FILES", c._PrivateFiles())
    try:
        c.from_kubeconfig([str(config)])
    except c.CredentialsError as err:
        assert "client-certificate-data" in str(err), err
    else:
        raise AssertionError("no error, yet the certificate could not be written anywhere")


def test_no_usable_temporary_folder_at_all_is_one_clear_error(tmp_path, monkeypatch):
    """A read-only root with no /tmp volume: tempfile finds no folder to use and raises without a file name.
    The error must say so once, not ask tempfile for the folder again (which raised a second time)."""
    pem, key = _certificate("someone", hours=1)
    config = _kubeconfig(tmp_path / "kc", {"client-certificate-data": base64.b64encode(pem).decode(),
                                           "client-key-data": base64.b64encode(key).decode()})

    def no_folder() -> str:
        raise FileNotFoundError(errno.ENOENT, "No usable temporary directory found in ['/tmp', '/var/tmp']")

    monkeypatch.setattr(tempfile, "tempdir", None)
    monkeypatch.setattr(tempfile, "gettempdir", no_folder)
    monkeypatch.setattr(c, "_FILES", c._PrivateFiles())
    with pytest.raises(c.CredentialsError) as caught:
        c.from_kubeconfig([str(config)])
    message = str(caught.value)
    assert "\n" not in message
    assert "client-certificate-data" in message and "No usable temporary directory found in ['/tmp'" in message
    assert "emptyDir at /tmp" in message
    assert caught.value.__suppress_context__, "the OSError behind it is not printed as a second traceback"
