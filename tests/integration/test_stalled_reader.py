"""A client that stops reading a long stream, on real processes: the router cuts the stream
after the request's deadline (`STALL_GRACE_S` later) and lets go of the client's connection
too, instead of holding it (its socket, its unsent buffers) for as long as the client keeps it
open. Read over a raw socket, since a client library reads on its own."""

from __future__ import annotations

import contextlib
import json
import socket
import time
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler
from pathlib import Path
from typing import ClassVar
from urllib.parse import urlsplit

import httpx
import pytest

from bench.procstat import send_queue_bytes
from router.api.sse import STALL_GRACE_S
from router.service_protocol import SEND_TIMEOUT_S
from tests.support.fake_upstream import ThreadedUpstream, stub_router_config
from tests.support.services import Running, start_router

pytestmark = pytest.mark.integration

# Long enough for a first call through litellm to reach its first chunk on a slow, busy VM
# (at 500 ms, one CI run got the 504 at the head instead of the stream).
DEADLINE_MS = 1500
# Of about 4 KB each: far more than the sockets' buffers between the two ends, which took up to
# 17 MB here (at 20 MB the upstream sometimes wrote its whole answer before the router let go).
CHUNKS = 20000


class FloodingUpstream(BaseHTTPRequestHandler):
    """Streams `CHUNKS` content chunks as fast as its reader takes them, then `[DONE]`."""

    protocol_version = "HTTP/1.1"
    # The request's first message, per stream the router closed (its writes failed).
    closed: ClassVar[set[str]] = set()

    def do_POST(self) -> None:
        asked = json.loads(self.rfile.read(int(self.headers["content-length"])))
        content = asked["messages"][0]["content"]
        self.send_response(200)
        self.send_header("content-type", "text/event-stream")
        self.send_header("transfer-encoding", "chunked")
        self.end_headers()
        piece = {"id": "c", "object": "chat.completion.chunk", "created": 1, "model": "stub",
                 "choices": [{"index": 0, "delta": {"content": "x" * 4000},
                              "finish_reason": None}]}
        data = b"data: " + json.dumps(piece).encode() + b"\n\n"
        try:
            for _ in range(CHUNKS):
                self.wfile.write(b"%x\r\n%s\r\n" % (len(data), data))
            self.wfile.write(b"e\r\ndata: [DONE]\n\n\r\n0\r\n\r\n")
        except OSError:  # the router closed the connection: what it should do here
            FloodingUpstream.closed.add(content)

    def log_message(self, *_: object) -> None:
        pass


@pytest.fixture(scope="module")
def gateway(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Running, Path]]:
    upstream = ThreadedUpstream(FloodingUpstream)
    directory = tmp_path_factory.mktemp("router")
    running = start_router(directory, stub_router_config(upstream.base_url),
                           env={"STUB_KEY": "stub-key"}, extra_args=("--log-level", "debug"))
    yield running, directory / "router.log"
    running.stop()
    upstream.stop()


def _holds(pid: int, router_port: int, client_port: int) -> bool:
    """Whether process `pid` still has the socket of its end of the connection from
    `client_port` open (Linux's /proc: the socket's inode among its file descriptors; a socket
    it closed whose bytes the kernel still sends has no inode)."""
    inodes = set()
    for line in Path("/proc/net/tcp").read_text().splitlines()[1:]:
        fields = line.split()
        local, remote, inode = fields[1], fields[2], fields[9]
        if (int(local.split(":")[1], 16) == router_port
                and int(remote.split(":")[1], 16) == client_port and inode != "0"):
            inodes.add(f"socket:[{inode}]")
    fds = Path(f"/proc/{pid}/fd")
    return any(_link(fd) in inodes for fd in fds.iterdir())


def _link(path: Path) -> str:
    try:
        return str(path.readlink())
    except OSError:  # closed meanwhile
        return ""


@contextlib.contextmanager
def _stream_not_read(router: Running, content: str, model: str | None = None
                     ) -> Iterator[socket.socket]:
    """A raw connection (an 8 KB receive buffer) that asked `model` (default: `content`) for a
    stream of `content` with the request deadline `DEADLINE_MS`, and read its head only."""
    url = urlsplit(router.base_url)
    body = json.dumps({"model": model or content, "stream": True,
                       "messages": [{"role": "user", "content": content}]}).encode()
    with socket.socket() as sock:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 8192)  # before connecting
        sock.settimeout(10)
        sock.connect((url.hostname, url.port))
        sock.sendall(b"POST /v1/chat/completions HTTP/1.1\r\nhost: localhost\r\n"
                     b"content-type: application/json\r\nx-slorouter-timeout-ms: %d\r\n"
                     b"content-length: %d\r\n\r\n%s" % (DEADLINE_MS, len(body), body))
        assert sock.recv(512).startswith(b"HTTP/1.1 200")
        yield sock


@pytest.mark.parametrize("model", ["pt-stub", "ll-stub"])
def test_a_stream_whose_client_stopped_reading_lets_go_of_its_connection(
        gateway: tuple[Running, Path], model: str) -> None:
    """The client reads the head and then nothing while the upstream floods: the stream ends at
    the request's deadline (with an event, or cut once the grace has passed with its writes
    blocked), recorded once as `deadline_exceeded`, and the router lets go of the connection (a
    stream it cut: reset at once; one that ended with bytes unsent: reset at its send timeout).
    It used to close such connections gracefully, which waits for the unsent bytes to drain,
    that is for ever: the connection stayed open (and a SIGTERM's drain waited out its whole
    grace for it), with an error logged for a stream the router had cut on purpose."""
    router, log = gateway
    url = urlsplit(router.base_url)
    with _stream_not_read(router, model) as sock:
        sent_at = time.monotonic()
        port, pid = sock.getsockname()[1], router.proc.pid
        # the stream's end (at its deadline, or cut the grace after it). One that ended on its
        # own (through litellm it often does, its error event written) is closed at uvicorn's
        # keep-alive end (5 s), and reset once its unsent bytes have sat SEND_TIMEOUT_S untaken.
        limit = sent_at + DEADLINE_MS / 1000 + STALL_GRACE_S + 5 + SEND_TIMEOUT_S + 3
        while _holds(pid, url.port, port) and time.monotonic() < limit:
            time.sleep(0.05)
        assert not _holds(pid, url.port, port), "the router still holds the connection"
    deadline = time.monotonic() + 5
    finished: list[dict[str, object]] = []
    while not finished and time.monotonic() < deadline:
        time.sleep(0.1)
        finished = [entry for line in log.read_text().splitlines(keepends=True)
                    if '"request_finished"' in line and line.endswith("\n")  # written whole
                    and (entry := json.loads(line))["requested_model"] == model]
    assert [(f["status"], f["error_code"]) for f in finished] == [(504, "deadline_exceeded")]
    assert "without completing response" not in log.read_text()
    # ...and of the upstream's: through litellm it stayed open (the provider writing, and
    # billing, an answer nobody read) until the stream object was garbage-collected, minutes
    # later, since nothing closed litellm's stream when the relay let go of it.
    deadline = time.monotonic() + 5
    while model not in FloodingUpstream.closed and time.monotonic() < deadline:
        time.sleep(0.05)
    assert model in FloodingUpstream.closed, "the upstream's stream was never closed"
    # The client's doing, as a client that left: no failed request in any task's availability
    # (it fired the task's burn alert, and read as a provider timeout in the metrics).
    slo = httpx.get(f"{router.base_url}/v1/slo", timeout=10).json()
    bad = [(task["task"], sli["bad"]) for task in slo["tasks"] for window in task["windows"]
           for sli in window["slis"] if sli["sli"] == "availability" and sli["bad"]]
    assert not bad, bad
    metrics = httpx.get(f"{router.base_url}/metrics", timeout=10).text
    assert "ProviderTimeoutError" not in metrics


@pytest.mark.parametrize("model", ["pt-stub", "ll-stub"])
def test_a_client_that_stopped_reading_holds_a_bounded_send_queue(
        gateway: tuple[Running, Path], model: str) -> None:
    """What the kernel queues toward a client that reads nothing stays near the router's send
    buffer (`SEND_BUFFER_BYTES`, which Linux doubles), so the stream's writes wait soon: the
    kernel's autotuning let it grow to about 2 MB, some 10,000 chunks relayed (through litellm
    also kept) for nobody, ten such clients 30 s of CPU and 270 MB (the slow-consumer audit of
    2026-12-07)."""
    from router.service_protocol import SEND_BUFFER_BYTES

    router, _ = gateway
    url = urlsplit(router.base_url)
    with _stream_not_read(router, f"queue {model}", model) as sock:
        port, most = sock.getsockname()[1], 0
        until = time.monotonic() + DEADLINE_MS / 1000
        while time.monotonic() < until:
            most = max(most, send_queue_bytes(url.port, {port}))
            time.sleep(0.02)
    assert 0 < most <= 4 * SEND_BUFFER_BYTES, most
