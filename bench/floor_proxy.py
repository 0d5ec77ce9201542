"""The floor of slorouter's stack: an ASGI app that only relays a POST to one upstream (a
streamed answer chunk by chunk, as it arrives).

uvicorn (uvloop, httptools) and the pass-through adapter's HTTP client (`router.providers.http1`),
nothing else: no parsing, routing, statistics or telemetry. `bench/stack_floor.py` runs it beside
slorouter so that what the machine costs per request and what slorouter adds can be told apart.
Upstream origin from `FLOOR_UPSTREAM` (e.g. `http://127.0.0.1:8001`).
"""

from __future__ import annotations

import os
from typing import Any

from router.providers.http1 import Http1Client, Target, request_head

_upstream = Target.of(os.environ.get("FLOOR_UPSTREAM", "http://127.0.0.1:8001")
                      + "/v1/chat/completions")
_client = Http1Client()
_JSON = [(b"content-type", b"application/json")]
_SSE = [(b"content-type", b"text/event-stream")]


async def app(scope: Any, receive: Any, send: Any) -> None:
    if scope["type"] == "lifespan":
        while (await receive())["type"] != "lifespan.shutdown":
            await send({"type": "lifespan.startup.complete"})
        await _client.aclose()
        await send({"type": "lifespan.shutdown.complete"})
        return
    body = b""
    more = True
    while more:
        message = await receive()
        body += message.get("body", b"")
        more = message.get("more_body", False)
    if scope["method"] != "POST":  # readiness probe
        await send({"type": "http.response.start", "status": 200, "headers": []})
        await send({"type": "http.response.body", "body": b"ok"})
        return
    head = request_head(_upstream, {"content-type": "application/json"}, len(body))
    response = await _client.post(_upstream, head, body, connect_timeout_s=5.0)
    if not response.headers.get("content-type", "").startswith("text/event-stream"):
        answer = await response.read()
        await send({"type": "http.response.start", "status": 200, "headers": _JSON})
        await send({"type": "http.response.body", "body": answer})
        return
    await send({"type": "http.response.start", "status": 200, "headers": _SSE})
    async for chunk in response.chunks():  # each chunk relayed as it arrives
        await send({"type": "http.response.body", "body": chunk, "more_body": True})
    await send({"type": "http.response.body", "body": b"", "more_body": False})
