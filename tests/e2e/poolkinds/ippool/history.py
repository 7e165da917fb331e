"""Every write to a namespace's IPAM objects, recorded from watches and replayed in order.

:class:`NamespaceRecorder` watches pools, IPClaims, IPAddressClaims and the
IPAddresses of both APIs in one namespace and keeps every event. Events of all
kinds are merged by resourceVersion (the API server's etcd revision: one counter
for every write), so :meth:`NamespaceRecorder.replay` rebuilds the namespace as it
was after each single write and checks it there: a double allocation that lasts a
few milliseconds between two polls is still seen.

The checks (:func:`moment_violations`) cover both address kinds and every pool of
the namespace, whatever the objects' names or who wrote them: a claim holds an IP
through a Metal3 IPAddress whose ``spec.claim`` names it (kind IPClaim unless it
says IPAddressClaim) or through a Cluster API IPAddress whose ``claimRef`` names it.

:func:`converged_findings` is the end state, for Cluster API claims served either
way (an IPAddress named after the claim, or the Go controller's ``<namePrefix>-<ip>``).
"""

from __future__ import annotations

import ipaddress
import threading
import time
from collections import defaultdict
from dataclasses import dataclass, field
from typing import Any, Callable, Iterable

from kubernetes import client, watch
from kubernetes.client.rest import ApiException

from controller_fixtures import CAPI, FIN_ADDRESS, FIN_CAPI_ADDRESS, FIN_CAPI_CLAIM, FIN_CLAIM, FIN_POOL, METAL3, \
    Kube, condition
from go_state import go_address_name

POOLS = ("pools", METAL3, "ippools")
IPCLAIMS = ("IPClaim", METAL3, "ipclaims")
CAPI_CLAIMS = ("IPAddressClaim", CAPI, "ipaddressclaims")
ADDRESSES = ("addresses", METAL3, "ipaddresses")
CAPI_ADDRESSES = ("capi_addresses", CAPI, "ipaddresses")
WATCHED = (POOLS, IPCLAIMS, CAPI_CLAIMS, ADDRESSES, CAPI_ADDRESSES)

ClaimKey = tuple[str, str]  # (kind, name)


def ip_of(text: str):
    return ipaddress.ip_address(text)


@dataclass
class Event:
    rv: int
    resource: str          # the first item of one of WATCHED
    type: str              # ADDED | MODIFIED | DELETED
    obj: dict

    @property
    def name(self) -> str:
        return self.obj["metadata"]["name"]


# --------------------------------------------------------------------------- who holds what


def claim_of_address(a: dict) -> ClaimKey | None:
    claim = (a.get("spec") or {}).get("claim") or {}
    if not claim.get("name"):
        return None
    return ("IPAddressClaim" if claim.get("kind") == "IPAddressClaim" else "IPClaim", claim["name"])


def claim_of_capi_address(a: dict) -> ClaimKey | None:
    ref = (a.get("spec") or {}).get("claimRef") or {}
    return ("IPAddressClaim", ref["name"]) if ref.get("name") else None


def is_live(obj: dict | None) -> bool:
    return obj is not None and not obj["metadata"].get("deletionTimestamp")


def is_ours(claim: dict) -> bool:
    """A Cluster API claim is served by an IPPool only when its poolRef says so (group and kind)."""
    ref = (claim.get("spec") or {}).get("poolRef")
    return ref is None or (ref.get("apiGroup") == METAL3[0] and ref.get("kind") == "IPPool")


@dataclass
class State:
    """One namespace's IPAM objects at one moment: resource -> name -> object."""

    objects: dict[str, dict[str, dict]] = field(default_factory=lambda: {r[0]: {} for r in WATCHED})

    @classmethod
    def listed(cls, kube: Kube) -> "State":
        s = cls()
        for resource, gv, plural in WATCHED:
            s.objects[resource] = {o["metadata"]["name"]: o for o in kube.list(gv, plural)}
        return s

    def claims(self) -> dict[ClaimKey, dict]:
        out = {("IPClaim", n): c for n, c in self.objects["IPClaim"].items()}
        out.update({("IPAddressClaim", n): c for n, c in self.objects["IPAddressClaim"].items() if is_ours(c)})
        return out

    def live_claims(self) -> dict[ClaimKey, dict]:
        return {k: c for k, c in self.claims().items() if is_live(c)}

    def holdings(self) -> dict[ClaimKey, dict[Any, list[tuple[str, str]]]]:
        """claim -> IP -> [(resource, address name)], over every address object that exists."""
        out: dict[ClaimKey, dict[Any, list[tuple[str, str]]]] = defaultdict(lambda: defaultdict(list))
        for resource, of in (("addresses", claim_of_address), ("capi_addresses", claim_of_capi_address)):
            for name, a in self.objects[resource].items():
                key = of(a)
                if key is not None:
                    out[key][ip_of(a["spec"]["address"])].append((resource, name))
        return out


def moment_violations(state: State, *, may_hold_two: Iterable[ClaimKey] = ()) -> list[str]:
    """What must never be seen, at any moment: one IP held for two live claims (any pools, any
    address kinds); a live claim holding two different IPs (unless listed in ``may_hold_two``)."""
    found = []
    live = state.live_claims()
    holders: dict[Any, set[ClaimKey]] = defaultdict(set)
    may_hold_two = set(may_hold_two)
    for key, ips in state.holdings().items():
        if key not in live:
            continue
        for ip in ips:
            holders[ip].add(key)
        if len(ips) > 1 and key not in may_hold_two:
            found.append(f"{key[0]} {key[1]} holds {len(ips)} IPs at once: "
                         f"{ {str(ip): names for ip, names in ips.items()} }")
    for ip, keys in holders.items():
        if len(keys) > 1:
            found.append(f"{ip} is held for {len(keys)} live claims at once: {sorted(keys)}")
    return found


# --------------------------------------------------------------------------- the recorder


class NamespaceRecorder:
    """Watches one namespace's IPAM objects from a fresh start; keeps every event.

    Start it before anything of interest is created (its initial lists are the
    starting state); stop it before replaying.
    """

    def __init__(self, control_plane, namespace: str) -> None:
        self.control_plane = control_plane
        self.namespace = namespace
        self.events: list[Event] = []
        self.initial = State()
        self.problems: list[str] = []   # lost events: replaying would be wrong
        self.resumed: list[str] = []    # reconnects, resumed where they stopped
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._threads: list[threading.Thread] = []
        self._api = None

    def __enter__(self) -> "NamespaceRecorder":
        self.start()
        return self

    def __exit__(self, *exc) -> None:
        self.stop()

    def start(self) -> None:
        self._api = self.control_plane.api_client()
        custom = client.CustomObjectsApi(self._api)
        for resource, gv, plural in WATCHED:
            listed = custom.list_namespaced_custom_object(*gv, self.namespace, plural)
            self.initial.objects[resource] = {o["metadata"]["name"]: o for o in listed["items"]}
            rv = listed["metadata"]["resourceVersion"]
            t = threading.Thread(target=self._watch, args=(custom, resource, gv, plural, rv),
                                 name=f"watch {plural}.{gv[0]}", daemon=True)
            self._threads.append(t)
            t.start()

    def stop(self) -> None:
        self._stop.set()
        for t in self._threads:
            t.join(timeout=30)
        if self._api is not None:
            self._api.close()
            self._api = None

    def _watch(self, custom, resource: str, gv, plural: str, rv: str) -> None:
        while not self._stop.is_set():
            w = watch.Watch()
            try:
                for ev in w.stream(custom.list_namespaced_custom_object, *gv, self.namespace, plural,
                                   resource_version=rv, timeout_seconds=2, _request_timeout=30):
                    obj = ev["object"]
                    if ev["type"] == "ERROR":
                        self.problems.append(f"{plural}.{gv[0]}: watch error {obj}")
                        return
                    if ev["type"] not in ("ADDED", "MODIFIED", "DELETED"):
                        continue
                    rv = obj["metadata"]["resourceVersion"]
                    with self._lock:
                        self.events.append(Event(int(rv), resource, ev["type"], obj))
                    if self._stop.is_set():
                        w.stop()
            except ApiException as err:
                self.problems.append(f"{plural}.{gv[0]}: {err.status} {err.reason}")
                return
            except Exception as err:  # a dropped connection: resume from the last resourceVersion
                if self._stop.is_set():
                    return
                self.resumed.append(f"{plural}.{gv[0]}: resumed after {err!r}")
                time.sleep(0.1)  # not a synchronisation: a pause before reconnecting

    def drain(self, kube: Kube, timeout: float = 30.0) -> None:
        """Wait until the latest version of every object that exists now has been recorded."""
        deadline = time.monotonic() + timeout
        for resource, gv, plural in WATCHED:
            for obj in kube.list(gv, plural):
                name, rv = obj["metadata"]["name"], int(obj["metadata"]["resourceVersion"])
                while True:
                    with self._lock:
                        if any(e.resource == resource and e.name == name and e.rv >= rv for e in self.events) \
                                or (name in self.initial.objects[resource] and int(
                                    self.initial.objects[resource][name]["metadata"]["resourceVersion"]) >= rv):
                            break
                    assert time.monotonic() < deadline, \
                        f"the recorder did not see {plural}.{gv[0]} {name} at {rv} within {timeout:g}s {self.problems}"
                    time.sleep(0.05)

    def ordered(self) -> list[Event]:
        with self._lock:
            return sorted(self.events, key=lambda e: e.rv)

    def replay(self, check: Callable[[State, Event], list[str]]) -> list[str]:
        """Apply the events in resourceVersion order; ``check`` after each. Returns every finding
        (with the resourceVersion and the write it followed)."""
        assert not self.problems, f"the recorder lost events: {self.problems}"
        state = State({r: dict(objs) for r, objs in self.initial.objects.items()})
        out = []
        seen: set[tuple[int, str, str, str]] = set()
        for e in self.ordered():
            ident = (e.rv, e.resource, e.type, e.name)
            if ident in seen:  # a resumed watch may repeat its last event
                continue
            seen.add(ident)
            if e.type == "DELETED":
                state.objects[e.resource].pop(e.name, None)
            else:
                state.objects[e.resource][e.name] = e.obj
            for finding in check(state, e):
                out.append(f"after rv {e.rv} ({e.type} {e.resource} {e.name}): {finding}")
        return out


def claims_keep_their_ips(exempt: Iterable[ClaimKey] = ()) -> Callable[[State, Event], list[str]]:
    """A replay check: :func:`moment_violations`, and no live claim's IP ever changes (by claim uid)."""
    exempt = set(exempt)
    first: dict[str, set] = {}

    def check(state: State, _: Event) -> list[str]:
        found = moment_violations(state, may_hold_two=exempt)
        live = state.live_claims()
        for key, ips in state.holdings().items():
            claim = live.get(key)
            if claim is None or not ips or key in exempt:
                continue
            uid = claim["metadata"]["uid"]
            before = first.setdefault(uid, set(ips))
            if set(ips) != before:
                found.append(f"{key[0]} {key[1]} held {sorted(map(str, before))}, now {sorted(map(str, ips))}")
                first[uid] = set(ips)
        return found

    return check


def ips_by_name(state: State, names: set[str]) -> dict[str, str | None]:
    """name -> IP (or None) of the named claims (names are unique across kinds here)."""
    held = state.holdings()
    out = {}
    for key in state.live_claims():
        if key[1] in names:
            ips = held.get(key, {})
            out[key[1]] = str(next(iter(ips))) if len(ips) == 1 else None
    return out


# --------------------------------------------------------------------------- the end state


def converged_findings(kube: Kube, *, expect_errors: Iterable[str] | None = None,
                       error_reasons: Iterable[str] | None = ("PoolExhausted",)) -> tuple[list[str], State]:
    """What is not (yet) as it must end, for addresses of either shape.

    Every live claim: exactly one IP, or an error and no address. An IPClaim's
    status.address names its Metal3 IPAddress. An IPAddressClaim holds its IP by a
    Metal3 IPAddress lock ``<namePrefix>-<ip>`` whose spec.claim names it with kind
    IPAddressClaim, and by exactly one Cluster API IPAddress of that IP, which
    status.addressRef names, with Ready=True. No address of either API outlives
    its claim. Every live pool's status.indexes (IPClaims by name,
    ``IPAddressClaim/<name>`` for the others) and allocated count match its locks.
    ``expect_errors``: claim names allowed to end in error (None: any); ``error_reasons``: the
    Ready reasons a Cluster API claim's error may give (None: any).
    """
    state = State.listed(kube)
    f: list[str] = []
    live = state.live_claims()
    held = state.holdings()
    pools = state.objects["pools"]
    errors_allowed = None if expect_errors is None else set(expect_errors)
    error_reasons = None if error_reasons is None else set(error_reasons)
    for key, c in live.items():
        kind, name = key
        ips = held.get(key, {})
        status = c.get("status") or {}
        ready = condition(c, "Ready")
        if len(ips) > 1:
            f.append(f"{kind} {name} holds {len(ips)} IPs: { {str(i): n for i, n in ips.items()} }")
            continue
        if not ips:
            error = status.get("errorMessage") if kind == "IPClaim" else None
            reason = (ready or {}).get("reason") if (ready or {}).get("status") == "False" else None
            if not (error or reason):
                f.append(f"{kind} {name} has neither an address nor an error (status {status})")
            elif errors_allowed is not None and name not in errors_allowed:
                f.append(f"{kind} {name} has an error: {error or reason} {(ready or {}).get('message')}")
            elif reason and error_reasons is not None and reason not in error_reasons:
                f.append(f"{kind} {name}: unexpected reason {reason} {(ready or {}).get('message')}")
            continue
        (ip, names), = ips.items()
        m3 = [n for r, n in names if r == "addresses"]
        capi = [n for r, n in names if r == "capi_addresses"]
        if len(m3) != 1:
            f.append(f"{kind} {name}: {len(m3)} Metal3 IPAddresses for {ip}: {m3}")
            continue
        lock = state.objects["addresses"][m3[0]]
        pool = pools.get((lock["spec"].get("pool") or {}).get("name"))
        if pool is None:
            f.append(f"{kind} {name}: IPAddress {m3[0]} refers to a missing pool")
            continue
        if m3[0] != go_address_name(pool["spec"]["namePrefix"], str(ip)):
            f.append(f"{kind} {name}: Metal3 IPAddress {m3[0]} is not named <namePrefix>-<ip>")
        if not is_live(lock):
            f.append(f"{kind} {name}: its IPAddress {m3[0]} is being deleted")
        if kind == "IPClaim":
            ref = status.get("address") or {}
            if ref.get("name") != m3[0]:
                f.append(f"IPClaim {name}: status.address {ref}, its address is {m3[0]}")
            if capi:
                f.append(f"IPClaim {name} has Cluster API IPAddresses {capi}")
            if FIN_CLAIM not in (c["metadata"].get("finalizers") or []):
                f.append(f"IPClaim {name} lacks {FIN_CLAIM}")
        else:
            if len(capi) != 1:
                f.append(f"IPAddressClaim {name}: {len(capi)} Cluster API IPAddresses for {ip}: {capi}")
            ref = (status.get("addressRef") or {}).get("name")
            if ref not in capi:
                f.append(f"IPAddressClaim {name}: status.addressRef {ref!r} names none of {capi}")
            if not ready or ready.get("status") != "True":
                f.append(f"IPAddressClaim {name} is bound but Ready is {ready}")
            if FIN_CAPI_CLAIM not in (c["metadata"].get("finalizers") or []):
                f.append(f"IPAddressClaim {name} lacks {FIN_CAPI_CLAIM}")
            for n in capi:
                if FIN_CAPI_ADDRESS not in (state.objects["capi_addresses"][n]["metadata"].get("finalizers") or []):
                    f.append(f"Cluster API IPAddress {n} lacks {FIN_CAPI_ADDRESS}")
        if FIN_ADDRESS not in (lock["metadata"].get("finalizers") or []):
            f.append(f"IPAddress {m3[0]} lacks {FIN_ADDRESS}")

    for resource, of in (("addresses", claim_of_address), ("capi_addresses", claim_of_capi_address)):
        for n, a in state.objects[resource].items():
            if of(a) not in live:
                f.append(f"{resource} {n} outlives its claim {of(a)}")

    for name, p in pools.items():
        if not is_live(p):
            continue
        mine = [a for a in state.objects["addresses"].values() if (a["spec"].get("pool") or {}).get("name") == name]
        expected = {}
        for a in mine:
            kind, claim = claim_of_address(a)
            expected[claim if kind == "IPClaim" else f"IPAddressClaim/{claim}"] = ip_of(a["spec"]["address"])
        status = p.get("status") or {}
        indexes = {k: ip_of(v) for k, v in (status.get("indexes") or {}).items()}
        if indexes != expected:
            f.append(f"IPPool {name} status.indexes {sorted((k, str(v)) for k, v in indexes.items())} != "
                     f"addresses {sorted((k, str(v)) for k, v in expected.items())}")
        if status.get("allocated") != str(len(mine)):
            f.append(f"IPPool {name} status.allocated {status.get('allocated')!r} != {len(mine)}")
        if FIN_POOL not in (p["metadata"].get("finalizers") or []):
            f.append(f"IPPool {name} lacks {FIN_POOL}")
    return f, state


def wait_converged(kube: Kube, timeout: float = 60.0, may_hold_two: Iterable[ClaimKey] = (), **kwargs: Any) -> State:
    """Wait for :func:`converged_findings` to find nothing; fail at once on a :func:`moment_violations` finding."""
    deadline = time.monotonic() + timeout
    while True:
        found, state = converged_findings(kube, **kwargs)
        broken = moment_violations(state, may_hold_two=may_hold_two)
        assert not broken, f"never allowed, in {kube.ns}:\n" + "\n".join(broken)
        if not found:
            return state
        if time.monotonic() >= deadline:
            raise AssertionError(f"{kube.ns} did not converge within {timeout:g}s:\n" + "\n".join(found[:60]))
        time.sleep(0.25)
