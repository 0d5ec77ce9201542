"""A task policy's cost ceiling caps what a request can cost, not only what it was guessed to.

A request with no `max_tokens` is priced at 512 output tokens by the ceiling check; the
provider, told nothing, may write thousands (the simulator's `long` model writes about 3,000).
The router sends the largest output limit that keeps every deployment of the plan within the
ceiling, so the answer stops there (`finish_reason: length`) and the cost stays under it.
"""

from __future__ import annotations

import base64
import io
import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import openai
import pytest
from openai.types.chat import ChatCompletionMessageParam
from PIL import Image

from policies.eligibility import RequestFacts, output_cap
from tests.support.services import Running, start_router, start_simulator
from tests.support.tokenizer import cl100k_counter

pytestmark = pytest.mark.integration

API_KEY = "sk-test-cost-ceiling"
CEILING_USD = 0.01
PRICE_IN, PRICE_OUT = 3.0, 15.0  # USD per million tokens


def _ceiling_gateway(directory: Path, profile: dict[str, int], price_in: float,
                     price_out: float, window: int | None = None) -> Iterator[Running]:
    """A simulator model `long` with `profile` behind a router whose policy has the $0.01
    ceiling, at these prices (and this context window, if any)."""
    sim = start_simulator(directory, {"long": profile})
    window_yaml = f", context_window: {window}" if window is not None else ""
    config = f"""version: 1
deployments:
  - {{name: long-1, model: openai/long, adapter: openai_passthrough,
     api_base: '{sim.base_url}/v1', input_price_per_mtok: {price_in},
     output_price_per_mtok: {price_out}{window_yaml}}}
models: [{{name: long, deployments: [long-1]}}]
routes: {{default_model: long}}
api_keys: [{{key: env:TENANT_KEY, tenant: t, scopes: [read]}}]
policies:
  default: {{candidates: [long], max_cost_per_request_usd: {CEILING_USD}}}
server: {{cache: {{backend: none}}}}
"""
    running = start_router(directory, config, env={"TENANT_KEY": API_KEY})
    yield running
    running.stop()
    sim.stop()


@pytest.fixture(scope="module")
def gateway(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Running]:
    yield from _ceiling_gateway(tmp_path_factory.mktemp("cost-ceiling"), {
        "output_tokens_p50": 3000, "output_tokens_p99": 3200, "tokens_per_chunk": 200},
        PRICE_IN, PRICE_OUT)


@pytest.mark.parametrize("stream", [False, True])
def test_an_answer_without_max_tokens_stops_within_the_ceiling(gateway: Running,
                                                              stream: bool) -> None:
    client = openai.OpenAI(base_url=f"{gateway.base_url}/v1", api_key=API_KEY, max_retries=0,
                           timeout=60)
    messages: list[ChatCompletionMessageParam] = [
        {"role": "user", "content": "write a python function that parses dates"}]
    if stream:
        chunks = list(client.chat.completions.create(
            model="auto", messages=messages, stream=True,
            stream_options={"include_usage": True}, extra_headers={"x-slorouter-task": "code"}))
        usage = next(c.usage for c in chunks if c.usage is not None)
        finish = next(c.choices[0].finish_reason for c in chunks
                      if c.choices and c.choices[0].finish_reason)
    else:
        reply = client.chat.completions.create(
            model="auto", messages=messages,
            extra_headers={"x-slorouter-task": "code"})
        assert reply.usage is not None
        usage, finish = reply.usage, reply.choices[0].finish_reason
    cost = (usage.prompt_tokens * PRICE_IN + usage.completion_tokens * PRICE_OUT) / 1e6
    assert finish == "length" and cost <= CEILING_USD, (usage, cost)
    assert usage.completion_tokens > 512  # the cap is the ceiling's, not the check's guess


def test_the_output_cap_keeps_every_deployment_within_the_ceiling() -> None:
    facts = RequestFacts(task="code", risk="low", prompt_tokens=1000, max_output_tokens=512,
                         completions=2)
    cap = output_cap(0.01, facts, [(3.0, 15.0), (1.0, 30.0), (0.0, 0.0)])
    assert cap == (10_000 - 1000 * 1.0) // (2 * 30.0)  # the dearer output price binds
    assert output_cap(0.01, facts, [(1.0, 0.0)]) is None  # free output: nothing to cap


CHINESE = "请总结季度报告并列出三个主要风险，然后给出改进建议。"


def test_a_cjk_prompt_that_costs_more_than_the_ceiling_is_refused(
        gateway: Running) -> None:
    """A Chinese prompt of 3,500 characters is about 3,700 cl100k tokens, $0.011 at $3/M: over
    the $0.01 ceiling before any output. Counted at four characters a token (875) it passed the
    ceiling check; counted by script it is refused (`over_cost_ceiling`). An English prompt of
    as many characters (about 800 tokens) still passes."""
    chinese = (CHINESE * (3500 // len(CHINESE) + 1))[:3500]
    billed = cl100k_counter()(chinese)
    assert billed * PRICE_IN / 1e6 > CEILING_USD  # what the provider would charge for it
    client = openai.OpenAI(base_url=f"{gateway.base_url}/v1", api_key=API_KEY, max_retries=0,
                           timeout=60)
    with pytest.raises(openai.BadRequestError) as refused:
        client.chat.completions.create(model="auto", max_tokens=1,
                                       messages=[{"role": "user", "content": chinese}])
    error = refused.value.body
    assert isinstance(error, dict) and error.get("code") == "over_cost_ceiling", error
    english = ("Summarise the quarterly report and list three main risks. " * 60)[:3500]
    reply = client.chat.completions.create(model="auto", max_tokens=1,
                                           messages=[{"role": "user", "content": english}])
    assert reply.choices


def _tool_schema(description: str) -> dict[str, object]:
    return {"type": "function", "function": {"name": "file_report", "parameters": {
        "type": "object", "properties": {"summary": {"type": "string",
                                                     "description": description}}}}}


def _tool_call(arguments: str) -> list[dict[str, object]]:
    return [{"role": "assistant", "content": None, "tool_calls": [{
        "id": "call_1", "type": "function",
        "function": {"name": "file_report", "arguments": arguments}}]},
        {"role": "tool", "tool_call_id": "call_1", "content": "ok"}]


@pytest.mark.parametrize("where", ["schema", "arguments"])
def test_cjk_tool_json_that_costs_more_than_the_ceiling_is_refused(
        gateway: Running, where: str) -> None:
    """3,500 Chinese characters in a tool's parameter schema (a property's description), or in
    an earlier tool call's arguments, are about 3,700 cl100k tokens, over the $0.01 ceiling at
    $3/M. Counted at four UTF-8 bytes a token (2,625) they passed the ceiling check; counted by
    script like message text they are refused. As many English characters still pass."""
    chinese = (CHINESE * (3500 // len(CHINESE) + 1))[:3500]
    assert cl100k_counter()(chinese) * PRICE_IN / 1e6 > CEILING_USD
    client = openai.OpenAI(base_url=f"{gateway.base_url}/v1", api_key=API_KEY, max_retries=0,
                           timeout=60)

    def ask(text: str) -> object:
        tools: list[Any] = [_tool_schema(text if where == "schema" else "what was found")]
        messages: list[Any] = [{"role": "user", "content": "file the report"}, *_tool_call(
            json.dumps({"summary": text}, ensure_ascii=False) if where == "arguments" else "{}")]
        return client.chat.completions.create(model="auto", max_tokens=1, tools=tools,
                                              messages=messages)

    with pytest.raises(openai.BadRequestError) as refused:
        ask(chinese)
    error = refused.value.body
    assert isinstance(error, dict) and error.get("code") == "over_cost_ceiling", error
    english = ("Summarise the quarterly report and list three main risks. " * 60)[:3500]
    assert ask(english)



def _pdf_part(pages: int) -> dict[str, object]:
    out = io.BytesIO()
    first, *rest = [Image.new("RGB", (612, 792), (255, 255, 255)) for _ in range(pages)]
    first.save(out, "PDF", save_all=True, append_images=rest)
    data = base64.b64encode(out.getvalue()).decode()
    return {"type": "file", "file": {"file_data": f"data:application/pdf;base64,{data}",
                                     "filename": "report.pdf"}}


def test_a_pdf_of_many_pages_is_held_to_the_ceiling(gateway: Running) -> None:
    """A PDF part was priced as 765 prompt tokens whatever its length, so a request carrying
    a long document passed any ceiling; its pages are now counted (each read as text and a
    picture: 2,000 tokens a page), and three pages ($0.018 at $3/M) are over the $0.01 ceiling
    while one page is answered."""
    client = openai.OpenAI(base_url=f"{gateway.base_url}/v1", api_key=API_KEY, max_retries=0,
                           timeout=60)

    def ask(pages: int) -> object:
        content: Any = [{"type": "text", "text": "summarise"}, _pdf_part(pages)]
        return client.chat.completions.create(model="auto", max_tokens=1,
                                              messages=[{"role": "user", "content": content}])

    with pytest.raises(openai.BadRequestError) as refused:
        ask(3)
    error = refused.value.body
    assert isinstance(error, dict) and error.get("code") == "over_cost_ceiling", error
    assert ask(1)

# The output limit a cost ceiling sends never asks for more than the context window holds.
#
# With cheap output ($0.60/M) the $0.01 ceiling allows ~16,600 tokens; a 4,096-token model (the
# simulator refuses a prompt plus `max_tokens` over its window, as vLLM and OpenAI do) then
# refused every request without `max_tokens`, however short its prompt, with
# `context_length_exceeded`: the ceiling broke requests it had passed and that would have been
# answered without it.
WINDOW = 4096


@pytest.fixture(scope="module")
def small_window(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Running]:
    yield from _ceiling_gateway(tmp_path_factory.mktemp("cost-ceiling-window"), {
        "context_window": WINDOW, "output_tokens_p50": 20, "output_tokens_p99": 30},
        0.15, 0.60, window=WINDOW)


@pytest.mark.parametrize("stream", [False, True])
@pytest.mark.parametrize("prompt_words", [5, 1500])
def test_a_request_without_max_tokens_under_a_ceiling_fits_the_window(
        small_window: Running, stream: bool, prompt_words: int) -> None:
    """A short prompt and one of 1,500 words (estimated at 2,254 tokens: inside 4,096 with the
    512-token allowance the fit check assumes) are answered, streamed or not."""
    client = openai.OpenAI(base_url=f"{small_window.base_url}/v1", api_key=API_KEY, max_retries=0,
                           timeout=60)
    content = " ".join(["river"] * prompt_words)
    messages: list[ChatCompletionMessageParam] = [{"role": "user", "content": content}]
    if stream:
        chunks = list(client.chat.completions.create(model="auto", messages=messages,
                                                     stream=True))
        assert any(c.choices and c.choices[0].delta.content for c in chunks)
    else:
        reply = client.chat.completions.create(model="auto", messages=messages)
        assert reply.choices[0].message.content


def test_the_output_cap_leaves_room_for_the_prompt_in_every_window() -> None:
    """The cap is the smallest of the ceiling's and each window's room after the prompt (less
    a slack of 16 tokens and 3% of the prompt); a window not configured bounds nothing."""
    facts = RequestFacts(task="chat", risk="low", prompt_tokens=1000, max_output_tokens=512)
    assert output_cap(0.01, facts, [(0.15, 0.60)]) == 16_416
    assert output_cap(0.01, facts, [(0.15, 0.60)], windows=[4096]) == 4096 - 1000 - 47
    assert output_cap(0.01, facts, [(0.15, 0.60), (3.0, 15.0)], windows=[None, 128_000]) == 466
    assert output_cap(0.01, facts, [(1.0, 0.0)], windows=[2048]) is None  # free output


def test_explain_shows_the_output_cap_the_request_is_sent_with(gateway: Running) -> None:
    """`POST /v1/route/explain` of a request without `max_tokens` names the cap serving adds
    (it showed only the 512 tokens the ceiling check assumes); with `max_tokens` set, none."""
    import httpx

    body: dict[str, Any] = {"model": "auto", "metadata": {"task": "code"}, "messages": [
        {"role": "user", "content": "write a python function that parses dates"}]}
    headers = {"authorization": f"Bearer {API_KEY}"}
    explained = httpx.post(f"{gateway.base_url}/v1/route/explain", json=body, headers=headers,
                           timeout=20).json()
    cap = explained["request"]["output_cap"]
    prompt = explained["request"]["prompt_tokens_estimate"]
    assert isinstance(cap, int) and cap > 512
    assert (prompt * PRICE_IN + cap * PRICE_OUT) / 1e6 <= CEILING_USD
    # Each candidate is priced at that cap too: the worst case beside it assumes 512 tokens, a
    # cost the request can pass (an audit budgeting from it saw a fallback cost more).
    (candidate,) = explained["candidates"]
    at_cap = (prompt * PRICE_IN + cap * PRICE_OUT) / 1e6
    assert candidate["cost_at_output_cap_usd"] == pytest.approx(at_cap)
    assert candidate["worst_case_cost_usd"] < at_cap <= CEILING_USD
    limited = httpx.post(f"{gateway.base_url}/v1/route/explain", json={**body, "max_tokens": 50},
                         headers=headers, timeout=20).json()
    assert limited["request"]["output_cap"] is None
    assert limited["candidates"][0]["cost_at_output_cap_usd"] is None


@pytest.mark.parametrize(("limits", "param"), [
    ({"n": 8, "max_tokens": 600}, "n"),
    ({"max_completion_tokens": 2000}, "max_completion_tokens"),
    ({"max_tokens": 2000}, "max_tokens"),
])
def test_an_over_ceiling_refusal_names_the_field_that_makes_it_so(
        gateway: Running, limits: dict[str, int], param: str) -> None:
    """Eight answers of 600 tokens ($0.072 at $15/M), or one of 2,000 ($0.03) whichever field
    asks for it: the 400 names that field (it named `max_tokens` for all three)."""
    client = openai.OpenAI(base_url=f"{gateway.base_url}/v1", api_key=API_KEY, max_retries=0,
                           timeout=60)
    with pytest.raises(openai.BadRequestError) as refused:
        client.chat.completions.create(model="auto", **limits,  # type: ignore[call-overload]
                                       messages=[{"role": "user", "content": "hello"}])
    error = refused.value.body
    assert isinstance(error, dict), error
    assert (error.get("code"), error.get("param")) == ("over_cost_ceiling", param)
