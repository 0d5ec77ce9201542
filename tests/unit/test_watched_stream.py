"""`WatchedStreamingResponse` in the request's own task: a whole stream, a client that leaves
mid-stream (the producer is cancelled at once), a producer that breaks (the client gets an
error event, the log the exception's class), and streams ended by a shutting-down server (an
error event that says so) or answers it still awaits (a 503 that says so)."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import AsyncIterator
from typing import Any

import orjson
import pytest

from cache.replay import DONE
from router.api.errors import SHUTTING_DOWN, STALLED
from router.api.replay import body_response
from router.api.sse import (
    STALL_GRACE_S,
    ClientGone,
    InFlight,
    WatchedStreamingResponse,
    run_unless_disconnected,
    until_grace_over,
)
from router.errors import SlorouterError


class _Client:
    """The ASGI side: records what is sent; `leave()` makes `receive()` report a disconnect."""

    def __init__(self) -> None:
        self.sent: list[dict[str, Any]] = []
        self._gone = asyncio.Event()

    async def receive(self) -> dict[str, Any]:
        await self._gone.wait()
        return {"type": "http.disconnect"}

    async def send(self, message: dict[str, Any]) -> None:
        self.sent.append(message)

    def leave(self) -> None:
        self._gone.set()

    @property
    def bodies(self) -> list[bytes]:
        return [m["body"] for m in self.sent if m["type"] == "http.response.body"]


def _run(chunks: AsyncIterator[bytes], client: _Client,
         streams: InFlight | None = None) -> list[bool]:
    return [gone for gone, _ in _run_ended(chunks, client, streams)]


def _run_ended(chunks: AsyncIterator[bytes], client: _Client, streams: InFlight | None = None
               ) -> list[tuple[bool, SlorouterError | None]]:
    finished: list[tuple[bool, SlorouterError | None]] = []

    async def on_finish(client_gone: bool, ended_by: SlorouterError | None) -> None:
        finished.append((client_gone, ended_by))

    response = WatchedStreamingResponse(chunks, {"x-test": "1"}, on_finish=on_finish,
                                        in_flight=streams)
    asyncio.run(response({}, client.receive, client.send))
    return finished


def test_a_whole_stream_is_sent_and_finished_as_complete() -> None:
    async def chunks() -> AsyncIterator[bytes]:
        for part in (b"a", b"b"):
            yield part

    client = _Client()
    assert _run(chunks(), client) == [False]
    assert client.sent[0]["type"] == "http.response.start" and client.sent[0]["status"] == 200
    assert client.bodies == [b"a", b"b", b""]


def test_a_stream_ending_with_done_ends_its_body_in_the_same_write() -> None:
    """`[DONE]` is an OpenAI stream's last event: it goes with the body's end (chunked
    encoding's last chunk), one write, not a write of its own for the end after it."""
    async def chunks() -> AsyncIterator[bytes]:
        yield b"data: {}\n\n"
        yield b"data: {}\n\n" + DONE

    client = _Client()
    assert _run(chunks(), client) == [False]
    ends = [m.get("more_body", False) for m in client.sent if m["type"] == "http.response.body"]
    assert client.bodies == [b"data: {}\n\n", b"data: {}\n\n" + DONE]
    assert ends == [True, False]


def test_a_stored_answer_is_replayed_as_a_stream_in_one_write() -> None:
    """A cache hit or an idempotent replay has every event at hand: the whole stream, usage and
    `[DONE]` included, is one write that ends the body."""
    finished: list[tuple[bool, SlorouterError | None]] = []

    async def on_finish(client_gone: bool, ended_by: SlorouterError | None) -> None:
        finished.append((client_gone, ended_by))

    stored = orjson.dumps({
        "id": "chatcmpl-1", "object": "chat.completion", "created": 0, "model": "m",
        "usage": {"prompt_tokens": 3, "completion_tokens": 2, "total_tokens": 5},
        "choices": [{"index": 0, "finish_reason": "stop",
                     "message": {"role": "assistant", "content": "stored answer"}}]})
    response = body_response(stored, stream=True, include_usage=True, headers={},
                             on_finish=on_finish)
    client = _Client()
    asyncio.run(response({"type": "http"}, client.receive, client.send))
    writes = [m for m in client.sent if m["type"] == "http.response.body"]
    assert len(writes) == 1 and writes[0]["more_body"] is False
    events = [orjson.loads(line[len(b"data: "):]) for line in writes[0]["body"].split(b"\n\n")
              if line and line != DONE.strip()]
    assert "".join(e["choices"][0]["delta"].get("content") or "" for e in events
                   if e["choices"]) == "stored answer"
    assert events[-1]["usage"]["total_tokens"] == 5 and writes[0]["body"].endswith(DONE)
    assert finished == [(False, None)]


def test_a_client_that_leaves_cancels_the_producer_at_once() -> None:
    client = _Client()
    cancelled: list[bool] = []

    async def chunks() -> AsyncIterator[bytes]:
        yield b"first"
        client.leave()
        try:
            await asyncio.sleep(30)  # an upstream still thinking
        except asyncio.CancelledError:
            cancelled.append(True)
            raise
        yield b"never"

    assert _run(chunks(), client) == [True]
    assert cancelled == [True] and client.bodies == [b"first"]


def test_a_broken_producer_ends_the_stream_with_an_error_event_and_is_logged(
        caplog: pytest.LogCaptureFixture) -> None:
    """The client sees an error event the OpenAI SDKs raise (not a stream that merely stops),
    and the log names the exception's class, never its text."""
    async def chunks() -> AsyncIterator[bytes]:
        yield b"first"
        raise RuntimeError("a bug")

    client = _Client()
    with caplog.at_level(logging.ERROR, logger="slorouter.http"):
        assert _run(chunks(), client) == [False]
    assert client.bodies[0] == b"first" and len(client.bodies) == 2
    assert client.sent[-1]["more_body"] is False
    last = client.bodies[-1]
    assert last.startswith(b"data: ") and last.endswith(b"\n\n")
    error = orjson.loads(last[len(b"data: "):])["error"]
    assert error["code"] == "internal_error" and error["type"] and error["message"]
    assert b"[DONE]" not in b"".join(client.bodies)
    failed = [r for r in caplog.records if r.message == "stream_failed"]
    assert len(failed) == 1 and failed[0].event_data == {"error": "RuntimeError"}  # type: ignore[attr-defined]
    assert "a bug" not in caplog.text


def test_ending_the_open_streams_stops_the_producer_and_ends_with_a_shutting_down_event() -> None:
    """`InFlight.end_all()` (the shutdown grace is over) cancels the producer at once; the
    stream ends with OpenAI's error shape, code `server_shutting_down`, and `on_finish` hears
    the client is still there and that the router ended the stream."""
    client, streams = _Client(), InFlight()
    cancelled: list[bool] = []

    async def chunks() -> AsyncIterator[bytes]:
        yield b"first"
        streams.end_all()
        try:
            await asyncio.sleep(30)  # an upstream still streaming
        except asyncio.CancelledError:
            cancelled.append(True)
            raise
        yield b"never"

    assert _run_ended(chunks(), client, streams) == [(False, SHUTTING_DOWN)]
    assert cancelled == [True] and client.bodies[0] == b"first" and len(client.bodies) == 2
    assert client.sent[-1]["more_body"] is False
    last = client.bodies[-1]
    error = orjson.loads(last[len(b"data: "):])["error"]
    assert error["code"] == "server_shutting_down" and error["type"] and error["message"]


def test_a_stream_that_starts_after_the_streams_were_ended_ends_at_once() -> None:
    """A stream committed after the grace ran out is not left to run: it ends with the event."""
    client, streams = _Client(), InFlight()
    streams.end_all()

    async def chunks() -> AsyncIterator[bytes]:
        await asyncio.sleep(30)
        yield b"never"

    assert _run_ended(chunks(), client, streams) == [(False, SHUTTING_DOWN)]
    assert client.sent[0]["type"] == "http.response.start"
    assert len(client.bodies) == 1 and b"server_shutting_down" in client.bodies[0]



def test_an_answer_awaited_when_the_requests_are_ended_becomes_server_shutting_down() -> None:
    """`until_grace_over`: ending the requests in flight cancels the awaited work and raises
    `server_shutting_down` (a 503); work that finishes first returns as it is; a cancellation
    from elsewhere stays a cancellation."""
    cancelled: list[bool] = []

    async def upstream() -> str:
        try:
            await asyncio.sleep(10)
        except asyncio.CancelledError:
            cancelled.append(True)
            raise
        return "answer"

    async def ended() -> BaseException | None:
        in_flight = InFlight()
        asyncio.get_running_loop().call_later(0.01, in_flight.end_all)
        try:
            await until_grace_over(in_flight, upstream())
        except Exception as exc:
            return exc
        return None

    error = asyncio.run(ended())
    assert isinstance(error, SlorouterError) and error.status_code == 503
    assert error.code == "server_shutting_down" and cancelled == [True]

    async def quick() -> str:
        return "answer"

    assert asyncio.run(until_grace_over(InFlight(), quick())) == "answer"

    async def cancelled_elsewhere() -> None:
        task = asyncio.create_task(until_grace_over(InFlight(), upstream()))
        await asyncio.sleep(0.01)
        task.cancel()
        await task

    with pytest.raises(asyncio.CancelledError):
        asyncio.run(cancelled_elsewhere())


async def test_a_result_produced_as_the_client_left_is_handed_back_to_be_undone() -> None:
    """Work that absorbs the cancellation and finishes anyway (a claim won just as the client
    left): `ClientGone` is raised and the result goes to `dropped`, so a lease is not kept."""
    client = _Client()
    dropped: list[str] = []
    started = asyncio.Event()

    async def stubborn() -> str:
        started.set()
        with contextlib.suppress(asyncio.CancelledError):  # absorbed: it finishes anyway
            await asyncio.sleep(10)
        return "lease"

    async def undo(result: str) -> None:
        dropped.append(result)

    async def leave_once_started() -> None:
        await started.wait()
        client.leave()

    leaving = asyncio.create_task(leave_once_started())
    with pytest.raises(ClientGone):
        await run_unless_disconnected(client.receive, stubborn(), undo)
    await leaving
    assert dropped == ["lease"]


class _NotReading(_Client):
    """A client that reads the response head and then nothing: every body write blocks, as
    uvicorn's does once the socket's buffers are full."""

    async def send(self, message: dict[str, Any]) -> None:
        self.sent.append(message)
        if message["type"] == "http.response.body":
            await asyncio.Event().wait()


async def test_a_stream_whose_client_stopped_reading_is_cut_after_its_time_limit() -> None:
    """The writes block (the client stays connected, reads nothing): once the request's time
    left and the grace have passed the stream is cut and finished as stalled, freeing what it
    held (it stayed blocked for as long as the client kept the connection open)."""
    async def endless() -> AsyncIterator[bytes]:
        while True:
            yield b"data: {}\n\n"

    finished: list[tuple[bool, SlorouterError | None]] = []

    async def on_finish(client_gone: bool, ended_by: SlorouterError | None) -> None:
        finished.append((client_gone, ended_by))

    client = _NotReading()
    response = WatchedStreamingResponse(endless(), {}, on_finish, time_limit_s=0.1)
    started = asyncio.get_running_loop().time()
    await asyncio.wait_for(response({"type": "http"}, client.receive, client.send), 5)
    assert asyncio.get_running_loop().time() - started == pytest.approx(0.1 + STALL_GRACE_S,
                                                                         abs=0.5)
    assert finished == [(False, STALLED)] and STALLED.code == "deadline_exceeded"
    assert len(client.bodies) == 1  # the first write, blocked ever since


async def test_a_replayed_stream_whose_client_stopped_reading_is_cut_too() -> None:
    """A stored answer replayed as a stream (a cache hit, an idempotent replay) holds its
    admission slot until it ends, like any stream: past the request's time left it is cut."""
    finished: list[tuple[bool, SlorouterError | None]] = []

    async def on_finish(client_gone: bool, ended_by: SlorouterError | None) -> None:
        finished.append((client_gone, ended_by))

    stored = orjson.dumps({
        "id": "chatcmpl-1", "object": "chat.completion", "created": 0, "model": "m",
        "choices": [{"index": 0, "finish_reason": "stop",
                     "message": {"role": "assistant", "content": "stored answer"}}]})
    response = body_response(stored, stream=True, include_usage=False, headers={},
                             on_finish=on_finish, time_limit_s=0.1)
    client = _NotReading()
    await asyncio.wait_for(response({"type": "http"}, client.receive, client.send), 5)
    assert finished == [(False, STALLED)]


def _turns_beside(chunks: AsyncIterator[bytes]) -> tuple[int, int]:
    """Relay `chunks` to a client that takes every write at once, beside another task that
    counts its turns: (the other task's turns meanwhile, bodies sent)."""
    turns = 0

    async def relay_beside_another_task() -> int:
        nonlocal turns
        relaying = True

        async def other() -> None:
            nonlocal turns
            while relaying:
                turns += 1
                await asyncio.sleep(0)

        client, beside = _Client(), asyncio.ensure_future(other())
        await asyncio.sleep(0)
        before = turns

        async def on_finish(client_gone: bool, ended_by: SlorouterError | None) -> None:
            return None

        await WatchedStreamingResponse(chunks, {}, on_finish=on_finish)(
            {}, client.receive, client.send)
        relaying = False
        await beside
        turns -= before
        return len(client.bodies)

    bodies = asyncio.run(relay_beside_another_task())
    return turns, bodies


def _busy(seconds: float) -> None:
    until = time.perf_counter() + seconds
    while time.perf_counter() < until:
        pass


def test_a_stream_whose_chunks_never_wait_gives_the_loop_to_the_others() -> None:
    """Chunks at hand (litellm's reads of an upstream's queued bytes) into a send that never
    waits (a client's send buffer with room): the relay still lets the loop serve the others
    every few milliseconds. It held the loop 1.5 s for one stream nobody read, 25 s for ten
    (the slow-consumer audit of 2026-12-07). Counted in the loop's turns, not in time: each
    chunk takes 0.2 ms of work, 400 of them 80 ms, during which another task must run."""

    async def chunks() -> AsyncIterator[bytes]:
        for _ in range(400):
            _busy(0.0002)
            yield b"data: {}\n\n"

    turns, bodies = _turns_beside(chunks())
    assert bodies == 401
    assert turns >= 5, turns


def test_a_client_hanging_up_once_the_body_ended_is_not_one_that_left() -> None:
    """The relay gives the loop up between chunks, never after the one that ends the body: a
    client that hangs up as soon as it has `[DONE]` got its whole answer. A turn given there let
    the disconnect be seen first, and the request was recorded as a client that left (out of
    its task's SLO: 37 of 40 requests in the SLO test)."""

    class _HangsUpAtTheEnd(_Client):
        async def send(self, message: dict[str, Any]) -> None:
            await super().send(message)
            if message["type"] == "http.response.body" and not message["more_body"]:
                self.leave()

    async def chunks() -> AsyncIterator[bytes]:
        for part in (b"data: {}\n\n", b"data: {}\n\n" + DONE):
            _busy(0.02)  # past `RELAY_SLICE_S` at every chunk
            yield part

    client = _HangsUpAtTheEnd()
    assert _run(chunks(), client) == [False]
    assert client.bodies[-1].endswith(DONE)


def test_a_stream_whose_chunks_wait_is_not_made_to_give_the_loop_up_again() -> None:
    """Chunks that each wait (an upstream's reads over the network) give the loop up already:
    the relay adds no turn of its own, however long the stream lasts, so a normal stream's
    chunks are not each put behind every other ready task once more."""

    async def chunks() -> AsyncIterator[bytes]:
        for _ in range(40):
            await asyncio.sleep(0)  # a read that waited
            _busy(0.001)
            yield b"data: {}\n\n"

    turns, bodies = _turns_beside(chunks())
    assert bodies == 41
    assert 40 <= turns <= 42, turns
