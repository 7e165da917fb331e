"""Every webhook path the Go providers' configurations register is served, the defaulting ones included."""

from __future__ import annotations

import asyncio
import base64
import json

import pytest
import yaml

from metal3_ipam.controller.webhook_server import Limits
from metal3_ipam.testing import webhook_load as load
from paths import TESTS
from served_webhook import Served

GO_COMPONENTS = TESTS / "fixtures" / "go-components"


def _webhooks(component: str) -> list[tuple[str, dict]]:
    found = []
    for doc in yaml.safe_load_all((GO_COMPONENTS / component).read_text()):
        if doc and doc["kind"] in ("MutatingWebhookConfiguration", "ValidatingWebhookConfiguration"):
            found += [(doc["kind"], hook) for hook in doc["webhooks"]]
    return found


def _request(hook: dict, obj: dict) -> dict:
    rule = hook["rules"][0]
    group, version, plural = rule["apiGroups"][0], rule["apiVersions"][0], rule["resources"][0]
    return {"uid": "u-1", "operation": "CREATE", "namespace": obj["metadata"].get("namespace"),
            "name": obj["metadata"]["name"], "kind": {"group": group, "version": version, "kind": obj["kind"]},
            "resource": {"group": group, "version": version, "resource": plural}, "object": obj, "oldObject": None,
            "userInfo": {"username": "someone"}}


KINDS = {"ippools": "IPPool", "ipclaims": "IPClaim", "ipaddresses": "IPAddress", "inclusterippools": "InClusterIPPool",
         "globalinclusterippools": "GlobalInClusterIPPool", "inclusterprefixpools": "InClusterPrefixPool",
         "globalinclusterprefixpools": "GlobalInClusterPrefixPool"}


@pytest.mark.parametrize("component", ["metal3-ipam-components.yaml", "in-cluster-components.yaml"])
def test_every_defaulting_path_of_the_go_configurations_answers(tmp_path, component):
    mutating = [hook for kind, hook in _webhooks(component) if kind == "MutatingWebhookConfiguration"]
    assert mutating

    async def scenario() -> None:
        async with Served(tmp_path, Limits()) as served:
            for hook in mutating:
                rule = hook["rules"][0]
                kind = KINDS[rule["resources"][0]]
                obj = {"apiVersion": f"{rule['apiGroups'][0]}/{rule['apiVersions'][0]}", "kind": kind,
                       "metadata": {"name": "x", "namespace": "default"}, "spec": {}}
                path = hook["clientConfig"]["service"]["path"]
                status, answer = await asyncio.to_thread(served.post, load.review(_request(hook, obj)), path)
                assert status == 200, (path, answer)
                response = json.loads(answer)["response"]
                assert response["allowed"] and response["uid"] == "u-1", (path, response)
                patch = json.loads(base64.b64decode(response["patch"])) if "patch" in response else []
                # The Go defaulters: an IPPool's allocationStrategy is sequential; nothing else is changed.
                expected = [{"op": "add", "path": "/spec/allocationStrategy", "value": "sequential"}] \
                    if kind == "IPPool" else []
                assert patch == expected, (path, patch)

    asyncio.run(scenario())


@pytest.mark.parametrize("component", ["metal3-ipam-components.yaml", "in-cluster-components.yaml"])
def test_every_validating_path_of_the_go_configurations_is_routed(tmp_path, component):
    validating = [hook for kind, hook in _webhooks(component) if kind == "ValidatingWebhookConfiguration"]

    async def scenario() -> None:
        async with Served(tmp_path, Limits()) as served:
            for hook in validating:
                path = hook["clientConfig"]["service"]["path"]
                status, answer = await asyncio.to_thread(served.post, b"{}", path)
                assert status != 404, (path, answer)

    asyncio.run(scenario())
