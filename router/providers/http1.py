"""A lean HTTP/1.1 client for the pass-through adapter: keep-alive pools, httptools parsing.

The pass-through adapter sends one POST per attempt and reads the answer whole or as a stream of
body chunks. That is all this client does: pooled keep-alive connections per origin (with a
limit), TLS for `https`, chunked, length- and close-delimited bodies (decoded by httptools, the
parser uvicorn uses), flow control on streams, and a connection that is closed rather than reused
whenever an exchange did not finish cleanly (cancelled, timed out, malformed), so that the
upstream sees a client that went away.

Why not aiohttp: on the router's hot path aiohttp's client cost 0.5-0.7 ms of CPU per request
on the 2-core benchmark machine (request and response objects, multidicts, URL parsing, timer
and payload machinery); this client costs about a third of that for the same exchange
(`docs/measurements.md`). Timeouts are the caller's (`asyncio.timeout` around the exchange);
the connect timeout is this client's.

A request on a reused connection that had sat idle and fails at once, before a single byte of
answer arrived, is sent once more on a new connection: that is a keep-alive connection the
server closed while idle, which never saw the request (`Http1Client.post` says when exactly).

A reader that has all it needs before the body's end (an SSE stream at its `[DONE]`, whose
chunked terminator often comes in a later read) calls `Response.finish()`: the connection waits
for the end on its own, goes back to the pool when it comes, and is closed if it does not come
within `DRAIN_TIMEOUT_S`. Closing instead cost streams at low rates a new connection (and its
handshake, before the next first token) for every other request.
"""

from __future__ import annotations

import asyncio
import ssl
import time
from collections import deque
from collections.abc import AsyncGenerator, AsyncIterator, Callable, Mapping
from dataclasses import dataclass
from urllib.parse import urlsplit

import httptools

from router.execution import late_timers

HIGH_WATER_BYTES = 1 << 20  # a stream's unread bytes above which reading from the socket pauses
LOW_WATER_BYTES = 1 << 18
# A reused connection closed within this long of the request's sending, before any answer, was
# closed by the server while idle and is re-sent (`Http1Client.post`): a close already on its way
# arrives at once, while a server that read the request and dropped it took longer...
RESEND_WITHIN_S = 0.05
# ...provided the connection had been idle this long: a server closes an idle connection at its
# keep-alive timeout (seconds: gunicorn 2, uvicorn and Node 5, nginx 75), not one it answered
# on a moment ago; one that drops requests as it reads them (a provider shedding load) did so
# on busy connections too, and each drop was re-sent unseen, outside the retry budget.
RESEND_AFTER_IDLE_S = 1.0
# ...and at most once per origin in this long: a real idle close in flight is rare, so a run of
# them is a server dropping requests, whose every further drop fails in the open for the
# runner to retry (counted, budgeted) rather than costing an upstream call no one sees.
RESEND_SPACING_S = 10.0
DRAIN_TIMEOUT_S = 1.0  # how long a finished reader's connection waits for the body's end
# The most of a whole (non-streamed) answer read: far past any completion's JSON (128k tokens
# of output are under 1 MB), short of letting a broken upstream fill the router's memory.
MAX_WHOLE_BYTES = 32 << 20


class HttpClientError(Exception):
    """The upstream could not be reached, or broke the HTTP exchange."""


class UpstreamUnreachable(HttpClientError):
    """No connection, or the connection closed before the answer's status line."""


class UpstreamDropped(UpstreamUnreachable):
    """The connection closed after the request was sent, before any of the answer: the upstream
    may have received (and acted on) the request."""


class ResponseBroken(HttpClientError):
    """The answer stopped or went malformed after it had started."""


@dataclass(frozen=True, slots=True)
class Target:
    """Where a URL sends a request: origin, request path and `Host` header, parsed once."""

    scheme: str
    host: str
    port: int
    path: bytes
    host_header: bytes

    @classmethod
    def of(cls, url: str) -> Target:
        parts = urlsplit(url)
        if parts.scheme not in ("http", "https") or not parts.hostname:
            raise ValueError(f"not an http(s) URL: {url!r}")
        default = 443 if parts.scheme == "https" else 80
        port = parts.port or default
        path = (parts.path or "/") + (f"?{parts.query}" if parts.query else "")
        host = parts.hostname if port == default else f"{parts.hostname}:{port}"
        return cls(parts.scheme, parts.hostname, port, path.encode("ascii"),
                   host.encode("idna"))

    @property
    def origin(self) -> tuple[str, str, int]:
        return self.scheme, self.host, self.port


def request_head(target: Target, headers: Mapping[str, str], body_size: int) -> bytes:
    """The bytes of a POST's request line and headers; a CR or LF in a header is refused."""
    lines = [b"POST ", target.path, b" HTTP/1.1\r\nhost: ", target.host_header,
             b"\r\naccept-encoding: identity\r\ncontent-length: ", str(body_size).encode(),
             b"\r\n"]
    for name, value in headers.items():
        if "\r" in name or "\n" in name or "\r" in value or "\n" in value:
            raise ValueError(f"header {name!r} holds a line break")
        lines += (name.encode("latin-1"), b": ", value.encode("latin-1"), b"\r\n")
    lines.append(b"\r\n")
    return b"".join(lines)


class _Exchange:
    """One request's answer as the connection receives it: head, body chunks, end or error."""

    __slots__ = ("_waiter", "buffered", "chunks", "complete", "error", "headers", "received_any",
                 "status")

    def __init__(self) -> None:
        self.status = 0
        self.headers: dict[str, str] = {}
        self.chunks: deque[bytes] = deque()
        self.buffered = 0
        self.complete = False
        self.error: HttpClientError | None = None
        self.received_any = False
        self._waiter: asyncio.Future[None] | None = None

    def wake(self) -> None:
        waiter, self._waiter = self._waiter, None
        if waiter is not None and not waiter.done():
            waiter.set_result(None)

    async def wait(self, deadline: float | None = None) -> None:
        """Until the next change (head, chunk, end, error); `TimeoutError` at `deadline` (event
        loop time) first. The timer fails the waiter itself: a stream waits once per chunk, and
        `asyncio.timeout` (a task cancellation turned into the error) costs several times more."""
        loop = asyncio.get_running_loop()
        waiter = self._waiter = loop.create_future()
        if deadline is None:
            await waiter
            return
        timer = late_timers.expire_future_at(loop, deadline, _expire, waiter)
        try:
            await waiter
        finally:
            timer.cancel()

    async def until(self, ready: Callable[[_Exchange], bool]) -> None:
        """Until `ready(self)`; an error that comes first is raised."""
        while not ready(self):
            if self.error is not None:
                raise self.error
            await self.wait()


def _expire(waiter: asyncio.Future[None]) -> None:
    if not waiter.done():
        waiter.set_exception(TimeoutError())


def _has_head(exchange: _Exchange) -> bool:
    return exchange.status != 0


def _ends_at_close(exchange: _Exchange) -> bool:
    """Whether the answer's body is delimited by the connection's close (RFC 9112 §6.3: neither
    a length nor a transfer coding, as an HTTP/1.0 server, or an HTTP/1.1 one closing, may
    send it): its clean close ends it (httptools is never told of the end of input, so the
    message never completes on its own). The reader still judges what came: a cut JSON body
    does not parse, a cut stream has no `[DONE]`."""
    headers = exchange.headers
    return (exchange.status >= 200 and exchange.status not in (204, 304)
            and "content-length" not in headers and "transfer-encoding" not in headers)


class _Connection(asyncio.Protocol):
    """One keep-alive connection; at most one exchange at a time."""

    def __init__(self, pool: _OriginPool) -> None:
        self._pool = pool
        self._parser = httptools.HttpResponseParser(self)
        self.transport: asyncio.Transport | None = None
        self.exchange: _Exchange | None = None
        self.closed = False
        self.idle_since = 0.0
        self._paused = False
        self._drain_timer: asyncio.TimerHandle | None = None

    # --- asyncio.Protocol ---------------------------------------------------------------------

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = transport  # type: ignore[assignment]  # uvloop's is not a subclass

    def data_received(self, data: bytes) -> None:
        exchange = self.exchange
        if exchange is None:  # bytes nobody asked for: the connection cannot be trusted
            self.abort()
            return
        exchange.received_any = True
        try:
            self._parser.feed_data(data)
        except httptools.HttpParserError as exc:
            self._fail(ResponseBroken(f"malformed answer from upstream: {exc}"))
            self.abort()

    def connection_lost(self, exc: Exception | None) -> None:
        self.closed = True
        exchange = self.exchange
        if exchange is not None and not exchange.complete:
            if exc is None and _ends_at_close(exchange):
                exchange.complete = True  # the close is the body's end
                self.exchange = None
                exchange.wake()
            else:
                self._fail(ResponseBroken("upstream closed the connection mid-answer")
                           if exchange.status else
                           UpstreamDropped("upstream closed the connection before answering"))
        self._pool.forget(self)

    # --- httptools callbacks ------------------------------------------------------------------

    def on_header(self, name: bytes, value: bytes) -> None:
        assert self.exchange is not None
        self.exchange.headers[name.decode("latin-1").lower()] = value.decode("latin-1")

    def on_headers_complete(self) -> None:
        assert self.exchange is not None
        self.exchange.status = self._parser.get_status_code()
        self.exchange.wake()

    def on_body(self, body: bytes) -> None:
        exchange = self.exchange
        assert exchange is not None
        exchange.chunks.append(body)
        exchange.buffered += len(body)
        if exchange.buffered > HIGH_WATER_BYTES and not self._paused and self.transport:
            self._paused = True
            self.transport.pause_reading()
        exchange.wake()

    def on_message_complete(self) -> None:
        exchange = self.exchange
        assert exchange is not None
        exchange.complete = True
        self.exchange = None
        if self._drain_timer is not None:
            self._drain_timer.cancel()
            self._drain_timer = None
        exchange.wake()
        if self._paused and self.transport is not None:
            self._paused = False
            self.transport.resume_reading()
        if self._parser.should_keep_alive():
            self._pool.release(self)
        else:
            self.abort()

    # --- used by the client -------------------------------------------------------------------

    def send(self, head: bytes, body: bytes) -> _Exchange:
        assert self.transport is not None and self.exchange is None
        self.exchange = _Exchange()
        self.transport.write(head + body)
        return self.exchange

    def consumed(self, exchange: _Exchange) -> None:
        """The reader took chunks out: resume reading once the backlog is small again."""
        if (self._paused and self.exchange is exchange and exchange.buffered < LOW_WATER_BYTES
                and self.transport is not None):
            self._paused = False
            self.transport.resume_reading()

    def drain(self, exchange: _Exchange) -> None:
        """The reader is done before the body's end: back to the pool once the end arrives
        (`on_message_complete`), closed if it has not arrived within `DRAIN_TIMEOUT_S`."""
        if self.exchange is exchange and self._drain_timer is None and not self.closed:
            self._drain_timer = asyncio.get_running_loop().call_later(
                DRAIN_TIMEOUT_S, self._drain_expired, exchange)

    def _drain_expired(self, exchange: _Exchange) -> None:
        self._drain_timer = None
        if self.exchange is exchange:
            self.abort()

    def abort(self) -> None:
        """Close at once (an unfinished exchange is never reused)."""
        if self.transport is not None and not self.closed:
            self.transport.abort()
        self.closed = True

    def _fail(self, error: HttpClientError) -> None:
        exchange = self.exchange
        if exchange is not None and exchange.error is None and not exchange.complete:
            exchange.error = error
            exchange.wake()


class _OriginPool:
    """Keep-alive connections to one origin: idle ones reused newest first, at most `limit`."""

    def __init__(self, origin: tuple[str, str, int], limit: int, idle_timeout_s: float,
                 ssl_context: ssl.SSLContext | None,
                 resend_after_idle_s: float = RESEND_AFTER_IDLE_S) -> None:
        self._scheme, self._host, self._port = origin
        self._limit = limit
        self._idle_timeout_s = idle_timeout_s
        self._resend_after_idle_s = resend_after_idle_s
        self._ssl = ssl_context
        self._idle: list[_Connection] = []
        self._open: set[_Connection] = set()
        self._waiters: deque[asyncio.Future[None]] = deque()
        self._last_resend = -RESEND_SPACING_S  # time.monotonic() of this origin's last re-send

    def may_resend(self, idle_s: float) -> bool:
        """Whether a request dropped at once on a connection idle `idle_s` before its sending
        may be sent again unseen (`Http1Client.post`); if so, the re-send is counted."""
        now = time.monotonic()
        if idle_s < self._resend_after_idle_s or now - self._last_resend < RESEND_SPACING_S:
            return False
        self._last_resend = now
        return True

    async def acquire(self, connect_timeout_s: float) -> tuple[_Connection, bool]:
        """A connection to send on, and whether it was reused."""
        while True:
            now = time.monotonic()
            while self._idle:
                connection = self._idle.pop()
                if not connection.closed and now - connection.idle_since < self._idle_timeout_s:
                    return connection, True
                connection.abort()
            if len(self._open) < self._limit:
                return await self._connect(connect_timeout_s), False
            waiter = asyncio.get_running_loop().create_future()
            self._waiters.append(waiter)
            try:
                await waiter
            except BaseException:
                # Cancelled after `_wake_one` had picked this waiter (its future resolved, the
                # task not yet run): the connection it was woken for would sit idle while the
                # next waiter waits on, so the wake-up is passed on (as asyncio.Semaphore does).
                if waiter.done() and not waiter.cancelled():
                    self._wake_one()
                raise
            finally:
                if waiter in self._waiters:
                    self._waiters.remove(waiter)

    async def _connect(self, timeout_s: float) -> _Connection:
        loop = asyncio.get_running_loop()
        connection = _Connection(self)
        self._open.add(connection)
        try:
            async with late_timers.timeout(timeout_s):
                await loop.create_connection(
                    lambda: connection, self._host, self._port, ssl=self._ssl,
                    server_hostname=self._host if self._ssl else None)
        except TimeoutError:
            # Our own connect timeout (the request's deadline firing is a cancellation, not
            # this): no connection, so the request never left, as when one is refused.
            connection.abort()
            self.forget(connection)
            raise UpstreamUnreachable(
                f"cannot connect to upstream within {timeout_s:g} s") from None
        except OSError as exc:
            self.forget(connection)
            raise UpstreamUnreachable(f"cannot connect to upstream: {type(exc).__name__}") from exc
        except BaseException:
            connection.abort()
            self.forget(connection)
            raise
        return connection

    def release(self, connection: _Connection) -> None:
        now = connection.idle_since = time.monotonic()
        idle = self._idle
        # The oldest first: reuse takes the newest, so under steady traffic the connections
        # below it were never looked at, and a burst's extra ones stayed open for as long as
        # traffic went on (an audit: 48 idle sockets 10 minutes after a burst of 50).
        while idle and (idle[0].closed or now - idle[0].idle_since >= self._idle_timeout_s):
            idle.pop(0).abort()
        idle.append(connection)
        self._wake_one()

    def forget(self, connection: _Connection) -> None:
        if connection in self._open:
            self._open.discard(connection)
            self._wake_one()

    def _wake_one(self) -> None:
        while self._waiters:
            waiter = self._waiters.popleft()
            if not waiter.done():
                waiter.set_result(None)
                return

    def close(self) -> None:
        for connection in list(self._open):
            connection.abort()
        self._idle.clear()


class Response:
    """An answer's status and headers; its body read whole (`read`) or in chunks (`chunks`).

    Leaving before the end (an exception, a cancellation, `close`) closes the connection, unless
    the reader said it has all it needs (`finish`).
    """

    def __init__(self, connection: _Connection, exchange: _Exchange) -> None:
        self._connection = connection
        self._exchange = exchange
        self._finished = False
        self.status = exchange.status
        self.headers: Mapping[str, str] = exchange.headers

    async def read(self, limit: int = MAX_WHOLE_BYTES) -> bytes:
        """The whole body, taken as it arrives (left buffered until its end, it paused the
        socket at `HIGH_WATER_BYTES` and the end never came: an answer past 1 MB hung until its
        timeout, the re-audit of 2026-12-07); `ResponseBroken` past `limit` bytes, the
        connection closed (an upstream's answer must not take the router's memory)."""
        parts: list[bytes] = []
        size = 0
        async for chunk in self.chunks():
            size += len(chunk)
            if size > limit:  # closed now, not when the abandoned generator is collected
                self.close()
                raise ResponseBroken(f"upstream answer larger than {limit} bytes")
            parts.append(chunk)
        return b"".join(parts)

    async def chunks(self, deadline: float | None = None) -> AsyncGenerator[bytes, None]:
        """The body as it arrives; `deadline` (event-loop time) bounds every wait for more."""
        exchange = self._exchange
        try:
            while True:
                if exchange.chunks:
                    chunk = exchange.chunks.popleft()
                    exchange.buffered -= len(chunk)
                    self._connection.consumed(exchange)
                    yield chunk
                elif exchange.complete:
                    return
                elif exchange.error is not None:
                    raise exchange.error
                else:
                    await exchange.wait(deadline)
        finally:
            self.close()

    def finish(self) -> None:
        """The reader has all it needs: the rest is only the body's end, which the connection
        awaits on its own before it is reused (`_Connection.drain`)."""
        self._finished = True
        if not self._exchange.complete:
            self._connection.drain(self._exchange)

    def close(self) -> None:
        """Give up on the rest of the answer (a complete or finished one needs nothing)."""
        if not self._exchange.complete and not self._finished:
            self._connection.abort()


class LineSplitter:
    """Body chunks → the lines they finish (without their end): SSE framing, whose lines end with
    LF, CRLF or a lone CR. (A CRLF split between two chunks leaves an empty line, which carries
    nothing; a CR can only be a line's end, as JSON escapes it inside a string.)

    A line that spans many chunks is kept in pieces and joined once, when it ends: joined at each
    chunk, one long line cost time quadratic in its length (0.19 s of event loop at 8 MB)."""

    __slots__ = ("_pieces",)

    def __init__(self) -> None:
        self._pieces: list[bytes] = []  # the unfinished line so far

    def feed(self, chunk: bytes) -> list[bytes]:
        """The lines finished by `chunk`."""
        pieces = self._pieces
        if pieces:
            pieces.append(chunk)
            if b"\n" not in chunk and b"\r" not in chunk:
                return []
            text = b"".join(pieces)
            pieces.clear()
        else:
            text = chunk
        if b"\r" in text:
            text = text.replace(b"\r\n", b"\n").replace(b"\r", b"\n")
        done = text.split(b"\n")
        rest = done.pop()
        if rest:
            pieces.append(rest)
        return done

    def rest(self) -> bytes:
        """The line left unfinished (at the body's end: a last line without its end)."""
        return b"".join(self._pieces)


async def lines(chunks: AsyncIterator[bytes]) -> AsyncIterator[bytes]:
    """Body chunks → lines without their line feed (and a last unterminated one)."""
    splitter = LineSplitter()
    async for chunk in chunks:
        for line in splitter.feed(chunk):
            yield line
    if last := splitter.rest():
        yield last


class Http1Client:
    """POST over pooled keep-alive HTTP/1.1 connections, one pool per origin."""

    def __init__(self, max_connections_per_origin: int = 1000,
                 idle_timeout_s: float = 30.0,
                 resend_after_idle_s: float = RESEND_AFTER_IDLE_S) -> None:
        self._limit = max_connections_per_origin
        self._idle_timeout_s = idle_timeout_s
        self._resend_after_idle_s = resend_after_idle_s
        self._pools: dict[tuple[str, str, int], _OriginPool] = {}
        self._ssl: ssl.SSLContext | None = None

    def _pool(self, target: Target) -> _OriginPool:
        pool = self._pools.get(target.origin)
        if pool is None:
            context = None
            if target.scheme == "https":
                context = self._ssl = self._ssl or ssl.create_default_context()
            pool = self._pools[target.origin] = _OriginPool(
                target.origin, self._limit, self._idle_timeout_s, context,
                self._resend_after_idle_s)
        return pool

    async def post(self, target: Target, head: bytes, body: bytes,
                   connect_timeout_s: float, resendable: bool = True) -> Response:
        """Send `head` + `body` and wait for the answer's status line and headers.

        A reused keep-alive connection that had been idle a while (`RESEND_AFTER_IDLE_S`) and
        closes at once (within `RESEND_WITHIN_S`) before any of the answer is most likely one
        the server had closed while idle (its close was already on the way), so the request is
        sent again on a new connection, at most once per origin in `RESEND_SPACING_S`. Any
        other drop was most likely received and dropped: it is not re-sent here, where no one
        would see the second call (its prompt billed twice, one attempt in the telemetry, no
        retry budget spent), but fails as `UpstreamUnreachable` for the runner to retry as an
        attempt of its own. Any drop may also have been received: a request that must not run
        twice (`resendable=False`, a side effect) is never re-sent, and the drop raises
        `UpstreamDropped` (the outcome is unknown), as HTTP clients do for requests that are not
        idempotent. It still takes a pooled connection: a fresh one per side effect would let
        them fill the pool with idle connections they never reuse."""
        pool = self._pool(target)
        for attempt in (0, 1):
            connection, reused = await pool.acquire(connect_timeout_s)
            sent_at = time.monotonic()  # the clock of `idle_since`
            exchange = connection.send(head, body)
            try:
                await exchange.until(_has_head)
            except UpstreamUnreachable:
                if (resendable and reused and attempt == 0 and not exchange.received_any
                        and time.monotonic() - sent_at <= RESEND_WITHIN_S
                        and pool.may_resend(sent_at - connection.idle_since)):
                    continue  # a keep-alive connection the server had closed: never saw this
                raise
            except BaseException:
                connection.abort()
                raise
            return Response(connection, exchange)
        raise AssertionError("unreachable")  # pragma: no cover

    async def aclose(self) -> None:
        for pool in self._pools.values():
            pool.close()
        self._pools.clear()
