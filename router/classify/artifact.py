"""Train from data files and write the versioned artifact: `model.zip` plus `metadata.json`.

The metadata records what produced the model (data files and their hash, row counts per
source, options, library versions) and how good it is (cross-validated on the training rows
and, when held-out files are given, on them). The fitting itself lives in `training`.
"""

from __future__ import annotations

import collections
import dataclasses
import json
import platform
from collections.abc import Sequence
from dataclasses import asdict
from pathlib import Path

import numpy as np
import scipy
import sklearn
from sklearn.metrics import f1_score

from policies.files import write_files
from policies.labels import RISKS, SIGNALS, TASKS
from router.classify.classifier import LinearClassifier
from router.classify.data import DataError, Example, files_hash, read_examples
from router.classify.evaluation import evaluate
from router.classify.features import FeatureConfig
from router.classify.linear import MODEL_FILE, model_bytes, model_from_bytes
from router.classify.report import summary
from router.classify.training import Estimator, TrainOptions, TrainResult, train

METADATA_FILE = "metadata.json"


def read_all(paths: Sequence[Path]) -> list[Example]:
    """The examples of every file, in order."""
    return [example for path in paths for example in read_examples(path)]


def read_some(paths: Sequence[Path]) -> list[Example]:
    """`read_all`, refusing (DataError) when the files hold no row at all."""
    examples = read_all(paths)
    if not examples:
        raise DataError(f"no rows in {', '.join(str(p) for p in paths)}")
    return examples


def _cv_metrics(result: TrainResult) -> dict[str, float]:
    y, probs = result.oof.targets, result.oof.probs
    return {
        "task_macro_f1": round(
            float(f1_score(y["task"], probs["task"].argmax(1), average="macro")), 4
        ),
        "risk_macro_f1": round(
            float(f1_score(y["risk"], probs["risk"].argmax(1), average="macro")), 4
        ),
        "jailbreak_f1": round(float(f1_score(y["jailbreak"], probs["jailbreak"].argmax(1))), 4),
    }


def metadata(
    result: TrainResult,
    data: Sequence[Path],
    examples: Sequence[Example],
    options: TrainOptions,
    held_out: dict[str, object] | None,
    version: str,
) -> dict[str, object]:
    """Everything about the artifact that is not the model itself."""
    return {
        "version": version,
        "data": {
            "files": [p.as_posix() for p in data],
            "sha256": files_hash(data),
            "rows": len(examples),
            "rows_after_augmentation": result.n_augmented,
            "sources": dict(sorted(collections.Counter(e.source for e in examples).items())),
        },
        "labels": {"task": list(TASKS), "risk": list(RISKS), "signals": list(SIGNALS)},
        "options": {**asdict(options), "features": asdict(options.features)},
        "model": {
            "features": len(result.model.vocab),
            "temperatures": {h.name: round(h.temperature, 4) for h in result.model.heads},
            "thresholds": dict(result.model.thresholds),
        },
        "metrics": {"cross_validated": _cv_metrics(result), "held_out": held_out},
        "libraries": {
            "python": platform.python_version(),
            "numpy": np.__version__,
            "scipy": scipy.__version__,
            "scikit-learn": sklearn.__version__,
        },
    }


def train_and_write(
    data: Sequence[Path],
    out: Path,
    evals: Sequence[Path],
    estimator: Estimator,
    char_ngrams: bool,
    augment: bool,
    seed: int,
    c: float = 0.5,
    min_df: int = 10,
    head_chars: int | None = None,
    tail_chars: int | None = None,
) -> Path:
    """Train on `data`, write `out/model.zip` and `out/metadata.json` (atomically, metadata
    last), return the model path
    (`head_chars`/`tail_chars`: the model's window when not `FeatureConfig`'s)."""
    examples = read_some(data)
    config = FeatureConfig(char_ngrams=(2, 4) if char_ngrams else None)
    if head_chars is not None:
        config = dataclasses.replace(config, head_chars=head_chars)
    if tail_chars is not None:
        config = dataclasses.replace(config, tail_chars=tail_chars)
    options = TrainOptions(
        estimator=estimator, features=config, seed=seed, augment=augment, c=c, min_df=min_df
    )
    result = train(examples, options)
    model_zip = model_bytes(result.model)
    model, version = model_from_bytes(model_zip)
    held_out = None
    if evals:
        held_out = summary(evaluate(LinearClassifier(model, version), read_some(evals)))
    meta = metadata(result, data, examples, options, held_out, version)
    text = json.dumps(meta, indent=1, ensure_ascii=False) + "\n"
    # Nothing is written until everything is computed; then model, metadata last, each
    # renamed into place whole: an interrupted run leaves the previous artifact as it was.
    write_files(out, [(MODEL_FILE, model_zip), (METADATA_FILE, text.encode("utf-8"))])
    return out / MODEL_FILE
