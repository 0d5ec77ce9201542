"""Save and load a trained router: `router.joblib` plus `metadata.json` in one directory.

The metadata records the artifact's own SHA-256 and version (its first 12 hex digits), the
training data hash, the models, the router tasks it was trained for, the floor it was calibrated
to, the decision rule, the measured metrics and library versions.
Loading checks the hash before unpickling: only load artifacts you trained or trust.
"""

from __future__ import annotations

import hashlib
import io
import json
import math
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

import joblib

from policies.files import write_files
from policies.learned.decide import ThresholdRule
from policies.learned.predictor import SuccessPredictor

MODEL_FILE = "router.joblib"
METADATA_FILE = "metadata.json"


class ArtifactError(ValueError):
    """The artifact directory is incomplete or its hash does not match its metadata."""


@dataclass(frozen=True)
class CalibratedFloor:
    """The floor the rule was calibrated to: `fraction` x `reference`'s mean `metric` on the
    training rows, which is `quality` in absolute terms (None in format-1 artifacts)."""

    fraction: float
    reference: str
    metric: str
    quality: float | None


@dataclass(frozen=True)
class LoadedRouter:
    """A predictor with its decision rule, its calibrated floor and the metadata JSON text."""

    predictor: SuccessPredictor
    rule: ThresholdRule
    version: str
    metadata_json: str
    floor: CalibratedFloor | None = None

    @property
    def tasks(self) -> tuple[str, ...]:
        """The task labels the predictor was trained on: the only ones it is calibrated for."""
        return self.predictor.featurizer.tasks


def calibrated_floor(metadata: Mapping[str, object]) -> CalibratedFloor | None:
    """The metadata's `floor` block, or None when it has none."""
    floor = metadata.get("floor")
    if not isinstance(floor, dict) or "fraction" not in floor or "reference" not in floor:
        return None
    quality = floor.get("quality")
    return CalibratedFloor(
        fraction=float(floor["fraction"]),
        reference=str(floor["reference"]),
        metric=str(floor.get("metric", "accuracy")),
        quality=float(quality) if quality is not None else None,
    )


def save_artifact(
    directory: Path, predictor: SuccessPredictor, rule: ThresholdRule, metadata: str
) -> str:
    """Write the artifact; `metadata` is a JSON object (text) completed with hash and rule.
    Both files are built in memory and renamed into place, model then metadata
    (`policies.files`): an interrupted write leaves the previous artifact intact."""
    buffer = io.BytesIO()
    joblib.dump({"predictor": predictor, "rule": rule}, buffer, compress=3)
    model = buffer.getvalue()
    digest = hashlib.sha256(model).hexdigest()
    doc = json.loads(metadata)
    doc.update(
        artifact_sha256=digest,
        version=digest[:12],
        rule={
            "candidates": list(rule.candidates),
            "kind": rule.kind,
            # null: no bar can be cleared (calibrated to the reference only, threshold +inf);
            # JSON has no Infinity. The rule itself is loaded from the joblib file.
            "threshold": rule.threshold if math.isfinite(rule.threshold) else None,
            "fallback": rule.fallback,
        },
    )
    text = json.dumps(doc, indent=2, sort_keys=True, allow_nan=False) + "\n"
    write_files(directory, [(MODEL_FILE, model), (METADATA_FILE, text.encode("utf-8"))])
    return digest[:12]


def load_artifact(directory: Path) -> LoadedRouter:
    """Load and verify an artifact written by `save_artifact`."""
    path, meta_path = directory / MODEL_FILE, directory / METADATA_FILE
    if not path.exists() or not meta_path.exists():
        raise ArtifactError(f"{directory} needs {MODEL_FILE} and {METADATA_FILE}")
    try:
        text = meta_path.read_text(encoding="utf-8")
        metadata = json.loads(text)
    except (UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise ArtifactError(f"{meta_path} is not JSON: {exc}") from None
    if not isinstance(metadata, dict):
        raise ArtifactError(f"{meta_path} is not a JSON object")
    expected = str(metadata.get("artifact_sha256", ""))
    if hashlib.sha256(path.read_bytes()).hexdigest() != expected:
        raise ArtifactError(f"{path} does not match artifact_sha256 in {meta_path}")
    try:
        bundle = joblib.load(path)
    except Exception as exc:  # a file joblib cannot read raises whatever its unpickler hits
        raise ArtifactError(f"{path} cannot be loaded: {type(exc).__name__}") from None
    predictor = bundle.get("predictor") if isinstance(bundle, dict) else None
    rule = bundle.get("rule") if isinstance(bundle, dict) else None
    if not isinstance(predictor, SuccessPredictor) or not isinstance(rule, ThresholdRule):
        raise ArtifactError(f"{path} does not hold a SuccessPredictor and a ThresholdRule")
    try:
        floor = calibrated_floor(metadata)
    except (TypeError, ValueError) as exc:  # a hand edit: `"fraction": null`, a word for a number
        raise ArtifactError(f"{meta_path}: its floor block cannot be read ({exc})") from None
    return LoadedRouter(predictor, rule, expected[:12], text, floor)
