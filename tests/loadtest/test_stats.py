"""Run summaries: percentiles over successful requests, errors grouped by class, segments."""

from __future__ import annotations

from router.loadtest.loadgen import RunResult, Sample
from router.loadtest.stats import format_summary, summarize


def _result() -> RunResult:
    ok = [Sample(i * 0.1, ttft_s=0.01 * (i + 1), e2e_s=0.1 * (i + 1), status=200,
                 cls="a" if i % 2 else "b", stream=bool(i % 2),
                 tpot_s=0.002 if i % 2 else None, cache="hit" if i < 10 else "miss")
          for i in range(100)]
    bad = [Sample(1.0, None, 0.05, 429, "http_429", "a"),
           Sample(2.0, None, None, 0, "ClientConnectorError", "b"),
           Sample(3.0, 0.01, 0.2, 200, "stream_error", "a", True)]
    return RunResult("t", rate=10.0, duration_s=10.0, samples=ok + bad, wall_s=12.0)


def test_percentiles_use_only_successful_requests_in_milliseconds() -> None:
    """p50/p99 of E2E come from the 100 good samples (0.1..10 s), reported in ms."""
    summary = summarize(_result())
    e2e = summary.latency_ms["e2e_s"]
    assert e2e.count == 100
    assert abs(e2e.p50 - 5050.0) < 1e-6 and abs(e2e.p99 - 9901.0) < 1e-6


def test_errors_are_grouped_by_class_and_rates_reported() -> None:
    """Each failure counts under its class; achieved and completed rates are per second."""
    summary = summarize(_result())
    assert summary.errors == {"ClientConnectorError": 1, "http_429": 1, "stream_error": 1}
    assert (summary.sent, summary.ok) == (103, 100)
    assert abs(summary.achieved_rate - 10.3) < 1e-9
    assert abs(summary.completed_rate - 100 / 12) < 1e-9


def test_segments_split_by_class_and_streaming() -> None:
    """Segments exist per class, stream / non-stream and cache status; TPOT only for streams."""
    summary = summarize(_result())
    assert set(summary.segments) == {"a", "b", "stream", "non-stream", "cache=hit",
                                     "cache=miss"}
    assert summary.segments["cache=hit"]["e2e_s"].count == 10
    assert summary.segments["stream"]["tpot_s"].count == 50
    assert summary.segments["non-stream"]["tpot_s"].count == 0
    text = format_summary(summary)
    assert "http_429=1" in text and "stream TPOT" in text
