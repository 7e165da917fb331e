"""Orders of events around writes the API server refuses for good that the writer must survive."""

from __future__ import annotations

import uuid

from controller_fixtures import METAL3, READ_RULES, controller_as_user, grant_writes, rules_with_ipaddress_verbs
from metal3_ipam.testing.waiting import eventually


def test_readiness_recovers_once_rbac_allows_writes_also_when_the_refused_work_is_gone(
        control_plane, api_client, kube, tmp_path):
    """No RBAC for writes: /readyz turns 503. The pool and claim whose writes were refused are deleted (they
    carry no finalizer, since that write was refused too), then RBAC is fixed. Nothing is left to write, so no
    write is ever accepted again: /readyz must still recover, or a single replica stays unready for good (and
    the validating webhook it serves, failurePolicy Fail, refuses the very IPPool that would bring a write)."""
    user = f"reader-{uuid.uuid4().hex[:6]}"
    with controller_as_user(control_plane, api_client, kube.ns, tmp_path, user, READ_RULES) as proc:
        proc.start()
        kube.pool("p", pools=[{"start": "10.71.0.10", "end": "10.71.0.19"}], prefix=24)
        kube.claim("c1", "p")
        eventually(lambda: proc.http_status("/readyz") == 503, timeout=30, what="/readyz to say not ready")

        kube.delete(METAL3, "ipclaims", "c1")
        kube.delete(METAL3, "ippools", "p")
        kube.gone(METAL3, "ipclaims", "c1")
        kube.gone(METAL3, "ippools", "p")
        grant_writes(api_client, kube.ns, {"kind": "User", "name": user, "apiGroup": "rbac.authorization.k8s.io"})
        # Longer than the writer's and the pool workers' longest backoff (60 s each) put together.
        eventually(lambda: proc.http_status("/readyz") == 200, timeout=150,
                   what="/readyz to recover once writes are allowed")


def test_a_delete_of_an_address_whose_claim_is_gone_refused_by_rbac_is_not_silent(
        control_plane, api_client, kube, tmp_path):
    """An IPAddress whose claim is gone (left by an earlier IPAM, or a claim deleted before it carried the
    finalizer) is deleted by the controller. RBAC forbids that delete: besides the log line and the metric, the
    refusal must show where users look (a Warning Event on the address or its pool), as item 8 asks."""
    user = f"no-delete-{uuid.uuid4().hex[:6]}"
    rules = rules_with_ipaddress_verbs(["get", "list", "watch", "create", "patch"])
    with controller_as_user(control_plane, api_client, kube.ns, tmp_path, user, rules) as proc:
        kube.pool("p", pools=[{"start": "10.72.0.10", "end": "10.72.0.19"}], prefix=24)
        kube.create(METAL3, "ipaddresses", {
            "apiVersion": "/".join(METAL3), "kind": "IPAddress", "metadata": {"name": "p-10-72-0-10"},
            "spec": {"address": "10.72.0.10", "prefix": 24, "pool": {"name": "p"}, "claim": {"name": "ghost"}}})
        proc.start()
        eventually(lambda: "delete IPAddress" in proc.log_text() and "403" in proc.log_text(), timeout=30,
                   what="the delete of the orphaned address to be refused")

        def warning():
            return [e for e in kube.events() if e.type == "Warning"
                    and e.involved_object.name in ("p-10-72-0-10", "p") and "403" in (e.message or "")]

        eventually(warning, timeout=30, what="a Warning Event saying the delete was refused")
