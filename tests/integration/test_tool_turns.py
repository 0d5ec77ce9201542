"""Conversations whose tool turns OpenAI refuses are refused before routing, through the service.

An assistant message's tool calls must each be answered by the `tool` messages right after it,
and a `tool` message must answer a call of the assistant message before it (OpenAI and
Anthropic refuse either with a 400). Forwarded, such a request was a 200 from a lenient
deployment and a 400 from a strict one, after which `auto` tried the next candidate: now it is
one 400, naming the message, and no provider is called.
"""

from __future__ import annotations

from typing import Any

import httpx
import openai
import pytest

from tests.support.services import Running

pytestmark = pytest.mark.integration

USER = {"role": "user", "content": "What time is it?"}
CALL = {"role": "assistant", "content": None, "tool_calls": [
    {"id": "call_1", "type": "function", "function": {"name": "get_time", "arguments": "{}"}}]}
TOOLS = [{"type": "function", "function": {"name": "get_time", "parameters": {"type": "object"}}}]


def _upstream_requests(sim: Running) -> int:
    stats = httpx.get(f"{sim.base_url}/control/stats", timeout=5).json()
    models = stats.get("models", stats)
    return sum(int(m.get("requests", 0)) for m in models.values() if isinstance(m, dict))


@pytest.mark.parametrize(("messages", "param"), [
    ([USER, {"role": "tool", "tool_call_id": "call_1", "content": "12:00"}],
     "messages[1].tool_call_id"),
    ([USER, CALL, {"role": "tool", "tool_call_id": "call_9", "content": "12:00"}],
     "messages[2].tool_call_id"),
    ([USER, CALL, {"role": "user", "content": "Never mind."}], "messages[1].tool_calls"),
], ids=["result-without-a-call", "result-of-another-call", "call-left-unanswered"])
@pytest.mark.parametrize("model", ["auto", "pt-fast", "ll-anthropic"])
def test_a_broken_tool_turn_is_one_400_and_reaches_no_provider(
        client: openai.OpenAI, sim: Running, messages: list[dict[str, Any]], param: str,
        model: str) -> None:
    before = _upstream_requests(sim)
    with pytest.raises(openai.BadRequestError) as caught:
        client.chat.completions.create(model=model, messages=messages, tools=TOOLS)  # type: ignore[arg-type]
    body = caught.value.body
    assert isinstance(body, dict) and (body["param"], body["code"]) == (param, "invalid_value")
    assert _upstream_requests(sim) == before


def test_an_answered_tool_turn_is_served(client: openai.OpenAI) -> None:
    answer = client.chat.completions.create(
        model="pt-fast", tools=TOOLS,  # type: ignore[arg-type]
        messages=[USER, CALL, {"role": "tool", "tool_call_id": "call_1", "content": "12:00"}])  # type: ignore[list-item]
    assert answer.choices[0].finish_reason in ("stop", "length", "tool_calls")
