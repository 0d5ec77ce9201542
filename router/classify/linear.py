"""The served form of the trained models: a vocabulary, IDF weights and linear heads.

Every estimator we train (logistic regression, linear SVM, naive Bayes) scores a TF-IDF vector
linearly, so the artifact keeps only what scoring needs and serving needs numpy alone (no
scikit-learn import, a small file, a fast load). `LinearModel.predict` gives calibrated
probabilities per head (softmax of logits divided by the head's fitted temperature). Files are
written deterministically (fixed zip timestamps), so one training run gives one content hash.
Training lives in `training`; the request-level decision in `classifier`.
"""

from __future__ import annotations

import hashlib
import io
import json
import math
import zipfile
from array import array
from collections import Counter
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import asdict, dataclass, field
from itertools import pairwise, repeat
from operator import itemgetter
from pathlib import Path

import numpy as np
import numpy.typing as npt

from policies.files import write_files
from router.classify.features import FeatureConfig

Floats = npt.NDArray[np.float32]
MODEL_FILE = "model.zip"
_EPOCH = (1980, 1, 1, 0, 0, 0)


@dataclass(frozen=True, slots=True)
class Head:
    """One output of the model: its labels, its columns in the weight matrix, its temperature."""

    name: str
    labels: tuple[str, ...]
    start: int
    temperature: float = 1.0

    @property
    def stop(self) -> int:
        return self.start + len(self.labels)


@dataclass(frozen=True, slots=True)
class Scores:
    """Calibrated probabilities of every head for one input, in each head's label order."""

    probs: Mapping[str, tuple[float, ...]]


@dataclass(frozen=True)
class LinearModel:
    """Vocabulary, IDF, stacked head weights (features x outputs) and biases."""

    vocab: Mapping[str, int]
    idf: Floats
    weights: Floats
    bias: Floats
    heads: tuple[Head, ...]
    config: FeatureConfig
    thresholds: Mapping[str, float]
    # Serving tables, derived from the fields above once (see `predict`).
    _ids: Mapping[str, int] = field(init=False, repr=False, compare=False)
    _rows: array[float] = field(init=False, repr=False, compare=False)
    _width: int = field(init=False, repr=False, compare=False)
    _bias: tuple[float, ...] = field(init=False, repr=False, compare=False)
    _spans: tuple[tuple[str, int, int], ...] = field(init=False, repr=False, compare=False)
    _shift: bool = field(init=False, repr=False, compare=False)
    _word_key: Mapping[str, int] = field(init=False, repr=False, compare=False)
    _word_ids: tuple[int, ...] = field(init=False, repr=False, compare=False)
    _pair_ids: Mapping[tuple[int, int], int] = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        # Token ids shifted by one, so `filter(None, ...)` drops unknown tokens in C; row 0 of
        # the table is the (never used) unknown row. Row i + 1 holds idf_i * weights_i divided
        # by the temperature of each column's head, in float64, and in its last column idf_i ** 2
        # (the squared norm of a token seen once). The bias is divided by the temperature too.
        # Served from a flat `array('d')`, row after row: a request sums tens of rows, and
        # numpy's machinery for that is more code and memory to bring back into the CPU's caches
        # than the sums themselves when requests come far apart (`_scores`).
        idf = self.idf.astype(np.float64)
        n_out = self.weights.shape[1]
        temperature = np.ones(n_out, dtype=np.float64)
        for h in self.heads:
            temperature[h.start : h.stop] = h.temperature
        scaled = self.weights.astype(np.float64) / temperature
        table = np.zeros((len(idf) + 1, n_out + 1), dtype=np.float64)
        table[1:, :n_out] = idf[:, None] * scaled
        table[1:, n_out] = idf * idf
        bias = self.bias.astype(np.float64) / temperature
        # The TF-IDF vector has unit norm, so |z_j| <= ||weights[:, j]|| / T_j + |bias_j| / T_j:
        # when that stays far from exp's range (+-709), the softmax need not subtract the maximum
        # (it is computed directly; otherwise each head is shifted by its maximum first).
        bound = float(np.max(np.sqrt(np.sum(np.square(scaled), axis=0)) + np.abs(bias)))
        spans = tuple((h.name, h.start, h.stop) for h in self.heads)
        # Words and word pairs by number: every word of a `w:` or `b:` token gets a key
        # 1..n_words (0: unknown word), `_word_ids[key]` is its `w:` token's id (0 if none) and
        # `_pair_ids[key_a, key_b]` the id of the `b:a b` token (no pair has a key 0).
        word_key: dict[str, int] = {}
        for token in self.vocab:
            if token.startswith("w:"):
                word_key.setdefault(token[2:], len(word_key) + 1)
            elif token.startswith("b:"):
                for word in token[2:].split(" "):
                    word_key.setdefault(word, len(word_key) + 1)
        word_ids = [0] * (len(word_key) + 1)
        pair_ids: dict[tuple[int, int], int] = {}
        for token, i in self.vocab.items():
            if token.startswith("w:"):
                word_ids[word_key[token[2:]]] = i + 1
            elif token.startswith("b:"):
                first, _, second = token[2:].partition(" ")
                pair_ids[word_key[first], word_key[second]] = i + 1
        object.__setattr__(self, "_word_key", word_key)
        object.__setattr__(self, "_word_ids", tuple(word_ids))
        object.__setattr__(self, "_pair_ids", pair_ids)
        object.__setattr__(self, "_ids", {t: i + 1 for t, i in self.vocab.items()})
        object.__setattr__(self, "_rows", array("d", table.ravel().tobytes()))
        object.__setattr__(self, "_width", n_out + 1)
        object.__setattr__(self, "_bias", tuple(bias.tolist()))
        object.__setattr__(self, "_spans", spans)
        object.__setattr__(self, "_shift", not bound < 600.0)

    def head(self, name: str) -> Head:
        """The head called `name` (KeyError when absent)."""
        for head in self.heads:
            if head.name == name:
                return head
        raise KeyError(name)

    def knows_a_word(self, words: Iterable[str]) -> bool:
        """Whether any of `words` (a message's words, `features.text_words`) that has a letter
        in it is a word of the vocabulary (its `w:` feature is). Punctuation and the number
        buckets (`#`, `##`, ...) are not words here: they say nothing of what is asked."""
        word_ids, word_key = self._word_ids, self._word_key
        return any(word_ids[word_key.get(w, 0)] and any(map(str.isalpha, w)) for w in words)

    def vectorize(self, tokens: Sequence[str]) -> tuple[npt.NDArray[np.intp], Floats]:
        """Column indices and l2-normalised sublinear TF-IDF values of known tokens.

        Indices come in the order tokens first occur (so the float sums are the same on every
        run); the lookups run in C (`map`), not in a Python loop.
        """
        counts = Counter(tokens)
        ids = np.array(list(map(self.vocab.get, counts, repeat(-1, len(counts)))), dtype=np.intp)
        known = ids >= 0
        if not known.any():
            return np.zeros(0, dtype=np.intp), np.zeros(0, dtype=np.float32)
        idx = ids[known]
        tally = np.array(list(counts.values()), dtype=np.float32)[known]
        values: Floats = ((1.0 + np.log(tally)) * self.idf[idx]).astype(np.float32)
        values /= np.float32(np.sqrt(float(values @ values)))
        return idx, values

    def logits(self, tokens: Sequence[str]) -> Floats:
        """Raw scores of every output column for one token list."""
        idx, values = self.vectorize(tokens)
        out: Floats = values @ self.weights[idx] + self.bias
        return out

    def predict(self, tokens: Sequence[str]) -> Scores:
        """Calibrated probabilities of every head (the same numbers as `predict_reference`
        up to float rounding: float64 here, float32 there; differences below 1e-6).

        A request has tens to a few hundred known tokens, so the fixed cost of each numpy call
        dominates: the tokens are looked up and counted in C (`map`, `filter`, `Counter`), their
        rows of the precomputed `idf * weights` table summed in one numpy call (weighted by the
        sublinear term frequencies only when a token repeats), and the l2 norm comes from the
        table's `idf ** 2` column. Scaling, bias and the per-head softmax are plain floats.
        """
        return self._scores(list(filter(None, map(self._ids.get, tokens))))

    def predict_parts(self, words: Sequence[str], others: Sequence[str]) -> Scores:
        """`predict(features(view))` given `feature_parts(view)` (the same numbers, bit for
        bit): the words are looked up once, their `w:` and `b:` tokens by number, so the token
        strings are never built or hashed."""
        keys = list(map(self._word_key.get, words, repeat(0, len(words))))
        # `itemgetter(*keys)` reads every key's id in one C call (a tuple when 2 or more keys)
        ids = (
            itemgetter(*keys)(self._word_ids)
            if len(keys) > 1
            else map(self._word_ids.__getitem__, keys)
        )
        known = list(filter(None, ids))
        if self.config.word_bigrams and len(keys) > 1:
            known.extend(filter(None, map(self._pair_ids.get, pairwise(keys))))
        known.extend(filter(None, map(self._ids.get, others)))
        return self._scores(known)

    def _scores(self, known: list[int]) -> Scores:
        """The probabilities for the (shifted) ids of the known tokens, repeats included.

        The rows are summed in plain floats, in the order tokens first occur (the same order
        on every run), each weighted by its sublinear term frequency 1 + ln(count) when a token
        repeats; the norm comes from the last column (idf ** 2, weighted by the frequency's
        square). Requests far apart (a few per second) find these loops' code in the caches
        where numpy's `take`/`reduce` was not (measured: `python -m bench.cold_path`)."""
        if not known:
            z = list(self._bias)
        else:
            rows, width = self._rows, self._width
            picked: list[Sequence[float]] = []
            norm2 = 0.0
            for i, count in Counter(known).items():
                start = i * width
                row = rows[start : start + width]
                if count == 1:  # most tokens: tf = 1, the row as it is
                    norm2 += row[-1]
                    picked.append(row)
                else:
                    tf = 1.0 + math.log(count)
                    norm2 += tf * tf * row[-1]
                    picked.append([tf * x for x in row])
            # Column sums in C (`zip`, `sum`), in the tokens' order: the same floats as adding
            # the rows one by one, at half the interpreter's work.
            inv_norm = 1.0 / math.sqrt(norm2)
            z = [sum(column) * inv_norm + b
                 for column, b in zip(zip(*picked, strict=True), self._bias, strict=False)]
        if self._shift:
            for _name, start, stop in self._spans:
                peak = max(z[start:stop])
                z[start:stop] = [x - peak for x in z[start:stop]]
        e = list(map(math.exp, z))
        probs: dict[str, tuple[float, ...]] = {}
        for name, start, stop in self._spans:
            head = e[start:stop]
            total = sum(head)
            probs[name] = tuple([x / total for x in head])
        return Scores(probs)

    def predict_reference(self, tokens: Sequence[str]) -> Scores:
        """`predict` step by step in float32 numpy (the served code before it was flattened;
        kept to test `predict` against)."""
        raw = self.logits(tokens)
        probs: dict[str, tuple[float, ...]] = {}
        for head in self.heads:
            z = raw[head.start : head.stop] / head.temperature
            e = np.exp(z - z.max())
            probs[head.name] = tuple((e / e.sum()).tolist())
        return Scores(probs)


def _array_bytes(array: npt.NDArray[np.generic]) -> bytes:
    buf = io.BytesIO()
    np.save(buf, array, allow_pickle=False)
    return buf.getvalue()


def model_bytes(model: LinearModel) -> bytes:
    """The model as the bytes of `model.zip` (deterministic)."""
    tokens = sorted(model.vocab, key=model.vocab.__getitem__)
    spec = {
        "heads": [asdict(h) for h in model.heads],
        "config": asdict(model.config),
        "thresholds": dict(sorted(model.thresholds.items())),
    }
    entries = {
        "spec.json": json.dumps(spec, sort_keys=True, indent=1).encode(),
        "vocab.txt": "\n".join(tokens).encode("utf-8"),
        "idf.npy": _array_bytes(model.idf.astype(np.float32)),
        "weights.npy": _array_bytes(model.weights.astype(np.float32)),
        "bias.npy": _array_bytes(model.bias.astype(np.float32)),
    }
    buffer = io.BytesIO()
    with zipfile.ZipFile(buffer, "w") as zf:
        for name, data in entries.items():
            info = zipfile.ZipInfo(name, date_time=_EPOCH)
            info.compress_type = zipfile.ZIP_DEFLATED
            zf.writestr(info, data, compresslevel=9)
    return buffer.getvalue()


def save_model(model: LinearModel, directory: Path) -> Path:
    """Write the model as `model.zip` (deterministic bytes, renamed into place whole) and
    return its path."""
    write_files(directory, [(MODEL_FILE, model_bytes(model))])
    return directory / MODEL_FILE


def _config(raw: Mapping[str, object]) -> FeatureConfig:
    values = dict(raw)
    ngrams = values.get("char_ngrams")
    if isinstance(ngrams, list):
        values["char_ngrams"] = (int(ngrams[0]), int(ngrams[1]))
    return FeatureConfig(**values)  # type: ignore[arg-type]


def load_model(path: Path) -> tuple[LinearModel, str]:
    """The model stored at `path` and its content hash (sha256 of the file)."""
    return model_from_bytes(path.read_bytes())


def shape_problems(
    n_tokens: int,
    idf: npt.NDArray[np.generic],
    weights: npt.NDArray[np.generic],
    bias: npt.NDArray[np.generic],
    heads: Sequence[Head],
) -> list[str]:
    """What makes the stored arrays and heads unable to score (empty when they can): a row of
    weights and an IDF per vocabulary token, a bias per column, and heads of distinct names
    that cover the columns one after another, each with at least two labels and a positive
    finite temperature. A model that breaks one of these loaded and then failed, or scored
    with another head's columns, on every request."""
    if weights.ndim != 2:
        return [f"weights.npy has {weights.ndim} dimensions, not 2 (tokens x outputs)"]
    problems: list[str] = []
    rows, columns = weights.shape
    if rows != n_tokens or idf.shape != (n_tokens,):
        problems.append(
            f"vocab.txt has {n_tokens} tokens but weights.npy {rows} rows and idf.npy "
            f"{idf.shape[0] if idf.ndim == 1 else idf.shape} values"
        )
    if bias.shape != (columns,):
        problems.append(f"bias.npy has shape {bias.shape}, weights.npy {columns} columns")
    names = [head.name for head in heads]
    if len(set(names)) != len(names):
        problems.append(f"head names repeat: {names}")
    start = 0
    for head in heads:
        if head.start != start:
            problems.append(f"head {head.name!r} starts at column {head.start}, not {start}")
        if len(head.labels) < 2:
            problems.append(f"head {head.name!r} has {len(head.labels)} label(s), not 2 or more")
        if not (math.isfinite(head.temperature) and head.temperature > 0):
            problems.append(f"head {head.name!r} has temperature {head.temperature}")
        start = head.stop
    if start != columns:
        problems.append(f"the heads' labels cover {start} columns, weights.npy has {columns}")
    return problems


def model_from_bytes(data: bytes) -> tuple[LinearModel, str]:
    """The model in the bytes of a `model.zip` and their content hash (sha256); ValueError
    naming what is wrong when its arrays and heads do not fit together (`shape_problems`)."""
    with zipfile.ZipFile(io.BytesIO(data)) as zf:
        spec = json.loads(zf.read("spec.json"))
        tokens = zf.read("vocab.txt").decode("utf-8").split("\n")
        arrays = {n: np.load(io.BytesIO(zf.read(f"{n}.npy"))) for n in ("idf", "weights", "bias")}
    heads = tuple(
        Head(h["name"], tuple(h["labels"]), int(h["start"]), float(h["temperature"]))
        for h in spec["heads"]
    )
    problems = shape_problems(len(tokens), arrays["idf"], arrays["weights"], arrays["bias"], heads)
    if problems:
        raise ValueError("; ".join(problems))
    model = LinearModel(
        vocab={t: i for i, t in enumerate(tokens)},
        idf=arrays["idf"],
        weights=np.ascontiguousarray(arrays["weights"]),
        bias=arrays["bias"],
        heads=heads,
        config=_config(spec["config"]),
        thresholds={str(k): float(v) for k, v in spec["thresholds"].items()},
    )
    return model, hashlib.sha256(data).hexdigest()
