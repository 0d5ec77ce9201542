"""`slorouter classify` and `slorouter train-classifier` through the real command line."""

from __future__ import annotations

import gzip
import json
import subprocess
import sys
from pathlib import Path

import pytest

from router.cli import main

DATA = Path(__file__).resolve().parents[2] / "evals" / "datasets" / "prompts"


def test_classify_writes_one_line_per_input(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Each valid input line gives one output line with task, risk, probabilities and signals."""
    src = tmp_path / "in.jsonl"
    src.write_text(
        json.dumps({"id": "a", "text": "Translate to German: good night"})
        + "\n"
        + json.dumps(
            {
                "messages": [{"role": "user",
                              "content": "my email is x@example.com, is that a good address?"}],
                "hints": {"task": "chat"},
            }
        )
        + "\n"
    )
    assert main(["classify", str(src)]) == 0
    out = [json.loads(line) for line in capsys.readouterr().out.splitlines()]
    assert [o["line"] for o in out] == [1, 2]
    assert out[0]["id"] == "a" and out[0]["task"] == "translation"
    assert set(out[0]["task_probs"]) >= {"chat", "translation"}
    assert out[1]["task_source"] == "hint" and out[1]["signals"] == ["pii"]
    assert out[1]["risk"] == "high"


def test_malformed_lines_are_reported_with_line_numbers(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Bad lines are named by number on stderr, good lines still classified, exit code 1."""
    src = tmp_path / "in.jsonl"
    src.write_text(
        '{"text": "hello"}\n'
        "{not json\n"
        '{"text": "a", "messages": []}\n'
        '{"messages": [{"role": "user", "content": 5}]}\n'
        '{"text": "ok", "hints": {"task": "dancing"}}\n'
    )
    assert main(["classify", str(src)]) == 1
    captured = capsys.readouterr()
    assert [json.loads(line)["line"] for line in captured.out.splitlines()] == [1]
    for number in (2, 3, 4, 5):
        assert f"line {number}:" in captured.err
    assert "exactly one of 'text' and 'messages'" in captured.err


def test_a_line_that_is_not_utf8_is_a_malformed_line(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Invalid bytes spoil their own line only (they used to end the command with a traceback)."""
    src = tmp_path / "in.jsonl"
    src.write_bytes(b'{"text": "hello"}\n{"text": "caf\xe9"}\n{"text": "caf\xc3\xa9 au lait"}\n')
    assert main(["classify", str(src)]) == 1
    captured = capsys.readouterr()
    assert [json.loads(line)["line"] for line in captured.out.splitlines()] == [1, 3]
    assert "line 2: Invalid JSON" in captured.err and "1 malformed line(s)" in captured.err


def test_tools_given_as_plain_names_are_function_tools_of_those_names(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """A training row (BFCL, `"tools": [names]`) fed back to `classify` was refused (`tools.0:
    Input should be a valid dictionary`); each name is now the function tool of that name, so
    the row classifies as the same request with wire tools would, its name read as the
    service reads one (the hidden character dropped). A tool of another type is still refused,
named as neither form (it read `tools.0.dict[str,any]: Input should be an object`)."""
    with gzip.open(DATA / "train.jsonl.gz", "rt", encoding="utf-8") as fh:
        row = next(json.loads(line) for line in fh if '"tools": [' in line)
    names = [*row["tools"], "del\u200bete_user"]
    wire = [{"type": "function", "function": {"name": n}} for n in names]
    src = tmp_path / "in.jsonl"
    src.write_text("".join(json.dumps(line) + "\n" for line in (
        {"text": row["text"], "tools": names},
        {"text": row["text"], "tools": wire},
        {"text": row["text"], "tools": [5]},
        {"text": row["text"], "tools": [""]},
        {"text": row["text"], "tools": [{"type": "function", "function": {"name": ""}}]},
        {"text": row["text"], "tools": [{"type": "function", "function": {}}]},
        {"text": row["text"], "tools": ["x" * 129]},
    )))
    assert main(["classify", str(src)]) == 1
    captured = capsys.readouterr()
    plain, wired = (json.loads(line) for line in captured.out.splitlines())
    assert {**plain, "line": 2} == wired
    assert "delete_user" in plain["side_effect_tools"]
    assert ("line 3: tools[0] must be a tool object or a tool name (a string), not a number"
            in captured.err and "5 malformed line(s)" in captured.err)
    # A tool without a name the service takes (1-128 characters) is refused as it would be
    # there: it used to be classified (an empty name as `action`, P 0.99).
    for line in (4, 5, 6, 7):
        assert f"line {line}: tools[0] needs a name of 1-128 characters" in captured.err


def test_classify_reads_stdin() -> None:
    """Without a file argument the command reads standard input."""
    proc = subprocess.run(
        [sys.executable, "-m", "router.cli", "classify"],
        input='{"text": "what is 12 times 7"}\n',
        capture_output=True,
        text=True,
        check=False,
    )
    assert proc.returncode == 0, proc.stderr
    assert json.loads(proc.stdout)["task"] == "math"


def test_missing_input_file_is_a_clear_error(capsys: pytest.CaptureFixture[str]) -> None:
    """A missing input file gives exit code 2 and names the file."""
    assert main(["classify", "/nonexistent/in.jsonl"]) == 2
    assert "/nonexistent/in.jsonl" in capsys.readouterr().err


def _subset(tmp_path: Path, n: int) -> Path:
    with gzip.open(DATA / "train.jsonl.gz", "rt", encoding="utf-8") as fh:
        lines = [line for _, line in zip(range(n), fh, strict=False)]
    tmp_path.mkdir(parents=True, exist_ok=True)
    path = tmp_path / "small.jsonl"
    path.write_text("".join(lines))
    return path


def test_training_is_reproducible_and_writes_metadata(tmp_path: Path) -> None:
    """Two trainings on the same rows give byte-identical models; metadata names data and libs."""
    data = _subset(tmp_path, 900)
    hashes = []
    for run in ("a", "b"):
        out = tmp_path / run
        args = ["train-classifier", "--data", str(data), "--out", str(out), "--min-df", "2"]
        assert main(args) == 0
        hashes.append((out / "model.zip").read_bytes())
    assert hashes[0] == hashes[1]
    meta = json.loads((tmp_path / "a" / "metadata.json").read_text())
    assert meta["data"]["rows"] == 900 and len(meta["data"]["sha256"]) == 64
    assert "scikit-learn" in meta["libraries"] and meta["labels"]["risk"] == [
        "low",
        "medium",
        "high",
    ]
    assert 0.0 <= meta["metrics"]["cross_validated"]["task_macro_f1"] <= 1.0


def test_training_data_errors_name_the_line(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """A bad training row stops training with its file and line number."""
    bad = tmp_path / "bad.jsonl"
    bad.write_text('{"id": "1", "text": "x", "task": "chat", "risk": "low"}\n{"id": "2"}\n')
    assert main(["train-classifier", "--data", str(bad), "--out", str(tmp_path / "o")]) == 2
    assert "bad.jsonl:2" in capsys.readouterr().err


def _first_training_row() -> bytes:
    with gzip.open(DATA / "train.jsonl.gz", "rb") as fh:
        return bytes(fh.readline()).rstrip(b"\n")


@pytest.mark.parametrize("command", ["train-classifier", "eval-classifier"])
def test_a_data_line_that_is_not_utf8_names_its_line(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], command: str
) -> None:
    """Bytes that are not UTF-8 are a bad row like any other (they were a traceback)."""
    row = _first_training_row()
    bad = tmp_path / "bad.jsonl"
    bad.write_bytes(row + b"\n" + row.replace(b'"text": "', b'"text": "caf\xe9 ', 1) + b"\n")
    args = [command, "--data", str(bad)]
    if command == "train-classifier":
        args += ["--out", str(tmp_path / "o")]
    assert main(args) == 2
    err = capsys.readouterr().err
    assert "bad.jsonl:2" in err and "Traceback" not in err


def test_an_interrupted_training_leaves_the_previous_artifact(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """model.zip was replaced before the held-out evaluation and the metadata were done: an
    interruption there left a new model beside the old metadata. Nothing is written now until
    everything is computed."""
    out = tmp_path / "artifact"
    first = _subset(tmp_path / "one", 300)
    assert main(["train-classifier", "--data", str(first), "--out", str(out),
                 "--min-df", "2"]) == 0
    before = {p.name: p.read_bytes() for p in out.iterdir()}

    def interrupted(*args: object, **kwargs: object) -> None:
        raise KeyboardInterrupt

    monkeypatch.setattr("router.classify.artifact.evaluate", interrupted)
    second = _subset(tmp_path / "two", 400)
    with pytest.raises(KeyboardInterrupt):
        main(["train-classifier", "--data", str(second), "--out", str(out), "--min-df", "2",
              "--eval", str(first)])
    assert {p.name: p.read_bytes() for p in out.iterdir()} == before


def _rows(tmp_path: Path, labels: list[tuple[str, str, bool]]) -> Path:
    """Real training texts relabelled (task, risk, jailbreak), one per row."""
    with gzip.open(DATA / "train.jsonl.gz", "rt", encoding="utf-8") as fh:
        texts = [json.loads(line)["text"] for _, line in zip(range(len(labels)), fh,
                                                             strict=False)]
    path = tmp_path / "rows.jsonl"
    path.write_text("".join(
        json.dumps({"id": str(i), "text": text, "task": task, "risk": risk, "jailbreak": jb})
        + "\n" for i, (text, (task, risk, jb)) in enumerate(zip(texts, labels, strict=True))))
    return path


@pytest.mark.parametrize(("labels", "argv", "why"), [
    ([], [], "no rows in {path}"),
    ([("chat", "low", False), ("chat", "high", True)] * 20, [],
     "every one of the 40 rows has task 'chat': the task head needs at least two of chat, "),
    ([("chat", "low", False), ("math", "high", False)] * 20, [],
     "every one of the 40 rows has jailbreak 'no': the jailbreak head needs at least two of "
     "no, yes"),
    ([("chat", "low", False), ("math", "high", True)] * 2 + [("code", "low", False)], [],
     "5 rows, at most 2 of any one task: 3-fold cross-validation needs at least 3 rows of "
     "some task"),
    ([("chat", "low", False), ("math", "high", True)] * 20, ["--min-df", "1000"],
     "no feature occurs in --min-df 1000 or more of the "),
])
def test_training_data_that_cannot_train_is_one_line(
    tmp_path: Path, capsys: pytest.CaptureFixture[str],
    labels: list[tuple[str, str, bool]], argv: list[str], why: str,
) -> None:
    """An empty file, 5 rows or one task only ended in scikit-learn tracebacks."""
    path = _rows(tmp_path, labels)
    out = tmp_path / "out"
    assert main(["train-classifier", "--data", str(path), "--out", str(out), *argv]) == 2
    err = capsys.readouterr().err
    assert err.startswith("slorouter train-classifier: " + why.format(path=path))
    assert err.count("\n") == 1 and not out.exists()


def test_evaluating_an_empty_file_is_one_line(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    empty = tmp_path / "empty.jsonl"
    empty.write_text("")
    assert main(["eval-classifier", "--data", str(empty)]) == 2
    assert capsys.readouterr().err == f"slorouter eval-classifier: no rows in {empty}\n"


def test_a_label_missing_from_one_fold_still_trains(tmp_path: Path) -> None:
    """Two jailbreak rows can both fall in one held-out fold, leaving a training fold with
    none: that fold's jailbreak head was a scikit-learn error. It predicts the one label."""
    labels = [(task, "low", False) for task in ("chat", "math", "code")] * 10
    labels[0], labels[3] = ("chat", "high", True), ("chat", "high", True)
    path = _rows(tmp_path, labels)
    out = tmp_path / "out"
    for seed in range(6):  # some seed puts both jailbreak rows in the same fold
        assert main(["train-classifier", "--data", str(path), "--out", str(out),
                     "--min-df", "1", "--no-augment", "--seed", str(seed)]) == 0
    assert (out / "model.zip").exists()


@pytest.mark.parametrize("command", ["train-classifier", "eval-classifier"])
def test_a_truncated_gzip_file_is_one_line(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], command: str
) -> None:
    """A cut download (`EOFError` from gzip, which is no `OSError`) was a traceback."""
    whole = (DATA / "test.jsonl.gz").read_bytes()
    cut = tmp_path / "cut.jsonl.gz"
    cut.write_bytes(whole[: len(whole) // 2])
    args = [command, "--data", str(cut)]
    if command == "train-classifier":
        args += ["--out", str(tmp_path / "o")]
    assert main(args) == 2
    err = capsys.readouterr().err
    assert err == f"slorouter {command}: {cut}: not a complete gzip file (" + err.split("(", 1)[1]
    assert err.count("\n") == 1


def test_a_task_hint_that_disagrees_with_metadata_task_is_a_malformed_line(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """The hint silently won; the service answers such a request with a 400
    (`conflicting_hint`). The same task in both, or a metadata tag that names no task (the
    service ignores it), still classifies."""
    src = tmp_path / "in.jsonl"
    lines = [{"text": "solve 2x + 3 = 7", "hints": {"task": "math"}, "metadata": {"task": t}}
             for t in ("code", "math", "ticket-triage")]
    src.write_text("".join(json.dumps(line) + "\n" for line in lines))
    assert main(["classify", str(src)]) == 1
    captured = capsys.readouterr()
    assert [json.loads(line)["line"] for line in captured.out.splitlines()] == [2, 3]
    assert captured.err == (
        "line 1: conflicting task hints: hints.task is 'math' but metadata.task is 'code'; "
        "give one of them, or the same value in both\n1 malformed line(s)\n")


def test_a_metadata_task_that_names_no_task_is_no_hint(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """`metadata` is the client's own tags: `{"task": "ticket-triage"}` without a hint made the
    line malformed, though the service ignores such a value. A task there is still a hint."""
    src = tmp_path / "in.jsonl"
    lines = [{"text": "Translate to German: good night", "metadata": {"task": t}}
             for t in ("ticket-triage", 7, "code")]
    src.write_text("".join(json.dumps(line) + "\n" for line in lines))
    assert main(["classify", str(src)]) == 0
    out = [json.loads(line) for line in capsys.readouterr().out.splitlines()]
    assert [(o["line"], o["task"], o["task_source"]) for o in out] == [
        (1, "translation", "model"), (2, "translation", "model"), (3, "code", "hint")]


def test_classify_reads_a_gzip_file(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """A `.jsonl.gz` input was read compressed: every line malformed."""
    src = tmp_path / "in.jsonl.gz"
    with gzip.open(src, "wt", encoding="utf-8") as fh:
        fh.write(json.dumps({"id": "a", "text": "Translate to German: good night"}) + "\n")
    assert main(["classify", str(src)]) == 0
    out = [json.loads(line) for line in capsys.readouterr().out.splitlines()]
    assert [(o["id"], o["task"]) for o in out] == [("a", "translation")]


def test_classify_names_a_cut_gzip_file(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    whole = (DATA / "test.jsonl.gz").read_bytes()
    cut = tmp_path / "cut.jsonl.gz"
    cut.write_bytes(whole[: len(whole) // 50])
    assert main(["classify", str(cut)]) == 2
    err = capsys.readouterr().err
    assert err.startswith(f"slorouter classify: {cut}: not a complete gzip file (")
    assert "Traceback" not in err
