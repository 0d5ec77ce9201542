"""The router writes each response's head in one write with its first body bytes
(router/head_with_body.py), so a client's first read holds both: one wake-up, not two, on its
way to the first token. Read over a raw socket: a client library would hide the segments."""

from __future__ import annotations

import json
import select
import socket
from urllib.parse import urlsplit

from tests.integration.conftest import API_KEY
from tests.support.services import Running


def _connect(gateway: Running) -> socket.socket:
    url = urlsplit(gateway.base_url)
    sock = socket.create_connection((url.hostname, url.port), timeout=10)
    sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    return sock


def _request(body: dict[str, object] | None, *, key: str | None = API_KEY,
             extra: str = "") -> bytes:
    raw = json.dumps(body).encode() if body is not None else b""
    auth = f"authorization: Bearer {key}\r\n" if key is not None else ""
    return (f"POST /v1/chat/completions HTTP/1.1\r\nhost: localhost\r\n{auth}"
            f"content-type: application/json\r\ncontent-length: {len(raw)}\r\n{extra}\r\n"
            ).encode() + raw


def _first_read(sock: socket.socket) -> bytes:
    """What one read gets as soon as anything has arrived (a second write, microseconds
    later, would not be in it)."""
    readable, _, _ = select.select([sock], [], [], 10)
    assert readable, "no answer within 10 s"
    return sock.recv(1 << 20)


def _chat(stream: bool) -> dict[str, object]:
    return {"model": "pt-fast", "stream": stream, "max_tokens": 8,
            "messages": [{"role": "user", "content": "Say hello."}]}


def _first_head_and_body(gateway: Running, request: bytes) -> tuple[bytes, bytes]:
    """The head and body bytes of the first read after sending `request` on a new connection."""
    with _connect(gateway) as sock:
        sock.sendall(request)
        first = _first_read(sock)
    head, _, body = first.partition(b"\r\n\r\n")
    return head, body


def test_a_streamed_answer_comes_with_its_head_in_one_read(gateway: Running) -> None:
    head, body = _first_head_and_body(gateway, _request(_chat(stream=True)))
    assert head.startswith(b"HTTP/1.1 200"), head
    assert b"text/event-stream" in head
    assert b"data: {" in body, f"the first read held the head alone: {head!r}"


def test_a_whole_answer_comes_with_its_head_in_one_read(gateway: Running) -> None:
    head, body = _first_head_and_body(gateway, _request(_chat(stream=False)))
    assert head.startswith(b"HTTP/1.1 200"), head
    length = next(int(line.split(b":")[1]) for line in head.split(b"\r\n")
                  if line.lower().startswith(b"content-length:"))
    assert len(body) == length and json.loads(body)["object"] == "chat.completion"


def test_an_error_answer_comes_with_its_head_in_one_read(gateway: Running) -> None:
    head, body = _first_head_and_body(gateway, _request(_chat(stream=False), key=None))
    assert head.startswith(b"HTTP/1.1 401"), head
    assert json.loads(body)["error"]["code"] == "missing_api_key"


def test_100_continue_is_not_held_back(gateway: Running) -> None:
    """A client that waits for `100 Continue` before its body gets it at once; the answer
    follows the body as usual."""
    request = _request(_chat(stream=False), extra="expect: 100-continue\r\n")
    head, _, body = request.partition(b"\r\n\r\n")
    with _connect(gateway) as sock:
        sock.sendall(head + b"\r\n\r\n")
        assert _first_read(sock).startswith(b"HTTP/1.1 100 Continue\r\n\r\n")
        sock.sendall(body)
        answer = _first_read(sock)
    assert answer.startswith(b"HTTP/1.1 200"), answer
    assert b'"chat.completion"' in answer


def _answers(sock: socket.socket, count: int) -> list[bytes]:
    """The heads of the next `count` responses on `sock` (bodies by their content-length; a
    response to HEAD has none), or as many as arrived within 5 s."""
    sock.settimeout(5)
    buffer, heads = b"", list[bytes]()
    to_head = [number == 0 for number in range(count)]  # only the first request is a HEAD
    try:
        while len(heads) < count:
            while b"\r\n\r\n" not in buffer:
                data = sock.recv(1 << 16)
                if not data:
                    return heads
                buffer += data
            head, _, buffer = buffer.partition(b"\r\n\r\n")
            length = 0 if to_head[len(heads)] else next(
                (int(line.split(b":")[1]) for line in head.split(b"\r\n")
                 if line.lower().startswith(b"content-length:")), 0)
            while len(buffer) < length:
                buffer += sock.recv(1 << 16)
            buffer = buffer[length:]
            heads.append(head)
    except TimeoutError:
        pass
    return heads


def test_a_head_request_is_answered_and_the_connection_stays_in_step(gateway: Running) -> None:
    """A response to HEAD has a head and no body, so uvicorn writes no body bytes, with which
    the head was held back: it was never sent while the connection stayed open (a monitor's
    `HEAD /healthz` hung until its own timeout), and the next request on the connection got
    the answer after it. Now the head goes out at once, and each request gets its own answer."""
    with _connect(gateway) as sock:
        sock.sendall(b"HEAD /healthz HTTP/1.1\r\nhost: localhost\r\n\r\n"
                     b"GET /healthz HTTP/1.1\r\nhost: localhost\r\nx-request-id: second\r\n\r\n")
        heads = _answers(sock, 2)
    assert len(heads) == 2, f"answers received: {heads!r}"
    assert all(head.startswith(b"HTTP/1.1 ") for head in heads), heads
    assert b"x-request-id: second" not in heads[0] and b"x-request-id: second" in heads[1]
