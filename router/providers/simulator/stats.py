"""Per-model counters of the simulator, as `GET /control/stats` reports them.

`ModelStats` is the one mutable record per model name, updated by the request handlers on the
event loop (single-threaded, so no locks). `snapshot` turns it into JSON-ready data; recent
prefix-cache hits are those within `RECENT_WINDOW_S` of the injected `now`.
"""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass, field

RECENT_WINDOW_S = 60.0


@dataclass
class ModelStats:
    """Counters for one model name since start or the last reset."""

    requests: int = 0
    completed: int = 0
    errors: dict[str, int] = field(default_factory=dict)
    hangs: int = 0
    cut_streams: int = 0
    cancellations: int = 0
    in_flight: int = 0
    prompt_tokens: int = 0
    completion_tokens: int = 0
    prefix_cache_lookups: int = 0
    prefix_cache_hits: int = 0
    prefix_cache_cached_tokens: int = 0
    _hit_times: deque[float] = field(default_factory=deque)

    def count_error(self, kind: str) -> None:
        self.errors[kind] = self.errors.get(kind, 0) + 1

    def count_prefix_lookup(self, cached_tokens: int, now: float) -> None:
        self.prefix_cache_lookups += 1
        if cached_tokens > 0:
            self.prefix_cache_hits += 1
            self.prefix_cache_cached_tokens += cached_tokens
            self._hit_times.append(now)
        self._trim(now)

    def _trim(self, now: float) -> None:
        while self._hit_times and self._hit_times[0] < now - RECENT_WINDOW_S:
            self._hit_times.popleft()

    def snapshot(self, now: float, queued: int) -> dict[str, object]:
        """JSON-ready counters (errors by kind: `"429"`, `"500"`, `"503"`, `"400"`)."""
        self._trim(now)
        return {
            "requests": self.requests,
            "completed": self.completed,
            "errors": dict(self.errors),
            "errors_total": sum(self.errors.values()),
            "hangs": self.hangs,
            "cut_streams": self.cut_streams,
            "cancellations": self.cancellations,
            "in_flight": self.in_flight,
            "queued": queued,
            "prompt_tokens": self.prompt_tokens,
            "completion_tokens": self.completion_tokens,
            "prefix_cache": {
                "lookups": self.prefix_cache_lookups,
                "hits": self.prefix_cache_hits,
                "cached_tokens": self.prefix_cache_cached_tokens,
                "recent_hits": len(self._hit_times),
                "recent_window_s": RECENT_WINDOW_S,
            },
        }
