"""What the evals CLIs do with incomplete or bad input: say what was left out, or exit 2."""

from __future__ import annotations

import gzip
import json
import shutil
from pathlib import Path
from typing import Any

import pytest

from evals.outcomes import load_rows, load_table, load_table_coverage
from router.cli import main
from tests.evals.conftest import write_synthetic

TWO_PRICES = {"big": (10.0, 30.0), "small": (0.1, 0.1)}


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


def _refused(argv: list[str], capsys: pytest.CaptureFixture[str]) -> str:
    """Exit 2 with an `error:` line and no traceback; the error text."""
    assert main(argv) == 2
    captured = capsys.readouterr()
    assert captured.out == "" and "Traceback" not in captured.err
    return captured.err


def _drop_field(field: str, at: int) -> Any:
    def edit(index: int, row: dict[str, Any]) -> dict[str, Any]:
        return {k: v for k, v in row.items() if k != field} if index == at else row
    return edit


@pytest.mark.parametrize(("field", "at"), [("benchmark", 0), ("prompt_tokens", 2),
                                           ("scores", 1)])
def test_a_row_missing_a_field_names_file_line_and_field(
        gsm8k_slice: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str],
        field: str, at: int) -> None:
    path = rewrite(gsm8k_slice, tmp_path, _drop_field(field, at))
    err = _refused(["eval", "replay", "--dataset", str(path)], capsys)
    assert err == f"error: {path} line {at + 1}: missing field '{field}'\n"


def test_an_empty_file_says_so_in_every_command(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """It said "no benchmark None" (replay) or crashed in numpy (train-router)."""
    empty = tmp_path / "empty.jsonl"
    empty.write_text("")
    expected = f"error: {empty}: no outcome rows (an empty file, or every row contaminated)\n"
    assert _refused(["eval", "replay", "--dataset", str(empty)], capsys) == expected
    assert _refused(["train-router", "--outcomes", str(empty), "--out",
                     str(tmp_path / "a")], capsys) == expected
    assert _refused(["eval", "transfer", "--train", str(empty), "--test", str(empty)],
                    capsys) == expected


def test_unknown_models_and_missing_files_are_named(
        gsm8k_slice: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    models = "gpt-4-1106-preview, mistralai/Mixtral-8x7B-Instruct-v0.1"
    err = _refused(["eval", "replay", "--dataset", str(gsm8k_slice), "--relative-to", "gpt-4"],
                   capsys)
    assert err == (f"error: --relative-to: gpt-4 not among the models of {gsm8k_slice} "
                   f"(gsm8k) ({models})\n")
    err = _refused(["train-router", "--outcomes", str(gsm8k_slice), "--out", str(tmp_path / "a"),
                    "--models", "gpt-4-1106-preview", "nosuch"], capsys)
    assert err == f"error: --models: nosuch not among the models of {gsm8k_slice} ({models})\n"
    missing = tmp_path / "nope.jsonl"
    err = _refused(["eval", "transfer", "--train", str(missing), "--test", str(gsm8k_slice)],
                   capsys)
    assert err == f"error: no such --train file {missing}\n"


@pytest.mark.parametrize("argv", [["--floor", "0"], ["--floor", "95"], ["--floor", "-1"],
                                  ["--floor", "nan"], ["--folds", "1"], ["--jobs", "0"],
                                  ["--z", "nan"], ["--z", "-5"], ["--z", "0"], ["--z", "inf"]])
def test_out_of_range_options_are_usage_errors(
        gsm8k_slice: Path, capsys: pytest.CaptureFixture[str], argv: list[str]) -> None:
    """--floor 0 silently skipped floor mode, 95 printed "floor 9500%", --folds 1 crashed,
    --z nan or -5 calibrated to a meaningless bound."""
    with pytest.raises(SystemExit) as caught:
        main(["eval", "replay", "--dataset", str(gsm8k_slice), *argv])
    assert caught.value.code == 2
    assert f"argument {argv[0]}: " in capsys.readouterr().err


def test_floor_mode_without_prices_is_refused(
        gsm8k_slice: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """Without models.json the costs are unknown: it printed "$nan/1k" or crashed."""
    path = rewrite(gsm8k_slice, tmp_path)
    (tmp_path / "models.json").unlink()
    rows = len(load_rows(path))
    err = _refused(["eval", "replay", "--dataset", str(path), "--floor", "0.95"], capsys)
    assert err == (f"error: {path} (gsm8k): floor mode needs every model priced (a models.json "
                   "with prices beside the file); no price for gpt-4-1106-preview on "
                   f"{rows} of {rows} rows; mistralai/Mixtral-8x7B-Instruct-v0.1 on {rows} of "
                   f"{rows} rows\n")


def test_a_plot_into_a_missing_directory_fails_before_the_replay(
        gsm8k_slice: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    plot = tmp_path / "no" / "such" / "curve.png"
    err = _refused(["eval", "replay", "--dataset", str(gsm8k_slice), "--plot", str(plot)],
                   capsys)
    assert err == f"error: --plot {plot}: directory {plot.parent} does not exist\n"


def test_a_row_without_answer_tokens_costs_each_model_its_own_average(
        gsm8k_slice: Path, tmp_path: Path) -> None:
    """The default answer tokens were the last model's (Mixtral 104) for every model; GPT-4's
    own average is 124. Costs recomputed here from models.json."""
    def edit(index: int, row: dict[str, Any]) -> dict[str, Any]:
        return {**row, "response_tokens": {}}
    path = rewrite(gsm8k_slice, tmp_path, edit)
    doc = json.loads((tmp_path / "models.json").read_text())
    row = load_rows(path)[0]
    raw = next(r for r in map(json.loads, path.read_text().splitlines()) if r["id"] == row.id)
    for entry in doc["models"]:
        avg = entry["avg_tokens"]["gsm8k"]
        tokens_in = raw["prompt_tokens"] + avg["few_shot_prefix_tokens"]
        tokens_out = round(avg["avg_response_tokens"])
        expected = (tokens_in * entry["price_usd_per_1m_input_tokens"]
                    + tokens_out * entry["price_usd_per_1m_output_tokens"]) / 1e6
        assert row.cost[entry["name"]] == pytest.approx(expected, rel=1e-12), entry["name"]


def test_models_of_equal_quality_report_undefined_metrics(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """Both models right everywhere: APGR and CPT divided by zero in replay, train-router and
    transfer. They are null (n/a in text) and floor mode still routes everything cheap."""
    path = write_synthetic(tmp_path, [{"big": 1.0, "small": 1.0}] * 200, TWO_PRICES)
    base = ["eval", "replay", "--dataset", str(path), "--router", "category", "--folds", "2"]
    assert main([*base, "--floor", "0.95", "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert (out["apgr"], out["cpt50"], out["cpt80"]) == (None, None, None)
    assert out["oracle"]["apgr"] is None and out["random"]["cpt50"] is None
    assert out["shares"] == {"small": 1.0} and out["strong_share"] == 0.0
    assert main(base) == 0
    assert "router   APGR n/a  CPT(50%) n/a  CPT(80%) n/a" in capsys.readouterr().out
    assert main(["train-router", "--outcomes", str(path), "--out", str(tmp_path / "a"),
                 "--folds", "2"]) == 0
    capsys.readouterr()
    meta = json.loads((tmp_path / "a" / "metadata.json").read_text())
    assert meta["metrics"]["apgr"] is None and meta["rule"]["candidates"][0] == "small"
    other = write_synthetic(tmp_path / "other", [{"big": 1.0, "small": 1.0}] * 150, TWO_PRICES,
                            first_prompt=200)  # prompts `path` does not hold
    assert main(["eval", "transfer", "--train", str(path), "--test", str(other)]) == 0
    assert capsys.readouterr().out.endswith("APGR n/a  CPT(50%) n/a  CPT(80%) n/a\n")


def test_a_repeated_prompt_id_is_refused_naming_both_lines(
        gsm8k_slice: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """A row repeated (files joined twice, a re-run appended) counted its prompt twice in
    replay, transfer and train-router without a word; it is refused with both lines."""
    path = rewrite(gsm8k_slice, tmp_path)
    lines = path.read_text().splitlines(keepends=True)
    path.write_text("".join(lines) + lines[2])
    repeated = json.loads(lines[2])["id"]
    expected = (f"error: {path} line {len(lines) + 1}: prompt id {repeated!r} of gsm8k is "
                "already on line 3: each prompt once (a repeated row would count it twice)\n")
    assert _refused(["eval", "replay", "--dataset", str(path)], capsys) == expected
    assert _refused(["train-router", "--outcomes", str(path), "--out", str(tmp_path / "a")],
                    capsys) == expected
    assert _refused(["eval", "transfer", "--train", str(path), "--test", str(gsm8k_slice)],
                    capsys) == expected


def test_the_same_id_in_two_benchmarks_is_two_prompts(tmp_path: Path) -> None:
    """Ids need only differ within a benchmark (each is replayed on its own): a file that
    numbers each benchmark's prompts from 0 loads whole."""
    rows = [{"id": "0", "benchmark": bench, "category": bench, "prompt": f"{bench} question",
             "prompt_tokens": 10, "scores": {"big": 1.0, "small": 0.0}}
            for bench in ("gsm8k", "math")]
    path = tmp_path / "data.jsonl"
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    assert [(r.benchmark, r.id) for r in load_rows(path)] == [("gsm8k", "0"), ("math", "0")]


def test_transfer_refuses_the_same_file_twice(
        gsm8k_slice: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """Trained and scored on the same prompts, transfer printed an in-sample number as if
    measured on another dataset; the same file, or a copy of it, is refused."""
    err = _refused(["eval", "transfer", "--train", str(gsm8k_slice), "--test",
                    str(gsm8k_slice)], capsys)
    assert err == (f"error: --train {gsm8k_slice} and --test {gsm8k_slice} are the same file: "
                   "transfer scores a router on another dataset than it was trained on; for "
                   f"one dataset use `slorouter eval replay --dataset {gsm8k_slice}` (held-out "
                   "folds)\n")
    copy = tmp_path / gsm8k_slice.name
    shutil.copy(gsm8k_slice, copy)
    err = _refused(["eval", "transfer", "--train", str(gsm8k_slice), "--test", str(copy)],
                   capsys)
    assert "are files with the same content: transfer scores" in err
    # The same rows decompressed, or gzipped again at another level: other bytes, same rows
    # (the raw bytes were compared, so either printed an in-sample APGR of 0.9997 on GSM8K).
    plain = tmp_path / "plain.jsonl"
    plain.write_bytes(gzip.decompress(gsm8k_slice.read_bytes()))
    again = tmp_path / "again.jsonl.gz"
    again.write_bytes(gzip.compress(plain.read_bytes(), compresslevel=1, mtime=0))
    assert again.read_bytes() != gsm8k_slice.read_bytes()
    for other in (plain, again):
        err = _refused(["eval", "transfer", "--train", str(gsm8k_slice), "--test", str(other)],
                       capsys)
        assert "are files with the same content: transfer scores" in err


def test_a_free_reference_leaves_the_saving_undefined(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """Floor mode divided by the reference's cost: a free reference was a ZeroDivisionError
    (two models) or an inf/nan saving (N models). The saving is null / n/a."""
    scores = [{"big": float(i % 10 != 0), "small": float(i % 3 != 0)} for i in range(200)]
    path = write_synthetic(tmp_path, scores, {"big": (0.0, 0.0), "small": (0.0, 0.0)})
    base = ["eval", "replay", "--dataset", str(path), "--router", "category", "--folds", "2",
            "--floor", "0.95"]
    assert main([*base, "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["cost_saving"] is None and out["reference_cost_per_1k"] == 0.0
    assert main(base) == 0
    assert "(saving n/a)" in capsys.readouterr().out
    from evals.metrics import cost_saving

    assert cost_saving(0.0, 0.0) is None and cost_saving(1.0, 0.0) is None
    assert cost_saving(1.0, 4.0) == pytest.approx(0.75)


def test_reference_only_calibration_prints_valid_json(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """Too few rows to calibrate: each fold keeps the reference only (threshold +inf), and
    --json printed `"threshold": Infinity`, which is not JSON. It prints null."""
    scores = [{"big": float(i % 10 != 0), "small": float(i % 3 != 0)} for i in range(40)]
    path = write_synthetic(tmp_path, scores, TWO_PRICES)
    assert main(["eval", "replay", "--dataset", str(path), "--router", "category",
                 "--folds", "2", "--floor", "0.95", "--json"]) == 0
    def refuse(constant: str) -> object:
        raise ValueError(f"not JSON: {constant}")
    out = json.loads(capsys.readouterr().out, parse_constant=refuse)
    assert [t["threshold"] for t in out["thresholds"]] == [None, None]
    assert out["shares"] == {"big": 1.0}


def _set(edit: Any) -> Any:
    """An edit of the fourth row only (line 4 of the rewritten file)."""
    def apply(index: int, row: dict[str, Any]) -> dict[str, Any]:
        if index == 3:
            edit(row)
        return row
    return apply


def _score(model_index: int, value: object) -> Any:
    def edit(row: dict[str, Any]) -> None:
        row["scores"][sorted(row["scores"])[model_index]] = value
    return edit


@pytest.mark.parametrize(("edit", "message"), [
    (_score(1, 5.0), "score of 'mistralai/Mixtral-8x7B-Instruct-v0.1' is 5.0, not in [0, 1]"),
    (_score(0, -3.0), "score of 'gpt-4-1106-preview' is -3.0, not in [0, 1]"),
    (_score(0, float("nan")), "score of 'gpt-4-1106-preview' is nan, not a finite number"),
    (_score(0, float("inf")), "score of 'gpt-4-1106-preview' is inf, not a finite number"),
    (_score(0, "1"), "score of 'gpt-4-1106-preview' is \"1\", not a number"),
    (_score(0, True), "score of 'gpt-4-1106-preview' is true, not a number"),
    (lambda row: row.update(prompt_tokens=-100000),
     "prompt_tokens is -100000, not a whole number >= 0"),
    (lambda row: row["response_tokens"].update({"gpt-4-1106-preview": -5}),
     "response_tokens of 'gpt-4-1106-preview' is -5, not a whole number >= 0"),
    (lambda row: row.update(contaminated="false"), "contaminated is \"false\", not true or false"),
    (lambda row: row.update(scores=[1, 0]), "scores is list, not an object"),
    # read as the text "None", every such row one prompt group (the evals audit of 2026-12-07)
    (lambda row: row.update(prompt=None), "prompt is null, not a string"),
    (lambda row: row.update(category=["a"]), "category is [\"a\"], not a string"),
])
def test_a_row_with_a_value_out_of_range_names_file_line_and_value(
        gsm8k_slice: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str],
        edit: Any, message: str) -> None:
    """Scores of 5 or -3, negative token counts and contaminated: "false" (read as true) were
    accepted silently; NaN or inf scores ended in a scikit-learn traceback."""
    path = rewrite(gsm8k_slice, tmp_path, _set(edit))
    assert _refused(["eval", "replay", "--dataset", str(path)], capsys) == (
        f"error: {path} line 4: {message}\n")
    assert _refused(["train-router", "--outcomes", str(path), "--out", str(tmp_path / "a")],
                    capsys) == f"error: {path} line 4: {message}\n"


def test_a_line_that_is_not_an_object_is_named(
        gsm8k_slice: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = rewrite(gsm8k_slice, tmp_path)
    lines = path.read_text().splitlines(keepends=True)
    path.write_text("".join([*lines[:2], "[1, 2]\n", *lines[2:]]))
    assert _refused(["eval", "replay", "--dataset", str(path)], capsys) == (
        f"error: {path} line 3: a JSON list, not an object\n")


def _rows_of(n: int) -> list[dict[str, float]]:
    return [{"big": float(i % 10 != 0), "small": float(i % 3 != 0)} for i in range(n)]


@pytest.mark.parametrize(("rows", "argv", "why"), [
    (1, [], "1 distinct prompt(s) for 5 folds: each fold needs at least one held-out prompt "
            "(use more data)"),
    (3, [], "3 distinct prompt(s) for 5 folds: each fold needs at least one held-out prompt "
            "(use --folds 3 or fewer, or more data)"),
    (3, ["--folds", "2", "--floor", "0.95"],
     "3 distinct prompt(s) leave 1 in a training fold, fewer than the 3 inner folds "
     "floor-mode calibration needs (use more data)"),
])
def test_too_few_prompts_for_the_folds_are_refused(
        tmp_path: Path, capsys: pytest.CaptureFixture[str],
        rows: int, argv: list[str], why: str) -> None:
    """One row ended in a scikit-learn traceback (a fold trained on nothing); 3 rows in 5
    folds printed numbers over empty folds without a word."""
    path = write_synthetic(tmp_path, _rows_of(rows), TWO_PRICES)
    err = _refused(["eval", "replay", "--dataset", str(path), *argv], capsys)
    assert err == (f"error: {path} (gsm8k): {why}; prompts with the same text or reading "
                   "passage count once\n")
    train = ["train-router", "--outcomes", str(path), "--out", str(tmp_path / "a"), *argv]
    assert _refused(train, capsys).startswith(f"error: {path}: ")
    assert not (tmp_path / "a").exists()


def test_a_small_sample_runs_with_a_warning(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """Ten prompts in two folds can be replayed, but the numbers are noise: say so."""
    path = write_synthetic(tmp_path, _rows_of(10), TWO_PRICES)
    assert main(["eval", "replay", "--dataset", str(path), "--router", "category",
                 "--folds", "2"]) == 0
    captured = capsys.readouterr()
    assert "APGR" in captured.out
    assert captured.err == (f"warning: {path} (gsm8k): only 10 prompts, about 5 per held-out "
                            "fold: the numbers are mostly noise\n")


@pytest.mark.parametrize(("name", "what"), [
    ("curve.xyz", "unknown image format 'xyz'"), ("curve", "no file extension")])
def test_a_plot_format_matplotlib_cannot_write_fails_before_the_replay(
        gsm8k_slice: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str],
        name: str, what: str) -> None:
    """matplotlib refused x.xyz only after the whole replay, before the report was printed;
    a name without extension was written as name.png."""
    plot = tmp_path / name
    err = _refused(["eval", "replay", "--dataset", str(gsm8k_slice), "--plot", str(plot)],
                   capsys)
    assert err.startswith(f"error: --plot {plot}: {what} (one of ") and "png, " in err
    assert list(tmp_path.iterdir()) == []


def test_a_plot_into_a_directory_is_refused(
        gsm8k_slice: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """--plot DIR wrote DIR.png beside the directory without a word."""
    err = _refused(["eval", "replay", "--dataset", str(gsm8k_slice), "--plot", str(tmp_path)],
                   capsys)
    assert err == (f"error: --plot {tmp_path} is a directory: give a file name such as "
                   f"{tmp_path / 'replay.png'}\n")
    assert not tmp_path.with_suffix(".png").exists()


def test_train_router_refuses_an_out_it_cannot_write_before_training(
        gsm8k_slice: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """It trained in full, then crashed with a traceback creating the directory."""
    a_file = tmp_path / "taken"
    a_file.write_text("")
    err = _refused(["train-router", "--outcomes", str(gsm8k_slice), "--out", str(a_file)],
                   capsys)
    assert err == f"error: --out: {a_file} is not a directory\n"
    under_a_file = a_file / "artifact"
    err = _refused(["train-router", "--outcomes", str(gsm8k_slice), "--out", str(under_a_file)],
                   capsys)
    assert err.startswith(f"error: --out: cannot create {under_a_file}: ")


def _slice_rows(path: Path) -> list[dict[str, Any]]:
    with gzip.open(path, "rt", encoding="utf-8") as handle:
        return [json.loads(line) for line in handle if line.strip()]


def test_transfer_scores_only_the_test_prompts_train_does_not_hold(
        gsm8k_slice: Path, mmlu_slice: Path, tmp_path: Path,
        capsys: pytest.CaptureFixture[str]) -> None:
    """A --test file sharing prompts with --train (another file, so not refused as a copy)
    scored the router on prompts it was trained on too, an in-sample share printed as a
    transfer. Those prompts are left out with a warning: the result is the transfer to the
    test file's other prompts, exactly; when none is left it is refused."""
    assert main(["eval", "transfer", "--train", str(gsm8k_slice), "--test", str(mmlu_slice),
                 "--json"]) == 0
    clean = json.loads(capsys.readouterr().out)
    assert clean["test_prompts_in_train"] == 0
    shared = _slice_rows(gsm8k_slice)[:30]
    mixed = tmp_path / "mixed.jsonl"
    shutil.copy(mmlu_slice.parent / "models.json", tmp_path / "models.json")
    mixed.write_text("".join(json.dumps(r) + "\n" for r in _slice_rows(mmlu_slice) + shared))
    assert main(["eval", "transfer", "--train", str(gsm8k_slice), "--test", str(mixed),
                 "--json"]) == 0
    captured = capsys.readouterr()
    kept = set(load_table(gsm8k_slice).ids)  # a row some model lacks a score on is dropped
    in_both = sum(r["id"] in kept for r in shared)
    assert in_both > 20
    assert (f"warning: {in_both} --test prompt(s) are also in --train (same text or reading "
            f"passage): scored on the other {len(load_table(mmlu_slice))} only") in captured.err
    out = json.loads(captured.out)
    assert out["test_prompts_in_train"] == in_both
    assert {k: v for k, v in out.items() if k not in ("test", "test_prompts_in_train")} == {
        k: v for k, v in clean.items() if k not in ("test", "test_prompts_in_train")}
    most = rewrite(gsm8k_slice, tmp_path / "most", name="most.jsonl")
    most.write_text("".join(most.read_text().splitlines(keepends=True)[1:]))
    err = _refused(["eval", "transfer", "--train", str(gsm8k_slice), "--test", str(most)], capsys)
    assert "every prompt of --test" in err and "nothing is left to score" in err


@pytest.mark.parametrize("command", ["replay", "train-router"])
def test_a_negative_seed_is_a_usage_error_and_creates_no_out(
        gsm8k_slice: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str],
        command: str) -> None:
    """`--seed -1` ended in a numpy traceback (after train-router had created --out)."""
    out = tmp_path / "artifact"
    argv = (["eval", "replay", "--dataset", str(gsm8k_slice)] if command == "replay" else
            ["train-router", "--outcomes", str(gsm8k_slice), "--out", str(out)])
    with pytest.raises(SystemExit) as caught:
        main([*argv, "--seed", "-1"])
    assert caught.value.code == 2
    assert "argument --seed: -1 is below 0" in capsys.readouterr().err
    assert not out.exists()


@pytest.mark.parametrize("value", [1e30, 2**53, 10**400])
def test_a_token_count_beyond_any_real_prompt_names_its_line(
        gsm8k_slice: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str],
        value: float) -> None:
    """`prompt_tokens: 1e30` overflowed the int64 token array with a traceback."""
    path = rewrite(gsm8k_slice, tmp_path, _set(lambda row: row.update(prompt_tokens=value)))
    shown = "an integer of 401 digits, not a finite number" if value == 10**400 else (
        f"{value}, above the largest token count 9007199254740991 (2**53 - 1)")
    expected = f"error: {path} line 4: prompt_tokens is {shown}\n"
    assert _refused(["eval", "replay", "--dataset", str(path)], capsys) == expected
    assert _refused(["train-router", "--outcomes", str(path), "--out", str(tmp_path / "a")],
                    capsys) == expected
    assert not (tmp_path / "a").exists()


def test_train_router_refuses_a_model_given_twice(
        gsm8k_slice: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """`--models A A` wrote an artifact with the same model as both candidates."""
    err = _refused(["train-router", "--outcomes", str(gsm8k_slice), "--out",
                    str(tmp_path / "a"), "--models", "gpt-4-1106-preview",
                    "gpt-4-1106-preview"], capsys)
    assert err == "error: --models: gpt-4-1106-preview given more than once\n"
    assert not (tmp_path / "a").exists()
