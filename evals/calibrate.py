"""Threshold calibration to a quality floor, on held-out (cross-fitted) predictions only.

Given predicted P(success), real outcomes and costs of calibration prompts, pick the rule kind and
threshold of `policies.learned.decide` with the lowest mean cost whose one-sided lower bound on
`mean(quality - fraction * reference quality)` is >= 0 (z standard errors). Candidates may
also be cut from the cheap end (`start`: the rule only considers `order[start:]`), so that
"always the cheapest model that meets the floor" is one of the rules tried.

The bound cannot collapse: it is Bonett and Price's adjusted Wald bound for paired proportions
(half a pseudo-prompt for each of the four (routed right?, reference right?) outcomes), so 8
prompts all answered right still carry a standard error of about 0.1, not 0. Selection among
hundreds of rules is controlled by a check split: rules are ranked on two thirds of the prompts
(`select`), then tested on the other third (`check`, every third row, mean margin >= 0:
`CHECK_Z`) in a fixed sequence from the dearest to the cheapest, stopping at the first that
fails; the cheapest confirmed one wins.
Fewer than `MIN_ROWS` prompts, or nothing confirmed: everything goes to the reference model.
Pure; never sees the test fold.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, replace
from typing import Literal

import numpy as np
import numpy.typing as npt

from policies.learned.decide import RuleKind, choose_matrix

FloatArray = npt.NDArray[np.float64]
IntArray = npt.NDArray[np.int64]
GRID = 256
MIN_ROWS = 60  # below this, no rule is calibrated: everything goes to the reference
# The check third confirms a rule when its mean margin over the floor is >= 0 (z = 0): a bound
# on a third of the prompts is so wide that it refused nearly every saving (z = 2.5: ZeroEval
# MATH L5 / CRUXEval savings 5% / 7%; z = 0: 21% / 28%; no check at all: 39% / 30%, but on
# prompts with no signal the chosen rule then broke the floor in 3% of 60-prompt draws, 0% with
# the check; floor hold rates 0.98-1.0 in every case; tests/evals/test_calibration_bound.py).
CHECK_Z = 0.0
Outcome = Literal["confirmed", "none_confirmed", "too_few_rows"]


@dataclass(frozen=True)
class Calibration:
    """The chosen bar and what it achieved on the calibration prompts."""

    kind: RuleKind
    threshold: float
    start: int
    quality: float
    mean_cost: float
    lower_margin: float
    rows: int = 0
    check_rows: int = 0
    check_quality: float = math.nan
    check_lower_margin: float = math.nan
    outcome: Outcome = "confirmed"


@dataclass(frozen=True)
class CalibrationData:
    """Calibration prompts: predictions, outcomes and costs over the same model columns."""

    probs: FloatArray
    scores: FloatArray
    costs: FloatArray
    order: IntArray
    reference: int
    # Each row's prompt group (same text or reading passage: `evals.outcomes.group_key`), so
    # that the check third holds whole groups; None: every row its own group.
    groups: tuple[str, ...] | None = None


def candidate_thresholds(data: CalibrationData, kind: RuleKind, start: int = 0) -> FloatArray:
    """Quantiles of the quantity the bar compares, plus the extremes."""
    sub = data.probs[:, data.order[start:]]
    values = sub.max(axis=1, keepdims=True) - sub if kind == "margin" else sub
    grid = np.quantile(values, np.linspace(0.0, 1.0, GRID))
    return np.unique(np.concatenate([grid, [0.0, 1.0 + 1e-9]]))


def paired_lower_bound(
    achieved: FloatArray, reference: FloatArray, fraction: float, z: float
) -> float:
    """One-sided lower bound on mean(achieved - fraction * reference), Bonett-Price adjusted:
    half a pseudo-row for each (1/0 achieved, 1/0 reference) pair, so it never collapses."""
    margin = achieved - fraction * reference
    pseudo = np.array([0.0, 1.0, -fraction, 1.0 - fraction])
    n = len(margin) + 2.0
    mean = (margin.sum() + 0.5 * pseudo.sum()) / n
    variance = (np.square(margin).sum() + 0.5 * np.square(pseudo).sum()) / n - mean**2
    return float(mean - z * math.sqrt(max(variance, 0.0) / n))


def evaluate(
    data: CalibrationData,
    kind: RuleKind,
    threshold: float,
    fraction: float,
    z: float,
    start: int = 0,
) -> Calibration:
    """Quality, cost and lower-bound margin of one bar on the calibration prompts."""
    chosen = choose_matrix(data.probs, data.order[start:], kind, threshold, data.reference)
    rows = np.arange(len(chosen))
    achieved = data.scores[rows, chosen]
    lower = paired_lower_bound(achieved, data.scores[:, data.reference], fraction, z)
    cost = float(data.costs[rows, chosen].mean())
    return Calibration(
        kind, float(threshold), start, float(achieved.mean()), cost, lower, rows=len(rows)
    )


def check_third(n: int, groups: Sequence[str] | None) -> npt.NDArray[np.bool_]:
    """The rows that confirm a rule (about a third): every third group in order of first
    appearance, whole, so that a prompt's near-twin never sits on the other side (every third
    row split 289 of MMLU's groups across select and check: the eval audit)."""
    if groups is None:
        every_third: npt.NDArray[np.bool_] = np.arange(n) % 3 == 2
        return every_third
    rank: dict[str, int] = {}
    for group in groups:
        rank.setdefault(group, len(rank))
    return np.array([rank[group] % 3 == 2 for group in groups], dtype=np.bool_)


def subset(data: CalibrationData, rows: npt.NDArray[np.bool_]) -> CalibrationData:
    """The calibration prompts at `rows` (a mask)."""
    groups = (None if data.groups is None
              else tuple(g for g, keep in zip(data.groups, rows, strict=True) if keep))
    return CalibrationData(
        data.probs[rows], data.scores[rows], data.costs[rows], data.order, data.reference,
        groups
    )


def passing(data: CalibrationData, fraction: float, z: float) -> list[Calibration]:
    """Every rule tried whose bound clears the floor, dearest first (the check sequence)."""
    found = []
    kinds: tuple[RuleKind, ...] = ("absolute", "margin")
    for start, kind in ((s, k) for s in range(len(data.order)) for k in kinds):
        for threshold in candidate_thresholds(data, kind, start):
            cal = evaluate(data, kind, float(threshold), fraction, z, start)
            if cal.lower_margin >= 0.0:
                found.append(cal)
    return sorted(found, key=lambda c: (-c.mean_cost, c.quality))


def calibrate(data: CalibrationData, fraction: float, z: float) -> Calibration:
    """The cheapest rule that clears the floor on the select rows and is confirmed on the
    check rows (fixed sequence, dearest first); the reference-only rule if none is."""
    n = len(data.scores)
    reference = evaluate(data, "absolute", math.inf, fraction, z)
    if n < MIN_ROWS:
        return replace(reference, outcome="too_few_rows")
    check_rows = check_third(n, data.groups)
    select, check = subset(data, ~check_rows), subset(data, check_rows)
    best: Calibration | None = None
    for cal in passing(select, fraction, z):
        checked = evaluate(check, cal.kind, cal.threshold, fraction, CHECK_Z, cal.start)
        if checked.lower_margin < 0.0:
            break
        best = replace(
            cal,
            check_rows=checked.rows,
            check_quality=checked.quality,
            check_lower_margin=checked.lower_margin,
        )
    if best is None:
        checked = evaluate(check, "absolute", math.inf, fraction, CHECK_Z)
        return replace(
            reference,
            check_rows=checked.rows,
            check_quality=checked.quality,
            check_lower_margin=checked.lower_margin,
            outcome="none_confirmed",
        )
    return best
