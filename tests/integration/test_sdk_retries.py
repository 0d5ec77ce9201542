"""The OpenAI SDK's own retries stop where slorouter says not to retry.

The SDKs retry 408, 409, 429 and 5xx twice by default, with no `Idempotency-Key`. A side effect
that failed after it was sent is a 504 `unknown_commit` (it may have run), and a deployment the
provider refuses (401) is a 502 that only a configuration change fixes: both answers carry
`x-should-retry: false`, so the SDK gives up at once. The simulator counts what reached it.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import httpx
import openai
import pytest

from tests.support.services import Running, start_router, start_simulator

pytestmark = pytest.mark.integration

API_KEY = "sk-test-sdk-retries"
PAYMENT_TOOL: Any = [{"type": "function", "function": {
    "name": "send_payment", "parameters": {"type": "object", "properties": {
        "amount": {"type": "number"}}}}}]


@pytest.fixture(scope="module")
def stack(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Running, Running]]:
    directory = tmp_path_factory.mktemp("sdk-retries")
    sim = start_simulator(directory, {"hang": {"hang_rate": 1.0}, "ok": {}})
    config = f"""version: 1
deployments:
  - {{name: hang, model: openai/hang, adapter: openai_passthrough, api_base: '{sim.base_url}/v1',
     input_price_per_mtok: 1, output_price_per_mtok: 1, timeout_s: 0.5}}
  - {{name: badkey, model: openai/ok, adapter: openai_passthrough,
     api_base: '{sim.base_url}/nowhere/v1', input_price_per_mtok: 1, output_price_per_mtok: 1}}
models: [{{name: hang, deployments: [hang]}}, {{name: badkey, deployments: [badkey]}}]
routes: {{default_model: hang}}
api_keys: [{{key: env:TENANT_KEY, tenant: t, scopes: [read]}}]
server:
  cache: {{backend: none}}
  reliability: {{max_retries_per_deployment: 0}}
"""
    router = start_router(directory, config, env={"TENANT_KEY": API_KEY})
    yield router, sim
    router.stop()
    sim.stop()


def _upstream_requests(sim: Running) -> int:
    stats = httpx.get(f"{sim.base_url}/control/stats", timeout=10).json()
    return sum(int(m.get("requests", 0)) for m in stats["models"].values()) + int(
        stats.get("unknown_model_requests", 0))


def test_an_unknown_commit_is_not_retried_by_the_sdk(stack: tuple[Running, Running]) -> None:
    router, sim = stack
    client = openai.OpenAI(base_url=f"{router.base_url}/v1", api_key=API_KEY, max_retries=2,
                           timeout=30)
    before = _upstream_requests(sim)
    with pytest.raises(openai.APIStatusError) as caught:
        client.chat.completions.create(
            model="hang", tools=PAYMENT_TOOL, extra_headers={"x-slorouter-task": "action"},
            messages=[{"role": "user", "content": "Send 100 dollars to account 42"}])
    assert caught.value.status_code == 504
    assert caught.value.body["code"] == "unknown_commit"  # type: ignore[index]
    assert caught.value.response.headers["x-should-retry"] == "false"
    assert _upstream_requests(sim) - before == 1  # the payment was sent once, not three times


def test_a_misconfigured_deployment_is_not_retried_by_the_sdk(
        stack: tuple[Running, Running]) -> None:
    router, _ = stack
    client = openai.OpenAI(base_url=f"{router.base_url}/v1", api_key=API_KEY, max_retries=2,
                           timeout=30)
    with pytest.raises(openai.APIStatusError) as caught:
        client.chat.completions.with_raw_response.create(
            model="badkey", messages=[{"role": "user", "content": "hello"}])
    assert caught.value.status_code == 502
    assert caught.value.body["code"] == "upstream_not_found"  # type: ignore[index]
    assert caught.value.response.headers["x-should-retry"] == "false"


def test_a_retryable_failure_keeps_the_sdk_retrying(stack: tuple[Running, Running]) -> None:
    """A read that timed out may be retried: no `x-should-retry` header stops the SDK."""
    router, sim = stack
    client = openai.OpenAI(base_url=f"{router.base_url}/v1", api_key=API_KEY, max_retries=1,
                           timeout=30)
    before = _upstream_requests(sim)
    with pytest.raises(openai.APIStatusError) as caught:
        client.chat.completions.create(
            model="hang", extra_headers={"x-slorouter-task": "chat"},
            messages=[{"role": "user", "content": "What is a haiku?"}])
    assert caught.value.status_code == 504
    assert "x-should-retry" not in caught.value.response.headers
    assert _upstream_requests(sim) - before == 2  # the SDK's first call and its one retry
