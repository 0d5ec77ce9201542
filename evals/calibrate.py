"""Threshold calibration to a quality floor, on held-out (cross-fitted) predictions only.

Given predicted P(success), real outcomes and costs of calibration prompts, pick the rule kind and
threshold of `policies.learned.decide` with the lowest mean cost whose one-sided lower bound on
`mean(quality - fraction * reference quality)` is >= 0 (z standard errors). Candidates may
also be cut from the cheap end (`start`: the rule only considers `order[start:]`), so that
"always the cheapest model that meets the floor" is one of the rules tried. If no threshold
qualifies, everything goes to the reference model. Pure; never sees the test fold.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
import numpy.typing as npt

from policies.learned.decide import RuleKind, choose_matrix

FloatArray = npt.NDArray[np.float64]
IntArray = npt.NDArray[np.int64]
GRID = 256


@dataclass(frozen=True)
class Calibration:
    """The chosen bar and what it achieved on the calibration prompts."""

    kind: RuleKind
    threshold: float
    start: int
    quality: float
    mean_cost: float
    lower_margin: float


@dataclass(frozen=True)
class CalibrationData:
    """Calibration prompts: predictions, outcomes and costs over the same model columns."""

    probs: FloatArray
    scores: FloatArray
    costs: FloatArray
    order: IntArray
    reference: int


def candidate_thresholds(data: CalibrationData, kind: RuleKind, start: int = 0) -> FloatArray:
    """Quantiles of the quantity the bar compares, plus the extremes."""
    sub = data.probs[:, data.order[start:]]
    values = sub.max(axis=1, keepdims=True) - sub if kind == "margin" else sub
    grid = np.quantile(values, np.linspace(0.0, 1.0, GRID))
    return np.unique(np.concatenate([grid, [0.0, 1.0 + 1e-9]]))


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
    margin = achieved - fraction * data.scores[:, data.reference]
    spread = float(margin.std(ddof=1)) if len(margin) > 1 else 0.0
    lower = float(margin.mean()) - z * spread / math.sqrt(len(margin))
    cost = float(data.costs[rows, chosen].mean())
    return Calibration(kind, float(threshold), start, float(achieved.mean()), cost, lower)


def calibrate(data: CalibrationData, fraction: float, z: float) -> Calibration:
    """The cheapest bar that keeps the floor with margin; the reference-only rule if none does."""
    best: Calibration | None = None
    kinds: tuple[RuleKind, ...] = ("absolute", "margin")
    for start, kind in ((s, k) for s in range(len(data.order)) for k in kinds):
        for threshold in candidate_thresholds(data, kind, start):
            cal = evaluate(data, kind, float(threshold), fraction, z, start)
            if cal.lower_margin < 0.0:
                continue
            if best is None or (cal.mean_cost, -cal.quality) < (best.mean_cost, -best.quality):
                best = cal
    if best is None:
        return evaluate(data, "absolute", math.inf, fraction, z)
    return best
