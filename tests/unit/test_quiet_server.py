"""The server's own `date` header: RFC 9110's format, formatted once per second, added to each
HTTP response start and to nothing else."""

from __future__ import annotations

import asyncio
from typing import Any

from router.quiet_server import DatedApp, HttpDate


def test_the_date_is_imf_fixdate_and_formatted_once_per_second() -> None:
    now = [784_111_777.25]  # RFC 9110's own example instant
    date = HttpDate(lambda: now[0])
    first = date()
    assert first == b"Sun, 06 Nov 1994 08:49:37 GMT"
    now[0] += 0.7
    assert date() is first  # the same second: not formatted again
    now[0] += 0.1
    assert date() == b"Sun, 06 Nov 1994 08:49:38 GMT"


def test_only_http_response_starts_get_a_date() -> None:
    seen: list[tuple[str, Any]] = []

    async def app(scope: Any, receive: Any, send: Any) -> None:
        await send({"type": "http.response.start", "status": 200,
                    "headers": [(b"x-request-id", b"r1")]})
        await send({"type": "http.response.body", "body": b"{}"})

    async def send(message: Any) -> None:
        seen.append((message["type"], message.get("headers")))

    async def receive() -> Any:
        return {"type": "lifespan.startup"}

    dated = DatedApp(app, lambda: b"Sun, 06 Nov 1994 08:49:37 GMT")
    asyncio.run(dated({"type": "http"}, receive, send))
    assert seen == [("http.response.start", [(b"x-request-id", b"r1"),
                                             (b"date", b"Sun, 06 Nov 1994 08:49:37 GMT")]),
                    ("http.response.body", None)]

    scopes: list[Any] = []

    async def lifespan(scope: Any, receive: Any, send: Any) -> None:
        scopes.append((scope, send))

    asyncio.run(DatedApp(lifespan)({"type": "lifespan"}, receive, send))
    assert scopes == [({"type": "lifespan"}, send)]  # passed through as it was
