"""`n` choices end to end: the real `openai` client, the router over uvicorn, the provider
simulator as a process (which decodes `n` choices side by side, as a server batches them).

Every choice reaches the client, whole or streamed, with its own finish reason; a cached answer
replays all of them; usage and cost count every choice's tokens; the TPOT the router measures
and exports is one choice's (the simulator's 20 ms), not the stream's span divided by the
tokens of all choices (a third of it for three choices).
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterator

import openai
import pytest
from openai.types.chat import ChatCompletionMessageParam

from tests.support.scrape import tpot_histogram
from tests.support.services import FAST_PROFILE, Running, start_simulator
from tests.telemetry.helpers import in_memory_telemetry, server_span
from tests.telemetry.served import API_KEY, serve

pytestmark = pytest.mark.integration

MESSAGES: list[ChatCompletionMessageParam] = [
    {"role": "user", "content": "Name three colours, one per answer."}]
TPOT_S = 0.020


@pytest.fixture(scope="module")
def steady_sim(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Running]:
    """`fast` streams 20-token answers, one token a chunk, 20 ms apart."""
    running = start_simulator(tmp_path_factory.mktemp("sim-n"), {"fast": {
        **FAST_PROFILE, "tokens_per_chunk": 1, "tpot_p50_ms": 20, "tpot_p99_ms": 21,
        "output_tokens_p50": 20, "output_tokens_p99": 21}}, name="n-choices")
    yield running
    running.stop()


async def test_streamed_choices_reach_the_client_and_tpot_is_one_choices(
        steady_sim: Running) -> None:
    telemetry, exporter = in_memory_telemetry()
    async with serve(steady_sim.base_url, telemetry) as base:
        client = openai.AsyncOpenAI(base_url=f"{base}/v1", api_key=API_KEY, max_retries=0)
        texts: dict[int, list[str]] = defaultdict(list)
        finishes: dict[int, str] = {}
        usage = None
        async for chunk in await client.chat.completions.create(
                model="fast", messages=MESSAGES, n=3, stream=True,
                stream_options={"include_usage": True}):
            usage = chunk.usage or usage
            for choice in chunk.choices:
                if choice.delta.content:
                    texts[choice.index].append(choice.delta.content)
                if choice.finish_reason is not None:
                    finishes[choice.index] = choice.finish_reason
        await client.close()
        span = await server_span(telemetry, exporter)
        count, total = await tpot_histogram(base)
    assert finishes == {0: "stop", 1: "stop", 2: "stop"}
    assert all(len(texts[i]) >= 10 for i in range(3))  # about 20 tokens each
    assert len({"".join(texts[i]) for i in range(3)}) == 3
    assert usage is not None
    assert usage.completion_tokens == sum(len(texts[i]) for i in range(3))
    assert count == 1
    # One choice's TPOT: no timer fires early, so at least the simulator's 20 ms less a margin
    # for the clocks (three choices' tokens in the divisor would read about 7 ms).
    assert total >= 0.75 * TPOT_S
    attributes = span.attributes or {}
    assert attributes.get("gen_ai.usage.output_tokens") == usage.completion_tokens
    assert attributes.get("gen_ai.request.choice.count") == 3
    assert attributes.get("slorouter.cost_usd") == pytest.approx(
        (usage.prompt_tokens * 1.0 + usage.completion_tokens * 2.0) / 1e6)


async def test_whole_choices_are_relayed_and_replayed_from_the_cache(
        steady_sim: Running, tmp_path_factory: pytest.TempPathFactory) -> None:
    directory = tmp_path_factory.mktemp("cache-n")
    extra = f"server:\n  cache: {{directory: {directory}, default: {{enabled: true}}}}\n"
    telemetry, _ = in_memory_telemetry()
    async with serve(steady_sim.base_url, telemetry, extra) as base:
        client = openai.AsyncOpenAI(base_url=f"{base}/v1", api_key=API_KEY, max_retries=0)
        answers = []
        for _ in range(2):
            raw = await client.chat.completions.with_raw_response.create(
                model="fast", messages=MESSAGES, n=3, seed=11)
            answers.append((raw.headers.get("x-slorouter-cache"), raw.parse()))
        await client.close()
    (first_status, first), (second_status, second) = answers
    assert (first_status, second_status) == ("miss", "hit")
    assert [c.index for c in first.choices] == [0, 1, 2]
    assert len({c.message.content for c in first.choices}) == 3
    assert [c.message.content for c in second.choices] == [c.message.content
                                                           for c in first.choices]
    assert first.usage is not None and first.usage.completion_tokens >= 3 * 10
