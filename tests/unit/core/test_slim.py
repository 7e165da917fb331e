"""The slim form of objects: nothing the controller reads is lost, nothing else is kept."""

from __future__ import annotations

import copy
import json
import random

from metal3_ipam.core import kinds
from metal3_ipam.core import objects as o
from metal3_ipam.core import slim as slim_module
from metal3_ipam.core.inventory import Inventory
from metal3_ipam.core.reconcile import reconcile
from metal3_ipam.core.slim import slim
from metal3_ipam.memory import converge

from ipam_objects import CAPI, capi_claim, cluster, converged, ipclaim, ippool, loaded, set_meta, user_delete

LAST_APPLIED = "kubectl.kubernetes.io/last-applied-configuration"


def as_served(obj: dict) -> dict:
    """``obj`` as the API server sends it: a fresh parse, with managedFields and the last-applied annotation."""
    obj = json.loads(json.dumps(obj))
    meta = obj["metadata"]
    meta["managedFields"] = [{"manager": "kubectl", "operation": "Update", "apiVersion": obj.get("apiVersion"),
                              "time": "2024-01-01T00:00:00Z", "fieldsType": "FieldsV1",
                              "fieldsV1": {"f:metadata": {"f:labels": {}}, "f:spec": {".": {}}}}]
    meta["selfLink"] = "/whatever"
    meta.setdefault("annotations", {})[LAST_APPLIED] = json.dumps(obj)
    for ref in meta.get("ownerReferences") or []:
        ref.setdefault("blockOwnerDeletion", True)
    return obj


def plans(inventory: Inventory, now: str) -> list[list]:
    return [(key, reconcile(inventory.snapshot(key, now, random.Random(7))).steps)
            for key in inventory.pool_keys()]


def slim_copy(inventory: Inventory) -> Inventory:
    lean = Inventory()
    for obj in inventory.objects.values():
        lean.upsert(slim(as_served(obj)))
    return lean


def states():
    """Pools, claims of both APIs, bound, unbound, failing, deleted, a paused Cluster: converged and not."""
    objs = [ippool("pool1", clusterName="c1"), ippool("pool2", namePrefix="p2",
                                                    pools=[{"start": "10.0.0.1", "end": "10.0.0.2"}]),
            cluster("c1"), ipclaim("a", labels={kinds.CLUSTER_NAME_LABEL: "c1"}), ipclaim("b", ip="192.168.0.15"),
            capi_claim("c"), capi_claim("d", pool="pool2"), ipclaim("e", pool="pool2"), ipclaim("f", pool="pool2"),
            ipclaim("g", pool="missing")]
    api = loaded(*copy.deepcopy(objs))
    yield api
    api = converged(*copy.deepcopy(objs))
    yield api
    user_delete(api, kinds.IPCLAIM, "a")
    user_delete(api, kinds.CAPI_CLAIM, "c")
    yield api
    set_meta(api, kinds.IPCLAIM, "b", annotations={kinds.PAUSED_ANNOTATION: ""})
    yield api


def test_the_plans_from_slim_objects_are_those_from_whole_ones():
    compared = 0
    for api in states():
        whole = plans(api.inventory, api.now)
        lean = plans(slim_copy(api.inventory), api.now)
        assert lean == whole
        compared += sum(len(steps) for _, steps in whole)
    assert compared > 10  # the states above do ask for work


def test_a_store_of_slim_objects_converges_as_one_of_whole_objects():
    objs = [ippool("pool1"), ipclaim("a"), capi_claim("b"), ipclaim("c", ip="192.168.0.12")]
    whole = converged(*copy.deepcopy(objs), seed=3)
    lean = loaded(*copy.deepcopy(objs))
    store = lean.inventory.upsert
    lean.inventory.upsert = lambda obj: store(slim(as_served(obj)))  # every write's answer is filed slim
    converge(lean, random.Random(3))
    for kind in (kinds.IPADDRESS, kinds.CAPI_ADDRESS, kinds.IPCLAIM, kinds.CAPI_CLAIM):
        assert sorted((o.name(x), dict(o.spec(x))) for x in lean.inventory.of_kind(kind)) == \
               sorted((o.name(x), dict(o.spec(x))) for x in whole.inventory.of_kind(kind))
    assert {o.name(x): o.status(x).get("address") for x in lean.inventory.of_kind(kinds.IPCLAIM)} == \
           {o.name(x): o.status(x).get("address") for x in whole.inventory.of_kind(kinds.IPCLAIM)}


def test_what_nothing_reads_is_dropped():
    claim = as_served({**ipclaim("a", annotations={kinds.PAUSED_ANNOTATION: ""}),
                       "status": {"conditions": [{"type": "Ready", "status": "True", "reason": "AddressAllocated",
                                                  "message": "bound to 192.168.0.10",
                                                  "lastTransitionTime": "2024-01-01T00:00:00Z"}]}})
    claim["metadata"].update(uid="u1", resourceVersion="12", creationTimestamp="2024-01-01T00:00:00Z",
                             finalizers=[kinds.FINALIZERS[kinds.IPCLAIM]], generation=1)
    lean = slim(claim)
    assert "managedFields" not in lean["metadata"] and "selfLink" not in lean["metadata"]
    assert lean["metadata"]["annotations"] == {kinds.PAUSED_ANNOTATION: ""}
    assert lean["spec"] == claim["spec"] and lean["status"] == claim["status"]
    for field in ("name", "namespace", "uid", "resourceVersion", "creationTimestamp", "finalizers"):
        assert lean["metadata"][field] == claim["metadata"][field]
    big = as_served({**cluster("c1", paused=True), "status": {"phase": "Provisioned"}})
    big["spec"]["topology"] = {"class": "x", "workers": {"machineDeployments": [{"name": "md"}]}}
    assert slim(big)["spec"] == {"paused": True} and "status" not in slim(big)


def test_owner_references_keep_every_field_and_pools_keep_theirs_whole():
    """An owner reference keeps all its fields (blockOwnerDeletion too): a repair writes the list back whole."""
    owner = {"apiVersion": CAPI, "kind": "IPAddressClaim", "name": "c", "uid": "u", "controller": True,
             "blockOwnerDeletion": True}
    address = {"apiVersion": CAPI, "kind": "IPAddress",
               "metadata": {"name": "c", "namespace": "default", "ownerReferences": [owner]},
               "spec": {"address": "10.0.0.1"}}
    assert slim(address)["metadata"]["ownerReferences"] == [owner]
    pool = {**ippool("p"), "status": {"indexes": {"a": "10.0.0.1"}}}
    pool["metadata"]["ownerReferences"] = [dict(owner, kind="Cluster")]
    lean = slim(pool)
    assert lean["metadata"]["ownerReferences"] == pool["metadata"]["ownerReferences"]
    assert lean["spec"] is pool["spec"] and lean["status"] is pool["status"]  # kept whole, not copied


def test_parts_alike_are_shared_and_the_table_stays_bounded(monkeypatch):
    one, two = (slim(as_served({**ipclaim(n, labels={kinds.CLUSTER_NAME_LABEL: "c1"}),
                                "metadata": {"name": n, "namespace": "default", "uid": f"u-{n}",
                                             "labels": {kinds.CLUSTER_NAME_LABEL: "c1"},
                                             "finalizers": [kinds.FINALIZERS[kinds.IPCLAIM]]}}))
                for n in ("a", "b"))
    assert one["spec"] is two["spec"]
    assert one["metadata"]["labels"] is two["metadata"]["labels"]
    assert one["metadata"]["finalizers"] is two["metadata"]["finalizers"]
    assert one["metadata"]["uid"] != two["metadata"]["uid"]
    monkeypatch.setattr(slim_module, "MAX_SHARED", 10)
    for i in range(50):
        slim({"apiVersion": CAPI, "kind": "IPAddress", "metadata": {"name": f"x{i}", "labels": {"l": str(i)}}})
        assert len(slim_module._shared) <= 10
    # 1 and True are different labels' values, as are 1 and "1".
    assert slim({"kind": "K", "metadata": {"labels": {"a": 1}}})["metadata"]["labels"]["a"] == 1
    assert slim({"kind": "K", "metadata": {"labels": {"a": True}}})["metadata"]["labels"]["a"] is True


def test_what_is_not_an_object_passes_as_it_is():
    for value in ({}, {"metadata": "x"}, [], None):
        assert slim(value) is value


def test_a_claim_and_its_addresses_share_the_parts_they_have_alike(monkeypatch):
    claim_owner = {"apiVersion": CAPI, "kind": "IPAddressClaim", "name": "m-0", "uid": "u-claim", "controller": True}
    pool_ref = {"apiGroup": kinds.METAL3_GROUP, "kind": "IPPool", "name": "p"}
    claim = slim(as_served({"apiVersion": CAPI, "kind": "IPAddressClaim",
                            "metadata": {"name": "m-0", "namespace": "default", "uid": "u-claim"},
                            "spec": {"poolRef": pool_ref}, "status": {"addressRef": {"name": "m-0"}}}))
    lock = slim(as_served({"apiVersion": kinds.METAL3_API_VERSION, "kind": "IPAddress",
                           "metadata": {"name": "p-10-0-0-2", "namespace": "default", "uid": "u-lock",
                                        "ownerReferences": [dict(claim_owner)]},
                           "spec": {"address": "10.0.0.2", "pool": {"name": "p"},
                                    "claim": {"apiVersion": CAPI, "kind": "IPAddressClaim", "name": "m-0"}}}))
    mirror = slim(as_served({"apiVersion": CAPI, "kind": "IPAddress",
                             "metadata": {"name": "m-0", "namespace": "default", "uid": "u-mirror",
                                          "ownerReferences": [dict(claim_owner)]},
                             "spec": {"address": "10.0.0.2", "claimRef": {"name": "m-0"}, "poolRef": pool_ref}}))
    assert lock["metadata"]["ownerReferences"][0] is mirror["metadata"]["ownerReferences"][0]
    assert mirror["metadata"]["ownerReferences"] == [{**claim_owner, "blockOwnerDeletion": True}]
    assert claim["status"]["addressRef"] is mirror["spec"]["claimRef"] == {"name": "m-0"}
    assert lock["spec"]["address"] is mirror["spec"]["address"]
    # One key per claim and per pool, whoever asks for it.
    assert o.claim_key(claim) is o.claim_of_address(lock) is o.claim_of_capi_address(mirror)
    assert o.pool_of(claim) is o.pool_of(mirror) is o.pool_of(lock) == ("default", "p")
    # Not alike: another claim of that uid with other fields, or controller 1 where it was True.
    other = slim({"kind": "IPAddress", "metadata": {"name": "x", "ownerReferences": [dict(claim_owner, name="m-1")]}})
    assert other["metadata"]["ownerReferences"] == [dict(claim_owner, name="m-1")]
    one = slim({"kind": "IPAddress", "metadata": {"name": "y", "ownerReferences": [dict(claim_owner, controller=1)]}})
    assert one["metadata"]["ownerReferences"][0]["controller"] is not True
    monkeypatch.setattr(slim_module, "MAX_ALIKE", 10)
    monkeypatch.setattr(o._one_key, "limit", 10)
    for i in range(50):
        slim({"kind": "IPAddress", "metadata": {"name": f"z{i}", "ownerReferences": [dict(claim_owner, uid=str(i))]}})
        o.claim_key({"kind": "IPClaim", "metadata": {"name": f"z{i}"}})
        assert len(slim_module._alike) <= 10 and len(o._one_key.table) <= 10
