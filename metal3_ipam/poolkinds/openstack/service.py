"""The OpenStack kind's adapter half, as the runtime builds it: its flags of ``metal3-ipam run``, and the asks
(``asks.OpenStackPools``) wired to the runtime's parts."""

from __future__ import annotations

import base64
import urllib.error
import urllib.request
from collections.abc import Callable, Mapping
from typing import Any

from metal3_ipam.controller.outside import SecretHolds
from metal3_ipam.core.asking import Asking
from metal3_ipam.core.poolkind import Flag, Rule
from metal3_ipam.poolkinds.openstack.asks import OpenStackAsks, OpenStackPools, SecretClouds
from metal3_ipam.poolkinds.openstack.capo import CAPOPools
from metal3_ipam.poolkinds.openstack.client import OpenStackError, read_clouds_yaml
from metal3_ipam.poolkinds.openstack.pool import CLOUDS_YAML_KEY, DEFAULT_CLOUD, DEFAULT_OWNER, check_owner

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
                          sweep_seconds=flags.get("openstack_sweep_seconds", FLAGS[1].default),
                          secret_holds=SecretHolds(parts.api, lambda: parts.inventory.lock_namespace))


# The reason a claim is refused with when Neutron does not answer an ask in time.
TIMEOUT_REASON = "OpenStackTimeout"

ROLE_RULES = (
    Rule("", "secrets", ("get",), "an OpenStackFloatingIPPool's clouds.yaml, read from the Secret its "
                                  "spec.identityRef names"),
    Rule("", "secrets", ("patch",), "the finalizer the Secret an OpenStackFloatingIPPool's spec.identityRef names "
                                    "carries while floating IPs its claims left for another cluster to answer are "
                                    "not judged (controller.outside.SecretHolds)"),
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


def unservable(pool: Mapping[str, Any], given: Mapping[str, Mapping[str, Any]] | None = None,
               answers: Callable[[str], str | None] | None = None) -> str | None:
    """Why ``metal3-ipam demo`` cannot serve the pool here, or None: the clouds.yaml of its Secret (given with
    it) names a Keystone that answers. ``answers(url)``: None when the URL answers HTTP, else why not."""
    names = secrets(pool)
    advice = (f"put your clouds.yaml in the Secret its spec.identityRef names ({', '.join(names) or 'none'}) "
              "and apply it to a cluster of yours")
    secret = (given or {}).get(names[0]) if names else None
    clouds = _clouds_yaml(secret) if secret is not None else None
    if clouds is None:
        return f"it needs an OpenStack cloud: {advice}"
    spec = pool.get("spec") if isinstance(pool.get("spec"), Mapping) else {}
    ref = spec.get("identityRef") if isinstance(spec.get("identityRef"), Mapping) else {}
    cloud = ref.get("cloudName") or DEFAULT_CLOUD
    try:
        document = read_clouds_yaml(clouds, cloud)
    except OpenStackError as err:
        return f"{err}: {advice}"
    auth = document["clouds"][cloud].get("auth")
    url = auth.get("auth_url") if isinstance(auth, Mapping) else None
    if not isinstance(url, str) or not url:
        return f"clouds.yaml's cloud {cloud!r} has no auth.auth_url: {advice}"
    why = (answers or _answers)(url)
    return None if why is None else f"Keystone at {url} does not answer ({why}): {advice}"


def _clouds_yaml(secret: Mapping[str, Any]) -> bytes | None:
    """The clouds.yaml a Secret manifest holds, in ``stringData`` or base64 in ``data``."""
    text = (secret.get("stringData") or {}).get(CLOUDS_YAML_KEY)
    if isinstance(text, str):
        return text.encode()
    data = (secret.get("data") or {}).get(CLOUDS_YAML_KEY)
    try:
        return base64.b64decode(data) if isinstance(data, str) else None
    except ValueError:
        return None


def _answers(url: str, timeout: float = 3.0) -> str | None:
    """None when ``url`` answers HTTP at all (Keystone's version document); else why not."""
    try:
        with urllib.request.urlopen(url, timeout=timeout):
            return None
    except urllib.error.HTTPError:
        return None
    except (OSError, ValueError) as err:
        return str(getattr(err, "reason", None) or err)
