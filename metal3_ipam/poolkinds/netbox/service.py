"""The NetBox kind's adapter half, as the runtime builds it: its flags of ``metal3-ipam run``, and the asks
(``asks.NetBoxPools``) wired to the runtime's parts."""

from __future__ import annotations

import urllib.error
import urllib.request
from collections.abc import Callable, Mapping
from typing import Any

from metal3_ipam.core.asking import Asking
from metal3_ipam.controller.outside import SecretHolds
from metal3_ipam.core.poolkind import Flag, Rule
from metal3_ipam.poolkinds.netbox.asks import NetBoxAsks, NetBoxPools, SecretTokens
from metal3_ipam.poolkinds.netbox.pool import condition_reason
from metal3_ipam.poolkinds.netbox.source import Reason, check_owner

SURVEY_SECONDS = 60.0


def _sweep_seconds(text: str) -> float:
    try:
        seconds = float(text)
    except ValueError:
        seconds = -1.0
    if not (seconds == 0 or 1 <= seconds <= 86400):
        raise ValueError(f"{text}: expected 0 (never) or 1 to 86400 seconds")
    return seconds


def _release_grace_seconds(text: str) -> float:
    try:
        seconds = float(text)
    except ValueError:
        seconds = -1.0
    if not 0 <= seconds <= 30 * 86400:
        raise ValueError(f"{text}: expected 0 to 2592000 seconds (30 days)")
    return seconds


FLAGS = (
    Flag("netbox-owner", "metal3-ipam", "OWNER",
         "marks the addresses this controller makes in NetBox (<owner>/<key> in their key field); the same in "
         "every cluster claims may be moved to (default metal3-ipam)", parse=check_owner),
    Flag("netbox-sweep-seconds", 300.0, "SECONDS",
         "how often NetBox is swept for addresses of this owner's keys that no claim carries; one is released "
         "when two sweeps this far apart found it so (default 300; 0: never)", parse=_sweep_seconds),
    Flag("netbox-release-grace-seconds", 86400.0, "SECONDS",
         "how long an address the sweep found carried by no claim stays in NetBox marked released (swept=<time> in "
         "its description), for a claim of another cluster carrying its key (a move's target) to take it back, "
         "before the sweep deletes it (default 86400)", parse=_release_grace_seconds),
)

# What the asks call in the API besides what every kind's lifecycle calls.
ROLE_RULES = (
    Rule("", "secrets", ("get",), "a NetBoxIPPool's API token, read from the Secret its spec names "
                                  "(asks.SecretTokens)"),
    Rule("", "secrets", ("patch",), "the finalizer the Secret of a pool's credentials carries while addresses its "
                                    "claims left for another cluster to answer are not judged "
                                    "(controller.outside.SecretHolds)"),
)


def service(parts: Any) -> NetBoxPools:
    """The asks of every NetBoxIPPool, with the runtime's API client, inventory, writer and wake-up."""
    flags = parts.flags
    return NetBoxPools(NetBoxAsks(SecretTokens(parts.api), owner=flags.get("netbox_owner", FLAGS[0].default)),
                       Asking(timeout_reason=condition_reason(Reason.TIMEOUT)), inventory=parts.inventory,
                       writer=parts.writer, wake=parts.wake,
                       may_act=parts.may_act, survey_seconds=SURVEY_SECONDS,
                       sweep_seconds=flags.get("netbox_sweep_seconds", FLAGS[1].default),
                       release_grace_seconds=flags.get("netbox_release_grace_seconds", FLAGS[2].default),
                       secret_holds=SecretHolds(parts.api, lambda: parts.inventory.lock_namespace))


def answers(url: str, timeout: float = 3.0) -> str | None:
    """None when the NetBox at ``url`` answers HTTP at all (its API may still refuse the token); else why not."""
    try:
        with urllib.request.urlopen(f"{url.rstrip('/')}/api/status/", timeout=timeout):
            return None
    except urllib.error.HTTPError:
        return None
    except (OSError, ValueError) as err:
        return str(getattr(err, "reason", None) or err)


def _server(pool: Mapping[str, Any]) -> Mapping[str, Any]:
    spec = pool.get("spec")
    server = spec.get("server") if isinstance(spec, Mapping) else None
    return server if isinstance(server, Mapping) else {}


def unservable(pool: Mapping[str, Any], given: Mapping[str, Mapping[str, Any]] | None = None,
               answers: Callable[[str], str | None] = answers) -> str | None:
    """Why ``metal3-ipam demo`` cannot serve the pool here (the NetBox it names does not answer), or None. (The
    token's Secret is not looked at: NetBox says whether it takes it.)"""
    url = _server(pool).get("url") or ""
    why = answers(url)
    if why is None:
        return None
    return f"NetBox at {url} does not answer ({why}); set spec.server.url and the token Secret to a NetBox of yours"


def secrets(pool: Mapping[str, Any]) -> tuple[str, ...]:
    """The Secret of the pool's token (in its namespace)."""
    ref = _server(pool).get("tokenSecretRef")
    name = ref.get("name") if isinstance(ref, Mapping) else None
    return (name,) if isinstance(name, str) and name else ()
