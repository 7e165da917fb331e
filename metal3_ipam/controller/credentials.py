"""Who the controller is to the API server: one source of credentials for every client.

kopf's watches, the kubernetes client's reads (discovery, the initial load,
leader election) and the REST writer each open their own connections. They
all take the server, the TLS settings and the Authorization header from one
``Credentials``, so a kubeconfig is read once and no client can end up
talking as someone else (a writer that dropped the client certificate went
out anonymously and was refused forever).

What a kubeconfig may say, as kubectl reads it:
- client certificates, from files or inline ``*-data``, with or without
  verification of the server (``insecure-skip-tls-verify``);
- a bearer ``token``, or a ``tokenFile`` (read again whenever it changes on
  disk, and preferred to ``token`` while it can be read);
- ``username``/``password`` (HTTP basic);
- an ``exec`` credential plugin (``client.authentication.k8s.io`` v1 or
  v1beta1): run when first needed, again when its credential is about to
  expire and when the server refuses it (401);
- several files in ``$KUBECONFIG``, merged the way kubectl merges them.

In a pod, the service-account token file is read again whenever the kubelet
rotates it. What the clients cannot all honour (impersonation,
``tls-server-name``, ``auth-provider``) is refused with a message naming the
field, rather than honoured by some clients and not others.
"""

from __future__ import annotations

import atexit
import base64
import binascii
import dataclasses
import datetime
import json
import logging
import os
import shutil
import ssl
import subprocess
import tempfile
import threading
import time
from pathlib import Path
from typing import Any, Mapping

log = logging.getLogger("metal3_ipam.credentials")

SERVICE_ACCOUNT_DIR = "/var/run/secrets/kubernetes.io/serviceaccount"
EXEC_API_VERSIONS = ("client.authentication.k8s.io/v1", "client.authentication.k8s.io/v1beta1")
EXEC_TIMEOUT_SECONDS = 60.0
# How long before its expiry an exec credential is renewed, at most (less for short-lived ones).
EXEC_RENEW_AHEAD_SECONDS = 30.0
# How often certificate files named by path are looked at for a rotation.
TLS_FILES_RECHECK_SECONDS = 10.0


class CredentialsError(Exception):
    """A kubeconfig or a credential source that cannot be used; the message names where and why."""


# --------------------------------------------------------------------------- private files


class _PrivateFiles:
    """Inline certificates and keys as files (Python's ssl module loads them only from files).

    One 0700 directory per process, removed at exit. A file is replaced by
    rename, so a reader sees either the old or the new content, never a mix.
    """

    def __init__(self) -> None:
        self._dir: Path | None = None
        self._count = 0
        self._lock = threading.Lock()

    def new(self, name: str, data: bytes) -> str:
        """A file of its own (several kubeconfigs may be loaded in one process)."""
        directory = self._directory()
        with self._lock:
            self._count += 1
            path = directory / f"{self._count}-{name}"
        return self.replace(str(path), data)

    def replace(self, path: str, data: bytes) -> str:
        fd, tmp = tempfile.mkstemp(dir=self._directory())
        with os.fdopen(fd, "wb") as f:
            f.write(data)
        os.replace(tmp, path)
        return path

    def _directory(self) -> Path:
        with self._lock:
            if self._dir is None:
                self._dir = Path(tempfile.mkdtemp(prefix="metal3-ipam-credentials-"))
                atexit.register(shutil.rmtree, self._dir, True)
            return self._dir


_FILES = _PrivateFiles()

_GIVE_A_TEMPORARY_FOLDER = "give the controller a writable temporary folder (an emptyDir at /tmp, or $TMPDIR)"


def _unwritable(err: OSError) -> str:
    """Why a private file could not be written, from the error alone.

    With no usable temporary folder at all, ``tempfile`` raises without a file
    name (its message lists the folders it tried); asking it for the folder
    again would only raise once more.
    """
    reason = err.strerror or str(err)
    return f"{reason}: {err.filename}" if err.filename else reason


# --------------------------------------------------------------------------- token sources


@dataclasses.dataclass
class _Credential:
    """An Authorization header value, and until when it may be used (monotonic clock; None: no end)."""

    header: str | None
    renew_at: float | None = None
    expires: datetime.datetime | None = None  # wall clock, for kopf
    cert_pem: bytes | None = None
    key_pem: bytes | None = None


class _TokenSource:
    """Where the Authorization header comes from."""

    what = "no credentials"

    def current(self) -> _Credential:  # pragma: no cover - interface
        raise NotImplementedError

    def needs_refresh(self) -> bool:
        return False

    def invalidate(self) -> None:
        """The server refused what ``current()`` gave (401): get a fresh one next time."""


class _Static(_TokenSource):
    def __init__(self, header: str | None, what: str) -> None:
        self._credential = _Credential(header)
        self.what = what

    def current(self) -> _Credential:
        return self._credential


class _TokenFile(_TokenSource):
    """A bearer token read from a file, again whenever the file changes.

    The kubelet rotates a projected service-account token by swapping a
    symlink; stat() follows it, so a rotation shows as a new inode or time.
    A stat per request costs microseconds. ``fallback`` (a kubeconfig's
    ``token`` next to its ``tokenFile``) serves while the file cannot be read.
    """

    def __init__(self, path: str, where: str, fallback: str | None = None) -> None:
        self.path = path
        self.where = where
        self.fallback = fallback
        self.what = f"bearer token from {path}"
        self._seen: tuple | None = None
        self._credential: _Credential | None = None
        self._lock = threading.Lock()

    def _signature(self) -> tuple | None:
        try:
            st = os.stat(self.path)
        except OSError:
            return None
        return (st.st_ino, st.st_dev, st.st_mtime_ns, st.st_size)

    def needs_refresh(self) -> bool:
        return self._credential is None or self._signature() != self._seen

    def current(self) -> _Credential:
        signature = self._signature()
        if self._credential is not None and signature == self._seen:
            return self._credential
        with self._lock:
            try:
                token = Path(self.path).read_text().strip()
            except OSError as err:
                token, problem = "", f"cannot be read: {err.strerror or err}"
            else:
                problem = "is empty"
            if not token:
                if self.fallback:
                    token = self.fallback
                elif self._credential is not None:
                    log.warning("%s: token file %s %s; the previous token is kept", self.where, self.path, problem)
                    return self._credential
                else:
                    raise CredentialsError(f"{self.where}: token file {self.path} {problem}")
            self._seen = signature
            self._credential = _Credential(f"Bearer {token}")
            return self._credential

    def invalidate(self) -> None:
        self._seen = None


class _ExecPlugin(_TokenSource):
    """A client-go credential plugin: a command printing an ExecCredential."""

    def __init__(self, config: Mapping[str, Any], where: str, base_dir: str,
                 cluster_info: dict[str, Any] | None) -> None:
        self.where = where
        command = config.get("command")
        if not isinstance(command, str) or not command:
            raise CredentialsError(f"{where}.command: a command is required (value: {command!r})")
        self.api_version = config.get("apiVersion")
        if self.api_version not in EXEC_API_VERSIONS:
            raise CredentialsError(f"{where}.apiVersion: one of {', '.join(EXEC_API_VERSIONS)} is required "
                                   f"(value: {self.api_version!r})")
        if config.get("interactiveMode") == "Always":
            raise CredentialsError(f"{where}.interactiveMode: 'Always' needs a terminal, and a controller has none")
        # As kubectl does: a relative command with a slash is relative to the kubeconfig's folder.
        if "/" in command and not os.path.isabs(command):
            command = os.path.join(base_dir, command)
        args = config.get("args") or []
        if not isinstance(args, list) or not all(isinstance(a, str) for a in args):
            raise CredentialsError(f"{where}.args: a list of strings is required (value: {args!r})")
        env = {}
        for i, item in enumerate(config.get("env") or []):
            if not isinstance(item, Mapping) or not isinstance(item.get("name"), str):
                raise CredentialsError(f"{where}.env[{i}]: name and value are required (value: {item!r})")
            env[item["name"]] = str(item.get("value") or "")
        self.argv = [command, *args]
        self.env = env
        self.install_hint = config.get("installHint")
        self.cluster_info = cluster_info if config.get("provideClusterInfo") else None
        self.what = f"exec plugin {command}"
        self._credential: _Credential | None = None
        self._lock = threading.Lock()

    def needs_refresh(self) -> bool:
        c = self._credential
        return c is None or (c.renew_at is not None and time.monotonic() >= c.renew_at)

    def current(self) -> _Credential:
        if not self.needs_refresh():
            return self._credential  # type: ignore[return-value]
        with self._lock:
            if not self.needs_refresh():
                return self._credential  # type: ignore[return-value]
            try:
                self._credential = self._run()
            except CredentialsError:
                if self._credential is None:
                    raise
                # The old credential may still be accepted; a 401 tells.
                log.exception("%s: renewing the credential failed; the previous one is kept", self.where)
                self._credential.renew_at = time.monotonic() + 10.0
            return self._credential

    def invalidate(self) -> None:
        if self._credential is not None:
            self._credential.renew_at = time.monotonic()

    def _run(self) -> _Credential:
        spec: dict[str, Any] = {"interactive": False}
        if self.cluster_info is not None:
            spec["cluster"] = self.cluster_info
        env = dict(os.environ)
        env.update(self.env)
        env["KUBERNETES_EXEC_INFO"] = json.dumps(
            {"apiVersion": self.api_version, "kind": "ExecCredential", "spec": spec})
        try:
            done = subprocess.run(self.argv, env=env, stdin=subprocess.DEVNULL, capture_output=True,
                                  timeout=EXEC_TIMEOUT_SECONDS, check=False)
        except FileNotFoundError:
            hint = f" ({self.install_hint.strip()})" if self.install_hint else ""
            raise CredentialsError(f"{self.where}.command: {self.argv[0]} not found{hint}") from None
        except (OSError, subprocess.TimeoutExpired) as err:
            raise CredentialsError(f"{self.where}: running {self.argv[0]} failed: {err}") from None
        if done.returncode != 0:
            stderr = done.stderr.decode(errors="replace").strip()[-500:]
            raise CredentialsError(f"{self.where}: {self.argv[0]} exited with status {done.returncode}"
                                   + (f": {stderr}" if stderr else ""))
        try:
            answer = json.loads(done.stdout)
        except ValueError as err:
            raise CredentialsError(f"{self.where}: {self.argv[0]} printed no ExecCredential JSON: {err}") from None
        if not isinstance(answer, Mapping) or answer.get("kind") != "ExecCredential":
            raise CredentialsError(f"{self.where}: {self.argv[0]} printed no ExecCredential "
                                   f"(kind: {answer.get('kind') if isinstance(answer, Mapping) else answer!r})")
        if answer.get("apiVersion") != self.api_version:
            raise CredentialsError(f"{self.where}: {self.argv[0]} answered apiVersion {answer.get('apiVersion')!r},"
                                   f" {self.api_version} was asked for")
        status = answer.get("status") if isinstance(answer.get("status"), Mapping) else {}
        token = status.get("token")
        cert, key = status.get("clientCertificateData"), status.get("clientKeyData")
        if not token and not (cert and key):
            raise CredentialsError(f"{self.where}: the ExecCredential of {self.argv[0]} has neither status.token "
                                   "nor status.clientCertificateData with status.clientKeyData")
        credential = _Credential(f"Bearer {token}" if token else None,
                                 cert_pem=cert.encode() if cert and key else None,
                                 key_pem=key.encode() if cert and key else None)
        stamp = status.get("expirationTimestamp")
        if stamp:
            try:
                expires = datetime.datetime.fromisoformat(str(stamp).replace("Z", "+00:00"))
                if expires.tzinfo is None:
                    expires = expires.replace(tzinfo=datetime.timezone.utc)
            except ValueError:
                raise CredentialsError(f"{self.where}: status.expirationTimestamp of {self.argv[0]} is not a time "
                                       f"(value: {stamp!r})") from None
            left = (expires - datetime.datetime.now(datetime.timezone.utc)).total_seconds()
            ahead = min(EXEC_RENEW_AHEAD_SECONDS, max(0.0, left) / 10)
            credential.renew_at = time.monotonic() + max(0.0, left - ahead)
            # kopf logs in again at this time: when every other client renews too.
            credential.expires = expires - datetime.timedelta(seconds=ahead)
        return credential


# --------------------------------------------------------------------------- the credentials


@dataclasses.dataclass(eq=False)
class Credentials:
    """The server, how to trust it, and how to prove who we are to it."""

    server: str
    ca_file: str | None = None
    insecure: bool = False
    cert_file: str | None = None
    key_file: str | None = None
    proxy: str | None = None
    source: _TokenSource = dataclasses.field(default_factory=lambda: _Static(None, "no credentials"))
    origin: str = ""  # where they were read, for messages
    _tls_seen: tuple | None = dataclasses.field(default=None, repr=False)
    _tls_checked: float = dataclasses.field(default=0.0, repr=False)
    _exec_cert: tuple[bytes, bytes] | None = dataclasses.field(default=None, repr=False)
    _generation: int = dataclasses.field(default=0, repr=False)

    # -- the Authorization header ----------------------------------------------

    def authorization(self) -> str | None:
        """The Authorization header value to send now (reads a changed token file, runs a due exec plugin)."""
        credential = self.source.current()
        self._take_exec_certificate(credential)
        return credential.header

    async def authorization_async(self) -> str | None:
        """The same, off the event loop when a plugin must run or a file must be read."""
        if self.source.needs_refresh():
            import asyncio

            return await asyncio.to_thread(self.authorization)
        return self.authorization()

    def refused(self, header: str | None) -> bool:
        """The server answered 401 to ``header``: True when a fresh credential differs (worth one retry).

        A plugin's client certificate counts as the credential too: it may
        come with no Authorization header at all.
        """
        if self.source.current().header != header:
            return True  # renewed meanwhile
        certificate = self._exec_cert
        self.source.invalidate()
        try:
            return self.authorization() != header or self._exec_cert != certificate
        except CredentialsError as err:
            log.error("%s", err)
            return False

    def expiration(self) -> datetime.datetime | None:
        """When kopf must log in again: a little before the token or the client certificate expires.

        kopf loads the client certificate once per login, and drops a login
        equal to one the server refused; the certificate's own end makes it
        log in again in time, and makes the login after a renewal a new one.
        """
        ends = [e for e in (self.source.current().expires, self._certificate_renewal()) if e is not None]
        return min(ends) if ends else None

    def _certificate_renewal(self) -> datetime.datetime | None:
        if not self.cert_file:
            return None
        from cryptography import x509

        try:
            not_after = x509.load_pem_x509_certificate(Path(self.cert_file).read_bytes()).not_valid_after_utc
        except (OSError, ValueError):
            return None  # whoever loads it says what is wrong
        left = (not_after - datetime.datetime.now(datetime.timezone.utc)).total_seconds()
        if left <= 0:
            return None  # expired already: logging in again would not help
        return not_after - datetime.timedelta(seconds=min(EXEC_RENEW_AHEAD_SECONDS, left / 10))

    def describe(self) -> str:
        parts = [self.source.what] if not isinstance(self.source, _Static) or self.source.current().header else []
        if self.cert_file:
            parts.append("client certificate")
        who = " and ".join(parts) or "no credentials (anonymous)"
        trust = "server certificate not verified" if self.insecure else (
            f"server verified with {self.ca_file}" if self.ca_file else "server verified with the system CAs")
        return f"{self.server} with {who}; {trust}" + (f" ({self.origin})" if self.origin else "")

    # -- TLS ------------------------------------------------------------------

    def _take_exec_certificate(self, credential: _Credential) -> None:
        if credential.cert_pem is None or credential.key_pem is None:
            return
        pair = (credential.cert_pem, credential.key_pem)
        if pair != self._exec_cert:
            # Certificate and key in one file, replaced by rename: whoever loads it
            # (a new connection of any client) gets a matching pair.
            pem = pair[0].rstrip(b"\n") + b"\n" + pair[1]
            try:
                if self._exec_cert is None:
                    self.cert_file = self.key_file = _FILES.new("exec-client.pem", pem)
                else:
                    _FILES.replace(self.cert_file, pem)
            except OSError as err:
                raise CredentialsError(
                    f"{self.source.what}: its client certificate cannot be written to a file, which Python's ssl "
                    f"needs ({_unwritable(err)}); {_GIVE_A_TEMPORARY_FOLDER}") from None
            self._exec_cert = pair
            self._generation += 1

    def tls_generation(self) -> tuple:
        """Changes when the client certificate or the CA changed (exec renewal, rotated files)."""
        now = time.monotonic()
        if now - self._tls_checked >= TLS_FILES_RECHECK_SECONDS:
            self._tls_checked = now
            seen = []
            for path in (self.ca_file, self.cert_file, self.key_file):
                try:
                    st = os.stat(path) if path else None
                except OSError:
                    st = None
                seen.append((st.st_ino, st.st_mtime_ns, st.st_size) if st else None)
            self._tls_seen = tuple(seen)
        return (self._generation, self._tls_seen)

    def ssl_context(self) -> ssl.SSLContext | None:
        """For aiohttp; None for a plain-HTTP server. The client certificate is kept with or without verification."""
        if not self.server.startswith("https"):
            return None
        context = ssl.create_default_context(cafile=self.ca_file or None)
        if self.insecure:
            context.check_hostname = False
            context.verify_mode = ssl.CERT_NONE
        if self.cert_file and self.key_file:
            context.load_cert_chain(self.cert_file, self.key_file)
        return context

    # -- the clients ----------------------------------------------------------

    def configuration(self, pool_size: int | None = None):
        """A ``kubernetes.client.Configuration`` that asks these credentials before every request."""
        from kubernetes import client

        conf = client.Configuration()
        conf.host = self.server
        conf.verify_ssl = not self.insecure
        conf.ssl_ca_cert = self.ca_file
        conf.cert_file = self.cert_file
        conf.key_file = self.key_file
        if self.proxy:
            conf.proxy = self.proxy
        if pool_size:
            conf.connection_pool_maxsize = pool_size
        header = self.authorization()
        # TLS material first known once an exec plugin ran (above).
        conf.cert_file, conf.key_file = self.cert_file, self.key_file
        if header is not None:
            conf.api_key = {"BearerToken": header}
            conf.api_key_prefix = {}

            def refresh(configuration) -> None:
                try:
                    configuration.api_key["BearerToken"] = self.authorization() or ""
                except CredentialsError as err:  # keep the last one; the server will tell
                    log.error("%s", err)

            conf.refresh_api_key_hook = refresh
        return conf

    def connection_info(self):
        """What kopf logs in with: the same server, TLS material and header, expiring with an exec credential."""
        import kopf

        header = self.authorization()
        scheme, _, token = (header or "").partition(" ")
        # A plugin's certificate by content: kopf tells a renewed one from the refused one by comparing logins.
        exec_cert = self._exec_cert
        return kopf.ConnectionInfo(
            server=self.server,
            ca_path=self.ca_file,
            insecure=self.insecure,
            scheme=scheme or None,
            token=token or None,
            certificate_path=None if exec_cert else self.cert_file,
            private_key_path=None if exec_cert else self.key_file,
            certificate_data=exec_cert[0] if exec_cert else None,
            private_key_data=exec_cert[1] if exec_cert else None,
            proxy_url=self.proxy,
            expiration=self.expiration(),
        )


# --------------------------------------------------------------------------- loading


def load(kubeconfig: str | None = None, environ: Mapping[str, str] | None = None) -> Credentials:
    """As the controller is told: ``--kubeconfig``, else ``$KUBECONFIG``, else in-cluster, else ~/.kube/config."""
    environ = os.environ if environ is None else environ
    if kubeconfig:
        return from_kubeconfig([kubeconfig])
    if environ.get("KUBECONFIG"):
        return from_kubeconfig([p for p in environ["KUBECONFIG"].split(os.pathsep) if p], merged=True)
    if environ.get("KUBERNETES_SERVICE_HOST"):
        return in_cluster(environ)
    return from_kubeconfig([str(Path.home() / ".kube" / "config")])


def in_cluster(environ: Mapping[str, str] | None = None, directory: str = SERVICE_ACCOUNT_DIR) -> Credentials:
    """A pod's service account: the Service address, its CA, and a token file the kubelet rotates."""
    environ = os.environ if environ is None else environ
    host, port = environ.get("KUBERNETES_SERVICE_HOST"), environ.get("KUBERNETES_SERVICE_PORT")
    if not host or not port:
        raise CredentialsError("in-cluster: KUBERNETES_SERVICE_HOST and KUBERNETES_SERVICE_PORT must both be set "
                               f"(values: {host!r}, {port!r})")
    if ":" in host:
        host = f"[{host}]"
    ca = os.path.join(directory, "ca.crt")
    if not os.path.isfile(ca):
        raise CredentialsError(f"in-cluster: the service-account CA {ca} does not exist")
    source = _TokenFile(os.path.join(directory, "token"), "in-cluster")
    source.current()  # fails now, clearly, when there is no token
    return Credentials(server=f"https://{host}:{port}", ca_file=ca, source=source,
                       origin=f"in-cluster service account ({directory})")


@dataclasses.dataclass
class _Entry:
    """One named cluster/user/context of a kubeconfig, with the folder its relative paths start from."""

    value: Mapping[str, Any]
    base: str
    where: str


def _read_config(path: str) -> Mapping[str, Any]:
    import yaml

    try:
        text = Path(path).read_text()
    except OSError as err:
        raise CredentialsError(f"kubeconfig {path} cannot be read: {err.strerror or err}") from None
    try:
        config = yaml.safe_load(text) or {}
    except yaml.YAMLError as err:
        raise CredentialsError(f"kubeconfig {path} is not valid YAML: {err}") from None
    if not isinstance(config, Mapping):
        raise CredentialsError(f"kubeconfig {path}: a mapping is required at the top (value: {type(config).__name__})")
    return config


def from_kubeconfig(paths: list[str], merged: bool = False) -> Credentials:
    """The current context of one kubeconfig, or of several merged as kubectl merges ``$KUBECONFIG``.

    Merging: the first file to name a cluster, user or context wins, as does
    the first ``current-context``; relative paths are relative to the file
    they are in. Files of the list that do not exist are skipped.
    """
    named: dict[str, dict[str, _Entry]] = {"clusters": {}, "users": {}, "contexts": {}}
    current = None
    read = []
    for path in paths:
        path = os.path.expanduser(path)
        if merged and not os.path.exists(path):
            continue
        config = _read_config(path)
        read.append(path)
        base = os.path.dirname(os.path.abspath(path))
        for section, inner in (("clusters", "cluster"), ("users", "user"), ("contexts", "context")):
            items = config.get(section) or []
            if not isinstance(items, list):
                raise CredentialsError(f"kubeconfig {path}: {section} must be a list (value: {items!r})")
            for i, item in enumerate(items):
                name = item.get("name") if isinstance(item, Mapping) else None
                if not isinstance(name, str) or not name:
                    raise CredentialsError(f"kubeconfig {path}: {section}[{i}].name is required")
                value = item.get(inner)
                if value is None:
                    value = {}
                if not isinstance(value, Mapping):
                    raise CredentialsError(f"kubeconfig {path}: {section}[{name}].{inner} must be a mapping "
                                           f"(value: {value!r})")
                named[section].setdefault(name, _Entry(value, base, f"kubeconfig {path}: {section}[{name}].{inner}"))
        current = current or config.get("current-context")
    if not read:
        raise CredentialsError(f"no kubeconfig found (looked for {', '.join(paths) or 'none'})")
    origin = ", ".join(read)
    if not current:
        raise CredentialsError(f"kubeconfig {origin}: current-context is not set")
    context = named["contexts"].get(current)
    if context is None:
        raise CredentialsError(f"kubeconfig {origin}: current-context {current!r} names no context")
    cluster_name, user_name = context.value.get("cluster"), context.value.get("user")
    cluster = named["clusters"].get(cluster_name) if cluster_name else None
    if cluster is None:
        raise CredentialsError(f"{context.where}.cluster: no cluster of that name (value: {cluster_name!r})")
    user = named["users"].get(user_name) if user_name else None
    if user_name and user is None:
        raise CredentialsError(f"{context.where}.user: no user of that name (value: {user_name!r})")
    credentials = _from_entries(cluster, user)
    credentials.origin = f"kubeconfig {origin}, context {current}"
    return credentials


def _material(entry: _Entry, file_key: str, data_key: str, name: str) -> tuple[str | None, bytes | None]:
    """A certificate or key given inline (base64, preferred as kubectl does) or as a file: (path, content)."""
    data = entry.value.get(data_key)
    if data:
        try:
            content = base64.b64decode(str(data), validate=True)
        except (binascii.Error, ValueError):
            raise CredentialsError(f"{entry.where}.{data_key}: not base64") from None
        try:
            return _FILES.new(name, content), content
        except OSError as err:
            raise CredentialsError(
                f"{entry.where}.{data_key}: cannot be written to a file, which Python's ssl needs "
                f"({_unwritable(err)}); {_GIVE_A_TEMPORARY_FOLDER} or name files in the kubeconfig instead") from None
    path = entry.value.get(file_key)
    if path:
        path = os.path.join(entry.base, os.path.expanduser(str(path)))
        try:
            return path, Path(path).read_bytes()
        except OSError as err:
            raise CredentialsError(f"{entry.where}.{file_key}: {path} cannot be read: {err.strerror or err}") from None
    return None, None


_UNSUPPORTED_USER_FIELDS = {
    "as": "impersonation", "as-uid": "impersonation", "as-groups": "impersonation",
    "as-user-extra": "impersonation",
    "auth-provider": "auth-provider plugins (use an exec credential plugin, e.g. kubelogin for OIDC)",
}


def _from_entries(cluster: _Entry, user: _Entry | None) -> Credentials:
    server = cluster.value.get("server")
    if not isinstance(server, str) or not server.startswith(("https://", "http://")):
        raise CredentialsError(f"{cluster.where}.server: an http(s) URL is required (value: {server!r})")
    if cluster.value.get("tls-server-name"):
        raise CredentialsError(f"{cluster.where}.tls-server-name: not supported (kopf's watches cannot use it); "
                               "point server at a name its certificate covers "
                               f"(value: {cluster.value.get('tls-server-name')!r})")
    insecure = cluster.value.get("insecure-skip-tls-verify") is True
    ca_file, ca = _material(cluster, "certificate-authority", "certificate-authority-data", "ca.crt")
    if ca is not None and not insecure:
        try:
            ssl.create_default_context(cadata=ca.decode(errors="replace"))
        except (ssl.SSLError, ValueError) as err:
            raise CredentialsError(f"{cluster.where}: the certificate authority is not a PEM certificate: {err}") \
                from None
    credentials = Credentials(server=server.rstrip("/"), ca_file=ca_file, insecure=insecure,
                              proxy=cluster.value.get("proxy-url") or None)
    if user is None:
        return credentials
    u = user.value
    for key, what in _UNSUPPORTED_USER_FIELDS.items():
        if u.get(key):
            raise CredentialsError(f"{user.where}.{key}: {what} is not supported")
    cert_file, cert = _material(user, "client-certificate", "client-certificate-data", "client.crt")
    key_file, key = _material(user, "client-key", "client-key-data", "client.key")
    if bool(cert) != bool(key):
        missing = "client-key" if cert else "client-certificate"
        raise CredentialsError(f"{user.where}.{missing}: a client certificate needs both certificate and key")
    if cert_file and key_file:
        try:
            ssl.create_default_context().load_cert_chain(cert_file, key_file)
        except (ssl.SSLError, OSError) as err:
            raise CredentialsError(f"{user.where}: the client certificate and key do not load: {err}") from None
        credentials.cert_file, credentials.key_file = cert_file, key_file
    token, token_file = u.get("token"), u.get("tokenFile")
    basic = u.get("username") or u.get("password")
    if basic and (token or token_file):
        raise CredentialsError(f"{user.where}: username/password and a bearer token are both set; choose one")
    if token_file:
        path = os.path.join(user.base, os.path.expanduser(str(token_file)))
        credentials.source = _TokenFile(path, f"{user.where}.tokenFile", fallback=str(token) if token else None)
    elif token:
        credentials.source = _Static(f"Bearer {token}", "bearer token")
    elif basic:
        pair = f"{u.get('username') or ''}:{u.get('password') or ''}".encode()
        credentials.source = _Static(f"Basic {base64.b64encode(pair).decode()}", "basic auth")
    elif u.get("exec") and not credentials.cert_file:
        # As in client-go, a plugin is asked only when nothing else identifies the user.
        if not isinstance(u["exec"], Mapping):
            raise CredentialsError(f"{user.where}.exec: a mapping is required (value: {u['exec']!r})")
        credentials.source = _ExecPlugin(u["exec"], f"{user.where}.exec", user.base, _cluster_info(cluster, ca))
    credentials.authorization()  # a token file or plugin that cannot serve fails now, not at the first write
    return credentials


def _cluster_info(cluster: _Entry, ca: bytes | None) -> dict[str, Any]:
    """The cluster as an exec plugin is shown it (``provideClusterInfo``)."""
    info: dict[str, Any] = {"server": cluster.value.get("server")}
    if ca is not None:
        info["certificate-authority-data"] = base64.b64encode(ca).decode()
    for key in ("insecure-skip-tls-verify", "proxy-url", "disable-compression"):
        if key in cluster.value:
            info[key] = cluster.value[key]
    for extension in cluster.value.get("extensions") or []:
        if isinstance(extension, Mapping) and extension.get("name") == "client.authentication.k8s.io/exec":
            info["config"] = extension.get("extension")
    return info
