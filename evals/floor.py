"""Floor mode: per fold, calibrate the learned router to a relative quality floor, replay held-out.

For each outer fold: the reference is the given model (or the best candidate on the training
fold), candidates are ordered by their mean training cost and, optionally, pruned to the
cost-quality Pareto front; thresholds are calibrated on inner cross-fitted predictions of the
training fold; the test fold is routed by a model fitted on the whole training fold. Pooled
held-out results give quality, shares, cost saving and the bootstrap share in which the floor held.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import numpy.typing as npt

from evals.calibrate import Calibration, CalibrationData, calibrate
from evals.folds import fold_ids, splits
from evals.metrics import cost_saving, floor_hold_rate
from evals.outcomes import OutcomeTable
from evals.routers import FitConfig, Workspace, fit_router, oof_probs, predict_rows, workspace
from policies.learned.decide import choose_matrix

FloatArray = npt.NDArray[np.float64]
IntArray = npt.NDArray[np.int64]


@dataclass(frozen=True)
class FloorSpec:
    """The floor (`fraction` x reference quality) and how the router is calibrated to it."""

    fraction: float = 0.95
    reference: str | None = None
    candidates: tuple[str, ...] | None = None
    z: float = 2.5
    inner_folds: int = 3
    prune: bool = True
    resamples: int = 1000


@dataclass(frozen=True)
class FoldRouting:
    """One outer fold's routing of its test rows."""

    test: IntArray
    chosen: IntArray
    reference: int
    calibration: Calibration
    candidates: tuple[int, ...]


@dataclass(frozen=True)
class FloorReport:
    """Pooled held-out results of floor mode (costs in USD per 1,000 prompts)."""

    fraction: float
    quality: float
    reference_quality: float
    floor: float
    floor_hold_rate: float
    shares: dict[str, float]
    strong_share: float  # share of the model best on average over the table (`best_column`)
    reference_share: float  # share of the floor's reference (the fold's, where it changed)
    cost_per_1k: float
    reference_cost_per_1k: float
    cost_saving: float | None  # None: the reference is free
    references: tuple[str, ...]
    folds: tuple[FoldRouting, ...]


def candidate_columns(table: OutcomeTable, spec: FloorSpec) -> list[int]:
    """Columns of the candidates: those named, else every model with a cost on all rows."""
    if spec.candidates is not None:
        return [table.column(m) for m in spec.candidates]
    return [j for j in range(len(table.models)) if np.all(np.isfinite(table.costs[:, j]))]


def pareto(cols: list[int], quality: FloatArray, cost: FloatArray, keep: int) -> list[int]:
    """Columns not beaten by one both cheaper and at least as good (plus `keep`)."""
    front = []
    for j in cols:
        dominated = any(cost[i] < cost[j] and quality[i] >= quality[j] for i in cols if i != j)
        if not dominated or j == keep:
            front.append(j)
    return front


@dataclass(frozen=True)
class FoldPlan:
    """Calibrated on training rows: candidate columns cheapest first, reference, the bar."""

    order: IntArray
    reference: int
    calibration: Calibration


def plan(
    ws: Workspace, train: IntArray, spec: FloorSpec, config: FitConfig, rng: np.random.Generator
) -> FoldPlan:
    """Pick reference and candidates and calibrate the bar on inner cross-fitted predictions."""
    table = ws.table
    cols = candidate_columns(table, spec)
    quality = table.scores[train].mean(axis=0)
    cost = np.nan_to_num(table.costs[train].mean(axis=0), nan=np.inf)
    ref = table.column(spec.reference) if spec.reference else max(cols, key=lambda j: quality[j])
    if spec.prune:
        cols = pareto(cols, quality, cost, ref)
    order = np.array(sorted(set(cols) | {ref}, key=lambda j: (cost[j], j)), dtype=np.int64)
    sub = ws.select(order.tolist())
    local_ref = int(np.flatnonzero(order == ref)[0])
    probs = oof_probs(sub, train, spec.inner_folds, config, rng)
    local = np.arange(len(order), dtype=np.int64)
    data = CalibrationData(probs, sub.table.scores[train], sub.table.costs[train], local, local_ref,
                           tuple(table.groups[int(i)] for i in train))
    return FoldPlan(order, ref, calibrate(data, spec.fraction, spec.z))


def route_fold(
    ws: Workspace,
    train: IntArray,
    test: IntArray,
    spec: FloorSpec,
    config: FitConfig,
    rng: np.random.Generator,
) -> FoldRouting:
    """Calibrate on the training fold only and route the test fold."""
    fold = plan(ws, train, spec, config, rng)
    sub = ws.select(fold.order.tolist())
    local = np.arange(len(fold.order), dtype=np.int64)
    local_ref = int(np.flatnonzero(fold.order == fold.reference)[0])
    cal = fold.calibration
    test_probs = predict_rows(fit_router(sub, train, config), sub, test)
    picked = choose_matrix(test_probs, local[cal.start :], cal.kind, cal.threshold, local_ref)
    chosen = fold.order[picked]
    return FoldRouting(test, chosen, fold.reference, cal, tuple(int(j) for j in fold.order))


def best_column(table: OutcomeTable) -> int:
    """The column of the model with the highest mean score over the whole table: the "strong"
    model of the two-model curve (`evals.replay.strong_and_weak`), whatever the reference."""
    return int(np.argmax(table.scores.mean(axis=0)))


def summarize_floor(
    table: OutcomeTable, folds: list[FoldRouting], spec: FloorSpec, rng: np.random.Generator
) -> FloorReport:
    """Pool the folds' held-out routes into one report."""
    test = np.concatenate([f.test for f in folds])
    chosen = np.concatenate([f.chosen for f in folds])
    ref = np.concatenate([np.full(len(f.test), f.reference) for f in folds])
    achieved, ref_scores = table.scores[test, chosen], table.scores[test, ref]
    cost, ref_cost = table.costs[test, chosen].sum(), table.costs[test, ref].sum()
    shares = {table.models[j]: float(np.mean(chosen == j)) for j in sorted(set(chosen.tolist()))}
    n = len(test)
    return FloorReport(
        fraction=spec.fraction,
        quality=float(achieved.mean()),
        reference_quality=float(ref_scores.mean()),
        floor=spec.fraction * float(ref_scores.mean()),
        floor_hold_rate=floor_hold_rate(achieved, ref_scores, spec.fraction, rng, spec.resamples),
        shares=shares,
        strong_share=float(np.mean(chosen == best_column(table))),
        reference_share=float(np.mean(chosen == ref)),
        cost_per_1k=float(cost) / n * 1000,
        reference_cost_per_1k=float(ref_cost) / n * 1000,
        cost_saving=cost_saving(float(cost), float(ref_cost)),
        references=tuple(sorted({table.models[f.reference] for f in folds})),
        folds=tuple(folds),
    )


def floor_replay(
    table: OutcomeTable, spec: FloorSpec, config: FitConfig, k: int, seed: int
) -> FloorReport:
    """k-fold floor-mode replay of the learned router on one outcome table."""
    rng = np.random.default_rng(seed)
    folds = fold_ids(table.groups, k, rng)
    ws = workspace(table, config.features)
    routed = [route_fold(ws, tr, te, spec, config, rng) for tr, te in splits(folds, k)]
    return summarize_floor(table, routed, spec, rng)
