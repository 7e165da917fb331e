"""The webhook server's bounds under the API server's own load: a burst of claims, every create reviewed.

Bounded: 300 claims, 16 creates in flight, a minute at most.
"""

from __future__ import annotations

import concurrent.futures
import time

from metal3_ipam.testing.waiting import eventually
from webhook_fixtures import apply, call, new_namespace, path_of

CLAIMS, IN_FLIGHT = 300, 16


def test_a_burst_of_claims_is_never_refused_by_the_webhooks_bounds(webhook_controller, webhook_api):
    """300 IPClaims created 16 at a time, and the controller's 300 IPAddress creates meanwhile, all reviewed
    by the webhooks: every create is admitted (none answered 503 for a full queue or a deadline), every claim
    is bound, and the webhook server refuses nothing."""
    api = webhook_api
    namespace = new_namespace(api)
    pool = {"apiVersion": "ipam.metal3.io/v1alpha1", "kind": "IPPool", "metadata": {"name": "p"},
            "spec": {"namePrefix": "p", "pools": [{"start": "10.1.0.1", "end": "10.1.3.250"}]}}
    assert apply(api, pool, namespace).status == 201
    log_start = webhook_controller.process.log_size()

    def create(i: int) -> tuple[int, str]:
        claim = {"apiVersion": "ipam.metal3.io/v1alpha1", "kind": "IPClaim", "metadata": {"name": f"c-{i:03d}"},
                 "spec": {"pool": {"name": "p"}}}
        answer = call(api, "POST", path_of(claim, namespace), claim)
        return answer.status, answer.message if answer.status != 201 else ""

    started = time.monotonic()
    with concurrent.futures.ThreadPoolExecutor(IN_FLIGHT) as creators:
        created = list(creators.map(create, range(CLAIMS)))
    admitted = time.monotonic() - started
    refused = [c for c in created if c[0] != 201]
    claims_path = path_of({"apiVersion": "ipam.metal3.io/v1alpha1", "kind": "IPClaim"}, namespace)

    def bound() -> int:
        items = call(api, "GET", claims_path).body["items"]
        return sum(1 for c in items if (c.get("status") or {}).get("address"))

    eventually(lambda: bound() == CLAIMS - len(refused), timeout=60, interval=0.1, what="every claim to be bound")
    elapsed = time.monotonic() - started
    log = webhook_controller.process.log_text()[log_start:]
    webhook_refusals = [line for line in log.splitlines() if "refused an admission request" in line]
    print(f"{CLAIMS} claims, {IN_FLIGHT} in flight: created in {admitted:.2f} s, all bound in {elapsed:.2f} s; "
          f"{len(refused)} creates refused, {len(webhook_refusals)} reviews refused by the webhook server")
    assert not refused, (len(refused), refused[:1], webhook_refusals[:2])
    assert not webhook_refusals, webhook_refusals[:3]
