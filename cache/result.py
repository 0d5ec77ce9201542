"""The result cache: the `ResultCache` backend protocol and `ResultCacheFront`, its one caller.

`ResultCacheFront` is what the request pipeline uses:

    decision = decide(fields, rule, task=..., risk=..., control=parse_cache_control(header))
    key = derive_key(scope, fields) if decision.uses_cache else None
    found = await front.lookup(key, decision, scope)         # status: hit|miss|bypass|stale
    ... on a miss, in `finally` once the answer is complete:
    await front.store(key, decision, body, scope=scope, model=model, generation_s=elapsed)

`lookup` serves an entry only when it is fresh (younger than the rule's TTL, by the injected
clock) and written under the versions that hold now; otherwise it reports `stale` (counted,
not served) or `miss`. `store` writes only finished answers (`CachedEntry.from_completion`) and
returns why it did not write. Backends never raise; a backend bug is still caught here, counted
and turned into a miss, so the cache can only ever make a request faster.

What does not live here: key derivation (`cache.keys`), cacheability (`cache.policy`), SSE
replay (`cache.replay`), concrete backends (`cache.backends`).
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Literal, Protocol

from cache.backends.failures import FailureLog
from cache.entry import CachedEntry, EntryVersions, NotCacheable
from cache.keys import CacheScope
from cache.metrics import CacheMetrics
from cache.policy import CacheDecision

CacheStatus = Literal["hit", "miss", "bypass", "stale"]


class ResultCache(Protocol):
    """A key-value store of entries with a TTL. Implementations never raise."""

    async def get(self, key: str) -> CachedEntry | None:
        """The entry under `key`, or None (absent, expired, or the backend is unavailable)."""
        ...

    async def set(self, key: str, entry: CachedEntry, ttl_s: float) -> bool:
        """Store `entry` for `ttl_s` seconds; False (a no-op) when the backend is unavailable."""
        ...


@dataclass(frozen=True, slots=True)
class Lookup:
    """The outcome of one lookup; `status` is the `x-slorouter-cache` header value."""

    status: CacheStatus
    entry: CachedEntry | None = None
    bypass_reason: str | None = None


class ResultCacheFront:
    """Lookups and writes with freshness, version checks and metrics around one backend."""

    def __init__(
        self,
        backend: ResultCache,
        metrics: CacheMetrics,
        *,
        name: str = "result",
        clock: Callable[[], float] = time.time,
    ) -> None:
        self._backend = backend
        self._metrics = metrics
        self._clock = clock
        self._failures = FailureLog(name, metrics)

    def now(self) -> float:
        """The wall clock this front stamps and checks entries with."""
        return self._clock()

    async def lookup(self, key: str | None, decision: CacheDecision, scope: CacheScope) -> Lookup:
        """Read the cache when the decision allows it; never raises."""
        if not decision.read or key is None:
            reason = decision.bypass_reason if decision.bypass_reason is not None else "no_key"
            self._metrics.record_bypass(reason)
            return Lookup("bypass", bypass_reason=reason)
        try:
            entry = await self._backend.get(key)
        except Exception as exc:  # a backend broke its contract; the request must not fail
            self._failures.report("get", exc)
            entry = None
        return self._judge(entry, decision, scope)

    def _judge(
        self, entry: CachedEntry | None, decision: CacheDecision, scope: CacheScope
    ) -> Lookup:
        if entry is None:
            self._metrics.record_miss()
            return Lookup("miss")
        age = self._clock() - entry.created_at
        if age >= decision.ttl_s:
            self._metrics.record_miss(expired=True)
            return Lookup("miss")
        if decision.max_age_s is not None and age >= decision.max_age_s:
            self._metrics.record_miss()  # older than its client takes (`max-age`)
            return Lookup("miss")
        if not entry.versions.still_hold(scope):
            self._metrics.record_stale()
            return Lookup("stale")
        self._metrics.record_hit(entry.generation_s)
        return Lookup("hit", entry)

    async def store(
        self,
        key: str | None,
        decision: CacheDecision,
        body: bytes,
        *,
        scope: CacheScope,
        model: str,
        generation_s: float,
        deployment: str = "",
    ) -> str | None:
        """Write a finished answer; returns None when written, else the reason it was not."""
        if not decision.write or key is None:
            reason = decision.bypass_reason if decision.bypass_reason is not None else "no_key"
            return reason
        entry = self.entry_of(body, scope=scope, model=model, generation_s=generation_s,
                              deployment=deployment)
        if isinstance(entry, str):
            return entry
        return await self.store_entry(key, entry, decision.ttl_s)

    def entry_of(self, body: bytes, *, scope: CacheScope, model: str, generation_s: float,
                 deployment: str = "") -> CachedEntry | str:
        """The entry a finished answer makes, or the reason it makes none (counted)."""
        try:
            return CachedEntry.from_completion(
                body,
                EntryVersions.of(scope, model),
                created_at=self._clock(),
                generation_s=generation_s,
                deployment=deployment,
            )
        except NotCacheable as exc:
            self._metrics.record_write_rejected(exc.reason)
            return exc.reason

    async def store_entry(self, key: str, entry: CachedEntry, ttl_s: float) -> str | None:
        """Hand a built entry to the backend; returns None, or "backend_error"."""
        try:
            stored = await self._backend.set(key, entry, ttl_s)
        except Exception as exc:  # a backend broke its contract; the request must not fail
            self._failures.report("set", exc)
            stored = False
        if not stored:
            self._metrics.record_write_rejected("backend_error")
            return "backend_error"
        self._metrics.record_write()
        return None
