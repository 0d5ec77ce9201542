"""Slow and stalled clients on the real server stack (uvicorn on uvloop with `ServiceProtocol`,
a loopback socket driven by hand).

- A complete answer whose client stops reading: the router lets go of the connection once its
  unsent bytes have sat `SEND_TIMEOUT_S` untaken, and keeps serving a client that reads slowly
  for however long it takes. uvicorn's own graceful close waited for those bytes for ever.
- A request head that never comes whole (nothing sent, or part of a head, or a head dribbled a
  byte at a time): the connection is closed `HEAD_TIMEOUT_S` after it opened or after the
  head's first byte. uvicorn held it for ever.

The timeouts are shortened here (keep-alive 0.2 s, send and head timeouts 0.5 s); the large
answer is far larger than the kernel's buffers between the two ends, so its tail stays in the
event loop's buffer."""

from __future__ import annotations

import contextlib
import json
import socket
import time
from collections.abc import Iterator
from typing import Any

import pytest
import uvicorn

from router import service_protocol
from router.service_protocol import ServiceProtocol
from tests.support.asgi_server import served

pytestmark = pytest.mark.integration

ANSWER_BYTES = 24 * 2**20
SEND_TIMEOUT_S = 0.5
HEAD_TIMEOUT_S = 0.5
KEEP_ALIVE_S = 0.2
LINGER_S = 0.5


class CountedProtocol(ServiceProtocol):
    """`ServiceProtocol` that counts its send-timeout checks (so a test knows it ran one)."""

    checks = 0

    def _check_send(self, unsent_before: int) -> None:
        type(self).checks += 1
        super()._check_send(unsent_before)


async def answer(scope: dict[str, Any], receive: Any, send: Any) -> None:
    """`ANSWER_BYTES` for `/large`, two bytes for anything else."""
    assert scope["type"] == "http"
    body = b"x" * ANSWER_BYTES if scope["path"] == "/large" else b"ok"
    await send({"type": "http.response.start", "status": 200,
                "headers": [(b"content-length", str(len(body)).encode())]})
    await send({"type": "http.response.body", "body": body})


@pytest.fixture
def server(monkeypatch: pytest.MonkeyPatch) -> Iterator[tuple[uvicorn.Server, int]]:
    monkeypatch.setattr(service_protocol, "SEND_TIMEOUT_S", SEND_TIMEOUT_S)
    monkeypatch.setattr(service_protocol, "HEAD_TIMEOUT_S", HEAD_TIMEOUT_S)
    monkeypatch.setattr(service_protocol, "LINGER_S", LINGER_S)
    CountedProtocol.checks = 0
    with served(answer, CountedProtocol, timeout_keep_alive=KEEP_ALIVE_S) as (running, port):
        yield running, port


def _connect(port: int) -> socket.socket:
    sock = socket.socket()
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 8192)  # before connecting
    sock.settimeout(10)
    sock.connect(("127.0.0.1", port))
    return sock


def _ask(port: int) -> socket.socket:
    sock = _connect(port)
    sock.sendall(b"GET /large HTTP/1.1\r\nhost: localhost\r\n\r\n")
    return sock


def _read(sock: socket.socket, size: int) -> int:
    """Read up to `size` bytes, fewer at the end of the stream; return how many."""
    got = 0
    while got < size:
        chunk = sock.recv(min(size - got, 2**20))
        if not chunk:
            break
        got += len(chunk)
    return got


def test_a_client_that_stops_reading_a_complete_answer_is_let_go(
        server: tuple[uvicorn.Server, int]) -> None:
    running, port = server
    with _ask(port) as sock:
        assert sock.recv(512).startswith(b"HTTP/1.1 200")
        limit = time.monotonic() + KEEP_ALIVE_S + SEND_TIMEOUT_S + 5
        while running.server_state.connections and time.monotonic() < limit:
            time.sleep(0.05)
        assert not running.server_state.connections, "the server still holds the connection"
        assert CountedProtocol.checks == 1
        # what the kernel held when the connection was reset, then nothing more
        with pytest.raises(ConnectionResetError):
            _read(sock, ANSWER_BYTES)


def test_a_client_that_reads_slowly_gets_the_whole_answer(
        server: tuple[uvicorn.Server, int]) -> None:
    """It pauses for most of the send timeout between reads, and takes several send timeouts
    in all: each check finds the buffer shrunk since the last one and waits again."""
    _, port = server
    with _ask(port) as sock:
        head = b""
        while b"\r\n\r\n" not in head:
            head += sock.recv(1)
        received = 0
        while received < ANSWER_BYTES:
            time.sleep(SEND_TIMEOUT_S * 0.6)
            got = _read(sock, min(ANSWER_BYTES - received, ANSWER_BYTES // 8))
            assert got > 0, "the server closed the connection before the answer's end"
            received += got
        assert received == ANSWER_BYTES
        assert CountedProtocol.checks >= 2


def _closed_by_server(sock: socket.socket) -> bool:
    """Whether the server closed the connection (read until then, 5 s at most)."""
    sock.settimeout(5)
    try:
        while chunk := sock.recv(4096):
            assert not chunk.startswith(b"HTTP/1.1 200"), "answered a request never sent whole"
    except TimeoutError:
        return False
    except ConnectionResetError:
        return True
    return True


def test_a_connection_that_sends_nothing_is_closed(server: tuple[uvicorn.Server, int]) -> None:
    running, port = server
    with _connect(port) as sock:
        assert _closed_by_server(sock)
    assert not running.server_state.connections


@pytest.mark.parametrize("dribble_s", [None, HEAD_TIMEOUT_S / 5])
def test_a_head_that_never_comes_whole_is_closed(server: tuple[uvicorn.Server, int],
                                                 dribble_s: float | None) -> None:
    """Part of a head and then nothing; or a head sent a byte every tenth of the timeout, which
    would never end (each byte in time, the head as a whole not)."""
    _, port = server
    head = b"GET / HTTP/1.1\r\nhost: localhost\r\nx-slow: " + b"a" * 200
    with _connect(port) as sock:
        if dribble_s is None:
            sock.sendall(head)
        else:
            try:
                for byte in head:
                    sock.sendall(bytes([byte]))
                    time.sleep(dribble_s)
            except (BrokenPipeError, ConnectionResetError):
                return  # closed while dribbling: what should happen
            pytest.fail("the server read a dribbled head for ever")
        assert _closed_by_server(sock)


def test_heads_in_pieces_and_idle_keep_alive_are_served(server: tuple[uvicorn.Server, int]
                                                        ) -> None:
    """A head split over two packets is answered; so is a second request on the connection
    after it was idle for longer than the head timeout (keep-alive governs that idleness: set
    longer here), its head again in pieces."""
    running, port = server
    running.config.timeout_keep_alive = 5
    with _connect(port) as sock:
        for pause in (0.1, HEAD_TIMEOUT_S * 2):
            time.sleep(pause)
            sock.sendall(b"GET / HTTP/1.1\r\nhost: te")
            time.sleep(HEAD_TIMEOUT_S / 5)
            sock.sendall(b"st\r\n\r\n")
            answer = b""
            while not answer.endswith(b"ok"):
                answer += sock.recv(4096)
            assert answer.startswith(b"HTTP/1.1 200")


@pytest.mark.parametrize("head", [
    b"GET / HTTP/1.1\r\nhost: localhost\r\nx-big: " + b"a" * (2 * 2**20) + b"\r\n\r\n",
    b"GET / HTTP/1.1\r\nhost: localhost\r\n" + b"x-h: v\r\n" * 100_000 + b"\r\n",
], ids=["one-huge-header", "many-headers"])
def test_a_head_over_the_bound_is_a_431_in_openais_shape(server: tuple[uvicorn.Server, int],
                                                         head: bytes) -> None:
    """uvicorn read a head of any size, and httptools builds a header value by repeated
    concatenation: a 78 MB header held the event loop for seconds, every request waiting."""
    running, port = server
    with _connect(port) as sock:
        with contextlib.suppress(BrokenPipeError, ConnectionResetError):
            sock.sendall(head)  # refused before it was all sent, maybe
        answer = b""
        with contextlib.suppress(ConnectionResetError):
            while chunk := sock.recv(65536):
                answer += chunk
    assert answer.startswith(b"HTTP/1.1 431 ")
    error = json.loads(answer.partition(b"\r\n\r\n")[2])["error"]
    assert error["code"] == "request_header_too_large"
    assert str(service_protocol.MAX_HEAD_BYTES) in error["message"]
    limit = time.monotonic() + 5
    while running.server_state.connections and time.monotonic() < limit:
        time.sleep(0.05)
    assert not running.server_state.connections


def test_a_head_just_under_the_bound_is_served(server: tuple[uvicorn.Server, int]) -> None:
    _, port = server
    filler = b"a" * (service_protocol.MAX_HEAD_BYTES - 200)
    with _connect(port) as sock:
        sock.sendall(b"GET / HTTP/1.1\r\nhost: localhost\r\nx-big: " + filler + b"\r\n\r\n")
        answer = b""
        while not answer.endswith(b"ok"):
            answer += sock.recv(4096)
    assert answer.startswith(b"HTTP/1.1 200")


@pytest.mark.parametrize("finishes", [False, True])
def test_a_body_its_answer_did_not_wait_for_holds_the_connection_no_longer(
        server: tuple[uvicorn.Server, int], finishes: bool) -> None:
    """Answered before its body was read (as a 401 is), a client that sends one more byte and
    then nothing was held for ever (uvicorn cancels its keep-alive timer on every byte, and
    nothing armed it again): the body may go on arriving for the linger time, then the
    connection closes; a body that ends in time leaves it to the keep-alive timeout."""
    running, port = server
    body = b"x" * 1000
    with _connect(port) as sock:
        sock.sendall(b"POST / HTTP/1.1\r\nhost: localhost\r\ncontent-length: 1000\r\n\r\n")
        answer = b""
        while not answer.endswith(b"ok"):
            answer += sock.recv(4096)
        assert answer.startswith(b"HTTP/1.1 200")
        sock.sendall(body if finishes else body[:1])
        started = time.monotonic()
        assert _closed_by_server(sock)
        waited = time.monotonic() - started
    assert waited < (KEEP_ALIVE_S if finishes else LINGER_S) + 2
    limit = time.monotonic() + 5
    while running.server_state.connections and time.monotonic() < limit:
        time.sleep(0.05)
    assert not running.server_state.connections
