"""A TCP proxy on loopback that holds every chunk for a while, each way: a Redis far away, or
a busy one, that still answers everything.

`DelayingProxy(target_port).start()` listens on a free port (`.port`) and forwards to
`target_port`, each chunk after `delay_s` (changeable while it runs, for connections already
open too); `stop()` closes it. It runs its own event loop on a thread of the test process.
"""

from __future__ import annotations

import asyncio
import contextlib
import threading

from tests.support.procs import free_port


class DelayingProxy:
    def __init__(self, target_port: int, delay_s: float = 0.0) -> None:
        self.target_port = target_port
        self.delay_s = delay_s
        self.port = free_port()
        self._loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self._loop.run_forever, daemon=True)
        self._server: asyncio.Server | None = None

    def start(self) -> DelayingProxy:
        self._thread.start()
        self._server = asyncio.run_coroutine_threadsafe(asyncio.start_server(
            self._relay, "127.0.0.1", self.port), self._loop).result(timeout=10)
        return self

    def stop(self) -> None:
        async def close() -> None:
            if self._server is not None:
                self._server.close()
            relays = asyncio.all_tasks() - {asyncio.current_task()}
            for task in relays:
                task.cancel()
            await asyncio.gather(*relays, return_exceptions=True)

        asyncio.run_coroutine_threadsafe(close(), self._loop).result(timeout=10)
        self._loop.call_soon_threadsafe(self._loop.stop)
        self._thread.join(timeout=10)

    async def _relay(self, client_in: asyncio.StreamReader,
                     client_out: asyncio.StreamWriter) -> None:
        try:
            server_in, server_out = await asyncio.open_connection("127.0.0.1", self.target_port)
        except OSError:
            client_out.close()
            return
        # Stopped, it ends quietly: asyncio's server logs a connection's task that ends
        # cancelled as an error.
        with contextlib.suppress(asyncio.CancelledError):
            await asyncio.gather(self._pipe(client_in, server_out),
                                 self._pipe(server_in, client_out))

    async def _pipe(self, source: asyncio.StreamReader, sink: asyncio.StreamWriter) -> None:
        try:
            while data := await source.read(65536):
                await asyncio.sleep(self.delay_s)
                sink.write(data)
                await sink.drain()
        except OSError:
            pass
        finally:
            with contextlib.suppress(OSError, RuntimeError):
                sink.close()
