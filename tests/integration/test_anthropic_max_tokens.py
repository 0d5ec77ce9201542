"""A request without `max_tokens` to one of Anthropic's models, through litellm.

Anthropic requires `max_tokens`; litellm fills it from its model table, and for a model its
table lacks (many dated Claude ids in the bundled table) with a fallback of 128,000, which
Anthropic refuses for a model that writes less: the plainest request, `{"model", "messages"}`,
was a 400. A deployment's `max_output_tokens` is now sent as `max_tokens` when the client sets
no limit, and start-up (and `policy check`) warns of an Anthropic deployment litellm cannot size
that has none. Served end to end: the simulator's Anthropic wire (which refuses a `max_tokens`
over its model's limit), the router as a process, the real `openai` client.
"""

from __future__ import annotations

import contextlib
import os
import subprocess
from collections.abc import Iterator
from pathlib import Path

import openai
import pytest

from tests.support.procs import PYTHON
from tests.support.services import FAST_PROFILE, Running, start_router, start_simulator

pytestmark = pytest.mark.integration

MOST = 512
MESSAGES = [{"role": "user", "content": "Say hello."}]


def _config(sim_base: str) -> str:
    return f"""version: 1
deployments:
  - {{name: claude-sized, model: anthropic/lim, adapter: litellm, api_base: {sim_base},
     api_key: env:SIM_KEY, input_price_per_mtok: 1, output_price_per_mtok: 1,
     max_output_tokens: {MOST}}}
models:
  - {{name: claude, deployments: [claude-sized]}}
routes: {{default_model: claude, aliases: [auto]}}
server: {{cache: {{backend: none}}}}
"""


@pytest.fixture(scope="module")
def router(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Running]:
    directory = tmp_path_factory.mktemp("max-tokens")
    with contextlib.ExitStack() as stack:
        sim = start_simulator(directory, {"lim": {**FAST_PROFILE, "max_output_tokens": MOST}})
        stack.callback(sim.stop)
        running = start_router(directory, _config(sim.base_url), env={"SIM_KEY": "sim-key"})
        stack.callback(running.stop)
        yield running


@pytest.mark.parametrize("stream", [False, True])
def test_a_request_without_max_tokens_is_sent_the_deployments_limit(router: Running,
                                                                    stream: bool) -> None:
    client = openai.OpenAI(base_url=f"{router.base_url}/v1", api_key="unused", max_retries=0,
                           timeout=20)
    reply = client.chat.completions.with_raw_response.create(model="claude", messages=MESSAGES,
                                                             stream=stream)
    text = ("".join(c.choices[0].delta.content or "" for c in reply.parse() if c.choices)
            if stream else reply.parse().choices[0].message.content)
    assert reply.http_response.status_code == 200 and text
    # a client's own limit above the model's is lowered, as before; one below it is kept
    capped = client.chat.completions.create(model="claude", messages=MESSAGES, max_tokens=3)
    assert capped.usage is not None and capped.usage.completion_tokens <= 3
    assert client.chat.completions.create(model="claude", messages=MESSAGES,
                                          max_tokens=100_000).choices[0].message.content


def test_policy_check_warns_of_an_anthropic_deployment_litellm_cannot_size(
        tmp_path: Path) -> None:
    config = tmp_path / "config.yaml"
    config.write_text(_config("http://127.0.0.1:9").replace(f",\n     max_output_tokens: {MOST}",
                                                            ""))
    result = subprocess.run([PYTHON, "-m", "router.cli", "policy", "check", "--config",
                             str(config)], capture_output=True, text=True, timeout=120,
                            env={**os.environ, "SIM_KEY": "sim-key"})
    assert result.returncode == 0, result.stderr
    assert ("warning: deployments.claude-sized: litellm does not know how many tokens "
            "'anthropic/lim' may write") in result.stderr
    assert "set max_output_tokens" in result.stderr
