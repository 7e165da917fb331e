"""The admission webhooks as the API server is told of them: what it sends, to which path, and what it does
when no answer comes.

The API server asks before an IPPool, IPClaim, IPAddress, or a Cluster API
IPAddressClaim on one of our pools is created, changed or (for pools)
deleted: :mod:`metal3_ipam.controller.admission` decides,
:mod:`metal3_ipam.controller.webhook_server` serves the answers over TLS.

:func:`hooks` is the one description of the webhooks: the server routes by
it, and ``config/webhook/manifests.yaml`` is generated from it
(:mod:`metal3_ipam.packaging`), so paths, rules and policies cannot drift.

Why the policies are what they are:

- Create and spec changes: ``failurePolicy: Fail``. The CRD schema cannot say
  everything (two pools of a namespace sharing addresses under different
  namePrefixes would hand an IP out twice), so nothing unchecked gets in while
  the controller is down. This cannot wedge ``clusterctl move``: it creates
  the objects in the target, whose controller ``clusterctl init`` installed,
  before it deletes anything in the source, and retries a refused create.
- Updates that leave ``spec`` alone (labels, annotations, finalizers, owner
  references — all ``clusterctl move`` and the garbage collector ever change)
  never reach the webhook (``matchConditions``), so an outage cannot block them;
  but a global pool's ``ipam.metal3.io/separate-network`` annotation, which
  changes what it shares and withholds, is judged and warned of as its spec is.
- Pool deletion: ``failurePolicy: Ignore`` with a short timeout, and
  ``matchConditions`` that skip deletions marked
  ``clusterctl.cluster.x-k8s.io/delete-for-move`` and deletions by the
  namespace controller: a controller outage never blocks ``clusterctl move``
  or a namespace deletion. The pool's finalizer still keeps it until its
  addresses are gone.
- Defaulting: ``failurePolicy: Ignore``; the CRD schema sets the same default.
- IPAddressClaims on other providers' pools never reach us (``matchConditions``
  on ``spec.poolRef.apiGroup``): our outage is not theirs. An update whose old
  object names one of our pools does (its ``oldObject``): a claim moved away
  from our pools is refused, as Cluster API refuses any ``poolRef`` change.
- Cluster API IPAddresses reach us only on create, naming one of our pools and
  without an owner reference to a claim (written by hand, restored): what an
  IPAM or ``clusterctl move`` writes never waits on us.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Callable

from ..core import kinds
from ..core import poolkind

# -- what the API server is told to send ----------------------------------------------

_ANNOTATIONS = "has({o}.metadata.annotations) && '{key}' in {o}.metadata.annotations ? " \
               "{o}.metadata.annotations['{key}'] : ''"


def _spec_changed() -> dict:
    return {"name": "spec-changed",
            "expression": "request.operation != 'UPDATE' || !has(object.spec) || !has(oldObject.spec)"
                          " || object.spec != oldObject.spec"}


def _spec_or_requested_ip_changed() -> dict:
    annotation = lambda obj: _ANNOTATIONS.format(o=obj, key=kinds.IP_ADDRESS_ANNOTATION)  # noqa: E731
    return {"name": "spec-or-requested-ip-changed",
            "expression": "request.operation != 'UPDATE' || !has(object.spec) || !has(oldObject.spec)"
                          f" || object.spec != oldObject.spec || ({annotation('object')}) != ({annotation('oldObject')})"}


def _spec_or_separate_network_changed() -> dict:
    """A global pool's spec, or whether it is a separate network (what it shares and withholds), changed."""
    annotation = lambda obj: _ANNOTATIONS.format(o=obj, key=kinds.SEPARATE_NETWORK_ANNOTATION)  # noqa: E731
    return {"name": "spec-or-separate-network-changed",
            "expression": "request.operation != 'UPDATE' || !has(object.spec) || !has(oldObject.spec)"
                          f" || object.spec != oldObject.spec || ({annotation('object')}) != ({annotation('oldObject')})"}


NOT_FOR_MOVE = {"name": "not-delete-for-move",
                "expression": "!has(oldObject.metadata.annotations) || "
                              f"!('{kinds.DELETE_FOR_MOVE_ANNOTATION}' in oldObject.metadata.annotations)"}
# The namespace controller, under its own service account or (without
# --use-service-account-credentials) as kube-controller-manager itself.
NAMESPACE_CONTROLLER_USERS = ("system:serviceaccount:kube-system:namespace-controller",
                              "system:kube-controller-manager")
NOT_NAMESPACE_TEARDOWN = {"name": "not-namespace-teardown",
                          "expression": "!(request.userInfo.username in ["
                                        + ", ".join(f"'{u}'" for u in NAMESPACE_CONTROLLER_USERS) + "])"}


def _our_pool_expression() -> str:
    """CEL: a claim's poolRef names a kind of pool this controller serves (by group, or in a group shared
    with other providers by group and kind: their claims never wait on these webhooks), now or, on an
    update, before it: an update moving a claim away from our pools is ours to refuse (``oldObject`` is
    null on a create)."""
    def names_ours(obj: str) -> str:
        terms = []
        for group, served in sorted(poolkind.claim_pool_groups().items()):
            term = f"{obj}.spec.poolRef.apiGroup == '{group}'"
            if served is not None:
                term += f" && has({obj}.spec.poolRef.kind) && {obj}.spec.poolRef.kind in {sorted(served)!r}"
            terms.append(f"({term})")
        return f"has({obj}.spec) && has({obj}.spec.poolRef) && has({obj}.spec.poolRef.apiGroup) && (" \
            + " || ".join(terms) + ")"
    return f"({names_ours('object')}) || (request.operation == 'UPDATE' && oldObject != null && " \
        f"({names_ours('oldObject')}))"


OUR_POOL = {"name": "metal3-pool", "expression": _our_pool_expression()}
# A Cluster API IPAddress with no owner reference to a claim (written by hand or restored): what an IPAM makes
# for its claim, or clusterctl move copies with it, never waits on this controller's webhook.
WRITTEN_BEFORE_CLAIM = {"name": "written-before-its-claim",
                        "expression": "!has(object.metadata.ownerReferences) || "
                                      f"!object.metadata.ownerReferences.exists(r, r.kind == '{kinds.CAPI_CLAIM[1]}')"}


@dataclass(frozen=True)
class Hook:
    """One webhook of the Validating/MutatingWebhookConfiguration."""

    name: str
    path: str
    kind: tuple[str, str]
    versions: tuple[str, ...]
    resource: str
    operations: tuple[str, ...]
    failure_policy: str
    timeout_seconds: int
    mutating: bool = False
    match_conditions: tuple[dict, ...] = field(default_factory=tuple)
    scope: str = poolkind.NAMESPACED

    def configuration(self, client_config: dict) -> dict:
        """The webhook's entry in a webhook configuration; ``client_config`` must reach :attr:`path`."""
        entry = {
            "name": self.name,
            "admissionReviewVersions": ["v1"],
            "clientConfig": client_config,
            "failurePolicy": self.failure_policy,
            "matchPolicy": "Equivalent",
            "rules": [{"apiGroups": [self.kind[0]], "apiVersions": list(self.versions),
                       "operations": list(self.operations), "resources": [self.resource], "scope": self.scope}],
            "sideEffects": "None",
            "timeoutSeconds": self.timeout_seconds,
        }
        if self.match_conditions:
            entry["matchConditions"] = [dict(c) for c in self.match_conditions]
        if self.mutating:
            entry["reinvocationPolicy"] = "Never"
        return entry


def pool_hooks(kind: poolkind.PoolKind) -> tuple[Hook, ...]:
    """A kind of pool's webhooks: defaulting (when it defaults), validation, and deletion (a pool in use stays)."""
    group, name = kind.kind
    lower = name.lower()
    path = f"{group.replace('.', '-')}-{kind.versions[0]}-{lower}"
    common = dict(kind=kind.kind, versions=kind.versions, resource=kind.plural, scope=kind.scope)
    default = (Hook(f"default.{lower}.{group}", f"/mutate-{path}", operations=("CREATE", "UPDATE"),
                    failure_policy="Ignore", timeout_seconds=5, mutating=True, **common),) if kind.default else ()
    return (*default,
            Hook(f"validation.{lower}.{group}", f"/validate-{path}", operations=("CREATE", "UPDATE"),
                 failure_policy="Fail", timeout_seconds=10,
                 match_conditions=(_spec_or_separate_network_changed() if kind.cluster_scoped else _spec_changed(),),
                 **common),
            Hook(f"deletion.{lower}.{group}", f"/validate-{path}", operations=("DELETE",), failure_policy="Ignore",
                 timeout_seconds=5, match_conditions=(NOT_FOR_MOVE, NOT_NAMESPACE_TEARDOWN), **common))


METAL3_VERSIONS = (kinds.METAL3_VERSION,)
# The webhooks of the claims and addresses, whichever kinds of pool are registered.
_CLAIM_AND_ADDRESS_HOOKS: tuple[Hook, ...] = (
    Hook("validation.ipclaim.ipam.metal3.io", "/validate-ipam-metal3-io-v1alpha1-ipclaim", kinds.IPCLAIM,
         METAL3_VERSIONS, "ipclaims", ("CREATE", "UPDATE"), "Fail", 10,
         match_conditions=(_spec_or_requested_ip_changed(),)),
    Hook("validation.ipaddress.ipam.metal3.io", "/validate-ipam-metal3-io-v1alpha1-ipaddress", kinds.IPADDRESS,
         METAL3_VERSIONS, "ipaddresses", ("CREATE", "UPDATE"), "Fail", 10, match_conditions=(_spec_changed(),)),
    Hook("validation.ipaddressclaim.ipam.metal3.io", "/validate-ipam-cluster-x-k8s-io-ipaddressclaim",
         kinds.CAPI_CLAIM, kinds.CAPI_IPAM_VERSIONS, "ipaddressclaims", ("CREATE", "UPDATE"), "Fail", 10,
         match_conditions=(OUR_POOL, _spec_or_requested_ip_changed())),
    # Its spec is immutable (Cluster API's own webhook): judged once, when written before its claim.
    Hook("validation.clusterapi-ipaddress.ipam.metal3.io", "/validate-ipam-cluster-x-k8s-io-ipaddress",
         kinds.CAPI_ADDRESS, kinds.CAPI_IPAM_VERSIONS, "ipaddresses", ("CREATE",), "Fail", 10,
         match_conditions=(OUR_POOL, WRITTEN_BEFORE_CLAIM)),
)


def hooks() -> tuple[Hook, ...]:
    """Every webhook: each registered kind of pool's (in the registry's order), then the claims' and addresses'.
    Read from the registry when asked, so a kind registered after this module was imported is in it."""
    return (*(hook for kind in poolkind.REGISTRY.values() for hook in pool_hooks(kind)), *_CLAIM_AND_ADDRESS_HOOKS)


def _defaulting_path(kind: tuple[str, str], version: str) -> str:
    """Where kubebuilder's layout (and so each Go provider's configuration) registers a kind's defaulting."""
    return f"/mutate-{kind[0].replace('.', '-')}-{version}-{kind[1].lower()}"


def defaulting_paths() -> tuple[str, ...]:
    """The defaulting paths served besides those of :func:`hooks`: every kind of pool's, and the Metal3 claim's and
    address's, which the Go providers' configurations register (failurePolicy Fail). Each answers with the kind's
    defaults (PoolKind.default), or allows with no patch where the kind has none, as the Go providers' defaulters
    do."""
    defaulted = {_defaulting_path(kind.kind, kind.versions[0]) for kind in poolkind.REGISTRY.values()} | \
        {_defaulting_path(kind, kinds.METAL3_VERSION) for kind in (kinds.IPCLAIM, kinds.IPADDRESS)}
    return tuple(sorted(defaulted - {hook.path for hook in hooks()}))


def configurations(client_config: Callable[[Hook], dict], name: str | None = "metal3-ipam") -> list[dict]:
    """The Mutating- and ValidatingWebhookConfiguration for :func:`hooks`.

    ``client_config(hook)`` gives each webhook's ``clientConfig`` (a Service
    reference in a cluster, a URL and CA bundle in tests); ``name`` prefixes
    the configurations' names.
    """
    out = []
    every = hooks()
    for kind, mutating in (("MutatingWebhookConfiguration", True), ("ValidatingWebhookConfiguration", False)):
        base = f"{'mutating' if mutating else 'validating'}-webhook-configuration"
        out.append({"apiVersion": "admissionregistration.k8s.io/v1", "kind": kind,
                    "metadata": {"name": f"{name}-{base}" if name else base},
                    "webhooks": [h.configuration(client_config(h)) for h in every if h.mutating == mutating]})
    return out
