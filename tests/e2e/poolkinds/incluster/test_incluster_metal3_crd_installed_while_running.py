"""The Metal3 CRDs installed while a controller that started without them serves the in-cluster kinds, on a real
API server. Until then a lock is its Lease alone; an earlier version of this project (which reads Metal3 IPAddresses
alone) may run once they are there, and its lock of a name must refuse this controller's lock of the same IP, as it
does where the CRDs were there at start. The controller learns the kind came (a twin written or refused) and lists
and watches it from then on, without a restart: no IP is held by two claims, and the Lease made without a twin is
given one."""

from __future__ import annotations

import shutil
import uuid

from kubernetes import client

from controller_fixtures import REPO, ControllerProcess
from metal3_ipam.core import kinds
from metal3_ipam.testing import go_incluster as gi
from metal3_ipam.testing.waiting import eventually

METAL3 = (kinds.METAL3_GROUP, kinds.METAL3_VERSION, "ipaddresses")


def _lock(ns: str, ip: str, claim: str) -> dict:
    """A lock of pool ``p`` as an earlier version writes it: a Metal3 IPAddress named ``p.<ip>.ip``."""
    return {"apiVersion": kinds.METAL3_API_VERSION, "kind": "IPAddress",
            "metadata": {"name": f"p.{ip.replace('.', '-')}.ip", "namespace": ns},
            "spec": {"address": ip, "prefix": 24,
                     "pool": {"name": "p", "namespace": ns, "apiVersion": gi.POOL_API_VERSION,
                              "kind": gi.IN_CLUSTER_IP_POOL},
                     "claim": {"name": claim, "namespace": ns, "apiVersion": gi.CAPI_API_VERSION,
                               "kind": "IPAddressClaim"}}}


def test_a_controller_follows_the_metal3_crds_installed_while_it_runs(control_plane_factory, tmp_path):
    crds = tmp_path / "crds"
    crds.mkdir()
    for path in (REPO / "config" / "crd" / "bases").glob(f"{gi.GROUP}_*.yaml"):
        shutil.copy(path, crds)
    plane = control_plane_factory(crd_paths=[crds, REPO / "config" / "crd" / "capi"])
    ns = f"t-{uuid.uuid4().hex[:10]}"
    with plane.api_client() as api:
        client.CoreV1Api(api).create_namespace(client.V1Namespace(metadata=client.V1ObjectMeta(name=ns)))
        custom = client.CustomObjectsApi(api)

        def create_claim(name: str) -> None:
            custom.create_namespaced_custom_object(gi.GROUP, gi.CAPI_VERSION, ns, "ipaddressclaims",
                                                   gi.claim(name, ns, gi.IN_CLUSTER_IP_POOL, "p"))

        def ip_of(name: str) -> str | None:
            found = custom.list_namespaced_custom_object(gi.GROUP, gi.CAPI_VERSION, ns, "ipaddresses")["items"]
            return next((x["spec"]["address"] for x in found if x["spec"]["claimRef"]["name"] == name), None)

        custom.create_namespaced_custom_object(gi.GROUP, gi.POOL_VERSION, ns, "inclusterippools", gi.ip_pool(
            "p", namespace=ns, addresses=["10.62.0.1-10.62.0.9"], prefix=24))
        proc = ControllerProcess(plane.kubeconfig, ["-n", ns, "--lock-namespace", ns, "--no-leader-elect"],
                                 name="controller", log_dir=tmp_path)
        try:
            proc.start()
            create_claim("a")
            eventually(lambda: ip_of("a") == "10.62.0.1", timeout=60, what="claim a bound to 10.62.0.1")
            plane.apply_crds([REPO / "config" / "crd" / "bases" / f"{kinds.METAL3_GROUP}_{p}.yaml"
                              for p in ("ipaddresses", "ipclaims", "ippools")])
            # An earlier version, started once the CRDs are there, locks 10.62.0.2 for its claim d.
            custom.create_namespaced_custom_object(*METAL3[:2], ns, METAL3[2], _lock(ns, "10.62.0.2", "d"))
            create_claim("b")
            eventually(lambda: ip_of("b") not in (None, "10.62.0.1", "10.62.0.2"), timeout=60,
                       what="claim b bound to an IP nobody holds")

            def twin_of_a():
                try:
                    return custom.get_namespaced_custom_object(*METAL3[:2], ns, METAL3[2], "p.10-62-0-1.ip")
                except client.ApiException as err:
                    if err.status == 404:
                        return None
                    raise

            twin = eventually(twin_of_a, timeout=60, what="the Lease of claim a's lock given its twin")
            assert twin["spec"]["claim"]["name"] == "a" and twin["spec"]["address"] == "10.62.0.1"
            assert proc.alive() and proc.starts == 1 and "Traceback" not in proc.log_text()
        finally:
            proc.stop()
