"""The asking state (metal3_ipam/core/asking.py): asks, answers late, twice or never, backoff, circuits.

The state machine at the end drives it the way the claim lifecycle and the
adapter will, against a model of NetBox's allocation semantics (one address
per key, lowest free first, deletes by key), with answers delivered in any
order, twice, or lost, claims moved (new uid, same key), deleted and their
names reused (a new claim, no key), and NetBox going down and up.
"""

from __future__ import annotations

from dataclasses import dataclass

import pytest
from hypothesis import HealthCheck, settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, invariant, precondition, rule

from metal3_ipam.core.asking import TIMEOUT_REASON, Ask, Asking, Filed, Granted, Op, Refused, Released


def grant(ask: Ask, address: str = "192.0.2.1/24", id: int = 1) -> Granted:
    return Granted(ask.key, ask.attempt, address, id)


def refuse(ask: Ask, reason: str = "NetBoxFull", *, server_down: bool = False) -> Refused:
    return Refused(ask.key, ask.attempt, reason, f"{reason} for {ask.key}", server_down)


def test_a_wanted_key_is_asked_once_then_granted():
    asking = Asking()
    asking.want("k", "pool", "srv", 0)
    asking.want("k", "pool", "srv", 0)
    [ask] = asking.due(0)
    assert (ask.op, ask.key, ask.pool, ask.server, ask.deadline) == (Op.ALLOCATE, "k", "pool", "srv", 60)
    assert asking.due(1) == [] and asking.result("k") is None
    assert asking.file(grant(ask), 2) is Filed.APPLIED
    assert asking.result("k") == grant(ask)
    assert asking.due(1000) == [] and asking.next_due() is None


def test_duplicate_and_conflicting_grants_leave_the_first():
    asking = Asking()
    asking.want("k", "pool", "srv", 0)
    [ask] = asking.due(0)
    assert asking.file(grant(ask), 1) is Filed.APPLIED
    assert asking.file(grant(ask), 2) is Filed.DUPLICATE
    assert asking.file(grant(ask, "192.0.2.9/24", 9), 3) is Filed.CONFLICT
    assert asking.file(refuse(ask), 4) is Filed.STALE
    assert asking.result("k") == grant(ask)


def test_refusals_back_off_exponentially_to_the_cap():
    asking = Asking(base=1, cap=10)
    asking.want("k", "pool", "srv", 0)
    now, waits = 0.0, []
    for _ in range(6):
        [ask] = asking.due(now)
        assert asking.file(refuse(ask), now) is Filed.APPLIED
        assert asking.result("k").reason == "NetBoxFull"
        waits.append(asking.next_due() - now)
        assert asking.due(now + waits[-1] - 0.01) == []
        now += waits[-1]
    spread = waits[0]  # 1 s times the key's spread (1 to 1.25)
    assert 1 <= spread < 1.25
    assert waits == pytest.approx([spread, 2 * spread, 4 * spread, 8 * spread, 10, 10])


def test_no_answer_by_the_deadline_is_a_timeout_then_the_late_grant_still_counts():
    asking = Asking(deadline=5, base=1)
    asking.want("k", "pool", "srv", 0)
    [first] = asking.due(0)
    assert asking.due(4.9) == []
    assert asking.due(5) == []  # timed out: backing off, the server's asks put off
    refused = asking.result("k")
    assert refused.reason == TIMEOUT_REASON and "no answer within 5s" in refused.message
    assert asking.asks_put_off("srv", 5.5)
    [second] = asking.due(20)
    assert second.attempt != first.attempt
    assert asking.file(refuse(first, "NetBoxUnreachable"), 21) is Filed.STALE  # the old ask's refusal
    assert asking.file(grant(first), 22) is Filed.APPLIED  # the old ask's grant: the key's address
    assert asking.file(grant(second), 23) is Filed.DUPLICATE
    assert asking.result("k") == grant(first)


def test_a_dead_server_holds_back_only_its_own_asks_then_one_probe():
    asking = Asking(base=1, cap=30, per_server=8)
    for i in range(5):
        asking.want(f"dead{i}", "p1", "dead", 0)
        asking.want(f"live{i}", "p2", "live", 0)
    asks = asking.due(0)
    assert len(asks) == 10
    for ask in asks:
        if ask.server == "dead":
            asking.file(refuse(ask, "NetBoxUnreachable", server_down=True), 1)
        else:
            asking.file(grant(ask, f"10.0.0.{ask.key[-1]}/24"), 1)
    assert all(isinstance(asking.result(f"live{i}"), Granted) for i in range(5))
    assert asking.asks_put_off("dead", 2) and not asking.asks_put_off("live", 2)
    asking.want("live9", "p2", "live", 2)
    [live9] = asking.due(2)  # the live server is not held by the dead one
    assert live9.key == "live9"
    asking.file(grant(live9, "10.0.0.9/24", 9), 3)
    later = asking.due(1000)
    assert len(later) == 1 and later[0].server == "dead"  # one probe
    assert asking.due(1001) == []  # the others wait for the probe
    asking.file(grant(later[0], "10.1.0.1/24", 77), 1002)
    assert {a.server for a in asking.due(1002)} == {"dead"} and not asking.asks_put_off("dead", 1002)


def test_per_server_bound_on_asks_out():
    asking = Asking(per_server=3)
    for i in range(10):
        asking.want(f"k{i}", "pool", "srv", 0)
    first = asking.due(0)
    assert len(first) == 3 and asking.due(0) == []
    asking.file(grant(first[0]), 1)
    assert len(asking.due(1)) == 1


def test_release_waits_for_the_allocation_out_then_goes():
    asking = Asking(deadline=10)
    asking.want("k", "pool", "srv", 0)
    [alloc] = asking.due(0)
    asking.release("k", "pool", "srv", 1)
    assert asking.result("k") is None
    assert asking.due(2) == []  # the allocation is still out
    assert asking.file(grant(alloc), 3) is Filed.LATE
    [rel] = asking.due(3)
    assert rel.op is Op.RELEASE and rel.key == "k"
    assert asking.file(Released("k", rel.attempt), 4) is Filed.RELEASED
    assert asking.state("k") is None and asking.due(100) == []
    assert asking.file(Released("k", rel.attempt), 5) is Filed.LATE  # twice


def test_a_grant_after_the_release_looked_asks_for_another_release():
    asking = Asking(deadline=10)
    asking.want("k", "pool", "srv", 0)
    [alloc] = asking.due(0)
    asking.release("k", "pool", "srv", 1)
    assert asking.due(10) == []  # the allocation timed out: the release goes once the server's backoff ends
    [rel] = asking.due(40)
    assert rel.op is Op.RELEASE
    assert asking.file(grant(alloc), 41) is Filed.LATE  # made after all, maybe after the release looked
    assert asking.file(Released("k", rel.attempt), 42) is Filed.APPLIED  # ... so it is released once more
    [again] = asking.due(42)
    assert again.op is Op.RELEASE
    assert asking.file(Released("k", again.attempt), 43) is Filed.RELEASED
    assert asking.file(grant(alloc), 44) is Filed.LATE  # and once more, after it was released
    [third] = asking.due(44)
    assert third.op is Op.RELEASE


def test_forgotten_keys_ignore_late_answers():
    asking = Asking()
    asking.want("k", "pool", "srv", 0)
    [ask] = asking.due(0)
    asking.forget("k", 1)
    assert asking.file(grant(ask), 2) is Filed.LATE
    assert asking.due(100) == [] and asking.result("k") is None


def test_a_release_of_a_key_never_seen_is_asked_after_a_restart():
    asking = Asking()
    asking.release("k", "pool", "srv", 0)
    [ask] = asking.due(0)
    assert ask.op is Op.RELEASE
    assert asking.file(refuse(ask, "NetBoxTokenRefused"), 1) is Filed.APPLIED
    assert asking.result("k") is None and asking.state("k").failures == 1


# --------------------------------------------------------------------------- the state machine


class NetBoxModel:
    """NetBox's allocation semantics: one address per key, the lowest free first, delete by key."""

    def __init__(self, size: int):
        self.free = list(range(1, size + 1))
        self.by_key: dict[str, tuple[str, int]] = {}
        self.next_id = 1
        self.up = True
        self.made: dict[str, list[int]] = {}

    def run(self, ask: Ask):
        if not self.up:
            return Refused(ask.key, ask.attempt, "NetBoxUnreachable", "down", True)
        if ask.op is Op.RELEASE:
            found = self.by_key.pop(ask.key, None)
            if found:
                self.free.append(int(found[0].split(".")[-1].split("/")[0]))
                self.free.sort()
            return Released(ask.key, ask.attempt)
        if ask.key in self.by_key:
            address, id = self.by_key[ask.key]
            return Granted(ask.key, ask.attempt, address, id)
        if not self.free:
            return Refused(ask.key, ask.attempt, "NetBoxFull", "full")
        host = self.free.pop(0)
        self.by_key[ask.key] = (f"192.0.2.{host}/24", self.next_id)
        self.made.setdefault(ask.key, []).append(self.next_id)
        self.next_id += 1
        return Granted(ask.key, ask.attempt, *self.by_key[ask.key])


@dataclass
class Claim:
    uid: int
    key: str | None = None
    deleting: bool = False
    address: str | None = None


NAMES = ["a", "b", "c", "d", "e"]


class AskingInTheWorld(RuleBasedStateMachine):
    def __init__(self):
        super().__init__()
        self.asking = Asking(deadline=10, base=1, cap=8, per_server=3, tombstone=1000)
        self.netbox = NetBoxModel(size=4)
        self.claims: dict[str, Claim] = {}
        self.now = 0.0
        self.uids = 0
        self.keys = 0
        self.network: list[Ask] = []
        self.answers: list = []
        self.moved_away: set[str] = set()

    def new_uid(self) -> int:
        self.uids += 1
        return self.uids

    # -- the claims ---------------------------------------------------------------------

    @rule(name=st.sampled_from(NAMES))
    def create(self, name):
        if name not in self.claims:
            self.claims[name] = Claim(self.new_uid())  # a reused name: a new claim, no key

    @rule(name=st.sampled_from(NAMES))
    def give_key(self, name):
        claim = self.claims.get(name)
        if claim and claim.key is None and not claim.deleting:
            self.keys += 1
            claim.key = f"key{self.keys}"  # the annotation, written before anything is asked

    @rule(name=st.sampled_from(NAMES))
    def delete(self, name):
        claim = self.claims.get(name)
        if claim is None:
            return
        if claim.key is None:
            del self.claims[name]
        else:
            claim.deleting = True

    @rule(name=st.sampled_from(NAMES))
    def move_within(self, name):
        """clusterctl move and back: a new uid, the same annotation."""
        if name in self.claims:
            self.claims[name].uid = self.new_uid()

    @rule(name=st.sampled_from(NAMES))
    def move_away(self, name):
        """The claim left for another cluster (deleted for move): its key is forgotten, its address stays."""
        claim = self.claims.get(name)
        if claim and claim.key and not claim.deleting:
            self.asking.forget(claim.key, self.now)
            self.moved_away.add(claim.key)
            del self.claims[name]

    # -- the lifecycle's pass -------------------------------------------------------------

    @rule()
    def sync(self):
        for claim in self.claims.values():
            if claim.key is None:
                continue
            if claim.deleting:
                self.asking.release(claim.key, "pool", "srv", self.now)
                continue
            result = self.asking.result(claim.key)
            if isinstance(result, Granted):
                assert claim.address in (None, result.address), "a claim given a second address"
                claim.address = result.address
            elif claim.address is None:
                self.asking.want(claim.key, "pool", "srv", self.now)

    # -- time, the adapter and NetBox -------------------------------------------------------

    @rule(dt=st.sampled_from([0.5, 1.0, 3.0, 11.0]))
    def tick(self, dt):
        self.now += dt
        self.network.extend(self.asking.due(self.now))

    @precondition(lambda self: self.network)
    @rule(data=st.data(), lose=st.booleans())
    def execute(self, data, lose):
        ask = self.network.pop(data.draw(st.integers(0, len(self.network) - 1)))
        if self.now >= ask.deadline:
            return  # the adapter gave up on it at its deadline: never sent
        answer = self.netbox.run(ask)
        if not lose:
            self.answers.append(answer)

    @precondition(lambda self: self.answers)
    @rule(data=st.data(), twice=st.booleans())
    def deliver(self, data, twice):
        i = data.draw(st.integers(0, len(self.answers) - 1))
        answer = self.answers[i] if twice else self.answers.pop(i)
        filed = self.asking.file(answer, self.now)
        if filed is Filed.RELEASED:
            [name] = [n for n, c in self.claims.items() if c.key == answer.key]
            assert self.claims[name].deleting
            assert answer.key not in self.netbox.by_key
            del self.claims[name]

    @rule(data=st.data())
    def restart(self, data):
        """The controller killed and started again: its asking state, asks and answers in flight gone.

        NetBox may still carry out what was sent (its answers lost), also between its answer and the
        write of the claim's address; the claims keep their annotations and the addresses written.
        """
        for ask in self.network:
            if self.now < ask.deadline and data.draw(st.booleans()):
                self.netbox.run(ask)
        self.network.clear()
        self.answers.clear()
        self.asking = Asking(deadline=10, base=1, cap=8, per_server=3, tombstone=1000)

    @rule()
    def netbox_down(self):
        self.netbox.up = False

    @rule()
    def netbox_up(self):
        self.netbox.up = True

    # -- what must always hold --------------------------------------------------------------

    @invariant()
    def never_two_netbox_addresses_for_one_key(self):
        for key, ids in self.netbox.made.items():
            live = [i for i in ids if self.netbox.by_key.get(key, (None, None))[1] == i]
            assert len(live) <= 1
            if key not in self.released_keys():
                # Made more than once only if released in between (the key's claim gone or going).
                assert len(ids) == 1 or key in self.asking.releasing() or self.is_deleting(key), (key, ids)

    def released_keys(self) -> set[str]:
        live = {c.key for c in self.claims.values() if c.key}
        return {k for k in self.netbox.made if k not in live and k not in self.moved_away}

    def is_deleting(self, key: str) -> bool:
        return any(c.key == key and c.deleting for c in self.claims.values())

    @invariant()
    def an_address_on_a_claim_is_the_one_netbox_holds_for_its_key(self):
        for claim in self.claims.values():
            if claim.address is not None and not claim.deleting:
                assert self.netbox.by_key.get(claim.key, (None,))[0] == claim.address, claim
        held = [c.address for c in self.claims.values() if c.address and not c.deleting]
        assert len(held) == len(set(held))

    @invariant()
    def a_grant_is_read_only_through_the_key_its_claim_carries(self):
        for claim in self.claims.values():
            if claim.key is None:
                assert claim.address is None
            result = self.asking.result(claim.key) if claim.key else None
            if isinstance(result, Granted):
                assert result.key == claim.key

    # -- and eventually, while NetBox answers ---------------------------------------------

    def teardown(self):
        self.netbox.up = True
        for _ in range(200):
            self.sync()
            self.now += 11.0
            self.network.extend(self.asking.due(self.now))
            for ask in self.network:
                self.answers.append(self.netbox.run(ask))
            self.network.clear()
            while self.answers:
                answer = self.answers.pop(0)
                if self.asking.file(answer, self.now) is Filed.RELEASED:
                    self.claims = {n: c for n, c in self.claims.items() if c.key != answer.key}
            if self.asking.next_due() is None and not self.answers:
                break
            full = all(isinstance(self.asking.result(k), Refused) and self.asking.result(k).reason == "NetBoxFull"
                       for k in self.asking.wanted())
            if full and not self.asking.releasing():
                break
        self.sync()
        assert not any(c.deleting for c in self.claims.values()), "a deleted claim's key never released"
        for claim in self.claims.values():
            if claim.key:
                assert self.asking.result(claim.key) is not None or claim.address, f"{claim} never answered"
        keys = {c.key for c in self.claims.values() if c.key}
        assert set(self.netbox.by_key) <= keys | self.moved_away, "an address left in NetBox for no claim"


AskingInTheWorld.TestCase.settings = settings(
    max_examples=300, stateful_step_count=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
TestAskingInTheWorld = AskingInTheWorld.TestCase


def test_next_due_never_wakes_for_keys_waiting_on_a_slot():
    asking = Asking(per_server=2, deadline=30, base=1)
    for i in range(5):
        asking.want(f"k{i}", "pool", "srv", 0)
    out = asking.due(0)
    assert len(out) == 2
    assert asking.next_due() == 30  # the others wait for an answer, or the deadline of those out
    asking.file(refuse(out[0], "NetBoxUnreachable", server_down=True), 1)
    asking.file(refuse(out[1], "NetBoxUnreachable", server_down=True), 1)
    held_until = asking.next_due()
    assert held_until > 1 and asking.due(held_until - 0.001) == []
    [probe] = asking.due(held_until)
    assert asking.next_due() == probe.deadline  # nothing else until the probe is answered
    asking.file(grant(probe), held_until + 1)
    assert asking.next_due() <= held_until + 1


def test_a_server_refusing_as_down_is_put_off_longer_each_probe():
    """A dead NetBox answers at once (connection refused): each refused probe must lengthen its circuit."""
    asking = Asking(base=1, cap=300, per_server=4)
    for i in range(50):  # enough keys that some key is always due: only the circuit paces the probes
        asking.want(f"k{i}", "pool", "dead", 0)
    now, holds = 0.0, []
    for _ in range(6):
        asks = asking.due(now)
        assert asks
        for ask in asks:
            asking.file(refuse(ask, "NetBoxUnreachable", server_down=True), now)
        nxt = asking.next_due()
        holds.append(nxt - now)
        now = nxt
    assert all(later >= 1.9 * earlier for earlier, later in zip(holds[1:], holds[2:])), holds


# --------------------------------------------------------------------------- NetBox carrying out an ask late


class AskingWithLateCommits(AskingInTheWorld):
    """The model above lets NetBox carry out an ask only before its deadline: an ask the adapter gave up
    on is "never sent". The adapter sends every ask at once, and NetBox carries out a request whose
    client went away (gunicorn finishes it; ``available-ips`` may wait behind its advisory lock): here
    an ask the adapter gave up on may still be carried out, within ``LINGER`` seconds of its deadline,
    its answer reaching nobody. That is the order "the deadline expires while NetBox commits".
    """

    LINGER = 15.0

    @precondition(lambda self: any(self.now >= a.deadline for a in self.network))
    @rule(data=st.data())
    def carry_out_late(self, data):
        late = [a for a in self.network if self.now >= a.deadline]
        ask = late[data.draw(st.integers(0, len(late) - 1))]
        self.network.remove(ask)
        if self.now < ask.deadline + self.LINGER:
            self.netbox.run(ask)


AskingWithLateCommits.TestCase.settings = settings(
    max_examples=300, stateful_step_count=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
TestAskingWithLateCommits = AskingWithLateCommits.TestCase


def test_a_release_answered_before_a_timed_out_allocation_commits_never_leaves_its_address_in_netbox():
    """The order spelled out: the release looks before NetBox carries out the allocation the adapter gave up on."""
    asking = Asking(deadline=10, base=1, linger=30)
    netbox = NetBoxModel(size=4)
    asking.want("k", "pool", "srv", 0)
    [alloc] = asking.due(0)  # sent; NetBox is slow (the advisory lock), the adapter gives up at 10
    asking.release("k", "pool", "srv", 5)  # the claim is deleted meanwhile
    assert asking.due(10) == []  # the allocation timed out
    [rel] = asking.due(20)
    assert asking.file(netbox.run(rel), 21) is not Filed.RELEASED  # nothing found yet, but it may still come
    netbox.run(alloc)  # NetBox commits the allocation it was still carrying out; its answer reaches nobody
    now, filed = 21.0, []
    while (nxt := asking.next_due()) is not None:
        now = max(now, nxt)
        filed += [(asking.file(netbox.run(ask), now), now) for ask in asking.due(now)]
    assert "k" not in netbox.by_key, "an address left in NetBox for a key no claim carries"
    assert filed[-1][0] is Filed.RELEASED and filed[-1][1] >= 10 + 30  # released once NetBox cannot make it


def test_a_refused_release_keeps_its_reason_for_the_deleted_claim_to_show():
    """A release NetBox refuses (the token lacks delete, the server is down) holds the claim's finalizer: why must show."""
    asking = Asking(deadline=10, base=1)
    asking.want("k", "pool", "srv", 0)
    [alloc] = asking.due(0)
    asking.file(grant(alloc), 1)
    asking.release("k", "pool", "srv", 2)
    [rel] = asking.due(2)
    assert asking.file(refuse(rel, "TokenRefused"), 3) is Filed.APPLIED
    state = asking.state("k")
    assert state.releasing and isinstance(state.result, Refused), state
    assert state.result.reason == "TokenRefused" and "k" in state.result.message
    [again] = asking.due(100)
    assert again.op is Op.RELEASE  # and the release timing out says so too
    asking.due(again.deadline)
    assert asking.state("k").result.reason == TIMEOUT_REASON
    assert asking.result("k") is None  # what the claim is given: nothing, it is going


def test_a_pool_moved_to_another_server_while_its_ask_is_out_never_holds_back_the_new_one():
    """The pool is pointed at another NetBox while an ask of its key is out on the old, dead one."""
    asking = Asking(deadline=10, base=1, per_server=1)
    asking.want("k", "pool", "dead", 0)
    [out] = asking.due(0)
    assert out.server == "dead"
    asking.want("k", "pool", "live", 1)  # the pool's spec now names the live server
    asking.want("other", "pool2", "live", 1)
    [other] = asking.due(1)  # the ask out is the dead server's, not a slot of the live one
    assert other.key == "other"
    asking.file(grant(other, "10.0.0.2/24", 2), 2)
    asking.due(10)  # the dead server's ask times out
    assert asking.asks_put_off("dead", 10.5) and not asking.asks_put_off("live", 10.5)
    asking.want("third", "pool2", "live", 10.5)
    assert [a.key for a in asking.due(10.5)] == ["third"]


def test_a_burst_refused_as_the_server_down_counts_once_so_the_probe_comes_soon():
    asking = Asking()
    for i in range(20):
        asking.want(f"k{i}", "pool", "server", 0.0)
    asks = asking.due(0.0)
    assert len(asks) == asking.per_server
    for ask in asks:  # every ask out when the server went down fails together
        asking.file(Refused(ask.key, ask.attempt, "NetBoxUnreachable", "refused", server_down=True), 0.1)
    assert asking.next_due() < 0.1 + 2 * asking.base  # one failure's backoff, not the cap
    probe = asking.due(asking.next_due())
    assert len(probe) == 1
    asking.file(Refused(probe[0].key, probe[0].attempt, "NetBoxUnreachable", "refused", server_down=True), 3.0)
    assert 3.0 + asking.base < asking.next_due() < 3.0 + 4 * asking.base  # the probe's failure doubles it
