"""The calibration bound cannot collapse, too few rows fall back, and selection is checked."""

from __future__ import annotations

import numpy as np

from evals.calibrate import (
    MIN_ROWS,
    CalibrationData,
    calibrate,
    check_third,
    paired_lower_bound,
)


def test_bound_matches_bonett_price_for_paired_proportions() -> None:
    """With fraction 1 the bound is Bonett and Price's adjusted Wald bound from the 2x2 counts."""
    achieved = np.array([1.0] * 30 + [0.0] * 5 + [1.0] * 9 + [0.0] * 6)
    reference = np.array([1.0] * 30 + [1.0] * 5 + [0.0] * 9 + [0.0] * 6)
    n = len(achieved)
    p12, p21 = (9 + 0.5) / (n + 2), (5 + 0.5) / (n + 2)
    diff = p12 - p21
    expected = diff - 2.0 * np.sqrt((p12 + p21 - diff**2) / (n + 2))
    assert np.isclose(paired_lower_bound(achieved, reference, 1.0, 2.0), expected)


def test_eight_correct_rows_do_not_prove_the_floor() -> None:
    """8 prompts right for both models: the bound stays below 0 (the old one equalled the mean
    margin, 0.05) and calibration keeps everything on the reference."""
    ones = np.ones(8)
    assert paired_lower_bound(ones, ones, 0.95, 2.5) < 0.0
    data = CalibrationData(np.tile([0.9, 0.95], (8, 1)), np.ones((8, 2)),
                           np.tile([0.001, 0.01], (8, 1)), np.array([0, 1]), 1)
    cal = calibrate(data, 0.95, 2.5)
    assert cal.mean_cost == 0.01 and cal.outcome == "too_few_rows"


def _breaks(n: int, sims: int, seed: int) -> float:
    """Share of calibration draws whose rule breaks the floor in truth: the cheap model is
    right 80% of the time, the reference always, floor 0.95, predictions carry no signal."""
    rng = np.random.default_rng(seed)
    bad = 0
    for _ in range(sims):
        scores = np.column_stack([rng.random(n) < 0.80, np.ones(n)]).astype(float)
        probs = np.column_stack([rng.random(n), np.full(n, 0.99)])
        data = CalibrationData(probs, scores, np.tile([0.001, 0.01], (n, 1)), np.array([0, 1]), 1)
        cal = calibrate(data, 0.95, 2.5)
        cheap_share = (0.01 - cal.mean_cost) / 0.009
        bad += 1.0 - 0.2 * cheap_share < 0.95 - 1e-12
    return bad / sims


def test_calibrated_rule_rarely_breaks_the_floor_on_small_data() -> None:
    """The old bound broke the floor in ~20% of 30-row draws and ~2-3% of 60-row draws
    (z = 2.5 promises ~0.6%)."""
    assert MIN_ROWS > 30
    assert _breaks(30, 60, 1) == 0.0
    assert _breaks(MIN_ROWS, 150, 2) <= 0.006


def test_chosen_rule_is_checked_on_rows_it_was_not_selected_on() -> None:
    """With real signal (a cheap model right on the prompts predicted easy), the cheap rule is
    confirmed on the check third and the check's own bound is recorded and non-negative."""
    rng = np.random.default_rng(3)
    n = 600
    easy = rng.random(n) < 0.6
    cheap_right = np.where(easy, rng.random(n) < 0.99, rng.random(n) < 0.3)
    scores = np.column_stack([cheap_right, np.ones(n)]).astype(float)
    probs = np.column_stack([np.where(easy, 0.95, 0.2), np.full(n, 0.99)])
    data = CalibrationData(probs, scores, np.tile([0.001, 0.01], (n, 1)), np.array([0, 1]), 1)
    cal = calibrate(data, 0.95, 2.5)
    assert cal.outcome == "confirmed" and cal.mean_cost < 0.01
    assert cal.check_rows == n // 3 and cal.rows == n - n // 3
    assert cal.check_lower_margin >= 0.0


def test_the_check_third_holds_whole_prompt_groups() -> None:
    """Rows of one prompt group (the same text, one reading passage) all select or all check a
    rule: every third row split groups across the two (the eval audit: 289 of MMLU's), so the
    check third was not quite unseen. About a third of the groups check."""
    groups = [f"g{i // 3}" for i in range(300)] + [f"solo{i}" for i in range(60)]
    checking = check_third(len(groups), groups)
    by_group: dict[str, set[bool]] = {}
    for group, checks in zip(groups, checking, strict=True):
        by_group.setdefault(group, set()).add(bool(checks))
    assert all(len(sides) == 1 for sides in by_group.values())
    share = sum(True in sides for sides in by_group.values()) / len(by_group)
    assert 0.3 <= share <= 0.36
    assert list(check_third(6, None)) == [False, False, True, False, False, True]
