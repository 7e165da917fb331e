"""The command lines of the Go managers this controller replaces, read as Go's flag packages read them.

The Go Metal3 IPAM and the Go in-cluster provider parse their flags with
``pflag`` (Go's ``flag`` set added to it): ``--f=v``, ``--f v``, a bare
boolean ``--f`` (which never takes the next word: ``--f=false`` turns it off),
and, as Go's own ``flag`` package reads them, the same with one dash
(``-f=v``, ``-f v``, ``-f``). :func:`read` takes those flags out of a command
line, parsed and checked, and leaves every other word, in order, to the
caller. :data:`FLAGS` lists them: each Go manager's own (``main.go``),
Cluster API's manager options (``util/flags``) and Kubernetes' logging flags.
A flag whose name this table marks with a ``note`` has no meaning here: it is
accepted, and the caller says so once in the log.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass, field
from typing import Any, Sequence

BOOL, STRING, INT, FLOAT, DURATION, LIST = "bool", "string", "int", "float", "duration", "list"
# Whose flag it is: the Metal3 IPAM's main.go, the in-cluster provider's, or both (Cluster API's manager
# options, Kubernetes' logging flags, flags both managers define).
METAL3, IN_CLUSTER, BOTH = "metal3", "in-cluster", "both"


@dataclass(frozen=True)
class GoFlag:
    name: str
    type: str
    of: str = BOTH
    note: str = ""  # non-empty: accepted, with no meaning here (why, in a few words)
    repeat: bool = False  # each use adds to a list (else the last use counts)


_KLOG_NOTE = "klog's output flags; this controller logs to standard error"
FLAGS: dict[str, GoFlag] = {flag.name: flag for flag in (
    # Both managers (Metal3's main.go and the in-cluster provider's).
    GoFlag("leader-elect", BOOL),
    GoFlag("namespace", STRING, repeat=True),
    GoFlag("watch-filter", STRING),
    GoFlag("webhook-port", INT),
    GoFlag("webhook-cert-dir", STRING),
    GoFlag("kubeconfig", STRING),  # controller-runtime's, registered on Go's flag set
    # The Metal3 IPAM's own.
    GoFlag("health-addr", STRING, METAL3),
    GoFlag("sync-period", DURATION, METAL3),
    GoFlag("kube-api-qps", FLOAT, METAL3),
    GoFlag("kube-api-burst", INT, METAL3),
    GoFlag("ippool-concurrency", INT, METAL3,
           note="pools are worked on one pass at a time each, as many at once as have work"),
    # The in-cluster provider's own.
    GoFlag("health-probe-bind-address", STRING, IN_CLUSTER),
    GoFlag("webhook-cert-name", STRING, IN_CLUSTER),
    GoFlag("webhook-key-name", STRING, IN_CLUSTER),
    # Cluster API's manager options (util/flags).
    GoFlag("diagnostics-address", STRING),
    GoFlag("insecure-diagnostics", BOOL),
    GoFlag("tls-min-version", STRING),
    GoFlag("tls-cipher-suites", LIST),
    # Kubernetes' logging flags (component-base logs).
    GoFlag("v", INT),
    GoFlag("vmodule", STRING, note="verbosity per Go source file"),
    GoFlag("logging-format", STRING),
    GoFlag("log-flush-frequency", DURATION, note="log lines are written at once"),
    GoFlag("log-json-split-stream", BOOL, note="every log line goes to standard error"),
    GoFlag("log-json-info-buffer-size", STRING, note="log lines are written at once"),
    GoFlag("log-text-split-stream", BOOL, note="every log line goes to standard error"),
    GoFlag("log-text-info-buffer-size", STRING, note="log lines are written at once"),
    *(GoFlag(name, BOOL, note=_KLOG_NOTE) for name in (
        "add_dir_header", "alsologtostderr", "logtostderr", "one_output", "skip_headers", "skip_log_headers")),
    *(GoFlag(name, STRING, note=_KLOG_NOTE) for name in (
        "log_backtrace_at", "log_dir", "log_file", "log_file_max_size", "stderrthreshold")),
)}

# The defaults of the Go managers where they differ from this project's ``metal3-ipam run``.
METAL3_HEALTH_ADDRESS = ":9440"       # Metal3's --health-addr
IN_CLUSTER_HEALTH_ADDRESS = ":8081"   # the in-cluster provider's --health-probe-bind-address
DIAGNOSTICS_ADDRESS = ":8443"         # Cluster API's --diagnostics-address
WEBHOOK_PORT = 9443
SYNC_PERIOD_SECONDS = 600.0           # Metal3's --sync-period (10m)
KUBE_API_QPS, KUBE_API_BURST = 20.0, 30  # Metal3's, and controller-runtime's for a config without them
# The Leases the Go managers elect on (LeaderElectionID in their main.go).
METAL3_LEASE = "controller-leader-election-ipam-capm3"
IN_CLUSTER_LEASE = "7bb7acb4.ipam.cluster.x-k8s.io"
TLS_VERSIONS = ("VersionTLS10", "VersionTLS11", "VersionTLS12", "VersionTLS13")
LOGGING_FORMATS = ("text", "json")


class FlagError(ValueError):
    """A Go flag given wrongly: the message names the flag and the value."""


@dataclass
class GoFlags:
    """The Go flags of a command line: the value of each one given (by name), and the order they came in."""

    values: dict[str, Any] = field(default_factory=dict)
    given: list[str] = field(default_factory=list)

    def get(self, name: str, default: Any = None) -> Any:
        return self.values.get(name, default)

    def __contains__(self, name: str) -> bool:
        return name in self.values

    def ignored(self) -> list[str]:
        """The flags given that have no meaning here, each with why, once."""
        return [f"--{name} ({FLAGS[name].note})" for name in dict.fromkeys(self.given) if FLAGS[name].note]

    def of(self, owner: str) -> bool:
        """Whether a flag only one Go manager has (``owner``'s) was given."""
        return any(FLAGS[name].of == owner for name in self.given)


_FLAG = re.compile(r"^--?([A-Za-z0-9][A-Za-z0-9_.-]*)(?:=(.*))?$", re.S)


def read(argv: Sequence[str]) -> tuple[GoFlags, list[str]]:
    """The Go flags of ``argv`` (parsed) and the other words, in order. Raises :class:`FlagError`."""
    found, rest = GoFlags(), []
    words = list(argv)
    i = 0
    while i < len(words):
        word = words[i]
        i += 1
        if word == "--":
            rest += words[i - 1:]
            break
        match = _FLAG.match(word)
        name = match.group(1) if match else None
        if name is None or name not in FLAGS:
            rest.append(word)
            continue
        flag, value = FLAGS[name], match.group(2)
        if name == "v" and value is None and not (i < len(words) and _is_int(words[i])):
            rest.append(word)  # a bare -v: metal3-ipam's --verbose
            continue
        if value is None:
            if flag.type == BOOL:
                value = "true"
            elif i < len(words):
                value = words[i]
                i += 1
            else:
                raise FlagError(f"flag needs an argument: {word}")
        parsed = parse(flag, value)
        if flag.repeat:
            found.values.setdefault(name, []).append(parsed)
        elif flag.type == LIST:
            found.values[name] = found.values.get(name, []) + parsed
        else:
            found.values[name] = parsed
        found.given.append(name)
    return found, rest


def parse(flag: GoFlag, text: str) -> Any:
    """A flag's value as its Go type reads it."""
    try:
        if flag.type == BOOL:
            return parse_bool(text)
        if flag.type == INT:
            return parse_int(text)
        if flag.type == FLOAT:
            return parse_float(text)
        if flag.type == DURATION:
            return parse_duration(text)
        if flag.type == LIST:
            return [item.strip() for item in text.split(",") if item.strip()]
        return text
    except ValueError as err:
        raise FlagError(f"invalid argument {text!r} for --{flag.name}: {err}") from None


def parse_bool(text: str) -> bool:
    """Go's strconv.ParseBool."""
    if text in ("1", "t", "T", "true", "TRUE", "True"):
        return True
    if text in ("0", "f", "F", "false", "FALSE", "False"):
        return False
    raise ValueError("expected true or false")


def _is_int(text: str) -> bool:
    try:
        parse_int(text)
    except ValueError:
        return False
    return True


def parse_int(text: str) -> int:
    """Go's strconv.ParseInt with base 0: decimal, 0x, 0o, 0b, and a leading 0 for octal."""
    body = text[1:] if text[:1] in "+-" else text
    if len(body) > 1 and body[0] == "0" and body[1].isdigit():
        text = text.replace("0", "0o", 1)
    try:
        return int(text, 0)
    except ValueError:
        raise ValueError("expected an integer") from None


def parse_float(text: str) -> float:
    """Go's strconv.ParseFloat, finite values only."""
    try:
        value = float(text)
    except ValueError:
        raise ValueError("expected a number") from None
    if not math.isfinite(value):
        raise ValueError("expected a finite number")
    return value


_UNITS = {"ns": 1e-9, "us": 1e-6, "µs": 1e-6, "μs": 1e-6, "ms": 1e-3, "s": 1.0, "m": 60.0, "h": 3600.0}
_PART = re.compile(r"(\d+(?:\.\d*)?|\.\d+)(ns|us|µs|μs|ms|s|m|h)")


def parse_duration(text: str) -> float:
    """Go's time.ParseDuration (``1h30m``, ``10m``, ``1.5s``, ``300ms``, ``0``), in seconds."""
    sign, body = (-1.0, text[1:]) if text.startswith("-") else (1.0, text.removeprefix("+"))
    if body == "0":
        return 0.0
    total, at = 0.0, 0
    while at < len(body):
        part = _PART.match(body, at)
        if part is None:
            raise ValueError("expected a duration such as 10m, 1h30m or 500ms")
        total += float(part.group(1)) * _UNITS[part.group(2)]
        at = part.end()
    if not body:
        raise ValueError("expected a duration such as 10m, 1h30m or 500ms")
    return sign * total


def address(flag: str, text: str) -> tuple[str, int] | None:
    """A Go listen address (``:8081``, ``127.0.0.1:8443``, ``[::1]:9440``) as host and port; None for ``0``
    (controller-runtime's "not served"). An empty host is every interface."""
    if text == "0":
        return None
    host, sep, port = text.rpartition(":")
    if not sep or not port.isdigit() or not 0 <= int(port) <= 65535:
        raise FlagError(f"invalid argument {text!r} for --{flag}: expected [HOST]:PORT")
    return host.strip("[]"), int(port)
