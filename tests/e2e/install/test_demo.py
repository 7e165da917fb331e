"""``metal3-ipam demo`` on the samples: a local control plane, every kind of pool served, NetBox's and
OpenStack's only when the server their pool names answers."""

from __future__ import annotations

import ipaddress
import shutil
import subprocess
import sys
from pathlib import Path

import yaml

from controller_fixtures import REPO, free_port
from netbox_fixtures import seeded

NETBOX_SAMPLE = Path("netbox") / "netboxippool.yaml"
OPENSTACK_SAMPLE = Path("openstack") / "openstackfloatingippool.yaml"


def samples_with_keystone(copy: Path, clouds_yaml: str) -> Path:
    """``copy`` (of samples/) with the OpenStack sample's clouds.yaml replaced."""
    docs = list(yaml.safe_load_all((copy / OPENSTACK_SAMPLE).read_text()))
    for doc in docs:
        if doc["kind"] == "Secret":
            doc["stringData"]["clouds.yaml"] = clouds_yaml
    (copy / OPENSTACK_SAMPLE).write_text(yaml.safe_dump_all(docs, sort_keys=False))
    return copy


def samples_with_netbox(tmp_path: Path, **change) -> Path:
    """A copy of samples/ whose NetBox sample is changed: ``url``, ``token``, ``spec`` fields."""
    copy = tmp_path / "samples"
    shutil.copytree(REPO / "samples", copy)
    docs = list(yaml.safe_load_all((copy / NETBOX_SAMPLE).read_text()))
    for doc in docs:
        if doc["kind"] == "Secret" and "token" in change:
            doc["stringData"]["token"] = change["token"]
        if doc["kind"] == "NetBoxIPPool":
            doc["spec"]["server"]["url"] = change["url"]
            doc["spec"].update(change.get("spec", {}))
    (copy / NETBOX_SAMPLE).write_text(yaml.safe_dump_all(docs, sort_keys=False))
    return copy


def demo(*paths: Path) -> subprocess.CompletedProcess:
    args = [a for p in paths for a in ("-f", str(p))]
    return subprocess.run([sys.executable, "-m", "metal3_ipam.cli", "demo", *args], capture_output=True, text=True,
                          timeout=900, cwd=REPO)


def rows(out: str, title: str) -> dict[str, list[str]]:
    """The rows of the table printed under ``$ kubectl get <title>``, by name."""
    lines = out.split(f"$ kubectl get {title}\n", 1)[1].split("\n\n", 1)[0].splitlines()
    return {line.split()[0]: line.split() for line in lines[1:]}


def test_the_demo_serves_every_sample_and_leaves_out_a_netbox_and_a_keystone_that_do_not_answer(tmp_path):
    url = f"http://127.0.0.1:{free_port()}"  # nothing listens there
    keystone = f"http://127.0.0.1:{free_port()}/v3"  # nor there
    samples = samples_with_netbox(tmp_path, url=url)
    text = (samples / OPENSTACK_SAMPLE).read_text()
    (samples / OPENSTACK_SAMPLE).write_text(text.replace("https://keystone.example.com:5000/v3", keystone))
    done = demo(samples)
    assert done.returncode == 0, done.stdout + done.stderr
    out = done.stdout
    assert f"NetBoxIPPool default/provisioning left out: NetBox at {url} does not answer" in out
    assert f"OpenStackFloatingIPPool default/public left out: Keystone at {keystone} does not answer" in out
    for title in ("ippools -n default", "inclusterippools -n default", "globalinclusterippools",
                  "inclusterprefixpools -n default", "globalinclusterprefixpools"):
        assert rows(out, title), title
    addresses = rows(out, "ipaddresses.ipam.cluster.x-k8s.io -n default")
    assert addresses["cluster1-md-0-eth0"][1] in ("10.10.0.10", "10.10.0.11")
    assert addresses["cluster1-cp-0-eth1"][1] == "10.20.0.2"
    assert addresses["cluster1-md-0-delegated"][1] == "fd00:100:0:10::"
    assert addresses["cluster1-site-prefix"][1] == "fd00:200::"
    assert addresses["cluster1-worker-0-eth0"][1] in ("192.168.0.10", "192.168.0.11", "192.168.0.13")
    assert "cluster1-md-0-eth2" not in rows(out, "ipaddressclaims -n default")
    assert set(rows(out, "ipclaims -n default")) == {"claim1", "test1-controlplane-template-0-pool1",
                                                     "test1-controlplane-template-1-pool1",
                                                     "test1-worker-static-pool1", "v6-claim-0"}


def test_the_demo_serves_the_netbox_sample_from_a_netbox_that_answers(netbox, tmp_path):
    net = seeded(netbox)
    gateway = str(net[1])
    copy = samples_with_netbox(tmp_path, url=netbox.url, token=netbox.token,
                               spec={"source": {"prefix": str(net)}, "gateway": gateway, "dnsServers": [gateway]})
    done = demo(copy / NETBOX_SAMPLE, copy / "cluster.yaml")
    assert done.returncode == 0, done.stdout + done.stderr
    assert "left out" not in done.stdout
    assert rows(done.stdout, "netboxippools -n default")["provisioning"]
    address = rows(done.stdout, "ipaddresses.ipam.cluster.x-k8s.io -n default")["cluster1-md-0-eth2"][1]
    assert ipaddress.ip_address(address) in net and address != gateway


def test_the_demo_serves_the_openstack_sample_from_a_cloud_that_answers(openstack, tmp_path):
    """The sample as written but for its clouds.yaml, which points at the session's Keystone (its external
    network is named ``public``, as the sample's filter asks)."""
    copy = tmp_path / "samples"
    shutil.copytree(REPO / "samples", copy)
    samples_with_keystone(copy, openstack.clouds_yaml("member").decode())
    try:
        done = demo(copy / OPENSTACK_SAMPLE, copy / "cluster.yaml")
        assert done.returncode == 0, done.stdout + done.stderr
        assert "left out" not in done.stdout
        assert rows(done.stdout, "openstackfloatingippools -n default")["public"]
        address = rows(done.stdout, "ipaddresses.ipam.cluster.x-k8s.io -n default")["cluster1-md-0-fip"][1]
        assert ipaddress.ip_address(address) in ipaddress.ip_network(openstack.cidr)
        assert [f["floating_ip_address"] for f in openstack.floating_ips()] == [address]
    finally:
        openstack.reset()
