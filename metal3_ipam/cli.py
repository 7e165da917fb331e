"""The ``metal3-ipam`` command.

- ``validate -f PATH… [--old PATH…] [--delete]``: the admission rules, offline;
  one line per problem. With ``--old`` (the objects as they are now, e.g. from
  ``kubectl get -o yaml``), an object found there is judged as an update of it,
  and the addresses found there count as in use; with ``--delete`` the objects
  are judged as being deleted.
- ``plan -f PATH…``: the controller's reconcile run in memory to a fixed
  point; prints every object as it would be afterwards.
- ``release --version V``: the clusterctl provider components, in a local
  provider repository.

Exit codes: 0 done and valid, 1 invalid input, 2 usage errors.
"""

from __future__ import annotations

import argparse
import datetime
import json
import random
import sys
from typing import Sequence

import yaml

from . import goflags, manifests
from .core import kinds
from .core import objects as o
from .core.poolkind import REGISTRY as POOL_KINDS
from .core.problems import Problem
from .core.reconcile import WAITING_FOR_CLUSTER
from .core.validation import addresses_in_use, overlap_problems, validate, validate_delete, validate_update
from .memory import MemoryApi, converge
from . import poolkinds  # noqa: F401  (registers the kinds of pool)

EXIT_OK, EXIT_INVALID, EXIT_USAGE = 0, 1, 2
DEFAULT_LEASE = "metal3-ipam-controller"
DEFAULT_HEALTH_ADDRESS = "0.0.0.0:8081"
DEFAULT_RESYNC_SECONDS = 300.0

_GO_FLAGS_HELP = """\
The Go managers' flags (those of both Go IPAM providers' main.go, and Cluster API's
manager options), in every spelling Go takes (--f=v, --f v, -f=v, a bare boolean, --f=false):
  --kubeconfig PATH               kubeconfig file (default: $KUBECONFIG, ~/.kube/config, or in-cluster)
  --namespace NS                  serve only this namespace (repeatable; empty: all)
  --leader-elect                  elect a leader on a Lease (default off, as in Go)
  --watch-filter VALUE            serve only pools and claims labelled cluster.x-k8s.io/watch-filter=VALUE
  --health-addr, --health-probe-bind-address ADDR
                                  /healthz and /readyz (run as /manager: :9440 and :8081)
  --sync-period DURATION          look at every pool again this often (run as /manager: 10m)
  --kube-api-qps Q, --kube-api-burst B
                                  client-side rate limit of the API requests (run as /manager: 20, 30)
  --webhook-port PORT             admission webhooks over HTTPS (default 0: none; run as /manager: 9443)
  --webhook-cert-dir DIR, --webhook-cert-name FILE, --webhook-key-name FILE
                                  the serving certificate (default /tmp/k8s-webhook-server/serving-certs,
                                  tls.crt, tls.key)
  --diagnostics-address ADDR      /metrics over HTTPS, for callers the API server authenticates and
                                  authorises (nonResourceURL /metrics, get); 0: none (run as /manager: :8443)
  --insecure-diagnostics          /metrics over plain HTTP, for anyone
  --tls-min-version V, --tls-cipher-suites LIST
                                  TLS of the webhooks and diagnostics (default VersionTLS12)
  -v N, --v N, --vmodule, --logging-format text|json, and klog's other flags
Flags with no meaning here (--ippool-concurrency, --vmodule, klog's output flags) are accepted
and said once in the log.
"""


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="metal3-ipam", description=__doc__.splitlines()[0])
    commands = parser.add_subparsers(dest="command", required=True)

    check = commands.add_parser("validate", help="check manifests against the admission rules")
    check.add_argument("-f", "--filename", action="append", required=True, metavar="PATH",
                       help="file or folder of YAML/JSON manifests (repeatable)")
    check.add_argument("--old", action="append", default=[], metavar="PATH",
                       help="the objects as they are now (repeatable): a manifest naming one of them is an update, "
                            "checked against the update rules and the addresses in use found here")
    check.add_argument("--delete", action="store_true",
                       help="check that the objects of -f may be deleted (a pool in use may not)")

    plan = commands.add_parser("plan", help="show what the controller would allocate, without a cluster")
    plan.add_argument("-f", "--filename", action="append", required=True, metavar="PATH",
                      help="file or folder of YAML/JSON manifests (repeatable)")
    plan.add_argument("-o", "--output", choices=("yaml", "json"), default="yaml")
    plan.add_argument("--seed", type=int, default=0,
                      help="seed for pools with allocationStrategy: random (default 0, for repeatable plans)")
    run = commands.add_parser("run", help="run the controller against a cluster",
                              epilog=_GO_FLAGS_HELP, formatter_class=argparse.RawDescriptionHelpFormatter)
    scope = run.add_mutually_exclusive_group()
    scope.add_argument("-n", dest="namespace", action="append", default=[], metavar="NS",
                       help="serve only this namespace (repeatable; also --namespace NS)")
    scope.add_argument("-A", "--all-namespaces", action="store_true", help="serve every namespace (the default)")
    run.add_argument("--health-address", default=None, metavar="HOST:PORT",
                     help="where /healthz and /readyz (and /metrics, without --diagnostics-address) are served "
                          "(default 0.0.0.0:8081; also --health-addr, --health-probe-bind-address)")
    run.add_argument("--no-leader-elect", dest="no_leader_elect", action="store_true",
                     help="act without holding the Lease (the default without --leader-elect)")
    run.add_argument("--leader-elect-lease-name", default=None, metavar="NAME",
                     help=f"the Lease elected on (default {DEFAULT_LEASE}; run as /manager, the Lease of the Go "
                          f"provider whose command line it is: {goflags.IN_CLUSTER_LEASE}, or "
                          f"{goflags.METAL3_LEASE} when a flag only the Metal3 IPAM has is given)")
    run.add_argument("--leader-election-namespace", default=None, metavar="NS",
                     help="namespace of the Lease (default: $POD_NAMESPACE, else the service account's, else default)")
    run.add_argument("--lock-namespace", default=None, metavar="NS",
                     help="namespace of the locks kept as Leases (of the kinds whose locks are Leases, and the "
                          "guards of IPs; one per IP handed out) and of the pools of cluster scope (default: the "
                          "Lease's namespace, --leader-election-namespace, whose Role grants them)")
    run.add_argument("--leader-elect-lease-duration", default="15s", metavar="DURATION",
                     help="how long standbys wait, after they last saw the Lease change, before taking it (default 15s)")
    run.add_argument("--leader-elect-renew-deadline", default="10s", metavar="DURATION",
                     help="the leader stops writing when it could not renew for this long; shorter than the lease "
                          "duration (default 10s)")
    run.add_argument("--leader-elect-retry-period", default="2s", metavar="DURATION",
                     help="how often the Lease is renewed or tried for (default 2s)")
    run.add_argument("--resync-seconds", type=float, default=None,
                     help="look at every pool again this often (default 300; also --sync-period)")
    run.add_argument("--parallel-writes", type=int, default=16, metavar="N",
                     help="API writes in flight at once (default 16)")
    for flag in _kind_flags():
        run.add_argument(f"--{flag.name}", default=None, metavar=flag.metavar, help=flag.help)
    run.add_argument("-v", "--verbose", action="store_true", help="log every planned write (also -v N, N >= 1)")

    release = commands.add_parser("release", help="render config/default into clusterctl provider components "
                                                   "in a local provider repository")
    release.add_argument("--version", required=True, help="release version, e.g. v0.1.0 (metadata.yaml must "
                                                          "have its release series)")
    release.add_argument("--image", default=None, help="controller image (default: the one config/default names)")
    release.add_argument("-o", "--output", default="out/repository", metavar="DIR",
                         help="provider repository to write <DIR>/ipam-metal3/<version>/ into (default out/repository)")

    demo = commands.add_parser("demo", help="start a local control plane, apply the samples, run the controller, "
                                            "show the result, stop")
    demo.add_argument("-f", "--filename", action="append", metavar="PATH",
                      help="manifests to apply instead of the samples (repeatable)")
    return parser


def _print_order() -> list:
    return [kinds.CLUSTER, *POOL_KINDS, kinds.IPCLAIM, kinds.CAPI_CLAIM, kinds.IPADDRESS, kinds.CAPI_ADDRESS]


def _kind_flags() -> list:
    """The flags of ``run`` the kinds of pool bring (``poolkind.Flag``), in the order of the kinds."""
    return [flag for kind in POOL_KINDS.values() if kind.outside is not None for flag in kind.outside.flags]


def manager(argv: Sequence[str] | None = None) -> int:
    """``/manager`` in the image: ``metal3-ipam run`` with the Go managers' defaults, so that either Go
    provider's Deployment runs this image with its own command line."""
    return main(["run", *(sys.argv[1:] if argv is None else argv)], as_manager=True)


def main(argv: Sequence[str] | None = None, as_manager: bool = False) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    go = goflags.GoFlags()
    try:
        if argv[:1] == ["run"]:
            go, rest = goflags.read(argv[1:])
            argv = ["run", *rest]
    except goflags.FlagError as err:
        print(f"metal3-ipam run: {err}", file=sys.stderr)
        return EXIT_USAGE
    args = _parser().parse_args(argv)
    try:
        if args.command == "validate":
            return _validate(args)
        if args.command == "run":
            return _run(args, go, as_manager)
        if args.command == "release":
            return _release(args)
        if args.command == "demo":
            from . import demo
            return demo.main(args.filename or [str(_samples())])
        return _plan(args)
    except manifests.UsageError as err:
        print(f"metal3-ipam: {err}", file=sys.stderr)
        return EXIT_USAGE
    except BrokenPipeError:  # output cut short by a pager or `head`: not an error of ours
        sys.stderr.close()
        return EXIT_OK


def _key(obj: dict) -> tuple:
    return (kinds.kind_of(obj), o.namespace(_defaulted(obj)), o.name(obj))


def _check(paths: list[str], old_paths: Sequence[str] = (), delete: bool = False
           ) -> tuple[list[manifests.Loaded], list[str], list[str]]:
    """Load and validate; returns the objects, error lines and warning lines."""
    loaded, file_problems = manifests.load(paths)
    old_loaded, old_problems = manifests.load(list(old_paths)) if old_paths else ([], [])
    errors = [str(p) for p in file_problems + old_problems]
    warnings: list[str] = []
    # Judged where kubectl would put them: an object without a namespace is in default.
    loaded = [manifests.Loaded(item.path, _defaulted(item.obj)) for item in loaded]
    old_loaded = [manifests.Loaded(item.path, _defaulted(item.obj)) for item in old_loaded]
    old = {_key(item.obj): item.obj for item in old_loaded}
    new_keys = {_key(item.obj) for item in loaded}
    # Every pool as it will be (for the rules on overlaps within a namespace): the new versions, and the old
    # ones not replaced.
    pools = [item.obj for item in loaded if kinds.kind_of(item.obj) in POOL_KINDS]
    pools += [obj for key, obj in old.items() if key[0] in POOL_KINDS and key not in new_keys]
    addresses = [item.obj for item in old_loaded + loaded
                 if kinds.kind_of(item.obj) in (kinds.IPADDRESS, kinds.CAPI_ADDRESS)]
    seen: dict[tuple, str] = {}
    for item in loaded:
        where = manifests.relative(item.path)
        key = _key(item.obj)
        kind = kinds.kind_of(item.obj)
        in_use = addresses_in_use(addresses, key[1], key[2], kind) if kind in POOL_KINDS else None
        if delete:
            problems: list[Problem] = validate_delete(item.obj, in_use)
        elif key in old:
            problems = validate_update(old[key], item.obj, in_use)
        else:
            problems = validate(item.obj)
        if kind in POOL_KINDS and not delete and not [p for p in problems if not p.warning]:
            problems += overlap_problems(item.obj, pools)
        for problem in problems:
            (warnings if problem.warning else errors).append(f"{where}: {problem}")
        if key in seen and o.name(item.obj):
            errors.append(f"{where}: {item.obj['kind']}/{key[1]}/{key[2]}: defined twice (also in {seen[key]})")
        seen.setdefault(key, where)
    return loaded, errors, warnings


def _defaulted(obj: dict) -> dict:
    """An object without a namespace is in ``default``, as kubectl would put it."""
    pool_kind = POOL_KINDS.get(kinds.kind_of(obj))
    if o.namespace(obj) or (pool_kind is not None and pool_kind.cluster_scoped):
        return obj
    return dict(obj, metadata=dict(o.meta(obj), namespace="default"))


def _validate(args: argparse.Namespace) -> int:
    loaded, errors, warnings = _check(args.filename, args.old, args.delete)
    for line in warnings + errors:
        print(line)
    if errors:
        return EXIT_INVALID
    print(f"{len(loaded)} object(s) {'may be deleted' if args.delete else 'valid'}", file=sys.stderr)
    return EXIT_OK


# The order objects are printed in: what the user wrote first, then what was made.


def _plan(args: argparse.Namespace) -> int:
    loaded, errors, warnings = _check(args.filename)
    for line in warnings:
        print(line, file=sys.stderr)
    if errors:
        for line in errors:
            print(line)
        return EXIT_INVALID
    now = datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")
    api = MemoryApi(now=now)
    # Files without any Cluster plan as if each Cluster named exists and runs; with Clusters, as the
    # controller does: a claim of a Cluster not among them waits for it.
    api.inventory.clusters_served = any(kinds.kind_of(item.obj) == kinds.CLUSTER for item in loaded)
    for item in loaded:
        api.load(item.obj)
    converge(api, rng=random.Random(args.seed))
    for event in api.events:
        print(f"event: {event.target}: {event.type} {event.reason}: {event.message}", file=sys.stderr)
    for obj in api.inventory.objects.values():
        ready = o.condition(o.status(obj), "Ready")
        if ready and ready.get("reason") == WAITING_FOR_CLUSTER:
            print(f"waits: {obj['kind']} {o.namespace(obj)}/{o.name(obj)}: {ready.get('message')}", file=sys.stderr)
    items = sorted(api.inventory.objects.values(),
                   key=lambda obj: _print_order().index(kinds.kind_of(obj)))
    items = [_presentable(obj) for obj in items]
    if args.output == "json":
        json.dump({"apiVersion": "v1", "kind": "List", "items": items}, sys.stdout, indent=2)
        print()
    else:
        yaml.safe_dump_all(items, sys.stdout, sort_keys=False, explicit_start=True)
    return EXIT_OK


def _samples():
    """The samples shipped beside the package (a source checkout), else in the working directory."""
    from pathlib import Path

    beside = Path(__file__).resolve().parent.parent / "samples"
    return beside if beside.is_dir() else Path("samples")


def _run(args: argparse.Namespace, go: goflags.GoFlags, as_manager: bool) -> int:
    import asyncio
    import logging

    from .controller.debugging import set_verbosity
    from .controller.runtime import run

    options = run_options(args, go, as_manager)
    handler = logging.StreamHandler()
    handler.setFormatter(_JsonFormatter() if go.get("logging-format") == "json" else
                         logging.Formatter("%(asctime)s %(levelname)s %(name)s: %(message)s"))
    logging.basicConfig(handlers=[handler])
    set_verbosity(max(go.get("v", 0), 1 if args.verbose else 0))  # also set while running: /debug/flags/v
    logging.getLogger("kopf").setLevel(logging.WARNING)  # one line per handled event is noise
    log = logging.getLogger("metal3_ipam")
    if go.ignored():
        log.info("accepted, with no meaning here: %s", ", ".join(go.ignored()))
    if options.watch_filter:
        log.info("serving only the pools and claims labelled cluster.x-k8s.io/watch-filter=%s", options.watch_filter)
    try:
        return asyncio.run(run(options))
    except KeyboardInterrupt:
        return 0


def run_options(args: argparse.Namespace, go: goflags.GoFlags, as_manager: bool = False):
    """The controller's options from ``run``'s own flags and the Go managers' ones (see
    :data:`_GO_FLAGS_HELP`); run as ``/manager`` (``as_manager``), unset flags take the Go managers'
    defaults. Raises :class:`manifests.UsageError`."""
    from .controller.runtime import Options, Tls

    def listen(flag: str, text: str) -> tuple[str, int] | None:
        try:
            where = goflags.address(flag, text)
        except goflags.FlagError as err:
            raise manifests.UsageError(str(err)) from None
        return None if where is None else (where[0] or "0.0.0.0", where[1])

    options = Options(kubeconfig=go.get("kubeconfig"), parallel_writes=max(1, args.parallel_writes))
    namespaces = args.namespace + go.get("namespace", [])
    if args.all_namespaces and namespaces:
        raise manifests.UsageError("--all-namespaces and --namespace: one or the other")
    options.namespaces = [ns for ns in namespaces if ns]
    health = [listen(flag, value) for flag, value in (("health-address", args.health_address),
                                                      ("health-addr", go.get("health-addr")),
                                                      ("health-probe-bind-address",
                                                       go.get("health-probe-bind-address"))) if value is not None]
    if not health:  # the defaults: this project's port, or both Go managers' (whose command line this is)
        health = [listen("health-addr", goflags.METAL3_HEALTH_ADDRESS),
                  listen("health-probe-bind-address", goflags.IN_CLUSTER_HEALTH_ADDRESS)] if as_manager \
            else [listen("health-address", DEFAULT_HEALTH_ADDRESS)]
    health = list(dict.fromkeys(where for where in health if where is not None))
    if not health:
        raise manifests.UsageError("the health probes must be served somewhere (a port of 0 turns them off)")
    (options.health_host, options.health_port), options.more_health = health[0], health[1:]
    options.leader_elect = go.get("leader-elect", False) and not args.no_leader_elect
    options.lease_name = args.leader_elect_lease_name or (
        DEFAULT_LEASE if not as_manager else
        goflags.METAL3_LEASE if go.of(goflags.METAL3) else goflags.IN_CLUSTER_LEASE)
    if args.leader_election_namespace:
        options.lease_namespace = args.leader_election_namespace
    if args.lock_namespace or args.leader_election_namespace:
        options.lock_namespace = args.lock_namespace or args.leader_election_namespace
    options.lease_timing = _lease_timing(args)
    if args.resync_seconds is not None:
        options.resync_seconds = args.resync_seconds
    elif "sync-period" in go:
        options.resync_seconds = go.get("sync-period")
    else:
        options.resync_seconds = goflags.SYNC_PERIOD_SECONDS if as_manager else DEFAULT_RESYNC_SECONDS
    if not options.resync_seconds > 0:
        raise manifests.UsageError(f"--sync-period {options.resync_seconds}s: expected a positive duration")
    qps, burst = (goflags.KUBE_API_QPS, goflags.KUBE_API_BURST) if as_manager else (0.0, 0)
    options.kube_api_qps = go.get("kube-api-qps", qps)
    options.kube_api_burst = go.get("kube-api-burst", burst)
    options.watch_filter = go.get("watch-filter", "")
    for flag in _kind_flags():
        value = getattr(args, flag.dest)
        try:
            options.kind_flags[flag.dest] = flag.default if value is None else flag.parse(value)
        except ValueError as err:
            raise manifests.UsageError(f"--{flag.name}: {err}") from None
    options.webhook_port = go.get("webhook-port", goflags.WEBHOOK_PORT if as_manager else 0)
    if not 0 <= options.webhook_port <= 65535:
        raise manifests.UsageError(f"--webhook-port {options.webhook_port}: expected a port number")
    options.webhook_cert_dir = go.get("webhook-cert-dir") or options.webhook_cert_dir
    options.webhook_cert_name = go.get("webhook-cert-name") or options.webhook_cert_name
    options.webhook_key_name = go.get("webhook-key-name") or options.webhook_key_name
    diagnostics = go.get("diagnostics-address", goflags.DIAGNOSTICS_ADDRESS if as_manager else "0")
    options.diagnostics = listen("diagnostics-address", diagnostics)
    options.insecure_diagnostics = go.get("insecure-diagnostics", False)
    try:
        options.tls = Tls.named(go.get("tls-min-version", "VersionTLS12"), go.get("tls-cipher-suites", []))
    except ValueError as err:
        raise manifests.UsageError(str(err)) from None
    if go.get("logging-format", "text") not in goflags.LOGGING_FORMATS:
        raise manifests.UsageError(f"--logging-format {go.get('logging-format')!r}: expected text or json")
    return options


class _JsonFormatter:
    """``--logging-format=json``: one JSON object per line, with the fields Kubernetes' JSON logs have."""

    def format(self, record) -> str:
        import logging

        line = {"ts": record.created, "level": record.levelname.lower(), "logger": record.name,
                "msg": record.getMessage()}
        if record.exc_info:
            line["error"] = logging.Formatter().formatException(record.exc_info)
        return json.dumps(line)


def _seconds(flag: str, text: str) -> float:
    """A duration as Kubernetes components take it: ``15s``, ``500ms``, ``1m``, or plain seconds."""
    units = (("ms", 0.001), ("s", 1.0), ("m", 60.0))
    number, scale = text.strip(), 1.0
    for suffix, factor in units:
        if number.endswith(suffix):
            number, scale = number[:-len(suffix)], factor
            break
    try:
        value = float(number) * scale
    except ValueError:
        value = float("nan")
    if not value > 0 or value == float("inf"):
        raise manifests.UsageError(f"{flag} {text!r}: expected a positive duration such as 15s, 500ms or 1m")
    return value


def _lease_timing(args: argparse.Namespace):
    from .controller.leader import LeaseTiming

    flags = ("--leader-elect-lease-duration", "--leader-elect-renew-deadline", "--leader-elect-retry-period")
    values = [_seconds(flag, getattr(args, flag[2:].replace("-", "_"))) for flag in flags]
    try:
        return LeaseTiming(*values)
    except ValueError as err:
        given = ", ".join(f"{flag} {getattr(args, flag[2:].replace('-', '_'))}" for flag in flags)
        raise manifests.UsageError(f"leader election: {err} (given {given})") from None


def _release(args: argparse.Namespace) -> int:
    from pathlib import Path

    from . import packaging

    try:
        folder = packaging.release(Path(args.output), args.version, image=args.image)
    except (packaging.PackagingError, OSError, yaml.YAMLError) as err:
        print(f"metal3-ipam release: {err}", file=sys.stderr)
        return EXIT_INVALID
    components = folder / packaging.COMPONENTS_FILE
    print(f"wrote {components} and {folder / 'metadata.yaml'}")
    print(f"clusterctl configuration (clusterctl --config FILE ...):\n"
          f"providers:\n"
          f"- name: {packaging.PROVIDER_NAME}\n"
          f"  type: IPAMProvider\n"
          f"  url: {components.resolve()}")
    return EXIT_OK


def _presentable(obj: dict) -> dict:
    """Drop what only the in-memory store needed (resource versions)."""
    obj = dict(obj, metadata=dict(obj["metadata"]))
    obj["metadata"].pop("resourceVersion", None)
    return obj


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
