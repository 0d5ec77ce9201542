"""`slorouter explain` and `slorouter policy check` with no `--config` read the embedded
default `serve` would start with in the same environment: the simulator default without
provider keys (its address stands in: nothing is called), else the provider default narrowed to
the providers whose key is set."""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path

import pytest

from tests.support.procs import PYTHON

pytestmark = pytest.mark.integration

REQUEST = json.dumps({"model": "auto", "n": 2,
                      "messages": [{"role": "user", "content": "Solve 12 * 17"}]})


def _run(tmp_path: Path, *args: str, keys: dict[str, str]) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items()
           if k not in ("OPENAI_API_KEY", "ANTHROPIC_API_KEY", "SLOROUTER_SIM_BASE")}
    return subprocess.run([PYTHON, "-m", "router.cli", *args], capture_output=True, text=True,
                          timeout=120, cwd=tmp_path, input=REQUEST, env={**env, **keys})


def _deployments(explained: dict[str, object]) -> set[str]:
    verdicts = explained["candidates"]
    assert isinstance(verdicts, list)
    return {v["deployment"] for v in verdicts}


def test_explain_without_a_config_explains_the_simulator_default(tmp_path: Path) -> None:
    result = _run(tmp_path, "explain", keys={})
    assert result.returncode == 0, result.stderr
    explained = json.loads(result.stdout)
    assert "sim-large" in _deployments(explained) <= {"sim-fast", "sim-balanced", "sim-large"}
    large = next(v for v in explained["candidates"] if v["deployment"] == "sim-large")
    assert any(c["detail"] == "request asks for 2 choices (n); deployment answers one"
               for c in large["checks"])  # Anthropic through litellm takes no `n`


def test_explain_and_check_without_a_config_read_the_providers_whose_key_is_set(
        tmp_path: Path) -> None:
    result = _run(tmp_path, "explain", keys={"OPENAI_API_KEY": "sk-test-0123456789"})
    assert result.returncode == 0, result.stderr
    assert _deployments(json.loads(result.stdout)) <= {"openai-gpt-4o-mini", "openai-gpt-4o"}
    check = _run(tmp_path, "policy", "check", keys={"OPENAI_API_KEY": "sk-test-0123456789"})
    assert check.returncode == 0 and "policy check passed" in check.stdout, check.stderr


@pytest.mark.parametrize(("text", "side_effecting"), [
    ("hey", False), ("Transfer $500 from checking to savings", True)])
def test_explain_says_whether_the_request_is_side_effecting(tmp_path: Path, text: str,
                                                           side_effecting: bool) -> None:
    """Why a request was not retried: an `action` acts only when hinted or when the model is
    sure of it (docs/classifier.md, "Which actions act"), which the explanation now shows."""
    request = json.dumps({"model": "auto", "messages": [{"role": "user", "content": text}]})
    env = {k: v for k, v in os.environ.items()
           if k not in ("OPENAI_API_KEY", "ANTHROPIC_API_KEY", "SLOROUTER_SIM_BASE")}
    result = subprocess.run([PYTHON, "-m", "router.cli", "explain"], capture_output=True,
                            text=True, timeout=120, cwd=tmp_path, input=request, env=env)
    assert result.returncode == 0, result.stderr
    assert json.loads(result.stdout)["labels"]["side_effecting"] is side_effecting
