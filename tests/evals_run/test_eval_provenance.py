"""Eval reports tied to what was evaluated: provider models, suite hash, optional maximum age."""

from __future__ import annotations

import argparse
import json
from datetime import UTC, datetime
from pathlib import Path

import pytest

from evals.run.aggregate import build_report, cells
from evals.run.runner import Outcome
from evals.run.suite import load_suite, suite_hash
from policies.eval_provenance import bind_to_deployments
from policies.eval_report import load_reports
from router.policy_cli import policy_check
from tests.evals_run.test_eval_reports import row, write

SUITES = Path(__file__).resolve().parents[2] / "evals" / "suites"
NOW = datetime(2026, 12, 1, 12, 0, tzinfo=UTC)


def config(tmp_path: Path, fast_model: str, extra: str = "") -> Path:
    """The audit's config: math floor 0.80 held by `fast`, deployed as `fast_model`."""
    path = tmp_path / f"cfg-{fast_model.replace('/', '-')}.yaml"
    path.write_text(f"""version: 1
deployments:
  - {{name: d-fast, model: {fast_model}, adapter: openai_passthrough,
     api_base: http://127.0.0.1:9/v1, input_price_per_mtok: 0.15, output_price_per_mtok: 0.6}}
models:
  - {{name: fast, deployments: [d-fast]}}
policies:
  eval_reports: [r.json]
{extra}  default: {{candidates: [fast]}}
  tasks:
    math: {{candidates: [fast], quality_floor: {{metric: accuracy, min: 0.80}}}}
""")
    return path


def relative_config(tmp_path: Path, ratio: float) -> Path:
    """`config`'s, with a model `large` (deployed as `openai/large`) and the math floor
    relative to it at `ratio`."""
    path = tmp_path / "cfg-relative.yaml"
    path.write_text(config(tmp_path, "openai/fast").read_text().replace(
        "  - {name: fast, deployments: [d-fast]}\n",
        "  - {name: fast, deployments: [d-fast]}\n  - {name: large, deployments: [d-large]}\n"
    ).replace("models:\n", "  - {name: d-large, model: openai/large, adapter: openai_passthrough,"
              "\n     api_base: http://127.0.0.1:9/v1, input_price_per_mtok: 5, "
              "output_price_per_mtok: 15}\nmodels:\n", 1).replace(
        "quality_floor: {metric: accuracy, min: 0.80}",
        f"quality_floor: {{metric: accuracy, relative_to: large, ratio: {ratio}}}"))
    return path


def check(path: Path, capsys: pytest.CaptureFixture[str]) -> tuple[int, str]:
    code = policy_check(argparse.Namespace(config=path))
    return code, capsys.readouterr().err


def test_a_floor_backed_by_an_eval_of_another_provider_model_is_refused(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """Swapping the deployment behind `fast` no longer keeps the floor it had proven."""
    write(tmp_path / "r.json", [row(k=97, n=100, provider_models=["openai/gpt-4o-mini"])])
    assert check(config(tmp_path, "openai/gpt-4o-mini"), capsys) == (0, "")
    code, err = check(config(tmp_path, "openai/gpt-3.5-turbo"), capsys)
    assert code == 1
    assert ("task math: candidate model fast: eval of fast for math/accuracy set aside: the "
            "report was made for provider models ['openai/gpt-4o-mini'], but fast now deploys "
            "['openai/gpt-3.5-turbo']") in err


def test_a_report_without_provider_models_still_backs_floors_with_a_warning(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    write(tmp_path / "r.json", [row(k=97, n=100)])
    code, err = check(config(tmp_path, "openai/gpt-3.5-turbo"), capsys)
    assert code == 0
    assert "warning: evals of fast record no provider models" in err


def test_the_optional_maximum_age_sets_old_reports_aside(tmp_path: Path) -> None:
    """Off by default; with a maximum, a report older than it backs no floor."""
    table = load_reports([write(tmp_path / "r.json", [row(provider_models=["m"])],
                                created="2026-10-01")])
    deployed = {"fast": ("m",)}
    assert bind_to_deployments(table, deployed, NOW).get("fast", "math", "accuracy")
    assert bind_to_deployments(table, deployed, NOW, 90).get("fast", "math", "accuracy")
    aged = bind_to_deployments(table, deployed, NOW, 30)
    assert aged.get("fast", "math", "accuracy") is None
    age = (NOW - datetime(2026, 10, 1, tzinfo=UTC)).total_seconds() / 86400
    assert aged.refusal("fast", "math", "accuracy") == (
        f"the report is {age:.1f} days old (created 2026-10-01T00:00:00+00:00), over "
        "policies.eval_report_max_age_days 30")


def test_a_result_set_aside_changes_the_version_routing_is_stamped_with(tmp_path: Path) -> None:
    """The same reports, with a result aged out, route differently (a floor that result backed
    now bars its model): the table's version, part of the policy version, changes with it; it
    stood still, so decisions and cached answers looked the same across the change. With
    nothing set aside it is the reports' own."""
    table = load_reports([write(tmp_path / "r.json", [row(provider_models=["m"])],
                                created="2026-10-01")])
    deployed = {"fast": ("m",)}
    kept = bind_to_deployments(table, deployed, NOW, 90)
    aged = bind_to_deployments(table, deployed, NOW, 30)
    assert kept.version == table.version != aged.version
    assert aged.version == bind_to_deployments(table, deployed, NOW, 20).version


def test_a_report_dated_in_the_future_backs_no_floor_under_a_maximum_age(
        tmp_path: Path) -> None:
    """A future `created` would keep a report young forever: with a maximum age it is set
    aside (beyond an hour of clock skew); without one the date is not used, so it backs floors."""
    table = load_reports([write(tmp_path / "r.json", [row(provider_models=["m"])],
                                created="2026-12-03")])
    deployed = {"fast": ("m",)}
    assert bind_to_deployments(table, deployed, NOW).get("fast", "math", "accuracy")
    dated = bind_to_deployments(table, deployed, NOW, 30)
    assert dated.get("fast", "math", "accuracy") is None
    assert dated.refusal("fast", "math", "accuracy") == (
        "the report is dated in the future (created 2026-12-03T00:00:00+00:00, now "
        "2026-12-01T12:00:00+00:00), so its age cannot be checked against "
        "policies.eval_report_max_age_days 30")
    skewed = load_reports([write(tmp_path / "s.json", [row(provider_models=["m"])],
                                 created="2026-12-01T12:30:00+00:00")])
    assert bind_to_deployments(skewed, deployed, NOW, 30).get("fast", "math", "accuracy")


def test_the_max_age_setting_reaches_policy_check(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    write(tmp_path / "r.json", [row(k=97, n=100, provider_models=["openai/gpt-4o-mini"])],
          created="2001-01-01")
    path = config(tmp_path, "openai/gpt-4o-mini", "  eval_report_max_age_days: 365\n")
    code, err = check(path, capsys)
    assert code == 1 and "days old (created 2001-01-01T00:00:00+00:00)" in err


def _outcome(model: str, score: float, suite: str = "gsm8k-50-sim") -> Outcome:
    return Outcome(suite, "math", "accuracy", model, "i", score, None, "", "d", "x", 0.1)


def test_eval_run_records_provider_models_and_the_suite_hash(tmp_path: Path) -> None:
    """Each result names its logical model's provider models (sorted, distinct) and the hash
    of the suite its items came from; the written report loads and binds."""
    suite = load_suite(SUITES / "gsm8k-50-sim.yaml")
    found = cells([_outcome("fast", 1.0), _outcome("fast", 0.0), _outcome("large", 1.0)])
    report = build_report([suite], found, "2026-12-01T00:00:00+00:00",
                          {"fast": ["openai/b", "openai/a", "openai/b"], "large": ["x/large"]})
    by_model = {r.model: r for r in report.results}
    assert by_model["fast"].provider_models == ("openai/a", "openai/b")
    assert by_model["large"].suite_hash == suite_hash(suite)
    assert suite_hash(suite) != suite_hash(load_suite(SUITES / "gsm8k-50.yaml"))
    path = tmp_path / "r.json"
    path.write_text(report.model_dump_json())
    bound = bind_to_deployments(load_reports([path]), {"fast": ("openai/a", "openai/b")}, NOW)
    assert bound.get("fast", "math", "accuracy") is not None and not bound.warnings
    assert json.loads(path.read_text())["results"][0]["provider_models"] == ["openai/a",
                                                                             "openai/b"]


def test_written_bounds_are_rounded_outward(tmp_path: Path) -> None:
    """A lower bound of 0.7999996 was written as 0.8 and passed a 0.80 floor; it is written
    0.799999 now (and an upper bound is rounded up)."""
    from evals.run.aggregate import Cell
    from policies.eligibility import floor_check
    from policies.eval_report import quality_table
    from policies.schema import QualityFloor

    suite = load_suite(SUITES / "gsm8k-50-sim.yaml")
    cell = Cell("fast", "math", "accuracy", 0.85, 200, 0.7999996, 0.9000001, {},
                (suite.name,))
    report = build_report([suite], [cell], "2026-12-01", {"fast": ["m"]})
    (result,) = report.results
    assert (result.lower, result.upper) == (0.799999, 0.900001)
    check = floor_check(QualityFloor(metric="accuracy", min=0.8), "fast", "math",
                        quality_table([report], "v"))
    assert not check.passed


def test_the_newest_result_that_can_back_a_floor_is_the_one_used(tmp_path: Path) -> None:
    """The newest report won before its results were checked: a report typo'd 2099 hid every
    later eval of its keys (without a maximum age), and with one set it was refused without
    the valid report of today taking its place; a newer eval of a trial's provider models hid
    the eval of those deployed (the evals audit of 2026-12-07). The newest usable one is used
    now, a report dated in the future only when no other can back the floor."""
    today = write(tmp_path / "today.json", [row(k=20, provider_models=["m"])],
                  created="2026-12-01")
    future = write(tmp_path / "future.json", [row(k=48, provider_models=["m"])],
                   created="2099-01-01")
    trial = write(tmp_path / "trial.json", [row(k=49, provider_models=["m-v2"])],
                  created="2026-12-01T11:00:00+00:00")
    deployed = {"fast": ("m",)}
    for max_age in (None, 30.0):
        bound = bind_to_deployments(load_reports([today, future, trial]), deployed, NOW, max_age)
        result = bound.get("fast", "math", "accuracy")
        assert result is not None and result.mean == 0.4, max_age  # today's, k=20 of 50
    alone = bind_to_deployments(load_reports([future]), deployed, NOW)
    assert alone.get("fast", "math", "accuracy") is not None  # no other: its date is not used
    assert bind_to_deployments(load_reports([future]), deployed, NOW, 30.0).get(
        "fast", "math", "accuracy") is None
    plain = load_reports([today])
    assert bind_to_deployments(plain, deployed, NOW).version == plain.version
    assert bind_to_deployments(load_reports([today, trial]), deployed, NOW).version != \
        load_reports([today, trial]).version  # the newest was passed over: routing changed


def test_a_relative_floor_compares_results_of_one_suite(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """A model evaluated again on an easier suite passed a floor relative to a reference
    measured on the hard one (the evals audit of 2026-12-07): results whose suite hashes
    differ are not compared."""
    path = relative_config(tmp_path, 0.95)
    for fast_suite, expected in (("hard", 0), ("trivial", 1)):
        write(tmp_path / "r.json", [
            row(model="large", k=45, n=50, provider_models=["openai/large"], suite_hash="hard"),
            row(model="fast", k=49, n=50, provider_models=["openai/fast"],
                suite_hash=fast_suite)])
        code, err = check(path, capsys)
        assert code == expected, err
    assert "measured on suite trivial and its reference on suite hard" in err


def test_an_implausible_eval_size_is_an_error_not_a_traceback(tmp_path: Path) -> None:
    """`n: 10**309` broke the bound's check with an OverflowError (exit 1, read as failed
    floors); a result of more than a billion answers is refused with the others' errors."""
    from policies.eval_report import EvalReportError

    with pytest.raises(EvalReportError) as caught:
        load_reports([write(tmp_path / "r.json", [{**row(), "n": 10**309}])])
    assert any("less than or equal to 1000000000" in p for p in caught.value.problems)


def test_the_version_says_which_result_backs_a_floor_as_reports_age(tmp_path: Path) -> None:
    """A newer eval of a trial's provider models and an older one of those deployed: the older
    backs the floor until it ages out too. The version named only the keys set aside, so both
    states had one version while routing differed (the re-audit of 2026-12-07); the refusal
    now gives each result's reason."""
    trial = write(tmp_path / "trial.json", [row(k=49, provider_models=["m-v2"])],
                  created="2026-12-01T11:00:00+00:00")
    older = write(tmp_path / "older.json", [row(k=45, provider_models=["m"])],
                  created="2026-11-25")
    table = load_reports([trial, older])
    deployed = {"fast": ("m",)}
    backed = bind_to_deployments(table, deployed, NOW, 30)
    aged = bind_to_deployments(table, deployed, datetime(2026, 12, 30, tzinfo=UTC), 30)
    assert backed.get("fast", "math", "accuracy") is not None
    assert aged.get("fast", "math", "accuracy") is None
    assert len({table.version, backed.version, aged.version}) == 3
    reason = aged.refusal("fast", "math", "accuracy")
    assert reason is not None and "made for provider models ['m-v2']" in reason
    assert "an older report: the report is 35.0 days old" in reason


def test_a_relative_floors_suites_are_compared_whatever_their_order(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """`eval run` joins a pooled task's suite hashes in the order the suites were given: the
    same two suites in the other order are the same suites (the re-audit of 2026-12-07)."""
    path = relative_config(tmp_path, 0.5)
    write(tmp_path / "r.json", [
        row(model="large", k=45, n=50, provider_models=["openai/large"], suite_hash="a+b"),
        row(model="fast", k=45, n=50, provider_models=["openai/fast"], suite_hash="b+a")])
    code, err = check(path, capsys)
    assert code == 0, err
