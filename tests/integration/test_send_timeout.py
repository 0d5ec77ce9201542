"""A complete answer whose client stops reading, on the real server stack (uvicorn on uvloop
with `ServiceProtocol`, a loopback socket read by hand): the router lets go of the connection
once its unsent bytes have sat `SEND_TIMEOUT_S` untaken, and keeps serving a client that reads
slowly for however long it takes. uvicorn's own graceful close waited for those bytes for ever.

The timeouts are shortened here (keep-alive 0.2 s, send timeout 0.5 s); the answer is far larger
than the kernel's buffers between the two ends, so its tail stays in the event loop's buffer."""

from __future__ import annotations

import socket
import threading
import time
from collections.abc import Iterator
from typing import Any

import pytest
import uvicorn

from router import service_protocol
from router.service_protocol import ServiceProtocol
from tests.support.procs import free_port

pytestmark = pytest.mark.integration

ANSWER_BYTES = 24 * 2**20
SEND_TIMEOUT_S = 0.5
KEEP_ALIVE_S = 0.2


class CountedProtocol(ServiceProtocol):
    """`ServiceProtocol` that counts its send-timeout checks (so a test knows it ran one)."""

    checks = 0

    def _check_send(self, unsent_before: int) -> None:
        type(self).checks += 1
        super()._check_send(unsent_before)


async def large_answer(scope: dict[str, Any], receive: Any, send: Any) -> None:
    assert scope["type"] == "http"
    await send({"type": "http.response.start", "status": 200,
                "headers": [(b"content-length", str(ANSWER_BYTES).encode())]})
    await send({"type": "http.response.body", "body": b"x" * ANSWER_BYTES})


@pytest.fixture
def server(monkeypatch: pytest.MonkeyPatch) -> Iterator[tuple[uvicorn.Server, int]]:
    monkeypatch.setattr(service_protocol, "SEND_TIMEOUT_S", SEND_TIMEOUT_S)
    CountedProtocol.checks = 0
    port = free_port()
    config = uvicorn.Config(large_answer, host="127.0.0.1", port=port, loop="uvloop",
                            http=CountedProtocol, lifespan="off", access_log=False,
                            log_config=None, timeout_keep_alive=KEEP_ALIVE_S)  # type: ignore[arg-type]
    running = uvicorn.Server(config)
    thread = threading.Thread(target=running.run, daemon=True)
    thread.start()
    deadline = time.monotonic() + 10
    while not running.started and time.monotonic() < deadline:
        time.sleep(0.01)
    assert running.started
    yield running, port
    running.should_exit = True
    thread.join(10)


def _ask(port: int) -> socket.socket:
    sock = socket.socket()
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 8192)  # before connecting
    sock.settimeout(10)
    sock.connect(("127.0.0.1", port))
    sock.sendall(b"GET / HTTP/1.1\r\nhost: test\r\n\r\n")
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
