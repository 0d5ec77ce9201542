"""Eval report files are checked at load, not trusted as written (`policies.eval_report`)."""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any

import pytest

from policies.eval_report import EvalReportError, load_reports
from policies.intervals import wilson_interval

ROOT = Path(__file__).resolve().parents[2]


def row(model: str = "fast", task: str = "math", k: int = 40, n: int = 50,
        **override: Any) -> dict[str, Any]:
    """A result as `eval run` writes it: Wilson bounds rounded outward to 6 decimals."""
    lower, upper = wilson_interval(k, n)
    return {"model": model, "task": task, "metric": "accuracy", "mean": round(k / n, 6), "n": n,
            "lower": math.floor(lower * 1e6) / 1e6, "upper": math.ceil(upper * 1e6) / 1e6,
            "method": "wilson", **override}


def write(path: Path, results: list[dict[str, Any]], **override: Any) -> Path:
    path.write_text(json.dumps({"suite": "s", "suite_version": "1",
                                "created": "2026-11-30T08:01:31+00:00", "results": results,
                                **override}))
    return path


def problems(path: Path) -> list[str]:
    with pytest.raises(EvalReportError) as caught:
        load_reports([path])
    return caught.value.problems


def test_a_sound_report_and_the_shipped_reports_load(tmp_path: Path) -> None:
    table = load_reports([write(tmp_path / "r.json", [row(), row(model="large", k=50)])])
    assert table.get("large", "math", "accuracy") is not None
    for shipped in ("policies/defaults/simulator-evals.json", "bench/configs/bench-evals.json"):
        assert load_reports([ROOT / shipped]).results


def test_bounds_out_of_order_are_refused(tmp_path: Path) -> None:
    """The audit's report: lower 0.9 above mean 0.5."""
    found = problems(write(tmp_path / "r.json", [row(k=1, n=2, lower=0.9, method="fixture")]))
    assert found == [f"{tmp_path / 'r.json'}: results[0] (fast, math, accuracy): bounds out of "
                     "order: needs lower 0.9 <= mean 0.5 <= upper "
                     f"{row(k=1, n=2)['upper']:g}"]


def test_a_bound_tighter_than_wilson_is_refused(tmp_path: Path) -> None:
    """n=1, mean 1: Wilson allows a lower bound of 0.2065 at best, not 0.81."""
    (found,) = problems(write(tmp_path / "r.json", [row(k=1, n=1, lower=0.81)]))
    assert "results[0] (fast, math, accuracy): lower 0.81 is above the Wilson lower bound " \
           f"{wilson_interval(1, 1)[0]:.6f} for mean 1 over n=1" in found
    narrow = row(upper=row()["upper"] - 0.01)
    (found,) = problems(write(tmp_path / "r.json", [narrow]))
    assert "upper" in found and "below the Wilson upper bound" in found


def test_rounding_of_a_written_bound_is_tolerated(tmp_path: Path) -> None:
    """Bounds rounded to nearest (as older reports were) still load."""
    lower, upper = wilson_interval(40, 50)
    nearest = row(lower=round(lower + 4e-7, 6), upper=round(upper - 4e-7, 6))
    assert load_reports([write(tmp_path / "r.json", [nearest])]).results


def test_every_problem_is_listed_at_once_with_its_row(tmp_path: Path) -> None:
    """Unknown method, non-ISO `created`, a duplicate row and a too-tight bound: one error."""
    path = write(tmp_path / "r.json",
                 [row(), row(model="mid", method="made-up"), row(lower=0.3, k=25),
                  row(model="big", k=1, n=1, lower=0.81)],
                 created="yesterday-ish")
    found = problems(path)
    assert all(p.startswith(f"{path}: ") for p in found)
    text = "\n".join(found)
    assert "created: 'yesterday-ish' is not an ISO 8601 date or time" in text
    assert "results[1] (mid, math, accuracy): method: Input should be 'wilson' or 'fixture'" \
        in text
    assert "results[2] (fast, math, accuracy): duplicate of results[0]" in text
    assert "results[3] (big, math, accuracy): lower 0.81 is above the Wilson" in text
    assert len(found) == 4


def test_two_bad_files_are_both_named(tmp_path: Path) -> None:
    bad = write(tmp_path / "a.json", [row(k=1, n=1, lower=0.81)])
    worse = tmp_path / "b.json"
    worse.write_text("{not json")
    with pytest.raises(EvalReportError) as caught:
        load_reports([bad, worse])
    assert [p.split(": ")[0] for p in caught.value.problems] == [str(bad), str(worse)]


def test_booleans_are_not_read_as_numbers(tmp_path: Path) -> None:
    """`"mean": true` is not a perfect score and `"n": true` not one item: each is a problem
    naming its row and field, as in configuration files."""
    found = problems(write(tmp_path / "r.json", [row(mean=True, upper=True),
                                                 {**row(model="large"), "n": True}]))
    label = f"{tmp_path / 'r.json'}: results"
    assert any(p.startswith(f"{label}[0] (fast, math, accuracy): mean:") for p in found), found
    assert any(p.startswith(f"{label}[0] (fast, math, accuracy): upper:") for p in found), found
    assert any(p.startswith(f"{label}[1] (large, math, accuracy): n:") for p in found), found
