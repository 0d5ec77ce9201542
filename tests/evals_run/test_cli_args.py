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


def test_a_share_at_the_limit_is_not_over_it_and_the_refusal_names_what_it_kept(
        tmp_path: Path) -> None:
    """`--max-error-rate` refuses a larger share than it allows: 29 failures of 100 at 0.29
    are at the limit (0.29 x 100 is 28.999999999999996 in floats, and that row was refused).
    The refusal says a previous --out is unchanged, and that none was created where there
    was none (it said "unchanged" of a file that did not exist)."""
    from evals.run.aggregate import Cell, over_error_rate
    from evals.run.cli import refusal

    def row(failed: int, n: int) -> Cell:
        return Cell("m", "math", "accuracy", 0.5, n, 0.4, 0.6,
                    {"ProviderUnavailableError": failed} if failed else {})

    assert over_error_rate([row(29, 100), row(1, 20)], 0.29) == []
    assert over_error_rate([row(63, 90)], 0.7) == []  # 0.7 x 90 = 62.99999999999999
    assert over_error_rate([row(29, 100)], 0.28) == [row(29, 100)]
    assert over_error_rate([row(0, 20)], 0.0) == []
    kept, new = tmp_path / "report.json", tmp_path / "new.json"
    kept.write_text("previous")
    assert f"no report written ({kept} is unchanged): " in refusal([row(2, 20)], 0.05, kept)
    assert f"no report written ({new} not created): " in refusal([row(2, 20)], 0.05, new)
    assert "no report written: " in refusal([row(2, 20)], 0.05, None)
