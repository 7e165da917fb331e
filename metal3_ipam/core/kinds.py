"""The API vocabulary: groups, kinds, finalizers, labels and annotations.

A kind is named by (group, kind): Metal3's IPAddress and Cluster API's
IPAddress share a kind name, and a claim is only ours when group and kind
both match.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

METAL3_GROUP = "ipam.metal3.io"
METAL3_VERSION = "v1alpha1"
METAL3_API_VERSION = f"{METAL3_GROUP}/{METAL3_VERSION}"
CAPI_IPAM_GROUP = "ipam.cluster.x-k8s.io"
CAPI_IPAM_VERSIONS = ("v1beta2", "v1beta1")
CLUSTER_GROUP = "cluster.x-k8s.io"

IPPOOL = (METAL3_GROUP, "IPPool")
IPCLAIM = (METAL3_GROUP, "IPClaim")
IPADDRESS = (METAL3_GROUP, "IPAddress")
CAPI_CLAIM = (CAPI_IPAM_GROUP, "IPAddressClaim")
CAPI_ADDRESS = (CAPI_IPAM_GROUP, "IPAddress")
CLUSTER = (CLUSTER_GROUP, "Cluster")

FINALIZERS = {
    IPPOOL: "ippool.ipam.metal3.io",
    IPCLAIM: "ipclaim.ipam.metal3.io",
    IPADDRESS: "ipaddress.ipam.metal3.io",
    CAPI_CLAIM: "ipam.metal3.io/ipaddressclaim",
    CAPI_ADDRESS: "ipam.metal3.io/ipaddress",
}

CLUSTER_NAME_LABEL = "cluster.x-k8s.io/cluster-name"
# clusterctl's provider label: on this provider's CRDs, and on a pool with clusterName (as the Go
# Metal3 IPAM labels it, so selectors on it find every pool of a Cluster).
PROVIDER_LABEL = "cluster.x-k8s.io/provider"
PROVIDER_NAME = "ipam-metal3"
PAUSED_ANNOTATION = "cluster.x-k8s.io/paused"
# Cluster API's label --watch-filter selects on (clusterv1.WatchLabel).
WATCH_FILTER_LABEL = "cluster.x-k8s.io/watch-filter"
DELETE_FOR_MOVE_ANNOTATION = "clusterctl.cluster.x-k8s.io/delete-for-move"
IP_ADDRESS_ANNOTATION = "ipAddress"
# On a global pool, "true": its addresses are another network's, so an overlap with any other pool is shared
# (both hand it out, both say so) instead of withheld by the later pool (see ``core.overlap``).
SEPARATE_NETWORK_ANNOTATION = "ipam.metal3.io/separate-network"
# On a claim of a pool keeping its IPs apart, the IP (or ``<base>/<length>`` sub-prefix) a pass allocating for it
# hands out, written first, on condition that the claim is unchanged since the pass read it; and the claim's
# resourceVersion, written there by an allocation of the other side where such a pass may land (``reconcile``'s
# guards): a pass made before either is refused.
ALLOCATING_ANNOTATION = "ipam.metal3.io/allocating"
FENCED_ANNOTATION = "ipam.metal3.io/allocation-fenced"
# Beside the first, when that pass was made (RFC 3339): once older than a lock is left to its maker, that pass
# landed or stopped (a later one names again first), and what it names is kept off no more.
ALLOCATING_SINCE_ANNOTATION = "ipam.metal3.io/allocating-since"
# Written with the fence where a global pool's allocation takes a span a settled naming named, in its place: that
# span. What a pass of the claim's pool made there before the fence is never taken up (its status write was
# refused); anything else of the claim's (moved or restored with it) is, as ever. A naming made later removes it.
LET_GO_ANNOTATION = "ipam.metal3.io/allocating-let-go"
# Beside the naming of the allocation that wrote those, the claims whose span let go meets what it hands out
# (``<kind>/<name>=<uid>``, comma-separated): what their refused passes made there outlives them when they are
# deleted, and is no address of a later claim of their name (a claim moved or restored with objects of another uid
# has none here).
LET_GO_FROM_ANNOTATION = "ipam.metal3.io/allocating-let-go-from"
# Written in its place by a naming that meets that span (the claim takes it back): its guard there, as a view may
# still hold it, is in doubt until made anew (another allocation may have taken the guard's name meanwhile); the
# write after that guard is made anew removes it. A pass landing in part leaves the doubt in place.
TAKEN_BACK_ANNOTATION = "ipam.metal3.io/allocating-taken-back"
# On a Metal3 IPAddress that guards an IP in its namespace (``naming.guard_name``), the IP: it names a claim and
# its pool as a lock does, and is filed with no pool (it is no address of the claim's).
GUARD_LABEL = "ipam.metal3.io/guards-ip"


def group_of(api_version: str) -> str:
    return api_version.rpartition("/")[0] if "/" in api_version else ""


# (apiVersion, kind) -> (group, kind): one tuple per kind, not one per object that is filed under it.
# Only pairs of a length Kubernetes allows are kept (a group of 253 characters, a version and a kind
# of 63): an admission review sent straight to the webhook port may carry kinds of megabytes.
_KIND_OF: dict[tuple[Any, str], tuple[str, str]] = {}
_KEPT_KIND_CHARS = 384


def kind_of(obj: Any) -> tuple[str, str] | None:
    if not isinstance(obj, Mapping) or not isinstance(obj.get("kind"), str):
        return None
    api_version = obj.get("apiVersion")
    found = _KIND_OF.get((api_version, obj["kind"])) if isinstance(api_version, str) else None
    if found is None:
        found = (group_of(api_version) if isinstance(api_version, str) else "", obj["kind"])
        if isinstance(api_version, str) and len(_KIND_OF) < 256 \
                and len(api_version) + len(obj["kind"]) <= _KEPT_KIND_CHARS:
            _KIND_OF[(api_version, obj["kind"])] = found
    return found
