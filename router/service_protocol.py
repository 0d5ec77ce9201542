"""uvicorn's HTTP protocol as `slorouter serve` runs it: the head written with the first body
bytes (`HeadWithBodyProtocol`), and the connection of a response the app left unfinished with
bytes unsent reset rather than closed.

uvicorn closes the connection of a response its app left unfinished: a stream the router cut
because its client stopped reading (its writes blocked past the deadline: `sse.py`,
`WatchedStreamingResponse`). A graceful close waits until every unsent byte has been written,
which for a client that reads nothing is never: the connection, its socket and its buffers
stayed for as long as the client kept it open, a SIGTERM's drain waited out its whole grace
for it, and uvicorn logged an error for a stream the router had cut on purpose. Such a
connection is reset instead: `SO_LINGER` 0 and abort, so the kernel drops the unsent bytes
too (the client's answer was broken either way). An unfinished response with nothing left to
send is closed as before.
"""

from __future__ import annotations

import socket
import struct
from typing import Any

from uvicorn.protocols.http.httptools_impl import RequestResponseCycle

from router.head_with_body import HeadWithBodyProtocol

_NO_LINGER = struct.pack("ii", 1, 0)  # SO_LINGER on, 0 s: closing resets the connection


class ServiceProtocol(HeadWithBodyProtocol):
    """`HeadWithBodyProtocol` that resets the connection of an unfinished, stuck response."""

    def _start_asgi_task(self, cycle: RequestResponseCycle, app: Any) -> None:
        async def run(scope: Any, receive: Any, send: Any) -> None:
            try:
                await app(scope, receive, send)
            finally:
                self._reset_if_stuck(cycle)

        super()._start_asgi_task(cycle, run)

    def _reset_if_stuck(self, cycle: RequestResponseCycle) -> None:
        transport = self.transport
        if (cycle.response_started and not cycle.response_complete and not cycle.disconnected
                and transport.get_write_buffer_size() > 0):
            sock = transport.get_extra_info("socket")
            if sock is not None:
                sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, _NO_LINGER)
            transport.abort()
            cycle.disconnected = True  # so uvicorn neither closes it again nor logs an error
