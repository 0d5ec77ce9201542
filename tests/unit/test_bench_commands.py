"""The README's benchmark commands run on a fresh clone, and the page they render names the
command that regenerates it."""

from __future__ import annotations

from pathlib import Path

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


def test_the_suite_refuses_bad_input_in_one_line_and_leaves_no_simulator(
        tmp_path: Path) -> None:
    """`python -m bench.suite` with a router config it cannot start: one line and exit 2, and
    the simulator it had started is stopped (it was left running, adopted by init, after a
    traceback); a malformed workload or a rate of 0 is exit 2 before anything starts."""
    import subprocess
    import sys

    def run(*args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run([sys.executable, "-m", "bench.suite", *args,
                               "--duration", "1", "--out", str(tmp_path / "out")],
                              cwd=ROOT, capture_output=True, text=True, timeout=120)

    def simulators() -> set[str]:
        found = subprocess.run(["ps", "-eo", "pid,args"], capture_output=True, text=True)
        return {line.split()[0] for line in found.stdout.splitlines()
                if "router.cli sim" in line and "sim_profile.json" in line}

    before = simulators()
    refused = run("--config", str(tmp_path / "missing.yaml"))
    assert refused.returncode == 2 and "Traceback" not in refused.stderr, refused.stderr
    assert "cannot read config file" in refused.stderr
    assert simulators() <= before
    (tmp_path / "bad.json").write_text("{bad")
    malformed = run("--workload", str(tmp_path / "bad.json"))
    assert malformed.returncode == 2 and "bad.json" in malformed.stderr
    assert run("--rate", "0").returncode == 2
    assert not (tmp_path / "out").exists()


def test_the_side_by_side_refuses_bad_arguments_before_starting_anything() -> None:
    """A rate of 0, a target or a mode it does not know: argparse's one line, exit 2 (a rate of
    0 was a ZeroDivisionError and an unknown target a KeyError once the simulator had started
    and warmed up; `--modes streaming` silently measured plain answers)."""
    import subprocess
    import sys

    for bad in (["--rates", "5,0"], ["--rates", "5,,10"], ["--targets", "direct,bogus"],
                ["--modes", "streaming"], ["--min-requests", "0"], ["--rounds", "-1"]):
        result = subprocess.run([sys.executable, "-m", "bench.vs_litellm", *bad,
                                 "--out", "/nonexistent/never-written.md"],
                                cwd=ROOT, capture_output=True, text=True, timeout=60)
        assert result.returncode == 2, (bad, result.stderr)
        assert "Traceback" not in result.stderr and "error: argument" in result.stderr, bad
