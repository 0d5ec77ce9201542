"""Folding streamed chunks into a cacheable completion; cut streams never assemble."""

from __future__ import annotations

import orjson
import pytest

from cache.assemble import StreamAssembler
from cache.entry import NotCacheable, check_completion
from cache.replay import replay_sse
from tests.cache.helpers import completion_body


def _chunks(body: bytes, include_usage: bool = False) -> list[dict[str, object]]:
    events = replay_sse(body, include_usage=include_usage, chunk_chars=3)
    return [orjson.loads(e.removeprefix(b"data: ")) for e in events[:-1]]


def test_assembled_stream_equals_the_original_completion() -> None:
    """Chunks of a finished answer fold back into the same completion."""
    tool = {"id": "call_1", "type": "function", "function": {"name": "f", "arguments": '{"a":1}'}}
    usage = {"prompt_tokens": 9, "completion_tokens": 2, "total_tokens": 11}
    body = completion_body("Hello there, world", tool_calls=[tool], usage=usage)
    assembler = StreamAssembler()
    for chunk in _chunks(body, include_usage=True):
        assembler.add(chunk)
    rebuilt = orjson.loads(assembler.completion_body())
    original = orjson.loads(body)
    original["choices"][0]["message"].pop("refusal")
    assert rebuilt == original
    check_completion(assembler.completion_body())


def test_cut_stream_does_not_assemble() -> None:
    """A stream that stops before its finish_reason raises NotCacheable('unfinished')."""
    assembler = StreamAssembler()
    for chunk in _chunks(completion_body("Hello there, world"))[:-1]:
        assembler.add(chunk)
    with pytest.raises(NotCacheable) as caught:
        assembler.completion_body()
    assert caught.value.reason == "unfinished"


def test_empty_stream_does_not_assemble() -> None:
    """No chunk at all is not an answer."""
    with pytest.raises(NotCacheable):
        StreamAssembler().completion_body()
