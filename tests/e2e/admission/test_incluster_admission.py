"""The in-cluster provider's IP pools on a real API server that calls the controller over TLS.

- v1alpha1 is served through the controller's own ``/convert`` (the webhook
  server, as the CRDs of ``config/default`` point at it): an ``InClusterIPPool``
  and a ``GlobalInClusterIPPool`` created, read, changed at v1alpha1; the
  v1alpha2-only fields survive a v1alpha1 read-modify-write; a v1alpha1 subnet
  that is not a CIDR is refused naming the object, the field and the value;
  a malformed review sent straight to the port is answered 400 in one line of log;
- their validation webhooks: every Go rule on create and on update, ours, an
  update that would take back an address in use (of a global pool: across
  namespaces, two addresses named alike in two namespaces are two), a deletion
  while addresses exist unless the skip or move annotation is set;
- a claim naming one of them is judged by our claim webhook, one naming another
  provider's kind of Cluster API's IPAM group never is;
- a pool sharing addresses with a pool of another kind of its namespace is admitted with a warning (the
  API server's ``Warning`` header) naming the other pool and the shared range, and one left nothing to hand
  out by the overlap is not Ready;
- a global pool's separate-network annotation is not removed while it and the pool it shares addresses with
  hold one IP for two claims.
"""

from __future__ import annotations

import json

import pytest

from metal3_ipam.controller.review_body import MAX_REVIEW_BYTES
from metal3_ipam.core.conversion import CONVERSION_PATH
from metal3_ipam.poolkinds.incluster import spec as incluster
from metal3_ipam.testing import webhook_load as load
from metal3_ipam.testing.waiting import eventually
from controller_fixtures import condition
from webhook_fixtures import apply, call, get, new_namespace, path_of

GROUP = "ipam.cluster.x-k8s.io"
V1ALPHA1, V1ALPHA2 = f"{GROUP}/v1alpha1", f"{GROUP}/v1alpha2"
KINDS = ("InClusterIPPool", "GlobalInClusterIPPool")
MOVE = "clusterctl.cluster.x-k8s.io/delete-for-move"
_names = iter(range(10**6))


def pool(kind: str, spec: dict, version: str = V1ALPHA2, name: str | None = None) -> dict:
    """A pool of a name of its own (global pools of every test share one scope)."""
    return {"apiVersion": version, "kind": kind, "metadata": {"name": name or f"{kind.lower()}-{next(_names)}"},
            "spec": spec}


def claim(name: str, kind: str, pool_name: str, ip: str | None = None) -> dict:
    meta = {"name": name, **({"annotations": {"ipAddress": ip}} if ip else {})}
    return {"apiVersion": f"{GROUP}/v1beta2", "kind": "IPAddressClaim", "metadata": meta,
            "spec": {"poolRef": {"apiGroup": GROUP, "kind": kind, "name": pool_name}}}


def at(obj: dict, version: str) -> dict:
    return dict(obj, apiVersion=version)


def created(api, obj: dict, namespace: str) -> dict:
    answer = apply(api, obj, namespace)
    assert answer.status == 201, f"{obj['kind']} {obj['metadata']['name']}: {answer.message}"
    return answer.body


def held(api, kind: str, pool_name: str, name: str, namespace: str) -> str:
    """A claim of the pool, created; the IP the controller hands it, once its Cluster API IPAddress (named after
    the claim, naming the pool: what the webhooks count as in use) is there."""
    created(api, claim(name, kind, pool_name), namespace)
    address = {"apiVersion": f"{GROUP}/v1beta2", "kind": "IPAddress", "metadata": {"name": name}}

    def handed_out():
        spec = (get(api, address, namespace) or {}).get("spec") or {}
        return spec.get("poolRef", {}).get("name") == pool_name and spec.get("address")
    return eventually(handed_out, timeout=30, what=f"claim {namespace}/{name} to be handed an address")


def read_modify_write(api, obj: dict, namespace: str, change) -> None:
    """What a client does to change a pool: read it at ``obj``'s version, change it, write it back; read
    again when the controller wrote status or finalizers in between (409)."""
    def write():
        read = get(api, obj, namespace)
        change(read["spec"])
        answer = call(api, "PUT", path_of(read, namespace, read["metadata"]["name"]), read, "application/json")
        assert answer.status in (200, 409), answer.message
        return answer.status == 200
    eventually(write, timeout=30, interval=0.05, retry_on=(), what=f"{obj['kind']} {obj['metadata']['name']} written back")


# -- v1alpha1 through the controller's /convert -------------------------------------------------

@pytest.mark.parametrize("kind", KINDS)
def test_v1alpha1_pools_are_created_read_and_changed_through_the_controllers_conversion(
        webhook_controller, webhook_api, kind):
    api = webhook_api
    namespace = new_namespace(api, "c")
    old = pool(kind, {"subnet": "10.20.0.0/24", "start": "10.20.0.10", "gateway": "10.20.0.1"}, V1ALPHA1)
    # The API server takes the CRDs' new clientConfig up a moment after it was patched.
    eventually(lambda: apply(api, old, namespace).status == 201, timeout=30, interval=0.2,
               what="a v1alpha1 pool created through the controller's conversion")
    stored = get(api, at(old, V1ALPHA2), namespace)
    assert stored["spec"] == {"addresses": ["10.20.0.10-10.20.0.254"], "prefix": 24, "gateway": "10.20.0.1"}
    assert get(api, old, namespace)["spec"] == old["spec"]
    # kubectl get at v1alpha1: its columns read the v1alpha1 fields.
    table = call(api, "GET", path_of(old, namespace, old["metadata"]["name"]),
                 accept="application/json;as=Table;v=v1;g=meta.k8s.io")
    assert table.status == 200, table.message
    cells = dict(zip([c["name"] for c in table.body["columnDefinitions"]], table.body["rows"][0]["cells"]))
    assert (cells["Subnet"], cells["First"], cells["Last"]) == ("10.20.0.0/24", "10.20.0.10", None), cells

    # Changed at v1alpha1 (a read-modify-write), read at both versions.
    read_modify_write(api, old, namespace, lambda spec: spec.update(end="10.20.0.100"))
    assert get(api, at(old, V1ALPHA2), namespace)["spec"]["addresses"] == ["10.20.0.10-10.20.0.100"]
    assert get(api, old, namespace)["spec"] == {**old["spec"], "end": "10.20.0.100"}

    # A v1alpha1 client's read-modify-write of a v1alpha2 pool keeps what v1alpha1 cannot hold.
    new = pool(kind, {"addresses": ["10.21.0.0/24"], "prefix": 24, "excludedAddresses": ["10.21.0.5"],
                      "allocateReservedIPAddresses": True, "addressReuseGracePeriodSeconds": 30})
    created(api, new, namespace)
    read = get(api, at(new, V1ALPHA1), namespace)
    assert read["spec"] == {"addresses": ["10.21.0.0/24"], "prefix": 24}
    read_modify_write(api, at(new, V1ALPHA1), namespace, lambda spec: spec.update(gateway="10.21.0.1"))
    assert get(api, new, namespace)["spec"] == {**new["spec"], "gateway": "10.21.0.1"}

    # A subnet that is not a CIDR cannot be converted: refused, naming the object, the field and the value.
    bad = pool(kind, {"subnet": "10.22.0.0/33"}, V1ALPHA1)
    answer = apply(api, bad, namespace)
    assert 400 <= answer.status < 600 and answer.status != 404, answer
    where = f"{namespace}/" if kind == "InClusterIPPool" else ""
    for part in (f"{kind}/{where}{bad['metadata']['name']}", "spec.subnet", "10.22.0.0/33"):
        assert part in answer.message, (part, answer.message)
    assert get(api, at(bad, V1ALPHA2), namespace) is None


def test_a_v1alpha1_list_longer_than_an_admission_review_is_served(webhook_controller, webhook_api):
    """A LIST read at v1alpha1 of more than the AdmissionReviews' cap (6.25 MiB: 40 pools of 190 KiB
    annotations) is served whole. (kube-apiserver converts each pool in a review of its own as it reads it;
    ``/convert`` takes a review of a whole list besides: tests/local/test_webhook_server_holds_its_limits.py.)"""
    api = webhook_api
    namespace = new_namespace(api, "l")
    names = []
    for i in range(40):
        subject = pool("InClusterIPPool", {"addresses": [f"10.90.{i}.0/24"], "prefix": 24}, name=f"big-{i}")
        subject["metadata"]["annotations"] = {"note": "n" * 190 * 1024}
        created(api, subject, namespace)
        names.append(subject["metadata"]["name"])
    listed = call(api, "GET", path_of(at(subject, V1ALPHA1), namespace))
    assert listed.status == 200, listed.message[:500]
    assert len(json.dumps(listed.body)) > MAX_REVIEW_BYTES
    assert sorted(item["metadata"]["name"] for item in listed.body["items"]) == sorted(names)
    assert {item["apiVersion"] for item in listed.body["items"]} == {V1ALPHA1}
    assert all(item["spec"] == {"addresses": [f"10.90.{int(item['metadata']['name'][4:])}.0/24"], "prefix": 24}
               for item in listed.body["items"]), listed.body["items"][0]["spec"]


def test_a_malformed_conversion_review_is_answered_400_in_one_line(webhook_controller):
    context = load.client_context(webhook_controller.authority.pem)
    before = webhook_controller.process.log_size()
    status, answer = load.post(webhook_controller.port, context, CONVERSION_PATH,
                               b'{"apiVersion": "apiextensions.k8s.io/v1", "kind": "ConversionReview", "request": 7}')
    assert status == 400 and "not a ConversionReview" in json.loads(answer)["error"], answer

    def logged():
        return [line for line in webhook_controller.process.log_text()[before:].splitlines()
                if "malformed review" in line]
    (line,) = eventually(logged, timeout=10, what="the refusal's log line")
    assert CONVERSION_PATH in line and "request is 7" in line, line
    assert "Traceback" not in webhook_controller.process.log_text()[before:]


# -- the validation webhooks --------------------------------------------------------------------

GOOD = {"addresses": ["10.30.0.10-10.30.0.20"], "prefix": 24}
# Every rule of the Go provider's webhooks (ValidateCreate, and ValidateUpdate applies them again), then ours:
# a spec, the field a refusal must name, and the value.
RULES = [
    ({"addresses": []}, "spec.addresses", "addresses is required"),
    ({"addresses": ["10.30.0.10", "10.30.0.300"]}, "spec.addresses[1]", "10.30.0.300"),
    ({"addresses": ["10.30.0.10", "fd00::1"]}, "spec.addresses[1]", "fd00::1"),
    ({"addresses": ["10.30.0.10", "10.30.1.10"]}, "spec.addresses[1]", "10.30.1.10"),
    ({"prefix": 33}, "spec.prefix", "33"),
    ({"gateway": "10.30.0.256"}, "spec.gateway", "10.30.0.256"),
    ({"gateway": "fd00::1"}, "spec.gateway", "fd00::1"),
    ({"excludedAddresses": ["ten"]}, "spec.excludedAddresses[0]", "ten"),
    ({"excludedAddresses": ["10.30.0.15", "fd00::/64"]}, "spec.excludedAddresses[1]", "fd00::/64"),  # ours too
    ({"gateway": "10.30.1.1"}, "spec.gateway", "10.30.1.1"),  # ours: outside the pool's network
]


@pytest.mark.parametrize("kind", KINDS)
@pytest.mark.parametrize("change, field, value", RULES, ids=[f"{f}={v}" for _, f, v in RULES])
def test_every_rule_is_applied_on_create_and_on_update(webhook_controller, webhook_api, kind, change, field, value):
    api = webhook_api
    namespace = new_namespace(api, "r")
    bad = pool(kind, {**GOOD, **change})
    refused = apply(api, bad, namespace)
    assert refused.status == 422 and "denied the request" in refused.message, refused
    assert f"{field}: " in refused.message and value in refused.message, refused.message
    assert get(api, bad, namespace) is None

    good = created(api, pool(kind, GOOD, name=bad["metadata"]["name"]), namespace)
    refused = apply(api, pool(kind, {**GOOD, **change}, name=bad["metadata"]["name"]), namespace)
    assert refused.status == 422 and f"{field}: " in refused.message and value in refused.message, refused.message
    assert get(api, bad, namespace)["spec"] == good["spec"]


@pytest.mark.parametrize("kind", KINDS)
def test_an_update_taking_back_an_address_in_use_is_refused_naming_each_address(webhook_controller, webhook_api, kind):
    api = webhook_api
    first, second = new_namespace(api, "u"), new_namespace(api, "u")
    subject = pool(kind, {"addresses": ["10.40.0.10-10.40.0.20"], "prefix": 24})
    created(api, subject, first)
    ips = [held(api, kind, subject["metadata"]["name"], "c", first)]
    if kind == "GlobalInClusterIPPool":  # a claim of the same name in another namespace holds another address
        ips.append(held(api, kind, subject["metadata"]["name"], "c", second))
    assert ips == ["10.40.0.10", "10.40.0.11"][:len(ips)]

    refused = apply(api, pool(kind, {"addresses": ["10.40.0.12-10.40.0.20"], "prefix": 24},
                              name=subject["metadata"]["name"]), first)
    assert refused.status == 422, refused
    message = refused.message
    if kind == "GlobalInClusterIPPool":
        # Each address named with its namespace (the lock of a global pool's IP lives in the lock namespace).
        for ip, ns in (("10.40.0.10", first), ("10.40.0.11", second)):
            said = message[message.index(f"{ip} is in use (IPAddress "):]
            assert f"{ns}/c (Cluster API)" in said[:said.index("would be outside")], message
    else:
        assert "spec.addresses: " in message and "10.40.0.10 is in use (IPAddress c (Cluster API)" in message, message
    # Each field that would take one back is named: the gateway, an excluded range, the reserved addresses.
    for change, field in (({"gateway": "10.40.0.10"}, "spec.gateway"),
                          ({"excludedAddresses": ["10.40.0.8-10.40.0.10"]}, "spec.excludedAddresses[0]")):
        refused = apply(api, pool(kind, {**subject["spec"], **change}, name=subject["metadata"]["name"]), first)
        assert refused.status == 422 and f"{field}: " in refused.message and "10.40.0.10 is in use" in refused.message, \
            refused.message
    grown = apply(api, pool(kind, {"addresses": ["10.40.0.10-10.40.0.40"], "prefix": 24},
                            name=subject["metadata"]["name"]), first)
    assert grown.status == 200, grown.message


@pytest.mark.parametrize("kind", KINDS)
def test_a_pool_in_use_is_deleted_only_with_the_skip_or_move_annotation(webhook_controller, webhook_api, kind):
    api = webhook_api
    namespace = new_namespace(api, "d")
    for annotation in (incluster.SKIP_DELETE_VALIDATION_ANNOTATION, MOVE):
        subject = pool(kind, {"addresses": ["10.50.0.10-10.50.0.20"], "prefix": 24})
        name = subject["metadata"]["name"]
        created(api, subject, namespace)
        held(api, kind, name, f"c-{name}", namespace)
        path = path_of(subject, namespace, name)
        refused = call(api, "DELETE", path)
        assert refused.status == 422 and "Pool has IPAddresses allocated" in refused.message, refused.message
        assert f"c-{name}" in refused.message and incluster.SKIP_DELETE_VALIDATION_ANNOTATION in refused.message
        assert not get(api, subject, namespace)["metadata"].get("deletionTimestamp")
        marked = call(api, "PATCH", path, {"metadata": {"annotations": {annotation: ""}}},
                      "application/merge-patch+json")
        assert marked.status == 200, marked.message
        deleted = call(api, "DELETE", path)
        assert deleted.status == 200, (annotation, deleted.message)


def test_claims_naming_incluster_pools_are_judged_and_other_kinds_of_the_group_never(webhook_controller, webhook_api):
    api = webhook_api
    namespace = new_namespace(api, "k")
    for kind in KINDS:
        refused = apply(api, claim(f"ours-{kind.lower()}", kind, "p", ip="10.0.0.300"), namespace)
        assert refused.status == 422 and "denied the request" in refused.message, refused
        assert "metadata.annotations.ipAddress" in refused.message and "10.0.0.300" in refused.message
    theirs = claim("theirs", "InfobloxIPPool", "p", ip="not-ours-to-judge")
    assert apply(api, theirs, namespace).status == 201
    # Ours judge a claim of ours on update too; theirs stays unjudged however it changes.
    theirs["metadata"]["annotations"]["ipAddress"] = "still-not-ours"
    assert apply(api, theirs, namespace).status == 200


def test_overlap_with_a_pool_of_another_kind_of_the_namespace_is_warned_and_shown_on_the_pool(
        webhook_controller, webhook_api):
    """The namespaced pools of a namespace never hand one IP out twice: the earlier owns an overlap and the later
    withholds it. Whoever creates the later pool hears so from the API server, for an IPPool (judged with the
    IPPools the API server lists) as for an InClusterIPPool (judged with the controller's inventory)."""
    api = webhook_api
    namespace = new_namespace(api, "o")
    first = created(api, pool("InClusterIPPool", {"addresses": ["10.70.0.10-10.70.0.30"], "prefix": 24}, name="net"),
                    namespace)

    def known(obj: dict):  # the controller wrote its status: its inventory holds it
        return condition(get(api, obj, namespace) or {}, "Ready")
    eventually(lambda: known(first), timeout=30, what="the InClusterIPPool seen by the controller")

    inside = {"apiVersion": "ipam.metal3.io/v1alpha1", "kind": "IPPool", "metadata": {"name": "inside"},
              "spec": {"namePrefix": "inside", "pools": [{"start": "10.70.0.15", "end": "10.70.0.20"}]}}
    answer = apply(api, inside, namespace)
    assert answer.status == 201, answer.message
    assert any("spec.pools[0]: shares 10.70.0.15-10.70.0.20 with InClusterIPPool net" in w for w in answer.warnings), \
        answer.warnings
    # Created in the same second as the InClusterIPPool or after it, the IPPool is the later pool (kind breaks a tie).
    ready = eventually(lambda: (c := known(inside)) and c["status"] == "False" and c,
                       timeout=30, what="the IPPool whose every address is withheld to be not Ready")
    assert ready["reason"] == "OverlapsOtherPool" and "InClusterIPPool net" in ready["message"], ready

    late = apply(api, pool("InClusterIPPool", {"addresses": ["10.70.0.25-10.70.0.40"], "prefix": 24}, name="late"),
                 namespace)
    assert late.status == 201, late.message
    assert any("spec.addresses: shares 10.70.0.25-10.70.0.30 with InClusterIPPool net" in w for w in late.warnings), \
        late.warnings


def test_overlapping_global_pools_are_warned_of_and_the_separate_network_annotation_is_judged(
        webhook_controller, webhook_api):
    """A global pool overlapping another is admitted with a warning naming it; a change of the
    ``ipam.metal3.io/separate-network`` annotation alone reaches the webhook (its match condition): a value
    other than "true" or "false" is refused, "true" is warned of as sharing the overlap."""
    api = webhook_api
    namespace = new_namespace(api, "o")
    first = pool("GlobalInClusterIPPool", {"addresses": ["10.60.0.10-10.60.0.20"], "prefix": 24})
    created(api, first, namespace)
    later = pool("GlobalInClusterIPPool", {"addresses": ["10.60.0.15-10.60.0.30"], "prefix": 24})

    def warned():  # a dry run until the controller's inventory holds the first pool
        answer = call(api, "POST", path_of(later, namespace), later, "application/json", [("dryRun", "All")])
        assert answer.status == 201, answer.message
        return [w for w in answer.warnings if first["metadata"]["name"] in w]
    (warning,) = eventually(warned, timeout=30, interval=0.2, what="a warning naming the earlier pool")
    assert "10.60.0.15-10.60.0.20" in warning and "created earlier" in warning, warning
    created(api, later, namespace)

    path = path_of(later, namespace, later["metadata"]["name"])
    annotation = "ipam.metal3.io/separate-network"
    refused = call(api, "PATCH", path, {"metadata": {"annotations": {annotation: "yes"}}},
                   "application/merge-patch+json")
    assert refused.status == 422 and f"metadata.annotations[{annotation}]" in refused.message, refused.message
    shared = call(api, "PATCH", path, {"metadata": {"annotations": {annotation: "true"}}},
                  "application/merge-patch+json")
    assert shared.status == 200, shared.message
    assert any("both hand it out" in w for w in shared.warnings), shared.warnings


def test_removing_the_separate_network_annotation_while_two_claims_hold_one_ip_is_refused(
        webhook_controller, webhook_api):
    """Two global pools over one range, the later marked a separate network, each hand 10.61.0.15 to a claim of
    one namespace. Removing the annotation would make them one network with that IP bound twice: the webhook
    refuses it, naming the IP and both claims; once one of the claims is gone, the removal is admitted."""
    api = webhook_api
    namespace = new_namespace(api, "s")
    annotation = "ipam.metal3.io/separate-network"
    first = pool("GlobalInClusterIPPool", {"addresses": ["10.61.0.10-10.61.0.20"], "prefix": 24})
    apart = pool("GlobalInClusterIPPool", {"addresses": ["10.61.0.15-10.61.0.30"], "prefix": 24})
    apart["metadata"]["annotations"] = {annotation: "true"}
    created(api, first, namespace)
    created(api, apart, namespace)
    for name, subject in (("a", first), ("b", apart)):
        created(api, claim(name, "GlobalInClusterIPPool", subject["metadata"]["name"], ip="10.61.0.15"), namespace)
        address = {"apiVersion": f"{GROUP}/v1beta2", "kind": "IPAddress", "metadata": {"name": name}}
        eventually(lambda: ((get(api, address, namespace) or {}).get("spec") or {}).get("address") == "10.61.0.15",
                   timeout=30, what=f"claim {namespace}/{name} to hold 10.61.0.15")

    path = path_of(apart, namespace, apart["metadata"]["name"])
    unmark = {"metadata": {"annotations": {annotation: None}}}

    def answer(dry_run: bool = True):
        query = [("dryRun", "All")] if dry_run else None
        return call(api, "PATCH", path, unmark, "application/merge-patch+json", query)
    # A dry run until the controller's inventory holds both addresses.
    eventually(lambda: answer().status == 422, timeout=30, interval=0.2, what="the removal to be refused")
    refused = answer(dry_run=False)
    assert refused.status == 422 and f"metadata.annotations[{annotation}]" in refused.message, refused.message
    assert f"10.61.0.15 is held by IPAddressClaim {namespace}/b of this pool and by IPAddressClaim {namespace}/a" \
        in refused.message, refused.message
    assert get(api, apart, namespace)["metadata"]["annotations"].get(annotation) == "true"

    gone = call(api, "DELETE", path_of(claim("b", "GlobalInClusterIPPool", ""), namespace, "b"))
    assert gone.status in (200, 202), gone.message
    eventually(lambda: answer().status == 200, timeout=30, interval=0.2, what="the removal to be admitted")
    assert answer(dry_run=False).status == 200
