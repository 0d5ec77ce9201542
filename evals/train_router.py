"""`slorouter train-router`: fit the learned router on outcomes, write a versioned artifact.

Rows are labelled with their benchmark's router task (`evals.task_map`), the label the router
passes online, so the artifact covers exactly those tasks (`tasks` in its metadata). Measures
the router first (k-fold replay: RouteLLM metrics for two models, floor mode for any
number), then calibrates the bar on cross-fitted predictions of all rows, fits the final
predictor on all rows and saves it with metadata (data hash, models, metrics, library versions).
"""

from __future__ import annotations

import json
import math
import platform
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import scipy
import sklearn

from evals.calibrate import MIN_ROWS, Calibration
from evals.floor import FloorSpec, floor_replay, plan
from evals.outcomes import OutcomeTable, file_sha256, load_table
from evals.replay import pair_replay
from evals.report import Json, floor_json, json_safe
from evals.routers import FitConfig, fit_router, workspace
from evals.task_map import router_task, with_labels
from policies.learned.artifact import save_artifact
from policies.learned.decide import ThresholdRule
from policies.learned.predictor import SuccessPredictor


@dataclass(frozen=True)
class TrainRequest:
    """What to train on and how."""

    outcomes: Path
    out: Path
    benchmark: str | None = None
    models: tuple[str, ...] | None = None
    folds: int = 5
    seed: int = 0
    spec: FloorSpec = field(default_factory=FloorSpec)


def measured_metrics(table: OutcomeTable, req: TrainRequest, config: FitConfig) -> dict[str, Json]:
    """Cross-validated metrics stamped into the artifact's metadata."""
    out: dict[str, Json] = {"folds": req.folds, "seed": req.seed}
    if len(table.models) == 2:
        pair = pair_replay(table, config, req.folds)  # strong = the better model, as in replay
        out.update(apgr=pair.router.apgr, cpt50=pair.router.cpt50, cpt80=pair.router.cpt80)
    floor = floor_replay(table, req.spec, config, req.folds, req.seed)
    out.update(floor_json(floor))
    return out


def shipped_rule(order: tuple[str, ...], reference: str, cal: Calibration) -> ThresholdRule:
    """The rule exactly as calibrated: candidates `order[cal.start:]` (cheapest first), as
    offline replay routes them (`evals.floor.route_fold`): calibration ruled the cheaper out."""
    return ThresholdRule(
        candidates=order[cal.start :], kind=cal.kind, threshold=cal.threshold, fallback=reference
    )


def calibration_json(cal: Calibration) -> dict[str, Json]:
    """The shipped rule's calibration and its check on held-out calibration rows (`outcome`:
    confirmed, none_confirmed: the reference only, too_few_rows: fewer than `MIN_ROWS`)."""
    return {
        "bound": "Bonett-Price adjusted paired margin, one-sided, z standard errors",
        "min_rows": MIN_ROWS,
        "rows": cal.rows,
        "select_quality": cal.quality,
        "select_lower_margin": cal.lower_margin,
        "check_rows": cal.check_rows,
        "check_quality": None if math.isnan(cal.check_quality) else cal.check_quality,
        "check_lower_margin": None
        if math.isnan(cal.check_lower_margin)
        else cal.check_lower_margin,
        "outcome": cal.outcome,
    }


def floor_by_task(table: OutcomeTable, reference: int, fraction: float) -> dict[str, Json]:
    """Per router task (the rows' labels): the reference's mean score on that task's rows and
    the floor it gives, `fraction` x that mean. A policy's absolute `min` for one task is
    checked against its own task's number (`policies.learned_checks`), not the pooled one:
    pooled over CRUXEval and MATH L5, 0.667 passed a math `min: 0.6` that MATH alone misses."""
    out: dict[str, Json] = {}
    tasks = np.array(table.categories)
    for task in sorted(set(table.categories)):
        rows = tasks == task
        reference_quality = float(table.scores[rows, reference].mean())
        benchmarks: list[Json] = [str(b) for b in sorted(set(np.array(table.benchmarks)[rows]))]
        out[task] = {
            "benchmarks": benchmarks,
            "rows": int(rows.sum()),
            "reference_quality": reference_quality,
            "quality": fraction * reference_quality,
        }
    return out


def train(req: TrainRequest) -> tuple[str, dict[str, Json]]:
    """Train, measure and save; returns (version, metadata)."""
    priced = req.models is None
    data = load_table(req.outcomes, benchmark=req.benchmark, models=req.models, priced_only=priced)
    table = with_labels(data, "router")
    config = FitConfig(seed=req.seed)
    metrics = measured_metrics(table, req, config)
    ws = workspace(table, config.features)
    rows = np.arange(len(table), dtype=np.int64)
    fold = plan(ws, rows, req.spec, config, np.random.default_rng(req.seed))
    sub = ws.select(fold.order.tolist())
    predictor = fit_router(sub, rows, config)
    assert isinstance(predictor, SuccessPredictor)
    rule = shipped_rule(sub.table.models, table.models[fold.reference], fold.calibration)
    reference_quality = float(table.scores[:, fold.reference].mean())
    meta: dict[str, Json] = {
        "kind": "slorouter.learned_router",
        "format": 2,
        "tasks": list(predictor.featurizer.tasks),
        "task_map": {b: router_task(b) for b in sorted(set(table.benchmarks))},
        "data": {
            "file": req.outcomes.name,
            "sha256": file_sha256(req.outcomes),
            "benchmark": req.benchmark,
            "rows": len(table),
        },
        "models": list(sub.table.models),
        "mean_cost_usd": {
            m: float(np.mean(sub.table.costs[:, j])) for j, m in enumerate(sub.table.models)
        },
        "floor": {
            "fraction": req.spec.fraction,
            "reference": table.models[fold.reference],
            "z": req.spec.z,
            "metric": "accuracy",
            "reference_quality": reference_quality,
            "quality": req.spec.fraction * reference_quality,  # pooled over every task
            "by_task": floor_by_task(table, fold.reference, req.spec.fraction),
        },
        "calibration": calibration_json(fold.calibration),
        "metrics": metrics,
        "libraries": {
            "python": platform.python_version(),
            "scikit-learn": sklearn.__version__,
            "numpy": np.__version__,
            "scipy": scipy.__version__,
        },
    }
    version = save_artifact(req.out, predictor, rule, json.dumps(json_safe(meta), allow_nan=False))
    return version, meta
