"""Folding streamed chunks back into a completion; cut streams assemble, and are never cacheable."""

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


def test_a_tool_call_answer_streamed_with_empty_content_deltas_has_null_content() -> None:
    """Some providers (through litellm) send `"content": ""` beside tool-call deltas; the
    assembled answer has `content: null`, as a non-streamed tool-call answer does. An empty
    text answer with no tool call keeps its empty string."""
    assembler = StreamAssembler()
    header = {"id": "c1", "object": "chat.completion.chunk", "created": 1, "model": "m"}
    call = {"index": 0, "id": "call_1", "type": "function",
            "function": {"name": "f", "arguments": "{}"}}
    for delta, finish in (({"role": "assistant", "content": ""}, None),
                          ({"content": "", "tool_calls": [call]}, None),
                          ({}, "tool_calls")):
        assembler.add({**header, "choices": [{"index": 0, "delta": delta,
                                              "finish_reason": finish}]})
    message = orjson.loads(assembler.completion_body())["choices"][0]["message"]
    assert message["content"] is None and message["tool_calls"][0]["function"]["name"] == "f"
    plain = StreamAssembler()
    for delta, finish in (({"role": "assistant", "content": ""}, None), ({}, "stop")):
        plain.add({**header, "choices": [{"index": 0, "delta": delta, "finish_reason": finish}]})
    assert orjson.loads(plain.completion_body())["choices"][0]["message"]["content"] == ""


def test_a_stream_without_its_finish_reason_assembles_but_is_never_cacheable() -> None:
    """What arrived before the finish_reason (a cut stream, or an upstream that never sends
    one) assembles with `finish_reason: null`, which the cache refuses as unfinished."""
    assembler = StreamAssembler()
    for chunk in _chunks(completion_body("Hello there, world"))[:-1]:
        assembler.add(chunk)
    body = orjson.loads(assembler.completion_body())
    assert body["choices"][0]["finish_reason"] is None
    assert body["choices"][0]["message"]["content"] == "Hello there, world"
    with pytest.raises(NotCacheable) as caught:
        check_completion(assembler.completion_body())
    assert caught.value.reason == "unfinished"


def test_an_empty_stream_assembles_to_no_choices_which_is_never_cacheable() -> None:
    with pytest.raises(NotCacheable) as caught:
        check_completion(StreamAssembler().completion_body())
    assert caught.value.reason == "no_choices"


@pytest.mark.parametrize("function", [{"name": 5, "arguments": ["x"]}, {"name": None},
                                      {"name": {"a": 1}, "arguments": 2.5}])
def test_tool_call_parts_that_are_not_strings_are_skipped(function: dict[str, object]) -> None:
    assembler = StreamAssembler()
    header = {"id": "c1", "object": "chat.completion.chunk", "created": 1, "model": "m"}
    for call, finish in (({"index": 0, "id": "call_1", "type": "function",
                           "function": {"name": "look", "arguments": "{"}}, None),
                         ({"index": 0, "function": function}, None),
                         ({"index": 0, "function": {"name": "up", "arguments": "}"}}, "stop")):
        assembler.add({**header, "choices": [{"index": 0, "delta": {"tool_calls": [call]},
                                              "finish_reason": finish}]})
    tool = orjson.loads(assembler.completion_body())["choices"][0]["message"]["tool_calls"][0]
    assert tool["function"] == {"name": "lookup", "arguments": "{}"}


def test_a_streamed_custom_tool_call_assembles_with_its_name_and_input() -> None:
    """OpenAI's custom tools stream `custom: {name, input}` fragments, not `function`; they
    used to be stored as an empty function call."""
    call = {"id": "call_1", "type": "custom", "custom": {"name": "shell", "input": "echo hi"}}
    body = completion_body(None, tool_calls=[call])
    assembler = StreamAssembler()
    header = {"id": "c1", "object": "chat.completion.chunk", "created": 1, "model": "m"}
    for delta, finish in (({"role": "assistant", "content": None, "tool_calls": [
                              {"index": 0, "id": "call_1", "type": "custom",
                               "custom": {"name": "shell", "input": ""}}]}, None),
                          ({"tool_calls": [{"index": 0, "custom": {"input": "echo"}}]}, None),
                          ({"tool_calls": [{"index": 0, "custom": {"input": " hi"}}]}, None),
                          ({}, "tool_calls")):
        assembler.add({**header, "choices": [{"index": 0, "delta": delta,
                                              "finish_reason": finish}]})
    message = orjson.loads(assembler.completion_body())["choices"][0]["message"]
    assert message["tool_calls"] == [call]
    replayed = StreamAssembler()
    for chunk in _chunks(body):
        replayed.add(chunk)
    assert orjson.loads(replayed.completion_body())["choices"][0]["message"]["tool_calls"] == [
        call]


@pytest.mark.parametrize("deltas", [
    # no `index` at all (Gemini's OpenAI-compatible API, SGLang, mistral.rs)
    [{"id": "call_1", "type": "function", "function": {"name": "a", "arguments": '{"x"'}},
     {"function": {"arguments": ": 1}"}},
     {"id": "call_2", "type": "function", "function": {"name": "b", "arguments": "{}"}}],
    # one index for parallel calls (Ollama through litellm)
    [{"index": 0, "id": "call_1", "type": "function", "function": {"name": "a",
                                                                  "arguments": '{"x": 1}'}},
     {"index": 0, "id": "call_2", "type": "function", "function": {"name": "b",
                                                                  "arguments": "{}"}}],
    # the id repeated on every fragment of its call
    [{"index": 0, "id": "call_1", "type": "function", "function": {"name": "a",
                                                                  "arguments": '{"x"'}},
     {"index": 0, "id": "call_1", "function": {"arguments": ": 1}"}},
     {"index": 1, "id": "call_2", "type": "function", "function": {"name": "b",
                                                                  "arguments": "{}"}}],
])
def test_parallel_calls_without_their_own_index_stay_apart(deltas: list[dict[str, object]],
                                                           ) -> None:
    assembler = StreamAssembler()
    header = {"id": "c1", "object": "chat.completion.chunk", "created": 1, "model": "m"}
    for delta in deltas:
        assembler.add({**header, "choices": [{"index": 0, "delta": {"tool_calls": [delta]},
                                              "finish_reason": None}]})
    assembler.add({**header, "choices": [{"index": 0, "delta": {},
                                          "finish_reason": "tool_calls"}]})
    calls = orjson.loads(assembler.completion_body())["choices"][0]["message"]["tool_calls"]
    assert calls == [
        {"id": "call_1", "type": "function", "function": {"name": "a", "arguments": '{"x": 1}'}},
        {"id": "call_2", "type": "function", "function": {"name": "b", "arguments": "{}"}}]
