"""The learned router's decision rule: the cheapest candidate whose predicted quality clears a bar.

Two calibrated kinds of bar: `absolute` (P(success) >= threshold) and `margin` (P(success) >= the
best candidate's P(success) - threshold; with two models this is the RouteLLM-style rule "strong
when the predicted gain exceeds the threshold"). When no candidate clears an absolute bar the
fallback (the floor's reference model) is chosen. Pure functions, no I/O.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Literal

import numpy as np
import numpy.typing as npt

RuleKind = Literal["absolute", "margin"]


@dataclass(frozen=True)
class ThresholdRule:
    """Candidates cheapest first, the bar, and the model to use when none clears it."""

    candidates: tuple[str, ...]
    kind: RuleKind
    threshold: float
    fallback: str


def choose(rule: ThresholdRule, probs: Mapping[str, float]) -> str:
    """The cheapest candidate whose predicted quality clears the rule's bar (else the fallback)."""
    bar = rule.threshold
    if rule.kind == "margin":
        bar = max(probs[m] for m in rule.candidates) - rule.threshold
    for model in rule.candidates:
        if probs[model] >= bar:
            return model
    return rule.fallback


def choose_matrix(
    probs: npt.NDArray[np.float64],
    order: npt.NDArray[np.int64],
    kind: RuleKind,
    threshold: float,
    fallback: int,
) -> npt.NDArray[np.int64]:
    """Column chosen per row of `probs`, trying columns in `order` (cheapest first)."""
    sub = probs[:, order]
    bar = sub.max(axis=1, keepdims=True) - threshold if kind == "margin" else threshold
    ok = sub >= bar
    first = ok.argmax(axis=1)
    chosen = order[first]
    return np.where(ok.any(axis=1), chosen, fallback).astype(np.int64)
