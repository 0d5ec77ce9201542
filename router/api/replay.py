"""Answering from a stored chat.completion (cache hit, idempotent replay), streaming or not."""

from __future__ import annotations

from collections.abc import AsyncIterator

from starlette.responses import Response

from cache.replay import replay_sse
from router.api.sse import OnFinish, WatchedStreamingResponse


async def _once(data: bytes) -> AsyncIterator[bytes]:
    yield data


def body_response(body: bytes, *, stream: bool, include_usage: bool, headers: dict[str, str],
                  on_finish: OnFinish, status: int = 200,
                  time_limit_s: float | None = None) -> Response:
    """The stored body as JSON, or replayed as a proper SSE stream when the client streams
    (which then ends, as every stream does, with `on_finish`; cut if its client stops reading
    past `time_limit_s`, the request's time left)."""
    if stream and status == 200:
        # every event is here: one write, ended with the body (`[DONE]` is last)
        events = b"".join(replay_sse(body, include_usage=include_usage))
        return WatchedStreamingResponse(_once(events), headers, on_finish=on_finish,
                                        time_limit_s=time_limit_s)
    return Response(body, status_code=status, headers=headers, media_type="application/json")
