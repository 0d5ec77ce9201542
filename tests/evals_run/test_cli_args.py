"""`eval run --suite` takes several paths after one flag (what a shell's braces expand to) and
still takes the flag repeated."""

from __future__ import annotations

from pathlib import Path

import pytest

from router.cli import build_parser, main


def _suites(*argv: str) -> list[Path]:
    args = build_parser().parse_args(["eval", "run", "--config", "c.yaml", *argv])
    suites: list[Path] = args.suite
    return suites


def test_one_suite_flag_takes_several_paths() -> None:
    """`--suite evals/suites/{a,b,c}-sim.yaml`, as docs/evals.md writes it."""
    assert _suites("--suite", "a.yaml", "b.yaml", "c.yaml") == [
        Path("a.yaml"), Path("b.yaml"), Path("c.yaml")]


def test_the_flag_may_still_be_repeated_and_mixed() -> None:
    assert _suites("--suite", "a.yaml", "--suite", "b.yaml", "c.yaml", "--models", "x") == [
        Path("a.yaml"), Path("b.yaml"), Path("c.yaml")]


SIM_CONFIG = Path(__file__).resolve().parents[2] / "policies" / "defaults" / "simulator.yaml"
SIM_SUITE = Path(__file__).resolve().parents[2] / "evals" / "suites" / "gsm8k-50-sim.yaml"


@pytest.mark.parametrize("option", ["--out", "--details"])
def test_an_output_into_a_missing_directory_is_refused_before_any_call(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str],
        option: str) -> None:
    """It failed with a traceback after every call had been made (and paid for). The upstream
    here is a closed port: a run would show up as failed calls, not as this error."""
    monkeypatch.setenv("SLOROUTER_SIM_BASE", "http://127.0.0.1:9")
    monkeypatch.setenv("SLOROUTER_SIM_KEY", "x")
    target = tmp_path / "missing" / "report.json"
    argv = ["eval", "run", "--config", str(SIM_CONFIG), "--suite", str(SIM_SUITE),
            "--models", "fast", "--timeout", "0.5", option, str(target)]
    assert main(argv) == 2
    captured = capsys.readouterr()
    assert captured.err == (f"slorouter eval run: {option} {target}: directory "
                            f"{target.parent} does not exist\n")
    assert captured.out == ""


@pytest.mark.parametrize("value", ["1.5", "-0.1", "nan"])
def test_max_error_rate_outside_zero_one_is_a_usage_error(
        capsys: pytest.CaptureFixture[str], value: str) -> None:
    with pytest.raises(SystemExit) as caught:
        build_parser().parse_args(["eval", "run", "--config", "c.yaml", "--suite", "s.yaml",
                                   "--max-error-rate", value])
    assert caught.value.code == 2
    assert f"argument --max-error-rate: {value} is not in [0, 1]" in capsys.readouterr().err
