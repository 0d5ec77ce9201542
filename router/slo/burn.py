"""Error-budget maths: burn rates and the multi-window demotion rule (pure functions).

For an objective `o` (e.g. 0.95 of requests with TTFT under target) the error budget is `1 - o`;
the burn rate over a window is `(bad / total) / (1 - o)`: 1 spends the budget exactly at the
sustainable pace, 14.4 spends 2% of a 30-day budget in one hour. As in the Google SRE workbook
("Alerting on SLOs", multiwindow, multi-burn-rate alerts), a rule fires when *both* its long and
its short window burn above its threshold: the long window proves the burn is significant, the
short one that it is still going on (so the demotion lifts soon after recovery). Defaults are the
workbook's 1 h / 5 min at 14.4 and 6 h / 30 min at 6. Alerts read the burn rates as they are;
demotion reads `sure_burn_rate`, the burn beyond chance, so a handful of errors does not take a
deployment's traffic for as long as its thinned traffic takes to dilute them.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Final

from policies.intervals import wilson_interval


@dataclass(frozen=True, slots=True)
class BurnRule:
    """Fire when burn over both `long_s` and `short_s` is at least `threshold`."""

    long_s: float
    short_s: float
    threshold: float


SURE_Z: Final = 1.6448536269514722  # one-sided 95 %

DEFAULT_RULES: Final[tuple[BurnRule, ...]] = (
    BurnRule(3600.0, 300.0, 14.4),
    BurnRule(21600.0, 1800.0, 6.0),
)


def burn_rate(bad: int, total: int, objective: float) -> float | None:
    """`(bad / total) / (1 - objective)`, or None without events."""
    if total <= 0:
        return None
    return (bad / total) / (1.0 - objective)


def sure_burn_rate(bad: int, total: int, objective: float,
                   z: float = SURE_Z) -> float | None:
    """The burn rate of the bad share's one-sided Wilson lower bound: the burn the window's
    events show beyond chance. Three errors in 52 requests (a half-second blip) are a burn of
    11.5 on a 99.5% objective but a sure burn of 4; a steady 10% of errors over 200 is sure."""
    if total <= 0:
        return None
    return wilson_interval(bad, total, z)[0] / (1.0 - objective)


def attainment(bad: int, total: int) -> float | None:
    """Share of good events, or None without events."""
    if total <= 0:
        return None
    return 1.0 - bad / total


def budget_remaining(bad: int, total: int, objective: float) -> float | None:
    """Share of the window's error budget left (negative when overspent)."""
    if total <= 0:
        return None
    allowed = (1.0 - objective) * total
    return 1.0 - bad / allowed


def rule_fires(rule: BurnRule, burns: Mapping[float, float | None]) -> float | None:
    """The smaller of the two burn rates when the rule fires, else None."""
    long_burn, short_burn = burns.get(rule.long_s), burns.get(rule.short_s)
    if long_burn is None or short_burn is None:
        return None
    low = min(long_burn, short_burn)
    return low if low >= rule.threshold else None


def demotion_penalty(burns_by_sli: Sequence[Mapping[float, float | None]],
                     rules: Sequence[BurnRule] = DEFAULT_RULES,
                     current_s: float | None = None) -> float:
    """Penalty in [0, 1] for a deployment x task: 0 unless a rule fires on some SLI; then
    `min(1, 0.5 * burn / threshold)` (0.5 at the threshold, 1 at twice it), the worst one.
    With `current_s`, a rule fires only if that window burns too (above the threshold; no
    events there is no burn): a demoted deployment gets little traffic, so the errors of an
    outage it has recovered from thinned out of its short window only as they left it (up to
    30 min), and the demotion held itself up. A demotion now holds while its recent answers are
    still bad, and lifts once the few it gets are good (or none came: traffic then probes it)."""
    worst = 0.0
    for burns in burns_by_sli:
        current = burns.get(current_s) if current_s is not None else None
        for rule in rules:
            fired = rule_fires(rule, burns)
            if fired is not None and (current_s is None or (current or 0.0) >= rule.threshold):
                worst = max(worst, min(1.0, 0.5 * fired / rule.threshold))
    return worst
