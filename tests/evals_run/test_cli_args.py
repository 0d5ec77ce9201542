"""`eval run --suite` takes several paths after one flag (what a shell's braces expand to) and
still takes the flag repeated."""

from __future__ import annotations

from pathlib import Path

from router.cli import build_parser


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
