"""The side-by-side page's arithmetic over rounds: medians per point, ratios within a round."""

from __future__ import annotations

from bench.benchmarks_report import (
    Point,
    Running,
    comparisons,
    max_rate,
    median_point,
    overhead_table,
    per_round,
    spread,
)
from bench.vs_litellm import TARGETS, rotated
from router.loadtest.loadgen import RunResult, Sample


def _point(target: str, e2e_p50: float, *, round_no: int = 0, rate: float = 5.0,
           p99: float = 30.0, errors: int = 0, cpu: float | None = 2.0) -> Point:
    return Point(target, rate, False, 200, errors, (e2e_p50, p99), (e2e_p50, p99), cpu, 100.0,
                 cpu, round_no)


def _running(name: str, points: list[Point]) -> Running:
    return Running(TARGETS[name], "", None, None, points)


def test_one_round_is_its_own_median() -> None:
    point = _point("slorouter-full", 21.0)
    assert median_point([point]) is point


def test_the_median_round_gives_each_figure_and_one_slow_round_moves_none() -> None:
    rounds = [_point("litellm", 40.0, round_no=0, cpu=20.0),
              _point("litellm", 41.0, round_no=1, cpu=21.0, errors=1),
              _point("litellm", 90.0, round_no=2, p99=300.0, cpu=60.0)]
    combined = median_point(rounds)
    assert combined.e2e == (41.0, 30.0) and combined.ttft == (41.0, 30.0)
    assert combined.cpu_ms == 21.0 and combined.busy_cpu_ms == 21.0
    assert combined.sent == 600 and combined.errors == 1


def test_rounds_pair_up_only_where_every_target_was_measured() -> None:
    direct = _running("direct", [_point("direct", 20.0, round_no=n) for n in (0, 1, 2)])
    full = _running("slorouter-full", [_point("slorouter-full", 21.0, round_no=n)
                                       for n in (0, 2)])
    grouped = per_round([direct, full], 5.0, False)
    assert [[p.round for p in group] for group in grouped] == [[0, 0], [2, 2]]


def test_a_ratio_is_taken_within_each_round_then_summarised() -> None:
    # the machine slows in round 1: every target's latency doubles, the ratio holds
    direct = _running("direct", [_point("direct", 20.0), _point("direct", 40.0, round_no=1),
                                 _point("direct", 20.0, round_no=2)])
    full = _running("slorouter-full", [_point("slorouter-full", 21.0),
                                       _point("slorouter-full", 42.0, round_no=1),
                                       _point("slorouter-full", 21.5, round_no=2)])
    lite = _running("litellm", [_point("litellm", 40.0), _point("litellm", 80.0, round_no=1),
                                _point("litellm", 35.0, round_no=2)])
    line = comparisons([direct, full, lite], [5.0], False)[0]
    assert "3 rounds" in line
    assert "E2E p50 0.05 [0.05–0.10]" in line  # 1/20, 2/40, 1.5/15


def test_a_rate_is_sustained_only_when_every_round_was() -> None:
    points = [_point("litellm", 40.0, rate=5.0), _point("litellm", 40.0, rate=5.0, round_no=1),
              _point("litellm", 40.0, rate=10.0),
              _point("litellm", 40.0, rate=10.0, round_no=1, p99=150.0)]
    assert max_rate(_running("litellm", points), False) == 5.0


def test_spread_shows_the_median_and_range_of_several_figures_only() -> None:
    assert spread([0.5]) == "0.50"
    assert spread([0.3, 0.1, 0.2]) == "0.20 [0.10–0.30]"


def test_each_round_starts_one_target_later() -> None:
    targets = [_running(name, []) for name in ("direct", "slorouter-full", "litellm")]
    orders = [[r.target.name for r in rotated(targets, n)] for n in range(4)]
    assert orders[0] == ["direct", "slorouter-full", "litellm"]
    assert orders[1] == ["slorouter-full", "litellm", "direct"]
    assert orders[3] == orders[0]


def test_a_point_whose_load_generator_fell_behind_is_not_sustained() -> None:
    """Fast answers at a rate the generator could not offer (dispatch lag p99 40 ms) prove
    nothing about that rate: the point is not sustained, the max rate is the one below, and
    the added-latency table says why."""
    def point(rate: float, lag: float) -> Point:
        return Point("slorouter-full", rate, False, 200, 0, (21.0, 30.0), (21.0, 30.0), 2.0,
                     100.0, 2.0, 0, lag)

    full = _running("slorouter-full", [point(50.0, 0.4), point(400.0, 40.0)])
    direct = _running("direct", [Point("direct", r, False, 200, 0, (20.0, 25.0), (20.0, 25.0),
                                       None, None) for r in (50.0, 400.0)])
    assert point(50.0, 0.4).sustained and not point(400.0, 40.0).sustained
    late = [Sample(i / 400, 0.02, 0.02, 200, lag_s=0.04) for i in range(200)]
    assert Point.of(RunResult("slorouter-full", 400.0, 0.5, late), False, None, None
                    ).generator_behind
    assert max_rate(full, False) == 50.0
    rows = overhead_table([direct, full], [50.0, 400.0], False)
    assert rows[-1].endswith("| no (load generator behind) |") and rows[-2].endswith("| yes |")


def test_no_overhead_is_taken_from_a_direct_run_sent_late() -> None:
    """A direct run whose generator fell behind is no baseline: its late sends read as a
    negative overhead (-39 ms, "sustained: yes", the benchmark audit of 2026-12-07). The
    added-latency table says so instead of a figure, and the LiteLLM comparison leaves that
    round out."""
    def point(target: str, e2e: float, lag: float | None, round_no: int = 0) -> Point:
        return Point(target, 20.0, False, 200, 0, (e2e, 60.0), (e2e, 60.0), 2.0, 100.0, 2.0,
                     round_no, lag)

    direct = _running("direct", [point("direct", 60.0, 40.0), point("direct", 20.0, 0.4, 1)])
    full = _running("slorouter-full", [point("slorouter-full", 21.0, 0.4),
                                       point("slorouter-full", 21.0, 0.4, 1)])
    lite = _running("litellm", [point("litellm", 40.0, 0.4), point("litellm", 40.0, 0.4, 1)])
    only_late = _running("direct", [point("direct", 60.0, 40.0)])
    row = overhead_table([only_late, full], [20.0], False)[2]
    assert "no baseline" in row and "-39" not in row
    line = comparisons([direct, full, lite], [20.0], False)[0]
    assert "rounds" not in line and "E2E p50 0.05" in line  # round 1 only: 1/20
