"""A real NetBox on loopback: PostgreSQL, Redis and NetBox's gunicorn, for tests.

NetBox (``NETBOX_VERSION``, from PyPI) is installed into a virtualenv in a cache
outside the repository, ``~/.cache/metal3-ipam/netbox-<version>/`` (or
``$METAL3_IPAM_NETBOX_CACHE``), with a Python of at least 3.12 (see
:func:`find_python`). Its database schema is made once by running NetBox's
migrations (minutes of CPU) and kept there as a ``pg_dump -Fc`` file; every
NetBox started afterwards restores it (a second).
``hack/prepare-netbox.sh`` (run by ``.ci/run``) fills the cache ahead of the tests.

    with NetBox() as nb:
        nb.ensure_key_field()
        prefix = nb.create_prefix("192.0.2.0/24")
        ... nb.url, nb.token ...

Each NetBox lives in its own temporary directory, on free 127.0.0.1 ports:
PostgreSQL (Debian's, as the ``postgres`` user when run by root, its socket in
that directory, fsync off), ``redis-server`` (no persistence) and gunicorn
(one worker, four threads; with ``access_log=True`` each request is logged in
:attr:`NetBox.access_log_path`). Processes run in their own process groups and are
stopped by :meth:`NetBox.stop`, by the context manager and at interpreter exit.
:meth:`NetBox.stop_server` / :meth:`NetBox.start_server` stop and start
gunicorn alone on the same port; :meth:`NetBox.slowed` delays every request;
:meth:`NetBox.paused` freezes gunicorn (connections are accepted, nothing answers).
"""

from __future__ import annotations

import contextlib
import json
import os
import pwd
import re
import secrets
import shutil
import socket
import subprocess
import sys
import threading
import time
import urllib.error
import urllib.request
from pathlib import Path
from typing import Any, Callable, Iterator, Mapping, Sequence

from metal3_ipam.poolkinds.netbox.source import KEY_FIELD
from metal3_ipam.testing import services
from metal3_ipam.testing.controlplane import _LIVE, _free_port, _Lifecycle, _Process, _urlopen
from metal3_ipam.testing.services import ServiceProcesses, cache_root, command_line, frozen, locked

__all__ = [
    "ACCESS_LOG_FORMAT",
    "NETBOX_VERSION",
    "NetBox",
    "NetBoxError",
    "NetBoxUnavailable",
    "cache_dir",
    "ensure_dump",
    "ensure_install",
    "find_python",
    "prepare",
]

NETBOX_VERSION = "4.7.3"
MIN_PYTHON = (3, 12)
MAX_PYTHON = (3, 14)  # the newest NetBox 4.7 declares
DATABASE = "netbox"
ADMIN_USER = "admin"

#: psycopg's ``c`` variant compiles against libpq headers; the ``binary`` one is a wheel.
_REQUIREMENT_SWAPS = {"psycopg[c,pool]": "psycopg[binary,pool]"}


class NetBoxError(RuntimeError):
    """NetBox could not be started or misbehaved."""


class NetBoxUnavailable(NetBoxError):
    """NetBox, PostgreSQL, Redis or a Python for NetBox cannot be had on this machine."""


def _say(line: str) -> None:
    sys.stderr.write(f"[netbox] {line}\n")
    sys.stderr.flush()


# --------------------------------------------------------------------------- where things are


def cache_dir(version: str = NETBOX_VERSION) -> Path:
    """``$METAL3_IPAM_NETBOX_CACHE``, else ``$XDG_CACHE_HOME/metal3-ipam/netbox-<version>`` (~/.cache)."""
    return cache_root("METAL3_IPAM_NETBOX_CACHE", f"netbox-{version}")


def find_python(minimum: tuple[int, int] = MIN_PYTHON, maximum: tuple[int, int] = MAX_PYTHON, *,
                env_var: str = "METAL3_IPAM_NETBOX_PYTHON", what: str = f"NetBox {NETBOX_VERSION}",
                unavailable: type[Exception] = NetBoxUnavailable) -> Path:
    """A Python ``minimum``–``maximum`` (NetBox's: 3.12–3.14) with venv (``services.find_python``): Debian 12's
    own python3 is 3.11, too old for NetBox 4.7."""
    return services.find_python(minimum, maximum, env_var=env_var, what=what, unavailable=unavailable)


def postgres_bindir() -> Path:
    """PostgreSQL's server programs: ``$METAL3_IPAM_PG_BINDIR``, Debian's newest ``/usr/lib/postgresql/N/bin``, PATH."""
    env = os.environ.get("METAL3_IPAM_PG_BINDIR")
    candidates = [Path(env)] if env else []
    debian = sorted(Path("/usr/lib/postgresql").glob("*/bin"),
                    key=lambda p: int(p.parent.name) if p.parent.name.isdigit() else 0, reverse=True)
    candidates += debian
    on_path = shutil.which("initdb")
    if on_path:
        candidates.append(Path(on_path).resolve().parent)
    for d in candidates:
        if all((d / name).is_file() for name in ("initdb", "postgres", "pg_restore", "pg_dump", "pg_isready")):
            return d
    raise NetBoxUnavailable(
        "PostgreSQL's server programs (initdb, postgres, pg_dump, pg_restore) were not found in "
        f"{', '.join(map(str, candidates)) or '/usr/lib/postgresql/*/bin or PATH'}; "
        "install Debian's postgresql (`apt-get install postgresql`) or set METAL3_IPAM_PG_BINDIR"
    )


def redis_server() -> Path:
    found = os.environ.get("METAL3_IPAM_REDIS_SERVER") or shutil.which("redis-server")
    if not found:
        raise NetBoxUnavailable("redis-server was not found on PATH; install Debian's redis-server "
                                "(`apt-get install redis-server`) or set METAL3_IPAM_REDIS_SERVER")
    return Path(found)


def _pg_major(bindir: Path) -> str:
    out = subprocess.run([str(bindir / "postgres"), "--version"], capture_output=True, text=True, check=True)
    m = re.search(r"(\d+)(?:\.\d+)?", out.stdout)
    return m.group(1) if m else "unknown"


def _run(argv: Sequence[str], *, what: str, timeout: float, env: Mapping[str, str] | None = None,
         user: str | None = None, cwd: Path | None = None) -> str:
    return services.run(argv, what=what, timeout=timeout, env=env, user=user, cwd=cwd, error=NetBoxError,
                        unavailable=NetBoxUnavailable)


# --------------------------------------------------------------------------- the virtualenv


def venv_dir(version: str = NETBOX_VERSION) -> Path:
    return cache_dir(version) / "venv"


def _install_stamp(version: str) -> str:
    return f"netbox=={version} " + " ".join(f"{a}->{b}" for a, b in sorted(_REQUIREMENT_SWAPS.items()))


def ensure_install(version: str = NETBOX_VERSION, *, progress: Callable[[str], None] = _say,
                   timeout: float = 900.0) -> Path:
    """NetBox's virtualenv (its directory), installed with pip on first use.

    ``pip install --no-deps netbox==V``, then NetBox's pinned requirements with
    psycopg's ``c`` variant swapped for the ``binary`` wheel.
    """
    venv = venv_dir(version)
    stamp = venv / ".metal3-ipam-installed"
    if stamp.is_file() and stamp.read_text() == _install_stamp(version):
        return venv
    with locked(cache_dir(version), _say):
        if stamp.is_file() and stamp.read_text() == _install_stamp(version):
            return venv
        python = find_python()
        t0 = time.monotonic()
        progress(f"installing NetBox {version} into {venv} with {python} (pip; a minute or two)")
        shutil.rmtree(venv, ignore_errors=True)
        _run([str(python), "-m", "venv", str(venv)], what="python -m venv", timeout=300)
        pip = [str(venv / "bin" / "python"), "-m", "pip", "install", "--quiet", "--disable-pip-version-check"]
        _run([*pip, "--no-deps", f"netbox=={version}"], what=f"pip install netbox=={version}", timeout=timeout)
        requires = _run(
            [str(venv / "bin" / "python"), "-c",
             "import importlib.metadata as m; print('\\n'.join(m.requires('netbox') or ()))"],
            what="reading NetBox's requirements", timeout=60)
        wanted = []
        for line in requires.splitlines():
            line = line.strip()
            if not line or "extra ==" in line:
                continue
            name = line.split("==")[0].split(";")[0].strip()
            if name in _REQUIREMENT_SWAPS:
                line = line.replace(name, _REQUIREMENT_SWAPS[name], 1)
            wanted.append(line)
        requirements = cache_dir(version) / "requirements.txt"
        requirements.write_text("\n".join(wanted) + "\n")
        _run([*pip, "-r", str(requirements)], what="pip install of NetBox's requirements", timeout=timeout)
        stamp.write_text(_install_stamp(version))
        progress(f"NetBox {version} installed in {time.monotonic() - t0:.0f}s")
        return venv


# --------------------------------------------------------------------------- the migrated database


def dump_path(version: str = NETBOX_VERSION) -> Path:
    return cache_dir(version) / f"migrated-pg{_pg_major(postgres_bindir())}.dump"


def ensure_dump(version: str = NETBOX_VERSION, *, progress: Callable[[str], None] = _say,
                timeout: float = 1800.0) -> Path:
    """The ``pg_dump -Fc`` of a database NetBox's migrations have run on, made on first use."""
    path = dump_path(version)
    if path.is_file():
        return path
    venv = ensure_install(version, progress=progress)
    with locked(cache_dir(version), _say):
        if path.is_file():
            return path
        t0 = time.monotonic()
        progress(f"running NetBox {version}'s migrations (minutes of CPU) to make {path}")
        backends = _Backends()
        try:
            backends.start()
            _run([str(venv / "bin" / "netbox"), "migrate", "--no-input"], what="netbox migrate",
                 timeout=timeout, env=backends.netbox_env(), cwd=backends.dir)
            tmp = path.with_suffix(".tmp")
            _run([str(backends.bindir / "pg_dump"), "-Fc", "-h", "127.0.0.1", "-p", str(backends.pg_port),
                  "-U", "postgres", "-f", str(tmp), DATABASE], what="pg_dump", timeout=600)
            tmp.replace(path)
        finally:
            backends.stop()
        progress(f"migrated database kept in {path} ({path.stat().st_size // 1024} KiB) "
                 f"after {time.monotonic() - t0:.0f}s")
        return path


def prepare(version: str = NETBOX_VERSION, *, progress: Callable[[str], None] = _say) -> Path:
    """Everything a NetBox start needs that takes long: the virtualenv and the migrated dump."""
    postgres_bindir()
    redis_server()
    ensure_install(version, progress=progress)
    return ensure_dump(version, progress=progress)


# --------------------------------------------------------------------------- processes

def live_netboxes() -> list["NetBox"]:
    """NetBoxes of this process that are started and not yet stopped."""
    return [nb for nb in list(_LIVE) if isinstance(nb, NetBox) and nb.running]


_DIR_PREFIX = "metal3-ipam-netbox-"
#: gunicorn's access log line with ``NetBox(access_log=True)``: ``METHOD|PATH|QUERY|STATUS|MILLISECONDS``.
ACCESS_LOG_FORMAT = "%(m)s|%(U)s|%(q)s|%(s)s|%(M)s"


def _wait(what: str, check: Callable[[], bool], deadline: float, proc: _Process | None = None,
          interval: float = 0.1) -> None:
    services.wait(what, check, deadline, proc, interval, error=NetBoxError)


class _Backends(ServiceProcesses):
    """PostgreSQL and Redis on free loopback ports, in a temporary directory of their own."""

    dir_prefix = _DIR_PREFIX
    error = NetBoxError

    def __init__(self, *, die_with_parent: bool = True, ready_timeout: float = 120.0, stop_timeout: float = 10.0):
        super().__init__(die_with_parent=die_with_parent, ready_timeout=ready_timeout, stop_timeout=stop_timeout)
        self.bindir = postgres_bindir()
        self._redis = redis_server()
        self.pg_port = 0
        self.redis_port = 0
        self.secret_key = secrets.token_urlsafe(48)
        self.pepper = secrets.token_urlsafe(48)

    @property
    def pg_user(self) -> str | None:
        """Who runs PostgreSQL: ``postgres`` when we are root (it refuses root), else ourselves."""
        return "postgres" if os.geteuid() == 0 else None

    def start(self, *, dump: Path | None = None) -> None:
        self.make_dir()  # PostgreSQL, run as another user, reaches its data and socket through it
        self._start_postgres()
        self._start_redis()
        self._create_database(dump)

    def _start_postgres(self) -> None:
        assert self.dir is not None
        pg = self.dir / "pg"
        (pg / "sock").mkdir(parents=True)
        user = self.pg_user
        if user is not None:
            entry = pwd.getpwnam(user)
            for d in (pg, pg / "sock"):
                os.chown(d, entry.pw_uid, entry.pw_gid)
        _run([str(self.bindir / "initdb"), "-D", str(pg / "data"), "--auth=trust", "-U", "postgres",
              "-E", "UTF8", "--locale=C", "--no-sync"], what="initdb", timeout=300, user=user)
        def launch(port: int) -> _Process:
            self.pg_port = port
            return self.spawn("postgres", [
                str(self.bindir / "postgres"), "-D", str(pg / "data"), "-p", str(port),
                "-c", "listen_addresses=127.0.0.1", "-k", str(pg / "sock"),
                "-c", "fsync=off", "-c", "synchronous_commit=off", "-c", "full_page_writes=off",
                "-c", "max_connections=200",
            ], user=user)

        def ready() -> bool:
            r = subprocess.run([str(self.bindir / "pg_isready"), "-q", "-h", "127.0.0.1",
                                "-p", str(self.pg_port), "-U", "postgres", "-d", "postgres"],
                               stdin=subprocess.DEVNULL, capture_output=True, timeout=10)
            return r.returncode == 0

        self.start_on_free_port("PostgreSQL to accept connections", launch, ready, "could not bind")

    def _start_redis(self) -> None:
        def launch(port: int) -> _Process:
            self.redis_port = port
            return self.spawn("redis", [str(self._redis), "--bind", "127.0.0.1", "--port", str(port),
                                        "--save", "", "--appendonly", "no", "--dir", str(self.dir)])

        def ready() -> bool:
            with socket.create_connection(("127.0.0.1", self.redis_port), timeout=2) as s:
                s.sendall(b"PING\r\n")
                return s.recv(16).startswith(b"+PONG")

        self.start_on_free_port("Redis to answer PING", launch, ready, "already in use")

    def psql_argv(self, program: str) -> list[str]:
        return [str(self.bindir / program), "-h", "127.0.0.1", "-p", str(self.pg_port), "-U", "postgres"]

    def _create_database(self, dump: Path | None) -> None:
        _run([*self.psql_argv("createdb"), DATABASE], what="createdb", timeout=60)
        if dump is not None:
            _run([*self.psql_argv("pg_restore"), "--no-owner", "--exit-on-error", "-d", DATABASE, str(dump)],
                 what=f"pg_restore of {dump}", timeout=300)

    def netbox_env(self) -> dict[str, str]:
        """NetBox's environment: its instance root (holding conf/configuration.py) in this directory."""
        assert self.dir is not None
        root = self.dir / "netbox"
        conf = root / "conf"
        if not (conf / "configuration.py").is_file():
            conf.mkdir(parents=True, exist_ok=True)
            for sub in ("media", "reports", "scripts"):
                (root / sub).mkdir(exist_ok=True)
            (conf / "configuration.py").write_text(
                "# Written by metal3_ipam.testing.netbox for a NetBox on loopback.\n"
                "ALLOWED_HOSTS = ['*']\n"
                f"DATABASES = {{'default': {{'NAME': {DATABASE!r}, 'USER': 'postgres', 'PASSWORD': '', "
                f"'HOST': '127.0.0.1', 'PORT': {self.pg_port}, 'CONN_MAX_AGE': 300}}}}\n"
                f"REDIS = {{'tasks': {{'HOST': '127.0.0.1', 'PORT': {self.redis_port}, 'DATABASE': 0, "
                f"'SSL': False}}, 'caching': {{'HOST': '127.0.0.1', 'PORT': {self.redis_port}, 'DATABASE': 1, "
                "'SSL': False}}\n"
                f"SECRET_KEY = {self.secret_key!r}\n"
                f"API_TOKEN_PEPPERS = {{1: {self.pepper!r}}}\n"
                "CENSUS_REPORTING_ENABLED = False\n"
                "RELEASE_CHECK_URL = None\n"
                "LOGIN_REQUIRED = True\n"
                "MAINTENANCE_MODE = False\n"
            )
        return {"NETBOX_ROOT": str(root), "DJANGO_SETTINGS_MODULE": "netbox.settings"}



# gunicorn's configuration: when ready (before the worker is forked; --preload has
# set Django up) the admin user and its token are made once, written to a file;
# before each request the delay in the file named by METAL3_IPAM_NETBOX_DELAY_FILE is slept
# ("<seconds>", or "<seconds> <METHOD>": only that method's requests).
_GUNICORN_CONF = '''\
import os, time

_DELAY = os.environ["METAL3_IPAM_NETBOX_DELAY_FILE"]
_TOKEN = os.environ["METAL3_IPAM_NETBOX_TOKEN_FILE"]


def pre_request(worker, req):
    try:
        with open(_DELAY) as f:
            seconds, _, method = f.read().partition(" ")
        delay = float(seconds or 0)
    except (OSError, ValueError):
        return
    if delay > 0 and (not method or method == req.method):
        time.sleep(delay)


def when_ready(server):
    if os.path.exists(_TOKEN):
        return
    from django.db import connections
    from users.models import Token, User

    user, _ = User.objects.get_or_create(username=%(admin)r, defaults={"is_superuser": True})
    token = Token(user=user, description="metal3-ipam tests: administrator")
    token.full_clean()
    token.save()
    tmp = _TOKEN + ".tmp"
    with open(tmp, "w") as f:
        f.write(f"nbt_{token.key}.{token.token}")
    os.replace(tmp, _TOKEN)
    connections.close_all()
'''


class NetBox(_Lifecycle):
    """A NetBox on 127.0.0.1: PostgreSQL + Redis + gunicorn, from the cached install and dump.

    Attributes once started: ``url`` (``http://127.0.0.1:PORT``), ``token``
    (``nbt_<key>.<secret>`` of a superuser; sent as ``Bearer <token>``),
    ``startup_seconds``.
    """

    def __init__(self, *, version: str = NETBOX_VERSION, ready_timeout: float = 180.0,
                 stop_timeout: float = 10.0, die_with_parent: bool = True, progress: Callable[[str], None] = _say,
                 access_log: bool = False):
        self.version = version
        self.access_log = access_log
        self.ready_timeout = ready_timeout
        self.stop_timeout = stop_timeout
        self._die_with_parent = die_with_parent
        self._progress = progress
        self._backends: _Backends | None = None
        self._lock = threading.RLock()
        self._port = 0
        self._tls: tuple[Path, Path] | None = None
        self.venv: Path | None = None
        self.url: str | None = None
        self.token: str | None = None
        self.startup_seconds: dict[str, float] = {}
        self.running = False

    # -- lifecycle -------------------------------------------------------------------

    def __enter__(self) -> "NetBox":
        return super().__enter__()

    @property
    def dir(self) -> Path | None:
        return self._backends.dir if self._backends else None

    def start(self) -> "NetBox":
        return super().start()

    def _start(self) -> None:
        t0 = time.monotonic()
        self.venv = ensure_install(self.version, progress=self._progress)
        dump = ensure_dump(self.version, progress=self._progress)
        self.startup_seconds["prepare"] = time.monotonic() - t0
        t1 = time.monotonic()
        self._backends = _Backends(die_with_parent=self._die_with_parent, ready_timeout=self.ready_timeout,
                                   stop_timeout=self.stop_timeout)
        self._backends.start(dump=dump)
        self.startup_seconds["database"] = time.monotonic() - t1
        assert self.dir is not None
        (self.dir / "gunicorn.conf.py").write_text(_GUNICORN_CONF % {"admin": ADMIN_USER})
        t2 = time.monotonic()
        self._port = _free_port()
        self.start_server()
        self.token = (self.dir / "token").read_text().strip()
        self.startup_seconds["netbox"] = time.monotonic() - t2
        self.startup_seconds["total"] = time.monotonic() - t0

    def _gunicorn(self, name: str, port: int, tls: tuple[Path, Path] | None) -> _Process:
        assert self._backends is not None and self.dir is not None and self.venv is not None
        argv = [str(self.venv / "bin" / "gunicorn"), "--bind", f"127.0.0.1:{port}", "--workers", "1",
                "--threads", "4", "--preload", "--timeout", "300", "--graceful-timeout", "5",
                "--config", str(self.dir / "gunicorn.conf.py"), "--error-logfile", "-"]
        if tls is not None:
            argv += ["--certfile", str(tls[0]), "--keyfile", str(tls[1])]
        if self.access_log:
            argv += ["--access-logfile", str(self.access_log_path), "--access-logformat", ACCESS_LOG_FORMAT]
        env = {
            **self._backends.netbox_env(),
            "METAL3_IPAM_NETBOX_DELAY_FILE": str(self.dir / "delay"),
            "METAL3_IPAM_NETBOX_TOKEN_FILE": str(self.dir / "token"),
        }
        return self._backends.spawn(name, [*argv, "netbox.wsgi"], env=env)

    def _wait_ready(self, proc: _Process, url: str, context=None) -> None:
        def ready() -> bool:
            token = (self.dir / "token").read_text().strip()  # type: ignore[union-attr]
            req = urllib.request.Request(url + "/api/status/", headers={"Authorization": f"Bearer {token}"})
            with _urlopen(req, timeout=5, context=context) as resp:
                return resp.status == 200

        _wait(f"NetBox at {url} to answer /api/status/", ready, time.monotonic() + self.ready_timeout, proc,
              interval=0.25)

    def start_server(self) -> None:
        """Start gunicorn (again), on the same port as before: clients keep their URL."""
        with self._lock:
            assert self._backends is not None
            if self.server_running:
                return
            t0 = time.monotonic()
            proc = self._gunicorn("gunicorn", self._port, None)
            self.url = f"http://127.0.0.1:{self._port}"
            self._wait_ready(proc, self.url)
            self.startup_seconds["last server start"] = time.monotonic() - t0

    def stop_server(self) -> None:
        """Stop gunicorn alone (PostgreSQL and Redis stay): connections to ``url`` are refused."""
        with self._lock:
            if self._backends is not None:
                self._backends.stop_one("gunicorn")

    @property
    def access_log_path(self) -> Path:
        """Where gunicorn logs each request when started with ``access_log``: one line per request,
        ``ACCESS_LOG_FORMAT`` (method, path, query, status, milliseconds), appended across restarts."""
        assert self.dir is not None
        return self.dir / "access.log"

    @property
    def server_running(self) -> bool:
        return self._backends is not None and self._backends.alive("gunicorn")

    @contextlib.contextmanager
    def slowed(self, seconds: float, method: str | None = None) -> Iterator[None]:
        """Every request (of every gunicorn of this NetBox; only ``method``'s if named) waits ``seconds``
        before NetBox handles it; one begun before the block ends still waits, then is carried out."""
        assert self.dir is not None
        delay = self.dir / "delay"
        delay.write_text(f"{float(seconds)} {method}" if method else str(float(seconds)))
        try:
            yield
        finally:
            delay.unlink(missing_ok=True)

    @contextlib.contextmanager
    def paused(self) -> Iterator[None]:
        """gunicorn frozen (SIGSTOP): the kernel accepts connections, NetBox answers nothing until resumed."""
        assert self._backends is not None
        with frozen(self._backends.procs["gunicorn"]):
            yield

    def serve_tls(self, authority=None) -> tuple[str, bytes]:
        """A second gunicorn of this NetBox serving HTTPS on another port: ``(url, CA certificate PEM)``."""
        from metal3_ipam.testing.certs import Authority

        with self._lock:
            assert self.dir is not None and self._backends is not None
            authority = authority or Authority.create("metal3-ipam-netbox-test-ca")
            authority.issue(self.dir / "tls", hosts=("127.0.0.1",), common_name="netbox")
            tls = (self.dir / "tls" / "tls.crt", self.dir / "tls" / "tls.key")
            port = _free_port()
            proc = self._gunicorn("gunicorn-tls", port, tls)
            url = f"https://127.0.0.1:{port}"
            import ssl

            self._wait_ready(proc, url, ssl.create_default_context(cadata=authority.pem.decode()))
            return url, authority.pem

    def stop(self) -> None:
        """Stop every process of this NetBox and remove its directory."""
        with self._lock:
            if self._backends is not None:
                self._backends.stop()
            self.running = False
            _LIVE.discard(self)

    def pids(self) -> dict[str, int]:
        """The processes of this NetBox by name (PostgreSQL, Redis, gunicorn): each leads a session of its
        own, its children (gunicorn's worker, PostgreSQL's backends) in it."""
        return {name: proc.pid for name, proc in self._backends.procs.items()} if self._backends else {}

    def format_logs(self, lines: int = 40) -> str:
        if self._backends is None:
            return "<not started>"
        parts = []
        for name, proc in self._backends.procs.items():
            parts.append(f"--- {name} (pid {proc.pid}) ---\n{proc.tail(lines)}")
        for name, text in self._backends.last_logs.items():
            parts.append(f"--- {name} (stopped) ---\n{text}")
        return "\n".join(parts)

    # -- the REST API, as an administrator ------------------------------------------

    def api(self, method: str, path: str, body: object = None, *, token: str | None = None,
            expect: Sequence[int] = (200, 201, 204)) -> Any:
        """One request to NetBox's REST API (``path`` under ``/api/``); the decoded answer.

        Raises NetBoxError naming the request when the status is not in ``expect``.
        """
        assert self.url is not None
        data = json.dumps(body).encode() if body is not None else None
        req = urllib.request.Request(
            f"{self.url}/api/{path.lstrip('/')}", data=data, method=method,
            headers={"Authorization": f"Bearer {token or self.token}", "Accept": "application/json",
                     "Content-Type": "application/json"})
        try:
            with _urlopen(req, timeout=60) as resp:
                status, raw = resp.status, resp.read()
        except urllib.error.HTTPError as exc:
            status, raw = exc.code, exc.read()
        decoded = json.loads(raw) if raw else None
        if status not in expect:
            raise NetBoxError(f"{method} /api/{path.lstrip('/')} answered {status}: {decoded!r}")
        return decoded

    def create_vrf(self, name: str, rd: str | None = None, *, enforce_unique: bool = True) -> dict:
        return self.api("POST", "ipam/vrfs/", {"name": name, "rd": rd, "enforce_unique": enforce_unique})

    def create_prefix(self, prefix: str, *, vrf: int | None = None, is_pool: bool = False,
                      status: str = "active", **fields: Any) -> dict:
        return self.api("POST", "ipam/prefixes/",
                        {"prefix": prefix, "vrf": vrf, "is_pool": is_pool, "status": status, **fields})

    def create_ip_range(self, start: str, end: str, *, vrf: int | None = None, status: str = "active",
                        **fields: Any) -> dict:
        return self.api("POST", "ipam/ip-ranges/",
                        {"start_address": start, "end_address": end, "vrf": vrf, "status": status, **fields})

    def create_ip_address(self, address: str, *, vrf: int | None = None, status: str = "active",
                          **fields: Any) -> dict:
        return self.api("POST", "ipam/ip-addresses/", {"address": address, "vrf": vrf, "status": status, **fields})

    def ensure_key_field(self, name: str = KEY_FIELD) -> dict:
        """The unique text custom field on IP addresses that carries allocation keys (created once)."""
        found = self.api("GET", f"extras/custom-fields/?name={name}")["results"]
        if found:
            return found[0]
        return self.api("POST", "extras/custom-fields/", {
            "name": name, "label": "metal3-ipam key", "type": "text", "object_types": ["ipam.ipaddress"],
            "unique": True, "required": False, "filter_logic": "exact",
            "description": "metal3-ipam: <owner>/<key> of the claim this address was allocated for",
        })

    def make_token(self, username: str, permissions: Sequence[tuple[Sequence[str], Sequence[str]]] = (), *,
                   write_enabled: bool = True) -> str:
        """A new user holding ``permissions`` (``(object types, actions)`` pairs) and a token of theirs."""
        user = self.api("POST", "users/users/", {"username": username, "password": "Aa1" + secrets.token_hex(16)})
        for i, (object_types, actions) in enumerate(permissions):
            self.api("POST", "users/permissions/", {
                "name": f"{username}-{i}", "object_types": list(object_types), "actions": list(actions),
                "users": [user["id"]], "enabled": True})
        token = self.api("POST", "users/tokens/", {"user": user["id"], "write_enabled": write_enabled})
        return f"nbt_{token['key']}.{token['token']}"


# --------------------------------------------------------------------------- command line


def main(argv: Sequence[str] | None = None) -> int:
    @contextlib.contextmanager
    def serve() -> Iterator[str]:
        with NetBox() as nb:
            yield f"NETBOX_URL={nb.url}\nNETBOX_TOKEN={nb.token}\n# {nb.startup_seconds}"

    return command_line(argv, prog="python -m metal3_ipam.testing.netbox",
                        description="A real NetBox on loopback for the tests.",
                        prepare_help="install NetBox and make the migrated database dump, in the cache",
                        run_help="start a NetBox, print its URL and token, stop on Ctrl-C",
                        prepare=lambda: f"{venv_dir()} and {prepare()}", where=cache_dir, serve=serve,
                        error=NetBoxError, say=_say)

if __name__ == "__main__":
    sys.exit(main())
