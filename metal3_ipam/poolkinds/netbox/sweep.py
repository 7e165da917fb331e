"""The sweep: which NetBox addresses of this owner no claim will ask for again. Pure: no I/O.

An address NetBox holds with one of this owner's keys is normally released by
its claim's finalizer. Some are left behind: the claim's finalizer taken off by
hand, an allocation NetBox carried out after its claim was gone, a controller
killed with an allocation out. The sweep releases those, and only those.

The difficulty is ``clusterctl move``: the owner is shared by every cluster a
claim may move to, so once a Cluster has moved, the source sees its claims'
addresses carry its owner and no claim of its own, exactly as it would see
leaked ones. So every address records its **home**, in its NetBox
description: the uid of the Cluster its claim belongs to (else of the
NetBoxIPPool that served it). A uid is never the same in two clusters nor
after a move; the controller that serves the claim writes its own home when it
allocates and whenever it finds the key's address homed elsewhere (a moved
claim finding its address in the target). The sweep of a cluster releases an
address only when all of these hold:

* its home is an object this controller holds now (the same uid), and that
  object is not paused (``clusterctl move`` pauses the Cluster it moves, and a
  move that stops half-way leaves it paused); a NetBoxIPPool, which no Cluster
  pauses, counts as paused while a Cluster of its namespace is (the move of a
  namespace deletes its claims before its pools, and may stop in between);
* its description names no hold (``held=``, below);
* no claim this controller holds carries its key, no lock records it, and no
  ask of the key is out or due;
* it was found so, the same address with the same key and home, by two sweeps
  at least ``grace`` seconds apart (a claim restored with its key and not yet
  seen, a cache that lags).

Such an address is not deleted at once: it is **marked** released
(``swept=<UTC time>`` in its description, :func:`settle`), and deleted only once
found so again at least the release grace after that time (a day by default).
The IP stays held in NetBox meanwhile, and any cluster whose claim carries the
key takes the address back (:func:`taken_over` homes it there, :func:`hold`
holds it for a paused claim; either takes the mark off). This is what saves a
move whose two controllers were both down while its claims were deleted: the
source, started first with its Cluster unpaused for the retry, cannot tell the
moved claims from claims deleted by hand, and only marks their addresses.

An address whose description names no home (written by hand, by an older
release, or edited) is never swept. The source of a move that sees a claim
leave for it (``clusterctl.cluster.x-k8s.io/delete-for-move``) takes the home
off its address (:func:`disown`): a move that stops after deleting the claims
leaves their Cluster here, and the retry of the move begins by unpausing it.

A source controller down while the claims were deleted never sees them leave,
so the target speaks instead (:func:`hold`). A claim whose key's address is
homed at an object absent here while the claim's own home is paused (the copy
in the target of a move under way or stopped half-way) does not take the home:
the source's Cluster is paused too during a move, and the two would write it
back and forth. Its sweep marks the address held by that paused home, a second
token after the home: ``metal3-ipam home=Cluster:<uid> held=Cluster:<uid>
claim ns/name`` (the home first and whole; what is cut to NetBox's 200
characters is the claim's name); an address an earlier version wrote (no home,
no ``moved-from=``) a paused claim here holds the same way, ``metal3-ipam
held=Cluster:<uid> claim ns/name``. No sweep releases an address that names a
hold, whoever's: another cluster's object may be gone or not, nothing here can
tell, and leaving an address behind is the safe side. A hold is written only
where none is (any hold is enough), and changed only by the controller that
holds the object it names: the claim's home unpaused, it is homed here
(:func:`rehome` writes the whole description, so its own hold goes with it,
while another controller's stays); no paused claim of it carrying the key any
more (the copies of a move given up deleted), its sweep takes the hold off, and
the address is swept again as any. The one exception: :func:`disown` takes the
home off and the hold with it, as an address homed nowhere is swept by no one.
A hold whose object is deleted with its whole cluster (or namespace) before
its controller took it off stays: its address is found in NetBox by
``description__ic=held%3D`` and released there by hand.

Homing is first come (:func:`taken_over`): an address homed at an object of
another cluster is taken only when it says its home let it go (``moved-from=``,
``swept=``), when a paused claim here held it, or when nobody took it over
before (nor holds it with a paused claim); a take writes the home it was taken
from, which that cluster never takes back: ``moved-from=`` when that home gave
it (:func:`took`), else ``from=`` (taken unasked: a claim there may live, so a
release here marks the address released rather than deleting it,
:func:`left_on_release`). The source of a move remembers the uids its moved
claims belonged to, and gives the address (``from=`` becomes ``moved-from=``,
:func:`disown`) also where the target homed it first, its own Cluster gone with
the move since, but not a take it can tell a copy made (:func:`copies_took`:
made while its claim was here). Nor can it tell a take it did not see from a copy's: a give made while the home
it gives is still here (paused: the move under way, or stopped half-way; clusterctl unpauses the target only once
it deleted the source's Cluster) is marked ``mid-move=<UTC time>`` (the give's, plus the giving cluster's sweep
interval) after the other tokens, on an address homed nowhere too, and a take keeps the mark. From the time it
names the give is confirmed (:func:`unconfirmed`: by then the move's target, whose paused claim exists before the
give, has swept and held the address); till then a release here marks the address released rather than deleting it
(:func:`left_on_release`), the taker's and that of a claim carrying the key that took nothing, so that a copy
deleted early leaves the address to the moved claim. The mark is read at the release; no sweep writes it
off (the taker writes the address once). An address an earlier version wrote (no home), or one back at
the home that let it go, is homed first come the same way: ``from=`` the home
that took it, so no other cluster takes it over at first sight. So two clusters whose live claims carry one key (a move
restored from a directory while the source runs) write it once, and
:func:`contested` names the claims left homed elsewhere, for their Events.
Such a claim, live and bound to the address all the same, holds it
(:func:`held_by`) with a token of its own, ``live-held=Cluster:<uid>``: a
paused hold makes its cluster take the address once its home is unpaused, a
live one never does (the address was taken over first, from its home or a
third cluster's). The release of the key by the cluster that took it over
keeps an address another cluster holds (:func:`held_elsewhere`), marked
released so that the holding claim takes it back, as the release by the
other keeps one taken over from it (:func:`kept_on_release`); each release
takes its own cluster's hold off first (a Cluster being deleted is still
here), so that the other side releases the address once its claim goes.
A claim here bound to an address homed at another cluster's object that
nobody took over yet (a copy deleted before a sweep here homed it) leaves it
taken over and marked released (:func:`left_on_release`): the claim there,
if any, takes it back.

At most one description per address and sweep (:func:`describe_anew`). No
controller writes an address back and forth for any order of pauses of the
two sides of a move, nor for live claims carrying one key in several clusters.

Before deleting, the adapter reads the address again by id and deletes it only
if its key and description are still what the sweep judged, and no claim
carries its key and its home is here and not paused still.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from datetime import datetime, timezone
from typing import Any, Callable, Iterable, Mapping

from metal3_ipam.core import kinds
from metal3_ipam.core import objects as o

#: NetBox's limit on an IP address's description.
MAX_DESCRIPTION = 200

_HOME = re.compile(r"\bhome=(Cluster|NetBoxIPPool):([0-9a-fA-F-]{8,64})\b")
_HELD = re.compile(r" ?\b(live-)?held=(Cluster|NetBoxIPPool):([0-9a-fA-F-]{8,64})\b")
_FROM = re.compile(r" ?(?<![\w-])from=(Cluster|NetBoxIPPool):([0-9a-fA-F-]{8,64})\b")  # not moved-from=
_MOVED_FROM = re.compile(r"\bmoved-from=(Cluster|NetBoxIPPool):([0-9a-fA-F-]{8,64})\b")
#: The take after a home: ``from=`` (taken unasked) or ``moved-from=`` (given by that home).
_TAKE = re.compile(r" ?(?<![\w-])(moved-)?from=(Cluster|NetBoxIPPool):([0-9a-fA-F-]{8,64})\b")
#: After a give made while the move may be under way (confirmed a sweep interval after the time it names);
#: last of the tokens (a description cut at :data:`MAX_DESCRIPTION` loses it before a mark of release), after a uid
#: or a time: never in a claim's name.
_MID_MOVE = re.compile(r"(?<=[0-9a-fA-FZ]) mid-move(?:=(\d{8}T\d{6}Z))?(?![\w=-])")
#: What is left of ``mid-move`` at the end of a description cut at :data:`MAX_DESCRIPTION`.
_MID_MOVE_CUT = re.compile(r" m(?:i(?:d(?:-(?:m(?:o(?:v(?:e(?:=[\dTZ]*)?)?)?)?)?)?)?)?$")
_MID_MOVE_TIME = "%Y%m%dT%H%M%SZ"  # ISO 8601's basic format: short, for the tokens to fit
_SWEPT = re.compile(r" ?\bswept=(\d{4}-\d\d-\d\dT\d\d:\d\d:\d\dZ)")
#: The uid of the NetBoxIPPool whose claim's release left the address marked released (after ``swept=``; no kind,
#: to keep the claim's name in more descriptions).
_RELEASED_BY = re.compile(r" ?\breleased-by=([0-9a-fA-F-]{8,64})\b")
#: Where a hold goes in a description an earlier version wrote (no home).
_HOMELESS = re.compile(r"metal3-ipam\b")
_CLAIM = re.compile(r"\bclaim ([a-z0-9.-]+)/([a-z0-9.-]+)$")
#: The tokens after the home, in the order they are written.
_AFTER_HOME = (_HELD, _TAKE, _SWEPT, _RELEASED_BY, _MID_MOVE)

PRESENT, PAUSED, ABSENT = "present", "paused", "absent"


@dataclass(frozen=True)
class Home:
    """The object whose uid an address is homed at: a Cluster, or the NetBoxIPPool of a claim of no Cluster."""

    kind: str  # "Cluster" or "NetBoxIPPool"
    uid: str


def home_of(claim: Mapping[str, Any], cluster: Mapping[str, Any] | None, pool: Mapping[str, Any] | None
            ) -> Home | None:
    """A claim's home: its Cluster's uid, else (it names no Cluster) its pool's; None while the Cluster it
    names is not known (its home cannot be written yet)."""
    if o.cluster_name_of(claim):
        uid = o.meta(cluster).get("uid") if cluster is not None else None
        return Home(kinds.CLUSTER[1], str(uid)) if uid else None
    uid = o.meta(pool).get("uid") if pool is not None else None
    return Home("NetBoxIPPool", str(uid)) if uid else None


def description(home: Home | None, claim: Mapping[str, Any]) -> str:
    """The NetBox description of a claim's address: the home first (always whole), then the claim."""
    meta = o.meta(claim)
    text = f"metal3-ipam claim {meta.get('namespace')}/{meta.get('name')}"
    if home is not None:
        text = f"metal3-ipam home={home.kind}:{home.uid} claim {meta.get('namespace')}/{meta.get('name')}"
    return text[:MAX_DESCRIPTION]


def home_in(text: Any) -> Home | None:
    """The home an address's description names, or None."""
    found = _HOME.search(text) if isinstance(text, str) else None
    return Home(found.group(1), found.group(2)) if found else None


@dataclass(frozen=True)
class Hold:
    """A hold an address's description names: the object whose claim carries the key, and whether that claim
    is live (``live-held=``: bound to an address another cluster took over, which it never takes from it) or
    paused (``held=``: the copy of a move, which takes the address once its home is unpaused)."""

    home: Home
    live: bool = False

    def token(self) -> str:
        return f"{'live-' if self.live else ''}held={self.home.kind}:{self.home.uid}"


def hold_in(text: Any) -> Hold | None:
    """The hold an address's description names (``held=`` or ``live-held=``), or None."""
    found = _HELD.search(text) if isinstance(text, str) else None
    return Hold(Home(found.group(2), found.group(3)), bool(found.group(1))) if found else None


def held_in(text: Any) -> Home | None:
    """The object an address's description says holds it (``held=``, paused; ``live-held=``, live), or None."""
    found = hold_in(text)
    return found.home if found else None


def _with(text: str, pattern: re.Pattern, token: str | None) -> str:
    """``text`` with the token ``pattern`` finds (if any) taken out, and ``token`` (if any) written after the home
    and the tokens that come before it (:data:`_AFTER_HOME`), so that a description cut at
    :data:`MAX_DESCRIPTION` loses the claim's name, never a token. Nothing is written where no home is."""
    text = pattern.sub("", text, count=1)
    home = _HOME.search(text) or (_HOMELESS.match(text) if pattern is _HELD else None)
    if token is not None and home is not None:
        ends = [home.end()] + [m.end() for p in _AFTER_HOME[:_AFTER_HOME.index(pattern)] if (m := p.search(text))]
        at = max(ends)
        text = f"{text[:at]} {token}{text[at:]}"
    return text[:MAX_DESCRIPTION]


def _named(token: str, home: Home | None) -> str | None:
    return f"{token}={home.kind}:{home.uid}" if home is not None else None


def with_held(text: str, held: Home | Hold | None, live: bool = False) -> str:
    """``text`` with its hold token (if any) taken out, and ``held`` put right after the home token: a
    :class:`Hold` as it says, a home as the hold of a claim paused (``held=``) or, ``live``, live (``live-held=``)."""
    if isinstance(held, Home):
        held = Hold(held, live)
    return _with(text, _HELD, held.token() if held is not None else None)


def taken_from(text: Any) -> Home | None:
    """The home an address was taken over from (``from=``): a claim of another cluster carried its key then."""
    found = _FROM.search(text) if isinstance(text, str) else None
    return Home(found.group(1), found.group(2)) if found else None


def moved_from(text: Any) -> Home | None:
    """The home a source of a move took off the address (``moved-from=``), its claim seen leave for the move."""
    found = _MOVED_FROM.search(text) if isinstance(text, str) else None
    return Home(found.group(1), found.group(2)) if found else None


def took(text: Any) -> tuple[Home, bool] | None:
    """The take an address homed somewhere records: the home it was taken from, and whether that home gave it
    (``moved-from=`` after the home: its claim left for a move, or it marked the address released) or not
    (``from=``: taken unasked, first come, or after a paused claim held it: a claim there may live)."""
    found = _TAKE.search(text) if isinstance(text, str) and home_in(text) is not None else None
    return (Home(found.group(2), found.group(3)), bool(found.group(1))) if found else None


def _take_token(text: str) -> str | None:
    """The take token of ``text`` as it is (:func:`took`), to be written again."""
    taken = took(text)
    return _named("moved-from" if taken[1] else "from", taken[0]) if taken is not None else None


def given_mid_move(text: Any) -> bool:
    """Whether an address's give (``moved-from=``) was made while the move may have been under way (its home still
    in the source's cluster) (``mid-move``, confirmed once a sweep interval old: :func:`unconfirmed`; last of
    the tokens; also what is left of it in a description cut at :data:`MAX_DESCRIPTION`, on the safe side).
    clusterctl makes the move's target paused and unpauses it only once the source's Cluster is deleted, so a live
    claim that took the address meanwhile may be a copy of the claim restored from a directory."""
    if not isinstance(text, str):
        return False
    return _MID_MOVE.search(text) is not None or (len(text) >= MAX_DESCRIPTION and " claim " not in text
                                                  and _MID_MOVE_CUT.search(text) is not None)


def confirmed_from(text: Any) -> float | None:
    """From when the give ``mid-move`` marks counts as confirmed (``mid-move=<UTC time>``: wall-clock seconds of the
    cluster that gave it, its sweep interval after the give), or None (not marked, or a mark whose time was cut)."""
    found = _MID_MOVE.search(text) if isinstance(text, str) else None
    if found is None or found.group(1) is None:
        return None
    return datetime.strptime(found.group(1), _MID_MOVE_TIME).replace(tzinfo=timezone.utc).timestamp()


def with_mid_move(text: str, on: bool, at: float | None = None) -> str:
    """``text`` with ``mid-move`` (``=<at>``, a UTC time, when known) written after its other tokens (``on``), or
    taken out."""
    token = None
    if on:
        stamp = datetime.fromtimestamp(int(at), timezone.utc).strftime(_MID_MOVE_TIME) if at is not None else None
        token = f"mid-move={stamp}" if stamp else "mid-move"
    return _with(text, _MID_MOVE, token)


def _with_mid_move_of(text: str, current: str, on: bool = True) -> str:
    """``text`` with the ``mid-move`` of ``current`` (if any, and ``on``), its time kept."""
    return with_mid_move(text, on and given_mid_move(current), confirmed_from(current))


def claim_in(text: Any) -> tuple[str, str] | None:
    """The claim (namespace, name) a description names, if whole (not cut at :data:`MAX_DESCRIPTION`)."""
    found = _CLAIM.search(text) if isinstance(text, str) and len(text) < MAX_DESCRIPTION else None
    return (found.group(1), found.group(2)) if found else None


def swept_at(text: Any) -> float | None:
    """When a sweep found the address's key carried by nothing and marked it to be released (``swept=``, UTC
    seconds since the epoch), or None: it is not marked."""
    found = _SWEPT.search(text) if isinstance(text, str) else None
    if found is None:
        return None
    return datetime.strptime(found.group(1), "%Y-%m-%dT%H:%M:%SZ").replace(tzinfo=timezone.utc).timestamp()


def with_swept(text: str, at: float | None) -> str:
    """``text`` marked released by a sweep at ``at`` (wall-clock seconds), or unmarked (``at`` None)."""
    stamp = datetime.fromtimestamp(int(at), timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ") if at is not None else None
    return _with(text, _SWEPT, f"swept={stamp}" if stamp else None)


def released_by(text: Any) -> str | None:
    """The uid of the NetBoxIPPool whose claim's release left the address marked released (``released-by=<uid>``,
    :func:`with_released_by`), or None: marked by a sweep, by an earlier version's release, or not marked. A pool's
    uid is its cluster's alone: the mark tells a release of this cluster from one of another cluster, also once
    the claim's home is gone."""
    found = _RELEASED_BY.search(text) if isinstance(text, str) and swept_at(text) is not None else None
    return found.group(1) if found else None


def with_released_by(text: str, pool_uid: str) -> str:
    """``text`` (marked released by a release) naming the pool of the released claim; as it is where the whole
    token does not fit in :data:`MAX_DESCRIPTION` once the claim's name is cut (never found again after a restart:
    left in NetBox)."""
    marked = _with(text, _RELEASED_BY, f"released-by={pool_uid}")
    return marked if released_by(marked) == pool_uid else text


@dataclass(frozen=True)
class Found:
    """An address NetBox holds with one of this owner's keys, as a sweep lists it."""

    id: int
    address: str
    key: str
    description: str


def unclaimed_here(item: Found, carried: Callable[[str], bool], home: Callable[[Home], str]) -> bool:
    """Whether an address may be released as far as one look says: homed at an object here, not paused, and
    its key carried by nothing here (``Sweep.judge`` adds the sightings a grace apart)."""
    at = home_in(item.description)
    return at is not None and held_in(item.description) is None and not carried(item.key) and home(at) == PRESENT


class Sweep:
    """The sightings of candidate addresses between sweeps; :meth:`judge` says which to release now."""

    def __init__(self, grace: float):
        self.grace = grace
        self._since: dict[int, tuple[Found, float]] = {}  # id -> (as first found a candidate, when)

    def judge(self, found: Iterable[Found], *, carried: Callable[[str], bool], home: Callable[[Home], str],
              now: float) -> list[Found]:
        """The addresses to release now. ``carried(key)``: a claim or lock holds the key, or an ask of it is out
        or due; ``home(h)``: ``PRESENT``, ``PAUSED`` or ``ABSENT`` in this controller's view.
        A candidate not found again (or changed) starts over."""
        since: dict[int, tuple[Found, float]] = {}
        release = []
        for item in found:
            if not unclaimed_here(item, carried, home):
                continue
            first = self._since.get(item.id)
            if first is None or first[0] != item:
                first = (item, now)
            since[item.id] = first
            if now - first[1] >= self.grace:
                release.append(item)
        self._since = {i: s for i, s in since.items() if s[0] not in release}
        return release


def taken_over(current: str, text: str | None, home: Callable[[Home], str]) -> str | None:
    """The description an address described ``current`` is given for the claim here described ``text`` (its
    home present here), or None: it stays as it is.

    Homing is first-come: a cluster takes an address homed at an object it does not hold only when that
    address says its home let it go (homed nowhere: ``moved-from=``, its claim seen leave for a move; or
    marked released by a sweep or a release there, ``swept=``), or when a paused claim here held it (the target
    of a move, whose source was down when the claims left), or when nobody took it over before (no take token,
    and no paused claim of another cluster holds it, which takes it once unpaused: the first claim here to find
    it homed at a Cluster gone with the source of a finished move; an address an earlier version wrote, with no
    home, is homed here ``from=`` this very home: first come, as is one back at the home that let it go, a copy
    of its claim maybe live where it went). One homed nowhere that still names a take unasked (``from=``: a
    copy's take whose claim moved on) is taken unasked from that home again (``from=`` it; first come, where
    that home is here). A take its home gave (homed nowhere by it, or marked released by
    it) writes ``moved-from=`` that home, whose release here deletes the address at once; any other take writes
    ``from=`` it, taken unasked: a claim there may be bound to it, so the release here marks it released for
    that claim to take back (:func:`left_on_release`). A give's ``mid-move`` is kept (but where its home is here
    and not paused: no move from it is under way). Either way the cluster it was taken from never takes it
    back (nor a third one over) until the new home lets it go: two clusters whose live claims carry one key
    write it once, not back and forth. An address homed at an object here (ours) is rehomed freely, and one
    marked released is taken back whatever else it says."""
    at = home_in(text)
    if text is None or at is None or home(at) != PRESENT:
        return None
    there, swept, taken = home_in(current), swept_at(current) is not None, took(current)
    mine = with_held(text, _kept_hold(current, home))
    if there == at:
        return _with_mid_move_of(_with(mine, _TAKE, _take_token(current)), current) if swept else None
    if swept:  # marked released by its home: given
        return _with(mine, _TAKE, _named("moved-from", there))
    if taken is not None and taken[0] == at:
        return None  # taken over (or given) from this very home: a claim of another cluster carries the key
    if there is None:
        given = moved_from(current)
        if given is not None and hold_in(current) == Hold(at, live=True):
            return None  # a live claim here bound to it holds it, homed nowhere: its release deletes it
        if given is not None and given != at and _held_elsewhere_paused(current, home):
            return None  # the claim that moved holds it, paused where it landed: a claim here is a copy
        if given is None or given == at:  # an earlier version's, or back at the home that let it go: first come
            return _with(mine, _TAKE, _named("from", at))
        if (origin := taken_from(current)) is not None:  # a copy's take, moved on: unasked from that home still
            return _with(mine, _TAKE, _named("from", origin))
        return _with_mid_move_of(_with(mine, _TAKE, _named("moved-from", given)), current, home(given) != PRESENT)
    if home(there) != ABSENT:  # ours
        return _with(mine, _TAKE, _named("from", there))
    if _held_here(current, home) or (taken is None and not _held_elsewhere_paused(current, home)):
        return _with(mine, _TAKE, _named("from", there))  # taken unasked: a claim there may live
    return None


def _held_here(text: str, home: Callable[[Home], str]) -> bool:
    """Whether a paused claim here held the address (``held=``; not ``live-held=``: a live claim here holds it
    because another cluster took it over first, and that stays so)."""
    held = hold_in(text)
    return held is not None and not held.live and home(held.home) != ABSENT


def _held_elsewhere_paused(text: str, home: Callable[[Home], str]) -> bool:
    """Whether a paused claim of another cluster holds the address (``held=`` an object absent here): that
    cluster takes it once unpaused, so no live claim here takes it over first."""
    held = hold_in(text)
    return held is not None and not held.live and home(held.home) == ABSENT


def _kept_hold(text: str, home: Callable[[Home], str]) -> Hold | None:
    """The hold of another controller (its object absent here), which only that controller changes."""
    held = hold_in(text)
    return held if held is not None and home(held.home) == ABSENT else None


def rehome(found: Iterable[Found], wanted: Callable[[str], str | None], home: Callable[[Home], str]
           ) -> list[tuple[Found, str]]:
    """The addresses of keys a claim here carries that :func:`taken_over` gives to it (the claim moved here,
    or took back an address marked released), each with the description it is given: ``wanted(key)`` is the
    carrying claim's, with the hold of another controller kept. Nothing is homed at a paused object (a
    move under way pauses its Cluster on both sides)."""
    out = []
    for item in found:
        text = taken_over(item.description, wanted(item.key), home)
        if text is not None:
            out.append((item, text))
    return out


def contested(found: Iterable[Found], wanted: Callable[[str], str | None], home: Callable[[Home], str]
              ) -> list[tuple[Found, Home]]:
    """The addresses of keys a claim here carries, live and not paused, that stay homed at an object of another
    cluster (:func:`taken_over` refuses it): a claim there carries the key too (a copy restored from a
    directory while the source runs, say), or did when it was taken over. Each with that home."""
    out = []
    for item in found:
        text = wanted(item.key)
        at, there = home_in(text), home_in(item.description)
        if at is None or there is None or there == at or home(at) != PRESENT:
            continue
        if taken_over(item.description, text, home) is None:
            out.append((item, there))
    return out


def settle(judged: Iterable[Found], wall: float, keep: float) -> tuple[list[Found], list[tuple[Found, str]]]:
    """What a sweep does with the addresses :meth:`Sweep.judge` found carried by nothing: one not marked yet is
    marked released (``swept=`` now, in its description: NetBox keeps it, the IP stays held, and any cluster
    whose claim carries the key takes it back); one marked at least ``keep`` seconds ago is released.
    (The addresses to release, the addresses to mark with their new description.)"""
    release, mark = [], []
    for item in judged:
        at = swept_at(item.description)
        if at is None:
            mark.append((item, with_swept(item.description, wall)))
        elif wall - at >= keep:
            release.append(item)
    return release, mark


def copies_took(found: Iterable[Found], wanted: Callable[[str], str | None], home: Callable[[Home], str],
                left_from: Callable[[str], Iterable[str]] = lambda key: ()) -> list[tuple[str, Home]]:
    """The takes of addresses homed at an object here by another cluster (homed at an object absent here, taken
    ``from=`` an object here, unasked) that this cluster can tell were a copy's, not a move's target's: a claim
    here carries the key still, or held the address (a hold of an object here, or of one the key's claim
    belonged to when it left, ``left_from(key)``), so the take came before the claim left. ``clusterctl move``
    pauses the source's Cluster, makes the target's copies paused, deletes the source's claims and only then
    unpauses the target, whose claims take nothing before (a paused claim holds). (key, the home that took it):
    :func:`disown` never gives such a take, whichever cluster the claim moves to later."""
    out = []
    for item in found:
        there, taken, held = home_in(item.description), took(item.description), hold_in(item.description)
        uids = frozenset(left_from(item.key))

        def here(h: Home, uids: frozenset[str] = uids) -> bool:
            return home(h) != ABSENT or h.uid in uids
        if there is None or here(there) or taken is None or taken[1] or not here(taken[0]):
            continue
        if wanted(item.key) is not None or (held is not None and here(held.home)):
            out.append((item.key, there))
    return out


def disown(found: Iterable[Found], moved_away: Callable[[str], bool], wanted: Callable[[str], str | None],
           home: Callable[[Home], str], left_from: Callable[[str], Iterable[str]] = lambda key: (),
           copy_took: Callable[[str, Home], bool] = lambda key, there: False, confirmed_at: float | None = None
           ) -> list[tuple[Found, str]]:
    """The addresses homed here whose claim was seen leave for a ``clusterctl move`` and that no claim here carries now,
    each with a description that names no home: the claim lives in the target, which homes the address there; until
    then no sweep releases it, here (also after a restart, once the Cluster is unpaused to retry a move that stopped
    half-way) or there. Here: at an object present or paused, or at one the claim belonged to when it left
    (``left_from(key)``, uids), gone since (the move deletes the source's Cluster). A hold of another cluster stays:
    a live one (its claim, bound to the address, keeps it so: :func:`held_by`), and a paused one (the move's target,
    whose paused claim holds the address homed nowhere too, so that no live copy of the claim elsewhere takes it
    first as given). A take unasked from another cluster (``from=`` an object absent here: this claim was a copy,
    whose source's claim may live) stays, after ``moved-from=``: where the claim lands it is taken unasked from that
    cluster still (:func:`taken_over`). One the target homed before this (taken ``from=`` here, unasked) is given
    the same way: its take becomes ``moved-from=``, which lets the release there delete it at once; but not one a
    copy took (:func:`copies_took`, ``copy_took(key, its home)``: remembered from earlier sweeps, or a hold of an
    object here on it): the claim moved elsewhere, where its copy may hold the address still. Its take stays unasked
    (the copy's release marks it released, for the moved claim to take back), and a hold here comes off. A give
    made while the home it gives is here still (the move not over) is marked ``mid-move=<confirmed_at>``, the time
    from which it counts as confirmed: now plus this cluster's sweep interval (:func:`unconfirmed`)."""
    out = []
    for item in found:
        at, uids = home_in(item.description), frozenset(left_from(item.key))

        def here(h: Home, uids: frozenset[str] = uids) -> bool:
            return home(h) != ABSENT or h.uid in uids
        if at is None or not moved_away(item.key) or wanted(item.key) is not None:
            continue
        if not here(at):
            taken, held = took(item.description), hold_in(item.description)
            if held is not None and here(held.home):  # taken while the claim was here: a copy's take
                out.append((item, with_held(item.description, None)))
            elif taken is not None and not taken[1] and here(taken[0]) and not copy_took(item.key, at):
                given = _with(item.description, _TAKE, _named("moved-from", taken[0]))
                out.append((item, with_mid_move(given, home(taken[0]) != ABSENT, confirmed_at)))
            continue
        held, taken = hold_in(item.description), took(item.description)
        kept = held if held is not None and home(held.home) == ABSENT else None
        text = with_held(item.description, kept)
        if taken is None or taken[1] or home(taken[0]) != ABSENT:  # an unasked take from another cluster stays
            text = _TAKE.sub("", text, count=1)
        text = with_mid_move(with_swept(text, None), home(at) != ABSENT, confirmed_at)
        moved = text.replace(f"home={at.kind}:{at.uid}", f"moved-from={at.kind}:{at.uid}", 1)
        out.append((item, moved[:MAX_DESCRIPTION]))  # the longer token: the end (the claim's name first) cut
    return out


def held_by(item: Found, wanted: Callable[[str], str | None], home: Callable[[Home], str]) -> Hold | None:
    """What the hold token of an address should say in this controller's view.

    A hold another controller wrote (its object is absent here) stays as it is: this controller cannot know that
    object is gone, and any hold is enough to keep every sweep off the address. Otherwise the address is held by the
    paused home of the claim here that carries its key, when it is homed at an object of another cluster (a claim
    moved here, its Cluster paused: a move under way or stopped half-way: ``held=``), also when it is homed nowhere
    (by an earlier version, or by the source of the move, ``moved-from=``: a live copy of the claim elsewhere does
    not take it as given while a paused claim holds it, :func:`taken_over`; one a source took the home off keeps a
    live hold of the claim here, :func:`disown`); or by the live home of the claim here that carries its key, when
    another cluster took the address over and :func:`taken_over` does not give it to this claim, bound to it all the
    same (taken over from this very home, or from a third one: ``live-held=``): the hold tells that cluster's
    release its claim is not the only one. A live hold stays live while its home is paused (pausing it moves
    nothing: unpaused, a paused hold would take the address from the live claim there, a second write). Nothing
    holds it when no such claim here carries its key any longer (a hold of this controller's that went stale: the
    copies of an aborted move deleted, the move finished, the claim of a contested key deleted)."""
    held = hold_in(item.description)
    if held is not None and home(held.home) == ABSENT:
        return held
    text = wanted(item.key)
    at, there = home_in(text), home_in(item.description)
    if at is not None and there is None and moved_from(item.description) is None:
        return Hold(at) if home(at) == PAUSED else None  # an earlier version's: a live claim here homes it (rehome)
    if at is not None and there is None and home(at) == PAUSED:  # its source let it go: the move's paused claim
        return Hold(at, live=held == Hold(at, live=True))  # holds it, so that no live copy elsewhere takes it first
    if at is not None and there is None:  # its source let it go: a live claim here holding it keeps it so
        return held if held == Hold(at, live=True) else None
    if at is None or there is None or home(there) != ABSENT:
        return None
    if home(at) == PAUSED:
        return Hold(at, live=held == Hold(at, live=True))
    if home(at) == PRESENT and taken_over(item.description, text, home) is None:
        return Hold(at, live=True)
    return None


def unconfirmed(text: Any, wall: float | None) -> bool:
    """Whether an address's give marked ``mid-move`` is not confirmed at ``wall``: before the time the mark names
    (the give's, plus the giving cluster's sweep interval: whatever the releasing cluster's interval), a paused
    claim of another cluster carrying the key (the move's target, made before the give) may not have swept and held
    it yet. A mark of no time (its time cut at :data:`MAX_DESCRIPTION`) is never confirmed. Read at the release, not
    written off by a sweep: the cluster that took the address writes it once."""
    if not given_mid_move(text):
        return False
    at = confirmed_from(text)
    return at is None or wall is None or wall < at


def held_elsewhere(text: Any, home: Callable[[Home], str]) -> bool:
    """Whether an address's description names a hold of another cluster (its object absent here): a claim
    there carries the key, paused or bound to the address after a cluster took it over."""
    return _kept_hold(text, home) is not None


def kept_on_release(text: Any, home: Callable[[Home], str]) -> bool:
    """Whether the release of a key here leaves its address described ``text`` (a claim of another cluster
    carries the key too): another cluster holds it (:func:`held_elsewhere`), or took it over (homed at an
    object absent here, ``from=`` or ``moved-from=``)."""
    there = home_in(text)
    return held_elsewhere(text, home) or (there is not None and took(text) is not None and home(there) == ABSENT)


def left_on_release(text: str, released: str | None, home: Callable[[Home], str], wall: float) -> str | None:
    """The description the address of a key released here is left with, or None: it is deleted. ``text``: its
    description; ``released``: the description of the claim here that carried the key (its home), if known.

    First this cluster's own hold comes off (the claim that held it is the one released: a hold left would
    keep the address from every sweep once this cluster is gone). One an earlier version wrote (no home) that a
    paused claim here held is homed here marked released instead: an address carries one hold, so a paused claim
    of another cluster carrying its key could not hold it too, and holds it at its next sweep. An address another
    cluster holds, or took over (:func:`kept_on_release`), is then left as it is; but one homed here that
    another cluster holds (a
    claim there bound to it, or paused) is marked released too (``swept=`` now): its home lets it go, and
    the claim there takes it back at its next sweep (:func:`taken_over`), where its release deletes it. So is
    one homed here that was taken from another cluster unasked (``from=`` an object absent here, not
    ``moved-from=``): a claim there may be bound to it, its sweep not come yet to hold it (a copy's source), and
    takes it back; else the sweeps here release it once the release grace is over.

    One homed at an object absent here that nobody took over (no ``from=``, no mark of release by its home, no hold of
    another cluster) may be a live claim's there: a copy restored from a directory while the source runs,
    bound here and deleted before a sweep here homed the address (or a move finished while the source was
    down, the source gone). It is taken over marked released (homed at the released claim's home, ``from=``
    the home it had, ``swept=`` now): a claim there carrying the key takes it back at its next sweep
    (:func:`taken_over`), and otherwise the sweeps here release it once the release grace is over. Where the
    released claim's home is not known here, it is left as it is (nothing here would ever sweep it: leaked,
    never freed under a live claim). One homed here whose give is not confirmed at ``wall`` (:func:`unconfirmed`;
    a copy may have taken it, the moved claim paused elsewhere) is marked released as one taken unasked; one homed
    nowhere so marked is taken as given (``moved-from=`` kept) and marked released, for the moved claim to take
    back. Any other address is deleted: homed here, homed nowhere, or marked released by its home."""
    held = hold_in(text)
    if held is not None and home(held.home) != ABSENT:
        text = with_held(text, None)
    there, at = home_in(text), home_in(released)
    if held is not None and home(held.home) != ABSENT and not held.live and there is None \
            and moved_from(text) is None and at is not None and home(at) != ABSENT:
        return with_swept(released, wall)  # an earlier version's: a paused claim elsewhere may carry it, unheld
    if kept_on_release(text, home):
        if there is not None and home(there) != ABSENT and swept_at(text) is None:
            return with_swept(text, wall)
        return text
    taken = took(text)
    if there is not None and home(there) != ABSENT and taken is not None \
            and (not taken[1] and (home(taken[0]) == ABSENT or taken[0] == there)
                 or unconfirmed(text, wall)):
        # taken unasked: a claim there may be bound to it; or first come from no home (an earlier version's, or
        # one back at the home that let it go): a claim of another cluster may carry its key, paused, unheld
        return text if swept_at(text) is not None else with_swept(text, wall)
    given = moved_from(text)
    if there is None and given is not None and given_mid_move(text) and swept_at(text) is None \
            and at is not None and at != given and home(at) != ABSENT:
        # given while the move may be under way and taken by nobody yet: the claim released here may be a copy, the
        # move's target paused, unheld: taken as given, marked released, for that claim to take back
        return with_swept(_with_mid_move_of(_with(released, _TAKE, _named("moved-from", given)), text), wall)
    if there is None or home(there) != ABSENT or swept_at(text) is not None:
        return None
    if released is None or at is None or home(at) == ABSENT:
        return text
    return with_swept(_with(released, _TAKE, _named("from", there)), wall)


def hold(found: Iterable[Found], wanted: Callable[[str], str | None], home: Callable[[Home], str]
         ) -> list[tuple[Found, str]]:
    """The addresses whose ``held=`` token is not what :func:`held_by` says, each with its description
    mended: the token written (after the home, which stays as it is: homing an address at a paused
    object would have the two sides of a paused move write it back and forth), replaced, or taken out; a hold
    written takes off a mark of release (``swept=``): a claim here carries the key."""
    out = []
    for item in found:
        held = held_by(item, wanted, home)
        if held != hold_in(item.description):
            text = with_held(item.description, held)
            out.append((item, with_swept(text, None) if held is not None else text))
    return out


def describe_anew(found: Iterable[Found], wanted: Callable[[str], str | None], moved_away: Callable[[str], bool],
                  home: Callable[[Home], str], holder: Callable[[str], str | None] | None = None,
                  left_from: Callable[[str], Iterable[str]] = lambda key: (),
                  copy_took: Callable[[str, Home], bool] = lambda key, there: False,
                  confirmed_at: float | None = None) -> list[tuple[Found, str]]:
    """Every description a sweep writes, one per address at most: :func:`rehome` (which writes the whole
    description, so drops its own hold), else :func:`disown`, else :func:`hold`, asking ``holder`` (by
    default ``wanted``) for a claim that holds the address: where several claims here carry a key, one whose
    home is paused."""
    found = list(found)
    out = {item.id: (item, text) for item, text in disown(found, moved_away, wanted, home, left_from, copy_took,
                                                               confirmed_at)}
    out.update({item.id: (item, text) for item, text in rehome(found, wanted, home)})
    for item, text in hold([item for item in found if item.id not in out], holder or wanted, home):
        out[item.id] = (item, text)
    return [out[item.id] for item in found if item.id in out]


def home_state(objects: Iterable[tuple[str, Mapping[str, Any]]]) -> Callable[[Home], str]:
    """``home`` for :meth:`Sweep.judge` over the Clusters and NetBoxIPPools this controller holds, as
    (kind, object) pairs.

    A NetBoxIPPool belongs to no Cluster, so ``clusterctl move`` never pauses it: it pauses every Cluster
    of the namespace it moves, creates the copies, deletes the claims, and only then the pools, and a move
    that stops in between leaves the claims gone and the pool here. So a pool is paused (for the sweep)
    while a Cluster of its namespace is, as well as by its own paused annotation. A Cluster being deleted is
    still here (its claims are released while it is deleted: the marks naming it are this cluster's still); a
    NetBoxIPPool being deleted is not."""
    by_uid: dict[tuple[str, str], Mapping[str, Any]] = {}
    paused_namespaces: set[Any] = set()
    for kind, obj in objects:
        uid = o.meta(obj).get("uid")
        if uid:
            by_uid[(kind, str(uid))] = obj
        if kind == kinds.CLUSTER[1] and o.cluster_paused(obj):
            paused_namespaces.add(o.meta(obj).get("namespace"))

    def state(h: Home) -> str:
        obj = by_uid.get((h.kind, h.uid))
        if obj is None or (h.kind != kinds.CLUSTER[1] and o.is_deleting(obj)):
            return ABSENT
        if h.kind == kinds.CLUSTER[1]:
            paused = o.cluster_paused(obj)
        else:
            paused = o.is_paused(obj) or o.meta(obj).get("namespace") in paused_namespaces
        return PAUSED if paused else PRESENT

    return state
