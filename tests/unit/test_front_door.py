"""The ASGI front door: chat completions to their handler, the rest to the app, errors shaped."""

from __future__ import annotations

from typing import Any

import orjson
from starlette.requests import Request
from starlette.responses import Response

from router.api.front import FrontDoor


class Recorder:
    def __init__(self) -> None:
        self.messages: list[dict[str, Any]] = []

    async def __call__(self, message: dict[str, Any]) -> None:
        self.messages.append(message)


async def _receive() -> dict[str, Any]:
    return {"type": "http.request", "body": b"", "more_body": False}


def _scope(method: str, path: str) -> dict[str, Any]:
    return {"type": "http", "method": method, "path": path, "headers": [], "query_string": b""}


async def test_post_chat_goes_to_the_handler_and_the_rest_to_the_app() -> None:
    seen: list[str] = []

    async def chat(request: Request) -> Response:
        seen.append("chat")
        return Response(b"{}", media_type="application/json")

    async def app(scope: Any, receive: Any, send: Any) -> None:
        seen.append(f"app {scope['method']} {scope['path']}")
        await Response(b"ok")(scope, receive, send)

    door = FrontDoor(app, chat)
    await door(_scope("POST", "/v1/chat/completions"), _receive, Recorder())
    await door(_scope("GET", "/v1/chat/completions"), _receive, Recorder())
    await door(_scope("GET", "/v1/models"), _receive, Recorder())
    assert seen == ["chat", "app GET /v1/chat/completions", "app GET /v1/models"]


async def test_an_escaped_handler_error_is_a_500_in_openai_shape() -> None:
    async def chat(request: Request) -> Response:
        raise RuntimeError("bug")

    async def app(scope: Any, receive: Any, send: Any) -> None:
        raise AssertionError("not for the app")

    sent = Recorder()
    await FrontDoor(app, chat)(_scope("POST", "/v1/chat/completions"), _receive, sent)
    assert sent.messages[0]["status"] == 500
    error = orjson.loads(sent.messages[1]["body"])["error"]
    assert set(error) == {"message", "type", "param", "code"} and error["code"] == "internal_error"
