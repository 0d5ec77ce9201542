"""The ASGI front door: chat completions go straight to their handler, everything else to FastAPI.

`POST /v1/chat/completions` is the only route on the hot path. FastAPI's middleware stack
(exception wrappers, body limits, routing by regex) costs a tenth of the router's CPU per request
and buys the chat handler nothing: it validates its own body, enforces its own size limit and
turns every error into OpenAI's JSON shape itself. So this dispatcher hands that one route to the
handler directly and passes every other request, and the lifespan, to the FastAPI app.
Every other HTTP response gets an `x-request-id` here (the client's, or a new one), as chat
completions get theirs from their handler, so any answer, errors included, can be quoted.
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable
from typing import Any

from starlette.requests import Request
from starlette.responses import Response

from router.api.browser_guard import browser_refusal
from router.api.errors import error_response
from router.api.request_ids import new_request_id, usable
from router.errors import SlorouterError
from router.logs import event

log = logging.getLogger(__name__)

CHAT_PATH = "/v1/chat/completions"
REQUEST_ID = b"x-request-id"

Handler = Callable[[Request], Awaitable[Response]]
ASGIApp = Callable[[Any, Any, Any], Awaitable[None]]


class FrontDoor:
    """An ASGI app: `POST /v1/chat/completions` → `chat`; anything else → `app`."""

    def __init__(self, app: ASGIApp, chat: Handler, *, keyless: bool = False) -> None:
        """`keyless`: no API keys are configured, so web pages are refused
        (`browser_guard`)."""
        self.app = app
        self._chat = chat
        self._keyless = keyless

    async def __call__(self, scope: Any, receive: Any, send: Any) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        if self._keyless and (refused := browser_refusal(scope["headers"])) is not None:
            await error_response(refused)(scope, receive, self._with_request_id(scope, send))
            return
        if scope["path"] != CHAT_PATH or scope["method"] != "POST":
            await self.app(scope, receive, self._with_request_id(scope, send))
            return
        try:
            response = await self._chat(Request(scope, receive, send))
        except Exception as exc:  # the handler maps its own errors: this is the last resort
            event(log, "unhandled_error", logging.ERROR, error=type(exc).__name__)
            response = error_response(SlorouterError("internal error", code="internal_error"))
        await response(scope, receive, send)

    def _with_request_id(self, scope: Any, send: Any) -> Any:
        given = next((value for name, value in scope["headers"] if name == REQUEST_ID), None)
        # The client's own id when the chat handler would adopt it too, else one made here.
        request_id = (given if given and usable(given.decode("latin-1"))
                      else new_request_id().encode())

        async def send_with_id(message: Any) -> None:
            if message["type"] == "http.response.start":
                headers = list(message.get("headers", ()))
                if not any(name.lower() == REQUEST_ID for name, _ in headers):
                    message = {**message, "headers": [*headers, (REQUEST_ID, request_id)]}
            await send(message)
        return send_with_id
