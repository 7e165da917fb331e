"""Orders of events and inputs in which a claim of a Cluster not known is served, or waits when it should not.

A claim whose Cluster (its label, a v1beta2 claim's ``spec.clusterName``, its
pool's ``spec.clusterName``) is not filed gets no new address; a Cluster seen
unpaused that is not filed, or filed paused, is held until a LIST of its
namespace's addresses begun after it was seen is in (``resuming``). Here the
news of a Cluster is played into the controller as kopf's watch and the
resync's listing can bring it, and the reconcile is asked, at every kick of a
pool, what a pass would create.
"""

from __future__ import annotations

import asyncio
import copy

import pytest
import yaml

from metal3_ipam.controller.operator import Controller, Listing
from metal3_ipam.core import kinds
from metal3_ipam.core import objects as o
from metal3_ipam.core.inventory import Inventory
from metal3_ipam.testing.listing import at_hand, read
from resuming import WatchedKicks
from resuming import at, paused
from cli_run import SAMPLES, run
from resuming import NS, creates, moved_state


# --- a Cluster made anew while the inventory still has the one before it, running ----------------


def _made_anew():
    """Cluster c1 as the inventory still has it (uid ``c1-old``, running: its deletion not told, as
    kopf tells none after its stream was cut and it listed again), the pool, and what a restore of
    c1 (uid ``c1-new``) creates: its claims, their addresses (claim c's lagging behind), and c1 itself,
    running (created paused and unpaused, as one event, or as a LIST shows it)."""
    source, unpaused, listing = moved_state()
    version = int(o.meta(unpaused)["resourceVersion"])
    ghost = paused(at(unpaused, 1, uid="c1-old"), False)
    anew = paused(at(unpaused, version + 5, uid="c1-new"), False)
    pool = copy.deepcopy(source.get(kinds.IPPOOL, NS, "pool1"))
    claims = [copy.deepcopy(c) for c in source.of_kind(kinds.IPCLAIM)]
    addresses = [copy.deepcopy(a) for a in source.of_kind(kinds.IPADDRESS)]
    listed, _ = read(listing)
    assert len(listed) == len(addresses) + 1, "claim c's moved address is the lagging one"
    inventory = Inventory()
    inventory.upsert(pool)
    inventory.upsert(ghost)
    return inventory, anew, claims, addresses, listing, version


@pytest.mark.parametrize("road", ["kopf event", "resync listing"])
def test_a_cluster_made_anew_first_seen_running_while_the_old_one_is_filed_running_waits_for_its_addresses(road):
    """Cluster c1 (uid c1-old) was deleted while kopf's stream was cut: kopf lists again and tells no
    deletion, and the resync has not come yet, so the inventory still has c1-old, running. c1 is then
    restored (``clusterctl move --from-directory``, or moved back): created paused as c1-new, its claims
    and addresses created, unpaused. The first the controller hears of c1-new is that it runs (kopf's
    listing after its cut, folded events, or the resync's LIST of Clusters), while the address watch
    has not brought claim c's moved address yet.

    ``Resumptions.hold`` takes c1-new for news of a Cluster already filed running (it compares the
    pause only, not the uid) and files it at once: no LIST of the namespace's addresses, and its
    claims, seen next, are served with c's moved address unknown. Claim c gets a second IP (SPEC §10,
    2 and 4), though a Cluster made anew is meant to wait for a listing of its own (``resuming``)."""
    inventory, anew, claims, addresses, listing, version = _made_anew()
    kicks = WatchedKicks(inventory)
    relisted: list[str] = []

    def relist(namespace: str) -> list[Listing]:
        relisted.append(namespace)
        return [listing]

    async def scenario() -> None:
        controller = Controller(inventory, kicks, writer=None, relist=relist)
        if road == "kopf event":
            controller.on_event(None, copy.deepcopy(anew))
        else:
            await controller.settle(at_hand(kinds.CLUSTER, None, [copy.deepcopy(anew)], str(version + 6)))
        for claim in claims:  # the claims' watch, then the addresses' (claim c's still on its way)
            controller.on_event("ADDED", claim)
        for address in addresses:
            controller.on_event("ADDED", address)
        await asyncio.gather(*controller.resumptions.tasks)

    asyncio.run(scenario())
    allocated = [names for names in kicks.created if names]
    assert not allocated, (
        f"c1 made anew was filed without a LIST of its addresses (LISTs asked: {relisted}); a pass "
        f"would allocate anew for its claims: {allocated}")
    assert o.meta(inventory.get(kinds.CLUSTER, NS, "c1"))["uid"] == "c1-new"
    assert creates(inventory) == []


# --- the offline plan over manifests without their Cluster -------------------------------------


def test_plan_of_a_pool_and_claims_without_their_cluster_file_says_why_nothing_is_handed_out(capsys):
    """``metal3-ipam plan -f samples/ippool.yaml -f samples/ipclaims.yaml``: the pool and claims of the
    Metal3 documentation, whose pool names ``clusterName: cluster1``, without the Cluster's own file
    (manifests as a user keeps them in a repository, or ``kubectl get ippools,ipclaims -o yaml``). The
    plan used to show the four addresses the controller hands out; it now hands out none, exits 0 and
    prints nothing on stderr: the only trace is a ``WaitingForCluster`` condition inside the claims of
    the YAML output. Either the plan shows the addresses (no Cluster kind in the input, as the
    controller does where no Cluster kind is served), or it says on stderr which claims wait and for
    which Cluster (errors are never silent: SPEC §8)."""
    code, out, err = run(capsys, "plan", "-f", str(SAMPLES / "ippool.yaml"), "-f", str(SAMPLES / "ipclaims.yaml"))
    assert code == 0
    addresses = [doc for doc in yaml.safe_load_all(out)
                 if doc and doc.get("kind") == "IPAddress"]
    assert addresses or "cluster1" in err, (
        f"nothing handed out and nothing said why (stderr: {err!r}); the claims wait for a Cluster the "
        f"files do not hold")


# --- many Clusters seen at once ------------------------------------------------------------------


def test_clusters_created_together_in_a_namespace_are_filed_after_one_listing_of_its_addresses_not_one_each():
    """Fifty Clusters of one namespace are created at once, running (a fleet applied from git, or
    kopf's first listing when it lands before the start-up listing of Clusters is filed). Each is
    first seen running with no stored copy, so each is held, and each resumption lists the namespace's
    addresses again on its own: fifty LISTs of every address of the namespace, each filed and then
    checked against every object of the inventory (``Listed.finish``), at once. Before this change a
    new Cluster cost nothing; one LIST begun after the last of them was seen releases them all
    (issue 10: start-up and the cost of a change must not grow with the namespace)."""
    inventory = Inventory()
    kicks = WatchedKicks(inventory)
    relisted: list[str] = []
    clusters = [{"apiVersion": "cluster.x-k8s.io/v1beta2", "kind": "Cluster",
                 "metadata": {"name": f"c{i:02d}", "namespace": NS, "uid": f"uid-{i}",
                              "resourceVersion": str(100 + i), "generation": 1},
                 "spec": {"paused": False}} for i in range(50)]

    def relist(namespace: str) -> list[Listing]:
        relisted.append(namespace)
        return [at_hand(kinds.IPADDRESS, namespace, [], str(1000 + len(relisted)))]

    async def scenario() -> None:
        controller = Controller(inventory, kicks, writer=None, relist=relist)
        for cluster in clusters:
            controller.on_event(None, copy.deepcopy(cluster))
            await asyncio.sleep(0)  # kopf hands them over one by one
        await asyncio.gather(*controller.resumptions.tasks)

    asyncio.run(scenario())
    assert len(inventory.of_kind(kinds.CLUSTER)) == 50
    assert len(relisted) <= 2, f"{len(relisted)} LISTs of the addresses of {NS} for 50 Clusters created together"
