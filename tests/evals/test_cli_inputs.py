"""What the evals CLIs do with incomplete or bad input: say what was left out, or exit 2."""

from __future__ import annotations

import gzip
import json
import shutil
from pathlib import Path
from typing import Any

import pytest

from evals.outcomes import load_rows, load_table_coverage
from router.cli import main


def rewrite(source: Path, dest_dir: Path, edit: Any = None, name: str = "data.jsonl") -> Path:
    """A copy of a slice (with its models.json), each row passed through `edit(index, row)`."""
    dest_dir.mkdir(parents=True, exist_ok=True)
    shutil.copy(source.parent / "models.json", dest_dir / "models.json")
    with gzip.open(source, "rt", encoding="utf-8") as handle:
        rows = [json.loads(line) for line in handle if line.strip()]
    if edit is not None:
        rows = [edit(i, row) for i, row in enumerate(rows)]
    dest = dest_dir / name
    dest.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return dest


def _without(model: str, at: int) -> Any:
    def edit(index: int, row: dict[str, Any]) -> dict[str, Any]:
        if index == at:
            row["scores"] = {k: v for k, v in row["scores"].items() if k != model}
        return row
    return edit


def test_two_model_data_drops_the_incomplete_row_not_the_model(
        gsm8k_slice: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """One missing Mixtral score removed Mixtral from the whole benchmark (a 1-candidate
    report, exit 0); now that row is dropped, counted, and said on stderr and in the result."""
    path = rewrite(gsm8k_slice, tmp_path, _without("mistralai/Mixtral-8x7B-Instruct-v0.1", 4))
    rows = load_rows(path)
    table, found = load_table_coverage(path)
    assert table.models == ("gpt-4-1106-preview", "mistralai/Mixtral-8x7B-Instruct-v0.1")
    assert (len(table), found.dropped_rows) == (len(rows) - 1, 1)
    assert main(["eval", "replay", "--dataset", str(path), "--router", "category",
                 "--folds", "2", "--json"]) == 0
    captured = capsys.readouterr()
    out = json.loads(captured.out)
    note = ("gsm8k: dropped 1 row(s) without a score for both gpt-4-1106-preview and "
            "mistralai/Mixtral-8x7B-Instruct-v0.1")
    assert out["left_out"] == [note] and "apgr" in out
    assert f"warning: {note}" in captured.err


def test_multi_model_data_names_each_dropped_model_and_why(
        crux_slice: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    table, found = load_table_coverage(crux_slice, benchmark="cruxeval", priced_only=True)
    victim = table.models[0]
    path = rewrite(crux_slice, tmp_path, _without(victim, 0))
    table, found = load_table_coverage(path, benchmark="cruxeval", priced_only=True)
    assert victim not in table.models
    assert found.dropped_models[victim] == f"scored on {len(table) - 1} of {len(table)} rows"
    assert main(["eval", "replay", "--dataset", str(path), "--router", "category",
                 "--folds", "2"]) == 0
    captured = capsys.readouterr()
    assert f"{victim} (scored on {len(table) - 1} of {len(table)} rows)" in captured.out
    assert f"{victim} (scored on" in captured.err
