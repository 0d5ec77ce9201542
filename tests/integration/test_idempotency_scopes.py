"""An `Idempotency-Key` belongs to its tenant; the permission scopes of the API key that sent it
are part of what was asked.

Until 2026-12-06 a key's record was the tenant's and its scopes': an operator who added a scope
to an API key during a rolling deploy (the rollout audit) made a client's retry of a finished
side effect, sent with the same key, run a second time, as no record was found. Now the retry
finds the record: with the same scopes it is replayed, with others it is refused (422
`idempotency_key_reuse`), never run again, and an answer is never replayed to a caller whose
scopes differ from its first caller's.
"""

from __future__ import annotations

from collections.abc import Iterator

import httpx
import openai
import pytest

from tests.support.services import Running, start_router, start_simulator

pytestmark = pytest.mark.integration

NARROW, WIDE = "sk-test-idem-scopes-narrow", "sk-test-idem-scopes-wide"
BODY = {"model": "ok", "messages": [{"role": "user", "content": "send the invoice"}]}


@pytest.fixture(scope="module")
def stack(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Running, Running]]:
    directory = tmp_path_factory.mktemp("idempotency-scopes")
    sim = start_simulator(directory, {"ok": {}})
    config = f"""version: 1
deployments:
  - {{name: ok, model: openai/ok, adapter: openai_passthrough, api_base: '{sim.base_url}/v1',
     input_price_per_mtok: 1, output_price_per_mtok: 1}}
models: [{{name: ok, deployments: [ok]}}]
routes: {{default_model: ok}}
api_keys:
  - {{key: env:NARROW_KEY, tenant: t, scopes: [read]}}
  - {{key: env:WIDE_KEY, tenant: t, scopes: [read, docs]}}
server: {{cache: {{backend: none}}}}
"""
    router = start_router(directory, config, env={"NARROW_KEY": NARROW, "WIDE_KEY": WIDE})
    yield router, sim
    router.stop()
    sim.stop()


def _upstream_requests(sim: Running) -> int:
    stats = httpx.get(f"{sim.base_url}/control/stats", timeout=10).json()
    return sum(int(m.get("requests", 0)) for m in stats["models"].values())


def test_a_retry_under_other_scopes_is_refused_not_run_again(
        stack: tuple[Running, Running]) -> None:
    router, sim = stack
    before = _upstream_requests(sim)

    def send(api_key: str) -> httpx.Response:
        return httpx.post(f"{router.base_url}/v1/chat/completions", json=BODY, timeout=30,
                          headers={"authorization": f"Bearer {api_key}",
                                   "idempotency-key": "invoice-42"})

    first = send(NARROW)
    assert first.status_code == 200, first.text
    widened = send(WIDE)  # the same client after its key gained a scope
    assert widened.status_code == 422, widened.text
    error = widened.json()["error"]
    assert error["code"] == "idempotency_key_reuse" and "scopes" in error["message"]
    again = openai.OpenAI(base_url=f"{router.base_url}/v1", api_key=NARROW, max_retries=0
                          ).chat.completions.with_raw_response.create(
        model="ok", messages=BODY["messages"], extra_headers={"idempotency-key": "invoice-42"})
    assert again.headers.get("x-slorouter-idempotent-replay") == "true"
    assert again.parse().id == first.json()["id"]
    assert _upstream_requests(sim) - before == 1
