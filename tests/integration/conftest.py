"""One simulator and one router process per test module, wired through both adapters.

Simulated models: `fast` (answers in ~20 ms), `slow` (first token after 4 s), `limited`
(always 429 with Retry-After), `broken` (always 500), `hang` (never answers), `cut` (streams
cut after two chunks). Deployments reach them through the pass-through adapter (`pt-*`) and
through litellm (`ll-*`, and `ll-anthropic` and `ll-anthropic-cut` via the simulator's
Anthropic Messages API).
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import openai
import pytest

from tests.support.services import Running, start_router, start_simulator

API_KEY = "sk-test-tenant-one"
FAST = {"ttft_p50_ms": 20, "ttft_p99_ms": 40, "tpot_p50_ms": 1, "tpot_p99_ms": 2,
        "output_tokens_p50": 12, "output_tokens_p99": 20}
SIM_MODELS: dict[str, dict[str, Any]] = {
    "fast": FAST,
    "slow": {**FAST, "ttft_p50_ms": 4000, "ttft_p99_ms": 4001},
    "limited": {**FAST, "error_rate_429": 1.0, "retry_after_s": 7},
    "broken": {**FAST, "error_rate_500": 1.0},
    "hang": {**FAST, "hang_rate": 1.0},
    "cut": {**FAST, "output_tokens_p50": 30, "output_tokens_p99": 40, "cut_rate": 1.0,
            "cut_after_chunks": 3},
}


def router_config(sim_base: str) -> str:
    deployments = []
    for model in SIM_MODELS:
        deployments.append(f"""
  - name: pt-{model}
    model: openai/{model}
    adapter: openai_passthrough
    api_base: {sim_base}/v1
    input_price_per_mtok: 1.0
    output_price_per_mtok: 2.0
    timeout_s: 3
  - name: ll-{model}
    model: openai/{model}
    adapter: litellm
    api_base: {sim_base}/v1
    api_key: env:SIM_KEY
    input_price_per_mtok: 1.0
    output_price_per_mtok: 2.0
    timeout_s: 3""")
    deployments.append(f"""
  - name: ll-anthropic
    model: anthropic/fast
    adapter: litellm
    api_base: {sim_base}
    api_key: env:SIM_KEY
    input_price_per_mtok: 3.0
    output_price_per_mtok: 15.0
  - name: ll-anthropic-cut
    model: anthropic/cut
    adapter: litellm
    api_base: {sim_base}
    api_key: env:SIM_KEY
    input_price_per_mtok: 3.0
    output_price_per_mtok: 15.0""")
    names = [f"{p}-{m}" for m in SIM_MODELS for p in ("pt", "ll")] + ["ll-anthropic",
                                                                      "ll-anthropic-cut"]
    models = "".join(f"\n  - name: {n}\n    deployments: [{n}]" for n in names)
    models += "\n  - name: chain\n    deployments: [pt-broken, pt-fast]"
    models += "\n  - name: chain-stream\n    deployments: [pt-broken, ll-hang, pt-fast]"
    return f"""version: 1
deployments:{''.join(deployments)}
models:{models}
routes:
  aliases: [auto]
  default_model: pt-fast
  by_task:
    code: ll-fast
api_keys:
  - key: env:TENANT_ONE_KEY
    tenant: tenant-one
    scopes: [read]
server:
  max_body_bytes: 65536
  request_timeout_s: 10
"""


@pytest.fixture(scope="module")
def sim(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Running]:
    running = start_simulator(tmp_path_factory.mktemp("sim"), SIM_MODELS)
    yield running
    running.stop()


@pytest.fixture(scope="module")
def gateway(sim: Running, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Running]:
    running = start_router(tmp_path_factory.mktemp("router"), router_config(sim.base_url),
                           env={"TENANT_ONE_KEY": API_KEY, "SIM_KEY": "sim-key"})
    yield running
    running.stop()


@pytest.fixture
def client(gateway: Running) -> openai.OpenAI:
    return openai.OpenAI(base_url=f"{gateway.base_url}/v1", api_key=API_KEY, max_retries=0,
                         timeout=20)


@pytest.fixture
def aclient(gateway: Running) -> openai.AsyncOpenAI:
    return openai.AsyncOpenAI(base_url=f"{gateway.base_url}/v1", api_key=API_KEY,
                              max_retries=0, timeout=20)
