"""uvicorn's server without a housekeeping tick: an idle router is not woken at all.

uvicorn's `Server.main_loop` wakes every 100 ms to refresh the `date` header (once a second) and
to notice `should_exit`. On a virtual machine each wake-up of an idle core costs about 0.2-1 ms
of CPU (measured: ten a second cost an idle router 2.1-2.5 ms of CPU per second, and one a second
still 1.0 ms per second, a fifth of a millisecond per request at 5 req/s). So here:

- the `date` header is the server's own (`DatedApp`): formatted when a response starts, at most
  once a second, instead of on a timer (uvicorn's is switched off, so there is one `date`);
- the main loop sleeps until told to stop: a termination signal, or code setting `should_exit`
  (a property here that wakes the loop), ends it at once.

uvicorn's own answers to requests that never reach the app (a malformed request's 400) carry no
`date` header. `limit_max_requests` is not supported (uvicorn checked it on its tick).

SIGHUP drains too (uvicorn handles SIGINT and SIGTERM only, and a hangup's default ends the
process at once), then ends the process as a hangup would; unless it was ignored (`nohup`).

`on_stopped` runs once the server has stopped, before uvicorn re-raises a captured termination
signal with its default handler (which ends the process at once, so code after `run()` would
never run): `slorouter serve` stops its provider simulator there.

As PID 1 of its PID namespace (a container without an init, `docker run` with no `--init`) the
process does not end there: the kernel drops a signal whose action is the default for a
namespace's init, so `run()` returned and `slorouter serve` exited 0 after a SIGTERM or SIGHUP
(the ops audit of 2026-12-07). `ended_by` is then the signal that ended the drain, for `serve` to
exit with the status a shell gives a process that signal ended (128 + its number: 143, 129).

`on_grace_over` runs `grace_s` after shutdown began, while uvicorn still waits for requests in
flight (its `timeout_graceful_shutdown` should be a little longer): `slorouter serve` ends the
streams still running there, each with an error event, before uvicorn would cancel them and cut
them off with no reason. A second Ctrl+C during the drain (uvicorn's force exit) runs it at
once, and the shutdown then waits at most `FORCE_EXIT_FAREWELL_S` for those requests to be
answered: uvicorn stopped waiting for them at once, and the event loop's close cancelled them,
so a request awaiting its answer got uvicorn's plain-text 500 and a stream was cut with no
reason.
"""

from __future__ import annotations

import asyncio
import contextlib
import signal
import socket
import threading
import time
from collections.abc import Callable, Generator
from email.utils import formatdate
from types import FrameType
from typing import Any

import uvicorn

ASGIApp = Callable[[Any, Any, Any], Any]
# At a force exit, the most the requests ended then may take to send their answers.
FORCE_EXIT_FAREWELL_S = 1.0


class HttpDate:
    """The `date` header's value now (RFC 9110's IMF-fixdate), formatted once per second."""

    def __init__(self, clock: Callable[[], float] = time.time) -> None:
        self._clock = clock
        self._second = -1
        self._value = b""

    def __call__(self) -> bytes:
        second = int(self._clock())
        if second != self._second:
            self._second, self._value = second, formatdate(second, usegmt=True).encode()
        return self._value


class DatedApp:
    """An ASGI app that adds a `date` header to each HTTP response of the app it wraps."""

    def __init__(self, app: ASGIApp, date: Callable[[], bytes] | None = None) -> None:
        self.app = app
        self._date = date if date is not None else HttpDate()

    async def __call__(self, scope: Any, receive: Any, send: Any) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return

        async def send_dated(message: Any) -> None:
            if message["type"] == "http.response.start":
                headers = [*message.get("headers", ()), (b"date", self._date())]
                message = {**message, "headers": headers}
            await send(message)

        await self.app(scope, receive, send_dated)


class QuietServer(uvicorn.Server):
    """`uvicorn.Server` that is never woken while idle (see the module docstring)."""

    def __init__(self, config: uvicorn.Config,
                 on_stopped: Callable[[], None] = lambda: None, *, grace_s: float | None = None,
                 on_grace_over: Callable[[], None] = lambda: None) -> None:
        self._loop: asyncio.AbstractEventLoop | None = None
        self._exit_requested: asyncio.Event | None = None
        self._dated = config.date_header  # ours replaces uvicorn's, which needs its timer
        config.date_header = False
        super().__init__(config)
        self._on_stopped = on_stopped
        self._grace_s = grace_s
        self._on_grace_over = on_grace_over
        # the termination signal re-raised without ending the process (PID 1), else None
        self.ended_by: int | None = None

    @property
    def should_exit(self) -> bool:
        return self._should_exit

    @should_exit.setter
    def should_exit(self, value: bool) -> None:
        self._should_exit = value
        if value and self._loop is not None and self._exit_requested is not None:
            self._loop.call_soon_threadsafe(self._exit_requested.set)  # from a signal handler too

    @contextlib.contextmanager
    def capture_signals(self) -> Generator[None, None, None]:
        hangup = _drain_on_hangup(self.handle_exit)
        try:
            with super().capture_signals():
                try:
                    yield
                finally:
                    self._on_stopped()
        finally:
            if hangup is not None:
                signal.signal(signal.SIGHUP, hangup)
        if hangup is not None and signal.SIGHUP in self._captured_signals:
            signal.raise_signal(signal.SIGHUP)  # drained: now end as a hangup ends a process
        # Still running: the signal was dropped (PID 1, see the module), or its disposition
        # was one that returns. (SIGINT's re-raise is a KeyboardInterrupt, never here.)
        self.ended_by = ending_signal(self._captured_signals)

    async def startup(self, sockets: list[socket.socket] | None = None) -> None:
        if self._dated and not isinstance(self.config.loaded_app, DatedApp):
            self.config.loaded_app = DatedApp(self.config.loaded_app)
        await super().startup(sockets)
        if sockets is not None and self.started:
            # uvicorn leaves the "running on" line to its multi-worker path, which logged it
            # while binding: with sockets bound by the caller there was no line naming the
            # address at all, and with `--port 0` no way to learn the port.
            self._log_started_message(sockets)

    async def main_loop(self) -> None:
        self._loop = asyncio.get_running_loop()
        self._exit_requested = exit_requested = asyncio.Event()
        await self.on_tick(0)  # uvicorn's default headers (no date: see __init__)
        while not self.should_exit:
            await exit_requested.wait()
            exit_requested.clear()

    def handle_exit(self, sig: int, frame: FrameType | None) -> None:
        forced = self.force_exit
        super().handle_exit(sig, frame)
        if self.force_exit and not forced and self._loop is not None:
            # A second Ctrl+C: the requests in flight are ended now, as at the grace's end.
            self._loop.call_soon_threadsafe(self._on_grace_over)

    async def shutdown(self, sockets: list[socket.socket] | None = None) -> None:
        loop = asyncio.get_running_loop()
        grace_over = (loop.call_later(self._grace_s, self._on_grace_over)
                      if self._grace_s is not None else None)
        try:
            await super().shutdown(sockets)
        finally:
            if grace_over is not None:
                grace_over.cancel()
        if self.force_exit:
            await self._farewell()

    async def _farewell(self) -> None:
        """At a force exit: the requests ended by `on_grace_over` send their answers, and the
        app's shutdown runs (uvicorn skips it, and the loop's close then cancelled it with a
        traceback in the log), each for at most `FORCE_EXIT_FAREWELL_S`."""
        if self.server_state.tasks:
            await asyncio.wait(set(self.server_state.tasks), timeout=FORCE_EXIT_FAREWELL_S)
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(self.lifespan.shutdown(), FORCE_EXIT_FAREWELL_S)


def ending_signal(captured: list[int]) -> int | None:
    """The signal a drain that ends with `captured` re-raised (uvicorn's SIGTERM before the
    hangup `QuietServer` raises after it) would have ended the process by, if any."""
    for sig in (signal.SIGTERM, signal.SIGHUP):
        if sig in captured:
            return sig
    return None


def _drain_on_hangup(handler: Callable[[int, FrameType | None], None]
                     ) -> signal.Handlers | Callable[..., Any] | int | None:
    """Handle SIGHUP with `handler` (a drain, as SIGTERM), returning the handler it replaces;
    None, changing nothing, off the main thread or when SIGHUP is ignored (`nohup`). There is
    no reload: a hangup used to end the process at once and cut every request in flight."""
    if threading.current_thread() is not threading.main_thread():
        return None
    previous = signal.getsignal(signal.SIGHUP)
    if previous is signal.SIG_IGN or previous is None:
        return None
    signal.signal(signal.SIGHUP, handler)
    return previous
