"""A start-up LIST that keeps failing: the replica stays unready and its /readyz says which listing and why.

The start-up load lists every kind again until its LIST goes through (a right
not granted yet, an API server restarting). Until then whoever looks at the
pod (a failing readiness probe's event, ``curl /readyz``) must learn which
LIST fails and with what answer, not only that the inventory is not loaded.
"""

from __future__ import annotations

import uuid
import urllib.error

from kubernetes import client

from controller_fixtures import _NO_PROXY, Kube, controller_as_user, rules_with_ipaddress_verbs
from metal3_ipam.testing.waiting import eventually


def readyz(proc) -> tuple[int, str]:
    try:
        with _NO_PROXY.open(f"http://127.0.0.1:{proc.port}/readyz", timeout=2) as resp:
            return resp.status, resp.read().decode()
    except urllib.error.HTTPError as err:
        return err.code, err.read().decode()
    except OSError:
        return 0, ""  # not serving yet


def test_readyz_names_the_start_up_listing_that_fails_and_the_answer_until_it_goes_through(
        control_plane, api_client, tmp_path):
    user = f"no-list-{uuid.uuid4().hex[:6]}"
    namespace = f"t-{uuid.uuid4().hex[:10]}"
    client.CoreV1Api(api_client).create_namespace(client.V1Namespace(metadata=client.V1ObjectMeta(name=namespace)))
    kube = Kube(api_client, namespace)
    kube.pool("p", pools=[{"start": "10.74.0.10", "end": "10.74.0.19"}], prefix=24)
    kube.claim("c1", "p")
    rbac = client.RbacAuthorizationV1Api(api_client)
    lister = f"{user}-list"
    rules = rules_with_ipaddress_verbs(["get", "watch", "create", "patch", "delete"])
    try:
        with controller_as_user(control_plane, api_client, namespace, tmp_path, user, rules) as proc:
            proc.start(ready_timeout=0)

            def says_why():
                status, text = readyz(proc)
                return status == 503 and "listing IPAddress.ipam.metal3.io" in text and "403" in text and text

            text = eventually(says_why, timeout=60, what="/readyz naming the refused LIST of IPAddresses")
            assert "inventory not loaded" in text, text
            assert proc.alive()
            rbac.create_cluster_role({"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRole",
                                      "metadata": {"name": lister},
                                      "rules": [{"apiGroups": ["ipam.metal3.io"], "resources": ["ipaddresses"],
                                                 "verbs": ["list"]}]})
            rbac.create_cluster_role_binding({
                "apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRoleBinding",
                "metadata": {"name": lister},
                "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": lister},
                "subjects": [{"kind": "User", "name": user, "apiGroup": "rbac.authorization.k8s.io"}]})
            assert kube.bound("c1", timeout=120)["spec"]["address"] == "10.74.0.10"
            status, text = eventually(lambda: (lambda r: r[0] == 200 and r)(readyz(proc)), timeout=60,
                                      what="/readyz once loaded")
            assert text == "ok\n"
    finally:
        for delete in (rbac.delete_cluster_role_binding, rbac.delete_cluster_role):
            try:
                delete(lister)
            except client.ApiException as err:
                if err.status != 404:
                    raise
