"""Two-model k-fold replay: out-of-fold router scores, the RouteLLM curve and its baselines.

The router's score for a prompt is its predicted gain P(strong succeeds) - P(weak succeeds), from
a strategy fitted on the other folds only; random and oracle baselines are computed on the same
decontaminated rows. Floor mode lives in `evals.floor`, N-model replay in `evals.multi`.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import numpy.typing as npt
from joblib import Parallel, delayed

from evals.floor import best_column
from evals.folds import fold_ids, splits
from evals.metrics import CurveSummary, evaluate_oracle, evaluate_router, random_scores
from evals.outcomes import OutcomeTable
from evals.routers import FitConfig, Workspace, fit_router, predict_rows, workspace

FloatArray = npt.NDArray[np.float64]
IntArray = npt.NDArray[np.int64]


@dataclass(frozen=True)
class PairReplay:
    """RouteLLM metrics of a router and its baselines on one two-model table."""

    strong: str
    weak: str
    n: int
    router: CurveSummary
    random: CurveSummary
    oracle: CurveSummary
    scores: FloatArray


def strong_and_weak(table: OutcomeTable, strong: str | None) -> tuple[int, int]:
    """Columns of the strong model (given, or the better on average) and the other one."""
    if len(table.models) != 2:
        raise ValueError(f"two-model replay needs 2 models, got {list(table.models)}")
    s = table.column(strong) if strong else best_column(table)
    return s, 1 - s


def _fold_scores(
    ws: Workspace, train: IntArray, test: IntArray, config: FitConfig, s: int, w: int
) -> FloatArray:
    probs = predict_rows(fit_router(ws, train, config), ws, test)
    return probs[:, s] - probs[:, w]


def oof_gain(ws: Workspace, config: FitConfig, k: int, s: int, w: int, jobs: int = 1) -> FloatArray:
    """Out-of-fold predicted gain of the strong model for every row."""
    folds = fold_ids(ws.table.groups, k, np.random.default_rng(config.seed))
    parts = splits(folds, k)
    results = Parallel(n_jobs=jobs)(
        delayed(_fold_scores)(ws, tr, te, config, s, w) for tr, te in parts
    )
    out = np.zeros(len(ws.table))
    for (_, te), res in zip(parts, results, strict=True):
        out[te] = res
    return out


def pair_replay(
    table: OutcomeTable, config: FitConfig, k: int, strong: str | None = None, jobs: int = 1
) -> PairReplay:
    """k-fold replay of one strategy with random and oracle baselines."""
    s, w = strong_and_weak(table, strong)
    ys, yw = table.scores[:, s], table.scores[:, w]
    score = oof_gain(workspace(table, config.features), config, k, s, w, jobs)
    rand = random_scores(len(table), np.random.default_rng(config.seed + 1))
    return PairReplay(
        strong=table.models[s],
        weak=table.models[w],
        n=len(table),
        router=evaluate_router(score, ys, yw),
        random=evaluate_router(rand, ys, yw),
        oracle=evaluate_oracle(ys, yw),
        scores=score,
    )


def transfer(
    train: OutcomeTable, test: OutcomeTable, config: FitConfig, strong: str | None = None
) -> CurveSummary:
    """Metrics on `test` of a router fitted on all of `train` (same two models)."""
    s, w = strong_and_weak(test, strong)
    model = fit_router(
        workspace(train, config.features), np.arange(len(train), dtype=np.int64), config
    )
    probs = model.predict_matrix(test.texts, test.categories)
    cols = [train.column(test.models[s]), train.column(test.models[w])]
    return evaluate_router(
        probs[:, cols[0]] - probs[:, cols[1]], test.scores[:, s], test.scores[:, w]
    )
