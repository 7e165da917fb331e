"""Admission rules (SPEC §9): every message names the object, the field path and the value."""

from __future__ import annotations

import copy
import ipaddress as ipaddr

import pytest

from metal3_ipam.core.validation import (addresses_in_use, overlap_problems, validate, validate_delete,
                                         validate_ipaddress_update, validate_ipclaim_update, validate_pool_update,
                                         validate_update)
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
    ({"pools": [{"subnet": "10.0.0.0/24"}], "gateway": "2001:db8::1"}, "spec.gateway", "2001:db8::1"),
    ({"pools": [{"subnet": "10.0.0.0/24", "gateway": "2001:db8::1"}]}, "spec.pools[0].gateway", "2001:db8::1"),
    ({"pools": [{"subnet": "10.0.0.0/24", "prefix": 33}]}, "spec.pools[0].prefix", "33"),
    ({"pools": [{"start": "10.0.0.1", "end": "10.0.0.200", "prefix": 25}]}, "spec.pools[0].prefix", "25"),
    ({"pools": [{"subnet": "10.0.0.0/24", "end": "10.0.1.9"}]}, "spec.pools[0].end", "10.0.1.9"),
    ({"namePrefix": "UPPER", "pools": [{"subnet": "10.0.0.0/24"}]}, "spec.namePrefix", "UPPER"),
    ({"pools": [{"subnet": "10.0.0.0/24"}, {"subnet": "10.0.0.128/25"}]}, "spec.pools[1]", "spec.pools[0]"),
    ({"pools": [{"subnet": "10.0.0.0/24"}], "preAllocations": {"c": "10.0.5.5"}}, "spec.preAllocations[c]", "10.0.5.5"),
    ({"pools": [{"subnet": "10.0.0.0/24"}], "preAllocations": {"a": "10.0.0.5", "b": "10.0.0.5"}},
     "spec.preAllocations[b]", "10.0.0.5"),
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
    claim["spec"]["poolRef"] = {"apiGroup": "ipam.metal3.io", "kind": "Subnet", "name": "x"}
    assert_problem(errors_of(claim), "IPAddressClaim/ns/c1", "spec.poolRef.kind", "Subnet")


@pytest.mark.parametrize("spec", [
    {},
    {"poolRef": None},
    {"poolRef": {"kind": "InClusterIPPool", "name": "p"}},  # v1beta1: no apiGroup is the core group
    {"poolRef": {"apiGroup": "ipam.cluster.x-k8s.io", "kind": "InfobloxIPPool", "name": ""}},
    {"poolRef": {"apiGroup": "ipam.example.com", "kind": "IPPool", "name": "p"}},
])
def test_claims_on_other_providers_pools_are_not_ours_to_judge(spec):
    claim = capi_claim("c1", ns="ns", ip="not-an-ip")
    claim["spec"] = spec
    assert validate(claim) == []
    assert validate_update(claim, claim) == []


def test_ipclaim_pool_is_immutable():
    old = ipclaim("c1", ns="ns", pool="pool1")
    new = ipclaim("c1", ns="ns", pool="pool2")
    assert_problem(lines(validate_ipclaim_update(old, new)), "IPClaim/ns/c1", "spec.pool", "pool2")
    assert 'spec.pool: is immutable (was "ns/pool1") (value: "ns/pool2")' in lines(validate_ipclaim_update(old, new))[0]
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
        (field,) = change
        found = lines(validate_ipaddress_update(old, new))
        assert len(found) == 1 and f"spec.{field}: is immutable" in found[0], (change, found)
    moved = copy.deepcopy(old)
    moved["spec"]["address"] = "10.0.0.2"
    (line,) = lines(validate_ipaddress_update(old, moved))
    assert f'spec.address: is immutable: an IPAddress never changes (was "{old["spec"]["address"]}") (value: "10.0.0.2")' in line
    moved = copy.deepcopy(old)
    moved["spec"]["address"] = "10.0.0.2"
    (line,) = lines(validate_ipaddress_update(old, moved))
    assert f'spec.address: is immutable: an IPAddress never changes (was "{old["spec"]["address"]}") (value: "10.0.0.2")' in line
    relabelled = copy.deepcopy(old)
    relabelled["metadata"]["labels"] = {"a": "b"}
    assert validate_ipaddress_update(old, relabelled) == []


# -- IPPool updates ---------------------------------------------------------------

def test_name_prefix_is_immutable():
    old = ippool("p", ns="ns", namePrefix="a")
    new = ippool("p", ns="ns", namePrefix="b")
    assert_problem(lines(validate_pool_update(old, new)), "IPPool/ns/p", "spec.namePrefix", "b")


def test_allocation_strategy_is_immutable_and_defaults_to_sequential():
    old = ippool("p", ns="ns", prefix=24)
    new = ippool("p", ns="ns", prefix=24, allocationStrategy="random")
    assert_problem(lines(validate_pool_update(old, new)), "IPPool/ns/p", "spec.allocationStrategy", "random")
    same = ippool("p", ns="ns", prefix=24, allocationStrategy="sequential")
    assert validate_pool_update(old, same) == []


def test_pool_update_may_not_drop_an_address_in_use():
    old = ippool("p", ns="ns", prefix=24, pools=[{"start": "10.0.0.1", "end": "10.0.0.20"}])
    new = ippool("p", ns="ns", prefix=24, pools=[{"start": "10.0.0.1", "end": "10.0.0.10"}])
    in_use = {"p-10-0-0-5": "10.0.0.5", "p-10-0-0-15": "10.0.0.15"}
    found = lines(validate_pool_update(old, new, in_use))
    assert_problem(found, "IPPool/ns/p", "spec.pools", "10.0.0.15")
    assert "p-10-0-0-15" in " ".join(found)
    assert not any("10.0.0.5 " in line for line in found)
    # Growing, or shrinking around the addresses in use, is fine.
    grown = ippool("p", ns="ns", prefix=24, pools=[{"start": "10.0.0.1", "end": "10.0.0.30"}])
    assert validate_pool_update(old, grown, in_use) == []
    split = ippool("p", ns="ns", prefix=24, pools=[{"start": "10.0.0.5", "end": "10.0.0.5"}, {"start": "10.0.0.15", "end": "10.0.0.16"}])
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

def test_overlap_with_a_pool_of_another_name_prefix_is_an_error_naming_both_pools_and_the_range():
    mine = ippool("a", ns="ns", namePrefix="a", pools=[{"start": "10.0.0.1", "end": "10.0.0.20"}])
    theirs = ippool("b", ns="ns", namePrefix="b", pools=[{"subnet": "10.1.0.0/24"},
                                                          {"start": "10.0.0.15", "end": "10.0.0.30"}])
    elsewhere = ippool("c", ns="other", namePrefix="c", pools=[{"start": "10.0.0.15", "end": "10.0.0.30"}])
    apart = ippool("d", ns="ns", namePrefix="d", pools=[{"start": "10.0.0.21", "end": "10.0.0.30"}])
    v6 = ippool("e", ns="ns", namePrefix="e", pools=[{"subnet": "2001:db8::/64"}])
    (problem,) = overlap_problems(mine, [mine, theirs, elsewhere, apart, v6])
    assert not problem.warning
    line = str(problem)
    assert_problem([line], "IPPool/ns/a", "spec.pools[0]", "10.0.0.15-10.0.0.20")
    assert "IPPool b (spec.pools[1])" in line and "'a'" in line and "'b'" in line
    # Symmetric: the other pool is refused as well.
    (back,) = overlap_problems(theirs, [mine])
    assert_problem([str(back)], "IPPool/ns/b", "spec.pools[1]", "10.0.0.15-10.0.0.20")
    assert not back.warning


def test_overlap_between_pools_sharing_the_name_prefix_is_a_warning():
    mine = ippool("a", ns="ns", namePrefix="same", pools=[{"start": "10.0.0.1", "end": "10.0.0.20"}])
    theirs = ippool("b", ns="ns", namePrefix="same", pools=[{"start": "10.0.0.15", "end": "10.0.0.30"}])
    (warning,) = overlap_problems(mine, [theirs])
    assert warning.warning
    assert_problem([str(warning)], "IPPool/ns/a", "spec.pools[0]", "10.0.0.15-10.0.0.20")
    assert "IPPool b" in warning.message and "'same'" in warning.message
    assert "only one of them" in warning.message
    assert errors_of(mine) == []


def test_overlap_is_of_address_sets_gateways_and_excluded_addresses_do_not_count():
    # b's only addresses are a's gateway and a's excluded range: nothing is shared.
    mine = ippool("a", ns="ns", namePrefix="a", gateway="10.0.0.1", excludedAddresses=["10.0.0.10-10.0.0.19"],
                  pools=[{"subnet": "10.0.0.0/27"}])
    theirs = ippool("b", ns="ns", namePrefix="b", pools=[{"start": "10.0.0.1", "end": "10.0.0.1"},
                                                          {"start": "10.0.0.10", "end": "10.0.0.19"}])
    assert overlap_problems(mine, [theirs]) == []
    assert overlap_problems(theirs, [mine]) == []
    # The broadcast address of a /27 is no address of a either.
    broadcast = ippool("c", ns="ns", namePrefix="c", pools=[{"start": "10.0.0.31", "end": "10.0.0.40"}])
    assert overlap_problems(mine, [broadcast]) == []
    # One shared address is enough.
    touching = ippool("d", ns="ns", namePrefix="d", pools=[{"start": "10.0.0.30", "end": "10.0.0.40"}])
    (problem,) = overlap_problems(touching, [mine])
    assert problem.value == "10.0.0.30"


def test_overlap_ignores_invalid_pools_and_other_kinds():
    mine = ippool("a", ns="ns", pools=[{"start": "10.0.0.1", "end": "10.0.0.20"}])
    broken = ippool("b", ns="ns", pools=[{"start": "10.0.0.20", "end": "10.0.0.1"}])
    assert overlap_problems(mine, [broken]) == []
    assert overlap_problems(broken, [mine]) == []
    claim = ipclaim("b", ns="ns")
    assert overlap_problems(mine, [claim, None, "x"]) == []


def _created(obj, when):
    obj["metadata"]["creationTimestamp"] = when
    return obj


def test_overlap_with_a_pool_of_another_kind_of_the_namespace_is_warned_naming_it_and_the_range():
    """Pools of the namespace's kinds that keep an IP unique there (IPPool, InClusterIPPool, InClusterPrefixPool)
    share no IP: the earlier pool owns the overlap and the later withholds it. Admitted, but warned, both ways."""
    from metal3_ipam.testing import go_incluster as gi

    ippool_first = _created(ippool("a", ns="ns", pools=[{"start": "10.0.0.1", "end": "10.0.0.20"}]),
                            "2024-01-01T00:00:00Z")
    new = gi.ip_pool("b", namespace="ns", addresses=["10.0.0.15-10.0.0.30", "10.0.0.18"], prefix=24)
    (warning,) = overlap_problems(new, [ippool_first, new])
    assert warning.warning
    assert_problem([str(warning)], "InClusterIPPool/ns/b", "spec.addresses", "10.0.0.15-10.0.0.20")
    assert "IPPool a" in warning.message and "not handed out from this pool" in warning.message
    # The IPPool, judged in turn (an update), hears which pool does without the shared addresses.
    (back,) = overlap_problems(ippool_first, [_created(new, "2024-01-02T00:00:00Z")])
    assert back.warning
    assert_problem([str(back)], "IPPool/ns/a", "spec.pools[0]", "10.0.0.15-10.0.0.20")
    assert "InClusterIPPool b" in back.message and "withholds" in back.message
    # Other namespaces, global pools, disjoint pools and pools being deleted share nothing with it.
    elsewhere = gi.ip_pool("c", namespace="other", addresses=["10.0.0.1-10.0.0.30"], prefix=24)
    shared = gi.ip_pool("c", addresses=["10.0.0.1-10.0.0.30"], prefix=24)
    apart = gi.ip_pool("d", namespace="ns", addresses=["10.0.0.21-10.0.0.30"], prefix=24)
    going = gi.ip_pool("e", namespace="ns", addresses=["10.0.0.1-10.0.0.30"], prefix=24)
    going["metadata"]["deletionTimestamp"] = "2024-01-03T00:00:00Z"
    assert overlap_problems(ippool_first, [elsewhere, shared, apart, going]) == []
    assert overlap_problems(shared, [ippool_first, new]) == []


def test_overlap_of_in_cluster_pools_of_one_namespace_is_warned_also_between_ip_and_prefix_pools():
    from metal3_ipam.testing import go_incluster as gi

    ip = _created(gi.ip_pool("ip", namespace="ns", addresses=["2001:db8::10-2001:db8::20"], prefix=64),
                  "2024-01-01T00:00:00Z")
    prefixes = gi.prefix_pool("pp", namespace="ns", prefixes=["2001:db8::/120"], allocation_prefix_length=124)
    (warning,) = overlap_problems(prefixes, [ip])
    assert warning.warning and "InClusterIPPool ip" in warning.message
    assert_problem([str(warning)], "InClusterPrefixPool/ns/pp", "spec.prefixes", "2001:db8::10-2001:db8::20")
    other_ip = gi.ip_pool("ip2", namespace="ns", addresses=["2001:db8::20-2001:db8::30"], prefix=64)
    (warning,) = overlap_problems(other_ip, [ip])
    assert warning.warning and "InClusterIPPool ip" in warning.message and "2001:db8::20" in str(warning)


def test_two_ippools_keep_their_rule_on_name_prefixes():
    """Refused under different namePrefixes, warned under one: judged once, not warned again as pools of
    other kinds are."""
    mine = ippool("a", ns="ns", namePrefix="a", pools=[{"start": "10.0.0.1", "end": "10.0.0.20"}])
    theirs = ippool("b", ns="ns", namePrefix="b", pools=[{"start": "10.0.0.15", "end": "10.0.0.30"}])
    same = ippool("c", ns="ns", namePrefix="a", pools=[{"start": "10.0.0.15", "end": "10.0.0.30"}])
    (refused,) = overlap_problems(mine, [theirs])
    assert not refused.warning
    (warned,) = overlap_problems(mine, [same])
    assert warned.warning


# -- what the API server refuses is refused offline too -------------------------------

def test_limits_are_the_crd_limits():
    from metal3_ipam import schema
    from metal3_ipam.core import pool
    from metal3_ipam.poolkinds.ippool import schema as ippool_schema

    assert pool.MAX_ENTRIES == ippool_schema.MAX_POOL_ENTRIES
    assert pool.MAX_PREALLOCATIONS == ippool_schema.MAX_PREALLOCATIONS
    assert pool.MAX_EXCLUDED_ADDRESSES == ippool_schema.MAX_EXCLUDED_ADDRESSES
    assert pool.MAX_DNS_SERVERS == schema.MAX_DNS_SERVERS
    assert pool.MAX_CLUSTER_NAME == schema.MAX_LABEL_VALUE_LEN


def test_too_many_entries_preallocations_excluded_and_dns_servers():
    from metal3_ipam.core.pool import (MAX_DNS_SERVERS, MAX_ENTRIES, MAX_EXCLUDED_ADDRESSES,
                                       MAX_PREALLOCATIONS)

    entries = [{"start": f"10.{i // 256}.{i % 256}.1", "end": f"10.{i // 256}.{i % 256}.9"}
               for i in range(MAX_ENTRIES + 1)]
    assert errors_of(ippool("p", ns="ns", pools=entries[:-1])) == []
    assert_problem(errors_of(ippool("p", ns="ns", pools=entries)), "IPPool/ns/p", "spec.pools",
                   f"{MAX_ENTRIES + 1} entries")
    held = {f"c{i}": str(ipaddr.IPv6Address("2001:db8::1") + i) for i in range(MAX_PREALLOCATIONS + 1)}
    big = ippool("p", ns="ns", pools=[{"subnet": "2001::/8"}], preAllocations=held)
    assert_problem(errors_of(big), "IPPool/ns/p", "spec.preAllocations", f"{MAX_PREALLOCATIONS + 1} entries")
    del held["c0"]
    assert errors_of(big) == []
    excluded = [f"10.0.{i // 256}.{i % 256}" for i in range(MAX_EXCLUDED_ADDRESSES + 1)]
    assert_problem(errors_of(ippool("p", ns="ns", pools=[{"subnet": "10.0.0.0/8"}], excludedAddresses=excluded)),
                   "IPPool/ns/p", "spec.excludedAddresses", f"{MAX_EXCLUDED_ADDRESSES + 1} items")
    dns = ["8.8.8.8"] * (MAX_DNS_SERVERS + 1)
    assert_problem(errors_of(ippool("p", ns="ns", dnsServers=dns)), "IPPool/ns/p", "spec.dnsServers",
                   f"{MAX_DNS_SERVERS + 1} items")


def test_a_huge_preallocation_map_is_refused_without_reading_it():
    """Its size is all the rules look at: not one of its entries is read."""
    class Counted(dict):
        reads = 0

        def _read(self):
            Counted.reads += 1

        def __iter__(self):
            self._read()
            return super().__iter__()

        def __getitem__(self, key):
            self._read()
            return super().__getitem__(key)

        def items(self):
            self._read()
            return super().items()

        def values(self):
            self._read()
            return super().values()

        def keys(self):
            self._read()
            return super().keys()

    held = Counted({f"c{i}": "2001:db8::1" for i in range(100_000)})
    found = errors_of(ippool("p", ns="ns", pools=[{"subnet": "2001::/8"}], preAllocations=held))
    assert found == ['IPPool/ns/p: spec.preAllocations: must have at most 4096 entries (value: "100000 entries")']
    assert Counted.reads == 0
    small = Counted({"c0": "2001:db8::1"})  # the count sees a map that is read
    assert errors_of(ippool("p", ns="ns", pools=[{"subnet": "2001::/8"}], preAllocations=small)) == []
    assert Counted.reads > 0


@pytest.mark.parametrize("field, spec", [
    ("spec.pools[0].start", {"pools": [{"start": "::ffff:10.0.0.1", "end": "::ffff:10.0.0.9"}]}),
    ("spec.pools[0].subnet", {"pools": [{"subnet": "::ffff:10.0.0.0/120"}]}),
    ("spec.gateway", {"gateway": "::ffff:10.0.0.1", "pools": [{"subnet": "2001:db8::/64"}]}),
    ("spec.pools[0].gateway", {"pools": [{"subnet": "2001:db8::/64", "gateway": "::ffff:10.0.0.1"}]}),
    ("spec.dnsServers[0]", {"dnsServers": ["::ffff:8.8.8.8"], "pools": [{"subnet": "2001:db8::/64"}]}),
    ("spec.excludedAddresses[0]", {"excludedAddresses": ["::ffff:0.0.0.0/96"], "pools": [{"subnet": "::/0"}]}),
    ("spec.preAllocations[c]", {"preAllocations": {"c": "::ffff:10.0.0.1"}, "pools": [{"subnet": "::/0"}]}),
])
def test_ipv4_mapped_ipv6_addresses_are_refused_as_the_api_server_does(field, spec):
    found = errors_of(ippool("p", ns="ns", **spec))
    assert any(f" {field}: is an IPv4-mapped IPv6 address" in line for line in found), found


def test_ipv4_mapped_addresses_elsewhere():
    assert_problem(errors_of(ipaddress(address="::ffff:10.0.0.1")), "IPAddress/ns/p-10-0-0-1", "spec.address",
                   "::ffff:10.0.0.1")
    claim = ipclaim("c1", ns="ns", ip="::ffff:10.0.0.1")
    assert_problem(errors_of(claim), "IPClaim/ns/c1", "metadata.annotations.ipAddress", "::ffff:10.0.0.1")


def test_a_prefix_length_with_a_leading_zero_is_refused():
    assert_problem(errors_of(ippool("p", ns="ns", pools=[{"subnet": "10.0.0.0/024"}])), "IPPool/ns/p",
                   "spec.pools[0].subnet", "10.0.0.0/024")


def test_the_deprecated_ipv4_compatible_form_is_a_warning():
    pool = ippool("p", ns="ns", pools=[{"start": "::1.2.3.4", "end": "::1.2.3.9"}])
    assert errors_of(pool) == []
    warnings = [str(p) for p in validate(pool) if p.warning]
    assert any("spec.pools[0].start" in w and "write ::102:304" in w for w in warnings), warnings
    claim = ipclaim("c1", ns="ns", ip="::1.2.3.5")
    (warning,) = validate(claim)
    assert warning.warning and "::102:305" in warning.message


def test_a_pool_without_ranges_is_valid_with_a_warning_as_in_the_crd():
    for spec in ({}, {"pools": []}):
        pool = ippool("p", ns="ns", **spec)
        if "pools" not in spec:
            del pool["spec"]["pools"]
        problems = validate(pool)
        assert [p.warning for p in problems] == [True], problems
        assert problems[0].field == "spec.pools"


def test_an_excluded_address_of_the_other_family_is_a_warning():
    pool = ippool("p", ns="ns", prefix=24, pools=[{"subnet": "10.0.0.0/24"}], excludedAddresses=["2001:db8::1", "10.0.0.9"])
    (warning,) = validate(pool)
    assert warning.warning and warning.field == "spec.excludedAddresses[0]" and "excludes nothing" in warning.message


# -- the field that is wrong is the one named -------------------------------------------

@pytest.mark.parametrize("spec, path, value", [
    ({"gateway": "2001:db8::1", "pools": [{"subnet": "10.0.0.0/24"}, {"start": "10.0.1.1", "end": "10.0.1.9"}]},
     "spec.gateway", "2001:db8::1"),
    ({"gateway": "10.0.0.1", "pools": [{"subnet": "2001:db8::/64"}]}, "spec.gateway", "10.0.0.1"),
    ({"pools": [{"subnet": "2001:db8::/64", "gateway": "10.0.0.1"}]}, "spec.pools[0].gateway", "10.0.0.1"),
    ({"preAllocations": {"c": "2001:db8::5"}, "pools": [{"subnet": "10.0.0.0/24"}]}, "spec.preAllocations[c]",
     "2001:db8::5"),
])
def test_the_family_is_the_ranges_and_the_other_field_is_blamed(spec, path, value):
    pool = ippool("p", ns="ns", **spec)
    assert_problem(errors_of(pool), "IPPool/ns/p", path, value)
    assert [p.field for p in validate(pool) if not p.warning] == [path]
    assert "as spec.pools[0].subnet says" in errors_of(pool)[0]


def test_a_non_ip_default_gateway_is_reported_once_and_never_raises():
    spec = {"gateway": "not-an-ip", "pools": [{"subnet": "10.0.0.0/24"}, {"start": "10.0.1.1", "end": "10.0.1.9"}]}
    found = errors_of(ippool("p", ns="ns", **spec))
    assert found == ['IPPool/ns/p: spec.gateway: is not an IP address (value: "not-an-ip")']
    # The controller reads pools with the same code: the pool is not ready, its claims get the reason.
    from metal3_ipam.core.reconcile import Snapshot, reconcile

    snap = Snapshot(namespace="ns", pool_name="p", pool=ippool("p", ns="ns", **spec), cluster=None,
                    claims=[ipclaim("c1", ns="ns", pool="p")], addresses=[], capi_addresses=[],
                    name_taken=lambda namespace, name: False, now="2024-01-01T00:00:00Z")
    plan = reconcile(snap)
    assert "spec.gateway" in repr(plan)


@pytest.mark.parametrize("spec, path", [
    ({"prefix": 25, "pools": [{"start": "10.0.0.1", "end": "10.0.0.200"}]}, "spec.prefix"),
    ({"prefix": 24, "pools": [{"start": "10.0.0.1", "end": "10.0.0.200", "prefix": 25}]}, "spec.pools[0].prefix"),
])
def test_a_prefix_that_does_not_cover_its_entry_is_reported_where_it_is_set(spec, path):
    found = errors_of(ippool("p", ns="ns", **spec))
    assert_problem(found, "IPPool/ns/p", path, "25")
    assert all(f" {path}: " in f" {line}" for line in found), found
    assert "10.0.0.1-10.0.0.200" in found[0]


@pytest.mark.parametrize("name", ["a" * 64, "-x", "x y", "x/y"])
def test_cluster_name_must_be_a_label_value(name):
    assert_problem(errors_of(ippool("p", ns="ns", clusterName=name)), "IPPool/ns/p", "spec.clusterName", name[:20])


# -- updates and deletes against the addresses in use ----------------------------------------

def test_a_pool_update_may_not_make_an_address_in_use_a_gateway():
    old = ippool("p", ns="ns", prefix=24, pools=[{"subnet": "10.0.0.0/24"}])
    new = ippool("p", ns="ns", prefix=24, pools=[{"subnet": "10.0.0.0/24", "gateway": "10.0.0.7"}])
    found = lines(validate_pool_update(old, new, {"p-10-0-0-7": "10.0.0.7"}))
    assert_problem(found, "IPPool/ns/p", "spec.pools[0].gateway", "10.0.0.7")
    excluded = ippool("p", ns="ns", prefix=24, pools=[{"subnet": "10.0.0.0/24"}], excludedAddresses=["10.0.0.0/29"])
    (warning,) = validate_pool_update(old, excluded, {"p-10-0-0-7": "10.0.0.7"})
    assert warning.warning and warning.field == "spec.excludedAddresses"


def test_a_pool_update_names_every_holder_of_an_address_once():
    old = ippool("p", ns="ns", prefix=24, pools=[{"subnet": "10.0.0.0/24"}])
    new = ippool("p", ns="ns", prefix=24, pools=[{"subnet": "10.0.1.0/24"}])
    in_use = {"p-10-0-0-7": "10.0.0.7", "c1 (Cluster API)": "10.0.0.7", "v6": "2001:db8::1", "junk": "x"}
    found = lines(validate_pool_update(old, new, in_use))
    assert len(found) == 2, found
    assert_problem(found, "IPPool/ns/p", "spec.pools", "10.0.0.7")
    assert "c1 (Cluster API), p-10-0-0-7" in found[0] + found[1]
    assert_problem(found, "IPPool/ns/p", "spec.pools", "2001:db8::1")


def test_addresses_in_use_are_the_live_ones_of_both_apis_for_the_pool():
    metal3 = ipaddress("p-10-0-0-1", pool={"name": "p"})
    other_pool = ipaddress("q-10-0-0-2", address="10.0.0.2", pool={"name": "q"})
    deleting = ipaddress("p-10-0-0-3", address="10.0.0.3", pool={"name": "p"})
    deleting["metadata"]["deletionTimestamp"] = "2024-01-01T00:00:00Z"
    capi = {"apiVersion": "ipam.cluster.x-k8s.io/v1beta2", "kind": "IPAddress",
            "metadata": {"name": "c1", "namespace": "ns"},
            "spec": {"address": "10.0.0.4", "poolRef": {"apiGroup": "ipam.metal3.io", "kind": "IPPool", "name": "p"},
                     "claimRef": {"name": "c1"}}}
    foreign = dict(capi, spec=dict(capi["spec"], poolRef={"apiGroup": "x.io", "kind": "IPPool", "name": "p"}))
    assert addresses_in_use([metal3, other_pool, deleting, capi, foreign, None], "ns", "p") == {
        "p-10-0-0-1": "10.0.0.1", "c1 (Cluster API)": "10.0.0.4"}


def test_a_pool_in_use_is_not_deleted_except_for_clusterctl_move():
    pool = ippool("p", ns="ns")
    in_use = {f"p-10-0-0-{i}": f"10.0.0.{i}" for i in range(1, 8)}
    (problem,) = validate_delete(pool, in_use)
    assert not problem.warning and "p-10-0-0-1" in problem.message and "and 2 more" in problem.message
    assert str(problem).startswith("IPPool/ns/p: spec.pool: is still in use")
    assert validate_delete(pool, {}) == []
    moving = ippool("p", ns="ns", annotations={"clusterctl.cluster.x-k8s.io/delete-for-move": ""})
    assert validate_delete(moving, in_use) == []
    deleting = ippool("p", ns="ns")
    deleting["metadata"]["deletionTimestamp"] = "2024-01-01T00:00:00Z"
    assert validate_delete(deleting, in_use) == []
    assert validate_delete(ipclaim("c", ns="ns"), in_use) == []


def test_capi_claim_pool_ref_is_immutable():
    old = capi_claim("c1", ns="ns", pool="a")
    new = capi_claim("c1", ns="ns", pool="b")
    assert_problem(lines(validate_update(old, new)), "IPAddressClaim/ns/c1", "spec.poolRef",
                   '(was "IPPool.ipam.metal3.io a")')
    assert_problem(lines(validate_update(old, new)), "IPAddressClaim/ns/c1", "spec.poolRef",
                   '(value: "IPPool.ipam.metal3.io b")')
    assert validate_update(old, copy.deepcopy(old)) == []


# -- a pool without any prefix: what its addresses carry differs from the Go Metal3 IPAM's ---------------

def test_a_pool_without_any_prefix_is_warned_naming_both_behaviours():
    (subnet,) = validate(ippool("p", ns="ns", pools=[{"subnet": "10.85.0.0/29"}]))
    assert subnet.warning and subnet.field == "spec.pools[0]" and subnet.value == {"subnet": "10.85.0.0/29"}
    assert "this controller writes prefix 29" in subnet.message
    assert "Go Metal3 IPAM writes no prefix on the Metal3 IPAddress and prefix 0 on the Cluster API one" in subnet.message
    (ranges,) = validate(ippool("p", ns="ns", pools=[{"start": "10.0.0.1", "end": "10.0.0.9"},
                                                      {"start": "10.0.0.10", "end": "10.0.0.19"}]))
    assert "(nor do 1 more)" in ranges.message and "32 on the Cluster API one" in ranges.message
    # A prefix on the pool or on every entry says which: no warning.
    assert validate(ippool("p", ns="ns", prefix=29, pools=[{"subnet": "10.85.0.0/29"}])) == []
    assert validate(ippool("p", ns="ns", pools=[{"subnet": "10.85.0.0/29", "prefix": 29}])) == []
