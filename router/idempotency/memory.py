"""The in-memory idempotency store: one process, bounded, with expiry from an injected clock.

Duplicates waiting for an in-flight request sleep on an `asyncio.Event`, so exactly one
execution happens however many arrive (and wake when a lease runs out). Completed entries live
`ttl_s`; in-flight markers live `lease_s` unless their holder `renew`s them (a leaked lease
cannot block a key forever). At `max_entries` entries, completed entries are evicted, the
oldest of the tenant holding the most entries first; past `max_bytes` of them (the stored
answers plus `ENTRY_OVERHEAD_BYTES` each), the oldest of the tenant holding the most bytes
first. A tenant never loses a record while another holds more: one sending keys by the
thousand, or a few large answers, takes another's records (whose retries would then run a
second time) only until it holds as much as the largest holder, then evicts its own, so a full
store shares itself out evenly between its tenants; if every entry is in flight, new
keys are refused with `OverloadedError`. A duplicate's `asyncio.Event` exists only
while someone waits on it.

A full store stays full under steady traffic (records live a day), so making room is done
without a pass over the entries: completed ones are kept per owner in completion order, which
is their expiry order (one TTL), and only the markers in flight (as many as requests running)
are looked over. A pass over 100,000 entries took 60 ms per new key, on the event loop.
"""

from __future__ import annotations

import asyncio
import secrets
from collections import Counter, OrderedDict
from collections.abc import Callable
from dataclasses import dataclass, replace

from router.errors import OverloadedError
from router.idempotency.types import (
    Claim,
    Lease,
    Replay,
    StoredResponse,
    key_reused,
    scope_of,
    still_in_flight,
)

Clock = Callable[[], float]

# What an entry holds besides the bytes of its answer's body and headers: its key, owner,
# fingerprint, token, record, header objects and the store's index slots (measured with
# tracemalloc: about 0.9 KB with three headers), rounded up.
ENTRY_OVERHEAD_BYTES = 1024


@dataclass(slots=True)
class _Entry:
    owner: str  # the tenant (and scopes) whose key it is: eviction takes from the largest
    fingerprint: str
    token: str
    expires_at: float
    response: StoredResponse | None = None
    settled: asyncio.Event | None = None  # made by the first duplicate that waits

    def size(self) -> int:
        """Bytes counted against the store's `max_bytes`."""
        response = self.response
        if response is None:
            return ENTRY_OVERHEAD_BYTES
        return (ENTRY_OVERHEAD_BYTES + len(response.body)
                + sum(len(name) + len(value) for name, value in response.headers))

    def settle(self) -> None:
        """Wake the duplicates waiting on it, if any."""
        if self.settled is not None:
            self.settled.set()
            self.settled = None


class MemoryIdempotencyStore:
    """`IdempotencyStore` for a single replica (and for tests)."""

    def __init__(self, clock: Clock, *, ttl_s: float = 86_400.0, max_entries: int = 100_000,
                 max_bytes: int = 128 << 20):
        self._clock = clock
        self._ttl_s = ttl_s
        self._max_entries = max_entries
        self._max_bytes = max_bytes
        self._bytes = 0  # the entries' `size()`, summed
        self._entries: dict[str, _Entry] = {}
        self._held: Counter[str] = Counter()  # entries per owner
        self._held_bytes: Counter[str] = Counter()  # their `size()` per owner
        self._completed: dict[str, OrderedDict[str, None]] = {}  # per owner, oldest first
        self._in_flight: set[str] = set()

    async def claim(
        self, tenant: str, key: str, fingerprint: str, *, wait_s: float, lease_s: float,
        acting: bool = False,  # one process: a holder that dies takes its keys with it
    ) -> Claim:
        scope = scope_of(tenant, key)
        loop = asyncio.get_running_loop()
        give_up_at = loop.time() + wait_s  # waiting is real time; expiry is the injected clock
        contended = False
        while True:
            entry = self._live(scope)
            if entry is None:
                return self._lease(tenant, scope, fingerprint, lease_s, contended)
            if entry.fingerprint != fingerprint:
                raise key_reused()
            if entry.response is not None:
                return Replay(entry.response)
            left = give_up_at - loop.time()
            if left <= 0:
                raise still_in_flight(max(0.0, entry.expires_at - self._clock()))
            contended = True
            # Until it settles, or its lease may have run out (a holder that stopped renewing:
            # the key is free then, as the Redis store's polling finds).
            expires_in = entry.expires_at - self._clock()
            if entry.settled is None:
                entry.settled = asyncio.Event()
            # `asyncio.timeout`, not `wait_for`: on 3.11 `wait_for` swallows a cancellation that
            # comes once the wait is over (a duplicate whose client left as the key was
            # released looped and waited again, holding its admission slot for a gone client).
            try:
                async with asyncio.timeout(min(left, expires_in)):
                    await entry.settled.wait()
            except TimeoutError:
                continue

    async def complete(self, lease: Lease, response: StoredResponse) -> bool:
        entry = self._owned(lease)
        if entry is None:
            return False
        self._resize(entry, -entry.size())
        # An exact-size copy: an answer orjson wrote holds a 4 KiB allocation however short it
        # is, three times what the budget counted (the memory audit: 128 MiB held 395 MiB).
        entry.response = replace(response, body=bytes(memoryview(response.body)))
        self._resize(entry, entry.size())
        entry.expires_at = self._clock() + self._ttl_s
        self._in_flight.discard(lease.scope)
        completed = self._completed.setdefault(entry.owner, OrderedDict())
        completed[lease.scope] = None
        # The owner's records expired meanwhile go now, not only once the store is full: a
        # burst's records stayed for days after their day was over.
        while completed and self._live(next(iter(completed))) is None:
            pass
        entry.settle()
        # Over the byte budget: older answers go (never this one, which may be alone over it
        # until the next answer stored evicts it).
        self._evict(lambda: self._bytes > self._max_bytes, self._held_bytes, keep=lease.scope)
        return True

    async def release(self, lease: Lease) -> bool:
        entry = self._owned(lease)
        if entry is None:
            return False
        self._remove(lease.scope, entry)
        entry.settle()
        return True

    async def renew(self, lease: Lease, lease_s: float) -> bool:
        entry = self._owned(lease)
        if entry is None:
            return False
        entry.expires_at = self._clock() + lease_s
        return True

    def __len__(self) -> int:
        return len(self._entries)

    @property
    def bytes_held(self) -> int:
        """What the entries count against `max_bytes`."""
        return self._bytes

    def _live(self, scope: str) -> _Entry | None:
        entry = self._entries.get(scope)
        if entry is not None and self._clock() >= entry.expires_at:
            self._remove(scope, entry)
            entry.settle()
            return None
        return entry

    def _owned(self, lease: Lease) -> _Entry | None:
        entry = self._live(lease.scope)
        if entry is None or entry.token != lease.token or entry.response is not None:
            return None
        return entry

    def _lease(self, owner: str, scope: str, fingerprint: str, lease_s: float,
               contended: bool) -> Lease:
        self._make_room()
        token = secrets.token_hex(16)
        entry = self._entries[scope] = _Entry(owner, fingerprint, token,
                                              self._clock() + lease_s)
        self._resize(entry, ENTRY_OVERHEAD_BYTES)
        self._held[owner] += 1
        self._in_flight.add(scope)
        return Lease(scope, token, fingerprint, contended)

    def _remove(self, scope: str, entry: _Entry) -> None:
        del self._entries[scope]
        self._resize(entry, -entry.size())
        self._held[entry.owner] -= 1
        if not self._held[entry.owner]:
            del self._held[entry.owner], self._held_bytes[entry.owner]
        if entry.response is None:
            self._in_flight.discard(scope)
            return
        completed = self._completed[entry.owner]
        del completed[scope]
        if not completed:
            del self._completed[entry.owner]

    def _make_room(self) -> None:
        if (len(self._entries) < self._max_entries
                and self._bytes + ENTRY_OVERHEAD_BYTES <= self._max_bytes):
            return
        for scope in list(self._in_flight):
            self._live(scope)  # drops it if its lease ran out
        for completed in list(self._completed.values()):
            while completed and self._live(next(iter(completed))) is None:
                pass  # expired: completed entries expire in the order they completed
        self._evict(lambda: len(self._entries) >= self._max_entries, self._held)
        self._evict(lambda: self._bytes + ENTRY_OVERHEAD_BYTES > self._max_bytes,
                    self._held_bytes)
        if len(self._entries) >= self._max_entries:
            raise OverloadedError("too many requests in flight with idempotency keys",
                                  code="idempotency_store_full", retry_after=1.0)

    def _resize(self, entry: _Entry, change: int) -> None:
        self._bytes += change
        self._held_bytes[entry.owner] += change

    def _evict(self, over: Callable[[], bool], held: Counter[str],
               keep: str | None = None) -> None:
        """Completed entries, the oldest of the owner holding the most (`held`: entries or
        bytes, whichever bound `over()` checks) first, while `over()` (`keep` stays)."""
        while over():
            candidates = [owner for owner, scopes in self._completed.items()
                          if next(iter(scopes)) != keep or len(scopes) > 1]
            if not candidates:
                return
            owner = max(candidates, key=held.__getitem__)
            scopes = iter(self._completed[owner])
            scope = next(scopes)
            if scope == keep:
                scope = next(scopes)
            self._remove(scope, self._entries[scope])
