"""The RouteLLM metrics, Wilson interval and bootstrap against hand-computable cases and laws."""

from __future__ import annotations

import math

import numpy as np
import pytest
from hypothesis import example, given, settings
from hypothesis import strategies as st

from evals.metrics import (
    CurvePoint,
    apgr,
    bootstrap,
    cpt,
    curve,
    evaluate_oracle,
    evaluate_router,
    floor_hold_rate,
    oracle_curve,
    pgr,
    wilson_interval,
)


def _line(weak: float, strong: float) -> tuple[CurvePoint, ...]:
    return tuple(CurvePoint(x, weak + x * (strong - weak)) for x in np.linspace(0, 1, 11))


def test_straight_line_between_models_has_apgr_one_half() -> None:
    """A curve on the weak-strong chord (what random routing gives) scores exactly 0.5."""
    assert math.isclose(apgr(_line(0.6, 0.8), 0.6, 0.8), 0.5)


def test_cpt_of_straight_line_equals_target() -> None:
    """On the chord, PGR equals strong share, so CPT(x) = x."""
    points = _line(0.6, 0.8)
    assert math.isclose(cpt(points, 0.5, 0.6, 0.8), 0.5)
    assert math.isclose(cpt(points, 0.8, 0.6, 0.8), 0.8)


def test_apgr_is_trapezoid_area_normalised() -> None:
    """APGR equals (trapezoid area - weak) / (strong - weak) computed by hand on 3 points."""
    pts = (CurvePoint(0.0, 0.5), CurvePoint(0.5, 0.9), CurvePoint(1.0, 1.0))
    area = 0.5 * (0.5 + 0.9) / 2 + 0.5 * (0.9 + 1.0) / 2
    assert math.isclose(apgr(pts, 0.5, 1.0), (area - 0.5) / 0.5)


def test_curve_spans_all_to_no_strong_calls() -> None:
    """The 11 thresholds go from every prompt strong to none (top edge uses >)."""
    rng = np.random.default_rng(3)
    score, strong, weak = rng.random(200), rng.integers(0, 2, 200), rng.integers(0, 2, 200)
    pts = curve(score, strong.astype(float), weak.astype(float))
    assert len(pts) == 11
    assert pts[0].strong_share == 0.0 and pts[-1].strong_share == 1.0
    assert math.isclose(pts[0].quality, weak.mean()) and math.isclose(
        pts[-1].quality, strong.mean()
    )


def test_oracle_curve_matches_counting() -> None:
    """The oracle's quality at share x is (weak right + min(x n, only-strong-right)) / n."""
    strong = np.array([1, 1, 1, 0, 1, 0, 1, 1], dtype=float)
    weak = np.array([0, 1, 0, 0, 1, 1, 0, 1], dtype=float)
    gain = np.sum((strong == 1) & (weak == 0))
    for p in oracle_curve(strong, weak):
        expected = (weak.sum() + min(p.strong_share * len(strong), gain)) / len(strong)
        assert math.isclose(p.quality, expected)


def test_oracle_curve_of_graded_scores_counts_each_gain_once() -> None:
    """Graded scores: strong 0.5 and weak 0.25 everywhere gain 0.25 a strong call (it read up
    to 1 a call: 0.35 at 10% strong calls); gains are taken largest first."""
    points = oracle_curve(np.full(100, 0.5), np.full(100, 0.25))
    assert [round(p.quality, 6) for p in points[:3]] == [0.25, 0.275, 0.3]
    assert math.isclose(points[-1].quality, 0.5)
    mixed = oracle_curve(np.array([1.0, 0.6, 0.3, 0.2]), np.array([0.0, 0.5, 0.3, 0.4]))
    gains = {round(p.strong_share, 1): p.quality for p in mixed}
    assert math.isclose(gains[0.0], 1.2 / 4)
    assert math.isclose(gains[0.5], (1.2 + 1.0 + 0.1) / 4)  # the two positive gains
    assert math.isclose(gains[1.0], (1.2 + 1.1) / 4)  # no negative gain is taken


def test_oracle_ranking_beats_reversed_ranking() -> None:
    """Scoring prompts by the true gain gives a higher APGR than the reversed score."""
    rng = np.random.default_rng(5)
    strong = (rng.random(500) < 0.8).astype(float)
    weak = (rng.random(500) < 0.6).astype(float)
    gain = strong - weak + rng.random(500) * 1e-3
    best = evaluate_router(gain, strong, weak)
    worst = evaluate_router(-gain, strong, weak)
    assert best.apgr > 0.5 > worst.apgr
    assert evaluate_oracle(strong, weak).apgr >= best.apgr - 1e-9


@settings(max_examples=50, deadline=None)
@given(st.integers(0, 50), st.integers(1, 50))
@example(0, 3)  # rounding once left the lower bound 5.6e-17 above phat = 0
def test_wilson_endpoints_solve_the_score_equation(k: int, extra: int) -> None:
    """Each Wilson bound p satisfies (phat - p)^2 = z^2 p (1 - p) / n (or is clipped at 0/1)."""
    n, z = k + extra, 1.959963984540054
    phat = k / n
    for p in wilson_interval(k, n):
        if 0.0 < p < 1.0:
            assert math.isclose(
                (phat - p) ** 2, z * z * p * (1 - p) / n, rel_tol=1e-6, abs_tol=1e-12
            )
    low, high = wilson_interval(k, n)
    assert low <= phat <= high


def test_bootstrap_is_reproducible_with_same_seed() -> None:
    """The same seeded generator gives the same resampled statistics."""
    data = np.arange(30, dtype=float)
    a = bootstrap(lambda i: float(data[i].mean()), 30, np.random.default_rng(1), 50)
    b = bootstrap(lambda i: float(data[i].mean()), 30, np.random.default_rng(1), 50)
    assert np.array_equal(a, b) and a.min() >= 0 and a.max() <= 29


def test_floor_hold_rate_extremes() -> None:
    """Always matching the reference holds the floor everywhere; always failing never does."""
    ref = (np.random.default_rng(2).random(300) < 0.7).astype(float)
    assert floor_hold_rate(ref, ref, 0.95, np.random.default_rng(0), 200) == 1.0
    assert floor_hold_rate(np.zeros(300), ref, 0.95, np.random.default_rng(0), 200) == 0.0


def test_equal_qualities_leave_pgr_apgr_and_cpt_undefined() -> None:
    """With no gap between the two models every normalised metric divided by zero (a
    ZeroDivisionError in eval replay, train-router and transfer); now they are None."""
    strong = np.array([1.0, 0.0, 1.0, 0.0])
    weak = np.array([0.0, 1.0, 0.0, 1.0])  # same mean, different prompts
    score = np.array([0.9, 0.1, 0.8, 0.2])
    for summary in (evaluate_router(score, strong, weak), evaluate_oracle(strong, weak)):
        assert (summary.apgr, summary.cpt50, summary.cpt80) == (None, None, None)
        assert summary.weak_quality == summary.strong_quality
    assert pgr(0.5, 0.5, 0.5) is None
    assert pgr(0.7, 0.5, 0.9) == pytest.approx(0.5)
