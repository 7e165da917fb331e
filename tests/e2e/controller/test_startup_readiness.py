"""A kind the controller may not list: whoever looks at the pod (``curl /readyz``) must learn which kinds are
not served and why, not only that something is not loaded."""

from __future__ import annotations

import uuid
import urllib.error
from contextlib import contextmanager

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


@contextmanager
def _without_listing_metal3_ipaddresses(control_plane, api_client, tmp_path):
    """A controller whose user may do all it needs but list Metal3 IPAddresses (a right not granted yet), an IPPool
    and its claim c1 in its namespace; yields the (started) controller and a function granting the right."""
    user = f"no-list-{uuid.uuid4().hex[:6]}"
    namespace = f"t-{uuid.uuid4().hex[:10]}"
    client.CoreV1Api(api_client).create_namespace(client.V1Namespace(metadata=client.V1ObjectMeta(name=namespace)))
    kube = Kube(api_client, namespace)
    kube.pool("p", pools=[{"start": "10.74.0.10", "end": "10.74.0.19"}], prefix=24)
    kube.claim("c1", "p")
    rbac = client.RbacAuthorizationV1Api(api_client)
    lister = f"{user}-list"
    rules = rules_with_ipaddress_verbs(["get", "watch", "create", "patch", "delete"])

    def grant() -> None:
        rbac.create_cluster_role({"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRole",
                                  "metadata": {"name": lister},
                                  "rules": [{"apiGroups": ["ipam.metal3.io"], "resources": ["ipaddresses"],
                                             "verbs": ["list"]}]})
        rbac.create_cluster_role_binding({
            "apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRoleBinding", "metadata": {"name": lister},
            "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": lister},
            "subjects": [{"kind": "User", "name": user, "apiGroup": "rbac.authorization.k8s.io"}]})
    try:
        with controller_as_user(control_plane, api_client, namespace, tmp_path, user, rules) as proc:
            proc.start(ready_timeout=0)
            yield proc, kube, grant
    finally:
        for delete in (rbac.delete_cluster_role_binding, rbac.delete_cluster_role):
            try:
                delete(lister)
            except client.ApiException as err:
                if err.status != 404:
                    raise


def test_readyz_names_the_kinds_this_controller_may_not_list(control_plane, api_client, tmp_path):
    """A kind installed that the controller may not list (another provider's, or a right not granted yet) is not
    served, and /readyz says so, naming it, rather than retrying a refused listing for ever."""
    with _without_listing_metal3_ipaddresses(control_plane, api_client, tmp_path) as (proc, kube, grant):
        def says_why():
            status, text = readyz(proc)
            return "not listable by this controller" in text and "IPAddress.ipam.metal3.io" in text and text

        eventually(says_why, timeout=60, what="/readyz naming the Metal3 IPAddresses as not listable")
        assert proc.alive()
        assert "Traceback" not in proc.log_text()


def test_a_right_to_list_granted_after_start_up_is_used_without_a_restart(control_plane, api_client, tmp_path):
    with _without_listing_metal3_ipaddresses(control_plane, api_client, tmp_path) as (proc, kube, grant):
        eventually(lambda: readyz(proc)[0] != 0, timeout=60, what="/readyz answering")
        grant()
        assert kube.bound("c1", timeout=60)["spec"]["address"] == "10.74.0.10"


def test_readyz_names_the_kinds_whose_locks_are_leases_this_controller_may_not_list(control_plane, api_client,
                                                                                    tmp_path):
    """A role without Leases beside the in-cluster CRDs: the kinds whose locks are Leases are not served, /readyz and
    the log say so once, and the rest is served (an IPPool's claim is bound) rather than a listing of the Leases
    retried for ever."""
    user = f"no-leases-{uuid.uuid4().hex[:6]}"
    namespace = f"t-{uuid.uuid4().hex[:10]}"
    client.CoreV1Api(api_client).create_namespace(client.V1Namespace(metadata=client.V1ObjectMeta(name=namespace)))
    kube = Kube(api_client, namespace)
    kube.pool("p", pools=[{"start": "10.75.0.10", "end": "10.75.0.19"}], prefix=24)
    kube.claim("c1", "p")
    rules = [r for r in rules_with_ipaddress_verbs(["*"]) if "coordination.k8s.io" not in r["apiGroups"]]
    with controller_as_user(control_plane, api_client, namespace, tmp_path, user, rules) as proc:
        proc.start(ready_timeout=0)

        def says_why():
            status, text = readyz(proc)
            return status == 200 and "leases.coordination.k8s.io in" in text and "InClusterIPPool" in text and text

        eventually(says_why, timeout=60, what="/readyz naming the in-cluster kinds as not served for want of Leases")
        assert kube.bound("c1", timeout=60)["spec"]["address"] == "10.75.0.10"
        said = [line for line in proc.log_text().splitlines() if "may not list leases.coordination.k8s.io" in line]
        assert len(said) == 1 and "Traceback" not in proc.log_text()
