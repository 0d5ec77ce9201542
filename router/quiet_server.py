"""uvicorn's server with a once-a-second housekeeping tick instead of ten a second.

uvicorn's `Server.main_loop` wakes every 100 ms to refresh the `date` header (once a second) and
to notice `should_exit`. On a virtual machine an idle core pays about 0.2 ms of CPU for each
wake-up (measured: 12 wake-ups/s cost an idle router 2.1-2.5 ms of CPU per second), so the ten
ticks were most of what an idle slorouter spent. Here the loop ticks once a second, which still
refreshes the `date` header every second, and a termination signal wakes it at once, so shutdown
starts as promptly as before. Code that sets `should_exit` directly (tests) is noticed within a
second.

`on_stopped` runs once the server has stopped, before uvicorn re-raises a captured termination
signal with its default handler (which ends the process at once, so code after `run()` would
never run): `slorouter serve` stops its provider simulator there.

`on_grace_over` runs `grace_s` after shutdown began, while uvicorn still waits for requests in
flight (its `timeout_graceful_shutdown` should be a little longer): `slorouter serve` ends the
streams still running there, each with an error event, before uvicorn would cancel them and cut
them off with no reason.
"""

from __future__ import annotations

import asyncio
import contextlib
import socket
from collections.abc import Callable, Generator
from types import FrameType

import uvicorn

TICK_S = 1.0
_DATE_EVERY = 10  # uvicorn refreshes the date header on ticks where counter % 10 == 0


class QuietServer(uvicorn.Server):
    """`uvicorn.Server` whose idle housekeeping wakes once a second (see the module docstring)."""

    def __init__(self, config: uvicorn.Config,
                 on_stopped: Callable[[], None] = lambda: None, *, grace_s: float | None = None,
                 on_grace_over: Callable[[], None] = lambda: None) -> None:
        super().__init__(config)
        self._on_stopped = on_stopped
        self._grace_s = grace_s
        self._on_grace_over = on_grace_over
        self._loop: asyncio.AbstractEventLoop | None = None
        self._exit_requested: asyncio.Event | None = None

    @contextlib.contextmanager
    def capture_signals(self) -> Generator[None, None, None]:
        with super().capture_signals():
            try:
                yield
            finally:
                self._on_stopped()

    async def main_loop(self) -> None:
        self._loop = asyncio.get_running_loop()
        self._exit_requested = exit_requested = asyncio.Event()
        counter = 0
        should_exit = await self.on_tick(counter)
        while not should_exit:
            counter = (counter + _DATE_EVERY) % 864_000
            with contextlib.suppress(TimeoutError):
                async with asyncio.timeout(TICK_S):
                    await exit_requested.wait()
            should_exit = await self.on_tick(counter)

    async def shutdown(self, sockets: list[socket.socket] | None = None) -> None:
        if self._grace_s is None:
            await super().shutdown(sockets)
            return
        grace_over = asyncio.get_running_loop().call_later(self._grace_s, self._on_grace_over)
        try:
            await super().shutdown(sockets)
        finally:
            grace_over.cancel()

    def handle_exit(self, sig: int, frame: FrameType | None) -> None:
        super().handle_exit(sig, frame)
        if self._loop is not None and self._exit_requested is not None:
            self._loop.call_soon_threadsafe(self._exit_requested.set)
