"""The plan's description (what the controller logs of each planned write) names, for a delete guarded by a
claim, the claim incarnation whose absence it waits for: the lock of a claim deleted or moved away and the lock
of a claim of that name made since (``clusterctl move`` gives moved claims new uids) read apart in the log."""

from metal3_ipam.core.actions import Delete, Plan
from metal3_ipam.core.objects import Ref


def test_a_guarded_delete_is_described_with_the_claim_incarnation_it_waits_for():
    plan = Plan()
    lock = Ref("ipam.metal3.io/v1alpha1", "IPAddress", "ns", "net.10-60-0-21.ip", "lock-uid")
    claim = Ref("ipam.cluster.x-k8s.io/v1beta1", "IPAddressClaim", "ns", "m017-net", "claim-uid")
    plan.step("IPAddress ns/net.10-60-0-21.ip").add(Delete(lock, unless_exists=claim, resource_version="7"))
    plan.step("IPAddress ns/old.ip").add(Delete(Ref("ipam.metal3.io/v1alpha1", "IPAddress", "ns", "old.ip"),
                                                unless_exists=Ref("ipam.metal3.io/v1alpha1", "IPClaim", "ns", "c")))
    plan.step("IPAddress ns/gone.ip").add(Delete(Ref("ipam.metal3.io/v1alpha1", "IPAddress", "ns", "gone.ip")))
    assert plan.describe() == [
        "IPAddress ns/net.10-60-0-21.ip: Delete IPAddress ns/net.10-60-0-21.ip"
        " unless IPAddressClaim ns/m017-net uid claim-uid exists",
        "IPAddress ns/old.ip: Delete IPAddress ns/old.ip unless IPClaim ns/c exists",
        "IPAddress ns/gone.ip: Delete IPAddress ns/gone.ip",
    ]
