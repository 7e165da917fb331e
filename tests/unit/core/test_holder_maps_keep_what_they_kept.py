"""The holder maps of the inventory and the ledger keep what they kept before ``core.several``.

Both maps keep, per IP, the one thing that holds it, or a tuple of their own
type when several do. These cases drive the maps through arbitrary orders of
holds and releases (the same holder twice, a release of what is not held,
IPv4 and IPv6 keys, an IPv4-mapped IPv6 text, plain tuples as holders) and
compare every step with a copy of the add and remove code the maps had
before (``_OldSeveral``/``_OldKeys`` below): same entries, same order, same
one-or-several shape, same allocator calls. The inventory is also checked
against SPEC §10's plain statement: an IP is held by exactly the stored
addresses of our pools that name it.
"""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from metal3_ipam.core import kinds
from metal3_ipam.core import objects as o
from metal3_ipam.core.inventory import ADDRESS_KINDS, Inventory
from metal3_ipam.core.ledger import CAPI, METAL3, PLANNED, Ledger, _holder, _sorted_holders
from metal3_ipam.core.several import Several, each, entry_of


# -- the code the maps had before, kept as the oracle -------------------------------------

class _OldSeveral(tuple):
    __slots__ = ()


class _OldKeys(tuple):
    __slots__ = ()


class _Recorder:
    """Stands in for the allocator: what the ledger asks of it, in order."""

    def __init__(self) -> None:
        self.planned = None
        self.calls: list[tuple[str, int, object]] = []

    def hold(self, ip: int) -> None:
        self.calls.append(("hold", ip, self.planned))

    def release(self, ip: int) -> None:
        self.calls.append(("release", ip, self.planned))


class _OldLedgerHolders:
    """Ledger.hold / holders_of / let_go / _sorted_holders as they were before ``core.several``."""

    def __init__(self) -> None:
        self.holders: dict = {}
        self.allocator = _Recorder()
        self._freed = False

    def hold(self, ip, holder):
        held = self.holders.get(ip)
        if held is None:  # (unchanged by ``core.several``; the allocator here plans nothing)
            self.holders[ip] = holder
            self.allocator.hold(ip)
            return
        entries = held if type(held) is _OldSeveral else (held,)
        who = _holder(holder)
        entries = _OldSeveral((*(e for e in entries if _holder(e) != who), holder))
        self.holders[ip] = entries if len(entries) > 1 else entries[0]

    def holders_of(self, ip):
        held = self.holders.get(ip)
        if held is None:
            return []
        return [_holder(e) for e in held] if type(held) is _OldSeveral else [_holder(held)]

    def let_go(self, ip, holder):
        held = self.holders.get(ip)
        if held is None:
            return
        entries = _OldSeveral(e for e in (held if type(held) is _OldSeveral else (held,)) if _holder(e) != holder)
        if len(entries) == (len(held) if type(held) is _OldSeveral else 1):
            return
        if entries:
            self.holders[ip] = entries if len(entries) > 1 else entries[0]
        else:
            del self.holders[ip]
            if self.allocator is not None:
                self.allocator.release(ip)
            if holder[0] != PLANNED:
                self._freed = True

    @staticmethod
    def sorted_holders(held):
        return sorted(_holder(e) for e in held) if type(held) is _OldSeveral else [_holder(held)]


def _old_file(holders: dict, ns: str, ip, key) -> None:
    held = holders.setdefault(ns, {})
    known = held.get(ip)
    if known is None or known == key:
        held[ip] = key
    elif type(known) is _OldKeys:
        if key not in known:
            held[ip] = _OldKeys((*known, key))
    else:
        held[ip] = _OldKeys((known, key))


def _old_unfile(holders: dict, ns: str, ip, key) -> None:
    held = holders.get(ns, {})
    known = held.get(ip)
    if type(known) is _OldKeys:
        rest = tuple(k for k in known if k != key)
        held[ip] = rest[0] if len(rest) == 1 else _OldKeys(rest)
    elif known == key:
        del held[ip]


def _shape(entry, several_types: tuple[type, ...]):
    """An entry as (several?, its values in order); objects by identity, tuples by value."""
    values = tuple(entry) if type(entry) in several_types else (entry,)
    return (type(entry) in several_types,
            tuple(("object", id(v)) if isinstance(v, dict) else ("value", v) for v in values))


# -- the helper itself ---------------------------------------------------------------------

def test_a_plain_tuple_is_one_value_and_only_several_is_several():
    key = (kinds.IPADDRESS, "ns", "a")
    planned = (PLANNED, "a")
    assert each(key) == (key,) and each(planned) == (planned,)
    assert each(None) == () and each(Several((key, planned))) == (key, planned)
    assert entry_of([key]) is key and entry_of([planned]) is planned
    assert entry_of([]) is None and entry_of(iter([])) is None
    both = entry_of([key, planned])
    assert type(both) is Several and tuple(both) == (key, planned)
    # A tuple that holds two holders but is not Several stays one value.
    assert each((planned, planned)) == ((planned, planned),)


# -- the ledger -----------------------------------------------------------------------------

def _address(tag: str, name: str, rv: int) -> dict:
    api = kinds.METAL3_API_VERSION if tag == METAL3 else f"{kinds.CAPI_IPAM_GROUP}/v1beta1"
    return {"apiVersion": api, "kind": "IPAddress",
            "metadata": {"name": name, "namespace": "ns", "resourceVersion": str(rv)}}


IPS = st.sampled_from([1, 2, 0xFFFFFFFF, 2**64 + 1, 2**128 - 1])
NAMES = st.sampled_from(["a", "b", "c"])
HOLD = st.tuples(st.just("hold"), IPS, st.sampled_from([METAL3, CAPI, PLANNED]), NAMES)
LET_GO = st.tuples(st.just("let_go"), IPS, st.sampled_from([METAL3, CAPI, PLANNED, "other"]), NAMES)
SETTLE = st.tuples(st.just("settle_planned"), IPS, st.just(PLANNED), NAMES)


@settings(max_examples=400, deadline=None)
@given(st.lists(st.one_of(HOLD, LET_GO, SETTLE), max_size=40))
def test_the_ledger_holder_map_does_what_it_did_before(steps):
    new = Ledger()
    new.allocator = _Recorder()
    old = _OldLedgerHolders()
    for rv, (op, ip, tag, name) in enumerate(steps, 1):
        if op == "hold":
            # The same address may come again as another object (a newer version): one holder.
            holder = (PLANNED, name) if tag == PLANNED else _address(tag, name, rv)
            new.hold(ip, holder)
            old.hold(ip, holder)
        elif op == "let_go":
            new.let_go(ip, (tag, name))
            old.let_go(ip, (tag, name))
        else:  # what ``settle`` does with the planned holders of an IP
            for h in [h for h in new.holders_of(ip) if h[0] == PLANNED]:
                new.let_go(ip, h)
            for h in [h for h in old.holders_of(ip) if h[0] == PLANNED]:
                old.let_go(ip, h)
        assert list(new.holders) == list(old.holders)
        for key in old.holders:
            assert _shape(new.holders[key], (Several,)) == _shape(old.holders[key], (_OldSeveral,))
            assert new.holders_of(key) == old.holders_of(key)
            assert _sorted_holders(new.holders[key]) == old.sorted_holders(old.holders[key])
            # No holder twice on one IP (SPEC §10: one address counts once).
            assert len(set(new.holders_of(key))) == len(new.holders_of(key))
        assert new.holders_of(ip) == old.holders_of(ip)
        assert new.allocator.calls == old.allocator.calls
        assert new._freed == old._freed


# -- the inventory --------------------------------------------------------------------------

class _ShadowInventory(Inventory):
    """An inventory that also keeps the old holder map, fed by exactly the same filings."""

    def __init__(self) -> None:
        super().__init__()
        self.old_holders: dict = {}

    def _file(self, key, obj, previous=None):
        touched = super()._file(key, obj, previous)
        kind, ns, _ = key
        if kind in ADDRESS_KINDS and o.pool_of(obj) is not None:
            ip = o.address_ip(obj)
            if ip is not None:
                _old_file(self.old_holders, ns, int(ip) if ip.version == 4 else (ip.version, int(ip)), key)
        return touched

    def _unfile(self, key, incoming):
        present = self.objects.get(key)
        touched = super()._unfile(key, incoming)
        kind, ns, _ = key
        if present is not None and kind in ADDRESS_KINDS:
            ip = o.address_ip(present)
            ip_key = None if ip is None else (int(ip) if ip.version == 4 else (ip.version, int(ip)))
            _old_unfile(self.old_holders, ns, ip_key, key)
        return touched


# 10.0.0.1, the IPv6 address with the same number, the IPv4-mapped text of 10.0.0.1, another
# IPv6 address, text that is no IP, and none at all.
ADDRESS_TEXTS = ["10.0.0.1", "10.0.0.2", "::a00:1", "::ffff:10.0.0.1", "2001:db8::1", "not-an-ip", None]


def _inventory_address(kind, ns: str, name: str, ip: str | None, pool: str | None, rv: int) -> dict:
    spec: dict = {} if ip is None else {"address": ip}
    if kind == kinds.IPADDRESS:
        api = kinds.METAL3_API_VERSION
        if pool is not None:
            spec["pool"] = {"name": pool, "namespace": ns}
    else:
        api = f"{kinds.CAPI_IPAM_GROUP}/v1beta1"
        if pool is not None:
            spec["poolRef"] = {"apiGroup": kinds.METAL3_GROUP, "kind": "IPPool", "name": pool}
    return {"apiVersion": api, "kind": "IPAddress",
            "metadata": {"name": name, "namespace": ns, "resourceVersion": str(rv), "uid": f"{name}-{rv}"},
            "spec": spec}


EVENT = st.tuples(
    st.sampled_from(["upsert", "upsert", "upsert", "remove", "forget", "stale"]),
    st.sampled_from(ADDRESS_KINDS),
    st.sampled_from(["ns1", "ns2"]),
    NAMES,
    st.sampled_from(ADDRESS_TEXTS),
    st.sampled_from(["p1", "p2", None]))


@settings(max_examples=400, deadline=None)
@given(st.lists(EVENT, max_size=40))
def test_the_inventory_holder_map_does_what_it_did_before(events):
    inv = _ShadowInventory()
    for rv, (op, kind, ns, name, ip, pool) in enumerate(events, 2):
        if op == "upsert":
            inv.upsert(_inventory_address(kind, ns, name, ip, pool, rv))
        elif op == "stale":  # an older version of what may be stored: dropped, or filed when nothing newer is known
            inv.upsert(_inventory_address(kind, ns, name, ip, pool, rv // 2))
        elif op == "remove":  # a deletion, of a name that may not be stored
            inv.remove(_inventory_address(kind, ns, name, ip, pool, rv))
        else:
            inv.forget(kind, ns, name)
        assert inv._holders.keys() == inv.old_holders.keys()
        for namespace, held in inv.old_holders.items():
            assert list(inv._holders[namespace]) == list(held)
            for ip_key, entry in held.items():
                assert _shape(inv._holders[namespace][ip_key], (Several,)) == _shape(entry, (_OldKeys,))
        # SPEC §10: an IP is held by exactly the stored addresses of our pools that name it, each once.
        expected: dict = {}
        for key, obj in inv.objects.items():
            parsed = o.address_ip(obj)
            if key[0] in ADDRESS_KINDS and o.pool_of(obj) is not None and parsed is not None:
                expected.setdefault((key[1], parsed.version, int(parsed)), set()).add(key)
        for text in ADDRESS_TEXTS:
            if text is None or text == "not-an-ip":
                continue
            parsed = o.address_ip({"spec": {"address": text}})
            for namespace in ("ns1", "ns2"):
                assert inv.holders(namespace, parsed.version, int(parsed)) == \
                    expected.get((namespace, parsed.version, int(parsed)), set())
