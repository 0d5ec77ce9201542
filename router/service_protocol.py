"""uvicorn's HTTP protocol as `slorouter serve` runs it: the head written with the first body
bytes (`HeadWithBodyProtocol`), and a connection whose client stopped reading, or never finished
sending a request's head, let go of rather than held for as long as the client keeps it open.

uvicorn bounds no request head's arrival: a connection that sends nothing, or part of a head and
then nothing (a broken client, or a slow-loris one), was held for ever, and enough of them take
every file descriptor the process has, for every tenant. A head must now be whole
`HEAD_TIMEOUT_S` after the connection opened or after its first byte came (as nginx's
`client_header_timeout`; an idle keep-alive connection between requests is uvicorn's keep-alive
timeout's, and a body that stops arriving is the app's, `read_json`'s 408): else the connection
is closed.

uvicorn closes a connection gracefully: the close waits until every byte still in the event
loop's write buffer has gone to the kernel, which for a client that reads nothing is never. The
connection, its socket and its buffers stayed for as long as the client kept it open, and a
SIGTERM's drain waited for it until its whole grace had passed. Two cases:

- **A response the app left unfinished with bytes unsent**: a stream the router cut because its
  client stopped reading (its writes blocked past the deadline: `sse.py`,
  `WatchedStreamingResponse`). It is reset at once: `SO_LINGER` 0 and abort, so the kernel drops
  the unsent bytes too (the client's answer was broken either way), and uvicorn logs no error
  for a stream the router cut on purpose. An unfinished response with nothing left to send is
  closed as before.
- **A complete response whose last bytes the client has not taken** when uvicorn closes the
  connection: at its keep-alive end, after a `Connection: close` response, or at shutdown. A
  stream that ended at its deadline with its error event written, or a large answer to a client
  that stopped reading, leaves its tail in the buffer. Such a close is watched, as nginx's
  `send_timeout` does: while the buffer shrinks the client is reading and the close waits; once
  it has not shrunk for `SEND_TIMEOUT_S` the connection is reset.

A request HTTP itself does not allow (a control character in a header, a malformed request
line) never reaches the app: uvicorn answered it with a plain-text 400. It is answered in
OpenAI's error shape (`invalid_http_request`), with a request id, as every other error is.

Two bounds uvicorn's httptools protocol lacks, each a way for one client without a key to hurt
every tenant:
- **A request head's size**: past `MAX_HEAD_BYTES` still without its end it is refused, 431 in
  OpenAI's shape (`request_header_too_large`), and the connection closed. There was no bound,
  and httptools builds a header value by repeated concatenation: one 78 MB header took 7.5 s of
  the event loop's CPU, every other request waiting (as nginx's 431, 32 KB by default).
- **A body the answer did not wait for** (a 401, a 404, a 413 sent before the body was read):
  uvicorn cancels its keep-alive timer on every byte received, and nothing armed it again once
  the answer was complete, so a client that sent one more byte and then nothing held its
  connection for ever (300 of them, 300 file descriptors). The rest of such a body may arrive
  for `LINGER_S`; then the connection closes (nginx's lingering close). A body that ends in
  time leaves the connection to the keep-alive timeout, re-armed.
"""

from __future__ import annotations

import asyncio
import socket
import struct
from typing import Any

import orjson
from uvicorn.protocols.http.httptools_impl import RequestResponseCycle

from router.api.request_ids import new_request_id
from router.upgrade_ignored import UpgradeIgnoringProtocol

_NO_LINGER = struct.pack("ii", 1, 0)  # SO_LINGER on, 0 s: closing resets the connection
# How long a closing connection's unsent bytes may sit without the client taking any of them.
SEND_TIMEOUT_S = 10.0
# How long a request's head may take to arrive whole (from the connection's opening, or from the
# first byte of a later request on it).
HEAD_TIMEOUT_S = 10.0
# The most bytes a request's head may take (its line and headers).
MAX_HEAD_BYTES = 64 * 1024
# How long the rest of a request body may keep arriving after the answer that did not read it.
LINGER_S = 5.0
# The kernel's send buffer for a client connection (Linux doubles it, and keeps it fixed): a
# client that stops reading makes a stream's writes wait once this much is queued. Left to the
# kernel's autotuning it grew to about 2 MB, some 10,000 chunks a stalled client's stream was
# relayed (and, through litellm, kept) before its writes waited: ten such clients took 30 s of
# CPU and 270 MB (the slow-consumer audit of 2026-12-07). An answer's stream is far smaller a
# second than this at any client's round trip.
SEND_BUFFER_BYTES = 128 * 1024


class ServiceProtocol(UpgradeIgnoringProtocol):
    """`UpgradeIgnoringProtocol` that lets go of connections whose client stopped reading."""

    _send_watch: asyncio.TimerHandle | None = None
    _head_watch: asyncio.TimerHandle | None = None
    _linger: asyncio.TimerHandle | None = None
    _in_head = False  # a request's head has begun and is not whole yet
    _awaiting_head = True  # no request has begun since the last one was received whole
    _head_bytes = 0  # what the head in progress has taken, in the chunks it filled

    def connection_made(self, transport: asyncio.Transport) -> None:  # type: ignore[override]
        super().connection_made(transport)
        sock = transport.get_extra_info("socket")
        if sock is not None:
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF, SEND_BUFFER_BYTES)
        self._head_watch = self.loop.call_later(HEAD_TIMEOUT_S, self._head_timed_out)

    def data_received(self, data: bytes) -> None:
        head_open = self._in_head or self._awaiting_head
        super().data_received(data)
        if self._in_head:
            if self._head_watch is None:
                self._head_watch = self.loop.call_later(HEAD_TIMEOUT_S, self._head_timed_out)
            if head_open:  # the whole chunk went to the head: count it
                self._head_bytes += len(data)
                if self._head_bytes > MAX_HEAD_BYTES and not self.transport.is_closing():
                    self._refuse(b"431 Request Header Fields Too Large",
                                 "request_header_too_large",
                                 f"the request's head (its line and headers) is over "
                                 f"{MAX_HEAD_BYTES} bytes")
        elif self._head_watch is not None:  # the head came whole
            self._head_watch.cancel()
            self._head_watch = None

    def on_message_begin(self) -> None:
        super().on_message_begin()
        self._in_head, self._awaiting_head, self._head_bytes = True, False, 0

    def on_message_complete(self) -> None:
        super().on_message_complete()
        self._awaiting_head = True
        cycle = self.cycle
        if cycle is not None and cycle.response_complete:  # the body ended after its answer
            if self._linger is not None:
                self._linger.cancel()
                self._linger = None
            if self.timeout_keep_alive_task is None and not self.transport.is_closing():
                self.timeout_keep_alive_task = self.loop.call_later(
                    self.timeout_keep_alive, self.timeout_keep_alive_handler)

    def send_400_response(self, msg: str) -> None:
        """What HTTP's parser refused, as a 400 in OpenAI's error shape."""
        self._refuse(b"400 Bad Request", "invalid_http_request",
                     "the request is not valid HTTP/1.1 (a header holds a character HTTP does "
                     "not allow, or the request line is malformed)")

    def _refuse(self, status: bytes, code: str, message: str) -> None:
        """An error in OpenAI's shape for what never reached the app; the connection closes
        (what follows on it cannot be read)."""
        body = orjson.dumps({"error": {"message": message, "type": "invalid_request_error",
                                       "param": None, "code": code}})
        head = [b"HTTP/1.1 " + status + b"\r\n"]
        head += [name + b": " + value + b"\r\n"
                 for name, value in self.server_state.default_headers]
        head += [b"content-type: application/json\r\n",
                 b"content-length: " + str(len(body)).encode("ascii") + b"\r\n",
                 b"x-request-id: " + new_request_id().encode("ascii") + b"\r\n",
                 b"connection: close\r\n\r\n", body]
        self.transport.write(b"".join(head))
        self.transport.close()

    def on_headers_complete(self) -> None:
        self._in_head = False
        super().on_headers_complete()

    def _head_timed_out(self) -> None:
        self._head_watch = None
        if not self.transport.is_closing():
            self.transport.close()

    def _start_asgi_task(self, cycle: RequestResponseCycle, app: Any) -> None:
        async def run(scope: Any, receive: Any, send: Any) -> None:
            try:
                await app(scope, receive, send)
            finally:
                self._reset_if_stuck(cycle)

        super()._start_asgi_task(cycle, run)

    def on_response_complete(self) -> None:
        super().on_response_complete()
        if self.transport.is_closing():  # a `Connection: close` response, just closed
            self._watch_closing()
            return
        cycle = self.cycle
        if (cycle is not None and cycle.response_complete and cycle.more_body
                and self._linger is None):  # answered before its body was read whole
            self._linger = self.loop.call_later(LINGER_S, self._linger_ended)

    def _linger_ended(self) -> None:
        self._linger = None
        if not self.transport.is_closing():
            self.transport.close()
            self._watch_closing()

    def timeout_keep_alive_handler(self) -> None:
        super().timeout_keep_alive_handler()
        self._watch_closing()

    def shutdown(self) -> None:
        super().shutdown()
        self._watch_closing()

    def connection_lost(self, exc: Exception | None) -> None:
        for watch in (self._send_watch, self._head_watch, self._linger):
            if watch is not None:
                watch.cancel()
        self._send_watch = self._head_watch = self._linger = None
        super().connection_lost(exc)

    def _reset_if_stuck(self, cycle: RequestResponseCycle) -> None:
        if (cycle.response_started and not cycle.response_complete and not cycle.disconnected
                and self.transport.get_write_buffer_size() > 0):
            self._reset()
            cycle.disconnected = True  # so uvicorn neither closes it again nor logs an error

    def _watch_closing(self) -> None:
        """Watch a connection closed with bytes unsent, once (see the module docstring)."""
        transport = self.transport
        if self._send_watch is None and transport.is_closing():
            unsent = transport.get_write_buffer_size()
            if unsent > 0:
                self._send_watch = self.loop.call_later(SEND_TIMEOUT_S, self._check_send, unsent)

    def _check_send(self, unsent_before: int) -> None:
        unsent = self.transport.get_write_buffer_size()
        if 0 < unsent < unsent_before:  # the client is reading: give it another period
            self._send_watch = self.loop.call_later(SEND_TIMEOUT_S, self._check_send, unsent)
        else:
            self._send_watch = None
            if unsent > 0:
                self._reset()

    def _reset(self) -> None:
        transport = self.transport
        sock = transport.get_extra_info("socket")
        if sock is not None:
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, _NO_LINGER)
        transport.abort()
