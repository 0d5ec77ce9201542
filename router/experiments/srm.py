"""Sample-ratio-mismatch (SRM) check: do the arms' assigned units match the configured shares?

The assignment is a hash of the unit, so the units counted on each arm are a multinomial draw
with the arms' shares as probabilities, whatever the arms then do. When the counts drift from
the shares (an assignment bug, bots hitting one arm, a cache or a client that reaches one arm
more often, units lost on one arm's side of the pipeline), every comparison in the report is
suspect. The check is Pearson's chi-square goodness-of-fit test of the counts against the
shares, flagged at p < 0.001 as production A/B platforms do (Fabijan et al., "Diagnosing
sample ratio mismatch in online controlled experiments", KDD 2019; Kohavi, Tang, Xu, *Trustworthy
Online Controlled Experiments*, 2020, ch. 21). It is a fixed-sample test read at every report:
the low threshold keeps false alarms rare under repeated reading. Pure.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Final

from scipy.stats import chi2

SRM_P_THRESHOLD: Final[float] = 0.001
MIN_EXPECTED_UNITS: Final[float] = 5.0  # per arm: the chi-square approximation needs it


@dataclass(frozen=True, slots=True)
class SrmCheck:
    """The check over `units` (arm → assigned units) against `shares` (arm → weight)."""

    units: dict[str, int]
    expected: dict[str, float]
    chi_square: float
    degrees_of_freedom: int
    p_value: float
    threshold: float
    ready: bool  # every arm expects at least MIN_EXPECTED_UNITS units
    mismatch: bool  # ready and p < threshold


def sample_ratio_check(units: Mapping[str, int], shares: Mapping[str, float],
                       threshold: float = SRM_P_THRESHOLD) -> SrmCheck:
    """Chi-square goodness of fit of assigned `units` to `shares` (normalised; arms with no
    count have 0)."""
    weight = sum(shares.values())
    total = sum(units.get(arm, 0) for arm in shares)
    counts = {arm: int(units.get(arm, 0)) for arm in shares}
    expected = {arm: total * share / weight for arm, share in shares.items()}
    ready = total > 0 and min(expected.values()) >= MIN_EXPECTED_UNITS
    statistic = (sum((counts[a] - e) ** 2 / e for a, e in expected.items()) if ready
                 else 0.0)
    dof = len(shares) - 1
    p_value = float(chi2.sf(statistic, dof)) if ready else 1.0
    return SrmCheck(units=counts, expected=expected, chi_square=float(statistic),
                    degrees_of_freedom=dof, p_value=p_value, threshold=threshold, ready=ready,
                    mismatch=ready and p_value < threshold)
