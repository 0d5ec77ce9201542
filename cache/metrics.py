"""Cache counters in one plain object, with an immutable snapshot for exporters.

`CacheMetrics` is updated by the result-cache front, the backends and the prefix helpers on the
event loop thread; the observability layer reads `snapshot()` and exports it (this module does
no exporting, no logging and no I/O). Times are in seconds.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Mapping
from dataclasses import dataclass, field
from types import MappingProxyType


@dataclass(frozen=True, slots=True)
class CacheMetricsSnapshot:
    """The counters at one instant. Rates are derived, never stored."""

    hits: int
    misses: int
    stale_hits: int
    expired: int
    bypasses: Mapping[str, int]
    writes: int
    writes_rejected: Mapping[str, int]
    backend_errors: Mapping[str, int]
    time_saved_s: float
    prefix_requests: int
    prefix_hits: int
    prefix_cached_tokens: int
    ttft_saved_s: float
    coalesced: int = 0  # hits served after waiting for another request's answer

    @property
    def lookups(self) -> int:
        """Lookups that reached the cache (bypasses excluded)."""
        return self.hits + self.misses + self.stale_hits

    @property
    def hit_rate(self) -> float:
        """Fresh hits over lookups; 0.0 when nothing was looked up."""
        return self.hits / self.lookups if self.lookups else 0.0

    @property
    def stale_hit_rate(self) -> float:
        """Stale hits over lookups; 0.0 when nothing was looked up."""
        return self.stale_hits / self.lookups if self.lookups else 0.0

    @property
    def prefix_hit_rate(self) -> float:
        """Requests that read cached prompt tokens over requests that reported usage."""
        return self.prefix_hits / self.prefix_requests if self.prefix_requests else 0.0


@dataclass
class CacheMetrics:
    """Mutable counters; one instance per process, created by the composition root."""

    hits: int = 0
    misses: int = 0
    stale_hits: int = 0
    expired: int = 0
    writes: int = 0
    time_saved_s: float = 0.0
    prefix_requests: int = 0
    prefix_hits: int = 0
    prefix_cached_tokens: int = 0
    ttft_saved_s: float = 0.0
    coalesced: int = 0
    bypasses: Counter[str] = field(default_factory=Counter)
    writes_rejected: Counter[str] = field(default_factory=Counter)
    backend_errors: Counter[str] = field(default_factory=Counter)

    def record_hit(self, time_saved_s: float) -> None:
        """A fresh hit that spared an upstream call of `time_saved_s`."""
        self.hits += 1
        self.time_saved_s += max(time_saved_s, 0.0)

    def record_coalesced(self) -> None:
        """A request that waited for another one computing the same answer, then hit it."""
        self.coalesced += 1

    def record_miss(self, *, expired: bool = False) -> None:
        """A miss; `expired` when an entry was found but older than the rule's TTL."""
        self.misses += 1
        self.expired += int(expired)

    def record_stale(self) -> None:
        """An entry found under versions that no longer hold; not served."""
        self.stale_hits += 1

    def record_bypass(self, reason: str) -> None:
        """A request that did not read the cache, by reason."""
        self.bypasses[reason] += 1

    def record_write(self) -> None:
        """An entry handed to the backend."""
        self.writes += 1

    def record_write_rejected(self, reason: str) -> None:
        """A response that was not written (error, cut stream, no-store...)."""
        self.writes_rejected[reason] += 1

    def record_backend_error(self, backend: str) -> None:
        """A backend call that failed or timed out and was turned into a miss or a no-op."""
        self.backend_errors[backend] += 1

    def record_prefix(self, cached_tokens: int, ttft_saved_s: float = 0.0) -> None:
        """A provider response whose usage reported `cached_tokens` prompt tokens from cache."""
        self.prefix_requests += 1
        self.prefix_hits += int(cached_tokens > 0)
        self.prefix_cached_tokens += max(cached_tokens, 0)
        self.ttft_saved_s += max(ttft_saved_s, 0.0)

    def snapshot(self) -> CacheMetricsSnapshot:
        """An immutable copy of every counter."""
        return CacheMetricsSnapshot(
            hits=self.hits,
            misses=self.misses,
            stale_hits=self.stale_hits,
            expired=self.expired,
            bypasses=MappingProxyType(dict(self.bypasses)),
            writes=self.writes,
            writes_rejected=MappingProxyType(dict(self.writes_rejected)),
            backend_errors=MappingProxyType(dict(self.backend_errors)),
            time_saved_s=self.time_saved_s,
            prefix_requests=self.prefix_requests,
            prefix_hits=self.prefix_hits,
            prefix_cached_tokens=self.prefix_cached_tokens,
            ttft_saved_s=self.ttft_saved_s,
            coalesced=self.coalesced,
        )

    def reset(self) -> None:
        """Zero every counter (tests)."""
        fresh = CacheMetrics()
        for name in self.__dataclass_fields__:
            setattr(self, name, getattr(fresh, name))
