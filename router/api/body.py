"""Reading a chat request: its headers as a dict, its body under the size limit, JSON, schema.

Each problem is a `RequestError` (400), `RequestTimeoutError` (408: the body stopped arriving),
`PayloadTooLargeError` (413) or `UnsupportedMediaTypeError` (415: a compressed body), which the
handler turns into OpenAI's error JSON; nothing of the body is echoed but a field's path,
written as OpenAI writes it (`messages[0].content`), in `param`.

A body nested deeper than `MAX_JSON_DEPTH` is refused as soon as it is parsed: orjson reads up
to 1024 levels but writes at most 255, so a deeper body would fail only later, when it is
forwarded (a 5xx charged to the deployment's circuit breaker).
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Any, Literal

import orjson
from pydantic import ValidationError
from pydantic_core import ErrorDetails
from starlette.requests import Request

from router.api.errors import ClientGone
from router.api.schemas import ChatCompletionRequest
from router.errors import (
    AuthenticationError,
    PayloadTooLargeError,
    RequestError,
    RequestTimeoutError,
    UnsupportedMediaTypeError,
)
from router.execution import late_timers

# Levels of objects and arrays (the body itself is level 1). Real requests, JSON-schema tool
# parameters included, stay far below; orjson cannot serialize beyond 255.
MAX_JSON_DEPTH = 128
# Objects and arrays in one body. Validating a body costs about 7 us per message on the event
# loop, whose every request waits meanwhile: 120,000 empty messages (4 MB) held it for 0.8 s.
# A long agent conversation with its tools' schemas has a few thousand.
MAX_JSON_CONTAINERS = 20_000

_INSTANCE = re.compile(r" or instance of \w+")  # pydantic's wording names our classes
_PYDANTIC_MISSING = "Field required"  # its message for a missing field (ours say why it is)


async def read_json(request: Request, max_bytes: int, time_limit_s: float,
                    headers: Mapping[str, str] | None = None,
                    read: Callable[[int], None] | None = None) -> dict[str, Any]:
    """The body as a JSON object, if all of it arrives within `time_limit_s` (the request's
    timeout: uvicorn bounds no body's arrival, so a client that declares a body and stops
    sending it would hold its handler and connection for as long as it kept them open).
    `headers`: the request's, when the caller has read them already (`received_headers`),
    else Starlette's. `read` is told the body's size once all of it has arrived, before it is
    parsed (and may refuse it by raising)."""
    headers = headers if headers is not None else request.headers
    encoding = headers.get("content-encoding")
    if encoding is not None and encoding.strip().lower() not in ("", "identity"):
        # Not decompressed: read as JSON it would be a puzzling parse error (and a decompressed
        # size limit would be one more thing to get right). OpenAI's SDKs send bodies plain.
        raise UnsupportedMediaTypeError(
            f"request bodies must not be compressed (content-encoding: {encoding.strip()[:40]})",
            code="unsupported_content_encoding")
    declared = headers.get("content-length")
    if declared is not None and declared.isdigit() and int(declared) > max_bytes:
        raise PayloadTooLargeError(f"request body over the {max_bytes}-byte limit",
                                   code="payload_too_large")
    try:
        async with late_timers.timeout(time_limit_s):
            body = await _read_body(request, max_bytes)
    except TimeoutError:
        raise RequestTimeoutError(
            f"the request body did not arrive within {time_limit_s:.3g} s", code="body_timeout"
        ) from None
    if read is not None:
        read(len(body))
    return parse_json_object(body)


async def _read_body(request: Request, max_bytes: int) -> bytearray:
    body = bytearray()
    receive = request.receive  # read as ASGI messages: no async generator per request
    more = True
    while more:
        message = await receive()
        if message["type"] == "http.disconnect":  # the client left while sending it
            raise ClientGone()
        body += message.get("body", b"")
        if len(body) > max_bytes:
            raise PayloadTooLargeError(f"request body over the {max_bytes}-byte limit",
                                       code="payload_too_large")
        more = message.get("more_body", False)
    return body


def parse_json_object(body: bytes | bytearray) -> dict[str, Any]:
    """`body` as a JSON object, or the `RequestError` that says why not (the HTTP endpoints'
    and `slorouter explain`'s one reading)."""
    try:
        parsed = orjson.loads(body)
    except orjson.JSONDecodeError as exc:
        if exc.msg == "depth limit exceeded":  # orjson stops reading at 1024 levels
            raise _too_deep() from None
        # orjson calls bytes that are not UTF-8 "str is not valid UTF-8: surrogates not allowed",
        # at position 0: the position is the first byte that is not
        problem, at = exc.msg, exc.pos
        if problem.startswith("str is not valid UTF-8"):
            problem, at = "the body is not UTF-8 text", _first_non_utf8(body)
        raise RequestError(f"could not parse the JSON body: {problem} at position {at}",
                           code="invalid_json") from None
    if not isinstance(parsed, dict):
        raise RequestError("the JSON body must be an object", code="invalid_json")
    past = containers_past(parsed, MAX_JSON_DEPTH, MAX_JSON_CONTAINERS)
    if past == "depth":
        raise _too_deep()
    if past == "count":
        raise RequestError(f"the JSON body holds more than {MAX_JSON_CONTAINERS} objects and "
                           "arrays (messages, content parts, tools, ...)",
                           code="too_many_elements")
    return parsed


def _too_deep() -> RequestError:
    return RequestError(f"the JSON body is nested deeper than {MAX_JSON_DEPTH} levels",
                        code="too_deeply_nested")


def too_deep(value: object, limit: int) -> bool:
    """Whether `value` (parsed JSON) nests objects and arrays more than `limit` levels deep."""
    return containers_past(value, limit, None) == "depth"


def containers_past(value: object, depth_limit: int,
                    count_limit: int | None) -> Literal["depth", "count"] | None:
    """Which limit `value` (parsed JSON) is past, if any: more than `depth_limit` levels of
    objects and arrays, or more than `count_limit` of them in all.

    Iterative, one level at a time, looking only at containers: a chat body has a few dozen
    of them, however long its strings."""
    level: list[Any] = [value] if type(value) in (dict, list) else []
    depth, count = 0, len(level)
    while level:
        depth += 1
        if depth > depth_limit:
            return "depth"
        below: list[Any] = []
        for node in level:
            for child in node.values() if type(node) is dict else node:
                if type(child) is dict or type(child) is list:
                    below.append(child)
        count += len(below)
        if count_limit is not None and count > count_limit:
            return "count"
        level = below
    return None


def header_values(raw_headers: Iterable[tuple[bytes, bytes]], name: bytes) -> list[bytes]:
    """Every value of the header `name` (lower case, as ASGI gives names) in the raw list."""
    return [value for found, value in raw_headers if found == name]


def _first_non_utf8(body: bytes | bytearray) -> int:
    """The offset of the first byte of `body` that is not (part of) UTF-8 text."""
    try:
        bytes(body).decode("utf-8")
    except UnicodeDecodeError as exc:
        return exc.start
    return 0


def authorization_header(raw_headers: Iterable[tuple[bytes, bytes]]) -> str | None:
    """The request's `Authorization` value, or None; a 401 when it came more than once: the
    first one was taken, and a proxy in front that reads the last would judge the request by
    another key."""
    found = header_values(raw_headers, b"authorization")
    if len(found) > 1:
        raise AuthenticationError("Authorization was sent more than once: send one 'Bearer "
                                  "<key>'", code="invalid_api_key")
    return found[0].decode("latin-1") if found else None


def received_headers(request: Request) -> dict[str, str]:
    """The request's headers as a plain dict (lower-case names, `header_text` values; the first
    of repeated ones wins, but repeated `Cache-Control` lines are one list, RFC 9110 §5.3): a
    request reads a dozen of them, and each read of Starlette's `Headers` scans the list."""
    raw = request.scope["headers"]
    headers = {name.decode("latin-1"): header_text(value) for name, value in reversed(raw)}
    if "cache-control" in headers:
        # A proxy's own line before the client's `no-store` must not cancel it.
        lines = [header_text(value) for name, value in raw if name == b"cache-control"]
        headers["cache-control"] = ", ".join(lines)
    return headers


def header_text(value: bytes) -> str:
    """A header value as text: UTF-8 when it is (clients send a session id or a hint in Persian
    as UTF-8, the same text they would put in `metadata`), else Latin-1 (HTTP's own reading of
    bytes beyond ASCII)."""
    try:
        return value.decode("utf-8")
    except UnicodeDecodeError:
        return value.decode("latin-1")


def parse_chat(raw: dict[str, Any]) -> ChatCompletionRequest:
    try:
        return ChatCompletionRequest.model_validate(raw)
    except ValidationError as exc:
        raise validation_error(exc, raw) from None


def validation_error(exc: ValidationError, raw: object) -> RequestError:
    """One `RequestError` for pydantic's errors: the first field's most specific problem.

    A union field (`content`: string or list of parts) fails once per branch; the deepest path
    is the branch the client meant (a list with a bad part), and branches failing at the same
    path are named together (`Input should be a valid string or a valid list`)."""
    errors = exc.errors(include_url=False, include_input=False)
    params = [openai_param(error, raw) for error in errors]
    top = errors[0]["loc"][:1]
    candidates = [i for i, error in enumerate(errors) if error["loc"][:1] == top]
    chosen = max(candidates, key=lambda i: _depth(params[i]))
    param = params[chosen]
    messages = list(dict.fromkeys(_INSTANCE.sub("", errors[i]["msg"])
                                  for i in candidates if params[i] == param))
    message = messages[0] + "".join(
        " or " + m.removeprefix("Input should be ") for m in messages[1:])
    others = len({p for p in params if p != param and not _within(param, p)})
    more = f" (and {others} more)" if others else ""
    code = _code(errors[chosen]["type"])
    if code == "missing_required_parameter":  # worded as OpenAI words it
        why = "" if message == _PYDANTIC_MISSING else f" ({message})"
        return RequestError(f"Missing required parameter: '{param}'{why}{more}", param=param,
                            code=code)
    return RequestError(f"invalid request: {param}: {message}{more}", param=param, code=code)


def openai_param(error: ErrorDetails, raw: object) -> str | None:
    """The error's location as OpenAI writes it: `messages[0].content[1].type`.

    pydantic's location also names union branches (`str`, `list[ContentPart]`) and validator
    wrappers and tags; walking the client's JSON alongside keeps only the steps that exist in it
    (plus the last one of a missing field, and the field a schema's error context names)."""
    loc: Sequence[int | str] = error["loc"]
    if loc and loc[-1] == "[key]":  # a bad key: the mapping is the param, not the key (any size)
        loc = loc[:-2]
    loc = (*loc, *error.get("ctx", {}).get("param_at", ()))  # a list's check names an item
    node = raw
    path = ""
    for position, step in enumerate(loc):
        if isinstance(step, int) and isinstance(node, list) and 0 <= step < len(node):
            path, node = f"{path}[{step}]", node[step]
        elif isinstance(step, str) and isinstance(node, dict) and step in node:
            path, node = f"{path}.{step}" if path else step, node[step]
        elif (position == len(loc) - 1 and error["type"] == "missing"
              and isinstance(step, str) and isinstance(node, dict)):
            path = f"{path}.{step}" if path else step
    field = error.get("ctx", {}).get("param_field")
    if isinstance(field, str) and isinstance(node, dict):
        path = f"{path}.{field}" if path else field
    return path or None


def _within(param: str | None, ancestor: str | None) -> bool:
    """Whether `param` lies inside `ancestor` (another union branch of the same field)."""
    return param is not None and (ancestor is None or param.startswith((f"{ancestor}.",
                                                                        f"{ancestor}[")))


def _depth(param: str | None) -> int:
    return 0 if param is None else param.count(".") + param.count("[")


def _code(error_type: str) -> str:
    if error_type == "missing":
        return "missing_required_parameter"
    if error_type.endswith("_type"):
        return "invalid_type"
    return "invalid_value"
