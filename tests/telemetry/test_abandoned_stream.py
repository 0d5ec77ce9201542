"""A stream its client leaves halfway, seen in telemetry: the real `openai` client, the router
over uvicorn, the provider simulator as a process streaming 40 tokens, one a chunk, 20 ms apart.

The client reads three chunks and closes the connection. The server span was already right
(499, `error.type=client_disconnected`), but the attempt that streamed the answer was recorded
as a success: `slorouter.attempt.outcome=won` with no `error.type`, and its cut-short duration
counted among the successful operations of `gen_ai.client.operation.duration` (found by an
audit, 2026-12-05). A non-streamed request its client left was already `cancelled`.
"""

from __future__ import annotations

from collections.abc import Iterator

import httpx
import openai
import pytest
from openai.types.chat import ChatCompletionMessageParam
from opentelemetry.trace import SpanKind
from prometheus_client.parser import text_string_to_metric_families

from tests.support.services import FAST_PROFILE, Running, start_simulator
from tests.telemetry.helpers import in_memory_telemetry, server_span
from tests.telemetry.served import API_KEY, serve

pytestmark = pytest.mark.integration

MESSAGES: list[ChatCompletionMessageParam] = [{"role": "user", "content": "Count to forty."}]


@pytest.fixture(scope="module")
def slow_sim(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Running]:
    running = start_simulator(tmp_path_factory.mktemp("sim-abandon"), {"fast": {
        **FAST_PROFILE, "tokens_per_chunk": 1, "tpot_p50_ms": 20, "tpot_p99_ms": 21,
        "output_tokens_p50": 40, "output_tokens_p99": 41}}, name="abandoned")
    yield running
    running.stop()


async def test_the_attempt_of_a_stream_its_client_left_is_cancelled_not_a_success(
        slow_sim: Running) -> None:
    telemetry, exporter = in_memory_telemetry()
    async with serve(slow_sim.base_url, telemetry) as base:
        client = openai.AsyncOpenAI(base_url=f"{base}/v1", api_key=API_KEY, max_retries=0)
        stream = await client.chat.completions.create(model="fast", messages=MESSAGES,
                                                      stream=True)
        read = 0
        async for chunk in stream:
            read += bool(chunk.choices and chunk.choices[0].delta.content)
            if read == 3:
                break
        await stream.close()
        await client.close()
        server = await server_span(telemetry, exporter)
        async with httpx.AsyncClient() as http:
            text = (await http.get(f"{base}/metrics", timeout=10)).text
    assert (server.attributes or {}).get("error.type") == "client_disconnected"
    [attempt] = [s for s in exporter.get_finished_spans() if s.kind == SpanKind.CLIENT]
    attributes = attempt.attributes or {}
    assert attributes.get("error.type") == "cancelled"
    assert attributes.get("slorouter.attempt.outcome") == "won"  # it did answer first
    durations = next(f for f in text_string_to_metric_families(text)
                     if f.name == "gen_ai_client_operation_duration_seconds")
    counts = {s.labels.get("error_type") or None: s.value for s in durations.samples
              if s.name.endswith("_count")}
    assert counts == {"cancelled": 1}
