"""The controller under the ServiceAccount and roles of config/rbac, never as admin.

A control plane with the API server's audit log on runs a whole scenario
(allocation, preallocation, requested addresses, both claim APIs,
exhaustion and its Events, release, orphaned addresses, pool deletion,
leader election, two replicas racing for the same names) with the controller authenticated by a token of the
ServiceAccount. Then the audit log must show that nothing was refused
(the role is enough) and that every verb the roles grant was used (the role
is no more than enough).
"""

from __future__ import annotations

import base64
import json
import time
from collections import defaultdict
from pathlib import Path

import pytest
import yaml
from kubernetes import client

from controller_fixtures import (CAPI, METAL3, REPO, ControllerProcess, Kube, assert_invariants, condition,
                                 start_control_plane)
from metal3_ipam import packaging
from metal3_ipam.controller import permissions
from metal3_ipam.poolkinds.openstack import pool as osp
from metal3_ipam.testing import controlplane as cp_mod
from metal3_ipam.testing import go_incluster as gi
from metal3_ipam.testing.waiting import eventually
from netbox_fixtures import put_secret, seeded
from openstack_fixtures import put_clouds

NAMESPACE = "metal3-ipam-system"
RBAC_KINDS = ("Namespace", "ServiceAccount", "ClusterRole", "ClusterRoleBinding", "Role", "RoleBinding")


def rbac_objects() -> list[dict]:
    return [o for o in packaging.render(REPO / "config" / "default") if o["kind"] in RBAC_KINDS]


def service_account() -> tuple[str, str]:
    (account,) = [o for o in rbac_objects() if o["kind"] == "ServiceAccount"]
    return account["metadata"]["namespace"], account["metadata"]["name"]


@pytest.fixture(scope="module")
def audit_log(tmp_path_factory) -> Path:
    return tmp_path_factory.mktemp("audit") / "audit.log"


@pytest.fixture(scope="module")
def audited_plane(control_plane_binaries, kustomize_binary, tmp_path_factory, audit_log):
    namespace, _ = service_account()
    policy = tmp_path_factory.mktemp("audit-policy") / "policy.yaml"
    policy.write_text(yaml.safe_dump({
        "apiVersion": "audit.k8s.io/v1", "kind": "Policy", "omitStages": ["RequestReceived"],
        "rules": [{"level": "Metadata", "userGroups": [f"system:serviceaccounts:{namespace}"]},
                  {"level": "None"}]}))
    plane = start_control_plane(control_plane_binaries,
                                extra_apiserver_args=[f"--audit-policy-file={policy}",
                                                      f"--audit-log-path={audit_log}",
                                                      "--audit-log-mode=blocking"])
    try:
        yield plane
    finally:
        plane.stop()


def install_rbac(api: client.ApiClient) -> None:
    for obj in sorted(rbac_objects(), key=lambda o: RBAC_KINDS.index(o["kind"])):
        group_version = obj["apiVersion"]
        plural = {"Namespace": "namespaces", "ServiceAccount": "serviceaccounts", "ClusterRole": "clusterroles",
                  "ClusterRoleBinding": "clusterrolebindings", "Role": "roles", "RoleBinding": "rolebindings"}
        base = f"/api/{group_version}" if "/" not in group_version else f"/apis/{group_version}"
        namespace = obj["metadata"].get("namespace")
        path = f"{base}/namespaces/{namespace}/{plural[obj['kind']]}" if namespace else f"{base}/{plural[obj['kind']]}"
        response = api.call_api(*api.param_serialize("POST", path, body=obj,
                                                     header_params={"Content-Type": "application/json"},
                                                     auth_settings=["BearerToken"])[:4])
        response.read()
        assert response.status == 201, f"{obj['kind']} {obj['metadata']['name']}: {response.data}"


def service_account_kubeconfig(plane: cp_mod.ControlPlane, api: client.ApiClient, path: Path) -> Path:
    """A kubeconfig with a token the API server issues for the ServiceAccount (TokenRequest)."""
    namespace, name = service_account()
    request = client.AuthenticationV1TokenRequest(spec=client.V1TokenRequestSpec(audiences=[],
                                                                                  expiration_seconds=3600))
    token = client.CoreV1Api(api).create_namespaced_service_account_token(name, namespace, request).status.token
    path.write_text(yaml.safe_dump({
        "apiVersion": "v1", "kind": "Config", "current-context": "sa",
        "clusters": [{"name": "local", "cluster": {
            "server": plane.server,
            "certificate-authority-data": base64.b64encode(Path(plane.ca_file).read_bytes()).decode()}}],
        "users": [{"name": "sa", "user": {"token": token}}],
        "contexts": [{"name": "sa", "context": {"cluster": "local", "user": "sa"}}]}))
    path.chmod(0o600)
    return path


def audit_events(log: Path) -> list[dict]:
    namespace, name = service_account()
    user = f"system:serviceaccount:{namespace}:{name}"
    events = []
    lines = log.read_text().splitlines(keepends=True)
    for line in lines:
        if not line.endswith("\n"):
            break  # the API server is writing it
        event = json.loads(line)
        if event["user"]["username"] == user and event.get("objectRef"):
            events.append(event)
    return events


def calls(events: list[dict]) -> dict[tuple[str, str, str], list[int]]:
    """(group, resource[/subresource], verb) -> response codes."""
    found: dict[tuple[str, str, str], list[int]] = defaultdict(list)
    for event in events:
        ref = event["objectRef"]
        resource = ref["resource"] + (f"/{ref['subresource']}" if ref.get("subresource") else "")
        found[(ref.get("apiGroup") or "", resource, event["verb"])].append(
            (event.get("responseStatus") or {}).get("code", 0))
    return found


def called(log: Path, group: str, resource: str, verb: str) -> bool:
    return (group, resource, verb) in calls(audit_events(log))


def test_the_controller_needs_exactly_the_roles_of_config_rbac(audited_plane, audit_log, tmp_path, netbox,
                                                                openstack):
    plane = audited_plane
    with plane.api_client() as admin:
        install_rbac(admin)
        kubeconfig = service_account_kubeconfig(plane, admin, tmp_path / "sa.kubeconfig")
        ns = f"rbac-{int(time.time())}"
        client.CoreV1Api(admin).create_namespace(client.V1Namespace(metadata=client.V1ObjectMeta(name=ns)))
        kube = Kube(admin, ns)
        lease_ns, _ = service_account()
        leader = ControllerProcess(kubeconfig, ["-A", "--leader-election-namespace", lease_ns,
                                                "--openstack-sweep-seconds", "2"],
                                   name="sa-controller", log_dir=tmp_path)
        leader.start()
        try:
            scenario(kube, audit_log, netbox)
            adopting_scenario(kube, openstack)
            # The leader has renewed its Lease by now (every 5 s).
            eventually(lambda: called(audit_log, "coordination.k8s.io", "leases", "update"), timeout=30,
                       what="a Lease renewal")
        finally:
            leader.stop()
        race(kube, audit_log, kubeconfig, tmp_path)
        # The API server's refusals say "forbidden" (reason Forbidden, message "... is forbidden: ..."); a bare
        # "403" would also match a timestamp's milliseconds.
        assert "forbidden" not in leader.log_text().lower(), leader.log_tail(40)

    found = calls(audit_events(audit_log))
    refused = {call: codes for call, codes in found.items() if 403 in codes or 401 in codes}
    assert not refused, f"calls the roles do not allow: {refused}"
    used = set(found)
    granted = permissions.granted(permissions.cluster_rules() + permissions.LEADER_ELECTION_RULES)
    assert used <= granted, f"used but not granted: {sorted(used - granted)}"
    assert granted <= used, f"granted but never used: {sorted(granted - used)}"


def scenario(kube: Kube, audit_log: Path, netbox) -> None:
    """Everything the controller does for one namespace, through its ServiceAccount."""
    kube.cluster("c1")
    kube.pool("p1", namePrefix="p", clusterName="c1", gateway="10.0.0.10",
              pools=[{"start": "10.0.0.10", "end": "10.0.0.14"}], preAllocations={"pre": "10.0.0.12"})
    kube.claim("a", "p1")
    kube.claim("pre", "p1")
    kube.claim("want", "p1", annotations={"ipAddress": "10.0.0.13"})
    assert kube.bound("pre")["spec"]["address"] == "10.0.0.12"
    assert kube.bound("want")["spec"]["address"] == "10.0.0.13"
    kube.bound("a")
    # Only now: a claim of the other API, served from its own watch stream, could take .13 first.
    kube.capi_claim("x", "p1", labels={"cluster.x-k8s.io/cluster-name": "c1"})
    kube.capi_bound("x")
    # The pool is full: errors, with Events.
    kube.claim("over", "p1")
    kube.capi_claim("over-capi", "p1")
    kube.claim_error("over")
    kube.warning_event("over", "PoolExhausted")
    eventually(lambda: (condition(kube.capi_ipclaim("over-capi"), "Ready") or {}).get("reason") == "PoolExhausted",
               what="the Cluster API claim to be refused for exhaustion")
    pool = kube.ippool("p1")
    assert pool["metadata"]["labels"]["cluster.x-k8s.io/cluster-name"] == "c1"
    assert [r["kind"] for r in pool["metadata"]["ownerReferences"]] == ["Cluster"]

    # Release: the addresses go, the waiting claims get them.
    kube.delete(METAL3, "ipclaims", "a")
    kube.delete(CAPI, "ipaddressclaims", "x")
    kube.bound("over")
    kube.capi_bound("over-capi")

    # Addresses whose claims never existed are let go (after the claim is looked up).
    kube.create(METAL3, "ipaddresses", {
        "apiVersion": "/".join(METAL3), "kind": "IPAddress", "metadata": {"name": "p-10-0-0-99"},
        "spec": {"address": "10.0.0.99", "pool": {"name": "p1"}, "claim": {"name": "ghost"}}})
    kube.create(CAPI, "ipaddresses", {
        "apiVersion": "/".join(CAPI), "kind": "IPAddress", "metadata": {"name": "ghost"},
        "spec": {"address": "10.0.0.98", "prefix": 24, "claimRef": {"name": "ghost"},
                 "poolRef": {"apiGroup": "ipam.metal3.io", "kind": "IPPool", "name": "p1"}}})
    kube.gone(METAL3, "ipaddresses", "p-10-0-0-99")
    kube.gone(CAPI, "ipaddresses", "ghost")

    # The in-cluster provider's kinds, namespaced and global: their finalizers and status.
    incluster = ("ipam.cluster.x-k8s.io", "v1alpha2")
    kube.create(incluster, "inclusterippools", {
        "apiVersion": "/".join(incluster), "kind": "InClusterIPPool", "metadata": {"name": "ic"},
        "spec": {"addresses": ["10.3.0.0/29"], "prefix": 24, "gateway": "10.3.0.1"}})
    kube.custom.create_cluster_custom_object(*incluster, "globalinclusterippools", {
        "apiVersion": "/".join(incluster), "kind": "GlobalInClusterIPPool", "metadata": {"name": kube.ns},
        "spec": {"addresses": ["10.4.0.0/29"], "prefix": 24}})
    kube.capi_claim("ic-claim", "ic", group=incluster[0], kind="InClusterIPPool")
    kube.capi_claim("gic-claim", kube.ns, group=incluster[0], kind="GlobalInClusterIPPool")
    kube.capi_bound("ic-claim")
    kube.capi_bound("gic-claim")
    # Released, and the pools deleted once empty (their finalizers taken off).
    for claim in ("ic-claim", "gic-claim"):
        kube.delete(CAPI, "ipaddressclaims", claim)
        kube.gone(CAPI, "ipaddresses", claim)
    kube.delete(incluster, "inclusterippools", "ic")
    kube.custom.delete_cluster_custom_object(*incluster, "globalinclusterippools", kube.ns)
    kube.gone(incluster, "inclusterippools", "ic")
    eventually(lambda: not [p for p in kube.custom.list_cluster_custom_object(*incluster, "globalinclusterippools")
                            ["items"] if p["metadata"]["name"] == kube.ns], what="the global pool to be gone")

    kube.pool("p2", namePrefix="q", pools=[{"start": "10.1.0.1", "end": "10.1.0.250"}])

    # A pool without addresses goes at once (its finalizer is taken off).
    kube.pool("p3", namePrefix="r", pools=[{"start": "10.2.0.1", "end": "10.2.0.2"}])
    eventually(lambda: "ippool.ipam.metal3.io" in (kube.ippool("p3")["metadata"].get("finalizers") or []),
               what="the finalizer on p3")
    kube.delete(METAL3, "ippools", "p3")
    kube.gone(METAL3, "ippools", "p3")

    # The in-cluster provider's pools, of both scopes: finalizer and status patched, a claim of each served
    # (a global pool's lock in the controller's namespace).
    local = gi.ip_pool("ic", namespace=kube.ns, prefix=24, addresses=["10.3.0.1-10.3.0.9"])
    kube.custom.create_namespaced_custom_object(gi.GROUP, gi.POOL_VERSION, kube.ns, "inclusterippools", local)
    global_name = f"{kube.ns}-gic"
    kube.custom.create_cluster_custom_object(gi.GROUP, gi.POOL_VERSION, "globalinclusterippools",
                                             gi.ip_pool(global_name, prefix=24, addresses=["10.4.0.1-10.4.0.9"]))
    try:
        for name, kind, pool in (("ic-claim", gi.IN_CLUSTER_IP_POOL, "ic"),
                                 ("gic-claim", gi.GLOBAL_IN_CLUSTER_IP_POOL, global_name)):
            kube.create(CAPI, "ipaddressclaims", gi.claim(name, kube.ns, kind, pool))
            kube.capi_bound(name)
            kube.delete(CAPI, "ipaddressclaims", name)
            kube.gone(CAPI, "ipaddressclaims", name)
    finally:
        kube.custom.delete_cluster_custom_object(gi.GROUP, gi.POOL_VERSION, "globalinclusterippools", global_name)

    # Its prefix pools likewise: a sub-prefix of each handed out and released, the namespaced pool deleted once
    # empty (a global pool's lock in the controller's namespace).
    prefix_global = f"{kube.ns}-gpp"
    kube.custom.create_namespaced_custom_object(gi.GROUP, gi.POOL_VERSION, kube.ns, "inclusterprefixpools",
                                                gi.prefix_pool("pp", namespace=kube.ns, prefixes=["fd00:3::/48"]))
    kube.custom.create_cluster_custom_object(gi.GROUP, gi.POOL_VERSION, "globalinclusterprefixpools",
                                             gi.prefix_pool(prefix_global, prefixes=["fd00:4::/48"]))
    try:
        for name, kind, pool, base in (("pp-claim", gi.IN_CLUSTER_PREFIX_POOL, "pp", "fd00:3::"),
                                       ("gpp-claim", gi.GLOBAL_IN_CLUSTER_PREFIX_POOL, prefix_global, "fd00:4::")):
            kube.create(CAPI, "ipaddressclaims", gi.claim(name, kube.ns, kind, pool))
            address = kube.capi_bound(name)
            assert (address["spec"]["address"], address["spec"]["prefix"]) == (base, 64), address["spec"]
            kube.delete(CAPI, "ipaddressclaims", name)
            kube.gone(CAPI, "ipaddressclaims", name)
        kube.custom.delete_namespaced_custom_object(gi.GROUP, gi.POOL_VERSION, kube.ns, "inclusterprefixpools", "pp")
        kube.gone((gi.GROUP, gi.POOL_VERSION), "inclusterprefixpools", "pp")
    finally:
        kube.custom.delete_cluster_custom_object(gi.GROUP, gi.POOL_VERSION, "globalinclusterprefixpools",
                                                 prefix_global)

    # A NetBoxIPPool: its token read from its Secret, its finalizer and status (NetBox's survey) patched,
    # a claim served from NetBox and released there.
    net = seeded(netbox, 29)
    put_secret(kube.api_client, kube.ns, "netbox", netbox.token)
    nb = ("netbox.metal3-ipam.io", "v1alpha1")
    kube.create(nb, "netboxippools", {
        "apiVersion": "/".join(nb), "kind": "NetBoxIPPool", "metadata": {"name": "nb"},
        "spec": {"server": {"url": netbox.url, "tokenSecretRef": {"name": "netbox"}}, "source": {"prefix": str(net)}}})
    kube.capi_claim("nb-claim", "nb", group=nb[0], kind="NetBoxIPPool")
    kube.capi_bound("nb-claim", timeout=60)
    eventually(lambda: (condition(kube.get(nb, "netboxippools", "nb"), "Ready") or {}).get("reason") == "Serving",
               timeout=60, what="the NetBoxIPPool's status from NetBox")
    kube.delete(CAPI, "ipaddressclaims", "nb-claim")
    kube.gone(CAPI, "ipaddressclaims", "nb-claim", timeout=60)

    # An OpenStackFloatingIPPool whose clouds.yaml Secret is not there: its finalizer and its status (saying
    # so) patched all the same, the finalizer taken off when it is deleted.
    osk = ("openstack.metal3-ipam.io", "v1alpha1")
    kube.create(osk, "openstackfloatingippools", {
        "apiVersion": "/".join(osk), "kind": "OpenStackFloatingIPPool", "metadata": {"name": "os"},
        "spec": {"identityRef": {"name": "no-such-cloud", "cloudName": "openstack"},
                 "floatingIPNetwork": {"filter": {"name": "public"}}}})
    eventually(lambda: (condition(kube.get(osk, "openstackfloatingippools", "os"), "Ready") or {}).get("reason")
               == "IdentityMissing", timeout=60, what="the OpenStackFloatingIPPool's status naming its missing Secret")
    assert "no-such-cloud" in condition(kube.get(osk, "openstackfloatingippools", "os"), "Ready")["message"]
    kube.delete(osk, "openstackfloatingippools", "os")
    kube.gone(osk, "openstackfloatingippools", "os")
    assert_invariants(kube, timeout=60)


def adopting_scenario(kube: Kube, openstack) -> None:
    """An OpenStackFloatingIPPool adopting the free floating IPs of CAPO's pool of its name (none here: CAPO's
    pool, read before a floating IP is chosen, is not there) serves a claim from Neutron and releases it."""
    put_clouds(kube.api_client, kube.ns, openstack.clouds_yaml("member"))
    osk = ("openstack.metal3-ipam.io", "v1alpha1")
    kube.create(osk, "openstackfloatingippools", {
        "apiVersion": "/".join(osk), "kind": "OpenStackFloatingIPPool", "metadata": {"name": "adopting"},
        "spec": {"identityRef": {"name": "cloud", "cloudName": "openstack"}, "adoptFromCAPOPool": "capo"}})
    try:
        kube.capi_claim("os-claim", "adopting", group=osk[0], kind="OpenStackFloatingIPPool")
        kube.capi_bound("os-claim", timeout=90)
        secret_held_while_another_cluster_marks(kube, openstack, osk)
        kube.delete(CAPI, "ipaddressclaims", "os-claim")
        kube.gone(CAPI, "ipaddressclaims", "os-claim", timeout=60)
        kube.delete(osk, "openstackfloatingippools", "adopting")
        kube.gone(osk, "openstackfloatingippools", "adopting")
    finally:
        openstack.reset()


def secret_held_while_another_cluster_marks(kube: Kube, openstack, osk: tuple[str, str]) -> None:
    """The claim's floating IP marked as homed at another cluster's pool (as taken over from it): the pool's
    Secret carries our finalizer while it is so; marked back, the Secret is let go."""
    core = client.CoreV1Api(kube.api_client)
    finalizers = lambda: core.read_namespaced_secret("cloud", kube.ns).metadata.finalizers or []  # noqa: E731
    uid = kube.get(osk, "openstackfloatingippools", "adopting")["metadata"]["uid"]
    here = f"{osp.DEFAULT_OWNER}-home:{osp.KIND}:{uid}"
    elsewhere = f"{osp.DEFAULT_OWNER}-home:{osp.KIND}:{'a' * 8}"
    [fip] = eventually(lambda: [f for f in openstack.neutron("GET", "floatingips")["floatingips"]
                                if here in f["tags"]], timeout=60, what="the claim's floating IP homed at its pool")
    openstack.neutron("PUT", f"floatingips/{fip['id']}/tags/{elsewhere}", user="member")
    openstack.neutron("DELETE", f"floatingips/{fip['id']}/tags/{here}", user="member")
    eventually(lambda: osp.SECRET_FINALIZER in finalizers(), timeout=60,
               what="the Secret held while another cluster marks the floating IP of a live claim")
    openstack.neutron("PUT", f"floatingips/{fip['id']}/tags/{here}", user="member")
    openstack.neutron("DELETE", f"floatingips/{fip['id']}/tags/{elsewhere}", user="member")
    eventually(lambda: osp.SECRET_FINALIZER not in finalizers(), timeout=60,
               what="the Secret let go once no other cluster marks the floating IP")


def race(kube: Kube, audit_log: Path, kubeconfig: Path, tmp_path: Path) -> None:
    """Two replicas without leader election serve the same claims of both APIs: names collide,
    and the loser reads the address that holds the name before it decides again."""
    # In their namespace, as pods of the controller's Deployment are (where the Role grants the Leases of locks).
    lease_ns, _ = service_account()
    replicas = [ControllerProcess(kubeconfig, ["-A", "--no-leader-elect", "--lock-namespace", lease_ns],
                                  name=f"sa-replica-{i}", log_dir=tmp_path)
                for i in (1, 2)]
    for replica in replicas:
        replica.start()

    def collided() -> bool:
        return called(audit_log, "ipam.metal3.io", "ipaddresses", "get") and \
            called(audit_log, "ipam.cluster.x-k8s.io", "ipaddresses", "get")

    try:
        deadline = time.monotonic() + 120
        burst = 0
        while not collided():
            assert time.monotonic() < deadline, "two replicas never collided on a name"
            burst += 1
            names = [f"burst-{burst}-{i}" for i in range(8)]
            for name in names:
                kube.claim(name, "p2")
                kube.capi_claim(f"{name}-capi", "p2")
            for name in names:
                kube.bound(name, timeout=60)
                kube.capi_bound(f"{name}-capi", timeout=60)
            for name in names:  # room for the next burst
                kube.delete(METAL3, "ipclaims", name)
                kube.delete(CAPI, "ipaddressclaims", f"{name}-capi")
        assert_invariants(kube, timeout=60)
    finally:
        for replica in replicas:
            replica.stop()
