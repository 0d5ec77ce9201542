"""A request that names a model whose replicas differ in `supports_tools` / `supports_json` (or
reaches it as `auto`'s per-task default, in a configuration without policies) is served by a
replica that has what it asks for; a replica without them serves it only when none
has them (a pinned request is served by its model as asked).

Prefix affinity spreads a pinned model's requests over its replicas by prompt prefix, so
without the capability filter about half of the prompts below landed on the replica that was
configured without tools or JSON mode. The simulator answers every request; the router's
`x-slorouter-model` header names the deployment that served it.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import httpx
import pytest

from tests.support.services import Running, start_router, start_simulator

pytestmark = pytest.mark.integration

FAST = {"ttft_p50_ms": 5, "ttft_p99_ms": 10, "tpot_p50_ms": 1, "tpot_p99_ms": 2,
        "output_tokens_p50": 8, "output_tokens_p99": 12}
PROMPTS = [f"Question {word}: what is the weather in the city?" for word in
           ("one", "two", "three", "four", "five", "six", "seven", "eight", "nine", "ten")]
TOOLS = [{"type": "function", "function": {"name": "get_weather",
                                           "parameters": {"type": "object"}}}]
ASKS: dict[str, dict[str, Any]] = {
    "tools": {"tools": TOOLS},
    "functions": {"functions": [{"name": "get_weather", "parameters": {"type": "object"}}]},
    "json_object": {"response_format": {"type": "json_object"}},
    "json_schema": {"response_format": {"type": "json_schema", "json_schema": {
        "name": "w", "schema": {"type": "object"}}}},
}


@pytest.fixture(scope="module")
def router(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Running]:
    directory = tmp_path_factory.mktemp("pinned-capabilities")
    sim = start_simulator(directory, {"m": FAST})
    config = f"""version: 1
deployments:
  - {{name: bare, model: openai/m, adapter: openai_passthrough, api_base: {sim.base_url}/v1,
     input_price_per_mtok: 1, output_price_per_mtok: 1, supports_tools: false,
     supports_json: false}}
  - {{name: full, model: openai/m, adapter: openai_passthrough, api_base: {sim.base_url}/v1,
     input_price_per_mtok: 1, output_price_per_mtok: 1}}
models:
  - {{name: mixed, deployments: [bare, full]}}
  - {{name: only-bare, deployments: [bare]}}
routes: {{default_model: mixed, aliases: [auto]}}
server: {{cache: {{backend: none}}}}
"""
    try:
        running = start_router(directory, config)
    except BaseException:
        sim.stop()
        raise
    yield running
    running.stop()
    sim.stop()


def _served_by(router: Running, model: str, prompt: str, **fields: Any) -> str:
    response = httpx.post(f"{router.base_url}/v1/chat/completions", timeout=20, json={
        "model": model, "messages": [{"role": "user", "content": prompt}], **fields},
        headers={"x-slorouter-task": "chat", "x-slorouter-risk": "low"})
    assert response.status_code == 200, response.text
    return response.headers["x-slorouter-model"]


@pytest.mark.parametrize("model", ["mixed", "auto"])  # auto: the per-task default, no policies
@pytest.mark.parametrize("ask", sorted(ASKS))
def test_a_pinned_model_serves_tools_and_json_from_a_replica_that_has_them(
        router: Running, ask: str, model: str) -> None:
    served = {_served_by(router, model, prompt, **ASKS[ask]) for prompt in PROMPTS}
    assert served == {"full"}


def test_plain_requests_still_use_every_replica_and_a_model_without_them_still_serves(
        router: Running) -> None:
    """The filter applies only to requests that ask for tools or JSON; and a model none of
    whose replicas has them is still served as asked (no fit check for pinned requests)."""
    assert {_served_by(router, "mixed", prompt) for prompt in PROMPTS} == {"bare", "full"}
    assert _served_by(router, "only-bare", PROMPTS[0], tools=TOOLS) == "bare"
