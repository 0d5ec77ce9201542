"""`eval run` refuses suites it cannot grade or read, and a bad `--timeout`, with one line and
exit 2 before the first call (each used to fail after every call was sent, or with a
traceback)."""

from __future__ import annotations

import gzip
import json
from pathlib import Path
from typing import Any

import pytest

import evals.run.cli
from evals.run.graders import grade
from evals.run.suite import NumericGrader, RegexGrader
from router.cli import main

ROOT = Path(__file__).resolve().parents[2]
SIM_CONFIG = ROOT / "policies" / "defaults" / "simulator.yaml"
SIM_SUITE = ROOT / "evals" / "suites" / "gsm8k-50-sim.yaml"


@pytest.fixture(autouse=True)
def no_calls(monkeypatch: pytest.MonkeyPatch) -> None:
    """A closed upstream port, and a run that fails the test if it gets as far as calling."""
    monkeypatch.setenv("SLOROUTER_SIM_BASE", "http://127.0.0.1:9")
    monkeypatch.setenv("SLOROUTER_SIM_KEY", "x")

    async def refuse(_plan: Any) -> list[Any]:
        raise AssertionError("a call was sent for input that should have been refused")

    monkeypatch.setattr(evals.run.cli, "_execute", refuse)


def _refused(suite: Path, capsys: pytest.CaptureFixture[str], *extra: str) -> str:
    """Exit 2 with one line on stderr, nothing on stdout; that line."""
    argv = ["eval", "run", "--config", str(SIM_CONFIG), "--suite", str(suite),
            "--models", "fast", *extra]
    assert main(argv) == 2
    captured = capsys.readouterr()
    assert captured.out == "" and captured.err.count("\n") == 1, captured.err
    return captured.err


def _suite(path: Path, grader: str, items: list[dict[str, Any]]) -> Path:
    lines = ["name: t", 'version: "1"', "task: math", f"grader: {grader}", "items:"]
    lines += [f"  - {json.dumps(item)}" for item in items]
    path.write_text("\n".join(lines) + "\n")
    return path


@pytest.mark.parametrize(("grader", "item", "why"), [
    ("{type: numeric}", {"expected": "abc"}, "`expected` 'abc' is not a number (numeric grader)"),
    ("{type: numeric}", {}, "no `expected`, which the numeric grader needs"),
    ("{type: exact}", {}, "no `expected`, which the exact grader needs"),
    ("{type: regex}", {"expected": "[6"},
     "invalid regular expression '[6': unterminated character set at position 0"),
    ("{type: choice, letters: ABCD}", {"expected": "E"},
     "`expected` 'E' is not one of the letters ABCD"),
])
def test_an_item_its_grader_cannot_grade_is_refused_when_the_suite_loads(
        tmp_path: Path, capsys: pytest.CaptureFixture[str], grader: str,
        item: dict[str, Any], why: str) -> None:
    good = {"id": "a", "prompt": "what is 2+2", "expected": "4" if "choice" not in grader
            else "A"}
    path = _suite(tmp_path / "s.yaml", grader, [good, {"id": "b", "prompt": "3+3?", **item}])
    assert _refused(path, capsys) == (
        f"slorouter eval run: {path}: 1 item(s) its grader cannot grade: item 'b': {why}\n")


def test_what_grading_raised_on_is_what_loading_refuses() -> None:
    """The graders raise on these: without the load-time check they ended the run after
    every call had been made."""
    with pytest.raises(ValueError, match="not a number"):
        grade(NumericGrader(), "4", "abc")
    with pytest.raises(ValueError, match="needs an expected value"):
        grade(NumericGrader(), "4", None)


def test_an_invalid_grader_pattern_is_refused(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = _suite(tmp_path / "s.yaml", '{type: regex, pattern: "(unclosed"}',
                  [{"id": "a", "prompt": "2+2?", "expected": "4"}])
    err = _refused(path, capsys)
    assert err == (f"slorouter eval run: {path}: grader.regex.pattern: Value error, invalid "
                   "regular expression '(unclosed': missing ), unterminated subpattern at "
                   "position 0\n")
    assert RegexGrader(pattern=r"\d+").pattern == r"\d+"


def _with_items_file(tmp_path: Path, name: str, data: bytes) -> Path:
    (tmp_path / name).write_bytes(data)
    suite = tmp_path / "s.yaml"
    suite.write_text(f'name: t\nversion: "1"\ntask: math\ngrader: {{type: numeric}}\n'
                     f"items_file: {name}\n")
    return suite


def _items(n: int) -> bytes:
    return "".join(json.dumps({"id": f"i{i}", "prompt": f"{i} + 1?", "expected": str(i + 1)})
                   + "\n" for i in range(n)).encode()


def test_an_items_file_that_is_not_utf8_is_one_line(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    suite = _with_items_file(tmp_path, "items.jsonl", _items(2) + b'{"id": "x\xe9"}\n')
    assert _refused(suite, capsys) == (f"slorouter eval run: {tmp_path / 'items.jsonl'} line 3: "
                                       "not UTF-8 text (invalid continuation byte at byte "
                                       f"{len(_items(2)) + 9})\n")


def test_a_cut_gzip_items_file_is_one_line(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    whole = gzip.compress(_items(400))
    suite = _with_items_file(tmp_path, "items.jsonl.gz", whole[: len(whole) // 2])
    err = _refused(suite, capsys)
    assert err.startswith(f"slorouter eval run: {tmp_path / 'items.jsonl.gz'}: not a complete "
                          "gzip file (")


def test_a_suite_file_that_is_not_utf8_is_one_line(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    suite = tmp_path / "s.yaml"
    suite.write_bytes(b"\x8b\x08name: t\n")
    assert _refused(suite, capsys) == (f"slorouter eval run: {suite} line 1: not UTF-8 text "
                                       "(invalid start byte at byte 0)\n")


def test_a_line_of_the_items_file_that_is_not_json_is_named(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    suite = _with_items_file(tmp_path, "items.jsonl", _items(2) + b'{"id": "x\n')
    assert _refused(suite, capsys).startswith(
        f"slorouter eval run: {tmp_path / 'items.jsonl'} line 3: not JSON (")


@pytest.mark.parametrize("value", ["-1", "0", "nan", "inf"])
def test_a_timeout_that_is_not_a_finite_positive_number_is_a_usage_error(
        capsys: pytest.CaptureFixture[str], value: str) -> None:
    """`--timeout 0`, `-1` or `nan` was passed on to every call."""
    with pytest.raises(SystemExit) as caught:
        main(["eval", "run", "--config", str(SIM_CONFIG), "--suite", str(SIM_SUITE),
              "--models", "fast", f"--timeout={value}"])
    assert caught.value.code == 2
    assert (f"argument --timeout: must be a finite number above 0, not '{value}'"
            in capsys.readouterr().err)
