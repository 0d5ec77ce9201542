"""One streamed answer read to its end over httpx, as the service tests' clients read it."""

from __future__ import annotations

import time
from typing import NamedTuple

import httpx
import orjson


class StreamRead(NamedTuple):
    ttft_s: float | None  # from `started` to the first event with content
    done: bool  # `data: [DONE]` came
    failed: bool  # an error event came


async def read_stream(response: httpx.Response, started: float) -> StreamRead:
    """Read `response`'s SSE events to the end; `started` is `time.monotonic()` at sending."""
    ttft: float | None = None
    done = failed = False
    async for line in response.aiter_lines():
        if not line.startswith("data: "):
            continue
        if line == "data: [DONE]":
            done = True
            continue
        event = orjson.loads(line[6:])
        if "error" in event:
            failed = True
        elif ttft is None and any(c.get("delta", {}).get("content")
                                  for c in event.get("choices", [])):
            ttft = time.monotonic() - started
    return StreamRead(ttft, done, failed)
