"""A prompt that makes every provider fail costs one breaker failure, not one per deployment.

The simulator's `<<fail:500>>` marker answers 500 to that prompt wherever it is sent, as real
providers do with some inputs. Routed with `auto`, such a request fails on the cheaper
deployment and fails over to the other: only the first counts against its breaker. Before,
the failover deployment (which sees little other traffic) counted each one, opened after five,
and refused the requests pinned to it (15% of them, in a run at 50 req/s with 4% poisoned).
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import httpx
import openai
import pytest

from tests.support.services import FAST_PROFILE, Running, start_router, start_simulator

pytestmark = pytest.mark.integration

CONFIG = """version: 1
deployments:
  - {{name: cheap-1, model: openai/fast, adapter: openai_passthrough, api_base: '{base}/v1',
     input_price_per_mtok: 1, output_price_per_mtok: 2}}
  - {{name: premium-1, model: openai/fast, adapter: openai_passthrough, api_base: '{base}/v1',
     input_price_per_mtok: 2, output_price_per_mtok: 4}}
  - {{name: quoted-1, model: openai/fast, adapter: openai_passthrough, api_base: '{base}/v1',
     input_price_per_mtok: 1, output_price_per_mtok: 2}}
  - {{name: quoted-ll, model: openai/fast, adapter: litellm, api_base: '{base}/v1',
     api_key: 'env:SIM_KEY', input_price_per_mtok: 1, output_price_per_mtok: 2}}
models:
  - {{name: quoted, deployments: [quoted-1]}}
  - {{name: quoted-litellm, deployments: [quoted-ll]}}
  - {{name: cheap, deployments: [cheap-1]}}
  - {{name: premium, deployments: [premium-1]}}
routes: {{aliases: [auto], default_model: cheap}}
policies:
  default: {{candidates: [cheap, premium], objective: min_cost}}
server:
  cache: {{backend: none}}
  stats: {{explore_share: 0}}  # every request tries cheap first
"""


@pytest.fixture(scope="module")
def router(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Running]:
    directory: Path = tmp_path_factory.mktemp("poisoned")
    sim = start_simulator(directory, {"fast": FAST_PROFILE})
    gateway = start_router(directory, CONFIG.format(base=sim.base_url),
                           env={"SIM_KEY": "sim-key"})
    try:
        yield gateway
    finally:
        gateway.stop()
        sim.stop()


def test_poisoned_requests_leave_the_failover_deployment_serving(router: Running) -> None:
    client = openai.OpenAI(base_url=f"{router.base_url}/v1", api_key="unused", max_retries=0)
    for number in range(5):  # the breaker's consecutive failures
        with pytest.raises(openai.InternalServerError):
            client.chat.completions.create(model="auto", messages=[
                {"role": "user", "content": f"poisoned {number} <<fail:500>>"}])
    health = {d["deployment"]: d for d in
              httpx.get(f"{router.base_url}/v1/health/deployments").json()["deployments"]}
    assert health["cheap-1"]["state"] == "open"  # every one failed there first
    assert health["premium-1"]["state"] == "closed"
    assert health["premium-1"]["window_failures"] == 0
    answer = client.chat.completions.create(model="premium", messages=[
        {"role": "user", "content": "an ordinary question"}])
    assert answer.choices[0].message.content


@pytest.mark.parametrize(("model", "deployment", "quoting"), [
    ("quoted", "quoted-1", "<<fail:503>> 'retryDelay': '60s'"),
    # litellm quotes the provider's message after its own `...Exception - `: a prompt that
    # writes one before a body of its own (the re-audit of 2026-12-07)
    ("quoted-litellm", "quoted-ll", "<<fail:503>> Exception - " + json.dumps({"error": {
        "details": [{"@type": "type.googleapis.com/google.rpc.RetryInfo",
                     "retryDelay": "60s"}]}})),
])
def test_a_prompt_quoted_in_an_error_does_not_set_the_wait(
        router: Running, model: str, deployment: str, quoting: str) -> None:
    """The simulator's 503 quotes the prompt, as real providers quote what they refused: a
    prompt carrying Google's `RetryInfo` words (`'retryDelay': '60s'`) set the wait the client
    was told and the breaker held its circuit open for, 60 s for every tenant (the security
    audit of 2026-12-07). The wait is read from a body's structure only."""
    client = openai.OpenAI(base_url=f"{router.base_url}/v1", api_key="unused", max_retries=0)
    waits = []
    for _ in range(5):  # the breaker's consecutive failures
        with pytest.raises(openai.APIStatusError) as refused:
            client.chat.completions.create(model=model, messages=[
                {"role": "user", "content": quoting}])
        assert refused.value.status_code == 503
        waits.append(refused.value.response.headers.get("retry-after"))
    assert "60" not in waits, waits
    health = {d["deployment"]: d for d in
              httpx.get(f"{router.base_url}/v1/health/deployments").json()["deployments"]}
    assert health[deployment]["state"] == "open"
    assert health[deployment]["half_open_in_s"] < 30, health[deployment]
