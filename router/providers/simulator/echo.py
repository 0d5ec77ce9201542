"""Failures that quote the request back, asked by a `<<fail:KIND>>` marker in the last user
message: what real providers do (`Invalid value for 'messages[0].content': '...'`, a 413 with
the payload, a content filter quoting the prompt, a malformed chunk), so that tests can check
that the router keeps such text out of its logs, spans and metrics.

KIND is an HTTP status (400, 413, 422, 429, 500, 503, ...): an error of the wire's shape whose
message quotes the last user message; `stream`: a 200 stream whose first event is an OpenAI
`{"error": ...}` quoting it; `chunk`: a 200 answer, streamed or whole, whose one tool call has
the message's text where OpenAI puts a `function` object (a chunk no client can read). The last
two are in OpenAI's shapes, whatever the wire. Any other KIND is ignored.
"""

from __future__ import annotations

import orjson
from aiohttp import web

from router.providers.simulator.request import SimRequest, asked_failure, last_user_text
from router.providers.simulator.wire import ErrorKind, Wire

_STREAMED = ("stream", "chunk")


def echo_failure(wire: Wire, sim: SimRequest) -> web.Response | None:
    """The failure the request's `<<fail:KIND>>` marker asks for, if any."""
    kind = asked_failure(sim)
    if kind is None or not ((kind.isdigit() and 400 <= int(kind) <= 599) or kind in _STREAMED):
        return None
    quoted = f"Invalid value for 'messages[-1].content': {last_user_text(sim)!r}"
    error = ErrorKind(int(kind) if kind.isdigit() else 400, "echoed_request", quoted)
    if kind.isdigit():
        return web.Response(status=error.status, body=wire.error(error),
                            content_type="application/json")
    if kind == "stream":
        return _sse(orjson.dumps({"error": {"message": quoted, "type": "invalid_request_error",
                                            "param": None, "code": error.code}}))
    call = {"index": 0, "id": "call_echo", "type": "function", "function": last_user_text(sim)}
    if not sim.stream:
        message = {"role": "assistant", "content": None, "tool_calls": [call]}
        return web.json_response({**_envelope(sim, "chat.completion"), "choices": [
            {"index": 0, "message": message, "finish_reason": "tool_calls"}]})
    return _sse(orjson.dumps({**_envelope(sim, "chat.completion.chunk"), "choices": [
        {"index": 0, "delta": {"role": "assistant", "tool_calls": [call]},
         "finish_reason": None}]}), b"data: [DONE]\n\n")


def _envelope(sim: SimRequest, kind: str) -> dict[str, object]:
    return {"id": "chatcmpl-echo", "object": kind, "created": 0, "model": sim.model}


def _sse(data: bytes, tail: bytes = b"") -> web.Response:
    return web.Response(body=b"data: " + data + b"\n\n" + tail, content_type="text/event-stream")
