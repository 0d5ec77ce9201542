"""A stream's first write to its client carries its first token, with what came before it, and
its last write its whole end.

An upstream sends its role chunk (no content) at once and its first content later; the router
commits to the stream at that first content and relays both. Written one event at a time, the
role chunk was a write (a system call) of its own on the first token's path, and a client could
wake for it before the token. Served end to end (the real app over uvicorn, the provider
simulator as a process, the real `openai` client), with the messages the app sends uvicorn
recorded on the way. Its end (the finish chunk, the usage chunk, `[DONE]` and the body's end)
was four writes; the chunks that carry none of the answer now wait for the next line.
"""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from typing import Any

import openai
import pytest
from openai.types.chat import ChatCompletionChunk

from router.loadtest.loadgen import CONTENT
from tests.support.services import FAST_PROFILE, Running, start_simulator
from tests.telemetry.helpers import in_memory_telemetry
from tests.telemetry.served import API_KEY, serve


@pytest.fixture(scope="module")
def sim(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Running]:
    """`fast`: its role chunk at once, its first content 30 ms later, then a chunk a token."""
    running = start_simulator(tmp_path_factory.mktemp("sim-first-write"), {
        "fast": {**FAST_PROFILE, "ttft_p50_ms": 30, "ttft_p99_ms": 31, "tokens_per_chunk": 1}})
    yield running
    running.stop()


class BodyWrites:
    """An ASGI app around the router's, keeping the body messages chat responses send."""

    def __init__(self, app: Any) -> None:
        self._app = app
        self.bodies: list[bytes] = []
        self.ends: list[bool] = []  # whether each body message ended the response

    async def __call__(self, scope: Any, receive: Any, send: Any) -> None:
        if scope["type"] != "http" or scope["path"] != "/v1/chat/completions":
            await self._app(scope, receive, send)
            return

        async def kept(message: Any) -> None:
            if message["type"] == "http.response.body":
                self.bodies.append(message.get("body", b""))
                self.ends.append(not message.get("more_body", False))
            await send(message)

        await self._app(scope, receive, kept)


def test_a_streams_first_write_holds_its_first_token_and_its_last_the_whole_end(
        sim: Running) -> None:
    telemetry, _ = in_memory_telemetry()
    writes: list[BodyWrites] = []

    def wrap(app: Any) -> BodyWrites:
        writes.append(BodyWrites(app))
        return writes[-1]

    async def scenario() -> list[ChatCompletionChunk]:
        async with serve(sim.base_url, telemetry, wrap=wrap) as base:
            client = openai.AsyncOpenAI(base_url=f"{base}/v1", api_key=API_KEY, max_retries=0)
            stream = await client.chat.completions.create(
                model="fast", stream=True, stream_options={"include_usage": True},
                messages=[{"role": "user", "content": "Name three colours."}])
            return [chunk async for chunk in stream]

    chunks = asyncio.run(scenario())
    bodies = writes[0].bodies
    first = bodies[0]
    assert first.count(b"data: ") == 2, first  # the role chunk and the first content, together
    assert b'"role":"assistant"' in first and CONTENT.search(first), first
    # the client reads the whole answer as before: the role, then the tokens, one event each
    deltas = [chunk.choices[0].delta for chunk in chunks if chunk.choices]
    assert deltas[0].role == "assistant" and not deltas[0].content
    assert deltas[1].content and sum(bool(d.content) for d in deltas) >= 8
    assert sum(body.count(b"data: ") for body in bodies) == len(chunks) + 1  # and [DONE]
    # its end is one write too: the finish chunk, the usage chunk, `[DONE]` and the body's end
    last = bodies[-1]
    assert writes[0].ends == [False] * (len(bodies) - 1) + [True]
    assert last.count(b"data: ") == 3 and last.endswith(b"data: [DONE]\n\n"), last
    assert b'"finish_reason":"stop"' in last and not CONTENT.search(last), last
    assert chunks[-1].usage is not None and chunks[-1].usage.completion_tokens >= 8
