"""uvicorn's HTTP protocol, writing each response's head together with its first body bytes.

uvicorn writes a response's status line and headers as soon as the app sends
`http.response.start`, and its body with each `http.response.body`: two writes, so two TCP
segments, and a client that wakes on the first one to parse the head and again for the body.
The router starts a streamed answer only once its first chunk is there (and a whole answer
once it is complete), so the two writes come microseconds apart and the client's first wake-up
is all loss: on the client's critical path (time to first token), one wake-up of a core and
one pass of its event loop, and on the router's one system call.

`HeadWithBodyProtocol` holds the head back and writes it in one `write` with the first body
bytes; later writes go straight to the connection. A response whose app fails before any body
has its head written when uvicorn closes the connection, as it would have been. Nothing else
changes: `100 Continue` (written before the response starts) passes at once, and so does the
head of a response to `HEAD`, which has no body bytes to wait for (held back, it was never
written while the connection stayed open: the client hung, and a request pipelined after it
got the answer after its own).
"""

from __future__ import annotations

import asyncio
from typing import Any

from uvicorn.protocols.http.httptools_impl import HttpToolsProtocol, RequestResponseCycle


class HeadWithBodyProtocol(HttpToolsProtocol):
    """`HttpToolsProtocol` whose responses write their head with their first body bytes."""

    def _start_asgi_task(self, cycle: RequestResponseCycle, app: Any) -> None:
        # Every cycle starts here (a pipelined one later), before its app can write.
        cycle.transport = _HeldHead(cycle)  # type: ignore[assignment]
        super()._start_asgi_task(cycle, app)


class _HeldHead:
    """One response's view of its connection until the head and first body bytes are out:
    then the cycle gets the connection's own transport back (no wrapper on later writes)."""

    __slots__ = ("_cycle", "_head", "_transport")

    def __init__(self, cycle: RequestResponseCycle) -> None:
        self._cycle = cycle
        self._transport: asyncio.Transport = cycle.transport
        self._head: bytes | None = None

    def write(self, data: bytes) -> None:
        if self._head is not None:  # the first body bytes: out with the head, in one write
            self._release(self._head + data)
        elif self._cycle.response_started:  # uvicorn writes the head right after starting
            if self._cycle.scope["method"] == "HEAD":  # uvicorn writes no body for it
                self._release(data)
            else:
                self._head = data
        else:  # `100 Continue`, before the response starts
            self._transport.write(data)

    def close(self) -> None:
        if self._head is not None:  # the app sent no body (it failed): the head as before
            self._release(self._head)
        self._transport.close()

    def _release(self, data: bytes) -> None:
        self._head = None
        self._cycle.transport = self._transport
        self._transport.write(data)

    def __getattr__(self, name: str) -> Any:  # is_closing() and anything else uvicorn asks
        return getattr(self._transport, name)
