"""The Secret holds as the API server keeps them (``controller.outside.SecretHolds``): our finalizer on each Secret
and the record (the Lease) of what each is held for, which outlive a restart."""

from __future__ import annotations

from metal3_ipam.controller.outside import with_pool


class RecordedHolds:
    """The holds written, (namespace, name, held) in ``calls`` in order; ``record`` the Secrets the record lists
    held, ``pools`` (namespace, name, pool uid) what each is recorded held for. Every call names ``finalizer``."""

    finalizer: str | None = None

    def __init__(self, recorded=()):
        self.calls: list[tuple[str, str, bool]] = []
        self.record: set[tuple[str, str]] = set(recorded)
        self.pools: set[tuple[str, str, str]] = set()

    def _named(self, finalizer: str) -> None:
        assert self.finalizer is None or finalizer == self.finalizer, finalizer

    async def hold(self, namespace, name, finalizer, held):
        self._named(finalizer)
        self.calls.append((namespace, name, held))
        (self.record.add if held else self.record.discard)((namespace, name))
        if not held:
            self.pools = {entry for entry in self.pools if entry[:2] != (namespace, name)}
        return True

    async def hold_for(self, namespace, name, finalizer, pool, needed):
        self._named(finalizer)
        self.pools = {e for e in with_pool(self.record | self.pools, (namespace, name), pool, needed) if len(e) == 3}
        return True

    async def recorded(self, finalizer):
        self._named(finalizer)
        return set(self.record)

    async def entries(self, finalizer):
        self._named(finalizer)
        return set(self.record) | set(self.pools)


class UnrecordableHolds(RecordedHolds):
    """The API server refuses the record (the Lease) and the finalizer: nothing can be held."""

    async def hold(self, namespace, name, finalizer, held):
        self.calls.append((namespace, name, held))
        return False

    async def hold_for(self, namespace, name, finalizer, pool, needed):
        return False
