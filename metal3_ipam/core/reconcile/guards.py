"""An IP guarded across pools and namespaces: the guards an allocation across a global pool and a namespaced
one writes in the claim's namespace, and what holds an IP that this pool's own addresses do not show
(``Guards``)."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from .. import kinds
from .. import objects as o
from ..actions import Create, Delete, SetMetadata
from ..addresses import FAMILY_BITS, AddressError, ip_from_int, parse_ip
from ..kept import bound_ip, let_go_entry, text_span
from ..naming import address_label, guard_name, ip_text
from ..overlap import separate_network
from ..poolkind import kind_named
from .binding import _settled, _settled_after
from .pieces import _instant, _ip_of, _owned_by, _owner, _passed
from .state import PassState

# The most guards one allocation writes: a namespaced IP or sub-prefix that would take more is not handed out
# (its allocation could not be guarded against the global pools').
GUARDS_PER_ALLOCATION = 256


@dataclass(frozen=True)
class Span:
    """What one guard stands for: an IP (``length`` None), or a global prefix pool's sub-prefix. ``shared``: a
    global prefix pool's sub-prefix as the namespace's pools hold it (IPs or smaller sub-prefixes of it, for
    many claims): owned by those pools, not by a claim, and kept until they are all gone."""

    ip: int
    length: int | None = None
    shared: bool = False


def _span_base(guard: dict, ip) -> int:
    """The first address of the span a guard is part of: its IP, or its sub-prefix's base (``spec.prefix``)."""
    length, width = o.spec(guard).get("prefix"), FAMILY_BITS[ip.version]
    bits = width - length if isinstance(length, int) and not isinstance(length, bool) and 0 <= length <= width else 0
    return int(ip) >> bits << bits


def held_by_pools(guard: dict) -> bool:
    """A guard the namespace's pools own (``Span.shared``), with the claims holding IPs under it; not a claim's."""
    return any(_names_a_pool(r) for r in o.owner_references(guard))


def _names_a_pool(ref: dict) -> bool:
    """Whether an owner reference names a pool (of a kind registered)."""
    return kind_named((kinds.group_of(str(ref.get("apiVersion") or "")), str(ref.get("kind")))) is not None


class Guards(PassState):
    """The guards of an allocation in a claim's namespace, and what holds an IP elsewhere."""

    def guard_spans(self, claim: dict, unit: int) -> list[Span] | None:
        """What handing ``unit`` to ``claim`` guards in the claim's namespace before its lock. Two allocations
        that meet in a namespace (a global pool's and a namespaced one's) write one guard of the same name, which
        the API server gives once, whatever each pass saw of the other pool's spec: a pass is carried out later
        than it was made (a replica behind, or slow), after the other pool was created, edited or deleted and the
        other allocation landed, so the name must not depend on what the pools' specs are when it is made. Of
        two aligned spans that meet, one holds the other; the larger one's allocation writes the guard of its
        own span (``<base>.<length>.nsip``, or ``<ip>.nsip``), and the smaller one's joins the guard of the
        span of that length holding it, shared by its pool (a sub-prefix length is immutable, so a pool's is
        known whatever became of its prefixes):

        - a global pool's allocation (but a separate network's) guards its IP or sub-prefix, and joins the
          guard of each larger sub-prefix of the lengths the prefix pools of the claim's namespace hand out
          (``namespaced_lengths``, whatever their prefixes now, one being deleted too);
        - a namespaced pool's guards its own IP (a kind that ``guards_every_ip``; of another kind, while a global
          IP pool exists, whatever its addresses) or sub-prefix (a prefix pool), each IP of it that a global IP
          pool holds (or one being deleted held), and joins, of each global
          prefix pool, the guard of the sub-prefix holding it (whatever that pool's prefixes now) or of those
          inside it the pool holds, for the namespace's pools; and for a claim a global pool's allocation fenced
          (``kinds.FENCED_ANNOTATION``), each IP of its span (up to ``GUARDS_PER_ALLOCATION``) as if a global IP
          pool held it: a view of the pools older than that write (a replica behind) may know of no global pool,
          and the allocation that fenced it holds its guard of the IP it handed out.

        The orders with no length to go by (a global pool's pass made before a namespaced prefix pool existed,
        its pool edited off the span meanwhile; a namespaced pool's pass made before a global pool existed, its
        pool edited or deleted meanwhile) meet on the claim of the pass made first (``order_actions``): a
        namespaced prefix pool's allocation guards what such claims of global pools name (``named_spans``), and a
        global pool's keeps off what such claims of the namespace's pools name (``named_taken``), paused ones too
        (read, not written). A paused claim that names nothing yet is not written: its pass is met by the guards
        of ``paused_spans``, or, where its pool's allocation guards by no name a global one's could meet, a global
        pool's allocation in its namespace waits for it (``paused_unmet``). None: more than
        ``GUARDS_PER_ALLOCATION`` guards, which the namespaced pool does not hand out."""
        kind, pool = self.kind, self.pool
        if pool is None or kind.outside is not None:
            return []
        first, width = int(pool.address_of(unit)), FAMILY_BITS[pool.version]
        own = _span(first, pool.unit_length, width)
        if kind.cluster_scoped:
            if separate_network(self.pool_obj):
                return []
            longest = pool.unit_length if pool.unit_length is not None else width
            paused = self.paused_spans(o.namespace(claim), first, first + (1 << pool.unit_bits) - 1)
            if paused is None:
                return None
            return list(dict.fromkeys([own] + paused)) + [
                Span(first >> (width - length) << (width - length), length, shared=True)
                for length in self.snap.namespaced_lengths(o.namespace(claim), pool.version) if length < longest]
        if not kind.unique_in_namespace:
            return []
        last = first + (1 << pool.unit_bits) - 1
        ips = self.snap.global_held(pool.version, first, last, GUARDS_PER_ALLOCATION)
        if ips is not None and kinds.FENCED_ANNOTATION in o.annotations(claim):
            ips = sorted(set(ips) | set(_each_ip(first, last)))
        elif ips is not None and first == last and first not in ips and (
                kind.guards_every_ip or self.snap.global_ip_pool_exists(pool.version)):
            ips = [first]
        blocks = self.snap.global_blocks(pool.version, first, last, GUARDS_PER_ALLOCATION)
        if ips is None or blocks is None or len(ips) + len(blocks) > GUARDS_PER_ALLOCATION:
            return None
        mine = [own] if kind.holds_prefixes else []
        paused = self.paused_spans(o.namespace(claim), first, last) if kind.holds_prefixes else []
        if paused is None:
            return None
        exclusive = list(dict.fromkeys(mine + [Span(ip) for ip in ips] + (
            self.named_spans(o.namespace(claim), first, last) if kind.holds_prefixes else []) + paused))
        shared = [span for span in (_span(base, length, width, shared=True) for base, length in blocks)
                  if Span(span.ip, span.length) not in exclusive and span not in exclusive]
        if len(exclusive) + len(shared) > GUARDS_PER_ALLOCATION + len(mine):  # its own guard aside
            return None
        return exclusive + shared

    def in_flight(self, namespace: str) -> list[dict]:
        """The claims of the other side in ``namespace`` whose pass may be on its way (``waiting``), but those paused
        (or left to another controller by the watch filter), which are not written."""
        if namespace not in self._in_flight:
            self._in_flight[namespace] = [c for c in self.waiting(namespace) if not self.claim_paused(c)]
        return self._in_flight[namespace]

    def waiting(self, namespace: str) -> list[dict]:
        """The claims of the other side in ``namespace`` whose pass may be on its way, read once a pass for each
        namespace: for a namespaced prefix pool, of global pools, into a sub-prefix of this pool
        (``Snapshot.global_claims_in_flight``); for a global pool, of the namespace's pools
        (``Snapshot.namespaced_claims_in_flight``). Paused ones too: not written, but read."""
        if namespace not in self._waiting:
            self._waiting[namespace] = self.snap.namespaced_claims_in_flight(namespace, self.pool.version) \
                if self.kind.cluster_scoped \
                else self.snap.global_claims_in_flight(namespace, self.pool.version, self.pool.unit_length)
        return self._waiting[namespace]

    def fences(self) -> bool:
        """Whether an allocation of this pool writes the claims ``in_flight`` of the other side: a global pool's
        (but a separate network's), and a namespaced prefix pool's that keeps its IPs apart."""
        if self.kind.outside is not None:
            return False
        if self.kind.cluster_scoped:
            return not separate_network(self.pool_obj)
        return self.kind.holds_prefixes and self.kind.unique_in_namespace

    def names_allocation(self) -> bool:
        """Whether an allocation of this pool names on its claim what it hands out, first: a global pool's (but a
        separate network's), and a namespaced pool's that keeps its IPs apart."""
        if self.kind.outside is not None:
            return False
        return not separate_network(self.pool_obj) if self.kind.cluster_scoped else self.kind.unique_in_namespace

    def named_taken(self, claim: dict, unit: int) -> bool:
        """For a global pool: whether the IP or sub-prefix ``unit`` meets a span a claim of the namespace's pools
        ``waiting`` names as being handed to it (its pass may land: ``order_actions``), one paused too (which is
        read, not written: the allocation keeps off what it names)."""
        if not self.fences() or not self.kind.cluster_scoped:
            return False
        width = FAMILY_BITS[self.pool.version]
        first, last = self.pool.span_of(unit)
        for other in self.waiting(o.namespace(claim)):
            span = self.named(other, claim)
            if span is not None and span.ip <= last and first <= _span_end(span, width):
                return True
        return False

    def named(self, other: dict, claim: dict) -> Span | None:
        """What a claim of the other side names as being handed to it by a pass that may still land; none once
        that naming is older than a lock is left to its maker (``lock_settle_seconds``): its pass landed, or it is
        let go. Until then ``claim`` (the one it keeps off) is due a pass when it is.

        Letting it go takes nothing from that pass, however late it lands: the allocation that takes the span
        writes the claim first (``order_actions``, on condition that it is unchanged since read), removing the
        naming (``fence``), which refuses the pass's status write, and a claim so fenced does not take up what
        that pass created (``fenced_leftovers``).
        The time is the naming writer's clock, so it only spares a pass on its way a refusal. A paused claim is
        not written: what it names is kept whatever its age. A naming of no time that can be read is given one
        (``stamp``): this pass's, written with the fence."""
        span = _allocating(other, self.pool.version)
        if span is None or self.claim_paused(other):
            return span
        since = _naming_time(other)
        if since is None:
            self.stamp(other)
            since = self.snap.now
        settled = _settled_after(since, self.snap.lock_settle_seconds)
        if settled is None:
            return span  # nothing is left to a maker: kept
        if _passed(settled, self.snap.now):
            return None
        self.due_then(claim, settled)
        return span

    def stamp(self, other: dict) -> None:
        """A claim of the namespace's pools naming a span with no time that can be read (written before
        ``allocating-since`` existed, or the annotation edited) is given this pass's time, with the fence
        (``order_actions``), once: a pass of its pool on its way is refused at its status write, and the naming
        is let go once that time has settled. The namespace's allocations of this pass wait for the next one
        (its fences would expect the version read)."""
        key = o.claim_key(other)
        if key in self.stamped:
            return
        self.stamped.add(key)
        self.fenced.add(o.namespace(other))
        read = o.meta(other).get("resourceVersion")
        step = self.plan.step(f"{key[0]} {o.namespace(other)}/{key[1]}", about=o.ref(other))
        step.add(SetMetadata(o.ref(other), annotations=self.fence(other), resource_version=read))

    def fence(self, other: dict, first: int | None = None, last: int | None = None) -> dict[str, str | None]:
        """What an allocation's write of a claim of the other side sets (``order_actions``): the version it read;
        for a global pool, the naming removed once it is let go and this allocation's span ``first``..``last``
        meets it (``named``: what the claim's pass left there is then not taken up, ``fenced_leftovers``; a
        naming of a span this allocation does not take stays, and so is what it names taken up: nothing of the
        other side holds it), or a time given to one that has none that can be read (``stamp``). A claim whose guard
        of that span this allocation lets go by time (``letting_go``, either side) has its naming of it removed so
        too, whatever the naming's time."""
        fence: dict[str, str | None] = {kinds.FENCED_ANNOTATION: str(o.meta(other).get("resourceVersion"))}
        span = _allocating(other, self.pool.version)
        stalled = o.claim_key(other) in self.letting_go
        if not (self.kind.cluster_scoped or stalled) or span is None:
            return fence
        since = _naming_time(other)
        if since is None and not stalled:
            fence[kinds.ALLOCATING_SINCE_ANNOTATION] = self.snap.now
            return fence
        settled = _settled_after(since, self.snap.lock_settle_seconds) if since is not None else None
        meets = first is not None and last is not None and span.ip <= last \
            and first <= _span_end(span, FAMILY_BITS[self.pool.version])
        if meets and (stalled or (settled is not None and _passed(settled, self.snap.now))):
            fence.update({kinds.ALLOCATING_ANNOTATION: None, kinds.ALLOCATING_SINCE_ANNOTATION: None,
                          kinds.LET_GO_ANNOTATION: str(o.annotations(other).get(kinds.ALLOCATING_ANNOTATION))})
        return fence

    def due_then(self, claim: dict, settled: str) -> None:
        """``claim`` is due a pass at ``settled`` (what keeps an IP from it is let go then), or sooner."""
        key = o.claim_key(claim)
        self.ledger.deadlines[key] = min(self.ledger.deadlines.get(key, settled), settled, key=_instant)

    def paused_unmet(self, claim: dict) -> dict | None:
        """For a global pool (but a separate network's): a claim of the namespace's pools ``waiting`` whose own
        Cluster is paused (the claim itself unchanged: a pass made before the claim was paused is refused), that
        names nothing being handed to it and whose pool's allocation guards its span by no name this pool's could
        meet (``namespaced_units`` None: an IPPool's made while no global IP pool existed, or a prefix pool's
        gone, whose length went with it). A pass of its pool made before the pause may still land on any IP its
        pool held, and neither refuses the other: an allocation to a claim of that namespace waits until that
        claim is unpaused (then written), names what it is handed, is served or is gone. None when none is."""
        if not self.fences() or not self.kind.cluster_scoped or self.pool is None:
            return None
        version = self.pool.version
        for other in self.waiting(o.namespace(claim)):
            if o.is_paused(other) or not self.cluster_paused(o.namespace(other), o.cluster_name_of(other)):
                continue
            if _allocating(other, version) is None and self.snap.namespaced_units(other, version) is None:
                return other
        return None

    def named_spans(self, namespace: str, first: int, last: int) -> list[Span]:
        """The IPs and sub-prefixes inside ``first``..``last`` that the claims ``waiting`` name as being handed to
        them (``kinds.ALLOCATING_ANNOTATION``), paused ones too: guarded as their global pool's allocation guards
        them; and a sub-prefix named that holds this span whole (of a global pool gone, whose length is known only
        so), its guard joined as the namespace's pools join that of a global pool's sub-prefix holding theirs."""
        spans = []
        for claim in self.waiting(namespace):
            span = _allocating(claim, self.pool.version)
            width = FAMILY_BITS[self.pool.version]
            if span is None:
                continue
            end = _span_end(span, width)
            if first <= span.ip and end <= last:
                spans.append(span)
            elif span.ip <= first and last <= end:
                spans.append(Span(span.ip, span.length, shared=True))
        return spans

    def paused_spans(self, namespace: str, first: int, last: int) -> list[Span] | None:
        """Each IP or sub-prefix inside ``first``..``last`` (this allocation's span) that a paused claim of the other
        side in ``namespace``, holding no address, may be handed there by a pass of its pool made before the pause,
        and that is smaller than this span, guarded as that pool's allocation guards it: a paused claim is not
        written (``order_actions``), and what that pass hands out is not known (its pool may have been edited
        since). For a namespaced prefix pool, of the global pools' claims (``global_claims_in_flight``); for a
        global pool, of the namespace's pools' (``namespaced_claims_in_flight``) whose allocation guards its span by
        a name (not an IPPool's, which guards its IP only while a global IP pool exists, nor a prefix pool's gone,
        whose length is lost: an allocation waits for those, ``paused_unmet``). None: more than
        ``GUARDS_PER_ALLOCATION``."""
        version, width = self.pool.version, FAMILY_BITS[self.pool.version]
        length_here = self.pool.unit_length or width
        units_of = self.snap.namespaced_units if self.kind.cluster_scoped else self.snap.global_units
        found = [(c, units_of(c, version)) for c in self.waiting(namespace)]
        spans: dict[Span, None] = {}
        for claim, units in found:
            if not (o.is_paused(claim) or self.cluster_paused(o.namespace(claim), o.cluster_name_of(claim))):
                continue
            for length in sorted(units or ()):
                if length <= length_here:
                    continue  # its allocation's span holds this one: their guards meet by name (``guard_spans``)
                step = 1 << (width - length)
                if len(spans) + (last - first + 1) // step > GUARDS_PER_ALLOCATION:
                    return None
                spans.update((_span(base, length, width), None) for base in range(first, last + 1, step))
        return list(spans)

    def fencing_waits(self, claim: dict) -> bool:
        """Whether this pass made an allocation that writes the claims ``in_flight`` of the claim's namespace
        already: the next one there waits for the next pass (each write expects the version the pass read, so a
        second would be refused)."""
        return o.namespace(claim) in self.fenced and self.fences() and bool(self.in_flight(o.namespace(claim)))

    def order_actions(self, claim: dict, unit: int, stalled: Sequence[tuple[dict, dict]] = ()) -> list:
        """What orders this allocation with a pass of the other side made before it could see this one, written
        first, each on condition that its claim is unchanged since this pass read it. A global pool's, and a
        namespaced pool's keeping its IPs apart, names on its claim the IP or sub-prefix it hands out (a pass of the
        other side that read the claim before guards it or keeps off it, and one that wrote the claim since refuses
        this). A global pool's, and a namespaced prefix pool's, writes each claim of the other side ``in_flight``
        (a pass of that claim's pool that read it before is refused; one that wrote it first was read by this
        pass, which guards what it names or keeps off it, or this write is refused). Two passes that never saw
        each other thus meet on the claim of the one made first, whose versions the API server orders: of a pass
        made before the other side's pool existed, and that pool's pass made after the first one's pool was
        edited off the IP or deleted, one is refused. The naming lists the claims whose span let go (by these
        writes, the fences of ``stalled`` claims, or before) meets this one (``let_go_from``)."""
        if not self.names_allocation():
            return []
        ip = ip_text(self.pool.address_of(unit))
        text = ip if self.pool.unit_length is None else f"{ip}/{self.pool.unit_length}"
        naming: dict[str, str | None] = {kinds.ALLOCATING_ANNOTATION: text,
                                         kinds.ALLOCATING_SINCE_ANNOTATION: self.snap.now}
        if kinds.FENCED_ANNOTATION in o.annotations(claim):
            naming[kinds.FENCED_ANNOTATION] = None  # read: this naming comes after it
        first, last = self.pool.span_of(unit)
        if kinds.LET_GO_ANNOTATION in o.annotations(claim):
            # A span let go that this naming meets is its own again (taken back, ``taken_back``); one apart from it
            # stays let go: the refused pass's objects there may land after this naming (``fenced_leftovers``).
            let_go = text_span(o.annotations(claim)[kinds.LET_GO_ANNOTATION])
            if let_go is None or (let_go[0] <= last and first <= let_go[1]):
                naming[kinds.LET_GO_ANNOTATION] = None
        back = self.taken_back(claim, first, last)
        if back is not None or kinds.TAKEN_BACK_ANNOTATION in o.annotations(claim):
            naming[kinds.TAKEN_BACK_ANNOTATION] = back
        fences = [(other, self.fence(other, first, last)) for other in self.in_flight(o.namespace(claim))] \
            if self.fences() else []
        let_go_from = _let_go_from([*fences, *stalled], first, last)
        if let_go_from is not None or kinds.LET_GO_FROM_ANNOTATION in o.annotations(claim):
            naming[kinds.LET_GO_FROM_ANNOTATION] = let_go_from
        actions: list = [SetMetadata(o.ref(claim), annotations=naming,
                                     resource_version=o.meta(claim).get("resourceVersion"))]
        if not self.fences():
            return actions
        self.fenced.add(o.namespace(claim))
        return actions + [SetMetadata(o.ref(other), annotations=fence,
                                      resource_version=o.meta(other).get("resourceVersion")) for other, fence in fences]

    def taken_back(self, claim: dict, first: int, last: int) -> str | None:
        """The span (as written) let go from ``claim`` that its naming of ``first``..``last`` meets: taken back
        (``kinds.LET_GO_ANNOTATION``, or ``kinds.TAKEN_BACK_ANNOTATION`` written in its place by a naming before,
        whose pass may have stopped before its guard there was made anew). Its guard of that span, as a view
        behind may hold it, is in doubt (``guard_actions``): another allocation may have taken the guard's name
        meanwhile. None when there is none, or the claim's pool names nothing (``names_allocation``)."""
        if not self.names_allocation():
            return None
        for name in (kinds.LET_GO_ANNOTATION, kinds.TAKEN_BACK_ANNOTATION):
            text = o.annotations(claim).get(name)
            span = text_span(text)
            if span is not None and span[0] <= last and first <= span[1]:
                return str(text)
        return None

    def guard_at(self, namespace: str, span: Span) -> dict | None:
        """The guard of ``span`` in ``namespace``, if one is stored."""
        return self.snap.address_named(namespace, guard_name(ip_from_int(span.ip, self.pool.version), span.length))

    def guard_holds(self, guard: dict, claim: dict | None = None) -> bool:
        """Whether a guard keeps its IP for a claim other than ``claim``: its claim lives (the incarnation it
        owns) and is bound to no other address (until its address shows, its allocation may be on its way; a
        sub-prefix's guards name its length). Else it is left over (its allocation refused, its claim gone) and
        whoever wants the IP deletes it. So is one whose claim is bound to none and whose lock is not stored,
        once it is older than a stored lock is left to its maker (``lock_settle_seconds``): its pass stopped
        before its lock, and its claim may wait for good (the IP owned by a namespaced pool since). One the
        namespace's pools own holds until the garbage collector takes it (their liveness as a cache shows it is
        no reason to delete it)."""
        if held_by_pools(guard):
            return True
        holder = self.holder(guard)
        if holder is None or (claim is not None and _owned_by(guard, claim)):
            return False
        bound, guarded = bound_ip(holder), _ip_of(guard)
        if bound is None:
            return guarded is None or self.lock_stored(guard, holder, guarded) or not self.settled(guard, claim)
        return guarded is not None and bound.version == guarded.version and int(bound) == _span_base(guard, guarded)

    def holder(self, guard: dict) -> dict | None:
        """The live claim a guard (not the namespace's pools') stands for: the incarnation owning it; else None."""
        ref = o.spec(guard).get("claim") or {}
        kind = (kinds.group_of(str(ref.get("apiVersion") or kinds.METAL3_API_VERSION)), str(ref.get("kind") or
                                                                                         kinds.IPCLAIM[1]))
        holder = self.snap.claim_named(kind, o.namespace(guard), str(ref.get("name") or ""))
        return holder if holder is not None and _owned_by(guard, holder) else None

    def stalled_holder(self, guard: dict) -> dict | None:
        """The live claim, bound to none, of a guard found left over (``guard_holds``: its lock not stored, the guard
        settled): the rest of its pass may still land (a slow replica), so an allocation taking the span writes that
        claim first (``guard_actions``). None for any other."""
        if held_by_pools(guard):
            return None
        holder = self.holder(guard)
        return holder if holder is not None and bound_ip(holder) is None else None

    def lock_stored(self, guard: dict, holder: dict, guarded) -> bool:
        """Whether an address of the guard's claim (its lock, or its Cluster API IPAddress) at the guarded IP or
        sub-prefix is stored: in the guard's namespace, or the lock namespace (a global pool's locks)."""
        base = _span_base(guard, guarded)
        for namespace in {o.namespace(guard), self.snap.lock_namespace}:
            for address in self.snap.addresses_at(namespace, guarded.version, base):
                capi = kinds.kind_of(address) == kinds.CAPI_ADDRESS
                named = (o.claim_of_capi_address if capi else o.claim_of_address)(address)
                if o.is_guard(address) or named is None or named[1] != o.name(holder):
                    continue
                if (named[2] if len(named) > 2 else o.namespace(address)) == o.namespace(holder):
                    return True
        return False

    def settled(self, guard: dict, claim: dict | None) -> bool:
        """Whether a guard whose lock is not stored is old enough to be let go; until then ``claim`` (the one
        wanting its IP) is due a pass when it is."""
        settled = _settled(guard, self.snap.lock_settle_seconds)
        if settled is None or _passed(settled, self.snap.now):
            return True
        if claim is not None:
            self.due_then(claim, settled)
        return False

    def span_taken(self, claim: dict, span: Span) -> bool:
        """Whether the guard of ``span`` keeps it from ``claim``: a live claim's guard (but its own), a global
        prefix pool's sub-prefix the namespace's pools hold (for a global pool's claim), or such a guard being
        deleted (for a namespaced pool's: it waits for it to go)."""
        found = self.guard_at(o.namespace(claim), span)
        if found is None:
            return False
        if held_by_pools(found):
            return not span.shared or o.is_deleting(found)
        return self.guard_holds(found, claim)

    def guards_of(self, claim: dict, addresses: list[dict]) -> list[dict]:
        """The guards of the claim's IPs that ``addresses`` hold (those of each IP or sub-prefix in them it
        guarded), stored and its own: they go with its lock (the garbage collector would take them once the
        claim is gone). Those the namespace's pools own stay."""
        found, pool = [], self.pool
        for address in addresses:
            ip = _ip_of(address)
            if ip is None or pool is None or ip.version != pool.version:
                continue
            unit = pool.unit_of(int(ip))
            spans = self.guard_spans(claim, unit) or []
            if not self.kind.cluster_scoped and self.kind.unique_in_namespace:  # a fenced claim's (``guard_spans``)
                spans += [Span(each) for each in _each_ip(*pool.span_of(unit))]
            for span in dict.fromkeys(spans):
                guard = None if span.shared else self.guard_at(o.namespace(claim), span)
                if guard is not None and _owned_by(guard, claim) and not o.is_deleting(guard):
                    found.append(guard)
        return found

    def guard_actions(self, claim: dict, unit: int) -> list:
        """What guards ``unit`` for ``claim`` before its lock is written: for each span, its guard created (a
        left-over one of that name deleted first, that incarnation only: ``left_over``), or, one the namespace's
        pools own, this pool added to its owners (on condition that it is unchanged since read); nothing for a
        guard it has already, or when it needs none."""
        spans = self.guard_spans(claim, unit) or []
        stalled = {}
        for span in spans:
            found = self.guard_at(o.namespace(claim), span)
            holder = self.stalled_holder(found) if found is not None and not _owned_by(found, claim) else None
            if holder is not None:
                stalled[o.claim_key(holder)] = holder
        self.letting_go = set(stalled)
        written = {o.claim_key(other) for other in self.in_flight(o.namespace(claim))} if self.fences() else set()
        first, last = self.pool.span_of(unit)
        fences = [(holder, self.fence(holder, first, last)) for key, holder in stalled.items() if key not in written]
        actions: list = self.order_actions(claim, unit, fences)
        # The claim of a guard let go by time is written first (a fence, its naming let go): the rest of its pass,
        # landing however late, is refused at its status write and its objects in that span are not taken up.
        actions += [SetMetadata(o.ref(holder), annotations=fence,
                                resource_version=o.meta(holder).get("resourceVersion")) for holder, fence in fences]
        self.letting_go = set()
        back = self.taken_back(claim, first, last)
        let_go, width = text_span(back), FAMILY_BITS[self.pool.version]
        for span in spans:
            found = self.guard_at(o.namespace(claim), span)
            doubted = let_go is not None and span.ip <= let_go[1] and let_go[0] <= _span_end(span, width)
            own = found is not None and _owned_by(found, claim)
            if own and (not span.shared or _owned_by(found, self.pool_obj)) and not doubted:
                continue  # its own, from an earlier try
            if own and doubted and not span.shared:
                # Its own as this view has it, of a span let go from it since: another allocation may have taken the
                # guard's name meanwhile (this view behind). That incarnation goes first, made anew: a view behind
                # is refused, and decides again from what stands.
                actions += [Delete(o.ref(found)), Create(self.guard(claim, span))]
                continue
            if found is not None and span.shared and held_by_pools(found):
                actions.append(SetMetadata(o.ref(found), owner_references=self.joined_owners(found, claim),
                                           resource_version=o.meta(found).get("resourceVersion")))
                continue
            # One found here is left over (``held_elsewhere`` passed it over): that incarnation goes first.
            actions += (self.left_over(found) if found is not None else []) + [Create(self.guard(claim, span))]
        if back is not None:
            # Its guards made anew: the doubt goes, after them (a pass stopped before leaves it for the next one).
            actions.append(SetMetadata(o.ref(claim), annotations={kinds.TAKEN_BACK_ANNOTATION: None},
                                       resource_version=o.meta(claim).get("resourceVersion")))
        return actions

    def left_over(self, guard: dict) -> list:
        """The delete of a guard found left over (``guard_holds``). One whose claim this view holds (that
        incarnation, bound to another IP) goes right after a write of that claim on condition that it is unchanged
        since read (a no-op on the API server): a view behind on that claim (it was given this IP since) is refused.
        One whose claim it does not hold, under the name and uid its owner reference gives, goes only if the API
        server, read again, has no such claim either (``Delete.unless_exists``): a view behind on claims (or one
        that read the guard again after a refused write) holds the guard of a claim it has not seen yet, live and
        bound to its IP."""
        ref = o.spec(guard).get("claim") or {}
        holder = self.holder(guard)
        if holder is not None:
            return [SetMetadata(o.ref(holder), resource_version=o.meta(holder).get("resourceVersion")),
                    Delete(o.ref(guard))]
        kind, name = str(ref.get("kind") or kinds.IPCLAIM[1]), str(ref.get("name") or "")
        owner = next((r for r in o.owner_references(guard) if r.get("kind") == kind and r.get("name") == name
                      and r.get("uid")), None)
        if owner is None:
            return [Delete(o.ref(guard))]  # it names no owner claim: no claim holds it (``holder``), whatever is seen
        return [Delete(o.ref(guard), unless_exists=o.Ref(str(owner.get("apiVersion") or ref.get("apiVersion") or ""),
                                                         kind, o.namespace(guard), name, str(owner["uid"])))]

    def joined_owners(self, guard: dict, claim: dict) -> tuple[dict, ...]:
        """The owners of a guard the namespace's pools share once ``claim``'s allocation joins it: this pool and
        the claim added, the claims this pass sees gone dropped (the pools stay until collected with it)."""
        kept = [r for r in o.owner_references(guard) if _names_a_pool(r) or self.claim_lives(r, o.namespace(guard))]
        return tuple(kept) + tuple(_owner(x) for x in (self.pool_obj, claim) if not _owned_by(guard, x))

    def claim_lives(self, ref: dict, namespace: str) -> bool:
        """Whether the claim an owner reference names is stored, that incarnation (its uid)."""
        kind = (kinds.group_of(str(ref.get("apiVersion") or "")), str(ref.get("kind") or ""))
        found = self.snap.claim_named(kind, namespace, str(ref.get("name") or ""))
        return found is not None and o.meta(found).get("uid") == ref.get("uid")

    def guard(self, claim: dict, span: Span) -> dict:
        """The guard of ``span`` for ``claim``: owned by the claim, and by this pool for a shared span (which
        outlives every claim holding an IP under it: its pool may be gone before them, deleted while their
        allocation was on its way, or before its finalizer was written)."""
        pool, ip = self.pool_obj, ip_from_int(span.ip, self.pool.version)
        claim_ref: dict[str, Any] = {"name": o.name(claim), "namespace": o.namespace(claim),
                                     "apiVersion": claim.get("apiVersion"), "kind": claim.get("kind")}
        guard = {"apiVersion": kinds.METAL3_API_VERSION, "kind": "IPAddress",
                 "metadata": {"name": guard_name(ip, span.length), "namespace": o.namespace(claim),
                              "labels": {kinds.GUARD_LABEL: address_label(ip)},
                              # Gone with its claim (or its pools and claims: the garbage collector), and
                              # moved with it.
                              "ownerReferences": [_owner(pool), _owner(claim)] if span.shared else [_owner(claim)]},
                 "spec": {"address": ip_text(ip), "claim": claim_ref,
                          "pool": {"apiVersion": pool.get("apiVersion"), "kind": pool.get("kind"),
                                   "name": o.name(pool), "namespace": o.namespace(pool)}}}
        length = span.length if span.length is not None else self.pool.unit_length
        if length is not None:
            guard["spec"]["prefix"] = length  # the sub-prefix it stands for, or is a part of
        return guard

    def held_elsewhere(self, namespace: str, ip: int, claim_namespace: str | None = None,
                        for_keeper: bool = False, claim: dict | None = None) -> bool:
        """In use by something this pool's own addresses do not show.

        The name lock (another pool with the same namePrefix, or any object of
        that name) and any address of another pool of the namespace, of either
        API, at that IP (inside that sub-prefix), or a sub-prefix another prefix
        pool's address holds that meets it, whatever its namePrefix (but a pool's
        this one shares addresses with: see ``overlap``). For a global pool, the
        namespaces looked in are the lock namespace (the other global pools'
        locks) and the claim's (every pool's addresses there). ``for_keeper``:
        for the claim whose status names the IP, whom an address written before
        its claim and bound to none does not keep from it.
        """
        if claim is not None:
            spans = self.guard_spans(claim, ip)
            if spans is None:
                self.unguardable.add(ip)
                return True
            if any(self.span_taken(claim, span) for span in spans) or self.named_taken(claim, ip):
                return True
        # An outside IPAM knows nothing of the namespace's other pools: an IP one of them holds is refused.
        unique = self.kind.unique_in_namespace or self.kind.outside is not None
        name = self.pool.lock_name(ip)
        if self.snap.name_taken(namespace, name):
            holder = self.snap.address_named(namespace, name)
            held = _ip_of(holder) if holder is not None else None
            if held is not None and held != self.pool.address_of(ip):
                self.collisions[ip] = holder
            return True
        first, version = int(self.pool.address_of(ip)), self.pool.version
        last = first + (1 << self.pool.unit_bits) - 1
        # A claim of another pool of the namespace keeps it (a pool sharing the namePrefix takes the same lock:
        # only its own pool's ledger knows the IP is kept, once the claim's address objects are gone); from a
        # claim whose status names it too, only when that one goes first (``kept.precedence``).
        where = claim_namespace or namespace
        if for_keeper and claim is not None:
            if self.snap.keeper_elsewhere(where, version, first, claim) is not None:
                return True
        elif self.snap.kept_elsewhere(where, version, first):
            return True
        if unique:
            return self.snap.held_elsewhere(namespace, version, first, last, for_keeper=for_keeper)
        if not self.kind.cluster_scoped or claim_namespace is None:
            return False
        return any(self.snap.held_elsewhere(ns, version, first, last, for_keeper=for_keeper)
                   for ns in {namespace, claim_namespace})


def _allocating(claim: dict, version: int) -> Span | None:
    """The IP or sub-prefix a claim's ``kinds.ALLOCATING_ANNOTATION`` names, as its global pool's guard of it, or
    None (none, another family, not one)."""
    text = str(o.annotations(claim).get(kinds.ALLOCATING_ANNOTATION) or "")
    ip_part, _, length = text.partition("/")
    try:
        ip = parse_ip(ip_part)
    except AddressError:
        return None
    if ip.version != version or (length and not (length.isdigit() and int(length) <= FAMILY_BITS[version])):
        return None
    return _span(int(ip), int(length) if length else None, FAMILY_BITS[version])


def _let_go_from(fenced: Sequence[tuple[dict, dict]], first: int, last: int) -> str | None:
    """The claims ``fenced`` (each with what its fence writes) whose span let go, once written, meets
    ``first``..``last`` (``kept.let_go_entry``), comma-separated (up to ``GUARDS_PER_ALLOCATION``), or None: the
    claims of the other side whose refused pass may have left objects in the span an allocation hands out
    (``kinds.LET_GO_FROM_ANNOTATION``)."""
    entries = set()
    for other, fence in fenced:
        span = text_span(fence.get(kinds.LET_GO_ANNOTATION) or o.annotations(other).get(kinds.LET_GO_ANNOTATION))
        if o.meta(other).get("uid") and span is not None and span[0] <= last and first <= span[1]:
            entries.add(let_go_entry(other))
    return ",".join(sorted(entries)[:GUARDS_PER_ALLOCATION]) or None


def _naming_time(claim: dict) -> str | None:
    """When a claim's naming was written (``kinds.ALLOCATING_SINCE_ANNOTATION``), or None: none, or none that can
    be read."""
    since = str(o.annotations(claim).get(kinds.ALLOCATING_SINCE_ANNOTATION) or "")
    try:
        o.parse_time(since)
    except ValueError:
        return None
    return since or None


def _each_ip(first: int, last: int) -> list[int]:
    """Each IP from ``first`` to ``last`` when they are no more than ``GUARDS_PER_ALLOCATION``; else none."""
    return list(range(first, last + 1)) if last - first < GUARDS_PER_ALLOCATION else []


def _span_end(span: Span, width: int) -> int:
    """The last address of ``span`` (an IP, or a sub-prefix of ``span.length`` bits) in a family ``width`` bits wide."""
    return span.ip + (1 << (width - (span.length or width))) - 1


def _span(ip: int, length: int | None, width: int, shared: bool = False) -> Span:
    """The span of ``ip`` and a sub-prefix ``length`` (None: an IP); a sub-prefix of every bit is its one IP, and
    guarded as an IP pool's allocation of that IP is."""
    return Span(ip, None if length == width else length, shared)
