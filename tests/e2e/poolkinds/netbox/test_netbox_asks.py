"""Asks of NetBox pools run by the adapter (poolkinds/netbox/asks.py) and filed by the core (core/asking.py).

Against the real NetBox of the session and the real API server (tokens are
read from Secrets): the loop here is the claim lifecycle's in miniature:
hand out what is due, run it, file each answer as it comes.
"""

from __future__ import annotations

import asyncio
import time
import uuid

from metal3_ipam.poolkinds.netbox.asks import NetBoxAsks, SecretTokens
from metal3_ipam.core.asking import Asking, Filed, Granted, Refused, Released
from metal3_ipam.poolkinds.netbox.source import Reason, owned_key
from metal3_ipam.poolkinds.netbox.pool import TOKEN_MISSING, pool_status
from netbox_fixtures import addresses_in, fresh, holding, make_pool, owner, put_secret, seeded

LEAST = [  # the token's least NetBox permissions, as docs/pools/netbox.md gives them
    (["ipam.prefix", "ipam.iprange", "ipam.vrf"], ["view"]),
    (["ipam.ipaddress"], ["view", "add", "change", "delete"]),
    (["extras.customfield"], ["view"]),
]


def revoke(netbox, username: str) -> None:
    for token in netbox.api("GET", f"users/tokens/?user={username}")["results"]:
        netbox.api("DELETE", f"users/tokens/{token['id']}/")


async def drive(asking: Asking, asks: NetBoxAsks, done, timeout: float, *, filed: list | None = None) -> float:
    """Hand out what is due, run it, file the answers, until ``done()``; the seconds it took."""
    answers: asyncio.Queue = asyncio.Queue()
    t0 = time.monotonic()
    while not done():
        now = time.monotonic()
        assert now - t0 < timeout, f"not done within {timeout}s: {[asking.state(k) for k in asking.wanted()]}"
        asks.send(asking.due(now), answers.put_nowait)
        nxt = asking.next_due()
        wait = 0.2 if nxt is None else min(max(nxt - now, 0.01), 0.2)
        try:
            answer = await asyncio.wait_for(answers.get(), wait)
        except TimeoutError:
            continue
        outcome = asking.file(answer, time.monotonic())
        if filed is not None:
            filed.append((answer, outcome))
    return time.monotonic() - t0


def granted(asking: Asking, keys) -> bool:
    return all(isinstance(asking.result(k), Granted) for k in keys)


def test_keys_granted_one_netbox_address_each_gateway_reserved_and_released(netbox, api_client, namespace):
    net = seeded(netbox, 29)  # .1 … .6; .1 the gateway NetBox does not hold
    who = owner()
    user = f"u{uuid.uuid4().hex[:8]}"
    put_secret(api_client, namespace, "netbox", netbox.make_token(user, LEAST))
    pool = make_pool(namespace, "nb", netbox.url, {"prefix": str(net)}, gateway=str(net[1]))
    keys = [f"k{i}" for i in range(5)]

    async def run():
        asks = NetBoxAsks(SecretTokens(api_client), owner=who)
        asks.pool_changed(pool)
        asking = Asking(deadline=30)
        replica = Asking(deadline=30)  # a second replica asking for the same keys
        for key in keys:
            asking.want(key, ("ns", "x"), pool.server, 0)  # a pool it does not know: refused, not raised
        missing = await asks.ask(asking.due(time.monotonic())[0])
        asking = Asking(deadline=30)
        for key in keys:
            asking.want(key, (namespace, "nb"), pool.server, time.monotonic())
            replica.want(key, (namespace, "nb"), pool.server, time.monotonic())
        await asyncio.gather(drive(asking, asks, lambda: granted(asking, keys), 60),
                             drive(replica, asks, lambda: granted(replica, keys), 60))
        survey = await asks.survey(pool)
        for key in keys[:2]:
            asking.release(key, (namespace, "nb"), pool.server, time.monotonic())
        filed: list = []
        await drive(asking, asks, lambda: not asking.releasing(), 60, filed=filed)
        await asks.close()
        return missing, asking, replica, survey, filed

    missing, asking, replica, survey, filed = asyncio.run(run())
    assert isinstance(missing, Refused) and missing.reason == "PoolNotFound"
    mine = {k: asking.result(k) for k in keys[2:]}
    assert {k: replica.result(k).address for k in keys} == {
        **{k: g.address for k, g in mine.items()},
        **{k: replica.result(k).address for k in keys[:2]}}
    theirs = sorted(replica.result(k).address for k in keys)
    assert theirs == [f"{net[i]}/29" for i in range(2, 7)], (net, theirs, addresses_in(netbox, net))  # never the gateway
    held = addresses_in(netbox, net)
    assert held[str(net[1])]["status"]["value"] == "reserved"  # reserved there, keyless
    for key in keys[2:]:
        assert len(holding(netbox, owned_key(who, key))) == 1
    for key in keys[:2]:
        assert holding(netbox, owned_key(who, key)) == []
    assert sorted(o for _, o in filed) == [Filed.RELEASED, Filed.RELEASED]
    assert (survey.reason, survey.size, survey.used) == (None, 6, 6)
    status = pool_status(pool, survey, now="2026-01-01T00:00:00Z")
    assert status["conditions"][0]["status"] == "True" and status["free"] == "0"


def test_netbox_stopped_and_restarted_mid_ask(netbox, api_client, namespace):
    net = seeded(netbox, 27)
    who = owner()
    put_secret(api_client, namespace, "netbox", netbox.token)
    pool = make_pool(namespace, "nb", netbox.url, {"prefix": str(net)})
    keys = [f"k{i}" for i in range(12)]

    async def run():
        asks = NetBoxAsks(SecretTokens(api_client), owner=who, timeout=3)
        asks.pool_changed(pool)
        asking = Asking(deadline=20, base=0.5, cap=4)
        for key in keys:
            asking.want(key, (namespace, "nb"), pool.server, time.monotonic())
        filed: list = []
        with netbox.slowed(0.3):
            first = asyncio.create_task(drive(asking, asks, lambda: granted(asking, keys), 120, filed=filed))
            while not any(isinstance(a, Granted) for a, _ in filed):  # some answered, others still out
                await asyncio.sleep(0.05)
            await asyncio.to_thread(netbox.stop_server)
            while not any(isinstance(a, Refused) and a.server_down for a, _ in filed):
                await asyncio.sleep(0.05)
            put_off = asking.asks_put_off(pool.server, time.monotonic())
            await asyncio.to_thread(netbox.start_server)
        seconds = await first
        await asks.close()
        return asking, filed, put_off, seconds

    asking, filed, put_off, seconds = asyncio.run(run())
    assert put_off
    refusals = {a.reason for a, _ in filed if isinstance(a, Refused)}
    assert refusals <= {"NetBoxUnreachable", "NetBoxTimeout"} and refusals, refusals
    addresses = [asking.result(k).address for k in keys]
    assert len(set(addresses)) == len(keys)
    for key in keys:  # one NetBox address per key, the one the key was granted
        [record] = holding(netbox, owned_key(who, key))
        assert record["address"] == asking.result(key).address
    assert len(addresses_in(netbox, net)) == len(keys)  # nothing else was made
    print(f"\n12 keys through a NetBox stopped and restarted: {seconds:.1f}s, "
          f"{sum(isinstance(a, Refused) for a, _ in filed)} refusals filed")


def test_token_missing_revoked_and_rotated(netbox, api_client, namespace):
    net = seeded(netbox, 29)
    who = owner()
    user = f"u{uuid.uuid4().hex[:8]}"
    pool = make_pool(namespace, "nb", netbox.url, {"prefix": str(net)}, secret="nb-token")
    where = (namespace, "nb")

    async def one(asking: Asking, asks: NetBoxAsks, key: str):
        asking.want(key, where, pool.server, time.monotonic())
        [ask] = asking.due(time.monotonic())
        answer = await asks.ask(ask)
        asking.file(answer, time.monotonic())
        return answer

    async def run():
        tokens = SecretTokens(api_client, ttl=3600)  # only a refusal makes it read the Secret again
        asks = NetBoxAsks(tokens, owner=who)
        asks.pool_changed(pool)
        asking = Asking()
        no_secret = await one(asking, asks, "a")
        no_secret_survey = await asks.survey(pool)
        put_secret(api_client, namespace, "nb-token", "x", key="other")
        no_key = await one(Asking(), asks, "a")
        put_secret(api_client, namespace, "nb-token", netbox.make_token(user, LEAST))
        ok = await one(Asking(), asks, "a")
        revoke(netbox, user)
        revoked = await one(Asking(), asks, "b")
        revoked_survey = await asks.survey(pool)
        put_secret(api_client, namespace, "nb-token", netbox.make_token(user + "r", LEAST))
        rotated = await one(Asking(), asks, "b")
        await asks.close()
        return no_secret, no_secret_survey, no_key, ok, revoked, revoked_survey, rotated

    no_secret, no_secret_survey, no_key, ok, revoked, revoked_survey, rotated = asyncio.run(run())
    assert no_secret.reason == TOKEN_MISSING and f"Secret {namespace}/nb-token" in no_secret.message
    assert "does not exist" in no_secret.message and not no_secret.server_down
    assert no_secret_survey.reason == TOKEN_MISSING
    assert no_key.reason == TOKEN_MISSING and "no key 'token'" in no_key.message
    assert isinstance(ok, Granted) and ok.address == f"{net[1]}/29"
    assert isinstance(revoked, Refused) and revoked.reason == "TokenRefused" and not revoked.server_down
    assert revoked_survey.reason == "TokenRefused"
    status = pool_status(pool, revoked_survey, now="2026-01-01T00:00:00Z")
    assert (status["conditions"][0]["status"], status["conditions"][0]["reason"]) == ("False", "TokenRefused")
    assert isinstance(rotated, Granted) and rotated.address == f"{net[2]}/29"


def test_a_paused_netbox_delays_only_its_own_pools(netbox, api_client, namespace):
    """Pool A on the plain gunicorn, frozen; pool B on a second gunicorn of the same NetBox (https)."""
    tls_url, ca = netbox.serve_tls()
    net_a, net_b = seeded(netbox, 28), seeded(netbox, 28)
    who = owner()
    put_secret(api_client, namespace, "netbox", netbox.token)
    pool_a = make_pool(namespace, "a", netbox.url, {"prefix": str(net_a)})
    pool_b = make_pool(namespace, "b", tls_url, {"prefix": str(net_b)}, server={"caBundle": ca.decode()})
    keys_a, keys_b = [f"a{i}" for i in range(4)], [f"b{i}" for i in range(4)]
    keys_base = [f"base{i}" for i in range(4)]

    async def run():
        # Timeouts and deadlines longer than the test: A's asks hang for as long as its NetBox is frozen, so
        # B's answers coming meanwhile show B was never behind them, however slow the machine.
        asks = NetBoxAsks(SecretTokens(api_client), owner=who, timeout=300)
        for pool in (pool_a, pool_b):
            asks.pool_changed(pool)
        asking = Asking(deadline=300, base=0.5, cap=2)
        for key in keys_base:  # the same on B with A answering: the baseline
            asking.want(key, (namespace, "b"), pool_b.server, time.monotonic())
        baseline = await drive(asking, asks, lambda: granted(asking, keys_base), 120)
        a_answers: list = []
        with netbox.paused():
            for key in keys_a:
                asking.want(key, (namespace, "a"), pool_a.server, time.monotonic())
            asks.send(asking.due(time.monotonic()), a_answers.append)  # A's asks go out first, and hang
            await asyncio.sleep(0)
            for key in keys_b:
                asking.want(key, (namespace, "b"), pool_b.server, time.monotonic())
            b_seconds = await drive(asking, asks, lambda: granted(asking, keys_b), 120)
            a_hanging = not a_answers
            a_waiting = [asking.result(k) for k in keys_a]
        t0 = time.monotonic()
        while len(a_answers) < len(keys_a):  # A's first asks, answered once its NetBox is back
            assert time.monotonic() - t0 < 120, f"A's first asks were not answered: {a_answers}"
            await asyncio.sleep(0.05)
        for answer in a_answers:
            asking.file(answer, time.monotonic())
        await drive(asking, asks, lambda: granted(asking, keys_a), 120)
        total = time.monotonic() - t0
        await asks.close()
        return baseline, b_seconds, a_hanging, a_waiting, total, asking

    baseline, b_seconds, a_hanging, a_waiting, total, asking = asyncio.run(run())
    assert a_hanging, "A's asks ended before B's were answered: B may have waited for them"
    assert all(not isinstance(r, Granted) for r in a_waiting)
    for key in keys_a + keys_b:
        assert len(holding(netbox, owned_key(who, key))) == 1
    print(f"\npool B: 4 keys in {baseline:.2f}s, then in {b_seconds:.2f}s while pool A's NetBox was frozen; "
          f"A after: {total:.1f}s")


def test_survey_of_a_missing_prefix_and_range(netbox, api_client, namespace):
    put_secret(api_client, namespace, "netbox", netbox.token)
    net = fresh(29)
    prefix = make_pool(namespace, "p", netbox.url, {"prefix": str(net)})
    ranged = make_pool(namespace, "r", netbox.url, {"ipRange": f"{net[1]}-{net[3]}"})
    dead = make_pool(namespace, "d", "http://127.0.0.1:9", {"prefix": str(net)})

    async def run():
        # Patient: a busy NetBox's answer is what is looked at, never a timeout (the dead one refuses at once).
        asks = NetBoxAsks(SecretTokens(api_client), owner=owner(), timeout=120)
        found = [await asks.survey(p) for p in (prefix, ranged, dead)]
        await asks.close()
        return found

    missing_prefix, missing_range, unreachable = asyncio.run(run())
    assert missing_prefix.reason == "PrefixNotFound" and str(net) in missing_prefix.message
    assert missing_range.reason == "IPRangeNotFound"
    assert unreachable.reason == "NetBoxUnreachable" and "127.0.0.1:9" in unreachable.message
    previous = {"size": "6", "used": "1", "free": "5",
                "conditions": [{"type": "Ready", "status": "False", "lastTransitionTime": "2025-01-01T00:00:00Z"}]}
    status = pool_status(prefix, missing_prefix, now="2026-01-01T00:00:00Z", previous=previous)
    ready = status["conditions"][0]
    assert (ready["status"], ready["reason"], ready["lastTransitionTime"]) == (
        "False", "PrefixNotFound", "2025-01-01T00:00:00Z")
    assert status["free"] == "5"  # the last counts NetBox gave


def test_each_of_the_least_permissions_is_needed(netbox, api_client, namespace):
    """A token short of one permission docs/pools/netbox.md lists fails the operation that needs it, never silently.

    Measured: NetBox answers 403 to every request its token lacks the permission for (none answers 404,
    which a release would take for released).
    """
    who = owner()
    base = f"u{uuid.uuid4().hex[:6]}"
    without = {
        "view prefix": [(["ipam.iprange", "ipam.vrf"], ["view"]), LEAST[1], LEAST[2]],
        "view ipaddress": [LEAST[0], (["ipam.ipaddress"], ["add", "change", "delete"]), LEAST[2]],
        "add ipaddress": [LEAST[0], (["ipam.ipaddress"], ["view", "change", "delete"]), LEAST[2]],
        "change ipaddress": [LEAST[0], (["ipam.ipaddress"], ["view", "add", "delete"]), LEAST[2]],
        "delete ipaddress": [LEAST[0], (["ipam.ipaddress"], ["view", "add", "change"]), LEAST[2]],
        "view customfield": [LEAST[0], LEAST[1]],
    }

    async def attempt(token: str, key: str):
        net = seeded(netbox, 28)  # a prefix of its own: its gateway not reserved yet
        pool = make_pool(namespace, "nb", netbox.url, {"prefix": str(net)}, gateway=str(net[1]))
        put_secret(api_client, namespace, "netbox", token)
        asks = NetBoxAsks(SecretTokens(api_client, ttl=0), owner=who)
        asks.pool_changed(pool)
        asking = Asking()
        asking.want(key, (namespace, "nb"), pool.server, time.monotonic())
        [ask] = asking.due(time.monotonic())
        first = await asks.ask(ask)
        asking.file(first, time.monotonic())
        again = Asking()  # a retry of the same key (a restart): must find the first address
        again.want(key, (namespace, "nb"), pool.server, time.monotonic())
        second = await asks.ask(again.due(time.monotonic())[0])
        releasing = Asking()
        releasing.release(key, (namespace, "nb"), pool.server, time.monotonic())
        released = await asks.ask(releasing.due(time.monotonic())[0])
        survey = await asks.survey(pool)
        await asks.close()
        return first, second, released, survey

    async def run():
        results = {"all": await attempt(netbox.make_token(base, LEAST), "all")}
        for i, (left_out, permissions) in enumerate(without.items()):
            results[left_out] = await attempt(netbox.make_token(f"{base}{i}", permissions), f"k{i}")
        return results

    results = asyncio.run(run())
    first, second, released, survey = results["all"]
    assert isinstance(first, Granted) and first.address.endswith(".2/28")  # the gateway (.1) reserved
    assert second == Granted("all", second.attempt, first.address, first.id)
    assert isinstance(released, Released) and survey.reason is None and holding(netbox, owned_key(who, "all")) == []
    report = {name: tuple(type(a).__name__ + (f":{a.reason}" if isinstance(a, Refused) else "") for a in r[:3])
              + (r[3].reason,) for name, r in results.items()}
    print("\n" + "\n".join(f"without {k}: {v}" for k, v in report.items()))

    def refused(answer) -> bool:
        return isinstance(answer, Refused) and answer.reason == "TokenRefused"

    assert refused(results["view prefix"][0]) and results["view prefix"][3].reason == "TokenRefused"
    assert refused(results["add ipaddress"][0])
    assert refused(results["change ipaddress"][0])  # the gateway cannot be reserved
    assert refused(results["view ipaddress"][0])  # no lookup: no retry could find its address
    assert refused(results["delete ipaddress"][2])  # never "released" while NetBox keeps it
    assert results["view customfield"][3].reason == "TokenRefused"
    for name, (first, _, released, _) in results.items():  # nothing left behind that says released
        if isinstance(released, Released):
            assert holding(netbox, owned_key(who, first.key)) == [], name


def test_a_refused_token_of_one_pool_never_fails_another_pools_asks_on_the_same_server(netbox, api_client, namespace):
    """Pools A and B on one NetBox URL, each with its own Secret; A's token is revoked.

    A's refusal must stay A's: B's asks out at that moment (same server, another token) are answered
    by NetBox, not cut off and filed as the server being unreachable (which would open the server's
    circuit for every pool on it).
    """
    net_a, net_b = seeded(netbox, 28), seeded(netbox, 27)
    who = owner()
    user_a, user_b = f"u{uuid.uuid4().hex[:8]}", f"u{uuid.uuid4().hex[:8]}"
    put_secret(api_client, namespace, "a-token", netbox.make_token(user_a, LEAST))
    put_secret(api_client, namespace, "b-token", netbox.make_token(user_b, LEAST))
    pool_a = make_pool(namespace, "a", netbox.url, {"prefix": str(net_a)}, secret="a-token")
    pool_b = make_pool(namespace, "b", netbox.url, {"prefix": str(net_b)}, secret="b-token")
    assert pool_a.server == pool_b.server
    keys_b = [f"b{i}" for i in range(16)]

    async def run():
        asks = NetBoxAsks(SecretTokens(api_client, ttl=3600), owner=who, concurrency=4)
        asks.pool_changed(pool_a)
        asks.pool_changed(pool_b)
        asking = Asking(deadline=60, per_server=32)
        asking.want("a0", (namespace, "a"), pool_a.server, time.monotonic())
        [first] = asking.due(time.monotonic())
        assert isinstance(await asks.ask(first), Granted)  # A's client made with its token, then revoked
        revoke(netbox, user_a)
        answers: list = []
        for i, key in enumerate(keys_b):
            asking.want(key, (namespace, "b"), pool_b.server, time.monotonic())
            if i % 4 == 3:  # A's refused asks among B's, so that B's requests are out when A is refused
                asking.want(f"a{i}", (namespace, "a"), pool_a.server, time.monotonic())
        await asyncio.gather(*asks.send(asking.due(time.monotonic()), answers.append))
        await asks.close()
        return answers

    answers = asyncio.run(run())
    a_answers = [a for a in answers if a.key.startswith("a")]
    b_answers = [a for a in answers if a.key.startswith("b")]
    assert len(b_answers) == len(keys_b)
    assert all(isinstance(a, Granted) for a in b_answers), [a for a in b_answers if not isinstance(a, Granted)]
    # A's own asks out at once: each refused for the token, none taken for the server being down
    assert a_answers and all(isinstance(a, Refused) and a.reason == "TokenRefused" for a in a_answers), a_answers
    for key in keys_b:
        assert len(holding(netbox, owned_key(who, key))) == 1


def test_an_allocation_netbox_carries_out_after_the_ask_gave_up_is_released_all_the_same(netbox, api_client, namespace):
    """The deadline expires while NetBox commits: the adapter gives up on an allocation whose POST NetBox
    holds (then carries out), the claim is deleted, and the release looks before the address is made."""
    net = seeded(netbox, 29)
    who = owner()
    put_secret(api_client, namespace, "netbox", netbox.token)
    pool = make_pool(namespace, "nb", netbox.url, {"prefix": str(net)})
    where, key = (namespace, "nb"), "late"

    async def run():
        asks = NetBoxAsks(SecretTokens(api_client), owner=who, timeout=20)
        asks.pool_changed(pool)
        asking = Asking(deadline=2, base=0.2, cap=1, linger=40, timeout_reason=Reason.TIMEOUT.value)
        asking.want(key, where, pool.server, time.monotonic())
        with netbox.slowed(6, method="POST"):  # the lookup answered at once, available-ips held 6 s
            [ask] = asking.due(time.monotonic())
            gave_up = await asks.ask(ask)
        asking.file(gave_up, time.monotonic())
        asking.release(key, where, pool.server, time.monotonic())  # the claim deleted meanwhile
        filed: list = []
        await drive(asking, asks, lambda: any(isinstance(a, Released) for a, _ in filed), 20, filed=filed)
        first_release = filed[-1][1]
        t0 = time.monotonic()
        while not await asyncio.to_thread(holding, netbox, owned_key(who, key)):  # NetBox carries it out
            assert time.monotonic() - t0 < 30, ("NetBox never carried out the allocation", filed, gave_up,
                                                addresses_in(netbox, net))
            await asyncio.sleep(0.2)
        await drive(asking, asks, lambda: not asking.releasing(), 60, filed=filed)
        await asks.close()
        return gave_up, first_release, filed

    gave_up, first_release, filed = asyncio.run(run())
    assert isinstance(gave_up, Refused) and gave_up.reason == "NetBoxTimeout" and gave_up.server_down
    assert first_release is not Filed.RELEASED  # nothing found yet, but an allocation was unanswered
    assert filed[-1][1] is Filed.RELEASED
    assert holding(netbox, owned_key(who, key)) == []  # no address left for the deleted claim's key
