"""Prompt features for the learned router: hashed word and character TF-IDF, shape stats, task.

Counting is stateless (feature hashing), so the raw counts of a whole dataset are computed once
and sliced per fold; what is *fitted*, on training prompts only, is the kept columns (document
frequency >= min_df), the IDF weights, the shape scaling and the smoothed per-task success rates
of each model. Shape statistics (length, numbers, punctuation) carry the difficulty signal that
words miss on math word problems; the task rates carry MMLU's strong per-subject signal.
"""

from __future__ import annotations

import math
import re
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
import numpy.typing as npt
import scipy.sparse as sp
from sklearn.feature_extraction.text import HashingVectorizer
from sklearn.utils import murmurhash3_32

FloatArray = npt.NDArray[np.float64]
IntArray = npt.NDArray[np.int64]
_NUMBER = re.compile(r"\d+(?:[.,]\d+)*")
AUTO_CHAR_LIMIT = 5000
WORD_HASH = HashingVectorizer(
    ngram_range=(1, 2), n_features=2**20, alternate_sign=False, norm=None, dtype=np.float64
)
CHAR_HASH = HashingVectorizer(
    analyzer="char_wb",
    ngram_range=(2, 4),
    n_features=2**18,
    alternate_sign=False,
    norm=None,
    dtype=np.float64,
)
_WORD_ANALYZER = WORD_HASH.build_analyzer()
_CHAR_ANALYZER = CHAR_HASH.build_analyzer()
_INT_MIN = -(2**31)


def hashed_counts(tokens: list[str], n_features: int) -> dict[int, int]:
    """Hashed token counts exactly as HashingVectorizer(alternate_sign=False) computes them."""
    counts: dict[int, int] = {}
    for token in tokens:
        h = int(murmurhash3_32(token, seed=0))
        index = (
            (2**31 - 1 - (n_features - 1)) % n_features if h == _INT_MIN else abs(h) % n_features
        )
        counts[index] = counts.get(index, 0) + 1
    return counts


@dataclass(frozen=True)
class FeatureConfig:
    """Feature choices; `char_ngrams=None` means on below `AUTO_CHAR_LIMIT` training prompts."""

    char_ngrams: bool | None = None
    min_df: int = 2
    char_min_df: int = 3
    task_smoothing: float = 10.0
    shape_weight: float = 0.3


@dataclass(frozen=True)
class RawFeatures:
    """Unfitted features of some prompts: hashed counts and shape statistics."""

    word: sp.csr_matrix
    char: sp.csr_matrix | None
    shape: FloatArray

    def rows(self, index: IntArray) -> RawFeatures:
        """The same features for the rows at `index`."""
        char = self.char[index] if self.char is not None else None
        return RawFeatures(self.word[index], char, self.shape[index])


@dataclass(frozen=True)
class Block:
    """One fitted text block: hashed column -> kept position (-1: dropped), and the IDF."""

    remap: npt.NDArray[np.int32]
    idf: FloatArray

    def apply(self, counts: sp.csr_matrix) -> sp.csr_matrix:
        """Sublinear TF x IDF over kept columns, rows L2-normalised (O(nnz), no column slicing)."""
        counts = counts.tocsr()
        cols = self.remap[counts.indices]
        keep = cols >= 0
        row_of = np.repeat(np.arange(counts.shape[0]), np.diff(counts.indptr))[keep]
        values = (1.0 + np.log(counts.data[keep])) * self.idf[cols[keep]]
        out = sp.csr_matrix((values, (row_of, cols[keep])), shape=(counts.shape[0], len(self.idf)))
        norms = np.sqrt(np.asarray(out.multiply(out).sum(axis=1)).ravel())
        norms[norms == 0.0] = 1.0
        return sp.csr_matrix(sp.diags(1.0 / norms) @ out)

    def row(self, counts: dict[int, int]) -> tuple[IntArray, FloatArray]:
        """One prompt's (kept column, TF-IDF value) pairs from hashed counts, L2-normalised."""
        pairs = [(int(self.remap[i]), c) for i, c in counts.items() if self.remap[i] >= 0]
        if not pairs:
            return np.zeros(0, dtype=np.int64), np.zeros(0)
        cols = np.array([p[0] for p in pairs], dtype=np.int64)
        values = (1.0 + np.log(np.array([p[1] for p in pairs], dtype=np.float64))) * self.idf[cols]
        return cols, values / np.sqrt(values @ values)


def fit_block(counts: sp.csr_matrix, min_df: int) -> Block:
    """Keep columns seen in >= min_df training prompts; smooth IDF as scikit-learn computes it."""
    df = np.asarray((counts > 0).sum(axis=0)).ravel()
    keep = np.flatnonzero(df >= min_df)
    remap = np.full(counts.shape[1], -1, dtype=np.int32)
    remap[keep] = np.arange(len(keep), dtype=np.int32)
    n = counts.shape[0]
    idf = np.log((1.0 + n) / (1.0 + df[keep])) + 1.0
    return Block(remap, idf.astype(np.float64))


@dataclass(frozen=True)
class Featurizer:
    """Fitted feature map; `transform` gives one CSR row per (text, task)."""

    word: Block
    char: Block | None
    shape_mean: FloatArray
    shape_std: FloatArray
    shape_weight: float
    tasks: tuple[str, ...]
    task_rates: FloatArray  # (len(tasks) + 1, n_models); last row = overall prior
    # The shape statistics' range over the training prompts (artifacts trained before
    # 2026-12-07 have none: every prompt is then read as familiar)
    shape_low: FloatArray | None = None
    shape_high: FloatArray | None = None

    def familiar(self, text: str) -> bool:
        """Whether every shape statistic of `text` (length, words, numbers, ...) lies within
        the training prompts' range: outside it a linear model extrapolates ("hi" read as
        easier for the weak model than for the strong one; eight problems joined, both near
        0; longer, 0 and 1: the policies audit of 2026-12-07)."""
        low, high = getattr(self, "shape_low", None), getattr(self, "shape_high", None)
        if low is None or high is None:
            return True
        shape = np.array(shape_vector(text))
        return bool(np.all((shape >= low) & (shape <= high)))

    def transform(self, texts: Sequence[str], tasks: Sequence[str]) -> sp.csr_matrix:
        """Sparse features of each prompt with its task label."""
        return self.transform_raw(raw_features(texts, self.char is not None), tasks)

    def transform_raw(self, raw: RawFeatures, tasks: Sequence[str]) -> sp.csr_matrix:
        """Sparse features from precomputed raw features."""
        parts = [self.word.apply(raw.word)]
        if self.char is not None and raw.char is not None:
            parts.append(self.char.apply(raw.char))
        shape = (raw.shape - self.shape_mean) / self.shape_std * self.shape_weight
        parts.extend([sp.csr_matrix(shape), self._task_block(tasks)])
        return sp.hstack(parts, format="csr", dtype=np.float64)

    def sparse_row(self, text: str, task: str) -> tuple[IntArray, FloatArray]:
        """One request's features as (column, value) pairs, without scipy (the fast path)."""
        cols, values, offset = [], [], 0
        blocks = [(self.word, _WORD_ANALYZER, WORD_HASH.n_features)]
        if self.char is not None:
            blocks.append((self.char, _CHAR_ANALYZER, CHAR_HASH.n_features))
        for block, analyzer, width in blocks:
            c, v = block.row(hashed_counts(analyzer(text), width))
            cols.append(c + offset)
            values.append(v)
            offset += len(block.idf)
        shape = (np.array(shape_vector(text)) - self.shape_mean) / self.shape_std
        cols.append(np.arange(offset, offset + len(shape)))
        values.append(shape * self.shape_weight)
        offset += len(shape)
        index = {t: i for i, t in enumerate(self.tasks)}.get(task, len(self.tasks))
        if index < len(self.tasks):
            cols.append(np.array([offset + index]))
            values.append(np.ones(1))
        offset += len(self.tasks)
        cols.append(np.arange(offset, offset + self.task_rates.shape[1]))
        values.append(self.task_rates[index])
        return np.concatenate(cols).astype(np.int64), np.concatenate(values)

    def _task_block(self, tasks: Sequence[str]) -> sp.csr_matrix:
        index = {t: i for i, t in enumerate(self.tasks)}
        rows = [index.get(t, len(self.tasks)) for t in tasks]
        onehot = sp.csr_matrix(
            (np.ones(len(rows)), (np.arange(len(rows)), rows)),
            shape=(len(rows), len(self.tasks) + 1),
        )[:, : len(self.tasks)]
        return sp.hstack([onehot, sp.csr_matrix(self.task_rates[rows])], format="csr")


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


def raw_features(texts: Sequence[str], char: bool) -> RawFeatures:
    """Hashed word (and character) counts and shape statistics of `texts`."""
    shape = np.array([shape_vector(t) for t in texts], dtype=np.float64).reshape(len(texts), -1)
    chars = CHAR_HASH.transform(texts) if char else None
    return RawFeatures(WORD_HASH.transform(texts), chars, shape)


def use_char_ngrams(config: FeatureConfig, n_train: int) -> bool:
    """Whether character n-grams are on for a training set of this size."""
    return config.char_ngrams if config.char_ngrams is not None else n_train < AUTO_CHAR_LIMIT


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
    raw: RawFeatures, tasks: Sequence[str], scores: FloatArray, config: FeatureConfig
) -> Featurizer:
    """Fit kept columns, IDF, shape scaling and task rates on training prompts only."""
    char = fit_block(raw.char, config.char_min_df) if raw.char is not None else None
    names, rates = task_rates(tasks, scores, config.task_smoothing)
    return Featurizer(
        word=fit_block(raw.word, config.min_df),
        char=char,
        shape_mean=raw.shape.mean(axis=0),
        shape_std=raw.shape.std(axis=0) + 1e-9,
        shape_weight=config.shape_weight,
        tasks=names,
        task_rates=rates,
        shape_low=raw.shape.min(axis=0),
        shape_high=raw.shape.max(axis=0),
    )
