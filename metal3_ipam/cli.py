"""The ``metal3-ipam`` command.

- ``validate -f PATH…``: the admission rules, offline; one line per problem.
- ``plan -f PATH…``: the controller's reconcile run in memory to a fixed
  point; prints every object as it would be afterwards.

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
from .core.problems import Problem
from .core.validation import overlap_warnings, validate
from .memory import MemoryApi, converge

EXIT_OK, EXIT_INVALID, EXIT_USAGE = 0, 1, 2


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="metal3-ipam", description=__doc__.splitlines()[0])
    commands = parser.add_subparsers(dest="command", required=True)

    check = commands.add_parser("validate", help="check manifests against the admission rules")
    check.add_argument("-f", "--filename", action="append", required=True, metavar="PATH",
                       help="file or folder of YAML/JSON manifests (repeatable)")

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
    run.add_argument("-v", "--verbose", action="store_true", help="log every planned write")

    demo = commands.add_parser("demo", help="start a local control plane, apply the samples, run the controller, "
                                            "show the result, stop")
    demo.add_argument("-f", "--filename", action="append", metavar="PATH",
                      help="manifests to apply instead of the samples (repeatable)")
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    try:
        if args.command == "validate":
            return _validate(args)
        if args.command == "run":
            return _run(args)
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


def _check(paths: list[str]) -> tuple[list[manifests.Loaded], list[str], list[str]]:
    """Load and validate; returns the objects, error lines and warning lines."""
    loaded, file_problems = manifests.load(paths)
    errors = [str(p) for p in file_problems]
    warnings = []
    seen: dict[tuple, str] = {}
    pools = [item for item in loaded if kinds.kind_of(item.obj) == kinds.IPPOOL]
    for item in loaded:
        where = manifests.relative(item.path)
        problems: list[Problem] = validate(item.obj)
        if kinds.kind_of(item.obj) == kinds.IPPOOL and not problems:
            problems = overlap_warnings(item.obj, [p.obj for p in pools])
        for problem in problems:
            (warnings if problem.warning else errors).append(f"{where}: {problem}")
        key = (kinds.kind_of(item.obj), o.namespace(item.obj) or "default", o.name(item.obj))
        if key in seen and o.name(item.obj):
            errors.append(f"{where}: {item.obj['kind']}/{key[1]}/{key[2]}: defined twice (also in {seen[key]})")
        seen.setdefault(key, where)
    return loaded, errors, warnings


def _validate(args: argparse.Namespace) -> int:
    loaded, errors, warnings = _check(args.filename)
    for line in warnings + errors:
        print(line)
    if errors:
        return EXIT_INVALID
    print(f"{len(loaded)} object(s) valid", file=sys.stderr)
    return EXIT_OK


# The order objects are printed in: what the user wrote first, then what was made.
_PRINT_ORDER = [kinds.CLUSTER, kinds.IPPOOL, kinds.IPCLAIM, kinds.CAPI_CLAIM, kinds.IPADDRESS, kinds.CAPI_ADDRESS]


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
    for item in loaded:
        api.load(item.obj)
    converge(api, rng=random.Random(args.seed))
    for event in api.events:
        print(f"event: {event.target}: {event.type} {event.reason}: {event.message}", file=sys.stderr)
    items = sorted(api.inventory.objects.values(),
                   key=lambda obj: _PRINT_ORDER.index(kinds.kind_of(obj)))
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

    from .controller.main import Options, run

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
    options.lease_timing = _lease_timing(args)
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


def _presentable(obj: dict) -> dict:
    """Drop what only the in-memory store needed (resource versions)."""
    obj = dict(obj, metadata=dict(obj["metadata"]))
    obj["metadata"].pop("resourceVersion", None)
    return obj


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
