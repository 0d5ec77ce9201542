"""One tenant cannot take a deployment away from the others through its shared circuit breaker.

A real router on the provider simulator, called with the real `openai` client under two tenant
keys. The simulator's `<<fail:500>>` marker answers 500 to that prompt (as real providers do with
some inputs): tenant A sending such prompts used to open the breaker after five, and tenant B's
next request was refused with 503 `circuit_open` (the security audit: 123 of B's 143 requests
refused while A ran two connections). Now each failure is attributed to its tenant, and one
tenant's failures open nothing while the deployment answers the others. An outage that fails
every tenant still opens it. A stream still producing tokens when the deployment's `timeout_s`
cuts it is long, not broken: it is no breaker failure (six such streams used to open it).
"""

from __future__ import annotations

import concurrent.futures
import uuid
from collections.abc import Iterator

import httpx
import openai
import pytest

from tests.support.services import FAST_PROFILE, Running, gateway_and_simulator

pytestmark = pytest.mark.integration

KEYS = {"KEY_A": "sk-tenant-a-principals", "KEY_B": "sk-tenant-b-principals"}
# A slow, steady writer: a chunk every 40 ms for 8 s, far past its deployments' 1 s timeout.
LONG_PROFILE = {"ttft_p50_ms": 5, "ttft_p99_ms": 5, "tpot_p50_ms": 40, "tpot_p99_ms": 40,
                "output_tokens_p50": 200, "output_tokens_p99": 200, "output_tokens_max": 200,
                "tokens_per_chunk": 1}
CONFIG = """version: 1
deployments:
  - {{name: shared-1, model: openai/fast, adapter: openai_passthrough, api_base: '{base}/v1',
     input_price_per_mtok: 1, output_price_per_mtok: 2}}
  - {{name: outage-1, model: openai/outage, adapter: openai_passthrough, api_base: '{base}/v1',
     input_price_per_mtok: 1, output_price_per_mtok: 2}}
  - {{name: long-pt, model: openai/long, adapter: openai_passthrough, api_base: '{base}/v1',
     input_price_per_mtok: 1, output_price_per_mtok: 2, timeout_s: 1}}
  - {{name: long-ll, model: openai/long, adapter: litellm, api_base: '{base}/v1',
     api_key: env:SIM_KEY, input_price_per_mtok: 1, output_price_per_mtok: 2, timeout_s: 1}}
models:
  - {{name: shared, deployments: [shared-1]}}
  - {{name: outage, deployments: [outage-1]}}
  - {{name: long-pt, deployments: [long-pt]}}
  - {{name: long-ll, deployments: [long-ll]}}
routes: {{default_model: shared}}
api_keys:
  - {{key: env:KEY_A, tenant: team-a}}
  - {{key: env:KEY_B, tenant: team-b}}
server:
  cache: {{backend: none}}
  reliability: {{max_retries_per_deployment: 0}}
"""


@pytest.fixture(scope="module")
def services(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Running, Running]]:
    with gateway_and_simulator(tmp_path_factory.mktemp("breaker-principals"),
                               {"fast": FAST_PROFILE, "outage": FAST_PROFILE,
                                "long": LONG_PROFILE},
                               lambda base: CONFIG.format(base=base),
                               {**KEYS, "SIM_KEY": "sim-key"}) as both:
        yield both


def _client(router: Running, key: str) -> openai.OpenAI:
    return openai.OpenAI(base_url=f"{router.base_url}/v1", api_key=KEYS[key], max_retries=0)


def _health(router: Running, deployment: str) -> dict[str, object]:
    listed = httpx.get(f"{router.base_url}/v1/health/deployments").json()["deployments"]
    found: dict[str, object] = next(d for d in listed if d["deployment"] == deployment)
    return found


def _ask(client: openai.OpenAI, model: str, text: str) -> str:
    answer = client.chat.completions.create(model=model, messages=[
        {"role": "user", "content": f"{text} {uuid.uuid4().hex[:8]}"}])
    return answer.choices[0].message.content or ""


def test_one_tenants_poison_prompts_do_not_take_the_deployment_from_another(
        services: tuple[Running, Running]) -> None:
    """Tenant A's requests that make the provider answer 500 fail for A alone: B, served before
    and between them, is still served after twice the breaker's consecutive failures, and the
    deployment's breaker stays closed."""
    router, _ = services
    tenant_a, tenant_b = _client(router, "KEY_A"), _client(router, "KEY_B")
    assert _ask(tenant_b, "shared", "an ordinary question")
    for number in range(10):  # twice the breaker's five consecutive failures
        with pytest.raises(openai.InternalServerError) as caught:
            _ask(tenant_a, "shared", f"poisoned {number} <<fail:500>>")
        assert caught.value.code != "circuit_open"  # the provider's 500, every time
        if number == 4:
            assert _ask(tenant_b, "shared", "another ordinary question")
    assert _ask(tenant_b, "shared", "a question after the poison")
    health = _health(router, "shared-1")
    assert health["state"] == "closed"
    assert health["window_failures"] == 10


def test_an_outage_failing_every_tenant_still_opens_the_breaker(
        services: tuple[Running, Running]) -> None:
    """Both tenants served, then the provider answers 500 to everything: their failures open
    the breaker (five each at the most), and the next request is refused `circuit_open`."""
    router, sim = services
    tenants = [_client(router, "KEY_A"), _client(router, "KEY_B")]
    for tenant in tenants:
        assert _ask(tenant, "outage", "before the outage")
    httpx.post(f"{sim.base_url}/control/models/outage", json={"error_rate_500": 1.0},
               timeout=5).raise_for_status()
    try:
        failures = 0
        while _health(router, "outage-1")["state"] == "closed" and failures < 10:
            with pytest.raises(openai.InternalServerError):
                _ask(tenants[failures % 2], "outage", "during the outage")
            failures += 1
        assert _health(router, "outage-1")["state"] == "open", failures
        for tenant in tenants:
            with pytest.raises(openai.InternalServerError) as caught:
                _ask(tenant, "outage", "while it is open")
            assert caught.value.code == "circuit_open"
    finally:
        httpx.post(f"{sim.base_url}/control/models/outage", json={"error_rate_500": 0.0},
                   timeout=5).raise_for_status()


def _long_stream(router: Running, model: str) -> tuple[int, str | None]:
    """One stream that outlasts its deployment's 1 s timeout: (content chunks, error code)."""
    client = _client(router, "KEY_A")
    chunks = 0
    try:
        stream = client.chat.completions.create(model=model, stream=True, max_tokens=4000,
                                                messages=[{"role": "user",
                                                           "content": "a very long story"}])
        for chunk in stream:
            chunks += bool(chunk.choices and chunk.choices[0].delta.content)
    except openai.APIError as err:
        return chunks, str(err.code) if err.code is not None else str(err.body)
    return chunks, None


@pytest.mark.parametrize("model", ["long-pt", "long-ll"])
def test_streams_cut_by_the_timeout_while_writing_are_not_breaker_failures(
        services: tuple[Running, Running], model: str) -> None:
    """Six streams of one tenant, each still getting a chunk every 40 ms when the deployment's
    1 s `timeout_s` cuts it: each ends with the same `upstream_read_timeout` error event as
    before, and the breaker counts none of them (five opened it)."""
    router, _ = services
    with concurrent.futures.ThreadPoolExecutor(6) as pool:
        ended = list(pool.map(lambda _: _long_stream(router, model), range(6)))
    for chunks, code in ended:
        assert chunks > 5, ended  # it was writing
        assert code == "upstream_read_timeout", ended
    health = _health(router, model)
    assert health["state"] == "closed"
    assert health["window_failures"] == 0
