"""``metal3-ipam validate`` and ``metal3-ipam plan``, run in-process."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import yaml

from metal3_ipam.cli import main

from cli_run import ROOT, SAMPLES, run
from metal3_ipam.testing import corpus

# The Metal3 samples: samples/*.yaml (the other kinds' are in subfolders).
METAL3_SAMPLES = [arg for path in sorted(SAMPLES.glob("*.yaml")) for arg in ("-f", str(path))]


def write(tmp_path: Path, name: str, text: str) -> str:
    path = tmp_path / name
    path.write_text(text)
    return str(path)


def dump(*docs) -> str:
    return yaml.safe_dump_all(list(docs), sort_keys=False)


POOL = {"apiVersion": "ipam.metal3.io/v1alpha1", "kind": "IPPool",
        "metadata": {"name": "pool1", "namespace": "default"},
        "spec": {"namePrefix": "pool1", "pools": [{"start": "10.0.0.10", "end": "10.0.0.12"}], "gateway": "10.0.0.1",
                 "prefix": 24}}


def claim(name: str, pool: str = "pool1", **annotations) -> dict:
    meta = {"name": name, "namespace": "default"}
    if annotations:
        meta["annotations"] = annotations
    return {"apiVersion": "ipam.metal3.io/v1alpha1", "kind": "IPClaim", "metadata": meta,
            "spec": {"pool": {"name": pool}}}


# -- validate -----------------------------------------------------------------------

def test_validate_samples(capsys):
    code, out, err = run(capsys, "validate", "-f", str(SAMPLES))
    assert code == 0, out
    assert out == ""
    assert "valid" in err


def test_validate_reports_file_object_field_and_value(capsys, tmp_path):
    bad_pool = dict(POOL, metadata={"name": "bad", "namespace": "ns1"},
                    spec={"namePrefix": "bad", "pools": [{"start": "10.0.0.9", "end": "10.0.0.300"}]})
    bad_claim = claim("c1", ipAddress="1.2.3")
    path = write(tmp_path, "bad.yaml", dump(bad_pool, bad_claim))
    code, out, _ = run(capsys, "validate", "-f", path)
    assert code == 1
    lines = out.splitlines()
    assert any("bad.yaml" in line and "IPPool/ns1/bad" in line and "spec.pools[0].end" in line and "10.0.0.300" in line
               for line in lines), out
    assert any("bad.yaml" in line and "IPClaim/default/c1" in line and "metadata.annotations.ipAddress" in line
               and "1.2.3" in line for line in lines), out


def test_validate_refuses_pools_of_a_namespace_sharing_addresses_under_different_name_prefixes(capsys, tmp_path):
    other = dict(POOL, metadata={"name": "pool2"},  # no namespace: default, like pool1's
                 spec={"namePrefix": "pool2", "pools": [{"start": "10.0.0.11", "end": "10.0.0.20"}]})
    code, out, _ = run(capsys, "validate", "-f", write(tmp_path, "p.yaml", dump(POOL, other)))
    assert code == 1
    errors = [line for line in out.splitlines() if "warning" not in line]
    assert any("IPPool/default/pool1: spec.pools[0]" in line and "IPPool pool2" in line
               and "10.0.0.11-10.0.0.12" in line for line in errors), out
    assert any("IPPool/default/pool2: spec.pools[0]" in line and "IPPool pool1" in line for line in errors), out


def test_validate_warns_about_pools_sharing_addresses_and_the_name_prefix(capsys, tmp_path):
    other = dict(POOL, metadata={"name": "pool2", "namespace": "default"},
                 spec={"namePrefix": "pool1", "pools": [{"start": "10.0.0.11", "end": "10.0.0.20"}]})
    code, out, _ = run(capsys, "validate", "-f", write(tmp_path, "p.yaml", dump(POOL, other)))
    assert code == 0, out
    assert "warning" in out and "IPPool pool2" in out and "10.0.0.11-10.0.0.12" in out


def test_validate_reports_an_object_defined_twice(capsys, tmp_path):
    write(tmp_path, "a.yaml", dump(POOL))
    write(tmp_path, "b.yaml", dump(POOL))
    code, out, _ = run(capsys, "validate", "-f", str(tmp_path))
    assert code == 1 and "defined twice" in out


def test_validate_usage_errors(capsys, tmp_path):
    code, _, err = run(capsys, "validate", "-f", str(tmp_path / "missing.yaml"))
    assert code == 2 and "missing.yaml" in err
    code, _, err = run(capsys, "validate")
    assert code == 2 and "-f" in err
    code, _, _ = run(capsys)
    assert code == 2
    code, _, _ = run(capsys, "plan", "-f", str(SAMPLES), "-o", "xml")
    assert code == 2


@pytest.mark.parametrize("name, text, words", [
    ("broken.yaml", "kind: IPPool\nmetadata: {name: [\n", "not valid YAML"),
    ("tabs.yaml", "kind: IPPool\n\tmetadata: x\n", "not valid YAML"),
    ("broken.json", '{"kind": "IPPool", ', "not valid JSON"),
    ("scalar.yaml", "just text\n", "not a Kubernetes object"),
    ("list.yaml", "- a\n- b\n", "not a Kubernetes object"),
    ("nokind.yaml", "apiVersion: v1\nmetadata: {name: x}\n", "not a Kubernetes object"),
    ("items.yaml", "apiVersion: v1\nkind: List\nitems: 5\n", "items are not a list"),
    ("meta.yaml", "apiVersion: v1\nkind: ConfigMap\nmetadata: 5\n", "metadata that is not an object"),
    ("binary.yaml", "", "cannot be read"),
])
def test_broken_files_are_reported_without_a_traceback(capsys, tmp_path, name, text, words):
    path = tmp_path / name
    if name == "binary.yaml":
        path.write_bytes(b"\xff\xfe\x00kind: x\x80")
    else:
        path.write_text(text)
    for command in ("validate", "plan"):
        code, out, _ = run(capsys, command, "-f", str(path))
        assert code == 1, out
        assert name in out and words in out


def test_unreadable_file(capsys, tmp_path, monkeypatch):
    path = Path(write(tmp_path, "secret.yaml", dump(POOL)))
    real_read_text = Path.read_text

    def read_text(self, *args, **kwargs):
        if self.name == "secret.yaml":
            raise PermissionError(13, "Permission denied", str(self))
        return real_read_text(self, *args, **kwargs)

    monkeypatch.setattr(Path, "read_text", read_text)
    code, out, _ = run(capsys, "validate", "-f", str(path))
    assert code == 1 and "secret.yaml" in out and "cannot be read: Permission denied" in out


def test_a_dangling_link_given_by_name_is_a_usage_error(capsys, tmp_path):
    link = tmp_path / "dangling.yaml"
    link.symlink_to(tmp_path / "nowhere.yaml")
    code, _, err = run(capsys, "validate", "-f", str(link))
    assert code == 2 and "dangling.yaml" in err


def test_kind_list_json_and_multi_document_files(capsys, tmp_path):
    write(tmp_path, "list.yaml", dump({"apiVersion": "v1", "kind": "List", "items": [POOL, claim("a")]}))
    write(tmp_path, "claims.json", json.dumps({"apiVersion": "v1", "kind": "IPClaimList", "items": [claim("b")]}))
    write(tmp_path, "multi.yml", "---\n" + dump(claim("c"), None, claim("d")) + "---\n")
    write(tmp_path, "ignored.txt", "not: [yaml")
    code, out, err = run(capsys, "validate", "-f", str(tmp_path))
    assert code == 0, out
    assert "5 object(s) valid" in err
    code, out, _ = run(capsys, "plan", "-f", str(tmp_path), "-o", "json")
    assert code == 0
    items = json.loads(out)["items"]
    ips = {i["spec"]["claim"]["name"]: i["spec"]["address"] for i in items if i["kind"] == "IPAddress"}
    # Files in name order (claims.json, list.yaml, multi.yml), documents in file order.
    assert ips == {"b": "10.0.0.10", "a": "10.0.0.11", "c": "10.0.0.12"}
    d = next(i for i in items if i["kind"] == "IPClaim" and i["metadata"]["name"] == "d")
    assert "no free address" in d["status"]["errorMessage"]


def test_repeated_f_flags(capsys, tmp_path):
    a = write(tmp_path, "a.yaml", dump(POOL))
    b = write(tmp_path, "b.yaml", dump(claim("x")))
    code, out, _ = run(capsys, "plan", "-f", a, "-f", b)
    assert code == 0
    assert "pool1-10-0-0-10" in out


# -- plan ---------------------------------------------------------------------------------

def test_plan_samples_yaml(capsys):
    code, out, err = run(capsys, "plan", *METAL3_SAMPLES)
    assert code == 0
    docs = [d for d in yaml.safe_load_all(out) if d]
    addresses = {d["spec"]["claim"]["name"]: d for d in docs
                 if d["kind"] == "IPAddress" and d["apiVersion"].startswith("ipam.metal3.io/")}
    ip = {name: a["spec"]["address"] for name, a in addresses.items()}
    # The preallocated claim, the annotated claim and the IPv6 claim have fixed answers.
    assert ip["claim1"] == "192.168.0.12"
    assert addresses["claim1"]["metadata"]["name"] == "test1-prov-192-168-0-12"
    assert ip["test1-worker-static-pool1"] == "192.168.1.140"
    assert ip["v6-claim-0"] == "2001:db8:0:1::100"
    assert addresses["v6-claim-0"]["metadata"]["name"] == "v6pool-2001-db8-0-1--100"
    # The others take the lowest free addresses of the first entry, around the held .12.
    rest = sorted(ip[n] for n in ("test1-controlplane-template-0-pool1", "test1-controlplane-template-1-pool1",
                                  "cluster1-worker-0-eth0"))
    assert rest == ["192.168.0.10", "192.168.0.11", "192.168.0.13"]
    assert len(set(ip.values())) == len(ip) == 6
    # First entry's prefix and gateway; DNS from the pool defaults.
    assert addresses["claim1"]["spec"]["prefix"] == 25
    assert addresses["claim1"]["spec"]["gateway"] == "192.168.0.1"
    assert addresses["claim1"]["spec"]["dnsServers"] == ["8.8.8.8", "8.8.4.4"]
    assert addresses["test1-worker-static-pool1"]["spec"]["prefix"] == 24
    assert addresses["test1-worker-static-pool1"]["spec"]["gateway"] == "192.168.1.1"
    # The Cluster API mirror.
    (mirror,) = [d for d in docs if d["kind"] == "IPAddress" and d["apiVersion"].startswith("ipam.cluster.x-k8s.io/")]
    assert mirror["metadata"]["name"] == "cluster1-worker-0-eth0"
    assert mirror["spec"]["address"] == ip["cluster1-worker-0-eth0"]
    pools = {d["metadata"]["name"]: d for d in docs if d["kind"] == "IPPool"}
    assert pools["pool1"]["status"]["indexes"]["claim1"] == "192.168.0.12"
    assert pools["pool1"]["status"]["capacity"] == "208"
    assert pools["v6pool"]["status"]["capacity"] == str(2**64 - 1 - 1 - 254)
    # Nothing in the output is a store detail.
    assert all("resourceVersion" not in d["metadata"] for d in docs)


def test_plan_json_is_a_v1_list(capsys):
    code, out, _ = run(capsys, "plan", *METAL3_SAMPLES, "-o", "json")
    assert code == 0
    doc = json.loads(out)
    assert doc["apiVersion"] == "v1" and doc["kind"] == "List"
    kinds_seen = [i["kind"] for i in doc["items"]]
    assert kinds_seen[0] == "Cluster"
    assert kinds_seen.count("IPPool") == 2
    assert kinds_seen.count("IPAddress") == 7  # 6 Metal3 + 1 Cluster API mirror


def test_plan_serves_the_sample_claims_of_every_kind_of_pool(capsys):
    code, out, _ = run(capsys, "plan", "-f", str(SAMPLES))
    assert code == 0
    docs = [d for d in yaml.safe_load_all(out) if d]
    claims = {d["metadata"]["name"]: d for d in docs if d["kind"] == "IPAddressClaim"}
    ready = {name: next(c for c in c_["status"]["conditions"] if c["type"] == "Ready") for name, c_ in claims.items()}
    kinds_of = {name: c["spec"]["poolRef"]["kind"] for name, c in claims.items()}
    assert {"InClusterIPPool", "GlobalInClusterIPPool", "InClusterPrefixPool", "GlobalInClusterPrefixPool",
            "NetBoxIPPool", "OpenStackFloatingIPPool"} <= set(kinds_of.values())
    addresses = {d["metadata"]["name"]: d["spec"] for d in docs
                 if d["kind"] == "IPAddress" and d["apiVersion"].startswith("ipam.cluster.x-k8s.io/")}
    for name, kind in kinds_of.items():
        if kind in ("NetBoxIPPool", "OpenStackFloatingIPPool"):  # an outside IPAM answers later: offline, it waits
            assert (ready[name]["status"], ready[name]["reason"]) == ("False", "AllocationPending"), ready[name]
        else:
            assert ready[name]["status"] == "True" and name in addresses, (name, ready[name])
    # What the samples' comments say each claim gets.
    assert addresses["cluster1-cp-0-eth1"]["address"] == "10.20.0.2"
    assert {addresses["cluster1-md-0-eth0"]["address"], addresses["cluster1-md-1-eth0"]["address"]} == \
        {"10.10.0.10", "10.10.0.11"}
    assert (addresses["cluster1-md-0-delegated"]["address"], addresses["cluster1-md-0-delegated"]["prefix"]) == \
        ("fd00:100:0:10::", 64)
    assert (addresses["cluster1-site-prefix"]["address"], addresses["cluster1-site-prefix"]["prefix"]) == \
        ("fd00:200::", 56)


def test_plan_is_repeatable(capsys):
    first = run(capsys, "plan", "-f", str(SAMPLES), "-o", "json")[1]
    second = run(capsys, "plan", "-f", str(SAMPLES), "-o", "json")[1]

    def stable(text):
        return [(i["kind"], i["metadata"]["name"], i.get("spec")) for i in json.loads(text)["items"]]

    assert stable(first) == stable(second)


def test_plan_random_pool_uses_the_seed(capsys, tmp_path):
    pool = dict(POOL, spec={"namePrefix": "r", "allocationStrategy": "random", "pools": [{"subnet": "10.0.0.0/16"}]})
    path = write(tmp_path, "r.yaml", dump(pool, claim("a"), claim("b")))

    def ips(seed):
        out = run(capsys, "plan", "-f", path, "-o", "json", "--seed", str(seed))[1]
        return sorted(i["spec"]["address"] for i in json.loads(out)["items"] if i["kind"] == "IPAddress")

    assert ips(1) == ips(1)
    assert ips(1) != ips(2)


def test_plan_refuses_invalid_input(capsys, tmp_path):
    bad = dict(POOL, spec={"namePrefix": "x", "pools": [{"start": "10.0.0.9", "end": "10.0.0.1"}]})
    code, out, _ = run(capsys, "plan", "-f", write(tmp_path, "bad.yaml", dump(bad)))
    assert code == 1
    assert "IPPool/default/pool1" in out and "spec.pools[0]" in out
    assert "kind:" not in out  # no objects printed


def test_plan_prints_errors_as_events(capsys, tmp_path):
    path = write(tmp_path, "x.yaml", dump(POOL, claim("a", ipAddress="10.0.0.99")))
    code, out, err = run(capsys, "plan", "-f", path)
    assert code == 0
    assert "Warning AllocationFailed" in err and "10.0.0.99" in err


# --------------------------------------------------------------------------- run: leader election timing


def test_lease_timing_options_take_kubernetes_durations():
    from metal3_ipam import cli

    args = cli._parser().parse_args(["run", "--leader-elect-lease-duration", "1m", "--leader-elect-renew-deadline",
                                     "40", "--leader-elect-retry-period", "500ms"])
    timing = cli._lease_timing(args)
    assert (timing.lease_duration, timing.renew_deadline, timing.retry_period) == (60.0, 40.0, 0.5)
    defaults = cli._lease_timing(cli._parser().parse_args(["run"]))
    assert (defaults.lease_duration, defaults.renew_deadline, defaults.retry_period) == (15.0, 10.0, 2.0)


@pytest.mark.parametrize("argv, words", [
    (["--leader-elect-renew-deadline", "20s"],
     "renew deadline 20s must be shorter than the lease duration 15s"),
    (["--leader-elect-retry-period", "10s"], "retry period 10s must be shorter than the renew deadline 10s"),
    (["--leader-elect-lease-duration", "soon"], "--leader-elect-lease-duration 'soon': expected a positive duration"),
    (["--leader-elect-retry-period=-1s"], "--leader-elect-retry-period '-1s': expected a positive duration"),
])
def test_inconsistent_lease_timing_is_a_usage_error_before_connecting(capsys, argv, words):
    assert main(["run", "--kubeconfig", "/nonexistent", *argv]) == 2
    err = capsys.readouterr().err
    assert words in err and "Traceback" not in err


# -- update and delete rules, offline ------------------------------------------------------

def _state(capsys, tmp_path, *docs) -> str:
    """What the cluster would hold after the controller served ``docs``: `plan` output, as `kubectl get -o yaml` gives."""
    code, out, _ = run(capsys, "plan", "-f", write(tmp_path, "before.yaml", dump(*docs)))
    assert code == 0, out
    return write(tmp_path, "state.yaml", out)


def test_validate_old_judges_updates_against_the_addresses_in_use(capsys, tmp_path):
    old = _state(capsys, tmp_path, POOL, claim("a"), claim("b"))  # a: 10.0.0.10, b: 10.0.0.11
    shrunk = dict(POOL, spec=dict(POOL["spec"], pools=[{"start": "10.0.0.11", "end": "10.0.0.12"}]))
    code, out, _ = run(capsys, "validate", "--old", old, "-f", write(tmp_path, "new.yaml", dump(shrunk)))
    assert code == 1
    (line,) = out.splitlines()
    assert "new.yaml: IPPool/default/pool1: spec.pools: no longer holds 10.0.0.10" in line
    assert "pool1-10-0-0-10" in line
    # Without the old state it is a valid pool.
    code, out, _ = run(capsys, "validate", "-f", str(tmp_path / "new.yaml"))
    assert code == 0, out
    # Growing it is fine; renaming the prefix is not.
    grown = dict(POOL, spec=dict(POOL["spec"], pools=[{"start": "10.0.0.10", "end": "10.0.0.40"}]))
    code, out, err = run(capsys, "validate", "--old", old, "-f", write(tmp_path, "grown.yaml", dump(grown)))
    assert code == 0 and "1 object(s) valid" in err, out
    renamed = dict(POOL, spec=dict(POOL["spec"], namePrefix="other"))
    code, out, _ = run(capsys, "validate", "--old", old, "-f", write(tmp_path, "renamed.yaml", dump(renamed)))
    assert code == 1 and 'spec.namePrefix: is immutable (was "pool1") (value: "other")' in out


def test_validate_old_judges_a_new_pool_against_the_pools_that_exist(capsys, tmp_path):
    old = _state(capsys, tmp_path, POOL)
    other = dict(POOL, metadata={"name": "pool2", "namespace": "default"},
                 spec={"namePrefix": "pool2", "pools": [{"start": "10.0.0.12", "end": "10.0.0.20"}]})
    code, out, _ = run(capsys, "validate", "--old", old, "-f", write(tmp_path, "new.yaml", dump(other)))
    assert code == 1 and "IPPool/default/pool2: spec.pools[0]" in out and "IPPool pool1" in out


def test_validate_old_warns_of_a_new_pool_sharing_addresses_with_a_pool_of_another_kind(capsys, tmp_path):
    """As the webhook does: an InClusterIPPool sharing addresses with an IPPool of its namespace is valid, and
    the warning names the other pool and the shared range (the earlier pool keeps them)."""
    from metal3_ipam.testing import go_incluster as gi

    old = _state(capsys, tmp_path, POOL)
    new = gi.ip_pool("net", namespace="default", addresses=["10.0.0.11-10.0.0.20"], prefix=24, gateway="10.0.0.1")
    code, out, err = run(capsys, "validate", "--old", old, "-f", write(tmp_path, "new.yaml", dump(new)))
    assert code == 0 and "1 object(s) valid" in err, out
    (line,) = out.splitlines()
    assert ("new.yaml: InClusterIPPool/default/net: warning: spec.addresses: shares 10.0.0.11-10.0.0.12 "
            "with IPPool pool1") in line, line
    # Without the state there is nothing to share addresses with.
    code, out, _ = run(capsys, "validate", "-f", str(tmp_path / "new.yaml"))
    assert code == 0 and out == "", out


def test_validate_delete(capsys, tmp_path):
    old = _state(capsys, tmp_path, POOL, claim("a"))
    pool_file = write(tmp_path, "pool.yaml", dump(POOL))
    code, out, _ = run(capsys, "validate", "--delete", "--old", old, "-f", pool_file)
    assert code == 1 and "IPPool/default/pool1: spec.pool: is still in use" in out and "pool1-10-0-0-10" in out
    moving = dict(POOL, metadata=dict(POOL["metadata"], annotations={"clusterctl.cluster.x-k8s.io/delete-for-move": ""}))
    code, out, err = run(capsys, "validate", "--delete", "--old", old, "-f", write(tmp_path, "m.yaml", dump(moving)))
    assert code == 0 and "may be deleted" in err, out
    unused = _state(capsys, tmp_path, POOL)
    code, out, _ = run(capsys, "validate", "--delete", "--old", unused, "-f", pool_file)
    assert code == 0, out


def test_a_huge_preallocation_map_is_refused_on_its_size_without_its_entries_read(capsys, tmp_path):
    """Refused on its size: none of its 100,000 entries is read (each is wrong, and none is named). Read with
    the fastest loader there is (the next test); how long it takes beside loading the file alone is measured
    by bench/admission.py."""
    held = "\n".join(f"    claim-{i}: not-an-ip-{i}" for i in range(100_000))
    text = ("apiVersion: ipam.metal3.io/v1alpha1\nkind: IPPool\nmetadata:\n  name: big\n"
            "spec:\n  namePrefix: big\n  pools:\n  - subnet: 2001:db8::/8\n  preAllocations:\n" + held + "\n")
    path = write(tmp_path, "huge.yaml", text)
    code, out, _ = run(capsys, "validate", "-f", path)
    assert code == 1 and "spec.preAllocations: must have at most 4096 entries" in out
    assert "not-an-ip" not in out and "spec.preAllocations[" not in out, out[:2000]


def test_manifests_are_read_with_the_c_loader_when_there_is_one():
    from metal3_ipam import manifests

    if yaml.__with_libyaml__:
        assert manifests.SafeLoader is yaml.CSafeLoader
    else:
        assert manifests.SafeLoader is yaml.SafeLoader


# -- the corpus of invalid manifests (also applied to a real API server: tests/e2e/admission/test_webhooks.py) --


CORPUS = corpus.cases(ROOT / "tests" / "data" / "invalid")


def test_the_corpus_is_large_and_covers_every_kind_and_operation():
    assert len(CORPUS) >= 40
    assert {c.subject["kind"] for c in CORPUS} == {"IPPool", "IPClaim", "IPAddress", "IPAddressClaim",
                                                   "InClusterIPPool", "GlobalInClusterIPPool",
                                                   "InClusterPrefixPool", "GlobalInClusterPrefixPool"}
    for kind in ("InClusterIPPool", "GlobalInClusterIPPool", "InClusterPrefixPool"):
        assert {c.operation for c in CORPUS if c.subject["kind"] == kind} == {"create", "update", "delete"}, kind
    assert {c.operation for c in CORPUS} == {"create", "update", "delete"}
    assert {c.layer for c in CORPUS} == {"schema", "webhook"}


@pytest.mark.parametrize("case", CORPUS, ids=lambda c: c.name)
def test_validate_refuses_every_invalid_manifest_naming_the_field(capsys, tmp_path, case):
    argv = ["validate", "-f", write(tmp_path, "subject.yaml", dump(case.subject))]
    if case.setup:
        code, out, err = run(capsys, "plan", "-f", write(tmp_path, "setup.yaml", dump(*case.setup)))
        assert code == 0, f"the setup of {case.name} is refused:\n{out}{err}"
        argv += ["--old", write(tmp_path, "state.yaml", out)]
    if case.operation == "delete":
        argv.append("--delete")
    code, out, _ = run(capsys, *argv)
    assert code == 1, out
    errors = [line for line in out.splitlines() if ": warning: " not in line]
    # Each line names the file, the object, the field and the value.
    who = f"subject.yaml: {case.subject['kind']}/"
    named = [line for line in errors if who in line and f"/{case.subject['metadata']['name']}: " in line]
    assert any(case.expect in line and "(value: " in line and all(v in line for v in case.values)
               for line in named), f"no error names {case.expect!r} and {case.values}:\n{out}"


VALID = corpus.valid_cases(ROOT / "tests" / "data" / "valid")


@pytest.mark.parametrize("case", VALID, ids=lambda c: c.name)
def test_validate_accepts_every_tricky_valid_manifest(capsys, case):
    code, out, _ = run(capsys, "validate", "-f", str(case.path))
    assert code == 0, out
    warnings = [line for line in out.splitlines() if ": warning: " in line]
    assert len(warnings) == len(out.splitlines())
    if case.warns:
        assert any(case.warns in line for line in warnings), out
    else:
        assert not warnings, out
