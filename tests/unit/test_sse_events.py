"""The pass-through adapter reads an upstream SSE body into the same events however the body
is cut into chunks (inside a line, between the two line feeds of an event, a last line with
no line feed) and whichever line ends it uses, and a body that ends before `data: [DONE]` is
an error unless its answer had come to its finish reason (some OpenAI-compatible servers send
no `[DONE]`)."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from itertools import pairwise

import orjson
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from router.providers.base import not_an_event_stream
from router.providers.http1 import ResponseBroken
from router.providers.passthrough import _sse_events

EVENTS = [
    {"choices": [{"index": 0, "delta": {"role": "assistant"}}]},
    {"choices": [{"index": 0, "delta": {"content": "Hel"}}]},
    {"choices": [{"index": 0, "delta": {"content": "lo"}}]},
    {"choices": [], "usage": {"prompt_tokens": 3, "completion_tokens": 2, "total_tokens": 5}},
]


def body(done: bool, final_feed: bool = True, events: list[dict[str, object]] = EVENTS) -> bytes:
    lines = [b": keep-alive"] + [b"data: " + orjson.dumps(e) for e in events]
    if done:
        lines.append(b"data: [DONE]")
    text = b"\n\n".join(lines)
    return text + b"\n\n" if final_feed else text


async def _chunks(data: bytes, cuts: list[int]) -> AsyncIterator[bytes]:
    edges = [0, *sorted(c % (len(data) + 1) for c in cuts), len(data)]
    for start, stop in pairwise(edges):
        if stop > start:
            yield data[start:stop]


def read(data: bytes, cuts: list[int]) -> list[tuple[bytes, bool, bool]]:
    async def collect() -> list[tuple[bytes, bool, bool]]:
        return [(e.data, e.has_content, e.usage_only)
                async for e in _sse_events(_chunks(data, cuts))]
    return asyncio.run(collect())


# (payload, has content, usage only) per event: the role chunk has no content
EXPECTED = [(orjson.dumps(event), flags[0], flags[1]) for event, flags in zip(
    EVENTS, [(False, False), (True, False), (True, False), (False, True)], strict=True)]


@settings(max_examples=200, deadline=None)
@given(cuts=st.lists(st.integers(min_value=0, max_value=2000), max_size=12),
       final_feed=st.booleans(), line_end=st.sampled_from([b"\n", b"\r\n", b"\r"]))
def test_any_chunking_gives_the_same_events(cuts: list[int], final_feed: bool,
                                            line_end: bytes) -> None:
    """With any of SSE's line ends (LF, CRLF, a lone CR), a CRLF cut between two chunks too."""
    data = body(done=True, final_feed=final_feed).replace(b"\n", line_end)
    assert read(data, cuts) == EXPECTED


@settings(max_examples=50, deadline=None)
@given(cuts=st.lists(st.integers(min_value=0, max_value=2000), max_size=6))
def test_a_body_without_done_is_broken(cuts: list[int]) -> None:
    with pytest.raises(ResponseBroken):
        read(body(done=False), cuts)


FINISHED = [*EVENTS[:3], {"choices": [{"index": 0, "delta": {}, "finish_reason": "stop"}]},
            EVENTS[3]]


@settings(max_examples=50, deadline=None)
@given(cuts=st.lists(st.integers(min_value=0, max_value=2000), max_size=6))
def test_a_body_without_done_after_its_finish_reason_is_whole(cuts: list[int]) -> None:
    assert len(read(body(done=False, events=FINISHED), cuts)) == len(FINISHED)


def test_a_finish_reason_inside_the_content_does_not_count() -> None:
    """Text that looks like a finish reason inside the answer (escaped in JSON) is content."""
    quoting = [{"choices": [{"index": 0, "delta": {"content": '"finish_reason": "stop"'}}]}]
    with pytest.raises(ResponseBroken):
        read(body(done=False, events=quoting), [])


def test_a_half_written_last_line_after_the_finish_reason_is_broken() -> None:
    """A body cut inside its last event's data is broken, even after the finish reason came."""
    with pytest.raises(ResponseBroken, match="malformed"):
        read(body(done=False, events=FINISHED)[:-9], [])


@pytest.mark.parametrize(("content_type", "not_a_stream"), [
    ("text/event-stream", False), ("text/event-stream; charset=utf-8", False),
    ("Text/Event-Stream", False), (None, False),
    ("text/html; charset=utf-8", True), ("application/json", True), ("text/plain", True),
    ("", True)])
def test_only_an_event_stream_content_type_is_read_as_a_stream(
        content_type: str | None, not_a_stream: bool) -> None:
    """A 200 to a streamed request is read as a stream when it says `text/event-stream` (any
    case, any parameters) or says nothing; anything else (an HTML page) is no stream."""
    assert not_an_event_stream(content_type) is not_a_stream
