"""An experiment that can never assign a request is said at start-up, and the documented
example is not one of them."""

from __future__ import annotations

import logging
import re
from datetime import UTC, datetime
from pathlib import Path

import pytest
import yaml

from policies.experiments.schema import ExperimentSpec
from policies.schema import RouterConfig
from router.wiring import warn_ended_experiments
from tests.experiments.support import make_spec

NOW = datetime(2026, 12, 1, 12, 0, tzinfo=UTC)
DOCS = Path(__file__).resolve().parents[2] / "docs"


def _config(*specs: ExperimentSpec) -> RouterConfig:
    return RouterConfig.model_validate({
        "deployments": [{"name": "d", "model": "openai/x", "adapter": "openai_passthrough",
                         "api_base": "http://127.0.0.1:9/v1"}],
        "models": [{"name": "small", "deployments": ["d"]}],
        "routes": {"default_model": "small"},
        "experiments": [spec.model_dump() for spec in specs],
    })


def test_an_experiment_whose_stop_has_passed_is_logged(caplog: pytest.LogCaptureFixture) -> None:
    ended = make_spec(name="old", stop=datetime(2025, 7, 1, tzinfo=UTC))
    running = make_spec(name="now", start=datetime(2026, 11, 1, tzinfo=UTC),
                        stop=datetime(2027, 1, 1, tzinfo=UTC))
    open_ended = make_spec(name="open")
    with caplog.at_level(logging.WARNING, logger="slorouter.wiring"):
        warn_ended_experiments(_config(ended, running, open_ended), NOW)
    warned = [r for r in caplog.records if r.getMessage() == "experiment_ended"]
    assert [r.event_data["experiment"] for r in warned] == ["old"]  # type: ignore[attr-defined]
    assert warned[0].levelno == logging.WARNING


def test_a_stop_at_this_very_moment_has_passed(caplog: pytest.LogCaptureFixture) -> None:
    """`stop` is exclusive: at `stop` the experiment is over."""
    with caplog.at_level(logging.WARNING, logger="slorouter.wiring"):
        warn_ended_experiments(_config(make_spec(stop=NOW)), NOW)
    assert [r.getMessage() for r in caplog.records] == ["experiment_ended"]


def test_the_documented_example_runs_when_copied() -> None:
    """docs/experiments.md's spec, pasted into a config today, assigns requests."""
    text = (DOCS / "experiments.md").read_text()
    block = re.search(r"## The spec.*?```yaml\n(.*?)```", text, re.S)
    assert block is not None
    spec = ExperimentSpec.model_validate(yaml.safe_load(block.group(1)))
    assert spec.is_running(datetime.now(UTC))
