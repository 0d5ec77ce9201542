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


def combine_risk(model: Risk, signals: Iterable[Signal], hint: Risk | None,
                 hint_may_lower: bool = True) -> Risk:
    """The request's risk.

    The caller's hint, when given, replaces the model's opinion: it may raise or lower it, or
    only raise it when the caller is not trusted to lower it (`hint_may_lower=False`, an API
    key's `risk_hints: raise_only`). Nothing goes below the floor set by the signals: a hint
    never hides PII, a jailbreak attempt, side-effecting tools or a regulated-domain question.
    """
    if hint is not None and not hint_may_lower:
        hint = max_risk(hint, model)
    base = hint if hint is not None else model
    return max_risk(base, risk_floor(signals))
