"""`--relative-to` names the floor's reference only, and an artifact trained on several tasks
records (and is checked against) a floor per task."""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path
from typing import Any

import pytest

from policies.learned.artifact import load_artifact
from policies.learned_checks import PolicyUse, artifact_problems
from policies.schema import QualityFloor, TaskPolicy
from router.cli import main
from tests.evals.conftest import write_synthetic

TWO_PRICES = {"big": (10.0, 30.0), "small": (0.1, 0.1)}


def _two_models(n: int) -> list[dict[str, float]]:
    """big right on 9 rows in 10, small on 2 in 3: big is the strong model."""
    return [{"big": float(i % 10 != 0), "small": float(i % 3 != 0)} for i in range(n)]


def _json(argv: list[str], capsys: pytest.CaptureFixture[str]) -> dict[str, Any]:
    assert main(argv) == 0
    return dict(json.loads(capsys.readouterr().out))


def test_relative_to_leaves_strong_and_weak_to_quality(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """`--relative-to small` made small the curve's "strong" model (APGR of the swapped pair)
    and `strong_share` was the reference's share."""
    path = write_synthetic(tmp_path, _two_models(240), TWO_PRICES)
    argv = ["eval", "replay", "--dataset", str(path), "--folds", "2", "--floor", "0.95",
            "--json", "--jobs", "1"]
    plain = _json(argv, capsys)
    pinned = _json([*argv, "--relative-to", "small"], capsys)
    assert (pinned["strong"], pinned["weak"]) == ("big", "small")
    assert pinned["apgr"] == plain["apgr"] and pinned["curve"] == plain["curve"]
    assert pinned["references"] == ["small"] and plain["references"] == ["big"]
    for out in (plain, pinned):
        assert out["strong_share"] == out["shares"].get("big", 0.0)
    assert pinned["reference_share"] == pinned["shares"].get("small", 0.0)
    assert plain["reference_share"] == plain["shares"].get("big", 0.0)


def test_train_router_metrics_keep_the_strong_model_with_relative_to(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """train-router's metadata metrics replayed the pair with the reference as "strong"."""
    path = write_synthetic(tmp_path / "data", _two_models(240), TWO_PRICES)
    replay = _json(["eval", "replay", "--dataset", str(path), "--folds", "2", "--json",
                    "--jobs", "1"], capsys)
    out = tmp_path / "art"
    assert main(["train-router", "--outcomes", str(path), "--out", str(out), "--folds", "2",
                 "--relative-to", "small"]) == 0
    capsys.readouterr()
    metrics = json.loads((out / "metadata.json").read_text())["metrics"]
    assert metrics["apgr"] == replay["apgr"]
    assert metrics["strong_share"] == metrics["shares"].get("big", 0.0)
    assert metrics["reference_share"] == metrics["shares"].get("small", 0.0)


def _two_tasks(path: Path) -> Path:
    """The first 120 rows relabelled as MMLU (task reasoning_analysis), where big is always
    right; on the other 120 (GSM8K, task math) big is right on half."""
    rows = [json.loads(line) for line in path.read_text().splitlines()]
    for i, row in enumerate(rows):
        if i < 120:
            row.update(id=f"mmlu/{i}", benchmark="mmlu", category="x")
            row["scores"]["big"] = 1.0
        else:
            row["scores"]["big"] = float(i % 2)
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return path


@pytest.fixture(scope="module")
def two_task_artifact(tmp_path_factory: pytest.TempPathFactory) -> Path:
    base = tmp_path_factory.mktemp("tasks")
    path = _two_tasks(write_synthetic(base / "data", _two_models(240), TWO_PRICES))
    out = base / "art"
    assert main(["train-router", "--outcomes", str(path), "--out", str(out), "--folds", "2"]) == 0
    return out


def _use(task: str, minimum: float) -> PolicyUse:
    policy = TaskPolicy(candidates=("small", "big"), learned_router="art",
                        quality_floor=QualityFloor(min=minimum))
    return PolicyUse(f"policies.tasks.{task}", (task,), policy)  # type: ignore[arg-type]


def test_train_router_records_the_floor_of_each_task(two_task_artifact: Path) -> None:
    floor = json.loads((two_task_artifact / "metadata.json").read_text())["floor"]
    assert floor["reference"] == "big" and floor["quality"] == pytest.approx(0.95 * 0.75)
    assert floor["by_task"] == {
        "math": {"benchmarks": ["gsm8k"], "rows": 120, "reference_quality": 0.5,
                 "quality": pytest.approx(0.95 * 0.5)},
        "reasoning_analysis": {"benchmarks": ["mmlu"], "rows": 120, "reference_quality": 1.0,
                               "quality": pytest.approx(0.95)},
    }


def test_an_absolute_floor_is_checked_against_its_own_tasks_floor(
        two_task_artifact: Path) -> None:
    """Pooled over both tasks (0.7125) the artifact passed a math `min: 0.6` that its math
    floor (0.475) misses."""
    router = load_artifact(two_task_artifact)
    assert router.floor is not None and router.floor.quality is not None
    assert router.floor.quality > 0.6
    problems = artifact_problems("art", router, [_use("math", 0.6)])
    assert problems == ["learned_router art (used by policies.tasks.math): calibrated to 0.95 x "
                        "big = 0.4750 on its math training rows, below the policy's floor of "
                        "min 0.6"]
    assert artifact_problems("art", router, [_use("math", 0.4),
                                             _use("reasoning_analysis", 0.9)]) == []


def test_a_task_without_a_recorded_floor_is_refused(two_task_artifact: Path) -> None:
    """A policy whose task the artifact was not trained for, or an artifact from before the
    per-task floors (only the pooled number), cannot vouch for an absolute floor."""
    router = load_artifact(two_task_artifact)
    covers_none, other = artifact_problems("art", router, [_use("code", 0.1)])
    assert "none of the tasks its policies serve ['code']" in covers_none
    assert "no calibrated floor for the policy's tasks ['code']" in other
    meta = json.loads(router.metadata_json)
    del meta["floor"]["by_task"]
    old = dataclasses.replace(router, metadata_json=json.dumps(meta))
    [pooled] = artifact_problems("art", old, [_use("math", 0.1)])
    assert "pooled over tasks ['math', 'reasoning_analysis'], with no floor per task" in pooled
