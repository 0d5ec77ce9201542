"""A client's own short deadline says nothing about the deployment it cut: no error is learned.

`cheap` and `dear` answer alike (TTFT 300 ms) and `min_cost` prefers `cheap`. A burst of
requests naming `cheap` whose client allows 100 ms (`x-slorouter-timeout-ms`) is cut before
the first token: a 504 `deadline_exceeded` for each, rightly. The breaker already took no verdict
from such cuts ("a client asking for 1 ms must not open the breakers of healthy deployments
for everyone"), but the statistics counted each as an error of `cheap`: its error rate put it
out of tier 0 and the burn of its availability demoted it for minutes, so ordinary requests
afterwards went to `dear`, at twice the price, though `cheap` had never failed anyone.
"""

from __future__ import annotations

from collections.abc import Iterator

import httpx
import pytest

from tests.support.services import Running, start_router, start_simulator

pytestmark = pytest.mark.integration

API_KEY = "sk-test-client-deadline"
PROFILE = {"ttft_p50_ms": 300, "ttft_p99_ms": 300, "output_tokens_p50": 4,
           "output_tokens_p99": 4, "output_tokens_max": 4, "tpot_p50_ms": 1, "tpot_p99_ms": 1}
CUT = 30  # requests cut by their client's 100 ms deadline
AFTER = 20  # ordinary requests afterwards


@pytest.fixture(scope="module")
def gateway(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Running]:
    directory = tmp_path_factory.mktemp("client-deadline")
    sim = start_simulator(directory, {"cheap": PROFILE, "dear": PROFILE})
    deployments = "".join(
        f"""
  - {{name: {name}, model: openai/{name}, adapter: openai_passthrough,
     api_base: '{sim.base_url}/v1', input_price_per_mtok: {price},
     output_price_per_mtok: {price}}}""" for name, price in (("cheap", 1.0), ("dear", 2.0)))
    config = f"""version: 1
deployments:{deployments}
models: [{{name: cheap, deployments: [cheap]}}, {{name: dear, deployments: [dear]}}]
routes: {{default_model: cheap}}
api_keys: [{{key: env:TENANT_KEY, tenant: t, scopes: [read]}}]
policies:
  default:
    candidates: [cheap, dear]
    objective: min_cost
    slo: {{ttft_p95_ms: 1000, availability: 0.99}}
server: {{cache: {{backend: none}}}}
"""
    running = start_router(directory, config, env={"TENANT_KEY": API_KEY})
    yield running
    running.stop()
    sim.stop()


def _ask(client: httpx.Client, model: str = "auto",
         timeout_ms: int | None = None) -> httpx.Response:
    headers = {"authorization": f"Bearer {API_KEY}", "x-slorouter-task": "chat"}
    if timeout_ms is not None:
        headers["x-slorouter-timeout-ms"] = str(timeout_ms)
    return client.post("/v1/chat/completions", headers=headers, json={
        "model": model, "messages": [{"role": "user", "content": "Name a river."}]})


def test_requests_cut_by_their_clients_deadline_do_not_move_traffic_off_a_healthy_deployment(
        gateway: Running) -> None:
    """After 30 requests to `cheap` cut at their client's 100 ms deadline, `auto` requests
    still go to the cheaper deployment, which answers them all."""
    with httpx.Client(base_url=gateway.base_url, timeout=30) as client:
        cut = [_ask(client, "cheap", timeout_ms=100) for _ in range(CUT)]
        other = [r.text for r in cut if r.status_code != 504]
        assert not other, other[:2]
        assert {r.json()["error"]["code"] for r in cut} == {"deadline_exceeded"}
        after = [_ask(client) for _ in range(AFTER)]
    assert all(r.status_code == 200 for r in after), [r.text for r in after if r.is_error][:2]
    models = [r.headers["x-slorouter-model"] for r in after]
    assert models.count("cheap") >= AFTER - 4, models  # exploration may send one or two away


def _chat_availability(client: httpx.Client) -> tuple[int, int]:
    """(total, bad) of the `chat` task's availability over its shortest window (`/v1/slo`)."""
    chat = next(t for t in client.get("/v1/slo").json()["tasks"] if t["task"] == "chat")
    window = min(chat["windows"], key=lambda w: w["window_s"])
    sli = next(s for s in window["slis"] if s["sli"] == "availability")
    return sli["total"], sli["bad"]


def test_requests_cut_by_their_clients_deadline_burn_none_of_the_tasks_availability(
        gateway: Running) -> None:
    """The task's SLO counted each cut as a failed request: five clients allowing 100 ms for a
    300 ms answer burned its availability budget (a burn rate of 35 in the audit, a page) though
    nothing had failed. Now they count as the clients' own doing, as leaving does, and the
    metrics name them `client_deadline`, not the provider's timeout."""
    with httpx.Client(base_url=gateway.base_url, timeout=30) as client:
        total, bad = _chat_availability(client)
        cut = [_ask(client, "cheap", timeout_ms=100) for _ in range(5)]
        assert {r.status_code for r in cut} == {504}
        answered = _ask(client)
        assert answered.status_code == 200, answered.text
        metrics = client.get("/metrics").text
        after = _chat_availability(client)
    assert after == (total + 1, bad), (total, bad, after)  # the answered request alone
    lines = [line for line in metrics.splitlines()
             if line.startswith("gen_ai_server_request_duration_seconds_count")
             and 'error_type="client_deadline"' in line]
    assert lines and all('slorouter_error_code="deadline_exceeded"' in line for line in lines)
    assert sum(float(line.rsplit(" ", 1)[1]) for line in lines) >= 5


def test_streams_their_sdks_timeout_cut_before_the_first_token_burn_none_of_it(
        gateway: Running) -> None:
    """The same for streams cut by an OpenAI SDK's own timeout (`x-stainless-read-timeout`,
    the stream's wait for its first token): they counted as failures of the task, as the same
    cut of a whole answer no longer did (the frameworks audit of 2026-12-07: LlamaIndex sends
    60 s, a slow model's clients burned the budget)."""
    headers = {"authorization": f"Bearer {API_KEY}", "x-slorouter-task": "chat",
               "x-stainless-read-timeout": "0.1"}
    body = {"model": "cheap", "stream": True,
            "messages": [{"role": "user", "content": "Name a river."}]}
    with httpx.Client(base_url=gateway.base_url, timeout=30) as client:
        total, bad = _chat_availability(client)
        cut = [client.post("/v1/chat/completions", headers=headers, json=body)
               for _ in range(5)]
        assert {(r.status_code, r.json()["error"]["code"]) for r in cut} == {
            (504, "deadline_exceeded")}
        answered = _ask(client)
        assert answered.status_code == 200, answered.text
        after = _chat_availability(client)
    assert after == (total + 1, bad), (total, bad, after)
