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
from collections import Counter
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass, field
from itertools import repeat
from pathlib import Path
from typing import Final

import numpy as np
import numpy.typing as npt

from router.classify.features import FeatureConfig

Floats = npt.NDArray[np.float32]
MODEL_FILE = "model.zip"
_EPOCH = (1980, 1, 1, 0, 0, 0)


_TF_SIZE: Final = 4096
_TF: Final = tuple(1.0 + math.log(c) if c else 0.0 for c in range(_TF_SIZE))


def _tf(count: int) -> float:
    """The term frequency of sublinear TF-IDF, 1 + ln(count) (`_TF[count]` below `_TF_SIZE`)."""
    return 1.0 + math.log(count)


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
    _table: npt.NDArray[np.float64] = field(init=False, repr=False, compare=False)
    _bias: tuple[float, ...] = field(init=False, repr=False, compare=False)
    _spans: tuple[tuple[str, int, int, float], ...] = field(
        init=False, repr=False, compare=False
    )

    def __post_init__(self) -> None:
        # Token ids shifted by one, so `filter(None, ...)` drops unknown tokens in C; row 0 of
        # the table is the (never used) unknown row. Row i + 1 holds idf_i * weights_i in
        # float64 and, in the last column, idf_i ** 2 (the squared norm of a token seen once).
        idf = self.idf.astype(np.float64)
        n_out = self.weights.shape[1]
        table = np.zeros((len(idf) + 1, n_out + 1), dtype=np.float64)
        table[1:, :n_out] = idf[:, None] * self.weights.astype(np.float64)
        table[1:, n_out] = idf * idf
        spans = tuple((h.name, h.start, h.stop, float(h.temperature)) for h in self.heads)
        object.__setattr__(self, "_ids", {t: i + 1 for t, i in self.vocab.items()})
        object.__setattr__(self, "_table", table)
        object.__setattr__(self, "_bias", tuple(self.bias.astype(np.float64).tolist()))
        object.__setattr__(self, "_spans", spans)

    def head(self, name: str) -> Head:
        """The head called `name` (KeyError when absent)."""
        for head in self.heads:
            if head.name == name:
                return head
        raise KeyError(name)

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
        counts = Counter(filter(None, map(self._ids.get, tokens)))
        if not counts:
            raw = self._bias
        else:
            n = len(counts)
            rows = self._table.take(np.fromiter(counts, np.intp, n), axis=0)
            top = max(counts.values())
            if top == 1:
                sums = np.add.reduce(rows, axis=0).tolist()
                norm = math.sqrt(sums[-1])
            else:
                tf = np.empty((2, n))
                tf[0] = list(map(_TF.__getitem__ if top < _TF_SIZE else _tf, counts.values()))
                np.multiply(tf[0], tf[0], out=tf[1])
                both = tf @ rows
                sums = both[0].tolist()
                norm = math.sqrt(float(both[1, -1]))
            raw = tuple([s / norm + b for s, b in zip(sums, self._bias, strict=False)])
        probs: dict[str, tuple[float, ...]] = {}
        exp = math.exp
        for name, start, stop, temperature in self._spans:
            z = [x / temperature for x in raw[start:stop]]
            peak = max(z)
            e = [exp(x - peak) for x in z]
            total = sum(e)
            probs[name] = tuple([x / total for x in e])
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


def save_model(model: LinearModel, directory: Path) -> Path:
    """Write the model as `model.zip` (deterministic bytes) and return its path."""
    directory.mkdir(parents=True, exist_ok=True)
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
    path = directory / MODEL_FILE
    with zipfile.ZipFile(path, "w") as zf:
        for name, data in entries.items():
            info = zipfile.ZipInfo(name, date_time=_EPOCH)
            info.compress_type = zipfile.ZIP_DEFLATED
            zf.writestr(info, data, compresslevel=9)
    return path


def _config(raw: Mapping[str, object]) -> FeatureConfig:
    values = dict(raw)
    ngrams = values.get("char_ngrams")
    if isinstance(ngrams, list):
        values["char_ngrams"] = (int(ngrams[0]), int(ngrams[1]))
    return FeatureConfig(**values)  # type: ignore[arg-type]


def load_model(path: Path) -> tuple[LinearModel, str]:
    """The model stored at `path` and its content hash (sha256 of the file)."""
    data = path.read_bytes()
    with zipfile.ZipFile(io.BytesIO(data)) as zf:
        spec = json.loads(zf.read("spec.json"))
        tokens = zf.read("vocab.txt").decode("utf-8").split("\n")
        arrays = {n: np.load(io.BytesIO(zf.read(f"{n}.npy"))) for n in ("idf", "weights", "bias")}
    heads = tuple(
        Head(h["name"], tuple(h["labels"]), int(h["start"]), float(h["temperature"]))
        for h in spec["heads"]
    )
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
