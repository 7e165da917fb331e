"""A real OpenStack on loopback: MariaDB, Keystone and Neutron, for tests.

Neutron (``NEUTRON_VERSION``) and Keystone (``KEYSTONE_VERSION``) are installed
from PyPI, with PyMySQL, their dependencies held at the versions of
:mod:`metal3_ipam.testing.openstack_constraints`, into one virtualenv in a cache
outside the repository, ``~/.cache/metal3-ipam/openstack-neutron<N>-keystone<K>/``
(or ``$METAL3_IPAM_OPENSTACK_CACHE``), with a Python 3.11–3.13 (see
:func:`find_python`). Their schemas are made once (``keystone-manage db_sync``
and ``bootstrap`` with cheap password hashing, ``neutron-db-manage upgrade
heads``) on a MariaDB of their own and kept there as ``mariadb-dump`` files;
every start restores them. ``hack/prepare-openstack.sh`` (run by
``hack/test.sh``) fills the cache ahead of the tests.

    with OpenStack() as os_:
        secret_data = os_.clouds_yaml(user="member")            # bytes of a clouds.yaml
        os_.neutron("POST", "floatingips", {"floatingip": {...}}, user="member")
        os_.floating_ips(tags="x")                              # Neutron's answer, raw
        ... os_.auth_url, os_.neutron_url, os_.network["id"] ...

Each OpenStack lives in its own temporary directory, on free 127.0.0.1 ports:
Debian's MariaDB (``mariadbd``, as the ``mysql`` user when run by root; its own
datadir, no durability), then Keystone's and Neutron's WSGI applications
(``keystone.wsgi.api:application``, ``neutron.wsgi.api:application``) each
served by the standard library's threaded WSGI server in a subprocess. Keystone:
fernet tokens, ``[cache] backend = oslo_cache.dict``. Neutron: ML2 with flat
networks and no mechanism drivers, the ``router`` service plugin, no message
broker (``transport_url = fake:/``), ``auth_strategy = keystone`` with a
``neutron`` service user and no token cache (``token_cache_time = -1``: a
revoked token or application credential is refused at once). Processes run in
their own process groups and are stopped by :meth:`OpenStack.stop`, by the
context manager and at interpreter exit.

At start it makes, through Keystone's API: the ``service`` project and the
``neutron`` user, the ``identity`` and ``network`` services and their endpoints
in ``RegionOne``, a project (``project_name``) with a ``member`` user (role
``member``) and the ``admin`` user (role ``admin`` on it too: a project-scoped
admin is Neutron's administrator; a system-scoped one is not); through
Neutron's: an external flat network (``public``) with an IPv4 subnet whose
allocation pool is ``pool`` (default ``203.0.113.10``–``203.0.113.29``).

For the tests: :meth:`OpenStack.clouds_yaml` (password or application
credential), :meth:`OpenStack.token`, :meth:`OpenStack.neutron` and
:meth:`OpenStack.keystone` (raw requests as a user, urllib only: nothing the
controller uses), :meth:`OpenStack.floating_ips`, :meth:`OpenStack.set_quota`,
:meth:`OpenStack.set_neutron_policy`, :meth:`OpenStack.create_external_network`;
:meth:`OpenStack.stop_neutron` / :meth:`OpenStack.start_neutron` (the same
port), :meth:`OpenStack.paused` (Neutron SIGSTOPped); :meth:`OpenStack.reset`
back to the state after start.

Measured on a 2-core machine shared with other work: cold (an empty cache,
MariaDB installed) 1.5–2.5 minutes: pip 60–100 s (370 MB), the migrations and
dumps 22–45 s (the dumps 41 KiB and 109 KiB). Warm (from the cache) 7 s to a
network ready for floating IPs when the machine is idle, up to 20 s when it is
busy (``startup_seconds`` tells each part: MariaDB's install-db and restore
2–9 s, Keystone's first answer 3–4 s, the identities and Neutron's first
answer 2 s; Neutron and Keystone load at the same time). Neutron restarts
(:meth:`OpenStack.stop_neutron`, :meth:`OpenStack.start_neutron`) in about 3 s.
MariaDB, Keystone and Neutron hold about 420 MB of memory (100, 140, 180).
"""

from __future__ import annotations

import base64
import contextlib
import hashlib
import json
import os
import pwd
import secrets
import shutil
import subprocess
import sys
import threading
import time
import urllib.error
import urllib.parse
import urllib.request
from pathlib import Path
from typing import Any, Callable, Iterator, Mapping, Sequence

from metal3_ipam.testing import services
from metal3_ipam.testing.controlplane import _LIVE, _free_port, _Lifecycle, _Process, _urlopen
from metal3_ipam.testing.openstack_constraints import CONSTRAINTS
from metal3_ipam.testing.services import ServiceProcesses, cache_root, command_line, frozen, locked

__all__ = [
    "KEYSTONE_VERSION",
    "NEUTRON_VERSION",
    "OpenStack",
    "OpenStackError",
    "OpenStackUnavailable",
    "cache_dir",
    "ensure_dumps",
    "ensure_install",
    "find_python",
    "prepare",
]

NEUTRON_VERSION = "29.0.0"
KEYSTONE_VERSION = "30.0.0"
#: The two services and the database driver; their dependencies are held by CONSTRAINTS.
REQUIREMENTS = (f"neutron=={NEUTRON_VERSION}", f"keystone=={KEYSTONE_VERSION}", "PyMySQL==1.2.4")
MIN_PYTHON = (3, 11)
MAX_PYTHON = (3, 13)  # what Neutron 29 and Keystone 30 declare
REGION = "RegionOne"
DOMAIN = "Default"
#: The bootstrap administrator, made once into the cached dump (loopback only).
ADMIN_USER = "admin"
ADMIN_PASSWORD = "metal3-ipam-admin"
#: bcrypt's least: Keystone's default (12) costs 250–300 ms per password token.
PASSWORD_HASH_ROUNDS = 4
DATABASES = ("keystone", "neutron")


class OpenStackError(RuntimeError):
    """The OpenStack could not be started, or answered what was not expected."""


class OpenStackUnavailable(OpenStackError):
    """MariaDB, Neutron, Keystone or a Python for them cannot be had on this machine."""


def _say(line: str) -> None:
    sys.stderr.write(f"[openstack] {line}\n")
    sys.stderr.flush()


def _run(argv: Sequence[str], *, what: str, timeout: float, env: Mapping[str, str] | None = None,
         user: str | None = None, cwd: Path | None = None) -> str:
    return services.run(argv, what=what, timeout=timeout, env=env, user=user, cwd=cwd, error=OpenStackError,
                        unavailable=OpenStackUnavailable)


def _wait(what: str, check: Callable[[], bool], deadline: float, proc: _Process | None = None,
          interval: float = 0.1) -> None:
    services.wait(what, check, deadline, proc, interval, error=OpenStackError)


# --------------------------------------------------------------------------- where things are


def cache_dir() -> Path:
    """``$METAL3_IPAM_OPENSTACK_CACHE``, else ``$XDG_CACHE_HOME/metal3-ipam/openstack-neutron<N>-keystone<K>``."""
    return cache_root("METAL3_IPAM_OPENSTACK_CACHE", f"openstack-neutron{NEUTRON_VERSION}-keystone{KEYSTONE_VERSION}")


def find_python() -> Path:
    """A Python 3.11–3.13 with venv: ``$METAL3_IPAM_OPENSTACK_PYTHON``, python3.1x on PATH, pyenv's versions."""
    return services.find_python(MIN_PYTHON, MAX_PYTHON, env_var="METAL3_IPAM_OPENSTACK_PYTHON",
                 what=f"Neutron {NEUTRON_VERSION} and Keystone {KEYSTONE_VERSION}", unavailable=OpenStackUnavailable)


_MARIADB_PROGRAMS = {"server": ("mariadbd", "mysqld"), "install_db": ("mariadb-install-db", "mysql_install_db"),
                     "client": ("mariadb", "mysql"), "dump": ("mariadb-dump", "mysqldump")}


def mariadb_programs() -> dict[str, Path]:
    """MariaDB's server, ``install-db``, client and dump programs (Debian's ``mariadb-server``), or
    :class:`OpenStackUnavailable` naming what is missing."""
    found: dict[str, Path] = {}
    missing = []
    for key, names in _MARIADB_PROGRAMS.items():
        for name in names:
            path = shutil.which(name, path=os.environ.get("PATH", "") + ":/usr/sbin:/usr/bin")
            if path:
                found[key] = Path(path)
                break
        else:
            missing.append(names[0])
    if missing:
        raise OpenStackUnavailable(
            f"MariaDB's programs {', '.join(missing)} were not found on PATH or in /usr/sbin; install Debian's "
            "mariadb-server (`apt-get install mariadb-server`, or `bash hack/prepare-openstack.sh` as root)")
    return found


def _mariadb_version(server: Path) -> str:
    out = _run([str(server), "--version"], what="mariadbd --version", timeout=30)
    for word in out.split():
        parts = word.split(".")
        if len(parts) >= 2 and parts[0].isdigit() and parts[1].isdigit():
            return f"{parts[0]}.{parts[1]}"
    return "unknown"


# --------------------------------------------------------------------------- the virtualenv


def venv_dir() -> Path:
    return cache_dir() / "venv"


def ensure_install(*, progress: Callable[[str], None] = _say, timeout: float = 1200.0) -> Path:
    """The virtualenv holding Neutron, Keystone and PyMySQL (its directory), installed with pip on first use."""
    venv = venv_dir()
    stamp = venv / ".metal3-ipam-installed"
    wanted = " ".join(REQUIREMENTS) + " -c " + hashlib.sha256(" ".join(CONSTRAINTS).encode()).hexdigest()[:16]
    if stamp.is_file() and stamp.read_text() == wanted:
        return venv
    with locked(cache_dir(), _say):
        if stamp.is_file() and stamp.read_text() == wanted:
            return venv
        python = find_python()
        t0 = time.monotonic()
        progress(f"installing {' '.join(REQUIREMENTS)} into {venv} with {python} (pip; one or two minutes)")
        shutil.rmtree(venv, ignore_errors=True)
        constraints = cache_dir() / "constraints.txt"
        constraints.write_text("\n".join(CONSTRAINTS) + "\n")
        _run([str(python), "-m", "venv", str(venv)], what="python -m venv", timeout=300)
        _run([str(venv / "bin" / "python"), "-m", "pip", "install", "--quiet", "--disable-pip-version-check",
              "-c", str(constraints), *REQUIREMENTS], what=f"pip install {' '.join(REQUIREMENTS)}", timeout=timeout)
        frozen = _run([str(venv / "bin" / "python"), "-m", "pip", "freeze", "--disable-pip-version-check"],
                      what="pip freeze", timeout=120)
        (cache_dir() / "installed.txt").write_text(frozen)
        stamp.write_text(wanted)
        progress(f"Neutron and Keystone installed in {time.monotonic() - t0:.0f}s (versions in installed.txt)")
        return venv


# --------------------------------------------------------------------------- the migrated schemas


def dump_paths() -> dict[str, Path]:
    """Where the dump of each database lives: ``migrated-mariadb<version>-<database>.sql``."""
    version = _mariadb_version(mariadb_programs()["server"])
    return {db: cache_dir() / f"migrated-mariadb{version}-{db}.sql" for db in DATABASES}


def ensure_dumps(*, progress: Callable[[str], None] = _say, timeout: float = 900.0) -> dict[str, Path]:
    """The ``mariadb-dump`` of Keystone's and Neutron's databases after their migrations, made on first use.

    Keystone's holds what ``keystone-manage bootstrap`` made (the ``admin`` user,
    project and role, the ``member``, ``reader``, ``manager`` and ``service`` roles,
    ``RegionOne``), its password hashed with :data:`PASSWORD_HASH_ROUNDS`
    rounds; nothing in it depends on a port.
    """
    paths = dump_paths()
    if all(p.is_file() for p in paths.values()):
        return paths
    venv = ensure_install(progress=progress)
    with locked(cache_dir(), _say):
        if all(p.is_file() for p in paths.values()):
            return paths
        t0 = time.monotonic()
        progress("migrating Keystone's and Neutron's databases (about a minute) to make "
                 + ", ".join(str(p) for p in paths.values()))
        db = _MariaDB(die_with_parent=True, ready_timeout=120, stop_timeout=10)
        try:
            db.start()
            conf = db.dir / "conf"
            conf.mkdir()
            keystone_conf = conf / "keystone.conf"
            keystone_conf.write_text(_keystone_conf(db.url("keystone"), db.dir))
            _fernet_keys(db.dir / "fernet-keys")  # bootstrap reads them; nothing it writes depends on them
            _fernet_keys(db.dir / "credential-keys")
            neutron_conf = conf / "neutron.conf"
            neutron_conf.write_text(_neutron_conf(db.url("neutron"), db.dir, venv, keystone_url="http://127.0.0.1:9",
                                                  neutron_password="unused"))
            manage = [str(venv / "bin" / "keystone-manage"), "--config-file", str(keystone_conf)]
            _run([*manage, "db_sync"], what="keystone-manage db_sync", timeout=timeout)
            _run([*manage, "bootstrap", "--bootstrap-username", ADMIN_USER, "--bootstrap-password", ADMIN_PASSWORD,
                  "--bootstrap-project-name", "admin", "--bootstrap-role-name", "admin",
                  "--bootstrap-region-id", REGION],
                 what="keystone-manage bootstrap", timeout=timeout)
            _run([str(venv / "bin" / "neutron-db-manage"), "--config-file", str(neutron_conf), "upgrade", "heads"],
                 what="neutron-db-manage upgrade heads", timeout=timeout)
            for name, path in paths.items():
                tmp = path.with_suffix(".tmp")
                _run([*db.client_argv("dump"), "--single-transaction", "--skip-comments", "--skip-dump-date",
                      f"--result-file={tmp}", name], what=f"mariadb-dump {name}", timeout=300)
                tmp.replace(path)
        finally:
            db.stop()
        sizes = ", ".join(f"{p.name} {p.stat().st_size // 1024} KiB" for p in paths.values())
        progress(f"migrated databases kept ({sizes}) after {time.monotonic() - t0:.0f}s")
        return paths


def prepare(*, progress: Callable[[str], None] = _say) -> dict[str, Path]:
    """Everything an OpenStack start needs that takes long: the virtualenv and the migrated dumps."""
    mariadb_programs()
    ensure_install(progress=progress)
    return ensure_dumps(progress=progress)


# --------------------------------------------------------------------------- configuration


def _keystone_conf(database: str, directory: Path) -> str:
    return f"""\
# Written by metal3_ipam.testing.openstack for a Keystone on loopback.
[DEFAULT]
use_stderr = true
[database]
connection = {database}
[token]
provider = fernet
expiration = 86400
[fernet_tokens]
key_repository = {directory / "fernet-keys"}
[fernet_receipts]
key_repository = {directory / "fernet-keys"}
[credential]
key_repository = {directory / "credential-keys"}
[cache]
enabled = true
backend = oslo_cache.dict
[identity]
password_hash_rounds = {PASSWORD_HASH_ROUNDS}
"""


def _neutron_conf(database: str, directory: Path, venv: Path, *, keystone_url: str, neutron_password: str,
                  policy_file: Path | None = None) -> str:
    policy = f"[oslo_policy]\npolicy_file = {policy_file}\n" if policy_file is not None else ""
    return f"""\
# Written by metal3_ipam.testing.openstack for a Neutron on loopback: no agents, no message broker.
[DEFAULT]
use_stderr = true
core_plugin = ml2
service_plugins = router
transport_url = fake:/
auth_strategy = keystone
api_paste_config = {venv / "etc" / "neutron" / "api-paste.ini"}
state_path = {directory / "neutron-state"}
notify_nova_on_port_status_changes = false
notify_nova_on_port_data_changes = false
[database]
connection = {database}
[oslo_concurrency]
lock_path = {directory / "neutron-locks"}
[oslo_messaging_notifications]
driver = noop
[ml2]
type_drivers = flat
tenant_network_types =
mechanism_drivers =
extension_drivers =
[ml2_type_flat]
flat_networks = *
[keystone_authtoken]
www_authenticate_uri = {keystone_url}
auth_url = {keystone_url}
auth_type = password
project_domain_name = {DOMAIN}
user_domain_name = {DOMAIN}
project_name = service
username = neutron
password = {neutron_password}
token_cache_time = -1
{policy}"""


def _fernet_keys(directory: Path) -> None:
    """A key repository as ``keystone-manage fernet_setup`` makes one: key 0 staged, key 1 primary."""
    directory.mkdir(mode=0o700)
    for name in ("0", "1"):
        path = directory / name
        path.write_bytes(base64.urlsafe_b64encode(os.urandom(32)))
        path.chmod(0o600)


# The WSGI server of Keystone and of Neutron: the standard library's, one thread per
# connection. The socket is bound before the application is imported (seconds), so a
# client connecting early waits for the answer instead of being refused.
_SERVE = '''\
import importlib, socketserver, sys
from wsgiref import simple_server

target, port = sys.argv[1], int(sys.argv[2])
del sys.argv[1:]  # the applications read their options from the command line


class Server(socketserver.ThreadingMixIn, simple_server.WSGIServer):
    daemon_threads = True
    allow_reuse_address = True
    request_queue_size = 128


class Handler(simple_server.WSGIRequestHandler):
    def address_string(self):
        return self.client_address[0]


server = Server(("127.0.0.1", port), Handler, bind_and_activate=True)
module, _, attribute = target.partition(":")
server.set_app(getattr(importlib.import_module(module), attribute))
sys.stderr.write(f"serving {target} on 127.0.0.1:{port}\\n")
sys.stderr.flush()
server.serve_forever()
'''


# --------------------------------------------------------------------------- processes


_DIR_PREFIX = "metal3-ipam-openstack-"


def live_openstacks() -> list["OpenStack"]:
    """OpenStacks of this process that are started and not yet stopped."""
    return [o for o in list(_LIVE) if isinstance(o, OpenStack) and o.running]


class _MariaDB(ServiceProcesses):
    """MariaDB on a free loopback port with a datadir of its own, in a temporary directory of its own."""

    dir_prefix = _DIR_PREFIX
    error = OpenStackError

    def __init__(self, *, die_with_parent: bool, ready_timeout: float, stop_timeout: float):
        super().__init__(die_with_parent=die_with_parent, ready_timeout=ready_timeout, stop_timeout=stop_timeout)
        self.programs = mariadb_programs()
        self.port = 0

    @property
    def user(self) -> str | None:
        """Who runs MariaDB: ``mysql`` when we are root, else ourselves."""
        return "mysql" if os.geteuid() == 0 else None

    def url(self, database: str) -> str:
        return f"mysql+pymysql://root@127.0.0.1:{self.port}/{database}?charset=utf8mb4"

    def _options(self) -> list[str]:
        assert self.dir is not None
        data = self.dir / "mariadb" / "data"
        # No durability (a test database), small files, the character set OpenStack expects.
        return ["--no-defaults", f"--datadir={data}", "--innodb-log-file-size=8M",
                "--innodb-data-file-path=ibdata1:4M:autoextend", "--innodb-buffer-pool-size=64M",
                "--innodb-flush-log-at-trx-commit=0", "--innodb-doublewrite=0", "--innodb-flush-method=nosync",
                "--innodb-file-per-table=0", "--skip-log-bin", "--skip-name-resolve",
                "--character-set-server=utf8mb4", "--collation-server=utf8mb4_general_ci"]

    def start(self, dumps: Mapping[str, Path] | None = None) -> None:
        top = self.make_dir() / "mariadb"  # MariaDB, run as another user, reaches its datadir through it
        top.mkdir()
        user = self.user
        if user is not None:
            try:
                entry = pwd.getpwnam(user)
            except KeyError:
                raise OpenStackUnavailable(f"MariaDB refuses to run as root and there is no {user!r} user to run it "
                                           "as; install Debian's mariadb-server, which makes it") from None
            os.chown(top, entry.pw_uid, entry.pw_gid)
        _run([str(self.programs["install_db"]), *self._options(), "--auth-root-authentication-method=normal",
              "--skip-test-db", *([f"--user={user}"] if user else [])],
             what="mariadb-install-db", timeout=300)

        def launch(port: int) -> _Process:
            self.port = port
            return self.spawn("mariadb", [
                str(self.programs["server"]), *self._options(), f"--port={self.port}", "--bind-address=127.0.0.1",
                f"--socket={top / 'sock'}", f"--pid-file={top / 'pid'}", "--max-connections=500",
                *([f"--user={user}"] if user else [])])

        self.start_on_free_port("MariaDB to accept connections", launch, self._ready, "Address already in use")
        statements = []
        for name in DATABASES:
            statements.append(f"CREATE DATABASE {name} CHARACTER SET utf8mb4; USE {name};")
            if dumps is not None:
                statements.append(f"SOURCE {dumps[name]};")
        _run([*self.client_argv("client"), "--batch", "-e", " ".join(statements)],
             what="creating (and restoring) the databases", timeout=300)

    def client_argv(self, program: str) -> list[str]:
        return [str(self.programs[program]), "--protocol=TCP", "-h", "127.0.0.1", f"--port={self.port}", "-u", "root"]

    def _ready(self) -> bool:
        r = subprocess.run([*self.client_argv("client"), "--batch", "-e", "SELECT 1"], stdin=subprocess.DEVNULL,
                           capture_output=True, timeout=10)
        return r.returncode == 0



class OpenStack(_Lifecycle):
    """Keystone and Neutron on 127.0.0.1 over one MariaDB, from the cached install and dumps.

    Parameters: ``project_name`` of the project tests work in; ``cidr``, ``pool``
    (first and last address) and ``gateway`` of the external network's subnet.

    Attributes once started: ``keystone_url`` (``http://127.0.0.1:PORT``),
    ``auth_url`` (its ``/v3``), ``neutron_url``, ``region``, ``project`` and
    ``users`` (Keystone's objects; each user with its ``password``), ``network``
    and ``subnet`` (Neutron's), ``startup_seconds``.
    """

    def __init__(self, *, project_name: str = "metal3", cidr: str = "203.0.113.0/24",
                 pool: tuple[str, str] = ("203.0.113.10", "203.0.113.29"), gateway: str | None = "203.0.113.1",
                 ready_timeout: float = 180.0, stop_timeout: float = 10.0, die_with_parent: bool = True,
                 progress: Callable[[str], None] = _say):
        self.project_name = project_name
        self.cidr = cidr
        self.pool = pool
        self.gateway = gateway
        self.ready_timeout = ready_timeout
        self.stop_timeout = stop_timeout
        self._die_with_parent = die_with_parent
        self._progress = progress
        self._db: _MariaDB | None = None
        self._lock = threading.RLock()
        self._tokens: dict[str, tuple[str, float]] = {}
        self._keystone_port = 0
        self._neutron_port = 0
        self._neutron_password = secrets.token_urlsafe(16)
        self.venv: Path | None = None
        self.keystone_url = ""
        self.neutron_url = ""
        self.region = REGION
        self.project: dict[str, Any] = {}
        self.users: dict[str, dict[str, Any]] = {}
        self.network: dict[str, Any] = {}
        self.subnet: dict[str, Any] = {}
        self.startup_seconds: dict[str, float] = {}
        self.running = False

    @property
    def dir(self) -> Path | None:
        return self._db.dir if self._db else None

    @property
    def auth_url(self) -> str:
        return f"{self.keystone_url}/v3"

    @property
    def project_id(self) -> str:
        return self.project["id"]

    def __enter__(self) -> "OpenStack":
        return super().__enter__()

    def start(self) -> "OpenStack":
        return super().start()

    # -- lifecycle -------------------------------------------------------------------

    def _start(self) -> None:
        t0 = time.monotonic()
        self.venv = ensure_install(progress=self._progress)
        dumps = ensure_dumps(progress=self._progress)
        self.startup_seconds["prepare"] = time.monotonic() - t0
        t1 = time.monotonic()
        self._db = _MariaDB(die_with_parent=self._die_with_parent, ready_timeout=self.ready_timeout,
                            stop_timeout=self.stop_timeout)
        self._db.start(dumps)
        self.startup_seconds["database"] = time.monotonic() - t1
        t2 = time.monotonic()
        d = self._db.dir
        (d / "serve.py").write_text(_SERVE)
        _fernet_keys(d / "fernet-keys")
        _fernet_keys(d / "credential-keys")
        for sub in ("neutron-state", "neutron-locks", "keystone", "neutron"):
            (d / sub).mkdir()
        (d / "keystone" / "keystone.conf").write_text(_keystone_conf(self._db.url("keystone"), d))
        self._keystone_port = _free_port()
        self._neutron_port = _free_port()
        self.keystone_url = f"http://127.0.0.1:{self._keystone_port}"
        self.neutron_url = f"http://127.0.0.1:{self._neutron_port}"
        (d / "neutron" / "neutron.conf").write_text(_neutron_conf(
            self._db.url("neutron"), d, self.venv, keystone_url=self.keystone_url,
            neutron_password=self._neutron_password, policy_file=d / "neutron" / "policy.yaml"))
        (d / "neutron" / "policy.yaml").write_text("{}\n")
        # Both load at once (seconds of imports each); Neutron asks Keystone only when a request comes.
        keystone = self._spawn_keystone()
        self._spawn_neutron()
        _wait(f"Keystone at {self.keystone_url} to answer /v3", self._keystone_ready,
              time.monotonic() + self.ready_timeout, keystone, interval=0.1)
        self.startup_seconds["keystone"] = time.monotonic() - t2
        t3 = time.monotonic()
        self._make_identities()
        self.startup_seconds["identities"] = time.monotonic() - t3
        t4 = time.monotonic()
        self._wait_neutron()
        self.startup_seconds["neutron"] = time.monotonic() - t4
        t5 = time.monotonic()
        made = self.create_external_network("public", self.cidr, self.pool, gateway=self.gateway)
        self.network, self.subnet = made["network"], made["subnet"]
        self.startup_seconds["network"] = time.monotonic() - t5
        self.startup_seconds["total"] = time.monotonic() - t0

    def _serve(self, name: str, target: str, port: int, env: Mapping[str, str]) -> _Process:
        assert self._db is not None and self.venv is not None
        return self._db.spawn(name, [str(self.venv / "bin" / "python"), str(self._db.dir / "serve.py"),
                                     target, str(port)], env=env)

    def _spawn_keystone(self) -> _Process:
        assert self._db is not None
        return self._serve("keystone", "keystone.wsgi.api:application", self._keystone_port,
                           {"OS_KEYSTONE_CONFIG_DIR": str(self._db.dir / "keystone")})

    def _spawn_neutron(self) -> _Process:
        assert self._db is not None
        return self._serve("neutron", "neutron.wsgi.api:application", self._neutron_port,
                           {"OS_NEUTRON_CONFIG_DIR": str(self._db.dir / "neutron"),
                            "OS_NEUTRON_CONFIG_FILES": "neutron.conf"})

    def _keystone_ready(self) -> bool:
        with _urlopen(self.auth_url, timeout=5) as resp:
            return resp.status == 200

    def _wait_neutron(self) -> None:
        assert self._db is not None

        def ready() -> bool:
            try:
                self.neutron("GET", "networks?limit=1")
            except OpenStackError:  # an answer, not yet the right one
                return False
            return True

        _wait(f"Neutron at {self.neutron_url} to answer /v2.0/networks", ready, time.monotonic() + self.ready_timeout,
              self._db.procs["neutron"], interval=0.2)

    def start_neutron(self) -> None:
        """Start Neutron (again) on the same port as before: clients keep their URL."""
        with self._lock:
            assert self._db is not None
            if self.neutron_running:
                return
            t0 = time.monotonic()
            self._spawn_neutron()
            self._wait_neutron()
            self.startup_seconds["last neutron start"] = time.monotonic() - t0

    def stop_neutron(self) -> None:
        """Stop Neutron alone (MariaDB and Keystone stay): connections to ``neutron_url`` are refused."""
        with self._lock:
            if self._db is not None:
                self._db.stop_one("neutron")

    @property
    def neutron_running(self) -> bool:
        return self._db is not None and self._db.alive("neutron")

    @contextlib.contextmanager
    def paused(self) -> Iterator[None]:
        """Neutron frozen (SIGSTOP): the kernel accepts connections, Neutron answers nothing until resumed."""
        assert self._db is not None
        with frozen(self._db.procs["neutron"]):
            yield

    def stop(self) -> None:
        """Stop every process of this OpenStack and remove its directory."""
        with self._lock:
            if self._db is not None:
                self._db.stop()
            self.running = False
            _LIVE.discard(self)

    def pids(self) -> dict[str, int]:
        """The processes by name (``mariadb``, ``keystone``, ``neutron``): each leads a process group of its own."""
        return {name: proc.pid for name, proc in self._db.procs.items()} if self._db else {}

    def format_logs(self, lines: int = 40) -> str:
        if self._db is None:
            return "<not started>"
        parts = [f"--- {name} (pid {proc.pid}) ---\n{proc.tail(lines)}" for name, proc in self._db.procs.items()]
        parts += [f"--- {name} (stopped) ---\n{text}" for name, text in self._db.last_logs.items()]
        return "\n".join(parts)

    # -- HTTP ------------------------------------------------------------------------

    def request(self, method: str, url: str, body: object = None, *, token: str | None = None,
                headers: Mapping[str, str] | None = None, expect: Sequence[int] = (200, 201, 202, 204),
                timeout: float = 60) -> tuple[int, Any, Mapping[str, str]]:
        """One request: ``(status, decoded JSON body or None, headers)``; OpenStackError naming it when the
        status is not in ``expect``; urllib's URLError (or a timeout) when no answer comes."""
        data = json.dumps(body).encode() if body is not None else None
        head = {"Accept": "application/json", **({"Content-Type": "application/json"} if data else {}),
                **({"X-Auth-Token": token} if token else {}), **(headers or {})}
        req = urllib.request.Request(url, data=data, method=method, headers=head)
        try:
            with _urlopen(req, timeout=timeout) as resp:
                status, raw, got = resp.status, resp.read(), resp.headers
        except urllib.error.HTTPError as exc:
            status, raw, got = exc.code, exc.read(), exc.headers
        try:
            decoded = json.loads(raw) if raw else None
        except ValueError:
            decoded = raw.decode("utf-8", "replace")
        if status not in expect:
            raise OpenStackError(f"{method} {url} answered {status}: {decoded!r}")
        return status, decoded, got

    def token(self, user: str = ADMIN_USER, *, project: str | None = None) -> str:
        """A token of ``user`` scoped to the test project (or ``project``, by name), kept for an hour."""
        key = f"{user}@{project or self.project_name}"
        cached = self._tokens.get(key)
        if cached and cached[1] > time.monotonic():
            return cached[0]
        password = self.users[user]["password"] if user in self.users else ADMIN_PASSWORD
        _, _, headers = self.request("POST", f"{self.auth_url}/auth/tokens", {"auth": {
            "identity": {"methods": ["password"], "password": {"user": {
                "name": user, "domain": {"name": DOMAIN}, "password": password}}},
            "scope": {"project": {"name": project or self.project_name, "domain": {"name": DOMAIN}}}}})
        token = headers["X-Subject-Token"]
        self._tokens[key] = (token, time.monotonic() + 3600)
        return token

    def keystone(self, method: str, path: str, body: object = None, *, user: str = ADMIN_USER,
                 project: str | None = None, expect: Sequence[int] = (200, 201, 204)) -> Any:
        """One request to Keystone's ``/v3/<path>`` as ``user`` with a token scoped to ``project`` (by name;
        the administrator's default is the ``admin`` project, Keystone's administrator, the others' the test
        project): the decoded answer."""
        scope = project or ("admin" if user == ADMIN_USER else None)
        return self.request(method, f"{self.auth_url}/{path.lstrip('/')}", body,
                            token=self.token(user, project=scope), expect=expect)[1]

    def neutron(self, method: str, path: str, body: object = None, *, user: str = ADMIN_USER,
                expect: Sequence[int] = (200, 201, 204)) -> Any:
        """One request to Neutron's ``/v2.0/<path>`` as ``user`` (a project-scoped token): the decoded answer."""
        return self.request(method, f"{self.neutron_url}/v2.0/{path.lstrip('/')}", body, token=self.token(user),
                            expect=expect)[1]

    # -- Keystone's objects ----------------------------------------------------------

    def _find_or_create(self, collection: str, name: str, body: dict[str, Any]) -> dict[str, Any]:
        singular = collection[:-1]
        found = self.keystone("GET", f"{collection}?name={urllib.parse.quote(name)}")[collection]
        if found:
            return found[0]
        return self.keystone("POST", collection, {singular: {"name": name, **body}})[singular]

    def _role_id(self, name: str) -> str:
        return self.keystone("GET", f"roles?name={name}")["roles"][0]["id"]

    def _grant(self, project_id: str, user_id: str, role: str) -> None:
        self.keystone("PUT", f"projects/{project_id}/users/{user_id}/roles/{self._role_id(role)}")

    def _make_identities(self) -> None:
        domain = {"domain_id": "default"}
        service_project = self._find_or_create("projects", "service", domain)
        self.project = self._find_or_create("projects", self.project_name, domain)
        admin = self.keystone("GET", f"users?name={ADMIN_USER}")["users"][0]
        self.users[ADMIN_USER] = {**admin, "password": ADMIN_PASSWORD}
        self._grant(self.project["id"], self.users[ADMIN_USER]["id"], "admin")
        neutron = self._find_or_create("users", "neutron", {**domain, "password": self._neutron_password,
                                                            "default_project_id": service_project["id"]})
        self._grant(service_project["id"], neutron["id"], "service")
        self.create_user("member", role="member")
        for kind, url in (("identity", self.keystone_url), ("network", self.neutron_url)):
            service = self.keystone("POST", "services", {"service": {"type": kind, "name": kind}})["service"]
            for interface in ("public", "internal", "admin"):
                self.keystone("POST", "endpoints", {"endpoint": {
                    "service_id": service["id"], "interface": interface, "url": url, "region_id": REGION}})

    def create_user(self, name: str, *, role: str = "member", project_id: str | None = None) -> dict[str, Any]:
        """A user of the Default domain with ``role`` on the test project (or ``project_id``); kept in ``users``."""
        password = secrets.token_urlsafe(16)
        user = self.keystone("POST", "users", {"user": {"name": name, "password": password, "domain_id": "default",
                                                        "default_project_id": project_id or self.project_id}},
                             )["user"]
        self._grant(project_id or self.project_id, user["id"], role)
        self.users[name] = {**user, "password": password}
        return self.users[name]

    def application_credential(self, user: str = "member", *, name: str | None = None,
                               roles: Sequence[str] | None = None) -> dict[str, Any]:
        """A new application credential of ``user`` on the test project: Keystone's answer, with its ``secret``."""
        body: dict[str, Any] = {"name": name or f"metal3-ipam-{secrets.token_hex(4)}"}
        if roles is not None:
            body["roles"] = [{"name": r} for r in roles]
        user_id = self.users[user]["id"]
        return self.keystone("POST", f"users/{user_id}/application_credentials", {"application_credential": body},
                             user=user, project=self.project_name)["application_credential"]

    def delete_application_credential(self, credential: Mapping[str, Any]) -> None:
        self.keystone("DELETE", f"users/{credential['user_id']}/application_credentials/{credential['id']}")

    def clouds_yaml(self, user: str = "member", *, app_credential: bool | Mapping[str, Any] = False,
                    cloud: str = "openstack") -> bytes:
        """A ``clouds.yaml`` (bytes, as a Secret holds it) for ``user`` on the test project, cloud ``cloud``.

        With ``app_credential`` (True: a new one is made; or one of
        :meth:`application_credential`'s answers) it authenticates with
        ``v3applicationcredential``, else with the user's password.
        """
        if app_credential:
            cred = self.application_credential(user) if app_credential is True else app_credential
            auth_type = "v3applicationcredential"
            auth = {"auth_url": self.auth_url, "application_credential_id": cred["id"],
                    "application_credential_secret": cred["secret"]}
        else:
            auth_type = "password"
            password = ADMIN_PASSWORD if user == ADMIN_USER else self.users[user]["password"]
            auth = {"auth_url": self.auth_url, "username": user, "password": password,
                    "user_domain_name": DOMAIN, "project_name": self.project_name, "project_domain_name": DOMAIN}
        # JSON strings are YAML scalars: written by hand, no YAML library needed.
        lines = ["clouds:", f"  {json.dumps(cloud)}:", f"    auth_type: {json.dumps(auth_type)}", "    auth:"]
        lines += [f"      {key}: {json.dumps(value)}" for key, value in auth.items()]
        lines += [f"    region_name: {json.dumps(self.region)}", "    interface: public",
                  "    identity_api_version: 3"]
        return ("\n".join(lines) + "\n").encode()

    # -- Neutron's objects -----------------------------------------------------------

    def create_external_network(self, name: str, cidr: str, pool: tuple[str, str], *,
                                gateway: str | None = None) -> dict[str, dict[str, Any]]:
        """An external flat network (its own physical network) with one IPv4 subnet whose allocation pool is
        ``pool``: ``{"network": ..., "subnet": ...}`` as Neutron answered."""
        network = self.neutron("POST", "networks", {"network": {
            "name": name, "router:external": True, "provider:network_type": "flat",
            "provider:physical_network": f"physnet-{name}"}})["network"]
        subnet = self.neutron("POST", "subnets", {"subnet": {
            "network_id": network["id"], "name": f"{name}-v4", "ip_version": 4, "cidr": cidr,
            "gateway_ip": gateway, "enable_dhcp": False,
            "allocation_pools": [{"start": pool[0], "end": pool[1]}]}})["subnet"]
        return {"network": network, "subnet": subnet}

    def delete_network(self, network_id: str) -> None:
        self.neutron("DELETE", f"networks/{network_id}")

    def floating_ips(self, **filters: Any) -> list[dict[str, Any]]:
        """Neutron's floating IPs of every project as the admin sees them, filtered by ``filters`` (Neutron's
        query parameters; a list is repeated): the raw list."""
        query = urllib.parse.urlencode({k.replace("_any", "-any").replace("not_", "not-", 1)
                                        if k in ("tags_any", "not_tags", "not_tags_any") else k: v
                                        for k, v in filters.items()}, doseq=True)
        return self.neutron("GET", f"floatingips?{query}" if query else "floatingips")["floatingips"]

    def set_quota(self, *, floatingip: int | None, project_id: str | None = None) -> None:
        """The project's floating-IP quota (the test project's by default); ``None``: back to Neutron's default."""
        project = project_id or self.project_id
        if floatingip is None:
            self.neutron("DELETE", f"quotas/{project}", expect=(204, 404))  # 404: none was set
        else:
            self.neutron("PUT", f"quotas/{project}", {"quota": {"floatingip": floatingip}})

    def set_neutron_policy(self, rules: Mapping[str, str]) -> None:
        """Neutron's policy overrides (``{"delete_floatingip": "role:admin"}``), read again by Neutron at its next
        request; ``{}``: its defaults."""
        assert self.dir is not None
        path = self.dir / "neutron" / "policy.yaml"
        tmp = path.with_suffix(".tmp")
        tmp.write_text(json.dumps(dict(rules)) + "\n")
        tmp.replace(path)

    def reset(self) -> None:
        """Back to the state after start: every floating IP deleted, networks but ``public`` deleted, quota and
        policy Neutron's defaults; Neutron started if it was stopped."""
        self.start_neutron()
        self.set_neutron_policy({})
        for fip in self.floating_ips():
            self.neutron("DELETE", f"floatingips/{fip['id']}", expect=(204, 404))
        for net in self.neutron("GET", "networks")["networks"]:
            if net["id"] != self.network["id"]:
                self.neutron("DELETE", f"networks/{net['id']}", expect=(204, 404))
        self.set_quota(floatingip=None)


# --------------------------------------------------------------------------- command line


def main(argv: Sequence[str] | None = None) -> int:
    @contextlib.contextmanager
    def serve() -> Iterator[str]:
        with OpenStack() as cloud:
            yield (f"OS_AUTH_URL={cloud.auth_url}\nNEUTRON_URL={cloud.neutron_url}\n"
                   f"# {cloud.startup_seconds}\n# clouds.yaml of the member:\n" + cloud.clouds_yaml("member").decode())

    return command_line(argv, prog="python -m metal3_ipam.testing.openstack",
                        description="A real Keystone and Neutron on loopback for the tests.",
                        prepare_help="install Neutron and Keystone and make the migrated database dumps, in the cache",
                        run_help="start an OpenStack, print its URLs and a clouds.yaml, stop on Ctrl-C",
                        prepare=lambda: f"{venv_dir()} and {', '.join(map(str, prepare().values()))}",
                        where=cache_dir, serve=serve, error=OpenStackError, say=_say)

if __name__ == "__main__":
    sys.exit(main())
