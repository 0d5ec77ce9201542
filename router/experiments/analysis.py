"""The analysis of one experiment snapshot: arm-vs-control intervals, sequential tests, halts.

Pure: the snapshot, the clock and the random generator are arguments, so the service can run
`analyze` (or only the cheap `evaluate_guardrails`) on a timer and every replica computes the
same thing from the same data. Bootstrap intervals (`bootstrap`) describe the differences at
this moment; the mSPRT (`sequential`) says when they may be acted on despite continuous
monitoring; guardrails (`guardrails`) say which arms to halt. With several treatment arms,
alpha is split evenly between them (Bonferroni) for the sequential test.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from datetime import datetime
from typing import Final

import numpy as np

from policies.experiments.schema import BUILTIN_METRICS, ExperimentSpec
from router.experiments.bootstrap import Interval, Statistic, bootstrap_difference
from router.experiments.guardrails import evaluate_guardrails
from router.experiments.outcomes import ExperimentData, Halt
from router.experiments.sequential import SequentialResult, msprt

BUILTIN_COMPARISONS: Final[tuple[tuple[str, Statistic], ...]] = (
    ("ttft_ms", "p50"),
    ("ttft_ms", "p95"),
    ("e2e_ms", "p50"),
    ("e2e_ms", "p95"),
    ("tpot_ms", "p50"),
    ("cost_usd", "mean"),
    ("error", "mean"),
)


@dataclass(frozen=True, slots=True)
class Comparison:
    """One metric statistic of one treatment arm against control."""

    arm: str
    metric: str
    interval: Interval


@dataclass(frozen=True, slots=True)
class Analysis:
    """Everything `analyze` concluded about a snapshot."""

    experiment: str
    primary_metric: str
    comparisons: tuple[Comparison, ...]
    sequential: tuple[SequentialResult, ...]
    new_halts: tuple[Halt, ...]

    @property
    def decided(self) -> frozenset[str]:
        """Treatment arms whose primary-metric test has rejected 'no difference'."""
        return frozenset(
            r.arm for r in self.sequential if r.metric == self.primary_metric and r.reject
        )

    def p_values(self) -> dict[tuple[str, str], float]:
        """Running-minimum p-values by (arm, metric), to pass back as `previous_p` next time."""
        return {(r.arm, r.metric): r.p_value for r in self.sequential}


def compared_metrics(spec: ExperimentSpec) -> tuple[tuple[str, Statistic], ...]:
    """(metric, statistic) pairs reported for every treatment arm."""
    mean: Statistic = "mean"
    declared = tuple((m.name, mean) for m in spec.metrics)
    return BUILTIN_COMPARISONS + declared


def compare_arms(
    spec: ExperimentSpec, data: ExperimentData, rng: np.random.Generator, *, resamples: int = 1000
) -> tuple[Comparison, ...]:
    """Bootstrap intervals (level 1 - alpha) of arm minus control, from the reservoirs."""
    control = data.arm(spec.control.name)
    level = 1.0 - spec.sequential.alpha
    found: list[Comparison] = []
    for arm_spec in spec.treatments:
        arm = data.arm(arm_spec.name)
        for metric, statistic in compared_metrics(spec):
            interval = bootstrap_difference(
                control.samples(metric).reservoir, arm.samples(metric).reservoir, statistic,
                rng, resamples=resamples, level=level,
            )
            if interval is not None:
                found.append(Comparison(arm=arm_spec.name, metric=metric, interval=interval))
    return tuple(found)


def sequential_tests(
    spec: ExperimentSpec,
    data: ExperimentData,
    previous_p: Mapping[tuple[str, str], float] | None = None,
) -> tuple[SequentialResult, ...]:
    """The mSPRT of every built-in and declared metric, each treatment arm against control."""
    settings = spec.sequential
    alpha = settings.alpha / len(spec.treatments)
    earlier = previous_p if previous_p is not None else {}
    control = data.arm(spec.control.name)
    metrics = (*BUILTIN_METRICS, *(m.name for m in spec.metrics))
    return tuple(
        msprt(
            control.samples(metric), data.arm(arm_spec.name).samples(metric),
            arm_name=arm_spec.name, metric=metric, alpha=alpha,
            mixture_sd=settings.mixture_sd, min_sample=settings.min_sample,
            previous_p=earlier.get((arm_spec.name, metric), 1.0),
        )
        for arm_spec in spec.treatments
        for metric in metrics
    )


def analyze(
    spec: ExperimentSpec,
    data: ExperimentData,
    *,
    now: datetime,
    rng: np.random.Generator,
    resamples: int = 1000,
    previous_p: Mapping[tuple[str, str], float] | None = None,
) -> Analysis:
    """Intervals, sequential tests and new halts for one snapshot of `spec`'s outcomes."""
    return Analysis(
        experiment=spec.name,
        primary_metric=spec.sequential.primary_metric,
        comparisons=compare_arms(spec, data, rng, resamples=resamples),
        sequential=sequential_tests(spec, data, previous_p),
        new_halts=evaluate_guardrails(spec, data, now),
    )


__all__ = [
    "Analysis",
    "Comparison",
    "analyze",
    "compare_arms",
    "evaluate_guardrails",
    "sequential_tests",
]
