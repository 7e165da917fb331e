"""A control plane whose API server calls the controller's admission webhooks over TLS.

Helpers (the fixtures built on them, ``webhook_plane`` and ``webhook_controller``, are in
admission/conftest.py):

- :func:`register_webhooks`: the Validating/MutatingWebhookConfigurations of
  :func:`metal3_ipam.controller.webhook.hooks` registered with ``clientConfig.url:
  https://127.0.0.1:PORT/<path>`` and a CA of the test's own; :func:`convert_at` points the conversion
  webhooks of the CRDs that have one (the in-cluster IP pools) at ``/convert`` the same way;
- :func:`call` and :func:`apply`: REST calls that also return the API server's
  warnings; :func:`apply` is ``kubectl apply --server-side --force-conflicts``.
"""

from __future__ import annotations

import base64
import json
import uuid
from dataclasses import dataclass, field
from typing import Any

from kubernetes import client
from kubernetes.client.rest import ApiException

from controller_fixtures import ControllerProcess
from metal3_ipam import crds
from metal3_ipam.core.conversion import CONVERSION_PATH
from metal3_ipam.controller import webhook
from metal3_ipam.core import poolkind as pools
from metal3_ipam.testing.certs import Authority
from metal3_ipam.testing.waiting import eventually

PLURALS = {"IPPool": "ippools", "IPClaim": "ipclaims", "IPAddress": "ipaddresses",
           "IPAddressClaim": "ipaddressclaims", "Cluster": "clusters", "Secret": "secrets",
           **{kind: plural for (_, kind), plural in ((k.kind, k.plural) for k in pools.REGISTRY.values())}}
CLUSTER_SCOPED = {k.kind[1] for k in pools.REGISTRY.values() if k.cluster_scoped}
FIELD_MANAGER = "metal3-ipam-e2e"


@dataclass
class Answer:
    status: int
    body: Any
    warnings: list[str] = field(default_factory=list)

    @property
    def message(self) -> str:
        return (self.body or {}).get("message", "") if isinstance(self.body, dict) else str(self.body)


def call(api: client.ApiClient, method: str, path: str, body: Any = None, content_type: str | None = None,
         query: list[tuple[str, str]] | None = None, accept: str = "application/json") -> Answer:
    """One REST call; never raises on an HTTP error status."""
    headers = {"Accept": accept}
    if content_type:
        headers["Content-Type"] = content_type
    method, url, header_params, body, _ = api.param_serialize(
        method, path, query_params=query or [], header_params=headers, body=body, auth_settings=["BearerToken"])
    try:
        response = api.call_api(method, url, header_params=header_params, body=body)
    except ApiException as err:  # transport-level failures carry no response
        return Answer(err.status or 0, {"message": str(err)})
    response.read()
    try:
        decoded = json.loads(response.data) if response.data else None
    except ValueError:
        decoded = response.data.decode(errors="replace")
    return Answer(response.status, decoded, list(response.response.headers.getlist("Warning")))


def path_of(obj: dict, namespace: str, name: str | None = None) -> str:
    group_version = obj["apiVersion"]
    plural = PLURALS[obj["kind"]]
    where = "" if obj["kind"] in CLUSTER_SCOPED else f"namespaces/{namespace}/"
    root = "/apis" if "/" in group_version else "/api"  # the core group ("v1") has a root of its own
    path = f"{root}/{group_version}/{where}{plural}"
    return f"{path}/{name}" if name else path


def placed(obj: dict, namespace: str) -> dict:
    """``obj`` moved to ``namespace``, with references to the ``default`` namespace following it."""
    obj = json.loads(json.dumps(obj))
    if obj["kind"] not in CLUSTER_SCOPED:
        obj.setdefault("metadata", {})["namespace"] = namespace
    ref = (obj.get("spec") or {}).get("pool") if isinstance(obj.get("spec"), dict) else None
    if isinstance(ref, dict) and ref.get("namespace") == "default":
        ref["namespace"] = namespace
    return obj


def apply(api: client.ApiClient, obj: dict, namespace: str) -> Answer:
    """What ``kubectl apply`` does: create what is not there, else change it.

    A change is a server-side apply that takes over conflicting fields (the
    controller owns an IPAddress's spec). A new object is created with a POST:
    a server-side apply of a body of the wrong shape (a string where the schema
    wants a list) is answered 500, not 422, by the API server.
    """
    obj = placed(obj, namespace)
    path = path_of(obj, namespace, obj["metadata"]["name"])
    if call(api, "GET", path).status == 404:
        return call(api, "POST", path_of(obj, namespace), obj, "application/json", [("fieldManager", FIELD_MANAGER)])
    return call(api, "PATCH", path, obj, "application/apply-patch+yaml",
                [("fieldManager", FIELD_MANAGER), ("force", "true")])


def get(api: client.ApiClient, obj: dict, namespace: str) -> dict | None:
    answer = call(api, "GET", path_of(obj, namespace, obj["metadata"]["name"]))
    if answer.status == 404:
        return None
    assert answer.status == 200, answer
    return answer.body


# -- installing rendered manifests ----------------------------------------------------------------

INSTALL_PLURALS = {"Namespace": "namespaces", "ServiceAccount": "serviceaccounts", "Service": "services",
                   "ConfigMap": "configmaps",
                   "CustomResourceDefinition": "customresourcedefinitions", "ClusterRole": "clusterroles",
                   "ClusterRoleBinding": "clusterrolebindings", "Role": "roles", "RoleBinding": "rolebindings",
                   "Deployment": "deployments", "Issuer": "issuers", "Certificate": "certificates",
                   "ValidatingWebhookConfiguration": "validatingwebhookconfigurations",
                   "MutatingWebhookConfiguration": "mutatingwebhookconfigurations"}


def object_path(obj: dict) -> str:
    """The REST path of one object of config/ (any kind it holds)."""
    group_version = obj["apiVersion"]
    base = f"/apis/{group_version}" if "/" in group_version else f"/api/{group_version}"
    namespace = obj["metadata"].get("namespace")
    collection = f"{base}/namespaces/{namespace}/{INSTALL_PLURALS[obj['kind']]}" if namespace else \
        f"{base}/{INSTALL_PLURALS[obj['kind']]}"
    return f"{collection}/{obj['metadata']['name']}"


def established(api: client.ApiClient, name: str) -> bool:
    crd = client.ApiextensionsV1Api(api).read_custom_resource_definition(name)
    return any(c.type == "Established" and c.status == "True" for c in (crd.status.conditions or []))


def install(api: client.ApiClient, objects: list[dict], manager: str) -> None:
    """Server-side apply of rendered objects in their order, then every CRD among them established."""
    for obj in objects:
        answer = call(api, "PATCH", object_path(obj), obj, "application/apply-patch+yaml",
                      [("fieldManager", manager), ("force", "true")])
        assert answer.status in (200, 201), f"{obj['kind']} {obj['metadata']['name']}: {answer.message}"
    for crd in (o for o in objects if o["kind"] == "CustomResourceDefinition"):
        eventually(lambda: established(api, crd["metadata"]["name"]), timeout=60,
                   what=f"CRD {crd['metadata']['name']} to be established")


def use_webhooks_at(api: client.ApiClient, objects: list[dict], port: int, ca_pem: bytes) -> None:
    """No Service routing on loopback: the installed webhook configurations, and the conversion webhooks of the
    installed CRDs, call https://127.0.0.1:PORT, with the CA cert-manager's injector would have put in."""
    bundle = base64.b64encode(ca_pem).decode()
    for kind in ("ValidatingWebhookConfiguration", "MutatingWebhookConfiguration"):
        (configuration,) = [o for o in objects if o["kind"] == kind]
        hooks = [{**hook, "clientConfig": {"url": f"https://127.0.0.1:{port}{hook['clientConfig']['service']['path']}",
                                            "caBundle": bundle}} for hook in configuration["webhooks"]]
        answer = call(api, "PATCH", object_path(configuration), {"webhooks": hooks}, "application/merge-patch+json")
        assert answer.status == 200, answer.message
    converted = [o for o in objects if o["kind"] == "CustomResourceDefinition"
                 and (o["spec"].get("conversion") or {}).get("strategy") == "Webhook"]
    assert converted, "no CRD of the rendered objects converts through the controller"
    convert_at(api, [crd["metadata"]["name"] for crd in converted], port, ca_pem)


def converted_crds() -> list[str]:
    """The CRDs of config/crd whose versions are converted by the controller's /convert."""
    return [crd["metadata"]["name"] for crd in crds.crd_definitions()
            if (crd["spec"].get("conversion") or {}).get("strategy") == "Webhook"]


def convert_at(api: client.ApiClient, names: list[str], port: int, ca_pem: bytes) -> None:
    """The CRDs ``names`` convert through https://127.0.0.1:PORT/convert with the CA ``ca_pem``, as the webhook
    configurations call the controller. The API server takes the change up a moment later: the first request
    that needs a conversion retries until it is served (see tests/e2e/admission/test_incluster_admission.py)."""
    bundle = base64.b64encode(ca_pem).decode()
    url = f"https://127.0.0.1:{port}{CONVERSION_PATH}"
    ext = client.ApiextensionsV1Api(api)
    for name in names:
        ext.patch_custom_resource_definition(name, {"spec": {"conversion": {"webhook": {"clientConfig": {
            "service": None, "url": url, "caBundle": bundle}}}}})
        assert ext.read_custom_resource_definition(name).spec.conversion.webhook.client_config.url == url



def serves_claims_and_webhooks(api: client.ApiClient, namespace: str, pod_namespace: str) -> None:
    """An installed controller at work: claims of both APIs get addresses, its webhooks refuse an overlapping
    pool, it converts the in-cluster IP pools' v1alpha1, and it holds the leader-election Lease in its own
    namespace."""
    from controller_fixtures import Kube, assert_invariants

    wait_until_webhooks_answer(api)
    client.CoreV1Api(api).create_namespace(client.V1Namespace(metadata=client.V1ObjectMeta(name=namespace)))
    kube = Kube(api, namespace)
    kube.pool("p", pools=[{"start": "10.0.0.1", "end": "10.0.0.9"}])
    kube.claim("c", "p")
    kube.capi_claim("d", "p")
    served = {kube.bound("c", timeout=60)["spec"]["address"], kube.capi_bound("d", timeout=60)["spec"]["address"]}
    assert served == {"10.0.0.1", "10.0.0.2"}
    assert_invariants(kube)
    lease = client.CoordinationV1Api(api).read_namespaced_lease("metal3-ipam-controller", pod_namespace)
    assert lease.spec.holder_identity
    # The in-cluster IP pool CRDs' v1alpha1 is converted by the installed controller (the API server takes the
    # CRDs' new clientConfig up a moment after use_webhooks_at patched it).
    old = {"apiVersion": "ipam.cluster.x-k8s.io/v1alpha1", "kind": "InClusterIPPool", "metadata": {"name": "old"},
           "spec": {"subnet": "10.1.0.0/24", "start": "10.1.0.10", "end": "10.1.0.20"}}
    eventually(lambda: apply(api, old, namespace).status == 201, timeout=30, interval=0.2,
               what="a v1alpha1 pool created through the controller's conversion")
    stored = get(api, dict(old, apiVersion="ipam.cluster.x-k8s.io/v1alpha2"), namespace)
    assert stored["spec"] == {"addresses": ["10.1.0.10-10.1.0.20"], "prefix": 24}, stored
    refused = call(api, "POST", f"/apis/ipam.metal3.io/v1alpha1/namespaces/{namespace}/ippools",
                   {"apiVersion": "ipam.metal3.io/v1alpha1", "kind": "IPPool", "metadata": {"name": "q"},
                    "spec": {"namePrefix": "q", "pools": [{"start": "10.0.0.5", "end": "10.0.0.20"}]}},
                   "application/json")
    assert refused.status == 422 and "IPPool p" in refused.message, json.dumps(refused.body)

def register_webhooks(api: client.ApiClient, port: int, ca_pem: bytes, name: str = "metal3-ipam-e2e") -> list[dict]:
    """The webhook configurations of hooks(), calling https://127.0.0.1:PORT."""
    bundle = base64.b64encode(ca_pem).decode()
    configurations = webhook.configurations(
        lambda hook: {"url": f"https://127.0.0.1:{port}{hook.path}", "caBundle": bundle}, name=name)
    admission = client.AdmissionregistrationV1Api(api)
    for configuration in configurations:
        if configuration["kind"] == "MutatingWebhookConfiguration":
            admission.create_mutating_webhook_configuration(configuration)
        else:
            admission.create_validating_webhook_configuration(configuration)
    return configurations


def unregister_webhooks(api: client.ApiClient, configurations: list[dict]) -> None:
    admission = client.AdmissionregistrationV1Api(api)
    for configuration in configurations:
        name = configuration["metadata"]["name"]
        try:
            if configuration["kind"] == "MutatingWebhookConfiguration":
                admission.delete_mutating_webhook_configuration(name)
            else:
                admission.delete_validating_webhook_configuration(name)
        except ApiException as err:
            if err.status != 404:
                raise


def new_namespace(api: client.ApiClient, prefix: str = "w") -> str:
    name = f"{prefix}-{uuid.uuid4().hex[:10]}"
    client.CoreV1Api(api).create_namespace(client.V1Namespace(metadata=client.V1ObjectMeta(name=name)))
    return name


def wait_until_webhooks_answer(api: client.ApiClient, probe: dict | None = None) -> None:
    """The API server picks webhook configurations up asynchronously: wait until a webhook refusal comes back
    (of ``probe``, an invalid pool: a Metal3 IPPool unless told)."""
    namespace = new_namespace(api, "probe")
    probe = probe or {"apiVersion": "ipam.metal3.io/v1alpha1", "kind": "IPPool", "metadata": {"name": "probe"},
                      "spec": {"namePrefix": "probe", "pools": [{"start": "10.0.0.9", "end": "10.0.0.1"}]}}

    def refused_by_webhook() -> bool:
        answer = apply(api, probe, namespace)
        if answer.status < 300:  # accepted before the webhook was in place: try again with it gone
            call(api, "DELETE", path_of(probe, namespace, "probe"))
            return False
        return "admission webhook" in answer.message

    eventually(refused_by_webhook, timeout=30, interval=0.2, what="the API server to call the webhooks")
    client.CoreV1Api(api).delete_namespace(namespace)


@dataclass
class WebhookController:
    process: ControllerProcess
    port: int
    authority: Authority
    configurations: list[dict]
