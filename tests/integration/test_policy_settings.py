"""Policy and server settings that change what a request gets, end to end: a task policy's own
deadline, caching sampled answers where a policy allows it, and Idempotency-Key records shared
by two replicas through Redis."""

from __future__ import annotations

import time
import uuid
from collections.abc import Iterator
from contextlib import ExitStack
from pathlib import Path

import httpx
import openai
import pytest

from tests.support.procs import ManagedProcess
from tests.support.services import Running, start_router, start_simulator

pytestmark = pytest.mark.integration

FAST = {"ttft_p50_ms": 20, "ttft_p99_ms": 40, "tpot_p50_ms": 1, "tpot_p99_ms": 2,
        "output_tokens_p50": 12, "output_tokens_p99": 20}
SIM_MODELS = {"fast": FAST, "slow": {**FAST, "ttft_p50_ms": 4000, "ttft_p99_ms": 4001}}
PROMPT = "Summarise the plot of Hamlet in two sentences."


def _config(sim_base: str, redis_url: str) -> str:
    return f"""version: 1
deployments:
  - {{name: pt-fast, model: openai/fast, adapter: openai_passthrough, api_base: {sim_base}/v1,
     input_price_per_mtok: 1, output_price_per_mtok: 2}}
  - {{name: pt-slow, model: openai/slow, adapter: openai_passthrough, api_base: {sim_base}/v1,
     input_price_per_mtok: 1, output_price_per_mtok: 2}}
models:
  - {{name: fast, deployments: [pt-fast]}}
  - {{name: slow, deployments: [pt-slow]}}
routes: {{aliases: [auto], default_model: fast}}
policies:
  tasks:
    chat: {{candidates: [slow], timeout_s: 0.5}}
    summarization:
      candidates: [fast]
      cache: {{enabled: true, ttl_s: 60, require_deterministic: false}}
  default: {{candidates: [fast], cache: {{enabled: true, ttl_s: 60}}}}
server:
  request_timeout_s: 10
  idempotency_redis_url: {redis_url}
"""


@pytest.fixture(scope="module")
def services(tmp_path_factory: pytest.TempPathFactory,
             redis_server: ManagedProcess) -> Iterator[tuple[Running, Running, Running]]:
    directory = tmp_path_factory.mktemp("policy-settings")
    with ExitStack() as started:  # each stopped even when a later one fails to start
        sim = start_simulator(directory, SIM_MODELS)
        started.callback(sim.stop)
        config = _config(sim.base_url, f"redis://127.0.0.1:{redis_server.port}/0")
        first = start_router(directory, config, name="replica-a")
        started.callback(first.stop)
        second = start_router(directory, config, name="replica-b")
        started.callback(second.stop)
        yield sim, first, second


def _client(router: Running) -> openai.OpenAI:
    return openai.OpenAI(base_url=f"{router.base_url}/v1", api_key="unused", max_retries=0)


def _calls(sim: Running, model: str) -> int:
    stats = httpx.get(f"{sim.base_url}/control/stats", timeout=5).json()
    return int(stats.get("models", stats).get(model, {}).get("requests", 0))


def test_a_task_policy_timeout_cuts_the_request_short(
        services: tuple[Running, Running, Running]) -> None:
    """`chat` allows 0.5 s and its only model answers after 4 s: a 504 well before the
    server's 10 s; another task on the same router is unaffected."""
    _, router, _ = services
    client = _client(router)
    started = time.monotonic()
    with pytest.raises(openai.APIStatusError) as caught:
        client.chat.completions.create(model="auto", messages=[{"role": "user", "content": "hi"}],
                                       extra_headers={"x-slorouter-task": "chat"})
    assert caught.value.status_code == 504
    assert time.monotonic() - started < 3.0
    answer = client.chat.completions.create(
        model="auto", messages=[{"role": "user", "content": "hi"}],
        extra_headers={"x-slorouter-task": "classification"})
    assert answer.choices[0].message.content


def test_a_policy_may_cache_sampled_answers(services: tuple[Running, Running, Running]) -> None:
    """`summarization` sets require_deterministic: false, so a temperature-0.9 request is
    cached; the default policy (deterministic only) bypasses the same request."""
    _, router, _ = services
    client = _client(router)
    prompt = f"{PROMPT} ({uuid.uuid4().hex[:8]})"

    def ask(task: str) -> str | None:
        raw = client.chat.completions.with_raw_response.create(
            model="auto", messages=[{"role": "user", "content": prompt}], temperature=0.9,
            extra_headers={"x-slorouter-task": task, "x-slorouter-risk": "low"})
        return raw.headers.get("x-slorouter-cache")

    assert ask("summarization") == "miss"
    assert ask("summarization") == "hit"
    assert ask("classification") == "bypass"


def test_replicas_share_idempotency_keys_through_redis(
        services: tuple[Running, Running, Running]) -> None:
    """The same Idempotency-Key sent to replica A, then to replica B: B replays A's answer and
    the upstream is called once."""
    sim, first, second = services
    key = f"order-{uuid.uuid4().hex}"
    body = {"model": "fast", "messages": [{"role": "user", "content": f"book it {key}"}]}
    before = _calls(sim, "fast")
    answers = []
    for router in (first, second):
        raw = _client(router).chat.completions.with_raw_response.create(
            **body, extra_headers={"Idempotency-Key": key})
        answers.append((raw.parse().choices[0].message.content,
                        raw.headers.get("x-slorouter-idempotent-replay")))
    assert answers[0][0] == answers[1][0]
    assert answers[0][1] is None and answers[1][1] == "true"
    assert _calls(sim, "fast") == before + 1


def test_a_duplicate_may_stream_where_the_first_did_not(
        services: tuple[Running, Running, Running]) -> None:
    """Streaming is how an answer is delivered, not what was asked: the same key and body with
    `stream: true` replays the stored answer as SSE instead of a 422, with no upstream call."""
    sim, router, _ = services
    key = f"order-{uuid.uuid4().hex}"
    messages = [{"role": "user", "content": f"book it {key}"}]
    client = _client(router)
    first = client.chat.completions.create(model="fast", messages=messages,
                                           extra_headers={"Idempotency-Key": key})
    before = _calls(sim, "fast")
    streamed = client.chat.completions.create(model="fast", messages=messages, stream=True,
                                              extra_headers={"Idempotency-Key": key})
    text = "".join(c.choices[0].delta.content or "" for c in streamed if c.choices)
    assert text == first.choices[0].message.content
    assert _calls(sim, "fast") == before


def test_with_redis_down_a_keyed_request_is_refused_not_run(
        tmp_path: Path, services: tuple[Running, Running, Running]) -> None:
    """A replica whose idempotency Redis is unreachable cannot promise one execution: a keyed
    request gets a 503 with Retry-After and the upstream is not called; unkeyed requests are
    served."""
    sim = services[0]
    router = start_router(tmp_path, _config(sim.base_url, "redis://127.0.0.1:9/0"),
                          name="no-redis")
    try:
        client = _client(router)
        before = _calls(sim, "fast")
        with pytest.raises(openai.APIStatusError) as caught:
            client.chat.completions.create(
                model="fast", messages=[{"role": "user", "content": "book it"}],
                extra_headers={"Idempotency-Key": f"k-{uuid.uuid4().hex}"})
        assert caught.value.status_code == 503
        assert caught.value.response.headers.get("retry-after") == "1"
        assert _calls(sim, "fast") == before
        answer = client.chat.completions.create(
            model="fast", messages=[{"role": "user", "content": "hello"}])
        assert answer.choices[0].message.content
    finally:
        router.stop()
