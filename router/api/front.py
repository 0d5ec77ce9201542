"""The ASGI front door: chat completions go straight to their handler, everything else to FastAPI.

`POST /v1/chat/completions` is the only route on the hot path. FastAPI's middleware stack
(exception wrappers, body limits, routing by regex) costs a tenth of the router's CPU per request
and buys the chat handler nothing: it validates its own body, enforces its own size limit and
turns every error into OpenAI's JSON shape itself. So this dispatcher hands that one route to the
handler directly and passes every other request, and the lifespan, to the FastAPI app.
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable
from typing import Any

from starlette.requests import Request
from starlette.responses import Response

from router.api.errors import error_response
from router.errors import SlorouterError
from router.logs import event

log = logging.getLogger(__name__)

CHAT_PATH = "/v1/chat/completions"

Handler = Callable[[Request], Awaitable[Response]]
ASGIApp = Callable[[Any, Any, Any], Awaitable[None]]


class FrontDoor:
    """An ASGI app: `POST /v1/chat/completions` → `chat`; anything else → `app`."""

    def __init__(self, app: ASGIApp, chat: Handler) -> None:
        self.app = app
        self._chat = chat

    async def __call__(self, scope: Any, receive: Any, send: Any) -> None:
        if (scope["type"] != "http" or scope["path"] != CHAT_PATH
                or scope["method"] != "POST"):
            await self.app(scope, receive, send)
            return
        try:
            response = await self._chat(Request(scope, receive, send))
        except Exception as exc:  # the handler maps its own errors: this is the last resort
            event(log, "unhandled_error", logging.ERROR, error=type(exc).__name__)
            response = error_response(SlorouterError("internal error", code="internal_error"))
        await response(scope, receive, send)
