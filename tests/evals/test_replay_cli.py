"""`slorouter eval replay`, `eval transfer` and `train-router` end to end on real slices."""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path

import numpy as np
import pytest

from evals.calibrate import CalibrationData, calibrate
from evals.metrics import wilson_interval
from evals.multi import per_task_choice
from evals.outcomes import load_table
from evals.routers import FitConfig, oof_probs, workspace
from policies.intervals import relative_floor_margin
from router.cli import main
from tests.evals.conftest import write_synthetic
from tests.support.procs import PYTHON, file_size_limit


def _run(argv: list[str], capsys: pytest.CaptureFixture[str]) -> dict[str, object]:
    assert main(argv) == 0
    return dict(json.loads(capsys.readouterr().out))


def test_pair_replay_json_has_metrics_and_floor(
    gsm8k_slice: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Two-model replay prints APGR, CPTs, baselines and floor fields, and draws the plot."""
    plot = tmp_path / "curve.png"
    out = _run(
        [
            "eval",
            "replay",
            "--dataset",
            str(gsm8k_slice),
            "--folds",
            "3",
            "--json",
            "--floor",
            "0.95",
            "--relative-to",
            "gpt-4-1106-preview",
            "--plot",
            str(plot),
            "--jobs",
            "1",
        ],
        capsys,
    )
    for key in (
        "apgr",
        "cpt50",
        "cpt80",
        "quality",
        "strong_share",
        "floor_hold_rate",
        "cost_saving",
    ):
        assert isinstance(out[key], float), key
    assert 0.0 <= float(out["cpt50"]) <= float(out["cpt80"]) <= 1.0  # type: ignore[arg-type]
    assert 0.0 <= float(out["strong_share"]) <= 1.0  # type: ignore[arg-type]
    oracle = out["oracle"]
    assert isinstance(oracle, dict) and oracle["apgr"] >= out["apgr"]
    assert plot.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_multi_replay_reports_strategies_side_by_side(
    crux_slice: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """N-model replay lists per-task floor, per-request and oracle (never costlier than
    always-best, never worse), and plots the strategies."""
    plot = tmp_path / "multi.png"
    argv = ["eval", "replay", "--dataset", str(crux_slice), "--folds", "3", "--json"]
    out = _run([*argv, "--plot", str(plot)], capsys)
    assert plot.read_bytes()[:4] == b"\x89PNG"
    bench = out["benchmarks"][0]  # type: ignore[index]
    by_name = {s["name"]: s for s in bench["strategies"]}
    assert {"per-task-floor", "per-request", "oracle", "always-best"} <= set(by_name)
    assert by_name["oracle"]["quality"] >= by_name["always-best"]["quality"]
    assert by_name["oracle"]["cost_per_1k"] <= by_name["always-best"]["cost_per_1k"]
    assert 0.0 <= bench["floor_hold_rate"] <= 1.0


def test_calibrated_bar_keeps_floor_on_its_own_data(crux_slice: Path) -> None:
    """Calibration returns a bar whose lower-bound margin is non-negative on calibration rows."""
    table = load_table(crux_slice, benchmark="cruxeval", priced_only=True)
    ws = workspace(table, FitConfig().features)
    rows = np.arange(len(table), dtype=np.int64)
    probs = oof_probs(ws, rows, 3, FitConfig(), np.random.default_rng(0))
    order = np.argsort(table.costs.mean(axis=0)).astype(np.int64)
    ref = int(np.argmax(table.scores.mean(axis=0)))
    cal = calibrate(CalibrationData(probs, table.scores, table.costs, order, ref), 0.9, 1.0)
    assert cal.lower_margin >= 0.0
    assert cal.mean_cost <= float(table.costs[:, ref].mean()) + 1e-12


def test_train_router_writes_versioned_artifact(
    mmlu_slice: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """train-router saves a loadable artifact whose metadata names data hash, models, metrics."""
    from evals.outcomes import file_sha256
    from policies.learned.artifact import load_artifact

    out_dir = tmp_path / "artifact"
    assert (
        main(
            [
                "train-router",
                "--outcomes",
                str(mmlu_slice),
                "--out",
                str(out_dir),
                "--folds",
                "2",
                "--relative-to",
                "gpt-4-1106-preview",
            ]
        )
        == 0
    )
    capsys.readouterr()
    loaded = load_artifact(out_dir)
    meta = json.loads(loaded.metadata_json)
    assert meta["data"]["sha256"] == file_sha256(mmlu_slice)
    assert set(meta["models"]) == set(loaded.predictor.models)
    assert "apgr" in meta["metrics"] and "scikit-learn" in meta["libraries"]
    assert loaded.rule.fallback == "gpt-4-1106-preview"


def test_transfer_between_benchmarks_runs(
    mmlu_slice: Path, gsm8k_slice: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """eval transfer trains on one file and scores the other with RouteLLM metrics."""
    out = _run(
        ["eval", "transfer", "--train", str(mmlu_slice), "--test", str(gsm8k_slice), "--json"],
        capsys,
    )
    assert 0.0 <= float(out["cpt50"]) <= 1.0  # type: ignore[arg-type]
    assert len(out["curve"]) == 11  # type: ignore[arg-type]


def test_missing_dataset_is_exit_code_two(tmp_path: Path) -> None:
    """A missing dataset file is a clear error with exit code 2."""
    assert main(["eval", "replay", "--dataset", str(tmp_path / "none.jsonl")]) == 2


THREE_PRICES = {"big": (10.0, 30.0), "mid": (1.0, 2.0), "cheap": (0.1, 0.1)}


def _three_models(n: int) -> list[dict[str, float]]:
    """big always right, mid right on 9 rows in 10, cheap on 4 in 5."""
    return [{"big": 1.0, "mid": float(i % 10 != 0), "cheap": float(i % 5 != 0)}
            for i in range(n)]


def test_per_task_floor_weighs_the_references_uncertainty_as_the_service_does(
        tmp_path: Path) -> None:
    """A candidate whose lower bound clears 0.95 x the reference's mean, but not by both
    results' uncertainty, is refused, as the service's relative floor refuses it
    (`relative_floor_margin`); it was admitted by the service's rule before 2026-12-06."""
    rows = [{"big": float(i % 10 != 0), "cheap": float(i < 358)} for i in range(400)]
    table = load_table(write_synthetic(tmp_path, rows, {"big": (10.0, 10.0), "cheap": (1.0, 1.0)}),
                       priced_only=True)
    big, cheap = table.column("big"), table.column("cheap")
    n = len(table)
    _, big_high = wilson_interval(float(table.scores[:, big].sum()), n)
    cheap_low, _ = wilson_interval(float(table.scores[:, cheap].sum()), n)
    big_mean, cheap_mean = 0.9, 358 / 400
    assert cheap_low >= 0.95 * big_mean  # the old rule's admission
    assert relative_floor_margin(cheap_mean, cheap_low, big_mean, big_high, 0.95) < 0
    assert per_task_choice(table, np.arange(n, dtype=np.int64), [big, cheap], 0.95, big) == big


def test_per_task_floor_follows_the_named_reference(tmp_path: Path) -> None:
    """With --relative-to mid the floor is 0.95 x mid's quality, which mid itself clears:
    the per-task choice took 0.95 x the best model's (big) and fell back to big."""
    path = write_synthetic(tmp_path, _three_models(400), THREE_PRICES)
    table = load_table(path, priced_only=True)
    train = np.arange(len(table), dtype=np.int64)
    cols = list(range(len(table.models)))
    mid = table.column("mid")
    floor = 0.95 * float(table.scores[:, mid].mean())
    low = {m: wilson_interval(float(table.scores[:, table.column(m)].sum()), len(table))[0]
           for m in table.models}
    assert low["mid"] >= floor > low["cheap"]  # the data make mid the answer
    assert per_task_choice(table, train, cols, 0.95, mid) == mid
    # with the best model as reference the same data rightly need big
    assert low["mid"] < 0.95 * 1.0
    assert per_task_choice(table, train, cols, 0.95, table.column("big")) == table.column("big")


def test_multi_replay_relative_to_labels_the_reference(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """The header said "x best single model" and the always-mid row "always-best"."""
    path = write_synthetic(tmp_path, _three_models(500), THREE_PRICES)
    argv = ["eval", "replay", "--dataset", str(path), "--router", "category", "--folds", "5",
            "--relative-to", "mid", "--floor", "0.95"]
    out = _run([*argv, "--json"], capsys)
    bench = out["benchmarks"][0]  # type: ignore[index]
    by_name = {s["name"]: s for s in bench["strategies"]}
    assert "always-best" not in by_name
    assert by_name["always-reference"]["models"] == ["mid"]
    assert by_name["per-task-floor"]["models"] == ["mid"]
    assert main(argv) == 0
    text = capsys.readouterr().out
    assert text.splitlines()[0].endswith("floor=0.95 x mid")
    assert "best" not in text


def test_train_router_twice_writes_the_same_artifact(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Two trainings on the same data gave different artifact versions and thresholds."""
    scores = [{"big": float(i % 10 != 0), "small": float(i % 3 != 0)} for i in range(240)]
    path = write_synthetic(tmp_path / "data", scores, {"big": (10.0, 30.0), "small": (0.1, 0.1)})
    metas = []
    for name in ("a", "b"):
        assert main(["train-router", "--outcomes", str(path), "--out", str(tmp_path / name),
                     "--folds", "2"]) == 0
        metas.append((tmp_path / name / "metadata.json").read_text())
    capsys.readouterr()
    assert metas[0] == metas[1]
    assert (tmp_path / "a" / "router.joblib").read_bytes() == (
        tmp_path / "b" / "router.joblib").read_bytes()


def test_json_has_the_same_floor_keys_with_and_without_floor(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """docs/evals.md lists `thresholds` as null without --floor, but the key was missing."""
    scores = [{"big": float(i % 10 != 0), "small": float(i % 3 != 0)} for i in range(80)]
    path = write_synthetic(tmp_path, scores, {"big": (10.0, 30.0), "small": (0.1, 0.1)})
    argv = ["eval", "replay", "--dataset", str(path), "--router", "category", "--folds", "2",
            "--json"]
    plain, floored = _run(argv, capsys), _run([*argv, "--floor", "0.95"], capsys)
    assert set(plain) == set(floored)
    floor_keys = ("quality", "strong_share", "floor_hold_rate", "cost_saving", "floor",
                  "reference_quality", "cost_per_1k", "reference_cost_per_1k", "shares",
                  "references", "thresholds")
    assert all(plain[k] is None for k in floor_keys)
    assert floored["references"] == ["big"] and len(floored["thresholds"]) == 2  # type: ignore[arg-type]



def test_a_plot_that_cannot_be_written_leaves_the_previous_one_and_the_report(
    gsm8k_slice: Path, tmp_path: Path
) -> None:
    """The plot's write fails part way: the previous image is still whole, the report is
    printed all the same, and the command says so in one line and exits 2 (it wrote a
    truncated image over the previous one and ended in a traceback, with no report)."""
    plot = tmp_path / "curve.png"
    assert main(["eval", "replay", "--dataset", str(gsm8k_slice), "--folds", "2", "--jobs",
                 "1", "--plot", str(plot)]) == 0
    previous = plot.read_bytes()
    assert previous[:8] == b"\x89PNG\r\n\x1a\n"
    done = subprocess.run(
        [PYTHON, "-m", "router.cli", "eval", "replay", "--dataset", str(gsm8k_slice),
         "--folds", "2", "--jobs", "1", "--json", "--plot", str(plot)],
        capture_output=True, text=True, timeout=300, env=dict(os.environ),
        preexec_fn=lambda: file_size_limit(len(previous) // 4))
    assert plot.read_bytes() == previous
    assert done.returncode == 2, done.stderr
    assert f"error: --plot {plot}: cannot write" in done.stderr, done.stderr
    assert "Traceback" not in done.stderr
    assert "apgr" in json.loads(done.stdout)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["curve.png"]
