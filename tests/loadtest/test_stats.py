"""Run summaries: percentiles over successful requests, errors grouped by class, segments."""

from __future__ import annotations

import pytest

from router.loadtest.loadgen import RunResult, Sample, stream_tpot
from router.loadtest.stats import Percentiles, format_summary, summarize
from router.stats import tpot_s


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
    e2e = summary.latency_ms["e2e"]
    assert e2e.count == 100
    assert abs(e2e.p50 - 5050.0) < 1e-6 and abs(e2e.p99 - 9901.0) < 1e-6


def test_errors_are_grouped_by_class_and_rates_reported() -> None:
    """Each failure counts under its class; achieved and completed rates are per second."""
    summary = summarize(_result())
    assert summary.errors == {"ClientConnectorError": 1, "http_429": 1, "stream_error": 1}
    assert (summary.sent, summary.ok) == (103, 100)
    # as sent: 103 sends from 0.0 s to 9.9 s (the first and last), 102 gaps
    assert abs(summary.achieved_rate - 102 / 9.9) < 1e-9
    assert abs(summary.completed_rate - 100 / 12) < 1e-9


def test_segments_split_by_class_and_streaming() -> None:
    """Segments exist per class, stream / non-stream and cache status; TPOT only for streams."""
    summary = summarize(_result())
    assert set(summary.segments) == {"a", "b", "stream", "non-stream", "cache=hit",
                                     "cache=miss"}
    assert summary.segments["cache=hit"]["e2e"].count == 10
    assert summary.segments["stream"]["tpot"].count == 50
    assert summary.segments["non-stream"]["tpot"].count == 0
    text = format_summary(summary)
    assert "http_429=1" in text and "stream TPOT" in text


def test_the_achieved_rate_is_measured_not_the_plan_over_the_duration() -> None:
    """Ten requests sent at 10/s by a run capped by `--max-requests` in a 60 s window: 10/s,
    not 10 / 60 (what was printed); a single send has no rate."""
    ten = [Sample(i * 0.1, 0.01, 0.01, 200) for i in range(10)]
    assert abs(summarize(RunResult("t", 10.0, 60.0, ten, 1.0)).achieved_rate - 10.0) < 1e-9
    late = [Sample(s.started, 0.01, 0.01, 200, lag_s=0.05 * i) for i, s in enumerate(ten)]
    summary = summarize(RunResult("t", 10.0, 60.0, late, 1.0))
    assert abs(summary.achieved_rate - 9 / 1.35) < 1e-9  # as they left the generator
    assert abs(summary.dispatch_lag_ms.p50 - 225.0) < 1e-9
    single = summarize(RunResult("t", 10.0, 60.0, ten[:1], 1.0)).achieved_rate
    assert single != single  # NaN
    assert "dispatch lag" in format_summary(summary)


def test_tpot_is_designs_over_the_usage_tokens_else_the_chunks_counted() -> None:
    """16 tokens in 4-token chunks 20 ms apart: (60 ms) / (16 - 1) = 4 ms, the router's TPOT
    (dividing by the 12 tokens after the first chunk read 5 ms); without usage the 4 chunks
    are the tokens (20 ms, marked `chunks`); one chunk or one token has none."""
    assert stream_tpot(0.0, 0.060, 16, 4) == (pytest.approx(0.004), "usage")
    assert stream_tpot(0.0, 0.060, None, 4) == (pytest.approx(0.020), "chunks")
    assert stream_tpot(0.0, 0.060, 16, 4)[0] == tpot_s(0.0, 0.060, 16)
    assert stream_tpot(0.0, 0.0, 16, 1) == (None, None)
    assert stream_tpot(0.0, 0.1, 1, 2) == (None, None)
    assert stream_tpot(None, None, 16, 0) == (None, None)


def test_the_summary_says_where_tpots_output_tokens_came_from() -> None:
    """Counted over the successful streams with a TPOT, in the JSON and in the table; a run
    that counted chunks says its TPOT may read high."""
    samples = [Sample(i * 0.1, 0.01, 0.1, 200, stream=True, tpot_s=0.004, output_tokens=16,
                      tpot_tokens="usage" if i < 3 else "chunks") for i in range(5)]
    samples.append(Sample(0.6, 0.01, 0.1, 200, stream=True))  # one token: no TPOT
    summary = summarize(RunResult("t", 10.0, 1.0, samples, 1.0))
    assert summary.tpot_tokens == {"chunks": 2, "usage": 3}
    text = format_summary(summary)
    assert "the tokens from usage in 3 streams, from counted chunks in 2" in text
    assert "may read high" in text
    only_usage = summarize(RunResult("t", 10.0, 1.0, samples[:3], 1.0))
    assert "may read high" not in format_summary(only_usage)
    assert summarize(_result()).tpot_tokens == {}  # samples that do not say: nothing claimed


def test_a_run_whose_generator_fell_behind_is_flagged() -> None:
    """Sends 20 ms late at p99 (over the 5 ms bound) flag the run and say so in the report: its
    latencies carry the generator's lag and the target never saw the rate asked. A run on
    schedule is not flagged."""
    on_time = [Sample(i * 0.1, 0.01, 0.01, 200, lag_s=0.001) for i in range(100)]
    late = [Sample(s.started, 0.01, 0.01, 200, lag_s=0.02) for s in on_time]
    assert not summarize(RunResult("t", 10.0, 10.0, on_time, 10.0)).generator_behind
    summary = summarize(RunResult("t", 10.0, 10.0, late, 10.0))
    assert summary.generator_behind
    assert "load generator fell behind" in format_summary(summary)


def test_a_class_named_like_another_segment_keeps_its_own() -> None:
    """A mix class called `stream` (non-streamed here) is its own segment, `class=stream`; the
    stream segment holds the streamed requests, each once."""
    samples = [Sample(i * 0.1, 0.01, 0.01 * (i + 1), 200, cls="stream", stream=False)
               for i in range(3)]
    samples += [Sample(1 + i * 0.1, 0.01, 0.5, 200, cls="chat", stream=True) for i in range(2)]
    segments = summarize(RunResult("t", 10.0, 1.0, samples, 2.0)).segments
    assert segments["stream"]["e2e"].count == 2 and segments["stream"]["e2e"].p50 == 500
    assert segments["class=stream"]["e2e"].count == 3
    assert segments["non-stream"]["e2e"].count == 3


def test_percentiles_interpolate_between_the_nearest_ranks() -> None:
    """The documented definition on a hand-checked sample: 1..10 ms gives p50 5.5, p90 9.1,
    p95 9.55, p99 9.91 (rank q/100 * (n - 1), interpolated), not nearest-rank's 5 and 10."""
    p = Percentiles.of([v / 1e3 for v in range(1, 11)])
    assert (p.count, p.p50, p.p90) == (10, 5.5, 9.1)
    assert abs(p.p95 - 9.55) < 1e-9 and abs(p.p99 - 9.91) < 1e-9
