"""Upstream answers as streams of `StreamEvent`s, as the runner reads them.

A non-streamed completion is a stream of one content event (`CompletionEvents`), so that
peeking, hedging and committing treat both kinds of answer alike. `peek` reads a stream up to
its first content event (the runner commits to an attempt there); `close_quietly` closes one
that was abandoned. Awaiting the provider is the adapters' job; ordering attempts is the
runner's.
"""

from __future__ import annotations

import contextlib

from router.execution.hedging import ChunkStream
from router.providers.base import Provider, StreamEvent, UpstreamCall

EventStream = ChunkStream[StreamEvent]


class CompletionEvents:
    """A non-streamed completion as a stream of one event, so that peeking, hedging and
    committing treat both kinds of answer alike. Not an async generator: one left suspended
    after its event (as `peek` leaves it) is finalised by the event loop, which schedules its
    `aclose()` as a task of its own through the thread-safe wake-up, once per request."""

    __slots__ = ("_call", "_done", "_provider")

    def __init__(self, provider: Provider, call: UpstreamCall) -> None:
        self._provider, self._call, self._done = provider, call, False

    def __aiter__(self) -> CompletionEvents:
        return self

    async def __anext__(self) -> StreamEvent:
        if self._done:
            raise StopAsyncIteration
        self._done = True
        completion = await self._provider.complete(self._call)
        return StreamEvent(data=completion.body, has_content=True, usage=completion.usage)

    async def aclose(self) -> None:
        self._done = True


def has_content(event: StreamEvent) -> bool:
    return event.has_content


async def peek(events: EventStream) -> list[StreamEvent]:
    """Read up to and including the first content event (or the end of the stream)."""
    head: list[StreamEvent] = []
    try:
        async for event in events:
            head.append(event)
            if event.has_content:
                break
    except BaseException:
        await close_quietly(events)
        raise
    return head


async def close_quietly(events: ChunkStream[StreamEvent] | None) -> None:
    """Close an abandoned upstream stream; its own failure must not mask the real one."""
    aclose = getattr(events, "aclose", None)
    if aclose is not None:
        with contextlib.suppress(Exception):
            await aclose()
