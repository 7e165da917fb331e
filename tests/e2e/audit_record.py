"""The API server's audit record of writes: who wrote what, when it was received and answered.

A control plane started with :func:`audit_args` logs every write (level Metadata); :func:`writes`
reads them back per writer (the user name each controller authenticates as), so a test can tell
which replica wrote each thing and prove that two never wrote at once.
"""

from __future__ import annotations

import datetime
import json
from dataclasses import dataclass
from pathlib import Path

import yaml

from metal3_ipam import goflags
from metal3_ipam.cli import DEFAULT_LEASE

WRITES = {"create", "update", "patch", "delete", "deletecollection"}
# Reviews store nothing; the Leases elected on are every replica's to write (the locks kept as Leases are writes).
REVIEWS = {"selfsubjectaccessreviews"}
ELECTIONS = {DEFAULT_LEASE, goflags.IN_CLUSTER_LEASE, goflags.METAL3_LEASE}

POLICY = {
    "apiVersion": "audit.k8s.io/v1", "kind": "Policy",
    "omitStages": ["RequestReceived", "ResponseStarted"],
    "rules": [{"level": "Metadata", "verbs": sorted(WRITES)}, {"level": "None"}],
}


def audit_args(directory: Path) -> tuple[list[str], Path]:
    """API server arguments auditing every write into ``directory``, and the log's path."""
    policy = directory / "audit-policy.yaml"
    policy.write_text(yaml.safe_dump(POLICY))
    log = directory / "audit.log"
    return [f"--audit-policy-file={policy}", f"--audit-log-path={log}", "--audit-log-mode=blocking"], log


@dataclass(frozen=True)
class Write:
    writer: str
    received: datetime.datetime
    answered: datetime.datetime
    what: str
    resource: str = ""
    namespace: str = ""
    code: int | None = None


def wall() -> datetime.datetime:
    return datetime.datetime.now(datetime.timezone.utc)


def _stamp(text: str) -> datetime.datetime:
    return datetime.datetime.strptime(text, "%Y-%m-%dT%H:%M:%S.%fZ").replace(tzinfo=datetime.timezone.utc)


def writes(audit_log: Path, users: dict[str, str], offset: int = 0) -> list[Write]:
    """Every write of ``users`` (user name -> writer) except to the Leases they elect on, from byte ``offset`` of the
    log on, by the time the API server received it. An access review (``create`` of a SelfSubjectAccessReview,
    asked at start whether a kind may be listed) stores nothing and is no write."""
    found = []
    with open(audit_log, "rb") as f:
        f.seek(offset)
        lines = f.read().decode().splitlines()
    for line in lines:
        event = json.loads(line)
        user = (event.get("user") or {}).get("username")
        ref = event.get("objectRef") or {}
        if user not in users or event.get("verb") not in WRITES or ref.get("resource") in REVIEWS \
                or (ref.get("resource") == "leases" and ref.get("name") in ELECTIONS):
            continue
        code = (event.get("responseStatus") or {}).get("code")
        found.append(Write(users[user], _stamp(event["requestReceivedTimestamp"]), _stamp(event["stageTimestamp"]),
                           f"{event['verb']} {ref.get('resource')} {ref.get('namespace', '')}/{ref.get('name', '')} "
                           f"-> {code}", ref.get("resource", ""), ref.get("namespace", ""), code))
    return sorted(found, key=lambda w: w.received)


def runs(record: list[Write]) -> list[list[Write]]:
    """The writes in runs of one writer each."""
    out: list[list[Write]] = []
    for write in record:
        if out and out[-1][0].writer == write.writer:
            out[-1].append(write)
        else:
            out.append([write])
    return out


def describe(record_runs: list[list[Write]]) -> str:
    return "\n".join(f"{run[0].writer}: {len(run)} writes, received {run[0].received.time()} .. "
                     f"{run[-1].received.time()}, last answered {max(w.answered for w in run).time()}"
                     for run in record_runs)


def assert_never_at_once(record: list[Write], takeovers: int) -> None:
    """The writers' runs never overlap in time (the last write of one answered before the first of the next
    was received), and there are no more runs than takeovers."""
    record_runs = runs(record)
    for before, after in zip(record_runs, record_runs[1:]):
        last_answered = max(w.answered for w in before)
        assert last_answered < after[0].received, (
            f"{before[0].writer} and {after[0].writer} wrote at the same time: {before[0].writer}'s write answered "
            f"at {last_answered.time()}, {after[0].writer}'s received at {after[0].received.time()}\n"
            f"{describe(record_runs)}")
    assert len(record_runs) <= takeovers, f"{len(record_runs)} runs of writes for {takeovers} takeovers:\n" \
                                          f"{describe(record_runs)}"
