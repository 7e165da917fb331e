"""The IP a claim's own status says it holds: kept for it while its address objects are gone.

A user may delete a bound claim's address objects (finalizers stripped: a
mistaken cleanup, a botched restore). The claim lives on, and whatever runs
on its IP does too; it gets that IP back, not the next free one. Which IP
that is, in order of trust:

1. a live address object of the claim, of either API (the reconcile binds
   the claim to it as it is; not read here);
2. the address name its status names, when that name is ``<namePrefix>-<ip>``
   of the pool (an IPClaim's ``status.address``; a Cluster API claim's
   ``status.addressRef`` as the Go Metal3 IPAM names it);
3. its ``Ready`` condition as this controller writes it on binding
   (``True``, ``AddressAllocated``, "bound to <ip>"): all that a Cluster API
   claim's status says of its IP when its address is named after it, and
   all a pool kind whose addresses are named after their claims leaves.

The controller's memory of a binding it made is not trusted: it is gone
after a restart, and a decision must come out the same from the objects
alone (a recompute, the audit, the target of a move). A binding that never
reached the status was never read by a consumer either.

A claim that is preallocated gets that IP as it is; nothing is kept for it.
One that asks for an IP (``ipAddress``) keeps it when its status names that
IP. Nothing is kept for a claim being deleted.

Two live claims whose statuses name one IP while neither holds an address
object (a status rewritten by hand with another claim's, a botched restore)
cannot both get it back. The address objects settle it while they exist: a
claim holding one is bound to it, whatever its status says. Else the IP goes
to the claim an IPAM served (it carries the claim finalizer of one of our
kinds, as one bound by this controller or by the Go IPAM it replaces does;
one that carries none was never served, so nothing runs on that IP for it),
then to the one created first (``precedence``), in whichever pool of the
namespace each one is; the other is given another IP and told why.

A Cluster API IPAddress written by hand before its claim holds a kept IP
against no one while no claim is bound to it (``binds_none``): its claim is
refused that IP, and the keeper takes it back all the same.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from typing import Any

from . import kinds
from . import objects as o
from . import poolkind
from .addresses import AddressError, parse_ip
from .naming import ip_of_name
from .pool import Pool
from .validation import written_before_its_claim

BOUND_REASON = "AddressAllocated"
BOUND_PREFIX = "bound to "


def bound_message(address_text: object) -> str:
    """The Ready message of a bound claim: what ``own_ip`` reads back."""
    return f"{BOUND_PREFIX}{address_text}"


def own_ip(claim: Mapping[str, Any], pool: Pool) -> int | None:
    """The IP ``claim``'s status says it holds in ``pool`` (see the module's order of trust), or None;
    in the pool's units (``Pool.unit_bits``: for a prefix pool, the sub-prefix of that address)."""
    if o.is_deleting(claim) or pool.preallocations.get(o.name(claim)) is not None:
        return None
    ip = _named_ip(claim, pool)
    requested = o.annotations(claim).get(kinds.IP_ADDRESS_ANNOTATION)
    if requested is not None:
        # The IP it asks for, when its status says it holds that one: kept like any other.
        try:
            return ip if ip is not None and int(parse_ip(requested)) == int(pool.address_of(ip)) else None
        except AddressError:
            return None
    return ip


def served(claim: Mapping[str, Any]) -> bool:
    """Whether ``claim`` carries the claim finalizer of one of our pool kinds: an IPAM served it."""
    kind, finalizers = kinds.kind_of(claim), o.finalizers(claim)
    return any(pool_kind.finalizers.claim.get(kind) in finalizers for pool_kind in poolkind.REGISTRY.values())


def precedence(claim: Mapping[str, Any]) -> tuple:
    """The order in which claims whose statuses name one IP, holding no address object, get it back (the least
    first): a claim an IPAM served before one never served, then the one created first, then by kind and name."""
    return (not served(claim), str(o.meta(claim).get("creationTimestamp") or ""), o.claim_key(claim))


def bound_ip(claim: Mapping[str, Any]):
    """The IP a claim's Ready condition says it is bound to, as this controller writes it (netaddr), or None."""
    ready = o.condition(o.status(claim), "Ready")
    message = ready.get("message") if ready else None
    if not (ready and ready.get("status") == "True" and ready.get("reason") == BOUND_REASON
            and isinstance(message, str) and message.startswith(BOUND_PREFIX)):
        return None
    try:
        ip = parse_ip(message[len(BOUND_PREFIX):])
    except AddressError:
        return None
    return ip.ipv4() if ip.version == 6 and ip.is_ipv4_mapped() else ip


def named_ip(claim: Mapping[str, Any], pool: Pool) -> int | None:
    """The IP (in the pool's units) ``claim``'s status names, by its address's name or its Ready condition,
    whatever it asks for; None for a claim being deleted or a status naming none."""
    return None if o.is_deleting(claim) else _named_ip(claim, pool)


def status_ref(claim: Mapping[str, Any]) -> Mapping[str, Any] | None:
    """The address a claim's status names (an IPClaim's ``address``, a Cluster API claim's ``addressRef``)."""
    ref = o.status(claim).get("address" if kinds.kind_of(claim) == kinds.IPCLAIM else "addressRef")
    return ref if isinstance(ref, Mapping) else None


def _named_ip(claim: Mapping[str, Any], pool: Pool) -> int | None:
    capi = kinds.kind_of(claim) != kinds.IPCLAIM
    ref = status_ref(claim)
    # A Cluster API address of this controller is named after its claim: that name says nothing of its IP.
    if ref is not None and pool.name_prefix and ref.get("namespace") in (None, "", o.namespace(claim)) \
            and not (capi and ref.get("name") == o.name(claim)):
        ip = ip_of_name(pool.name_prefix, str(ref.get("name") or ""), pool.version)
        if ip is not None:
            return pool.unit_of(int(ip))
    ip = bound_ip(claim)
    return pool.unit_of(int(ip)) if ip is not None and ip.version == pool.version else None



def binds_none(address: Mapping[str, Any], claim: Mapping[str, Any] | None) -> bool:
    """Whether ``address`` is a Cluster API IPAddress written before its claim (by hand, or restored) that no claim
    is bound to: ``claim``, the claim it names (None when there is none), has no status naming it. Such an address
    is not taken up while the IP is kept for another claim, so it keeps that IP from no keeper."""
    if kinds.kind_of(address) != kinds.CAPI_ADDRESS or not written_before_its_claim(address):
        return False
    return claim is None or not names(claim, address)


def let_go_span(claim: Mapping[str, Any]) -> tuple[int, int] | None:
    """The span (first and last address, as integers) whose naming another pool's allocation removed from the
    claim, taking it (``kinds.LET_GO_ANNOTATION``), when the claim names nothing since or a span apart from it (its
    next pass named elsewhere: the refused pass's objects may land after that naming); else None. What a pass of
    the claim's own pool made there before that write is never bound (its status write was refused) and goes
    (``reconcile``'s ``fenced_leftovers``)."""
    annotations = o.annotations(claim)
    span = text_span(annotations.get(kinds.LET_GO_ANNOTATION))
    if span is None or kinds.ALLOCATING_ANNOTATION not in annotations:
        return span
    named = text_span(annotations.get(kinds.ALLOCATING_ANNOTATION))
    return span if named is not None and (named[1] < span[0] or span[1] < named[0]) else None


def let_go_from(claim: Mapping[str, Any]) -> frozenset[tuple[str, str, str]]:
    """The claims (kind, name and uid) whose span let go meets what ``claim``'s allocation named, as that allocation
    wrote them (``kinds.LET_GO_FROM_ANNOTATION``): incarnations that lived in this cluster and were fenced there."""
    text = o.annotations(claim).get(kinds.LET_GO_FROM_ANNOTATION)
    found = set()
    for entry in text.split(",") if isinstance(text, str) else ():
        kind_name, _, uid = entry.partition("=")
        kind, _, name = kind_name.partition("/")
        if kind and name and uid:
            found.add((kind, name, uid))
    return frozenset(found)


def let_go_entry(claim: Mapping[str, Any]) -> str:
    """How ``let_go_from`` lists a claim: ``<kind>/<name>=<uid>``."""
    return f"{claim.get('kind')}/{o.name(claim)}={o.meta(claim).get('uid')}"


def text_span(text: object) -> tuple[int, int] | None:
    """The first and last address of an IP or sub-prefix written as text (``fd00::1``, ``fd00::/127``), or None."""
    if not isinstance(text, str):
        return None
    ip_text, _, length = text.partition("/")
    try:
        ip = parse_ip(ip_text)
        bits = (32 if ip.version == 4 else 128) - (int(length) if length else (32 if ip.version == 4 else 128))
    except (AddressError, ValueError):
        return None
    if bits < 0:
        return None
    first = int(ip) >> bits << bits
    return first, first + (1 << bits) - 1


def left_by_a_refused_pass(address: Mapping[str, Any], claim: Mapping[str, Any] | None) -> bool:
    """Whether ``address`` is what a refused pass of its claim's pool left: inside the span ``let_go_span`` says
    another pool's allocation took, and not named by its claim's status: it holds nothing for that claim, and
    goes."""
    span = let_go_span(claim) if claim is not None else None
    ip = o.address_ip(address)
    return span is not None and ip is not None and span[0] <= int(ip) <= span[1] and not names(claim, address)


def left_by_an_earlier_incarnation(address: Mapping[str, Any], claim: Mapping[str, Any] | None,
                                   takers: Iterable[Mapping[str, Any] | None],
                                   separate_network: Callable[[Any], bool] = lambda key: False) -> bool:
    """Whether ``address`` is what a refused pass of an earlier incarnation of its claim's name left in this cluster
    (``claim`` is the live one, or None): one of ``takers`` (the live claims holding its IP) names a span holding it,
    handed to it by an allocation that let that incarnation's naming go (``let_go_from``), and ``address`` is owned
    by that incarnation, or by none (``_claim_reference_collected``: the garbage collector took the reference off
    once it was gone, while another incarnation of the name was let go). That incarnation was deleted before it
    carried a finalizer (nothing released its objects); they hold nothing for anyone. An object of another uid
    that a move or a restore brought is of an incarnation no allocation here let go: never one. A taker of a pool
    marked a separate network since (``separate_network``, of its pool key) takes nothing from the namespace's
    pools: what it let go is no leftover of theirs any more, and the objects there may be a live claim's."""
    ip, named = o.address_ip(address), o.claim_named_by(address)
    if ip is None or named is None or not of_another_incarnation(address, claim):
        return False
    kind, name = named[0][1], named[2]
    owner, live = o.claim_uid_of(address, (kind, name)), o.meta(claim).get("uid") if claim is not None else None
    for taker in takers:
        if taker is None or separate_network(o.pool_of(taker)):
            continue
        uids = {uid for k, n, uid in let_go_from(taker) if (k, n) == (kind, name)} - {live, o.meta(taker).get("uid")}
        span = text_span(o.annotations(taker).get(kinds.ALLOCATING_ANNOTATION))
        if (owner in uids if owner is not None else uids) and span is not None and span[0] <= int(ip) <= span[1]:
            return True
    return False


def of_another_incarnation(address: Mapping[str, Any], claim: Mapping[str, Any] | None) -> bool:
    """Whether ``address`` is owned by an incarnation of its claim's name other than ``claim`` (the live one, or
    None), or by none once it had one (``_claim_reference_collected``)."""
    named = o.claim_named_by(address)
    if named is None:
        return False
    owner = o.claim_uid_of(address, (named[0][1], named[2]))
    if owner is None:
        return _claim_reference_collected(address)
    return claim is None or o.meta(claim).get("uid") != owner


def _claim_reference_collected(address: Mapping[str, Any]) -> bool:
    """Whether ``address`` lacks the owner reference to its claim that this controller writes (a Cluster API
    IPAddress's, a namespaced pool's lock's) and keeps the one to its pool: the garbage collector takes off the
    reference to an owner gone while another owner lives."""
    pool, refs = o.pool_of(address), o.owner_references(address)
    pool_kind = poolkind.REGISTRY.get(pool.kind) if pool is not None else None
    if pool_kind is None or (kinds.kind_of(address) != kinds.CAPI_ADDRESS and pool_kind.cluster_scoped):
        return False
    return any(r.get("kind") == pool.kind[1] and r.get("name") == pool.name for r in refs) \
        and not any(r.get("kind") in (kinds.CAPI_CLAIM[1], kinds.IPCLAIM[1]) for r in refs)


def names(claim: Mapping[str, Any], address: Mapping[str, Any]) -> bool:
    """Whether ``claim``'s status names ``address`` (of its namespace): by name, or by the IP its Ready condition
    says it is bound to."""
    ref = status_ref(claim)
    if ref is not None and ref.get("name") == o.name(address) \
            and ref.get("namespace") in (None, "", o.namespace(address)):
        return True
    ip = bound_ip(claim)
    return ip is not None and ip == o.address_ip(address)
