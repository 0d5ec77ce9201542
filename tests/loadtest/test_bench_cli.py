"""`slorouter bench` as a user runs it: its exit codes, what it checks before any load, and
what Ctrl-C leaves (a real process, the real simulator)."""

from __future__ import annotations

import json
import signal
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.support.procs import PYTHON
from tests.support.services import Running, start_fast_and_broken

MIX = Path(__file__).resolve().parents[2] / "bench" / "workloads" / "default.json"
@pytest.fixture(scope="module")
def sim(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Running]:
    running = start_fast_and_broken(tmp_path_factory.mktemp("sim"))
    yield running
    running.stop()


def _bench(sim: Running, out: Path, *extra: str) -> list[str]:
    return [PYTHON, "-m", "router.cli", "bench", "--url", sim.base_url, "--workload", str(MIX),
            "--out", str(out), "--no-progress", "--rate", "20", *extra]


def test_bad_arguments_are_refused_before_any_load(sim: Running, tmp_path: Path) -> None:
    """A --out that is a file or holds a directory where the summary goes, a key no header
    can carry, a negative seed, a run too large to plan and one of no request: exit 2 at
    once (each used to be found after the whole run, or deep in it, with a traceback; the
    run of no request exited 0, and the large one took the machine's memory)."""
    taken = tmp_path / "taken"
    taken.write_text("")
    (tmp_path / "holds" / "summary.json").mkdir(parents=True)
    for extra in (("--out", str(taken)), ("--out", str(tmp_path / "holds")),
                  ("--api-key", "a\nb"), ("--seed", "-1"), ("--rate", "1e9"),
                  ("--rate", "1", "--duration", "0.01")):
        started = time.monotonic()
        result = subprocess.run([*_bench(sim, tmp_path / "out", "--duration", "30"), *extra],
                                capture_output=True, text=True, timeout=60)
        assert result.returncode == 2, result.stderr
        assert "Traceback" not in result.stderr and time.monotonic() - started < 20


def test_the_default_workload_missing_says_where_it_comes_from(tmp_path: Path) -> None:
    """Run outside the checkout (an installed package, any other directory), the default mix
    is not there: exit 2 before any load, naming the default and the way out (it was a bare
    `[Errno 2] No such file or directory`)."""
    result = subprocess.run([PYTHON, "-m", "router.cli", "bench", "--url", "http://127.0.0.1:9",
                             "--out", str(tmp_path / "out"), "--no-progress"],
                            capture_output=True, text=True, timeout=60, cwd=tmp_path)
    assert result.returncode == 2, result.stderr
    assert "bench/workloads/default.json" in result.stderr
    assert "--workload FILE" in result.stderr and "Traceback" not in result.stderr
    assert not (tmp_path / "out").exists()


def test_the_exit_code_says_whether_every_request_succeeded(sim: Running,
                                                            tmp_path: Path) -> None:
    good = subprocess.run(_bench(sim, tmp_path / "good", "--duration", "1", "--model", "fast"),
                          capture_output=True, text=True, timeout=60)
    bad = subprocess.run(_bench(sim, tmp_path / "bad", "--duration", "1", "--model", "broken"),
                         capture_output=True, text=True, timeout=60)
    assert good.returncode == 0, good.stderr
    assert bad.returncode == 1 and "http_500" in bad.stdout


def test_ctrl_c_keeps_the_answers_so_far(sim: Running, tmp_path: Path) -> None:
    """SIGINT mid-run: the answered requests are summarised and written, exit 130 (it was a
    traceback that threw the whole run away)."""
    out = tmp_path / "interrupted"
    # A shell without job control starts background jobs with SIGINT ignored, and the child
    # would inherit that (CI's runner does): give the bench the default, as a terminal does.
    proc = subprocess.Popen(_bench(sim, out, "--duration", "60", "--model", "fast"),
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL))
    time.sleep(4)
    proc.send_signal(signal.SIGINT)
    stdout, stderr = proc.communicate(timeout=60)
    assert proc.returncode == 130, stderr
    assert "Traceback" not in stderr and "interrupted after" in stderr
    summary = json.loads((out / "summary.json").read_text())
    assert summary["sent"] > 0 and summary["ok"] > 0 and "target" in stdout
