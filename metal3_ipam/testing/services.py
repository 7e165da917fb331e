"""What every harness of an outside service the tests start on loopback shares (an IPAM and its databases).

* Its cache: where it is (:func:`cache_root`), one preparer of it at a time
  across processes (:func:`locked`), a Python of a range of versions with venv
  for its virtualenv (:func:`find_python`).
* Programs run to their end (:func:`run`) and conditions waited for
  (:func:`wait`), each failure raised as the harness's own error.
* :class:`ServiceProcesses`: the processes of one started service, in a
  temporary directory of its own, each in a process group of its own: spawned,
  started on a free port (a port taken between probe and bind retried), frozen
  (:func:`frozen`) and stopped.
* :func:`command_line`: a harness's ``prepare``, ``where`` and ``run``.
"""

from __future__ import annotations

import argparse
import contextlib
import fcntl
import os
import pwd
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
import urllib.error
from pathlib import Path
from typing import Any, Callable, ContextManager, Iterator, Mapping, Sequence

from metal3_ipam.testing.controlplane import _LIVE, _free_port, _Process, _remove_stale_dirs


# --------------------------------------------------------------------------- the cache


def cache_root(env_var: str, name: str) -> Path:
    """``$env_var``, else ``$XDG_CACHE_HOME/metal3-ipam/<name>`` (~/.cache)."""
    env = os.environ.get(env_var)
    if env:
        return Path(env).expanduser()
    cache = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(cache) / "metal3-ipam" / name


@contextlib.contextmanager
def locked(directory: Path, say: Callable[[str], None]) -> Iterator[None]:
    """One installer or dump maker at a time, across processes."""
    directory.mkdir(parents=True, exist_ok=True)
    with open(directory / ".lock", "w") as lock:
        try:
            fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            say(f"another process prepares {directory}; waiting for it")
            fcntl.flock(lock, fcntl.LOCK_EX)
        yield


def _python_version(python: str) -> tuple[int, int] | None:
    try:
        out = subprocess.run([python, "-c", "import sys, venv, ensurepip; print(*sys.version_info[:2])"],
                             capture_output=True, text=True, timeout=30)
    except (OSError, subprocess.TimeoutExpired):
        return None
    if out.returncode != 0:
        return None
    major, minor = out.stdout.split()
    return int(major), int(minor)


def find_python(minimum: tuple[int, int], maximum: tuple[int, int], *, env_var: str, what: str,
                unavailable: type[Exception]) -> Path:
    """A Python ``minimum``–``maximum`` with venv: ``$env_var``, python3.1x on PATH, pyenv's versions.

    Debian 12's own python3 is 3.11; the machines this project runs on carry
    pyenv versions under ``~/.pyenv/versions`` (or ``$PYENV_ROOT``).
    """
    wanted = f"Python {minimum[0]}.{minimum[1]}-{maximum[0]}.{maximum[1]}"
    env = os.environ.get(env_var)
    if env:
        version = _python_version(env)
        if version is None or not minimum <= version <= maximum:
            raise unavailable(f"{env_var}={env} is not a {wanted} with venv (found {version})")
        return Path(env)
    candidates: list[str] = []
    for minor in range(maximum[1], minimum[1] - 1, -1):
        found = shutil.which(f"python3.{minor}")
        if found:
            candidates.append(found)
    roots = [Path(os.environ["PYENV_ROOT"])] if os.environ.get("PYENV_ROOT") else []
    roots += [Path.home() / ".pyenv", Path("/root/.pyenv")]
    pyenv: list[tuple[tuple[int, ...], Path]] = []
    for root in roots:
        for d in (root / "versions").glob("3.*"):
            m = re.fullmatch(r"3\.(\d+)\.(\d+)", d.name)
            if m and (d / "bin" / "python").is_file():
                pyenv.append(((3, int(m.group(1)), int(m.group(2))), d / "bin" / "python"))
    candidates += [str(p) for _, p in sorted(pyenv, reverse=True)]
    candidates.append(sys.executable)
    looked = []
    for candidate in candidates:
        version = _python_version(candidate)
        looked.append(f"{candidate} ({'.'.join(map(str, version)) if version else 'unusable'})")
        if version is not None and minimum <= version <= maximum:
            return Path(candidate)
    raise unavailable(
        f"{what} needs a {wanted} with venv; none found. Looked at: {', '.join(looked)}. "
        f"Install one (pyenv, or a distribution package) or point {env_var} at it."
    )


# --------------------------------------------------------------------------- programs and conditions


def run(argv: Sequence[str], *, what: str, timeout: float, error: type[Exception], unavailable: type[Exception],
        env: Mapping[str, str] | None = None, user: str | None = None, cwd: Path | None = None) -> str:
    """Run a program to its end (as ``user``, if named); its standard output, or ``error`` with the tail of its
    output (``unavailable`` when it cannot be run at all)."""
    identity: dict[str, Any] = {}
    if user is not None:
        entry = pwd.getpwnam(user)
        identity = {"user": entry.pw_uid, "group": entry.pw_gid, "extra_groups": []}
    try:
        out = subprocess.run(list(argv), capture_output=True, text=True, errors="replace", timeout=timeout,
                             env={**os.environ, **(env or {})}, stdin=subprocess.DEVNULL,
                             cwd=str(cwd) if cwd else None, **identity)
    except subprocess.TimeoutExpired:
        raise error(f"{what} did not finish within {timeout:g}s") from None
    except OSError as exc:
        raise unavailable(f"{what}: cannot run {argv[0]}: {exc}") from None
    if out.returncode != 0:
        tail = "\n".join((out.stdout + out.stderr).splitlines()[-30:])
        raise error(f"{what} exited with status {out.returncode}:\n{tail}")
    return out.stdout


def wait(what: str, check: Callable[[], bool], deadline: float, proc: _Process | None = None,
         interval: float = 0.1, *, error: type[Exception]) -> None:
    """Poll ``check`` until it holds; ``error`` (with ``proc``'s log) when ``proc`` exits or the deadline passes."""
    last: object = None
    while True:
        if proc is not None and not proc.alive():
            raise error(f"{proc.name} exited (status {proc.popen.returncode}) while waiting for {what}; "
                        f"its log:\n{proc.tail(60)}")
        try:
            if check():
                return
        except (OSError, urllib.error.URLError, ValueError) as exc:
            last = exc
        if time.monotonic() >= deadline:
            tail = f"; its log:\n{proc.tail(60)}" if proc is not None else ""
            raise error(f"timed out waiting for {what}; last: {last!r}{tail}")
        time.sleep(interval)


@contextlib.contextmanager
def frozen(proc: _Process) -> Iterator[None]:
    """``proc``'s process group stopped (SIGSTOP): the kernel accepts connections, nothing answers until the
    block ends."""
    os.killpg(proc.pid, signal.SIGSTOP)
    try:
        yield
    finally:
        os.killpg(proc.pid, signal.SIGCONT)


# --------------------------------------------------------------------------- processes


class ServiceProcesses:
    """The processes of one started service, in a temporary directory of its own (named ``dir_prefix``...),
    stopped in the reverse order of their start; ``error`` is the harness's."""

    dir_prefix: str
    error: type[Exception]

    def __init__(self, *, die_with_parent: bool, ready_timeout: float, stop_timeout: float):
        self._die_with_parent = die_with_parent
        self.ready_timeout = ready_timeout
        self.stop_timeout = stop_timeout
        self.dir: Path | None = None
        self.procs: dict[str, _Process] = {}
        self.last_logs: dict[str, str] = {}

    def make_dir(self) -> Path:
        """The temporary directory, made (readable by the other users a service runs as), the stale ones of
        processes gone removed."""
        _LIVE.add(self)
        _remove_stale_dirs(self.dir_prefix)
        self.dir = Path(tempfile.mkdtemp(prefix=self.dir_prefix))
        self.dir.chmod(0o755)  # a service run as another user reaches its data and socket through it
        (self.dir / "owner.pid").write_text(str(os.getpid()))
        return self.dir

    def spawn(self, name: str, argv: list[str], *, env: Mapping[str, str] | None = None,
              user: str | None = None) -> _Process:
        """Start ``name``; tied to this thread's life (Linux) only from the main thread, as a
        restart from a short-lived thread must outlive it."""
        assert self.dir is not None
        die = self._die_with_parent and threading.current_thread() is threading.main_thread()
        proc = _Process(name, argv, self.dir / f"{name}.log", self.dir, die, env=env, user=user)
        self.procs[name] = proc
        return proc

    def start_on_free_port(self, what: str, launch: Callable[[int], _Process], ready: Callable[[], bool],
                           port_taken: str, attempts: int = 3) -> None:
        """launch(port) on a free port until ready(); a port taken between probe and bind is retried."""
        for attempt in range(1, attempts + 1):
            proc = launch(_free_port())
            try:
                wait(what, ready, time.monotonic() + self.ready_timeout, proc, error=self.error)
                return
            except self.error:
                if attempt < attempts and not proc.alive() and port_taken in proc.tail(40):
                    proc.terminate(1)
                    continue
                raise

    def stop_one(self, name: str) -> None:
        """Stop ``name`` alone (its log kept in ``last_logs``); the others stay."""
        proc = self.procs.pop(name, None)
        if proc is not None:
            proc.terminate(self.stop_timeout)
            self.last_logs[name] = proc.tail()

    def alive(self, name: str) -> bool:
        proc = self.procs.get(name)
        return proc is not None and proc.alive()

    def stop(self) -> None:
        for name in reversed(list(self.procs)):
            proc = self.procs[name]
            proc.terminate(self.stop_timeout)
            self.last_logs[name] = proc.tail()
        self.procs.clear()
        if self.dir is not None:
            shutil.rmtree(self.dir, ignore_errors=True)
        _LIVE.discard(self)


# --------------------------------------------------------------------------- command line


def command_line(argv: Sequence[str] | None, *, prog: str, description: str, prepare_help: str, run_help: str,
                 prepare: Callable[[], str], where: Callable[[], Path], serve: Callable[[], ContextManager[str]],
                 error: type[Exception], say: Callable[[str], None]) -> int:
    """A harness's command line: ``prepare`` (the cache filled; says what ``prepare`` returns), ``where`` (the
    cache directory) and ``run`` (the service started: what ``serve`` yields printed; stopped on Ctrl-C, on
    SIGTERM or after ``--seconds``)."""
    parser = argparse.ArgumentParser(prog=prog, description=description)
    sub = parser.add_subparsers(dest="command", required=True)
    sub.add_parser("prepare", help=prepare_help)
    sub.add_parser("where", help="print the cache directory")
    serving = sub.add_parser("run", help=run_help)
    serving.add_argument("--seconds", type=float, default=0, help="stop after this long (0: on Ctrl-C)")
    args = parser.parse_args(argv)
    try:
        if args.command == "prepare":
            t0 = time.monotonic()
            ready = prepare()
            say(f"ready: {ready} ({time.monotonic() - t0:.0f}s)")
        elif args.command == "where":
            print(where())
        else:
            with serve() as said:
                print(said, flush=True)
                stopped = threading.Event()
                for sig in (signal.SIGINT, signal.SIGTERM):  # a background job ignores SIGINT: TERM too
                    signal.signal(sig, lambda *_: stopped.set())
                stopped.wait(args.seconds or None)
    except error as exc:
        say(f"error: {exc}")
        return 1
    return 0
