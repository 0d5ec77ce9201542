"""Answers to requests that no route serves, from the HTTP errors Starlette's router raises.

    unknown path (a trailing slash too)  404 `unknown_url`, "Invalid URL (POST /v1/x/)", as
                                         OpenAI words it; never a redirect: a client that
                                         follows a 307 sends its POST, key and body again
    known path, OPTIONS                  204 with `Allow` (no CORS headers: the service sets none)
    known path, another wrong method     405 `http_error` with `Allow` (RFC 9110 requires it)

`Allow` is the route's own method list (Starlette's, with HEAD beside GET) plus OPTIONS. None
of these answers runs a handler, so none needs the caller's key. Chat completions never come
here: the front door hands `POST /v1/chat/completions` to its handler directly.
"""

from __future__ import annotations

from starlette.exceptions import HTTPException
from starlette.requests import Request
from starlette.responses import Response

from router.api.errors import error_response
from router.errors import NotFoundError, RequestError

MAX_PATH_CHARS = 200  # of the path quoted in an unknown URL's message


def unknown_url(method: str, path: str) -> NotFoundError:
    """OpenAI's answer to a URL it does not serve, e.g. `Invalid URL (POST /v1/chat/x)`."""
    return NotFoundError(f"Invalid URL ({_shown(f'{method} {path}')})", code="unknown_url")


async def http_error(request: Request, exc: Exception) -> Response:
    """The exception handler for Starlette's `HTTPException` (routing's 404 and 405)."""
    status = exc.status_code if isinstance(exc, HTTPException) else 500
    if status == 404:
        return error_response(unknown_url(request.method, request.url.path))
    headers = dict(exc.headers) if isinstance(exc, HTTPException) and exc.headers else {}
    message = f"{status}: {getattr(exc, 'detail', '')}"
    if status == 405:
        allow = headers["Allow"] = _with_options(headers.get("Allow", ""))
        if request.method == "OPTIONS":
            return Response(status_code=204, headers=headers)
        message = f"{request.method} is not allowed on {_shown(request.url.path)}: use {allow}"
    err = RequestError(message, code="http_error")
    err.status_code = status
    return error_response(err, headers)


def _shown(text: str) -> str:
    return text if len(text) <= MAX_PATH_CHARS else text[:MAX_PATH_CHARS] + "..."


def _with_options(allow: str) -> str:
    methods = {method.strip() for method in allow.split(",") if method.strip()}
    return ", ".join(sorted(methods | {"OPTIONS"}))
