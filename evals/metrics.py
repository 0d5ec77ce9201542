"""Routing metrics, pure functions over numpy arrays: the RouteLLM curve, APGR, CPT, baselines.

Definitions follow `evals/datasets/routing/README.md` ("Scoring a router the RouteLLM way"):
thresholds at the 11 linear quantile edges of the router's scores (`score >= edge`, `>` at the top
edge); quality = mean outcome of the chosen model; cost = share of strong calls; APGR = trapezoid
area of quality over strong share, normalised by the two models' own qualities; CPT(x) = strong
share at which PGR first reaches x, interpolated linearly on the curve sorted by share. When the
two models have the same quality there is no gap: PGR, APGR and CPT are None (undefined). Also the
Wilson score interval and a seeded bootstrap of a paired statistic. Nothing here trains or loads.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np
import numpy.typing as npt

from policies.intervals import wilson_interval as wilson_interval  # re-exported

FloatArray = npt.NDArray[np.float64]
N_EDGES = 11


@dataclass(frozen=True)
class CurvePoint:
    """One threshold of a two-model router: share of strong calls and the achieved quality."""

    strong_share: float
    quality: float


@dataclass(frozen=True)
class CurveSummary:
    """A quality-vs-strong-share curve with its RouteLLM metrics (CPT as a share in [0, 1])."""

    points: tuple[CurvePoint, ...]
    apgr: float | None  # None: both models have the same quality (no gap to recover)
    cpt50: float | None
    cpt80: float | None
    weak_quality: float
    strong_quality: float


def curve(score: FloatArray, strong: FloatArray, weak: FloatArray) -> tuple[CurvePoint, ...]:
    """The 11-point curve of a router giving `score` (high = needs strong), sorted by share."""
    edges = np.quantile(score, np.linspace(0.0, 1.0, N_EDGES))
    points = []
    for i, edge in enumerate(edges):
        chosen = score > edge if i == len(edges) - 1 else score >= edge
        quality = float(np.where(chosen, strong, weak).mean())
        points.append(CurvePoint(strong_share=float(chosen.mean()), quality=quality))
    return tuple(sorted(points, key=lambda p: (p.strong_share, p.quality)))


def gap_defined(weak_quality: float, strong_quality: float) -> bool:
    """Whether the two models' qualities differ, so that a gap can be recovered: with equal
    qualities PGR, APGR and CPT divide by zero and are undefined (None)."""
    return not math.isclose(strong_quality, weak_quality, rel_tol=0.0, abs_tol=1e-12)


def pgr(quality: float, weak_quality: float, strong_quality: float) -> float | None:
    """Performance gap recovered: (quality - weak) / (strong - weak); None with no gap."""
    if not gap_defined(weak_quality, strong_quality):
        return None
    return (quality - weak_quality) / (strong_quality - weak_quality)


def apgr(
    points: tuple[CurvePoint, ...], weak_quality: float, strong_quality: float
) -> float | None:
    """Trapezoid area under quality over strong share, normalised to the weak-strong gap (None
    when the two qualities are equal or the curve has no width)."""
    xs = np.array([p.strong_share for p in points])
    ys = np.array([p.quality for p in points])
    span = float(xs[-1] - xs[0])
    if not gap_defined(weak_quality, strong_quality) or span <= 0.0:
        return None
    area = float(np.trapezoid(ys, xs))
    return (area - weak_quality * span) / ((strong_quality - weak_quality) * span)


def cpt(
    points: tuple[CurvePoint, ...], target_pgr: float, weak_quality: float, strong_quality: float
) -> float | None:
    """Strong share at which the curve's PGR first reaches `target_pgr` (1.0 if it never does;
    None when the two qualities are equal: there is no gap to recover)."""
    if not gap_defined(weak_quality, strong_quality):
        return None
    gap = strong_quality - weak_quality
    prev: CurvePoint | None = None
    for point in points:
        now = (point.quality - weak_quality) / gap
        if now >= target_pgr:
            if prev is None:
                return point.strong_share
            before = (prev.quality - weak_quality) / gap
            frac = (target_pgr - before) / (now - before)
            return prev.strong_share + frac * (point.strong_share - prev.strong_share)
        prev = point
    return 1.0


def cost_saving(cost: float, reference_cost: float) -> float | None:
    """1 - cost / reference cost: the share of the reference's cost saved; None when the
    reference costs nothing (no saving can be measured against a free model)."""
    if reference_cost <= 0.0:
        return None
    return 1.0 - cost / reference_cost


def summarize(points: tuple[CurvePoint, ...], weak_q: float, strong_q: float) -> CurveSummary:
    """APGR, CPT(50%) and CPT(80%) of a curve."""
    return CurveSummary(
        points=points,
        apgr=apgr(points, weak_q, strong_q),
        cpt50=cpt(points, 0.5, weak_q, strong_q),
        cpt80=cpt(points, 0.8, weak_q, strong_q),
        weak_quality=weak_q,
        strong_quality=strong_q,
    )


def evaluate_router(score: FloatArray, strong: FloatArray, weak: FloatArray) -> CurveSummary:
    """The RouteLLM metrics of one router's scores on prompts with these outcomes."""
    return summarize(curve(score, strong, weak), float(weak.mean()), float(strong.mean()))


def oracle_curve(strong: FloatArray, weak: FloatArray) -> tuple[CurvePoint, ...]:
    """Oracle at 0%, 10%, …, 100% strong calls: the strong model goes first where it gains
    most over the weak one, a fraction of a call gaining that fraction of the next gain. (It
    counted each strong call a gain of up to 1, right for 0/1 scores, an overstatement for
    graded ones: strong 0.5 and weak 0.25 everywhere read 0.35 at 10% strong calls.)"""
    n = len(strong)
    weak_total = float(weak.sum())
    gains = np.sort(np.clip(strong - weak, 0.0, None))[::-1]
    gained = np.concatenate([[0.0], np.cumsum(gains)])  # by whole strong calls

    def quality(calls: float) -> float:
        whole = min(int(calls), n)
        partial = (calls - whole) * float(gains[whole]) if whole < n else 0.0
        return (weak_total + float(gained[whole]) + partial) / n

    return tuple(CurvePoint(float(x), quality(float(x) * n)) for x in np.linspace(0, 1, N_EDGES))


def evaluate_oracle(strong: FloatArray, weak: FloatArray) -> CurveSummary:
    """The RouteLLM metrics of the oracle router (APGR may exceed 1)."""
    return summarize(oracle_curve(strong, weak), float(weak.mean()), float(strong.mean()))


def random_scores(n: int, rng: np.random.Generator) -> FloatArray:
    """Scores of the random router: uniform draws from the injected generator."""
    return rng.random(n)


def bootstrap(
    statistic: Callable[[npt.NDArray[np.int64]], float],
    n: int,
    rng: np.random.Generator,
    resamples: int = 1000,
) -> FloatArray:
    """`statistic(index)` over `resamples` index resamples (with replacement) of `range(n)`."""
    return np.array([statistic(rng.integers(0, n, size=n)) for _ in range(resamples)])


def floor_hold_rate(
    achieved: FloatArray,
    reference: FloatArray,
    fraction: float,
    rng: np.random.Generator,
    resamples: int = 1000,
) -> float:
    """Share of paired bootstrap resamples where mean(achieved) >= fraction * mean(reference)."""
    margin = achieved - fraction * reference
    held = 0
    for start in range(0, resamples, 64):
        size = min(64, resamples - start)
        index = rng.integers(0, len(margin), size=(size, len(margin)))
        held += int(np.sum(margin[index].mean(axis=1) >= 0.0))
    return held / resamples
