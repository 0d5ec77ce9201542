"""The artifact `train-router` saves routes held-out prompts exactly as offline replay does.

Trained on two thirds of a real ZeroEval GSM8K slice, loaded back the way the router loads it
(`load_artifact`, then `predict` and `choose` per request with the task label the router
passes, `math`, as `router.decide` does), and compared on the other third with
`evals.floor.route_fold` fitted and calibrated on the same rows.
"""

from __future__ import annotations

import gzip
import json
from collections.abc import Mapping

import numpy as np
import pytest

from evals.calibrate import Calibration
from evals.floor import FloorSpec, FoldRouting, route_fold
from evals.outcomes import MULTI_DIR, OutcomeTable, load_table
from evals.routers import FitConfig, workspace
from evals.task_map import with_labels
from evals.train_router import TrainRequest, shipped_rule, train
from policies.learned.artifact import LoadedRouter, load_artifact
from policies.learned.decide import ThresholdRule, choose
from tests.evals.conftest import write_slice

Replayed = tuple[OutcomeTable, np.ndarray, FoldRouting, LoadedRouter]


@pytest.fixture(scope="module")
def replayed(tmp_path_factory: pytest.TempPathFactory) -> Replayed:
    """(table, held-out rows, offline routing of them, the saved artifact trained on the rest)."""
    base = tmp_path_factory.mktemp("zgsm8k")
    source = write_slice(MULTI_DIR / "zeroeval_math_code.jsonl.gz", base / "all", 3,
                         keep='"benchmark": "gsm8k"')
    table = with_labels(load_table(source, benchmark="gsm8k", priced_only=True), "router")
    rows = np.arange(len(table), dtype=np.int64)
    train_rows, test_rows = rows[rows % 3 != 0], rows[rows % 3 == 0]
    keep = {table.ids[int(i)] for i in train_rows}
    train_file = base / "train" / source.name
    train_file.parent.mkdir()
    (train_file.parent / "models.json").write_bytes((source.parent / "models.json").read_bytes())
    with gzip.open(source, "rt", encoding="utf-8") as src, gzip.open(train_file, "wt") as out:
        out.writelines(line for line in src if str(json.loads(line)["id"]) in keep)
    out_dir = base / "artifact"
    train(TrainRequest(outcomes=train_file, out=out_dir, benchmark="gsm8k", folds=2))
    config = FitConfig(seed=0)
    offline = route_fold(workspace(table, config.features), train_rows, test_rows, FloorSpec(),
                         config, np.random.default_rng(0))
    return table, test_rows, offline, load_artifact(out_dir)


def test_saved_artifact_routes_held_out_rows_like_offline_replay(replayed: Replayed) -> None:
    """Every held-out prompt goes to the same model, so quality and floor are the same too,
    except a prompt whose predicted probability sits on the bar itself (the artifact's and the
    replay's predictions are the same up to float rounding, about 1e-7)."""
    table, test_rows, offline, router = replayed
    assert router.tasks == ("math",)
    predicted = [router.predictor.predict(table.texts[int(i)], "math") for i in test_rows]
    online = [choose(router.rule, probs) for probs in predicted]
    expected = [table.models[int(j)] for j in offline.chosen]
    differ = [k for k, (a, b) in enumerate(zip(online, expected, strict=True)) if a != b]
    assert all(_on_the_bar(router.rule, predicted[k]) for k in differ)
    assert len(differ) <= 0.01 * len(online)


def _on_the_bar(rule: ThresholdRule, probs: Mapping[str, float]) -> bool:
    bar = rule.threshold
    if rule.kind == "margin":
        bar = max(probs[m] for m in rule.candidates) - rule.threshold
    return any(abs(probs[m] - bar) < 1e-5 for m in rule.candidates)


def test_saved_rule_lists_only_the_calibrated_candidates(replayed: Replayed) -> None:
    """The artifact's candidates are the fold's order cut at the calibrated start."""
    table, _, offline, router = replayed
    order = [table.models[j] for j in offline.candidates]
    assert list(router.rule.candidates) == order[offline.calibration.start:]
    assert router.rule.threshold == pytest.approx(offline.calibration.threshold, rel=1e-5)


def test_shipped_rule_drops_candidates_below_the_calibrated_start() -> None:
    """A calibration that starts at the third candidate ships a rule that never tries the first
    two (they were ruled out: routing to them broke the floor on calibration rows)."""
    cal = Calibration("absolute", 0.4, 2, 0.9, 0.01, 0.001)
    rule = shipped_rule(("cheap", "cheaper-still", "mid", "ref"), "ref", cal)
    assert rule.candidates == ("mid", "ref")
    assert choose(rule, {"cheap": 0.99, "cheaper-still": 0.99, "mid": 0.5, "ref": 0.9}) == "mid"


def test_metadata_reports_the_shipped_rules_check_on_held_out_rows(replayed: Replayed) -> None:
    """The shipped threshold's check on calibration rows it was not selected on is recorded."""
    _, _, offline, router = replayed
    check = json.loads(router.metadata_json)["calibration"]
    assert check["outcome"] == offline.calibration.outcome
    assert check["check_rows"] == offline.calibration.check_rows > 0
    if check["outcome"] == "confirmed":
        assert check["check_lower_margin"] >= 0.0
