"""A request asking to upgrade its connection (`Connection: upgrade`, `Upgrade: h2c`) is served as
the HTTP/1.1 request it also is, body included, and nothing after it is read as anything else.

The fuzzing audit of 2026-12-06: such a request reached the app without its body (`curl --http2
http://...` asks for h2c on every request: a 400 `invalid_json`), and a body that came in a later
segment was parsed as a request of its own: one holding `GET /v1/models` got a second answer on
the connection (request smuggling); bytes in the same segment were dropped, with a request
pipelined after them.
"""

from __future__ import annotations

import contextlib
import json
import re
import socket
import time
from collections.abc import Iterator
from typing import Any

import pytest

from router.service_protocol import ServiceProtocol
from router.upgrade_ignored import head_without_upgrade
from tests.support.asgi_server import served

pytestmark = pytest.mark.integration

UPGRADE = (b"Connection: Upgrade, HTTP2-Settings\r\nUpgrade: h2c\r\n"
           b"HTTP2-Settings: AAMAAABkAAQCAAAAAAIAAAAA\r\n")


async def echo(scope: dict[str, Any], receive: Any, send: Any) -> None:
    """The request's method, path, body and header names, as JSON."""
    body = b""
    while True:
        message = await receive()
        body += message.get("body", b"")
        if not message.get("more_body"):
            break
    answer = json.dumps({"method": scope["method"], "path": scope["path"],
                         "body": body.decode(),
                         "headers": sorted(n.decode() for n, _ in scope["headers"])}).encode()
    await send({"type": "http.response.start", "status": 200,
                "headers": [(b"content-length", str(len(answer)).encode())]})
    await send({"type": "http.response.body", "body": answer})


@pytest.fixture(scope="module")
def port() -> Iterator[int]:
    with served(echo, ServiceProtocol) as (_, chosen):
        yield chosen


def _answers(sock: socket.socket, quiet_s: float = 0.5) -> list[dict[str, Any]]:
    """Every answer read until the connection has been quiet for `quiet_s`."""
    sock.settimeout(quiet_s)
    data = b""
    try:
        while chunk := sock.recv(65536):
            data += chunk
    except TimeoutError:
        pass
    answers = []
    while data:
        head, _, rest = data.partition(b"\r\n\r\n")
        length = next(int(line.split(b":")[1]) for line in head.split(b"\r\n")
                      if line.lower().startswith(b"content-length:"))
        answers.append({"status": int(head.split(b" ")[1]), **json.loads(rest[:length])})
        data = rest[length:]
    return answers


def _post(body: bytes) -> bytes:
    return (b"POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
            + UPGRADE + b"Content-Length: " + str(len(body)).encode() + b"\r\n\r\n")


def test_the_body_of_a_request_asking_for_h2c_is_read(port: int) -> None:
    body = b'{"model": "auto", "messages": []}'
    with socket.create_connection(("127.0.0.1", port)) as sock:
        sock.sendall(_post(body) + body + b"GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n")
        answers = _answers(sock)
    assert [(a["status"], a["method"], a["path"]) for a in answers] == [
        (200, "POST", "/v1/chat/completions"), (200, "GET", "/healthz")]
    assert answers[0]["body"] == body.decode()
    assert not {"upgrade", "http2-settings"} & set(answers[0]["headers"])


def test_a_body_arriving_later_is_a_body_not_a_request(port: int) -> None:
    smuggled = b"GET /v1/models HTTP/1.1\r\nHost: x\r\n\r\n"
    with socket.create_connection(("127.0.0.1", port)) as sock:
        sock.sendall(_post(smuggled))
        time.sleep(0.3)
        sock.sendall(smuggled)
        answers = _answers(sock)
    assert len(answers) == 1, answers
    assert answers[0]["path"] == "/v1/chat/completions" and answers[0]["body"] == smuggled.decode()


def test_a_websocket_handshake_is_an_ordinary_request(port: int) -> None:
    with socket.create_connection(("127.0.0.1", port)) as sock:
        sock.sendall(b"GET /v1/chat/completions HTTP/1.1\r\nHost: x\r\nConnection: Upgrade\r\n"
                     b"Upgrade: websocket\r\nSec-WebSocket-Version: 13\r\n"
                     b"Sec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\n\r\n")
        answers = _answers(sock)
    assert [(a["status"], a["method"]) for a in answers] == [(200, "GET")]
    assert "upgrade" not in answers[0]["headers"]


def test_the_rebuilt_head_keeps_the_other_connection_options() -> None:
    head = head_without_upgrade(b"POST", b"/v1/x?a=1", "1.1",
                                [(b"host", b"x"), (b"connection", b"keep-alive, Upgrade"),
                                 (b"upgrade", b"h2c"), (b"content-length", b"2")])
    assert head == (b"POST /v1/x?a=1 HTTP/1.1\r\nhost: x\r\nconnection: keep-alive\r\n"
                    b"content-length: 2\r\n\r\n")


def _reply(sock: socket.socket) -> bytes:
    sock.settimeout(5)
    data = b""
    while chunk := sock.recv(65536):  # the server closes the connection
        data += chunk
    return data


@pytest.mark.parametrize("target", [b"example.com:443", b"/healthz", b"http://x/healthz"])
def test_a_connect_is_refused_and_nothing_after_it_is_read(port: int, target: bytes) -> None:
    """The parser takes a CONNECT for an upgrade: parsed again, it upgraded again, without end
    (a RecursionError, an empty reply, the loop held ~0.25 s each: the re-audit of 2026-12-06),
    and a CONNECT with a path reached the app while a body sent after it was parsed as a request
    of its own. Every CONNECT is a 400 and the connection closes."""
    with socket.create_connection(("127.0.0.1", port)) as sock:
        sock.sendall(b"CONNECT " + target + b" HTTP/1.1\r\nHost: x\r\nContent-Length: 38\r\n\r\n")
        time.sleep(0.2)
        with contextlib.suppress(OSError):
            sock.sendall(b"GET /v1/models HTTP/1.1\r\nHost: x\r\n\r\n")
        reply = _reply(sock)
    status_lines = re.findall(rb"(?:^|\r\n)HTTP/1\.1 \d{3} ", reply)
    assert reply.startswith(b"HTTP/1.1 400") and len(status_lines) == 1, reply
    with socket.create_connection(("127.0.0.1", port)) as sock:
        sock.sendall(b"GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n")
        assert [a["path"] for a in _answers(sock)] == ["/healthz"]


def test_hundreds_of_pipelined_upgrade_requests_are_each_answered(port: int) -> None:
    """Parsed again by recursion, 500 of them in one read (30 KB) ended in a RecursionError and
    an empty reply, the loop held ~0.28 s (the second re-audit)."""
    count = 1000
    request = b"GET /healthz HTTP/1.1\r\nHost: a\r\nConnection: upgrade\r\nUpgrade: h2c\r\n\r\n"
    with socket.create_connection(("127.0.0.1", port)) as sock:
        sock.sendall(request * count)
        answers = _answers(sock, quiet_s=2.0)
    assert len(answers) == count and {a["path"] for a in answers} == {"/healthz"}


