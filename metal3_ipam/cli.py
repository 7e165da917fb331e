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

from . import manifests
from .core import kinds
from .core import objects as o
from .core.poolkind import REGISTRY as POOL_KINDS
from .core.problems import Problem
from .core.reconcile import WAITING_FOR_CLUSTER
from .core.validation import addresses_in_use, overlap_problems, validate, validate_delete, validate_update
from .memory import MemoryApi, converge
from . import poolkinds  # noqa: F401  (registers the kinds of pool)

EXIT_OK, EXIT_INVALID, EXIT_USAGE = 0, 1, 2


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
    run = commands.add_parser("run", help="run the controller against a cluster")
    run.add_argument("--kubeconfig", help="kubeconfig file (default: $KUBECONFIG, ~/.kube/config, or in-cluster)")
    scope = run.add_mutually_exclusive_group()
    scope.add_argument("-n", "--namespace", action="append", default=[], metavar="NS",
                       help="serve only this namespace (repeatable)")
    scope.add_argument("-A", "--all-namespaces", action="store_true", help="serve every namespace (the default)")
    run.add_argument("--health-address", default="0.0.0.0:8081", metavar="HOST:PORT",
                     help="where /healthz, /readyz and /metrics are served (default 0.0.0.0:8081)")
    run.add_argument("--no-leader-elect", dest="leader_elect", action="store_false",
                     help="act without holding the Lease (safe, but replicas then duplicate work)")
    run.add_argument("--leader-election-namespace", default=None, metavar="NS",
                     help="namespace of the Lease (default: $POD_NAMESPACE or default)")
    run.add_argument("--lock-namespace", default=None, metavar="NS",
                     help="namespace of the locks of the pools of cluster scope, one IPAddress per IP handed out "
                          "(default: $POD_NAMESPACE or default)")
    run.add_argument("--leader-elect-lease-duration", default="15s", metavar="DURATION",
                     help="how long standbys wait, after they last saw the Lease change, before taking it (default 15s)")
    run.add_argument("--leader-elect-renew-deadline", default="10s", metavar="DURATION",
                     help="the leader stops writing when it could not renew for this long; shorter than the lease "
                          "duration (default 10s)")
    run.add_argument("--leader-elect-retry-period", default="2s", metavar="DURATION",
                     help="how often the Lease is renewed or tried for (default 2s)")
    run.add_argument("--resync-seconds", type=float, default=300.0,
                     help="look at every pool again this often (default 300)")
    run.add_argument("--parallel-writes", type=int, default=16, metavar="N",
                     help="API writes in flight at once (default 16)")
    run.add_argument("--webhook-port", type=int, default=0, metavar="PORT",
                     help="serve the admission webhooks over HTTPS on this port (default 0: not served)")
    run.add_argument("--webhook-cert-dir", default=None, metavar="DIR",
                     help="directory holding the serving certificate tls.crt and its key tls.key, reloaded when "
                          "they change (default /tmp/k8s-webhook-server/serving-certs)")
    for flag in _kind_flags():
        run.add_argument(f"--{flag.name}", default=None, metavar=flag.metavar, help=flag.help)
    run.add_argument("-v", "--verbose", action="store_true", help="log every planned write")

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


def main(argv: Sequence[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    try:
        if args.command == "validate":
            return _validate(args)
        if args.command == "run":
            return _run(args)
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


def _run(args: argparse.Namespace) -> int:
    import asyncio
    import logging

    from .controller.runtime import Options, run

    logging.basicConfig(level=logging.INFO if args.verbose else logging.WARNING,
                        format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    logging.getLogger("metal3_ipam").setLevel(logging.INFO)
    logging.getLogger("kopf").setLevel(logging.WARNING)  # one line per handled event is noise
    if not args.verbose:
        logging.getLogger("metal3_ipam.pools").setLevel(logging.WARNING)
    host, _, port = args.health_address.rpartition(":")
    if not port.isdigit():
        raise manifests.UsageError(f"--health-address {args.health_address!r}: expected HOST:PORT")
    options = Options(kubeconfig=args.kubeconfig, namespaces=args.namespace, health_host=host or "0.0.0.0",
                      health_port=int(port), leader_elect=args.leader_elect,
                      resync_seconds=args.resync_seconds, parallel_writes=max(1, args.parallel_writes))
    if args.leader_election_namespace:
        options.lease_namespace = args.leader_election_namespace
    if args.lock_namespace:
        options.lock_namespace = args.lock_namespace
    options.lease_timing = _lease_timing(args)
    for flag in _kind_flags():
        value = getattr(args, flag.dest)
        try:
            options.kind_flags[flag.dest] = flag.default if value is None else flag.parse(value)
        except ValueError as err:
            raise manifests.UsageError(f"--{flag.name}: {err}") from None
    if not 0 <= args.webhook_port <= 65535:
        raise manifests.UsageError(f"--webhook-port {args.webhook_port}: expected a port number")
    options.webhook_port = args.webhook_port
    if args.webhook_cert_dir:
        options.webhook_cert_dir = args.webhook_cert_dir
    try:
        return asyncio.run(run(options))
    except KeyboardInterrupt:
        return 0


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
