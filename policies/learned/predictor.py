"""Per-candidate success model: one L2 logistic regression per model over shared prompt features.

The fitted regressions are flattened into one coefficient matrix, so predicting every candidate
for a request is one sparse row times a dense matrix plus a sigmoid (tens of microseconds).
Scores in [0, 1] that are not 0/1 are fitted exactly by duplicating rows with weights s and 1-s.
A model that never (or always) succeeds in training gets a constant, smoothed probability.
For a task never seen in training, text n-grams and task rates learned on other tasks do not
transfer, so the prediction backs off to a regression on the shape statistics alone (length,
numbers, punctuation): chosen because it is what transfers between MMLU and GSM8K (docs/evals.md).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass

import numpy as np
import numpy.typing as npt
import scipy.sparse as sp
from sklearn.linear_model import LogisticRegression

from policies.learned.features import (
    FeatureConfig,
    Featurizer,
    RawFeatures,
    fit_featurizer,
    raw_features,
    shape_vector,
    use_char_ngrams,
)

FloatArray = npt.NDArray[np.float64]


@dataclass(frozen=True)
class SuccessPredictor:
    """Predicts, per candidate model, the probability that it answers a prompt well."""

    featurizer: Featurizer
    models: tuple[str, ...]
    coef: FloatArray  # (n_features, n_models)
    intercept: FloatArray  # (n_models,)
    backoff_coef: FloatArray  # (n_shape, n_models): unseen tasks
    backoff_intercept: FloatArray  # (n_models,)

    def _backoff(self, shape: FloatArray) -> FloatArray:
        z = (shape - self.featurizer.shape_mean) / self.featurizer.shape_std
        return np.asarray(z @ self.backoff_coef + self.backoff_intercept)

    def predict_matrix(self, texts: Sequence[str], tasks: Sequence[str]) -> FloatArray:
        """P(success) per (prompt, model): shape (len(texts), len(models))."""
        return self.predict_raw(raw_features(texts, self.featurizer.char is not None), tasks)

    def predict_raw(self, raw: RawFeatures, tasks: Sequence[str]) -> FloatArray:
        """`predict_matrix` from precomputed raw features."""
        x = self.featurizer.transform_raw(raw, tasks)
        logits = np.asarray(x @ self.coef) + self.intercept
        unseen = np.array([t not in self.featurizer.tasks for t in tasks], dtype=bool)
        if unseen.any():
            logits[unseen] = self._backoff(raw.shape[unseen])
        return np.asarray(1.0 / (1.0 + np.exp(-logits)))

    def predict(self, prompt_text: str, task: str) -> Mapping[str, float]:
        """P(success) of each candidate model for one request."""
        if task in self.featurizer.tasks:
            cols, values = self.featurizer.sparse_row(prompt_text, task)
            logits = values @ self.coef[cols] + self.intercept
        else:
            logits = self._backoff(np.array([shape_vector(prompt_text)]))[0]
        row = 1.0 / (1.0 + np.exp(-logits))
        return {m: float(p) for m, p in zip(self.models, row, strict=True)}


def _design(x: sp.csr_matrix, y: FloatArray) -> tuple[sp.csr_matrix, FloatArray, FloatArray]:
    """Rows, 0/1 labels and weights that fit fractional scores exactly."""
    if np.all((y == 0.0) | (y == 1.0)):
        return x, y, np.ones_like(y)
    stacked = sp.vstack([x, x], format="csr")
    labels = np.concatenate([np.ones_like(y), np.zeros_like(y)])
    return stacked, labels, np.concatenate([y, 1.0 - y])


def _fit_one(x: sp.csr_matrix, y: FloatArray, c: float) -> tuple[FloatArray, float]:
    """Coefficients and intercept of one model's regression."""
    mean = float(y.mean())
    if mean <= 0.0 or mean >= 1.0:
        p = (y.sum() + 0.5) / (len(y) + 1.0)
        return np.zeros(x.shape[1]), float(np.log(p / (1.0 - p)))
    rows, labels, weights = _design(x, y)
    # liblinear's dual coordinate descent visits rows in a random order: without a fixed seed
    # two fits of the same rows differed in the 6th decimal (and so did calibrated thresholds).
    reg = LogisticRegression(C=c, solver="liblinear", dual=True, max_iter=1000, random_state=0)
    reg.fit(rows, labels, sample_weight=weights)
    return reg.coef_[0].astype(np.float64), float(reg.intercept_[0])


def _fit_backoff(shape: FloatArray, y: FloatArray) -> tuple[FloatArray, float]:
    """Shape-only regression of one model (standardised shape statistics)."""
    mean = float(y.mean())
    if mean <= 0.0 or mean >= 1.0:
        p = (y.sum() + 0.5) / (len(y) + 1.0)
        return np.zeros(shape.shape[1]), float(np.log(p / (1.0 - p)))
    rows, labels, weights = _design(sp.csr_matrix(shape), y)
    reg = LogisticRegression(C=1.0, max_iter=1000).fit(rows, labels, sample_weight=weights)
    return reg.coef_[0].astype(np.float64), float(reg.intercept_[0])


def fit_predictor(
    texts: Sequence[str],
    tasks: Sequence[str],
    scores: FloatArray,
    models: Sequence[str],
    config: FeatureConfig | None = None,
    c: float = 0.5,
) -> SuccessPredictor:
    """Fit features and one regression per model on training rows (scores: (n, len(models)))."""
    config = config if config is not None else FeatureConfig()
    raw = raw_features(texts, use_char_ngrams(config, len(texts)))
    return fit_predictor_raw(raw, tasks, scores, models, config, c)


def fit_predictor_raw(
    raw: RawFeatures,
    tasks: Sequence[str],
    scores: FloatArray,
    models: Sequence[str],
    config: FeatureConfig,
    c: float = 0.5,
) -> SuccessPredictor:
    """`fit_predictor` from precomputed raw features (replay hashes a dataset once)."""
    featurizer = fit_featurizer(raw, tasks, scores, config)
    x = featurizer.transform_raw(raw, tasks)
    fitted = [_fit_one(x, scores[:, j], c) for j in range(len(models))]
    coef = np.column_stack([f[0] for f in fitted])
    intercept = np.array([f[1] for f in fitted])
    shape = (raw.shape - featurizer.shape_mean) / featurizer.shape_std
    backoff = [_fit_backoff(shape, scores[:, j]) for j in range(len(models))]
    return SuccessPredictor(
        featurizer,
        tuple(models),
        coef,
        intercept,
        np.column_stack([b[0] for b in backoff]),
        np.array([b[1] for b in backoff]),
    )
