"""Cluster API Provider OpenStack's own floating-IP pool, as ``adoptFromCAPOPool`` reads it.

CAPO tags the floating IPs of its pool ``<name>`` with
``cluster-api-provider-openstack-fip-pool-<name>``: the pool's name without its
namespace (its description too). Two CAPO pools of one name in two namespaces
on one project tag alike, so the tag alone never says which pool's free
floating IP one is: a floating IP of CAPO's pool ``b/fips`` handed to a claim
whose machine has no port yet looks like a free one of ``a/fips``.

What tells them apart is CAPO's pool object itself, in the namespace of the
pool adopting: a floating IP is adopted only when CAPO's pool of that name *in
this namespace* lists its address in ``status.availableIPs`` (and not in
``claimedIPs``), and no Cluster API IPAddress holds it for a CAPO pool of that
name: one of another namespace (CAPO's pool recovers by its tag, so its
``availableIPs`` may list another namespace's claimed floating IPs), or one of
this namespace (CAPO's pool writes the IPAddress of a claim before its status
drops the address from ``availableIPs``). A controller serving only some
namespaces (``-n``) keeps no other namespace's IPAddresses: it lists them of
the API server for each adoption (:meth:`CAPOPools.held`). No such pool here,
or one that cannot be read, or IPAddresses that cannot be listed: nothing is
adopted, and a warning says why.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Iterable, Mapping
from typing import Any
from urllib.parse import quote

from kubernetes.client.rest import ApiException

from metal3_ipam.controller.api import request
from metal3_ipam.core import kinds
from metal3_ipam.core import objects as o

log = logging.getLogger(__name__)

GROUP = "infrastructure.cluster.x-k8s.io"
VERSION = "v1alpha1"
KIND = "OpenStackFloatingIPPool"
PLURAL = "openstackfloatingippools"


def _addresses(status: Mapping[str, Any], name: str) -> set[str]:
    value = status.get(name)
    return {ip for ip in value if isinstance(ip, str)} if isinstance(value, list) else set()


def adoptable(capo_pool: Mapping[str, Any] | None, held_elsewhere: Iterable[str] | None = ()) -> frozenset[str]:
    """The addresses CAPO's pool (as read, or None) keeps free for its next claim, but those held elsewhere
    (``held_elsewhere``; None: not known, as the IPAddresses of some namespaces are out of sight: none)."""
    if held_elsewhere is None:
        return frozenset()
    status = o.status(capo_pool) if isinstance(capo_pool, Mapping) else {}
    return frozenset(_addresses(status, "availableIPs") - _addresses(status, "claimedIPs") - set(held_elsewhere))


def held_elsewhere(addresses: Iterable[Mapping[str, Any]], namespace: str, name: str) -> set[str]:
    """The addresses Cluster API IPAddresses hold for a CAPO pool named ``name``: of namespaces other than
    ``namespace`` (CAPO's tag names no namespace) and of ``namespace`` itself (CAPO's pool there writes a claim's
    IPAddress before its status drops the address from ``availableIPs``)."""
    found = set()
    for address in addresses:
        ref = o.spec(address).get("poolRef")
        if isinstance(ref, Mapping) and ref.get("apiGroup") == GROUP and ref.get("kind") == KIND \
                and ref.get("name") == name and isinstance(o.spec(address).get("address"), str):
            found.add(o.spec(address)["address"])
    return found


class CAPOPools:
    """CAPO's pools, read with a Kubernetes ``ApiClient`` when an adoption needs one."""

    def __init__(self, api_client: Any):
        self._api = api_client

    async def read(self, namespace: str, name: str) -> dict | None:
        """CAPO's pool ``namespace/name``, or None (none there, CAPO's CRD not installed, or unreadable)."""
        try:
            return await asyncio.to_thread(request, self._api, "GET",
                                           f"/apis/{GROUP}/{VERSION}/namespaces/{namespace}/{PLURAL}/{name}",
                                           timeout=10)
        except ApiException as exc:
            if exc.status != 404:
                log.warning("%s %s/%s (spec.adoptFromCAPOPool) could not be read: %s %s; nothing is adopted",
                            KIND, namespace, name, exc.status, exc.reason)
        except Exception as exc:
            log.warning("%s %s/%s (spec.adoptFromCAPOPool) could not be read: %s; nothing is adopted",
                        KIND, namespace, name, exc)
        return None

    async def held(self, name: str) -> set[str] | None:
        """The addresses Cluster API IPAddresses of every namespace hold for a CAPO pool named ``name``
        (``held_elsewhere``), listed of the API server; None if they cannot be listed (nothing is adopted)."""
        try:
            return await asyncio.to_thread(self._held, name)
        except Exception as exc:
            reason = f"{exc.status} {exc.reason}" if isinstance(exc, ApiException) else str(exc)
            log.warning("the Cluster API IPAddresses of every namespace could not be listed (%s): nothing is adopted "
                        "from a CAPO pool %s (spec.adoptFromCAPOPool)", reason, name)
            return None

    def _held(self, name: str) -> set[str]:
        for version in kinds.CAPI_IPAM_VERSIONS:
            found: list[dict] = []
            token = None
            try:
                while True:
                    page = request(self._api, "GET", f"/apis/{kinds.CAPI_IPAM_GROUP}/{version}/ipaddresses?limit=500"
                                   + (f"&continue={quote(token)}" if token else ""), timeout=30) or {}
                    found.extend(page.get("items") or [])
                    token = (page.get("metadata") or {}).get("continue")
                    if not token:
                        break
            except ApiException as exc:
                if exc.status == 404:
                    continue  # this version is not served: the next
                raise
            return held_elsewhere(found, "", name)
        return set()
