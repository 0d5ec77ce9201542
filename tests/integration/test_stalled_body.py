"""A request body that stops arriving is answered within the request's timeout, not held forever.

The router as a real process on loopback, a raw socket as the client (no HTTP client lets one
send part of a body and stall). A client that declares a body and sends only part of it (a
broken uploader, or a slow-loris one) used to hold its handler and its connection for as long
as it kept the socket open, whatever `server.request_timeout_s` said: enough of them exhaust the
process's file descriptors for every tenant.
"""

from __future__ import annotations

import json
import socket
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.support.services import MINIMAL_CONFIG, Running, start_router

TIMEOUT_S = 1.0
BODY = json.dumps({"model": "m", "messages": [{"role": "user", "content": "hi"}]}).encode()


@pytest.fixture(scope="module")
def router(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Running]:
    directory: Path = tmp_path_factory.mktemp("stalled-body")
    config = MINIMAL_CONFIG + f"server: {{request_timeout_s: {TIMEOUT_S}}}\n"
    running = start_router(directory, config)
    yield running
    running.stop()


def stalled_post(router: Running, path: str, wait_s: float) -> tuple[bytes, float, bool]:
    """POST `path` declaring the whole body but sending only its first bytes; what arrived
    within `wait_s`, how long it took, and whether the router then closed the connection."""
    port = int(router.base_url.rsplit(":", 1)[1])
    with socket.create_connection(("127.0.0.1", port)) as sock:
        sock.settimeout(wait_s)
        head = (f"POST {path} HTTP/1.1\r\nhost: 127.0.0.1\r\ncontent-type: application/json\r\n"
                f"content-length: {len(BODY)}\r\n\r\n").encode()
        sock.sendall(head + BODY[:10])
        started = time.monotonic()
        received = b""
        closed = False
        try:
            while True:
                data = sock.recv(65536)
                if not data:
                    closed = True
                    break
                received += data
        except TimeoutError:
            pass
        return received, time.monotonic() - started, closed


@pytest.mark.parametrize("path", ["/v1/chat/completions", "/v1/route/explain", "/v1/feedback"])
def test_a_body_that_stops_arriving_is_a_408_within_the_request_timeout(
        router: Running, path: str) -> None:
    """The answer is a 408 in OpenAI's error shape (code `body_timeout`) about the request
    timeout after the head, and the connection, whose body never ended, is closed."""
    received, elapsed, closed = stalled_post(router, path, wait_s=10 * TIMEOUT_S)
    head, _, body = received.partition(b"\r\n\r\n")
    assert head.startswith(b"HTTP/1.1 408 "), received[:200]
    assert json.loads(body)["error"]["code"] == "body_timeout"
    assert elapsed < 5 * TIMEOUT_S
    assert closed
