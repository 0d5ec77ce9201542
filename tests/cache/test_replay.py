"""SSE replay of cached completions, parsed back by the openai library's own stream code."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Sequence

import openai
import orjson
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from openai._streaming import SSEDecoder
from openai.lib.streaming.chat import ChatCompletionStreamState
from openai.types.chat import ChatCompletion, ChatCompletionChunk

from cache.replay import DONE, replay_sse
from tests.cache.helpers import completion_body

tool_calls = st.lists(
    st.fixed_dictionaries(
        {
            "id": st.text("abc123", min_size=1, max_size=8).map(lambda s: f"call_{s}"),
            "type": st.just("function"),
            "function": st.fixed_dictionaries(
                {"name": st.sampled_from(["search", "lookup"]), "arguments": st.text(max_size=30)}
            ),
        }
    ),
    max_size=3,
)
usages = st.none() | st.builds(
    lambda p, c: {"prompt_tokens": p, "completion_tokens": c, "total_tokens": p + c},
    st.integers(0, 5000),
    st.integers(0, 5000),
)


def _parse(events: Sequence[bytes]) -> list[ChatCompletionChunk]:
    """Decode SSE bytes with the openai SDK's decoder into typed chunks (strict models)."""
    chunks: list[ChatCompletionChunk] = []
    for sse in SSEDecoder().iter_bytes(iter(events)):
        if sse.data == "[DONE]":
            break
        chunks.append(ChatCompletionChunk.model_validate(orjson.loads(sse.data), strict=False))
    return chunks


@settings(max_examples=150, deadline=None)
@given(
    content=st.none() | st.text(max_size=200),
    calls=tool_calls,
    usage=usages,
    chunk_chars=st.none() | st.integers(1, 50),
    finish=st.sampled_from(["stop", "length", "tool_calls"]),
)
def test_replayed_stream_rebuilds_the_cached_completion(
    content: str | None,
    calls: list[dict[str, object]],
    usage: dict[str, int] | None,
    chunk_chars: int | None,
    finish: str,
) -> None:
    """openai's ChatCompletionStreamState folds the replay back into the same answer."""
    body = completion_body(content, tool_calls=calls or None, finish_reason=finish, usage=usage)
    events = replay_sse(body, include_usage=True, chunk_chars=chunk_chars)
    assert events[-1] == DONE
    state = ChatCompletionStreamState()
    for chunk in _parse(events):
        state.handle_chunk(chunk)
    rebuilt = state.current_completion_snapshot
    original = ChatCompletion.model_validate(orjson.loads(body))
    got, want = rebuilt.choices[0], original.choices[0]
    assert got.finish_reason == want.finish_reason
    assert (got.message.content or "") == (want.message.content or "")
    got_calls = [
        (c.id, c.function.name, c.function.arguments) for c in got.message.tool_calls or []
    ]
    want_calls = [
        (c.id, c.function.name, c.function.arguments)  # type: ignore[union-attr]
        for c in want.message.tool_calls or []
    ]
    assert got_calls == want_calls
    assert rebuilt.usage == original.usage
    assert (rebuilt.id, rebuilt.model, rebuilt.created) == (
        original.id,
        original.model,
        original.created,
    )


def test_replay_without_include_usage_sends_no_usage_chunk() -> None:
    """Without stream_options.include_usage every chunk has a choice and no usage key."""
    usage = {"prompt_tokens": 3, "completion_tokens": 1, "total_tokens": 4}
    chunks = _parse(replay_sse(completion_body(usage=usage)))
    assert chunks and all(c.choices for c in chunks)
    assert all(c.usage is None for c in chunks)


def test_first_replayed_chunk_is_the_role_and_content_follows() -> None:
    """The role delta comes first (not content), then the text, then the finish reason."""
    chunks = _parse(replay_sse(completion_body("Paris."), chunk_chars=2))
    assert chunks[0].choices[0].delta.role == "assistant"
    assert not chunks[0].choices[0].delta.content
    text = "".join(c.choices[0].delta.content or "" for c in chunks)
    assert text == "Paris."
    assert chunks[-1].choices[0].finish_reason == "stop"


def test_every_choice_of_an_n_completion_is_replayed_under_its_index() -> None:
    """n > 1: each choice streams under its own index with its own finish reason."""
    parsed = orjson.loads(completion_body("A"))
    second = {**parsed["choices"][0], "index": 1, "finish_reason": "length"}
    second["message"] = {**second["message"], "content": "B"}
    parsed["choices"].append(second)
    state = ChatCompletionStreamState()
    for chunk in _parse(replay_sse(orjson.dumps(parsed))):
        state.handle_chunk(chunk)
    choices = state.current_completion_snapshot.choices
    assert [(c.message.content, c.finish_reason) for c in choices] == [
        ("A", "stop"),
        ("B", "length"),
    ]


async def _serve_sse(events: Sequence[bytes]) -> AsyncIterator[int]:
    async def handle(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        head = await reader.readuntil(b"\r\n\r\n")
        length = next(
            (
                int(line.split(b":", 1)[1])
                for line in head.split(b"\r\n")
                if line.lower().startswith(b"content-length:")
            ),
            0,
        )
        await reader.readexactly(length)
        writer.write(
            b"HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\nconnection: close\r\n\r\n"
        )
        writer.write(b"".join(events))
        await writer.drain()
        writer.close()

    server = await asyncio.start_server(handle, "127.0.0.1", 0)
    async with server:
        yield server.sockets[0].getsockname()[1]


@pytest.fixture
async def sse_port() -> AsyncIterator[int]:
    usage = {"prompt_tokens": 12, "completion_tokens": 3, "total_tokens": 15}
    events = replay_sse(completion_body("Paris is the capital.", usage=usage), include_usage=True)
    async for port in _serve_sse(events):
        yield port


async def test_real_openai_client_consumes_a_replayed_stream(sse_port: int) -> None:
    """The unmodified AsyncOpenAI client streams a replay over HTTP: text, finish, usage."""
    client = openai.AsyncOpenAI(base_url=f"http://127.0.0.1:{sse_port}/v1", api_key="sk-test")
    stream = await client.chat.completions.create(
        model="gpt-4o-mini",
        messages=[{"role": "user", "content": "Capital of France?"}],
        stream=True,
        stream_options={"include_usage": True},
    )
    chunks = [chunk async for chunk in stream]
    await client.close()
    text = "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)
    finishes = [
        c.choices[0].finish_reason for c in chunks if c.choices and c.choices[0].finish_reason
    ]
    assert text == "Paris is the capital."
    assert finishes == ["stop"]
    assert chunks[-1].usage is not None and chunks[-1].usage.total_tokens == 15
