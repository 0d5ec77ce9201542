"""A streaming response that watches the client: disconnect cancels the producer at once.

Starlette's own streaming response only notices a gone client when a write fails, which can be
seconds later while an upstream is still thinking. Here a watcher waits on `receive()` for
`http.disconnect` and cancels the task that produces the chunks, so the upstream call is
cancelled too.

A shutting-down server ends the requests still in flight when its grace is over through
`InFlight`: a stream's producer is cancelled the same way, and the stream ends with an error
event (`server_shutting_down`) instead of being cut off by the server with no reason; a request
still awaiting its answer is cancelled and answered with that error as a 503
(`until_grace_over`).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator, Mapping, MutableMapping
from typing import Any, TypeVar

from starlette.responses import Response

from cache.replay import DONE
from router.api.errors import (
    INTERNAL,
    SHUTTING_DOWN,
    STALLED,
    ClientGone,
    ShuttingDown,
    error_event,
)
from router.errors import SlorouterError
from router.execution import late_timers
from router.logs import event

log = logging.getLogger("slorouter.http")

Scope = Mapping[str, Any]
Receive = Callable[[], Awaitable[MutableMapping[str, Any]]]
Send = Callable[[dict[str, Any]], Awaitable[None]]
# (client_gone, the error the router itself ended the stream with, if it did)
OnFinish = Callable[[bool, SlorouterError | None], Awaitable[None]]
T = TypeVar("T")
# How long past the request's deadline a stream may still be writing before it is cut.
STALL_GRACE_S = 1.0
# The most a stream's relay holds the event loop at a stretch. Chunks already buffered (litellm's
# reads of an upstream's queued bytes) and a client's send buffer with room never make it wait:
# a stream nobody read held the loop 1.5 s, and ten of them 25 s, every other client waiting
# (the slow-consumer audit of 2026-12-07).
RELAY_SLICE_S = 0.002


async def wait_for_disconnect(receive: Receive) -> None:
    while True:
        message = await receive()
        if message["type"] == "http.disconnect":
            return


class InFlight:
    """The requests in flight (streams being sent, answers awaited), so that a server whose
    shutdown grace is over can end them.

    uvicorn cancels the requests still running when its graceful shutdown times out: a stream
    cut that way just stops (the client sees a truncated answer and no reason), and a request
    still awaiting its answer gets a plain-text 500. `end_all()` stops each one first, so it
    ends with `server_shutting_down` (a stream's last event, or a 503 in OpenAI's shape) and
    its outcome is recorded as that error; a request that starts afterwards ends so at once.
    A second Ctrl+C during the drain calls it too (`router.quiet_server`).
    Used on the event loop's thread only.
    """

    def __init__(self) -> None:
        self._stops: set[Callable[[], None]] = set()
        self.ending = False

    def end_all(self) -> None:
        self.ending = True
        for stop in tuple(self._stops):
            stop()

    @contextlib.contextmanager
    def tracked(self, stop: Callable[[], None]) -> Iterator[None]:
        """`stop()` is called if the requests are ended while the block runs."""
        self._stops.add(stop)
        try:
            if self.ending:
                stop()
            yield
        finally:
            self._stops.discard(stop)


async def until_grace_over(in_flight: InFlight | None, work: Awaitable[T]) -> T:
    """Await `work` in the calling task; if `in_flight` is ended first, cancel it and raise
    `server_shutting_down` (a cancellation from elsewhere stays one)."""
    if in_flight is None:
        return await work
    stopper = _Stopper()
    try:
        with in_flight.tracked(stopper.stop):
            return await work
    except asyncio.CancelledError:
        if not stopper.stopped or stopper.task.uncancel() > 0:
            raise  # cancelled from elsewhere (the server's own cut): that one wins
        raise ShuttingDown() from None


class _Stopper:
    """Cancels the task a request runs in, remembering that it did."""

    __slots__ = ("stopped", "task")

    def __init__(self) -> None:
        task = asyncio.current_task()
        assert task is not None
        self.task = task
        self.stopped = False

    def stop(self) -> None:
        self.stopped = True
        self.task.cancel()


class _TurnKeeper:
    """Tells a relay whether it has held the event loop for `RELAY_SLICE_S` (at most twice
    that) without the loop turning (a callback it scheduled has not run): a relay whose reads
    wait on the network gives the loop up at each of them and is never made to give it up once
    more. The callback is scheduled once a slice at most, not at every chunk."""

    __slots__ = ("_loop", "_turned", "_until")

    def __init__(self, loop: asyncio.AbstractEventLoop) -> None:
        self._loop = loop
        self._restart(loop.time())

    def _restart(self, now: float) -> None:
        self._turned = False
        self._loop.call_soon(self._mark)
        self._until = now + RELAY_SLICE_S

    def _mark(self) -> None:
        self._turned = True

    def held_too_long(self) -> bool:
        """Asked after each chunk; schedules its callback once a slice at most."""
        now = self._loop.time()
        if now <= self._until:
            return False
        if self._turned:
            self._restart(now)
            return False
        return True


class WatchedStreamingResponse(Response):
    """Sends `chunks` as `text/event-stream`, then always awaits
    `on_finish(client_gone, ended_by)`; `ended_by` is `shutdown_error` when `in_flight` ended it."""

    def __init__(self, chunks: AsyncIterator[bytes], headers: Mapping[str, str],
                 on_finish: OnFinish, in_flight: InFlight | None = None,
                 time_limit_s: float | None = None,
                 shutdown_error: SlorouterError = SHUTTING_DOWN) -> None:
        # Like Starlette's StreamingResponse: no `body`, so no content-length header.
        self.status_code = 200
        self.media_type = "text/event-stream"
        self.background = None
        self.init_headers(dict(headers))
        self._chunks = chunks
        self._on_finish = on_finish
        # The last event when the server's shutdown ends the stream (`unknown_commit` for a
        # side effect the upstream had: the SDKs retry `server_shutting_down`)
        self._shutdown_error = shutdown_error
        self._in_flight = in_flight
        # The request's time left, plus a grace: the chunks end a stream at the deadline
        # themselves (with an event), so this cuts only one whose client stopped reading, its
        # writes blocked, which held its admission slot and upstream call without limit.
        self._time_limit_s = None if time_limit_s is None else time_limit_s + STALL_GRACE_S
        self._started = False

    async def __call__(self, scope: Any, receive: Any, send: Any) -> None:
        # The chunks are produced in this task (a task of their own would cost the first chunk
        # one more pass of the event loop); the watcher cancels it when the client leaves.
        client_gone = True
        ended_by: SlorouterError | None = None
        try:
            async with late_timers.timeout(self._time_limit_s, STALL_GRACE_S):
                await until_grace_over(self._in_flight,
                                       run_unless_disconnected(receive, self._produce(send)))
            client_gone = False
        except TimeoutError:  # its writes blocked past the deadline: the client stopped reading
            client_gone, ended_by = False, STALLED
        except ShuttingDown:
            ended_by = self._shutdown_error
            client_gone = not await self._end_with(send, ended_by)
        except (ClientGone, OSError):  # the client left, or a write to it failed
            pass
        except Exception as exc:  # a write broke otherwise: the stream ends early; say why
            event(log, "stream_failed", logging.ERROR, error=type(exc).__name__)
        finally:
            await self._on_finish(client_gone, ended_by)

    async def _produce(self, send: Send) -> None:
        await send({"type": "http.response.start", "status": self.status_code,
                    "headers": self.raw_headers})
        self._started = True
        chunks = self._chunks
        ended = False
        turns = _TurnKeeper(asyncio.get_running_loop())
        while True:
            try:
                chunk = await anext(chunks)
            except StopAsyncIteration:
                break
            except Exception as exc:  # a bug: the client must see an error, not a clean end
                event(log, "stream_failed", logging.ERROR, error=type(exc).__name__)
                await send({"type": "http.response.body", "body": error_event(INTERNAL),
                            "more_body": False})
                return
            # `[DONE]` is a stream's last event: the body ends in the same write
            ended = chunk.endswith(DONE)
            await send({"type": "http.response.body", "body": chunk, "more_body": not ended})
            # Let the loop serve the others (`RELAY_SLICE_S`), but not after the body's end: a
            # client hanging up once it has it would read as one that left mid-stream.
            if not ended and turns.held_too_long():
                await asyncio.sleep(0)
        if not ended:
            await send({"type": "http.response.body", "body": b"", "more_body": False})

    async def _end_with(self, send: Send, error: SlorouterError) -> bool:
        """End the stream with `error` as its last event; False if the client is gone."""
        try:
            if not self._started:
                await send({"type": "http.response.start", "status": self.status_code,
                            "headers": self.raw_headers})
            await send({"type": "http.response.body", "body": error_event(error),
                        "more_body": False})
        except OSError:
            return False
        return True


async def run_unless_disconnected(
        receive: Receive, work: Awaitable[T],
        dropped: Callable[[T], Awaitable[object]] | None = None) -> T:
    """Await `work`; if the client disconnects first, cancel it and raise `ClientGone`.

    `work` runs in the calling task (no task of its own): a watcher task cancels the caller
    when `http.disconnect` arrives, and the cancellation is turned into `ClientGone` here.
    `dropped(result)` undoes a result that `work` produced anyway as the client left (a
    cancellation it absorbed), since no one will use it.
    """
    caller = asyncio.current_task()
    assert caller is not None
    gone = False

    async def watch() -> None:
        nonlocal gone
        await wait_for_disconnect(receive)
        gone = True
        caller.cancel()

    watcher = asyncio.get_running_loop().create_task(watch())
    try:
        result = await work
    except asyncio.CancelledError:
        if not gone:
            raise
        if caller.uncancel() > 0:  # cancelled from elsewhere as well: that one wins
            raise
        raise ClientGone() from None
    finally:
        watcher.cancel()
    if gone:  # the work swallowed the cancellation and finished anyway
        caller.uncancel()
        if dropped is not None:
            await dropped(result)
        raise ClientGone()
    return result

