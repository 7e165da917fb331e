"""The locks as the controller stores them, read from a real API server: the Leases of the lock namespace that
are locks (``core.lockstore``), each as the Metal3 IPAddress it stands for, and the Metal3 IPAddresses where
that API is served (the Leases' twins, and locks an earlier version wrote)."""

from __future__ import annotations

from typing import Any

from kubernetes import client
from kubernetes.client.rest import ApiException

from ..core import lockstore


def leases(api: client.ApiClient, lock_namespace: str, **listing: Any) -> list[dict]:
    """The Leases of ``lock_namespace`` that are locks, as plain JSON (``listing``: ``list_namespaced_lease``'s
    arguments, e.g. a resource version)."""
    answer = client.CoordinationV1Api(api).list_namespaced_lease(lock_namespace, label_selector=lockstore.LOCK_LABEL,
                                                                  **listing)
    return [api.sanitize_for_serialization(item) for item in answer.items]


def lease_locks(api: client.ApiClient, lock_namespace: str, **listing: Any) -> list[dict]:
    """The locks the Leases of ``lock_namespace`` stand for."""
    return [view for view in map(lockstore.from_lease, leases(api, lock_namespace, **listing)) if view is not None]


def metal3_locks(api: client.ApiClient, **listing: Any) -> list[dict]:
    """Every Metal3 IPAddress, of every namespace ([] where ipam.metal3.io is not served)."""
    try:
        return client.CustomObjectsApi(api).list_cluster_custom_object(
            "ipam.metal3.io", "v1alpha1", "ipaddresses", **listing)["items"]
    except ApiException as err:
        if err.status == 404:
            return []
        raise


def held_locks(api: client.ApiClient, lock_namespace: str, **listing: Any) -> list[dict]:
    """Every lock once, whichever store holds it: the locks the Leases stand for, and the Metal3 IPAddresses no
    Lease of their name stands beside (a Lease's twin is the same lock)."""
    leased = lease_locks(api, lock_namespace, **listing)
    names = {(x["metadata"]["namespace"], x["metadata"]["name"]) for x in leased}
    return leased + [x for x in metal3_locks(api, **listing)
                     if (x["metadata"]["namespace"], x["metadata"]["name"]) not in names]
