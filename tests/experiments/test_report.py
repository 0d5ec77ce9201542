"""The report: JSON model, text table, PNG plot and the CLI entry."""

from __future__ import annotations

import io
import random
from datetime import UTC, datetime
from pathlib import Path

import numpy as np

from router.experiments.monitor import report_from_store
from router.experiments.outcomes import Halt, MemoryOutcomeStore, Outcome
from router.experiments.report import ExperimentReport, render_table, report_command
from tests.experiments.support import TTFT_LOG_SD, TTFT_MEDIAN_MS, make_spec

NOW = datetime(2025, 6, 1, tzinfo=UTC)
SPEC = make_spec()


async def _report() -> ExperimentReport:
    store, rng = MemoryOutcomeStore(random.Random(0)), np.random.default_rng(4)
    for i in range(600):
        arm = "control" if i % 2 else "cheap"
        median = TTFT_MEDIAN_MS * (0.8 if arm == "cheap" else 1.0)
        ttft = float(rng.lognormal(np.log(median), TTFT_LOG_SD))
        await store.record(Outcome(SPEC.name, arm, f"r{i}", error=bool(rng.random() < 0.03),
                                   ttft_ms=ttft, e2e_ms=ttft * 4, cost_usd=0.001))
    await store.halt(SPEC.name, Halt("cheap", "error_rate", "test halt", 300, 0.2, 0.05, NOW))
    return await report_from_store(SPEC, store, now=NOW, rng=np.random.default_rng(0),
                                   resamples=200)


async def test_report_survives_a_json_round_trip() -> None:
    """The report validates back from its own JSON, as a client of GET /v1/experiments would."""
    report = await _report()
    assert ExperimentReport.model_validate_json(report.model_dump_json()) == report
    assert [a.name for a in report.arms] == ["control", "cheap"]
    assert report.arms[1].halted and report.halts[0].persisted
    assert len(report.arms[0].ttft_quantiles_ms) == 99


async def test_table_shows_arms_differences_tests_and_halts() -> None:
    """The text table names each arm, the primary test and the halt reason."""
    text = render_table(await _report())
    assert "control (control)" in text and "cheap HALTED" in text
    assert "ttft_ms p50" in text
    assert "ttft_ms" in text.split("always-valid tests")[1]
    assert "test halt" in text
    assert "policy selection: ok" in text  # no request was barred


async def test_report_flags_an_arm_the_policy_barred_requests_from() -> None:
    """Requests barred from an arm's route (no outcome of the arm) are in the report's
    selection check, and the table names the arm compared on the rest of its requests."""
    store = MemoryOutcomeStore(random.Random(0))
    for i in range(40):
        await store.record(Outcome(SPEC.name, "control" if i % 2 else "cheap", f"r{i}",
                                   error=False, e2e_ms=100.0, cost_usd=0.001))
    for _ in range(5):
        await store.count_barred(SPEC.name, "cheap")
    report = await report_from_store(SPEC, store, now=NOW, rng=np.random.default_rng(0),
                                     resamples=50)
    assert report.selection is not None
    assert report.selection.barred == {"control": 0, "cheap": 5}
    assert report.selection.flagged == ["cheap"]
    assert report.selection.shares["cheap"] == 5 / 25
    assert "cheap 5 (20%)" in render_table(report)


async def test_report_command_prints_and_draws_a_png(tmp_path: Path) -> None:
    """`report_command` writes the table and, with a plot path, a PNG file."""
    out, path = io.StringIO(), tmp_path / "exp.png"
    assert report_command(await _report(), out=out, plot_path=path) == 0
    assert path.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert "plot written to" in out.getvalue()


async def test_a_report_with_fields_this_version_does_not_know_is_read() -> None:
    """A newer service's report (a field added, as `selection` was) is read by an older CLI,
    the unknown fields left out: the previous CLI failed on every report of this one."""
    report = await _report()
    newer = report.model_dump(mode="json")
    newer["a_later_check"] = {"flagged": []}
    newer["arms"][0]["a_later_figure"] = 1.0
    assert ExperimentReport.model_validate(newer) == report
