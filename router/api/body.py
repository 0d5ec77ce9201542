"""Reading a chat request: its headers as a dict, its body under the size limit, JSON, schema.

Each problem is a `RequestError` (400) or `PayloadTooLargeError` (413), which the handler turns
into OpenAI's error JSON; nothing of the body is echoed but a field's path.
"""

from __future__ import annotations

from typing import Any

import orjson
from pydantic import ValidationError
from starlette.requests import Request

from router.api.schemas import ChatCompletionRequest
from router.errors import PayloadTooLargeError, RequestError


async def read_json(request: Request, max_bytes: int) -> dict[str, Any]:
    declared = request.headers.get("content-length")
    if declared is not None and declared.isdigit() and int(declared) > max_bytes:
        raise PayloadTooLargeError(f"request body over the {max_bytes}-byte limit",
                                   code="payload_too_large")
    body = bytearray()
    async for part in request.stream():
        body += part
        if len(body) > max_bytes:
            raise PayloadTooLargeError(f"request body over the {max_bytes}-byte limit",
                                       code="payload_too_large")
    try:
        parsed = orjson.loads(body)
    except orjson.JSONDecodeError as exc:
        raise RequestError(f"could not parse the JSON body: {exc.msg} at position {exc.pos}",
                           code="invalid_json") from None
    if not isinstance(parsed, dict):
        raise RequestError("the JSON body must be an object", code="invalid_json")
    return parsed


def received_headers(request: Request) -> dict[str, str]:
    """The request's headers as a plain dict (lower-case names; the first of repeated ones wins):
    a request reads a dozen of them, and each read of Starlette's `Headers` scans the list."""
    return {name.decode("latin-1"): value.decode("latin-1")
            for name, value in reversed(request.scope["headers"])}


def parse_chat(raw: dict[str, Any]) -> ChatCompletionRequest:
    try:
        return ChatCompletionRequest.model_validate(raw)
    except ValidationError as exc:
        first = exc.errors()[0]
        param = ".".join(str(p) for p in first["loc"]) or None
        more = f" (and {exc.error_count() - 1} more)" if exc.error_count() > 1 else ""
        raise RequestError(f"invalid request: {param}: {first['msg']}{more}", param=param,
                           code="invalid_value") from None
