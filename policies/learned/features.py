"""Prompt features for the learned router: word and character TF-IDF, shape statistics, task.

A `Featurizer` is fitted on training prompts only (vocabularies, shape scaling, smoothed per-task
success rates of each model) and then maps (prompt, task) pairs to one sparse row. Shape
statistics (length, numbers, punctuation) carry the difficulty signal that words miss on math
word problems; the per-task rates carry the strong per-subject signal of MMLU-like data.
"""

from __future__ import annotations

import math
import re
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
import numpy.typing as npt
import scipy.sparse as sp
from sklearn.feature_extraction.text import TfidfVectorizer

FloatArray = npt.NDArray[np.float64]
_NUMBER = re.compile(r"\d+(?:[.,]\d+)*")
AUTO_CHAR_LIMIT = 5000


@dataclass(frozen=True)
class FeatureConfig:
    """Feature choices; `char_ngrams=None` means on below `AUTO_CHAR_LIMIT` training prompts."""

    word_max_features: int = 20000
    char_ngrams: bool | None = None
    char_max_features: int = 30000
    min_df: int = 2
    task_smoothing: float = 10.0
    shape_weight: float = 0.3


@dataclass(frozen=True)
class Featurizer:
    """Fitted feature map; `transform` gives one CSR row per (text, task)."""

    word: TfidfVectorizer
    char: TfidfVectorizer | None
    shape_mean: FloatArray
    shape_std: FloatArray
    shape_weight: float
    tasks: tuple[str, ...]
    task_rates: FloatArray  # (len(tasks) + 1, n_models); last row = overall prior

    @property
    def n_features(self) -> int:
        """Width of a feature row."""
        char = len(self.char.vocabulary_) if self.char is not None else 0
        n_shape = len(self.shape_mean)
        return len(self.word.vocabulary_) + char + n_shape + len(self.tasks) + self.task_rates.shape[1]

    def transform(self, texts: Sequence[str], tasks: Sequence[str]) -> sp.csr_matrix:
        """Sparse features of each prompt with its task label."""
        parts = [self.word.transform(texts)]
        if self.char is not None:
            parts.append(self.char.transform(texts))
        shape = (shape_matrix(texts) - self.shape_mean) / self.shape_std * self.shape_weight
        parts.append(sp.csr_matrix(shape))
        parts.append(self._task_block(tasks))
        return sp.hstack(parts, format="csr", dtype=np.float64)

    def _task_block(self, tasks: Sequence[str]) -> sp.csr_matrix:
        index = {t: i for i, t in enumerate(self.tasks)}
        rows = [index.get(t, len(self.tasks)) for t in tasks]
        onehot = sp.csr_matrix(
            (np.ones(len(rows)), (np.arange(len(rows)), rows)),
            shape=(len(rows), len(self.tasks) + 1),
        )[:, : len(self.tasks)]
        rates = sp.csr_matrix(self.task_rates[rows])
        return sp.hstack([onehot, rates], format="csr")


def shape_vector(text: str) -> list[float]:
    """Length, number and punctuation statistics of one prompt."""
    numbers = _NUMBER.findall(text)
    return [
        math.log1p(len(text)),
        float(len(text.split())),
        float(len(numbers)),
        float(len(set(numbers))),
        math.log1p(max((len(n) for n in numbers), default=0)),
        float(sum(1 for n in numbers if "." in n)),
        float("%" in text),
        float("/" in text),
        float(text.count("$")),
        float(text.count(".")),
        float(text.count("?")),
        math.log1p(sum(1 for c in text if c.isupper())),
    ]


def shape_matrix(texts: Sequence[str]) -> FloatArray:
    """`shape_vector` of every text, one row each."""
    return np.array([shape_vector(t) for t in texts], dtype=np.float64).reshape(len(texts), -1)


def task_rates(
    tasks: Sequence[str], scores: FloatArray, smoothing: float
) -> tuple[tuple[str, ...], FloatArray]:
    """Per-task mean score of each model, shrunk toward the overall mean by `smoothing` rows."""
    names = tuple(sorted(set(tasks)))
    prior = scores.mean(axis=0)
    labels = np.array(tasks)
    rates = np.empty((len(names) + 1, scores.shape[1]))
    for i, name in enumerate(names):
        mask = labels == name
        rates[i] = (scores[mask].sum(axis=0) + smoothing * prior) / (mask.sum() + smoothing)
    rates[-1] = prior
    return names, rates


def fit_featurizer(
    texts: Sequence[str], tasks: Sequence[str], scores: FloatArray, config: FeatureConfig
) -> Featurizer:
    """Fit vocabularies, shape scaling and task rates on training prompts only."""
    word = TfidfVectorizer(
        ngram_range=(1, 2), min_df=config.min_df, sublinear_tf=True,
        max_features=config.word_max_features, dtype=np.float64,
    ).fit(texts)
    use_char = config.char_ngrams if config.char_ngrams is not None else (
        len(texts) < AUTO_CHAR_LIMIT
    )
    char = None
    if use_char:
        char = TfidfVectorizer(
            analyzer="char_wb", ngram_range=(2, 4), min_df=3, sublinear_tf=True,
            max_features=config.char_max_features, dtype=np.float64,
        ).fit(texts)
    shape = shape_matrix(texts)
    names, rates = task_rates(tasks, scores, config.task_smoothing)
    return Featurizer(
        word=word, char=char, shape_mean=shape.mean(axis=0),
        shape_std=shape.std(axis=0) + 1e-9, shape_weight=config.shape_weight,
        tasks=names, task_rates=rates,
    )
