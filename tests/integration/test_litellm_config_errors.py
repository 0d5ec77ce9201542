"""Errors that name their real cause: the deployment's configuration, the litellm adapter's own
limits, or the request field no model could take, never a bad or refusing upstream.

- A litellm deployment with no `api_key` (and no `OPENAI_API_KEY` in the router's environment)
  never reaches its upstream: the openai SDK refuses to build a client without credentials and
  litellm reports that as a made-up 500, which read as "upstream answered 200 with a body that
  is not a chat.completion". It is `deployment_missing_credentials`, and `policy check` and
  `serve` say so at start-up.
- litellm refuses a `tool_choice` form it does not know (OpenAI's `custom` tools) in its own
  checks, before any call: the adapter's limit (`adapter_rejected`, `param: tool_choice`), not
  "upstream returned 400".
- `no_model_fits` names the field no candidate can take: `tools` (or `functions`),
  `response_format`, `messages` (too long).

The simulator counts the requests it had (`/control/stats`), so the tests show that none reached it.
"""

from __future__ import annotations

import os
import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import openai
import pytest

from tests.support.procs import PYTHON
from tests.support.services import Running, start_router, start_simulator

pytestmark = pytest.mark.integration

API_KEY = "sk-test-litellm-config"
MESSAGES: Any = [{"role": "user", "content": "what is the weather in Paris?"}]
KEY_VARIABLES = ("OPENAI_API_KEY", "OPENAI_ADMIN_KEY")


def _config(sim: str) -> str:
    return f"""version: 1
deployments:
  - {{name: keyless, model: openai/m, adapter: litellm, api_base: '{sim}/v1',
     input_price_per_mtok: 1, output_price_per_mtok: 1}}
  - {{name: ll, model: openai/m, adapter: litellm, api_base: '{sim}/v1', api_key: env:UP_KEY,
     input_price_per_mtok: 1, output_price_per_mtok: 1}}
  - {{name: bare, model: openai/m, adapter: openai_passthrough, api_base: '{sim}/v1',
     input_price_per_mtok: 1, output_price_per_mtok: 1, supports_tools: false,
     supports_json: false, context_window: 4000}}
models:
  - {{name: keyless, deployments: [keyless]}}
  - {{name: ll, deployments: [ll]}}
  - {{name: bare, deployments: [bare]}}
routes: {{default_model: bare}}
api_keys: [{{key: env:TENANT_KEY, tenant: t, scopes: [read]}}]
policies:
  default: {{candidates: [bare]}}
server: {{cache: {{backend: none}}}}
"""


@pytest.fixture(scope="module")
def keyless_environment() -> Iterator[None]:
    with pytest.MonkeyPatch.context() as patch:
        for name in KEY_VARIABLES:
            patch.delenv(name, raising=False)
        yield


@pytest.fixture(scope="module")
def sim(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Running]:
    running = start_simulator(tmp_path_factory.mktemp("litellm-config-sim"), {"m": {}})
    yield running
    running.stop()


@pytest.fixture(scope="module")
def gateway(tmp_path_factory: pytest.TempPathFactory, sim: Running,
            keyless_environment: None) -> Iterator[Running]:
    directory = tmp_path_factory.mktemp("litellm-config")
    running = start_router(directory, _config(sim.base_url),
                           env={"TENANT_KEY": API_KEY, "UP_KEY": "sk-upstream-1"})
    yield running
    running.stop()


def _client(gateway: Running) -> openai.OpenAI:
    return openai.OpenAI(base_url=f"{gateway.base_url}/v1", api_key=API_KEY, max_retries=0,
                         timeout=30)


def _sim_requests(sim: Running) -> int:
    stats = httpx.get(f"{sim.base_url}/control/stats", timeout=5).json()
    return int(stats["models"]["m"]["requests"])


@pytest.mark.parametrize("stream", [False, True])
def test_a_litellm_deployment_without_a_key_says_so(gateway: Running, sim: Running,
                                                    stream: bool) -> None:
    before = _sim_requests(sim)
    with pytest.raises(openai.APIStatusError) as caught:
        _client(gateway).chat.completions.create(model="keyless", messages=MESSAGES,
                                                 stream=stream)
    error = caught.value
    body: Any = error.body
    assert error.status_code == 502, body
    assert error.response.headers["x-should-retry"] == "false"  # the config must change
    assert body["code"] == "deployment_missing_credentials", body
    assert "keyless" in body["message"] and "api_key" in body["message"], body
    assert "not a chat.completion" not in body["message"], body
    assert _sim_requests(sim) == before  # nothing was sent


@pytest.mark.parametrize("stream", [False, True])
def test_a_tool_choice_litellm_cannot_take_is_the_adapters_limit(gateway: Running, sim: Running,
                                                                 stream: bool) -> None:
    before = _sim_requests(sim)
    with pytest.raises(openai.BadRequestError) as caught:
        _client(gateway).chat.completions.create(
            model="ll", messages=MESSAGES, stream=stream,
            tools=[{"type": "custom", "custom": {"name": "shell"}}],
            tool_choice={"type": "custom", "custom": {"name": "shell"}})
    body: Any = caught.value.body
    assert (body["code"], body["param"]) == ("adapter_rejected", "tool_choice"), body
    assert "litellm adapter does not support" in body["message"], body
    assert "upstream returned" not in body["message"], body
    assert _sim_requests(sim) == before


TOOLS: Any = [{"type": "function", "function": {"name": "get_weather",
                                               "parameters": {"type": "object"}}}]


@pytest.mark.parametrize(("fields", "param"), [
    ({"tools": TOOLS}, "tools"),
    ({"extra_body": {"functions": [{"name": "get_weather", "parameters": {"type": "object"}}]}},
     "functions"),
    ({"response_format": {"type": "json_object"}}, "response_format"),
    ({"messages": [{"role": "user", "content": "word " * 5000}]}, "messages"),
])
def test_no_model_fits_names_the_field_none_could_take(gateway: Running, fields: dict[str, Any],
                                                      param: str) -> None:
    request = {"model": "auto", "messages": MESSAGES, **fields}
    with pytest.raises(openai.BadRequestError) as caught:
        _client(gateway).chat.completions.create(**request)
    body: Any = caught.value.body
    assert (body["code"], body["param"]) == ("no_model_fits", param), body


def test_policy_check_warns_of_a_litellm_deployment_without_a_key(
        tmp_path: Path, keyless_environment: None) -> None:
    path = tmp_path / "config.yaml"
    path.write_text(_config("http://127.0.0.1:9"))
    result = subprocess.run([PYTHON, "-m", "router.cli", "policy", "check", "--config",
                             str(path)], capture_output=True, text=True, timeout=120,
                            cwd=tmp_path, env=dict(os.environ))
    assert result.returncode == 0, result.stderr
    warnings = [line for line in result.stderr.splitlines() if "warning:" in line]
    assert any("deployments.keyless" in line and "OPENAI_API_KEY" in line
               for line in warnings), result.stderr
    assert not any("deployments.ll" in line for line in warnings), result.stderr


def test_serve_warns_of_a_litellm_deployment_without_a_key(gateway: Running) -> None:
    assert gateway.proc.log_path is not None
    log = gateway.proc.log_path.read_text()
    assert "deployment_missing_credentials" in log and "deployments.keyless" in log, log
