"""How risk is decided from the model's opinion, the detected signals and the caller's hint.

One small pure function, `combine_risk`, and the floor each signal sets. Detecting the signals
lives in `detectors`; the model's probabilities in `linear`.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Final

from policies.labels import Risk, Signal, max_risk

# The least risk each signal allows.
SIGNAL_FLOOR: Final[dict[Signal, Risk]] = {
    "pii": "high",
    "jailbreak": "high",
    "side_effects": "high",
    "regulated_domain": "medium",
}


def risk_floor(signals: Iterable[Signal]) -> Risk:
    """The lowest risk the signals allow (`low` when there are none)."""
    floor: Risk = "low"
    for signal in signals:
        floor = max_risk(floor, SIGNAL_FLOOR[signal])
    return floor


def combine_risk(model: Risk, signals: Iterable[Signal], hint: Risk | None) -> Risk:
    """The request's risk.

    The caller's hint, when given, replaces the model's opinion (it may raise or lower it), but
    nothing goes below the floor set by the signals: a hint never hides PII, a jailbreak
    attempt, side-effecting tools or a regulated-domain question.
    """
    base = hint if hint is not None else model
    return max_risk(base, risk_floor(signals))
