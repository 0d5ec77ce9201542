"""The learned router's decision rule: the cheapest candidate whose predicted quality clears a bar.

Two calibrated kinds of bar: `absolute` (P(success) >= threshold) and `margin` (P(success) >= the
best candidate's P(success) - threshold; with two models this is the RouteLLM-style rule "strong
when the predicted gain exceeds the threshold"). When no candidate clears an absolute bar the
fallback (the floor's reference model) is chosen. Pure functions, no I/O.
"""

from __future__ import annotations

from collections.abc import Mapping, Set
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


def choose_available(rule: ThresholdRule, probs: Mapping[str, float],
                     available: Set[str]) -> str | None:
    """`choose` among the `available` candidates (those the policy lets serve this request): the
    cheapest that clears the bar, the bar as the rule sets it over every candidate (a margin
    from the best one's, down or not: the request is not made easier by its absence); else the
    fallback if it is available; else the available candidate most likely to succeed, never the
    cheapest by default (a hard prompt whose strong model is down must not go to the weakest);
    None when none is available."""
    bar = rule.threshold
    if rule.kind == "margin":
        bar = max(probs[m] for m in rule.candidates) - rule.threshold
    for model in rule.candidates:
        if model in available and probs[model] >= bar:
            return model
    if rule.fallback in available:
        return rule.fallback
    usable = [m for m in rule.candidates if m in available]
    return max(usable, key=lambda m: probs[m]) if usable else None


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
