"""An artifact that is not the model the classifier reads is refused when it is loaded, with a
ConfigError naming what is wrong: one whose task labels were stored in another order loaded and
served other labels (the probabilities are read by position), one without the `risk_high`
threshold loaded and then raised KeyError on every request (the classifier audit of
2026-12-07)."""

from __future__ import annotations

import io
import json
import zipfile
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from router.classify import load_classifier
from router.classify.classifier import ARTIFACT_DIR
from router.classify.linear import MODEL_FILE
from router.errors import ConfigError

Spec = dict[str, Any]
Arrays = dict[str, np.ndarray]


def _rewritten(out: Path, edit: Callable[[Spec, Arrays], None]) -> Path:
    """The shipped `model.zip` with `edit` applied to its spec and arrays, written to `out`."""
    with zipfile.ZipFile(ARTIFACT_DIR / MODEL_FILE) as shipped:
        files = {name: shipped.read(name) for name in shipped.namelist()}
    spec = json.loads(files["spec.json"])
    arrays = {name: np.load(io.BytesIO(files[f"{name}.npy"])) for name in ("weights", "bias")}
    edit(spec, arrays)
    files["spec.json"] = json.dumps(spec).encode()
    for name, array in arrays.items():
        buffer = io.BytesIO()
        np.save(buffer, array)
        files[f"{name}.npy"] = buffer.getvalue()
    with zipfile.ZipFile(out, "w") as rewritten:
        for name, data in files.items():
            rewritten.writestr(name, data)
    return out


def _head(spec: Spec, name: str) -> Spec:
    head: Spec = next(h for h in spec["heads"] if h["name"] == name)
    return head


def _task_labels_swapped(spec: Spec, arrays: Arrays) -> None:
    """The same model with `chat` and `code` stored the other way round, columns and all."""
    head = _head(spec, "task")
    labels = head["labels"]
    i, j = labels.index("chat"), labels.index("code")
    labels[i], labels[j] = labels[j], labels[i]
    a, b = head["start"] + i, head["start"] + j
    arrays["weights"][:, [a, b]] = arrays["weights"][:, [b, a]]
    arrays["bias"][[a, b]] = arrays["bias"][[b, a]]


def _no_risk_high_threshold(spec: Spec, arrays: Arrays) -> None:
    del spec["thresholds"]["risk_high"]


def _jailbreak_head_renamed(spec: Spec, arrays: Arrays) -> None:
    _head(spec, "jailbreak")["name"] = "injection"


def _a_bias_short(spec: Spec, arrays: Arrays) -> None:
    arrays["bias"] = arrays["bias"][:-1]


def _risk_head_misplaced(spec: Spec, arrays: Arrays) -> None:
    _head(spec, "risk")["start"] += 1


@pytest.mark.parametrize(
    ("edit", "named"),
    [
        (_task_labels_swapped, "the 'task' head's labels are ['code'"),
        (_no_risk_high_threshold, "no 'risk_high' threshold"),
        (_jailbreak_head_renamed, "no 'jailbreak' head"),
        (_a_bias_short, "bias.npy has shape"),
        (_risk_head_misplaced, "head 'risk' starts at column 12, not 11"),
    ],
)
def test_an_artifact_the_classifier_cannot_read_is_refused_at_load(
    tmp_path: Path, edit: Callable[[Spec, Arrays], None], named: str
) -> None:
    path = _rewritten(tmp_path / MODEL_FILE, edit)
    with pytest.raises(ConfigError) as refused:
        load_classifier(path)
    (problem, *_) = refused.value.problems
    assert problem.startswith(f"classifier artifact {path}: ")
    assert named in problem


def test_the_shipped_artifact_rewritten_unchanged_loads(tmp_path: Path) -> None:
    """The rewriting itself breaks nothing: only the edits are refused."""
    assert load_classifier(_rewritten(tmp_path / MODEL_FILE, lambda spec, arrays: None))
