"""The clusterctl set-up the move tests rely on (metal3_ipam/testing/clusterctl.py), checked offline.

clusterctl matches CRDs to providers by the ``cluster.x-k8s.io/provider`` label and
moves only objects of CRDs labelled ``clusterctl.cluster.x-k8s.io``: the inventory
the tests install must name the providers those labels name.
"""

from __future__ import annotations


import yaml

from metal3_ipam import schema
from metal3_ipam.poolkinds.incluster import schema as incluster_schema
from metal3_ipam.testing.clusterctl import PROVIDERS, Provider, Run
from paths import REPO

ROOT = REPO
# The in-cluster provider's pools, served by this provider: moved, each the root of its own hierarchy.
INCLUSTER_POOLS = {f"{kind.lower()}s.ipam.cluster.x-k8s.io" for kind in incluster_schema.KINDS}
# NetBox pools and OpenStack floating-IP pools, likewise.
NETBOX_POOLS = {"netboxippools.netbox.metal3-ipam.io", "openstackfloatingippools.openstack.metal3-ipam.io"}


def crd_documents() -> dict[str, dict]:
    docs = {}
    for directory in ("config/crd/bases", "config/crd/capi"):
        for path in sorted((ROOT / directory).glob("*.yaml")):
            for doc in yaml.safe_load_all(path.read_text()):
                if doc and doc.get("kind") == "CustomResourceDefinition":
                    docs[doc["metadata"]["name"]] = doc
    return docs


def test_every_moved_crd_belongs_to_an_inventoried_provider():
    labels = {p.label for p in PROVIDERS}
    moved = {name: doc for name, doc in crd_documents().items()
             if "clusterctl.cluster.x-k8s.io" in (doc["metadata"].get("labels") or {})}
    assert {"clusters.cluster.x-k8s.io", "ippools.ipam.metal3.io", "ipclaims.ipam.metal3.io",
            "ipaddresses.ipam.metal3.io", "ipaddressclaims.ipam.cluster.x-k8s.io",
            "ipaddresses.ipam.cluster.x-k8s.io", "metal3datas.infrastructure.cluster.x-k8s.io"} | INCLUSTER_POOLS \
        | NETBOX_POOLS == set(moved)
    for name, doc in moved.items():
        assert doc["metadata"]["labels"]["cluster.x-k8s.io/provider"] in labels, name
    assert schema.PROVIDER_NAME in labels


def test_cluster_crd_stores_the_contract_version_and_inventory_is_never_moved():
    docs = crd_documents()
    cluster = docs["clusters.cluster.x-k8s.io"]
    assert [v["name"] for v in cluster["spec"]["versions"] if v["storage"]] == ["v1beta2"]
    inventory = docs["providers.clusterctl.cluster.x-k8s.io"]
    assert [v["name"] for v in inventory["spec"]["versions"]] == ["v1alpha3"]
    assert inventory["metadata"]["labels"] == {"clusterctl.cluster.x-k8s.io/core": "inventory"}


def test_only_pools_carry_the_move_hierarchy_label():
    hierarchy = {name for name, doc in crd_documents().items()
                 if "clusterctl.cluster.x-k8s.io/move-hierarchy" in (doc["metadata"].get("labels") or {})}
    assert hierarchy == {"ippools.ipam.metal3.io"} | INCLUSTER_POOLS | NETBOX_POOLS


def test_provider_names_follow_clusterctl():
    assert [p.label for p in PROVIDERS] == ["cluster-api", "infrastructure-metal3", "ipam-metal3"]
    body = Provider("metal3", "IPAMProvider", "ns", "v0.1.0").body()
    assert body["metadata"] == {"name": "ipam-metal3", "namespace": "ns",
                                "labels": {"clusterctl.cluster.x-k8s.io": "", "cluster.x-k8s.io/provider": "ipam-metal3"}}
    assert (body["providerName"], body["type"], body["version"]) == ("metal3", "IPAMProvider", "v0.1.0")


def test_retries_are_read_from_the_log(tmp_path):
    log = tmp_path / "clusterctl.log"
    log.write_text(
        'Creating IPAddress="a" Namespace="ns"\n'
        'Retrying with backoff cause="error updating \\"IPAddress\\" ns/a: spec is immutable"\n'
        'Deleting IPClaim="b" Namespace="ns"\n'
        'Retrying with backoff cause="not found"\n')
    run = Run(["clusterctl"], 0, 1.0, log)
    assert run.retries() == ['error updating \\"IPAddress\\" ns/a: spec is immutable', "not found"]
    clean = tmp_path / "clean.log"
    clean.write_text('Creating IPAddress="a" Namespace="ns"\n')
    assert Run(["clusterctl"], 0, 1.0, clean).check().retries() == []
