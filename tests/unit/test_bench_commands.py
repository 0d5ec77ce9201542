"""The README's benchmark commands run on a fresh clone, and the page they render names the
command that regenerates it."""

from __future__ import annotations

from bench import vs_litellm
from bench.vs_litellm import ROOT, command_for, run_args


def test_the_litellm_requirements_ship_with_the_repository() -> None:
    assert vs_litellm.LITELLM_REQUIREMENTS.is_relative_to(ROOT)
    assert vs_litellm.LITELLM_REQUIREMENTS.is_file()


def test_the_default_output_is_git_ignored_not_the_committed_page() -> None:
    assert vs_litellm.DEFAULT_OUT.is_relative_to(ROOT / "bench" / "out")
    assert "bench/out/" in (ROOT / ".gitignore").read_text().splitlines()


def test_the_recorded_command_names_the_page_it_rendered() -> None:
    args = run_args(["--rates", "5,10", "--out", "x.md", "--raw=r.json", "--modes", "stream"])
    assert args == ["--rates", "5,10", "--modes", "stream"]
    raw = {"args": args}
    assert command_for(raw, ROOT / "docs" / "benchmarks.md") == (
        "python -m bench.vs_litellm --rates 5,10 --modes stream --out docs/benchmarks.md")
    assert command_for({"args": []}, ROOT / "docs" / "benchmarks.md") == (
        "python -m bench.vs_litellm --out docs/benchmarks.md")


def test_the_committed_page_shows_the_command_that_regenerates_it() -> None:
    page = (ROOT / "docs" / "benchmarks.md").read_text()
    commands = page.split("## Commands", 1)[1]
    assert "\npython -m bench.vs_litellm " in commands
    first = next(line for line in commands.splitlines()
                 if line.startswith("python -m bench.vs_litellm"))
    assert first.endswith("--out docs/benchmarks.md")
