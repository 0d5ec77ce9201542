"""An answer whose upstream reported no usage is still billed, so it still has a cost.

Served end to end (the real app over uvicorn, the real `openai` client, a hand-written upstream
on a real port): a whole answer without a `usage` object, through either adapter, is priced
from the router's prompt estimate and the answer's text, marked estimated, on its server
span, its attempt span and in `slorouter.cost` (until 2026-12-07 the pass-through recorded no
cost and the litellm adapter, whose made-up usage of 0 tokens it read as the provider's, a
cost of 0: either way a billed answer left chargeback, the cost audit). The client is not
told a usage the upstream never sent. A stream without usage was already priced so
(`test_stream_cost.py`; through litellm, whose stream wrapper counts the tokens itself, at
litellm's count).
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from typing import Any

import aiohttp
import openai
import orjson
import pytest
from openai.types.chat import ChatCompletionMessageParam
from prometheus_client.parser import text_string_to_metric_families

from router.classify.types import RequestView
from router.pipeline import estimate_answer_tokens, estimate_prompt_tokens
from tests.faults.scenarios import API_KEY, TENANT_ENV, Dep, router_yaml
from tests.support.fake_upstream import QuietHandler, ThreadedUpstream, send_body
from tests.telemetry.helpers import in_memory_telemetry, server_span
from tests.telemetry.served import serve

TEXT = "Name three lighthouses on the coast of Brittany."
MESSAGES: list[ChatCompletionMessageParam] = [{"role": "user", "content": TEXT}]
ANSWER = "Ar Men, Kéréon and La Vieille, all three off the tip of Finistère."
IN, OUT = 2.0, 8.0  # USD per million tokens
ADAPTERS = ["openai_passthrough", "litellm"]
NO_RETRIES = "    max_retries_per_deployment: 0"


def _answer(model: str) -> dict[str, Any]:
    return {"id": "c", "object": "chat.completion", "created": 0, "model": model,
            "choices": [{"index": 0, "finish_reason": "stop",
                         "message": {"role": "assistant", "content": ANSWER}}]}


class NoUsage(ThreadedUpstream):
    """An OpenAI-compatible upstream whose whole answers report no usage."""

    def __init__(self) -> None:
        class Handler(QuietHandler):
            def do_POST(self) -> None:
                body = orjson.loads(self.rfile.read(int(self.headers["content-length"])))
                with contextlib.suppress(OSError):
                    send_body(self, 200, orjson.dumps(_answer(body["model"])))

        super().__init__(Handler)


@pytest.fixture(scope="module")
def upstream() -> Iterator[NoUsage]:
    running = NoUsage()
    yield running
    running.stop()


async def _costs(base: str) -> dict[str, float]:
    """`slorouter_cost_usd_total` by its `slorouter_cost_estimated` label."""
    async with aiohttp.ClientSession() as session, session.get(f"{base}/metrics") as response:
        text = await response.text()
    family = next((f for f in text_string_to_metric_families(text)
                   if f.name == "slorouter_cost_usd"), None)
    return {s.labels["slorouter_cost_estimated"]: s.value
            for s in getattr(family, "samples", []) if s.name.endswith("_total")}


@pytest.mark.parametrize("adapter", ADAPTERS)
async def test_a_whole_answer_without_usage_is_priced_from_the_estimates(
        upstream: NoUsage, adapter: str) -> None:
    telemetry, exporter = in_memory_telemetry()
    config = router_yaml(upstream.base_url, [Dep("d", "m", adapter, price_in=IN, price_out=OUT)],
                         {"m": ["d"]}, NO_RETRIES)
    async with serve(upstream.base_url, telemetry, whole_config=config, env=TENANT_ENV) as base:
        client = openai.AsyncOpenAI(base_url=f"{base}/v1", api_key=API_KEY, max_retries=0)
        reply = await client.chat.completions.create(model="m", messages=MESSAGES)
        await client.close()
        span = await server_span(telemetry, exporter)
        costs = await _costs(base)
    assert reply.choices[0].message.content == ANSWER
    assert reply.usage is None  # none was sent: litellm's made-up 0 tokens are not passed on
    prompt = estimate_prompt_tokens(RequestView(messages=(("user", TEXT),)))
    output = estimate_answer_tokens(choice["message"] for choice in _answer("m")["choices"])
    assert output >= 10  # the answer's ~17 words, estimated
    expected = (prompt * IN + output * OUT) / 1e6
    attributes = span.attributes or {}
    assert attributes.get("slorouter.cost_usd") == pytest.approx(expected)
    assert attributes.get("slorouter.cost.estimated") is True
    assert "gen_ai.usage.output_tokens" not in attributes  # the provider reported none
    assert costs == {"true": pytest.approx(expected)}

