"""`slorouter eval run` as a real process against the provider simulator as a real process."""

from __future__ import annotations

import json
import os
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest

from evals.metrics import wilson_interval
from policies.eval_report import EvalReport
from tests.support.procs import PYTHON, file_size_limit
from tests.support.services import Running, start_simulator

SUITES = Path(__file__).resolve().parents[2] / "evals" / "suites"
SIM_SUITES = [SUITES / f"{n}-sim.yaml" for n in ("gsm8k-50", "mmlu-57", "wikibio-extraction-50")]
ACCURACY = {"low": 0.6, "mid": 0.8, "high": 0.95}
PROFILES = {
    "acc-low": {"accuracy": 0.6}, "acc-mid": {"accuracy": 0.8}, "acc-high": {"accuracy": 0.95},
    "perfect": {"accuracy": 1.0}, "coin": {"accuracy": 0.5},
    "broken": {"error_rate_500": 1.0}, "hung": {"hang_rate": 1.0},
}


def _deployment(name: str, sim: str, litellm: bool) -> str:
    if litellm:  # through the litellm adapter and Anthropic's wire format
        return (f"  - {{name: d-{name}, model: anthropic/{name}, adapter: litellm, "
                f"api_base: '{sim}', api_key: 'env:EVAL_SIM_KEY', "
                f"input_price_per_mtok: 1, output_price_per_mtok: 1}}\n")
    return (f"  - {{name: d-{name}, model: openai/{name}, adapter: openai_passthrough, "
            f"api_base: '{sim}/v1', input_price_per_mtok: 1, output_price_per_mtok: 1}}\n")


def config_text(sim: str, policies: str = "") -> str:
    """Logical models low/mid/high (high via litellm), judges, and two failing models."""
    names = {"low": "acc-low", "mid": "acc-mid", "high": "acc-high", "judge": "perfect",
             "sloppy-judge": "coin", "broken": "broken", "hung": "hung"}
    text = "version: 1\ndeployments:\n"
    text += "".join(_deployment(u, sim, litellm=(u == "acc-high")) for u in names.values())
    text += "models:\n" + "".join(f"  - {{name: {m}, deployments: [d-{u}]}}\n"
                                  for m, u in names.items())
    return text + "routes: {default_model: mid}\n" + policies


@pytest.fixture(scope="module")
def sim(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Running]:
    running = start_simulator(tmp_path_factory.mktemp("evalsim"), PROFILES)
    yield running
    running.stop()


def eval_run(tmp: Path, config: str, *args: str) -> subprocess.CompletedProcess[str]:
    path = tmp / "config.yaml"
    path.write_text(config)
    env = {**os.environ, "EVAL_SIM_KEY": "test"}
    return subprocess.run([PYTHON, "-m", "router.cli", "eval", "run", "--config", str(path),
                           *args], capture_output=True, text=True, timeout=120, env=env)


@pytest.fixture(scope="module")
def accuracy_run(sim: Running, tmp_path_factory: pytest.TempPathFactory) -> EvalReport:
    tmp = tmp_path_factory.mktemp("accuracy")
    args = [a for s in SIM_SUITES for a in ("--suite", str(s))]
    done = eval_run(tmp, config_text(sim.base_url), *args, "--models", "low,mid,high",
                    "--concurrency", "16", "--out", str(tmp / "report.json"))
    assert done.returncode == 0, done.stderr
    return EvalReport.model_validate_json((tmp / "report.json").read_text())


def test_report_has_one_result_per_model_and_task_with_suite_version(
        accuracy_run: EvalReport) -> None:
    """Three suites x three models: nine results, n = items, the suites' names and versions."""
    assert accuracy_run.suite == "gsm8k-50-sim+mmlu-57-sim+wikibio-extraction-50-sim"
    assert accuracy_run.suite_version == "1+1+1"
    cells = {(r.model, r.task): r for r in accuracy_run.results}
    assert len(cells) == 9
    assert {r.n for r in accuracy_run.results} == {50, 57}
    for r in accuracy_run.results:
        assert (r.lower, r.upper) == pytest.approx(wilson_interval(r.mean * r.n, r.n), abs=1e-5)


def test_measured_accuracy_matches_the_configured_accuracy(accuracy_run: EvalReport) -> None:
    """Pooled over the three suites, each model's Wilson 95 % interval holds its accuracy."""
    for model, accuracy in ACCURACY.items():
        rows = [r for r in accuracy_run.results if r.model == model]
        n = sum(r.n for r in rows)
        lower, upper = wilson_interval(sum(r.mean * r.n for r in rows), n)
        assert lower <= accuracy <= upper, (model, lower, upper)
    means = {m: sum(r.mean * r.n for r in accuracy_run.results if r.model == m) for m in ACCURACY}
    assert means["low"] < means["mid"] < means["high"]


def test_failed_and_hung_calls_count_as_failures_and_are_reported(
        sim: Running, tmp_path: Path) -> None:
    """500s and hangs (bounded by --timeout) score 0 and are named in the summary; with
    `--max-error-rate 1.0` the report is written all the same."""
    report = tmp_path / "report.json"
    done = eval_run(tmp_path, config_text(sim.base_url), "--suite", str(SIM_SUITES[0]),
                    "--models", "broken,hung,mid", "--timeout", "1", "--concurrency", "32",
                    "--max-error-rate", "1.0", "--out", str(report))
    assert done.returncode == 0, done.stderr
    lines = {line.split()[0]: line for line in done.stderr.splitlines() if line}
    assert lines["broken"].endswith("ProviderUnavailableError 50")  # upstream 500s
    assert lines["hung"].endswith("timeout 50")
    results = {r.model: r for r in EvalReport.model_validate_json(report.read_text()).results}
    assert results["broken"].mean == 0 and results["hung"].mean == 0
    assert results["broken"].n == 50 and results["mid"].mean > 0.5


def test_a_report_of_failed_calls_is_refused_by_default(sim: Running, tmp_path: Path) -> None:
    """By default (`--max-error-rate 0.05`) a report with a row of failed calls is not written:
    exit 1, the previous report left as it was, nothing on stdout, and the message names the
    rows, their failures and the setting. It used to be written under the default 1.0, every
    failed call a wrong answer: a model 'measured' at 0.0. The per-item details are written
    all the same: they hold each failure's error, which would otherwise take a paid rerun."""
    out, details = tmp_path / "report.json", tmp_path / "items.jsonl"
    out.write_text("previous")
    done = eval_run(tmp_path, config_text(sim.base_url), "--suite", str(SIM_SUITES[0]),
                    "--models", "broken,mid", "--out", str(out), "--details", str(details))
    assert done.returncode == 1, done.stderr
    assert out.read_text() == "previous" and done.stdout == ""
    items = [json.loads(line) for line in details.read_text().splitlines()]
    assert len(items) == 100 and f"is in {details}" in done.stderr
    failed = [i for i in items if i["model"] == "broken"]
    assert len(failed) == 50 and all(i["error"] for i in failed)
    assert (f"no report written ({out} is unchanged): failed calls, which score 0, exceed "
            "--max-error-rate 0.05 in 1 row(s): broken math accuracy: 50 of 50 calls failed "
            "(ProviderUnavailableError 50)") in done.stderr
    assert "pass --max-error-rate 1.0 to write the report" in done.stderr
    # Per row, not over the run: broken's row is all failures though the run's share is 0.5.
    done = eval_run(tmp_path, config_text(sim.base_url), "--suite", str(SIM_SUITES[0]),
                    "--models", "broken,mid", "--max-error-rate", "0.5")
    assert done.returncode == 1 and done.stdout == ""
    assert "1 row(s): broken math accuracy" in done.stderr


def test_unknown_models_and_missing_judges_are_bad_input(sim: Running, tmp_path: Path) -> None:
    """Exit code 2 with the reason, before any call is made."""
    done = eval_run(tmp_path, config_text(sim.base_url), "--suite", str(SIM_SUITES[0]),
                    "--models", "nope")
    assert done.returncode == 2 and "unknown models ['nope']" in done.stderr
    suite = _judge_suite(tmp_path, judge_model=None)
    done = eval_run(tmp_path, config_text(sim.base_url), "--suite", str(suite), "--models", "mid")
    assert done.returncode == 2 and "needs a judge" in done.stderr


def _judge_suite(tmp: Path, judge_model: str | None, grader: str = "judge") -> Path:
    """The GSM8K simulator items, graded by a judge (or by exact match, to compare)."""
    judge = "" if grader != "judge" else (
        f"judge: {{model: {judge_model}}}\n" if judge_model else "judge: {}\n")
    spec = ("{type: judge, rubric: 'Does the candidate give the reference answer?'}"
            if grader == "judge" else "{type: exact}")
    path = tmp / f"judged-{grader}.yaml"
    path.write_text(f'name: judged-{grader}\nversion: "1"\ntask: chat\ngrader: {spec}\n{judge}'
                    f"expect_marker: true\nitems_file: {SUITES / 'data' / 'gsm8k_50.jsonl'}\n")
    return path


def test_judge_grader_agrees_with_exact_match_through_a_simulated_judge(
        sim: Running, tmp_path: Path) -> None:
    """A perfect simulated judge reproduces exact match; a coin-flip judge's bad replies are
    counted as unparseable and lower the score."""
    exact, judged = _judge_suite(tmp_path, None, "exact"), _judge_suite(tmp_path, "judge")
    means = {}
    # A coin's unparseable verdicts are failed calls: its report is written only past the
    # default --max-error-rate.
    coin = ("--judge-model", "sloppy-judge", "--max-error-rate", "1.0")
    for name, suite, extra in (("exact", exact, ()), ("judge", judged, ()),
                               ("coin", judged, coin)):
        out = tmp_path / f"{name}.json"
        done = eval_run(tmp_path, config_text(sim.base_url), "--suite", str(suite),
                        "--models", "low", "--out", str(out), *extra)
        assert done.returncode == 0, done.stderr
        means[name] = EvalReport.model_validate_json(out.read_text()).results[0].mean
        if name == "coin":
            assert "judge_unparseable" in done.stderr
    assert means["judge"] == means["exact"]
    assert means["coin"] < means["exact"]


def _floors(report: Path, floor: float) -> str:
    return (f"policies:\n  eval_reports: ['{report}']\n  default:\n    candidates: [low, mid]\n"
            f"  tasks:\n    math:\n      candidates: [mid, high]\n"
            f"      quality_floor: {{min: {floor}}}\n")


def test_policy_check_passes_on_backed_floors_and_fails_on_broken_ones(
        sim: Running, accuracy_run: EvalReport, tmp_path: Path) -> None:
    """`slorouter policy check` reads the produced report: a floor under both lower bounds
    passes, one above the mid model's lower bound fails naming it."""
    report = tmp_path / "report.json"
    report.write_text(accuracy_run.model_dump_json())
    math = {r.model: r for r in accuracy_run.results if r.task == "math"}
    for floor, code in ((round(min(math["mid"].lower, math["high"].lower) - 0.01, 3), 0),
                        (round(math["mid"].lower + 0.01, 3), 1)):
        config = tmp_path / f"policy-{code}.yaml"
        config.write_text(config_text(sim.base_url, _floors(report, floor)))
        done = subprocess.run([PYTHON, "-m", "router.cli", "policy", "check", "--config",
                               str(config)], capture_output=True, text=True, timeout=60,
                              env={**os.environ, "EVAL_SIM_KEY": "test"})
        assert done.returncode == code, done.stderr
        if code:
            assert "task math: candidate model mid" in done.stderr
    assert json.loads(report.read_text())["suite_version"] == "1+1+1"



def test_a_report_that_cannot_be_written_leaves_the_previous_one_whole(
        sim: Running, tmp_path: Path) -> None:
    """The write fails part way (here: a file size limit): the report the router reads at
    start-up is still the previous one, byte for byte, and the run says so and exits 2."""
    out, details = tmp_path / "report.json", tmp_path / "items.jsonl"
    previous = (Path(__file__).resolve().parents[2] / "policies" / "defaults"
                / "simulator-evals.json").read_bytes()
    out.write_bytes(previous)
    config = tmp_path / "config.yaml"
    config.write_text(config_text(sim.base_url))
    limit = 256  # the new report is longer: its write stops here
    done = subprocess.run(
        [PYTHON, "-m", "router.cli", "eval", "run", "--config", str(config), "--suite",
         str(SIM_SUITES[0]), "--models", "mid", "--out", str(out), "--details", str(details)],
        capture_output=True, text=True, timeout=120, env={**os.environ, "EVAL_SIM_KEY": "test"},
        preexec_fn=lambda: file_size_limit(limit))
    assert out.read_bytes() == previous
    assert done.returncode == 2, done.stderr
    assert f"cannot write {out}" in done.stderr and "Traceback" not in done.stderr
    assert sorted(p.name for p in tmp_path.iterdir()) == ["config.yaml", "report.json"]


def test_a_new_report_gets_the_permissions_of_a_plain_file(
        sim: Running, tmp_path: Path) -> None:
    """Written through a temporary file, the report is still readable by others as a plain
    write under the umask makes it (a server may run as another user), not 0600."""
    out, plain = tmp_path / "report.json", tmp_path / "plain"
    plain.write_text("")
    done = eval_run(tmp_path, config_text(sim.base_url), "--suite", str(SIM_SUITES[0]),
                    "--models", "mid", "--out", str(out))
    assert done.returncode == 0, done.stderr
    assert EvalReport.model_validate_json(out.read_text()).results
    assert out.stat().st_mode & 0o777 == plain.stat().st_mode & 0o777
