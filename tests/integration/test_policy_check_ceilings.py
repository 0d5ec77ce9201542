"""`policy check` warns of a cost ceiling no deployment can meet: under the cheapest
deployment's cost for the smallest request (one empty message, one output token) every request
is refused, and under its cost at the output limit assumed when a request sets none every such
request is. Both are valid config, so the check still passes (as for a risk rule leaving a task
no model). The served config then refuses such requests as the warning says."""

from __future__ import annotations

import subprocess
from pathlib import Path

import openai
import pytest

from tests.support.procs import PYTHON
from tests.support.services import MINIMAL_CONFIG, start_router

pytestmark = pytest.mark.integration

# Deployment d costs $1 per million tokens either way: the smallest request (4 prompt tokens
# as the router counts one empty message, 1 output token) costs $0.000005, and with no output
# limit (priced at 512 output tokens) $0.000516.
# (no routes.default_model: beside policies it is never read, and policy check says so)
CEILINGS = MINIMAL_CONFIG.replace("routes: {default_model: m}\n", "") + """policies:
  default: {candidates: [m], max_cost_per_request_usd: 0.000004}
  tasks:
    code: {candidates: [m], max_cost_per_request_usd: 0.0005}
    math: {candidates: [m], max_cost_per_request_usd: 0.000516}
"""


def _check(tmp_path: Path, text: str) -> subprocess.CompletedProcess[str]:
    config = tmp_path / "config.yaml"
    config.write_text(text)
    return subprocess.run([PYTHON, "-m", "router.cli", "policy", "check", "--config",
                           str(config)], capture_output=True, text=True, timeout=120,
                          cwd=tmp_path)


def test_policy_check_warns_of_ceilings_no_deployment_can_meet(tmp_path: Path) -> None:
    result = _check(tmp_path, CEILINGS)
    assert result.returncode == 0, result.stderr
    warnings = [line.split(": warning: ", 1)[1] for line in result.stderr.splitlines()
                if ": warning: " in line]
    assert warnings == [
        "task code: max_cost_per_request_usd $0.0005 is under the cheapest deployment's cost "
        "for a request that sets no output limit (priced at 512 output tokens): $0.000516 (d): "
        "every request without max_tokens or max_completion_tokens is refused "
        "(400 over_cost_ceiling)",
        "default policy: max_cost_per_request_usd $4e-06 is under the cheapest deployment's "
        "cost for the smallest request (4 prompt tokens, 1 output token): $0.000005 (d): "
        "every request is refused (400 over_cost_ceiling)",
    ], result.stderr  # math's ceiling is met exactly: no warning


def test_the_warned_ceilings_refuse_requests_as_said(tmp_path: Path) -> None:
    router = start_router(tmp_path, CEILINGS)
    try:
        client = openai.OpenAI(base_url=f"{router.base_url}/v1", api_key="unused",
                               max_retries=0)
        smallest = {"model": "auto", "messages": [{"role": "user", "content": ""}]}
        refused = []
        for task, limit in (("chat", {"max_tokens": 1}), ("code", {})):
            with pytest.raises(openai.BadRequestError) as caught:
                client.chat.completions.create(**smallest, **limit,  # type: ignore[call-overload]
                                               extra_headers={"x-slorouter-task": task})
            refused.append((task, caught.value.code))
    finally:
        router.stop()
    assert refused == [("chat", "over_cost_ceiling"), ("code", "over_cost_ceiling")]
