"""An OpenStackFloatingIPPool as the controller reads it: which cloud, which network, how addresses go back.

Pure: no I/O. :func:`read_pool` turns an ``openstack.metal3-ipam.io/v1alpha1``
OpenStackFloatingIPPool into an :class:`OpenStackPool`, or into problems naming
the field and its value (the CRD's schema refuses most of them before they are
stored; these are the rules it cannot state, and the same rules for input that
never met the API server).

The spec takes the field names of Cluster API Provider OpenStack's pool
(``infrastructure.cluster.x-k8s.io/v1alpha1`` OpenStackFloatingIPPool) where the
meaning is the same: ``identityRef`` (a Secret holding a ``clouds.yaml``, the
cloud's name in it, a region), ``floatingIPNetwork`` (``id`` or ``filter``),
``preAllocatedFloatingIPs``, ``maxIPs``, ``reclaimPolicy``. Credentials are
never in the spec.

What a floating IP carries (:func:`description`, :func:`pool_tag`): its
description names the owner and the claim's allocation key, given in the create
call itself (Neutron refuses tags there), so a floating IP made by a call whose
answer was lost is found again by its key; tags, set in a second call, name the
owner and the pool with its namespace.
"""

from __future__ import annotations

import hashlib
import ipaddress
import re
from dataclasses import dataclass, field
from typing import Any, Iterable, Mapping

from metal3_ipam.core.poolkind import KEY_PATTERN, annotated_key
from metal3_ipam.core.problems import ObjectId, Problem

GROUP = "openstack.metal3-ipam.io"
VERSION = "v1alpha1"
API_VERSION = f"{GROUP}/{VERSION}"
KIND = "OpenStackFloatingIPPool"
OPENSTACK_FLOATING_IP_POOL = (GROUP, KIND)
PLURAL = "openstackfloatingippools"
#: The finalizer the Secret of a pool's clouds.yaml carries while floating IPs its claims left for another cluster
#: to answer (or may leave: shared with one) are not judged (``controller.outside``).
SECRET_FINALIZER = f"{GROUP}/floating-ips-left"

#: On a claim: the key its floating IP is found by. Written before Neutron is asked; copied by
#: ``clusterctl move`` with the claim.
KEY_ANNOTATION = f"{GROUP}/allocation-key"

DELETE, RETAIN = "Delete", "Retain"
SECRET, CLUSTER_IDENTITY = "Secret", "ClusterIdentity"
CLOUDS_YAML_KEY = "clouds.yaml"
CACERT_KEY = "cacert"
DEFAULT_CLOUD = "openstack"
DEFAULT_OWNER = "metal3-ipam"

MAX_NAME_LEN = 253
MAX_REGION_LEN = 255
MAX_FILTER_LEN = 255
MAX_TAGS = 64
MAX_PREALLOCATED = 1024
MAX_IPS = 65536
MAX_TAG_LEN = 255  # Neutron's

DNS_SUBDOMAIN = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$")
UUID = re.compile(r"^[0-9a-fA-F]{8}-?[0-9a-fA-F]{4}-?[0-9a-fA-F]{4}-?[0-9a-fA-F]{4}-?[0-9a-fA-F]{12}$")
OWNER = re.compile(r"^[a-z0-9]([-a-z0-9]{0,38}[a-z0-9])?$")

#: CAPO's tag on the floating IPs of its pool named ``name``.
CAPO_TAG_PREFIX = "cluster-api-provider-openstack-fip-pool-"


@dataclass(frozen=True)
class Identity:
    """Where the credentials are: a Secret of the pool's namespace holding ``clouds.yaml`` (and ``cacert``)."""

    secret: str
    cloud: str = DEFAULT_CLOUD
    region: str | None = None


@dataclass(frozen=True)
class NetworkFilter:
    """Which external network: Neutron's query parameters (``router:external=True`` always added)."""

    id: str | None = None
    name: str | None = None
    description: str | None = None
    project_id: str | None = None
    tags: tuple[str, ...] = ()
    tags_any: tuple[str, ...] = ()
    not_tags: tuple[str, ...] = ()
    not_tags_any: tuple[str, ...] = ()

    def query(self) -> dict[str, Any]:
        query: dict[str, Any] = {"router:external": "true"}
        for key, value in (("id", self.id), ("name", self.name), ("description", self.description),
                           ("project_id", self.project_id)):
            if value is not None:
                query[key] = value
        for key, values in (("tags", self.tags), ("tags-any", self.tags_any), ("not-tags", self.not_tags),
                            ("not-tags-any", self.not_tags_any)):
            if values:
                query[key] = ",".join(values)
        return query

    def text(self) -> str:
        if self.id is not None:
            return f"network {self.id}"
        parts = [f"{k}={v}" for k, v in self.query().items() if k != "router:external"]
        return f"the external network matching {', '.join(parts)}" if parts else "the only external network"


@dataclass(frozen=True)
class OpenStackPool:
    namespace: str
    name: str
    generation: int
    identity: Identity
    network: NetworkFilter
    reclaim_policy: str = DELETE
    release_without_delete: bool = False
    preallocated: tuple[str, ...] = ()
    max_ips: int | None = None
    adopt_capo_pool: str | None = None
    uid: str = field(default="", compare=False)

    @property
    def id(self) -> ObjectId:
        return ObjectId(KIND, self.namespace, self.name)

    @property
    def text(self) -> str:
        return f"{KIND} {self.namespace}/{self.name}"

    @property
    def deletes(self) -> bool:
        """Whether a released floating IP is deleted in Neutron (else kept for the pool's next claim)."""
        return self.reclaim_policy == DELETE and not self.release_without_delete


def _mapping(value: Any, path: str, problems: list[Problem]) -> Mapping[str, Any]:
    if value is None:
        return {}
    if not isinstance(value, Mapping):
        problems.append(Problem(path, value, "must be an object"))
        return {}
    return value


def _text(spec: Mapping[str, Any], name: str, path: str, problems: list[Problem], limit: int) -> str | None:
    value = spec.get(name)
    if value is None:
        return None
    if not isinstance(value, str) or not value or len(value) > limit:
        problems.append(Problem(f"{path}.{name}", value, f"must be a string of 1 to {limit} characters"))
        return None
    return value


def _tags(spec: Mapping[str, Any], name: str, path: str, problems: list[Problem]) -> tuple[str, ...]:
    value = spec.get(name)
    if value is None:
        return ()
    if not isinstance(value, list) or len(value) > MAX_TAGS:
        problems.append(Problem(f"{path}.{name}", value, f"must be a list of at most {MAX_TAGS} Neutron tags"))
        return ()
    tags = []
    for i, tag in enumerate(value):
        if not isinstance(tag, str) or not tag or "," in tag or len(tag) > MAX_TAG_LEN:
            problems.append(Problem(f"{path}.{name}[{i}]", tag,
                                    f"must be a Neutron tag (1 to {MAX_TAG_LEN} characters, no ',')"))
        else:
            tags.append(tag)
    return tuple(tags)


def _identity(spec: Mapping[str, Any], problems: list[Problem]) -> Identity | None:
    if spec.get("identityRef") is None:
        problems.append(Problem("spec.identityRef", None, "is required: the Secret holding the clouds.yaml"))
        return None
    ref = _mapping(spec.get("identityRef"), "spec.identityRef", problems)
    kind = ref.get("type", SECRET)
    if kind != SECRET:
        problems.append(Problem("spec.identityRef.type", kind,
                                "must be Secret (a Secret of the pool's namespace holding clouds.yaml); "
                                "OpenStackClusterIdentity is not served"))
    secret = ref.get("name")
    if not isinstance(secret, str) or not secret or len(secret) > MAX_NAME_LEN or not DNS_SUBDOMAIN.match(secret):
        problems.append(Problem("spec.identityRef.name", secret,
                                "must name a Secret in the pool's namespace (a DNS-1123 subdomain)"))
        secret = None
    cloud = _text(ref, "cloudName", "spec.identityRef", problems, MAX_NAME_LEN)
    region = _text(ref, "region", "spec.identityRef", problems, MAX_REGION_LEN)
    if secret is None or kind != SECRET:
        return None
    return Identity(secret, cloud or DEFAULT_CLOUD, region)


def _network(spec: Mapping[str, Any], problems: list[Problem]) -> NetworkFilter | None:
    raw = spec.get("floatingIPNetwork")
    if raw is None:
        return NetworkFilter()
    param = _mapping(raw, "spec.floatingIPNetwork", problems)
    if ("id" in param) == ("filter" in param) or set(param) - {"id", "filter"}:
        problems.append(Problem("spec.floatingIPNetwork", dict(param) if isinstance(raw, Mapping) else raw,
                                "must name exactly one of id (a network's UUID) or filter"))
        return None
    if "id" in param:
        value = param["id"]
        if not isinstance(value, str) or not UUID.match(value):
            problems.append(Problem("spec.floatingIPNetwork.id", value, "must be a network's UUID"))
            return None
        return NetworkFilter(id=value)
    path = "spec.floatingIPNetwork.filter"
    flt = _mapping(param["filter"], path, problems)
    known = {"name", "description", "projectID", "tags", "tagsAny", "notTags", "notTagsAny"}
    if not flt or set(flt) - known:
        problems.append(Problem(path, param["filter"], f"must set at least one of {', '.join(sorted(known))} "
                                                       "and nothing else"))
        return None
    before = len(problems)
    found = NetworkFilter(
        name=_text(flt, "name", path, problems, MAX_FILTER_LEN),
        description=_text(flt, "description", path, problems, MAX_FILTER_LEN),
        project_id=_text(flt, "projectID", path, problems, MAX_FILTER_LEN),
        tags=_tags(flt, "tags", path, problems), tags_any=_tags(flt, "tagsAny", path, problems),
        not_tags=_tags(flt, "notTags", path, problems), not_tags_any=_tags(flt, "notTagsAny", path, problems))
    return found if len(problems) == before else None


def _preallocated(spec: Mapping[str, Any], problems: list[Problem]) -> tuple[str, ...]:
    value = spec.get("preAllocatedFloatingIPs")
    if value is None:
        return ()
    if not isinstance(value, list) or len(value) > MAX_PREALLOCATED:
        problems.append(Problem("spec.preAllocatedFloatingIPs", value,
                                f"must be a list of at most {MAX_PREALLOCATED} IPv4 addresses"))
        return ()
    found: list[str] = []
    for i, item in enumerate(value):
        try:
            ip = ipaddress.IPv4Address(item) if isinstance(item, str) else None
        except ValueError:
            ip = None
        if ip is None:
            problems.append(Problem(f"spec.preAllocatedFloatingIPs[{i}]", item,
                                    "must be an IPv4 address (floating IPs are IPv4 only)"))
        elif str(ip) in found:
            problems.append(Problem(f"spec.preAllocatedFloatingIPs[{i}]", item, "is listed twice"))
        else:
            found.append(str(ip))
    return tuple(found)


def read_pool(obj: Mapping[str, Any]) -> tuple[OpenStackPool | None, list[Problem]]:
    """The pool, or None and what is wrong (each problem naming the object, field and value)."""
    metadata = obj.get("metadata")
    metadata = metadata if isinstance(metadata, Mapping) else {}
    namespace, name = metadata.get("namespace"), metadata.get("name")
    oid = ObjectId(KIND, namespace if isinstance(namespace, str) else "", name if isinstance(name, str) else "")
    problems: list[Problem] = []
    spec = _mapping(obj.get("spec"), "spec", problems)
    identity = _identity(spec, problems)
    network = _network(spec, problems)
    policy = spec.get("reclaimPolicy", DELETE)
    if policy not in (DELETE, RETAIN):
        problems.append(Problem("spec.reclaimPolicy", policy, "must be Delete or Retain"))
    keep = spec.get("releaseWithoutDelete", False)
    if not isinstance(keep, bool):
        problems.append(Problem("spec.releaseWithoutDelete", keep, "must be true or false"))
    preallocated = _preallocated(spec, problems)
    max_ips = spec.get("maxIPs")
    if max_ips is not None and (not isinstance(max_ips, int) or isinstance(max_ips, bool)
                                or not 0 <= max_ips <= MAX_IPS):
        problems.append(Problem("spec.maxIPs", max_ips, f"must be an integer from 0 to {MAX_IPS}"))
    adopt = spec.get("adoptFromCAPOPool")
    if adopt is not None and (not isinstance(adopt, str) or not DNS_SUBDOMAIN.match(adopt)
                              or len(adopt) > MAX_NAME_LEN):
        problems.append(Problem("spec.adoptFromCAPOPool", adopt,
                                "must be the name of a Cluster API Provider OpenStack floating IP pool"))
    problems = [Problem(p.field, p.value, p.message, p.warning, oid) for p in problems]
    if problems or identity is None or network is None:
        return None, problems
    generation = metadata.get("generation")
    uid = metadata.get("uid")
    return OpenStackPool(
        namespace=oid.namespace, name=oid.name,
        generation=generation if isinstance(generation, int) and not isinstance(generation, bool) else 0,
        identity=identity, network=network, reclaim_policy=policy, release_without_delete=keep,
        preallocated=preallocated, max_ips=max_ips, adopt_capo_pool=adopt,
        uid=uid if isinstance(uid, str) else ""), []


# --------------------------------------------------------------------------- keys and marks

def claim_key(claim: Mapping[str, Any]) -> tuple[str | None, Problem | None]:
    """The allocation key a claim carries (None: none yet, give it one), or the problem with the one it carries."""
    return annotated_key(claim, KEY_ANNOTATION, "Neutron is asked, and finds the claim's floating IP")


def check_owner(text: str) -> str:
    if not OWNER.match(text):
        raise ValueError(f"{text!r}: expected 1 to 40 lowercase letters, digits and '-' (a Neutron tag's start)")
    return text


def description(owner: str, key: str) -> str:
    """The description of the floating IP made for ``key``: found again by it (Neutron filters it exactly)."""
    return f"{owner} key={key}"


def key_in(owner: str, text: Any) -> str | None:
    """The allocation key a floating IP's description names for ``owner``, or None."""
    prefix = f"{owner} key="
    if isinstance(text, str) and text.startswith(prefix) and KEY_PATTERN.match(text[len(prefix):]):
        return text[len(prefix):]
    return None


def available_description(owner: str) -> str:
    """The description of a floating IP the pool keeps for its next claim (released by ``Retain``)."""
    return f"{owner} available"


def pool_tag(owner: str, namespace: str, name: str) -> str:
    """The tag naming the pool (with its namespace: two pools of one name in two namespaces are apart)."""
    tag = f"{owner}-pool:{namespace}:{name}"
    if len(tag) <= MAX_TAG_LEN:
        return tag
    digest = hashlib.sha256(f"{namespace}/{name}".encode()).hexdigest()[:32]
    return f"{owner}-pool:{namespace}:{name[:MAX_TAG_LEN - len(owner) - len(namespace) - 40]}~{digest}"


def kept_tag(owner: str) -> str:
    """The tag of a floating IP this owner took and did not make (pre-allocated by an admin): no release deletes
    it, whatever the pool's spec says by then (it may no longer list it)."""
    return f"{owner}-kept"


def deleted_on_release(pool: OpenStackPool, owner: str, address: str, tags: Iterable[str]) -> bool:
    """Whether a release under ``pool`` deletes the floating IP (``Delete``), rather than keep it for the pool's
    next claim: never one the pool lists as pre-allocated, nor one taken, not made (``kept_tag``)."""
    return pool.deletes and address not in pool.preallocated and kept_tag(owner) not in tags


def keys_own(fips: Iterable[Any], tag: str, held: str | None = None) -> Any:
    """Of the floating IPs carrying one key (two replicas, or a create whose answer was lost, each made one), the
    key's own: the one whose address the key's IPAddress holds (``held``), else one tagged with the pool
    (``tag``: a lookup or its maker took it for the key and may have handed it out), else the first made
    (Neutron's ``created_at``, to the second), then by id. Neutron's ids are random: the lowest is not the first.
    Every replica, every lookup, answers the same of the same floating IPs."""
    return min(fips, key=lambda f: (f.address != held if held is not None else False, tag not in f.tags,
                                    f.created_at or "~", f.id))


def capo_tag(name: str) -> str:
    return f"{CAPO_TAG_PREFIX}{name}"


# --------------------------------------------------------------------------- status

SERVING = "Serving"
IDENTITY_MISSING = "IdentityMissing"
NETWORK_FULL = "NetworkFull"
OVER_QUOTA = "OverQuota"
POLICY_FORBIDDEN = "PolicyForbidden"
CREDENTIALS_REFUSED = "CredentialsRefused"
UNREACHABLE = "OpenStackUnreachable"
TIMEOUT = "OpenStackTimeout"
SERVER_ERROR = "OpenStackServerError"
NETWORK_NOT_FOUND = "NetworkNotFound"
MAX_IPS_REACHED = "MaxIPsReached"
ADDRESS_TAKEN = "AddressTaken"
#: The key's floating IP is homed at another cluster, whose claim carrying the key too took it first (``homes``).
ADDRESS_HOMED_ELSEWHERE = "AddressHomedElsewhere"
REFUSED_REQUEST = "OpenStackRefusedRequest"
#: Refusals of the cloud itself rather than of one request: they put off all of the cloud's asks a while.
SERVER_DOWN = frozenset({UNREACHABLE, TIMEOUT, SERVER_ERROR})


@dataclass(frozen=True)
class Survey:
    """What Neutron said of a pool when last asked, or why it could not say."""

    network: Mapping[str, Any] | None = None  # {"id", "name", "tags"}
    claimed: tuple[str, ...] = ()
    available: tuple[str, ...] = ()
    failed: tuple[str, ...] = ()
    reason: str | None = None
    message: str = ""


def pool_status(pool: OpenStackPool, survey: Survey, *, now: str, previous: Mapping[str, Any] | None = None
                ) -> dict[str, Any]:
    """The pool's ``status``: Ready, the resolved network, the floating IPs claimed and kept, their counts."""
    ready = survey.reason is None
    if ready:
        network = survey.network or {}
        message = (f"Neutron serves floating IPs of network {network.get('name') or ''} ({network.get('id')}): "
                   f"{len(survey.claimed)} claimed, {len(survey.available)} available")
    else:
        message = survey.message or survey.reason or ""
    condition = {"type": "Ready", "status": "True" if ready else "False",
                 "reason": SERVING if ready else survey.reason, "message": message[:32768],
                 "observedGeneration": pool.generation, "lastTransitionTime": now}
    for old in (previous or {}).get("conditions") or ():
        if isinstance(old, Mapping) and old.get("type") == "Ready" and old.get("status") == condition["status"]:
            condition["lastTransitionTime"] = old.get("lastTransitionTime") or now
    status: dict[str, Any] = {"conditions": [condition], "observedGeneration": pool.generation, "lastChecked": now}
    if ready:
        status.update(claimedIPs=list(survey.claimed), availableIPs=list(survey.available),
                      failedIPs=list(survey.failed), claimed=len(survey.claimed), available=len(survey.available))
        if survey.network:
            status["floatingIPNetwork"] = {k: v for k, v in survey.network.items() if v not in (None, [], "")}
    else:
        for key in ("claimedIPs", "availableIPs", "failedIPs", "claimed", "available", "floatingIPNetwork"):
            if previous and key in previous:
                status[key] = previous[key]  # the last Neutron said, while it cannot say
    return status
