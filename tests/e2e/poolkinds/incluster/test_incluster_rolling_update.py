"""A rolling update of the in-cluster provider's Deployment from the Go image to this one, on a real API server.

Kubernetes starts the new pod before it stops the old one: for a while both run. The Go manager elects a
leader on the Lease ``7bb7acb4.ipam.cluster.x-k8s.io`` (client-go's Lease lock: 15 s, renewed every 2 s,
given up on a clean stop); this controller, started as the image's ``/manager`` with the provider's command
line, elects on the same Lease, so it stands by, ready (the rollout waits for it) and writing nothing,
while the Go leader still serves claims. Once the old pod gives the Lease up, it takes over and serves the
state the Go provider left as it is: not one IPAddress changes, a claim the Go leader served while both ran
keeps its IP, and a claim that waited is given an IP nobody holds. Whether the old pod gives the Lease up
(``LeaderElectionReleaseOnCancel``) or it is left to expire, the same.
"""

from __future__ import annotations

import datetime
import threading
import uuid

import pytest
from kubernetes import client
from kubernetes.client.rest import ApiException

from controller_fixtures import ControllerProcess
from metal3_ipam import goflags
from metal3_ipam.testing import go_incluster as gi
from metal3_ipam.testing.waiting import eventually

WRITES = ("POST", "PUT", "PATCH", "DELETE")


def _now() -> str:
    return datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%dT%H:%M:%S.%fZ")


class GoLeader:
    """The Go manager's leader election as client-go runs it on a Lease lock: created (or taken) with its
    identity, renewed every ``retry`` seconds, and given up on a clean stop (holder emptied, duration 1 s)."""

    def __init__(self, api: client.ApiClient, namespace: str, name: str = goflags.IN_CLUSTER_LEASE,
                 duration: int = 15, retry: float = 2.0) -> None:
        self.leases = client.CoordinationV1Api(api)
        self.namespace, self.name, self.duration, self.retry = namespace, name, duration, retry
        self.identity = f"capi-ipam-in-cluster-controller-manager-5c9d7_{uuid.uuid4()}"
        self.renewals = 0
        self.released_at: str | None = None
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._renew, name="Go leader", daemon=True)

    def start(self) -> "GoLeader":
        now = _now()
        self.leases.create_namespaced_lease(self.namespace, {
            "apiVersion": "coordination.k8s.io/v1", "kind": "Lease", "metadata": {"name": self.name},
            "spec": {"holderIdentity": self.identity, "leaseDurationSeconds": self.duration,
                     "acquireTime": now, "renewTime": now, "leaseTransitions": 0}})
        self._thread.start()
        return self

    def _renew(self) -> None:
        while not self._stop.wait(self.retry):
            lease = self.leases.read_namespaced_lease(self.name, self.namespace)
            assert lease.spec.holder_identity == self.identity, f"the Go leader lost its Lease to {lease.spec}"
            lease.spec.renew_time = _now()
            self.leases.replace_namespaced_lease(self.name, self.namespace, lease)
            self.renewals += 1

    def release(self, give_up: bool = True) -> None:
        """The old pod terminated: renewals end, and the Lease is given up (or left to expire)."""
        self._stop.set()
        self._thread.join()
        self.released_at = now = _now()
        if not give_up:
            return
        lease = self.leases.read_namespaced_lease(self.name, self.namespace)
        lease.spec.holder_identity, lease.spec.lease_duration_seconds = "", 1
        lease.spec.acquire_time = lease.spec.renew_time = now
        self.leases.replace_namespaced_lease(self.name, self.namespace, lease)

    def lease(self) -> client.V1Lease:
        return self.leases.read_namespaced_lease(self.name, self.namespace)


def _writes(proc: ControllerProcess) -> dict[str, float]:
    return {name: value for name, value in proc.metrics().items()
            if name.startswith("rest_client_requests_total{") and any(f'method="{m}"' in name for m in WRITES)}


@pytest.fixture
def go_leader(api_client, incluster):
    leader = GoLeader(api_client, incluster.ns)
    yield leader
    if leader.released_at is None and leader._thread.is_alive():
        leader.release()


@pytest.mark.parametrize("give_up", [True, False], ids=["lease-given-up", "lease-left-to-expire"])
def test_a_rolling_update_from_the_go_provider_stands_by_until_its_lease_is_free(control_plane, incluster,
                                                                                go_leader, tmp_path, give_up):
    ns = incluster.ns
    pool = gi.ip_pool("pool", namespace=ns, prefix=24, gateway="10.61.0.1", addresses=["10.61.0.1-10.61.0.20"])
    claims = [gi.claim(f"m{i}", ns, gi.IN_CLUSTER_IP_POOL, "pool") for i in range(3)]
    incluster.writer.write([pool], claims)
    go_leader.start()

    # The new pod: the provider's command line, the Lease in the pod's namespace.
    ours = ControllerProcess(control_plane.kubeconfig,
                             ["--leader-elect", f"--namespace={ns}", "--leader-election-namespace", ns,
                              "--diagnostics-address=0", "--webhook-port=0"],
                             name="new-pod", log_dir=tmp_path, manager=True)
    try:
        ours.start()  # ready while standing by: the rollout goes on
        # The Go leader still serves claims while both run.
        incluster.claim("during", "pool")
        during = incluster.writer.serve(incluster.writer.get(gi.claim("during", ns, gi.IN_CLUSTER_IP_POOL, "pool")))
        incluster.claim("waiting", "pool")
        renewed = go_leader.renewals
        eventually(lambda: go_leader.renewals >= renewed + 3, timeout=60,
                   what="three more renewals of the Go leader's Lease while the new pod stands by")
        assert ours.metrics()["metal3_ipam_leader"] == 0.0
        assert not any(_writes(ours).values()), f"a write while the Go leader held the Lease: {_writes(ours)}"
        assert not (incluster.get_claim("waiting").get("status") or {}).get("addressRef")
        before = {(a["metadata"]["name"]): a for a in incluster.addresses()}

        go_leader.release(give_up)
        eventually(lambda: ours.metrics()["metal3_ipam_leader"] == 1.0, timeout=90,
                   what="the new pod to take the Lease over")
        lease = go_leader.lease()
        assert lease.spec.holder_identity and lease.spec.holder_identity != go_leader.identity
        assert lease.spec.lease_transitions == 1, lease.spec

        waiting = incluster.served("waiting")
        held = {a["spec"]["address"] for a in before.values()}
        assert waiting["spec"]["address"] not in held | {"10.61.0.1"}, (waiting["spec"], sorted(held))
        for name in ("m0", "m1", "m2", "during"):
            incluster.served(name)
        after = {(a["metadata"]["name"]): a for a in incluster.addresses()}
        for name, address in before.items():
            assert after[name]["metadata"]["uid"] == address["metadata"]["uid"]
            assert after[name]["metadata"]["resourceVersion"] == address["metadata"]["resourceVersion"], name
        assert after["during"]["spec"]["address"] == during.address
        assert "Traceback" not in ours.log_text()
    finally:
        ours.stop()
    try:
        released = go_leader.lease()
    except ApiException:
        released = None
    assert released is None or released.spec.holder_identity in ("", None), "the Lease is given up on stop"
