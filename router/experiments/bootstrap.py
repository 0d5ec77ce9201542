"""Percentile-bootstrap intervals for the difference of a statistic between arm and control.

Resampling is vectorised (a block of resamples at a time, each a row of indices) and driven
by an injected `numpy.random.Generator`, so the same seed gives the same interval. These are
fixed-time intervals for the report; the always-valid statement comes from `sequential`.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Final, Literal

import numpy as np
import numpy.typing as npt

Statistic = Literal["p50", "p95", "mean"]
FloatArray = npt.NDArray[np.float64]

_QUANTILE: Final[dict[Statistic, float]] = {"p50": 0.5, "p95": 0.95}
# Fewer values on a side, and the resamples cannot stand for what the arm might have seen: one
# value a side gave every resample the same difference, a zero-width interval off zero, shown
# as significant. No interval until each side has this many.
MIN_VALUES: Final[int] = 10
# A tail percentile needs more: the p95 of 10 values is nearly their largest, and its interval
# excluded 0 in 11-14% of A/A comparisons at 95% (2-4% from 40 values a side; the experiments
# audit of 2026-12-07).
MIN_VALUES_FOR: Final[dict[Statistic, int]] = {"p50": MIN_VALUES, "mean": MIN_VALUES,
                                                "p95": 40}
_BLOCK_ELEMENTS: Final[int] = 2_000_000


@dataclass(frozen=True, slots=True)
class Interval:
    """Arm minus control for one statistic, with a two-sided bootstrap interval."""

    statistic: Statistic
    control_value: float
    arm_value: float
    difference: float
    low: float
    high: float
    level: float

    @property
    def excludes_zero(self) -> bool:
        """True when the whole interval lies on one side of zero."""
        return self.low > 0.0 or self.high < 0.0


def statistic_rows(values: FloatArray, statistic: Statistic) -> FloatArray:
    """The statistic of each row of a 2-D array (or of a 1-D array, as a 0-d array)."""
    if statistic == "mean":
        return np.asarray(values.mean(axis=-1), dtype=np.float64)
    return np.asarray(np.quantile(values, _QUANTILE[statistic], axis=-1), dtype=np.float64)


def _resampled(values: FloatArray, statistic: Statistic, resamples: int,
               rng: np.random.Generator) -> FloatArray:
    block = max(1, _BLOCK_ELEMENTS // max(values.size, 1))
    parts: list[FloatArray] = []
    for start in range(0, resamples, block):
        rows = min(block, resamples - start)
        idx = rng.integers(0, values.size, size=(rows, values.size))
        parts.append(statistic_rows(values[idx], statistic))
    return np.concatenate(parts)


def bootstrap_difference(
    control: npt.ArrayLike,
    arm: npt.ArrayLike,
    statistic: Statistic,
    rng: np.random.Generator,
    *,
    resamples: int = 1000,
    level: float = 0.95,
) -> Interval | None:
    """Arm minus control for `statistic` with a percentile interval; None while a side has
    fewer than the statistic's `MIN_VALUES_FOR` values."""
    c, a = np.asarray(control, dtype=np.float64), np.asarray(arm, dtype=np.float64)
    if min(c.size, a.size) < MIN_VALUES_FOR[statistic]:
        return None
    diffs = _resampled(a, statistic, resamples, rng) - _resampled(c, statistic, resamples, rng)
    tail = (1.0 - level) / 2.0
    low, high = np.quantile(diffs, [tail, 1.0 - tail])
    control_value = float(statistic_rows(c, statistic))
    arm_value = float(statistic_rows(a, statistic))
    return Interval(
        statistic=statistic, control_value=control_value, arm_value=arm_value,
        difference=arm_value - control_value, low=float(low), high=float(high), level=level,
    )
