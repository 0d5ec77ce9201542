"""A streaming response that watches the client: disconnect cancels the producer at once.

Starlette's own streaming response only notices a gone client when a write fails, which can be
seconds later while an upstream is still thinking. Here a watcher waits on `receive()` for
`http.disconnect` and cancels the task that produces the chunks, so the upstream call is
cancelled too.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import AsyncIterator, Awaitable, Callable, Mapping, MutableMapping
from typing import Any

from starlette.responses import Response

from router.api.errors import INTERNAL, error_event
from router.logs import event

log = logging.getLogger("slorouter.http")

Scope = Mapping[str, Any]
Receive = Callable[[], Awaitable[MutableMapping[str, Any]]]
Send = Callable[[dict[str, Any]], Awaitable[None]]


async def wait_for_disconnect(receive: Receive) -> None:
    while True:
        message = await receive()
        if message["type"] == "http.disconnect":
            return


class WatchedStreamingResponse(Response):
    """Sends `chunks` as `text/event-stream`, then always awaits `on_finish(client_gone)`."""

    def __init__(self, chunks: AsyncIterator[bytes], headers: Mapping[str, str],
                 on_finish: Callable[[bool], Awaitable[None]]) -> None:
        # Like Starlette's StreamingResponse: no `body`, so no content-length header.
        self.status_code = 200
        self.media_type = "text/event-stream"
        self.background = None
        self.init_headers(dict(headers))
        self._chunks = chunks
        self._on_finish = on_finish

    async def __call__(self, scope: Any, receive: Any, send: Any) -> None:
        # The chunks are produced in this task (a task of their own would cost the first chunk
        # one more pass of the event loop); the watcher cancels it when the client leaves.
        client_gone = True
        try:
            await run_unless_disconnected(receive, self._produce(send))
            client_gone = False
        except (ClientGone, OSError):  # the client left, or a write to it failed
            pass
        except Exception as exc:  # a write broke otherwise: the stream ends early; say why
            event(log, "stream_failed", logging.ERROR, error=type(exc).__name__)
        finally:
            await self._on_finish(client_gone)

    async def _produce(self, send: Send) -> None:
        await send({"type": "http.response.start", "status": self.status_code,
                    "headers": self.raw_headers})
        chunks = self._chunks
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
            await send({"type": "http.response.body", "body": chunk, "more_body": True})
        await send({"type": "http.response.body", "body": b"", "more_body": False})


async def run_unless_disconnected(receive: Receive, work: Awaitable[Any]) -> Any:
    """Await `work`; if the client disconnects first, cancel it and raise `ClientGone`.

    `work` runs in the calling task (no task of its own): a watcher task cancels the caller
    when `http.disconnect` arrives, and the cancellation is turned into `ClientGone` here.
    """
    caller = asyncio.current_task()
    assert caller is not None
    gone = False

    async def watch() -> None:
        nonlocal gone
        await wait_for_disconnect(receive)
        gone = True
        caller.cancel()

    watcher = asyncio.ensure_future(watch())
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
        raise ClientGone()
    return result


class ClientGone(Exception):
    """The client disconnected before the response was ready."""
