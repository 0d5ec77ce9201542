"""A task the deployment has not answered yet is hedged from its first stream, at the
deployment's TTFT model for the request's prompt size.

The real service on its own simulator, called with the real `openai` client. `primary` is the
only candidate and `backup` its fallback, so a hedge goes to `backup` and nothing else does
(nothing fails). `summarization` (its policy: no hedging) warms the router's statistics of
`primary` with short streamed prompts, then `primary` turns slow (1.5 s to a first token) and
`chat`, which no request has used yet, is sent: a short stream is hedged to `backup` and
answered in well under the primary's 1.5 s. Before the fallback, a task was hedged only once
20 of its own answers backed a delay, so these requests waited the whole 1.5 s. A stream whose
prompt is far longer than any the model has seen, and a non-streamed request, are not hedged
(the line says nothing at that size; a whole answer's time depends on its length).
"""

from __future__ import annotations

import concurrent.futures
import time
from collections.abc import Iterator

import httpx
import openai
import pytest

from tests.faults.scenarios import (
    API_KEY,
    TENANT_ENV,
    Dep,
    SimCounters,
    router_yaml,
    steady,
)
from tests.support.services import Running, finished_requests, gateway_and_simulator

pytestmark = pytest.mark.integration

POLICIES = """policies:
  default:
    candidates: [primary]
    fallbacks: [backup]
    hedging: true
  tasks:
    summarization:
      candidates: [primary]
      fallbacks: [backup]
      hedging: false
"""
WARM_UP = 120  # summarization streams: ~100 residuals for `primary`'s TTFT model
SLOW_TTFT_MS = 1_500
SHORT = [{"role": "user", "content": "Name three rivers in one line."}]
# ~4,000 tokens: over 4x the warm-up prompts' size in the model's soft scale (no trust left)
LONG = [{"role": "user", "content": "Name three rivers in one line. " + "river " * 4_000}]


@pytest.fixture(scope="module")
def services(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Running, Running]]:
    def config(sim_base: str) -> str:
        return router_yaml(sim_base, [Dep("primary", "primary"), Dep("backup", "backup")],
                           {"primary": ["primary"], "backup": ["backup"]}, "    {}", POLICIES)

    with gateway_and_simulator(tmp_path_factory.mktemp("hedging-cold-task"),
                               {"primary": steady(40), "backup": steady(40)}, config,
                               TENANT_ENV, extra_args=("--access-log",)) as both:
        yield both


def _stream(client: openai.OpenAI, task: str, messages: list[dict[str, str]]) -> float:
    """Seconds to the stream's end (read whole)."""
    start = time.perf_counter()
    stream = client.chat.completions.create(model="auto", messages=messages,  # type: ignore[arg-type]
                                            stream=True, max_tokens=8,
                                            extra_headers={"x-slorouter-task": task})
    for _ in stream:
        pass
    return time.perf_counter() - start


@pytest.fixture(scope="module")
def cold(services: tuple[Running, Running]) -> dict[str, tuple[float, int]]:
    """Per probe: its seconds and the upstream calls `backup` took meanwhile (a hedge each)."""
    gateway, sim = services
    client = openai.OpenAI(base_url=f"{gateway.base_url}/v1", api_key=API_KEY, max_retries=0,
                           timeout=20)
    with concurrent.futures.ThreadPoolExecutor(4) as pool:
        list(pool.map(lambda _: _stream(client, "summarization", SHORT), range(WARM_UP)))
    httpx.post(f"{sim.base_url}/control/models/primary",
               json={"ttft_p50_ms": SLOW_TTFT_MS, "ttft_p99_ms": SLOW_TTFT_MS},
               timeout=10).raise_for_status()
    counters = SimCounters(sim.base_url)

    def probe(send: object) -> tuple[float, int]:
        before = counters.value("backup")
        seconds = send()  # type: ignore[operator]
        return seconds, counters.value("backup") - before

    def unstreamed() -> float:
        start = time.perf_counter()
        client.chat.completions.create(model="auto", messages=SHORT,  # type: ignore[arg-type]
                                       max_tokens=8, extra_headers={"x-slorouter-task": "chat"})
        return time.perf_counter() - start

    # The two hedges fit the hedge budget's floor of 2 tokens (no `chat` request earned more).
    return {"short": probe(lambda: _stream(client, "chat", SHORT)),
            "long": probe(lambda: _stream(client, "chat", LONG)),
            "unstreamed": probe(unstreamed),
            "short again": probe(lambda: _stream(client, "chat", SHORT))}


def test_a_cold_task_is_hedged_from_its_first_stream(cold: dict[str, tuple[float, int]]) -> None:
    for probe in ("short", "short again"):
        seconds, hedges = cold[probe]
        assert hedges == 1, (probe, cold)
        assert seconds < SLOW_TTFT_MS / 1000 / 2, (probe, cold)


def test_the_access_log_says_when_each_chat_request_was_to_be_hedged(
        services: tuple[Running, Running], cold: dict[str, tuple[float, int]]) -> None:
    """The planned delay is the warm-up's steady 40 ms first token, read off the deployment's
    TTFT model (its p88, within a few ms); the long prompt and the non-streamed request were
    not to be hedged."""
    gateway, _ = services
    delays = [event["hedge_delay_s"] for event in finished_requests(gateway.proc.log_path)
              if event.get("task") == "chat"]
    assert len(delays) == len(cold), delays
    short, long, unstreamed, short_again = delays
    assert long is None and unstreamed is None, delays
    for delay in (short, short_again):
        assert delay is not None and 0.03 < delay < 0.08, delays


def test_a_prompt_longer_than_the_model_has_seen_is_not_hedged(
        cold: dict[str, tuple[float, int]]) -> None:
    seconds, hedges = cold["long"]
    assert hedges == 0, cold
    assert seconds >= SLOW_TTFT_MS / 1000, cold


def test_a_non_streamed_request_of_a_cold_task_is_not_hedged(
        cold: dict[str, tuple[float, int]]) -> None:
    seconds, hedges = cold["unstreamed"]
    assert hedges == 0, cold
    assert seconds >= SLOW_TTFT_MS / 1000, cold


def test_route_explain_says_whether_and_when_a_request_is_hedged(
        services: tuple[Running, Running], cold: dict[str, tuple[float, int]]) -> None:
    """`/v1/route/explain` shows the hedge plan a request would get, and why not when none:
    the cold task's short stream at the deployment's TTFT model, and not its long prompt, its
    non-streamed request, or a task whose policy does not hedge."""
    gateway, _ = services

    def hedge(task: str, messages: list[dict[str, str]], stream: bool = True) -> dict[str, object]:
        response = httpx.post(f"{gateway.base_url}/v1/route/explain", timeout=20,
                              headers={"authorization": f"Bearer {API_KEY}",
                                       "x-slorouter-task": task},
                              json={"model": "auto", "messages": messages, "stream": stream})
        assert response.status_code == 200, response.text
        plan: dict[str, object] = response.json()["hedge"]
        return plan

    short = hedge("chat", SHORT)
    assert isinstance(short["delay_ms"], float) and 30 < short["delay_ms"] < 80, short
    assert short["reason"] == "hedge after predicted TTFT percentile", short
    for plan in (hedge("chat", LONG), hedge("chat", SHORT, stream=False)):
        assert plan["delay_ms"] is None and "too few answers" in str(plan["reason"]), plan
    assert hedge("summarization", SHORT) == {"delay_ms": None,
                                             "reason": "policy does not allow hedging"}
