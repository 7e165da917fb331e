"""Admission rules (SPEC §9): every message names the object, the field path and the value."""

from __future__ import annotations

import copy

import pytest

from metal3_ipam.core.validation import (overlap_warnings, validate, validate_ipaddress_update,
                                         validate_ipclaim_update, validate_pool_update)
from ipam_objects import METAL3, capi_claim, ipclaim, ippool


def lines(problems) -> list[str]:
    return [str(p) for p in problems]


def errors_of(obj) -> list[str]:
    return [str(p) for p in validate(obj) if not p.warning]


def assert_problem(found: list[str], obj_id: str, path: str, value: str) -> None:
    assert any(line.startswith(f"{obj_id}: ") and f" {path}: " in f" {line}" and value in line for line in found), found


def ipaddress(name="p-10-0-0-1", **spec):
    spec.setdefault("address", "10.0.0.1")
    spec.setdefault("pool", {"name": "pool1"})
    spec.setdefault("claim", {"name": "c1"})
    return {"apiVersion": METAL3, "kind": "IPAddress", "metadata": {"name": name, "namespace": "ns"}, "spec": spec}


# -- valid objects ---------------------------------------------------------------

def test_valid_objects_have_no_problems():
    assert validate(ippool(gateway="192.168.0.1", prefix=24, dnsServers=["8.8.8.8"],
                           pools=[{"subnet": "192.168.0.0/24"}], preAllocations={"c": "192.168.0.5"},
                           excludedAddresses=["192.168.0.200-192.168.0.210"])) == []
    assert validate(ipclaim("c1")) == []
    assert validate(ipclaim("c1", ip="10.0.0.1")) == []
    assert validate(capi_claim("c1")) == []
    assert validate(ipaddress(prefix=24, gateway="10.0.0.254", dnsServers=["8.8.8.8"])) == []


def test_kinds_that_are_not_ours_are_not_judged():
    assert validate({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {}}) == []
    assert validate({"kind": "IPPool"}) == []  # no group: not ipam.metal3.io
    assert validate("text") == []
    assert validate(None) == []


# -- IPPool ----------------------------------------------------------------------

@pytest.mark.parametrize("spec, path, value", [
    ({"pools": [{"start": "10.0.0.9", "end": "10.0.0.1"}]}, "spec.pools[0]", "10.0.0.9"),
    ({"pools": [{"start": "10.0.0.1x", "end": "10.0.0.9"}]}, "spec.pools[0].start", '"10.0.0.1x"'),
    ({"pools": [{"subnet": "10.0.0.0/24"}], "gateway": "2001:db8::1"}, "spec.pools[0].subnet", "10.0.0.0/24"),
    ({"pools": [{"subnet": "10.0.0.0/24", "gateway": "2001:db8::1"}]}, "spec.pools[0].gateway", "2001:db8::1"),
    ({"pools": [{"subnet": "10.0.0.0/24", "prefix": 33}]}, "spec.pools[0].prefix", "33"),
    ({"pools": [{"start": "10.0.0.1", "end": "10.0.0.200", "prefix": 25}]}, "spec.pools[0].prefix", "25"),
    ({"pools": [{"subnet": "10.0.0.0/24", "end": "10.0.1.9"}]}, "spec.pools[0].end", "10.0.1.9"),
    ({"namePrefix": "UPPER", "pools": [{"subnet": "10.0.0.0/24"}]}, "spec.namePrefix", "UPPER"),
    ({"pools": [{"subnet": "10.0.0.0/24"}, {"subnet": "10.0.0.128/25"}]}, "spec.pools[1]", "spec.pools[0]"),
    ({"pools": [{"subnet": "10.0.0.0/24"}], "preAllocations": {"c": "10.0.5.5"}}, "spec.preAllocations.c", "10.0.5.5"),
    ({"pools": [{"subnet": "10.0.0.0/24"}], "preAllocations": {"a": "10.0.0.5", "b": "10.0.0.5"}},
     "spec.preAllocations.b", "10.0.0.5"),
])
def test_pool_rules(spec, path, value):
    pool = ippool("bad", ns="ns", **spec)
    assert_problem(errors_of(pool), "IPPool/ns/bad", path, value)


def test_pool_without_name_prefix_is_rejected():
    pool = ippool("bad", ns="ns", pools=[{"subnet": "10.0.0.0/24"}])
    del pool["spec"]["namePrefix"]
    assert_problem(errors_of(pool), "IPPool/ns/bad", "spec.namePrefix", "None")


def test_pool_without_name_is_rejected():
    pool = ippool("x")
    del pool["metadata"]["name"]
    assert any("metadata.name" in line for line in errors_of(pool))


def test_every_problem_is_listed_not_only_the_first():
    pool = ippool("bad", ns="ns", namePrefix="Bad", gateway="10.0.0.300",
                  pools=[{"start": "10.0.0.5", "end": "10.0.0.1"}])
    found = errors_of(pool)
    assert len(found) >= 3
    assert_problem(found, "IPPool/ns/bad", "spec.namePrefix", "Bad")
    assert_problem(found, "IPPool/ns/bad", "spec.gateway", "10.0.0.300")


# -- IPClaim / IPAddressClaim ------------------------------------------------------

def test_ipclaim_needs_a_pool():
    claim = ipclaim("c1", ns="ns")
    claim["spec"] = {}
    assert_problem(errors_of(claim), "IPClaim/ns/c1", "spec.pool.name", "None")


def test_ipclaim_pool_in_another_namespace_is_rejected():
    claim = ipclaim("c1", ns="ns")
    claim["spec"]["pool"]["namespace"] = "other"
    assert_problem(errors_of(claim), "IPClaim/ns/c1", "spec.pool.namespace", "other")


@pytest.mark.parametrize("make", [ipclaim, capi_claim])
def test_claim_ip_annotation_must_be_an_ip(make):
    claim = make("c1", ns="ns", ip="10.0.0.300")
    kind = claim["kind"]
    assert_problem(errors_of(claim), f"{kind}/ns/c1", "metadata.annotations.ipAddress", "10.0.0.300")


def test_capi_claim_needs_pool_ref_kind_and_name():
    claim = capi_claim("c1", ns="ns")
    claim["spec"]["poolRef"] = {"apiGroup": "ipam.metal3.io"}
    found = errors_of(claim)
    assert_problem(found, "IPAddressClaim/ns/c1", "spec.poolRef.kind", "None")
    assert_problem(found, "IPAddressClaim/ns/c1", "spec.poolRef.name", "None")
    claim["spec"] = {}
    assert_problem(errors_of(claim), "IPAddressClaim/ns/c1", "spec.poolRef", "None")


def test_ipclaim_pool_is_immutable():
    old = ipclaim("c1", ns="ns", pool="pool1")
    new = ipclaim("c1", ns="ns", pool="pool2")
    assert_problem(lines(validate_ipclaim_update(old, new)), "IPClaim/ns/c1", "spec.pool", "pool2")
    assert validate_ipclaim_update(old, copy.deepcopy(old)) == []
    # Other changes are fine.
    relabelled = copy.deepcopy(old)
    relabelled["metadata"]["labels"] = {"a": "b"}
    assert validate_ipclaim_update(old, relabelled) == []


# -- IPAddress ---------------------------------------------------------------------

@pytest.mark.parametrize("spec, path, value", [
    ({"address": "10.0.0.x"}, "spec.address", "10.0.0.x"),
    ({"prefix": 33}, "spec.prefix", "33"),
    ({"gateway": "2001:db8::1"}, "spec.gateway", "2001:db8::1"),
    ({"gateway": "nope"}, "spec.gateway", "nope"),
    ({"dnsServers": ["1.1.1.x"]}, "spec.dnsServers[0]", "1.1.1.x"),
    ({"claim": {}}, "spec.claim.name", "None"),
    ({"pool": "pool1"}, "spec.pool.name", "pool1"),
])
def test_ipaddress_rules(spec, path, value):
    assert_problem(errors_of(ipaddress(**spec)), "IPAddress/ns/p-10-0-0-1", path, value)


def test_ipaddress_spec_is_immutable():
    old = ipaddress()
    for change in ({"address": "10.0.0.2"}, {"prefix": 24}, {"gateway": "10.0.0.254"},
                   {"claim": {"name": "c2"}}, {"pool": {"name": "pool2"}}, {"dnsServers": ["8.8.8.8"]}):
        new = copy.deepcopy(old)
        new["spec"].update(change)
        assert any("spec: is immutable" in line for line in lines(validate_ipaddress_update(old, new))), change
    relabelled = copy.deepcopy(old)
    relabelled["metadata"]["labels"] = {"a": "b"}
    assert validate_ipaddress_update(old, relabelled) == []


# -- IPPool updates ---------------------------------------------------------------

def test_name_prefix_is_immutable():
    old = ippool("p", ns="ns", namePrefix="a")
    new = ippool("p", ns="ns", namePrefix="b")
    assert_problem(lines(validate_pool_update(old, new)), "IPPool/ns/p", "spec.namePrefix", "b")


def test_allocation_strategy_is_immutable_and_defaults_to_sequential():
    old = ippool("p", ns="ns")
    new = ippool("p", ns="ns", allocationStrategy="random")
    assert_problem(lines(validate_pool_update(old, new)), "IPPool/ns/p", "spec.allocationStrategy", "random")
    same = ippool("p", ns="ns", allocationStrategy="sequential")
    assert validate_pool_update(old, same) == []


def test_pool_update_may_not_drop_an_address_in_use():
    old = ippool("p", ns="ns", pools=[{"start": "10.0.0.1", "end": "10.0.0.20"}])
    new = ippool("p", ns="ns", pools=[{"start": "10.0.0.1", "end": "10.0.0.10"}])
    in_use = {"p-10-0-0-5": "10.0.0.5", "p-10-0-0-15": "10.0.0.15"}
    found = lines(validate_pool_update(old, new, in_use))
    assert_problem(found, "IPPool/ns/p", "spec.pools", "10.0.0.15")
    assert "p-10-0-0-15" in " ".join(found)
    assert not any("10.0.0.5 " in line for line in found)
    # Growing, or shrinking around the addresses in use, is fine.
    grown = ippool("p", ns="ns", pools=[{"start": "10.0.0.1", "end": "10.0.0.30"}])
    assert validate_pool_update(old, grown, in_use) == []
    split = ippool("p", ns="ns", pools=[{"start": "10.0.0.5", "end": "10.0.0.5"}, {"start": "10.0.0.15", "end": "10.0.0.16"}])
    assert validate_pool_update(old, split, in_use) == []


def test_pool_update_is_also_validated_as_a_pool():
    old = ippool("p", ns="ns")
    new = ippool("p", ns="ns", pools=[{"start": "10.0.0.9", "end": "10.0.0.1"}])
    assert_problem(lines(validate_pool_update(old, new)), "IPPool/ns/p", "spec.pools[0]", "10.0.0.9")


@pytest.mark.parametrize("broken", [None, [], "x", {"spec": [1]}, {"spec": "s"}, {"metadata": 5, "spec": None}])
def test_updates_never_raise_on_broken_objects(broken):
    good_pool, good_claim, good_address = ippool("p"), ipclaim("c"), ipaddress()
    for old, new in ((broken, good_pool), (good_pool, broken)):
        validate_pool_update(old, new, {"a": "10.0.0.1"})
    for old, new in ((broken, good_claim), (good_claim, broken)):
        validate_ipclaim_update(old, new)
    for old, new in ((broken, good_address), (good_address, broken)):
        validate_ipaddress_update(old, new)


# -- overlap with other pools -------------------------------------------------------

def test_overlap_with_another_pool_in_the_namespace_is_a_warning():
    mine = ippool("a", ns="ns", namePrefix="a", pools=[{"start": "10.0.0.1", "end": "10.0.0.20"}])
    theirs = ippool("b", ns="ns", namePrefix="b", pools=[{"start": "10.0.0.15", "end": "10.0.0.30"}])
    elsewhere = ippool("c", ns="other", namePrefix="c", pools=[{"start": "10.0.0.15", "end": "10.0.0.30"}])
    apart = ippool("d", ns="ns", namePrefix="d", pools=[{"start": "10.0.0.21", "end": "10.0.0.30"}])
    v6 = ippool("e", ns="ns", namePrefix="e", pools=[{"subnet": "2001:db8::/64"}])
    warnings = overlap_warnings(mine, [mine, theirs, elsewhere, apart, v6])
    assert len(warnings) == 1
    assert warnings[0].warning
    assert_problem(lines(warnings), "IPPool/ns/a", "spec.pools[0]", "IPPool b")
    # A warning does not make the pool invalid.
    assert errors_of(mine) == []


def test_overlap_warning_mentions_a_shared_name_prefix():
    mine = ippool("a", ns="ns", namePrefix="same", pools=[{"start": "10.0.0.1", "end": "10.0.0.20"}])
    theirs = ippool("b", ns="ns", namePrefix="same", pools=[{"start": "10.0.0.15", "end": "10.0.0.30"}])
    (warning,) = overlap_warnings(mine, [theirs])
    assert "same namePrefix" in warning.message


def test_overlap_warnings_ignore_invalid_pools():
    mine = ippool("a", ns="ns", pools=[{"start": "10.0.0.1", "end": "10.0.0.20"}])
    broken = ippool("b", ns="ns", pools=[{"start": "10.0.0.20", "end": "10.0.0.1"}])
    assert overlap_warnings(mine, [broken]) == []
    assert overlap_warnings(broken, [mine]) == []
