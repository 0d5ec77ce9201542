"""Routing strategies for offline replay, by name, and cross-fitted predictions on outcome tables.

Each strategy fits on training rows and predicts P(success) per (prompt, model): `learned` is the
production per-request model (`policies.learned`), `category` uses only smoothed per-task rates of
each model, `random` draws uniform scores from the injected generator. `fit_router` and
`oof_probs` are what replay, floor calibration and training share.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Literal, Protocol

import numpy as np
import numpy.typing as npt

from evals.folds import fold_ids, splits
from evals.outcomes import OutcomeTable
from policies.learned.features import (
    FeatureConfig,
    RawFeatures,
    raw_features,
    task_rates,
    use_char_ngrams,
)
from policies.learned.predictor import SuccessPredictor, fit_predictor_raw

FloatArray = npt.NDArray[np.float64]
IntArray = npt.NDArray[np.int64]
RouterName = Literal["learned", "category", "random"]
ROUTER_NAMES: tuple[RouterName, ...] = ("learned", "category", "random")


class Predicts(Protocol):
    """Anything that gives P(success) per (prompt, model)."""

    def predict_matrix(self, texts: Sequence[str], tasks: Sequence[str]) -> FloatArray: ...


@dataclass(frozen=True)
class CategoryRates:
    """Per-task smoothed success rate of each model (unknown task: overall rate)."""

    tasks: tuple[str, ...]
    rates: FloatArray

    def predict_matrix(self, texts: Sequence[str], tasks: Sequence[str]) -> FloatArray:
        index = {t: i for i, t in enumerate(self.tasks)}
        return self.rates[[index.get(t, len(self.tasks)) for t in tasks]]


@dataclass(frozen=True)
class RandomScores:
    """Uniform random 'probabilities' from a seeded generator (the random baseline)."""

    seed: int
    n_models: int

    def predict_matrix(self, texts: Sequence[str], tasks: Sequence[str]) -> FloatArray:
        rng = np.random.default_rng([self.seed, len(texts)])
        return rng.random((len(texts), self.n_models))


@dataclass(frozen=True)
class FitConfig:
    """How a strategy is fitted: its name, features, regularisation and seed."""

    router: RouterName = "learned"
    features: FeatureConfig = field(default_factory=FeatureConfig)
    c: float = 0.5
    seed: int = 0


@dataclass(frozen=True)
class Workspace:
    """An outcome table with its raw (hashed) features computed once for every fold."""

    table: OutcomeTable
    raw: RawFeatures

    def select(self, columns: Sequence[int]) -> Workspace:
        """The same prompts and features over a subset of model columns."""
        return Workspace(self.table.select(columns), self.raw)


def workspace(table: OutcomeTable, features: FeatureConfig) -> Workspace:
    """Hash every prompt once (character n-grams per `use_char_ngrams` on the table size)."""
    return Workspace(table, raw_features(table.texts, use_char_ngrams(features, len(table))))


def fit_router(ws: Workspace, index: IntArray, config: FitConfig) -> Predicts:
    """Fit the named strategy on the rows at `index`."""
    table = ws.table
    tasks = [table.categories[int(i)] for i in index]
    scores = table.scores[index]
    if config.router == "category":
        names, rates = task_rates(tasks, scores, config.features.task_smoothing)
        return CategoryRates(names, rates)
    if config.router == "random":
        return RandomScores(config.seed + int(index.sum() % 9973), len(table.models))
    raw = ws.raw.rows(index)
    return fit_predictor_raw(raw, tasks, scores, table.models, config.features, config.c)


def predict_rows(model: Predicts, ws: Workspace, index: IntArray) -> FloatArray:
    """P(success) of every model on the rows at `index`."""
    tasks = [ws.table.categories[int(i)] for i in index]
    if isinstance(model, SuccessPredictor):
        return model.predict_raw(ws.raw.rows(index), tasks)
    return model.predict_matrix([ws.table.texts[int(i)] for i in index], tasks)


def oof_probs(
    ws: Workspace, index: IntArray, k: int, config: FitConfig, rng: np.random.Generator
) -> FloatArray:
    """Out-of-fold P(success) for the rows at `index` by group k-fold inside them."""
    groups = [ws.table.groups[int(i)] for i in index]
    out = np.zeros((len(index), len(ws.table.models)))
    for tr, te in splits(fold_ids(groups, k, rng), k):
        out[te] = predict_rows(fit_router(ws, index[tr], config), ws, index[te])
    return out
