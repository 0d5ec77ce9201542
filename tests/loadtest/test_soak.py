"""`bench.soak`: the summary maths on synthetic samples, and one short real run."""

from __future__ import annotations

import json
import subprocess
from collections import Counter
from pathlib import Path

import pytest

from bench.soak import (
    Sample,
    errors_by_class,
    ols_slope,
    returned_to_baseline,
    rss_growth_per_1k,
    second_half_rss_growth_per_1k,
)
from tests.support.procs import PYTHON, ROOT


def _samples(rss_of_sent: dict[int, float], idle_rss: float = 0.0) -> list[Sample]:
    """Load samples at the given (sent, rss) points, then an idle sample of `idle_rss`."""
    points = sorted(rss_of_sent.items())
    samples = [Sample(float(i), "start" if i == 0 else "load", sent, rss, 20, 5, 0)
               for i, (sent, rss) in enumerate(points)]
    return [*samples, Sample(99.0, "idle", points[-1][0], idle_rss, 20, 5, 0)]


def test_ols_slope_of_a_line_and_of_too_few_points() -> None:
    assert ols_slope([0, 1, 2, 3], [1, 3, 5, 7]) == pytest.approx(2.0)
    assert ols_slope([5], [1]) is None and ols_slope([2, 2], [1, 3]) is None


def test_steady_growth_reads_as_mb_per_thousand_requests_over_both_halves() -> None:
    """The leak the soak was written for: 4.2 MB per 1,000 requests, no plateau."""
    leaking = _samples({sent: 320 + 4.2 * sent / 1000 for sent in range(0, 15001, 500)},
                       idle_rss=5000.0)  # the idle sample does not count
    assert rss_growth_per_1k(leaking) == pytest.approx(4.2)
    assert second_half_rss_growth_per_1k(leaking) == pytest.approx(4.2)


def test_a_plateau_shows_as_a_flat_second_half() -> None:
    """Warm-up growth to ~400 MB by 9,000 requests, then level: the whole-run slope is
    positive, the second half's (from 7,500 requests on) close to 0."""
    levelling = _samples({sent: 320 + 80 * min(sent, 7000) / 7000
                          for sent in range(0, 15001, 500)})
    whole_run = rss_growth_per_1k(levelling)
    assert whole_run is not None and whole_run > 3
    assert second_half_rss_growth_per_1k(levelling) == pytest.approx(0.0, abs=1e-9)


def test_no_growth_figure_without_two_sampled_request_counts() -> None:
    only_start = [Sample(0.0, "start", 0, 320.0, 17, 3, 0)]
    assert rss_growth_per_1k(only_start) is None
    assert second_half_rss_growth_per_1k(only_start) is None


@pytest.mark.parametrize(("start", "peak", "idle", "back"), [
    (19, 109, 38, True),    # the audit's fds: pooled upstream connections stay open
    (0, 78, 7, True),       # its established connections
    (19, 40, 29, True),     # within the absolute slack
    (19, 400, 300, False),  # most of the rise still held at idle: a leak
    (19, 30, 35, False),    # above the peak's rise and the slack
])
def test_returned_to_baseline(start: int, peak: int, idle: int, back: bool) -> None:
    assert returned_to_baseline(start, peak, idle) is back


def test_errors_by_class_leave_out_successes_and_deliberate_cancels() -> None:
    outcomes = Counter({"stream:200": 10, "repeat:200_cache_hit": 4,
                        "cancel_mid_stream:cancelled": 3, "bad:http_400": 5,
                        "whole:http_503": 2, "stream:http_503": 1, "stream:stream_error": 1})
    assert errors_by_class(outcomes) == {"http_400": 5, "http_503": 3, "stream_error": 1}


@pytest.mark.integration
@pytest.mark.slow
def test_a_short_real_run_prints_samples_and_a_summary(tmp_path: Path) -> None:
    result = subprocess.run([PYTHON, "-m", "bench.soak", "--minutes", "0.5", "--rate", "5",
                             "--sample-s", "5", "--idle-s", "2", "--out", str(tmp_path)],
                            capture_output=True, text=True, timeout=120, cwd=ROOT)
    assert result.returncode == 0, result.stderr
    for field in ("requests sent:", "rss MB:", "rss growth MB per 1000 requests: whole run",
                  "second half", "fds: start", "connections: start", "returned near start",
                  "errors by class:", "outcomes by kind:", "faults: 5xx on sim-fast"):
        assert field in result.stdout
    samples = json.loads((tmp_path / "samples.json").read_text())
    phases = [s["phase"] for s in samples]
    assert phases[0] == "start" and phases[-2:] == ["end", "idle"] and "load" in phases
    assert samples[-1]["sent"] > 0 and all(s["rss_mb"] > 0 for s in samples)
    assert "Traceback" not in result.stderr
