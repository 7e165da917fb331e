"""The OpenStack kind's adapter half, as the runtime builds it: its flags of ``metal3-ipam run``, and the asks
(``asks.OpenStackPools``) wired to the runtime's parts."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from metal3_ipam.core.asking import Asking
from metal3_ipam.core.poolkind import Flag, Rule
from metal3_ipam.poolkinds.openstack.asks import OpenStackAsks, OpenStackPools, SecretClouds
from metal3_ipam.poolkinds.openstack.capo import CAPOPools
from metal3_ipam.poolkinds.openstack.pool import DEFAULT_OWNER, check_owner

SURVEY_SECONDS = 60.0


def _seconds(low: float, high: float) -> Any:
    def parse(text: str) -> float:
        try:
            seconds = float(text)
        except ValueError:
            seconds = -1.0
        if not (seconds == 0 or low <= seconds <= high):
            raise ValueError(f"{text}: expected 0 (never) or {low:g} to {high:g} seconds")
        return seconds
    return parse


FLAGS = (
    Flag("openstack-owner", DEFAULT_OWNER, "OWNER",
         "marks the floating IPs this controller makes or takes in Neutron (their tag, and <owner> key=<key> in "
         "their description); the same in every cluster claims may be moved to (default metal3-ipam)",
         parse=check_owner),
    Flag("openstack-sweep-seconds", 300.0, "SECONDS",
         "how often Neutron is swept for floating IPs of this owner's keys that no claim carries; one is released "
         "when two sweeps this far apart found it so (default 300; 0: never)", parse=_seconds(1, 86400)),
)


def service(parts: Any) -> OpenStackPools:
    """The asks of every OpenStackFloatingIPPool, with the runtime's API client, inventory, writer and wake-up."""
    flags = parts.flags
    asks = OpenStackAsks(SecretClouds(parts.api), owner=flags.get("openstack_owner", DEFAULT_OWNER))
    asks.capo = CAPOPools(parts.api)
    return OpenStackPools(asks, Asking(timeout_reason=TIMEOUT_REASON), inventory=parts.inventory,
                          writer=parts.writer, wake=parts.wake,
                          may_act=parts.may_act, survey_seconds=SURVEY_SECONDS,
                          sweep_seconds=flags.get("openstack_sweep_seconds", FLAGS[1].default))


# The reason a claim is refused with when Neutron does not answer an ask in time.
TIMEOUT_REASON = "OpenStackTimeout"

ROLE_RULES = (
    Rule("", "secrets", ("get",), "an OpenStackFloatingIPPool's clouds.yaml, read from the Secret its "
                                  "spec.identityRef names"),
    Rule("infrastructure.cluster.x-k8s.io", "openstackfloatingippools", ("get",),
         "the status of Cluster API Provider OpenStack's pool an OpenStackFloatingIPPool's spec.adoptFromCAPOPool "
         "names, in its namespace: which of the floating IPs of its tag it keeps free (capo.CAPOPools)"),
)


def secrets(pool: Mapping[str, Any]) -> tuple[str, ...]:
    """The Secret of the pool's clouds.yaml (in its namespace)."""
    spec = pool.get("spec") if isinstance(pool.get("spec"), Mapping) else {}
    ref = spec.get("identityRef")
    name = ref.get("name") if isinstance(ref, Mapping) else None
    return (name,) if isinstance(name, str) and name else ()


def unservable(pool: Mapping[str, Any]) -> str | None:
    """Why ``metal3-ipam demo`` cannot serve the pool here: it needs an OpenStack cloud of yours."""
    return ("it needs an OpenStack cloud: put your clouds.yaml in the Secret its spec.identityRef names "
            f"({', '.join(secrets(pool)) or 'none'}) and apply it to a cluster of yours")
