"""A deployment whose upstream refuses it (a 404 for an `api_base` with the wrong path) shows in
`/readyz` as degraded while the latest verdict on it is that refusal, naming it and the code.

The misconfiguration audit of 2026-12-06: `${BASE}/v1` with BASE ending in `/` (or a vLLM base
without `/v1`) was answered 404; the cheap deployment's breaker opened, every request went to a
deployment 60 times the price, and `/readyz` said `"degraded": []`. Now the replica loses its
traffic on its first refusal (the ranking moves it behind its peer), well before five would
open its breaker: `/readyz` reads the latest verdict, not the circuit alone.
"""

from __future__ import annotations

from collections.abc import Iterator

import httpx
import pytest

from tests.support.services import Running, simulated_gateway

pytestmark = pytest.mark.integration


def _config(sim_base: str) -> str:
    return f"""version: 1
deployments:
  - {{name: cheap, model: openai/fast, adapter: openai_passthrough,
     api_base: '{sim_base}/not-the-api/v1', input_price_per_mtok: 0.1, output_price_per_mtok: 0.1}}
  - {{name: dear, model: openai/fast, adapter: openai_passthrough, api_base: '{sim_base}/v1',
     input_price_per_mtok: 6, output_price_per_mtok: 6}}
models: [{{name: m, deployments: [cheap, dear]}}]
routes: {{default_model: m}}
server:
  cache: {{backend: none}}
"""


@pytest.fixture(scope="module")
def gateway(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Running]:
    fast = {"ttft_p50_ms": 5, "ttft_p99_ms": 5, "output_tokens_p50": 2, "output_tokens_p99": 2}
    with simulated_gateway(tmp_path_factory.mktemp("misconfigured"), {"fast": fast}, _config,
                           env={}) as router:
        yield router


def test_a_replica_refused_for_a_configuration_fault_is_degraded_in_readyz(
        gateway: Running) -> None:
    with httpx.Client(base_url=gateway.base_url, timeout=30) as client:
        ready = client.get("/readyz").json()
        assert "deployments" not in ready["degraded"], ready
        for i in range(30):  # prompts spread over both replicas until cheap is refused
            answer = client.post("/v1/chat/completions", json={
                "model": "m", "max_tokens": 2,
                "messages": [{"role": "user", "content": f"question {i}: what is {i} + 1?"}]})
            assert answer.status_code == 200 and answer.headers["x-slorouter-model"] == "dear"
        health = {d["deployment"]: d for d in client.get("/v1/health/deployments").json()[
            "deployments"]}
        cheap = health["cheap"]
        assert cheap["consecutive_failures"] >= 1, health
        assert cheap["last_failure_code"] == "upstream_not_found", health
        ready = client.get("/readyz")
    body = ready.json()
    assert ready.status_code == 200 and "deployments" in body["degraded"], body
    detail = body["checks"]["deployments"]["detail"]
    assert "cheap (upstream_not_found)" in detail and "dear" not in detail, detail
