"""Cache metrics: counters, derived rates, snapshots that do not move, reset."""

from __future__ import annotations

from cache.metrics import CacheMetrics


def test_snapshot_counts_and_derives_rates() -> None:
    """Hits, misses and stale hits make the lookups; rates are derived from them."""
    metrics = CacheMetrics()
    metrics.record_hit(0.75)
    metrics.record_hit(0.25)
    metrics.record_miss()
    metrics.record_stale()
    metrics.record_bypass("no_cache")
    metrics.record_prefix(cached_tokens=1024, ttft_saved_s=0.2)
    metrics.record_prefix(cached_tokens=0)
    snap = metrics.snapshot()
    assert (snap.lookups, snap.hit_rate, snap.stale_hit_rate) == (4, 0.5, 0.25)
    assert snap.time_saved_s == 1.0
    assert snap.bypasses == {"no_cache": 1}
    assert (snap.prefix_hit_rate, snap.prefix_cached_tokens, snap.ttft_saved_s) == (0.5, 1024, 0.2)


def test_snapshot_is_frozen_while_counters_move_on() -> None:
    """A snapshot taken earlier does not change when counters are updated later."""
    metrics = CacheMetrics()
    metrics.record_backend_error("redis")
    snap = metrics.snapshot()
    metrics.record_backend_error("redis")
    assert snap.backend_errors == {"redis": 1}
    assert metrics.snapshot().backend_errors == {"redis": 2}


def test_empty_metrics_have_zero_rates_and_reset_zeroes_everything() -> None:
    """No lookups → rates are 0.0, not a division error; reset returns to that state."""
    metrics = CacheMetrics()
    assert metrics.snapshot().hit_rate == 0.0
    metrics.record_hit(1.0)
    metrics.record_write_rejected("error")
    metrics.reset()
    assert metrics.snapshot() == CacheMetrics().snapshot()
