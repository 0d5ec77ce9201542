"""Fit the classifier's heads with scikit-learn and compile them into a `LinearModel`.

Three heads share one TF-IDF vocabulary: `task` (11 labels), `risk` (low/medium/high) and
`jailbreak` (no/yes). Each head is one linear estimator (logistic regression, linear SVM or
complement naive Bayes, chosen by name), calibrated by a temperature fitted on out-of-fold
scores, and the `risk` threshold for `high` is set on the same out-of-fold scores. Everything is
seeded. Reading data lives in `data`, augmentation in `augment`, the served model in `linear`.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Literal

import numpy as np
import numpy.typing as npt
from scipy.optimize import minimize_scalar
from scipy.sparse import csr_matrix
from scipy.special import log_softmax, softmax
from sklearn.feature_extraction.text import TfidfVectorizer
from sklearn.linear_model import LogisticRegression
from sklearn.model_selection import StratifiedKFold
from sklearn.naive_bayes import ComplementNB
from sklearn.svm import LinearSVC

from policies.labels import RISKS, TASKS
from router.classify.augment import augment
from router.classify.classifier import HEAD_LABELS
from router.classify.data import Example
from router.classify.detectors import detect
from router.classify.features import FeatureConfig, features
from router.classify.linear import Head, LinearModel

Estimator = Literal["logreg", "svm", "nb"]
Matrix = npt.NDArray[np.float64]


@dataclass(frozen=True, slots=True)
class TrainOptions:
    """Everything that decides the trained model besides the data."""

    estimator: Estimator = "svm"
    features: FeatureConfig = field(default_factory=FeatureConfig)
    c: float = 0.5
    min_df: int = 10
    folds: int = 3
    seed: int = 13
    augment: bool = True
    high_recall_target: float = 0.97


@dataclass(frozen=True)
class OutOfFold:
    """Out-of-fold calibrated probabilities per head, for reporting cross-validated quality."""

    probs: dict[str, Matrix]
    targets: dict[str, npt.NDArray[np.intp]]


def _identity(tokens: list[str]) -> list[str]:
    return tokens


def _targets(examples: Sequence[Example]) -> dict[str, npt.NDArray[np.intp]]:
    return {
        "task": np.array([TASKS.index(e.task) for e in examples], dtype=np.intp),
        "risk": np.array([RISKS.index(e.risk) for e in examples], dtype=np.intp),
        "jailbreak": np.array([int(e.jailbreak) for e in examples], dtype=np.intp),
    }


def _fit(options: TrainOptions, x: csr_matrix, y: npt.NDArray[np.intp]) -> tuple[Matrix, Matrix]:
    """Fit one head; return its weights (features x labels) and biases, linear in x."""
    if options.estimator == "nb":
        nb = ComplementNB(alpha=0.3).fit(x, y)
        return np.asarray(nb.feature_log_prob_.T), np.zeros(len(nb.classes_))
    est: LogisticRegression | LinearSVC
    if options.estimator == "svm":
        est = LinearSVC(C=options.c, random_state=options.seed, max_iter=5000)
    else:
        est = LogisticRegression(C=options.c, max_iter=500, tol=1e-3, random_state=options.seed)
    est.fit(x, y)
    coef, bias = np.asarray(est.coef_), np.asarray(est.intercept_)
    if coef.shape[0] == 1:  # binary: logits (0, z) give softmax == sigmoid(z)
        return np.hstack([np.zeros_like(coef.T), coef.T]), np.array([0.0, bias[0]])
    return coef.T, bias


def _complete(
    weights: Matrix, bias: Matrix, classes: npt.NDArray[np.intp], k: int
) -> tuple[Matrix, Matrix]:
    """Widen a head fitted on a subset of the labels to all `k` labels (absent ones: -inf-ish)."""
    full_w = np.zeros((weights.shape[0], k))
    full_b = np.full(k, -30.0)
    full_w[:, classes] = weights
    full_b[classes] = bias
    return full_w, full_b


def fit_temperature(logits: Matrix, targets: npt.NDArray[np.intp]) -> float:
    """The temperature minimising the negative log-likelihood of the targets."""

    def nll(log_t: float) -> float:
        lp = log_softmax(logits / np.exp(log_t), axis=1)
        return float(-lp[np.arange(len(targets)), targets].mean())

    result = minimize_scalar(nll, bounds=(-4.0, 4.0), method="bounded")
    return float(np.exp(result.x))


def high_threshold(
    p_high: Matrix, is_high: npt.NDArray[np.bool_], floor_high: npt.NDArray[np.bool_], target: float
) -> float:
    """The largest threshold on P(high) whose recall, with the detector floor, meets `target`."""
    need = int(np.ceil(target * is_high.sum()))
    candidates = np.sort(np.unique(p_high[is_high & ~floor_high]))[::-1]
    caught = int((is_high & floor_high).sum())
    for t in candidates:
        if caught + int((is_high & ~floor_high & (p_high >= t)).sum()) >= need:
            return float(t)
    return 0.0


Fitter = Callable[[csr_matrix, npt.NDArray[np.intp]], tuple[Matrix, Matrix]]


def _fit_head(
    options: TrainOptions, x: csr_matrix, y: npt.NDArray[np.intp], k: int
) -> tuple[Matrix, Matrix]:
    classes = np.unique(y)
    if len(classes) == 1:  # a fold can miss a rare label entirely: predict the one it has
        return _complete(np.zeros((x.shape[1], 1)), np.zeros(1), classes, k)
    w, b = _fit(options, x, y)
    return _complete(w, b, classes, k) if len(classes) < k else (w, b)


def out_of_fold_logits(
    options: TrainOptions, x: csr_matrix, targets: dict[str, npt.NDArray[np.intp]]
) -> dict[str, Matrix]:
    """Logits of every head for every row from models that did not see that row."""
    folds = StratifiedKFold(options.folds, shuffle=True, random_state=options.seed)
    out = {name: np.zeros((x.shape[0], len(labels))) for name, labels in HEAD_LABELS.items()}
    for train_idx, test_idx in folds.split(np.zeros(x.shape[0]), targets["task"]):
        for name, labels in HEAD_LABELS.items():
            w, b = _fit_head(options, x[train_idx], targets[name][train_idx], len(labels))
            out[name][test_idx] = x[test_idx] @ w + b
    return out


@dataclass(frozen=True)
class TrainResult:
    """The compiled model, its out-of-fold scores and the training-set sizes."""

    model: LinearModel
    oof: OutOfFold
    n_rows: int
    n_augmented: int


def _floor_high(examples: Sequence[Example]) -> npt.NDArray[np.bool_]:
    high = {"pii", "jailbreak", "side_effects"}
    return np.array([bool(high & detect(e.view).signals(e.task)) for e in examples])


def _calibrate(
    options: TrainOptions, oof_logits: dict[str, Matrix], examples: Sequence[Example]
) -> tuple[dict[str, float], dict[str, float], OutOfFold]:
    targets = _targets(examples)
    temps = {n: fit_temperature(oof_logits[n], targets[n]) for n in HEAD_LABELS}
    probs = {n: softmax(oof_logits[n] / temps[n], axis=1) for n in HEAD_LABELS}
    is_high = targets["risk"] == RISKS.index("high")
    thresholds = {
        "risk_high": high_threshold(
            probs["risk"][:, RISKS.index("high")],
            is_high,
            _floor_high(examples),
            options.high_recall_target,
        ),
        "jailbreak": 0.5,
    }
    return temps, thresholds, OutOfFold(probs, targets)


class TrainingDataError(ValueError):
    """The examples cannot train a classifier (too few, one label only): the message says why."""


def check_examples(examples: Sequence[Example], options: TrainOptions) -> None:
    """What the fit would trip over, said in one line: no rows, a head with a single label
    (every row the same task, no jailbreak at all, ...), too few rows for the folds."""
    if not examples:
        raise TrainingDataError("no training rows")
    targets = _targets(examples)
    for name, labels in HEAD_LABELS.items():
        present = sorted({labels[int(i)] for i in targets[name]})
        if len(present) < 2:
            raise TrainingDataError(
                f"every one of the {len(examples)} rows has {name} {present[0]!r}: the {name} "
                f"head needs at least two of {', '.join(labels)}"
            )
    largest = int(np.bincount(targets["task"]).max())
    if largest < options.folds:
        raise TrainingDataError(
            f"{len(examples)} rows, at most {largest} of any one task: {options.folds}-fold "
            f"cross-validation needs at least {options.folds} rows of some task"
        )


def train(examples: Sequence[Example], options: TrainOptions) -> TrainResult:
    """Fit, calibrate and compile the three heads on `examples` (deterministic for a seed);
    TrainingDataError when they cannot train one."""
    check_examples(examples, options)
    rows = augment(examples, options.seed) if options.augment else list(examples)
    tokens = [features(e.view, options.features) for e in rows]
    vectorizer = TfidfVectorizer(
        analyzer=_identity, min_df=options.min_df, sublinear_tf=True, dtype=np.float64
    )
    try:
        x_all = vectorizer.fit_transform(tokens).tocsr()
    except ValueError:  # empty vocabulary, or min_df above the number of rows
        raise TrainingDataError(
            f"no feature occurs in --min-df {options.min_df} or more of the {len(rows)} "
            "training rows (after augmentation): use more data or a lower --min-df"
        ) from None
    x_orig = x_all[: len(examples)]
    temps, thresholds, oof = _calibrate(
        options, out_of_fold_logits(options, x_orig, _targets(examples)), examples
    )
    targets = _targets(rows)
    heads, weights, biases, start = [], [], [], 0
    for name, labels in HEAD_LABELS.items():
        w, b = _fit_head(options, x_all, targets[name], len(labels))
        heads.append(Head(name, labels, start, temps[name]))
        weights.append(w)
        biases.append(b)
        start += len(labels)
    vocab = {str(t): int(i) for t, i in vectorizer.vocabulary_.items()}
    model = LinearModel(
        vocab=vocab,
        idf=np.asarray(vectorizer.idf_, dtype=np.float32),
        weights=np.hstack(weights).astype(np.float32),
        bias=np.concatenate(biases).astype(np.float32),
        heads=tuple(heads),
        config=options.features,
        thresholds=thresholds,
    )
    return TrainResult(model=model, oof=oof, n_rows=len(examples), n_augmented=len(rows))
