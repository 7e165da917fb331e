"""The NetBox client against a real NetBox (the session's ``netbox`` fixture, started on loopback).

Every test takes prefixes of its own (``fresh``) and an owner of its own, so the
tests share one NetBox without seeing each other's addresses.

Measured on a 2-core machine shared with other test runs (NetBox 4.7.3, Python 3.13):
preparing the cache cold, 44-82 s of pip and 586 s for the migrations (6 min of
CPU), a 1.2 MB dump; a start from the cache 11-22 s (restore 3.5-10 s, gunicorn
7-13 s); gunicorn alone restarted in 8-9 s. Raw sequential ``available-ips``
POSTs about 22 a second; the client's allocate (a lookup, then the POST) about 10
a second, no faster with more requests in flight (NetBox serialises allocations
under one advisory lock, one worker); 5 a second in ``test_allocation_rate``
when it ran beside the other tests.
"""

from __future__ import annotations

import asyncio
import ipaddress
import time
import uuid

import pytest

from metal3_ipam.poolkinds.netbox.client import NetBoxClient, NetBoxError
from metal3_ipam.poolkinds.netbox.source import KEY_FIELD, Reason, owned_key
from netbox_fixtures import NETS, addresses_in, fresh, holding, owner, seeded


def client(netbox, who: str, **kwargs) -> NetBoxClient:
    return NetBoxClient(netbox.url, kwargs.pop("token", netbox.token), owner=who, **kwargs)


async def refused(coro) -> NetBoxError:
    with pytest.raises(NetBoxError) as info:
        await coro
    return info.value


def test_lowest_free_never_a_held_address_and_one_address_per_key(netbox):
    net = seeded(netbox, 29)  # .1 … .6 usable
    netbox.create_ip_address(f"{net[1]}/29", status="reserved", description="gateway")
    netbox.create_ip_address(f"{net[3]}/29", description="made by hand")
    who = owner()

    async def run():
        async with client(netbox, who) as c:
            got = [await c.allocate(f"claim-{i}", str(net)) for i in range(4)]
            again = await c.allocate("claim-0", str(net))
            full = await refused(c.allocate("claim-4", str(net)))
            return got, again, full, await c.owned(), await c.usage(str(net))

    got, again, full, owned, usage = asyncio.run(run())
    assert [a.address for a in got] == [f"{net[i]}/29" for i in (2, 4, 5, 6)]
    assert again == got[0]
    assert len(holding(netbox, owned_key(who, "claim-0"))) == 1
    assert full.reason is Reason.FULL and full.refusal.status == 409
    assert "claim-4" in str(full)
    assert owned == got
    assert (usage.size, usage.used, usage.available) == (6, 6, 0)
    assert set(addresses_in(netbox, net)) == {str(net[i]) for i in range(1, 7)}


def test_concurrent_allocations_with_one_key_make_one_address(netbox):
    net = seeded(netbox, 27)
    who = owner()

    async def run():
        async with client(netbox, who) as a, client(netbox, who) as b:
            same = await asyncio.gather(*(c.allocate("shared", str(net)) for c in (a, b) * 4))
            keys = [f"k{i}" for i in range(8)]
            many = await asyncio.gather(*(c.allocate(k, str(net)) for k in keys for c in (a, b)))
            return same, many

    same, many = asyncio.run(run())
    assert len({a.id for a in same}) == 1
    assert len(holding(netbox, owned_key(who, "shared"))) == 1
    by_key: dict[str, set[int]] = {}
    for a in many:
        by_key.setdefault(a.key, set()).add(a.id)
    assert all(len(ids) == 1 for ids in by_key.values()), by_key
    assert len({a.address for a in many}) == 8
    assert len(addresses_in(netbox, net)) == 9


def test_release_then_404_counts_as_released(netbox):
    net = seeded(netbox, 29)
    who = owner()

    async def run():
        async with client(netbox, who) as c:
            a = await c.allocate("gone", str(net))
            released = await c.release("gone")
            gone = netbox.api("GET", f"ipam/ip-addresses/{a.id}/", expect=(404,))
            second = await c.release("gone")
            await c.release_allocation(a)  # NetBox answers 404: released all the same
            b = await c.allocate("gone", str(net))
            return a, released, gone, second, b

    a, released, gone, second, b = asyncio.run(run())
    assert released == a and second is None
    assert "No IPAddress matches" in gone["detail"]
    assert b.address == a.address and b.id != a.id  # the lowest free again; NetBox never reuses an id


def test_sweep_lists_and_releases_only_this_owners_addresses(netbox):
    net = seeded(netbox, 28)
    who, other = owner(), owner()
    by_hand = netbox.create_ip_address(f"{net[1]}/28", description="no key at all")
    with_a_key = netbox.create_ip_address(f"{net[2]}/28", custom_fields={KEY_FIELD: f"{other}/x"})
    lookalike = netbox.create_ip_address(f"{net[3]}/28", custom_fields={KEY_FIELD: f"{who}x/y"})

    async def run():
        async with client(netbox, who) as mine:
            live = {await mine.allocate(k, str(net)) for k in ("a", "b", "c")}
            live_keys = {"a", "c"}
            listed = await mine.owned()
            for allocation in listed:  # the sweep: ours whose claim no longer exists
                if allocation.key not in live_keys:
                    await mine.release_allocation(allocation)
            return live, listed, await mine.owned()

    live, listed, after = asyncio.run(run())
    assert set(listed) == live
    assert {a.key for a in after} == {"a", "c"}
    left = addresses_in(netbox, net)
    for untouched in (by_hand, with_a_key, lookalike):
        assert left[untouched["address"].split("/")[0]]["id"] == untouched["id"]
    assert len(left) == 5


def test_ip_range_and_pool_prefix_and_vrf(netbox):
    net = fresh(28)
    start, end = net[4], net[6]
    netbox.create_ip_range(f"{start}/28", f"{end}/28")
    pool = seeded(netbox, 30, is_pool=True)
    vrf = netbox.create_vrf(f"v-{uuid.uuid4().hex[:6]}", rd=f"65000:{next(NETS)}")
    in_vrf = fresh(29)
    netbox.create_prefix(str(in_vrf), vrf=vrf["id"])
    netbox.create_prefix(str(in_vrf))  # the same CIDR in the global table: another parent
    who = owner()

    async def run():
        async with client(netbox, who) as c:
            ranged = [await c.allocate(f"r{i}", f"{start}-{end}") for i in range(3)]
            full = await refused(c.allocate("r3", f"{start}-{end}"))
            pooled = [await c.allocate(f"p{i}", str(pool)) for i in range(4)]
            by_rd = await c.allocate("v0", str(in_vrf), vrf["rd"])
            by_name = await c.allocate("v1", str(in_vrf), vrf["name"])
            global_ = await c.allocate("g0", str(in_vrf))
            no_vrf = await refused(c.allocate("v2", str(in_vrf), "no-such-vrf"))
            no_prefix = await refused(c.allocate("x", str(fresh(29))))
            usage = await c.usage(f"{start}-{end}")
            return ranged, full, pooled, by_rd, by_name, global_, no_vrf, no_prefix, usage

    ranged, full, pooled, by_rd, by_name, global_, no_vrf, no_prefix, usage = asyncio.run(run())
    assert [a.ip for a in ranged] == [net[4], net[5], net[6]]
    assert {a.prefix_length for a in ranged} == {28}  # the mask the range was made with
    assert full.reason is Reason.FULL
    assert [a.ip for a in pooled] == list(pool)  # a pool hands out its network and broadcast addresses too
    assert (by_rd.ip, by_name.ip, global_.ip) == (in_vrf[1], in_vrf[2], in_vrf[1])
    assert by_rd.vrf == by_name.vrf == vrf["id"] and global_.vrf is None
    assert no_vrf.reason is Reason.NOT_FOUND and "no-such-vrf" in str(no_vrf)
    assert no_prefix.reason is Reason.NOT_FOUND and "prefix" in str(no_prefix)
    assert (usage.size, usage.used) == (3, 3)


def test_avoided_address_is_reserved_in_netbox_not_handed_out(netbox):
    net = seeded(netbox, 29)
    who = owner()

    async def run():
        async with client(netbox, who) as c:
            first = await c.allocate("a", str(net), avoid=[net[1], str(net[3])])
            second = await c.allocate("b", str(net), avoid=[net[1], str(net[3])])
            return first, second, await c.owned()

    first, second, owned = asyncio.run(run())
    assert (first.ip, second.ip) == (net[2], net[4])
    held = addresses_in(netbox, net)
    for kept in (net[1], net[3]):
        assert held[str(kept)]["status"]["value"] == "reserved"
        assert held[str(kept)]["custom_fields"].get(KEY_FIELD) is None
    assert owned == [first, second]


def test_concurrent_allocations_of_one_key_never_return_an_address_to_avoid(netbox):
    """One allocation gets the gateway and is keeping it back while another finds it by the key."""
    net = seeded(netbox, 29)
    who = owner()

    async def run():
        async with client(netbox, who) as a, client(netbox, who) as b:
            return await asyncio.gather(*(c.allocate("k", str(net), avoid=[net[1]]) for c in (a, b) * 3))

    got = asyncio.run(run())
    assert {a.ip for a in got} == {net[2]}
    assert len(holding(netbox, owned_key(who, "k"))) == 1
    held = addresses_in(netbox, net)
    assert held[str(net[1])]["status"]["value"] == "reserved" and set(held) == {str(net[1]), str(net[2])}


def test_token_refused_and_least_permissions(netbox):
    net = seeded(netbox, 29)
    vrf = netbox.create_vrf(f"lp-{uuid.uuid4().hex[:6]}")
    in_vrf = fresh(29)
    netbox.create_prefix(str(in_vrf), vrf=vrf["id"])
    name = f"u{uuid.uuid4().hex[:8]}"
    least = netbox.make_token(name, [
        (["ipam.prefix", "ipam.iprange", "ipam.vrf"], ["view"]),
        (["ipam.ipaddress"], ["view", "add", "change", "delete"]),
        (["extras.customfield"], ["view"]),
    ])
    view_only = netbox.make_token(name + "v", [
        (["ipam.prefix", "ipam.ipaddress"], ["view"]),
        (["extras.customfield"], ["view"]),
    ])
    who = owner()

    async def run():
        async with client(netbox, who, token="nbt_aaaaaaaaaaaa.notatoken") as bad:
            bad_token = await refused(bad.allocate("k", str(net)))
        async with client(netbox, who, token=view_only) as weak:
            await weak.check()
            no_add = await refused(weak.allocate("k", str(net)))
        async with client(netbox, who, token=least) as c:
            await c.check()
            a = await c.allocate("k", str(net), avoid=[net[1]])
            b = await c.allocate("v", str(in_vrf), vrf["name"])
            owned = await c.owned()
            usage = await c.usage(str(net))
            await c.release("k")
            await c.release("v")
            return bad_token, no_add, a, b, owned, usage, await c.owned()

    bad_token, no_add, a, b, owned, usage, after = asyncio.run(run())
    assert bad_token.reason is Reason.TOKEN_REFUSED and "Invalid v2 token" in str(bad_token)
    assert no_add.reason is Reason.TOKEN_REFUSED and no_add.refusal.status == 403
    assert a.ip == net[2] and b.ip == in_vrf[1]
    assert owned == [a, b] and usage.used == 2 and after == []


def test_misconfigured_key_field_is_refused_by_check(netbox):
    async def run():
        async with NetBoxClient(netbox.url, netbox.token, owner=owner(), key_field="no_such_field") as c:
            return await refused(c.check())

    err = asyncio.run(run())
    assert err.reason is Reason.MISCONFIGURED and "no_such_field" in str(err)


def test_stopped_paused_and_slow_netbox_are_classified_then_served_again(netbox):
    """A stopped NetBox is unreachable at once (not after the client's timeout); a paused one, which never
    answers, and a slow one are a timeout, at the client's own timeout: a client with a short one gives up
    while one with a long one, sent the same request before it, still waits (and is answered once NetBox
    resumes). The everyday requests go through the patient client, so a busy machine slows them, never
    fails them."""
    net = seeded(netbox, 29)
    who = owner()

    async def run():
        async with client(netbox, who, timeout=120.0) as patient, client(netbox, who, timeout=0.5) as hasty:
            before = await patient.allocate("a", str(net))
            await asyncio.to_thread(netbox.stop_server)
            t0 = time.monotonic()
            down = await refused(patient.allocate("b", str(net)))
            down_seconds = time.monotonic() - t0
            await asyncio.to_thread(netbox.start_server)
            after = await patient.allocate("b", str(net))
            with netbox.paused():
                waiting = asyncio.ensure_future(patient.find("a"))
                await asyncio.sleep(0)  # its request is on its way first
                t0 = time.monotonic()
                paused = await refused(hasty.find("a"))
                paused_seconds = time.monotonic() - t0
                patient_was_waiting = not waiting.done()
            found_once_resumed = await waiting
            with netbox.slowed(10 * hasty.timeout):
                slow = await refused(hasty.find("a"))
            again = await patient.allocate("a", str(net))
            return (before, down, down_seconds, after, paused, paused_seconds, patient_was_waiting,
                    found_once_resumed, slow, again, hasty.timeout, patient.timeout)

    (before, down, down_seconds, after, paused, paused_seconds, patient_was_waiting, found_once_resumed, slow, again,
     short, long) = asyncio.run(run())
    assert down.reason is Reason.UNREACHABLE and down_seconds < long
    assert after.ip == net[2] and before.ip == net[1]
    assert paused.reason is Reason.TIMEOUT and paused_seconds >= short
    assert patient_was_waiting, "the short timeout did not end the request: something else did"
    assert found_once_resumed == before
    assert slow.reason is Reason.TIMEOUT
    assert again == before


def test_requests_to_one_server_are_bounded(netbox):
    """Six lookups through two slots of a NetBox that takes 0.4 s per request take at least three rounds."""
    who = owner()

    async def run():
        async with client(netbox, who, concurrency=2) as c:
            with netbox.slowed(0.4):
                t0 = time.monotonic()
                found = await asyncio.gather(*(c.find(f"k{i}") for i in range(6)))
                return found, time.monotonic() - t0

    found, seconds = asyncio.run(run())
    assert found == [None] * 6
    assert seconds >= 3 * 0.4


def test_https_with_a_ca_bundle(netbox):
    url, ca = netbox.serve_tls()
    net = seeded(netbox, 29)
    who = owner()

    async def run():
        async with NetBoxClient(url, netbox.token, owner=who, ca_bundle=ca) as c:
            a = await c.allocate("tls", str(net))
        async with NetBoxClient(url, netbox.token, owner=who) as untrusting:
            err = await refused(untrusting.find("tls"))
        return a, err

    a, err = asyncio.run(run())
    assert a.ip == net[1]
    assert err.reason is Reason.UNREACHABLE and "certificate" in str(err)


def test_allocation_rate(netbox, record_property):
    """A burst of allocations from one client: all distinct; the rate is recorded, not asserted."""
    net = seeded(netbox, 25)
    who = owner()

    async def run():
        async with client(netbox, who, timeout=60) as c:
            t0 = time.monotonic()
            got = await asyncio.gather(*(c.allocate(f"k{i}", str(net)) for i in range(40)))
            return got, time.monotonic() - t0

    got, seconds = asyncio.run(run())
    assert len({a.address for a in got}) == 40
    rate = 40 / seconds
    record_property("allocations_per_second", round(rate, 1))
    record_property("netbox_startup_seconds", {k: round(v, 1) for k, v in netbox.startup_seconds.items()})
    print(f"\n40 allocations in {seconds:.1f}s: {rate:.1f}/s; NetBox startup {netbox.startup_seconds}")


def test_ipv6_prefix_reserves_its_subnet_router_anycast_address(netbox):
    net = ipaddress.ip_network(f"2001:db8:{next(NETS):x}::/126")
    netbox.create_prefix(str(net))
    who = owner()

    async def run():
        async with client(netbox, who) as c:
            size = (await c.usage(str(net))).size
            got = [await c.allocate(f"k{i}", str(net)) for i in range(3)]
            return size, got, await refused(c.allocate("k3", str(net)))

    size, got, full = asyncio.run(run())
    assert size == 3
    assert [a.address for a in got] == [f"{net[i]}/126" for i in (1, 2, 3)]
    assert full.reason is Reason.FULL
