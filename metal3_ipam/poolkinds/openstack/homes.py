"""Where a floating IP is at home, and which other clusters' claims hold it: single Neutron tags. Pure: no I/O.

A floating IP carries its key in its description (``pool.description``), and
the owner is shared by every cluster a claim may be moved to, so a key alone
cannot tell a claim here from a copy of it in another cluster (a ``clusterctl
move`` restored from a directory while the source runs: two live claims, one
floating IP). So a floating IP also records, in tags of its own, each one added
or removed by Neutron atomically (``PUT``/``DELETE /v2.0/floatingips/{id}/tags/{tag}``,
never the whole list: two clusters writing at once never lose each other's
mark):

* its **home**, ``<owner>-home:<Kind>:<uid>``: the uid of the Cluster of the
  claim bound to it (else of its OpenStackFloatingIPPool). A uid is never the
  same in two clusters nor after a move.
* ``<owner>-from:<Kind>:<uid>``: the home it was taken over from (below).
* **holds**, ``<owner>-held:<Kind>:<uid>``: the home of a claim of another
  cluster than the home's that carries the key and is bound to the floating IP
  all the same (or paused: the copy of a move under way); and the home's own,
  answering another cluster's hold: its claim lives. Any number.
* ``<owner>-left:<Kind>:<uid>``: next to a hold whose claim was deleted.

A cluster judges marks by the objects it holds (``home(h)``: ``PRESENT``,
``PAUSED`` or ``ABSENT``): a mark naming an object absent here is another
cluster's, and only the cluster holding the object a mark names removes it.

Homing is first come (:func:`mend`). A live claim here homes a floating IP
homed nowhere (made by it, or by an earlier version of this controller). One
homed at an object absent here it first holds; its home, seeing a hold of
another cluster while its own claim lives (paused or not), answers with
a hold of its own; the next sweep here takes the floating IP over only if no
other cluster holds it then (the source of a finished move, or of a move
stopped half-way, is gone or has no claim to answer), and never one taken
over from this very home (``from``: a claim there took it first). A paused
claim only holds (both sides of a move under way are paused: they would write
it back and forth), and at home answers another cluster's hold as a live one
does: a paused claim is a live claim, so a floating IP homed at a paused
Cluster is neither taken over nor released by the other cluster. Where two
clusters took it over at once, the lowest home stays and the other yields to
a hold. A claim left holding a floating IP
homed at another cluster is told (:attr:`Change.elsewhere`). A home whose
controller misses the taker's waiting sweep (down, or sweeping at a longer
interval) looks like a finished move's source, and is taken over from; so the
taker's release of a floating IP it took over (``from``) leaves it as one homed
at the other cluster (below). Known limit: that other cluster's controller must
sweep within the two sweeps here that follow.

The release of a key here (:func:`on_release`) keeps a floating IP that names
a home or hold of another cluster, or was taken over from one (``from``): a
claim there may be bound to it; only this cluster's marks come off, and that
cluster's next sweep homes it there (answering a hold it finds). Where it is
homed at another cluster (or taken from one) that answered no hold (a finished move's source,
gone), this cluster keeps its hold and marks it ``<owner>-left:`` instead: the
home answers if its claim lives, else the sweep here releases it a sweep later
(:func:`left_here`); a hold marked left keeps nothing. The sweep releases only
a floating IP whose marks all name objects here, present and not paused, or
claims of other clusters that left it (:func:`sweepable`); one with no mark at
all (made by an earlier version) is judged as before. A claim here that went
without a release (no finalizer; a move the sweep no longer knows of) after
another cluster's claim let the floating IP go on this cluster's answer is
marked left the same way once its pool is gone (:func:`left_unreleased`).
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Callable, Iterable

PRESENT, PAUSED, ABSENT = "present", "paused", "absent"
HOME, FROM, HELD, LEFT = "home", "from", "held", "left"
CLUSTER, POOL = "Cluster", "OpenStackFloatingIPPool"

_MARK = re.compile(rf"^(?P<owner>[a-z0-9-]+)-(?P<mark>{HOME}|{FROM}|{HELD}|{LEFT}):(?P<kind>{CLUSTER}|{POOL}):"
                   r"(?P<uid>[0-9A-Za-z-]{1,64})$")


@dataclass(frozen=True, order=True)
class Home:
    """The object a claim is at home at: its Cluster, or the OpenStackFloatingIPPool of a claim of no Cluster."""

    kind: str
    uid: str

    @property
    def text(self) -> str:
        return f"{self.kind}:{self.uid}"


def tag(owner: str, mark: str, home: Home) -> str:
    """The tag of a mark (``HOME``, ``FROM``, ``HELD``) naming ``home``."""
    return f"{owner}-{mark}:{home.kind}:{home.uid}"


@dataclass(frozen=True)
class Marks:
    homes: frozenset[Home] = frozenset()
    froms: frozenset[Home] = frozenset()
    holds: frozenset[Home] = frozenset()
    lefts: frozenset[Home] = frozenset()

    def named(self) -> frozenset[Home]:
        """Every object a home or a hold names."""
        return self.homes | self.holds

    def live(self, home: Callable[[Home], str]) -> frozenset[Home]:
        """The objects of other clusters (absent here) whose claim may be bound to the floating IP: its homes, and
        its holds but those whose claim left it (``left``)."""
        return frozenset(h for h in self.homes | (self.holds - self.lefts) if home(h) == ABSENT)


def marks_in(owner: str, tags: Iterable[str]) -> Marks:
    """The marks of ``owner`` among a floating IP's tags."""
    found: dict[str, set[Home]] = {HOME: set(), FROM: set(), HELD: set(), LEFT: set()}
    for text in tags:
        match = _MARK.match(text)
        if match is not None and match["owner"] == owner:
            found[match["mark"]].add(Home(match["kind"], match["uid"]))
    return Marks(*(frozenset(found[mark]) for mark in (HOME, FROM, HELD, LEFT)))


@dataclass(frozen=True)
class Change:
    """The tags to add (first) and to remove (then: a floating IP is never without a mark on the way), and the
    home of another cluster the floating IP stays homed at while a live claim here is bound to it."""

    add: tuple[str, ...] = ()
    remove: tuple[str, ...] = ()
    elsewhere: Home | None = None
    #: held, waiting to take it over: the home it is at has had no sweep to answer the hold yet
    waiting: bool = False


def mend(owner: str, tags: Iterable[str], mine: Home, home: Callable[[Home], str], take: bool = False) -> Change:
    """What the marks of a floating IP become for the claim here carrying its key and bound to it, whose home is
    ``mine`` (present or paused here). ``take``: this floating IP was found waiting (:attr:`Change.waiting`) by
    the sweep before, so the cluster it is homed at had a sweep to answer this cluster's hold: it may be taken
    over now. Otherwise it is only held (a release meanwhile keeps it)."""
    tags = list(tags)
    marks = marks_in(owner, tags)
    add: list[str] = []
    remove = [tag(owner, HELD, h) for h in marks.holds if h != mine and home(h) != ABSENT]  # holds gone stale
    remove += [tag(owner, LEFT, h) for h in marks.lefts if home(h) != ABSENT]  # a claim here carries the key again

    def ensure(mark: str, h: Home) -> None:
        if tag(owner, mark, h) not in tags:
            add.append(tag(owner, mark, h))

    def drop(mark: str, homes: Iterable[Home]) -> None:
        remove.extend(tag(owner, mark, h) for h in homes)
    ours = {h for h in marks.homes if h != mine and home(h) != ABSENT}  # another object here: rehomed freely
    theirs = {h for h in marks.homes if home(h) == ABSENT}
    elsewhere = None
    if home(mine) == PAUSED:
        if mine not in marks.homes or any(home(h) == ABSENT for h in marks.holds):
            ensure(HELD, mine)  # holds (homed elsewhere), or answers another cluster's hold: its claim lives
    elif mine in marks.homes:
        drop(HOME, ours)
        rivals = theirs - marks.froms  # a home it was taken over from is left of a take over cut short
        if rivals and min(rivals | {mine}) != mine:  # two clusters took it over at once: the lowest home stays
            ensure(HELD, mine)
            drop(HOME, [mine])
            elsewhere = min(rivals)
        else:
            drop(HOME, theirs & marks.froms)
            if any(home(h) == ABSENT for h in marks.holds):  # held by another cluster, or left by its claim
                ensure(HELD, mine)  # the home answers another cluster's hold: its claim here lives
            else:
                drop(HELD, [mine] if mine in marks.holds else [])
    elif not theirs:
        ensure(HOME, mine)
        drop(HOME, ours)
        if any(home(h) == ABSENT for h in marks.holds):  # held by a claim of another cluster that left it, say
            ensure(HELD, mine)  # the home answers: its claim here lives
        else:
            drop(HELD, [mine] if mine in marks.holds else [])
        if not ours:
            drop(FROM, marks.froms)  # homed nowhere: whoever it was taken from let it go
    elif (blocked := mine in marks.froms or answered(owner, tags, home)) or not take:
        ensure(HELD, mine)  # taken over from here first, or another cluster holds it: this claim is told
        return Change(tuple(add), tuple(t for t in remove if t in tags), min(theirs) if blocked else None,
                      waiting=not blocked)
    else:
        given = min(theirs)
        ensure(HOME, mine)
        ensure(FROM, given)
        drop(FROM, marks.froms - {given})
        drop(HOME, marks.homes - {mine})
        drop(HELD, [mine] if mine in marks.holds else [])
    return Change(tuple(add), tuple(t for t in remove if t in tags), elsewhere)


def on_release(owner: str, tags: Iterable[str], home: Callable[[Home], str], released: Home | None = None
               ) -> tuple[bool, Change]:
    """The release of a floating IP's key here by a claim at home ``released`` (None: not known here): whether it
    is kept, and the marks written on it. Not kept: no home, hold or ``from`` names an object absent here (taken
    over from another cluster, whose controller may have missed the sweep that would have answered: its claim
    may live); this cluster's marks (its ``from`` too: taken from here, let go) come off. Kept: a claim of
    another cluster may be bound to it. Where that cluster answered a hold (its claim lives) or none was asked,
    this cluster's marks come off and it is that cluster's; where it is homed at (or taken from) another
    cluster that answered no hold (the source of a finished move, gone with its Cluster; or a live claim there
    whose controller did not sweep yet, or missed the sweep before the take), this cluster holds it and says
    its claim left (``<owner>-left:``): that cluster answers if its claim lives, else the sweep here releases it
    (:func:`left_here`)."""
    tags = list(tags)
    marks = marks_in(owner, tags)
    mine = tuple(sorted(tag(owner, mark, h) for mark, found in ((HOME, marks.homes), (FROM, marks.froms),
                                                              (HELD, marks.holds), (LEFT, marks.lefts))
                        for h in found if home(h) != ABSENT))
    if not marks.live(home) and not any(home(h) == ABSENT for h in marks.froms):
        return False, Change(remove=mine)
    if answered(owner, tags, home) or released is None or home(released) == ABSENT:
        return True, Change(remove=mine)
    keep = (tag(owner, HELD, released), tag(owner, LEFT, released))
    return True, Change(add=tuple(t for t in keep if t not in tags), remove=tuple(t for t in mine if t not in keep))


def left_unreleased(owner: str, tags: Iterable[str], home: Callable[[Home], str]) -> Change | None:
    """The marks written on a floating IP whose claim here went without a release (deleted without its finalizer;
    one seen deleted for a ``clusterctl move`` is kept by the sweep instead, until the moved claim's cluster marks
    it) once its pool is gone too, or None where this cluster's marks simply come off. Where this cluster answered
    another cluster's hold (its own hold next to its home) and that hold is gone since, with no mark of another
    cluster's claim left (no home, hold or ``from`` naming an object absent here, nor a ``left`` of one): the claim
    there let the floating IP go trusting this cluster's answer, and the claim that went from here was the last.
    Its marks then become a hold marked ``left`` (the home comes off), as a release here writes: a claim of another
    cluster bound to it homes the floating IP where it is and answers; unanswered for a whole sweep, the sweep here
    releases it (:func:`left_here`)."""
    tags = list(tags)
    marks = marks_in(owner, tags)
    held = sorted(h for h in marks.holds if home(h) != ABSENT)
    if not held or marks.lefts or marks.live(home) or any(home(h) == ABSENT for h in marks.froms):
        return None
    mine = held[0]
    keep = (tag(owner, HELD, mine), tag(owner, LEFT, mine))
    ours = [tag(owner, mark, h) for mark, found in ((HOME, marks.homes), (FROM, marks.froms), (HELD, marks.holds))
            for h in found if home(h) != ABSENT]
    return Change(add=tuple(t for t in keep if t not in tags), remove=tuple(sorted(t for t in ours if t not in keep)))


def answered(owner: str, tags: Iterable[str], home: Callable[[Home], str]) -> bool:
    """Whether a hold of another cluster (an object absent here) is on the floating IP, not left: a claim there
    lives."""
    marks = marks_in(owner, tags)
    return any(home(h) == ABSENT for h in marks.holds - marks.lefts)


def left_here(owner: str, tags: Iterable[str], home: Callable[[Home], str]) -> Home | None:
    """The object here whose claim left a floating IP homed at another cluster (:func:`on_release`), or None."""
    return min((h for h in marks_in(owner, tags).lefts if home(h) != ABSENT), default=None)


def sweepable(owner: str, tags: Iterable[str], home: Callable[[Home], str]) -> bool:
    """Whether a sweep may release a floating IP (its key carried by nothing here) as far as its marks say: each
    names an object here, not paused, or a claim of another cluster that left it (none at all: made by an earlier
    version, judged as before)."""
    marks = marks_in(owner, tags)
    return not marks.live(home) and all(home(h) == PRESENT for h in marks.named() if home(h) != ABSENT)


def stale(owner: str, tags: Iterable[str], home: Callable[[Home], str]) -> tuple[str, ...]:
    """The holds of this cluster on a floating IP whose key no claim here carries any more (the copies of a move
    given up, deleted): taken off by its sweep."""
    return tuple(sorted(tag(owner, HELD, h) for h in marks_in(owner, tags).holds if home(h) != ABSENT))
