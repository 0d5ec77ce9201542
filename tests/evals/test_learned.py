"""The learned router on real rows: predictions, decision rule, artifact round trip, speed path."""

from __future__ import annotations

import json
import math
from pathlib import Path

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from evals.outcomes import load_table
from policies.learned.artifact import ArtifactError, load_artifact, save_artifact
from policies.learned.decide import ThresholdRule, choose, choose_available, choose_matrix
from policies.learned.predictor import SuccessPredictor, fit_predictor

Fitted = tuple[SuccessPredictor, list[str], list[str]]


@pytest.fixture(scope="module")
def fitted(mmlu_slice: Path) -> Fitted:
    """A predictor fitted on a real MMLU slice, with the slice's texts and tasks."""
    table = load_table(mmlu_slice)
    texts, tasks = list(table.texts), list(table.categories)
    return fit_predictor(texts, tasks, table.scores, table.models), texts, tasks


def test_predict_gives_probability_per_candidate(
    fitted: Fitted,
) -> None:
    """`predict` maps every model to a probability equal to the batch prediction."""
    predictor, texts, tasks = fitted
    one = predictor.predict(texts[0], tasks[0])
    batch = predictor.predict_matrix(texts[:3], tasks[:3])
    assert set(one) == set(predictor.models)
    assert all(0.0 < p < 1.0 for p in one.values())
    assert np.allclose([one[m] for m in predictor.models], batch[0])


def test_strong_model_predicted_better_on_average(
    fitted: Fitted,
) -> None:
    """Mean predicted success ranks the models like their observed accuracy on the slice."""
    predictor, texts, tasks = fitted
    probs = predictor.predict_matrix(texts, tasks).mean(axis=0)
    observed = fitted_scores(texts, tasks, predictor)
    assert np.argmax(probs) == np.argmax(observed)


def fitted_scores(texts: list[str], tasks: list[str], predictor: SuccessPredictor) -> np.ndarray:
    """Observed mean score per model, recomputed from the featurizer's task rates prior."""
    return predictor.featurizer.task_rates[-1]


def test_unknown_task_still_predicts(fitted: Fitted) -> None:
    """A task never seen in training falls back to the overall rates."""
    predictor, texts, _ = fitted
    probs = predictor.predict(texts[0], "never-seen-task")
    assert all(0.0 < p < 1.0 for p in probs.values())


def test_choose_takes_cheapest_clearing_bar() -> None:
    """Absolute bar: the first (cheapest) candidate at or above it; none: the fallback."""
    rule = ThresholdRule(("cheap", "mid", "dear"), "absolute", 0.7, "dear")
    assert choose(rule, {"cheap": 0.5, "mid": 0.75, "dear": 0.9}) == "mid"
    assert choose(rule, {"cheap": 0.1, "mid": 0.2, "dear": 0.3}) == "dear"
    margin = ThresholdRule(("cheap", "dear"), "margin", 0.1, "dear")
    assert choose(margin, {"cheap": 0.85, "dear": 0.9}) == "cheap"
    assert choose(margin, {"cheap": 0.7, "dear": 0.9}) == "dear"


def test_an_unavailable_pick_goes_to_the_next_that_clears_then_the_likeliest() -> None:
    """With the rule's pick unavailable (ineligible for this request, its circuit open), the
    next available model that clears the same bar serves, then the fallback, then the available
    model most likely to succeed: the policy's own order sent such prompts to the cheapest,
    the weakest (the eval audit). The margin bar stays the one over every candidate."""
    rule = ThresholdRule(("cheap", "mid", "strong", "dear"), "absolute", 0.7, "dear")
    probs = {"cheap": 0.2, "mid": 0.5, "strong": 0.9, "dear": 0.95}
    assert choose_available(rule, probs, {"cheap", "mid", "strong", "dear"}) == "strong"
    assert choose_available(rule, probs, {"cheap", "mid", "dear"}) == "dear"  # the fallback
    assert choose_available(rule, probs, {"cheap", "mid"}) == "mid"  # likeliest, not cheapest
    assert choose_available(rule, probs, set()) is None
    margin = ThresholdRule(("cheap", "dear"), "margin", 0.1, "dear")
    assert choose_available(margin, {"cheap": 0.7, "dear": 0.9}, {"cheap"}) == "cheap"
    assert choose_available(margin, {"cheap": 0.85, "dear": 0.9}, {"cheap", "dear"}) == "cheap"


@settings(max_examples=60, deadline=None)
@given(
    st.lists(st.lists(st.floats(0, 1), min_size=3, max_size=3), min_size=1, max_size=20),
    st.floats(0, 1),
    st.sampled_from(["absolute", "margin"]),
)
def test_choose_matrix_agrees_with_choose(rows: list[list[float]], bar: float, kind: str) -> None:
    """The vectorised rule picks the same model as the per-request rule on every row."""
    names = ("a", "b", "c")
    order = np.array([2, 0, 1], dtype=np.int64)  # c cheapest, then a, then b
    rule = ThresholdRule(tuple(names[j] for j in order), kind, bar, "b")  # type: ignore[arg-type]
    chosen = choose_matrix(np.array(rows), order, kind, bar, 1)  # type: ignore[arg-type]
    for row, col in zip(rows, chosen, strict=True):
        assert names[int(col)] == choose(rule, dict(zip(names, row, strict=True)))


def test_artifact_round_trip_and_tamper_check(fitted: Fitted, tmp_path: Path) -> None:
    """A saved artifact loads with the same predictions; a modified file is refused."""
    predictor, texts, tasks = fitted
    rule = ThresholdRule(predictor.models, "margin", 0.1, predictor.models[0])
    version = save_artifact(tmp_path, predictor, rule, json.dumps({"data": {"sha256": "x"}}))
    loaded = load_artifact(tmp_path)
    assert loaded.version == version and loaded.rule == rule
    assert np.allclose(
        loaded.predictor.predict_matrix(texts[:5], tasks[:5]),
        predictor.predict_matrix(texts[:5], tasks[:5]),
    )
    with (tmp_path / "router.joblib").open("ab") as fh:
        fh.write(b"tampered")
    with pytest.raises(ArtifactError):
        load_artifact(tmp_path)


def test_two_fits_on_the_same_rows_are_identical(gsm8k_slice: Path) -> None:
    """liblinear's dual solver shuffles rows with an unseeded generator: two fits differed in
    the 6th decimal. Every coefficient is now bit-identical."""
    table = load_table(gsm8k_slice).take(np.arange(200, dtype=np.int64))
    first, second = (fit_predictor(table.texts, table.categories, table.scores, table.models)
                     for _ in range(2))
    assert np.any(first.coef != 0.0)
    assert np.array_equal(first.coef, second.coef)
    assert np.array_equal(first.intercept, second.intercept)


def _strict_json(text: str) -> object:
    """Parse as strict JSON: Infinity and NaN are not JSON (Python's json accepts them)."""
    def refuse(constant: str) -> object:
        raise ValueError(f"not JSON: {constant}")
    return json.loads(text, parse_constant=refuse)


def test_a_reference_only_rule_writes_valid_json_and_loads(fitted: Fitted, tmp_path: Path) -> None:
    """Calibration's "reference only" rule has threshold +inf, written as `Infinity` (not
    JSON) into metadata.json. It is null there now, and the artifact loads the same rule."""
    predictor, texts, tasks = fitted
    rule = ThresholdRule(predictor.models, "absolute", math.inf, predictor.models[-1])
    save_artifact(tmp_path, predictor, rule, json.dumps({"data": {"sha256": "x"}}))
    meta = _strict_json((tmp_path / "metadata.json").read_text())
    assert isinstance(meta, dict) and meta["rule"]["threshold"] is None
    loaded = load_artifact(tmp_path)
    assert loaded.rule == rule
    probs = loaded.predictor.predict(texts[0], tasks[0])
    assert choose(loaded.rule, probs) == predictor.models[-1]


def test_an_interrupted_save_leaves_the_previous_artifact(
    fitted: Fitted, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """save_artifact dumped the model straight over router.joblib: an interruption left a
    truncated file in place of the previous model. It is built in memory and renamed in."""
    predictor, _, _ = fitted
    rule = ThresholdRule(predictor.models, "margin", 0.1, predictor.models[0])
    version = save_artifact(tmp_path, predictor, rule, json.dumps({"n": 1}))
    before = {p.name: p.read_bytes() for p in tmp_path.iterdir()}

    def interrupted(value: object, target: object, **kwargs: object) -> None:
        if isinstance(target, str | Path):
            Path(target).write_bytes(b"partial")
        else:
            target.write(b"partial")  # type: ignore[attr-defined]
        raise KeyboardInterrupt

    monkeypatch.setattr("policies.learned.artifact.joblib.dump", interrupted)
    other = ThresholdRule(predictor.models, "margin", 0.2, predictor.models[0])
    with pytest.raises(KeyboardInterrupt):
        save_artifact(tmp_path, predictor, other, json.dumps({"n": 2}))
    assert {p.name: p.read_bytes() for p in tmp_path.iterdir()} == before
    assert load_artifact(tmp_path).version == version


def test_write_files_interrupted_on_a_later_file_renames_nothing(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """All files are written to temporary names first: an interruption while writing the
    metadata leaves the old model too, and no temporary file behind."""
    from policies import files

    files.write_files(tmp_path, [("model", b"old model"), ("meta", b"old meta")])
    synced = []

    def fsync(fd: int) -> None:
        synced.append(fd)
        if len(synced) == 2:
            raise KeyboardInterrupt

    monkeypatch.setattr(files.os, "fsync", fsync)
    with pytest.raises(KeyboardInterrupt):
        files.write_files(tmp_path, [("model", b"new model"), ("meta", b"new meta")])
    assert {p.name: p.read_bytes() for p in tmp_path.iterdir()} == {
        "model": b"old model", "meta": b"old meta"}
    monkeypatch.undo()
    files.write_files(tmp_path, [("model", b"new model"), ("meta", b"new meta")])
    assert {p.name: p.read_bytes() for p in tmp_path.iterdir()} == {
        "model": b"new model", "meta": b"new meta"}
